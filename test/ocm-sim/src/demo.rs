//! `fleet demo`: the quickstart. Starts a fleet (global hub, hubs, managed clusters) with a
//! kubelet on every hub, runs the real addon-manager against the global hub (the kubelets run
//! the real addon-agent), enables the addon on every hub, migrates clusters from hub1 to
//! hub2 with a live progress line, prints a summary and the kubectl commands to look around,
//! and checks that every cluster ended Available on exactly one hub, the one it should.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use migration_api::common::condition_is_true;
use migration_api::migration::{ManagedClusterMigration, MigrationPhase};
use migration_api::names::ADDON_NAME;
use migration_api::ocm::addon::ManagedClusterAddOn;
use serde_json::json;

use crate::Error;
use crate::fleet::{Fleet, FleetKubelet, FleetOptions, cluster_name, hub_name};

/// Image repository the hubs' kubelets run the agent for (the manager's default).
pub const AGENT_IMAGE: &str = "quay.io/cluster-migration-addon/addon-agent";
const CONFIG_NS: &str = "addon-configs";
const CONFIG: &str = "demo";
const MIGRATION: &str = "demo";
const MIGRATION_NS: &str = "default";

/// What the demo does.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    pub hubs: usize,
    pub clusters_per_hub: usize,
    /// Hubs (by index) holding another number of clusters (see [`FleetOptions::clusters_on`]).
    pub clusters_on: Vec<usize>,
    /// See [`FleetOptions::in_process_connections`].
    pub in_process_connections: bool,
    /// How many of hub1's clusters move to hub2.
    pub migrate: usize,
    pub max_concurrency: Option<i32>,
    pub join_delay: Duration,
    /// The fleet's timing (see [`FleetOptions`]); [`DemoOptions::quick_timing`] suits a
    /// demo of a few dozen clusters, [`FleetOptions::default`]'s values a large fleet.
    pub lease_duration_secs: i32,
    pub lease_check_interval: Duration,
    pub status_sync_interval: Duration,
    pub dir: PathBuf,
    /// Where the `addon-manager` and `addon-agent` binaries are.
    pub bin_dir: PathBuf,
    /// The agent version (image tag) to run.
    pub agent_version: String,
    pub timeout: Duration,
    /// hub1 is a plain OCM hub (no KlusterletConfig API).
    pub plain_source: bool,
    /// The target is chosen by a Placement over hub2..hubN ([`TARGET_PLACEMENT`]) on the
    /// score the agents publish (`capacityHeadroom`); each hub's agent is given a different
    /// capacity ([`demo_capacity`]) so that the scores differ.
    pub to_placement: bool,
    /// The addon agents' health lease period (`LEASE_DURATION_SECONDS` in the demo's
    /// AddOnDeploymentConfig): the demo's 1 s shows health at once; the agent's own default is
    /// 60 s.
    pub addon_lease_secs: u32,
    /// The fleet stays up after the summary (`--keep`): only then does the summary print
    /// commands to look around, which need it.
    pub keep: bool,
}

/// The Placement that chooses the target with `--to-placement`.
pub const TARGET_PLACEMENT: &str = "most-room";

/// The capacity hub `i` (1-based) is given with `--to-placement`: 40 managed clusters per
/// index, so the hubs further down the list have more room.
pub fn demo_capacity(i: usize) -> usize {
    40 * i
}

impl DemoOptions {
    /// Quick leases and status syncs (5 s, 500 ms, 300 ms): a demo of a few dozen clusters
    /// finishes in seconds. Too much traffic for hundreds of clusters on two cores.
    pub const fn quick_timing() -> (i32, Duration, Duration) {
        (5, Duration::from_millis(500), Duration::from_millis(300))
    }
}

/// What the demo measured.
#[derive(Clone, Debug)]
pub struct DemoReport {
    pub ready_after: Duration,
    pub migration_took: Duration,
    pub phase: MigrationPhase,
    pub registered: i32,
    pub failed: i32,
    /// Per-phase durations as the migration's conditions show them.
    pub misplaced: Vec<String>,
    pub manager_peak_kib: Option<u64>,
}

/// The addon-manager child process; stopped with SIGTERM when dropped.
#[derive(Debug)]
pub struct ManagerProcess(Child);

