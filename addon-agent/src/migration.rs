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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use migration_api::common::{condition_is_true, selector_matches};
use migration_api::migration::{
    BootstrapDelivery, CarriedAddOn, CarriedCluster, ClusterState, MAX_CARRY_OVER_PER_CLUSTER,
    MAX_CARRY_OVER_TOTAL, MigrationRole, MigrationTask, TaskStage,
};
use migration_api::names;
use migration_api::names::annotations::{
    BLOCK_MOVE, DISABLE_AUTO_IMPORT, KLUSTERLET_CONFIG, KLUSTERLET_DEPLOY_MODE, MIGRATING,
    ORIGINAL_KLUSTERLET_CONFIG, PRE_CREATED, RELEASED_AT,
};
use migration_api::names::conditions::{CLUSTER_AVAILABLE, JOINED, WORK_APPLIED};
use migration_api::names::labels::{CLUSTER_NAME, CLUSTER_SET, LOCAL_CLUSTER};
use migration_api::ocm::addon::ManagedClusterAddOn;
use migration_api::ocm::agent::KlusterletAddonConfig;
use migration_api::ocm::cluster::{ManagedCluster, ManagedClusterSet};
use migration_api::ocm::work::ManifestWork;
use migration_api::runtime::{csr_decided, ignore_not_found, requested_identity};
use migration_api::tenancy;
use serde_json::{Value, json};

use crate::klusterlet_work::{self as kw, Registration, Step};
use crate::report::FIELD_MANAGER;
use crate::{admission, flight};

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
}

/// Clusters whose return to this hub is awaited: their lease renewals wake the handler.
type Awaited = Arc<std::sync::Mutex<BTreeSet<String>>>;

struct Ctx {
    client: Client,
    clusters: Store<ManagedCluster>,
    works: Store<ManifestWork>,
    leases: Store<Lease>,
    awaited: Awaited,
    csrs: Store<CertificateSigningRequest>,
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}: {1}")]
    Kube(String, #[source] kube::Error),
    /// The hub or the task lacks something the handler needs.
    #[error("{0}")]
    Config(String),
}

fn ctx_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |e| Error::Kube(what, e)
}

/// Runs the handler until aborted.
pub async fn run(client: Client, opts: Options) {
    let (trigger_tx, trigger_rx) = futures::channel::mpsc::unbounded::<()>();
    let clusters = spawn_reflector(
        Api::<ManagedCluster>::all(client.clone()),
        watcher::Config::default(),
        trigger_tx.clone(),
        |mc: &ManagedCluster| {
            Some(
                serde_json::to_string(&(&mc.metadata.annotations, &mc.spec, conditions(mc)))
                    .unwrap_or_default(),
            )
        },
    );
    // Only klusterlet works matter, and only when their spec or Applied state changes (work
    // status is rewritten often).
    let works = spawn_reflector(
        Api::<ManifestWork>::all(client.clone()),
        watcher::Config::default(),
        trigger_tx.clone(),
        |w: &ManifestWork| {
            w.name_any().ends_with("-klusterlet").then(|| {
                let applied = w
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|c| {
                        c.iter()
                            .find(|c| c.type_ == WORK_APPLIED)
                            .map(|c| (c.status.clone(), c.observed_generation))
                    });
                format!(
                    "{:?}/{applied:?}/{}/{}",
                    w.metadata.generation,
                    kw::probed(w).is_some(),
                    w.metadata.deletion_timestamp.is_some()
                )
            })
        },
    );
    // A cluster taken back is back once its lease is renewed: renewals of the clusters
    // awaited wake the handler (the others' are only cached).
    let awaited: Awaited = Arc::default();
    let watching = awaited.clone();
    let leases = spawn_reflector(
        Api::<Lease>::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={CLUSTER_LEASE}")),
        trigger_tx.clone(),
        move |l: &Lease| {
            let ns = l.namespace().unwrap_or_default();
            let awaited = watching.lock().is_ok_and(|a| a.contains(&ns));
            awaited.then(|| format!("{:?}", l.spec.as_ref().and_then(|s| s.renew_time.as_ref())))
        },
    );
    let csrs = spawn_reflector(
        Api::<CertificateSigningRequest>::all(client.clone()),
        watcher::Config::default(),
        trigger_tx,
        |c: &CertificateSigningRequest| {
            Some(format!(
                "{:?}",
                c.status
                    .as_ref()
                    .map(|s| (&s.conditions, s.certificate.is_some()))
            ))
        },
    );
    for (what, ready) in [
        ("ManagedClusters", clusters.wait_until_ready().await),
        ("ManifestWorks", works.wait_until_ready().await),
        ("CSRs", csrs.wait_until_ready().await),
        ("Leases", leases.wait_until_ready().await),
    ] {
        if ready.is_err() {
            tracing::warn!(%what, "cache never became ready; migration handler not started");
            return;
        }
    }
    let tasks: Api<MigrationTask> = Api::namespaced(client.clone(), &opts.namespace);
    let ctx = Arc::new(Ctx {
        client,
        clusters,
        works,
        leases,
        awaited,
        csrs,
    });
    Controller::new(tasks, watcher::Config::default())
        .reconcile_all_on(trigger_rx)
        .run(
            reconcile,
            |task, e: &Error, _| {
                tracing::info!(task = %task.name_any(), error = %e, "migration task reconcile failed; retrying");
                Action::requeue(Duration::from_secs(2))
            },
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

/// Mirrors `api` into a store and triggers the controller when an object appears, goes, or its
/// `fingerprint` (what the handler cares about; `None`: never) changes.
fn spawn_reflector<K, F>(
    api: Api<K>,
    config: watcher::Config,
    trigger: futures::channel::mpsc::UnboundedSender<()>,
    fingerprint: F,
) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    F: Fn(&K) -> Option<String> + Send + 'static,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config)).default_backoff();
    tokio::spawn(async move {
        let mut seen: std::collections::HashMap<String, Option<String>> = Default::default();
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            let changed = match ev {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    let key = format!("{:?}/{}", o.meta().namespace, o.name_any());
                    let print = fingerprint(&o);
                    print.is_some() && seen.insert(key, print.clone()) != Some(print)
                }
                Ok(watcher::Event::Delete(o)) => {
                    seen.remove(&format!("{:?}/{}", o.meta().namespace, o.name_any()));
                    fingerprint(&o).is_some()
                }
                Ok(watcher::Event::InitDone) => true,
                Ok(watcher::Event::Init) | Err(_) => false,
            };
            if changed && trigger.unbounded_send(()).is_err() {
                return;
            }
        }
    });
    store
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

