//! The addon lifecycle controller. One reconcile covers the whole addon (its
//! ClusterManagementAddOn and every ManagedClusterAddOn of it), so rollout decisions across hubs
//! are taken in one place: create ManagedClusterAddOns for install placements, render and apply
//! each hub's deploy works and hub RBAC, track agent versions (upgrade, failure, rollback), run
//! the pre-delete hook on removal, and report it all in status.
//!
//! Where version progress is shown (upstream's schema prunes anything else):
//! - the Progressing condition of each ManagedClusterAddOn (reason Progressing / Completed /
//!   Failed / Waiting; the message names the versions; its lastTransitionTime is when the
//!   change started or ended);
//! - annotations on the ManagedClusterAddOn (`migration.open-cluster-management.io/agent-*`:
//!   version, desired, last-good, previous, failed, rollout-started, rollout-completed);
//! - `status.configReferences[].desiredConfig` / `lastAppliedConfig` spec hashes;
//! - the agent's own `AgentRunning` condition (the version it runs);
//! - the ClusterManagementAddOn's `status.installProgressions[].conditions` per placement.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use migration_api::common::{Condition, condition_is_true, set_condition};
use migration_api::names::annotations as ann;
use migration_api::names::condition_status::{FALSE, TRUE};
use migration_api::names::conditions::{
    AVAILABLE, CONFIGURED, DEGRADED, MANIFEST_APPLIED, PROGRESSING, REGISTRATION_APPLIED,
};
use migration_api::names::reasons::{
    ADDON_MANIFEST_APPLIED, COMPLETED, FAILED, MANIFEST_WORK_APPLY_FAILED,
};
use migration_api::names::{self, KUBE_APISERVER_CLIENT_SIGNER, finalizers, labels};
use migration_api::ocm::addon::{
    AddOnDeploymentConfig, AddOnDeploymentConfigSpec, ClusterManagementAddOn, ManagedClusterAddOn,
};
use migration_api::ocm::cluster::{ManagedCluster, PlacementDecision};
use migration_api::ocm::work::{ManifestWork, feedback_value};
use migration_api::runtime;
use serde_json::{Value, json};

use migration_api::runtime::{ApiError, Context, apply_status_if_changed, ignore_not_found};

mod deploy;
mod desired;
mod hub;
mod placement;
mod remove;
mod status;

use deploy::*;
use desired::*;
use hub::*;
use placement::*;
use remove::*;
use status::*;

use crate::addon_version;
use crate::render::{self, AgentValues, Defaults};
use crate::rollout::{self, HubPhase, HubRollout};

/// Field manager of everything the manager writes.
pub const FIELD_MANAGER: &str = "cluster-migration-addon-manager";
/// Agent identity name in the registration subject.
pub const AGENT_IDENTITY: &str = "agent";
const ADC_GROUP: &str = "addon.open-cluster-management.io";
const ADC_RESOURCE: &str = "addondeploymentconfigs";
const MCA_API_VERSION: &str = "addon.open-cluster-management.io/v1alpha1";