impl ManagerProcess {
    /// The process id of the addon-manager.
    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for ManagerProcess {
    fn drop(&mut self) {
        terminate(&mut self.0);
    }
}

/// Stops a child process the way a kubelet stops a pod: SIGTERM, up to ten seconds to exit,
/// then SIGKILL.
pub fn terminate(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
}

/// CPU time a process (all its threads) has used so far: user and system time from Linux
/// `/proc/<pid>/stat` (fields 14 and 15, in clock ticks of 1/100 s, the `USER_HZ` Linux
/// reports to user space).
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3.
    let ticks = |field: usize| fields.get(field - 3)?.parse::<u64>().ok();
    Some(Duration::from_millis((ticks(14)? + ticks(15)?) * 10))
}

/// Each hub's agent process, by hub, from the pid files the kubelet keeps under `dir`
/// (`pods/<hub>/<pod>/pid`).
pub fn agent_pids(dir: &Path) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for hub in std::fs::read_dir(dir.join("pods"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = hub.file_name().to_string_lossy().into_owned();
        for pod in std::fs::read_dir(hub.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let pid = std::fs::read_to_string(pod.path().join("pid")).unwrap_or_default();
            if let Ok(pid) = pid.trim().parse() {
                out.push((name.clone(), pid));
            }
        }
    }
    out.sort();
    out
}

/// Peak resident memory of a process (Linux `VmHWM`), in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Environment variable: the log filter of the demo's manager and agents (default: the
/// manager at `info,kube=warn`, the agents at their config's default), e.g.
/// `info,addon_manager=debug,addon_agent=debug` to time a run from the logs.
pub const LOG_LEVEL_ENV: &str = "DEMO_LOG_LEVEL";

fn log_level() -> String {
    std::env::var(LOG_LEVEL_ENV).unwrap_or_else(|_| "info,kube=warn".into())
}

async fn enable_addon(
    global: &Client,
    hubs: &[String],
    capacities: bool,
    lease_secs: u32,
) -> Result<(), Error> {
    let pp = PatchParams::apply("fleet-demo").force();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(global.clone());
    namespaces
        .patch(
            CONFIG_NS,
            &pp,
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CONFIG_NS}}),
            ),
        )
        .await?;
    let adcs: Api<migration_api::ocm::addon::AddOnDeploymentConfig> =
        Api::namespaced(global.clone(), CONFIG_NS);
    let mut variables =
        vec![json!({"name": "LEASE_DURATION_SECONDS", "value": lease_secs.to_string()})];
    if std::env::var_os(LOG_LEVEL_ENV).is_some() {
        variables.push(json!({"name": "LOG_LEVEL", "value": log_level()}));
    }
    adcs.patch(CONFIG, &pp, &Patch::Apply(json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "AddOnDeploymentConfig",
        "metadata": {"name": CONFIG, "namespace": CONFIG_NS},
        "spec": {"customizedVariables": variables}
    })))
    .await?;
    for (i, hub) in hubs.iter().enumerate() {
        // With capacities, each hub its own config: the same, plus its capacity.
        let config = if capacities {
            let name = format!("{CONFIG}-{hub}");
            adcs.patch(&name, &pp, &Patch::Apply(json!({
                "apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "AddOnDeploymentConfig",
                "metadata": {"name": name, "namespace": CONFIG_NS},
                "spec": {"customizedVariables": variables.iter().cloned().chain([
                    json!({"name": "MANAGED_CLUSTER_CAPACITY", "value": demo_capacity(i + 1).to_string()})
                ]).collect::<Vec<_>>()}
            })))
            .await?;
            name
        } else {
            CONFIG.to_owned()
        };
        let mcas: Api<ManagedClusterAddOn> = Api::namespaced(global.clone(), hub);
        mcas.patch(ADDON_NAME, &pp, &Patch::Apply(json!({
            "apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
            "metadata": {"name": ADDON_NAME, "namespace": hub},
            "spec": {"configs": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs",
                                  "namespace": CONFIG_NS, "name": config}]}
        })))
        .await?;
    }
    Ok(())
}

async fn addon_available(global: &Client, hubs: &[String], deadline: Instant) -> Result<(), Error> {
    let mut poll = tokio::time::interval(Duration::from_millis(200));
    for hub in hubs {
        let mcas: Api<ManagedClusterAddOn> = Api::namespaced(global.clone(), hub);
        loop {
            poll.tick().await;
            let ok = mcas
                .get_opt(ADDON_NAME)
                .await?
                .and_then(|m| m.status)
                .and_then(|s| s.conditions)
                .is_some_and(|c| condition_is_true(&c, "Available"));
            if ok {
                break;
            }
            if Instant::now() > deadline {
                return Err(Error::Setup(format!(
                    "the addon did not become Available on {hub}"
                )));
            }
        }
    }
    Ok(())
}

