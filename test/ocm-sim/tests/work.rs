//! ManifestWorks land their objects on the right cluster with Applied, Available and feedback;
//! deleting a work removes what it applied (or leaves it, per its deleteOption).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::eventually;

/// How long each wait here may take.
const LIMIT: Duration = Duration::from_secs(20);

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use migration_api::common::condition_is_true;
use migration_api::ocm::cluster::ManagedCluster;
use migration_api::ocm::work::{AppliedManifestWork, ManifestWork};
use ocm_sim::cluster::{Role, SimCluster};
use ocm_sim::hub::{Agent, AgentOptions, Hub, HubKind, HubOptions};
use ocm_sim::registration::RegistrationOptions;

use serde_json::json;

async fn joined_pair() -> (Hub, Vec<(SimCluster, Agent)>) {
    joined_pair_syncing(Duration::from_millis(200)).await
}

/// Two clusters joined to a hub, their work agents syncing status every `status_sync`.
async fn joined_pair_syncing(status_sync: Duration) -> (Hub, Vec<(SimCluster, Agent)>) {
    common::logs();
    let hub = Hub::start(
        "hub1",
        HubOptions {
            auto_approve: true,
            registration: RegistrationOptions {
                lease_check_interval: Duration::from_millis(200),
            },
            kind: HubKind::Acm,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let agent = AgentOptions {
        join_delay: Duration::ZERO,
        lease_duration_secs: 1,
        status_sync_interval: status_sync,
        addon_lease_period: Duration::from_secs(1),
        raw_feedback_json: false,
        hub_timeout: None,
        eviction_grace: Duration::from_secs(3600),
    };
    let mut clusters = Vec::new();
    for name in ["cluster1", "cluster2"] {
        let c = SimCluster::start(name, Role::Managed).await.unwrap();
        let a = Agent::start(&c, &hub.bootstrap_kubeconfig, agent)
            .await
            .unwrap();
        clusters.push((c, a));
    }
    let mcs: Api<ManagedCluster> = Api::all(hub.cluster.admin.clone());
    eventually(LIMIT, "both clusters joined", || {
        let mcs = mcs.clone();
        async move {
            let l = mcs.list(&Default::default()).await.unwrap().items;
            (l.len() == 2
                && l.iter().all(|m| {
                    condition_is_true(
                        m.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_deref())
                            .unwrap_or(&[]),
                        "ManagedClusterJoined",
                    )
                }))
            .then_some(())
        }
    })
    .await;
    (hub, clusters)
}

/// Sets a work's manifests to `edited`'s with a merge patch (the work agent writes its status
/// meanwhile, so a replace of what was read could meet a conflict).
async fn set_manifests(works: &Api<ManifestWork>, edited: &ManifestWork) {
    let manifests = &edited.spec.workload.as_ref().unwrap().manifests;
    works
        .patch(
            edited.metadata.name.as_deref().unwrap(),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"workload": {"manifests": manifests}}})),
        )
        .await
        .unwrap();
}

