//! Fleet start-up at scale: time until every cluster is Joined and Available, and the
//! process's peak memory and open files, for 100, 500 and 2 000 managed clusters over two hubs
//! (or the sizes given as arguments), with the requests each hub served and the connections it
//! accepted. Prints its figures; asserts nothing.
//! Run: `cargo bench -p ocm-sim --bench fleet_scale [-- 100 500 2000]`.
//! Sizes run in ascending order in one process, so each peak includes the smaller runs before.
//! While a fleet starts it prints progress every 30 s. `BENCH_KEEP=1` writes each fleet's
//! kubeconfigs (`<dir>/kubeconfig/<hub>.yaml`, as `fleet up` does) to a directory it keeps, so
//! a slow start can be looked into with kubectl while it runs. `BENCH_IN_PROCESS_CONNECTIONS=1`
//! connects the fleet's own clients to its servers through memory (no open file each).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use ocm_sim::fleet::{Fleet, FleetOptions, ready_clusters};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|kb| kb.parse::<f64>().ok())
            })
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

type Counts = std::collections::BTreeMap<(String, String, u16), u64>;

/// Clusters Joined and Available per hub, memory, and the hubs' load so far, with the
/// requests each hub served most since the last report.
async fn print_progress(fleet: &Fleet, elapsed: Duration, last: &mut Vec<Counts>) {
    let mut line = format!("    {elapsed:>6.0?}: RSS peak {:.0} MiB;", peak_rss_mib());
    for hub in &fleet.hubs {
        let ready = match ready_clusters(hub).await {
            Ok(n) => n.to_string(),
            Err(e) => format!("({e})"),
        };
        let watches: usize = hub.cluster.api.watcher_counts().values().sum();
        line.push_str(&format!(
            " {} {ready} ready, {} requests, {watches} watches, {} closed behind;",
            hub.cluster.name,
            hub.cluster.api.metrics().total(None, None),
            hub.cluster.api.watchers_fell_behind()
        ));
    }
    println!("{line}");
    last.resize_with(fleet.hubs.len(), Counts::new);
    for (hub, before) in fleet.hubs.iter().zip(last.iter_mut()) {
        let now = hub.cluster.api.metrics().snapshot();
        let mut delta: Vec<(u64, &(String, String, u16))> = now
            .iter()
            .map(|(k, n)| (n - before.get(k).copied().unwrap_or(0), k))
            .filter(|(d, _)| *d > 0)
            .collect();
        delta.sort_unstable_by_key(|d| std::cmp::Reverse(d.0));
        let top: Vec<String> = delta
            .iter()
            .take(6)
            .map(|(d, (verb, resource, code))| format!("{verb} {resource} {code}: {d}"))
            .collect();
        println!("      {} busiest: {}", hub.cluster.name, top.join(", "));
        *before = now;
    }
}

#[tokio::main]
async fn main() {
    // RUST_LOG (e.g. `ocm_sim::klusterlet=debug`) shows what the simulated components do.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
    let mut sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    if sizes.is_empty() {
        sizes = vec![100, 500, 2000];
    }
    sizes.sort_unstable();
    println!(
        "fleet start-up (2 hubs, join delay 0, {} cores)",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
    for n in sizes {
        let opts = FleetOptions {
            hubs: 2,
            clusters_per_hub: n / 2,
            join_delay: Duration::ZERO,
            lease_duration_secs: 60,
            lease_check_interval: Duration::from_secs(2),
            status_sync_interval: Duration::from_secs(10),
            in_process_connections: std::env::var("BENCH_IN_PROCESS_CONNECTIONS")
                .is_ok_and(|v| v == "1"),
            ..Default::default()
        };
        let start = Instant::now();
        let fleet = Fleet::up(&opts).await.expect("fleet up");
        let started = start.elapsed();
        if std::env::var_os("BENCH_KEEP").is_some() {
            let dir = tempfile::Builder::new()
                .prefix(&format!("fleet-bench-{n}-"))
                .disable_cleanup(true)
                .tempdir()
                .expect("bench directory");
            fleet.write_kubeconfigs(dir.path()).expect("kubeconfigs");
            println!("  kubeconfigs in {}/kubeconfig", dir.path().display());
        }
        {
            let mut ready = std::pin::pin!(fleet.wait_ready(Duration::from_secs(1200)));
            let mut progress = tokio::time::interval_at(
                tokio::time::Instant::now() + Duration::from_secs(30),
                Duration::from_secs(30),
            );
            let mut last = Vec::new();
            loop {
                tokio::select! {
                    r = &mut ready => {
                        r.expect("fleet ready");
                        break;
                    }
                    _ = progress.tick() => print_progress(&fleet, start.elapsed(), &mut last).await,
                }
            }
        }
        let ready = start.elapsed();
        println!(
            "  {n:>5} clusters: API servers and agents started in {started:.1?}, all Joined and Available in {ready:.1?}, peak RSS {:.0} MiB, {} open files",
            peak_rss_mib(),
            open_fds()
        );
        for hub in &fleet.hubs {
            let m = hub.cluster.api.metrics();
            println!(
                "         {}: {} requests, connections accepted {:?}, watchers closed for falling behind {}",
                hub.cluster.name,
                m.total(None, None),
                m.connections(),
                hub.cluster.api.watchers_fell_behind()
            );
        }
        drop(fleet);
    }
}
