//! Objects carried over (`spec.carryOver`): the target creates its copies before the cluster
//! switches and removes them if it goes back; where a kind's controller has a pause
//! ([`carried::pause_annotation`]) the source's objects are paused before any cluster switches
//! and resumed if the cluster goes back, and the target's copies, created paused, are resumed
//! once the cluster has registered there: the two hubs' controllers never act on one cluster at
//! the same time.

use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use migration_api::carried::{self, CarryOverResource};
use migration_api::names::annotations::OBJECTS_PAUSED;

use super::*;

/// The objects cluster `name` carries over (`carryOver`), created in its namespace here, owners
/// first, each labelled with the migration, paused where its controller has a pause, its owner
/// references pointing at this hub's objects ([`carried::for_target`]); then its
/// ManagedCluster is marked ([`OBJECTS_CARRIED`]). One of this migration's already there is
/// taken as it is; one that is not this migration's is never overwritten (an error: the stage
/// waits, and times out into a rollback). Until the hub has made the cluster's namespace,
/// nothing (the namespace's arrival changes the ManagedCluster's conditions, and so wakes this).
pub(super) async fn carry_objects(
    ctx: &Ctx,
    task: &MigrationTask,
    name: &str,
) -> Result<(), Error> {
    let Some(record) = carried(task, name) else {
        return Ok(());
    };
    let Some(mc) = get(&ctx.caches.clusters, None, name) else {
        return Ok(());
    };
    let key = task.spec.key();
    let mut uids = BTreeMap::new();
    if let Some(uid) = mc.uid() {
        uids.insert(
            carried::key_of(
                "cluster.open-cluster-management.io/v1",
                "ManagedCluster",
                name,
            ),
            uid,
        );
    }
    let values: Vec<Value> = record.objects.iter().map(|o| o.object.clone()).collect();
    for i in migration_api::bundle::import_order(&values) {
        let carried = &record.objects[i];
        let object = carried::for_target(carried, name, key, &uids);
        let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let object_name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, &kind),
            &carried.resource,
        );
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), name, &ar);
        let what = || format!("{kind} {name}/{object_name}");
        let body: DynamicObject = serde_json::from_value(object.clone()).map_err(|e| {
            Error::Kube(ApiError::new(
                format!("building {}", what()),
                kube::Error::SerdeError(e),
            ))
        })?;
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let made = match api.create(&pp, &body).await {
            Ok(made) => made,
            // The namespace is not here yet (a kind no longer served is an error, not a wait).
            Err(kube::Error::Api(s))
                if s.code == 404 && s.details.as_ref().is_some_and(|d| d.kind == "namespaces") =>
            {
                return Ok(());
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let there = api
                    .get(&object_name)
                    .await
                    .map_err(ctx_err(format!("reading {}", what())))?;
                if there.labels().get(carried::CARRIED_BY).map(String::as_str) != Some(key) {
                    return Err(Error::Config(format!(
                        "{} exists on this hub and is not this migration's: not overwritten",
                        what()
                    )));
                }
                there
            }
            Err(e) => {
                return Err(Error::Kube(ApiError::new(
                    format!("creating {}", what()),
                    e,
                )));
            }
        };
        if let Some(uid) = made.uid() {
            uids.insert(carried::object_key(&object), uid);
        }
    }
    patch_cluster(
        ctx,
        name,
        json!({"metadata": {"annotations": {OBJECTS_CARRIED: key}}}),
    )
    .await?;
    tracing::info!(cluster = %name, objects = record.objects.len(), "carried objects over");
    Ok(())
}

/// Removes what this migration created in cluster `name`'s namespace of the kinds it carries
/// over (labelled [`carried::CARRIED_BY`] with its key), before its pre-created copy goes.
pub(super) async fn remove_carried(
    ctx: &Ctx,
    task: &MigrationTask,
    name: &str,
) -> Result<(), Error> {
    let Some(kinds) = task.spec.carry_kinds.as_deref().filter(|k| !k.is_empty()) else {
        return Ok(());
    };
    // A kind no longer served here leaves nothing of it to remove, and does not keep the
    // others' copies.
    let found = migration_api::discovery::served_each(&ctx.client, kinds)
        .await
        .map_err(ctx_err("discovering the kinds carried over"))?;
    let ours = format!("{}={}", carried::CARRIED_BY, task.spec.key());
    for (_, ar) in found {
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), name, &ar);
        let listed = api
            .list(&ListParams::default().labels(&ours))
            .await
            .map_err(ctx_err(format!(
                "listing the {} carried to {name}",
                ar.plural
            )))?;
        for o in listed.items {
            ignore_not_found(api.delete(&o.name_any(), &DeleteParams::default()).await).map_err(
                ctx_err(format!("removing {} {name}/{}", ar.kind, o.name_any())),
            )?;
        }
    }
    Ok(())
}

/// Whether the migration carries a kind whose controller has a pause.
pub(super) fn pauses(task: &MigrationTask) -> bool {
    task.spec
        .carry_kinds
        .iter()
        .flatten()
        .any(|k| carried::pause_annotation(&k.group, &k.resource).is_some())
}