fn conditions(mc: &ManagedCluster) -> &[migration_api::common::Condition] {
    mc.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

fn available(mc: &ManagedCluster) -> bool {
    condition_is_true(conditions(mc), CLUSTER_AVAILABLE)
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

/// Labels carried to the target: the user's, not OCM's bookkeeping.
pub fn carried_labels(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter(|(k, _)| {
            k.as_str() != "name"
                && k.as_str() != CLUSTER_SET
                && k.as_str() != LOCAL_CLUSTER
                && !k.starts_with("feature.open-cluster-management.io/")
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// What the agent found, for the task's status.
#[derive(Debug, Default)]
struct Report {
    states: Vec<ClusterState>,
    /// Succeeded / Running / Failed.
    state: &'static str,
    message: String,
    /// The carry-over records, as one JSON array.
    carry_over: Option<String>,
    shape: Option<String>,
}

async fn reconcile(task: Arc<MigrationTask>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if task.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let names = cluster_list(&task, &ctx.clusters);
    let report = match (task.spec.role, task.spec.stage) {
        (MigrationRole::Source, TaskStage::Validating) => {
            source_validate(&ctx, &task, &names).await?
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
            source_rollback(&ctx, &task, &names, false).await?
        }
        (MigrationRole::Target, TaskStage::Rollbacking) => {
            target_rollback(&ctx, &task, &names, false).await?
        }
        (MigrationRole::Source, TaskStage::Cleaning) => source_clean(&ctx, &task, &names).await?,
        (MigrationRole::Target, TaskStage::Cleaning) => target_clean(&ctx, &task, &names).await?,
    };
    write_status(&ctx, &task, &names, report).await?;
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
            "Succeeded"
        } else {
            "Failed"
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

async fn klusterlet_config_shape(client: &Client) -> Result<String, Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = ignore_not_found(crds.get(KLUSTERLET_CONFIG_CRD).await)
        .map_err(ctx_err("reading the KlusterletConfig CRD"))?;
    let Some(crd) = crd else {
        return Ok("None".into());
    };
    let spec_props = |v: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion| {
        v.schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|s| s.properties.as_ref())
            .and_then(|p| p.get("spec"))
            .and_then(|s| s.properties.clone())
            .unwrap_or_default()
    };
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .or_else(|| crd.spec.versions.first());
    let props = version.map(spec_props).unwrap_or_default();
    Ok(if props.contains_key("multipleHubsConfig") {
        "multipleHubsConfig"
    } else if props.contains_key("bootstrapKubeConfigs") {
        "bootstrapKubeConfigs"
    } else {
        "None"
    }
    .into())
}

/// The ManagedClusterSets bound to the migration's namespace on this hub
/// ([`migration_api::tenancy`]); `None` for a task of a manager that named no namespace.
async fn bound_sets(
    ctx: &Ctx,
    task: &MigrationTask,
) -> Result<Option<Vec<ManagedClusterSet>>, Error> {
    let Some(ns) = task.spec.migration_namespace.as_deref() else {
        return Ok(None);
    };
    migration_api::runtime::bound_cluster_sets(&ctx.client, ns)
        .await
        .map(Some)
        .map_err(|(what, e)| Error::Kube(what, e))
}

async fn source_validate(
    ctx: &Ctx,
    task: &MigrationTask,
    names: &[String],
) -> Result<Report, Error> {
    let addons: Vec<ManagedClusterAddOn> = Api::<ManagedClusterAddOn>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(ctx_err("listing ManagedClusterAddOns"))?
        .items;
    // KlusterletAddonConfig is ACM's; a plain OCM hub has no such API.
    let kacs: Vec<KlusterletAddonConfig> =
        match Api::<KlusterletAddonConfig>::all(ctx.client.clone())
            .list(&ListParams::default())
            .await
        {
            Ok(l) => l.items,
            Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
            Err(e) => return Err(Error::Kube("listing KlusterletAddonConfigs".into(), e)),
        };
    let shape = klusterlet_config_shape(&ctx.client).await?;
    let bound = bound_sets(ctx, task).await?;
    // An ACM hub's import controller: it honours disable-auto-import.
    let acm = shape != "None";
    let mut states = Vec::with_capacity(names.len());
    let mut carry = Vec::with_capacity(names.len());
    for name in names {
        let record = CarriedCluster {
            name: name.clone(),
            ..Default::default()
        };
        let Some(mc) = get(&ctx.clusters, None, name) else {
            states.push(ClusterState::NotFound);
            carry.push(record);
            continue;
        };
        let record = CarriedCluster {
            name: name.clone(),
            own_klusterlet_config: flight::original(mc.annotations()).klusterlet_config,
            labels: carried_labels(mc.labels()),
            cluster_set: mc.labels().get(CLUSTER_SET).cloned(),
            addons: addons
                .iter()
                .filter(|a| a.namespace().as_deref() == Some(name.as_str()))
                .map(|a| CarriedAddOn {
                    name: a.name_any(),
                    install_namespace: a.spec.install_namespace.clone(),
                    configs: a.spec.configs.clone().unwrap_or_default(),
                })
                .collect(),
            klusterlet_addon_config: kacs
                .iter()
                .find(|k| k.namespace().as_deref() == Some(name.as_str()))
                .and_then(|k| serde_json::to_value(&k.spec).ok()),
            annotations: carried_annotations(mc.annotations()),
            client_configs: mc
                .spec
                .managed_cluster_client_configs
                .clone()
                .unwrap_or_default(),
        };
        let other = mc
            .annotations()
            .get(MIGRATING)
            .filter(|m| m.as_str() != task.spec.key());
        let state = if mc.labels().get(LOCAL_CLUSTER).map(String::as_str) == Some("true") {
            ClusterState::IsHub
        } else if let Some(sets) = &bound
            && !tenancy::admitted(sets, mc.labels())
        {
            ClusterState::Forbidden
        } else if other.is_some() {
            ClusterState::Conflict
        } else if hosted(&mc) {
            ClusterState::Hosted
        } else if acm
            && mc.annotations().contains_key(DISABLE_AUTO_IMPORT)
            && task.spec.lift_disable_auto_import != Some(true)
            && !marked(&mc, MIGRATING, task)
        {
            ClusterState::AutoImportDisabled
        } else if !available(&mc) {
            ClusterState::Unavailable
        } else {
            ClusterState::Valid
        };
        states.push(state);
        carry.push(record);
    }
    let sizes: Vec<usize> = carry
        .iter()
        .map(|r| serde_json::to_string(r).map_or(usize::MAX, |s| s.len()))
        .collect();
    apply_carry_over_limits(&mut states, &sizes);
    let mut report = verdict(names, states);
    report.carry_over =
        Some(serde_json::to_string(&carry).map_err(|e| {
            Error::Kube("encoding the carry-over".into(), kube::Error::SerdeError(e))
        })?);
    report.shape = Some(shape);
    Ok(report)
}

/// Whether a cluster's klusterlet runs in hosted mode (upstream `DetermineKlusterletMode`).
fn hosted(mc: &ManagedCluster) -> bool {
    mc.annotations()
        .get(KLUSTERLET_DEPLOY_MODE)
        .is_some_and(|m| {
            m.eq_ignore_ascii_case("Hosted") || m.eq_ignore_ascii_case("SingletonHosted")
        })
}

/// The annotations the target's import controller reads, and nothing of the migration's.
pub fn carried_annotations(annotations: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    annotations
        .iter()
        .filter(|(k, _)| names::annotations::CARRIED_FOR_IMPORT.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Marks as too large each valid cluster whose record (`sizes`, JSON bytes) is over the
/// per-cluster limit or, counted in list order, takes the migration past its total: nothing
/// that cannot travel is dropped silently.
fn apply_carry_over_limits(states: &mut [ClusterState], sizes: &[usize]) {
    let mut total = 2usize;
    for (state, size) in states.iter_mut().zip(sizes) {
        total = total.saturating_add(size.saturating_add(1));
        if *state == ClusterState::Valid
            && (*size > MAX_CARRY_OVER_PER_CLUSTER || total > MAX_CARRY_OVER_TOTAL)
        {
            *state = ClusterState::TooLarge;
        }
    }
}

async fn target_validate(
    ctx: &Ctx,
    task: &MigrationTask,
    names: &[String],
) -> Result<Report, Error> {
    let states = names
        .iter()
        .map(|n| match get(&ctx.clusters, None, n) {
            Some(mc) if !marked(&mc, PRE_CREATED, task) => ClusterState::Exists,
            _ => ClusterState::Valid,
        })
        .collect();
    let mut report = verdict(names, states);
    // A plain OCM hub gives the clusters that arrive a bootstrap kubeconfig of its own
    // bootstrap identity ([`settle_data`]): without one they could never count as moved.
    if report.state == "Succeeded"
        && klusterlet_config_shape(&ctx.client).await? == "None"
        && !hub_bootstrap_identity_exists(&ctx.client).await?
    {
        report.state = "Failed";
        report.message = format!(
            "this plain OCM hub has none of the ServiceAccounts its clusters bootstrap with ({}; `clusteradm init` creates the first), so the clusters that arrive could not be given a bootstrap kubeconfig of this hub",
            hub_bootstrap_names()
        );
    }
    Ok(report)
}

/// The hub's bootstrap ServiceAccounts, as `namespace/name`, comma-separated.
fn hub_bootstrap_names() -> String {
    names::HUB_BOOTSTRAP_SERVICE_ACCOUNTS
        .iter()
        .map(|(ns, n)| format!("{ns}/{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether one of [`names::HUB_BOOTSTRAP_SERVICE_ACCOUNTS`] exists on this hub.
async fn hub_bootstrap_identity_exists(client: &Client) -> Result<bool, Error> {
    use k8s_openapi::api::core::v1::ServiceAccount;
    for (ns, name) in names::HUB_BOOTSTRAP_SERVICE_ACCOUNTS {
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        if ignore_not_found(api.get(name).await)
            .map_err(ctx_err(format!("reading ServiceAccount {ns}/{name}")))?
            .is_some()
        {
            return Ok(true);
        }
    }
    Ok(false)
}

async fn source_deploy(ctx: &Ctx, task: &MigrationTask, names: &[String]) -> Result<Report, Error> {
    let (present, name) = if plain(task) {
        let secret = task.spec.bootstrap_secret_name.clone().unwrap_or_default();
        (
            bootstrap_secret_data(ctx, task).await?.is_some(),
            format!("bootstrap secret {secret}"),
        )
    } else {
        let name = task.spec.klusterlet_config_name.clone().unwrap_or_default();
        let kcs: Api<migration_api::ocm::config::KlusterletConfig> = Api::all(ctx.client.clone());
        let present = ignore_not_found(kcs.get(&name).await)
            .map_err(ctx_err(format!("reading KlusterletConfig {name}")))?
            .is_some();
        (present, format!("KlusterletConfig {name}"))
    };
    // The clusters are annotated now, so their klusterlets have the target's bootstrap
    // kubeconfig by the time Registering starts.
    let annotated = source_register(ctx, task, names).await?;
    Ok(Report {
        states: annotated.states,
        state: if present { "Succeeded" } else { "Running" },
        message: if present {
            format!("{name} in place")
        } else {
            format!("waiting for {name}")
        },
        ..Default::default()
    })
}

/// Merge-patches a ManagedCluster when `patch` would change it.
async fn patch_cluster(ctx: &Ctx, name: &str, patch: Value) -> Result<(), Error> {
    let api: Api<ManagedCluster> = Api::all(ctx.client.clone());
    ignore_not_found(
        api.patch(name, &merge_params(), &Patch::Merge(&patch))
            .await,
    )
    .map_err(ctx_err(format!("updating ManagedCluster {name}")))?;
    Ok(())
}

/// Merge patches carry the agent's field manager (and no `force`).
fn merge_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// Whether the cluster's klusterlet work on this hub carries the bootstrap secret and has been
/// applied at its latest generation.
fn bootstrap_delivered(works: &Store<ManifestWork>, cluster: &str, secret: &str) -> bool {
    let Some(work) = get(works, Some(cluster), &format!("{cluster}-klusterlet")) else {
        return false;
    };
    let carries = work
        .spec
        .workload
        .iter()
        .flat_map(|w| w.manifests.iter().flatten())
        .any(|m| {
            m.get("kind").and_then(Value::as_str) == Some("Secret")
                && m.pointer("/metadata/name").and_then(Value::as_str) == Some(secret)
        });
    let applied = work
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == WORK_APPLIED))
        .is_some_and(|c| c.status == "True" && c.observed_generation == work.metadata.generation);
    carries && applied
}

/// Whether this hub's import controller has taken over a cluster's klusterlet: its
/// `<cluster>-klusterlet` work, which carries this hub's own `bootstrap-hub-kubeconfig`, is
/// applied on the cluster at its latest generation.
fn import_took_over(works: &Store<ManifestWork>, cluster: &str) -> bool {
    bootstrap_delivered(works, cluster, names::BOOTSTRAP_HUB_KUBECONFIG)
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

/// The data of the bootstrap secret the manager delivered next to the task (plain OCM).
async fn bootstrap_secret_data(ctx: &Ctx, task: &MigrationTask) -> Result<Option<Value>, Error> {
    let name = task.spec.bootstrap_secret_name.clone().unwrap_or_default();
    let ns = task.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let secret = ignore_not_found(secrets.get(&name).await)
        .map_err(ctx_err(format!("reading the bootstrap secret {ns}/{name}")))?;
    Ok(secret
        .and_then(|s| s.data)
        .and_then(|d| serde_json::to_value(d).ok()))
}

/// What a cluster that arrived is settled with (secret data holding a kubeconfig): on a plain
/// OCM hub (`own_bootstrap`), a bootstrap kubeconfig of this hub's own bootstrap identity,
/// made from the task's connection (the target's URL, CA and proxy) and a token of the
/// hub's bootstrap ServiceAccount, as `clusteradm get token` issues one; on a hub whose import
/// controller gives the cluster its bootstrap kubeconfig, the connection alone (it only
/// replaces the migration's secret on the cluster until the work takes it away). Never the
/// migration's token. `None` until the manager has sent the connection.
async fn settle_data(
    ctx: &Ctx,
    task: &MigrationTask,
    own_bootstrap: bool,
) -> Result<Option<Value>, Error> {
    let Some(connection) = task.spec.bootstrap_connection.as_deref() else {
        return Ok(None);
    };
    let text = if own_bootstrap {
        let token = hub_bootstrap_token(&ctx.client).await?;
        kw::with_token(connection, &token).map_err(Error::Config)?
    } else {
        connection.to_owned()
    };
    Ok(Some(kw::kubeconfig_data(&text)))
}

/// A token of the first of [`names::HUB_BOOTSTRAP_SERVICE_ACCOUNTS`] this hub has, valid
/// [`names::HUB_BOOTSTRAP_TOKEN_SECONDS`].
async fn hub_bootstrap_token(client: &Client) -> Result<String, Error> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(names::HUB_BOOTSTRAP_TOKEN_SECONDS),
            ..Default::default()
        },
        ..Default::default()
    };
    for (ns, name) in names::HUB_BOOTSTRAP_SERVICE_ACCOUNTS {
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        match api
            .create_token_request(name, &PostParams::default(), &request)
            .await
        {
            Ok(tr) => {
                if let Some(status) = tr.status.filter(|s| !s.token.is_empty()) {
                    return Ok(status.token);
                }
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(Error::Kube(
                    format!("issuing a bootstrap token of ServiceAccount {ns}/{name}"),
                    e,
                ));
            }
        }
    }
    Err(Error::Config(format!(
        "this hub has none of the ServiceAccounts its clusters bootstrap with ({}; `clusteradm init` creates the first): a cluster that arrived cannot be given a bootstrap kubeconfig of this hub",
        hub_bootstrap_names()
    )))
}

fn klusterlet_work(ctx: &Ctx, task: &MigrationTask, cluster: &str) -> Option<Arc<ManifestWork>> {
    get(
        &ctx.works,
        Some(cluster),
        &names::migration_klusterlet_work(task.spec.key()),
    )
}

/// Puts a cluster's klusterlet work at `step` unless it is there already.
async fn put_klusterlet_work(
    ctx: &Ctx,
    task: &MigrationTask,
    cluster: &str,
    step: &Step,
) -> Result<(), Error> {
    let current = klusterlet_work(ctx, task, cluster);
    if current.as_deref().and_then(kw::step_of).as_ref() == Some(step) {
        return Ok(());
    }
    let secret = task.spec.bootstrap_secret_name.clone().unwrap_or_default();
    let own_bootstrap = task.spec.role == MigrationRole::Target
        && klusterlet_config_shape(&ctx.client).await? == "None";
    let secret_data = match step {
        Step::Settle(_) => settle_data(ctx, task, own_bootstrap).await?,
        _ => bootstrap_secret_data(ctx, task).await?,
    };
    let wctx = kw::WorkContext {
        migration: task.spec.key(),
        cluster,
        secret_name: &secret,
        secret_data: secret_data.as_ref(),
        own_bootstrap,
    };
    let Some(body) = kw::work(&wctx, step) else {
        tracing::info!(%cluster, "the bootstrap secret is not on this hub; the klusterlet work waits for it");
        return Ok(());
    };
    let name = names::migration_klusterlet_work(task.spec.key());
    let works: Api<ManifestWork> = Api::namespaced(ctx.client.clone(), cluster);
    works
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(ctx_err(format!("applying ManifestWork {cluster}/{name}")))?;
    tracing::info!(%cluster, step = ?step, "klusterlet work updated");
    Ok(())
}

/// Deletes a cluster's klusterlet work. `abandon`: the cluster's work agent serves another hub
/// now, so nothing here will ever finish the deletion: the finalizer goes too (what it applied
/// stays with the cluster, where the target's own work has taken it over).
async fn delete_klusterlet_work(
    ctx: &Ctx,
    task: &MigrationTask,
    cluster: &str,
    abandon: bool,
) -> Result<(), Error> {
    let Some(work) = klusterlet_work(ctx, task, cluster) else {
        return Ok(());
    };
    if abandon {
        return force_delete_work(ctx, &work).await;
    }
    if work.metadata.deletion_timestamp.is_none() {
        let name = work.name_any();
        ignore_not_found(
            Api::<ManifestWork>::namespaced(ctx.client.clone(), cluster)
                .delete(&name, &DeleteParams::default())
                .await,
        )
        .map_err(ctx_err(format!("deleting ManifestWork {cluster}/{name}")))?;
    }
    Ok(())
}

/// Deletes a work and clears its finalizers, as ACM's import controller force-deletes the
/// works of a cluster it no longer accepts (managedcluster-import-controller
/// `pkg/helpers/manifestwork.go`, `ForceDeleteManifestWork`): for a work whose cluster's work
/// agent serves another hub, the only one that would ever finish it.
async fn force_delete_work(ctx: &Ctx, work: &ManifestWork) -> Result<(), Error> {
    let name = work.name_any();
    let ns = work.namespace().unwrap_or_default();
    let works: Api<ManifestWork> = Api::namespaced(ctx.client.clone(), &ns);
    if work.metadata.deletion_timestamp.is_none() {
        ignore_not_found(works.delete(&name, &DeleteParams::default()).await)
            .map_err(ctx_err(format!("deleting ManifestWork {ns}/{name}")))?;
    }
    if !work.finalizers().is_empty() {
        ignore_not_found(
            works
                .patch(
                    &name,
                    &merge_params(),
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await,
        )
        .map_err(ctx_err(format!("releasing ManifestWork {ns}/{name}")))?;
    }
    Ok(())
}

/// A deleted cluster that this hub no longer accepts and whose klusterlet serves another hub
/// leaves only once no ManifestWork is left in its namespace (ocm
/// `pkg/registration/hub/gc/gc_resources.go` deletes them and waits;
/// `pkg/registration/hub/managedcluster/controller.go` keeps its finalizer while any is
/// left), and only a connected work agent removes a work's finalizer. ACM's import controller
/// force-deletes them (`pkg/controller/resourcecleanup/resourcecleanup_controller.go`); plain
/// OCM has nothing that would, so this does the same on every hub. What they applied stays on
/// the cluster (its work agent evicts it after its grace period unless works of the hub it
/// serves take it over).
async fn release_works(ctx: &Ctx, cluster: &str) -> Result<(), Error> {
    for work in ctx
        .works
        .state()
        .iter()
        .filter(|w| w.namespace().as_deref() == Some(cluster))
    {
        force_delete_work(ctx, work).await?;
    }
    Ok(())
}

/// What to do with a cluster's klusterlet work next.
enum Next {
    /// Put it at this step.
    Put(Step),
    /// Delete it.
    Delete,
    /// Nothing to change; whether it is done.
    Done(bool),
}

/// Moves a cluster's klusterlet work on: `next` reads the work as it is (`None`: there is
/// none) and says what to do. Returns whether it is done; a work being deleted is waited for.
async fn drive_klusterlet_work(
    ctx: &Ctx,
    task: &MigrationTask,
    cluster: &str,
    next: impl FnOnce(Option<&ManifestWork>) -> Next,
) -> Result<bool, Error> {
    let work = klusterlet_work(ctx, task, cluster);
    if work
        .as_ref()
        .is_some_and(|w| w.metadata.deletion_timestamp.is_some())
    {
        return Ok(false);
    }
    match next(work.as_deref()) {
        Next::Done(done) => return Ok(done),
        Next::Put(step) => put_klusterlet_work(ctx, task, cluster, &step).await?,
        Next::Delete => delete_klusterlet_work(ctx, task, cluster, false).await?,
    }
    Ok(false)
}

/// Source, plain OCM: probes the cluster's Klusterlet, then gives it the MultipleHubs
/// configuration; true once that is applied.
async fn klusterlet_switch(ctx: &Ctx, task: &MigrationTask, cluster: &str) -> Result<bool, Error> {
    drive_klusterlet_work(ctx, task, cluster, |work| {
        match work.map(|w| (w, kw::step_of(w))) {
            Some((w, Some(Step::Switch(_)))) => Next::Done(kw::applied(w)),
            Some((w, Some(Step::Probe))) => match kw::probed(w) {
                // A Klusterlet a migration changed before keeps the settings it had then.
                Some(Ok((now, recorded))) => Next::Put(Step::Switch(recorded.unwrap_or(now))),
                Some(Err(why)) => {
                    tracing::warn!(%cluster, "{why}; it is not switched");
                    Next::Done(false)
                }
                None => Next::Done(false),
            },
            Some((_, Some(Step::Restore(o) | Step::Settle(o)))) => Next::Put(Step::Switch(o)),
            _ => Next::Put(Step::Probe),
        }
    })
    .await
}

/// Source rollback, plain OCM: puts the Klusterlet's settings back, then removes the work;
/// true once it is gone.
async fn klusterlet_restore(ctx: &Ctx, task: &MigrationTask, cluster: &str) -> Result<bool, Error> {
    drive_klusterlet_work(ctx, task, cluster, |work| {
        let Some(work) = work else {
            return Next::Done(true);
        };
        match kw::step_of(work) {
            Some(Step::Switch(o)) => Next::Put(Step::Restore(o)),
            Some(Step::Restore(_)) if !kw::applied(work) => Next::Done(false),
            // Restored, or never changed (a probe): the work can go.
            _ => Next::Delete,
        }
    })
    .await
}

/// Target, plain OCM, for a cluster that arrived: reads what the Klusterlet had before the
/// migration and puts it back, with this hub's bootstrap kubeconfig as the cluster's own;
/// true once applied.
async fn klusterlet_settle(ctx: &Ctx, task: &MigrationTask, cluster: &str) -> Result<bool, Error> {
    drive_klusterlet_work(ctx, task, cluster, |work| {
        match work.map(|w| (w, kw::step_of(w))) {
            Some((w, Some(Step::Settle(_)))) => Next::Done(kw::applied(w)),
            Some((w, Some(Step::Probe))) => match kw::probed(w) {
                Some(Ok((_, Some(recorded)))) => Next::Put(Step::Settle(recorded)),
                // No record (an ACM source's import configured the Klusterlet, or it was
                // changed by hand since): the gates stay, the bootstrap list is turned off, so
                // this hub's bootstrap kubeconfig is the only one. Turned off explicitly
                // (`type: None`): the list belongs to another field manager (the source's
                // import work), whose fields an apply that leaves them out does not remove.
                Some(Ok((now, None))) => Next::Put(Step::Settle(Registration {
                    feature_gates: now.feature_gates,
                    bootstrap_kube_configs: Some(json!({"type": "None"})),
                })),
                Some(Err(why)) => {
                    tracing::warn!(%cluster, "{why}; it is not settled");
                    Next::Done(false)
                }
                None => Next::Done(false),
            },
            _ => Next::Put(Step::Probe),
        }
    })
    .await
}

/// The KlusterletConfigs derived from clusters' own this reconcile has ensured.
#[derive(Default)]
struct DerivedConfigs(BTreeMap<String, bool>);

/// Labels a derived KlusterletConfig with what it was derived from.
const DERIVED_FROM: &str = "migration.open-cluster-management.io/derived-from";

impl DerivedConfigs {
    /// Ensures the KlusterletConfig derived from `own` and the migration's `base` exists;
    /// false while the base is not on this hub yet.
    async fn ensure(
        &mut self,
        ctx: &Ctx,
        task: &MigrationTask,
        base: &str,
        own: &str,
    ) -> Result<bool, Error> {
        if let Some(ready) = self.0.get(own) {
            return Ok(*ready);
        }
        let api: Api<DynamicObject> =
            Api::all_with(ctx.client.clone(), &klusterlet_config_resource());
        let spec_of = |o: Option<DynamicObject>| o.and_then(|o| o.data.get("spec").cloned());
        let base_spec = spec_of(
            ignore_not_found(api.get(base).await)
                .map_err(ctx_err(format!("reading KlusterletConfig {base}")))?,
        );
        let Some(base_spec) = base_spec else {
            self.0.insert(own.to_owned(), false);
            return Ok(false);
        };
        // A KlusterletConfig the cluster names but the hub lacks counts as empty, as the
        // import controller reads it.
        let own_spec = spec_of(
            ignore_not_found(api.get(own).await)
                .map_err(ctx_err(format!("reading KlusterletConfig {own}")))?,
        )
        .unwrap_or_else(|| json!({}));
        let name = flight::derived_config_name(base, Some(own));
        let body = json!({
            "apiVersion": "config.open-cluster-management.io/v1alpha1", "kind": "KlusterletConfig",
            "metadata": {"name": name, "labels": {
                names::labels::MIGRATION: task.spec.key(),
                names::labels::MANAGED_BY: names::labels::MANAGED_BY_VALUE,
                DERIVED_FROM: own}},
            "spec": flight::derived_config_spec(&own_spec, &base_spec)
        });
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(ctx_err(format!("applying KlusterletConfig {name}")))?;
        self.0.insert(own.to_owned(), true);
        Ok(true)
    }
}

fn klusterlet_config_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::erase::<migration_api::ocm::config::KlusterletConfig>(&())
}

/// Removes the KlusterletConfigs the migration derived from clusters' own.
async fn remove_derived_configs(ctx: &Ctx, task: &MigrationTask) -> Result<(), Error> {
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &klusterlet_config_resource());
    let selector = format!(
        "{}={},{DERIVED_FROM}",
        names::labels::MIGRATION,
        task.spec.key()
    );
    let list = match api.list(&ListParams::default().labels(&selector)).await {
        Ok(l) => l.items,
        // A plain OCM hub has no KlusterletConfig API at all.
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(Error::Kube("listing derived KlusterletConfigs".into(), e)),
    };
    for kc in list {
        let name = kc.name_any();
        ignore_not_found(api.delete(&name, &DeleteParams::default()).await)
            .map_err(ctx_err(format!("deleting KlusterletConfig {name}")))?;
    }
    Ok(())
}

/// Whether a KlusterletConfig name is one this migration may have a cluster select.
fn ours(task: &MigrationTask, name: &str) -> bool {
    task.spec
        .klusterlet_config_name
        .as_deref()
        .is_some_and(|base| name == base || name.starts_with(&format!("{base}-")))
}

async fn source_register(
    ctx: &Ctx,
    task: &MigrationTask,
    names: &[String],
) -> Result<Report, Error> {
    let spec = &task.spec;
    let released: BTreeSet<&String> = spec.released.iter().flatten().collect();
    let config = spec.klusterlet_config_name.clone();
    let secret = spec.bootstrap_secret_name.clone().unwrap_or_default();
    let mut derived = DerivedConfigs::default();
    let mut states = Vec::with_capacity(names.len());
    for name in names {
        let Some(mc) = get(&ctx.clusters, None, name) else {
            states.push(ClusterState::NotFound);
            continue;
        };
        let release = released.contains(name);
        // A held cluster is made ready like the others (it still stays where it is until
        // released), so it can switch as soon as it is let go.
        let held = mc.annotations().contains_key(BLOCK_MOVE) && !release;
        if held && plain(task) {
            klusterlet_switch(ctx, task, name).await?;
            states.push(ClusterState::Blocked);
            continue;
        }
        // Plain OCM: no KlusterletConfig to select, the migrating marker alone. The older
        // KlusterletConfig shape lists the target alone, so a cluster selects it only when it
        // is released, and stops being accepted here once its klusterlet has it.
        let config = if plain(task) || (legacy(task) && !release) {
            None
        } else {
            config.clone()
        };
        // A cluster with a KlusterletConfig of its own selects one derived from it.
        if let (Some(base), Some(own)) = (
            config.as_deref(),
            flight::original(mc.annotations()).klusterlet_config,
        ) && !derived.ensure(ctx, task, base, &own).await?
        {
            states.push(if held {
                ClusterState::Blocked
            } else {
                ClusterState::Waiting
            });
            continue;
        }
        let refuse = release
            && mc.spec.hub_accepts_client
            && (!legacy(task) || bootstrap_delivered(&ctx.works, name, &secret));
        // Released on an ACM hub: auto-import must leave it alone from now on.
        let freeze = release && !plain(task) && (refuse || !mc.spec.hub_accepts_client);
        let changes = flight::in_flight(
            mc.annotations(),
            spec.key(),
            config.as_deref(),
            spec.lift_disable_auto_import == Some(true),
            freeze,
        );
        if !flight::settled(mc.annotations(), &changes) || refuse {
            let mut patch = flight::patch(&changes);
            if refuse {
                patch["spec"] = json!({"hubAcceptsClient": false});
            }
            patch_cluster(ctx, name, patch).await?;
            if refuse {
                tracing::info!(cluster = %name, "released: this hub no longer accepts it");
            }
        }
        states.push(if release {
            ClusterState::Switching
        } else if held {
            ClusterState::Blocked
        } else if plain(task) {
            if klusterlet_switch(ctx, task, name).await? {
                ClusterState::Ready
            } else {
                ClusterState::Waiting
            }
        } else if legacy(task) || bootstrap_delivered(&ctx.works, name, &secret) {
            ClusterState::Ready
        } else {
            ClusterState::Waiting
        });
    }
    let switching = states
        .iter()
        .filter(|s| **s == ClusterState::Switching)
        .count();
    Ok(Report {
        message: format!("{switching} of {} clusters released", names.len()),
        state: "Running",
        states,
        ..Default::default()
    })
}

/// Whether a CSR is a klusterlet of `cluster` registering with the migration's bootstrap
/// identity: requested by that identity, labelled for the cluster, and asking for the
/// cluster's agent identity only.
fn expected_csr(csr: &CertificateSigningRequest, bootstrap_user: &str, cluster: &str) -> bool {
    if csr.spec.username.as_deref() != Some(bootstrap_user)
        || csr.labels().get(CLUSTER_NAME).map(String::as_str) != Some(cluster)
        || csr.spec.signer_name != migration_api::names::KUBE_APISERVER_CLIENT_SIGNER
    {
        return false;
    }
    let Ok((user, groups)) = requested_identity(&csr.spec.request.0) else {
        return false;
    };
    user.starts_with(&format!("system:open-cluster-management:{cluster}:"))
        && groups.iter().all(|g| {
            g == &format!("system:open-cluster-management:{cluster}")
                || g == "system:open-cluster-management:managed-clusters"
        })
}

/// When this hub learnt that `cluster` was released, recorded on its pre-created
/// ManagedCluster the first time (durable across restarts); `None` for a ManagedCluster this
/// migration did not create.
async fn released_at(
    ctx: &Ctx,
    task: &MigrationTask,
    cluster: &str,
    mc: Option<&ManagedCluster>,
) -> Result<Option<jiff::Timestamp>, Error> {
    let Some(mc) = mc.filter(|m| marked(m, PRE_CREATED, task)) else {
        return Ok(None);
    };
    if let Some(at) = mc
        .annotations()
        .get(RELEASED_AT)
        .and_then(|v| v.parse::<jiff::Timestamp>().ok())
    {
        return Ok(Some(at));
    }
    let now = jiff::Timestamp::now();
    patch_cluster(
        ctx,
        cluster,
        json!({"metadata": {"annotations": {RELEASED_AT: now.to_string()}}}),
    )
    .await?;
    Ok(Some(now))
}

/// Where a CSR stands, for [`admission::approve`].
fn csr_decision(csr: &CertificateSigningRequest) -> admission::Decision {
    let conditions = csr
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[]);
    let find = |t: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == t && c.status == "True")
    };
    if find("Denied").is_some() {
        admission::Decision::Denied
    } else if find("Failed").is_some() {
        admission::Decision::ApprovedFailed
    } else if let Some(a) = find("Approved") {
        // When it was approved (an approval without a time counts as just now).
        let at = a
            .last_update_time
            .as_ref()
            .or(a.last_transition_time.as_ref())
            .map_or_else(jiff::Timestamp::now, |t| t.0);
        admission::Decision::Approved(at)
    } else {
        admission::Decision::Pending
    }
}

/// Why the target approves a CSR of the migration's bootstrap identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Approval {
    /// The cluster is expected: it registers here.
    Expected,
    /// The cluster is being rolled back but its klusterlet already chose this hub: upstream's
    /// klusterlet waits for its bootstrap CSR for as long as it takes (a denied one included,
    /// `pkg/registration/register/csr/certificate.go`), so denying it would strand the
    /// cluster. Approved, it finishes bootstrapping, finds its ManagedCluster here refused, and
    /// its hub-timeout controller sends it back to its source.
    LetThrough,
}

