//! The work agent of one managed cluster: applies the ManifestWorks in its cluster namespace on
//! the hub into the cluster (strategies Update, CreateOnly, ServerSideApply, ReadOnly), keeps an
//! AppliedManifestWork, reports per-manifest conditions and status feedback (WellKnownStatus,
//! JSONPaths), and on deletion removes what it applied per the deleteOption (Foreground, Orphan,
//! SelectivelyOrphan) before it removes the work's finalizer.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalize, finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use migration_api::common::{Condition, set_condition};
use migration_api::names::finalizers::MANIFEST_WORK_CLEANUP;
use migration_api::ocm::work::{
    AppliedManifestWork, DeletePropagationPolicy, FeedbackScrapeType, FeedbackType,
    ManifestCondition, ManifestConfigOption, ManifestWork, ManifestWorkStatus, UpdateStrategyType,
};
use serde_json::{Value, json};

use crate::Error;
use kube_sim::throttle::{Clientsets, Limits};

/// Settings of a work agent.
#[derive(Clone, Debug)]
pub struct WorkAgentOptions {
    pub cluster_name: String,
    /// How often applied resources are re-read for status feedback.
    pub status_sync_interval: Duration,
    /// The connections of the klusterlet agent's process (registration, work and addon
    /// agents share them, as the singleton klusterlet agent does).
    pub transports: kube_sim::client::Transports,
    /// The work agent's `RawFeedbackJsonString` feature gate (alpha upstream, off by
    /// default): only with it are lists and objects returned as `JsonRaw` feedback.
    pub raw_feedback_json: bool,
    /// The hub the process is connected to (set by its registration agent).
    pub connection: tokio::sync::watch::Receiver<Option<crate::klusterlet::Connected>>,
    /// The lives whose context the registration agent cancelled ([`crate::klusterlet::Cancels`]).
    pub cancels: tokio::sync::watch::Receiver<u64>,
    /// How long an AppliedManifestWork of a work that is gone (or of another hub) is kept
    /// before it is evicted with what it alone owns (upstream default 60 minutes; the
    /// Klusterlet's `workConfiguration.appliedManifestWorkEvictionGracePeriod`).
    pub eviction_grace: Duration,
}

/// Upstream's `--workload-agent-workers` default.
const WORKERS: u16 = 10;

/// Events of the works' one watch held for its two controllers until both have taken them.
const WATCH_BUFFER: usize = 256;

struct Ctx {
    hub: Client,
    managed: Client,
    cluster: String,
    hub_hash: String,
    resync: Duration,
    raw_feedback_json: bool,
    /// What the Update strategy last wrote, per object: the manifest's hash and the
    /// resourceVersion it left.
    applied: AppliedCache,
    /// The kinds found by discovery, kept as upstream's work agent keeps them: it maps
    /// kinds with controller-runtime's lazy `apiutil.NewDynamicRESTMapper`
    /// (ocm pkg/work/spoke/spokeagent.go), which discovers a group version once and asks
    /// again only for a kind it does not know. A kind not served is not remembered, so a
    /// CRD installed later is found on the next try.
    kinds: KindCache,
    /// The cluster's AppliedManifestWorks as a watch keeps them: upstream's controllers read
    /// them from their informer's lister (ocm pkg/work/spoke/controllers/manifestcontroller/
    /// manifestwork_controller.go `appliedManifestWorkLister`, and the evictor in
    /// finalizercontroller/unmanaged_appliedmanifestwork_controller.go), not with a request.
    amws: Store<AppliedManifestWork>,
    /// The watches of manifests whose feedback is watched, not polled.
    feedback: crate::feedback_watch::FeedbackWatches,
    /// The last apply of each work, complete or failed: what it applied and when it applies
    /// again.
    works_applied: std::sync::Mutex<std::collections::HashMap<String, LastApply>>,
    /// Per deleted work, how many looks in a row found its resources still going
    /// ([`finalize_backoff`]).
    finalize_looks: std::sync::Mutex<std::collections::HashMap<String, u32>>,
    /// The apply controller's retries of failed reconciles.
    apply_retries: crate::backoff::Retries,
    /// The status controller's retries of failed syncs (a status write that conflicted).
    status_retries: crate::backoff::Retries,
    /// The works as the controllers' one watch has them: a status sync under way yields to
    /// the apply or the cleanup of a work that changed meanwhile ([`superseded`]).
    works: Store<ManifestWork>,
}

/// Whether `work`, whose status is being synced, has since been deleted, changed its spec or
/// labels, or gone. Upstream's status, apply and finalize controllers are separate
/// controllers, each with its own queue (ocm pkg/work/spoke/spokeagent.go starts
/// `AvailableStatusController`, `ManifestWorkController` and the finalize controllers
/// apart): a status sync of a work with many manifests never holds up its deletion or the
/// apply of its new spec. The simulator's status controller stops a sync (writing nothing)
/// as soon as the work's watch shows either is due; what it would write conflicts with the
/// apply's write anyway (both name the resourceVersion they read, [`write_status`]).
fn superseded(ctx: &Ctx, work: &ManifestWork) -> bool {
    let now = current(ctx, work);
    deleted_since(now.as_deref(), work)
        || now.is_some_and(|now| {
            now.metadata.generation != work.metadata.generation || now.labels() != work.labels()
        })
}

/// The work as the controller's watch has it now.
fn current(ctx: &Ctx, work: &ManifestWork) -> Option<Arc<ManifestWork>> {
    ctx.works
        .get(&ObjectRef::new(&work.name_any()).within(&ctx.cluster))
}

/// Whether `work` has been deleted (or replaced) since this copy was read (`now`: the watch's
/// copy, [`current`]). An apply under way stops there too, as upstream's finalize controllers
/// do not wait for the apply controller: what it applied carries the AppliedManifestWork as
/// owner, so what the cleanup does not list goes with the AppliedManifestWork (the garbage
/// collector), as upstream relies on.
fn deleted_since(now: Option<&ManifestWork>, work: &ManifestWork) -> bool {
    match now {
        None => true,
        Some(now) => {
            now.uid() != work.uid()
                || (now.metadata.deletion_timestamp.is_some()
                    && work.metadata.deletion_timestamp.is_none())
        }
    }
}

/// Upstream's apply controller (ocm pkg/work/spoke/controllers/manifestcontroller/
/// manifestwork_controller.go) is queued only when a work is added, gets the finalizer, or
/// changes its spec or labels (`onUpdateFunc`); besides, it applies again at
/// `wait.Jitter(ResyncInterval, 0.5)` (4 to 6 minutes) after a sync, and a failed sync is
/// retried with backoff. Every other event of a work (its own status writes, a watched
/// object's change, the periodic status sync) reaches only the status controller
/// (statuscontroller/availablestatus_controller.go), which reads the objects and writes
/// their availability and feedback but applies nothing: an object changed or removed on the
/// cluster is put back at the next spec change or resync, not at the next event.
const APPLY_RESYNC: Duration = Duration::from_secs(4 * 60);

/// A work as it was last applied.
#[derive(Clone, Debug)]
struct LastApply {
    uid: String,
    generation: Option<i64>,
    labels: std::collections::BTreeMap<String, String>,
    /// Applies in a row that failed (some manifest not applied); 0 after a complete one.
    failures: u32,
    /// The work is applied again at this time whatever happens meanwhile: the resync after a
    /// complete apply, the backoff after a failed one.
    again: std::time::Instant,
}

impl LastApply {
    /// The apply of `work` just made, complete or not, after `before` (the last one).
    fn of(work: &ManifestWork, complete: bool, before: Option<&LastApply>) -> Self {
        let same = before.is_some_and(|b| b.same_spec(work));
        let failures = match (complete, before) {
            (true, _) => 0,
            (false, Some(b)) if same => b.failures.saturating_add(1),
            (false, _) => 1,
        };
        let wait = if complete {
            // `wait.Jitter(d, 0.5)`: d plus up to half of it more.
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or_default();
            APPLY_RESYNC + APPLY_RESYNC.mul_f64(0.5 * f64::from(nanos % 1000) / 1000.0)
        } else {
            // The apply controller's retry of a failed sync: its queue's backoff.
            crate::backoff::controller(failures)
        };
        Self {
            uid: work.uid().unwrap_or_default(),
            generation: work.metadata.generation,
            labels: work.labels().clone(),
            failures,
            again: std::time::Instant::now() + wait,
        }
    }

    /// The same object with the same spec and labels as applied.
    fn same_spec(&self, work: &ManifestWork) -> bool {
        self.uid == work.uid().unwrap_or_default()
            && self.generation == work.metadata.generation
            && &self.labels == work.labels()
    }

    /// Whether `work` still is what was applied and no apply is due: then only its status
    /// is synced.
    fn covers(&self, work: &ManifestWork) -> bool {
        self.same_spec(work) && std::time::Instant::now() < self.again
    }

