//! `agent.open-cluster-management.io` (ACM): KlusterletAddonConfig.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use crate::common::Condition;

/// Which ACM add-ons run on a cluster; one per cluster, in the cluster's namespace. Carried over
/// to the target hub when a cluster migrates.
#[skip_serializing_none]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "agent.open-cluster-management.io",
    version = "v1",
    kind = "KlusterletAddonConfig",
    namespaced,
    status = "KlusterletAddonConfigStatus",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct KlusterletAddonConfigSpec {
    pub cluster_name: Option<String>,
    pub cluster_namespace: Option<String>,
    pub cluster_labels: Option<BTreeMap<String, String>>,
    pub version: Option<String>,
    pub application_manager: AddOnAgentConfig,
    pub cert_policy_controller: AddOnAgentConfig,
    pub iam_policy_controller: Option<AddOnAgentConfig>,
    pub policy_controller: AddOnAgentConfig,
    pub search_collector: AddOnAgentConfig,
    pub proxy_config: Option<KlusterletAddonProxyConfig>,
}

/// Whether one add-on is enabled, and its proxy policy.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddOnAgentConfig {
    pub enabled: Option<bool>,
    /// `Disabled`, `OCPGlobalProxy` or `CustomProxy`.
    pub proxy_policy: Option<String>,
}

/// Proxy settings for the add-ons.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KlusterletAddonProxyConfig {
    pub http_proxy: Option<String>,
    pub https_proxy: Option<String>,
    pub no_proxy: Option<String>,
}

/// Observed state of a KlusterletAddonConfig.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KlusterletAddonConfigStatus {
    pub conditions: Option<Vec<Condition>>,
}
