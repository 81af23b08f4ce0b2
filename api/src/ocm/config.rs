//! `config.open-cluster-management.io` (ACM/MCE): KlusterletConfig.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use crate::common::{BootstrapKubeConfigs, FeatureGate, ImageMirror, NodePlacement};

/// Klusterlet settings the import controller applies to the clusters that select it with the
/// annotation `agent.open-cluster-management.io/klusterlet-config`.
///
/// This type follows the current upstream shape (`multipleHubsConfig`). Hubs whose
/// KlusterletConfig CRD is older carry `spec.bootstrapKubeConfigs` instead; see
/// [`LegacyKlusterletConfigSpec`].
#[skip_serializing_none]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "config.open-cluster-management.io",
    version = "v1alpha1",
    kind = "KlusterletConfig",
    status = "KlusterletConfigStatus",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct KlusterletConfigSpec {
    pub registries: Option<Vec<ImageMirror>>,
    pub node_placement: Option<NodePlacement>,
    #[serde(rename = "hubKubeAPIServerConfig")]
    pub hub_kube_api_server_config: Option<KubeApiServerConfig>,
    pub multiple_hubs_config: Option<MultipleHubsConfig>,
    pub feature_gates: Option<Vec<FeatureGate>>,
}

/// The spec of a KlusterletConfig on hubs with the older CRD, where the bootstrap kubeconfigs sit
/// directly under `spec`. It is not a registered kind of its own: use it to build or read the
/// `spec` of such hubs' objects as plain JSON.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LegacyKlusterletConfigSpec {
    pub bootstrap_kube_configs: Option<BootstrapKubeConfigs>,
}

/// How the klusterlet reaches the hub's API server.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeApiServerConfig {
    pub url: Option<String>,
    #[serde(rename = "proxyURL")]
    pub proxy_url: Option<String>,
    /// `UseSystemTruststore`, `UseAutoDetectedCABundle` or `UseCustomCABundles`.
    pub server_verification_strategy: Option<String>,
}

/// Bootstrap kubeconfigs for hub switching (feature gate MultipleHubs).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MultipleHubsConfig {
    /// `Default` or `IncludeCurrentHub`.
    pub gen_bootstrap_kube_config_strategy: Option<String>,
    pub bootstrap_kube_configs: Option<BootstrapKubeConfigs>,
}

/// KlusterletConfig has an (empty) status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KlusterletConfigStatus {}
