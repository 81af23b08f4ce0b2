//! The cluster-migration addon agent: runs on each managed hub, renews its health lease,
//! reports to the global hub (a condition on its ManagedClusterAddOn and an
//! AddOnPlacementScore) and carries out the hub's part of migrations. `cleanup` is the
//! pre-delete hook: it removes what the agent created.

pub mod admission;
pub mod flight;
pub mod klusterlet_work;
pub mod lease;
pub mod metrics;
pub mod migration;
pub mod report;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams};
use migration_api::names::{ADDON_NAME, DEFAULT_ADDON_INSTALL_NAMESPACE};
use migration_api::ocm::cluster::AddOnPlacementScore;
use migration_api::runtime::{self, CommonArgs, Process};

/// This binary's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Command line of the addon agent.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "addon-agent",
    version,
    about = "cluster-migration addon agent: runs on a managed hub, reports its health and \
             carries out that hub's part of each migration"
)]
pub struct Args {
    /// Options for the local hub (the cluster this agent runs on).
    #[command(flatten)]
    pub common: CommonArgs,

    /// Kubeconfig of the global hub: the addon's registered hub kubeconfig
    /// (secret `<addon>-hub-kubeconfig`, mounted as a file).
    #[arg(long, env = "HUB_KUBECONFIG", value_name = "FILE")]
    pub hub_kubeconfig: PathBuf,

    /// This hub's name on the global hub (its ManagedCluster name and namespace there).
    #[arg(long, env = "CLUSTER_NAME")]
    pub cluster_name: String,

    /// Name of the addon (lease, ManagedClusterAddOn and AddOnPlacementScore name).
    #[arg(long, env = "ADDON_NAME", default_value = ADDON_NAME)]
    pub addon_name: String,

    /// Namespace the agent is installed in on this hub (where its lease lives).
    #[arg(long, env = "POD_NAMESPACE", default_value = DEFAULT_ADDON_INSTALL_NAMESPACE)]
    pub install_namespace: String,

    /// The version this agent reports: its image tag, set by the manager's templates
    /// (defaults to the binary's own version).
    #[arg(long, env = "AGENT_VERSION", default_value = VERSION)]
    pub agent_version: String,

    /// Duration of the health lease in seconds; it is renewed once per duration.
    #[arg(long, env = "LEASE_DURATION_SECONDS", default_value_t = 60)]
    pub lease_duration_seconds: u32,

    /// How many managed clusters this hub is meant to hold (for the capacity scores).
    #[arg(long, env = "MANAGED_CLUSTER_CAPACITY", default_value_t = 500)]
    pub managed_cluster_capacity: u32,

    /// Scores and the status condition are rewritten at least this often (seconds).
    #[arg(long, env = "SCORE_REFRESH_SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub score_refresh_seconds: u64,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// What to do (the default is to run the agent).
#[derive(Clone, Debug, Subcommand)]
pub enum Command {
    /// The pre-delete hook: remove the agent's AddOnPlacementScore on the global hub and its
    /// lease on this hub, then exit.
    Cleanup,
}

/// Runs the agent until SIGTERM, or the `cleanup` command to completion.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    if matches!(args.command, Some(Command::Cleanup)) {
        return cleanup(&args).await;
    }
    let process = Process::start("addon-agent", VERSION, args.common.health_addr).await?;
    let local = runtime::client(
        args.common.kubeconfig.as_ref(),
        process.health().api_requests(),
    )
    .await?;
    let hub = runtime::client(Some(&args.hub_kubeconfig), process.health().api_requests()).await?;
    let metrics = metrics::Metrics::registered(process.health());
    let mut tasks = runtime::Supervisor::default();
    let lease = lease::run(
        local.clone(),
        args.install_namespace.clone(),
        args.addon_name.clone(),
        format!("{}-agent", args.addon_name),
        args.lease_duration_seconds,
        metrics.lease_renewals.clone(),
    );
    tasks.spawn("health lease", async move {
        lease.await;
        Ok::<(), std::convert::Infallible>(())
    });
    let migrations = migration::run(
        local.clone(),
        migration::Options {
            namespace: args.install_namespace.clone(),
            metrics: metrics.clone(),
        },
    );
    tasks.spawn("migration controller", async move {
        migrations.await;
        Ok::<(), std::convert::Infallible>(())
    });
    let reporter = report::run(
        local,
        hub,
        report::ReportOptions {
            cluster_name: args.cluster_name.clone(),
            addon_name: args.addon_name.clone(),
            version: args.agent_version.clone(),
            build: VERSION.to_owned(),
            capacity: args.managed_cluster_capacity,
            refresh: Duration::from_secs(args.score_refresh_seconds.max(1)),
            refreshes: metrics.score_refreshes.clone(),
        },
    );
    tasks.spawn("status reporter", async move {
        reporter.await;
        Ok::<(), std::convert::Infallible>(())
    });
    process.health().set_ready(true);
    tracing::info!(
        cluster = %args.cluster_name,
        addon = %args.addon_name,
        namespace = %args.install_namespace,
        version = %args.agent_version,
        "addon-agent started"
    );
    let health = process.health().clone();
    let stopping = process.stopping();
    let failure = tokio::select! {
        _ = process.wait_for_shutdown() => None,
        // A task that is not running (and not because the process is stopping): unready,
        // and out, so the kubelet restarts the agent.
        why = tasks.first_end() => (!*stopping.borrow()).then_some(why),
    };
    if let Some(why) = failure {
        health.set_ready(false);
        tasks.abort_all();
        tracing::error!("{why}; stopping");
        return Err(why.into());
    }
    tasks.abort_all();
    tracing::info!("addon-agent stopped");
    Ok(())
}

