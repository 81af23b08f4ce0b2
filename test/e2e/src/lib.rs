//! Helpers for the end-to-end tests: a fleet with kubelets on its hubs, the real
//! addon-manager binary started against the global hub, kubectl as a user runs it, and
//! polling with a deadline.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use ocm_sim::fleet::{Fleet, FleetKubelet, FleetOptions};

pub mod migration;

/// Image repository the kubelets run the agent for.
pub const AGENT_IMAGE: &str = "quay.io/cluster-migration-addon/addon-agent";

/// The user the addon's agent acts as on its hub (its ServiceAccount in the addon's default
/// install namespace), as an API server's access log names it.
pub const AGENT_USER: &str =
    "system:serviceaccount:open-cluster-management-agent-addon:cluster-migration-agent";

/// A workspace binary next to the running test (`target/<profile>/<name>`).
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let mut dir = exe.parent().map(Path::to_path_buf);
    for _ in 0..3 {
        let Some(d) = dir else { break };
        let candidate = d.join(name);
        if candidate.is_file() {
            return candidate;
        }
        dir = d.parent().map(Path::to_path_buf);
    }
    panic!(
        "{name} not found next to {}: build the workspace first (`cargo test --workspace` does)",
        exe.display()
    );
}

pub use migration_api::testing::eventually;

/// A fleet for addon tests: quick leases, kubelets on the hubs knowing `known_tags`.
pub async fn fleet(hubs: usize, clusters_per_hub: usize, known_tags: &[&str], dir: &Path) -> Fleet {
    fleet_with(&fleet_options(hubs, clusters_per_hub, known_tags, dir), dir).await
}

/// What [`fleet`] runs: quick leases, kubelets on the hubs knowing `known_tags`, every hub
/// a current ACM hub.
pub fn fleet_options(
    hubs: usize,
    clusters_per_hub: usize,
    known_tags: &[&str],
    dir: &Path,
) -> FleetOptions {
    FleetOptions {
        hubs,
        clusters_per_hub,
        clusters_on: Vec::new(),
        join_delay: Duration::ZERO,
        lease_duration_secs: 5,
        lease_check_interval: Duration::from_millis(500),
        status_sync_interval: Duration::from_millis(300),
        addon_lease_period: Duration::from_secs(1),
        kubelet: Some(FleetKubelet {
            agent_binary: binary("addon-agent"),
            image_repository: AGENT_IMAGE.into(),
            known_tags: known_tags.iter().map(|t| (*t).to_owned()).collect(),
            work_dir: dir.join("pods"),
        }),
        plain_hubs: Vec::new(),
        legacy_hubs: Vec::new(),
        mce28_hubs: Vec::new(),
        raw_feedback_hubs: Vec::new(),
        // Klusterlets give up on a silent hub after 20 s instead of the 180 s minimum upstream.
        hub_timeout: Some(Duration::from_secs(20)),
        // AppliedManifestWorks of a hub a cluster left are evicted after 20 s, not 60 min.
        eviction_grace: Duration::from_secs(20),
        cluster_prefix: ocm_sim::fleet::CLUSTER_PREFIX.to_owned(),
        // Over TCP, as the e2e tests were written and their faults (outages) tested.
        in_process_connections: false,
    }
}

/// A fleet of `opts`, ready, its kubeconfigs written to `dir`.
pub async fn fleet_with(opts: &FleetOptions, dir: &Path) -> Fleet {
    // `RUST_LOG=ocm_sim=debug` shows what the simulated components do (test output).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let fleet = Fleet::up(opts)
        .await
        .unwrap_or_else(|e| panic!("fleet up: {e}"));
    // A minute, and longer for a large fleet (each cluster is its own API server).
    let total = u32::try_from(opts.hubs * opts.clusters_per_hub).unwrap_or(u32::MAX);
    fleet
        .wait_ready(Duration::from_secs(60).max(Duration::from_millis(500) * total))
        .await
        .unwrap_or_else(|e| panic!("fleet ready: {e}"));
    fleet
        .write_kubeconfigs(dir)
        .unwrap_or_else(|e| panic!("kubeconfigs: {e}"));
    fleet
}

/// The addon-manager binary, running against a kubeconfig; stopped (SIGTERM) when dropped.
#[derive(Debug)]
pub struct Manager {
    child: Child,
    pub log: PathBuf,
}

impl Manager {
    pub fn start(kubeconfig: &Path, dir: &Path, env: &[(&str, &str)]) -> Self {
        Self::start_named("addon-manager", kubeconfig, dir, env)
    }