fn work(name: &str, delete_option: serde_json::Value) -> ManifestWork {
    serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": name, "namespace": "cluster1"},
        "spec": {
            "workload": {"manifests": [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "app"}, "data": {"mode": "blue", "replicas": "3"}}
            ]},
            "deleteOption": delete_option,
            "manifestConfigs": [{
                "resourceIdentifier": {"resource": "configmaps", "namespace": "app", "name": "settings"},
                "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [{"name": "mode", "path": ".data.mode"}, {"name": "extra", "path": ".metadata.labels.extra"}]}]
            }]
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn a_work_applies_reports_feedback_and_is_removed_with_its_objects() {
    let (hub, clusters) = joined_pair().await;
    let works: Api<ManifestWork> = Api::namespaced(hub.cluster.admin.clone(), "cluster1");
    works
        .create(
            &PostParams::default(),
            &work("app", json!({"propagationPolicy": "Foreground"})),
        )
        .await
        .unwrap();
    let c1_cms: Api<ConfigMap> = Api::namespaced(clusters[0].0.admin.clone(), "app");
    let c2_cms: Api<ConfigMap> = Api::namespaced(clusters[1].0.admin.clone(), "app");
    eventually(LIMIT, "the ConfigMap on cluster1", || {
        let c1 = c1_cms.clone();
        async move { c1.get_opt("settings").await.unwrap() }
    })
    .await;
    assert!(
        c2_cms.get_opt("settings").await.unwrap().is_none(),
        "cluster2 gets nothing"
    );
    let w = eventually(LIMIT, "Applied, Available and the feedback value", || {
        let works = works.clone();
        async move {
            let w = works.get("app").await.unwrap();
            let st = w.status.clone()?;
            let conds = st.conditions.clone().unwrap_or_default();
            let fb = st
                .resource_status
                .as_ref()?
                .manifests
                .as_ref()?
                .iter()
                .find_map(|m| {
                    m.status_feedback
                        .as_ref()?
                        .values
                        .as_ref()?
                        .iter()
                        .find(|v| v.name == "mode")
                        .and_then(|v| v.field_value.string.clone())
                });
            (condition_is_true(&conds, "Applied")
                && condition_is_true(&conds, "Available")
                && fb.as_deref() == Some("blue"))
            .then_some(w)
        }
    })
    .await;
    assert_eq!(
        w.finalizers(),
        ["cluster.open-cluster-management.io/manifest-work-cleanup"]
    );
    // While nothing changes, the agent keeps reconciling (each reconcile reads the work's
    // ConfigMap on the cluster; its AppliedManifestWork comes from its watch) without writing
    // the work again: per-manifest conditions keep their transition times.
    let settled = works.get("app").await.unwrap().resource_version();
    let hub_metrics = hub.cluster.api.metrics();
    let cluster_metrics = clusters[0].0.api.metrics();
    let gets = |m: &kube_sim::Metrics| m.total(Some("get"), Some("configmaps"));
    // The work agent's writes to works (the import controller re-applies its own work).
    let patches = |m: &kube_sim::Metrics| -> u64 {
        m.access_log()
            .iter()
            .filter(|(a, _)| {
                a.verb == "patch"
                    && a.resource.starts_with("manifestworks")
                    && a.user
                        .starts_with("system:open-cluster-management:cluster1:")
            })
            .map(|(_, n)| n)
            .sum()
    };
    let (gets_before, since) = (gets(cluster_metrics), std::time::Instant::now());
    let patches_before = patches(hub_metrics);
    let amw_writes = |m: &kube_sim::Metrics| {
        m.total(Some("patch"), Some("appliedmanifestworks"))
            + m.total(Some("patch"), Some("appliedmanifestworks/status"))
    };
    let amw_writes_before = amw_writes(cluster_metrics);
    // Nor read with a request: upstream reads it from its informer's lister, and so does the
    // evictor, which looks for AppliedManifestWorks whose work is gone.
    let amw_gets = |m: &kube_sim::Metrics| m.total(Some("get"), Some("appliedmanifestworks"));
    let amw_lists = |m: &kube_sim::Metrics| m.total(Some("list"), Some("appliedmanifestworks"));
    let (amw_gets_before, amw_lists_before) =
        (amw_gets(cluster_metrics), amw_lists(cluster_metrics));
    // Transition times have second resolution: let a second pass, and ten reconciles.
    eventually(
        LIMIT,
        "ten more reconciles, a second apart from the report",
        || {
            let done = gets(cluster_metrics) >= gets_before + 10
                && since.elapsed() > Duration::from_millis(1100);
            async move { done.then_some(()) }
        },
    )
    .await;
    assert_eq!(
        works.get("app").await.unwrap().resource_version(),
        settled,
        "an unchanged status is not written again"
    );
    assert_eq!(
        patches(hub_metrics),
        patches_before,
        "nor even sent: the agent compares before it writes"
    );
    // Nor is the AppliedManifestWork, as upstream creates it only when its lister has none
    // and updates its list only when it changed.
    assert_eq!(
        amw_writes(cluster_metrics),
        amw_writes_before,
        "the AppliedManifestWork is not written while nothing changes"
    );
    // A watch never GETs; it lists again only when the server has let its resourceVersion
    // go (410, as an informer relists), not once a reconcile as a read would (ten or more).
    assert_eq!(
        amw_gets(cluster_metrics),
        amw_gets_before,
        "the AppliedManifestWork is read from the agent's watch"
    );
    let relists = amw_lists(cluster_metrics) - amw_lists_before;
    assert!(
        relists < 10,
        "the AppliedManifestWork is listed once a reconcile: {relists} lists in ten reconciles"
    );
    let amws: Api<AppliedManifestWork> = Api::all(clusters[0].0.admin.clone());
    // One AppliedManifestWork for this work (the import controller's klusterlet work has its own).
    let for_app = |l: Vec<AppliedManifestWork>| {
        l.into_iter()
            .filter(|a| a.spec.manifest_work_name == "app")
            .count()
    };
    assert_eq!(
        for_app(amws.list(&Default::default()).await.unwrap().items),
        1
    );
    // Feedback follows the object on the cluster, and drift from the manifest stays until
    // the work's spec changes: upstream's status controller reads the object at each sync
    // and applies nothing; its apply controller runs on a change of the work's spec or
    // labels (or its 4 to 6-minute resync), not on every event of the work
    // (ocm pkg/work/spoke/controllers/manifestcontroller/manifestwork_controller.go
    // `onUpdateFunc`). (By now the cluster's agent has restarted once with its klusterlet
    // work's settings, which applies every work afresh; it does not restart again here.)
    c1_cms
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"extra": "seen"}}, "data": {"mode": "green", "other": "x"}})),
        )
        .await
        .unwrap();
    eventually(LIMIT, "the feedback to follow the drift", || {
        let works = works.clone();
        async move {
            let w = works.get("app").await.unwrap();
            let values = w
                .status?
                .resource_status?
                .manifests?
                .into_iter()
                .find_map(|m| m.status_feedback?.values)?;
            let get = |n: &str| {
                values
                    .iter()
                    .find(|v| v.name == n)
                    .and_then(|v| v.field_value.string.clone())
            };
            (get("extra").as_deref() == Some("seen") && get("mode").as_deref() == Some("green"))
                .then_some(())
        }
    })
    .await;
    let syncs = gets(cluster_metrics);
    eventually(LIMIT, "five more status syncs", || {
        let done = gets(cluster_metrics) >= syncs + 5;
        async move { done.then_some(()) }
    })
    .await;
    let live = c1_cms.get("settings").await.unwrap();
    let data = live.data.unwrap_or_default();
    assert_eq!(
        data.get("mode").map(String::as_str),
        Some("green"),
        "a status sync applies nothing"
    );
    // A manifest removed from the work is removed from the cluster.
    let mut extra = works.get("app").await.unwrap();
    let manifests = extra
        .spec
        .workload
        .as_mut()
        .unwrap()
        .manifests
        .as_mut()
        .unwrap();
    manifests.push(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "extra", "namespace": "app"}}));
    set_manifests(&works, &extra).await;
    eventually(LIMIT, "the extra ConfigMap", || {
        let c1 = c1_cms.clone();
        async move { c1.get_opt("extra").await.unwrap() }
    })
    .await;
    // The spec changed: every manifest is applied again, and the drift is replaced (the Update
    // strategy replaces the object but merges its labels, as upstream's `update_apply.go`
    // does, so the added label stays).
    let live = c1_cms.get("settings").await.unwrap();
    let data = live.data.unwrap_or_default();
    assert_eq!(data.get("mode").map(String::as_str), Some("blue"));
    assert!(!data.contains_key("other"), "drift replaced: {data:?}");
    assert_eq!(
        live.metadata
            .labels
            .unwrap_or_default()
            .get("extra")
            .map(String::as_str),
        Some("seen")
    );
    let mut fewer = works.get("app").await.unwrap();
    fewer
        .spec
        .workload
        .as_mut()
        .unwrap()
        .manifests
        .as_mut()
        .unwrap()
        .pop();
    set_manifests(&works, &fewer).await;
    eventually(LIMIT, "the extra ConfigMap to be pruned", || {
        let c1 = c1_cms.clone();
        async move { c1.get_opt("extra").await.unwrap().is_none().then_some(()) }
    })
    .await;
    works.delete("app", &DeleteParams::default()).await.unwrap();
    eventually(
        LIMIT,
        "the work, its objects and the AppliedManifestWork to go",
        || {
            let (works, c1, amws) = (works.clone(), c1_cms.clone(), amws.clone());
            async move {
                let w = works.get_opt("app").await.unwrap();
                let a: Vec<AppliedManifestWork> = amws
                    .list(&Default::default())
                    .await
                    .unwrap()
                    .items
                    .into_iter()
                    .filter(|a| a.spec.manifest_work_name == "app")
                    .collect();
                (w.is_none() && c1.get_opt("settings").await.unwrap().is_none() && a.is_empty())
                    .then_some(())
            }
        },
    )
    .await;
}

