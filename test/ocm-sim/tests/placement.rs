//! A Placement with an AddOn score prioritizer picks the highest-scoring cluster; an expired
//! score counts as 0. Taints keep placements off a cluster as upstream's do, and the hub's
//! ManagedCluster webhook owns a taint's `timeAdded`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::eventually;

/// How long each wait here may take.
const LIMIT: Duration = Duration::from_secs(20);

use std::time::Duration;

use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use migration_api::ocm::cluster::{
    AddOnPlacementScore, ManagedCluster, Placement, PlacementDecision,
};
use ocm_sim::hub::{Hub, HubOptions};
use serde_json::json;

async fn decided(api: &Api<PlacementDecision>) -> Vec<String> {
    decided_by(api, "best").await
}

async fn decided_by(api: &Api<PlacementDecision>, placement: &str) -> Vec<String> {
    let mut names: Vec<String> = api
        .list(&ListParams::default().labels(&format!(
            "cluster.open-cluster-management.io/placement={placement}"
        )))
        .await
        .unwrap()
        .into_iter()
        .flat_map(|d| d.status.map(|s| s.decisions).unwrap_or_default())
        .map(|d| d.cluster_name)
        .collect();
    names.sort();
    names
}

/// A ManagedCluster `name` in the `default` set (registered by the hub admin; placements only
/// read it), accepted, and reported Joined and Available as its agent would: the hub's taint
/// controller keeps a cluster without Available True tainted unreachable
/// (ocm `pkg/registration/hub/taint/controller.go`), which no placement selects: the taint
/// is seen on first, then off once the cluster is Available.
async fn add_member(admin: &kube::Client, name: &str) {
    let api = Api::<ManagedCluster>::all(admin.clone());
    api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": name, "labels": {"cluster.open-cluster-management.io/clusterset": "default"}},
            "spec": {"hubAcceptsClient": true}
        })))
        .await
        .unwrap();
    let hub_tainted = |mc: &ManagedCluster| {
        mc.spec
            .taints
            .iter()
            .flatten()
            .any(|t| t.key == "cluster.open-cluster-management.io/unreachable")
    };
    eventually(LIMIT, "the new cluster tainted unreachable", || {
        let api = api.clone();
        async move { api.get(name).await.ok().filter(hub_tainted).map(|_| ()) }
    })
    .await;
    let condition = |t: &str, reason: &str| {
        json!({"type": t, "status": "True", "reason": reason, "message": "",
               "lastTransitionTime": "2026-01-01T00:00:00Z"})
    };
    let conditions = json!({"status": {"conditions": [
        condition("HubAcceptedManagedCluster", "HubClusterAdminAccepted"),
        condition("ManagedClusterJoined", "ManagedClusterJoined"),
        condition("ManagedClusterConditionAvailable", "ManagedClusterAvailable"),
    ]}});
    eventually(
        LIMIT,
        "the cluster accepted, then reported Available",
        || {
            let (api, conditions) = (api.clone(), conditions.clone());
            async move {
                let mc = api.get(name).await.ok()?;
                migration_api::common::find_condition(
                    mc.conditions(),
                    "HubAcceptedManagedCluster",
                )?;
                api.patch_status(name, &PatchParams::default(), &Patch::Merge(&conditions))
                    .await
                    .ok()
            }
        },
    )
    .await;
    eventually(LIMIT, "the unreachable taint off", || {
        let api = api.clone();
        async move {
            let mc = api.get(name).await.ok()?;
            (!hub_tainted(&mc)).then_some(())
        }
    })
    .await;
}

/// The `default` cluster set (its members labelled so), bound to namespace `default`.
async fn bind_default_set(admin: &kube::Client) {
    let apply = PatchParams::apply("test").force();
    Api::<migration_api::ocm::cluster::ManagedClusterSet>::all(admin.clone())
        .patch("default", &apply, &Patch::Apply(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSet", "metadata": {"name": "default"},
            "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}
        })))
        .await
        .unwrap();
    Api::<migration_api::ocm::cluster::ManagedClusterSetBinding>::namespaced(admin.clone(), "default")
        .patch("default", &apply, &Patch::Apply(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
            "metadata": {"name": "default", "namespace": "default"}, "spec": {"clusterSet": "default"}
        })))
        .await
        .unwrap();
}

