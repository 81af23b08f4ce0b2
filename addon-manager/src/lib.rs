//! The cluster-migration addon manager: runs on the global hub, owns the addon's lifecycle
//! and drives migrations through ManifestWorks. Controllers arrive with their issues; this crate
//! holds the command line and the start-up they plug into.

pub mod addon;
pub mod csr;
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
}

/// Default image repository of the addon agent.
pub const DEFAULT_AGENT_IMAGE: &str = "quay.io/cluster-migration-addon/addon-agent";

fn parse_duration(s: &str) -> Result<Duration, String> {
    migration_api::migration::parse_duration(s)
        .ok_or_else(|| format!("{s:?} is not a duration such as 30s, 5m or 1h"))
}

impl Args {
    /// The addon controller's settings.
    pub fn addon_config(&self) -> addon::Config {
        addon::Config {
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
    let client = runtime::client(args.common.kubeconfig.as_ref()).await?;
    let stop = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let approver = tokio::spawn(csr::run(
        client.clone(),
        args.addon_name.clone(),
        stop(process.stopping()),
    ));
    let migrations = tokio::spawn(migration::run(
        client.clone(),
        migration::Config {
            addon_name: args.addon_name.clone(),
        },
        stop(process.stopping()),
    ));
    let controller = tokio::spawn(addon::run(
        client,
        args.addon_config(),
        stop(process.stopping()),
    ));
    process.health().set_ready(true);
    tracing::info!(addon = %args.addon_name, version = VERSION, agent_versions = ?args.agent_versions, "addon-manager started");
    process.wait_for_shutdown().await;
    // Reconciles in flight get a moment to finish; all progress is in the API, so whatever
    // is cut short is picked up by the next manager.
    let grace = Duration::from_secs(5);
    let migrations_abort = migrations.abort_handle();
    if tokio::time::timeout(grace, migrations).await.is_err() {
        migrations_abort.abort();
    }
    let approver_abort = approver.abort_handle();
    if tokio::time::timeout(grace, approver).await.is_err() {
        approver_abort.abort();
    }
    let controller_abort = controller.abort_handle();
    match tokio::time::timeout(grace, controller).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => return Err(e.into()),
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => {
            controller_abort.abort();
            tracing::info!("stopped the addon controller mid-reconcile");
        }
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