#[tokio::test]
async fn selectively_orphaned_objects_stay_the_rest_go() {
    let (hub, clusters) = joined_pair().await;
    clusters[0].0.ensure_namespace("app").await.unwrap();
    let works: Api<ManifestWork> = Api::namespaced(hub.cluster.admin.clone(), "cluster1");
    let w: ManifestWork = serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": "two", "namespace": "cluster1"},
        "spec": {
            "workload": {"manifests": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keep", "namespace": "app"}, "data": {"a": "1"}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "drop", "namespace": "app"}, "data": {"a": "1"}}
            ]},
            "deleteOption": {"propagationPolicy": "SelectivelyOrphan", "selectivelyOrphans": {"orphaningRules": [
                {"resource": "configmaps", "namespace": "app", "name": "keep"}]}}
        }
    }))
    .unwrap();
    works.create(&PostParams::default(), &w).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(clusters[0].0.admin.clone(), "app");
    eventually(LIMIT, "both ConfigMaps", || {
        let cms = cms.clone();
        async move {
            (cms.get_opt("keep").await.unwrap().is_some()
                && cms.get_opt("drop").await.unwrap().is_some())
            .then_some(())
        }
    })
    .await;
    works.delete("two", &DeleteParams::default()).await.unwrap();
    eventually(
        LIMIT,
        "the work and the non-orphaned ConfigMap to go",
        || {
            let (works, cms) = (works.clone(), cms.clone());
            async move {
                (works.get_opt("two").await.unwrap().is_none()
                    && cms.get_opt("drop").await.unwrap().is_none())
                .then_some(())
            }
        },
    )
    .await;
    let kept = cms.get("keep").await.unwrap();
    assert!(
        kept.owner_references().is_empty(),
        "the orphan no longer points at the AppliedManifestWork"
    );
}