#[tokio::test]
async fn addon_score_prioritizer_picks_the_best_cluster() {
    let hub = Hub::start("hub1", HubOptions::default()).await.unwrap();
    let admin = hub.cluster.admin.clone();
    let apply = |name: &str| PatchParams::apply(name).force();
    // Three clusters in the default set (registered by the hub admin; the placement only reads them).
    for (name, score) in [("c1", 10), ("c2", 90), ("c3", 50)] {
        add_member(&admin, name).await;
        hub.cluster.ensure_namespace(name).await.unwrap();
        let scores: Api<AddOnPlacementScore> = Api::namespaced(admin.clone(), name);
        scores
            .patch("cluster-migration", &apply("addon"), &Patch::Apply(json!({
                "apiVersion": "cluster.open-cluster-management.io/v1alpha1", "kind": "AddOnPlacementScore",
                "metadata": {"name": "cluster-migration", "namespace": name}
            })))
            .await
            .unwrap();
        let valid = jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::from_secs(3600))
            .unwrap()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        scores
            .patch_status("cluster-migration", &apply("addon"), &Patch::Apply(json!({
                "apiVersion": "cluster.open-cluster-management.io/v1alpha1", "kind": "AddOnPlacementScore",
                "metadata": {"name": "cluster-migration", "namespace": name},
                "status": {"scores": [{"name": "capacityHeadroom", "value": score}], "validUntil": valid}
            })))
            .await
            .unwrap();
    }
    bind_default_set(&admin).await;
    let placement: Placement = serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
        "metadata": {"name": "best", "namespace": "default"},
        "spec": {"numberOfClusters": 1, "prioritizerPolicy": {"mode": "Exact", "configurations": [
            {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "cluster-migration", "scoreName": "capacityHeadroom"}}, "weight": 1}]}}
    }))
    .unwrap();
    Api::<Placement>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &placement)
        .await
        .unwrap();
    let pds: Api<PlacementDecision> = Api::namespaced(admin.clone(), "default");
    let placements: Api<Placement> = Api::namespaced(admin.clone(), "default");
    // The decision is written first and the Placement's status after it, as the real
    // scheduler does: wait for both.
    eventually(
        LIMIT,
        "c2 chosen and counted in the Placement's status",
        || {
            let (pds, placements) = (pds.clone(), placements.clone());
            async move {
                let selected = placements
                    .get("best")
                    .await
                    .ok()?
                    .status?
                    .number_of_selected_clusters;
                (decided(&pds).await == ["c2"] && selected == Some(1)).then_some(())
            }
        },
    )
    .await;
    // c2's score expires: it counts 0, so c3 wins.
    let past = "2020-01-01T00:00:00Z";
    Api::<AddOnPlacementScore>::namespaced(admin.clone(), "c2")
        .patch_status("cluster-migration", &apply("addon"), &Patch::Apply(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1alpha1", "kind": "AddOnPlacementScore",
            "metadata": {"name": "cluster-migration", "namespace": "c2"},
            "status": {"scores": [{"name": "capacityHeadroom", "value": 90}], "validUntil": past}
        })))
        .await
        .unwrap();
    eventually(LIMIT, "c3 chosen", || {
        let pds = pds.clone();
        async move { (decided(&pds).await == ["c3"]).then_some(()) }
    })
    .await;
}

/// Merge-patches the taints of `name` (no resourceVersion).
async fn set_taints(
    api: &Api<ManagedCluster>,
    name: &str,
    taints: &serde_json::Value,
) -> Result<ManagedCluster, kube::Error> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"taints": taints}})),
    )
    .await
}

/// The taint list of `name` as the hub holds it.
async fn taints_of(api: &Api<ManagedCluster>, name: &str) -> Vec<serde_json::Value> {
    let mc = api.get(name).await.unwrap();
    serde_json::to_value(mc.spec.taints.unwrap_or_default())
        .unwrap()
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn taints_keep_placements_off_a_cluster_and_the_webhook_owns_their_time() {
    let hub = Hub::start("hub1", HubOptions::default()).await.unwrap();
    let admin = hub.cluster.admin.clone();
    let clusters: Api<ManagedCluster> = Api::all(admin.clone());
    for name in ["c1", "c2", "c3"] {
        add_member(&admin, name).await;
    }
    bind_default_set(&admin).await;
    let placement = |name: &str| -> Placement {
        serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
            "metadata": {"name": name, "namespace": "default"}, "spec": {}
        }))
        .unwrap()
    };
    let placements: Api<Placement> = Api::namespaced(admin.clone(), "default");
    placements
        .create(&PostParams::default(), &placement("all"))
        .await
        .unwrap();
    let pds: Api<PlacementDecision> = Api::namespaced(admin.clone(), "default");
    eventually(LIMIT, "all three chosen", || {
        let pds = pds.clone();
        async move { (decided_by(&pds, "all").await == ["c1", "c2", "c3"]).then_some(()) }
    })
    .await;

    // A new taint that names its own time is refused (ocm managedcluster_mutating.go).
    let merge = PatchParams::default();
    let with_time = json!({"spec": {"taints": [
        {"key": "example.com/moving", "effect": "NoSelectIfNew", "timeAdded": "2026-01-01T00:00:00Z"}]}});
    let err = clusters
        .patch("c1", &merge, &Patch::Merge(&with_time))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("{err:?}")
    };
    assert_eq!(status.code, 400, "{status:?}");
    assert!(
        status
            .message
            .contains("It is not allowed to set TimeAdded of Taint"),
        "{status:?}"
    );
    // Without one it is stored with the time the hub added it.
    let moving = json!([{"key": "example.com/moving", "effect": "NoSelectIfNew"}]);
    set_taints(&clusters, "c1", &moving).await.unwrap();
    let stored = taints_of(&clusters, "c1").await;
    assert!(stored[0]["timeAdded"].is_string(), "{stored:?}");
    // Sending it again without its time changes that time: refused too.
    let err = set_taints(&clusters, "c1", &moving).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 400),
        "{err:?}"
    );
    // NoSelectIfNew keeps c1 where it was chosen; NoSelect on c2 withdraws it.
    set_taints(
        &clusters,
        "c2",
        &json!([{"key": "example.com/gone", "effect": "NoSelect"}]),
    )
    .await
    .unwrap();
    eventually(LIMIT, "c2 withdrawn, c1 kept", || {
        let pds = pds.clone();
        async move { (decided_by(&pds, "all").await == ["c1", "c3"]).then_some(()) }
    })
    .await;
    // A placement made now chooses neither.
    placements
        .create(&PostParams::default(), &placement("fresh"))
        .await
        .unwrap();
    eventually(LIMIT, "the new placement chooses c3 alone", || {
        let pds = pds.clone();
        async move { (decided_by(&pds, "fresh").await == ["c3"]).then_some(()) }
    })
    .await;
    // The first still keeps c1 (decided before its taint).
    assert_eq!(decided_by(&pds, "all").await, ["c1", "c3"]);
}