async fn approve_csr(
    ctx: &Ctx,
    csr: &CertificateSigningRequest,
    why: Approval,
) -> Result<(), Error> {
    let message = match why {
        Approval::Expected => "the cluster is expected by a migration to this hub",
        Approval::LetThrough => {
            "the migration of this cluster is rolled back; it may finish bootstrapping, and then leaves for its source hub"
        }
    };
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let body = json!({"status": {"conditions": [{"type": "Approved", "status": "True", "reason": "ApprovedByClusterMigration", "message": message, "lastUpdateTime": now}]}});
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    ignore_not_found(
        api.patch_approval(
            &csr.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&body),
        )
        .await,
    )
    .map_err(ctx_err(format!("approving CSR {}", csr.name_any())))?;
    tracing::info!(csr = %csr.name_any(), ?why, "migration CSR approved");
    Ok(())
}

fn carried<'a>(task: &'a MigrationTask, name: &str) -> Option<&'a CarriedCluster> {
    task.spec
        .carry_over
        .iter()
        .flatten()
        .find(|c| c.name == name)
}

async fn precreate(ctx: &Ctx, task: &MigrationTask, name: &str) -> Result<(), Error> {
    let record = carried(task, name).cloned().unwrap_or(CarriedCluster {
        name: name.to_owned(),
        ..Default::default()
    });
    let mut labels = record.labels.clone();
    if let Some(set) = &record.cluster_set {
        labels.insert(CLUSTER_SET.into(), set.clone());
    }
    // What the target's import needs to render this cluster's klusterlet as its source did.
    let mut annotations = carried_annotations(&record.annotations);
    annotations.insert(PRE_CREATED.into(), task.spec.key().to_owned());
    annotations.insert(MIGRATING.into(), task.spec.key().to_owned());
    let mut spec = json!({"hubAcceptsClient": true, "leaseDurationSeconds": 60});
    // The klusterlet reports its URLs only when it creates its ManagedCluster (or where its
    // bootstrap identity may update it): they come from the source instead.
    if !record.client_configs.is_empty() {
        spec["managedClusterClientConfigs"] = json!(record.client_configs);
    }
    let mc = json!({
        "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": spec
    });
    let mc: ManagedCluster = serde_json::from_value(mc).map_err(|e| {
        Error::Kube(
            format!("building ManagedCluster {name}"),
            kube::Error::SerdeError(e),
        )
    })?;
    let api: Api<ManagedCluster> = Api::all(ctx.client.clone());
    match api
        .create(
            &PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            },
            &mc,
        )
        .await
    {
        Ok(_) => tracing::info!(cluster = %name, "pre-created ManagedCluster"),
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => {
            return Err(Error::Kube(
                format!("pre-creating ManagedCluster {name}"),
                e,
            ));
        }
    }
    Ok(())
}