/// Errors of the addon controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kube(#[from] ApiError),
    #[error("rendering: {0}")]
    Render(#[from] render::RenderError),
    #[error(transparent)]
    Panicked(#[from] migration_api::runtime::Panicked),
}

/// Settings of the addon controller.
#[derive(Clone, Debug)]
pub struct Config {
    pub metrics: crate::metrics::Metrics,
    pub defaults: Defaults,
    /// Agent versions this manager can deploy.
    pub supported_versions: Vec<String>,
    /// How long a new agent version may take to become Available when the rollout strategy
    /// sets no progressDeadline.
    pub progress_deadline: Duration,
    pub work_size_limit: usize,
}

struct Ctx {
    client: Client,
    cfg: Config,
}

/// The ClusterManagementAddOn this manager owns, as applied at start-up.
pub fn cluster_management_addon(addon: &str) -> Value {
    json!({
        "apiVersion": MCA_API_VERSION,
        "kind": "ClusterManagementAddOn",
        "metadata": {
            "name": addon,
            "annotations": {ann::ADDON_LIFECYCLE: ann::ADDON_LIFECYCLE_SELF},
            "labels": {labels::MANAGED_BY: labels::MANAGED_BY_VALUE},
        },
        "spec": {
            "addOnMeta": {"displayName": render::ADDON_DISPLAY_NAME, "description": render::ADDON_DESCRIPTION},
            "supportedConfigs": [{"group": ADC_GROUP, "resource": ADC_RESOURCE}],
        }
    })
}

/// Applies the ClusterManagementAddOn; its install strategy is Manual unless somebody set
/// another one (a user's Placements strategy is kept).
pub async fn ensure_cluster_management_addon(client: &Client, addon: &str) -> Result<(), Error> {
    let api: Api<ClusterManagementAddOn> = Api::all(client.clone());
    let current = api
        .get_opt(addon)
        .await
        .ctx(|| format!("reading ClusterManagementAddOn {addon}"))?;
    // The install strategy is ours to default (Manual) until somebody sets another one.
    let manual = current.as_ref().is_none_or(|c| {
        c.spec
            .install_strategy
            .as_ref()
            .is_none_or(|s| s.type_.as_deref().unwrap_or("Manual") == "Manual")
    });
    let mut desired = cluster_management_addon(addon);
    // Installed by the Helm chart: Helm's ownership labels stay as they are (a later
    // `helm upgrade` checks them).
    let helm_owned = current
        .as_ref()
        .is_some_and(|c| c.annotations().contains_key("meta.helm.sh/release-name"));
    if helm_owned && let Some(m) = desired["metadata"].as_object_mut() {
        m.remove("labels");
    }
    if manual {
        desired["spec"]["installStrategy"] = json!({"type": "Manual"});
    }
    api.patch(
        addon,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(desired),
    )
    .await
    .ctx(|| format!("applying ClusterManagementAddOn {addon}"))?;
    Ok(())
}

/// Runs the controller until `stop` resolves.
pub async fn run(
    client: Client,
    cfg: Config,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), Error> {
    let addon = cfg.defaults.addon_name.clone();
    // The OCM CRDs may arrive after the manager: keep trying, saying why.
    let mut stop = Box::pin(stop);
    let mut backoff = Duration::from_millis(500);
    loop {
        match ensure_cluster_management_addon(&client, &addon).await {
            Ok(()) => break,
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "cannot apply the ClusterManagementAddOn (are OCM's addon CRDs installed?)")
            }
        }
        // A retry backoff, not a wait for a result: what failed is our own write, and there is
        // nothing to watch until the ClusterManagementAddOn CRD exists (a missing CRD cannot be
        // watched by kind).
        tokio::select! {
            _ = &mut stop => return Ok(()),
            // Retry back-off of our own failed write (justified above), not a wait for a result.
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
    let cmas: Api<ClusterManagementAddOn> = Api::all(client.clone());
    let by_name = watcher::Config::default().fields(&format!("metadata.name={addon}"));
    let ours = watcher::Config::default().labels(&format!("{}={addon}", labels::ADDON_NAME));
    let key = ObjectRef::<ClusterManagementAddOn>::new(&addon);
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        cfg,
    });
    let (k1, k2, k3, k4) = (key.clone(), key.clone(), key.clone(), key);
    // Each watch backs off on its own (see `runtime::errors_stay_in_the_watch`).
    runtime::controller(cmas, by_name.clone())
        .watches_stream(
            runtime::errors_stay_in_the_watch(
                watcher(Api::<ManagedClusterAddOn>::all(client.clone()), by_name)
                    .default_backoff()
                    .touched_objects()
                    .predicate_filter(what_decides, Default::default()),
            ),
            move |_| Some(k1.clone()),
        )
        .watches_stream(
            runtime::watch_events(Api::<ManifestWork>::all(client.clone()), ours),
            move |_| Some(k2.clone()),
        )
        .watches_stream(
            runtime::watch_events(
                Api::<AddOnDeploymentConfig>::all(client.clone()),
                watcher::Config::default(),
            ),
            move |_| Some(k3.clone()),
        )
        .watches_stream(
            runtime::watch_events(
                Api::<PlacementDecision>::all(client.clone()),
                watcher::Config::default(),
            ),
            move |_| Some(k4.clone()),
        )
        .graceful_shutdown_on(stop)
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "addon reconcile");
            }
        })
        .await;
    Ok(())
}

