use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let args = addon_agent::Args::parse();
    let common = args.common.clone();
    migration_api::runtime::main("addon-agent", &common, addon_agent::run(args)).await
}