    /// How soon the apply controller is to look at the work again: at the resync, or the
    /// retry of a failed apply.
    fn due_in(&self) -> Duration {
        self.again
            .saturating_duration_since(std::time::Instant::now())
    }
}

type KindCache =
    std::sync::Mutex<std::collections::HashMap<GroupVersionKind, (ApiResource, ApiCapabilities)>>;

type AppliedCache = std::sync::Mutex<std::collections::HashMap<String, (u64, String)>>;

/// Why a work could not be reconciled.
#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Other(String),
    /// A deleted work's resources are still going: looked at again after `retry`.
    #[error("{message}")]
    Pending { message: String, retry: Duration },
}

/// The AppliedManifestWork finalize controller's wait for a deleted work's resources to go
/// (ocm pkg/work/spoke/controllers/finalizercontroller/appliedmanifestwork_finalize_controller.go):
/// its own per-work exponential backoff, 50 ms doubled at each look that still finds some, up
/// to 60 s (`NewTypedItemExponentialFailureRateLimiter(50ms, 60s)`), forgotten once all went.
fn finalize_backoff(looks: u32) -> Duration {
    crate::backoff::item(Duration::from_millis(50), Duration::from_secs(60), looks)
}

/// How long the apply controller waits before it runs a failed reconcile of `key` again: a
/// deleted work's resources still going are looked at after their own backoff; any other
/// failure (a status write that conflicted with the status controller's, say) is retried as
/// upstream's queue retries it, client-go's default controller rate limiter
/// ([`crate::backoff::Retries`]).
fn retry_after(
    retries: &crate::backoff::Retries,
    key: &str,
    e: &kube::runtime::finalizer::Error<WorkError>,
) -> Duration {
    match e {
        kube::runtime::finalizer::Error::CleanupFailed(WorkError::Pending { retry, .. }) => *retry,
        _ => retries.when(key, std::time::Instant::now()),
    }
}

fn hub_hash(url: &str) -> String {
    let mut h = DefaultHasher::new();
    url.hash(&mut h);
    format!("{:016x}", h.finish())
}

/// Runs the agent: waits for the klusterlet's hub kubeconfig, serves the works of that hub,
/// and starts over when the kubeconfig changes (a hub switch).
pub async fn run(managed: Client, opts: WorkAgentOptions) -> Result<(), Error> {
    // The process's clients and their rate limits, new with each process: upstream's work
    // agent reaches the managed cluster at `--kube-api-qps` 50 and `--kube-api-burst` 100
    // (ocm `pkg/common/options/options.go`, `agent.go`), through the typed kube clientset
    // (its applies of built-in kinds, library-go's `ApplyDirectly`), the apiextensions and
    // work clientsets (CRDs, AppliedManifestWorks) and one dynamic client for every other
    // kind (`pkg/work/spoke/apply/update_apply.go`), each with a bucket of its own.
    let managed = kube_sim::throttle::throttled(
        managed,
        Limits::ocm(Clientsets::Dynamic {
            typed: &["apiextensions.k8s.io", "work.open-cluster-management.io"],
        }),
    );
    let mut connection = opts.connection.clone();
    loop {
        // Singleton mode: the work agent runs only while the process is connected to a hub.
        let Some(seen) = crate::klusterlet::connected(&mut connection).await else {
            return Ok(());
        };
        let text = &seen.text;
        let server = crate::klusterlet::kubeconfig_server(text)
            .map(|(s, _)| s)
            .unwrap_or_default();
        // The hub's work clientset, at `--hub-kube-api-qps` 50 and `--hub-kube-api-burst`
        // 100 (ocm `pkg/common/options/agent.go`, `pkg/work/spoke/spokeagent.go`).
        let hub = kube_sim::throttle::throttled(
            opts.transports.client(text).await?,
            Limits::ocm(Clientsets::Single),
        );
        let (amws, amw_writer) = kube::runtime::reflector::store();
        let amw_watch = kube::runtime::reflector(
            amw_writer,
            watcher(
                Api::<AppliedManifestWork>::all(managed.clone()),
                watcher::Config::default(),
            ),
        )
        .for_each(|_| async {});
        let (feedback, woken) = crate::feedback_watch::FeedbackWatches::new(
            managed.clone(),
            &opts.cluster_name,
            crate::feedback_watch::MAX_FEEDBACK_WATCH,
        );
        let works: Api<ManifestWork> = Api::namespaced(hub.clone(), &opts.cluster_name);
        // Two controllers on one watch of the works, as upstream's spoke agent starts the
        // apply controller (`ManifestWorkController`) and the status controller
        // (`AvailableStatusController`) apart on one informer (ocm pkg/work/spoke/
        // spokeagent.go): each has its own queue, so a status sync never waits for an apply
        // of the same work under way, nor an apply for a sync. Up to ten works at a time
        // each, as each runs `--workload-agent-workers` (default 10, ocm
        // pkg/work/spoke/options.go) workers.
        let (works_store, writer) = kube::runtime::reflector::store_shared(WATCH_BUFFER);
        let (Some(to_apply), Some(to_sync)) = (writer.subscribe(), writer.subscribe()) else {
            return Err(Error::Setup("the works' watch is not shared".into()));
        };
        let works_watch = watcher(works, watcher::Config::default())
            .default_backoff()
            .reflect_shared(writer)
            .for_each(|_| async {});
        let appliers = Controller::for_shared_stream(to_apply, works_store.clone())
            .with_config(kube::runtime::controller::Config::default().concurrency(WORKERS));
        // A watched manifest's change syncs its work's status at once (upstream's object
        // reader queues the work in the status controller), besides the work's own events
        // and the periodic sync.
        let syncers = Controller::for_shared_stream(to_sync, works_store.clone())
            .with_config(kube::runtime::controller::Config::default().concurrency(WORKERS))
            .reconcile_on(woken);
        let ctx = Arc::new(Ctx {
            hub: hub.clone(),
            managed: managed.clone(),
            cluster: opts.cluster_name.clone(),
            hub_hash: hub_hash(&server),
            resync: opts.status_sync_interval,
            raw_feedback_json: opts.raw_feedback_json,
            applied: AppliedCache::default(),
            kinds: KindCache::default(),
            amws,
            feedback,
            works_applied: Default::default(),
            finalize_looks: Default::default(),
            apply_retries: Default::default(),
            status_retries: Default::default(),
            works: works_store.clone(),
        });
        // When the process restarts (a pod replaced), reconciles under way finish first, as in
        // a graceful shutdown, so no applied object goes unrecorded.
        let restarted = || {
            let ended = ended(connection.clone(), seen.clone());
            let cluster = opts.cluster_name.clone();
            async move {
                ended.await;
                tracing::debug!(cluster = %cluster, "the agent process is restarting; the work agent finishes what it does");
            }
        };
        let evicting = {
            let ended = ended(connection.clone(), seen.clone());
            let ctx = ctx.clone();
            let grace = opts.eviction_grace;
            let works = works_store.clone();
            async move {
                tokio::select! {
                    () = async { futures::join!(evict_unmanaged(&ctx, &works, grace), amw_watch); } => {}
                    () = ended => {}
                }
            }
        };
        let applying = appliers
            .graceful_shutdown_on(restarted())
            .run(
                reconcile,
                |work, e: &kube::runtime::finalizer::Error<WorkError>, ctx| {
                    tracing::debug!(work = %work.name_any(), error = %e, "work reconcile failed");
                    Action::requeue(retry_after(&ctx.apply_retries, &work.name_any(), e))
                },
                ctx.clone(),
            )
            .for_each(|_| async {});
        let syncing = syncers
            .graceful_shutdown_on(restarted())
            .run(
                reconcile_status,
                |work, e: &WorkError, ctx| {
                    tracing::debug!(work = %work.name_any(), error = %e, "work status sync failed");
                    Action::requeue(
                        ctx.status_retries
                            .when(&work.name_any(), std::time::Instant::now()),
                    )
                },
                ctx,
            )
            .for_each(|_| async {});
        // The kubelet kills a container that has not stopped within its termination grace
        // period (`terminationGracePeriodSeconds`, 30 s by default): a reconcile stuck on a
        // request to a hub that went away does not keep the old process alive.
        let killed = {
            let ended = ended(connection.clone(), seen.clone());
            async move {
                ended.await;
                tokio::time::sleep(TERMINATION_GRACE).await;
            }
        };
        // The process's context cancelled (a restart to select a hub): the controllers stop
        // where they are, requests under way and writes not yet made are lost.
        let cancelled = {
            let mut cancels = opts.cancels.clone();
            let life = seen.life;
            async move {
                let _ = cancels.wait_for(|n| *n > life).await;
            }
        };
        tokio::select! {
            biased;
            () = cancelled => {
                tracing::debug!(cluster = %opts.cluster_name, "the agent's context was cancelled; the work agent stops at once");
            }
            _ = async { futures::join!(applying, syncing, evicting) } => {}
            () = works_watch => {}
            () = killed => {
                tracing::info!(cluster = %opts.cluster_name, "the work agent did not stop within the termination grace period; killed");
            }
        }
        tracing::info!(cluster = %opts.cluster_name, "the agent process restarted; so does the work agent");
    }
}

