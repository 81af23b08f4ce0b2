//! The migration controller: drives each ManagedClusterMigration through its phases.
//!
//! The manager never talks to a managed hub: each hub's part goes down as a MigrationTask
//! inside the ManifestWork `migration-<name>-source` / `-target` and comes back through that
//! work's status feedback (per-cluster states as one character each). Every decision is
//! written to the migration's status before it is acted on, so a manager restarted at any
//! moment continues where the last one stopped. Waits are watches (works, the
//! ManagedServiceAccount, other migrations); stage timeouts are requeues at the deadline.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use migration_api::common::{Condition, condition_is_true, find_condition, now, set_condition};
use migration_api::migration::{
    CarriedCluster, ClusterCounts, ClusterState, ManagedClusterMigration,
    ManagedClusterMigrationSpec, ManagedClusterMigrationStatus, MigrationPhase, MigrationPlan,
    MigrationRole, MigrationTaskSpec, PlannedObject, TaskStage,
};
use migration_api::names::conditions::{
    AVAILABLE, CLUSTER_AVAILABLE, CLUSTER_REGISTERED, MIGRATION_STARTED, RESOURCE_CLEANED,
    RESOURCE_DEPLOYED, RESOURCE_INITIALIZED, RESOURCE_ROLLED_BACK, RESOURCE_VALIDATED,
};
use migration_api::names::{
    self, DEFAULT_ADDON_INSTALL_NAMESPACE, conditions, finalizers, labels, reasons,
};
use migration_api::ocm::addon::{AddOnDeploymentConfig, ManagedClusterAddOn, ProxyConfig};
use migration_api::ocm::cluster::ManagedCluster;
use migration_api::ocm::msa::ManagedServiceAccount;
use migration_api::ocm::work::ManifestWork;
use migration_api::runtime::ignore_not_found;
use serde_json::{Value, json};

use crate::migration_render::{self as mr, Migration, Shape};
use crate::render::RenderError;

/// Field manager of what the migration controller writes.
pub const FIELD_MANAGER: &str = "cluster-migration-manager";
/// The managed-serviceaccount addon a target hub must run.
pub const MSA_ADDON: &str = "managed-serviceaccount";
/// Name of the global hub in plans.
pub const GLOBAL_HUB: &str = "global-hub";
/// At most this many pre-created ManagedClusters are shown one by one in a plan.
const PLAN_CLUSTER_OBJECTS: usize = 50;

/// Settings of the migration controller.
#[derive(Clone, Debug)]
pub struct Config {
    /// Name of the addon whose agents carry out migrations.
    pub addon_name: String,
}

struct Ctx {
    client: Client,
    config: Config,
    recorder: Recorder,
}

/// Why a reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}: {1}")]
    Kube(String, #[source] kube::Error),
    #[error(transparent)]
    Render(#[from] RenderError),
}

fn ctx_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |e| Error::Kube(what, e)
}

/// Runs the controller until `stop` resolves.
pub async fn run(
    client: Client,
    config: Config,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), kube::Error> {
    let mcms: Api<ManagedClusterMigration> = Api::all(client.clone());
    let owned = watcher::Config::default().labels(labels::MIGRATION);
    let controller = Controller::new(mcms.clone(), watcher::Config::default());
    let store = controller.store();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: FIELD_MANAGER.into(),
            instance: None,
        },
    );
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        config,
        recorder,
    });
    controller
        .watches(
            Api::<ManifestWork>::all(client.clone()),
            owned.clone(),
            owner_of,
        )
        .watches(
            Api::<ManagedServiceAccount>::all(client.clone()),
            owned,
            owner_of,
        )
        // A migration waiting for another on the same hub pair starts when that one ends.
        .watches(
            mcms,
            watcher::Config::default(),
            move |changed: ManagedClusterMigration| {
                store
                    .state()
                    .into_iter()
                    .filter(|m| phase(m) == MigrationPhase::Pending && m.uid() != changed.uid())
                    .map(|m| ObjectRef::from_obj(&*m))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(stop)
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "migration controller event");
            }
        })
        .await;
    Ok(())
}

fn owner_of<K: Resource>(obj: K) -> Option<ObjectRef<ManagedClusterMigration>> {
    let l = obj.meta().labels.as_ref()?;
    Some(ObjectRef::new(l.get(labels::MIGRATION)?).within(l.get(labels::MIGRATION_NAMESPACE)?))
}

fn error_policy(mcm: Arc<ManagedClusterMigration>, e: &Error, _: Arc<Ctx>) -> Action {
    tracing::info!(migration = %mcm.name_any(), error = %e, "migration reconcile failed; retrying");
    Action::requeue(Duration::from_secs(2))
}

fn phase(m: &ManagedClusterMigration) -> MigrationPhase {
    m.status.as_ref().and_then(|s| s.phase).unwrap_or_default()
}

fn migration_of(mcm: &ManagedClusterMigration) -> Migration {
    Migration {
        name: mcm.name_any(),
        namespace: mcm.namespace().unwrap_or_default(),
        key: key_of(mcm),
        token_validity: mcm.effective_spec().token_validity(),
        from: mcm.spec.from.clone(),
        to: mcm.spec.to.clone(),
    }
}

/// The migration's key ([`names::migration_key`]).
fn key_of(mcm: &ManagedClusterMigration) -> String {
    names::migration_key(
        &mcm.namespace().unwrap_or_default(),
        &mcm.name_any(),
        &mcm.uid().unwrap_or_default(),
    )
}

/// The clusters a migration names (before validation) or resolved (after).
fn clusters_of(mcm: &ManagedClusterMigration) -> Vec<String> {
    mcm.status
        .as_ref()
        .and_then(|s| s.resolved_clusters.clone())
        .or_else(|| mcm.effective_spec().included_managed_clusters.clone())
        .unwrap_or_default()
}

/// What one reconcile changes: the new status and the events to publish.
struct Step {
    status: ManagedClusterMigrationStatus,
    events: Vec<(EventType, String, String)>,
    generation: Option<i64>,
}

impl Step {
    fn conditions(&mut self) -> &mut Vec<Condition> {
        self.status.conditions.get_or_insert_with(Vec::new)
    }

    fn condition(&mut self, type_: &str, status: &str, reason: &str, message: &str) {
        let generation = self.generation;
        set_condition(
            self.conditions(),
            type_,
            status,
            reason,
            message,
            generation,
        );
    }

    fn enter(&mut self, next: MigrationPhase, why: &str) {
        let from = self.status.phase.unwrap_or_default();
        if from == next {
            return;
        }
        self.status.phase = Some(next);
        self.status.phase_start_time = Some(now());
        if next.is_terminal() {
            self.status.completion_time = Some(now());
        }
        let kind = if next == MigrationPhase::Failed || next == MigrationPhase::Rollbacking {
            EventType::Warning
        } else {
            EventType::Normal
        };
        self.events.push((
            kind,
            format!("{next:?}"),
            format!("{from:?} -> {next:?}: {why}"),
        ));
    }

    fn event(&mut self, kind: EventType, reason: &str, note: String) {
        self.events.push((kind, reason.into(), note));
    }

    /// Fails the migration at validation: nothing was touched.
    fn fail_validation(&mut self, reason: &str, message: &str) {
        self.condition(RESOURCE_VALIDATED, "False", reason, message);
        self.enter(MigrationPhase::Failed, message);
    }

    /// Starts rolling back, remembering why.
    fn rollback(&mut self, reason: &str, message: &str) {
        self.condition(RESOURCE_ROLLED_BACK, "False", reason, message);
        // The first cause stands: what follows (the rollback's own progress, a timeout of it)
        // reports on the condition, not here.
        if self.status.rollback_cause.is_none() {
            self.status.rollback_cause = Some(reason.to_owned());
        }
        self.enter(MigrationPhase::Rollbacking, message);
    }

    fn states(&self) -> Vec<ClusterState> {
        let n = self.status.resolved_clusters.as_ref().map_or(0, Vec::len);
        ClusterState::decode(self.status.cluster_states.as_deref().unwrap_or(""), n)
    }

    fn set_states(&mut self, states: &[ClusterState]) {
        self.status.cluster_states = Some(ClusterState::encode(states));
        let names = self.status.resolved_clusters.clone().unwrap_or_default();
        self.status.clusters = Some(ClusterState::counts(states));
        let failures = ClusterState::failures(&names, states);
        self.status.failures = (!failures.is_empty()).then_some(failures);
    }
}

async fn reconcile(mcm: Arc<ManagedClusterMigration>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let deleting = mcm.metadata.deletion_timestamp.is_some();
    let current = phase(&mcm);
    let has_finalizer = mcm
        .finalizers()
        .iter()
        .any(|f| f == finalizers::MIGRATION_CLEANUP);
    if !deleting && !current.is_terminal() && !has_finalizer {
        set_finalizer(&ctx, &mcm, true).await?;
        return Ok(Action::await_change());
    }
    let mut step = Step {
        status: mcm.status.clone().unwrap_or_default(),
        events: Vec::new(),
        generation: mcm.metadata.generation,
    };
    step.status.observed_generation = mcm.metadata.generation;
    let mcm = hold_spec(mcm, current, &mut step);
    if deleting {
        match current {
            MigrationPhase::Pending | MigrationPhase::Validating => {
                step.fail_validation(reasons::ERROR, "deleted before any cluster was touched");
            }
            MigrationPhase::Initializing
            | MigrationPhase::Deploying
            | MigrationPhase::Registering => {
                step.rollback(
                    "Deleted",
                    "the migration was deleted in flight; rolling back first",
                );
            }
            _ => {}
        }
    }
    let m = migration_of(&mcm);
    let action = match step.status.phase.unwrap_or_default() {
        MigrationPhase::Pending => pending(&ctx, &mcm, &mut step).await?,
        MigrationPhase::Validating => validating(&ctx, &mcm, &m, &mut step).await?,
        MigrationPhase::Initializing => initializing(&ctx, &mcm, &m, &mut step).await?,
        MigrationPhase::Deploying => deploying(&ctx, &mcm, &m, &mut step).await?,
        MigrationPhase::Registering => registering(&ctx, &mcm, &m, &mut step).await?,
        MigrationPhase::Rollbacking => rollbacking(&ctx, &mcm, &m, &mut step).await?,
        MigrationPhase::Cleaning => cleaning(&ctx, &mcm, &m, &mut step).await?,
        MigrationPhase::Completed | MigrationPhase::Failed => {
            let clean = remove_everything(&ctx, &m).await?;
            if clean && has_finalizer && step.status == mcm.status.clone().unwrap_or_default() {
                set_finalizer(&ctx, &mcm, false).await?;
            }
            Action::await_change()
        }
    };
    write_status(&ctx, &mcm, step).await?;
    Ok(action)
}

/// The migration as its phases see it: past Pending, with the spec it started with
/// (`status.acceptedSpec`; taken now if an older manager started it without one). An edit since
/// is reported (condition `SpecAccepted` False, a Warning event once) and changes nothing.
fn hold_spec(
    mcm: Arc<ManagedClusterMigration>,
    current: MigrationPhase,
    step: &mut Step,
) -> Arc<ManagedClusterMigration> {
    if current == MigrationPhase::Pending {
        return mcm;
    }
    let accepted = step
        .status
        .accepted_spec
        .get_or_insert_with(|| mcm.spec.clone())
        .clone();
    let edited = spec_edits(&accepted, &mcm.spec);
    let was_refused = step
        .status
        .conditions
        .as_deref()
        .and_then(|c| find_condition(c, conditions::SPEC_ACCEPTED))
        .is_some_and(|c| c.status == "False");
    if !edited.is_empty() {
        let message = format!(
            "the spec was edited after the migration started ({}); the edit is ignored: the migration goes on with the spec it started with (status.acceptedSpec). To move clusters elsewhere, create another migration",
            edited.join(", ")
        );
        if !was_refused {
            step.event(EventType::Warning, reasons::SPEC_IMMUTABLE, message.clone());
        }
        step.condition(
            conditions::SPEC_ACCEPTED,
            "False",
            reasons::SPEC_IMMUTABLE,
            &message,
        );
    } else if was_refused {
        step.condition(
            conditions::SPEC_ACCEPTED,
            "True",
            reasons::DONE,
            "the spec is the one the migration started with",
        );
    }
    if accepted == mcm.spec {
        return mcm;
    }
    let mut held = (*mcm).clone();
    held.spec = accepted;
    Arc::new(held)
}

