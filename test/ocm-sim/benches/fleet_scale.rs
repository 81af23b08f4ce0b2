//! Fleet start-up at scale: time until every cluster is Joined and Available, and the
//! process's peak memory and open files, for 100, 500 and 2 000 managed clusters over two hubs
//! (or the sizes given as arguments), with the requests each hub served and the connections it
//! accepted. Prints its figures; asserts nothing.
//! Run: `cargo bench -p ocm-sim --bench fleet_scale [-- 100 500 2000]`.
//! Sizes run in ascending order in one process, so each peak includes the smaller runs before.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use ocm_sim::fleet::{Fleet, FleetOptions};

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

#[tokio::main]
async fn main() {
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
            ..Default::default()
        };
        let start = Instant::now();
        let fleet = Fleet::up(&opts).await.expect("fleet up");
        let started = start.elapsed();
        fleet
            .wait_ready(Duration::from_secs(1200))
            .await
            .expect("fleet ready");
        let ready = start.elapsed();
        println!(
            "  {n:>5} clusters: API servers and agents started in {started:.1?}, all Joined and Available in {ready:.1?}, peak RSS {:.0} MiB, {} open files",
            peak_rss_mib(),
            open_fds()
        );
        for hub in &fleet.hubs {
            let m = hub.cluster.api.metrics();
            println!(
                "         {}: {} requests, connections accepted {:?}",
                hub.cluster.name,
                m.total(None, None),
                m.connections()
            );
        }
        drop(fleet);
    }
}