/// Resolves when the process's connection is no longer `seen` (it restarted).
async fn ended(
    mut connection: tokio::sync::watch::Receiver<Option<crate::klusterlet::Connected>>,
    seen: crate::klusterlet::Connected,
) {
    let _ = connection.wait_for(|c| c.as_ref() != Some(&seen)).await;
}

/// The unmanaged AppliedManifestWork controller (upstream
/// `pkg/work/spoke/controllers/finalizercontroller/unmanaged_appliedmanifestwork_controller.go`):
/// an AppliedManifestWork of this agent whose work is gone from the hub it serves, or that
/// belongs to another hub (its name does not start with this hub's hash), is marked with
/// `evictionStartTime` and, after the grace period, deleted together with what it alone owns.
/// One whose work is back loses the mark.
async fn evict_unmanaged(ctx: &Ctx, works: &Store<ManifestWork>, grace: Duration) {
    // Which works exist is read from the controller's cache, as upstream's evictor reads its
    // work lister (ocm pkg/work/spoke/controllers/finalizercontroller/
    // unmanaged_appliedmanifestwork_controller.go); only once it is filled, or every work
    // would look gone.
    if works.wait_until_ready().await.is_err() || ctx.amws.wait_until_ready().await.is_err() {
        return;
    }
    let mut tick = tokio::time::interval(ctx.resync.max(Duration::from_millis(200)));
    loop {
        tick.tick().await;
        if let Err(e) = evict_once(ctx, works, grace).await {
            tracing::debug!(cluster = %ctx.cluster, error = %e, "eviction");
        }
    }
}

async fn evict_once(
    ctx: &Ctx,
    works: &Store<ManifestWork>,
    grace: Duration,
) -> Result<(), WorkError> {
    let amws: Api<AppliedManifestWork> = Api::all(ctx.managed.clone());
    for amw in ctx.amws.state() {
        if amw.spec.agent_id.as_deref() != Some(ctx.cluster.as_str())
            || amw.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let name = amw.name_any();
        let work = amw.spec.manifest_work_name.clone();
        let unmanaged = !name.starts_with(&ctx.hub_hash)
            || works
                .get(&ObjectRef::new(&work).within(&ctx.cluster))
                .is_none();
        let started = amw
            .status
            .as_ref()
            .and_then(|s| s.eviction_start_time.clone());
        match (unmanaged, started) {
            (false, None) => {}
            (false, Some(_)) => {
                amws.patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"evictionStartTime": null}})),
                )
                .await?;
            }
            (true, None) => {
                amws.patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"status": {"evictionStartTime": migration_api::common::now()}}),
                    ),
                )
                .await?;
            }
            (true, Some(t)) => {
                let age = Duration::try_from(jiff::Timestamp::now().duration_since(t.0))
                    .unwrap_or_default();
                if age < grace {
                    continue;
                }
                let resources = applied_list(&amw);
                let refs: Vec<&Value> = resources.iter().collect();
                let remaining =
                    delete_applied(&ctx.managed, &refs, &amw.uid().unwrap_or_default()).await?;
                if remaining == 0 {
                    match amws.delete(&name, &DeleteParams::default()).await {
                        Ok(_) => {
                            tracing::info!(cluster = %ctx.cluster, appliedmanifestwork = %name, "evicted")
                        }
                        Err(kube::Error::Api(s)) if s.code == 404 => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
    }
    Ok(())
}

async fn reconcile(
    work: Arc<ManifestWork>,
    ctx: Arc<Ctx>,
) -> Result<Action, kube::runtime::finalizer::Error<WorkError>> {
    let api: Api<ManifestWork> = Api::namespaced(ctx.hub.clone(), &ctx.cluster);
    let c = ctx.clone();
    let name = work.name_any();
    tracing::debug!(cluster = %ctx.cluster, work = %name, "work reconcile starts");
    let r = finalizer(&api, MANIFEST_WORK_CLEANUP, work, |ev| async move {
        match ev {
            Finalize::Apply(w) => {
                let last = lock(&c.works_applied).get(&w.name_any()).cloned();
                match last.filter(|l| l.covers(&w)) {
                    // Applied as it is: the status controller has every other event.
                    Some(last) => Ok(Action::requeue(last.due_in())),
                    None => apply_work(&c, &w).await,
                }
            }
            Finalize::Cleanup(w) => {
                lock(&c.works_applied).remove(&w.name_any());
                cleanup_work(&c, &w).await
            }
        }
    })
    .await;
    tracing::debug!(cluster = %ctx.cluster, work = %name, ok = r.is_ok(), "work reconcile ends");
    ctx.apply_retries.settled(&name, r)
}

/// The status controller (upstream's `AvailableStatusController`,
/// statuscontroller/availablestatus_controller.go) on one work: nothing before the work has
/// its finalizer and reports `Applied` (of any generation, as upstream: while the apply
/// controller applies a new spec, a sync reads and reports the manifests the status lists,
/// those of the spec before), else [`sync_status`], again after the status sync interval.
async fn reconcile_status(work: Arc<ManifestWork>, ctx: Arc<Ctx>) -> Result<Action, WorkError> {
    if work.metadata.deletion_timestamp.is_some()
        || !work.finalizers().iter().any(|f| f == MANIFEST_WORK_CLEANUP)
        || work.applied_condition().is_none()
    {
        return Ok(Action::await_change());
    }
    let key = work.name_any();
    let synced = sync_status(&ctx, &work).await;
    ctx.status_retries.settled(&key, synced)
}

fn applied_name(ctx: &Ctx, work: &ManifestWork) -> String {
    format!("{}-{}", ctx.hub_hash, work.name_any())
}

/// The API resource of a manifest, found by discovery on the managed cluster (once per kind:
/// see `Ctx::kinds`).
async fn resource_of(
    ctx: &Ctx,
    manifest: &Value,
) -> Result<(ApiResource, ApiCapabilities), WorkError> {
    let api_version = manifest
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = manifest
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    if let Some(known) = lock(&ctx.kinds).get(&gvk) {
        return Ok(known.clone());
    }
    let found = kube::discovery::pinned_kind(&ctx.managed, &gvk)
        .await
        .map_err(|e| {
            WorkError::Other(format!(
                "{api_version} {kind} is not served by the cluster: {e}"
            ))
        })?;
    lock(&ctx.kinds).insert(gvk, found.clone());
    Ok(found)
}

/// A cache's lock; a poisoned one is still a valid map (every writer inserts whole entries).
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn dynamic_api(
    client: &Client,
    ar: &ApiResource,
    caps: &ApiCapabilities,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    match (&caps.scope, ns) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, ar),
        (Scope::Namespaced, None) => Api::default_namespaced_with(client.clone(), ar),
        (Scope::Cluster, _) => Api::all_with(client.clone(), ar),
    }
}

/// The API of `ar` in namespace `ns` (all of it for `None`: cluster-scoped), to read a
/// manifest's object where the status was reported with its namespace, or without.
fn read_api(client: &Client, ar: &ApiResource, ns: Option<&str>) -> Api<DynamicObject> {
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

fn config_for<'a>(
    work: &'a ManifestWork,
    ar: &ApiResource,
    ns: Option<&str>,
    name: &str,
) -> Option<&'a ManifestConfigOption> {
    work.spec.manifest_configs.as_ref()?.iter().find(|c| {
        let id = &c.resource_identifier;
        id.resource == ar.plural
            && id.group.as_deref().unwrap_or("") == ar.group
            && id.name == name
            && id.namespace.as_deref().unwrap_or("") == ns.unwrap_or("")
    })
}

