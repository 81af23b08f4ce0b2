use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let args = addon_manager::Args::parse();
    let common = args.common.clone();
    migration_api::runtime::main("addon-manager", &common, addon_manager::run(args)).await
}