/// Upstream's work agent is not cluster-admin (`manifests/klusterlet/managed/
/// klusterlet-work-*.yaml`): it applies namespaced kinds as `admin`, but a custom resource only
/// through a ClusterRole labelled `open-cluster-management.io/aggregate-to-work`.
#[tokio::test]
async fn the_work_agent_reaches_custom_resources_only_through_an_aggregated_role() {
    let (hub, clusters) = joined_pair().await;
    let works: Api<ManifestWork> = Api::namespaced(hub.cluster.admin.clone(), "cluster1");
    let claim = json!({"apiVersion": "cluster.open-cluster-management.io/v1alpha1", "kind": "ClusterClaim",
                       "metadata": {"name": "region.example.io"}, "spec": {"value": "east"}});
    let claims_work = |manifests: Vec<serde_json::Value>| -> ManifestWork {
        serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": "claims", "namespace": "cluster1"},
            "spec": {"workload": {"manifests": manifests}}
        }))
        .unwrap()
    };
    works
        .create(&PostParams::default(), &claims_work(vec![claim.clone()]))
        .await
        .unwrap();
    let condition = |want: &'static str| {
        let works = works.clone();
        move || {
            let works = works.clone();
            async move {
                let w = works.get("claims").await.ok()?;
                let m = w.status?.resource_status?.manifests?;
                let c = m
                    .iter()
                    .find(|m| m.resource_meta.kind.as_deref() == Some("ClusterClaim"))?
                    .conditions
                    .iter()
                    .find(|c| c.type_ == "Applied")?
                    .clone();
                (c.status == want).then_some(c.message)
            }
        }
    };
    let refused = eventually(LIMIT, "the claim refused", condition("False")).await;
    assert!(refused.contains("forbidden"), "{refused}");
    let claims: Api<migration_api::ocm::cluster::ClusterClaim> =
        Api::all(clusters[0].0.admin.clone());
    assert!(claims.get_opt("region.example.io").await.unwrap().is_none());
    // A role labelled for the work agent's aggregate role, delivered first, lets it through.
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "claims-for-work", "labels": {"open-cluster-management.io/aggregate-to-work": "true"}},
        "rules": [{"apiGroups": ["cluster.open-cluster-management.io"], "resources": ["clusterclaims"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]});
    set_manifests(&works, &claims_work(vec![role, claim])).await;
    eventually(LIMIT, "the claim applied", condition("True")).await;
    assert!(claims.get_opt("region.example.io").await.unwrap().is_some());
}

#[tokio::test]
async fn the_hub_refuses_a_work_upstreams_webhook_refuses() {
    let hub = SimCluster::start("hub1", Role::Hub).await.unwrap();
    let cm = |name: &str, bytes: usize| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "default"},
               "data": {"k": "x".repeat(bytes)}})
    };
    let work = |name: &str, manifests: Vec<serde_json::Value>| -> ManifestWork {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"workload": {"manifests": manifests}}
        }))
        .unwrap()
    };
    let works: Api<ManifestWork> = Api::namespaced(hub.admin.clone(), "default");
    let refused = |w: ManifestWork| {
        let works = works.clone();
        async move {
            match works.create(&PostParams::default(), &w).await {
                Err(kube::Error::Api(s)) => (s.code, s.message),
                other => panic!("expected a refusal, got {other:?}"),
            }
        }
    };
    // 500 KiB of manifests in all (ocm `pkg/work/webhook/common/validator.go`).
    let limit = ocm_sim::cluster::MANIFEST_LIMIT;
    works
        .create(
            &PostParams::default(),
            &work(
                "fits",
                vec![cm("a", limit / 2 - 200), cm("b", limit / 2 - 200)],
            ),
        )
        .await
        .unwrap();
    let (code, message) = refused(work("big", vec![cm("a", limit / 2), cm("b", limit / 2)])).await;
    assert_eq!(code, 403);
    assert!(
        message.starts_with("admission webhook \"manifestworkvalidators.admission.work.open-cluster-management.io\" denied the request: the size of manifests is ")
            && message.ends_with("bytes which exceeds the 512000 limit"),
        "{message}"
    );
    let (_, message) = refused(work("twice", vec![cm("a", 1), cm("a", 2)])).await;
    assert!(
        message
            .ends_with("duplicate manifest for resource default/a with resource type v1.ConfigMap"),
        "{message}"
    );
    let (_, message) = refused(work("none", vec![])).await;
    assert!(
        message.ends_with("Workload manifests should not be empty"),
        "{message}"
    );
    // Growing a work past the limit is refused as well.
    let mut grown = works.get("fits").await.unwrap();
    if let Some(w) = grown.spec.workload.as_mut() {
        w.manifests.get_or_insert_with(Vec::new).push(cm("c", 1024));
    }
    assert!(
        works
            .replace("fits", &PostParams::default(), &grown)
            .await
            .is_err()
    );
}

