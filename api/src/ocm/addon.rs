//! `addon.open-cluster-management.io`: ClusterManagementAddOn, ManagedClusterAddOn and
//! AddOnDeploymentConfig.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use crate::common::{
    AddOnConfig, Condition, ConfigGroupResource, ConfigReferent, ConfigSpecHash, ImageMirror,
    NodePlacement,
};

/// An addon as the hub knows it, fleet-wide: metadata, supported configs, install strategy.
#[skip_serializing_none]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "addon.open-cluster-management.io",
    version = "v1alpha1",
    kind = "ClusterManagementAddOn",
    status = "ClusterManagementAddOnStatus",
    shortname = "cma",
    shortname = "cmas",
    derive = "Default",
    derive = "PartialEq",
    printcolumn(
        name = "DISPLAY NAME",
        type_ = "string",
        json_path = ".spec.addOnMeta.displayName"
    ),
    printcolumn(
        name = "CRD NAME",
        type_ = "string",
        json_path = ".spec.addOnConfiguration.crdName"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterManagementAddOnSpec {
    pub add_on_meta: Option<AddOnMeta>,
    #[serde(default)]
    #[schemars(schema_with = "supported_configs")]
    pub supported_configs: Option<Vec<SupportedConfig>>,
    pub install_strategy: Option<InstallStrategy>,
}

fn supported_configs(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    crate::common::list_map::<SupportedConfig>(generator, &["group", "resource"])
}

/// Display name and description.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddOnMeta {
    pub display_name: Option<String>,
    pub description: Option<String>,
}

/// A config kind the addon accepts, with an optional fleet-wide default.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SupportedConfig {
    #[serde(default)]
    pub group: String,
    pub resource: String,
    pub default_config: Option<ConfigReferent>,
}

/// How ManagedClusterAddOns get created: by users (`Manual`) or from Placements.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InstallStrategy {
    /// `Manual` (default) or `Placements`.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    #[serde(default)]
    #[schemars(schema_with = "placements")]
    pub placements: Option<Vec<PlacementStrategy>>,
}

fn placements(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    crate::common::list_map::<PlacementStrategy>(generator, &["namespace", "name"])
}

/// A Placement whose decisions get the addon, with their configs and rollout strategy.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementStrategy {
    pub namespace: String,
    pub name: String,
    pub configs: Option<Vec<AddOnConfig>>,
    pub rollout_strategy: Option<RolloutStrategy>,
}

/// How config changes roll out across the placement's clusters.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStrategy {
    /// `All` (default), `Progressive` or `ProgressivePerGroup`.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    pub all: Option<RolloutAll>,
    pub progressive: Option<RolloutProgressive>,
    pub progressive_per_group: Option<RolloutProgressivePerGroup>,
}

/// Timing shared by every rollout type.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutAll {
    /// How long a cluster must stay healthy before the next step (duration, default `0`).
    pub min_success_time: Option<String>,
    /// How long a cluster may take to become healthy (duration or `None`).
    pub progress_deadline: Option<String>,
    /// Failures tolerated before the rollout halts: a count or a percentage.
    #[serde(default)]
    #[schemars(schema_with = "crate::common::int_or_string")]
    pub max_failures: Option<serde_json::Value>,
}

/// Rollout to at most `maxConcurrency` clusters at a time.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutProgressive {
    pub min_success_time: Option<String>,
    pub progress_deadline: Option<String>,
    #[serde(default)]
    #[schemars(schema_with = "crate::common::int_or_string")]
    pub max_failures: Option<serde_json::Value>,
    pub mandatory_decision_groups: Option<Vec<MandatoryDecisionGroup>>,
    #[serde(default)]
    #[schemars(schema_with = "crate::common::int_or_string")]
    pub max_concurrency: Option<serde_json::Value>,
}

/// Rollout one decision group at a time.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutProgressivePerGroup {
    pub min_success_time: Option<String>,
    pub progress_deadline: Option<String>,
    #[serde(default)]
    #[schemars(schema_with = "crate::common::int_or_string")]
    pub max_failures: Option<serde_json::Value>,
    pub mandatory_decision_groups: Option<Vec<MandatoryDecisionGroup>>,
}

/// A decision group that must succeed first.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MandatoryDecisionGroup {
    pub group_name: Option<String>,
    #[serde(default, deserialize_with = "crate::common::saturating::opt_i32")]
    pub group_index: Option<i32>,
}

/// Observed state of a ClusterManagementAddOn.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterManagementAddOnStatus {
    #[serde(rename = "defaultconfigReferences")]
    pub default_config_references: Option<Vec<DefaultConfigReference>>,
    pub install_progressions: Option<Vec<InstallProgression>>,
}

/// A supported config's default and its spec hash.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefaultConfigReference {
    #[serde(default)]
    pub group: String,
    pub resource: String,
    pub desired_config: Option<ConfigSpecHash>,
}

/// Rollout progress of one install-strategy placement.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstallProgression {
    pub namespace: String,
    pub name: String,
    pub config_references: Option<Vec<InstallConfigReference>>,
    #[serde(default)]
    #[schemars(schema_with = "crate::common::conditions")]
    pub conditions: Option<Vec<Condition>>,
}