/// The top-level spec fields that differ between `accepted` and `now`.
fn spec_edits(
    accepted: &ManagedClusterMigrationSpec,
    now: &ManagedClusterMigrationSpec,
) -> Vec<String> {
    let (a, b) = (
        serde_json::to_value(accepted).unwrap_or_default(),
        serde_json::to_value(now).unwrap_or_default(),
    );
    let empty = serde_json::Map::new();
    let (a, b) = (
        a.as_object().unwrap_or(&empty),
        b.as_object().unwrap_or(&empty),
    );
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| match (a.get(k), b.get(k)) {
            (Some(Value::String(x)), Some(Value::String(y))) => format!("{k}: {x} -> {y}"),
            _ => k.clone(),
        })
        .collect()
}

async fn set_finalizer(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    present: bool,
) -> Result<(), Error> {
    let mut list: Vec<String> = mcm
        .finalizers()
        .iter()
        .filter(|f| *f != finalizers::MIGRATION_CLEANUP)
        .cloned()
        .collect();
    if present {
        list.push(finalizers::MIGRATION_CLEANUP.into());
    }
    let api: Api<ManagedClusterMigration> =
        Api::namespaced(ctx.client.clone(), &mcm.namespace().unwrap_or_default());
    let patch =
        json!({"metadata": {"finalizers": list, "resourceVersion": mcm.resource_version()}});
    match api
        .patch(
            &mcm.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(Error::Kube("updating the migration's finalizers".into(), e)),
    }
}

async fn write_status(ctx: &Ctx, mcm: &ManagedClusterMigration, step: Step) -> Result<(), Error> {
    let reference = mcm.object_ref(&());
    if Some(&step.status) != mcm.status.as_ref() {
        let api: Api<ManagedClusterMigration> =
            Api::namespaced(ctx.client.clone(), &mcm.namespace().unwrap_or_default());
        let patch =
            json!({"metadata": {"resourceVersion": mcm.resource_version()}, "status": step.status});
        match api
            .patch_status(
                &mcm.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {}
            // A newer version exists: its event brings us back with fresh state, and what
            // this step decided is decided again.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => return Ok(()),
            Err(e) => return Err(Error::Kube("writing the migration's status".into(), e)),
        }
    }
    for (type_, reason, note) in step.events.iter().take(25) {
        let ev = Event {
            type_: *type_,
            reason: reason.clone(),
            note: Some(note.clone()),
            action: "Migrate".into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&ev, &reference).await {
            tracing::debug!(error = %e, "publishing an event");
        }
        tracing::info!(migration = %mcm.name_any(), %reason, "{note}");
    }
    Ok(())
}

/// Time left before the current phase times out, or `None` when it has.
fn remaining(step: &Step, timeout: Duration) -> Option<Duration> {
    let started = step.status.phase_start_time.as_ref()?.0;
    let elapsed = jiff::Timestamp::now().duration_since(started);
    let elapsed = Duration::try_from(elapsed).unwrap_or_default();
    timeout.checked_sub(elapsed).filter(|d| !d.is_zero())
}

/// Requeue at the phase deadline (the watches bring us back sooner when anything changes).
fn until(step: &Step, timeout: Duration) -> Action {
    Action::requeue(
        remaining(step, timeout).unwrap_or(Duration::from_secs(1)) + Duration::from_millis(100),
    )
}

fn stage_timeout(mcm: &ManagedClusterMigration) -> Duration {
    mcm.spec
        .stage_timeout()
        .unwrap_or(migration_api::migration::DEFAULT_STAGE_TIMEOUT)
}

// ---------------------------------------------------------------------------------------------
// Pending

fn active(m: &ManagedClusterMigration) -> bool {
    !phase(m).is_terminal()
}

fn same_pair(a: &ManagedClusterMigration, b: &ManagedClusterMigration) -> bool {
    let pair = |m: &ManagedClusterMigration| {
        let spec = m.effective_spec();
        let mut p = [spec.from.clone(), spec.to.clone()];
        p.sort();
        p
    };
    pair(a) == pair(b)
}

fn older(a: &ManagedClusterMigration, b: &ManagedClusterMigration) -> bool {
    (a.creation_timestamp(), a.namespace(), a.name_any())
        < (b.creation_timestamp(), b.namespace(), b.name_any())
}

async fn pending(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    step: &mut Step,
) -> Result<Action, Error> {
    let all = Api::<ManagedClusterMigration>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(ctx_err("listing migrations"))?;
    let blocker = all.items.iter().find(|o| {
        o.uid() != mcm.uid()
            && active(o)
            && same_pair(o, mcm)
            && (phase(o) != MigrationPhase::Pending || older(o, mcm))
    });
    if let Some(b) = blocker {
        let message = format!(
            "waiting for migration {}/{} ({} -> {}) to finish: one migration per pair of hubs at a time",
            b.namespace().unwrap_or_default(),
            b.name_any(),
            b.effective_spec().from,
            b.effective_spec().to
        );
        step.condition(MIGRATION_STARTED, "False", reasons::WAITING, &message);
        return Ok(Action::await_change());
    }
    step.status.start_time = Some(now());
    // From here on the migration works from this copy: an edit of the spec changes nothing.
    step.status.accepted_spec = Some(mcm.spec.clone());
    step.condition(
        MIGRATION_STARTED,
        "True",
        reasons::STARTED,
        "the migration started",
    );
    step.enter(MigrationPhase::Validating, "checking hubs and clusters");
    Ok(Action::requeue(Duration::from_millis(10)))
}

// ---------------------------------------------------------------------------------------------
// Reading the hubs (as the global hub shows them) and the works' feedback

async fn hub_addon(
    ctx: &Ctx,
    hub: &str,
    addon: &str,
) -> Result<Option<ManagedClusterAddOn>, Error> {
    let api: Api<ManagedClusterAddOn> = Api::namespaced(ctx.client.clone(), hub);
    ignore_not_found(api.get(addon).await).map_err(ctx_err(format!(
        "reading ManagedClusterAddOn {hub}/{addon}"
    )))
}

/// Namespace an addon's agent runs in on its hub.
fn addon_namespace(mca: Option<&ManagedClusterAddOn>) -> String {
    mca.and_then(|a| {
        a.status
            .as_ref()
            .and_then(|s| s.namespace.clone())
            .or_else(|| a.spec.install_namespace.clone())
    })
    .filter(|s| !s.is_empty())
    .unwrap_or_else(|| DEFAULT_ADDON_INSTALL_NAMESPACE.into())
}

/// Why a hub cannot take part, if it cannot.
async fn hub_problem(
    ctx: &Ctx,
    hub: &str,
    role: &str,
    needs_msa: bool,
) -> Result<Option<String>, Error> {
    let clusters: Api<ManagedCluster> = Api::all(ctx.client.clone());
    let Some(mc) =
        ignore_not_found(clusters.get(hub).await).map_err(ctx_err(format!("reading hub {hub}")))?
    else {
        return Ok(Some(format!(
            "{role} hub {hub:?} is not a managed cluster of the global hub"
        )));
    };
    let conds = mc
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    if !condition_is_true(conds, CLUSTER_AVAILABLE) {
        return Ok(Some(format!(
            "{role} hub {hub} is not Available on the global hub"
        )));
    }
    let addon = &ctx.config.addon_name;
    match hub_addon(ctx, hub, addon).await? {
        None => {
            return Ok(Some(format!(
                "the {addon} addon is not enabled on {role} hub {hub} (create ManagedClusterAddOn {addon} in namespace {hub}, or `clusteradm addon enable --names {addon} --clusters {hub}`)"
            )));
        }
        Some(a) => {
            let conds = a
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_deref())
                .unwrap_or_default();
            if !condition_is_true(conds, AVAILABLE) {
                return Ok(Some(format!(
                    "the {addon} addon on {role} hub {hub} is not Available"
                )));
            }
        }
    }
    if needs_msa {
        if hub_addon(ctx, hub, MSA_ADDON).await?.is_none() {
            return Ok(Some(format!(
                "{role} hub {hub} has no {MSA_ADDON} addon: the migration's bootstrap identity is a ManagedServiceAccount"
            )));
        }
        let has_url = mc
            .spec
            .managed_cluster_client_configs
            .as_ref()
            .is_some_and(|c| c.iter().any(|c| !c.url.is_empty()));
        if !has_url {
            return Ok(Some(format!(
                "{role} hub {hub} reports no managedClusterClientConfigs: there is no API server URL to point the clusters at"
            )));
        }
    }
    Ok(None)
}

/// One task's report as its work's status feedback shows it.
#[derive(Clone, Debug, Default)]
struct Feedback {
    revision: Option<String>,
    state: Option<String>,
    message: Option<String>,
    clusters: Option<String>,
    total: Option<i64>,
    shape: Option<String>,
    /// The source's carry-over records (validation); `Err` when they do not decode.
    carry: Option<Result<Vec<CarriedCluster>, String>>,
    /// Why the work could not apply (a manifest's Applied condition), if it could not.
    apply_error: Option<String>,
}

impl Feedback {
    fn of(work: &ManifestWork) -> Self {
        let mut fb = Feedback::default();
        let manifests = work
            .status
            .as_ref()
            .and_then(|s| s.resource_status.as_ref())
            .and_then(|r| r.manifests.as_ref());
        for m in manifests.into_iter().flatten() {
            if let Some(c) = m
                .conditions
                .iter()
                .find(|c| c.type_ == "Applied" && c.status == "False")
            {
                fb.apply_error = Some(format!(
                    "{} {}: {}",
                    m.resource_meta.kind.clone().unwrap_or_default(),
                    m.resource_meta.name.clone().unwrap_or_default(),
                    c.message
                ));
            }
            if m.resource_meta.kind.as_deref() != Some("MigrationTask") {
                continue;
            }
            for v in m
                .status_feedback
                .iter()
                .flat_map(|f| f.values.iter().flatten())
            {
                let text = v.field_value.string.clone();
                match v.name.as_str() {
                    "revision" => fb.revision = text,
                    "state" => fb.state = text,
                    "message" => fb.message = text,
                    "clusters" => fb.clusters = text,
                    "shape" => fb.shape = text,
                    "total" => fb.total = v.field_value.integer,
                    "carry" => {
                        fb.carry = text.map(|t| {
                            migration_api::migration::decode_carry_over(&t)
                                .map_err(|e| e.to_string())
                        });
                    }
                    _ => {}
                }
            }
        }
        fb
    }

    fn states(&self, n: usize) -> Vec<ClusterState> {
        ClusterState::decode(self.clusters.as_deref().unwrap_or(""), n)
    }

    fn succeeded(&self) -> bool {
        self.state.as_deref() == Some("Succeeded")
    }

    fn failed(&self) -> bool {
        self.state.as_deref() == Some("Failed")
    }
}

/// The feedback of a migration's work on one hub, only if it reports on `revision`.
async fn report(
    ctx: &Ctx,
    m: &Migration,
    role: MigrationRole,
    revision: &str,
) -> Result<(Option<Feedback>, Option<String>), Error> {
    let Some(work) = existing_work(ctx, m, role).await? else {
        return Ok((None, None));
    };
    let fb = Feedback::of(&work);
    let err = fb.apply_error.clone();
    Ok((
        (fb.revision.as_deref() == Some(revision)).then_some(fb),
        err,
    ))
}

