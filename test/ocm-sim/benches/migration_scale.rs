//! Migration at scale: 300 clusters (or the count given as the first argument) move from hub1
//! to hub2 with the real addon-manager and addon-agents, once with zero join delay and once
//! with a realistic one of 10 s (or once per join delay, in seconds, given after the count), on a fleet with
//! the fleet's default timing (60 s leases, work status synced every 2 s). For each run it
//! prints the end-to-end time (migration applied to Completed), the slowest cluster's own
//! switch (released on hub1 to Available on hub2, seen by watches) and the time beyond it, the
//! slowest import take-over after that (hub2's `<cluster>-klusterlet` work applied), the
//! addon's own hop from the source's report that a cluster is ready to switch to its release on
//! hub1 (the manager's decision, the target's record of it and the source's write, each through
//! a task's ManifestWork), the timeline of the cluster taken
//! over last (what the end of Registering waited for), the
//! API requests per migrated cluster on each hub (the addon's own identities, and everything
//! the hub served meanwhile), and the manager's peak memory. Asserts nothing but success.
//! Run: `cargo bench -p ocm-sim --bench migration_scale [-- 300 [0 10 ...]]`;
//! `BENCH_TARGET_CLUSTERS=<n>` gives hub2 n clusters of its own (default: as many as move);
//! `BENCH_IN_PROCESS_CONNECTIONS=1` lets a fleet of thousands of clusters fit in this process's
//! open files; `BENCH_PROBE=1` also times a change of a work of the bench's own through each
//! hub's work agent, a change a second during the migration (no addon in that path).
//! For comparison, the Global Hub's published figure: 300 clusters in 4 min 40 s on real
//! hubs, with fixed waits of 45 s and polls every 5 s.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::watcher;
use migration_api::common::condition_is_true;
use migration_api::migration::{ClusterState, MigrationTask};
use migration_api::names;
use migration_api::ocm::cluster::ManagedCluster;
use migration_api::ocm::work::ManifestWork;
use ocm_sim::demo::{self, DemoOptions, MANAGER_USER};

/// The simulated fleet (hundreds of API servers and agents) runs in this process and takes
/// most of the machine; its allocations alone took a sixth of its CPU time with the system
/// allocator. The addon's own processes keep theirs.
#[global_allocator]
static FLEET_ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

type Seen = Arc<Mutex<BTreeMap<String, Instant>>>;

/// Records, for each cluster, the first time an object of `api` says so (`clusters` gives
/// the names of the clusters it says so of).
fn watch_first<K, I>(
    api: Api<K>,
    clusters: impl Fn(&K) -> I + Send + 'static,
) -> (Seen, tokio::task::JoinHandle<()>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    I: IntoIterator<Item = String>,
{
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let task = tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default());
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = ev else {
                continue;
            };
            let now = Instant::now();
            let mut s = s.lock().unwrap();
            for name in clusters(&o) {
                s.entry(name).or_insert(now);
            }
        }
    });
    (seen, task)
}

type Trips = Arc<Mutex<Vec<Duration>>>;

/// Round trips through `hub`'s work agent, with no addon in the path: a ManifestWork of the
/// bench's own (`bench-probe`, one ConfigMap) in the hub's namespace of the global hub is
/// changed, and the time until the global hub shows it applied at that generation is recorded
/// (the agent's watch of its works, the apply on the hub, its status write back); then again,
/// one change at a time, at most one a second. It shows how quickly the simulated hubs' work
/// agents answer under the fleet's load, which every hop of the addon's tasks goes through.
fn probe_work_agent(global: kube::Client, hub: &str) -> (Trips, tokio::task::JoinHandle<()>) {
    let trips: Trips = Arc::default();
    let t = trips.clone();
    let works: Api<ManifestWork> = Api::namespaced(global, hub);
    let task = tokio::spawn(async move {
        let name = "bench-probe";
        // At most one change a second: a sample of the agent's answers, not a load of its own.
        let mut every = tokio::time::interval(Duration::from_secs(1));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for n in 0u64.. {
            every.tick().await;
            let work = serde_json::json!({
                "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                "metadata": {"name": name},
                "spec": {"workload": {"manifests": [{
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": "default"},
                    "data": {"n": n.to_string()},
                }]}},
            });
            let sent = Instant::now();
            let Ok(applied) = works
                .patch(
                    name,
                    &kube::api::PatchParams::apply("bench-probe").force(),
                    &kube::api::Patch::Apply(&work),
                )
                .await
            else {
                return;
            };
            let generation = applied.metadata.generation;
            let done = kube::runtime::wait::await_condition(
                works.clone(),
                name,
                move |w: Option<&ManifestWork>| {
                    w.is_some_and(|w| w.metadata.generation == generation && w.applied())
                },
            );
            if tokio::time::timeout(Duration::from_secs(300), done)
                .await
                .is_err()
            {
                return;
            }
            // The first change creates the work (the agent's finalizer first): not a change.
            if n > 0 {
                t.lock().unwrap().push(sent.elapsed());
            }
        }
    });
    (trips, task)
}