async fn apply_work(ctx: &Ctx, work: &ManifestWork) -> Result<Action, WorkError> {
    // The work as the controller's cache has it (the runtime looks it up when the reconcile
    // starts), as upstream's ManifestWorkController reads its lister (ocm pkg/work/spoke/
    // controllers/manifestcontroller/manifestwork_controller.go): the cache never goes back
    // to before a deletion it has seen, and a cleanup runs only once it has seen one, so a
    // late resync cannot re-create what a cleanup removed.
    tracing::debug!(cluster = %ctx.cluster, work = %work.name_any(), "applying work");
    let amws: Api<AppliedManifestWork> = Api::all(ctx.managed.clone());
    let amw_name = applied_name(ctx, work);
    // Created (or put right) only when it is not as it should be, as upstream's controller
    // creates it only when its lister has none.
    let spec = json!({"hubHash": ctx.hub_hash, "agentID": ctx.cluster, "manifestWorkName": work.name_any()});
    let amw = match ctx.amws.get(&ObjectRef::new(&amw_name)) {
        Some(amw)
            if serde_json::to_value(&amw.spec).is_ok_and(|s| s == spec)
                && amw.metadata.deletion_timestamp.is_none() =>
        {
            AppliedManifestWork::clone(&amw)
        }
        _ => {
            amws.patch(&amw_name, &PatchParams::apply("work-agent").force(), &Patch::Apply(json!({
                "apiVersion": "work.open-cluster-management.io/v1", "kind": "AppliedManifestWork",
                "metadata": {"name": amw_name}, "spec": spec
            })))
            .await?
        }
    };
    let manifests = work.manifests().to_vec();
    // Per-manifest conditions carry on from the last report (by ordinal), so a transition
    // time only moves on a transition and an unchanged status is not written again.
    let previous_statuses: &[ManifestCondition] = work
        .status
        .as_ref()
        .and_then(|s| s.resource_status.as_ref())
        .and_then(|r| r.manifests.as_deref())
        .unwrap_or_default();
    let mut statuses = Vec::new();
    let mut applied_resources = Vec::new();
    let (mut all_applied, mut all_available) = (true, true);
    for (ordinal, manifest) in manifests.iter().enumerate() {
        if deleted_since(current(ctx, work).as_deref(), work) {
            return Ok(Action::requeue(Duration::ZERO));
        }
        let name = manifest
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let ns = manifest
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let mut meta = json!({"ordinal": ordinal, "name": name, "kind": manifest.get("kind"), "namespace": ns.clone().unwrap_or_default()});
        let kind = manifest.get("kind").and_then(Value::as_str);
        let mut conditions: Vec<Condition> = previous_statuses
            .iter()
            .find(|p| {
                let was = &p.resource_meta;
                usize::try_from(was.ordinal).ok() == Some(ordinal)
                    && was.name.as_deref() == Some(name.as_str())
                    && was.kind.as_deref() == kind
            })
            .map(|p| p.conditions.clone())
            .unwrap_or_default();
        let outcome = match resource_of(ctx, manifest).await {
            Err(e) => Err(e),
            Ok((ar, caps)) => {
                meta["group"] = json!(ar.group);
                meta["version"] = json!(ar.version);
                meta["resource"] = json!(ar.plural);
                let cfg = config_for(work, &ar, ns.as_deref(), &name);
                let api = dynamic_api(&ctx.managed, &ar, &caps, ns.as_deref());
                let key = format!(
                    "{}/{}/{}/{}",
                    ar.group,
                    ar.plural,
                    ns.as_deref().unwrap_or(""),
                    name
                );
                let owned = !orphaned(
                    work,
                    &json!({"group": ar.group, "resource": ar.plural,
                            "namespace": ns.clone().unwrap_or_default(), "name": name}),
                );
                let result = apply_manifest(
                    &api,
                    manifest,
                    cfg,
                    &amw,
                    &name,
                    (&ctx.applied, &key),
                    owned,
                )
                .await;
                // A manifest the work still lists stays tracked even when this apply failed:
                // upstream records every listed resource that exists
                // (`appliedmanifestwork_reconciler.go`), so a failed apply never turns into
                // the deletion of what the work maintains.
                applied_resources.push(
                    json!({"group": ar.group, "version": ar.version, "resource": ar.plural,
                    "namespace": ns.clone().unwrap_or_default(), "name": name}),
                );
                if let Err(e) = &result {
                    tracing::debug!(cluster = %ctx.cluster, work = %work.name_any(), manifest = %name, error = %e, "manifest not applied");
                }
                match result {
                    Ok(live) => Ok((live, cfg.cloned(), ar)),
                    Err(e) => Err(e),
                }
            }
        };
        let mut feedback = None;
        match outcome {
            Ok((live, cfg, ar)) => {
                set_condition(
                    &mut conditions,
                    "Applied",
                    "True",
                    "AppliedManifestComplete",
                    "Apply manifest complete",
                    None,
                );
                let seen = observe(
                    ctx,
                    &work.name_any(),
                    &mut conditions,
                    Some(live.as_ref()),
                    (cfg.as_ref(), &ar, ns.as_deref(), &name),
                );
                all_available &= seen.available;
                feedback = seen.feedback;
            }
            Err(e) => {
                all_applied = false;
                all_available = false;
                set_condition(
                    &mut conditions,
                    "Applied",
                    "False",
                    "AppliedManifestFailed",
                    &e.to_string(),
                    None,
                );
            }
        }
        let mut s = json!({"resourceMeta": meta, "conditions": conditions});
        if let Some(values) = feedback {
            s["statusFeedback"] = json!({"values": values});
        }
        statuses.push(s);
    }
    // Resources the work no longer lists are deleted, as the real agent does.
    let key = |v: &Value| {
        ["group", "resource", "namespace", "name"].map(|k| {
            v.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        })
    };
    let now_keys: Vec<_> = applied_resources.iter().map(key).collect();
    let previous = applied_list(&amw);
    // Resources the work no longer lists go, as `DeleteAppliedResources` removes them (one
    // another AppliedManifestWork also owns only loses this owner).
    let stale: Vec<&Value> = previous
        .iter()
        .filter(|p| !now_keys.contains(&key(p)))
        .collect();
    delete_applied(&ctx.managed, &stale, &amw.uid().unwrap_or_default()).await?;
    // Written only when it changed, as upstream's AppliedManifestWork reconciler compares
    // before it updates (ocm pkg/work/spoke/controllers/manifestcontroller/
    // appliedmanifestwork_reconciler.go).
    if previous != applied_resources {
        amws.patch_status(
            &amw_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"appliedResources": applied_resources}})),
        )
        .await?;
    }
    let generation = work.metadata.generation;
    let mut work_conditions = work
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    set_condition(
        &mut work_conditions,
        "Applied",
        if all_applied { "True" } else { "False" },
        if all_applied {
            "AppliedManifestWorkComplete"
        } else {
            "AppliedManifestWorkFailed"
        },
        if all_applied {
            "Apply manifest work complete"
        } else {
            "Failed to apply manifest work"
        },
        generation,
    );
    set_work_available(&mut work_conditions, all_available, generation);
    let status = json!({"conditions": work_conditions, "resourceStatus": {"manifests": statuses}});
    if !write_applied_status(ctx, work, status).await? {
        // The work changed meanwhile: applied again at once.
        return Ok(Action::requeue(Duration::ZERO));
    }
    // A failed apply is tried again after the backoff (upstream's controller returns the
    // error and its queue requeues the work so), its status synced meanwhile.
    let mut applied = lock(&ctx.works_applied);
    let last = LastApply::of(work, all_applied, applied.get(&work.name_any()));
    let requeue = last.due_in();
    applied.insert(work.name_any(), last);
    Ok(Action::requeue(requeue))
}

/// What the status controller made of one manifest's object.
struct Observed {
    available: bool,
    feedback: Option<Vec<Value>>,
}

/// Upstream's status controller on one manifest (`syncManifestWork`): its object read
/// (`live`: `Some(None)` not found, `None` not readable), its `Available` condition, its
/// `StatusFeedbackSynced` condition and feedback values per the work's config, and its watch
/// registered (once its object was read) or unregistered per that config.
fn observe(
    ctx: &Ctx,
    work: &str,
    conditions: &mut Vec<Condition>,
    live: Option<Option<&Value>>,
    (cfg, ar, ns, name): (
        Option<&ManifestConfigOption>,
        &ApiResource,
        Option<&str>,
        &str,
    ),
) -> Observed {
    let obj = match live {
        Some(Some(obj)) => obj,
        missing => {
            let (status, reason, message) = if missing.is_some() {
                ("False", "ResourceNotAvailable", "Resource is not available")
            } else {
                (
                    "Unknown",
                    "FetchingResourceFailed",
                    "Failed to fetch the resource",
                )
            };
            set_condition(conditions, "Available", status, reason, message, None);
            return Observed {
                available: false,
                feedback: None,
            };
        }
    };
    let watched = cfg.and_then(|c| c.feedback_scrape_type) == Some(FeedbackScrapeType::Watch);
    if watched {
        ctx.feedback.register(work, ar, ns, name);
    } else {
        ctx.feedback.unregister(work, ar, ns, name);
    }
    set_condition(
        conditions,
        "Available",
        "True",
        "ResourceAvailable",
        "Resource is available",
        None,
    );
    let (values, synced) = feedback_values(cfg, obj, ar, ctx.raw_feedback_json);
    // No rules (no config, or one that only sets a strategy or the scrape type): nothing fed
    // back (upstream `getFeedbackValues`, availablestatus_controller.go).
    let rules = cfg.filter(|c| c.feedback_rules.as_ref().is_some_and(|r| !r.is_empty()));
    let (status, reason, message) = match (rules, synced) {
        (None, _) => ("True", "NoStatusFeedbackSynced", String::new()),
        (Some(_), Ok(())) => ("True", "StatusFeedbackSynced", String::new()),
        (Some(_), Err(e)) => ("False", "StatusFeedbackSyncFailed", e),
    };
    set_condition(
        conditions,
        "StatusFeedbackSynced",
        status,
        reason,
        &message,
        None,
    );
    Observed {
        available: true,
        feedback: rules.is_some().then_some(values),
    }
}