/// Runs the demo; the fleet and the manager stay up while `keep` returns, then stop.
/// A fleet with the addon-manager running and the addon Available on every hub.
#[derive(Debug)]
pub struct Running {
    pub fleet: Fleet,
    pub manager: ManagerProcess,
    pub ready_after: Duration,
}

/// The user the addon-manager runs as on the global hub (its own identity, so its requests
/// can be told apart from the simulated OCM components').
pub const MANAGER_USER: &str =
    "system:serviceaccount:open-cluster-management:cluster-migration-addon-manager";

/// The whole quickstart: [`start`], then [`migrate`].
pub async fn run(
    opts: &DemoOptions,
    out: &mut impl Write,
) -> Result<(DemoReport, Fleet, ManagerProcess), Error> {
    let running = start(opts, out).await?;
    let report = migrate(&running, opts, out).await?;
    Ok((report, running.fleet, running.manager))
}

/// Starts the fleet and the manager and enables the addon on every hub.
pub async fn start(opts: &DemoOptions, out: &mut impl Write) -> Result<Running, Error> {
    let started = Instant::now();
    let manager_bin = opts.bin_dir.join("addon-manager");
    let agent_bin = opts.bin_dir.join("addon-agent");
    for b in [&manager_bin, &agent_bin] {
        if !b.is_file() {
            return Err(Error::Setup(format!(
                "{} not found: build it first (cargo build --release -p addon-manager -p addon-agent)",
                b.display()
            )));
        }
    }
    let fleet_opts = FleetOptions {
        hubs: opts.hubs,
        clusters_per_hub: opts.clusters_per_hub,
        clusters_on: opts.clusters_on.clone(),
        join_delay: opts.join_delay,
        lease_duration_secs: opts.lease_duration_secs,
        lease_check_interval: opts.lease_check_interval,
        status_sync_interval: opts.status_sync_interval,
        // The hubs judge the agents' leases on the period the agents renew them.
        addon_lease_period: Duration::from_secs(opts.addon_lease_secs.into()),
        kubelet: Some(FleetKubelet {
            agent_binary: agent_bin,
            image_repository: AGENT_IMAGE.into(),
            known_tags: vec![opts.agent_version.clone()],
            work_dir: opts.dir.join("pods"),
        }),
        plain_hubs: if opts.plain_source {
            vec![crate::fleet::hub_name(1)]
        } else {
            Vec::new()
        },
        legacy_hubs: Vec::new(),
        mce28_hubs: Vec::new(),
        raw_feedback_hubs: Vec::new(),
        hub_timeout: None,
        eviction_grace: Duration::from_secs(60 * 60),
        cluster_prefix: crate::fleet::CLUSTER_PREFIX.to_owned(),
        in_process_connections: opts.in_process_connections,
    };
    let _ = writeln!(
        out,
        "starting a fleet: global hub, {} hubs, {} managed clusters ...",
        opts.hubs,
        fleet_opts.size()
    );
    let fleet = Fleet::up(&fleet_opts).await?;
    fleet.write_kubeconfigs(&opts.dir)?;
    fleet.wait_ready(opts.timeout).await?;
    let ready_after = started.elapsed();
    let _ = writeln!(
        out,
        "fleet ready in {ready_after:.1?}; starting the addon-manager (log: {})",
        opts.dir.join("addon-manager.log").display()
    );
    let log = std::fs::File::create(opts.dir.join("addon-manager.log"))
        .map_err(|e| Error::Setup(e.to_string()))?;
    let err = log.try_clone().map_err(|e| Error::Setup(e.to_string()))?;
    let api = &fleet.global.cluster.api;
    let token = format!("manager-{:016x}", rand::random::<u64>());
    api.add_token(&token, MANAGER_USER, &["system:masters"]);
    let manager_kubeconfig = opts.dir.join("addon-manager.kubeconfig");
    std::fs::write(&manager_kubeconfig, api.kubeconfig_for_token(&token))
        .map_err(|e| Error::Setup(format!("{}: {e}", manager_kubeconfig.display())))?;
    let child = Command::new(&manager_bin)
        .env("KUBECONFIG", &manager_kubeconfig)
        .env("HEALTH_ADDR", "127.0.0.1:0")
        .env("AGENT_VERSIONS", &opts.agent_version)
        .env("LOG_LEVEL", log_level())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .map_err(|e| Error::Setup(format!("starting {}: {e}", manager_bin.display())))?;
    let manager = ManagerProcess(child);
    let global = fleet.global.cluster.admin.clone();
    let hubs: Vec<String> = (1..=opts.hubs).map(hub_name).collect();
    enable_addon(&global, &hubs, opts.to_placement, opts.addon_lease_secs).await?;
    addon_available(&global, &hubs, Instant::now() + opts.timeout).await?;
    let _ = writeln!(out, "addon Available on {}", hubs.join(", "));
    Ok(Running {
        fleet,
        manager,
        ready_after,
    })
}