/// What of a ManagedClusterAddOn this controller acts on, as a hash: all of it but the
/// conditions' messages and times. The agent's report rewrites its condition's message as its
/// hub's clusters change (up to twice a second while a migration runs), and nothing here reads
/// a message: without this, every report cost a reconcile of every hub.
fn what_decides(mca: &ManagedClusterAddOn) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut v = serde_json::to_value(mca).ok()?;
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        meta.remove("managedFields");
    }
    if let Some(conditions) = v
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for c in conditions.iter_mut().filter_map(Value::as_object_mut) {
            c.remove("message");
            c.remove("lastTransitionTime");
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.to_string().hash(&mut h);
    Some(h.finish())
}

fn error_policy(_: Arc<ClusterManagementAddOn>, e: &Error, _: Arc<Ctx>) -> Action {
    log_error(e, "");
    if let Error::Panicked(_) = e {
        return Action::requeue(migration_api::runtime::PANIC_RETRY);
    }
    Action::requeue(Duration::from_secs(2))
}

/// Logs a failed reconcile (of `hub`, or of the whole addon): a conflict (409: something
/// changed under it, such as an addon's first finalizer write racing the registration
/// controller) is expected and retried, so it is no warning.
fn log_error(e: &Error, hub: &str) {
    match e {
        Error::Kube(api) if api.is_conflict() => {
            tracing::debug!(hub, error = %e, "addon reconcile raced a change; retrying");
        }
        _ => tracing::warn!(hub, error = %e, "addon reconcile failed; retrying"),
    }
}

/// Where a hub's config comes from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ConfigRef {
    namespace: String,
    name: String,
}

fn adc_ref(configs: Option<&Vec<migration_api::common::AddOnConfig>>) -> Option<ConfigRef> {
    configs?
        .iter()
        .find(|c| c.resource == ADC_RESOURCE && (c.group.is_empty() || c.group == ADC_GROUP))
        .map(|c| ConfigRef {
            namespace: c.namespace.clone().unwrap_or_default(),
            name: c.name.clone(),
        })
}

fn annotation<'a>(o: &'a ManagedClusterAddOn, key: &str) -> Option<&'a str> {
    o.annotations()
        .get(key)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// Keeps the earlier of two requeue times.
fn sooner(requeue: &mut Option<Duration>, after: Duration) {
    *requeue = Some(requeue.map_or(after, |r| r.min(after)));
}

fn since(o: &ManagedClusterAddOn, key: &str) -> Option<Duration> {
    let t: jiff::Timestamp = annotation(o, key)?.parse().ok()?;
    Some(Duration::try_from(jiff::Timestamp::now().duration_since(t)).unwrap_or_default())
}

async fn reconcile(cma: Arc<ClusterManagementAddOn>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    let result = migration_api::runtime::unwinding(reconcile_one(cma, &ctx)).await;
    ctx.cfg
        .metrics
        .reconciled("addon", started.elapsed(), result.is_ok());
    result
}

