//! The cluster-migration addon manager: runs on the global hub, owns the addon's lifecycle
//! and drives migrations through ManifestWorks. Controllers arrive with their issues; this crate
//! holds the command line and the start-up they plug into.

pub mod addon;
pub mod addon_version;
pub mod csr;
pub mod leader;
pub mod metrics;
pub mod migration;
pub mod migration_render;
pub mod render;
pub mod rollout;

use std::time::Duration;

use clap::Parser;
use migration_api::names::ADDON_NAME;
use migration_api::runtime::{self, CommonArgs, Process};

/// This binary's version (the default agent version it deploys).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Command line of the addon manager.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "addon-manager",
    version,
    about = "cluster-migration addon manager: runs on the global hub, installs the addon agent on \
             managed hubs and drives ManagedClusterMigrations"
)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,

    /// Name of the addon this manager owns (its ClusterManagementAddOn and ManagedClusterAddOns).
    #[arg(long, env = "ADDON_NAME", default_value = ADDON_NAME)]
    pub addon_name: String,

    /// Image repository of the addon agent; the tag is the agent version.
    #[arg(long, env = "AGENT_IMAGE", default_value = DEFAULT_AGENT_IMAGE)]
    pub agent_image: String,

    /// Agent versions this manager may deploy (comma-separated); the first is the default
    /// when no AddOnDeploymentConfig sets AGENT_VERSION.
    #[arg(long, env = "AGENT_VERSIONS", value_delimiter = ',', default_value = VERSION)]
    pub agent_versions: Vec<String>,

    /// How long a new agent version may take to become Available before the hub is rolled
    /// back, unless the install placement's rolloutStrategy sets progressDeadline.
    #[arg(long, env = "PROGRESS_DEADLINE", default_value = "10m", value_parser = parse_duration)]
    pub progress_deadline: Duration,

    /// Run only while holding the leader Lease, so several replicas are safe.
    #[arg(long, env = "LEADER_ELECT", default_value_t = false)]
    pub leader_elect: bool,

    /// Namespace of the leader Lease (the manager's own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "open-cluster-management")]
    pub leader_election_namespace: String,

    /// How long a leader's Lease is valid without renewal (a standby takes over after it).
    #[arg(long, env = "LEADER_ELECTION_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub leader_election_lease_duration: Duration,

    /// How long the leader keeps running without renewing before it gives up the lead.
    #[arg(long, env = "LEADER_ELECTION_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    pub leader_election_renew_deadline: Duration,

    /// How often the leader renews (and a candidate retries after a lost race).
    #[arg(long, env = "LEADER_ELECTION_RETRY_PERIOD", default_value = "2s", value_parser = parse_duration)]
    pub leader_election_retry_period: Duration,
}

/// The longest leader Lease: a day (a Lease holds its duration in whole seconds of an int32,
/// and a standby waits that long for a leader that died).
pub const MAX_LEADER_LEASE: Duration = Duration::from_secs(24 * 3600);

fn humantime(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        migration_api::migration::format_duration(d)
    } else {
        format!("{d:?}")
    }
}

/// Name of the manager's leader Lease.
pub const LEADER_LEASE: &str = "cluster-migration-addon-manager";

/// Default image repository of the addon agent.
pub const DEFAULT_AGENT_IMAGE: &str = "quay.io/cluster-migration-addon/addon-agent";

fn parse_duration(s: &str) -> Result<Duration, String> {
    migration_api::migration::parse_duration(s)
        .ok_or_else(|| format!("{s:?} is not a duration such as 30s, 5m or 1h"))
}

impl Args {
    /// What the flags cannot say alone, checked as client-go's `NewLeaderElector` checks a
    /// leader election's settings: the lease outlasts the renew deadline, which outlasts a
    /// retry period and its jitter (1.2), none is zero, and the lease is whole seconds a
    /// Lease can hold.
    pub fn check(&self) -> Result<(), String> {
        let (lease, renew, retry) = (
            self.leader_election_lease_duration,
            self.leader_election_renew_deadline,
            self.leader_election_retry_period,
        );
        if retry.is_zero() {
            return Err("--leader-election-retry-period must be longer than 0s".into());
        }
        if renew <= retry.mul_f64(1.2) {
            return Err(format!(
                "--leader-election-renew-deadline {} must be longer than 1.2 × --leader-election-retry-period {}",
                humantime(renew),
                humantime(retry)
            ));
        }
        // The Lease holds whole seconds: what a standby reads must outlast the renew deadline.
        let lease_read = Duration::from_secs(lease.as_secs());
        if lease_read <= renew {
            return Err(format!(
                "--leader-election-lease-duration {} must be longer than --leader-election-renew-deadline {}",
                humantime(lease),
                humantime(renew)
            ));
        }
        if !(Duration::from_secs(1)..=MAX_LEADER_LEASE).contains(&lease) {
            return Err(format!(
                "--leader-election-lease-duration {} must be from 1s to {} (a Lease holds it in whole seconds)",
                humantime(lease),
                humantime(MAX_LEADER_LEASE)
            ));
        }
        Ok(())
    }