/// The feedback value `name` of a work's first manifest, as its status reports it.
async fn feedback(works: &Api<ManifestWork>, work: &str, name: &str) -> Option<String> {
    feedback_of(&works.get(work).await.ok()?, name)
}

/// The string value of feedback `name` in `work`'s status, as read.
fn feedback_of(work: &ManifestWork, name: &str) -> Option<String> {
    work.status
        .as_ref()?
        .resource_status
        .as_ref()?
        .manifests
        .as_deref()?
        .iter()
        .find_map(|m| m.status_feedback.as_ref()?.values.as_deref())?
        .iter()
        .find(|v| v.name == name)?
        .field_value
        .string
        .clone()
}

/// Read-only work `name` of ConfigMap `cm` in `ns`: the agent never writes the object, it only
/// reports its `mode`, read as `scrape` says (`Watch` or `Poll`).
fn read_only(name: &str, ns: &str, cm: &str, scrape: &str) -> ManifestWork {
    serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": name, "namespace": "cluster1"},
        "spec": {
            "workload": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm, "namespace": ns}}]},
            "manifestConfigs": [{
                "resourceIdentifier": {"resource": "configmaps", "namespace": ns, "name": cm},
                "updateStrategy": {"type": "ReadOnly"},
                "feedbackScrapeType": scrape,
                "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [{"name": "mode", "path": ".data.mode"}]}]
            }]
        }
    }))
    .unwrap()
}

/// Waits until each of `works` reports the first `mode`, blue.
async fn first_feedback(works: &Api<ManifestWork>, names: &[&str]) {
    for name in names {
        eventually(LIMIT, "the first feedback", || async {
            (feedback(works, name, "mode").await.as_deref() == Some("blue")).then_some(())
        })
        .await;
    }
}

#[tokio::test]
async fn watched_feedback_is_reported_when_the_object_changes() {
    // A status sync far beyond the test: only a watch can report a change in time.
    let (hub, clusters) = joined_pair_syncing(Duration::from_secs(300)).await;
    let managed = clusters[0].0.admin.clone();
    clusters[0].0.ensure_namespace("app").await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(managed, "app");
    for name in ["watched", "polled"] {
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}, "data": {"mode": "blue"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    }
    let works: Api<ManifestWork> = Api::namespaced(hub.cluster.admin.clone(), "cluster1");
    works
        .create(
            &PostParams::default(),
            &read_only("watched", "app", "watched", "Watch"),
        )
        .await
        .unwrap();
    works
        .create(
            &PostParams::default(),
            &read_only("polled", "app", "polled", "Poll"),
        )
        .await
        .unwrap();
    // Both are read when their work is applied.
    first_feedback(&works, &["watched", "polled"]).await;
    for name in ["watched", "polled"] {
        cms.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"mode": "green"}})),
        )
        .await
        .unwrap();
    }
    eventually(LIMIT, "the watched change reported", || {
        let works = works.clone();
        async move {
            (feedback(&works, "watched", "mode").await.as_deref() == Some("green")).then_some(())
        }
    })
    .await;
    // Nothing is said of the polled one: upstream's status controller is queued by every event
    // of its work (ocm `pkg/work/spoke/controllers/statuscontroller/
    // availablestatus_controller.go`, the work informer), its own status write included, so
    // the object's change may be read at that follow-up rather than at the next sync; only the
    // watched one is sure to be reported without a sync.
}

/// Upstream's status controller reads a manifest from the watch of its resource and namespace
/// once that watch has synced, and only otherwise with a GET (`objectReader.getObject`, ocm
/// `pkg/work/spoke/objectreader/reader.go`): a watched manifest costs no request per status
/// sync, a polled one a GET each time.
#[tokio::test]
async fn a_watched_manifest_is_read_from_its_watch_at_each_status_sync() {
    let (hub, clusters) = joined_pair_syncing(Duration::from_millis(200)).await;
    let c1 = &clusters[0].0;
    let works: Api<ManifestWork> = Api::namespaced(hub.cluster.admin.clone(), "cluster1");
    for (ns, scrape) in [("watched", "Watch"), ("polled", "Poll")] {
        c1.ensure_namespace(ns).await.unwrap();
        let cms: Api<ConfigMap> = Api::namespaced(c1.admin.clone(), ns);
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "settings"}, "data": {"mode": "blue"}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
        works
            .create(
                &PostParams::default(),
                &read_only(ns, ns, "settings", scrape),
            )
            .await
            .unwrap();
    }
    first_feedback(&works, &["watched", "polled"]).await;
    // The ConfigMaps read with a GET in each namespace, by anyone (nobody else reads them).
    let gets = |ns: &str| -> u64 {
        c1.api
            .metrics()
            .access_log()
            .iter()
            .filter(|(a, _)| a.verb == "get" && a.resource == "configmaps" && a.namespace == ns)
            .map(|(_, n)| *n)
            .sum()
    };
    // The watch starts at the work's first status sync and has synced soon after; from then
    // on ten status syncs of both works fetch the polled one ten times and never the watched
    // one.
    eventually(
        LIMIT,
        "ten status syncs of the polled work without a GET of the watched one",
        || async {
            let (watched, polled) = (gets("watched"), gets("polled"));
            eventually(LIMIT, "ten status syncs of the polled work", || async {
                (gets("polled") >= polled + 10).then_some(())
            })
            .await;
            (gets("watched") == watched).then_some(())
        },
    )
    .await;
}