/// Migrates the demo's clusters from hub1 to hub2 with a progress line and reports.
pub async fn migrate(
    running: &Running,
    opts: &DemoOptions,
    out: &mut impl Write,
) -> Result<DemoReport, Error> {
    let fleet = &running.fleet;
    let global = fleet.global.cluster.admin.clone();
    let moving = moving(opts);
    let mut spec = json!({"from": "hub1", "to": "hub2", "includedManagedClusters": moving});
    let mut scores = String::new();
    if opts.to_placement {
        scores = target_placement(&global, opts, out).await?;
        spec = json!({"from": "hub1", "toPlacement": TARGET_PLACEMENT, "includedManagedClusters": moving});
    }
    if let Some(c) = opts.max_concurrency {
        spec["maxConcurrency"] = json!(c);
    }
    let mcms: Api<ManagedClusterMigration> = Api::namespaced(global.clone(), MIGRATION_NS);
    mcms.patch(MIGRATION, &PatchParams::apply("fleet-demo").force(), &Patch::Apply(json!({
        "apiVersion": "migration.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterMigration",
        "metadata": {"name": MIGRATION, "namespace": MIGRATION_NS}, "spec": spec
    })))
    .await?;
    let _ = writeln!(
        out,
        "migrating {} clusters from hub1 to {} (ManagedClusterMigration {MIGRATION_NS}/{MIGRATION})",
        moving.len(),
        if opts.to_placement {
            format!("the hub Placement {MIGRATION_NS}/{TARGET_PLACEMENT} chooses")
        } else {
            "hub2".into()
        }
    );
    let t0 = Instant::now();
    // The progress line is redrawn as the migration's status changes.
    let mut poll = tokio::time::interval(Duration::from_millis(200));
    let last = loop {
        poll.tick().await;
        let m = mcms.get_opt(MIGRATION).await?;
        let _ = write!(
            out,
            "{}",
            migration_api::cli::progress_line(m.as_ref(), moving.len(), t0.elapsed())
        );
        let _ = out.flush();
        let terminal = m
            .as_ref()
            .and_then(|m| m.status.as_ref())
            .and_then(|s| s.phase)
            .is_some_and(MigrationPhase::is_terminal);
        if terminal || t0.elapsed() > opts.timeout {
            break m;
        }
    };
    let _ = writeln!(out);
    let migration_took = t0.elapsed();
    let status = last.and_then(|m| m.status).unwrap_or_default();
    let counts = status.clusters.unwrap_or_default();
    // Where the clusters went: hub2, or the hub the Placement chose.
    let target = status.target.clone().unwrap_or_else(|| "hub2".into());
    let target_index = target
        .strip_prefix("hub")
        .and_then(|i| i.parse::<usize>().ok())
        .unwrap_or(2);
    // Every cluster on exactly one hub: the moved ones on hub2, the others where they started.
    let mut expected: BTreeMap<String, usize> = fleet
        .clusters
        .iter()
        .map(|(h, c, _)| (c.name.clone(), h + 1))
        .collect();
    for c in &moving {
        expected.insert(c.clone(), target_index);
    }
    let check_deadline = Instant::now() + Duration::from_secs(30);
    let misplaced = loop {
        let homes = fleet.cluster_homes().await?;
        let misplaced: Vec<String> = expected
            .iter()
            .filter(|(c, h)| homes.get(*c) != Some(&vec![**h]))
            .map(|(c, h)| {
                format!(
                    "{c}: expected on hub{h}, Available on {:?}",
                    homes.get(c).cloned().unwrap_or_default()
                )
            })
            .collect();
        if misplaced.is_empty() || Instant::now() > check_deadline {
            break misplaced;
        }
        poll.tick().await;
    };
    let report = DemoReport {
        ready_after: running.ready_after,
        migration_took,
        phase: status.phase.unwrap_or_default(),
        registered: counts.registered,
        failed: counts.failed,
        misplaced,
        manager_peak_kib: peak_rss_kib(running.manager.0.id()),
    };
    let _ = writeln!(out, "\n{}", summary(&report, &status, fleet, opts, &scores));
    Ok(report)
}

