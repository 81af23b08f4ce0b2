//! The cluster-migration addon agent: runs on each managed hub, renews its health lease,
//! reports to the global hub and carries out the hub's part of migrations. Controllers arrive
//! with their issues; this crate holds the command line and the start-up they plug into.

use std::path::PathBuf;

use clap::Parser;
use migration_api::names::{ADDON_NAME, DEFAULT_ADDON_INSTALL_NAMESPACE};
use migration_api::runtime::{self, CommonArgs, Process};

/// This binary's version, reported to the global hub.
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
}

/// Starts the agent and runs it until SIGTERM.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let process = Process::start("addon-agent", VERSION, args.common.health_addr).await?;
    let _local = runtime::client(args.common.kubeconfig.as_ref()).await?;
    let _hub = runtime::client(Some(&args.hub_kubeconfig)).await?;
    process.health().set_ready(true);
    tracing::info!(
        cluster = %args.cluster_name,
        addon = %args.addon_name,
        namespace = %args.install_namespace,
        version = VERSION,
        "addon-agent started"
    );
    process.wait_for_shutdown().await;
    tracing::info!("addon-agent stopped");
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