/// Work `name` for cluster1 carrying `manifests`.
fn work_of(name: &str, manifests: Vec<serde_json::Value>) -> ManifestWork {
    serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": name, "namespace": "cluster1"},
        "spec": {"workload": {"manifests": manifests}}
    }))
    .unwrap()
}

/// Upstream runs the status sync and the finalize controllers apart (ocm
/// pkg/work/spoke/spokeagent.go), so the deletion of a work is not held up by a status sync of
/// its many manifests that is under way: its objects start to go at once.
#[tokio::test]
async fn a_deleted_work_is_cleaned_up_without_waiting_for_its_status_sync() {
    let (hub, clusters) = joined_pair().await;
    let works: Api<ManifestWork> = Api::namespaced(hub.cluster.admin.clone(), "cluster1");
    let manifests: Vec<serde_json::Value> = std::iter::once(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "many"}}),
    )
    .chain((0..60).map(|i| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": format!("cm-{i}"), "namespace": "many"}, "data": {"i": i.to_string()}})
    }))
    .collect();
    let many = work_of("many", manifests);
    works.create(&PostParams::default(), &many).await.unwrap();
    eventually(LIMIT, "the work Applied", || {
        let works = works.clone();
        async move {
            let w = works.get("many").await.unwrap();
            condition_is_true(w.status?.conditions.as_deref().unwrap_or(&[]), "Applied")
                .then_some(())
        }
    })
    .await;
    // Each request to cluster1 now takes 250 ms: a status sync reads 61 objects, 15 s.
    let c1 = &clusters[0].0.api;
    let gets = || c1.metrics().total(Some("get"), Some("configmaps"));
    c1.faults().set_latency(Duration::from_millis(250));
    let before = gets();
    eventually(LIMIT, "a status sync under way", || async {
        (gets() >= before + 2).then_some(())
    })
    .await;
    let deletes = || c1.metrics().total(Some("delete"), None);
    let deleted_before = deletes();
    works
        .delete("many", &DeleteParams::default())
        .await
        .unwrap();
    // The cleanup's first deletion: its read of the AppliedManifestWork and of the first
    // object, and the read the sync was making, each 250 ms; nowhere near the sync's 15 s.
    eventually(Duration::from_secs(5), "the cleanup under way", || async {
        (deletes() > deleted_before).then_some(())
    })
    .await;
    c1.faults().set_latency(Duration::ZERO);
    let cms: Api<ConfigMap> = Api::namespaced(clusters[0].0.admin.clone(), "many");
    eventually(LIMIT, "the work and its objects gone", || {
        let (works, cms) = (works.clone(), cms.clone());
        async move {
            (works.get_opt("many").await.unwrap().is_none()
                && cms
                    .list(&Default::default())
                    .await
                    .unwrap()
                    .items
                    .is_empty())
            .then_some(())
        }
    })
    .await;
}

/// A work deleted while its apply is under way: the apply stops, and what it created but
/// had not yet recorded in the AppliedManifestWork's status goes with the
/// AppliedManifestWork, whose ownerReference each applied object carries (upstream ocm
/// `pkg/work/spoke/apply/` sets it; the cluster's garbage collector removes the owned
/// objects once the finalize controller, `pkg/work/spoke/controllers/finalizercontroller/`,
/// has deleted the AppliedManifestWork).
#[tokio::test]
async fn what_an_interrupted_apply_created_goes_with_the_deleted_work() {
    let (hub, clusters) = joined_pair().await;
    let works: Api<ManifestWork> = Api::namespaced(hub.cluster.admin.clone(), "cluster1");
    let c1 = &clusters[0].0;
    let cms: Api<ConfigMap> = Api::namespaced(c1.admin.clone(), "default");
    let listed = ListParams::default().labels("test=interrupted");
    let manifests: Vec<serde_json::Value> = (0..40)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("cm-{i}"), "namespace": "default",
                                "labels": {"test": "interrupted"}},
                   "data": {"i": i.to_string()}})
        })
        .collect();
    let many = work_of("many", manifests);
    // Each request to cluster1 takes 100 ms: the apply of 40 objects takes seconds.
    c1.api.faults().set_latency(Duration::from_millis(100));
    works.create(&PostParams::default(), &many).await.unwrap();
    let created = eventually(LIMIT, "the apply under way", || {
        let cms = cms.clone();
        let listed = listed.clone();
        async move {
            let n = cms.list(&listed).await.unwrap().items.len();
            (n >= 3).then_some(n)
        }
    })
    .await;
    works
        .delete("many", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        created < 40,
        "the apply was still under way: {created} of 40"
    );
    c1.api.faults().set_latency(Duration::ZERO);
    let amws: Api<AppliedManifestWork> = Api::all(c1.admin.clone());
    eventually(
        LIMIT,
        "the work, its AppliedManifestWork and every object gone",
        || {
            let (works, cms, amws, listed) =
                (works.clone(), cms.clone(), amws.clone(), listed.clone());
            async move {
                (works.get_opt("many").await.unwrap().is_none()
                    && !amws
                        .list(&Default::default())
                        .await
                        .unwrap()
                        .items
                        .iter()
                        .any(|a| a.name_any().ends_with("-many"))
                    && cms.list(&listed).await.unwrap().items.is_empty())
                .then_some(())
            }
        },
    )
    .await;
}

