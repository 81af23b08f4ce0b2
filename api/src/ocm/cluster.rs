//! `cluster.open-cluster-management.io`: ManagedCluster, cluster sets, claims, placement and
//! AddOn placement scores.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use crate::common::{Condition, LabelSelector, Time};

/// A cluster registered (or registering) with a hub.
#[skip_serializing_none]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.open-cluster-management.io",
    version = "v1",
    kind = "ManagedCluster",
    status = "ManagedClusterStatus",
    shortname = "mcl",
    shortname = "mcls",
    derive = "Default",
    derive = "PartialEq",
    printcolumn(
        name = "Hub Accepted",
        type_ = "boolean",
        json_path = ".spec.hubAcceptsClient"
    ),
    printcolumn(
        name = "Managed Cluster URLs",
        type_ = "string",
        json_path = ".spec.managedClusterClientConfigs[*].url"
    ),
    printcolumn(
        name = "Joined",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"ManagedClusterJoined\")].status"
    ),
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"ManagedClusterConditionAvailable\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterSpec {
    /// Whether the hub admits this cluster. The klusterlet reselects its hub when it turns false.
    #[serde(default)]
    pub hub_accepts_client: bool,
    #[serde(default, deserialize_with = "crate::common::saturating::opt_i32")]
    pub lease_duration_seconds: Option<i32>,
    pub managed_cluster_client_configs: Option<Vec<ClientConfig>>,
    pub taints: Option<Vec<Taint>>,
}

/// How to reach a cluster's API server.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientConfig {
    pub url: String,
    /// Base64-encoded PEM bundle (a `byte`-format string on the wire).
    pub ca_bundle: Option<String>,
}

/// A taint on a ManagedCluster.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    pub key: String,
    pub value: Option<String>,
    /// `NoSelect`, `PreferNoSelect` or `NoSelectIfNew`.
    pub effect: String,
    pub time_added: Option<Time>,
}

/// Observed state of a ManagedCluster.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterStatus {
    #[serde(default)]
    #[schemars(schema_with = "crate::common::conditions")]
    pub conditions: Option<Vec<Condition>>,
    pub capacity: Option<BTreeMap<String, Quantity>>,
    pub allocatable: Option<BTreeMap<String, Quantity>>,
    pub version: Option<ManagedClusterVersion>,
    pub cluster_claims: Option<Vec<ManagedClusterClaim>>,
}

/// Kubernetes version of a managed cluster.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ManagedClusterVersion {
    pub kubernetes: Option<String>,
}

/// A ClusterClaim as reported in ManagedCluster status.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ManagedClusterClaim {
    pub name: Option<String>,
    pub value: Option<String>,
}

/// A set of ManagedClusters, selected by the exclusive cluster-set label or a label selector.
#[skip_serializing_none]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.open-cluster-management.io",
    version = "v1beta2",
    kind = "ManagedClusterSet",
    status = "ManagedClusterSetStatus",
    shortname = "mclset",
    shortname = "mclsets",
    derive = "Default",
    derive = "PartialEq",
    printcolumn(
        name = "Empty",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"ClusterSetEmpty\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterSetSpec {
    pub cluster_selector: Option<ManagedClusterSelector>,
}

/// How a ManagedClusterSet selects its members.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterSelector {
    /// `ExclusiveClusterSetLabel` (default) or `LabelSelector`.
    pub selector_type: String,
    pub label_selector: Option<LabelSelector>,
}

/// Observed state of a ManagedClusterSet.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ManagedClusterSetStatus {
    pub conditions: Option<Vec<Condition>>,
}

/// Binds a ManagedClusterSet into a namespace so Placements there may select from it.
#[skip_serializing_none]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.open-cluster-management.io",
    version = "v1beta2",
    kind = "ManagedClusterSetBinding",
    namespaced,
    status = "ManagedClusterSetBindingStatus",
    shortname = "mclsetbinding",
    shortname = "mclsetbindings",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterSetBindingSpec {
    /// Must equal the binding's own name.
    pub cluster_set: Option<String>,
}