/// The work's `Available` condition at its generation, as the status controller aggregates
/// the manifests' (`AggregateManifestConditions`).
fn set_work_available(conditions: &mut Vec<Condition>, available: bool, generation: Option<i64>) {
    set_condition(
        conditions,
        "Available",
        if available { "True" } else { "False" },
        if available {
            "ResourcesAvailable"
        } else {
            "ResourcesNotAvailable"
        },
        if available {
            "All resources are available"
        } else {
            "Some resources are not available"
        },
        generation,
    );
}

/// Writes `status` as the work's status unless it already is (upstream compares first), on
/// the version of the work it was made from: the patch names its uid and resourceVersion, as
/// upstream's patcher does (sdk-go pkg/patcher/patcher.go `patch`), so a write made from a
/// work another controller has written since fails with a conflict and is made again.
async fn write_status(ctx: &Ctx, work: &ManifestWork, status: Value) -> Result<(), WorkError> {
    let unchanged = serde_json::from_value::<ManifestWorkStatus>(status.clone())
        .is_ok_and(|s| work.status.as_ref() == Some(&s));
    if !unchanged {
        let meta = json!({"uid": work.uid(), "resourceVersion": work.resource_version()});
        Api::<ManifestWork>::namespaced(ctx.hub.clone(), &ctx.cluster)
            .patch_status(
                &work.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": meta, "status": status })),
            )
            .await?;
    }
    Ok(())
}

/// The apply's status write. One that conflicts with a write of the status controller is
/// made again at once on the work as it is now, if its spec and labels are still those
/// applied (`false` when they are not: the work is to be applied again). Upstream's queue
/// retries the conflict after 5 ms while its process runs on (an agent redeployed by a change
/// of its own Klusterlet keeps running until its new pod is ready: a rolling update); the
/// simulated process stops as soon as its reconciles end, and must not lose the report
/// there.
async fn write_applied_status(
    ctx: &Ctx,
    work: &ManifestWork,
    status: Value,
) -> Result<bool, WorkError> {
    const ATTEMPTS: usize = 3;
    let api: Api<ManifestWork> = Api::namespaced(ctx.hub.clone(), &ctx.cluster);
    let mut current = work.clone();
    let mut attempt = 1;
    loop {
        match write_status(ctx, &current, status.clone()).await {
            Err(WorkError::Kube(kube::Error::Api(e))) if e.code == 409 && attempt < ATTEMPTS => {
                let Some(fresh) = api.get_opt(&work.name_any()).await? else {
                    return Ok(false);
                };
                let same = fresh.uid() == work.uid()
                    && fresh.metadata.generation == work.metadata.generation
                    && fresh.labels() == work.labels()
                    && fresh.metadata.deletion_timestamp.is_none();
                if !same {
                    return Ok(false);
                }
                current = fresh;
                attempt += 1;
            }
            written => return written.map(|()| true),
        }
    }
}

/// The status controller alone, for a work applied as it is now (see [`APPLY_RESYNC`]): each
/// manifest the last apply reported is read again (from the watch of its resource and
/// namespace where one has synced, else from the cluster; a watched one's change may be what
/// woke this sync) and its availability and feedback written, nothing applied. Its
/// caller, [`reconcile_status`], has seen the work report `Applied`.
async fn sync_status(ctx: &Ctx, work: &ManifestWork) -> Result<Action, WorkError> {
    // Again after the status sync interval, jittered, whatever this sync found.
    let requeue = next_status_sync(ctx.resync, rand::random());
    let Some(status) = work.status.as_ref() else {
        return Ok(Action::requeue(requeue));
    };
    let mut work_conditions = status.conditions.clone().unwrap_or_default();
    let previous: &[ManifestCondition] = status
        .resource_status
        .as_ref()
        .and_then(|r| r.manifests.as_deref())
        .unwrap_or_default();
    let mut statuses = Vec::with_capacity(previous.len());
    let mut all_available = true;
    for p in previous {
        if superseded(ctx, work) {
            // The apply or the cleanup runs at once; the next sync reads everything again.
            return Ok(Action::requeue(Duration::ZERO));
        }
        let m = &p.resource_meta;
        let mut conditions = p.conditions.clone();
        let meta = serde_json::to_value(m).map_err(|e| WorkError::Other(e.to_string()))?;
        let (Some(resource), Some(version), Some(name)) = (
            m.resource.as_deref().filter(|r| !r.is_empty()),
            m.version.as_deref(),
            m.name.as_deref(),
        ) else {
            // Never applied (its kind not served): nothing to read.
            all_available = false;
            statuses.push(json!({"resourceMeta": meta, "conditions": conditions}));
            continue;
        };
        let group = m.group.as_deref().unwrap_or_default();
        let ar = ApiResource {
            group: group.to_owned(),
            version: version.to_owned(),
            api_version: if group.is_empty() {
                version.to_owned()
            } else {
                format!("{group}/{version}")
            },
            kind: m.kind.clone().unwrap_or_default(),
            plural: resource.to_owned(),
        };
        let ns = m.namespace.as_deref().filter(|n| !n.is_empty());
        // From the watch of its resource and namespace once that has synced, else a GET
        // (upstream `objectReader.getObject`, ocm `pkg/work/spoke/objectreader/reader.go`).
        let live = match ctx.feedback.cached(&ar, ns, name) {
            Some(cached) => Some(cached.and_then(|o| serde_json::to_value(&*o).ok())),
            None => match read_api(&ctx.managed, &ar, ns).get_opt(name).await {
                Ok(o) => Some(o.and_then(|o| serde_json::to_value(o).ok())),
                Err(e) => {
                    tracing::debug!(cluster = %ctx.cluster, work = %work.name_any(), manifest = %name, error = %e, "manifest not read");
                    None
                }
            },
        };
        let cfg = config_for(work, &ar, ns, name);
        let seen = observe(
            ctx,
            &work.name_any(),
            &mut conditions,
            live.as_ref().map(Option::as_ref),
            (cfg, &ar, ns, name),
        );
        all_available &= seen.available;
        let mut s = json!({"resourceMeta": meta, "conditions": conditions});
        if let Some(values) = seen.feedback {
            s["statusFeedback"] = json!({"values": values});
        }
        statuses.push(s);
    }
    set_work_available(
        &mut work_conditions,
        all_available,
        work.metadata.generation,
    );
    let status = json!({"conditions": work_conditions, "resourceStatus": {"manifests": statuses}});
    write_status(ctx, work, status).await?;
    Ok(Action::requeue(requeue))
}

/// How much later than the status sync interval a work's next sync may come, as a fraction of
/// the interval.
const STATUS_SYNC_JITTER: f64 = 0.9;

/// When a work's status is synced again after a sync: the interval plus up to
/// [`STATUS_SYNC_JITTER`] of it, `sample` in [0, 1) choosing where (upstream requeues each
/// work with `wait.Jitter(c.syncInterval, 0.9)`, ocm
/// `pkg/work/spoke/controllers/statuscontroller/availablestatus_controller.go`), so the works
/// of an agent spread their reads over 1 to 1.9 intervals.
fn next_status_sync(interval: Duration, sample: f64) -> Duration {
    interval.mul_f64(1.0 + STATUS_SYNC_JITTER * sample.clamp(0.0, 1.0))
}

