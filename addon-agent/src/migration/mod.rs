//! The hub's part of each migration: reconciles the MigrationTasks the manager delivers (inside
//! ManifestWorks) and reports per-cluster progress in their status, which the ManifestWork's
//! status feedback carries back to the global hub.
//!
//! - Source: validates its clusters and reports what each takes along; in Registering annotates
//!   them with the KlusterletConfig, reports each Ready once its klusterlet work carries the
//!   target's bootstrap kubeconfig, and sets `hubAcceptsClient: false` on the clusters the
//!   manager releases (a `block-move` annotation holds a cluster); on rollback restores them and
//!   waits until each is back (Available, lease renewed since); in Cleaning detaches the moved
//!   clusters.
//! - Target: checks no cluster of the same name exists; pre-creates each ManagedCluster with
//!   what was carried over; approves CSRs only from the migration's bootstrap identity and only
//!   for the expected clusters; reports each Joined and Available; on rollback denies pending
//!   CSRs and removes what it pre-created for clusters that did not arrive.
//!
//! Every reconcile recomputes from what the hub shows, so a restarted agent continues.
//!
//! Layout: this module holds the wiring (reflectors, the reconcile, status writing);
//! `validate` checks the clusters for either role, `source` and `target` carry out each role's
//! stages, `klusterlets` drives the klusterlet works of plain OCM migrations and releases the
//! works of clusters the hub lets go of, `configs` the KlusterletConfigs derived from the
//! clusters' own.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use migration_api::common::{condition_is_true, selector_matches};
use migration_api::migration::{
    BootstrapDelivery, CarriedAddOn, CarriedCluster, ClusterState, MAX_CARRY_OVER_PER_CLUSTER,
    MAX_CARRY_OVER_TOTAL, MAX_CARRY_OVER_WITH_OBJECTS, MigrationRole, MigrationTask,
    MigrationTaskStatus, TaskStage, split_carry_over,
};
use migration_api::names;
use migration_api::names::annotations::{
    BLOCK_MOVE, DISABLE_AUTO_IMPORT, KLUSTERLET_CONFIG, KLUSTERLET_DEPLOY_MODE, MIGRATING,
    OBJECTS_CARRIED, OBJECTS_RESUMED, ORIGINAL_KLUSTERLET_CONFIG, PRE_CREATED, RELEASED_AT,
};
use migration_api::names::condition_status::TRUE;
use migration_api::names::conditions::{CLUSTER_AVAILABLE, JOINED};
use migration_api::names::labels::{CLUSTER_NAME, CLUSTER_SET, KLUSTERLET_WORKS, LOCAL_CLUSTER};
use migration_api::ocm::addon::ManagedClusterAddOn;
use migration_api::ocm::agent::KlusterletAddonConfig;
use migration_api::ocm::cluster::{ManagedCluster, ManagedClusterSet};
use migration_api::ocm::work::ManifestWork;
use migration_api::runtime::{
    ApiError, StatusWrite, ctx_err, ignore_not_found, write_status_if_changed,
};
use migration_api::task_report::StageState;
use migration_api::tenancy;
use serde_json::{Value, json};

use crate::klusterlet_work::{self as kw, Registration, Step};
use crate::report::FIELD_MANAGER;
use crate::{admission, flight};

#[cfg(test)]
mod apply_tests;
mod carry;
mod configs;
mod csr_identities;
mod effects;
#[cfg(test)]
mod effects_tests;
mod klusterlets;
mod objects;
#[cfg(test)]
mod objects_tests;
mod own_writes;
mod pace;
mod restarts;
mod source;
mod target;
#[cfg(test)]
mod tests;
mod validate;

use carry::*;
use configs::*;
use effects::*;
use klusterlets::*;
use objects::*;
use source::*;
use target::*;
use validate::*;

/// When a rolled-back cluster's acceptance was restored on the source (RFC 3339): it is back
/// once its lease was renewed after this.
pub const RESTORED_AT: &str = "migration.open-cluster-management.io/restored-at";
const KLUSTERLET_CONFIG_CRD: &str = "klusterletconfigs.config.open-cluster-management.io";
/// The cluster lease the klusterlet renews in its namespace on the hub.
const CLUSTER_LEASE: &str = "managed-cluster-lease";

/// What the migration handler needs to know.
#[derive(Clone, Debug)]
pub struct Options {
    /// Namespace the agent runs in; the manager delivers its tasks there.
    pub namespace: String,
    pub metrics: crate::metrics::Metrics,
}

/// Clusters whose return to this hub is awaited: their lease renewals wake the handler.
type Awaited = Arc<std::sync::Mutex<BTreeSet<String>>>;