/// Observed state of a ManagedClusterSetBinding.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ManagedClusterSetBindingStatus {
    pub conditions: Option<Vec<Condition>>,
}

/// A fact a managed cluster states about itself, synced into its ManagedCluster status.
#[skip_serializing_none]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.open-cluster-management.io",
    version = "v1alpha1",
    kind = "ClusterClaim",
    derive = "Default",
    derive = "PartialEq"
)]
pub struct ClusterClaimSpec {
    pub value: Option<String>,
}

/// Selects ManagedClusters from the cluster sets bound to its namespace.
#[skip_serializing_none]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.open-cluster-management.io",
    version = "v1beta1",
    kind = "Placement",
    namespaced,
    status = "PlacementStatus",
    derive = "Default",
    derive = "PartialEq",
    printcolumn(
        name = "Succeeded",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"PlacementSatisfied\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"PlacementSatisfied\")].reason"
    ),
    printcolumn(
        name = "SelectedClusters",
        type_ = "integer",
        json_path = ".status.numberOfSelectedClusters"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSpec {
    pub cluster_sets: Option<Vec<String>>,
    #[serde(default, deserialize_with = "crate::common::saturating::opt_i32")]
    pub number_of_clusters: Option<i32>,
    pub predicates: Option<Vec<ClusterPredicate>>,
    pub prioritizer_policy: Option<PrioritizerPolicy>,
    pub tolerations: Option<Vec<PlacementToleration>>,
    pub decision_strategy: Option<DecisionStrategy>,
}

/// A required cluster selector of a Placement.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPredicate {
    pub required_cluster_selector: Option<ClusterSelector>,
}

/// Selects clusters by label and by ClusterClaim.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSelector {
    pub label_selector: Option<LabelSelector>,
    pub claim_selector: Option<ClusterClaimSelector>,
}

/// Selects clusters by their ClusterClaims.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterClaimSelector {
    pub match_expressions: Option<Vec<LabelSelectorRequirement>>,
}

/// How a Placement scores clusters.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrioritizerPolicy {
    /// `Additive` (default) or `Exact`.
    pub mode: Option<String>,
    pub configurations: Option<Vec<PrioritizerConfig>>,
}

/// One prioritizer and its weight.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrioritizerConfig {
    pub score_coordinate: ScoreCoordinate,
    #[serde(default, deserialize_with = "crate::common::saturating::opt_i32")]
    pub weight: Option<i32>,
}

/// A built-in prioritizer or an AddOn score.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScoreCoordinate {
    /// `BuiltIn` or `AddOn`.
    #[serde(rename = "type")]
    pub type_: String,
    pub built_in: Option<String>,
    pub add_on: Option<AddOnScore>,
}

/// Names an AddOnPlacementScore resource and the score inside it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddOnScore {
    pub resource_name: String,
    pub score_name: String,
}

/// A toleration of a ManagedCluster taint.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementToleration {
    pub key: Option<String>,
    /// `Equal` (default) or `Exists`.
    pub operator: Option<String>,
    pub value: Option<String>,
    pub effect: Option<String>,
    pub toleration_seconds: Option<i64>,
}

/// How decisions are split into groups.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionStrategy {
    pub group_strategy: Option<GroupStrategy>,
}

/// Decision groups and their size.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupStrategy {
    pub decision_groups: Option<Vec<DecisionGroup>>,
    /// Integer or percentage (default `100%`).
    #[serde(default)]
    #[schemars(schema_with = "crate::common::int_or_string")]
    pub clusters_per_decision_group: Option<serde_json::Value>,
}

/// A named group of clusters selected by its own selector.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionGroup {
    pub group_name: String,
    pub group_cluster_selector: ClusterSelector,
}