async fn existing_work(
    ctx: &Ctx,
    m: &Migration,
    role: MigrationRole,
) -> Result<Option<ManifestWork>, Error> {
    let works: Api<ManifestWork> = Api::namespaced(ctx.client.clone(), m.hub(role));
    ignore_not_found(works.get(&names::migration_work(&m.key, role)).await)
        .map_err(ctx_err(format!("reading the {} work", role.as_str())))
}

/// The task spec inside an existing work (to read back what was delivered).
fn delivered_task(work: &ManifestWork) -> Option<MigrationTaskSpec> {
    work.spec
        .workload
        .iter()
        .flat_map(|w| w.manifests.iter().flatten())
        .find(|m| m.get("kind").and_then(Value::as_str) == Some("MigrationTask"))
        .and_then(|m| serde_json::from_value(m.get("spec")?.clone()).ok())
}

async fn apply_work(ctx: &Ctx, work: &Value) -> Result<(), Error> {
    let ns = work["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = work["metadata"]["name"].as_str().unwrap_or_default();
    let api: Api<ManifestWork> = Api::namespaced(ctx.client.clone(), ns);
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(work),
    )
    .await
    .map_err(ctx_err(format!("applying ManifestWork {ns}/{name}")))?;
    Ok(())
}

fn base_task(
    mcm: &ManagedClusterMigration,
    role: MigrationRole,
    stage: TaskStage,
    clusters: Vec<String>,
) -> MigrationTaskSpec {
    let key = key_of(mcm);
    MigrationTaskSpec {
        migration: mcm.name_any(),
        migration_uid: mcm.uid(),
        migration_namespace: mcm.namespace(),
        bootstrap_secret_name: Some(names::migration_bootstrap_secret(&key)),
        klusterlet_config_name: Some(names::migration_klusterlet_config(&key)),
        key: Some(key),
        role,
        peer_hub: if role == MigrationRole::Source {
            mcm.spec.to.clone()
        } else {
            mcm.spec.from.clone()
        },
        clusters,
        stage,
        max_concurrency: mcm.spec.max_concurrency,
        max_failures: mcm.spec.max_failures,
        lift_disable_auto_import: (role == MigrationRole::Source)
            .then_some(mcm.spec.lift_disable_auto_import)
            .flatten(),
        ..Default::default()
    }
}

/// Delivers a task (with the extra manifests before it) to one hub; returns its revision.
async fn deliver(
    ctx: &Ctx,
    m: &Migration,
    role: MigrationRole,
    manifests: Vec<Value>,
    task_namespace: &str,
) -> Result<String, Error> {
    let revision = manifests
        .iter()
        .find(|o| o["kind"] == "MigrationTask")
        .and_then(|o| o["spec"]["revision"].as_str())
        .unwrap_or_default()
        .to_owned();
    let work = mr::work(m, role, manifests, mr::task_feedback(m, task_namespace));
    apply_work(ctx, &work).await?;
    Ok(revision)
}

// ---------------------------------------------------------------------------------------------
// Validating

