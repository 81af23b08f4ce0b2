//! What the migration tests share: a fleet with the manager running and the addon Available
//! on every hub, the migration in namespace [`NS`] driven with kubectl, and the invariant
//! every migration test ends with (each cluster accepted and Available on exactly one hub).

// Test support: a panic here is a failure report of the test that called it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Client, ResourceExt};
use migration_api::migration::{ManagedClusterMigration, MigrationPhase};
use migration_api::ocm::cluster::ManagedCluster;
use migration_api::ocm::operator::Klusterlet;
use ocm_sim::fleet::Fleet;

use crate::{
    Manager, addon_available, enable_addon, eventually, kubeconfig, kubectl_apply, kubectl_ok,
};

/// The namespace the tests' migrations live in.
pub const NS: &str = "default";

/// A fleet of `hubs` hubs with `per_hub` clusters each, the manager running and the addon
/// Available on every hub.
pub struct Setup {
    pub dir: tempfile::TempDir,
    pub fleet: Fleet,
    pub manager: Option<Manager>,
    pub global: Client,
    pub global_kc: std::path::PathBuf,
}

impl std::fmt::Debug for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setup")
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl Setup {
    pub async fn new(hubs: usize, per_hub: usize) -> Self {
        Self::with_hub_kinds(hubs, per_hub, &[], &[]).await
    }

    /// [`Setup::new`] with the named hubs plain OCM (no KlusterletConfig API) or an older ACM
    /// (KlusterletConfig's `spec.bootstrapKubeConfigs`).
    pub async fn with_hub_kinds(
        hubs: usize,
        per_hub: usize,
        plain: &[&str],
        legacy: &[&str],
    ) -> Self {
        Self::with_fleet(hubs, per_hub, |o| {
            o.plain_hubs = plain.iter().map(|h| (*h).to_owned()).collect();
            o.legacy_hubs = legacy.iter().map(|h| (*h).to_owned()).collect();
        })
        .await
    }

    /// [`Setup::new`] with the fleet's options changed by `shape` (names, hub kinds).
    pub async fn with_fleet(
        hubs: usize,
        per_hub: usize,
        shape: impl FnOnce(&mut ocm_sim::fleet::FleetOptions),
    ) -> Self {
        let dir = crate::test_dir();
        let mut opts = crate::fleet_options(hubs, per_hub, &[migration_api_version()], dir.path());
        shape(&mut opts);
        let fleet = crate::fleet_with(&opts, dir.path()).await;
        let global_kc = kubeconfig(dir.path(), "global-hub");
        let manager = Manager::start(&global_kc, dir.path(), &[]);
        let global = fleet.global.cluster.admin.clone();
        let names: Vec<String> = (1..=hubs).map(|i| format!("hub{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        enable_addon(&global_kc, &names);
        addon_available(&global, &names, Duration::from_secs(60)).await;
        Self {
            dir,
            fleet,
            manager: Some(manager),
            global,
            global_kc,
        }
    }

    pub fn hub(&self, i: usize) -> Client {
        self.fleet.hubs[i - 1].cluster.admin.clone()
    }

    pub fn logs(&self) -> String {
        self.manager.as_ref().map(Manager::logs).unwrap_or_default()
    }

    /// The log of the manager last stopped (before another is started in its place).
    pub fn logs_of_stopped_manager(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("addon-manager.log")).unwrap_or_default()
    }

    /// The last `n` lines above DEBUG of each hub agent's log (`pods/<hub>/*/agent.log`).
    pub fn agent_logs(&self, n: usize) -> String {
        let mut out = String::new();
        let Ok(hubs) = std::fs::read_dir(self.dir.path().join("pods")) else {
            return out;
        };
        let mut hubs: Vec<_> = hubs.flatten().map(|e| e.path()).collect();
        hubs.sort();
        for hub in hubs {
            for pod in std::fs::read_dir(&hub).into_iter().flatten().flatten() {
                let Ok(text) = std::fs::read_to_string(pod.path().join("agent.log")) else {
                    continue;
                };
                let kept: Vec<&str> = text.lines().filter(|l| !l.contains(" DEBUG ")).collect();
                out.push_str(&format!(
                    "--- {} (tail) ---\n{}\n",
                    pod.path().display(),
                    tail(&kept.join("\n"), n)
                ));
            }
        }
        out
    }

    pub fn apply(&self, name: &str, spec: &str) {
        self.apply_in(NS, name, spec);
    }

    /// Applies migration `namespace/name` with `spec` (JSON), as a user would with kubectl.
    pub fn apply_in(&self, namespace: &str, name: &str, spec: &str) {
        kubectl_apply(
            &self.global_kc,
            &format!(
                r#"{{"apiVersion": "migration.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterMigration",
  "metadata": {{"name": "{name}", "namespace": "{namespace}"}}, "spec": {spec}}}"#
            ),
        );
    }

    pub async fn migration(&self, name: &str) -> Option<ManagedClusterMigration> {
        self.migration_in(NS, name).await
    }

    pub async fn migration_in(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<ManagedClusterMigration> {
        Api::<ManagedClusterMigration>::namespaced(self.global.clone(), namespace)
            .get_opt(name)
            .await
            .unwrap()
    }

    /// The key a migration's derived objects are named after (`names::migration_key`).
    pub async fn key(&self, name: &str) -> String {
        self.key_in(NS, name).await
    }

    pub async fn key_in(&self, namespace: &str, name: &str) -> String {
        let m = self
            .migration_in(namespace, name)
            .await
            .unwrap_or_else(|| panic!("no migration {namespace}/{name}"));
        migration_api::names::migration_key(namespace, name, &m.metadata.uid.unwrap_or_default())
    }

    /// The names a migration's bootstrap identities took in the target's pool (its
    /// ManagedServiceAccounts and their token Secrets), in order, once Initializing claimed
    /// them.
    pub async fn identities(&self, name: &str) -> Vec<String> {
        crate::eventually(
            Duration::from_secs(120),
            &format!("{name}'s bootstrap identities in its status"),
            || async {
                let m = self.migration(name).await?;
                m.status?.bootstrap_identities.filter(|i| !i.is_empty())
            },
        )
        .await
    }

    /// Moves `clusters` from hub1 to hub2 with migration `name` and waits (up to 7 minutes)
    /// for it to complete with every one of them registered and none failed; its status.
    pub async fn move_all(
        &self,
        name: &str,
        clusters: &[String],
    ) -> migration_api::migration::ManagedClusterMigrationStatus {
        self.apply(
            name,
            &format!(
                r#"{{"from": "hub1", "to": "hub2", "includedManagedClusters": {}}}"#,
                json_list(clusters)
            ),
        );
        let m = self
            .phase(name, MigrationPhase::Completed, Duration::from_secs(420))
            .await;
        let status = m.status.unwrap_or_default();
        let counts = status.clusters.unwrap_or_default();
        assert_eq!(
            (counts.registered, counts.failed),
            (i32::try_from(clusters.len()).unwrap_or(i32::MAX), 0),
            "{:?}",
            status.conditions
        );
        status
    }

    /// Waits for a migration to reach `phase`, failing with its status and the manager's log.
    pub async fn phase(
        &self,
        name: &str,
        phase: MigrationPhase,
        limit: Duration,
    ) -> ManagedClusterMigration {
        self.phase_in(NS, name, phase, limit).await
    }

    pub async fn phase_in(
        &self,
        namespace: &str,
        name: &str,
        phase: MigrationPhase,
        limit: Duration,
    ) -> ManagedClusterMigration {
        let start = std::time::Instant::now();
        loop {
            let m = self.migration_in(namespace, name).await;
            let now = m
                .as_ref()
                .and_then(|m| m.status.as_ref())
                .and_then(|s| s.phase);
            if now == Some(phase) {
                return m.unwrap();
            }
            if start.elapsed() > limit
                || (now.is_some_and(MigrationPhase::is_terminal) && phase.is_terminal())
            {
                panic!(
                    "migration {namespace}/{name} not {phase:?} after {limit:?}: {:#?}\n--- manager log (tail) ---\n{}\n{}\n{}",
                    m.and_then(|m| m.status),
                    tail(&self.logs(), 60),
                    self.agent_logs(30),
                    self.fleet_view().await
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Each hub's clusters as they stand (accepted, Joined, Available) and their klusterlet
    /// works (generation, Applied and its observed generation), for a failure's message.
    pub async fn fleet_view(&self) -> String {
        use migration_api::ocm::work::ManifestWork;
        let mut out = String::from("--- fleet ---\n");
        for (i, hub) in self.fleet.hubs.iter().enumerate() {
            let client = hub.cluster.admin.clone();
            let clusters = Api::<ManagedCluster>::all(client.clone())
                .list(&Default::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            for mc in clusters {
                let cond = |t: &str| {
                    migration_api::common::find_condition(mc.conditions(), t)
                        .map_or("-".to_owned(), |c| c.status.clone())
                };
                let work = Api::<ManifestWork>::namespaced(client.clone(), &mc.name_any())
                    .get_opt(&format!("{}-klusterlet", mc.name_any()))
                    .await
                    .ok()
                    .flatten();
                let work = work.map_or("no klusterlet work".to_owned(), |w| {
                    let applied = w
                        .applied_condition()
                        .map(|c| (c.status.clone(), c.observed_generation));
                    format!(
                        "klusterlet work gen {:?} applied {applied:?} not-applied {:?}",
                        w.metadata.generation,
                        w.manifest_not_applied()
                    )
                });
                out.push_str(&format!(
                    "hub{} {} accepted={} joined={} available={} {work}\n",
                    i + 1,
                    mc.name_any(),
                    mc.spec.hub_accepts_client,
                    cond(migration_api::names::conditions::JOINED),
                    cond(migration_api::names::conditions::CLUSTER_AVAILABLE),
                ));
            }
        }
        out
    }

    /// Every cluster is accepted and Available on exactly one hub: `expected[cluster]`; and,
    /// no migration being in flight, no ManagedCluster on any hub carries the migrating taint.
    pub async fn invariant(&self, expected: &BTreeMap<String, usize>) {
        let limit = Duration::from_secs(30);
        let start = std::time::Instant::now();
        loop {
            let wrong = match self.fleet.cluster_homes().await {
                Ok(homes) => expected
                    .iter()
                    .filter(|(c, h)| homes.get(*c) != Some(&vec![**h]))
                    .map(|(c, h)| format!("{c}: want hub{h}, on {:?}", homes.get(c)))
                    .collect(),
                Err(e) => vec![format!("homes not read: {e}")],
            };
            if wrong.is_empty() {
                break;
            }
            if start.elapsed() > limit {
                panic!(
                    "timed out after {limit:?} waiting for every cluster Available on exactly its expected hub: {wrong:?}\n{}\n{}\n--- manager log (tail) ---\n{}",
                    self.fleet_view().await,
                    self.agent_logs(40),
                    tail(&self.logs(), 40),
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eventually(
            Duration::from_secs(30),
            "no ManagedCluster tainted as migrating",
            || async { self.migrating_taints().await.is_empty().then_some(()) },
        )
        .await;
    }

    /// From now on, until its faults are cleared, hub `hub` (1-based) answers every status
    /// write of a MigrationTask by the addon's agent with a 500 (the rule matches the
    /// resource, not the subresource); the hub's faults, to clear.
    pub fn fail_task_status_writes(&self, hub: usize) -> &kube_sim::Faults {
        let faults = self.fleet.hubs[hub - 1].cluster.api.faults();
        faults.add_error(kube_sim::ErrorRule {
            verb: Some("patch".into()),
            resource: Some("migrationtasks".into()),
            rate: 1.0,
            code: 500,
            user: Some(crate::AGENT_USER.into()),
        });
        faults
    }

    /// How many of the agent's MigrationTask writes hub `hub` (1-based) refused so far
    /// ([`Self::fail_task_status_writes`]).
    pub fn refused_task_status_writes(&self, hub: usize) -> u64 {
        self.fleet.hubs[hub - 1]
            .cluster
            .api
            .metrics()
            .answers_to(crate::AGENT_USER)
            .get(&("patch".into(), "migrationtasks".into(), 500))
            .copied()
            .unwrap_or(0)
    }

    /// [`Self::invariant`] once `clusters` moved to hub `hub` (1-based) and every other
    /// cluster stayed where it started.
    pub async fn moved_to<S: AsRef<str>>(&self, clusters: impl IntoIterator<Item = S>, hub: usize) {
        let mut expected = self.homes();
        for c in clusters {
            expected.insert(c.as_ref().to_owned(), hub);
        }
        self.invariant(&expected).await;
    }

    /// `hub<i>/<cluster>` of every ManagedCluster that carries the migrating taint.
    pub async fn migrating_taints(&self) -> Vec<String> {
        let mut tainted = Vec::new();
        for (i, hub) in self.fleet.hubs.iter().enumerate() {
            let Ok(list) = Api::<ManagedCluster>::all(hub.cluster.admin.clone())
                .list(&Default::default())
                .await
            else {
                tainted.push(format!("hub{}: not listed", i + 1));
                continue;
            };
            for mc in list {
                if mc
                    .spec
                    .taints
                    .iter()
                    .flatten()
                    .any(|t| t.key == migration_api::names::taints::MIGRATING)
                {
                    tainted.push(format!("hub{}/{}", i + 1, mc.name_any()));
                }
            }
        }
        tainted
    }

    /// Where each cluster of the fleet started.
    pub fn homes(&self) -> BTreeMap<String, usize> {
        self.fleet
            .clusters
            .iter()
            .map(|(h, c, _)| (c.name.clone(), h + 1))
            .collect()
    }
}

pub fn migration_api_version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

pub fn names(from: usize, to: usize) -> Vec<String> {
    (from..=to).map(|k| format!("cluster{k}")).collect()
}

pub fn json_list(v: &[String]) -> String {
    serde_json::to_string(v).unwrap()
}

/// Holds a cluster with the block-move annotation (`why` is its value).
pub fn block(hub: &Path, cluster: &str, why: &str) {
    kubectl_ok(
        hub,
        &[
            "annotate",
            "managedcluster",
            cluster,
            &format!("migration.open-cluster-management.io/block-move={why}"),
            "--overwrite",
        ],
        None,
    );
}

/// A hub's admin stops accepting a cluster (`hubAcceptsClient: false`).
pub fn refuse(hub: &Path, cluster: &str) {
    kubectl_ok(
        hub,
        &[
            "patch",
            "managedcluster",
            cluster,
            "--type=merge",
            "-p",
            r#"{"spec":{"hubAcceptsClient":false}}"#,
        ],
        None,
    );
}

/// Removes the block-move annotation from a cluster on a hub.
pub fn unblock(hub: &Path, cluster: &str) {
    kubectl_ok(
        hub,
        &[
            "annotate",
            "managedcluster",
            cluster,
            "migration.open-cluster-management.io/block-move-",
        ],
        None,
    );
}

pub async fn registered(s: &Setup, name: &str, n: i32) {
    eventually(
        Duration::from_secs(60),
        &format!("{name}: {n} registered"),
        || async {
            let m = s.migration(name).await?;
            (m.status?.clusters?.registered == n).then_some(())
        },
    )
    .await;
}

/// The pid of the addon agent the kubelet of `hub` runs.
pub fn agent_pid(s: &Setup, hub: &str) -> Option<u32> {
    let pods = s.dir.path().join("pods").join(hub);
    std::fs::read_dir(pods)
        .ok()?
        .flatten()
        .filter(|e| e.path().join("agent.log").is_file())
        .find_map(|e| {
            std::fs::read_to_string(e.path().join("pid"))
                .ok()?
                .trim()
                .parse()
                .ok()
        })
}

/// Kills the agent on `hub` (SIGKILL, as a node losing the pod would) and waits for the
/// kubelet to have started a new one.
pub async fn kill_agent(s: &Setup, hub: &str) {
    let old = agent_pid(s, hub).unwrap_or_else(|| panic!("no agent pid on {hub}"));
    let status = std::process::Command::new("kill")
        .args(["-9", &old.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -9 {old}");
    eventually(
        Duration::from_secs(30),
        &format!("a new agent on {hub}"),
        || async { agent_pid(s, hub).filter(|p| *p != old).map(|_| ()) },
    )
    .await;
}

pub fn cluster_api(s: &Setup, name: &str) -> Client {
    s.fleet
        .clusters
        .iter()
        .find(|(_, c, _)| c.name == name)
        .map(|(_, c, _)| c.admin.clone())
        .unwrap_or_else(|| panic!("no cluster {name}"))
}

/// A cluster's Klusterlet registration settings and its annotations.
pub async fn klusterlet_of(
    s: &Setup,
    cluster: &str,
) -> (serde_json::Value, BTreeMap<String, String>) {
    let k = Api::<Klusterlet>::all(cluster_api(s, cluster))
        .get("klusterlet")
        .await
        .unwrap();
    let v = serde_json::to_value(&k).unwrap();
    (
        v["spec"]["registrationConfiguration"].clone(),
        k.annotations().clone(),
    )
}

/// The server of a cluster's bootstrap kubeconfig, and whether migration `key`'s bootstrap
/// secret is still on the cluster.
pub async fn bootstrap_of(s: &Setup, cluster: &str, key: &str) -> (String, bool) {
    let secrets: Api<Secret> =
        Api::namespaced(cluster_api(s, cluster), "open-cluster-management-agent");
    let boot = secrets.get("bootstrap-hub-kubeconfig").await.unwrap();
    let text = String::from_utf8(boot.data.unwrap()["kubeconfig"].0.clone()).unwrap();
    let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
    let server = kc.clusters[0]
        .cluster
        .as_ref()
        .unwrap()
        .server
        .clone()
        .unwrap();
    // Any of the migration's bootstrap identities' secrets.
    let prefix = format!("{}-", migration_api::names::migration_bootstrap_secret(key));
    let migration_secret = secrets
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .any(|s| {
            s.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&prefix))
        });
    (server, migration_secret)
}

/// What migration `name` left behind, if anything (`None`: nothing): works labelled for a
/// migration on the global hub (hub1's and hub2's namespaces) and on either hub (plain OCM
/// klusterlet works), its ManagedServiceAccount, KlusterletConfigs on either hub (but the
/// admin's `global`), and ManagedClusters annotated by a migration or selecting a
/// KlusterletConfig. An API error
/// counts as something left (the caller polls or fails).
pub async fn leftovers(s: &Setup, name: &str) -> Option<String> {
    use kube::api::ListParams;
    use migration_api::ocm::cluster::ManagedCluster;
    use migration_api::ocm::config::KlusterletConfig;
    use migration_api::ocm::msa::ManagedServiceAccount;
    use migration_api::ocm::work::ManifestWork;
    let labelled = ListParams::default().labels("migration.open-cluster-management.io/migration");
    let names = |items: Vec<String>| (!items.is_empty()).then(|| items.join(", "));
    for hub in ["hub1", "hub2"] {
        let works = match Api::<ManifestWork>::namespaced(s.global.clone(), hub)
            .list(&labelled)
            .await
        {
            Ok(l) => l.items,
            Err(e) => return Some(format!("listing works in {hub}: {e}")),
        };
        if let Some(left) = names(works.iter().map(ResourceExt::name_any).collect()) {
            return Some(format!("works in {hub}: {left}"));
        }
    }
    let msas = match Api::<ManagedServiceAccount>::namespaced(s.global.clone(), "hub2")
        .list(&ListParams::default().labels(&format!(
            "migration.open-cluster-management.io/migration={name}"
        )))
        .await
    {
        Ok(l) => l.items,
        Err(e) => return Some(format!("listing ManagedServiceAccounts: {e}")),
    };
    if let Some(left) = names(msas.iter().map(ResourceExt::name_any).collect()) {
        return Some(format!("ManagedServiceAccounts: {left}"));
    }
    for i in [1, 2] {
        // A plain OCM hub serves no KlusterletConfig API at all.
        let kcs = match Api::<KlusterletConfig>::all(s.hub(i))
            .list(&ListParams::default())
            .await
        {
            Ok(l) => l.items,
            Err(kube::Error::Api(e)) if e.code == 404 => Vec::new(),
            Err(e) => return Some(format!("listing KlusterletConfigs on hub{i}: {e}")),
        };
        // `global` is the hub admin's own, never a migration's.
        let kcs = kcs
            .iter()
            .map(ResourceExt::name_any)
            .filter(|n| n != ocm_sim::import::GLOBAL_KLUSTERLET_CONFIG)
            .collect();
        if let Some(left) = names(kcs) {
            return Some(format!("KlusterletConfigs on hub{i}: {left}"));
        }
        // The klusterlet works of a plain OCM migration.
        let works = match Api::<ManifestWork>::all(s.hub(i)).list(&labelled).await {
            Ok(l) => l.items,
            Err(e) => return Some(format!("listing works on hub{i}: {e}")),
        };
        if let Some(left) = names(works.iter().map(ResourceExt::name_any).collect()) {
            return Some(format!("works on hub{i}: {left}"));
        }
        let clusters = match Api::<ManagedCluster>::all(s.hub(i))
            .list(&ListParams::default())
            .await
        {
            Ok(l) => l.items,
            Err(e) => return Some(format!("listing clusters on hub{i}: {e}")),
        };
        let marked = clusters.iter().filter(|mc| {
            mc.annotations().keys().any(|k| {
                k.starts_with("migration.open-cluster-management.io/")
                    || k == "agent.open-cluster-management.io/klusterlet-config"
            })
        });
        if let Some(left) = names(marked.map(ResourceExt::name_any).collect()) {
            return Some(format!("marked clusters on hub{i}: {left}"));
        }
    }
    None
}