/// Applies one manifest per its update strategy; returns the live object (None if absent).
async fn apply_manifest(
    api: &Api<DynamicObject>,
    manifest: &Value,
    cfg: Option<&ManifestConfigOption>,
    owner: &AppliedManifestWork,
    name: &str,
    (cache, key): (&AppliedCache, &str),
    owned: bool,
) -> Result<Option<Value>, WorkError> {
    let strategy = cfg
        .and_then(|c| c.update_strategy.as_ref())
        .map(|u| u.type_)
        .unwrap_or_default();
    // Upstream `manageOwnerRef` (`manifestwork_reconciler.go`): a resource the work's
    // deleteOption orphans never carries the AppliedManifestWork as owner (one it had is
    // taken off), so neither the work's deletion nor an eviction removes it.
    let owner_uid = owner.uid().unwrap_or_default();
    let mut desired = manifest.clone();
    desired["metadata"]["ownerReferences"] = if owned {
        json!([{"apiVersion": "work.open-cluster-management.io/v1", "kind": "AppliedManifestWork",
                "name": owner.name_any(), "uid": owner_uid}])
    } else {
        json!([])
    };
    let existing = api.get_opt(name).await?;
    let live = match strategy {
        UpdateStrategyType::ReadOnly => existing,
        UpdateStrategyType::CreateOnly => match existing {
            Some(e) => Some(e),
            None => Some(
                api.create(
                    &PostParams::default(),
                    &serde_json::from_value(desired)
                        .map_err(|e| WorkError::Other(e.to_string()))?,
                )
                .await?,
            ),
        },
        UpdateStrategyType::ServerSideApply => {
            let ssa = cfg
                .and_then(|c| c.update_strategy.as_ref())
                .and_then(|u| u.server_side_apply.as_ref());
            let manager = ssa
                .and_then(|s| s.field_manager.clone())
                .unwrap_or_else(|| "work-agent".into());
            let mut pp = PatchParams::apply(&manager);
            pp.force = ssa.and_then(|s| s.force).unwrap_or(false);
            let mut config = desired.clone();
            if let Some(m) = config["metadata"].as_object_mut() {
                m.remove("ownerReferences");
            }
            let applied = api.patch(name, &pp, &Patch::Apply(&config)).await?;
            // The owner reference goes on (or off) apart, as `ApplyOwnerReferences` does.
            let refs: Vec<Value> = applied
                .owner_references()
                .iter()
                .filter_map(|r| serde_json::to_value(r).ok())
                .collect();
            let has = refs.iter().any(|r| r["uid"] == owner_uid.as_str());
            if has != owned {
                let mut refs: Vec<Value> = refs
                    .into_iter()
                    .filter(|r| r["uid"] != owner_uid.as_str())
                    .collect();
                if owned {
                    refs.extend(
                        desired["metadata"]["ownerReferences"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default(),
                    );
                }
                Some(
                    api.patch(
                        name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"ownerReferences": refs}})),
                    )
                    .await?,
                )
            } else {
                Some(applied)
            }
        }
        UpdateStrategyType::Update => match existing {
            None => Some(
                api.create(
                    &PostParams::default(),
                    &serde_json::from_value(desired)
                        .map_err(|e| WorkError::Other(e.to_string()))?,
                )
                .await?,
            ),
            Some(existing) => {
                let rv = existing.resource_version().unwrap_or_default();
                let required_hash = {
                    let mut h = DefaultHasher::new();
                    desired.to_string().hash(&mut h);
                    h.finish()
                };
                // Upstream's resource cache (`SafeToSkipApply`): the same manifest over the
                // object as this agent last wrote it is not applied again.
                let cached = cache
                    .lock()
                    .ok()
                    .and_then(|c| c.get(key).cloned())
                    .is_some_and(|(h, v)| h == required_hash && v == rv);
                let existing =
                    serde_json::to_value(existing).map_err(|e| WorkError::Other(e.to_string()))?;
                match updated(&existing, desired, (!owned).then_some(owner_uid.as_str()))
                    .filter(|_| !cached)
                {
                    None => serde_json::from_value(existing).ok(),
                    Some(required) => {
                        let written: DynamicObject = api
                            .replace(
                                name,
                                &PostParams {
                                    field_manager: Some("work-agent".into()),
                                    ..Default::default()
                                },
                                &serde_json::from_value(required)
                                    .map_err(|e| WorkError::Other(e.to_string()))?,
                            )
                            .await?;
                        if let Ok(mut c) = cache.lock() {
                            c.insert(
                                key.to_owned(),
                                (
                                    required_hash,
                                    written.resource_version().unwrap_or_default(),
                                ),
                            );
                        }
                        Some(written)
                    }
                }
            }
        },
    };
    Ok(live.map(|o| serde_json::to_value(o).unwrap_or(Value::Null)))
}

/// What the Update strategy writes over an existing object, or `None` when nothing changes
/// (upstream `applyUnstructured` in `pkg/work/spoke/apply/update_apply.go`): labels,
/// annotations and owner references are merged into the existing ones (so another
/// AppliedManifestWork that owns the object keeps owning it), finalizers are kept, and the
/// rest of the object is replaced by the manifest (a PUT at the existing resourceVersion,
/// which needs `update`, not `patch`), unless it is already the same.
pub(crate) fn updated(
    existing: &Value,
    mut required: Value,
    disown: Option<&str>,
) -> Option<Value> {
    let mut modified = false;
    for key in ["labels", "annotations"] {
        let mut merged = existing
            .pointer(&format!("/metadata/{key}"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for (k, v) in required
            .pointer(&format!("/metadata/{key}"))
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            if merged.get(k) != Some(v) {
                merged.insert(k.clone(), v.clone());
                modified = true;
            }
        }
        if !merged.is_empty() {
            required["metadata"][key] = Value::Object(merged);
        }
    }
    let mut owners: Vec<Value> = existing
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(uid) = disown {
        let before = owners.len();
        owners.retain(|o| o.get("uid").and_then(Value::as_str) != Some(uid));
        modified |= owners.len() != before;
    }
    for owner in required
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
    {
        if !owners.iter().any(|o| o.get("uid") == owner.get("uid")) {
            owners.push(owner);
            modified = true;
        }
    }
    required["metadata"]["ownerReferences"] = Value::Array(owners);
    if let Some(f) = existing.pointer("/metadata/finalizers") {
        required["metadata"]["finalizers"] = f.clone();
    }
    let body = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("metadata");
            m.remove("status");
        }
        v
    };
    if !modified && body(&required) == body(existing) {
        return None;
    }
    required["metadata"]["resourceVersion"] = existing
        .pointer("/metadata/resourceVersion")
        .cloned()
        .unwrap_or(Value::Null);
    Some(required)
}

/// Largest raw JSON value the work agent returns (its `--max-json-raw-length`, default 1024).
pub const MAX_JSON_RAW_LENGTH: usize = 1024;

/// How long a restarting agent process may take to stop before it is killed (the kubelet's
/// default `terminationGracePeriodSeconds`).
pub const TERMINATION_GRACE: Duration = Duration::from_secs(30);

/// The paths of a WellKnownStatus rule, by kind (upstream
/// `pkg/work/spoke/statusfeedback/rules/rule.go`).
fn well_known_paths(ar: &ApiResource) -> &'static [(&'static str, &'static str)] {
    match (ar.group.as_str(), ar.version.as_str(), ar.kind.as_str()) {
        ("apps", "v1", "Deployment") => &[
            ("ReadyReplicas", ".status.readyReplicas"),
            ("Replicas", ".status.replicas"),
            ("AvailableReplicas", ".status.availableReplicas"),
        ],
        ("apps", "v1", "DaemonSet") => &[
            ("NumberReady", ".status.numberReady"),
            ("DesiredNumberScheduled", ".status.desiredNumberScheduled"),
            ("NumberAvailable", ".status.numberAvailable"),
        ],
        ("batch", "v1", "Job") => &[
            (
                "JobComplete",
                ".status.conditions[?(@.type==\"Complete\")].status",
            ),
            ("JobSucceeded", ".status.succeeded"),
        ],
        ("", "v1", "Pod") => &[
            (
                "PodReady",
                ".status.conditions[?(@.type==\"Ready\")].status",
            ),
            ("PodPhase", ".status.phase"),
        ],
        _ => &[],
    }
}

/// One feedback value, as upstream's status reader (`getValueByJsonPath` in
/// `pkg/work/spoke/statusfeedback/reader.go`) makes it: `Ok(None)` when the path selects
/// nothing (or null). Integers, strings and booleans are returned as such. Several values, a
/// list, an object (or a fraction) only as `JsonRaw`, and only with the `RawFeedbackJsonString`
/// feature gate (alpha, off by default) and at most `max_raw` bytes; otherwise it is an error
/// and the value is left out. With the gate off, several values are cut to the first.
fn feedback_value(
    obj: &Value,
    name: &str,
    path: &str,
    raw_gate: bool,
    max_raw: usize,
) -> Result<Option<Value>, String> {
    let found = kube_sim::jsonpath::evaluate(obj, path)
        .map_err(|e| format!("failed to find value for {name} with error: {e}"))?;
    let value = match found.as_slice() {
        [] => return Ok(None),
        [one] => (*one).clone(),
        [first, ..] if !raw_gate => (*first).clone(),
        many => Value::Array(many.iter().map(|v| (*v).clone()).collect()),
    };
    let field = match &value {
        Value::Null => return Ok(None),
        Value::Number(n) if n.is_i64() => json!({"type": "Integer", "integer": n.as_i64()}),
        Value::Bool(b) => json!({"type": "Boolean", "boolean": b}),
        Value::String(s) => json!({"type": "String", "string": s}),
        other if raw_gate => {
            let raw = other.to_string();
            if raw.len() > max_raw {
                return Err(format!(
                    "the length of returned json raw string for name {name} is larger than the maximum length {max_raw}"
                ));
            }
            json!({"type": "JsonRaw", "jsonRaw": raw})
        }
        other => {
            let kind = match other {
                Value::Array(_) => "[]interface {}",
                Value::Object(_) => "map[string]interface {}",
                _ => "float64",
            };
            return Err(format!(
                "the type {kind} of the value for {name} is not found"
            ));
        }
    };
    Ok(Some(json!({"name": name, "fieldValue": field})))
}