    /// The leader election's settings; the identity is the pod name (or host name) with a
    /// random suffix, so a restarted pod is a new candidate.
    pub fn leader_config(&self) -> leader::Config {
        let host = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| "addon-manager".into());
        leader::Config {
            namespace: self.leader_election_namespace.clone(),
            name: LEADER_LEASE.into(),
            identity: format!("{host}_{:08x}", rand::random::<u32>()),
            lease_duration: self.leader_election_lease_duration,
            renew_deadline: self.leader_election_renew_deadline,
            renew_period: self.leader_election_retry_period,
        }
    }

    /// The addon controller's settings.
    pub fn addon_config(&self, metrics: metrics::Metrics) -> addon::Config {
        addon::Config {
            metrics,
            defaults: render::Defaults::new(
                &self.addon_name,
                &self.agent_image,
                self.agent_versions.first().map_or(VERSION, String::as_str),
            ),
            supported_versions: self.agent_versions.clone(),
            progress_deadline: self.progress_deadline,
            work_size_limit: render::WORK_SIZE_LIMIT,
        }
    }
}

/// Starts the manager and runs it until SIGTERM.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let process = Process::start("addon-manager", VERSION, args.common.health_addr).await?;
    let client = runtime::client(
        args.common.kubeconfig.as_ref(),
        process.health().api_requests(),
    )
    .await?;
    let leading = prometheus_client::metrics::gauge::Gauge::<i64>::default();
    process.health().register(
        "manager_leader",
        "1 while this replica leads (runs the controllers)",
        leading.clone(),
    );
    let metrics = metrics::Metrics::registered(process.health());
    // A standby is alive and ready (it is healthy); it only does not run the controllers.
    process.health().set_ready(true);
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    let mut holder = None;
    if args.leader_elect {
        let cfg = args.leader_config();
        if !leader::acquire(client.clone(), &cfg, process.stopping()).await {
            tracing::info!("stopped before leading");
            return Ok(());
        }
        holder = Some(tokio::spawn(leader::hold(client.clone(), cfg, release_rx)));
    }
    leading.set(1);
    let stop = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let mut controllers = runtime::Supervisor::default();
    let approver = csr::run(
        client.clone(),
        args.addon_name.clone(),
        metrics.clone(),
        stop(process.stopping()),
    );
    controllers.spawn("CSR approver", async move {
        approver.await;
        Ok::<(), std::convert::Infallible>(())
    });
    controllers.spawn(
        "migration controller",
        migration::run(
            client.clone(),
            migration::Config {
                addon_name: args.addon_name.clone(),
                metrics: metrics.clone(),
            },
            stop(process.stopping()),
        ),
    );
    controllers.spawn(
        "addon controller",
        addon::run(client, args.addon_config(metrics), stop(process.stopping())),
    );
    tracing::info!(addon = %args.addon_name, version = VERSION, agent_versions = ?args.agent_versions, "addon-manager started");
    let health = process.health().clone();
    let stopping = process.stopping();
    let lost = async {
        match holder.as_mut() {
            Some(h) => match h.await {
                Ok(Err(why)) => why,
                Ok(Ok(())) => "the leader Lease was released".into(),
                Err(e) => format!("the leader election task ended: {e}"),
            },
            None => std::future::pending().await,
        }
    };
    let failure = tokio::select! {
        _ = process.wait_for_shutdown() => None,
        // Another replica may lead already: stop at once, without a grace period.
        why = lost => Some((why, false)),
        // A controller that is not running: unready, and out, so the pod restarts; the
        // Lease is released for a standby to take over at once.
        why = controllers.first_end() => (!*stopping.borrow()).then_some((why, true)),
    };
    if let Some((why, release)) = failure {
        health.set_ready(false);
        controllers.abort_all();
        tracing::error!("{why}; stopping");
        if release {
            let _ = release_tx.send(true);
            if let Some(h) = holder {
                let _ = tokio::time::timeout(Duration::from_secs(5), h).await;
            }
        }
        return Err(why.into());
    }
    // Reconciles in flight get a moment to finish; all progress is in the API, so whatever
    // is cut short is picked up by the next manager.
    controllers.shutdown(Duration::from_secs(5)).await;
    // Only now may a standby take over.
    let _ = release_tx.send(true);
    if let Some(h) = holder {
        let _ = h.await;
    }
    tracing::info!("addon-manager stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn every_flag_has_help_and_an_env_fallback() {
        Args::command().debug_assert();
        assert_eq!(
            runtime::undocumented_flags(&Args::command()),
            Vec::<String>::new()
        );
    }
}
