//! Validating, on both roles: the clusters named or selected, what each carries, tenancy, and whether the hub can take them.

use kube::discovery::ApiResource;
use migration_api::carried::{self, CarriedObject, CarryOverResource};

use super::*;

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

/// The ManagedClusterSets bound to the migration's namespace on this hub
/// ([`migration_api::tenancy`]); `None` for a task of a manager that named no namespace.
pub(super) async fn bound_sets(
    ctx: &Ctx,
    task: &MigrationTask,
) -> Result<Option<Vec<ManagedClusterSet>>, Error> {
    let Some(ns) = task.spec.migration_namespace.as_deref() else {
        return Ok(None);
    };
    migration_api::runtime::bound_cluster_sets(&ctx.client, ns)
        .await
        .map(Some)
        .map_err(|(what, e)| Error::Kube(ApiError::new(what, e)))
}

/// The clusters the Placement `name` in `namespace` on this hub decided: the cluster names of
/// its PlacementDecisions (labelled with its name, as the placement controller writes them),
/// sorted, each once. `Err(why)` when the Placement does not exist: nothing to select.
pub(super) async fn placement_decisions(
    ctx: &Ctx,
    namespace: &str,
    name: &str,
) -> Result<Result<Vec<String>, String>, Error> {
    use migration_api::ocm::cluster::{self, Placement, PlacementDecision};
    let placements: Api<Placement> = Api::namespaced(ctx.client.clone(), namespace);
    if ignore_not_found(placements.get(name).await)
        .map_err(ctx_err(format!("reading Placement {namespace}/{name}")))?
        .is_none()
    {
        return Ok(Err(format!(
            "Placement {namespace}/{name} (includedManagedClustersPlacementRef) does not exist on this hub"
        )));
    }
    let decisions: Api<PlacementDecision> = Api::namespaced(ctx.client.clone(), namespace);
    let listed = decisions
        .list(&ListParams::default().labels(&cluster::decisions_of(name)))
        .await
        .map_err(ctx_err(format!(
            "listing the PlacementDecisions of {namespace}/{name}"
        )))?;
    Ok(Ok(cluster::decided_clusters(listed)))
}

/// Whether the task's status (`own`: this agent's last write of it, if the cache is behind it)
/// holds this revision's verdict: validation passed or refused.
pub(super) fn validated_already(task: &MigrationTask, own: Option<MigrationTaskStatus>) -> bool {
    reported(
        task,
        own,
        TaskStage::Validating,
        &[StageState::Succeeded, StageState::Failed],
    )
}

pub(super) async fn source_validate(
    ctx: &Ctx,
    task: &MigrationTask,
    names: &[String],
    kinds: &[(CarryOverResource, ApiResource)],
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
            Err(e) => {
                return Err(Error::Kube(ApiError::new(
                    "listing KlusterletAddonConfigs",
                    e,
                )));
            }
        };
    let shape = klusterlet_config_shape_now(ctx).await?;
    let bound = bound_sets(ctx, task).await?;
    let mut objects = carried_objects(ctx, kinds, names).await?;
    // An ACM hub's import controller: it honours disable-auto-import.
    let acm = shape != "None";
    let mut states = Vec::with_capacity(names.len());
    let mut carry = Vec::with_capacity(names.len());
    for name in names {
        let record = CarriedCluster {
            name: name.clone(),
            ..Default::default()
        };
        let Some(mc) = get(&ctx.caches.clusters, None, name) else {
            states.push(ClusterState::NotFound);
            carry.push(record);
            continue;
        };
        let mut record = carried_record(&mc, &addons, &kacs);
        record.objects = objects.remove(name).unwrap_or_default();
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
    let sizes: Vec<(usize, usize)> = carry
        .iter()
        .map(|r| {
            let size = serde_json::to_string(r).map_or(usize::MAX, |s| s.len());
            let limit = if r.objects.is_empty() {
                MAX_CARRY_OVER_PER_CLUSTER
            } else {
                MAX_CARRY_OVER_WITH_OBJECTS
            };
            (size, limit)
        })
        .collect();
    apply_carry_over_limits(&mut states, &sizes);
    // A cluster that cannot carry its record takes its name alone (it fails validation).
    for (record, state) in carry.iter_mut().zip(&states) {
        if *state == ClusterState::TooLarge {
            *record = CarriedCluster {
                name: record.name.clone(),
                ..Default::default()
            };
        }
    }
    let mut report = verdict(names, states);
    let mut parts = split_carry_over(&carry).map_err(|e| {
        Error::Kube(ApiError::new(
            "encoding the carry-over",
            kube::Error::SerdeError(e),
        ))
    })?;
    // Objects carried over may be Secrets: they travel only in parts (Secrets themselves).
    if migration_api::migration::carry_over_inline(&carry, parts.len()) {
        report.carry_over = parts.pop();
    } else {
        report.carry_parts = Some(publish(ctx, task, &parts).await?);
    }
    report.shape = Some(shape);
    Ok(report)
}