fn summary(
    r: &DemoReport,
    status: &migration_api::migration::ManagedClusterMigrationStatus,
    fleet: &Fleet,
    opts: &DemoOptions,
    scores: &str,
) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "{:<28} {MIGRATION_NS}/{MIGRATION}: hub1 -> {}\n",
        "migration",
        status.target.as_deref().unwrap_or("?")
    ));
    if opts.to_placement {
        s.push_str(&format!(
            "{:<28} by Placement {MIGRATION_NS}/{TARGET_PLACEMENT} on capacityHeadroom ({scores})\n",
            "target chosen"
        ));
    }
    s.push_str(&format!("{:<28} {:?}\n", "phase", r.phase));
    s.push_str(&format!(
        "{:<28} {} registered, {} failed\n",
        "clusters", r.registered, r.failed
    ));
    s.push_str(&format!("{:<28} {:.1?}\n", "fleet start-up", r.ready_after));
    s.push_str(&format!(
        "{:<28} {:.1?}\n",
        "migration, end to end", r.migration_took
    ));
    if let Some(kib) = r.manager_peak_kib {
        s.push_str(&format!(
            "{:<28} {:.1} MiB\n",
            "addon-manager peak memory",
            kib as f64 / 1024.0
        ));
    }
    for c in status.conditions.iter().flatten() {
        s.push_str(&format!(
            "  {:<26} {:<6} {:<20} {}\n",
            c.type_, c.status, c.reason, c.message
        ));
    }
    s.push_str(&format!(
        "{:<28} {}\n",
        "every cluster on one hub",
        if r.misplaced.is_empty() {
            "yes".to_owned()
        } else {
            format!("NO: {}", r.misplaced.join("; "))
        }
    ));
    if !opts.keep {
        s.push_str(
            "\nthe fleet stops now; run the demo again with --keep to look around it with kubectl\n",
        );
        return s;
    }
    let kc = |name: &str| opts.dir.join("kubeconfig").join(format!("{name}.yaml"));
    s.push_str("\nlook around (the fleet keeps running until Ctrl-C):\n");
    s.push_str(&format!(
        "  kubectl --kubeconfig {} get mcm -A\n",
        kc(crate::fleet::GLOBAL_HUB).display()
    ));
    s.push_str(&format!(
        "  kubectl --kubeconfig {} describe mcm -n {MIGRATION_NS} {MIGRATION}\n",
        kc(crate::fleet::GLOBAL_HUB).display()
    ));
    s.push_str(&format!(
        "  kubectl --kubeconfig {} get managedclusteraddon -A\n",
        kc(crate::fleet::GLOBAL_HUB).display()
    ));
    for hub in fleet.hubs.iter().map(|h| h.cluster.name.clone()) {
        s.push_str(&format!(
            "  kubectl --kubeconfig {} get managedclusters\n",
            kc(&hub).display()
        ));
    }
    s
}

/// The names of the clusters a demo moves: the first `migrate` of hub1's.
pub fn moving(opts: &DemoOptions) -> Vec<String> {
    (1..=opts.migrate.min(opts.clusters_per_hub))
        .map(cluster_name)
        .collect()
}

