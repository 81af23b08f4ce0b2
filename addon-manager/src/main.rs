use std::process::ExitCode;

use clap::{CommandFactory, Parser};

#[tokio::main]
async fn main() -> ExitCode {
    let args = addon_manager::Args::parse();
    if let Err(e) = args.check() {
        // Exits 2, as any other bad option.
        addon_manager::Args::command()
            .error(clap::error::ErrorKind::ArgumentConflict, e)
            .exit();
    }
    let common = args.common.clone();
    migration_api::runtime::main("addon-manager", &common, addon_manager::run(args)).await
}