struct Ctx {
    client: Client,
    caches: Caches,
    metrics: crate::metrics::Metrics,
    /// The hub's KlusterletConfig shape ([`klusterlet_config_shape`]) and when it was read.
    shape: std::sync::Mutex<Option<(std::time::Instant, String)>>,
    /// The last carry-over decoded from parts, by digest (`carry`).
    carry_memo: std::sync::Mutex<Option<(String, Arc<Vec<CarriedCluster>>)>>,
    /// Tasks (by name) whose last reconcile had a write refused for a newer version of a
    /// cluster (a taint change, [`effects::with_taint`]): decided again soon, not at the next
    /// event (the change that caused the conflict may be one the caches do not wake on).
    again: std::sync::Mutex<BTreeSet<String>>,
    /// When this agent last wrote each task's status (by name), for [`pace`].
    written: std::sync::Mutex<BTreeMap<String, std::time::Instant>>,
    /// The task statuses (by task name) and cluster changes (by cluster name) this agent wrote
    /// that its caches may not show yet ([`own_writes`]).
    own_statuses: std::sync::Mutex<own_writes::OwnWrites<MigrationTaskStatus>>,
    own_cluster_writes: std::sync::Mutex<own_writes::OwnWrites<()>>,
    /// Per task and cluster: the lease renewal seen last before its settings were seen in
    /// place (`renewed_since_configured`).
    configured: std::sync::Mutex<BTreeMap<(String, String), Option<jiff::Timestamp>>>,
    /// The CSRs this agent approved, by name, and when: approved, whatever the cache shows.
    approved: std::sync::Mutex<BTreeMap<String, jiff::Timestamp>>,
    /// What each CSR in the cache requests, decoded once.
    csr_identities: csr_identities::CsrIdentities,
    /// Per target task (by name): when this agent saw each cluster released, as last decided
    /// ([`target::release_times`]); the task's status holds them durably, this copy covers a
    /// reconcile that reads the task before its own status write came back.
    released: std::sync::Mutex<BTreeMap<String, Vec<Option<jiff::Timestamp>>>>,
    /// Per target task (by name): the clusters whose carried addons this agent put in place,
    /// by name, with the uid of the ManagedCluster they went with (`effects::arrive` carries
    /// them once per cluster; a restarted agent carries them once more).
    addons_carried: std::sync::Mutex<BTreeMap<String, BTreeMap<String, String>>>,
    /// The tasks on the hub when the memories above were last pruned ([`forget_removed_tasks`]).
    tasks_seen: std::sync::Mutex<BTreeSet<String>>,
}

/// Drops the entries of `map` whose task (`task_of` its key) is in `removed`.
fn drop_removed<K: Ord, V>(
    map: &mut BTreeMap<K, V>,
    removed: &BTreeSet<String>,
    task_of: impl Fn(&K) -> &str,
) {
    map.retain(|k, _| !removed.contains(task_of(k)));
}

/// The tasks of `seen` not in `live`, which becomes what was seen.
fn removed_tasks(seen: &mut BTreeSet<String>, live: BTreeSet<String>) -> BTreeSet<String> {
    if *seen == live {
        return BTreeSet::new();
    }
    let removed = seen.difference(&live).cloned().collect();
    *seen = live;
    removed
}

/// Forgets what this agent remembers of tasks that left the hub (`live`: the tasks on it now;
/// gone are those that were on it at the last call). A task may go without a last reconcile
/// (nothing holds it: the work agent deletes it, and the controller never runs for an object
/// that is gone), and its entries, one per cluster of the migration in `configured`, would
/// otherwise stay for the agent's life, migration after migration. A task this watch has not
/// shown yet (the controller's may be ahead) keeps what it has.
fn forget_removed_tasks(ctx: &Ctx, live: BTreeSet<String>) {
    let Ok(removed) = ctx
        .tasks_seen
        .lock()
        .map(|mut seen| removed_tasks(&mut seen, live))
    else {
        return;
    };
    forget_tasks(ctx, &removed);
}

/// Drops what this agent remembers of the tasks named in `removed` (each memory kept by task).
fn forget_tasks(ctx: &Ctx, removed: &BTreeSet<String>) {
    if removed.is_empty() {
        return;
    }
    if let Ok(mut m) = ctx.written.lock() {
        drop_removed(&mut m, removed, String::as_str);
    }
    if let Ok(mut m) = ctx.released.lock() {
        drop_removed(&mut m, removed, String::as_str);
    }
    if let Ok(mut m) = ctx.configured.lock() {
        drop_removed(&mut m, removed, |(task, _)| task.as_str());
    }
    if let Ok(mut m) = ctx.addons_carried.lock() {
        drop_removed(&mut m, removed, String::as_str);
    }
    if let Ok(mut again) = ctx.again.lock() {
        again.retain(|t| !removed.contains(t));
    }
}