/// Upstream's status controller has a queue of its own (ocm pkg/work/spoke/spokeagent.go
/// starts `AvailableStatusController` apart from `ManifestWorkController`): a watched
/// object's change is reported while the apply of the work's new spec is under way, from
/// the manifests the status lists, not once that apply is done.
#[tokio::test]
async fn watched_feedback_is_reported_while_a_new_spec_is_applied() {
    // A status sync far beyond the test: only the watch can report the change in time.
    let (hub, clusters) = joined_pair_syncing(Duration::from_secs(300)).await;
    let c1 = &clusters[0].0;
    c1.ensure_namespace("app").await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(c1.admin.clone(), "app");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "watched"}, "data": {"mode": "blue"}}))
            .unwrap(),
    )
    .await
    .unwrap();
    let watched = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "watched", "namespace": "app"}});
    let mut slow = work_of("slow", vec![watched.clone()]);
    slow.spec.manifest_configs = Some(
        serde_json::from_value(json!([{
            "resourceIdentifier": {"resource": "configmaps", "namespace": "app", "name": "watched"},
            "updateStrategy": {"type": "ReadOnly"},
            "feedbackScrapeType": "Watch",
            "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [{"name": "mode", "path": ".data.mode"}]}]
        }]))
        .unwrap(),
    );
    let works: Api<ManifestWork> = Api::namespaced(hub.cluster.admin.clone(), "cluster1");
    works.create(&PostParams::default(), &slow).await.unwrap();
    eventually(LIMIT, "the first feedback", || {
        let works = works.clone();
        async move { (feedback(&works, "slow", "mode").await.as_deref() == Some("blue")).then_some(()) }
    })
    .await;
    let applied_generation =
        |w: &ManifestWork| w.applied_condition().and_then(|c| c.observed_generation);
    let first = applied_generation(&works.get("slow").await.unwrap());
    // A new spec of 40 more objects, each request to cluster1 taking 100 ms: its apply
    // takes seconds.
    let more: Vec<serde_json::Value> = std::iter::once(watched)
        .chain((0..40).map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("cm-{i}"), "namespace": "app", "labels": {"test": "slow"}},
                   "data": {"i": i.to_string()}})
        }))
        .collect();
    c1.api.faults().set_latency(Duration::from_millis(100));
    set_manifests(&works, &work_of("slow", more)).await;
    let listed = ListParams::default().labels("test=slow");
    eventually(LIMIT, "the apply under way", || {
        let (cms, listed) = (cms.clone(), listed.clone());
        async move { (cms.list(&listed).await.unwrap().items.len() >= 3).then_some(()) }
    })
    .await;
    cms.patch(
        "watched",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"mode": "green"}})),
    )
    .await
    .unwrap();
    let reported = eventually(LIMIT, "the change reported", || {
        let works = works.clone();
        async move {
            let w = works.get("slow").await.unwrap();
            (feedback_of(&w, "mode").as_deref() == Some("green")).then_some(w)
        }
    })
    .await;
    let created = cms.list(&listed).await.unwrap().items.len();
    assert_eq!(
        applied_generation(&reported),
        first,
        "reported before the new spec's apply was done ({created} of 40 objects there by then)"
    );
    c1.api.faults().set_latency(Duration::ZERO);
    eventually(LIMIT, "the new spec applied", || {
        let works = works.clone();
        async move {
            let w = works.get("slow").await.unwrap();
            (applied_generation(&w) == w.metadata.generation && applied_generation(&w) != first)
                .then_some(())
        }
    })
    .await;
}