async fn reconcile_one(cma: Arc<ClusterManagementAddOn>, ctx: &Ctx) -> Result<Action, Error> {
    let c = &ctx.client;
    let addon = &ctx.cfg.defaults.addon_name;
    let placements = install_placements(c, &cma).await?;
    let mcas: Vec<ManagedClusterAddOn> = Api::<ManagedClusterAddOn>::all(c.clone())
        .list(&ListParams::default().fields(&format!("metadata.name={addon}")))
        .await
        .ctx(|| "listing ManagedClusterAddOns".into())?
        .items;
    ctx.cfg.metrics.hubs_seen(
        mcas.iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .map(|m| {
                (
                    annotation(m, ann::AGENT_VERSION).unwrap_or("none"),
                    status::hub_state(m),
                )
            }),
    );
    // Addons it creates or deletes here come back as watch events and the next reconcile.
    sync_placement_addons(c, addon, &placements, &mcas).await?;
    // Pass 1: what each hub is asked to run, from one read of each config it points at.
    let refs = config_refs(&cma, &placements, &mcas);
    let configs = read_configs(ctx, refs.values().filter_map(|(c, _)| c.as_ref())).await?;
    let desired = desired_of_hubs(&refs, &configs, &ctx.cfg);
    // Rollout decisions per placement.
    let mut allowed: HashMap<String, bool> = HashMap::new();
    let mut requeue: Option<Duration> = None;
    let mut progressions = Vec::new();
    for (i, p) in placements.iter().enumerate() {
        let r = placement_rollout(i, p, &mcas, &desired);
        allowed.extend(r.allowed);
        if let Some(after) = r.requeue {
            sooner(&mut requeue, after);
        }
        progressions.push((p, r.status, r.reason, r.message));
    }
    // Pass 2: each hub.
    let deadline_of = |d: &Desired| {
        d.placement
            .and_then(|i| placements[i].params.as_ref().ok())
            .and_then(|p| p.progress_deadline)
            .unwrap_or(ctx.cfg.progress_deadline)
    };
    for mca in &mcas {
        let hub = mca.namespace().unwrap_or_default();
        let Some(d) = desired.get(&hub) else { continue };
        let result = if mca.metadata.deletion_timestamp.is_some() {
            remove(ctx, mca, d).await
        } else {
            let may_start = allowed.get(&hub).copied().unwrap_or(true);
            let deadline = deadline_of(d);
            reconcile_hub(ctx, mca, d, may_start, deadline).await
        };
        match result {
            Ok(Some(after)) => sooner(&mut requeue, after),
            Ok(None) => {}
            Err(e) => {
                log_error(&e, &hub);
                requeue = Some(Duration::from_secs(2));
            }
        }
    }
    write_progressions(ctx, &cma, &progressions).await?;
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// Where a hub stands with respect to version `v`.
fn phase_of(m: &ManagedClusterAddOn, v: &str) -> HubPhase {
    if annotation(m, ann::AGENT_FAILED_VERSION) == Some(v) {
        HubPhase::Failed
    } else if annotation(m, ann::AGENT_VERSION) == Some(v) {
        if annotation(m, ann::AGENT_LAST_GOOD_VERSION) == Some(v) {
            HubPhase::Succeeded(since(m, ann::AGENT_ROLLOUT_COMPLETED).unwrap_or(Duration::MAX))
        } else {
            HubPhase::InProgress
        }
    } else {
        HubPhase::ToUpdate
    }
}

fn owner_of(mca: &ManagedClusterAddOn) -> Value {
    json!({
        "apiVersion": MCA_API_VERSION, "kind": "ManagedClusterAddOn",
        "name": mca.name_any(), "uid": mca.uid().unwrap_or_default(),
        "controller": true, "blockOwnerDeletion": true,
    })
}

async fn apply_dynamic(c: &Client, obj: &Value) -> Result<(), Error> {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let kind = obj["kind"].as_str().unwrap_or_default();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let ns = obj["metadata"]["namespace"].as_str();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let plural = format!("{}s", kind.to_lowercase());
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, &plural);
    let api: Api<kube::api::DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(c.clone(), ns, &ar),
        None => Api::all_with(c.clone(), &ar),
    };
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
    .ctx(|| {
        format!(
            "applying {kind} {}{name}",
            ns.map(|n| format!("{n}/")).unwrap_or_default()
        )
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mca(message: &str, status: &str, annotation: &str) -> ManagedClusterAddOn {
        serde_json::from_value(json!({
            "metadata": {"name": "cluster-migration", "namespace": "hub1",
                         "resourceVersion": message.len().to_string(),
                         "annotations": {"x": annotation}},
            "spec": {},
            "status": {"conditions": [{"type": "AgentRunning", "status": status,
                "reason": "Running", "message": message,
                "lastTransitionTime": format!("2026-01-01T00:00:{:02}Z", message.len() % 60)}]}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn an_agents_report_message_alone_wakes_no_addon_reconcile() {
        let before = what_decides(&mca("1 managed clusters", "True", "a"));
        assert_eq!(
            before,
            what_decides(&mca("300 managed clusters, 12 available", "True", "a")),
            "a new message (and resourceVersion) is no reason to reconcile"
        );
        assert_ne!(
            before,
            what_decides(&mca("1 managed clusters", "False", "a"))
        );
        assert_ne!(
            before,
            what_decides(&mca("1 managed clusters", "True", "b"))
        );
    }
}