/// Forgets what this agent saw of the leases and works of clusters that left the hub: neither
/// their ManagedCluster nor their lease is in the caches any more. Run at each change of the
/// tasks, so that a migration's detached clusters go at the latest with the next migration's
/// first task event (or the tasks' removal at its end, if they are gone by then).
fn forget_departed_clusters(caches: &Caches) {
    restarts::forget_gone(&caches.lives, |cluster| {
        get(&caches.clusters, None, cluster).is_some()
            || get(&caches.leases, Some(cluster), CLUSTER_LEASE).is_some()
    });
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kube(#[from] ApiError),
    /// The hub or the task lacks something the handler needs.
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Panicked(#[from] migration_api::runtime::Panicked),
}

/// The agent's caches of its hub, each change that matters to a task sent to `trigger`.
struct Caches {
    clusters: Store<ManagedCluster>,
    /// The import controller's klusterlet works (labelled [`KLUSTERLET_WORKS`]), each
    /// slimmed to what the agent reads of it ([`slim_import_work`]).
    import_works: Store<ManifestWork>,
    /// The migrations' own klusterlet works (plain OCM; labelled managed-by).
    own_works: Store<ManifestWork>,
    /// Every ManifestWork of the hub, its metadata alone ([`release_works`] clears what is left
    /// in a cluster's namespace): a hub's works hold whole manifests, addons' included, which
    /// on a hub of thousands of clusters would not fit in the agent.
    work_metas: Store<PartialObjectMeta<ManifestWork>>,
    leases: Store<Lease>,
    awaited: Awaited,
    /// Per cluster, its lease's last renewals and its import work's last spec change, with
    /// when this agent saw them ([`restarts`]).
    lives: restarts::Seen,
    csrs: Store<CertificateSigningRequest>,
    /// The KlusterletConfigs migrations render and derive (labelled managed-by).
    bootstrap_configs: Store<migration_api::ocm::config::KlusterletConfig>,
    /// The Secrets migrations deliver to the agent's namespace (labelled managed-by): plain
    /// OCM's bootstrap Secrets, and the parts of carry-overs (`carry`).
    secrets: Store<Secret>,
}

fn spawn_caches(
    client: &Client,
    namespace: &str,
    trigger: futures::channel::mpsc::UnboundedSender<()>,
) -> Caches {
    let clusters = spawn_reflector(
        Api::<ManagedCluster>::all(client.clone()),
        watcher::Config::default(),
        trigger.clone(),
        |mc: &ManagedCluster| Some(cluster_fingerprint(mc)),
    );
    // Only klusterlet works matter, and only when their spec or Applied state changes (work
    // status is rewritten often): the import controller's, which it labels (stolostron/
    // managedcluster-import-controller `pkg/constants/constants.go`, `KlusterletWorksLabel`,
    // set on both of a cluster's works since 2022), slimmed as they arrive; and the
    // migrations' own.
    let lives = restarts::Seen::default();
    let changes = lives.clone();
    let import_works = spawn_reflector_with(
        Api::<ManifestWork>::all(client.clone()),
        watcher::Config::default().labels(&format!("{KLUSTERLET_WORKS}=true")),
        slim_import_work,
        trigger.clone(),
        move |w: &ManifestWork| {
            let print = klusterlet_work_fingerprint(w);
            if let (Some(_), Some(ns), Some(generation)) =
                (&print, w.namespace(), w.metadata.generation)
            {
                restarts::record(&changes, &ns, |l| {
                    l.work_generation(generation, std::time::Instant::now())
                });
            }
            print
        },
    );
    let managed = format!(
        "{}={}",
        names::labels::MANAGED_BY,
        names::labels::MANAGED_BY_VALUE
    );
    let own_works = spawn_reflector(
        Api::<ManifestWork>::all(client.clone()),
        watcher::Config::default().labels(&managed),
        trigger.clone(),
        klusterlet_work_fingerprint,
    );
    // The rest is only ever cleared away, from the namespace of a cluster that goes: its
    // metadata suffices, and only what keeps such a cluster from going wakes the handler.
    let going = clusters.clone();
    let work_metas = spawn_reflector_with(
        Api::<PartialObjectMeta<ManifestWork>>::all(client.clone()),
        watcher::Config::default(),
        |w: &mut PartialObjectMeta<ManifestWork>| w.metadata.managed_fields = None,
        trigger.clone(),
        move |w: &PartialObjectMeta<ManifestWork>| {
            let ns = w.metadata.namespace.as_deref()?;
            work_meta_fingerprint(&w.metadata, get(&going, None, ns).as_deref())
        },
    );
    // A cluster taken back is back once its lease is renewed: renewals of the clusters
    // awaited wake the handler (the others' are only cached).
    // Every cluster's renewals are recorded (`restarts`).
    let awaited: Awaited = Arc::default();
    let watching = awaited.clone();
    let renewals = lives.clone();
    let leases = spawn_reflector(
        Api::<Lease>::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={CLUSTER_LEASE}")),
        trigger.clone(),
        move |l: &Lease| {
            let ns = l.namespace().unwrap_or_default();
            let renewed = l.spec.as_ref().and_then(|s| s.renew_time.as_ref());
            if let Some(t) = renewed {
                restarts::record(&renewals, &ns, |r| {
                    r.renewed(t.0, std::time::Instant::now())
                });
            }
            let awaited = watching.lock().is_ok_and(|a| a.contains(&ns));
            awaited.then(|| format!("{renewed:?}"))
        },
    );
    // The migrations' bootstrap objects arrive in a ManifestWork of their own, maybe after the
    // task: their arrival (and removal) wakes the handler. KlusterletConfigs (not served by a
    // plain OCM hub: that watch just retries) and, for plain OCM, the bootstrap Secrets in
    // the agent's namespace.
    let bootstrap_configs = spawn_reflector(
        Api::<migration_api::ocm::config::KlusterletConfig>::all(client.clone()),
        watcher::Config::default().labels(&managed),
        trigger.clone(),
        |_| Some(String::new()),
    );
    // A part changes when its digest does; a bootstrap Secret matters when it comes or goes.
    let secrets = spawn_reflector(
        Api::<Secret>::namespaced(client.clone(), namespace),
        watcher::Config::default().labels(&managed),
        trigger.clone(),
        |s: &Secret| {
            Some(
                s.data
                    .as_ref()
                    .and_then(|d| d.get(migration_api::migration::CARRY_OVER_DIGEST_KEY))
                    .map(|v| String::from_utf8_lossy(&v.0).into_owned())
                    .unwrap_or_default(),
            )
        },
    );
    let csrs = spawn_reflector(
        Api::<CertificateSigningRequest>::all(client.clone()),
        watcher::Config::default(),
        trigger,
        |c: &CertificateSigningRequest| {
            Some(format!(
                "{:?}",
                c.status
                    .as_ref()
                    .map(|s| (&s.conditions, s.certificate.is_some()))
            ))
        },
    );
    Caches {
        clusters,
        import_works,
        own_works,
        work_metas,
        leases,
        awaited,
        lives,
        csrs,
        bootstrap_configs,
        secrets,
    }
}

/// What of a ManagedCluster the handler decides on, so a change of it (and only of it: the
/// registration agent rewrites status often) wakes the handler: its identity (a re-created
/// cluster is a new one), its deletion (`let_go`, the rollback), labels (a selector, tenancy,
/// the carry-over), annotations, spec and conditions.
fn cluster_fingerprint(mc: &ManagedCluster) -> String {
    let m = &mc.metadata;
    serde_json::to_string(&(
        &m.uid,
        &m.deletion_timestamp,
        &m.labels,
        &m.annotations,
        &mc.spec,
        mc.conditions(),
    ))
    .unwrap_or_default()
}

/// What of a klusterlet work (the import controller's `<cluster>-klusterlet`, or a migration's
/// own) the handler decides on: its generation, Applied state, probe and deletion (work status
/// is rewritten often). Other works (the import's CRDs) wake no one.
fn klusterlet_work_fingerprint(w: &ManifestWork) -> Option<String> {
    w.name_any().ends_with("-klusterlet").then(|| {
        let applied = w
            .applied_condition()
            .map(|c| (c.status.clone(), c.observed_generation));
        format!(
            "{:?}/{applied:?}/{}/{}",
            w.metadata.generation,
            kw::probed(w).is_some(),
            w.metadata.deletion_timestamp.is_some()
        )
    })
}

/// What of a work's metadata wakes the handler: only for a work in the namespace of a cluster
/// that is going (`cluster`: its ManagedCluster, deleting, or none left), whose deletion waits
/// for every work there ([`release_works`] clears them), whether it is being deleted and the
/// finalizers that hold it. Works of the clusters that stay (their status, their churn) wake
/// no one.
fn work_meta_fingerprint(work: &ObjectMeta, cluster: Option<&ManagedCluster>) -> Option<String> {
    cluster
        .is_none_or(|mc| mc.metadata.deletion_timestamp.is_some())
        .then(|| {
            format!(
                "{}/{:?}",
                work.deletion_timestamp.is_some(),
                work.finalizers
            )
        })
}

/// An import work as the agent keeps it: each manifest's identity (apiVersion, kind, name,
/// namespace) without its body, no managed fields, no per-manifest status. What the agent
/// reads of it ([`ManifestWork::applied_with`]: the Applied condition, the manifests' kinds
/// and names) stays; the rest (the klusterlet's Deployment, RBAC, CRDs, secrets with
/// tokens and image pull credentials) was most of its size, and secrets besides.
fn slim_import_work(w: &mut ManifestWork) {
    w.metadata.managed_fields = None;
    if let Some(manifests) = w.spec.workload.as_mut().and_then(|t| t.manifests.as_mut()) {
        for m in manifests.iter_mut() {
            // Only the fields the manifest has: none is written as null.
            let pick = |from: Option<&serde_json::Value>, keys: &[&str]| {
                let mut out = serde_json::Map::new();
                for k in keys {
                    if let Some(v) = from.and_then(|f| f.get(*k)) {
                        out.insert((*k).to_owned(), v.clone());
                    }
                }
                out
            };
            let mut identity = pick(Some(&*m), &["apiVersion", "kind"]);
            identity.insert(
                "metadata".to_owned(),
                pick(m.get("metadata"), &["name", "namespace"]).into(),
            );
            let identity = serde_json::Value::Object(identity);
            *m = identity;
        }
    }
    if let Some(status) = w.status.as_mut() {
        status.resource_status = None;
    }
}

/// Runs the handler until aborted.
pub async fn run(client: Client, opts: Options) {
    let (trigger_tx, trigger_rx) = futures::channel::mpsc::unbounded::<()>();
    let caches = spawn_caches(&client, &opts.namespace, trigger_tx);
    for (what, ready) in [
        ("ManagedClusters", caches.clusters.wait_until_ready().await),
        (
            "import ManifestWorks",
            caches.import_works.wait_until_ready().await,
        ),
        (
            "own ManifestWorks",
            caches.own_works.wait_until_ready().await,
        ),
        (
            "ManifestWorks' metadata",
            caches.work_metas.wait_until_ready().await,
        ),
        ("CSRs", caches.csrs.wait_until_ready().await),
        ("Leases", caches.leases.wait_until_ready().await),
    ] {
        if ready.is_err() {
            tracing::warn!(%what, "cache never became ready; migration handler not started");
            return;
        }
    }
    let tasks: Api<MigrationTask> = Api::namespaced(client.clone(), &opts.namespace);
    let metrics = opts.metrics.clone();
    let ctx = Arc::new(Ctx {
        client,
        caches,
        metrics: opts.metrics,
        shape: std::sync::Mutex::default(),
        carry_memo: std::sync::Mutex::default(),
        again: std::sync::Mutex::default(),
        written: std::sync::Mutex::default(),
        own_statuses: std::sync::Mutex::default(),
        own_cluster_writes: std::sync::Mutex::default(),
        configured: std::sync::Mutex::default(),
        approved: std::sync::Mutex::default(),
        csr_identities: csr_identities::CsrIdentities::default(),
        released: std::sync::Mutex::default(),
        addons_carried: std::sync::Mutex::default(),
        tasks_seen: std::sync::Mutex::default(),
    });
    // The cluster gauge, and the agent's memories of each task, follow every change of the
    // tasks, their removal included (a removed task is never reconciled).
    let (counted, writer) = reflector::store::<MigrationTask>();
    let forgetting = ctx.clone();
    tokio::spawn(
        watcher(tasks.clone(), watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .for_each(move |_| {
                let state = counted.state();
                metrics.tasks_seen(state.iter().map(|t| &**t));
                forget_removed_tasks(&forgetting, state.iter().map(|t| t.name_any()).collect());
                forget_departed_clusters(&forgetting.caches);
                futures::future::ready(())
            }),
    );
    let controller = migration_api::runtime::controller(tasks, watcher::Config::default());
    controller
        .reconcile_all_on(trigger_rx)
        .run(
            reconcile,
            |task, e: &Error, _| {
                if let Error::Panicked(_) = e {
                    tracing::error!(task = %task.name_any(), error = %e, "migration task reconcile panicked");
                    return Action::requeue(migration_api::runtime::PANIC_RETRY);
                }
                tracing::info!(task = %task.name_any(), error = %e, "migration task reconcile failed; retrying");
                Action::requeue(Duration::from_secs(2))
            },
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

/// What a reflector of the agent can cache.
use migration_api::runtime::Watched as Cached;

/// Mirrors `api` into a store and triggers the controller when an object appears, goes, or its
/// `fingerprint` (what the handler cares about; `None`: never) changes.
fn spawn_reflector<K, F>(
    api: Api<K>,
    config: watcher::Config,
    trigger: futures::channel::mpsc::UnboundedSender<()>,
    fingerprint: F,
) -> Store<K>
where
    K: Cached,
    F: Fn(&K) -> Option<String> + Send + 'static,
{
    spawn_reflector_with(api, config, |_: &mut K| {}, trigger, fingerprint)
}

/// [`spawn_reflector`], each object passed through `modify` before it is stored (what the
/// handler never reads need not stay in memory).
fn spawn_reflector_with<K, M, F>(
    api: Api<K>,
    config: watcher::Config,
    modify: M,
    trigger: futures::channel::mpsc::UnboundedSender<()>,
    fingerprint: F,
) -> Store<K>
where
    K: Cached,
    M: FnMut(&mut K) + Send + 'static,
    F: Fn(&K) -> Option<String> + Send + 'static,
{
    let (store, writer) = reflector::store();
    let stream =
        reflector::reflector(writer, watcher(api, config).modify(modify)).default_backoff();
    tokio::spawn(async move {
        let mut prints = Fingerprints::default();
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            let changed = ev.is_ok_and(|ev| prints.changed(&ev, &fingerprint));
            if changed && trigger.unbounded_send(()).is_err() {
                return;
            }
        }
    });
    store
}

/// The fingerprint last seen of each object a reflector shows, to tell the changes that matter
/// from the rest. An object gone while the watch was down (a re-list shows what is left, with
/// no event for what went) is forgotten when that re-list ends, so that the map holds what
/// the hub holds, not every object it ever held.
#[derive(Debug, Default)]
struct Fingerprints {
    seen: std::collections::HashMap<String, String>,
    /// The objects a re-list under way has shown so far.
    relisted: Option<std::collections::HashSet<String>>,
}

impl Fingerprints {
    /// Whether `ev` is a change the handler is to be woken for: an object that matters
    /// (`fingerprint` not `None`) appears, changes what matters or goes, or a re-list ends.
    fn changed<K: kube::Resource>(
        &mut self,
        ev: &watcher::Event<K>,
        fingerprint: impl Fn(&K) -> Option<String>,
    ) -> bool {
        let key = |o: &K| format!("{:?}/{}", o.meta().namespace, o.name_any());
        match ev {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                let key = key(o);
                if let (watcher::Event::InitApply(_), Some(relisted)) = (ev, &mut self.relisted) {
                    relisted.insert(key.clone());
                }
                let Some(print) = fingerprint(o) else {
                    return false;
                };
                self.seen.insert(key, print.clone()).as_ref() != Some(&print)
            }
            watcher::Event::Delete(o) => {
                self.seen.remove(&key(o));
                fingerprint(o).is_some()
            }
            watcher::Event::Init => {
                self.relisted = Some(Default::default());
                false
            }
            watcher::Event::InitDone => {
                if let Some(relisted) = self.relisted.take() {
                    self.seen.retain(|k, _| relisted.contains(k));
                }
                true
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.seen.len()
    }
}

fn get<K: kube::Resource<DynamicType = ()> + Clone>(
    store: &Store<K>,
    ns: Option<&str>,
    name: &str,
) -> Option<Arc<K>> {
    let r = match ns {
        Some(ns) => reflector::ObjectRef::new(name).within(ns),
        None => reflector::ObjectRef::new(name),
    };
    store.get(&r)
}

fn available(mc: &ManagedCluster) -> bool {
    condition_is_true(mc.conditions(), CLUSTER_AVAILABLE)
}

/// The clusters a task concerns: its list, or (validating a selector) the source's clusters
/// that match, sorted, the hub's own cluster left out.
fn cluster_list(task: &MigrationTask, clusters: &Store<ManagedCluster>) -> Vec<String> {
    if !task.spec.clusters.is_empty() {
        return task.spec.clusters.clone();
    }
    let Some(sel) = task.spec.cluster_selector.as_ref() else {
        return Vec::new();
    };
    let mut names: Vec<String> = clusters
        .state()
        .iter()
        .filter(|mc| mc.labels().get(LOCAL_CLUSTER).map(String::as_str) != Some("true"))
        .filter(|mc| selector_matches(sel, mc.labels()))
        .map(|mc| mc.name_any())
        .collect();
    names.sort();
    names
}

/// What the agent found, for the task's status.
#[derive(Debug, Default)]
struct Report {
    states: Vec<ClusterState>,
    state: StageState,
    message: String,
    /// The carry-over records, as one JSON array.
    carry_over: Option<String>,
    /// Or where its parts are.
    carry_parts: Option<migration_api::migration::CarryOverParts>,
    shape: Option<String>,
    /// Why the stage is refused as a whole (a reason name).
    refusal: Option<&'static str>,
    /// Target: when each cluster was seen released (kept as the status has them when `None`).
    release_times: Option<migration_api::migration::ReleaseTimes>,
}

async fn reconcile(task: Arc<MigrationTask>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    use tracing::Instrument;
    // Every line logged for a task names its migration.
    let span = tracing::info_span!(
        "reconcile",
        migration = %format!(
            "{}/{}",
            task.spec.migration_namespace.as_deref().unwrap_or_default(),
            task.spec.migration
        ),
        role = task.spec.role.as_str(),
    );
    migration_api::runtime::unwinding(reconcile_task(task, ctx).instrument(span)).await
}

async fn reconcile_task(task: Arc<MigrationTask>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if task.metadata.deletion_timestamp.is_some() {
        forget_tasks(&ctx, &BTreeSet::from([task.name_any()]));
        return Ok(Action::await_change());
    }
    // Validation answers a revision once. Its verdict is final (the manager fails a migration
    // it refuses, and moves the task on from one it passes, a new revision), so running it
    // again at every event here (the clusters' status, their leases) while the manager asks
    // the other hub would list this hub's addons, KlusterletAddonConfigs and carried kinds
    // again for nothing.
    if task.spec.stage == TaskStage::Validating
        && validated_already(&task, own_status(&ctx, &task, std::time::Instant::now()))
    {
        return Ok(Action::requeue(Duration::from_secs(60)));
    }
    let mut names = cluster_list(&task, &ctx.caches.clusters);
    // A Placement's decisions are read while validating (and recorded by the manager).
    if let (Some(placement), MigrationRole::Source, TaskStage::Validating) = (
        task.spec.cluster_placement.as_deref(),
        task.spec.role,
        task.spec.stage,
    ) {
        let ns = task
            .spec
            .migration_namespace
            .as_deref()
            .unwrap_or("default");
        match placement_decisions(&ctx, ns, placement).await? {
            Ok(chosen) => names = chosen,
            Err(why) => {
                let report = Report {
                    state: StageState::Failed,
                    message: why,
                    refusal: Some(names::reasons::PLACEMENT_NOT_FOUND),
                    ..Default::default()
                };
                write_status(&ctx, &task, &[], report).await?;
                return Ok(Action::requeue(Duration::from_secs(60)));
            }
        }
    }
    // The kinds the clusters carry over: both hubs must serve them, or nothing is touched.
    let mut kinds = Vec::new();
    if task.spec.stage == TaskStage::Validating
        && let Some(wanted) = task.spec.carry_kinds.as_deref()
    {
        match migration_api::discovery::served(&ctx.client, wanted)
            .await
            .map_err(ctx_err("discovering the kinds to carry over"))?
        {
            Ok(found) => kinds = wanted.iter().cloned().zip(found).collect(),
            Err(why) => {
                let report = Report {
                    state: StageState::Failed,
                    message: format!("carryOver: {why} on this hub"),
                    refusal: Some(names::reasons::CARRY_OVER_NOT_SERVED),
                    ..Default::default()
                };
                write_status(&ctx, &task, &[], report).await?;
                return Ok(Action::requeue(Duration::from_secs(60)));
            }
        }
    }
    // A target that pre-creates clusters from a carry-over in parts waits for all of them;
    // and it looks each cluster's record up in them, sorted by name (`target::carried`).
    let task = match (task.spec.role, task.spec.stage) {
        (MigrationRole::Target, TaskStage::Deploying | TaskStage::Registering) => {
            let Some(records) = target_records(&ctx, &task)? else {
                let parts = task.spec.carry_over_parts.as_ref().map_or(0, |p| p.count);
                tracing::info!(parts, "waiting for the carry-over's parts");
                return Ok(Action::requeue(Duration::from_secs(60)));
            };
            let mut whole = (*task).clone();
            whole.spec.carry_over = Some((*records).clone());
            Arc::new(whole)
        }
        _ => task,
    };
    let report = match (task.spec.role, task.spec.stage) {
        (MigrationRole::Source, TaskStage::Validating) => {
            source_validate(&ctx, &task, &names, &kinds).await?
        }
        (MigrationRole::Target, TaskStage::Validating) => {
            target_validate(&ctx, &task, &names).await?
        }
        (MigrationRole::Source, TaskStage::Deploying) => source_deploy(&ctx, &task, &names).await?,
        (MigrationRole::Source, TaskStage::Registering) => {
            source_register(&ctx, &task, &names).await?
        }
        (MigrationRole::Target, TaskStage::Deploying | TaskStage::Registering) => {
            target_register(&ctx, &task, &names).await?
        }
        (MigrationRole::Source, TaskStage::Rollbacking) => {
            source_rollback(&ctx, &task, &names).await?
        }
        (MigrationRole::Target, TaskStage::Rollbacking) => {
            target_rollback(&ctx, &task, &names).await?
        }
        (MigrationRole::Source, TaskStage::Cleaning) => source_clean(&ctx, &task, &names).await?,
        (MigrationRole::Target, TaskStage::Cleaning) => target_clean(&ctx, &task, &names).await?,
    };
    let deferred = write_status(&ctx, &task, &names, report).await?;
    let again = ctx
        .again
        .lock()
        .is_ok_and(|mut a| a.remove(&task.name_any()));
    let soon = [again.then_some(Duration::from_millis(500)), deferred]
        .into_iter()
        .flatten()
        .min();
    if let Some(after) = soon {
        return Ok(Action::requeue(after));
    }
    // Everything the task waits for is watched; the requeue only bounds how stale a report
    // can get if an event is ever missed.
    Ok(Action::requeue(Duration::from_secs(60)))
}

fn summary(names: &[String], states: &[ClusterState]) -> String {
    let failed: Vec<String> = names
        .iter()
        .zip(states)
        .filter_map(|(n, s)| s.failure().map(|(_, why)| format!("{n} {why}")))
        .take(5)
        .collect();
    if failed.is_empty() {
        String::new()
    } else {
        let total = states.iter().filter(|s| s.failure().is_some()).count();
        let more = if total > failed.len() {
            format!(" (and {} more)", total - failed.len())
        } else {
            String::new()
        };
        format!(
            "{total} of {} clusters cannot move: {}{more}",
            names.len(),
            failed.join("; ")
        )
    }
}

fn verdict(names: &[String], states: Vec<ClusterState>) -> Report {
    let message = summary(names, &states);
    Report {
        state: if message.is_empty() {
            StageState::Succeeded
        } else {
            StageState::Failed
        },
        message: if message.is_empty() {
            format!("{} clusters checked", names.len())
        } else {
            message
        },
        states,
        ..Default::default()
    }
}

/// Merge-patches a ManagedCluster when `patch` would change it; returns its resourceVersion
/// after the patch (`None`: the cluster is gone).
async fn patch_cluster(ctx: &Ctx, name: &str, patch: Value) -> Result<Option<String>, Error> {
    Ok(
        match patch_cluster_unless(ctx, name, Patch::Merge(patch), &[404]).await? {
            Patched::Applied(rv) => rv,
            Patched::Refused(_) => None,
        },
    )
}

/// What a patch of a ManagedCluster did.
#[derive(Debug)]
enum Patched {
    /// It applied: the cluster's resourceVersion after it.
    Applied(Option<String>),
    /// The hub answered with this (tolerated) status code: the patch did not apply.
    Refused(u16),
}

/// Patches ManagedCluster `name`; an answer with a status code in `tolerated` is no error
/// ([`Patched::Refused`]).
async fn patch_cluster_unless(
    ctx: &Ctx,
    name: &str,
    patch: Patch<Value>,
    tolerated: &[u16],
) -> Result<Patched, Error> {
    let api: Api<ManagedCluster> = Api::all(ctx.client.clone());
    match api.patch(name, &patch_params(), &patch).await {
        Ok(mc) => Ok(Patched::Applied(mc.resource_version())),
        Err(kube::Error::Api(s)) if tolerated.contains(&s.code) => Ok(Patched::Refused(s.code)),
        Err(e) => Err(ctx_err(format!("updating ManagedCluster {name}"))(e).into()),
    }
}

/// Merge and JSON patches carry the agent's field manager (and no `force`).
fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// Whether the task's clusters get the bootstrap kubeconfig through a ManifestWork each
/// (plain OCM) rather than a KlusterletConfig.
fn plain(task: &MigrationTask) -> bool {
    task.spec.delivery == Some(BootstrapDelivery::ManifestWork)
}

/// Whether the source hub serves the older KlusterletConfig shape (target alone).
fn legacy(task: &MigrationTask) -> bool {
    task.spec.delivery == Some(BootstrapDelivery::LegacyKlusterletConfig)
}

/// Whether annotation `key` of a ManagedCluster names this task's migration (its key).
fn marked(mc: &ManagedCluster, key: &str, task: &MigrationTask) -> bool {
    mc.annotations().get(key).map(String::as_str) == Some(task.spec.key())
}

/// Whether a cluster still carries this migration's annotations.
fn restore_needed(mc: &ManagedCluster, task: &MigrationTask) -> bool {
    marked(mc, MIGRATING, task)
        || mc.annotations().contains_key(ORIGINAL_KLUSTERLET_CONFIG)
        || mc
            .annotations()
            .get(KLUSTERLET_CONFIG)
            .is_some_and(|k| ours(task, k))
}

/// This agent's last write of the task's status, while the cache's copy of the task is older
/// than that write ([`own_writes`]); `None`: the copy's own status stands.
fn own_status(
    ctx: &Ctx,
    task: &MigrationTask,
    now: std::time::Instant,
) -> Option<MigrationTaskStatus> {
    let rv = task.resource_version()?;
    let mut own = ctx.own_statuses.lock().ok()?;
    own.ahead_of(&task.name_any(), task.uid().as_deref(), &rv, now)
        .cloned()
}

/// Whether the task's status (`own`: this agent's last write of it, if the cache is behind it)
/// reports on this revision's `stage` with one of `states`.
pub(super) fn reported(
    task: &MigrationTask,
    own: Option<MigrationTaskStatus>,
    stage: TaskStage,
    states: &[StageState],
) -> bool {
    own.as_ref().or(task.status.as_ref()).is_some_and(|s| {
        s.observed_stage == Some(stage)
            && s.observed_revision == task.spec.revision
            && s.stage_state.is_some_and(|st| states.contains(&st))
    })
}

/// Writes the task's report as its status when it is due ([`pace::due`]); returns when to
/// look again if it was deferred.
async fn write_status(
    ctx: &Ctx,
    task: &MigrationTask,
    names: &[String],
    report: Report,
) -> Result<Option<Duration>, Error> {
    let name = task.name_any();
    let now = std::time::Instant::now();
    // The status as it stands: this agent's last write of it while the cache is behind that.
    let own = own_status(ctx, task, now);
    let current = own.as_ref().or(task.status.as_ref());
    let failures = ClusterState::failures(names, &report.states);
    let status = MigrationTaskStatus {
        observed_stage: Some(task.spec.stage),
        observed_revision: task.spec.revision.clone(),
        observed_generation: task.metadata.generation,
        stage_state: Some(report.state),
        message: Some(report.message),
        cluster_states: Some(ClusterState::encode(&report.states)),
        clusters: Some(ClusterState::counts(&report.states)),
        failures: Some(failures),
        carry_over_json: report.carry_over,
        carry_over_parts: report.carry_parts,
        klusterlet_config_shape: report.shape,
        refusal: report.refusal.map(str::to_owned),
        release_times: report
            .release_times
            .or_else(|| current.and_then(|s| s.release_times.clone())),
    };
    let since_last = ctx
        .written
        .lock()
        .ok()
        .and_then(|w| w.get(&name).map(std::time::Instant::elapsed));
    match pace::due(current, &status, since_last) {
        pace::Due::Unchanged => return Ok(None),
        pace::Due::After(after) => return Ok(Some(after)),
        pace::Due::Now => {}
    }
    let api: Api<MigrationTask> =
        Api::namespaced(ctx.client.clone(), &task.namespace().unwrap_or_default());
    let wrote = write_status_if_changed(&api, &name, None, current, &status)
        .await
        .map_err(ctx_err(format!(
            "writing the status of MigrationTask {name}"
        )))?;
    tracing::debug!(task = %name, stage = ?task.spec.stage, state = ?status.stage_state, message = ?status.message, "task status written");
    if let Ok(mut written) = ctx.written.lock() {
        pace::record(&mut written, name.clone(), now);
    }
    if let StatusWrite::Written(Some(wrote)) = &wrote
        && let Some(read) = task.resource_version()
        && let Ok(mut own) = ctx.own_statuses.lock()
    {
        own.record(&name, task.uid().as_deref(), (&read, wrote), status, now);
    }
    Ok(None)
}