/// The work agent reaches its cluster at upstream's client rate (`--kube-api-qps` 50,
/// `--kube-api-burst` 100): a work of 150 ConfigMaps asks for a read and a create of each, so
/// at least 300 requests through the typed kube clientset, of which 200 wait for the rate.
/// (A lower bound only: nothing makes it fail by being slow.)
#[tokio::test]
async fn the_work_agent_applies_no_faster_than_upstreams_client_rate() {
    let (hub, clusters) = joined_pair().await;
    let works: Api<ManifestWork> = Api::namespaced(hub.cluster.admin.clone(), "cluster1");
    let mut manifests =
        vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "many"}})];
    manifests.extend((0..150).map(|i| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": format!("cm-{i}"), "namespace": "many"}, "data": {"i": i.to_string()}})
    }));
    let many: ManifestWork = serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": "many", "namespace": "cluster1"},
        "spec": {"workload": {"manifests": manifests}}
    }))
    .unwrap();
    let started = std::time::Instant::now();
    works.create(&PostParams::default(), &many).await.unwrap();
    eventually(LIMIT, "the work Applied", || {
        let works = works.clone();
        async move { works.get("many").await.unwrap().applied().then_some(()) }
    })
    .await;
    let took = started.elapsed();
    let cms: Api<ConfigMap> = Api::namespaced(clusters[0].0.admin.clone(), "many");
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        150
    );
    assert!(
        took >= Duration::from_millis(3500),
        "150 ConfigMaps applied in {took:?}: faster than 50 requests a second after a burst of 100"
    );
}

/// Upstream's default `Update` strategy reads the object and replaces it at the version it
/// read (ocm `pkg/work/spoke/apply/update_apply.go`), so another writer's change in between
/// (an agent writing the object's status, say) fails the apply with a conflict, and the work
/// reports it; a server-side apply names no version (`server_side_apply.go`) and lands.
#[tokio::test]
async fn an_update_apply_conflicts_with_writes_in_between_a_server_side_apply_does_not() {
    let (hub, clusters) = joined_pair().await;
    let c1 = &clusters[0].0;
    c1.ensure_namespace("app").await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(c1.admin.clone(), "app");
    let works: Api<ManifestWork> = Api::namespaced(hub.cluster.admin.clone(), "cluster1");
    let cm = |name: &str, v: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "app"}, "data": {"v": v}})
    };
    let ssa = json!([{
        "resourceIdentifier": {"resource": "configmaps", "namespace": "app", "name": "applied"},
        "updateStrategy": {"type": "ServerSideApply", "serverSideApply": {"fieldManager": "test", "force": true}}
    }]);
    let mut updated = work_of("updated", vec![cm("updated", "1")]);
    let mut applied = work_of("applied", vec![cm("applied", "1")]);
    applied.spec.manifest_configs = Some(serde_json::from_value(ssa).unwrap());
    for w in [&updated, &applied] {
        works.create(&PostParams::default(), w).await.unwrap();
    }
    let data = |name: &'static str| {
        let cms = cms.clone();
        async move {
            cms.get_opt(name)
                .await
                .unwrap()
                .and_then(|c| c.data?.get("v").cloned())
        }
    };
    eventually(LIMIT, "both first applied", || async {
        (data("updated").await.as_deref() == Some("1")
            && data("applied").await.as_deref() == Some("1"))
        .then_some(())
    })
    .await;
    // Other writers change both objects all the time (a label), while every request to
    // cluster1 takes 100 ms: an apply's read and its write are 100 ms or more apart.
    c1.api.faults().set_latency(Duration::from_millis(100));
    let writers: Vec<_> = (0..8)
        .map(|i| {
            let cms = cms.clone();
            tokio::spawn(async move {
                // Spread over the 100 ms, so that writes land all the time, not in bursts.
                tokio::time::sleep(Duration::from_millis(i * 12)).await;
                for n in 0u64.. {
                    for name in ["updated", "applied"] {
                        let label = json!({"metadata": {"labels": {"writer": format!("{i}-{n}")}}});
                        let _ = cms
                            .patch(name, &PatchParams::default(), &Patch::Merge(label))
                            .await;
                    }
                }
            })
        })
        .collect();
    updated.spec.workload.as_mut().unwrap().manifests = Some(vec![cm("updated", "2")]);
    applied.spec.workload.as_mut().unwrap().manifests = Some(vec![cm("applied", "2")]);
    set_manifests(&works, &updated).await;
    set_manifests(&works, &applied).await;
    eventually(
        LIMIT,
        "the server-side apply landed among the writes",
        || async { (data("applied").await.as_deref() == Some("2")).then_some(()) },
    )
    .await;
    eventually(LIMIT, "the update reported a conflict", || {
        let works = works.clone();
        async move {
            let w = works.get("updated").await.unwrap();
            let manifests = w.status?.resource_status?.manifests?;
            manifests
                .iter()
                .flat_map(|m| m.conditions.iter())
                .any(|c| {
                    c.type_ == "Applied" && c.status == "False" && c.message.contains("modified")
                })
                .then_some(())
        }
    })
    .await;
    // Once the other writer stops, the update lands too.
    for w in writers {
        w.abort();
    }
    c1.api.faults().set_latency(Duration::ZERO);
    eventually(LIMIT, "the update landed once alone", || async {
        (data("updated").await.as_deref() == Some("2")).then_some(())
    })
    .await;
}
