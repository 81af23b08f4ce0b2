//! A Placement with an AddOn score prioritizer picks the highest-scoring cluster; an expired
//! score counts as 0.

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
    let mut names: Vec<String> = api
        .list(&ListParams::default().labels("cluster.open-cluster-management.io/placement=best"))
        .await
        .unwrap()
        .into_iter()
        .flat_map(|d| d.status.map(|s| s.decisions).unwrap_or_default())
        .map(|d| d.cluster_name)
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn addon_score_prioritizer_picks_the_best_cluster() {
    let hub = Hub::start("hub1", HubOptions::default()).await.unwrap();
    let admin = hub.cluster.admin.clone();
    let apply = |name: &str| PatchParams::apply(name).force();
    // Three clusters in the default set (registered by the hub admin; the placement only reads them).
    for (name, score) in [("c1", 10), ("c2", 90), ("c3", 50)] {
        Api::<ManagedCluster>::all(admin.clone())
            .patch(name, &apply("test"), &Patch::Apply(json!({
                "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
                "metadata": {"name": name, "labels": {"cluster.open-cluster-management.io/clusterset": "default"}},
                "spec": {"hubAcceptsClient": true}
            })))
            .await
            .unwrap();
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
    Api::<migration_api::ocm::cluster::ManagedClusterSet>::all(admin.clone())
        .patch("default", &apply("test"), &Patch::Apply(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSet", "metadata": {"name": "default"},
            "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}
        })))
        .await
        .unwrap();
    Api::<migration_api::ocm::cluster::ManagedClusterSetBinding>::namespaced(admin.clone(), "default")
        .patch("default", &apply("test"), &Patch::Apply(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
            "metadata": {"name": "default", "namespace": "default"}, "spec": {"clusterSet": "default"}
        })))
        .await
        .unwrap();
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
