//! `fleet up`: starts a global hub, hubs and managed clusters on this machine and keeps them
//! running until SIGTERM.

use std::path::{Path, PathBuf};
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
        /// Hubs (comma-separated names) that are plain OCM: no KlusterletConfig or
        /// KlusterletAddonConfig API, no import controller.
        #[arg(long, value_delimiter = ',')]
        plain_hubs: Vec<String>,
    },
    /// The quickstart: a fleet, the real addon-manager and agents, the addon enabled on every
    /// hub, and a migration from hub1 to hub2 with a live progress line. Exits 0 only if every
    /// cluster ends Available on exactly one hub, the one it should.
    Demo {
        /// Number of hubs.
        #[arg(long, default_value_t = 2)]
        hubs: usize,
        /// Managed clusters registered to each hub.
        #[arg(long, default_value_t = 25)]
        clusters_per_hub: usize,
        /// How many of hub1's clusters move to hub2.
        #[arg(long, default_value_t = 20)]
        migrate: usize,
        /// Clusters switching at once (default: all).
        #[arg(long)]
        max_concurrency: Option<i32>,
        /// Seconds each klusterlet takes to join (and to switch hubs).
        #[arg(long, default_value_t = 0.0)]
        join_delay: f64,
        /// Where to write kubeconfigs and logs (default: a new temporary directory).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Leave the fleet and the manager running after the migration, until Ctrl-C.
        #[arg(long)]
        keep: bool,
        /// Give up on any step after this many seconds.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// Make hub1 (the source) a plain OCM hub: the migration configures each cluster's
        /// Klusterlet through a ManifestWork instead of a KlusterletConfig.
        #[arg(long)]
        plain_source: bool,
        /// Let a Placement choose the target among hub2..hubN by the agents'
        /// `capacityHeadroom` score (each hub's agent is given a different capacity, the
        /// last hub the most room); needs --hubs 3 or more.
        #[arg(long)]
        to_placement: bool,
    },
}

/// The directory holding `addon-manager` and `addon-agent`: next to this binary, built there
/// by cargo first if they are missing (so `cargo run -p ocm-sim --bin fleet -- demo` works from
/// a fresh checkout).
fn agent_binaries() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    ocm_sim::demo::ensure_binaries(&ocm_sim::demo::sibling_dir(&exe), &workspace)
}

#[allow(clippy::too_many_arguments)]
async fn demo(
    hubs: usize,
    clusters_per_hub: usize,
    migrate: usize,
    max_concurrency: Option<i32>,
    join_delay: f64,
    dir: Option<PathBuf>,
    keep: bool,
    timeout: u64,
    plain_source: bool,
    to_placement: bool,
) -> ExitCode {
    if to_placement && hubs < 3 {
        eprintln!("fleet demo: --to-placement needs --hubs 3 or more (a choice among hub2..hubN)");
        return ExitCode::from(2);
    }
    if hubs < 2
        || migrate == 0
        || migrate > clusters_per_hub
        || !join_delay.is_finite()
        || join_delay < 0.0
    {
        eprintln!(
            "fleet demo: needs --hubs >= 2, 1 <= --migrate <= --clusters-per-hub, and a non-negative --join-delay"
        );
        return ExitCode::from(2);
    }
    let bin_dir = match agent_binaries() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("fleet demo: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (dir, _temp) = match dir {
        Some(d) => (d, None),
        None => match tempfile::Builder::new().prefix("fleet-demo-").tempdir() {
            Ok(t) => (t.path().to_path_buf(), Some(t)),
            Err(e) => {
                eprintln!("fleet demo: temporary directory: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("fleet demo: {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let (lease_duration_secs, lease_check_interval, status_sync_interval) =
        ocm_sim::demo::DemoOptions::quick_timing();
    let opts = ocm_sim::demo::DemoOptions {
        hubs,
        clusters_per_hub,
        clusters_on: Vec::new(),
        in_process_connections: false,
        migrate,
        max_concurrency,
        join_delay: Duration::from_secs_f64(join_delay),
        lease_duration_secs,
        lease_check_interval,
        status_sync_interval,
        dir: dir.clone(),
        bin_dir,
        agent_version: env!("CARGO_PKG_VERSION").into(),
        timeout: Duration::from_secs(timeout),
        plain_source,
        to_placement,
        // Addon health shows at once.
        addon_lease_secs: 1,
        keep,
    };
    let mut out = std::io::stdout();
    let (report, fleet, manager) = match ocm_sim::demo::run(&opts, &mut out).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fleet demo: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ok = report.phase == migration_api::migration::MigrationPhase::Completed
        && report.misplaced.is_empty()
        && report.registered as usize == migrate;
    if keep {
        let _temp = _temp.map(tempfile::TempDir::keep);
        println!("\nPrometheus can scrape (/metrics):");
        for (what, addr) in ocm_sim::demo::scrape_targets(&dir) {
            println!("  {what}: http://{addr}/metrics");
        }
        println!(
            "the fleet keeps running (files in {}); Ctrl-C to stop",
            dir.display()
        );
        if let Err(e) = kube_sim::until_terminated().await {
            eprintln!("fleet demo: waiting for Ctrl-C: {e}");
        }
    }
    drop(manager);
    drop(fleet);
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let (hubs, clusters_per_hub, dir, join_delay, lease_duration, ready_timeout, plain_hubs) =
        match Cli::parse().command {
            Command::Up {
                hubs,
                clusters_per_hub,
                dir,
                join_delay,
                lease_duration,
                ready_timeout,
                plain_hubs,
            } => (
                hubs,
                clusters_per_hub,
                dir,
                join_delay,
                lease_duration,
                ready_timeout,
                plain_hubs,
            ),
            Command::Demo {
                hubs,
                clusters_per_hub,
                migrate,
                max_concurrency,
                join_delay,
                dir,
                keep,
                timeout,
                plain_source,
                to_placement,
            } => {
                return demo(
                    hubs,
                    clusters_per_hub,
                    migrate,
                    max_concurrency,
                    join_delay,
                    dir,
                    keep,
                    timeout,
                    plain_source,
                    to_placement,
                )
                .await;
            }
        };
    if !join_delay.is_finite() || join_delay < 0.0 {
        eprintln!("fleet: --join-delay must be a non-negative number of seconds");
        return ExitCode::from(2);
    }
    // With the addon agent built next to this binary, every hub gets a kubelet that runs it, so
    // an addon-manager pointed at the global hub can install agents.
    let kubelet = ocm_sim::kubelet::find_agent_binary().map(|agent_binary| {
        eprintln!(
            "fleet: hubs run {} for Deployments of {}:{}",
            agent_binary.display(),
            ocm_sim::demo::AGENT_IMAGE,
            env!("CARGO_PKG_VERSION")
        );
        ocm_sim::fleet::FleetKubelet {
            agent_binary,
            image_repository: ocm_sim::demo::AGENT_IMAGE.into(),
            known_tags: vec![env!("CARGO_PKG_VERSION").into()],
            work_dir: dir.join("pods"),
        }
    });
    let opts = FleetOptions {
        hubs,
        clusters_per_hub,
        join_delay: Duration::from_secs_f64(join_delay),
        lease_duration_secs: lease_duration,
        kubelet,
        plain_hubs,
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