/// Desired, last applied and last known good config of a placement's rollout.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstallConfigReference {
    #[serde(default)]
    pub group: String,
    pub resource: String,
    pub desired_config: Option<ConfigSpecHash>,
    pub last_applied_config: Option<ConfigSpecHash>,
    pub last_known_good_config: Option<ConfigSpecHash>,
}

/// The addon on one cluster: created in the cluster's namespace on the hub.
#[skip_serializing_none]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "addon.open-cluster-management.io",
    version = "v1alpha1",
    kind = "ManagedClusterAddOn",
    namespaced,
    status = "ManagedClusterAddOnStatus",
    shortname = "mca",
    shortname = "mcas",
    derive = "Default",
    derive = "PartialEq",
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status"
    ),
    printcolumn(
        name = "Degraded",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Degraded\")].status"
    ),
    printcolumn(
        name = "Progressing",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Progressing\")].status"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterAddOnSpec {
    /// Namespace on the managed cluster for the agent (default `open-cluster-management-agent-addon`).
    pub install_namespace: Option<String>,
    /// Per-cluster configs, overriding the ClusterManagementAddOn's defaults.
    pub configs: Option<Vec<AddOnConfig>>,
}

/// Observed state of a ManagedClusterAddOn.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterAddOnStatus {
    #[serde(default)]
    #[schemars(schema_with = "crate::common::conditions")]
    pub conditions: Option<Vec<Condition>>,
    pub related_objects: Option<Vec<ObjectReference>>,
    pub add_on_meta: Option<AddOnMeta>,
    #[serde(default)]
    #[schemars(schema_with = "status_supported_configs")]
    pub supported_configs: Option<Vec<ConfigGroupResource>>,
    pub config_references: Option<Vec<ConfigReference>>,
    /// Namespace the agent is actually installed in.
    pub namespace: Option<String>,
    pub registrations: Option<Vec<RegistrationConfig>>,
    pub health_check: Option<HealthCheck>,
}

fn status_supported_configs(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    crate::common::list_map::<ConfigGroupResource>(generator, &["group", "resource"])
}

/// An object related to the addon (its ClusterManagementAddOn, its works, ...).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ObjectReference {
    pub group: String,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: String,
}

/// A config in effect for this addon: desired and last applied spec hashes.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigReference {
    #[serde(default)]
    pub group: String,
    pub resource: String,
    pub name: String,
    pub namespace: Option<String>,
    pub desired_config: Option<ConfigSpecHash>,
    pub last_applied_config: Option<ConfigSpecHash>,
    pub last_observed_generation: Option<i64>,
}

/// A hub credential the addon agent asks for.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistrationConfig {
    pub signer_name: String,
    pub subject: Option<Subject>,
}

/// The identity in the addon's client certificate.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    pub user: Option<String>,
    pub groups: Option<Vec<String>>,
    pub organization_unit: Option<Vec<String>>,
}

/// Who judges the addon's health: the lease (`Lease`) or the addon manager (`Customized`).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HealthCheck {
    pub mode: Option<String>,
}

/// Deployment settings for an addon agent, referenced as a config.
#[skip_serializing_none]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "addon.open-cluster-management.io",
    version = "v1alpha1",
    kind = "AddOnDeploymentConfig",
    namespaced,
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct AddOnDeploymentConfigSpec {
    #[serde(default)]
    #[schemars(schema_with = "customized_variables")]
    pub customized_variables: Option<Vec<CustomizedVariable>>,
    pub node_placement: Option<NodePlacement>,
    pub registries: Option<Vec<ImageMirror>>,
    pub proxy_config: Option<ProxyConfig>,
    pub agent_install_namespace: Option<String>,
    #[serde(default)]
    #[schemars(schema_with = "resource_requirements")]
    pub resource_requirements: Option<Vec<ContainerResourceRequirements>>,
}

fn customized_variables(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    crate::common::list_map::<CustomizedVariable>(generator, &["name"])
}

fn resource_requirements(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    crate::common::list_map::<ContainerResourceRequirements>(generator, &["containerID"])
}

/// A name/value pair handed to the addon's templates.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CustomizedVariable {
    pub name: String,
    pub value: Option<String>,
}

/// HTTP(S) proxy for the agent's outbound traffic.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxyConfig {
    pub http_proxy: Option<String>,
    pub https_proxy: Option<String>,
    /// Base64 PEM of the HTTPS proxy's CA.
    pub ca_bundle: Option<String>,
    pub no_proxy: Option<String>,
}

/// Resource requirements for containers matched by `containerID` (`deployments:<name>:<container>`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerResourceRequirements {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub resources: ResourceRequirements,
}

/// Limits and requests of a container (resource claims are not supported for addon agents).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceRequirements {
    pub limits: Option<BTreeMap<String, Quantity>>,
    pub requests: Option<BTreeMap<String, Quantity>>,
}

impl ManagedClusterAddOn {
    /// The addon's status conditions (none before any were reported).
    pub fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default()
    }
}
