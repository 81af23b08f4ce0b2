//! Our types read and write OCM objects as they appear on the wire.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use migration_api::ocm::addon::ManagedClusterAddOn;
use migration_api::ocm::cluster::{AddOnPlacementScore, ManagedCluster};
use migration_api::ocm::work::{ManifestWork, UpdateStrategyType};
use serde_json::json;

#[test]
fn managed_cluster_from_a_hub() {
    let mc: ManagedCluster = serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1",
        "kind": "ManagedCluster",
        "metadata": {"name": "cluster1", "labels": {"cluster.open-cluster-management.io/clusterset": "default"}},
        "spec": {
            "hubAcceptsClient": true,
            "leaseDurationSeconds": 60,
            "managedClusterClientConfigs": [{"url": "https://127.0.0.1:6443", "caBundle": "Zm9v"}]
        },
        "status": {
            "conditions": [{
                "type": "ManagedClusterConditionAvailable", "status": "True", "reason": "ManagedClusterAvailable",
                "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z"
            }],
            "capacity": {"cpu": "4", "memory": "16Gi"},
            "version": {"kubernetes": "v1.33.0"},
            "clusterClaims": [{"name": "id.k8s.io", "value": "abc"}]
        }
    }))
    .unwrap();
    assert!(mc.spec.hub_accepts_client);
    let status = mc.status.unwrap();
    assert!(migration_api::common::condition_is_true(
        status.conditions.as_deref().unwrap(),
        "ManagedClusterConditionAvailable"
    ));
    assert_eq!(status.capacity.unwrap()["memory"].0, "16Gi");
}

#[test]
fn manifest_work_with_feedback_round_trips() {
    let work = json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "ManifestWork",
        "metadata": {"name": "w", "namespace": "hub1"},
        "spec": {
            "workload": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}, "data": {"a": "b"}}]},
            "deleteOption": {"propagationPolicy": "SelectivelyOrphan", "selectivelyOrphans": {"orphaningRules": [{"resource": "configmaps", "namespace": "default", "name": "x"}]}},
            "manifestConfigs": [{
                "resourceIdentifier": {"resource": "configmaps", "namespace": "default", "name": "x"},
                "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [{"name": "a", "path": ".data.a"}]}],
                "updateStrategy": {"type": "ServerSideApply", "serverSideApply": {"force": true, "fieldManager": "work-agent"}}
            }]
        },
        "status": {
            "resourceStatus": {"manifests": [{
                "resourceMeta": {"ordinal": 0, "group": "", "version": "v1", "kind": "ConfigMap", "resource": "configmaps", "name": "x", "namespace": "default"},
                "conditions": [],
                "statusFeedback": {"values": [{"name": "a", "fieldValue": {"type": "String", "string": "b"}}]}
            }]}
        }
    });
    let parsed: ManifestWork = serde_json::from_value(work.clone()).unwrap();
    let cfg = &parsed.spec.manifest_configs.as_ref().unwrap()[0];
    assert_eq!(
        cfg.update_strategy.as_ref().unwrap().type_,
        UpdateStrategyType::ServerSideApply
    );
    assert_eq!(serde_json::to_value(&parsed).unwrap(), work);
}

#[test]
fn addon_and_score_field_names() {
    let addon: ManagedClusterAddOn = serde_json::from_value(json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1",
        "kind": "ManagedClusterAddOn",
        "metadata": {"name": "cluster-migration", "namespace": "hub1"},
        "spec": {"installNamespace": "open-cluster-management-agent-addon",
                 "configs": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs", "name": "v2", "namespace": "hub1"}]},
        "status": {"registrations": [{"signerName": "kubernetes.io/kube-apiserver-client",
                   "subject": {"user": "u", "groups": ["g"]}}],
                   "healthCheck": {"mode": "Lease"},
                   "configReferences": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs", "name": "v2",
                       "desiredConfig": {"name": "v2", "namespace": "hub1", "specHash": "h"}}]}
    }))
    .unwrap();
    assert_eq!(addon.spec.configs.unwrap()[0].name, "v2");
    let score: AddOnPlacementScore = serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1alpha1",
        "kind": "AddOnPlacementScore",
        "metadata": {"name": "cluster-migration", "namespace": "hub1"},
        "status": {"scores": [{"name": "managedClusters", "value": -20}], "validUntil": "2026-01-01T00:00:00Z"}
    }))
    .unwrap();
    assert_eq!(score.status.unwrap().scores.unwrap()[0].value, -20);
}
