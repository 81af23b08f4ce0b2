//! The migration controller: drives each ManagedClusterMigration through its phases.
//!
//! The manager never talks to a managed hub: each hub's part goes down as a MigrationTask
//! inside the ManifestWork `migration-<name>-source` / `-target` and comes back through that
//! work's status feedback (per-cluster states as one character each). Every decision is
//! written to the migration's status before it is acted on, so a manager restarted at any
//! moment continues where the last one stopped. Waits are watches (works, the
//! ManagedServiceAccount, other migrations); stage timeouts are requeues at the deadline.
//!
//! Layout: this module holds the wiring (the controller, the reconcile, the status accumulator
//! `Step`); `accepted` the spec held once started; one module per phase (`pending`,
//! `validating`, `initializing`, `deploying`, `registering`, `rollbacking`, `cleaning`) holds
//! that phase's handler and its pure decisions, and `abandon` how a wait on hubs and
//! clusters ends (Cleaning's bound, a user's `abandon`); `hubs` reads the hubs, `feedback` decodes a
//! task's report, `deliver` builds each hub's work, `plan` writes a dry run's plan. The phases
//! that deliver tasks decide from a [`World`] the shell read for them (`world`), and every
//! phase puts the works it writes into the step's effects (`effects`), applied by the shell
//! once the phase has decided, before the status is written.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use migration_api::common::{
    Condition, Time, condition_is_true, find_condition, now, set_condition_at,
};
use migration_api::migration::{
    CarriedCluster, CarryOverParts, ClusterCounts, ClusterState, ManagedClusterMigration,
    ManagedClusterMigrationSpec, ManagedClusterMigrationStatus, MigrationPhase, MigrationPlan,
    MigrationRole, MigrationTaskSpec, PlannedObject, TaskStage, Timeouts, format_duration,
};
use migration_api::names::condition_status::{FALSE, TRUE};
use migration_api::names::conditions::{
    AVAILABLE, CLUSTER_AVAILABLE, CLUSTER_REGISTERED, MIGRATION_STARTED, RESOURCE_CLEANED,
    RESOURCE_DEPLOYED, RESOURCE_INITIALIZED, RESOURCE_ROLLED_BACK, RESOURCE_VALIDATED,
};
use migration_api::names::{
    self, DEFAULT_ADDON_INSTALL_NAMESPACE, conditions, finalizers, labels, reasons,
};
use migration_api::ocm::addon::{AddOnDeploymentConfig, ManagedClusterAddOn, ProxyConfig};
use migration_api::ocm::cluster::{self, ManagedCluster, Placement, PlacementDecision};
use migration_api::ocm::msa::ManagedServiceAccount;
use migration_api::ocm::work::ManifestWork;
use migration_api::runtime::{
    ApiError, StatusWrite, ctx_err, ignore_not_found, write_status_if_changed,
};
use migration_api::task_report::TaskReport;
use serde_json::{Value, json};

use crate::migration_render::{self as mr, Migration, Shape};
use crate::render::RenderError;

mod abandon;
mod accepted;
mod carry;
mod cleaning;
mod deliver;
#[cfg(test)]
mod deliver_tests;
mod deploying;
mod effects;
mod feedback;
mod hubs;
mod initializing;
mod observed;
mod outcome;
#[cfg(test)]
mod outcome_tests;
mod pending;
#[cfg(test)]
mod phase_tests;
mod plan;
mod registering;
mod request;
mod rollbacking;
#[cfg(test)]
mod scale_tests;
#[cfg(test)]
mod start_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod validate_tests;
mod validating;
mod world;

use abandon::*;
use accepted::*;
use carry::*;
use cleaning::*;
use deliver::*;
use deploying::*;
use effects::*;
use feedback::*;
use hubs::*;
use initializing::*;
use outcome::*;
use pending::*;
use plan::*;
use registering::*;
use request::*;
use rollbacking::*;
use validating::*;
use world::*;

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
    pub metrics: crate::metrics::Metrics,
}