/// Carried-over addons and KlusterletAddonConfig, once the hub has made the cluster's namespace.
async fn carry_addons(ctx: &Ctx, task: &MigrationTask, name: &str) -> Result<(), Error> {
    let Some(record) = carried(task, name) else {
        return Ok(());
    };
    let pp = PatchParams::apply(FIELD_MANAGER);
    let addons: Api<ManagedClusterAddOn> = Api::namespaced(ctx.client.clone(), name);
    for a in &record.addons {
        let mut spec = json!({});
        if let Some(ns) = &a.install_namespace {
            spec["installNamespace"] = json!(ns);
        }
        if !a.configs.is_empty() {
            spec["configs"] = json!(a.configs);
        }
        let body = json!({"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
                          "metadata": {"name": a.name, "namespace": name}, "spec": spec});
        match addons.patch(&a.name, &pp, &Patch::Apply(&body)).await {
            Ok(_) => {}
            // The namespace is not there yet: the next event (the cluster joining) retries.
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => {
                return Err(Error::Kube(
                    format!("carrying addon {} of {name}", a.name),
                    e,
                ));
            }
        }
    }
    if let Some(spec) = &record.klusterlet_addon_config {
        let kacs: Api<KlusterletAddonConfig> = Api::namespaced(ctx.client.clone(), name);
        let body = json!({"apiVersion": "agent.open-cluster-management.io/v1", "kind": "KlusterletAddonConfig",
                          "metadata": {"name": name, "namespace": name}, "spec": spec});
        match kacs.patch(name, &pp, &Patch::Apply(&body)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(Error::Kube(
                    format!("carrying the KlusterletAddonConfig of {name}"),
                    e,
                ));
            }
        }
    }
    Ok(())
}