/// The clusters a migration task's status (the agent's own report of its decisions, as the
/// manager reads it) says are in `state`.
fn in_state(task: &MigrationTask, state: ClusterState) -> Vec<String> {
    let Some(codes) = task
        .status
        .as_ref()
        .and_then(|s| s.cluster_states.as_deref())
    else {
        return Vec::new();
    };
    let states = ClusterState::decode(codes, task.spec.clusters.len());
    task.spec
        .clusters
        .iter()
        .zip(states)
        .filter(|(_, s)| *s == state)
        .map(|(name, _)| name.clone())
        .collect()
}

fn released(mc: &ManagedCluster) -> Option<String> {
    (!mc.spec.hub_accepts_client).then(|| mc.name_any())
}

fn available(mc: &ManagedCluster) -> Option<String> {
    let up = mc.spec.hub_accepts_client
        && mc
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .is_some_and(|c| condition_is_true(c, "ManagedClusterConditionAvailable"));
    up.then(|| mc.name_any())
}

/// The cluster whose klusterlet this hub's import controller took over: its
/// `<cluster>-klusterlet` work, carrying the Klusterlet, applied at its latest generation (what
/// the target's agent waits for before it counts the cluster registered).
fn taken_over(work: &ManifestWork) -> Option<String> {
    let cluster = work.namespace()?;
    (work.name_any() == names::import_work(&cluster) && work.applied_with("Klusterlet", None))
        .then_some(cluster)
}