async fn validating(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
) -> Result<Action, Error> {
    if let Err(e) = mcm.spec.validate() {
        step.fail_validation(reasons::INVALID_SPEC, &e.to_string());
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    if remaining(step, stage_timeout(mcm)).is_none() {
        step.fail_validation(reasons::TIMEOUT, &format!(
            "the hubs' agents did not report validation within {}; are the {} addons Available on {} and {}?",
            mcm.spec.stage_timeout.as_deref().unwrap_or("5m"), ctx.config.addon_name, m.from, m.to));
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    for (hub, role, msa) in [(&m.from, "source", false), (&m.to, "target", true)] {
        if let Some(problem) = hub_problem(ctx, hub, role, msa).await? {
            step.fail_validation(reasons::HUB_INVALID, &problem);
            return Ok(Action::requeue(Duration::from_millis(10)));
        }
    }
    if let Some(problem) = hubs_forbidden(ctx, mcm).await? {
        step.fail_validation(reasons::FORBIDDEN, &problem);
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    let hubs: BTreeSet<String> = Api::<ManagedCluster>::all(ctx.client.clone())
        .list_metadata(&ListParams::default())
        .await
        .map_err(ctx_err("listing the global hub's clusters"))?
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    let named = mcm.spec.included_managed_clusters.clone();
    if let Some(names) = &named
        && let Some(problem) = cluster_problem(ctx, mcm, names, &hubs).await?
    {
        step.fail_validation(problem.0, &problem.1);
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    // The source resolves and checks its clusters.
    let source_ns = addon_namespace(
        hub_addon(ctx, &m.from, &ctx.config.addon_name)
            .await?
            .as_ref(),
    );
    let target_ns = addon_namespace(
        hub_addon(ctx, &m.to, &ctx.config.addon_name)
            .await?
            .as_ref(),
    );
    let mut source_task = base_task(
        mcm,
        MigrationRole::Source,
        TaskStage::Validating,
        named.clone().unwrap_or_default(),
    );
    source_task.cluster_selector = mcm.spec.included_managed_clusters_selector.clone();
    let source_rev = deliver(
        ctx,
        m,
        MigrationRole::Source,
        mr::source_manifests(m, &source_ns, source_task, None)?,
        &source_ns,
    )
    .await?;
    let (source, source_err) = report(ctx, m, MigrationRole::Source, &source_rev).await?;
    if let Some(problem) =
        work_agent_refused(&ctx.config.addon_name, &m.from, source_err.as_deref())
    {
        step.fail_validation(reasons::HUB_INVALID, &problem);
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    let waiting = |what: &str, err: Option<String>| {
        let mut msg = format!("waiting for {what}");
        if let Some(e) = err {
            msg.push_str(&format!(" (the work reports: {e})"));
        }
        msg
    };
    let Some(source) = source.filter(|f| f.succeeded() || f.failed()) else {
        step.condition(
            RESOURCE_VALIDATED,
            "False",
            reasons::WAITING,
            &waiting(
                &format!("source hub {}'s agent to check the clusters", m.from),
                source_err,
            ),
        );
        return Ok(until(step, stage_timeout(mcm)));
    };
    // What the clusters carry comes back whole, as one string (no raw JSON feedback needed).
    let carry: Vec<CarriedCluster> = match source.carry.clone() {
        Some(Ok(c)) => c,
        Some(Err(e)) => {
            step.fail_validation(reasons::HUB_INVALID, &format!(
                "source hub {}'s agent reported what the clusters carry in a form this manager cannot read ({e}); run the same addon version on both", m.from));
            return Ok(Action::requeue(Duration::from_millis(10)));
        }
        None => {
            step.fail_validation(reasons::HUB_INVALID, &format!(
                "source hub {}'s agent did not report what the clusters carry (an agent older than this manager?); upgrade the addon on that hub", m.from));
            return Ok(Action::requeue(Duration::from_millis(10)));
        }
    };
    let resolved: Vec<String> = match &named {
        Some(n) => n.clone(),
        None => {
            if carry.is_empty() {
                step.fail_validation(
                    reasons::CLUSTER_NOT_FOUND,
                    &format!(
                        "includedManagedClustersSelector matches no cluster on source hub {}",
                        m.from
                    ),
                );
                return Ok(Action::requeue(Duration::from_millis(10)));
            }
            carry.iter().map(|c| c.name.clone()).collect()
        }
    };
    if carry.len() != resolved.len() || carry.iter().zip(&resolved).any(|(c, n)| c.name != *n) {
        step.fail_validation(reasons::HUB_INVALID, &format!(
            "source hub {}'s agent reported {} carry-over records for {} clusters; run the same addon version on both", m.from, carry.len(), resolved.len()));
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    let source_states = source.states(resolved.len());
    if source.failed() {
        let (reason, message) = failure_summary(
            &resolved,
            &source_states,
            &format!("on source hub {}", m.from),
        );
        step.status.resolved_clusters = Some(resolved);
        step.set_states(&source_states);
        step.fail_validation(reason, &message);
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    if named.is_none()
        && let Some(problem) = cluster_problem(ctx, mcm, &resolved, &hubs).await?
    {
        step.fail_validation(problem.0, &problem.1);
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    let Some(shape) = source.shape.as_deref().and_then(Shape::from_report) else {
        step.fail_validation(reasons::HUB_INVALID, &format!(
            "source hub {}'s agent did not say whether the hub serves a KlusterletConfig API (an agent older than this manager?); upgrade the addon on that hub", m.from));
        return Ok(Action::requeue(Duration::from_millis(10)));
    };
    // The target checks that none of them exists there.
    let target_task = base_task(
        mcm,
        MigrationRole::Target,
        TaskStage::Validating,
        resolved.clone(),
    );
    let target_rev = deliver(
        ctx,
        m,
        MigrationRole::Target,
        mr::target_manifests(m, &target_ns, target_task, None)?,
        &target_ns,
    )
    .await?;
    let (target, target_err) = report(ctx, m, MigrationRole::Target, &target_rev).await?;
    if let Some(problem) = work_agent_refused(&ctx.config.addon_name, &m.to, target_err.as_deref())
    {
        step.fail_validation(reasons::HUB_INVALID, &problem);
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    let Some(target) = target.filter(|f| f.succeeded() || f.failed()) else {
        step.condition(
            RESOURCE_VALIDATED,
            "False",
            reasons::WAITING,
            &waiting(
                &format!("target hub {}'s agent to check the clusters", m.to),
                target_err,
            ),
        );
        return Ok(until(step, stage_timeout(mcm)));
    };
    let target_states = target.states(resolved.len());
    step.status.resolved_clusters = Some(resolved.clone());
    if target.failed() {
        let (reason, message) = match failure_summary(
            &resolved,
            &target_states,
            &format!("on target hub {}", m.to),
        ) {
            // No cluster failed: the hub itself cannot take them, and its agent says why.
            (reasons::ERROR, _) if target.message.as_deref().is_some_and(|m| !m.is_empty()) => (
                reasons::HUB_INVALID,
                format!(
                    "target hub {}: {}",
                    m.to,
                    target.message.clone().unwrap_or_default()
                ),
            ),
            other => other,
        };
        step.set_states(&target_states);
        step.fail_validation(reason, &message);
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    step.set_states(&vec![ClusterState::Valid; resolved.len()]);
    step.status.bootstrap_delivery = Some(shape.delivery().into());
    if mcm.spec.dry_run == Some(true) {
        step.status.plan = Some(
            plan(
                ctx, mcm, m, &resolved, &carry, shape, &source_ns, &target_ns,
            )
            .await?,
        );
        step.condition(
            RESOURCE_VALIDATED,
            "True",
            reasons::DONE,
            &format!(
                "{} clusters can move from {} to {}",
                resolved.len(),
                m.from,
                m.to
            ),
        );
        step.enter(
            MigrationPhase::Completed,
            "dry run: the plan is in status.plan; nothing was changed",
        );
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    // What the clusters carry is recorded before anything is pre-created from it.
    step.status.carry_over = Some(carry);
    step.condition(
        RESOURCE_VALIDATED,
        "True",
        reasons::DONE,
        &format!(
            "{} clusters can move from {} to {} ({})",
            resolved.len(),
            m.from,
            m.to,
            shape.delivery()
        ),
    );
    step.enter(
        MigrationPhase::Initializing,
        "validated; preparing the bootstrap identity on the target",
    );
    Ok(Action::requeue(Duration::from_millis(10)))
}

/// Who may move what (OCM's tenancy model, [`migration_api::tenancy`]): both hubs must belong
/// to a ManagedClusterSet bound to the migration's namespace on the global hub, as they must
/// for a Placement there to select them. (The source agent checks the clusters the same way on
/// its hub.)
async fn hubs_forbidden(ctx: &Ctx, mcm: &ManagedClusterMigration) -> Result<Option<String>, Error> {
    let ns = mcm.namespace().unwrap_or_default();
    let bound = migration_api::runtime::bound_cluster_sets(&ctx.client, &ns)
        .await
        .map_err(|(what, e)| Error::Kube(what, e))?;
    let spec = mcm.effective_spec();
    let clusters: Api<ManagedCluster> = Api::all(ctx.client.clone());
    let mut outside = Vec::new();
    for hub in [&spec.from, &spec.to] {
        let labels = ignore_not_found(clusters.get(hub).await)
            .map_err(ctx_err(format!("reading hub {hub}")))?
            .map(|mc| mc.labels().clone())
            .unwrap_or_default();
        if !migration_api::tenancy::admitted(&bound, &labels) {
            outside.push(hub.as_str());
        }
    }
    if outside.is_empty() {
        return Ok(None);
    }
    Ok(Some(format!(
        "hub {} is in no ManagedClusterSet bound to namespace {ns}: a migration in {ns} may name only hubs a Placement in {ns} could select; bind a set that holds it (a ManagedClusterSetBinding in {ns}, e.g. `clusteradm clusterset bind global --namespace {ns}` on the global hub)",
        outside.join(" and hub ")
    )))
}

/// Why a hub cannot take part when its work agent was refused the migration's objects: it
/// runs as `admin` plus the ClusterRoles labelled aggregate-to-work, and the addon's install
/// brings the one for our kinds. Waiting would not help, so validation fails at once.
pub fn work_agent_refused(addon: &str, hub: &str, apply_error: Option<&str>) -> Option<String> {
    let e = apply_error?;
    e.to_ascii_lowercase().contains("forbidden").then(|| {
        format!(
            "the work agent on hub {hub} may not apply the migration's objects ({e}); it needs the addon's ClusterRole open-cluster-management:{addon}:work (labelled open-cluster-management.io/aggregate-to-work), which the {addon} addon installs: re-enable or upgrade the addon on {hub}"
        )
    })
}

/// Problems the global hub alone can see: a cluster that is a hub, or one in another active
/// migration.
async fn cluster_problem(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    clusters: &[String],
    hubs: &BTreeSet<String>,
) -> Result<Option<(&'static str, String)>, Error> {
    if let Some(c) = clusters.iter().find(|c| hubs.contains(*c)) {
        return Ok(Some((
            "ClusterIsHub",
            format!(
                "{c} is itself a hub (a managed cluster of the global hub) and cannot be migrated"
            ),
        )));
    }
    let all = Api::<ManagedClusterMigration>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(ctx_err("listing migrations"))?;
    let mine: BTreeSet<&String> = clusters.iter().collect();
    for other in all
        .items
        .iter()
        .filter(|o| o.uid() != mcm.uid() && active(o) && phase(o) != MigrationPhase::Pending)
    {
        if let Some(c) = clusters_of(other).iter().find(|c| mine.contains(c)) {
            return Ok(Some((
                reasons::CLUSTER_CONFLICT,
                format!(
                    "{c} is already in active migration {}/{}",
                    other.namespace().unwrap_or_default(),
                    other.name_any()
                ),
            )));
        }
    }
    Ok(None)
}

/// The reason and message of a failed validation report.
fn failure_summary(
    names: &[String],
    states: &[ClusterState],
    where_: &str,
) -> (&'static str, String) {
    let failed: Vec<(&String, (&'static str, &'static str))> = names
        .iter()
        .zip(states)
        .filter_map(|(n, s)| s.failure().map(|f| (n, f)))
        .collect();
    let Some((_, (reason, _))) = failed.first() else {
        return (reasons::ERROR, format!("validation failed {where_}"));
    };
    let listed: Vec<String> = failed
        .iter()
        .take(5)
        .map(|(n, (_, why))| format!("{n} {why}"))
        .collect();
    let more = if failed.len() > 5 {
        format!(" (and {} more; see status.failures)", failed.len() - 5)
    } else {
        String::new()
    };
    (
        reason,
        format!(
            "{} of {} clusters cannot move {where_}: {}{more}",
            failed.len(),
            names.len(),
            listed.join("; ")
        ),
    )
}

// ---------------------------------------------------------------------------------------------
// Initializing

/// The target hub's proxy settings: the proxyConfig of the AddOnDeploymentConfig its
/// cluster-migration addon uses.
async fn target_proxy(ctx: &Ctx, hub: &str) -> Result<Option<ProxyConfig>, Error> {
    let Some(mca) = hub_addon(ctx, hub, &ctx.config.addon_name).await? else {
        return Ok(None);
    };
    let Some(reference) = mca
        .status
        .as_ref()
        .and_then(|s| s.config_references.as_ref())
        .and_then(|r| r.iter().find(|c| c.resource == "addondeploymentconfigs"))
    else {
        return Ok(None);
    };
    let (name, ns) = match &reference.desired_config {
        Some(d) => (d.name.clone(), d.namespace.clone()),
        None => (reference.name.clone(), reference.namespace.clone()),
    };
    let api: Api<AddOnDeploymentConfig> =
        Api::namespaced(ctx.client.clone(), &ns.unwrap_or_default());
    Ok(ignore_not_found(api.get(&name).await)
        .map_err(ctx_err(format!("reading AddOnDeploymentConfig {name}")))?
        .and_then(|c| c.spec.proxy_config))
}

/// The target's bootstrap kubeconfig, once the ManagedServiceAccount has its token.
async fn bootstrap(ctx: &Ctx, m: &Migration) -> Result<Option<String>, Error> {
    let msas: Api<ManagedServiceAccount> = Api::namespaced(ctx.client.clone(), &m.to);
    let msa_name = names::migration_service_account(&m.key);
    let Some(msa) = ignore_not_found(msas.get(&msa_name).await)
        .map_err(ctx_err("reading the ManagedServiceAccount"))?
    else {
        return Ok(None);
    };
    let Some(secret_name) = msa.status.and_then(|s| s.token_secret_ref).map(|r| r.name) else {
        return Ok(None);
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &m.to);
    let Some(secret) = ignore_not_found(secrets.get(&secret_name).await)
        .map_err(ctx_err("reading the token secret"))?
    else {
        return Ok(None);
    };
    let data = secret.data.unwrap_or_default();
    let Some(token) = data
        .get("token")
        .and_then(|t| String::from_utf8(t.0.clone()).ok())
    else {
        return Ok(None);
    };
    let hub = Api::<ManagedCluster>::all(ctx.client.clone())
        .get(&m.to)
        .await
        .map_err(ctx_err(format!("reading target hub {}", m.to)))?;
    let Some(client_config) = hub
        .spec
        .managed_cluster_client_configs
        .unwrap_or_default()
        .into_iter()
        .find(|c| !c.url.is_empty())
    else {
        return Err(RenderError::Config(format!(
            "target hub {} reports no managedClusterClientConfigs",
            m.to
        ))
        .into());
    };
    let ca = client_config.ca_bundle.clone().or_else(|| {
        data.get("ca.crt")
            .map(|c| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &c.0))
    });
    let proxy = target_proxy(ctx, &m.to).await?;
    Ok(Some(mr::bootstrap_kubeconfig(
        &client_config.url,
        ca.as_deref(),
        &token,
        proxy.as_ref(),
    )?))
}

async fn initializing(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
) -> Result<Action, Error> {
    let msas: Api<ManagedServiceAccount> = Api::namespaced(ctx.client.clone(), &m.to);
    msas.patch(
        &names::migration_service_account(&m.key),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(m.service_account()),
    )
    .await
    .map_err(ctx_err("applying the ManagedServiceAccount"))?;
    match bootstrap(ctx, m).await {
        Ok(Some(_)) => {}
        Ok(None) => {
            if remaining(step, stage_timeout(mcm)).is_none() {
                step.condition(RESOURCE_INITIALIZED, "False", reasons::TIMEOUT, &format!(
                    "the ManagedServiceAccount on {} got no token in time; is the managed-serviceaccount addon running there?", m.to));
                step.rollback(reasons::TIMEOUT, "initializing timed out");
                return Ok(Action::requeue(Duration::from_millis(10)));
            }
            step.condition(
                RESOURCE_INITIALIZED,
                "False",
                reasons::WAITING,
                &format!(
                    "waiting for the bootstrap token of ManagedServiceAccount {}/{}",
                    m.to,
                    names::migration_service_account(&m.key)
                ),
            );
            return Ok(until(step, stage_timeout(mcm)));
        }
        Err(Error::Render(e)) => {
            step.condition(
                RESOURCE_INITIALIZED,
                "False",
                reasons::ERROR,
                &e.to_string(),
            );
            step.rollback(reasons::ERROR, &e.to_string());
            return Ok(Action::requeue(Duration::from_millis(10)));
        }
        Err(e) => return Err(e),
    }
    let rendered = match shape_of(step) {
        Shape::ManifestWork => format!(
            "bootstrap secret {} rendered for each cluster's klusterlet work",
            names::migration_bootstrap_secret(&m.key)
        ),
        _ => format!(
            "KlusterletConfig {} rendered",
            names::migration_klusterlet_config(&m.key)
        ),
    };
    step.condition(
        RESOURCE_INITIALIZED,
        "True",
        reasons::DONE,
        &format!(
            "bootstrap identity ready on {} (token valid {} s, not rotated), {rendered}",
            m.to,
            m.token_validity.as_secs(),
        ),
    );
    step.enter(
        MigrationPhase::Deploying,
        "delivering the tasks to both hubs",
    );
    Ok(Action::requeue(Duration::from_millis(10)))
}

// ---------------------------------------------------------------------------------------------
// Deploying, Registering, Rollbacking, Cleaning: both works, rendered from the status

fn shape_of(step: &Step) -> Shape {
    Shape::from_delivery(
        step.status
            .bootstrap_delivery
            .as_deref()
            .unwrap_or_default(),
    )
}

/// What the source receives in Deploying, for people.
fn delivered_what(step: &Step) -> &'static str {
    match shape_of(step) {
        Shape::ManifestWork => {
            "bootstrap kubeconfig (configuring each Klusterlet through a ManifestWork)"
        }
        _ => "KlusterletConfig and bootstrap kubeconfig",
    }
}

/// Tells a task how the bootstrap kubeconfig travels (the default, a current KlusterletConfig,
/// is left unsaid; plain OCM has no KlusterletConfig).
fn set_delivery(task: &mut MigrationTaskSpec, shape: Shape) {
    if shape != Shape::MultipleHubsConfig {
        task.delivery = Some(shape.task_delivery());
    }
    if shape == Shape::ManifestWork {
        task.klusterlet_config_name = None;
    }
}

fn non_empty(v: Vec<String>) -> Option<Vec<String>> {
    (!v.is_empty()).then_some(v)
}

/// Delivers the target's part; returns its revision. `rbac`: the bootstrap identity may
/// still register.
async fn deliver_target(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &Step,
    stage: TaskStage,
    rollback: Vec<String>,
    rbac: bool,
) -> Result<String, Error> {
    let names = step.status.resolved_clusters.clone().unwrap_or_default();
    let target_ns = addon_namespace(
        hub_addon(ctx, &m.to, &ctx.config.addon_name)
            .await?
            .as_ref(),
    );
    let msa_ns = addon_namespace(hub_addon(ctx, &m.to, MSA_ADDON).await?.as_ref());
    // What the clusters carry, from status (a migration validated by an older manager kept
    // it in the target's task only).
    let carry = match step.status.carry_over.clone() {
        Some(c) => Some(c),
        None => existing_work(ctx, m, MigrationRole::Target)
            .await?
            .as_ref()
            .and_then(delivered_task)
            .and_then(|t| t.carry_over),
    };
    // The target approves the CSRs of the clusters the source released, and of no other.
    let released_now = if stage == TaskStage::Registering {
        non_empty(released(&names, &step.states()))
    } else {
        None
    };
    let mut target = base_task(mcm, MigrationRole::Target, stage, names);
    target.carry_over = carry;
    target.bootstrap_user = Some(mr::bootstrap_user(m, &msa_ns));
    target.rollback = non_empty(rollback);
    target.released = released_now;
    set_delivery(&mut target, shape_of(step));
    // Where and how to reach the target, without the token: a plain OCM target makes the
    // clusters that arrive a bootstrap kubeconfig of its own from it (cleanup may still have
    // to settle one that arrived as Registering ended). The token never goes to the target.
    if matches!(stage, TaskStage::Registering | TaskStage::Cleaning)
        && let Some(kubeconfig) = bootstrap(ctx, m).await?
    {
        target.bootstrap_connection = Some(mr::without_credentials(&kubeconfig)?);
    }
    // The agent writes what it must while the work carries its grants; in Cleaning it also
    // releases the works of the copies it removes.
    let release = if stage == TaskStage::Cleaning {
        target.rollback.clone().unwrap_or_default()
    } else {
        Vec::new()
    };
    let grants = agent_grants(ctx, &target, &[], &target_ns, release);
    let mut manifests = mr::agent_grants(m, MigrationRole::Target, &grants)?;
    manifests.extend(mr::target_manifests(
        m,
        &target_ns,
        target,
        rbac.then_some(msa_ns.as_str()),
    )?);
    deliver(ctx, m, MigrationRole::Target, manifests, &target_ns).await
}

/// What a task's hub agent may write for it ([`mr::AgentGrants`]): nothing while it validates
/// (it only reads); then the task's clusters, on the target what they carry, and on the
/// source the KlusterletConfigs it derives from the clusters' own (`source_carry`: the
/// records the source reported).
fn agent_grants(
    ctx: &Ctx,
    task: &MigrationTaskSpec,
    source_carry: &[CarriedCluster],
    agent_namespace: &str,
    release: Vec<String>,
) -> mr::AgentGrants {
    if task.stage == TaskStage::Validating {
        return mr::AgentGrants::default();
    }
    let derived: BTreeSet<String> = match task.klusterlet_config_name.as_deref() {
        Some(base) => source_carry
            .iter()
            .filter_map(|c| c.own_klusterlet_config.as_deref())
            .map(|own| names::derived_klusterlet_config(base, Some(own)))
            .collect(),
        None => BTreeSet::new(),
    };
    let carry = task.carry_over.as_deref().unwrap_or_default();
    let sets: BTreeSet<String> = carry.iter().filter_map(|c| c.cluster_set.clone()).collect();
    let addons: BTreeSet<String> = carry
        .iter()
        .flat_map(|c| c.addons.iter().map(|a| a.name.clone()))
        .collect();
    mr::AgentGrants {
        addon: ctx.config.addon_name.clone(),
        agent_namespace: agent_namespace.to_owned(),
        clusters: task.clusters.clone(),
        sets: sets.into_iter().collect(),
        addons: addons.into_iter().collect(),
        klusterlet_configs: derived.into_iter().collect(),
        release,
    }
}

/// The source's part of a stage.
#[derive(Default)]
struct SourcePart {
    released: Vec<String>,
    rollback: Vec<String>,
    detach: Vec<String>,
}

/// Delivers the source's part; returns its revision, or `None` when the bootstrap kubeconfig
/// is needed (`need_bootstrap`) but its token is gone. Without the token the bootstrap secret
/// and KlusterletConfig are left out (rollback and cleanup do not need them).
async fn deliver_source(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &Step,
    stage: TaskStage,
    part: SourcePart,
    need_bootstrap: bool,
) -> Result<Option<String>, Error> {
    let names = step.status.resolved_clusters.clone().unwrap_or_default();
    let source_ns = addon_namespace(
        hub_addon(ctx, &m.from, &ctx.config.addon_name)
            .await?
            .as_ref(),
    );
    let kubeconfig = if source_carries_token(stage) {
        bootstrap(ctx, m).await?
    } else {
        None
    };
    if need_bootstrap && kubeconfig.is_none() {
        return Ok(None);
    }
    let mut source = base_task(mcm, MigrationRole::Source, stage, names);
    source.released = non_empty(part.released);
    source.rollback = non_empty(part.rollback);
    source.detach = non_empty(part.detach);
    let shape = shape_of(step);
    set_delivery(&mut source, shape);
    // Grants first, so that they are in place when the agent reads its task; in Cleaning the
    // agent also releases the works of the clusters it detaches.
    let release = source.detach.clone().unwrap_or_default();
    let carried = step.status.carry_over.clone().unwrap_or_default();
    let grants = agent_grants(ctx, &source, &carried, &source_ns, release);
    let mut manifests = mr::agent_grants(m, MigrationRole::Source, &grants)?;
    manifests.extend(mr::source_manifests(
        m,
        &source_ns,
        source,
        kubeconfig.as_deref().map(|k| (k, shape)),
    )?);
    Ok(Some(
        deliver(ctx, m, MigrationRole::Source, manifests, &source_ns).await?,
    ))
}

/// Whether the source's work carries the bootstrap token (its Secret, and the
/// KlusterletConfig naming it): only while clusters may still switch to the target. From
/// Rollbacking on every cluster either holds its own credentials on the target or goes back
/// to the source, and the token stays on no hub longer than that.
fn source_carries_token(stage: TaskStage) -> bool {
    matches!(stage, TaskStage::Deploying | TaskStage::Registering)
}

async fn deploying(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
) -> Result<Action, Error> {
    let tgt_rev = deliver_target(ctx, mcm, m, step, TaskStage::Deploying, vec![], true).await?;
    let Some(src_rev) = deliver_source(
        ctx,
        mcm,
        m,
        step,
        TaskStage::Deploying,
        SourcePart::default(),
        true,
    )
    .await?
    else {
        return Ok(token_missing(step, stage_timeout(mcm), RESOURCE_DEPLOYED));
    };
    let (source, source_err) = report(ctx, m, MigrationRole::Source, &src_rev).await?;
    let (target, target_err) = report(ctx, m, MigrationRole::Target, &tgt_rev).await?;
    let ready = source.as_ref().is_some_and(Feedback::succeeded)
        && target.as_ref().is_some_and(Feedback::succeeded);
    if !ready {
        if remaining(step, stage_timeout(mcm)).is_none() {
            let msg = format!(
                "the hubs did not confirm the delivery in time{}",
                err_suffix(source_err.or(target_err))
            );
            step.condition(RESOURCE_DEPLOYED, "False", reasons::TIMEOUT, &msg);
            step.rollback(reasons::TIMEOUT, &msg);
            return Ok(Action::requeue(Duration::from_millis(10)));
        }
        let msg = format!(
            "waiting for {} to confirm the {} and {} to pre-create the clusters{}",
            m.from,
            delivered_what(step),
            m.to,
            err_suffix(source_err.or(target_err))
        );
        step.condition(RESOURCE_DEPLOYED, "False", reasons::WAITING, &msg);
        return Ok(until(step, stage_timeout(mcm)));
    }
    step.condition(
        RESOURCE_DEPLOYED,
        "True",
        reasons::DONE,
        &format!(
            "{} on {}; {} clusters pre-created on {}",
            delivered_what(step),
            m.from,
            step.status.resolved_clusters.as_ref().map_or(0, Vec::len),
            m.to
        ),
    );
    step.enter(MigrationPhase::Registering, "switching clusters");
    Ok(Action::requeue(Duration::from_millis(10)))
}

fn err_suffix(e: Option<String>) -> String {
    e.map(|e| format!(" (a work reports: {e})"))
        .unwrap_or_default()
}

/// The bootstrap token's Secret is missing while a stage needs it: a moment's miss (the
/// managed-serviceaccount addon re-creating or rotating it) is waited for, woken by the
/// ManagedServiceAccount's status; only when it stays missing past the stage's timeout does
/// the migration roll back.
fn token_missing(step: &mut Step, timeout: Duration, condition: &str) -> Action {
    if remaining(step, timeout).is_none() {
        step.rollback(
            reasons::TIMEOUT,
            "the bootstrap token's Secret stayed missing past the stage timeout",
        );
        return Action::requeue(Duration::from_millis(10));
    }
    step.condition(
        condition,
        "False",
        reasons::WAITING,
        "waiting for the bootstrap token's Secret (the managed-serviceaccount addon re-creates it)",
    );
    until(step, timeout)
}

/// The outcome of one Registering step.
#[derive(Debug, PartialEq, Eq)]
pub enum Progress {
    /// Clusters are still switching or waiting.
    Running,
    /// Every cluster is registered on the target.
    Done,
    /// Nothing more can happen: some clusters must be rolled back.
    Stuck,
}

/// Advances the manager's per-cluster states from the hubs' reports and releases the next
/// clusters (a sliding window of `max_concurrency`; no new release once failures exceed
/// `max_failures`). Pure, so the wave logic is unit-tested.
pub fn advance(
    states: &mut [ClusterState],
    source: Option<&[ClusterState]>,
    target: Option<&[ClusterState]>,
    max_concurrency: usize,
    max_failures: usize,
) -> Progress {
    for (i, s) in states.iter_mut().enumerate() {
        let t = target.map(|t| t[i]);
        let src = source.map(|s| s[i]);
        match (*s, t) {
            (ClusterState::Available, _) => {}
            (_, Some(ClusterState::Available)) => *s = ClusterState::Available,
            (_, Some(ClusterState::Refused)) => *s = ClusterState::Refused,
            // Admitted by the target (its klusterlet joined there): recorded, so that a
            // rollback without the target's word never takes it back behind its back.
            (ClusterState::Switching, Some(ClusterState::Joined)) => *s = ClusterState::Joined,
            (
                ClusterState::Switching
                | ClusterState::Joined
                | ClusterState::Refused
                | ClusterState::NotFound,
                _,
            ) => {}
            _ => {
                if let Some(src) = src
                    && matches!(
                        src,
                        ClusterState::Waiting
                            | ClusterState::Ready
                            | ClusterState::Blocked
                            | ClusterState::NotFound
                    )
                {
                    *s = src;
                }
            }
        }
    }
    let failed = states.iter().filter(|s| s.failure().is_some()).count();
    let mut in_flight = states.iter().filter(|s| s.in_flight()).count();
    if failed <= max_failures {
        for s in states.iter_mut() {
            if in_flight >= max_concurrency.max(1) {
                break;
            }
            if *s == ClusterState::Ready {
                *s = ClusterState::Switching;
                in_flight += 1;
            }
        }
    }
    if states.iter().all(|s| *s == ClusterState::Available) {
        return Progress::Done;
    }
    let waiting = states.iter().any(|s| s.in_flight());
    let may_release = failed <= max_failures
        && states.iter().any(|s| {
            matches!(
                s,
                ClusterState::Ready
                    | ClusterState::Waiting
                    | ClusterState::Valid
                    | ClusterState::Blocked
                    | ClusterState::Pending
            )
        });
    if waiting || may_release {
        Progress::Running
    } else {
        Progress::Stuck
    }
}

/// A Warning event (`reason`) for each cluster that failed between `before` and `after`.
fn warn_new_failures(
    step: &mut Step,
    names: &[String],
    before: &[ClusterState],
    after: &[ClusterState],
    reason: &str,
) {
    for ((name, b), a) in names.iter().zip(before).zip(after) {
        if let Some((_, why)) = a.failure()
            && b.failure().is_none()
        {
            step.event(EventType::Warning, reason, format!("{name} {why}"));
        }
    }
}

fn released(names: &[String], states: &[ClusterState]) -> Vec<String> {
    names
        .iter()
        .zip(states)
        .filter(|(_, s)| {
            matches!(
                s,
                ClusterState::Switching
                    | ClusterState::Joined
                    | ClusterState::Available
                    | ClusterState::Refused
            )
        })
        .map(|(n, _)| n.clone())
        .collect()
}

async fn registering(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
) -> Result<Action, Error> {
    let names = step.status.resolved_clusters.clone().unwrap_or_default();
    let mut states = step.states();
    // Deliver what the status says (the release list), then read the reports on it. The
    // target hears of a release first: the source lets a cluster go only once the target has
    // reported on a revision that lists it (and so has recorded when it was released, the
    // earliest its bootstrap CSR may be asked for); until then the source keeps what it had.
    let tgt_rev = deliver_target(ctx, mcm, m, step, TaskStage::Registering, vec![], true).await?;
    let (target, _) = report(ctx, m, MigrationRole::Target, &tgt_rev).await?;
    let release = if target.is_some() {
        released(&names, &states)
    } else {
        // The target is silent: release no more than was released; if the source's work is
        // gone, what status records as in flight.
        existing_work(ctx, m, MigrationRole::Source)
            .await?
            .as_ref()
            .and_then(delivered_task)
            .filter(|t| t.stage == TaskStage::Registering)
            .and_then(|t| t.released)
            .unwrap_or_else(|| {
                names
                    .iter()
                    .zip(&states)
                    .filter(|(_, s)| s.in_flight())
                    .map(|(n, _)| n.clone())
                    .collect()
            })
    };
    let part = SourcePart {
        released: release,
        ..Default::default()
    };
    let Some(src_rev) =
        deliver_source(ctx, mcm, m, step, TaskStage::Registering, part, true).await?
    else {
        let timeout = mcm
            .spec
            .registering_timeout()
            .unwrap_or(migration_api::migration::DEFAULT_REGISTERING_TIMEOUT);
        return Ok(token_missing(step, timeout, CLUSTER_REGISTERED));
    };
    let (source, _) = report(ctx, m, MigrationRole::Source, &src_rev).await?;
    let before = states.clone();
    let max_conc = mcm
        .spec
        .max_concurrency
        .map_or(names.len(), |c| c.max(1) as usize);
    let max_fail = mcm.spec.max_failures.unwrap_or(0).max(0) as usize;
    let progress = advance(
        &mut states,
        source.as_ref().map(|f| f.states(names.len())).as_deref(),
        target.as_ref().map(|f| f.states(names.len())).as_deref(),
        max_conc,
        max_fail,
    );
    warn_new_failures(step, &names, &before, &states, "ClusterFailed");
    step.set_states(&states);
    let c = ClusterState::counts(&states);
    let timeout = mcm
        .spec
        .registering_timeout()
        .unwrap_or(migration_api::migration::DEFAULT_REGISTERING_TIMEOUT);
    match progress {
        Progress::Done => {
            step.condition(
                CLUSTER_REGISTERED,
                "True",
                reasons::DONE,
                &format!("all {} clusters are Available on {}", c.total, m.to),
            );
            step.enter(
                MigrationPhase::Cleaning,
                "every cluster registered on the target",
            );
            return Ok(Action::requeue(Duration::from_millis(10)));
        }
        Progress::Stuck => {
            let msg = format!(
                "{} of {} clusters registered; {} failed",
                c.registered, c.total, c.failed
            );
            step.condition(CLUSTER_REGISTERED, "False", "PartiallyRegistered", &msg);
            let reason = if c.failed as usize > max_fail {
                "FailureBudgetExceeded"
            } else {
                "Refused"
            };
            step.rollback(
                reason,
                &format!("{msg}; rolling back the clusters that did not arrive"),
            );
            return Ok(Action::requeue(Duration::from_millis(10)));
        }
        Progress::Running => {}
    }
    if remaining(step, timeout).is_none() {
        let msg = format!(
            "{} of {} clusters registered within {}",
            c.registered,
            c.total,
            mcm.spec.registering_timeout.as_deref().unwrap_or("12m")
        );
        step.condition(CLUSTER_REGISTERED, "False", reasons::TIMEOUT, &msg);
        step.rollback(reasons::TIMEOUT, &format!("{msg}; rolling back the others"));
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    let blocked = states
        .iter()
        .filter(|s| **s == ClusterState::Blocked)
        .count();
    let mut msg = format!(
        "{} of {} clusters registered on {}, {} switching",
        c.registered, c.total, m.to, c.switching
    );
    if blocked > 0 {
        msg.push_str(&format!(
            ", {blocked} held by the {} annotation",
            names::annotations::BLOCK_MOVE
        ));
    }
    step.condition(CLUSTER_REGISTERED, "False", reasons::WAITING, &msg);
    if states != before {
        // The status goes first; the next reconcile delivers the new release list.
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    Ok(until(step, timeout))
}

async fn rollbacking(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
) -> Result<Action, Error> {
    let names = step.status.resolved_clusters.clone().unwrap_or_default();
    let mut states = step.states();
    let to_roll: Vec<String> = names
        .iter()
        .zip(&states)
        .filter(|(_, s)| **s != ClusterState::Available)
        .map(|(n, _)| n.clone())
        .collect();
    // Nothing was delivered yet (failed while initializing): only the credentials go. Decided
    // from status, not from whether a work is still there (one deleted by hand must not make
    // the migration forget the clusters it touched).
    if !touched(&step.status) {
        step.condition(
            RESOURCE_ROLLED_BACK,
            "True",
            reasons::DONE,
            "no cluster had been touched",
        );
        step.enter(MigrationPhase::Cleaning, "rolled back");
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    // The target first: it stops admitting them and removes what it pre-created; the source
    // then takes back each cluster the target has let go.
    let target_view = existing_work(ctx, m, MigrationRole::Target)
        .await?
        .map(|w| Feedback::of(&w));
    let target_states = target_view.as_ref().map(|f| f.states(names.len()));
    let target_done: BTreeSet<&String> = match &target_states {
        Some(ts) => names
            .iter()
            .zip(ts)
            .filter(|(_, s)| **s == ClusterState::RolledBack)
            .map(|(n, _)| n)
            .collect(),
        None => BTreeSet::new(),
    };
    // The bootstrap identity keeps its rights while rolling back: a klusterlet that already
    // chose the target must still see its CSR approved to get away again.
    let target_rev = deliver_target(
        ctx,
        mcm,
        m,
        step,
        TaskStage::Rollbacking,
        to_roll.clone(),
        true,
    )
    .await?;
    let (target, _) = report(ctx, m, MigrationRole::Target, &target_rev).await?;
    // A target that does not answer (its API or agent down) cannot hold the clusters hostage:
    // after half the stage timeout the source takes back every cluster the target was never
    // seen to admit; the target's pre-created copies go in Cleaning, once it answers again.
    let target_silent = target.is_none() && remaining(step, stage_timeout(mcm) / 2).is_none();
    let source_list = source_takes_back(&names, &states, &to_roll, &target_done, target_silent);
    // Clusters that arrived after all stay where they are.
    if let Some(t) = &target {
        let ts = t.states(names.len());
        for (i, s) in states.iter_mut().enumerate() {
            if ts[i] == ClusterState::Available && *s != ClusterState::Available {
                *s = ClusterState::Available;
            }
        }
    }
    let part = SourcePart {
        rollback: source_list.clone(),
        ..Default::default()
    };
    let src_rev = deliver_source(ctx, mcm, m, step, TaskStage::Rollbacking, part, false)
        .await?
        .unwrap_or_default();
    let (source, _) = report(ctx, m, MigrationRole::Source, &src_rev).await?;
    let target_ok = target.as_ref().is_some_and(Feedback::succeeded);
    let source_ok =
        source.as_ref().is_some_and(Feedback::succeeded) && source_list.len() == to_roll.len();
    mark_rolled_back(&mut states, source.as_ref());
    step.set_states(&states);
    let back = states
        .iter()
        .filter(|s| **s == ClusterState::RolledBack)
        .count();
    if (target_ok || target_silent) && source_ok {
        let mut msg = format!(
            "{} clusters back on {} and Available; {} stay on {}",
            to_roll.len(),
            m.from,
            ClusterState::counts(&states).registered,
            m.to
        );
        if !target_ok {
            msg.push_str(&format!(
                "; {} did not answer, so its pre-created copies are removed once it is back",
                m.to
            ));
        }
        step.condition(RESOURCE_ROLLED_BACK, "True", reasons::DONE, &msg);
        step.enter(MigrationPhase::Cleaning, &msg);
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    if remaining(step, stage_timeout(mcm)).is_none() {
        let msg = format!(
            "rollback did not finish in time: {back} of {} clusters verified back on {}",
            to_roll.len(),
            m.from
        );
        step.condition(RESOURCE_ROLLED_BACK, "False", reasons::TIMEOUT, &msg);
        step.enter(MigrationPhase::Cleaning, &msg);
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    let cause = step
        .status
        .conditions
        .as_deref()
        .and_then(|c| find_condition(c, RESOURCE_ROLLED_BACK))
        .map(|c| c.reason.clone())
        .unwrap_or_default();
    let mut msg = format!(
        "rolling back: {back} of {} clusters back on {}",
        to_roll.len(),
        m.from
    );
    if target.is_none() {
        msg.push_str(&format!("; waiting for {} to answer", m.to));
        if target_silent {
            msg.push_str(", taking the clusters back without it");
        }
    }
    step.condition(RESOURCE_ROLLED_BACK, "False", &cause, &msg);
    if target.is_none() && !target_silent {
        // Wake up when the target's grace ends (or earlier, on its report).
        return Ok(until(step, stage_timeout(mcm) / 2));
    }
    Ok(until(step, stage_timeout(mcm)))
}

/// Which clusters to roll back the source takes back now: those the target has let go
/// (`target_done`) and, when the target has been silent past its grace, those it was never
/// seen to admit (a cluster recorded `Joined` or `Available` there may be connected to it;
/// taking it back behind the target's back would leave it accepted by both hubs).
fn source_takes_back(
    names: &[String],
    states: &[ClusterState],
    to_roll: &[String],
    target_done: &BTreeSet<&String>,
    target_silent: bool,
) -> Vec<String> {
    names
        .iter()
        .zip(states)
        .filter(|(n, s)| {
            to_roll.contains(n)
                && (target_done.contains(n)
                    || (target_silent
                        && !matches!(s, ClusterState::Joined | ClusterState::Available)))
        })
        .map(|(n, _)| n.clone())
        .collect()
}

/// Marks the clusters the source reports back home as rolled back (failures keep their
/// reason).
fn mark_rolled_back(states: &mut [ClusterState], source: Option<&Feedback>) {
    let Some(sf) = source else { return };
    let ss = sf.states(states.len());
    for (s, reported) in states.iter_mut().zip(ss) {
        if reported == ClusterState::RolledBack && !s.arrived() && s.failure().is_none() {
            *s = ClusterState::RolledBack;
        }
    }
}

async fn cleaning(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
) -> Result<Action, Error> {
    let names = step.status.resolved_clusters.clone().unwrap_or_default();
    let mut states = step.states();
    // Whatever did not arrive goes back, and so does a cluster the target lost since.
    let rollback: Vec<String> = names
        .iter()
        .zip(&states)
        .filter(|(_, s)| !s.arrived())
        .map(|(n, _)| n.clone())
        .collect();
    // The hubs' part is recorded as done (reason `Removing`) before the works are removed, so
    // that a work gone afterwards is not taken for one still to deliver.
    let hubs_done = step
        .status
        .conditions
        .as_deref()
        .and_then(|c| find_condition(c, RESOURCE_CLEANED))
        .is_some_and(|c| c.reason == reasons::REMOVING);
    if touched(&step.status) && !hubs_done {
        let tgt = deliver_target(
            ctx,
            mcm,
            m,
            step,
            TaskStage::Cleaning,
            rollback.clone(),
            false,
        )
        .await?;
        // Before the source lets go of a cluster that arrived, the target says again that it
        // has it; the verdict goes into status before the source hears of it.
        let (target, _) = report(ctx, m, MigrationRole::Target, &tgt).await?;
        let before = states.clone();
        recheck_arrived(
            &mut states,
            target.as_ref().map(|f| f.states(names.len())).as_deref(),
            remaining(step, stage_timeout(mcm)).is_none(),
        );
        if states != before {
            warn_new_failures(step, &names, &before, &states, "ClusterLost");
            step.set_states(&states);
            return Ok(Action::requeue(Duration::from_millis(10)));
        }
        let detach: Vec<String> = names
            .iter()
            .zip(&states)
            .filter(|(_, s)| **s == ClusterState::Moved)
            .map(|(n, _)| n.clone())
            .collect();
        let unconfirmed = states
            .iter()
            .filter(|s| **s == ClusterState::Available)
            .count();
        let part = SourcePart {
            rollback: rollback.clone(),
            detach: detach.clone(),
            ..Default::default()
        };
        let src = deliver_source(ctx, mcm, m, step, TaskStage::Cleaning, part, false)
            .await?
            .unwrap_or_default();
        let (source, _) = report(ctx, m, MigrationRole::Source, &src).await?;
        mark_rolled_back(&mut states, source.as_ref());
        step.set_states(&states);
        let done = unconfirmed == 0
            && source.as_ref().is_some_and(Feedback::succeeded)
            && target.as_ref().is_some_and(Feedback::succeeded);
        if target.is_none() && !rollback.is_empty() {
            // Only the target can remove its pre-created copies of the clusters that did not
            // arrive; its work stays until it has (an unreachable hub gets no deadline here).
            step.condition(
                RESOURCE_CLEANED,
                "False",
                reasons::WAITING,
                &format!(
                    "waiting for {} to answer: it must remove its pre-created copies of {} clusters that did not arrive",
                    m.to,
                    rollback.len()
                ),
            );
            return Ok(Action::requeue(stage_timeout(mcm)));
        }
        if !done {
            // Never given up on: removing the works and the token without the hubs' word could
            // leave a cluster refused by its source or moved but still listed there. A later
            // answer finishes the job; past the stage timeout the condition says so.
            let late = remaining(step, stage_timeout(mcm)).is_none();
            let silent: Vec<&str> = [(&m.from, source.is_none()), (&m.to, target.is_none())]
                .into_iter()
                .filter(|(_, s)| *s)
                .map(|(h, _)| h.as_str())
                .collect();
            let mut msg = format!(
                "waiting for {} to detach {} moved clusters and take back {}",
                m.from,
                detach.len(),
                rollback.len()
            );
            if unconfirmed > 0 {
                msg.push_str(&format!(
                    "; {unconfirmed} arrived clusters are not Available on {} now, and are detached once they are",
                    m.to
                ));
            }
            if !silent.is_empty() {
                msg.push_str(&format!("; no answer from {}", silent.join(" and ")));
            }
            if late {
                msg.push_str(" (past the stage timeout: the migration's objects stay until the hubs confirm)");
            }
            step.condition(
                RESOURCE_CLEANED,
                "False",
                if late {
                    reasons::TIMEOUT
                } else {
                    reasons::WAITING
                },
                &msg,
            );
            return Ok(if late {
                Action::requeue(stage_timeout(mcm))
            } else {
                until(step, stage_timeout(mcm))
            });
        }
        step.condition(
            RESOURCE_CLEANED,
            "False",
            reasons::REMOVING,
            "the hubs are done; removing the migration's objects",
        );
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    // Works first (their objects go with them), and the bootstrap credentials last.
    if !remove_everything(ctx, m).await? {
        step.condition(
            RESOURCE_CLEANED,
            "False",
            reasons::REMOVING,
            "waiting for the hubs to remove the migration's objects",
        );
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let c = ClusterState::counts(&states);
    step.condition(
        RESOURCE_CLEANED,
        "True",
        reasons::DONE,
        &format!(
            "temporary objects removed from {} and {}; bootstrap ServiceAccount revoked",
            m.from, m.to
        ),
    );
    let rolled_back_cleanly = step
        .status
        .conditions
        .as_deref()
        .and_then(|cs| find_condition(cs, RESOURCE_ROLLED_BACK))
        .is_none_or(|c| c.status == "True");
    let max_fail = mcm.spec.max_failures.unwrap_or(0).max(0) as usize;
    // The counts keep each cluster's last state (a refused cluster stays "failed"), so the
    // ones that stayed are the ones that did not move.
    let not_moved = (c.total - c.registered).max(0) as usize;
    let summary = format!(
        "{} of {} clusters moved from {} to {}; {not_moved} stayed on {}",
        c.registered, c.total, m.from, m.to, m.from
    );
    let end = verdict(
        step.status.rollback_cause.as_deref(),
        rolled_back_cleanly,
        &c,
        max_fail,
    );
    step.enter(end, &summary);
    Ok(Action::requeue(Duration::from_millis(10)))
}

/// Cleaning: the target's word (`target`, its report on the current Cleaning task) on each
/// cluster recorded as arrived, before the source may detach it. Available there: `Moved`
/// (the source detaches it). Refused there or gone from it: `Lost` (not detached; the source
/// takes it back). Accepted there but not Available (its lease late): left for now, and
/// `Moved` once `past_timeout` (it belongs to the hub that accepts it). Without a report,
/// nothing changes.
pub fn recheck_arrived(
    states: &mut [ClusterState],
    target: Option<&[ClusterState]>,
    past_timeout: bool,
) {
    let Some(target) = target else { return };
    for (s, t) in states.iter_mut().zip(target) {
        if *s != ClusterState::Available {
            continue;
        }
        *s = match t {
            ClusterState::Available => ClusterState::Moved,
            ClusterState::Refused | ClusterState::Pending => ClusterState::Lost,
            _ if past_timeout => ClusterState::Moved,
            _ => ClusterState::Available,
        };
    }
}

/// How a migration ends, from why it rolled back (`cause`, as first recorded; `None`: it did
/// not), whether that rollback finished, the final counts and the failures the spec allows:
/// Completed only if some cluster moved, those that did not are within `maxFailures`, and a
/// rollback there was came from clusters the target refused (within that budget) and finished.
/// Any other cause (FailureBudgetExceeded, Timeout, Deleted, Error) fails the migration.
fn verdict(
    cause: Option<&str>,
    rolled_back_cleanly: bool,
    counts: &ClusterCounts,
    max_failures: usize,
) -> MigrationPhase {
    let not_moved = (counts.total - counts.registered).max(0) as usize;
    let benign = match cause {
        None => true,
        Some("Refused") => rolled_back_cleanly,
        Some(_) => false,
    };
    if benign && counts.registered > 0 && not_moved <= max_failures {
        MigrationPhase::Completed
    } else {
        MigrationPhase::Failed
    }
}

/// Whether the migration may have touched clusters: it left Initializing (its
/// `ResourceInitialized` condition turned True in the same status write that entered
/// Deploying, before the first task that changes a cluster went out).
fn touched(status: &ManagedClusterMigrationStatus) -> bool {
    status
        .conditions
        .as_deref()
        .is_some_and(|c| condition_is_true(c, RESOURCE_INITIALIZED))
}

/// Deletes the works and the ManagedServiceAccount; true once all are gone. The
/// ManagedServiceAccount goes only after the works, so a klusterlet mid-switch never loses
/// its bootstrap credentials while the target still expects it.
async fn remove_everything(ctx: &Ctx, m: &Migration) -> Result<bool, Error> {
    let mut gone = true;
    for role in [MigrationRole::Source, MigrationRole::Target] {
        let hub = m.hub(role);
        let works: Api<ManifestWork> = Api::namespaced(ctx.client.clone(), hub);
        let name = names::migration_work(&m.key, role);
        match ignore_not_found(works.get(&name).await).map_err(ctx_err("reading a work"))? {
            None => {}
            Some(w) => {
                gone = false;
                if w.metadata.deletion_timestamp.is_none() {
                    ignore_not_found(works.delete(&name, &DeleteParams::default()).await)
                        .map_err(ctx_err(format!("deleting work {hub}/{name}")))?;
                }
            }
        }
    }
    if !gone {
        return Ok(false);
    }
    let msas: Api<ManagedServiceAccount> = Api::namespaced(ctx.client.clone(), &m.to);
    let name = names::migration_service_account(&m.key);
    match ignore_not_found(msas.get(&name).await)
        .map_err(ctx_err("reading the ManagedServiceAccount"))?
    {
        None => Ok(true),
        Some(msa) => {
            if msa.metadata.deletion_timestamp.is_none() {
                ignore_not_found(msas.delete(&name, &DeleteParams::default()).await)
                    .map_err(ctx_err("revoking the ManagedServiceAccount"))?;
            }
            Ok(false)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Dry run

#[allow(clippy::too_many_arguments)]
async fn plan(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    clusters: &[String],
    carry: &[CarriedCluster],
    shape: Shape,
    source_ns: &str,
    target_ns: &str,
) -> Result<MigrationPlan, Error> {
    let wave = mcm
        .spec
        .max_concurrency
        .map_or(clusters.len(), |c| c.max(1) as usize)
        .max(1);
    let waves = clusters.chunks(wave).map(<[String]>::to_vec).collect();
    let hub = Api::<ManagedCluster>::all(ctx.client.clone())
        .get(&m.to)
        .await
        .map_err(ctx_err("reading the target hub"))?;
    let url = hub
        .spec
        .managed_cluster_client_configs
        .unwrap_or_default()
        .into_iter()
        .next()
        .map(|c| (c.url, c.ca_bundle));
    let (server, ca) = url.unwrap_or_default();
    let proxy = target_proxy(ctx, &m.to).await?;
    let kubeconfig =
        mr::bootstrap_kubeconfig(&server, ca.as_deref(), mr::REDACTED, proxy.as_ref())?;
    let msa_ns = addon_namespace(hub_addon(ctx, &m.to, MSA_ADDON).await?.as_ref());
    let mut source = base_task(
        mcm,
        MigrationRole::Source,
        TaskStage::Registering,
        clusters.to_vec(),
    );
    source.released = Some(clusters.to_vec());
    set_delivery(&mut source, shape);
    let mut target = base_task(
        mcm,
        MigrationRole::Target,
        TaskStage::Registering,
        clusters.to_vec(),
    );
    target.carry_over = Some(carry.to_vec());
    target.bootstrap_user = Some(mr::bootstrap_user(m, &msa_ns));
    target.released = Some(clusters.to_vec());
    target.bootstrap_connection = Some(mr::without_credentials(&kubeconfig)?);
    set_delivery(&mut target, shape);
    let mut objects = vec![planned(GLOBAL_HUB, &m.service_account())];
    for o in mr::source_manifests(m, source_ns, source, Some((&kubeconfig, shape)))? {
        objects.push(planned(&m.from, &mr::redact(&o)));
    }
    for o in mr::target_manifests(m, target_ns, target, Some(&msa_ns))? {
        objects.push(planned(&m.to, &mr::redact(&o)));
    }
    for c in carry.iter().take(PLAN_CLUSTER_OBJECTS) {
        let mut labels = c.labels.clone();
        if let Some(set) = &c.cluster_set {
            labels.insert(labels::CLUSTER_SET.into(), set.clone());
        }
        objects.push(planned(
            &m.to,
            &json!({
                "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
                "metadata": {"name": c.name, "labels": labels},
                "spec": {"hubAcceptsClient": true}
            }),
        ));
    }
    Ok(MigrationPlan {
        clusters: clusters.to_vec(),
        waves,
        objects,
    })
}

fn planned(hub: &str, o: &Value) -> PlannedObject {
    PlannedObject {
        hub: hub.into(),
        api_version: o["apiVersion"].as_str().unwrap_or_default().into(),
        kind: o["kind"].as_str().unwrap_or_default().into(),
        namespace: o["metadata"]["namespace"].as_str().map(str::to_owned),
        name: o["metadata"]["name"].as_str().unwrap_or_default().into(),
        object: Some(o.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ClusterState::*;

    fn mcm(to: &str, phase: MigrationPhase, accepted_to: Option<&str>) -> ManagedClusterMigration {
        let spec = |to: &str| ManagedClusterMigrationSpec {
            from: "hub1".into(),
            to: to.into(),
            included_managed_clusters: Some(vec!["c1".into()]),
            ..Default::default()
        };
        let mut m = ManagedClusterMigration::new("m", spec(to));
        m.status = Some(ManagedClusterMigrationStatus {
            phase: Some(phase),
            accepted_spec: accepted_to.map(spec),
            ..Default::default()
        });
        m
    }

    fn step_of(m: &ManagedClusterMigration) -> Step {
        Step {
            status: m.status.clone().unwrap_or_default(),
            events: Vec::new(),
            generation: None,
        }
    }

    #[test]
    fn clusters_count_as_touched_once_initializing_is_done() {
        let with = |status: Option<&str>| {
            let mut st = ManagedClusterMigrationStatus::default();
            if let Some(s) = status {
                set_condition(
                    st.conditions.get_or_insert_with(Vec::new),
                    RESOURCE_INITIALIZED,
                    s,
                    reasons::DONE,
                    "",
                    None,
                );
            }
            st
        };
        assert!(!touched(&with(None)), "validating or initializing");
        assert!(!touched(&with(Some("False"))), "failed while initializing");
        assert!(touched(&with(Some("True"))), "deploying and after");
    }

    #[test]
    fn an_edit_after_pending_is_ignored_and_reported() {
        // (phase, spec.to, accepted to, the `to` the phases see, SpecAccepted status)
        let cases = [
            (MigrationPhase::Pending, "hub3", None, "hub3", None),
            (
                MigrationPhase::Registering,
                "hub3",
                Some("hub2"),
                "hub2",
                Some("False"),
            ),
            (
                MigrationPhase::Registering,
                "hub2",
                Some("hub2"),
                "hub2",
                None,
            ),
            // Started by a manager that kept no copy: the spec as it is now is taken.
            (MigrationPhase::Deploying, "hub2", None, "hub2", None),
        ];
        for (phase, to, accepted, sees, condition) in cases {
            let m = mcm(to, phase, accepted);
            let mut step = step_of(&m);
            let held = hold_spec(Arc::new(m), phase, &mut step);
            assert_eq!(held.spec.to, sees, "{phase:?} {to} {accepted:?}");
            let c = step
                .status
                .conditions
                .as_deref()
                .and_then(|c| find_condition(c, conditions::SPEC_ACCEPTED))
                .map(|c| c.status.clone());
            assert_eq!(c.as_deref(), condition, "{phase:?} {to} {accepted:?}");
            if phase != MigrationPhase::Pending {
                assert!(step.status.accepted_spec.is_some());
            }
        }
        // The message names the edit; the Warning is published once.
        let m = mcm("hub3", MigrationPhase::Registering, Some("hub2"));
        let mut step = step_of(&m);
        hold_spec(Arc::new(m.clone()), MigrationPhase::Registering, &mut step);
        let message = find_condition(
            step.status.conditions.as_deref().unwrap(),
            conditions::SPEC_ACCEPTED,
        )
        .unwrap()
        .message
        .clone();
        assert!(message.contains("to: hub2 -> hub3"), "{message}");
        assert_eq!(step.events.len(), 1);
        let mut again = m;
        again.status = Some(step.status.clone());
        let mut step2 = step_of(&again);
        hold_spec(Arc::new(again), MigrationPhase::Registering, &mut step2);
        assert!(step2.events.is_empty());
        // Put back: True again.
        let mut back = mcm("hub2", MigrationPhase::Registering, Some("hub2"));
        back.status = Some(step.status);
        let mut step3 = step_of(&back);
        hold_spec(Arc::new(back), MigrationPhase::Registering, &mut step3);
        let c = find_condition(
            step3.status.conditions.as_deref().unwrap(),
            conditions::SPEC_ACCEPTED,
        )
        .unwrap();
        assert_eq!(c.status, "True");
    }

    #[test]
    fn the_source_holds_the_token_only_while_clusters_may_switch() {
        use TaskStage::*;
        for (stage, carries) in [
            (Validating, false),
            (Deploying, true),
            (Registering, true),
            (Rollbacking, false),
            (Cleaning, false),
        ] {
            assert_eq!(source_carries_token(stage), carries, "{stage:?}");
        }
    }

    #[test]
    fn an_arrived_cluster_is_detached_only_with_the_targets_word() {
        // (recorded, target says, past the stage timeout, becomes)
        let cases = [
            (Available, Some(Available), false, Moved),
            (Available, Some(Refused), false, Lost),
            (Available, Some(Pending), false, Lost),
            (Available, Some(Joined), false, Available),
            (Available, Some(Created), false, Available),
            (Available, Some(Joined), true, Moved),
            (Available, Some(Refused), true, Lost),
            (Available, None, false, Available),
            (Available, None, true, Available),
            // Decided once: the target's later word changes nothing.
            (Moved, Some(Refused), false, Moved),
            (Lost, Some(Available), false, Lost),
            // Only arrived clusters are rechecked.
            (Refused, Some(Available), false, Refused),
            (RolledBack, Some(Pending), false, RolledBack),
        ];
        for (recorded, says, late, want) in cases {
            let mut states = [recorded];
            let target = says.map(|t| [t]);
            recheck_arrived(&mut states, target.as_ref().map(|t| &t[..]), late);
            assert_eq!(states[0], want, "{recorded:?} {says:?} late={late}");
        }
    }

    #[test]
    fn a_silent_target_keeps_the_clusters_it_admitted() {
        let names: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        let states = [Switching, Joined, Refused, Available];
        let to_roll: Vec<String> = names[..3].to_vec();
        let none = BTreeSet::new();
        assert_eq!(
            source_takes_back(&names, &states, &to_roll, &none, false),
            Vec::<String>::new(),
            "the target still has its say"
        );
        assert_eq!(
            source_takes_back(&names, &states, &to_roll, &none, true),
            ["a", "c"],
            "silent: never the joined one"
        );
        let b = names[1].clone();
        let done: BTreeSet<&String> = [&b].into();
        assert_eq!(
            source_takes_back(&names, &states, &to_roll, &done, false),
            ["b"],
            "let go by the target"
        );
    }

    #[test]
    fn a_cluster_the_target_admitted_is_recorded_joined_and_stays_released() {
        let mut s = vec![Switching, Switching];
        let p = advance(&mut s, None, Some(&[Joined, Created]), 2, 0);
        assert_eq!(s, [Joined, Switching]);
        assert_eq!(p, Progress::Running);
        let names: Vec<String> = ["a", "b"].map(String::from).to_vec();
        assert_eq!(released(&names, &s), ["a", "b"]);
        // Silent target afterwards: it stays Joined.
        let p = advance(&mut s, None, None, 2, 0);
        assert_eq!(s, [Joined, Switching]);
        assert_eq!(p, Progress::Running);
        let p = advance(&mut s, None, Some(&[Available, Available]), 2, 0);
        assert_eq!(p, Progress::Done);
    }

    #[test]
    fn verdict_table() {
        let counts = |total: i32, registered: i32| ClusterCounts {
            total,
            registered,
            failed: total - registered,
            ..Default::default()
        };
        use MigrationPhase::{Completed, Failed};
        let cases = [
            ("all moved", None, true, counts(3, 3), 0, Completed),
            ("none moved", None, true, counts(3, 0), 3, Failed),
            (
                "refused within the budget",
                Some("Refused"),
                true,
                counts(3, 2),
                1,
                Completed,
            ),
            (
                "refused, rollback unfinished",
                Some("Refused"),
                false,
                counts(3, 2),
                1,
                Failed,
            ),
            (
                "refused beyond the budget",
                Some("Refused"),
                true,
                counts(3, 1),
                1,
                Failed,
            ),
            (
                "budget exceeded, even if it would fit now",
                Some("FailureBudgetExceeded"),
                true,
                counts(3, 2),
                1,
                Failed,
            ),
            (
                "timed out, even with all but one moved",
                Some("Timeout"),
                true,
                counts(3, 2),
                1,
                Failed,
            ),
            (
                "deleted in flight",
                Some("Deleted"),
                true,
                counts(3, 2),
                1,
                Failed,
            ),
            ("an error", Some("Error"), true, counts(3, 3), 0, Failed),
        ];
        for (what, cause, clean, c, max, want) in cases {
            assert_eq!(verdict(cause, clean, &c, max), want, "{what}");
        }
    }

    #[test]
    fn releases_ready_clusters_in_a_window_of_max_concurrency() {
        let mut s = vec![Valid; 5];
        let src = [Ready, Ready, Waiting, Ready, Blocked];
        assert_eq!(advance(&mut s, Some(&src), None, 2, 0), Progress::Running);
        assert_eq!(s, [Switching, Switching, Waiting, Ready, Blocked]);
        // One arrives: the next ready one goes.
        let tgt = [Available, Created, Created, Created, Created];
        assert_eq!(
            advance(&mut s, Some(&src), Some(&tgt), 2, 0),
            Progress::Running
        );
        assert_eq!(s, [Available, Switching, Waiting, Switching, Blocked]);
    }

    #[test]
    fn done_when_every_cluster_is_available_on_the_target() {
        let mut s = vec![Switching; 3];
        assert_eq!(
            advance(&mut s, None, Some(&[Available; 3]), 3, 0),
            Progress::Done
        );
        assert_eq!(ClusterState::counts(&s).registered, 3);
    }

    #[test]
    fn failures_past_the_budget_stop_new_releases_and_end_stuck() {
        let mut s = vec![Valid; 4];
        let src = [Ready; 4];
        advance(&mut s, Some(&src), None, 2, 0);
        let tgt = [Refused, Available, Created, Created];
        let p = advance(&mut s, Some(&src), Some(&tgt), 2, 0);
        assert_eq!(
            s,
            [Refused, Available, Ready, Ready],
            "no release after a failure over budget"
        );
        assert_eq!(p, Progress::Stuck);
        // With a budget of one the window keeps moving.
        let mut s = vec![Valid; 4];
        advance(&mut s, Some(&src), None, 2, 1);
        advance(&mut s, Some(&src), Some(&tgt), 2, 1);
        assert_eq!(s, [Refused, Available, Switching, Switching]);
    }

    #[test]
    fn a_blocked_cluster_holds_the_migration_until_released() {
        let mut s = vec![Valid; 2];
        assert_eq!(
            advance(&mut s, Some(&[Ready, Blocked]), None, 5, 0),
            Progress::Running
        );
        assert_eq!(
            advance(
                &mut s,
                Some(&[Switching, Blocked]),
                Some(&[Available, Created]),
                5,
                0
            ),
            Progress::Running
        );
        assert_eq!(s, [Available, Blocked]);
        assert_eq!(
            advance(
                &mut s,
                Some(&[Switching, Ready]),
                Some(&[Available, Created]),
                5,
                0
            ),
            Progress::Running
        );
        assert_eq!(s, [Available, Switching]);
    }

    #[test]
    fn a_work_agent_refused_our_kinds_makes_the_hub_invalid() {
        let why = work_agent_refused(
            "cluster-migration",
            "hub2",
            Some("MigrationTask m: migrationtasks.migration.open-cluster-management.io \"m\" is forbidden: User \"system:serviceaccount:open-cluster-management-agent:klusterlet-work-sa\" cannot get resource"),
        )
        .unwrap();
        assert!(
            why.contains("hub2") && why.contains("aggregate-to-work"),
            "{why}"
        );
        assert_eq!(
            work_agent_refused("a", "hub2", Some("the server is busy")),
            None
        );
        assert_eq!(work_agent_refused("a", "hub2", None), None);
    }

    #[test]
    fn failure_summaries_name_the_clusters() {
        let (reason, msg) = failure_summary(
            &["a".into(), "b".into()],
            &[NotFound, Valid],
            "on source hub hub1",
        );
        assert_eq!(reason, "ClusterNotFound");
        assert_eq!(
            msg,
            "1 of 2 clusters cannot move on source hub hub1: a not found on the source hub"
        );
    }
}
