//! `fleet up`: starts a global hub, hubs and managed clusters on this machine and keeps them
//! running until SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use ocm_sim::fleet::{Fleet, FleetOptions};

#[derive(Parser, Debug)]
#[command(
    name = "fleet",
    version,
    about = "A simulated OCM fleet: global hub, hubs and managed clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start a fleet, write kubeconfigs, and run until SIGTERM.
    Up {
        /// Number of hubs.
        #[arg(long, default_value_t = 2)]
        hubs: usize,
        /// Managed clusters registered to each hub.
        #[arg(long, default_value_t = 5)]
        clusters_per_hub: usize,
        /// Where to write kubeconfig/<name>.yaml and the `ready` marker.
        #[arg(long)]
        dir: PathBuf,
        /// Seconds each klusterlet takes to join (0 for instant).
        #[arg(long, default_value_t = 2.0)]
        join_delay: f64,
        /// Klusterlet lease duration in seconds.
        #[arg(long, default_value_t = 60)]
        lease_duration: i32,
        /// Give up if the fleet is not ready after this many seconds.
        #[arg(long, default_value_t = 600)]
        ready_timeout: u64,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let Command::Up {
        hubs,
        clusters_per_hub,
        dir,
        join_delay,
        lease_duration,
        ready_timeout,
    } = Cli::parse().command;
    if !join_delay.is_finite() || join_delay < 0.0 {
        eprintln!("fleet: --join-delay must be a non-negative number of seconds");
        return ExitCode::from(2);
    }
    let opts = FleetOptions {
        hubs,
        clusters_per_hub,
        join_delay: Duration::from_secs_f64(join_delay),
        lease_duration_secs: lease_duration,
        ..Default::default()
    };
    let started = Instant::now();
    let fleet = match Fleet::up(&opts).await {
        Ok(f) => f,
        Err(e) => {
            eprintln!("fleet: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = fleet.write_kubeconfigs(&dir) {
        eprintln!("fleet: {e}");
        return ExitCode::FAILURE;
    }
    if let Err(e) = fleet.wait_ready(Duration::from_secs(ready_timeout)).await {
        eprintln!("fleet: {e}");
        return ExitCode::FAILURE;
    }
    let elapsed = started.elapsed();
    if let Err(e) = std::fs::write(dir.join("ready"), format!("{:.3}\n", elapsed.as_secs_f64())) {
        eprintln!("fleet: writing {}: {e}", dir.join("ready").display());
        return ExitCode::FAILURE;
    }
    eprintln!(
        "fleet: ready in {elapsed:.2?}: global hub, {hubs} hubs, {} managed clusters; kubeconfigs in {}",
        hubs * clusters_per_hub,
        dir.join("kubeconfig").display()
    );
    if let Err(e) = kube_sim::until_terminated().await {
        eprintln!("fleet: waiting for SIGTERM: {e}");
        return ExitCode::FAILURE;
    }
    drop(fleet);
    ExitCode::SUCCESS
}