fn target_state(mc: Option<&ManagedCluster>) -> ClusterState {
    match mc {
        None => ClusterState::Pending,
        Some(mc) if !mc.spec.hub_accepts_client => ClusterState::Refused,
        Some(mc) if available(mc) && condition_is_true(conditions(mc), JOINED) => {
            ClusterState::Available
        }
        Some(mc) if condition_is_true(conditions(mc), JOINED) => ClusterState::Joined,
        Some(_) => ClusterState::Created,
    }
}

async fn target_register(
    ctx: &Ctx,
    task: &MigrationTask,
    names: &[String],
) -> Result<Report, Error> {
    let registering = task.spec.stage == TaskStage::Registering;
    let released: BTreeSet<&String> = task.spec.released.iter().flatten().collect();
    let user = task.spec.bootstrap_user.clone().unwrap_or_default();
    let acm_target = klusterlet_config_shape(&ctx.client).await? != "None";
    let mut states = Vec::with_capacity(names.len());
    for name in names {
        let mut mc = get(&ctx.clusters, None, name);
        if mc.is_none() {
            precreate(ctx, task, name).await?;
            mc = get(&ctx.clusters, None, name);
        }
        let state = match &mc {
            Some(m) if !marked(m, PRE_CREATED, task) && !marked(m, MIGRATING, task) => {
                ClusterState::Refused
            }
            Some(m) => target_state(Some(m)),
            None => ClusterState::Created,
        };
        // A cluster counts as registered only once nothing ties it to the migration's
        // bootstrap identity any more (its token is revoked in cleanup): on an ACM hub, once
        // this hub's import has taken over its klusterlet (its own bootstrap kubeconfig on the
        // cluster); on a plain OCM hub, once its Klusterlet is settled here.
        let state = if state != ClusterState::Available {
            state
        } else if (plain(task) || !acm_target) && !klusterlet_settle(ctx, task, name).await? {
            // The Klusterlet's own settings back (what the source changed) and, on a plain
            // OCM hub, this hub's own bootstrap kubeconfig.
            ClusterState::Joined
        } else if acm_target && !import_took_over(&ctx.works, name) {
            ClusterState::Joined
        } else {
            state
        };
        if registering && !user.is_empty() {
            let csrs: Vec<Arc<CertificateSigningRequest>> = ctx
                .csrs
                .state()
                .into_iter()
                .filter(|c| expected_csr(c, &user, name))
                .collect();
            let seen: Vec<(String, jiff::Timestamp, admission::Decision)> = csrs
                .iter()
                .map(|c| {
                    let created = c
                        .metadata
                        .creation_timestamp
                        .as_ref()
                        .map_or(jiff::Timestamp::UNIX_EPOCH, |t| t.0);
                    (c.name_any(), created, csr_decision(c))
                })
                .collect();
            let requests: Vec<admission::Request> = seen
                .iter()
                .map(|(n, created, decision)| admission::Request {
                    name: n,
                    created: *created,
                    decision: *decision,
                })
                .collect();
            let released_at = if released.contains(name) {
                released_at(ctx, task, name, mc.as_deref()).await?
            } else {
                None
            };
            let pick = admission::approve(
                released_at,
                target_state(mc.as_deref()),
                &requests,
                jiff::Timestamp::now(),
            );
            if let Some(csr) = pick.and_then(|p| csrs.iter().find(|c| c.name_any() == p)) {
                approve_csr(ctx, csr, Approval::Expected).await?;
            }
        }
        if registering
            && matches!(
                state,
                ClusterState::Joined | ClusterState::Available | ClusterState::Created
            )
        {
            carry_addons(ctx, task, name).await?;
        }
        states.push(state);
    }
    let registered = states
        .iter()
        .filter(|s| **s == ClusterState::Available)
        .count();
    let refused = states
        .iter()
        .filter(|s| **s == ClusterState::Refused)
        .count();
    Ok(Report {
        message: format!(
            "{registered} of {} clusters registered, {refused} refused",
            names.len()
        ),
        state: if registering { "Running" } else { "Succeeded" },
        states,
        ..Default::default()
    })
}