/// Source, Deploying: whether cluster `mc`'s objects are still to pause.
pub(super) fn to_pause(task: &MigrationTask, mc: &ManagedCluster) -> bool {
    pauses(task) && !marked(mc, OBJECTS_PAUSED, task)
}

/// Source, taking a cluster back: whether its objects were paused by this migration.
pub(super) fn to_resume_on_source(task: &MigrationTask, mc: &ManagedCluster) -> bool {
    marked(mc, OBJECTS_PAUSED, task)
}

/// Target, a cluster registered: whether its copies are still to resume.
pub(super) fn to_resume_on_target(task: &MigrationTask, mc: &ManagedCluster) -> bool {
    pauses(task) && marked(mc, OBJECTS_CARRIED, task) && !marked(mc, OBJECTS_RESUMED, task)
}

/// The objects of the migration's pausable kinds in `cluster`'s namespace, with their API
/// resource: on the source those each kind's selector matches, on the target this
/// migration's copies. A kind not served here has none.
async fn pausable(
    ctx: &Ctx,
    task: &MigrationTask,
    cluster: &str,
) -> Result<Vec<(ApiResource, DynamicObject)>, Error> {
    let target = task.spec.role == MigrationRole::Target;
    let ours = format!("{}={}", carried::CARRIED_BY, task.spec.key());
    let kinds: Vec<CarryOverResource> = task
        .spec
        .carry_kinds
        .iter()
        .flatten()
        .filter(|k| carried::pause_annotation(&k.group, &k.resource).is_some())
        .cloned()
        .collect();
    let found = migration_api::discovery::served_each(&ctx.client, &kinds)
        .await
        .map_err(ctx_err("discovering the kinds carried over"))?;
    let mut out = Vec::new();
    for (kind, ar) in found {
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), cluster, &ar);
        let params = if target {
            ListParams::default().labels(&ours)
        } else {
            ListParams::default()
        };
        let listed = api
            .list(&params)
            .await
            .map_err(ctx_err(format!("listing the {} of {cluster}", ar.plural)))?;
        for o in listed.items {
            let selected = target
                || kind
                    .label_selector
                    .as_ref()
                    .is_none_or(|sel| selector_matches(sel, o.labels()));
            if selected {
                out.push((ar.clone(), o));
            }
        }
    }
    Ok(out)
}

/// Source: pauses cluster `cluster`'s objects of pausable kinds (one its controller already
/// reads as paused is left as it is: that pause is not the migration's to lift), then marks its
/// ManagedCluster ([`OBJECTS_PAUSED`]).
pub(super) async fn pause_on_source(
    ctx: &Ctx,
    task: &MigrationTask,
    cluster: &str,
) -> Result<(), Error> {
    let key = task.spec.key();
    for (ar, o) in pausable(ctx, task, cluster).await? {
        let group = carried::group_of(&ar.api_version);
        let Some((annotation, value)) = carried::pause_annotation(group, &ar.plural) else {
            continue;
        };
        if carried::paused(group, &ar.plural, o.annotations()) {
            continue;
        }
        let patch =
            json!({"metadata": {"annotations": {annotation: value, carried::PAUSED_BY: key}}});
        patch_object(ctx, cluster, &ar, &o.name_any(), &patch).await?;
    }
    patch_cluster(
        ctx,
        cluster,
        json!({"metadata": {"annotations": {OBJECTS_PAUSED: key}}}),
    )
    .await?;
    tracing::info!(cluster = %cluster, "paused the controllers of the objects it carries");
    Ok(())
}

/// Lifts this migration's pauses from cluster `cluster`'s objects (those marked
/// [`carried::PAUSED_BY`] with its key), then marks its ManagedCluster: on the source the
/// pause mark goes, on the target the copies count as resumed ([`OBJECTS_RESUMED`]).
pub(super) async fn resume(ctx: &Ctx, task: &MigrationTask, cluster: &str) -> Result<(), Error> {
    let key = task.spec.key();
    for (ar, o) in pausable(ctx, task, cluster).await? {
        if o.annotations().get(carried::PAUSED_BY).map(String::as_str) != Some(key) {
            continue;
        }
        let group = carried::group_of(&ar.api_version);
        let Some((annotation, _)) = carried::pause_annotation(group, &ar.plural) else {
            continue;
        };
        let patch =
            json!({"metadata": {"annotations": {annotation: null, carried::PAUSED_BY: null}}});
        patch_object(ctx, cluster, &ar, &o.name_any(), &patch).await?;
    }
    let mark = if task.spec.role == MigrationRole::Target {
        json!({OBJECTS_RESUMED: key})
    } else {
        json!({OBJECTS_PAUSED: null})
    };
    patch_cluster(ctx, cluster, json!({"metadata": {"annotations": mark}})).await?;
    tracing::info!(cluster = %cluster, "resumed the controllers of the objects it carries");
    Ok(())
}

/// Merge-patches one object of `ar` in `cluster`'s namespace (one gone meanwhile is no error).
async fn patch_object(
    ctx: &Ctx,
    cluster: &str,
    ar: &ApiResource,
    name: &str,
    patch: &Value,
) -> Result<(), Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), cluster, ar);
    ignore_not_found(
        api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await,
    )
    .map_err(ctx_err(format!("patching {} {cluster}/{name}", ar.kind)))?;
    Ok(())
}