/// The objects of each of `kinds` in the namespaces of `clusters`, those its selector matches,
/// made fit for the target ([`carried::clean`]), by cluster. One list per kind, cluster-wide
/// (what the Validating stage's grant allows), rather than one per cluster and kind.
async fn carried_objects(
    ctx: &Ctx,
    kinds: &[(CarryOverResource, ApiResource)],
    clusters: &[String],
) -> Result<BTreeMap<String, Vec<CarriedObject>>, Error> {
    let wanted: BTreeSet<&str> = clusters.iter().map(String::as_str).collect();
    let mut out: BTreeMap<String, Vec<CarriedObject>> = BTreeMap::new();
    for (kind, ar) in kinds {
        let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), ar);
        let listed = api
            .list(&ListParams::default())
            .await
            .map_err(ctx_err(format!("listing {} to carry over", kind.display())))?;
        for o in listed.items {
            let Some(ns) = o.namespace().filter(|ns| wanted.contains(ns.as_str())) else {
                continue;
            };
            if kind
                .label_selector
                .as_ref()
                .is_some_and(|sel| !selector_matches(sel, o.labels()))
            {
                continue;
            }
            let Some(value) = migration_api::discovery::typed(&o, ar) else {
                continue;
            };
            if let Some(object) = carried::clean(&value) {
                out.entry(ns).or_default().push(CarriedObject {
                    resource: ar.plural.clone(),
                    object,
                });
            }
        }
    }
    Ok(out)
}

/// What a cluster carries to the target: its labels, set, own KlusterletConfig, the
/// annotations the target's import reads, client URLs, addons (of `addons`, in its namespace)
/// and KlusterletAddonConfig (of `kacs`).
fn carried_record(
    mc: &ManagedCluster,
    addons: &[ManagedClusterAddOn],
    kacs: &[KlusterletAddonConfig],
) -> CarriedCluster {
    let name = mc.name_any();
    CarriedCluster {
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
        objects: Vec::new(),
        name,
    }
}

/// Whether a cluster's klusterlet runs in hosted mode (upstream `DetermineKlusterletMode`).
pub(super) fn hosted(mc: &ManagedCluster) -> bool {
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

/// Marks as too large each valid cluster whose record (`sizes`: JSON bytes, and the limit of
/// such a record) is over its per-cluster limit or, counted in list order, takes the migration
/// past its total: nothing that cannot travel is dropped silently.
pub(super) fn apply_carry_over_limits(states: &mut [ClusterState], sizes: &[(usize, usize)]) {
    let mut total = 2usize;
    for (state, (size, limit)) in states.iter_mut().zip(sizes) {
        total = total.saturating_add(size.saturating_add(1));
        if *state == ClusterState::Valid && (size > limit || total > MAX_CARRY_OVER_TOTAL) {
            *state = ClusterState::TooLarge;
        }
    }
}

pub(super) async fn target_validate(
    ctx: &Ctx,
    task: &MigrationTask,
    names: &[String],
) -> Result<Report, Error> {
    let states = names
        .iter()
        .map(|n| match get(&ctx.caches.clusters, None, n) {
            Some(mc) if !marked(&mc, PRE_CREATED, task) => ClusterState::Exists,
            _ => ClusterState::Valid,
        })
        .collect();
    let mut report = verdict(names, states);
    // A plain OCM hub gives the clusters that arrive a bootstrap kubeconfig of its own
    // bootstrap identity ([`settle_data`]): without one they could never count as moved.
    if report.state == StageState::Succeeded
        && klusterlet_config_shape(ctx).await? == "None"
        && !hub_bootstrap_identity_exists(&ctx.client).await?
    {
        report.state = StageState::Failed;
        report.message = format!(
            "this plain OCM hub has none of the ServiceAccounts its clusters bootstrap with ({}; `clusteradm init` creates the first), so the clusters that arrive could not be given a bootstrap kubeconfig of this hub",
            hub_bootstrap_names()
        );
    }
    Ok(report)
}

/// The hub's bootstrap ServiceAccounts, as `namespace/name`, comma-separated.
pub(super) fn hub_bootstrap_names() -> String {
    names::HUB_BOOTSTRAP_SERVICE_ACCOUNTS
        .iter()
        .map(|(ns, n)| format!("{ns}/{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether one of [`names::HUB_BOOTSTRAP_SERVICE_ACCOUNTS`] exists on this hub.
pub(super) async fn hub_bootstrap_identity_exists(client: &Client) -> Result<bool, Error> {
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