/// Lets go of the clusters of the task's rollback list that did not arrive: their
/// ManagedCluster here stops accepting them (a klusterlet connected here restarts and goes
/// back; none chooses this hub any more), and a klusterlet that already chose this hub and
/// waits for its bootstrap CSR gets it approved ([`Approval::LetThrough`]) instead of being
/// left waiting forever. The refused ManagedCluster stays (deleting it would make this hub a
/// valid choice again) until `remove` (Cleaning, when every such cluster is back on its
/// source), and the bootstrap identity keeps its rights until then, so a bootstrapping
/// klusterlet can still see its CSR approved.
async fn target_rollback(
    ctx: &Ctx,
    task: &MigrationTask,
    names: &[String],
    remove: bool,
) -> Result<Report, Error> {
    let rollback: BTreeSet<&String> = task.spec.rollback.iter().flatten().collect();
    let user = task.spec.bootstrap_user.clone().unwrap_or_default();
    let api: Api<ManagedCluster> = Api::all(ctx.client.clone());
    let mut states = Vec::with_capacity(names.len());
    for name in names {
        let mc = get(&ctx.clusters, None, name);
        if !rollback.contains(name) {
            states.push(target_state(mc.as_deref()));
            continue;
        }
        let Some(m) = mc else {
            states.push(ClusterState::RolledBack);
            continue;
        };
        if target_state(Some(&m)) == ClusterState::Available {
            states.push(ClusterState::Available);
            continue;
        }
        // Only what this migration created (or a klusterlet made while switching, which never
        // got in) is touched.
        let ours = marked(&m, PRE_CREATED, task) || !m.spec.hub_accepts_client;
        if !ours {
            states.push(ClusterState::RolledBack);
            continue;
        }
        let pending: Vec<Arc<CertificateSigningRequest>> = ctx
            .csrs
            .state()
            .into_iter()
            .filter(|c| !csr_decided(c) && expected_csr(c, &user, name))
            .collect();
        for csr in &pending {
            approve_csr(ctx, csr, Approval::LetThrough).await?;
        }
        let accepted = m.spec.hub_accepts_client;
        if accepted {
            patch_cluster(ctx, name, json!({"spec": {"hubAcceptsClient": false}})).await?;
            tracing::info!(cluster = %name, "no longer accepted here (rollback)");
        }
        let gone = if remove && !accepted && pending.is_empty() {
            if m.metadata.deletion_timestamp.is_none() {
                ignore_not_found(api.delete(name, &DeleteParams::default()).await).map_err(
                    ctx_err(format!("removing pre-created ManagedCluster {name}")),
                )?;
                tracing::info!(cluster = %name, "removed pre-created ManagedCluster");
            }
            // The cluster went back: nothing here will finish the works of its namespace.
            release_works(ctx, name).await?;
            false
        } else {
            !remove
        };
        states.push(if gone && !accepted && pending.is_empty() {
            ClusterState::RolledBack
        } else {
            ClusterState::RollingBack
        });
    }
    Ok(rollback_report(
        names,
        states,
        &rollback,
        "clusters rolled back on this hub",
    ))
}