/// The health and metrics address a process logged at start (`health_addr=<ip>:<port>`).
pub fn logged_metrics_addr(log: &str) -> Option<String> {
    let line = log
        .lines()
        .find(|l| l.contains("health and metrics endpoint listening"))?;
    let rest = &line[line.find("health_addr")? + "health_addr".len()..];
    let start = rest.find(|c: char| c.is_ascii_digit())?;
    let addr: String = rest[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
        .collect();
    addr.parse::<std::net::SocketAddr>().ok().map(|_| addr)
}

/// Each hub's agent's metrics address, by hub, from its pod's log under `dir`
/// (`pods/<hub>/<pod>/agent.log`).
pub fn agent_metrics_addrs(dir: &Path) -> Vec<(String, String)> {
    let mut hubs: Vec<PathBuf> = std::fs::read_dir(dir.join("pods"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    hubs.sort();
    let mut out = Vec::new();
    for hub in hubs {
        let name = hub
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        for pod in std::fs::read_dir(&hub).into_iter().flatten().flatten() {
            let log = std::fs::read_to_string(pod.path().join("agent.log")).unwrap_or_default();
            if let Some(a) = logged_metrics_addr(&log) {
                out.push((name.clone(), a));
            }
        }
    }
    out
}

/// Where Prometheus can scrape the demo's processes (`/metrics`): the manager, and each
/// hub's agent, from the logs under `dir`.
pub fn scrape_targets(dir: &Path) -> Vec<(String, String)> {
    let manager = std::fs::read_to_string(dir.join("addon-manager.log")).unwrap_or_default();
    logged_metrics_addr(&manager)
        .map(|a| ("addon-manager".to_owned(), a))
        .into_iter()
        .chain(
            agent_metrics_addrs(dir)
                .into_iter()
                .map(|(hub, a)| (format!("addon-agent on {hub}"), a)),
        )
        .collect()
}

/// Where the workspace's binaries are for a fleet binary at `exe`: the same directory.
pub fn sibling_dir(exe: &Path) -> PathBuf {
    exe.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// When the sources the binaries are built from last changed (`api`, `addon-manager`,
/// `addon-agent`, `templates`, the workspace's manifest and lock).
fn sources_changed_at(workspace: &Path) -> Option<std::time::SystemTime> {
    fn newest(path: &Path) -> Option<std::time::SystemTime> {
        let meta = std::fs::metadata(path).ok()?;
        if !meta.is_dir() {
            return meta.modified().ok();
        }
        std::fs::read_dir(path)
            .ok()?
            .flatten()
            .filter(|e| e.file_name() != "target")
            .filter_map(|e| newest(&e.path()))
            .max()
    }
    [
        "api",
        "addon-manager",
        "addon-agent",
        "templates",
        "Cargo.toml",
        "Cargo.lock",
    ]
    .iter()
    .filter_map(|p| newest(&workspace.join(p)))
    .max()
}

/// When the older of the two binaries in `dir` was written (`None`: one is missing).
fn built_at(dir: &Path) -> Option<std::time::SystemTime> {
    ["addon-manager", "addon-agent"]
        .iter()
        .map(|b| {
            std::fs::metadata(dir.join(b))
                .and_then(|m| m.modified())
                .ok()
        })
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .min()
}

/// Finds current `addon-manager` and `addon-agent` binaries for a fleet binary in `dir` (a
/// cargo profile directory such as `target/release`): those in `dir` when they were built after
/// their sources last changed (by `cargo test`, say); inside the workspace, else, those `cargo
/// build` with that profile brings up to date in `<dir>/../demo/<profile>`; elsewhere they must
/// be in `dir`. Returns the directory that holds them.
pub fn ensure_binaries(dir: &Path, workspace: &Path) -> Result<PathBuf, String> {
    let present = dir.join("addon-manager").is_file() && dir.join("addon-agent").is_file();
    if !workspace.join("Cargo.toml").is_file() {
        return if present {
            Ok(dir.to_path_buf())
        } else {
            Err(format!(
                "addon-manager and addon-agent not found in {}",
                dir.display()
            ))
        };
    }
    // Built since their sources last changed (by `cargo test` or `cargo bench`, whose feature
    // set differs from a plain build's, so that cargo would build them again): used as they are.
    let sources = sources_changed_at(workspace);
    let fresh = |d: &Path| matches!((built_at(d), sources), (Some(b), Some(s)) if b > s);
    if fresh(dir) {
        return Ok(dir.to_path_buf());
    }
    let release = dir.file_name().is_some_and(|n| n == "release");
    // Built in a target directory of their own: a build of these two packages alone unifies
    // their dependencies' features differently from `cargo run -p ocm-sim`, and in the shared
    // directory each would rebuild the other's binary on every demo.
    let profile = dir.file_name().map(PathBuf::from).unwrap_or_default();
    let own = dir
        .parent()
        .map_or_else(|| workspace.join("target"), Path::to_path_buf)
        .join("demo");
    let built = own.join(&profile);
    if fresh(&built) {
        return Ok(built);
    }
    eprintln!("building addon-manager and addon-agent (a no-op when they are up to date) ...");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace)
        .env("CARGO_TARGET_DIR", &own)
        .args(["build", "-q", "-p", "addon-manager", "-p", "addon-agent"]);
    if release {
        cmd.arg("--release");
    }
    let status = cmd.status().map_err(|e| format!("running cargo: {e}"))?;
    if !status.success() {
        return Err("building addon-manager and addon-agent failed".into());
    }
    Ok(built)
}

/// With `--to-placement`: a ManagedClusterSet of hub2..hubN bound to the migration's namespace
/// and a Placement choosing one of them by the agents' `capacityHeadroom` score, made once
/// every candidate publishes its score; returns the scores, as `hub2 37, hub3 58`.
async fn target_placement(
    global: &Client,
    opts: &DemoOptions,
    out: &mut impl Write,
) -> Result<String, Error> {
    use migration_api::ocm::cluster::{
        AddOnPlacementScore, ManagedCluster, ManagedClusterSet, ManagedClusterSetBinding,
    };
    let pp = PatchParams::apply("fleet-demo").force();
    let candidates: Vec<String> = (2..=opts.hubs).map(hub_name).collect();
    let set_label = "cluster.open-cluster-management.io/clusterset";
    for hub in &candidates {
        Api::<ManagedCluster>::all(global.clone())
            .patch(
                hub,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {set_label: "demo-targets"}}})),
            )
            .await?;
    }
    Api::<ManagedClusterSet>::all(global.clone())
        .patch("demo-targets", &pp, &Patch::Apply(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSet",
            "metadata": {"name": "demo-targets"}, "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}
        })))
        .await?;
    Api::<ManagedClusterSetBinding>::namespaced(global.clone(), MIGRATION_NS)
        .patch("demo-targets", &pp, &Patch::Apply(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
            "metadata": {"name": "demo-targets", "namespace": MIGRATION_NS}, "spec": {"clusterSet": "demo-targets"}
        })))
        .await?;
    // Every candidate's score first, so the Placement decides on all of them.
    let deadline = Instant::now() + opts.timeout;
    let mut scores = Vec::new();
    while scores.len() < candidates.len() {
        scores.clear();
        for hub in &candidates {
            let score = Api::<AddOnPlacementScore>::namespaced(global.clone(), hub)
                .get_opt(ADDON_NAME)
                .await?
                .and_then(|s| s.status?.score("capacityHeadroom"));
            if let Some(value) = score {
                scores.push(format!("{hub} {value}"));
            }
        }
        if Instant::now() > deadline {
            return Err(Error::Setup(
                "the hubs published no capacityHeadroom score in time".into(),
            ));
        }
        if scores.len() < candidates.len() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Api::<migration_api::ocm::cluster::Placement>::namespaced(global.clone(), MIGRATION_NS)
        .patch(TARGET_PLACEMENT, &pp, &Patch::Apply(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
            "metadata": {"name": TARGET_PLACEMENT, "namespace": MIGRATION_NS},
            "spec": {"clusterSets": ["demo-targets"], "numberOfClusters": 1,
                "prioritizerPolicy": {"mode": "Exact", "configurations": [{"weight": 1,
                    "scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": ADDON_NAME, "scoreName": "capacityHeadroom"}}}]}}
        })))
        .await?;
    let scores = scores.join(", ");
    let _ = writeln!(
        out,
        "target Placement {MIGRATION_NS}/{TARGET_PLACEMENT} over {} (capacityHeadroom: {scores})",
        candidates.join(", ")
    );
    Ok(scores)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_address_is_read_from_a_text_or_json_log() {
        let text = "2026-11-24T04:00:00Z  INFO migration_api::runtime: health and metrics endpoint listening health_addr=127.0.0.1:4242";
        assert_eq!(logged_metrics_addr(text).as_deref(), Some("127.0.0.1:4242"));
        let json = r#"{"level":"INFO","message":"health and metrics endpoint listening","health_addr":"127.0.0.1:4243"}"#;
        assert_eq!(logged_metrics_addr(json).as_deref(), Some("127.0.0.1:4243"));
        assert_eq!(logged_metrics_addr("nothing here"), None);
    }
}
