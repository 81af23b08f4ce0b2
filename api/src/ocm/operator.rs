//! `operator.open-cluster-management.io`: ClusterManager (hub) and Klusterlet (managed cluster).

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use crate::common::{BootstrapKubeConfigs, Condition, FeatureGate, NodePlacement};

/// The hub's OCM installation and its settings.
#[skip_serializing_none]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "operator.open-cluster-management.io",
    version = "v1",
    kind = "ClusterManager",
    status = "OperatorStatus",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterManagerSpec {
    pub registration_image_pull_spec: Option<String>,
    pub work_image_pull_spec: Option<String>,
    pub placement_image_pull_spec: Option<String>,
    pub add_on_manager_image_pull_spec: Option<String>,
    pub node_placement: Option<NodePlacement>,
    pub registration_configuration: Option<HubRegistrationConfiguration>,
    pub work_configuration: Option<HubWorkConfiguration>,
    pub add_on_manager_configuration: Option<FeatureGatesConfiguration>,
}

/// Hub registration settings.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HubRegistrationConfiguration {
    pub feature_gates: Option<Vec<FeatureGate>>,
    /// Users whose CSRs are approved automatically (feature gate ManagedClusterAutoApproval).
    pub auto_approve_users: Option<Vec<String>>,
}

/// Hub work settings.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HubWorkConfiguration {
    pub feature_gates: Option<Vec<FeatureGate>>,
    /// `kube` (default), `mqtt` or `grpc`.
    pub work_driver: Option<String>,
}

/// A component configured only by feature gates.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeatureGatesConfiguration {
    pub feature_gates: Option<Vec<FeatureGate>>,
}

/// Status of an OCM operator-managed installation.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperatorStatus {
    pub observed_generation: Option<i64>,
    #[serde(default)]
    #[schemars(schema_with = "crate::common::conditions")]
    pub conditions: Option<Vec<Condition>>,
}

/// The managed cluster's OCM agent installation.
#[skip_serializing_none]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "operator.open-cluster-management.io",
    version = "v1",
    kind = "Klusterlet",
    status = "OperatorStatus",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct KlusterletSpec {
    pub namespace: Option<String>,
    pub registration_image_pull_spec: Option<String>,
    pub work_image_pull_spec: Option<String>,
    pub image_pull_spec: Option<String>,
    pub cluster_name: Option<String>,
    #[serde(rename = "externalServerURLs")]
    pub external_server_urls: Option<Vec<ServerUrl>>,
    pub node_placement: Option<NodePlacement>,
    pub registration_configuration: Option<KlusterletRegistrationConfiguration>,
    pub work_configuration: Option<KlusterletWorkConfiguration>,
}

/// An API server URL of the managed cluster.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerUrl {
    pub url: String,
    pub ca_bundle: Option<String>,
}

/// Registration agent settings, among them the bootstrap kubeconfigs for MultipleHubs.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KlusterletRegistrationConfiguration {
    pub feature_gates: Option<Vec<FeatureGate>>,
    pub bootstrap_kube_configs: Option<BootstrapKubeConfigs>,
    pub cluster_labels: Option<BTreeMap<String, String>>,
    pub cluster_annotations: Option<BTreeMap<String, String>>,
    #[serde(rename = "kubeAPIQPS")]
    #[serde(default, deserialize_with = "crate::common::saturating::opt_i32")]
    pub kube_api_qps: Option<i32>,
    #[serde(rename = "kubeAPIBurst")]
    #[serde(default, deserialize_with = "crate::common::saturating::opt_i32")]
    pub kube_api_burst: Option<i32>,
}

/// Work agent settings.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KlusterletWorkConfiguration {
    pub feature_gates: Option<Vec<FeatureGate>>,
    pub status_sync_interval: Option<String>,
}