/// A rollback stage's report: done once every cluster to roll back is rolled back (or arrived,
/// or is gone).
fn rollback_report(
    names: &[String],
    states: Vec<ClusterState>,
    rollback: &BTreeSet<&String>,
    what: &str,
) -> Report {
    let done = rollback_done(names, &states, rollback);
    let back = states
        .iter()
        .filter(|s| **s == ClusterState::RolledBack)
        .count();
    Report {
        message: format!("{back} {what}"),
        state: if done { "Succeeded" } else { "Running" },
        states,
        ..Default::default()
    }
}

fn rollback_done(names: &[String], states: &[ClusterState], rollback: &BTreeSet<&String>) -> bool {
    names
        .iter()
        .zip(states)
        .filter(|(n, _)| rollback.contains(n))
        .all(|(_, s)| {
            matches!(
                s,
                ClusterState::RolledBack | ClusterState::Available | ClusterState::NotFound
            )
        })
}

fn lease_renewed_since(ctx: &Ctx, cluster: &str, since: &str) -> bool {
    let Ok(since) = since.parse::<jiff::Timestamp>() else {
        return false;
    };
    get(&ctx.leases, Some(cluster), CLUSTER_LEASE)
        .and_then(|l| l.spec.clone())
        .and_then(|s| s.renew_time)
        .is_some_and(|t| t.0 > since)
}

/// Marks a cluster as awaited (its lease renewals wake the handler) or not.
fn await_return(ctx: &Ctx, cluster: &str, awaited: bool) {
    if let Ok(mut a) = ctx.awaited.lock() {
        if awaited {
            a.insert(cluster.to_owned());
        } else {
            a.remove(cluster);
        }
    }
}

