//! The cluster-migration addon manager: runs on the global hub, owns the addon's lifecycle
//! and drives migrations through ManifestWorks. Controllers arrive with their issues; this crate
//! holds the command line and the start-up they plug into.

pub mod render;

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
}

/// Starts the manager and runs it until SIGTERM.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let process = Process::start("addon-manager", VERSION, args.common.health_addr).await?;
    let _client = runtime::client(args.common.kubeconfig.as_ref()).await?;
    process.health().set_ready(true);
    tracing::info!(addon = %args.addon_name, version = VERSION, "addon-manager started");
    process.wait_for_shutdown().await;
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