/// The clusters hub2 holds of its own: `BENCH_TARGET_CLUSTERS`, or as many as move (two hubs
/// of the migration's size). Fewer let a migration larger than this machine carries twice over
/// run on a smaller fleet.
fn target_clusters(moving: usize) -> usize {
    std::env::var("BENCH_TARGET_CLUSTERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(moving)
}

/// `BENCH_IN_PROCESS_CONNECTIONS=1`: the simulated fleet's own clients reach its API servers
/// through memory ([`ocm_sim::fleet::FleetOptions::in_process_connections`]). Over TCP the fleet
/// holds about 7 open files per cluster, and this machine allows a process 20 000: 2 000
/// clusters fit, 3 000 do not. The addon's processes connect over TCP either way.
fn in_process_connections() -> bool {
    std::env::var("BENCH_IN_PROCESS_CONNECTIONS").is_ok_and(|v| v == "1")
}

/// `BENCH_TARGET_MULTIPLE_HUBS=1`: hub2's `global` KlusterletConfig lists bootstrap kubeconfigs
/// (`multipleHubsConfig`, IncludeCurrentHub, no secrets of its own), as a hub administrator may
/// set it: hub2's import then renders every klusterlet with its own hub's bootstrap kubeconfig
/// under `bootstrap-hub-kubeconfig-current-hub` instead of `bootstrap-hub-kubeconfig`, so its
/// take-over of an arrived cluster changes the Klusterlet (a new pod) and not the Secret the
/// running agent restarts on (a second restart within the kubelet's back-off window).
fn target_multiple_hubs() -> bool {
    std::env::var("BENCH_TARGET_MULTIPLE_HUBS").is_ok_and(|v| v == "1")
}

/// The work agents' status sync: `BENCH_STATUS_SYNC_SECS`, or the fleet's default.
fn status_sync() -> Duration {
    std::env::var("BENCH_STATUS_SYNC_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(
            ocm_sim::fleet::FleetOptions::default().status_sync_interval,
            Duration::from_secs,
        )
}

async fn run(clusters: usize, join_delay: Duration, bin_dir: &Path) {
    // BENCH_KEEP=1 keeps the directory (manager and agent logs) for a look afterwards.
    let dir = tempfile::Builder::new()
        .prefix("migration-bench-")
        .disable_cleanup(std::env::var_os("BENCH_KEEP").is_some())
        .tempdir()
        .unwrap();
    println!("run directory: {}", dir.path().display());
    // BENCH_LOG=<filter> logs the simulators (klusterlets, hubs) to fleet.log there.
    if let Ok(filter) = std::env::var("BENCH_LOG") {
        let log = std::fs::File::create(dir.path().join("fleet.log")).unwrap();
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::sync::Mutex::new(log))
            .with_ansi(false)
            .try_init();
    }
    let fleet_defaults = ocm_sim::fleet::FleetOptions::default();
    let opts = DemoOptions {
        hubs: 2,
        clusters_per_hub: clusters,
        clusters_on: vec![clusters, target_clusters(clusters)],
        in_process_connections: in_process_connections(),
        migrate: clusters,
        max_concurrency: None,
        join_delay,
        // The fleet's default timing (60 s leases, 2 s work status sync): what a large fleet
        // can carry here, and closer to real hubs than the demo's quick settings.
        // BENCH_STATUS_SYNC_SECS sets the work agents' status sync (upstream's default is 10 s):
        // with thousands of clusters, every work agent polling every 2 s takes the machine.
        lease_duration_secs: fleet_defaults.lease_duration_secs,
        lease_check_interval: fleet_defaults.lease_check_interval,
        status_sync_interval: status_sync(),
        dir: dir.path().to_path_buf(),
        bin_dir: bin_dir.to_path_buf(),
        agent_version: env!("CARGO_PKG_VERSION").into(),
        // Each wait of the demo (the fleet ready, the migration done): generous, so a slow
        // simulator still yields a figure rather than a timeout.
        timeout: Duration::from_secs(2400),
        plain_source: false,
        to_placement: false,
        // The agents' own default health lease (the demo's 1 s would add a lease renewal a
        // second to what the agents ask of their hubs).
        addon_lease_secs: 60,
        keep: false,
    };
    let mut quiet = std::io::sink();
    let running = demo::start(&opts, &mut quiet)
        .await
        .expect("fleet and manager");
    let fleet = &running.fleet;
    let hub1 = &fleet.hubs[0].cluster;
    let hub2 = &fleet.hubs[1].cluster;
    if target_multiple_hubs() {
        let kc = kube::api::ApiResource::erase::<migration_api::ocm::config::KlusterletConfig>(&());
        let configs: Api<kube::api::DynamicObject> = Api::all_with(hub2.admin.clone(), &kc);
        let global = serde_json::json!({
            "apiVersion": "config.open-cluster-management.io/v1alpha1", "kind": "KlusterletConfig",
            "metadata": {"name": ocm_sim::import::GLOBAL_KLUSTERLET_CONFIG},
            "spec": {"multipleHubsConfig": {"genBootstrapKubeConfigStrategy": "IncludeCurrentHub",
                "bootstrapKubeConfigs": {"type": "LocalSecrets", "localSecretsConfig": {"kubeConfigSecrets": []}}}}
        });
        configs
            .patch(
                ocm_sim::import::GLOBAL_KLUSTERLET_CONFIG,
                &kube::api::PatchParams::apply("bench"),
                &kube::api::Patch::Apply(&global),
            )
            .await
            .expect("hub2's global KlusterletConfig");
        println!(
            "hub2's global KlusterletConfig lists bootstrap kubeconfigs (MultipleHubs, the current hub alone)"
        );
    }
    // Clusters already on hub2 are Available there from the start; only the moving ones count.
    let (released_at, w1) = watch_first(Api::all(hub1.admin.clone()), released);
    let (arrived_at, w2) = watch_first(Api::all(hub2.admin.clone()), available);
    let (taken_at, w3) = watch_first(Api::all(hub2.admin.clone()), taken_over);
    // When the source's agent found each cluster ready to switch (its task's report).
    let (ready_at, w4) = watch_first(Api::all(hub1.admin.clone()), |t: &MigrationTask| {
        in_state(t, ClusterState::Ready)
    });
    // BENCH_PROBE=1: probe each hub's work agent during the migration (its own load is small,
    // a change a second, but it is load: off unless asked for).
    let probes: Vec<(&str, Trips, tokio::task::JoinHandle<()>)> = ["hub1", "hub2"]
        .into_iter()
        .filter(|_| std::env::var("BENCH_PROBE").is_ok_and(|v| v == "1"))
        .map(|hub| {
            let (trips, task) = probe_work_agent(fleet.global.cluster.admin.clone(), hub);
            (hub, trips, task)
        })
        .collect();
    for api in [&fleet.global.cluster.api, &hub1.api, &hub2.api] {
        api.metrics().reset();
    }
    // The addon's own processes, and the CPU time each used before the migration.
    // The simulated fleet runs in this process: its CPU time is the rest of the machine's.
    let processes: Vec<(String, u32)> = [
        ("fleet".to_owned(), std::process::id()),
        ("manager".to_owned(), running.manager.id()),
    ]
    .into_iter()
    .chain(
        demo::agent_pids(dir.path())
            .into_iter()
            .map(|(hub, pid)| (format!("{hub} agent"), pid)),
    )
    .collect();
    let cpu_before: Vec<Duration> = processes
        .iter()
        .map(|(_, pid)| demo::cpu_time(*pid).unwrap_or_default())
        .collect();
    // How long each cluster's klusterlet agent has waited out the kubelet's restart back-off.
    let backoff = || -> BTreeMap<String, Duration> {
        fleet
            .clusters
            .iter()
            .map(|(_, c, agent)| (c.name.clone(), agent.restart_backoff()))
            .collect()
    };
    let backoff_before = backoff();
    let started = Instant::now();
    let report = demo::migrate(&running, &opts, &mut quiet)
        .await
        .expect("migration");
    w1.abort();
    w2.abort();
    w3.abort();
    w4.abort();
    for (_, _, task) in &probes {
        task.abort();
    }
    let cpu: Vec<String> = processes
        .iter()
        .zip(&cpu_before)
        .map(|((who, pid), before)| {
            let used = demo::cpu_time(*pid)
                .unwrap_or_default()
                .saturating_sub(*before);
            format!("{who} {:.1} s", used.as_secs_f64())
        })
        .collect();
    let agent_peaks: Vec<String> = processes
        .iter()
        .skip(2)
        .map(|(who, pid)| {
            let kib = demo::peak_rss_kib(*pid).unwrap_or(0);
            format!("{who} {:.1} MiB", kib as f64 / 1024.0)
        })
        .collect();
    let moving = demo::moving(&opts);
    // The back-off each moving cluster's klusterlet agent waited during the migration: a
    // second exit of its container within the kubelet's window (hub1 refusing it, then hub2's
    // import controller rewriting `bootstrap-hub-kubeconfig`) starts it again 10 s later.
    let backoff_after = backoff();
    let backoffs: BTreeMap<&str, Duration> = moving
        .iter()
        .filter_map(|c| {
            let waited = backoff_after
                .get(c)?
                .saturating_sub(backoff_before.get(c).copied().unwrap_or_default());
            Some((c.as_str(), waited))
        })
        .collect();
    let released_at = released_at.lock().unwrap().clone();
    let arrived_at = arrived_at.lock().unwrap().clone();
    let taken_at = taken_at.lock().unwrap().clone();
    let ready_at = ready_at.lock().unwrap().clone();
    // The longest time a moving cluster took from one observation to the next, and which.
    let slowest_between = |from: &BTreeMap<String, Instant>, to: &BTreeMap<String, Instant>| {
        moving
            .iter()
            .filter_map(|c| {
                Some((
                    to.get(c)?.saturating_duration_since(*from.get(c)?),
                    c.as_str(),
                ))
            })
            .max()
            .unwrap_or_default()
    };
    let (slowest, slowest_name) = slowest_between(&released_at, &arrived_at);
    // On the target, the cluster is registered once its import controller has taken over its
    // klusterlet (the work is applied after the agent restarted for the bootstrap kubeconfig
    // that work rewrites).
    let (slowest_take_over, take_over_name) = slowest_between(&arrived_at, &taken_at);
    let (slowest_whole, _) = slowest_between(&released_at, &taken_at);
    // When the moving clusters were released and arrived, from the migration's start: the
    // first and the last of each.
    let spread = |seen: &BTreeMap<String, Instant>| {
        let times: Vec<f64> = moving
            .iter()
            .filter_map(|c| {
                Some(
                    seen.get(c)?
                        .saturating_duration_since(started)
                        .as_secs_f64(),
                )
            })
            .collect();
        if times.is_empty() {
            return "none".to_owned();
        }
        let first = times.iter().copied().fold(f64::INFINITY, f64::min);
        let last = times.iter().copied().fold(0.0, f64::max);
        format!("{first:.1}-{last:.1} s")
    };
    // From the source's report that a cluster is ready to the source stopping to accept it:
    // the addon's own hop (the manager's release, the target's record of it, then the source's
    // task and its write).
    let mut release_hops: Vec<Duration> = moving
        .iter()
        .filter_map(|c| {
            Some(
                released_at
                    .get(c)?
                    .saturating_duration_since(*ready_at.get(c)?),
            )
        })
        .collect();
    release_hops.sort();
    // The cluster whose take-over came last, step by step from the migration's start: what
    // the end of Registering waited for.
    let last_taken = moving
        .iter()
        .filter_map(|c| Some((*taken_at.get(c)?, c.as_str())))
        .max();
    let at = |seen: &BTreeMap<String, Instant>, c: &str| {
        seen.get(c).map_or("-".to_owned(), |t| {
            format!("{:.1}", t.saturating_duration_since(started).as_secs_f64())
        })
    };
    let n = moving.len() as f64;
    println!(
        "\n{clusters} clusters, join delay {} s: {:?}, {} registered, {} failed, misplaced {}",
        join_delay.as_secs_f64(),
        report.phase,
        report.registered,
        report.failed,
        report.misplaced.len()
    );
    println!(
        "  end to end                 {:>8.1} s",
        report.migration_took.as_secs_f64()
    );
    println!(
        "  slowest cluster's switch   {:>8.1} s",
        slowest.as_secs_f64()
    );
    println!(
        "  beyond the slowest switch  {:>8.1} s",
        report.migration_took.saturating_sub(slowest).as_secs_f64()
    );
    println!(
        "  slowest import take-over   {:>8.1} s after Available ({take_over_name}); released to taken over: slowest {:.1} s, {:.1} s beyond it",
        slowest_take_over.as_secs_f64(),
        slowest_whole.as_secs_f64(),
        report
            .migration_took
            .saturating_sub(slowest_whole)
            .as_secs_f64()
    );
    println!(
        "  released on hub1 {}, Available on hub2 {} (slowest: {slowest_name}), taken over {}",
        spread(&released_at),
        spread(&arrived_at),
        spread(&taken_at)
    );
    if let (Some(median), Some(slowest)) = (
        release_hops.get(release_hops.len() / 2),
        release_hops.last(),
    ) {
        println!(
            "  ready (the source's report) to released on hub1: median {:.1} s, slowest {:.1} s ({} clusters)",
            median.as_secs_f64(),
            slowest.as_secs_f64(),
            release_hops.len()
        );
    }
    if let Some((_, c)) = last_taken {
        println!(
            "  the last taken over, {c}: ready {} s, released {} s, Available {} s, taken over {} s (of that, in the kubelet's restart back-off {:.1} s); Completed {:.1} s",
            at(&ready_at, c),
            at(&released_at, c),
            at(&arrived_at, c),
            at(&taken_at, c),
            backoffs.get(c).copied().unwrap_or_default().as_secs_f64(),
            report.migration_took.as_secs_f64()
        );
    }
    let mut waits: Vec<Duration> = backoffs
        .values()
        .copied()
        .filter(|w| !w.is_zero())
        .collect();
    waits.sort();
    if let (Some(median), Some(longest)) = (waits.get(waits.len() / 2), waits.last()) {
        println!(
            "  klusterlet agents restarted after the kubelet's back-off (their container exited twice within its window): {} of {} clusters, median {:.1} s, longest {:.1} s",
            waits.len(),
            backoffs.len(),
            median.as_secs_f64(),
            longest.as_secs_f64()
        );
    }
    for (hub, trips, _) in &probes {
        let mut trips = trips.lock().unwrap().clone();
        trips.sort();
        if let (Some(median), Some(slowest)) = (trips.get(trips.len() / 2), trips.last()) {
            println!(
                "  a work's change through {hub}'s work agent (applied, seen on the global hub; no addon in it): median {:.1} s, slowest {:.1} s ({} changes)",
                median.as_secs_f64(),
                slowest.as_secs_f64(),
                trips.len()
            );
        }
    }
    let agent = |m: &kube_sim::Metrics| {
        m.access_log()
            .iter()
            .filter(|(a, _)| {
                a.user
                    .starts_with("system:serviceaccount:open-cluster-management-agent-addon:")
            })
            .map(|(_, c)| *c)
            .sum::<u64>()
    };
    let global = fleet.global.cluster.api.metrics();
    println!(
        "  requests per cluster, global hub: manager {:>6.1}, all {:>7.1}",
        global.requests_by(MANAGER_USER) as f64 / n,
        global.total(None, None) as f64 / n
    );
    for (name, hub) in [("hub1", hub1), ("hub2", hub2)] {
        let m = hub.api.metrics();
        println!(
            "  requests per cluster, {name}:       agent   {:>6.1}, all {:>7.1}",
            agent(m) as f64 / n,
            m.total(None, None) as f64 / n
        );
    }
    // Where the requests went: the most frequent kinds, by verb and resource (ten: an agent's
    // few writes per cluster come first, and what is left is spread over many small kinds).
    let breakdown = |m: &kube_sim::Metrics, who: &dyn Fn(&str) -> bool| {
        let mut by: BTreeMap<(String, String), u64> = BTreeMap::new();
        for (a, c) in m.access_log() {
            if who(&a.user) {
                *by.entry((a.verb.clone(), a.resource.clone())).or_default() += c;
            }
        }
        let mut by: Vec<_> = by.into_iter().collect();
        by.sort_by_key(|b| std::cmp::Reverse(b.1));
        by.iter()
            .take(10)
            .map(|((v, r), c)| format!("{v} {r} {:.2}", *c as f64 / n))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "    manager: {}",
        breakdown(global, &|u: &str| u == MANAGER_USER)
    );
    let is_agent =
        |u: &str| u.starts_with("system:serviceaccount:open-cluster-management-agent-addon:");
    for (name, hub) in [("hub1", hub1), ("hub2", hub2)] {
        println!(
            "    {name} agent: {}",
            breakdown(hub.api.metrics(), &is_agent)
        );
    }
    // And who asked the most of each hub.
    for (name, m) in [
        ("global hub", global),
        ("hub1", hub1.api.metrics()),
        ("hub2", hub2.api.metrics()),
    ] {
        let mut by: BTreeMap<String, u64> = BTreeMap::new();
        for (a, c) in m.access_log() {
            let who = a.user.split(':').take(4).collect::<Vec<_>>().join(":");
            *by.entry(who).or_default() += c;
        }
        let mut by: Vec<_> = by.into_iter().collect();
        by.sort_by_key(|b| std::cmp::Reverse(b.1));
        let top: Vec<String> = by
            .iter()
            .take(4)
            .map(|(u, c)| format!("{u} {:.1}", *c as f64 / n))
            .collect();
        println!("    {name} busiest: {}", top.join(", "));
        // What the three busiest asked for.
        for (who, _) in by.iter().take(3) {
            println!(
                "      {who}: {}",
                breakdown(m, &|u: &str| u.starts_with(who.as_str()))
            );
            // And what of it the hub answered with an error (409: a conflict retried).
            let users: std::collections::BTreeSet<String> = m
                .access_log()
                .into_keys()
                .map(|a| a.user)
                .filter(|u| u.starts_with(who.as_str()))
                .collect();
            let mut failed: BTreeMap<(String, String, u16), u64> = BTreeMap::new();
            for u in &users {
                for ((v, r, code), c) in m.answers_to(u) {
                    if code >= 400 {
                        *failed.entry((v, r, code)).or_default() += c;
                    }
                }
            }
            if !failed.is_empty() {
                let mut failed: Vec<_> = failed.into_iter().collect();
                failed.sort_by_key(|f| std::cmp::Reverse(f.1));
                let shown: Vec<String> = failed
                    .iter()
                    .take(6)
                    .map(|((v, r, code), c)| format!("{v} {r} {code} {:.2}", *c as f64 / n))
                    .collect();
                println!("        answered with an error: {}", shown.join(", "));
            }
        }
    }
    // Time in each phase, from the manager's log of its phase changes.
    let log = std::fs::read_to_string(dir.path().join("addon-manager.log")).unwrap_or_default();
    let changes: Vec<(jiff::Timestamp, String)> = log
        .lines()
        .filter_map(|l| {
            let (_, change) = l.split_once("addon_manager::migration: ")?;
            let (from, _) = change.split_once(" -> ")?;
            Some((l.split_whitespace().next()?.parse().ok()?, from.to_owned()))
        })
        .collect();
    let phases: Vec<String> = changes
        .windows(2)
        .map(|w| {
            let took = w[1].0.duration_since(w[0].0).as_secs_f64();
            format!("{} {took:.1} s", w[1].1)
        })
        .collect();
    println!("  time in each phase         {}", phases.join(", "));
    // The migration's own size (its status grows with the clusters).
    let mcm = Api::<migration_api::migration::ManagedClusterMigration>::namespaced(
        fleet.global.cluster.admin.clone(),
        "default",
    )
    .get("demo")
    .await
    .unwrap();
    let size = |v: &serde_json::Value| serde_json::to_vec(v).map_or(0, |b| b.len());
    let whole = serde_json::to_value(&mcm).unwrap();
    println!(
        "  migration object           {:>8.1} KiB (status {:.1} KiB)",
        size(&whole) as f64 / 1024.0,
        size(&whole["status"]) as f64 / 1024.0
    );
    println!(
        "  manager peak memory        {:>8.1} MiB; agents: {}",
        report.manager_peak_kib.unwrap_or(0) as f64 / 1024.0,
        agent_peaks.join(", ")
    );
    // What the simulated fleet (hubs, klusterlets, work agents) and the addon itself cost the
    // machine while the clusters moved, beside what the cores offered in that time.
    println!(
        "  CPU time                   {} (of {:.0} core-seconds)",
        cpu.join(", "),
        report.migration_took.as_secs_f64()
            * std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
    );
    assert!(report.misplaced.is_empty(), "{:?}", report.misplaced);
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let clusters: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(300);
    // Join delays to run with: those given after the count, else zero and a realistic 10 s.
    let mut delays: Vec<f64> = args[1.min(args.len())..]
        .iter()
        .filter_map(|a| a.parse().ok())
        .filter(|d: &f64| d.is_finite() && *d >= 0.0)
        .collect();
    if delays.is_empty() {
        delays = vec![0.0, 10.0];
    }
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<bench> -> target/<profile>
    let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin_dir = demo::ensure_binaries(&profile_dir, &workspace).unwrap();
    println!(
        "migration of {clusters} clusters hub1 -> hub2 (holding {} of its own; maxConcurrency: all, {} cores, work status synced every {:?})",
        target_clusters(clusters),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        status_sync()
    );
    for delay in delays {
        run(clusters, Duration::from_secs_f64(delay), &bin_dir).await;
    }
}