struct Ctx {
    client: Client,
    config: Config,
    recorder: Recorder,
    /// Every migration, as the controller sees them (for the metrics).
    migrations: kube::runtime::reflector::Store<ManagedClusterMigration>,
    /// What the migrations read of the global hub, from the watches.
    observed: observed::Observed,
    /// Each migration's carry-over decoded from its parts, by key, with their digest.
    carry_memo: std::sync::Mutex<std::collections::HashMap<String, CarryMemo>>,
    /// The works the API server said are gone since this process last applied them.
    gone_works: GoneWorks,
}

/// A carry-over's digest and its records.
type CarryMemo = (String, Arc<Vec<CarriedCluster>>);

/// Why a reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kube(#[from] ApiError),
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error(transparent)]
    Panicked(#[from] migration_api::runtime::Panicked),
}

/// Runs the controller until `stop` resolves.
pub async fn run(
    client: Client,
    config: Config,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), kube::Error> {
    let mcms: Api<ManagedClusterMigration> = Api::all(client.clone());
    // Each watch backs off on its own (`runtime::controller`, `runtime::watch_events`).
    let controller = migration_api::runtime::controller(mcms.clone(), watcher::Config::default());
    let store = controller.store();
    let (observed, controller) = observed::Observed::start(&client, controller);
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
        migrations: store.clone(),
        observed,
        carry_memo: std::sync::Mutex::default(),
        gone_works: GoneWorks::default(),
    });
    controller
        // A migration waiting for another on the same hub pair starts when that one ends; one
        // waiting for free names of a target's pool of bootstrap identities gets them when
        // another gives them back (and ends).
        .watches_stream(
            migration_api::runtime::watch_events(mcms, watcher::Config::default()),
            move |changed: ManagedClusterMigration| {
                store
                    .state()
                    .into_iter()
                    .filter(|m| {
                        matches!(
                            phase(m),
                            MigrationPhase::Pending | MigrationPhase::Initializing
                        ) && m.uid() != changed.uid()
                    })
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
    let migration = format!("{}/{}", mcm.namespace().unwrap_or_default(), mcm.name_any());
    if let Error::Panicked(_) = e {
        tracing::error!(%migration, error = %e, "migration reconcile panicked");
        return Action::requeue(migration_api::runtime::PANIC_RETRY);
    }
    tracing::info!(%migration, error = %e, "migration reconcile failed; retrying");
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
        token_validity: mcm.effective_spec().token_validity(cluster_count(mcm)),
        from: mcm.spec.from.clone(),
        to: mcm.spec.to.clone(),
        clusters: mcm
            .status
            .as_ref()
            .and_then(|s| s.resolved_clusters.as_ref())
            .map_or(0, Vec::len),
        identity_names: mcm
            .status
            .as_ref()
            .and_then(|s| s.bootstrap_identities.clone())
            .unwrap_or_default(),
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

/// What one reconcile changes: the new status and the events to publish. `now` is the
/// reconcile's clock, read once by the shell: every time the decisions stamp or compare
/// (a phase's start, a condition's transition, a deadline) is this one, so a decision is a
/// function of what was observed and `now`.
#[derive(Clone)]
struct Step {
    status: ManagedClusterMigrationStatus,
    events: Vec<(EventType, String, String)>,
    generation: Option<i64>,
    now: Time,
    /// The works to apply or remove, in order ([`Effect`]), applied by the shell once the
    /// phase has decided.
    effects: Vec<Effect>,
}

impl Step {
    fn conditions(&mut self) -> &mut Vec<Condition> {
        self.status.conditions.get_or_insert_with(Vec::new)
    }

    fn condition(&mut self, type_: &str, status: &str, reason: &str, message: &str) {
        let condition = Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: self.generation,
            last_transition_time: self.now.clone(),
        };
        set_condition_at(self.conditions(), condition);
    }

    fn enter(&mut self, next: MigrationPhase, why: &str) {
        let from = self.status.phase.unwrap_or_default();
        if from == next {
            return;
        }
        self.status.phase = Some(next);
        self.status.phase_start_time = Some(self.now.clone());
        if next.is_terminal() {
            self.status.completion_time = Some(self.now.clone());
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
        self.condition(RESOURCE_VALIDATED, FALSE, reason, message);
        self.enter(MigrationPhase::Failed, message);
    }

    /// Starts rolling back, remembering why.
    fn rollback(&mut self, reason: &str, message: &str) {
        self.condition(RESOURCE_ROLLED_BACK, FALSE, reason, message);
        // The first cause stands: what follows (the rollback's own progress, a timeout of it)
        // reports on the condition, not here.
        if self.status.rollback_cause.is_none() {
            self.status.rollback_cause = Some(reason.to_owned());
        }
        self.enter(MigrationPhase::Rollbacking, message);
    }

    /// The clusters the migration resolved.
    fn names(&self) -> Vec<String> {
        self.status.resolved_clusters.clone().unwrap_or_default()
    }

    /// The clusters the migration resolved, and the state of each.
    fn clusters(&self) -> (Vec<String>, Vec<ClusterState>) {
        (self.names(), self.states())
    }

    fn states(&self) -> Vec<ClusterState> {
        let n = self.status.resolved_clusters.as_ref().map_or(0, Vec::len);
        ClusterState::decode(self.status.cluster_states.as_deref().unwrap_or(""), n)
    }

    fn set_states(&mut self, states: &[ClusterState]) {
        self.status.cluster_states = Some(ClusterState::encode(states));
        let names = self.names();
        self.status.clusters = Some(ClusterState::counts(states));
        let failures = ClusterState::failures(&names, states);
        self.status.failures = (!failures.is_empty()).then_some(failures);
    }
}

async fn reconcile(mcm: Arc<ManagedClusterMigration>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    use tracing::Instrument;
    let started = std::time::Instant::now();
    // Every line logged for a migration names it.
    let span = tracing::info_span!(
        "reconcile",
        migration = %format!("{}/{}", mcm.namespace().unwrap_or_default(), mcm.name_any())
    );
    let reference = mcm.object_ref(&());
    let result = migration_api::runtime::unwinding(reconcile_one(mcm, &ctx).instrument(span)).await;
    if let Err(e @ Error::Panicked(_)) = &result {
        // The user sees it on the migration (`kubectl describe`), not only in the log.
        let event = Event {
            type_: EventType::Warning,
            reason: "ReconcileFailed".into(),
            note: Some(format!(
                "{e}; this is a bug of the addon-manager, please report it"
            )),
            action: "Migrate".into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &reference).await {
            tracing::debug!(error = %e, "publishing an event");
        }
    }
    let metrics = &ctx.config.metrics;
    metrics.reconciled("migration", started.elapsed(), result.is_ok());
    metrics.migrations_seen(ctx.migrations.state().iter().map(|m| &**m));
    result
}

async fn reconcile_one(mcm: Arc<ManagedClusterMigration>, ctx: &Ctx) -> Result<Action, Error> {
    ctx.observed.ready().await;
    let deleting = mcm.metadata.deletion_timestamp.is_some();
    let current = phase(&mcm);
    let has_finalizer = mcm
        .finalizers()
        .iter()
        .any(|f| f == finalizers::MIGRATION_CLEANUP);
    if !deleting && !current.is_terminal() && !has_finalizer {
        set_finalizer(ctx, &mcm, true).await?;
        return Ok(Action::await_change());
    }
    let mut step = Step {
        status: mcm.status.clone().unwrap_or_default(),
        events: Vec::new(),
        generation: mcm.metadata.generation,
        now: now(),
        effects: Vec::new(),
    };
    step.status.observed_generation = mcm.metadata.generation;
    let mcm = hold_spec(mcm, current, &mut step);
    if deleting && let Some(deleted) = on_delete(current) {
        step.settle(deleted);
    } else if let Some(request) = mcm.annotations().get(names::annotations::REQUEST)
        && !answered(request, &step.status)
    {
        let answer = on_request(&mcm, &step.status, request);
        let said = match &answer.create {
            Some(retry) => create_retry(ctx, retry, &mcm, answer.said).await?,
            None => answer.said,
        };
        step.say(&said);
        if answer.abandon {
            step.condition(
                conditions::ABANDONED,
                TRUE,
                reasons::ABANDON_REQUESTED,
                "a user asked to stop waiting for the hubs (request: abandon)",
            );
        }
        if let Some(outcome) = answer.outcome {
            step.settle(outcome);
        }
    }
    let m = migration_of(&mcm);
    let action = match step.status.phase.unwrap_or_default() {
        MigrationPhase::Pending => pending(ctx, &mcm, &mut step).await?,
        MigrationPhase::Validating => validating(ctx, &mcm, &m, &mut step).await?,
        MigrationPhase::Initializing => initializing(ctx, &mcm, &m, &mut step).await?,
        MigrationPhase::Deploying => {
            delivering(ctx, &mcm, &m, &mut step, TaskStage::Deploying, deploy).await?
        }
        MigrationPhase::Registering => {
            delivering(ctx, &mcm, &m, &mut step, TaskStage::Registering, register).await?
        }
        MigrationPhase::Rollbacking => {
            delivering(ctx, &mcm, &m, &mut step, TaskStage::Rollbacking, roll_back).await?
        }
        MigrationPhase::Cleaning => cleaning(ctx, &mcm, &m, &mut step).await?,
        MigrationPhase::Completed | MigrationPhase::Failed => {
            let parts = step.status.carry_over_parts.as_ref();
            let clean = remove_everything(ctx, &m, parts, abandoned(&step.status)).await?;
            if clean && let Ok(mut memo) = ctx.carry_memo.lock() {
                memo.remove(&m.key);
            }
            if clean && has_finalizer && step.status == mcm.status.clone().unwrap_or_default() {
                set_finalizer(ctx, &mcm, false).await?;
            }
            Action::await_change()
        }
    };
    apply_effects(ctx, &m, std::mem::take(&mut step.effects)).await?;
    write_status(ctx, &mcm, step).await?;
    Ok(action)
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
        Err(e) => Err(Error::Kube(ApiError::new(
            "updating the migration's finalizers",
            e,
        ))),
    }
}

async fn write_status(ctx: &Ctx, mcm: &ManagedClusterMigration, step: Step) -> Result<(), Error> {
    let reference = mcm.object_ref(&());
    let api: Api<ManagedClusterMigration> =
        Api::namespaced(ctx.client.clone(), &mcm.namespace().unwrap_or_default());
    // A newer version (409) brings us back with fresh state, and what this step decided is
    // decided again; its events are published then.
    let written = write_status_if_changed(
        &api,
        &mcm.name_any(),
        mcm.resource_version(),
        mcm.status.as_ref(),
        &step.status,
    )
    .await
    .map_err(ctx_err("writing the migration's status"))?;
    if written == StatusWrite::Stale {
        return Ok(());
    }
    if matches!(written, StatusWrite::Written(_)) && tracing::enabled!(tracing::Level::DEBUG) {
        // Where the migration stands, each time it changes (for timing a run from the log).
        let said: Vec<String> = step
            .status
            .conditions
            .iter()
            .flatten()
            .map(|c| format!("{}={} {}", c.type_, c.status, c.message))
            .collect();
        tracing::debug!(phase = ?step.status.phase, conditions = ?said, "status written");
    }
    if let Some(before) = &mcm.status {
        ctx.config.metrics.transitioned(before, &step.status);
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

/// Time left at `step.now` before the current phase times out, or `None` when it has.
fn remaining(step: &Step, timeout: Duration) -> Option<Duration> {
    let started = step.status.phase_start_time.as_ref()?.0;
    let elapsed = step.now.0.duration_since(started);
    let elapsed = Duration::try_from(elapsed).unwrap_or_default();
    timeout.checked_sub(elapsed).filter(|d| !d.is_zero())
}

/// Requeue at the phase deadline (the watches bring us back sooner when anything changes).
fn until(step: &Step, timeout: Duration) -> Action {
    Action::requeue(
        remaining(step, timeout).unwrap_or(Duration::from_secs(1)) + Duration::from_millis(100),
    )
}

/// The migration's timeouts, scaled to its clusters (those it resolved, else those it names).
fn timeouts(mcm: &ManagedClusterMigration) -> Timeouts {
    mcm.spec.timeouts(cluster_count(mcm))
}

/// How many clusters the migration resolved, else names.
fn cluster_count(mcm: &ManagedClusterMigration) -> usize {
    mcm.status
        .as_ref()
        .and_then(|s| s.resolved_clusters.as_ref())
        .or(mcm.spec.included_managed_clusters.as_ref())
        .map_or(0, Vec::len)
}

/// How many clusters may fail (`maxFailures`, none below zero).
fn max_failures(mcm: &ManagedClusterMigration) -> usize {
    mcm.spec.max_failures.unwrap_or(0).max(0) as usize
}
