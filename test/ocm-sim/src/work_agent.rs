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
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalize, finalizer};
use kube::runtime::{Controller, watcher};
use kube::{Client, ResourceExt};
use migration_api::common::{Condition, set_condition};
use migration_api::names::finalizers::MANIFEST_WORK_CLEANUP;
use migration_api::ocm::work::{
    AppliedManifestWork, DeletePropagationPolicy, FeedbackType, ManifestCondition,
    ManifestConfigOption, ManifestWork, ManifestWorkStatus, UpdateStrategyType,
};
use serde_json::{Value, json};

use crate::Error;
use crate::klusterlet::{hub_kubeconfig, hub_kubeconfig_changed};
use crate::names::AGENT_NAMESPACE;

/// Settings of a work agent.
#[derive(Clone, Debug)]
pub struct WorkAgentOptions {
    pub cluster_name: String,
    /// How often applied resources are re-read for status feedback.
    pub status_sync_interval: Duration,
    /// The connections of the klusterlet agent's process (registration, work and addon
    /// agents share them, as the singleton klusterlet agent does).
    pub transports: kube_sim::client::Transports,
}

struct Ctx {
    hub: Client,
    managed: Client,
    cluster: String,
    hub_hash: String,
    resync: Duration,
}

/// Why a work could not be reconciled.
#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Other(String),
}

fn hub_hash(url: &str) -> String {
    let mut h = DefaultHasher::new();
    url.hash(&mut h);
    format!("{:016x}", h.finish())
}

/// Runs the agent: waits for the klusterlet's hub kubeconfig, serves the works of that hub,
/// and starts over when the kubeconfig changes (a hub switch).
pub async fn run(managed: Client, opts: WorkAgentOptions) -> Result<(), Error> {
    let secrets: Api<Secret> = Api::namespaced(managed.clone(), AGENT_NAMESPACE);
    loop {
        let seen = hub_kubeconfig(&secrets).await?;
        let text = &seen.text;
        let server = kube::config::Kubeconfig::from_yaml(text)
            .ok()
            .and_then(|k| {
                k.clusters
                    .first()
                    .and_then(|c| c.cluster.as_ref())
                    .and_then(|c| c.server.clone())
            })
            .unwrap_or_default();
        let hub = opts.transports.client(text).await?;
        let ctx = Arc::new(Ctx {
            hub: hub.clone(),
            managed: managed.clone(),
            cluster: opts.cluster_name.clone(),
            hub_hash: hub_hash(&server),
            resync: opts.status_sync_interval,
        });
        let works: Api<ManifestWork> = Api::namespaced(hub, &opts.cluster_name);
        let controller = Controller::new(works, watcher::Config::default())
            .run(
                reconcile,
                |_, e: &kube::runtime::finalizer::Error<WorkError>, _| {
                    tracing::debug!(error = %e, "work reconcile failed");
                    Action::requeue(Duration::from_millis(500))
                },
                ctx,
            )
            .for_each(|_| async {});
        tokio::select! {
            _ = controller => {}
            () = hub_kubeconfig_changed(&secrets, &seen) => tracing::info!(cluster = %opts.cluster_name, "hub kubeconfig changed; restarting the work agent"),
        }
    }
}

async fn reconcile(
    work: Arc<ManifestWork>,
    ctx: Arc<Ctx>,
) -> Result<Action, kube::runtime::finalizer::Error<WorkError>> {
    let api: Api<ManifestWork> = Api::namespaced(ctx.hub.clone(), &ctx.cluster);
    let c = ctx.clone();
    finalizer(&api, MANIFEST_WORK_CLEANUP, work, |ev| async move {
        match ev {
            Finalize::Apply(w) => apply_work(&c, &w).await,
            Finalize::Cleanup(w) => cleanup_work(&c, &w).await,
        }
    })
    .await
}

fn applied_name(ctx: &Ctx, work: &ManifestWork) -> String {
    format!("{}-{}", ctx.hub_hash, work.name_any())
}