/// Removes what the agent created: its score on the global hub and its lease here.
async fn cleanup(args: &Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // A one-shot run: its requests are counted nowhere.
    let uncounted = Default::default();
    let local = runtime::client(args.common.kubeconfig.as_ref(), &uncounted).await?;
    let hub = runtime::client(Some(&args.hub_kubeconfig), &uncounted).await?;
    let dp = DeleteParams::default();
    let scores: Api<AddOnPlacementScore> = Api::namespaced(hub, &args.cluster_name);
    runtime::ignore_not_found(scores.delete(&args.addon_name, &dp).await).map_err(|e| {
        format!(
            "deleting AddOnPlacementScore {}/{}: {e}",
            args.cluster_name, args.addon_name
        )
    })?;
    let leases: Api<Lease> = Api::namespaced(local, &args.install_namespace);
    runtime::ignore_not_found(leases.delete(&args.addon_name, &dp).await).map_err(|e| {
        format!(
            "deleting Lease {}/{}: {e}",
            args.install_namespace, args.addon_name
        )
    })?;
    tracing::info!(cluster = %args.cluster_name, "cleanup done");
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// An API server that answers 503 gets its answer back to the caller at once, for the
    /// controller to requeue: not retried inside the request for minutes (kube-client's default
    /// retry policy, 15 tries doubling from 5 ms, held a reconcile past a 3-minute e2e deadline
    /// after the server was back).
    #[tokio::test]
    async fn an_unavailable_api_server_answers_the_caller_at_once() {
        use k8s_openapi::api::core::v1::Secret;
        let hub = kube_sim::KubeSim::start(kube_sim::Options::default())
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, hub.kubeconfig()).unwrap();
        let requests = Default::default();
        let client = runtime::client(Some(&path), &requests).await.unwrap();
        hub.faults().add_error(kube_sim::ErrorRule {
            verb: Some("get".into()),
            resource: Some("secrets".into()),
            rate: 1.0,
            code: 503,
            user: None,
        });
        let secrets: kube::Api<Secret> = kube::Api::namespaced(client, "default");
        let answer = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            secrets.get_opt("anything"),
        )
        .await
        .expect("answered within 20 s, not retried for minutes");
        assert!(
            matches!(answer, Err(kube::Error::Api(ref s)) if s.code == 503),
            "{answer:?}"
        );
    }

    #[test]
    fn every_flag_has_help_and_an_env_fallback() {
        Args::command().debug_assert();
        assert_eq!(
            runtime::undocumented_flags(&Args::command()),
            Vec::<String>::new()
        );
    }

    #[test]
    fn cleanup_is_a_subcommand() {
        let a = Args::try_parse_from([
            "addon-agent",
            "--cluster-name=hub1",
            "--hub-kubeconfig=/k",
            "cleanup",
        ])
        .unwrap();
        assert!(matches!(a.command, Some(Command::Cleanup)));
    }
}