    /// A manager whose log is `<dir>/<name>.log` (for several at once).
    pub fn start_named(name: &str, kubeconfig: &Path, dir: &Path, env: &[(&str, &str)]) -> Self {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let err = out.try_clone().unwrap_or_else(|e| panic!("{e}"));
        let mut cmd = Command::new(binary("addon-manager"));
        cmd.env("KUBECONFIG", kubeconfig)
            .env("HEALTH_ADDR", "127.0.0.1:0")
            // `DEMO_LOG_LEVEL` (as for the demo) sets the manager's log filter, e.g.
            // `info,addon_manager=debug` to follow a failing test's reconciles.
            .env(
                "LOG_LEVEL",
                std::env::var(ocm_sim::demo::LOG_LEVEL_ENV)
                    .unwrap_or_else(|_| "info,kube=warn".into()),
            )
            .stdout(out)
            .stderr(err);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting addon-manager: {e}"));
        Self { child, log }
    }

    /// Kills the process at once (SIGKILL): no shutdown, no Lease released.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether the process still runs (it has not exited, of itself or killed).
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The manager's log so far (for failure messages).
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        ocm_sim::demo::terminate(&mut self.child);
    }
}

/// Runs kubectl against a kubeconfig, with `stdin` if given.
pub fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let bin = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let mut cmd = Command::new(bin);
    cmd.arg("--kubeconfig").arg(kubeconfig).args(args);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("kubectl: {e} (is kubectl installed?)"));
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let _ = pipe.write_all(text.as_bytes());
    }
    child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("kubectl: {e}"))
}

/// `kubectl apply -f -` of `manifest`, failing the test on a non-zero exit.
pub fn kubectl_apply(kubeconfig: &Path, manifest: &str) -> String {
    kubectl_ok(kubeconfig, &["apply", "-f", "-"], Some(manifest))
}

/// The admin kubeconfig [`fleet`] wrote for the cluster `name` (`global-hub`, `hub1`, ...).
pub fn kubeconfig(dir: &Path, name: &str) -> PathBuf {
    dir.join("kubeconfig").join(format!("{name}.yaml"))
}

/// Runs kubectl and returns its stdout, failing the test on a non-zero exit.
pub fn kubectl_ok(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let out = kubectl(kubeconfig, args, stdin);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The addon's name.
pub const ADDON: &str = "cluster-migration";

/// A test's directory (kubeconfigs, manager and pod logs), printed; `E2E_KEEP=1` keeps it,
/// even when the test fails.
pub fn test_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .disable_cleanup(std::env::var_os("E2E_KEEP").is_some())
        .tempdir()
        .unwrap_or_else(|e| panic!("test directory: {e}"));
    eprintln!("test directory: {}", dir.path().display());
    dir
}

/// Enables the addon on `hubs` with a config that renews the agents' leases every second (the
/// test fleet judges addon health on a one-second period).
pub fn enable_addon(global: &Path, hubs: &[&str]) {
    kubectl_ok(global, &["create", "namespace", "addon-configs"], None);
    kubectl_apply(
        global,
        r#"{"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "AddOnDeploymentConfig",
  "metadata": {"name": "fast-lease", "namespace": "addon-configs"},
  "spec": {"customizedVariables": [{"name": "LEASE_DURATION_SECONDS", "value": "1"}]}}"#,
    );
    for hub in hubs {
        enable_addon_on(global, hub);
    }
}

/// Enables the addon on one more hub, with the config [`enable_addon`] created.
pub fn enable_addon_on(global: &Path, hub: &str) {
    kubectl_apply(
        global,
        &format!(
            r#"{{"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
  "metadata": {{"name": "{ADDON}", "namespace": "{hub}"}},
  "spec": {{"configs": [{{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs",
                         "namespace": "addon-configs", "name": "fast-lease"}}]}}}}"#
        ),
    );
}

/// Waits until the addon is Available on every hub of `hubs`.
pub async fn addon_available(global: &kube::Client, hubs: &[&str], limit: Duration) {
    use migration_api::common::condition_is_true;
    use migration_api::ocm::addon::ManagedClusterAddOn;
    for hub in hubs {
        eventually(limit, &format!("addon Available on {hub}"), || async {
            let m = kube::Api::<ManagedClusterAddOn>::namespaced(global.clone(), hub)
                .get_opt(ADDON)
                .await
                .ok()??;
            condition_is_true(m.status?.conditions.as_deref()?, "Available").then_some(())
        })
        .await;
    }
}