/// The API resource of a manifest, found by discovery on the managed cluster.
async fn resource_of(
    client: &Client,
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
    kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|e| {
            WorkError::Other(format!(
                "{api_version} {kind} is not served by the cluster: {e}"
            ))
        })
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
    // The controller's cache can lag behind a deletion: act only on the work as it is now, so
    // a late resync never re-creates what a cleanup just removed.
    let works: Api<ManifestWork> = Api::namespaced(ctx.hub.clone(), &ctx.cluster);
    let Some(current) = works.get_opt(&work.name_any()).await? else {
        return Ok(Action::await_change());
    };
    if current.metadata.deletion_timestamp.is_some() || current.uid() != work.uid() {
        return Ok(Action::await_change());
    }
    let work = &current;
    let amws: Api<AppliedManifestWork> = Api::all(ctx.managed.clone());
    let amw_name = applied_name(ctx, work);
    let amw = amws
        .patch(&amw_name, &PatchParams::apply("work-agent").force(), &Patch::Apply(json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "AppliedManifestWork",
            "metadata": {"name": amw_name},
            "spec": {"hubHash": ctx.hub_hash, "agentID": ctx.cluster, "manifestWorkName": work.name_any()}
        })))
        .await?;
    let manifests = work
        .spec
        .workload
        .as_ref()
        .and_then(|w| w.manifests.clone())
        .unwrap_or_default();
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
        let outcome = match resource_of(&ctx.managed, manifest).await {
            Err(e) => Err(e),
            Ok((ar, caps)) => {
                meta["group"] = json!(ar.group);
                meta["version"] = json!(ar.version);
                meta["resource"] = json!(ar.plural);
                let cfg = config_for(work, &ar, ns.as_deref(), &name);
                let api = dynamic_api(&ctx.managed, &ar, &caps, ns.as_deref());
                let result = apply_manifest(&api, manifest, cfg, &amw, &name).await;
                if result.is_ok() {
                    applied_resources.push(
                        json!({"group": ar.group, "version": ar.version, "resource": ar.plural,
                        "namespace": ns.clone().unwrap_or_default(), "name": name}),
                    );
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
                match &live {
                    Some(obj) => {
                        set_condition(
                            &mut conditions,
                            "Available",
                            "True",
                            "ResourceAvailable",
                            "Resource is available",
                            None,
                        );
                        if let Some(cfg) = cfg {
                            feedback = Some(feedback_values(&cfg, obj, &ar));
                            set_condition(
                                &mut conditions,
                                "StatusFeedbackSynced",
                                "True",
                                "StatusFeedbackSynced",
                                "",
                                None,
                            );
                        }
                    }
                    None => {
                        all_available = false;
                        set_condition(
                            &mut conditions,
                            "Available",
                            "False",
                            "ResourceNotAvailable",
                            "Resource is not available",
                            None,
                        );
                    }
                }
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
    let previous: Vec<Value> = amw
        .status
        .as_ref()
        .and_then(|s| s.applied_resources.as_ref())
        .map(|r| {
            r.iter()
                .filter_map(|x| serde_json::to_value(x).ok())
                .collect()
        })
        .unwrap_or_default();
    for stale in previous.iter().filter(|p| !now_keys.contains(&key(p))) {
        let [group, resource, namespace, name] = key(stale);
        let version = stale
            .get("version")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let ar = ApiResource {
            api_version: if group.is_empty() {
                version.clone()
            } else {
                format!("{group}/{version}")
            },
            group,
            version,
            kind: String::new(),
            plural: resource,
        };
        let api: Api<DynamicObject> = if namespace.is_empty() {
            Api::all_with(ctx.managed.clone(), &ar)
        } else {
            Api::namespaced_with(ctx.managed.clone(), &namespace, &ar)
        };
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    amws.patch_status(
        &amw_name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"appliedResources": applied_resources}})),
    )
    .await?;
    let generation = work.metadata.generation;
    let mut work_conditions = work
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let (applied, available) = (
        if all_applied { "True" } else { "False" },
        if all_available { "True" } else { "False" },
    );
    set_condition(
        &mut work_conditions,
        "Applied",
        applied,
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
    set_condition(
        &mut work_conditions,
        "Available",
        available,
        if all_available {
            "ResourcesAvailable"
        } else {
            "ResourcesNotAvailable"
        },
        if all_available {
            "All resources are available"
        } else {
            "Some resources are not available"
        },
        generation,
    );
    let status = json!({"conditions": work_conditions, "resourceStatus": {"manifests": statuses}});
    // Written only when it changed, as the real agent compares before it updates.
    let unchanged = serde_json::from_value::<ManifestWorkStatus>(status.clone())
        .is_ok_and(|s| work.status.as_ref() == Some(&s));
    if !unchanged {
        works
            .patch_status(
                &work.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await?;
    }
    Ok(Action::requeue(ctx.resync))
}

/// Applies one manifest per its update strategy; returns the live object (None if absent).
async fn apply_manifest(
    api: &Api<DynamicObject>,
    manifest: &Value,
    cfg: Option<&ManifestConfigOption>,
    owner: &AppliedManifestWork,
    name: &str,
) -> Result<Option<Value>, WorkError> {
    let strategy = cfg
        .and_then(|c| c.update_strategy.as_ref())
        .map(|u| u.type_)
        .unwrap_or_default();
    let mut desired = manifest.clone();
    desired["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "AppliedManifestWork",
        "name": owner.name_any(), "uid": owner.uid().unwrap_or_default()
    }]);
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
            Some(api.patch(name, &pp, &Patch::Apply(&desired)).await?)
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
            Some(_) => {
                let pp = PatchParams {
                    field_manager: Some("work-agent".into()),
                    ..Default::default()
                };
                Some(api.patch(name, &pp, &Patch::Merge(&desired)).await?)
            }
        },
    };
    Ok(live.map(|o| serde_json::to_value(o).unwrap_or(Value::Null)))
}