/// The feedback values of one manifest and its StatusFeedbackSynced condition (reason,
/// message; upstream `getFeedbackValues` in
/// `pkg/work/spoke/controllers/statuscontroller/availablestatus_controller.go`): every value
/// that could be read is returned, and any that could not makes the condition False.
fn feedback_values(
    cfg: Option<&ManifestConfigOption>,
    obj: &Value,
    ar: &ApiResource,
    raw_gate: bool,
) -> (Vec<Value>, Result<(), String>) {
    let rules: &[_] = cfg.and_then(|c| c.feedback_rules.as_deref()).unwrap_or(&[]);
    let mut values = Vec::new();
    let mut errors = Vec::new();
    for rule in rules {
        let paths: Vec<(String, String, Option<String>)> = match rule.type_ {
            FeedbackType::WellKnownStatus => {
                let known = well_known_paths(ar);
                if known.is_empty() {
                    errors.push(format!(
                        "cannot find the wellknown statuses for resource with gvk {}/{}, Kind={}",
                        ar.group, ar.version, ar.kind
                    ));
                }
                known
                    .iter()
                    .map(|(n, p)| ((*n).to_owned(), (*p).to_owned(), None))
                    .collect()
            }
            FeedbackType::JSONPaths => rule
                .json_paths
                .iter()
                .flatten()
                .map(|jp| (jp.name.clone(), jp.path.clone(), jp.version.clone()))
                .collect(),
        };
        for (name, path, version) in paths {
            if version
                .as_deref()
                .is_some_and(|v| !v.is_empty() && v != ar.version)
            {
                errors.push(format!(
                    "version set in the path {name} is not matched for the related resource"
                ));
                continue;
            }
            match feedback_value(obj, &name, &path, raw_gate, MAX_JSON_RAW_LENGTH) {
                Ok(Some(v)) => values.push(v),
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
    }
    let synced = if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "Sync status feedback failed with error {}",
            errors.join(", ")
        ))
    };
    (values, synced)
}

/// Deletes what an AppliedManifestWork applied (upstream `DeleteAppliedResources` in
/// `pkg/work/helper/helpers.go`): a resource it does not own is left alone, one another
/// AppliedManifestWork owns too only loses this owner; returns how many are still going.
async fn delete_applied(
    client: &Client,
    resources: &[&Value],
    owner_uid: &str,
) -> Result<usize, WorkError> {
    let mut remaining = 0;
    for res in resources {
        let (api, name) = applied_api(client, res);
        let Some(obj) = api.get_opt(&name).await? else {
            continue;
        };
        let refs = obj.owner_references();
        if !refs.iter().any(|r| r.uid == owner_uid) {
            continue;
        }
        let others: Vec<_> = refs
            .iter()
            .filter(|r| r.uid != owner_uid)
            .cloned()
            .collect();
        if others.iter().any(|r| r.kind == "AppliedManifestWork") {
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"ownerReferences": others}})),
            )
            .await?;
            continue;
        }
        remaining += 1;
        if obj.metadata.deletion_timestamp.is_none() {
            api.delete(&name, &DeleteParams::foreground()).await?;
        }
    }
    Ok(remaining)
}

/// The API of one applied resource (an `appliedResources` entry), and its name.
fn applied_api(client: &Client, res: &Value) -> (Api<DynamicObject>, String) {
    let s = |k: &str| {
        res.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let resource = ApiResource {
        group: s("group"),
        version: s("version"),
        api_version: if s("group").is_empty() {
            s("version")
        } else {
            format!("{}/{}", s("group"), s("version"))
        },
        kind: String::new(),
        plural: s("resource"),
    };
    let api: Api<DynamicObject> = if s("namespace").is_empty() {
        Api::all_with(client.clone(), &resource)
    } else {
        Api::namespaced_with(client.clone(), &s("namespace"), &resource)
    };
    (api, s("name"))
}

fn orphaned(work: &ManifestWork, res: &Value) -> bool {
    let policy = work
        .spec
        .delete_option
        .as_ref()
        .and_then(|d| d.propagation_policy)
        .unwrap_or_default();
    match policy {
        DeletePropagationPolicy::Orphan => true,
        DeletePropagationPolicy::Foreground => false,
        DeletePropagationPolicy::SelectivelyOrphan => work
            .spec
            .delete_option
            .as_ref()
            .and_then(|d| d.selectively_orphans.as_ref())
            .and_then(|s| s.orphaning_rules.as_ref())
            .is_some_and(|rules| {
                rules.iter().any(|r| {
                    let s = |k: &str| res.get(k).and_then(Value::as_str).unwrap_or_default();
                    r.resource == s("resource")
                        && r.group.as_deref().unwrap_or("") == s("group")
                        && r.name == s("name")
                        && r.namespace.as_deref().unwrap_or("") == s("namespace")
                })
            }),
    }
}

async fn cleanup_work(ctx: &Ctx, work: &ManifestWork) -> Result<Action, WorkError> {
    ctx.feedback.unregister_work(&work.name_any());
    let amws: Api<AppliedManifestWork> = Api::all(ctx.managed.clone());
    let amw_name = applied_name(ctx, work);
    let Some(amw) = amws.get_opt(&amw_name).await? else {
        lock(&ctx.finalize_looks).remove(&work.name_any());
        return Ok(Action::await_change());
    };
    let owner_uid = amw.uid().unwrap_or_default();
    let resources = applied_list(&amw);
    // Orphans first, as upstream's manifestwork finalize controller does: each loses our
    // owner reference and leaves the AppliedManifestWork's list, before anything is deleted
    // (a role the work delivers may be what lets the agent reach them).
    let (orphans, owned): (Vec<&Value>, Vec<&Value>) =
        resources.iter().partition(|r| orphaned(work, r));
    for res in &orphans {
        let (api, name) = applied_api(&ctx.managed, res);
        let Some(obj) = api.get_opt(&name).await? else {
            continue;
        };
        let refs: Vec<_> = obj
            .owner_references()
            .iter()
            .filter(|r| r.uid != owner_uid)
            .cloned()
            .collect();
        if refs.len() != obj.owner_references().len() {
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"ownerReferences": refs}})),
            )
            .await?;
        }
    }
    if !orphans.is_empty() {
        amws.patch_status(
            &amw_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"appliedResources": owned}})),
        )
        .await?;
    }
    let remaining = delete_applied(&ctx.managed, &owned, &owner_uid).await?;
    if remaining > 0 {
        // Not done: an error keeps the work's finalizer (the finalizer helper removes it on any
        // Ok), and the error policy looks again after the finalize controller's backoff.
        let looks = {
            let mut looks = lock(&ctx.finalize_looks);
            let n = looks.entry(work.name_any()).or_default();
            *n = n.saturating_add(1);
            *n
        };
        return Err(WorkError::Pending {
            message: format!(
                "waiting for {remaining} applied resource(s) of work {} to be deleted",
                work.name_any()
            ),
            retry: finalize_backoff(looks),
        });
    }
    lock(&ctx.finalize_looks).remove(&work.name_any());
    match amws.delete(&amw_name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Action::await_change())
}