/// Takes back the clusters of the task's rollback list: accepted again, the migration's
/// annotations gone, and back once Available with a lease renewed after the restore (the
/// `RESTORED_AT` mark). `finish` (cleanup) also removes the mark of each cluster that is back;
/// one without the mark and without anything to restore is back already.
async fn source_rollback(
    ctx: &Ctx,
    task: &MigrationTask,
    names: &[String],
    finish: bool,
) -> Result<Report, Error> {
    let rollback: BTreeSet<&String> = task.spec.rollback.iter().flatten().collect();
    let mut states = Vec::with_capacity(names.len());
    for name in names {
        if !rollback.contains(name) {
            states.push(ClusterState::Pending);
            continue;
        }
        let Some(mc) = get(&ctx.clusters, None, name) else {
            states.push(ClusterState::NotFound);
            continue;
        };
        // Plain OCM: the Klusterlet's own settings go back too (its work applies them once
        // the cluster is connected here again).
        let settings_back = !plain(task) || klusterlet_restore(ctx, task, name).await?;
        let restored_at = mc.annotations().get(RESTORED_AT).cloned();
        if (restored_at.is_none() && !finish)
            || !mc.spec.hub_accepts_client
            || restore_needed(&mc, task)
        {
            let now = restored_at
                .clone()
                .unwrap_or_else(|| jiff::Timestamp::now().to_string());
            let mut patch = flight::patch(&flight::restored(mc.annotations(), &|k| ours(task, k)));
            patch["metadata"]["annotations"][RESTORED_AT] = json!(now);
            patch["spec"] = json!({"hubAcceptsClient": true});
            patch_cluster(ctx, name, patch).await?;
            await_return(ctx, name, true);
            states.push(ClusterState::RollingBack);
            continue;
        }
        let Some(restored_at) = restored_at else {
            states.push(if settings_back {
                ClusterState::RolledBack
            } else {
                ClusterState::RollingBack
            });
            continue;
        };
        let back = settings_back && available(&mc) && lease_renewed_since(ctx, name, &restored_at);
        await_return(ctx, name, !back);
        if back && finish {
            patch_cluster(
                ctx,
                name,
                json!({"metadata": {"annotations": {RESTORED_AT: Value::Null}}}),
            )
            .await?;
        }
        states.push(if back {
            ClusterState::RolledBack
        } else {
            ClusterState::RollingBack
        });
    }
    Ok(rollback_report(
        names,
        states,
        &rollback,
        "clusters back on this hub",
    ))
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

async fn source_clean(ctx: &Ctx, task: &MigrationTask, names: &[String]) -> Result<Report, Error> {
    let detach: BTreeSet<&String> = task.spec.detach.iter().flatten().collect();
    let rollback: BTreeSet<&String> = task.spec.rollback.iter().flatten().collect();
    let api: Api<ManagedCluster> = Api::all(ctx.client.clone());
    // The clusters that stay are taken back (again, or for the first time when the rollback
    // ran out of time) before their marks go: none is left refused by both hubs.
    let rolled = source_rollback(ctx, task, names, true).await?;
    let mut states = Vec::with_capacity(names.len());
    for (name, rolled_state) in names.iter().zip(rolled.states) {
        if rollback.contains(name) {
            states.push(rolled_state);
            continue;
        }
        let mc = get(&ctx.clusters, None, name);
        if detach.contains(name) {
            match mc {
                None => states.push(ClusterState::Detached),
                Some(m) => {
                    if m.metadata.deletion_timestamp.is_none() {
                        ignore_not_found(api.delete(name, &DeleteParams::default()).await)
                            .map_err(ctx_err(format!("detaching ManagedCluster {name}")))?;
                        tracing::info!(cluster = %name, "detached the moved cluster from this hub");
                    }
                    release_works(ctx, name).await?;
                    states.push(ClusterState::Switching);
                }
            }
            continue;
        }
        // Neither: it arrived, and the manager waits for the target to say again that it
        // has it before this hub lets go of it (or takes it back). Left exactly as it is: its
        // marks keep auto-import and its own KlusterletConfig from pulling it back meanwhile.
        states.push(ClusterState::Switching);
    }
    let left = states
        .iter()
        .filter(|s| matches!(s, ClusterState::Switching | ClusterState::RollingBack))
        .count();
    // No cluster selects them any more.
    if left == 0 {
        remove_derived_configs(ctx, task).await?;
    }
    Ok(Report {
        message: format!(
            "{} detached, {left} to go",
            states
                .iter()
                .filter(|s| **s == ClusterState::Detached)
                .count()
        ),
        state: if left == 0 { "Succeeded" } else { "Running" },
        states,
        ..Default::default()
    })
}

async fn target_clean(ctx: &Ctx, task: &MigrationTask, names: &[String]) -> Result<Report, Error> {
    let rollback: BTreeSet<&String> = task.spec.rollback.iter().flatten().collect();
    // The rollback again: a hub that was unreachable while the migration rolled back removes
    // its pre-created copies now (a no-op where the rollback already ran here).
    let rolled = target_rollback(ctx, task, names, true).await?;
    let settles = plain(task) || klusterlet_config_shape(&ctx.client).await? == "None";
    let mut states = Vec::with_capacity(names.len());
    let mut works_left = 0;
    for (name, rolled_state) in names.iter().zip(rolled.states) {
        let mc = get(&ctx.clusters, None, name);
        if settles && !target_work_removed(ctx, task, name, mc.as_deref()).await? {
            works_left += 1;
        }
        if rollback.contains(name) {
            states.push(rolled_state);
            continue;
        }
        if let Some(m) = &mc
            && (m.annotations().contains_key(PRE_CREATED)
                || m.annotations().contains_key(MIGRATING)
                || m.annotations().contains_key(RELEASED_AT))
        {
            patch_cluster(ctx, name, json!({"metadata": {"annotations": {PRE_CREATED: Value::Null, MIGRATING: Value::Null, RELEASED_AT: Value::Null}}})).await?;
        }
        states.push(target_state(mc.as_deref()));
    }
    let done = rollback_done(names, &states, &rollback) && works_left == 0;
    Ok(Report {
        message: if done {
            "migration annotations removed".into()
        } else if works_left > 0 {
            format!("removing the klusterlet works of {works_left} clusters")
        } else {
            rolled.message
        },
        state: if done { "Succeeded" } else { "Running" },
        states,
        ..Default::default()
    })
}

/// Target cleanup, plain OCM: a cluster's klusterlet work is removed once it has settled the
/// Klusterlet of a cluster that arrived (the migration's secret goes with it); true once gone.
async fn target_work_removed(
    ctx: &Ctx,
    task: &MigrationTask,
    cluster: &str,
    mc: Option<&ManagedCluster>,
) -> Result<bool, Error> {
    let Some(work) = klusterlet_work(ctx, task, cluster) else {
        return Ok(true);
    };
    let settled = matches!(kw::step_of(&work), Some(Step::Settle(_))) && kw::applied(&work);
    let arrived = target_state(mc) == ClusterState::Available;
    if arrived && !settled && work.metadata.deletion_timestamp.is_none() {
        if task.spec.bootstrap_connection.is_some() {
            klusterlet_settle(ctx, task, cluster).await?;
            return Ok(false);
        }
        tracing::warn!(%cluster, "the task names no connection to settle the Klusterlet with; its MultipleHubs settings stay as the source left them");
    }
    delete_klusterlet_work(ctx, task, cluster, false).await?;
    Ok(false)
}

async fn write_status(
    ctx: &Ctx,
    task: &MigrationTask,
    names: &[String],
    report: Report,
) -> Result<(), Error> {
    let counts = ClusterState::counts(&report.states);
    let failures = ClusterState::failures(names, &report.states);
    let status = json!({
        "observedStage": task.spec.stage,
        "observedRevision": task.spec.revision,
        "observedGeneration": task.metadata.generation,
        "stageState": report.state,
        "message": report.message,
        "clusterStates": ClusterState::encode(&report.states),
        "clusters": counts,
        "failures": failures,
        "carryOverJson": report.carry_over,
        "klusterletConfigShape": report.shape,
    });
    let current = task
        .status
        .as_ref()
        .map(|s| serde_json::to_value(s).unwrap_or_default())
        .unwrap_or_default();
    let unchanged = status.as_object().is_some_and(|m| {
        m.iter().all(|(k, v)| {
            current.get(k).unwrap_or(&Value::Null) == v || (v.is_null() && current.get(k).is_none())
        })
    });
    if unchanged {
        return Ok(());
    }
    let api: Api<MigrationTask> =
        Api::namespaced(ctx.client.clone(), &task.namespace().unwrap_or_default());
    api.patch_status(
        &task.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .map_err(ctx_err(format!(
        "writing the status of MigrationTask {}",
        task.name_any()
    )))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookkeeping_labels_stay_behind() {
        let labels: BTreeMap<String, String> = [
            ("name", "c1"),
            ("env", "prod"),
            (CLUSTER_SET, "east"),
            ("feature.open-cluster-management.io/addon-x", "available"),
            ("vendor", "OpenShift"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let carried = carried_labels(&labels);
        assert_eq!(carried.keys().collect::<Vec<_>>(), ["env", "vendor"]);
    }

    #[test]
    fn carry_over_past_the_limits_fails_the_clusters_it_concerns() {
        use ClusterState::*;
        // One cluster over its own limit fails alone.
        let mut states = [Valid, Valid, NotFound];
        apply_carry_over_limits(&mut states, &[100, MAX_CARRY_OVER_PER_CLUSTER + 1, 100]);
        assert_eq!(states, [Valid, TooLarge, NotFound]);
        // Records each within the limit, but more than the migration can carry: the ones
        // past the total fail.
        let n = MAX_CARRY_OVER_TOTAL / 10_000 + 3;
        let mut states = vec![Valid; n];
        apply_carry_over_limits(&mut states, &vec![10_000; n]);
        let fit = MAX_CARRY_OVER_TOTAL / 10_001;
        assert!(states[..fit].iter().all(|s| *s == Valid), "{states:?}");
        assert!(
            states[fit + 1..].iter().all(|s| *s == TooLarge),
            "{states:?}"
        );
        let mut small = [Valid; 3];
        apply_carry_over_limits(&mut small, &[10, 10, 10]);
        assert_eq!(small, [Valid; 3]);
    }

    #[test]
    fn states_round_trip_and_name_their_failures() {
        let states = [
            ClusterState::Valid,
            ClusterState::NotFound,
            ClusterState::Available,
            ClusterState::Blocked,
        ];
        let text = ClusterState::encode(&states);
        assert_eq!(text.len(), 4);
        assert_eq!(ClusterState::decode(&text, 5)[..4], states);
        assert_eq!(ClusterState::decode(&text, 5)[4], ClusterState::Pending);
        assert_eq!(
            ClusterState::NotFound.failure().unwrap().0,
            "ClusterNotFound"
        );
        assert!(ClusterState::Blocked.failure().is_none());
        let msg = summary(
            &["a".into(), "b".into()],
            &[ClusterState::Valid, ClusterState::IsHub],
        );
        assert_eq!(msg, "1 of 2 clusters cannot move: b is itself a hub");
    }
}