/// Observed state of a Placement.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementStatus {
    #[serde(default, deserialize_with = "crate::common::saturating::opt_i32")]
    pub number_of_selected_clusters: Option<i32>,
    pub decision_groups: Option<Vec<DecisionGroupStatus>>,
    #[serde(default)]
    #[schemars(schema_with = "crate::common::conditions")]
    pub conditions: Option<Vec<Condition>>,
}

/// One decision group's PlacementDecisions.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionGroupStatus {
    #[serde(default, deserialize_with = "crate::common::saturating::opt_i32")]
    pub decision_group_index: Option<i32>,
    pub decision_group_name: Option<String>,
    pub decisions: Option<Vec<String>>,
    #[serde(default, deserialize_with = "crate::common::saturating::opt_i32")]
    pub cluster_count: Option<i32>,
}

/// The clusters a Placement chose (status only; labelled with the placement's name).
#[skip_serializing_none]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.open-cluster-management.io",
    version = "v1beta1",
    kind = "PlacementDecision",
    namespaced,
    no_spec,
    status = "PlacementDecisionStatus",
    derive = "Default",
    derive = "PartialEq"
)]
pub struct PlacementDecisionFields {}

/// The label selector of the PlacementDecisions of the Placement `placement` (upstream labels
/// each with the Placement's name: api `cluster/v1beta1/types_placementdecision.go`).
pub fn decisions_of(placement: &str) -> String {
    format!("{}={placement}", crate::names::labels::PLACEMENT)
}

/// The clusters a Placement's PlacementDecisions decided, each once, sorted (empty names
/// dropped).
pub fn decided_clusters(decisions: impl IntoIterator<Item = PlacementDecision>) -> Vec<String> {
    let set: std::collections::BTreeSet<String> = decisions
        .into_iter()
        .flat_map(|d| d.status.map(|s| s.decisions).unwrap_or_default())
        .map(|d| d.cluster_name)
        .filter(|c| !c.is_empty())
        .collect();
    set.into_iter().collect()
}

/// The decisions of a PlacementDecision.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PlacementDecisionStatus {
    pub decisions: Vec<ClusterDecision>,
}

/// One chosen cluster.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDecision {
    pub cluster_name: String,
    pub reason: String,
}

/// Scores an addon publishes for its cluster; Placement's AddOn prioritizer reads them.
#[skip_serializing_none]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.open-cluster-management.io",
    version = "v1alpha1",
    kind = "AddOnPlacementScore",
    namespaced,
    no_spec,
    status = "AddOnPlacementScoreStatus",
    derive = "Default",
    derive = "PartialEq"
)]
pub struct AddOnPlacementScoreFields {}

/// The scores and until when they are valid.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddOnPlacementScoreStatus {
    #[serde(default)]
    #[schemars(schema_with = "crate::common::conditions")]
    pub conditions: Option<Vec<Condition>>,
    #[serde(default)]
    #[schemars(schema_with = "scores")]
    pub scores: Option<Vec<AddOnPlacementScoreItem>>,
    /// After this time, Placement treats the scores as 0.
    pub valid_until: Option<Time>,
}

fn scores(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    crate::common::list_map::<AddOnPlacementScoreItem>(generator, &["name"])
}

/// One named score in [-100, 100].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AddOnPlacementScoreItem {
    pub name: String,
    #[schemars(range(min = -100, max = 100))]
    #[serde(deserialize_with = "crate::common::saturating::i32")]
    pub value: i32,
}

impl AddOnPlacementScoreStatus {
    /// The value of the score `name`, if it is published (whatever `validUntil` says).
    pub fn score(&self, name: &str) -> Option<i32> {
        self.scores
            .iter()
            .flatten()
            .find(|x| x.name == name)
            .map(|x| x.value)
    }
}

impl ManagedCluster {
    /// The cluster's status conditions (none before any were reported).
    pub fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default()
    }
}