/// The feedback value of a field; `None` for raw JSON over the API's 1024-byte limit, which
/// the real agent leaves out rather than truncating into invalid JSON.
fn field_value(v: &Value) -> Option<Value> {
    Some(match v {
        Value::Number(n) if n.is_i64() => json!({"type": "Integer", "integer": n.as_i64()}),
        Value::Bool(b) => json!({"type": "Boolean", "boolean": b}),
        Value::String(s) => json!({"type": "String", "string": s}),
        other => {
            let raw = other.to_string();
            if raw.len() > 1024 {
                return None;
            }
            json!({"type": "JsonRaw", "jsonRaw": raw})
        }
    })
}

fn feedback_values(cfg: &ManifestConfigOption, obj: &Value, ar: &ApiResource) -> Vec<Value> {
    let mut values = Vec::new();
    for rule in cfg.feedback_rules.iter().flatten() {
        match rule.type_ {
            FeedbackType::WellKnownStatus if ar.kind == "Deployment" => {
                for (name, path) in [
                    ("ReadyReplicas", "/status/readyReplicas"),
                    ("Replicas", "/status/replicas"),
                    ("AvailableReplicas", "/status/availableReplicas"),
                    ("ObservedGeneration", "/status/observedGeneration"),
                ] {
                    if let Some(v) = obj.pointer(path).and_then(field_value) {
                        values.push(json!({"name": name, "fieldValue": v}));
                    }
                }
            }
            FeedbackType::WellKnownStatus => {}
            FeedbackType::JSONPaths => {
                for jp in rule.json_paths.iter().flatten() {
                    if let Some(v) = kube_sim::jsonpath::find(obj, &jp.path)
                        .first()
                        .and_then(|v| field_value(v))
                    {
                        values.push(json!({"name": jp.name, "fieldValue": v}));
                    }
                }
            }
        }
    }
    values
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
    let amws: Api<AppliedManifestWork> = Api::all(ctx.managed.clone());
    let amw_name = applied_name(ctx, work);
    let Some(amw) = amws.get_opt(&amw_name).await? else {
        return Ok(Action::await_change());
    };
    let owner_uid = amw.uid().unwrap_or_default();
    let resources: Vec<Value> = amw
        .status
        .as_ref()
        .and_then(|s| s.applied_resources.as_ref())
        .map(|r| {
            r.iter()
                .filter_map(|x| serde_json::to_value(x).ok())
                .collect()
        })
        .unwrap_or_default();
    let mut remaining = 0;
    for res in &resources {
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
            Api::all_with(ctx.managed.clone(), &resource)
        } else {
            Api::namespaced_with(ctx.managed.clone(), &s("namespace"), &resource)
        };
        let Some(obj) = api.get_opt(&s("name")).await? else {
            continue;
        };
        if orphaned(work, res) {
            // Leave it, without our owner reference (so the AppliedManifestWork's removal
            // does not collect it).
            let refs: Vec<_> = obj
                .owner_references()
                .iter()
                .filter(|r| r.uid != owner_uid)
                .cloned()
                .collect();
            api.patch(
                &s("name"),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"ownerReferences": refs}})),
            )
            .await?;
            continue;
        }
        remaining += 1;
        if obj.metadata.deletion_timestamp.is_none() {
            api.delete(&s("name"), &DeleteParams::foreground()).await?;
        }
    }
    if remaining > 0 {
        // Not done: an error keeps the work's finalizer (the finalizer helper removes it on any
        // Ok), and the error policy retries shortly.
        return Err(WorkError::Other(format!(
            "waiting for {remaining} applied resource(s) of work {} to be deleted",
            work.name_any()
        )));
    }
    match amws.delete(&amw_name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feedback_values_by_type_and_the_raw_limit() {
        assert_eq!(field_value(&json!(3)).unwrap()["integer"], 3);
        assert_eq!(field_value(&json!("x")).unwrap()["type"], "String");
        assert_eq!(
            field_value(&json!({"a": 1})).unwrap()["jsonRaw"],
            "{\"a\":1}"
        );
        // Multi-byte characters past the limit: no panic, no truncated JSON.
        let big = json!({"s": "é".repeat(600)});
        assert_eq!(field_value(&big), None);
    }
}