/// What an AppliedManifestWork's status lists as applied, as JSON.
fn applied_list(amw: &AppliedManifestWork) -> Vec<Value> {
    amw.status
        .as_ref()
        .and_then(|s| s.applied_resources.as_ref())
        .map(|r| {
            r.iter()
                .filter_map(|x| serde_json::to_value(x).ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(paths: Value) -> ManifestConfigOption {
        serde_json::from_value(json!({
            "resourceIdentifier": {"group": "x.io", "resource": "things", "name": "t"},
            "feedbackRules": [{"type": "JSONPaths", "jsonPaths": paths}]
        }))
        .unwrap()
    }

    fn thing() -> ApiResource {
        ApiResource {
            group: "x.io".into(),
            version: "v1".into(),
            api_version: "x.io/v1".into(),
            kind: "Thing".into(),
            plural: "things".into(),
        }
    }

    fn values_by_name(values: &[Value]) -> std::collections::BTreeMap<String, Value> {
        values
            .iter()
            .map(|v| {
                (
                    v["name"].as_str().unwrap().to_owned(),
                    v["fieldValue"].clone(),
                )
            })
            .collect()
    }

    /// Upstream `pkg/work/spoke/statusfeedback/reader.go`: scalars always travel; lists and
    /// objects only as JsonRaw with the RawFeedbackJsonString gate (off by default), and an
    /// error (StatusFeedbackSynced False) leaves out only the value it concerns.
    #[test]
    fn feedback_follows_upstreams_reader_with_the_raw_gate_off_and_on() {
        let obj = json!({"metadata": {"annotations": {"a.io/k": "v"}},
                         "status": {"n": 3, "s": "x", "b": true, "f": 1.5, "list": [1, 2],
                                    "obj": {"a": 1}, "none": null, "big": "é".repeat(600)}});
        let cfg = rule(json!([
            {"name": "n", "path": ".status.n"}, {"name": "s", "path": ".status.s"},
            {"name": "b", "path": ".status.b"}, {"name": "f", "path": ".status.f"},
            {"name": "list", "path": ".status.list"}, {"name": "obj", "path": ".status.obj"},
            {"name": "none", "path": ".status.none"}, {"name": "missing", "path": ".status.missing"},
            {"name": "each", "path": ".status.list[*]"}, {"name": "past", "path": ".status.list[5]"},
            {"name": "ann", "path": ".metadata.annotations.a\\.io/k"},
            {"name": "v2", "path": ".status.n", "version": "v2"}
        ]));
        let (values, synced) = feedback_values(Some(&cfg), &obj, &thing(), false);
        let got = values_by_name(&values);
        assert_eq!(got["n"], json!({"type": "Integer", "integer": 3}));
        assert_eq!(got["s"], json!({"type": "String", "string": "x"}));
        assert_eq!(got["b"], json!({"type": "Boolean", "boolean": true}));
        assert_eq!(got["ann"], json!({"type": "String", "string": "v"}));
        // Several values: the first only.
        assert_eq!(got["each"], json!({"type": "Integer", "integer": 1}));
        for dropped in ["f", "list", "obj", "none", "missing", "past", "v2"] {
            assert!(!got.contains_key(dropped), "{dropped}: {got:?}");
        }
        let err = synced.unwrap_err();
        for why in [
            "the type []interface {} of the value for list is not found",
            "the type map[string]interface {} of the value for obj is not found",
            "array index out of bounds: index 5, length 2",
            "version set in the path v2 is not matched",
        ] {
            assert!(err.contains(why), "{why}: {err}");
        }
        // With the gate on, lists and objects travel as JsonRaw, several values as a list,
        // but never over the raw length limit.
        let (values, _) = feedback_values(Some(&cfg), &obj, &thing(), true);
        let got = values_by_name(&values);
        assert_eq!(got["list"], json!({"type": "JsonRaw", "jsonRaw": "[1,2]"}));
        assert_eq!(
            got["obj"],
            json!({"type": "JsonRaw", "jsonRaw": "{\"a\":1}"})
        );
        assert_eq!(got["each"], json!({"type": "JsonRaw", "jsonRaw": "[1,2]"}));
        let big = rule(json!([{"name": "big", "path": ".status"}]));
        let (values, synced) = feedback_values(Some(&big), &obj, &thing(), true);
        assert!(values.is_empty());
        assert!(
            synced
                .unwrap_err()
                .contains("larger than the maximum length 1024")
        );
        // No rules: nothing to sync, and nothing fails.
        assert_eq!(
            feedback_values(None, &obj, &thing(), false),
            (vec![], Ok(()))
        );
    }

    /// Upstream `update_apply.go`: metadata merged (another owner stays), finalizers kept, the
    /// rest replaced; nothing written when nothing differs.
    #[test]
    fn the_update_strategy_merges_metadata_and_replaces_the_rest() {
        let existing = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "resourceVersion": "7", "labels": {"a": "1"}, "finalizers": ["x"],
                         "ownerReferences": [{"uid": "other", "kind": "AppliedManifestWork"}]},
            "data": {"k": "v", "old": "gone"}});
        let required = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"b": "2"}, "ownerReferences": [{"uid": "mine", "kind": "AppliedManifestWork"}]},
            "data": {"k": "v"}});
        let out = updated(&existing, required, None).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"a": "1", "b": "2"}));
        assert_eq!(out["metadata"]["finalizers"], json!(["x"]));
        assert_eq!(out["metadata"]["resourceVersion"], "7");
        let uids: Vec<&str> = out["metadata"]["ownerReferences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["uid"].as_str().unwrap())
            .collect();
        assert_eq!(uids, ["other", "mine"]);
        assert_eq!(out["data"], json!({"k": "v"}));
        // Applied again over what it wrote: nothing to do.
        assert_eq!(
            updated(
                &out,
                json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"b": "2"}, "ownerReferences": [{"uid": "mine"}]},
            "data": {"k": "v"}}),
                None
            ),
            None
        );
        // Orphaned by the work's deleteOption: our owner reference comes off.
        let disowned = updated(
            &out,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "c", "ownerReferences": []}, "data": {"k": "v"}}),
            Some("mine"),
        )
        .unwrap();
        let uids: Vec<&str> = disowned["metadata"]["ownerReferences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["uid"].as_str().unwrap())
            .collect();
        assert_eq!(uids, ["other"]);
    }

    /// A deleted work whose resources are still going is looked at again after the finalize
    /// controller's backoff (50 ms, doubling, at most 60 s), not the queue's backoff any other
    /// failure waits.
    #[test]
    fn a_deleted_works_resources_are_looked_at_again_with_upstreams_backoff() {
        for (looks, want) in [
            (1, Duration::from_millis(50)),
            (2, Duration::from_millis(100)),
            (5, Duration::from_millis(800)),
            (11, Duration::from_millis(51_200)),
            (12, Duration::from_secs(60)),
            (u32::MAX, Duration::from_secs(60)),
        ] {
            assert_eq!(finalize_backoff(looks), want, "{looks} looks");
        }
        use kube::runtime::finalizer::Error as F;
        let retries = crate::backoff::Retries::default();
        let pending = || WorkError::Pending {
            message: "waiting".into(),
            retry: Duration::from_millis(100),
        };
        for (what, e, want) in [
            (
                "pending cleanup",
                F::CleanupFailed(pending()),
                Duration::from_millis(100),
            ),
            // Any other failure: the queue's backoff, per work (5 ms, doubled at each
            // failure in a row).
            (
                "failed cleanup",
                F::CleanupFailed(WorkError::Other("no".into())),
                Duration::from_millis(5),
            ),
            (
                "failed apply",
                F::ApplyFailed(pending()),
                Duration::from_millis(10),
            ),
        ] {
            assert_eq!(retry_after(&retries, "w", &e), want, "{what}");
        }
        assert_eq!(
            retry_after(
                &retries,
                "another",
                &F::ApplyFailed(WorkError::Other("no".into()))
            ),
            Duration::from_millis(5),
            "another work's first failure"
        );
    }

    #[test]
    fn a_failed_apply_is_retried_with_upstreams_backoff() {
        // The backoff's values are `backoff::controller`'s, tested there.
        let work: ManifestWork = serde_json::from_value(json!({
            "metadata": {"name": "w", "namespace": "c", "uid": "u", "generation": 3},
            "spec": {}
        }))
        .unwrap();
        let failed = LastApply::of(&work, false, None);
        assert_eq!(failed.failures, 1);
        let again = LastApply::of(&work, false, Some(&failed));
        assert_eq!(again.failures, 2);
        assert!(again.covers(&work), "no apply before the backoff ends");
        assert!(again.due_in() <= Duration::from_millis(10));
        // A new spec resets the count; a complete apply covers the work until the resync.
        let mut changed = work.clone();
        changed.metadata.generation = Some(4);
        assert!(!again.covers(&changed), "a new spec is applied at once");
        assert_eq!(LastApply::of(&changed, false, Some(&again)).failures, 1);
        let done = LastApply::of(&work, true, Some(&again));
        assert_eq!(done.failures, 0);
        assert!(done.covers(&work));
        assert!(done.due_in() >= Duration::from_secs(239));
    }

    #[test]
    fn a_works_next_status_sync_comes_one_to_one_point_nine_intervals_later() {
        let interval = Duration::from_secs(10);
        for (sample, secs) in [(0.0, 10.0), (0.5, 14.5), (0.999, 18.991), (1.0, 19.0)] {
            let got = next_status_sync(interval, sample).as_secs_f64();
            assert!((got - secs).abs() < 1e-6, "{sample}: {got} s, not {secs} s");
        }
        // Out of range samples stay within the bounds.
        assert_eq!(next_status_sync(interval, -1.0), interval);
        assert_eq!(next_status_sync(interval, 7.0), Duration::from_secs(19));
    }

    /// Upstream `rules/rule.go`: Deployments report ready, total and available replicas
    /// (no observedGeneration); kinds without well-known statuses are an error.
    #[test]
    fn well_known_status_by_kind() {
        let cfg: ManifestConfigOption = serde_json::from_value(json!({
            "resourceIdentifier": {"group": "apps", "resource": "deployments", "name": "d", "namespace": "n"},
            "feedbackRules": [{"type": "WellKnownStatus"}]
        }))
        .unwrap();
        let deployment = ApiResource {
            group: "apps".into(),
            version: "v1".into(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            plural: "deployments".into(),
        };
        let obj = json!({"status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "observedGeneration": 4}});
        let (values, synced) = feedback_values(Some(&cfg), &obj, &deployment, false);
        assert_eq!(
            values_by_name(&values).keys().collect::<Vec<_>>(),
            ["AvailableReplicas", "ReadyReplicas", "Replicas"]
        );
        assert_eq!(synced, Ok(()));
        let (values, synced) = feedback_values(Some(&cfg), &obj, &thing(), false);
        assert!(values.is_empty());
        assert!(
            synced
                .unwrap_err()
                .contains("cannot find the wellknown statuses")
        );
    }
}
