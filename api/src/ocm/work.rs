//! `work.open-cluster-management.io`: ManifestWork (hub side) and AppliedManifestWork (agent side).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use crate::common::{Condition, Time};
use crate::names::condition_status::{FALSE, TRUE};

/// Resources the hub asks a cluster's work agent to apply.
#[skip_serializing_none]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "work.open-cluster-management.io",
    version = "v1",
    kind = "ManifestWork",
    namespaced,
    status = "ManifestWorkStatus",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkSpec {
    pub workload: Option<ManifestsTemplate>,
    pub delete_option: Option<DeleteOption>,
    pub manifest_configs: Option<Vec<ManifestConfigOption>>,
}

/// The manifests of a ManifestWork.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ManifestsTemplate {
    #[serde(default)]
    #[schemars(schema_with = "manifests")]
    pub manifests: Option<Vec<serde_json::Value>>,
}

fn manifests(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let item = crate::common::embedded_resource(generator);
    schemars::json_schema!({ "type": "array", "items": item })
}

/// What happens to applied resources when the work is deleted.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeleteOption {
    pub propagation_policy: Option<DeletePropagationPolicy>,
    pub selectively_orphans: Option<SelectivelyOrphan>,
    pub ttl_seconds_after_finished: Option<i64>,
}

/// How deletion of a ManifestWork propagates to what it applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DeletePropagationPolicy {
    /// Delete the applied resources (the default).
    #[default]
    Foreground,
    /// Leave every applied resource in place.
    Orphan,
    /// Leave only the resources listed in `selectivelyOrphans`.
    SelectivelyOrphan,
}

/// The resources to orphan under `SelectivelyOrphan`.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SelectivelyOrphan {
    pub orphaning_rules: Option<Vec<OrphaningRule>>,
}

/// One resource to orphan.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OrphaningRule {
    pub group: Option<String>,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: String,
}

/// Per-manifest settings: feedback rules and update strategy.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestConfigOption {
    pub resource_identifier: ResourceIdentifier,
    pub feedback_rules: Option<Vec<FeedbackRule>>,
    pub update_strategy: Option<UpdateStrategy>,
    /// How the work agent reads the manifest's object for its feedback: `Poll` (the default)
    /// at each status sync, or `Watch`, a watch that reports each change at once (ocm v1.2+;
    /// an older agent ignores it and polls).
    pub feedback_scrape_type: Option<FeedbackScrapeType>,
}

/// How the work agent reads a manifest's object for status feedback.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum FeedbackScrapeType {
    /// Read at each status sync (`--status-sync-interval`, 10 s upstream, jittered).
    #[default]
    Poll,
    /// Watched: a change is reported when it happens (upstream
    /// `pkg/work/spoke/objectreader/reader.go`, at most `--max-feedback-watch` watches, 50 by
    /// default, per agent; past that, or where the agent may not watch the kind, it polls).
    Watch,
}

/// Identifies one manifest of the work by group, resource, namespace and name.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceIdentifier {
    pub group: Option<String>,
    pub resource: String,
    pub name: String,
    pub namespace: Option<String>,
}

/// Which status fields of a manifest to report back.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedbackRule {
    #[serde(rename = "type")]
    pub type_: FeedbackType,
    #[serde(default)]
    #[schemars(schema_with = "json_paths")]
    pub json_paths: Option<Vec<JsonPath>>,
}

fn json_paths(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    crate::common::list_map::<JsonPath>(generator, &["name"])
}

/// Kind of feedback rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum FeedbackType {
    /// The agent's built-in status fields for well-known kinds (e.g. Deployment replicas).
    #[default]
    WellKnownStatus,
    /// Fields named by JSONPath.
    JSONPaths,
}

/// A named JSONPath into the manifest's object, such as `.status.phase`.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JsonPath {
    pub name: String,
    pub path: String,
    pub version: Option<String>,
}

/// How the work agent updates a manifest that already exists.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateStrategy {
    #[serde(rename = "type")]
    pub type_: UpdateStrategyType,
    pub server_side_apply: Option<ServerSideApplyConfig>,
}

/// Update strategies of the work agent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum UpdateStrategyType {
    /// Replace the object's fields with the manifest's (the default).
    #[default]
    Update,
    /// Create once, never update.
    CreateOnly,
    /// Server-side apply with the configured field manager.
    ServerSideApply,
    /// Never write; only read status feedback.
    ReadOnly,
}

/// Server-side apply settings.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerSideApplyConfig {
    pub force: Option<bool>,
    pub field_manager: Option<String>,
}

/// Observed state of a ManifestWork, written by the work agent.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkStatus {
    #[serde(default)]
    #[schemars(schema_with = "crate::common::conditions")]
    pub conditions: Option<Vec<Condition>>,
    pub resource_status: Option<ManifestResourceStatus>,
}

/// Per-manifest status.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ManifestResourceStatus {
    pub manifests: Option<Vec<ManifestCondition>>,
}

/// Conditions and feedback of one manifest.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestCondition {
    pub resource_meta: ManifestResourceMeta,
    pub status_feedback: Option<StatusFeedbackResult>,
    #[schemars(schema_with = "crate::common::conditions")]
    pub conditions: Vec<Condition>,
}

/// Identity of one applied manifest.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ManifestResourceMeta {
    #[serde(deserialize_with = "crate::common::saturating::i32")]
    pub ordinal: i32,
    pub group: Option<String>,
    pub version: Option<String>,
    pub kind: Option<String>,
    pub resource: Option<String>,
    pub name: Option<String>,
    pub namespace: Option<String>,
}

/// The feedback values of one manifest.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StatusFeedbackResult {
    #[serde(default)]
    #[schemars(schema_with = "feedback_values")]
    pub values: Option<Vec<FeedbackValue>>,
}

fn feedback_values(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    crate::common::list_map::<FeedbackValue>(generator, &["name"])
}

/// One named feedback value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedbackValue {
    pub name: String,
    pub field_value: FieldValue,
}

/// A feedback value: integer, string, boolean or raw JSON (at most 1024 bytes).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldValue {
    /// `Integer`, `String`, `Boolean` or `JsonRaw`.
    #[serde(rename = "type")]
    pub type_: String,
    pub integer: Option<i64>,
    pub string: Option<String>,
    pub boolean: Option<bool>,
    #[schemars(length(max = 1024))]
    pub json_raw: Option<String>,
}

/// The agent-side record of what a ManifestWork applied (cluster-scoped, `<hubHash>-<work>`).
#[skip_serializing_none]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "work.open-cluster-management.io",
    version = "v1",
    kind = "AppliedManifestWork",
    status = "AppliedManifestWorkStatus",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct AppliedManifestWorkSpec {
    pub hub_hash: String,
    #[serde(rename = "agentID")]
    pub agent_id: Option<String>,
    pub manifest_work_name: String,
}

/// What an AppliedManifestWork holds.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedManifestWorkStatus {
    pub applied_resources: Option<Vec<AppliedManifestResourceMeta>>,
    pub eviction_start_time: Option<Time>,
}

/// One resource applied by the work agent.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AppliedManifestResourceMeta {
    pub group: Option<String>,
    pub version: String,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: String,
    pub uid: Option<String>,
}

/// Reading what a work agent reported: one set of accessors for every controller.
impl ManifestWork {
    /// The manifests the work carries.
    pub fn manifests(&self) -> &[serde_json::Value] {
        self.spec
            .workload
            .as_ref()
            .and_then(|w| w.manifests.as_deref())
            .unwrap_or(&[])
    }

    /// The status of each manifest the work agent reported on.
    pub fn manifest_statuses(&self) -> &[ManifestCondition] {
        self.status
            .as_ref()
            .and_then(|s| s.resource_status.as_ref())
            .and_then(|r| r.manifests.as_deref())
            .unwrap_or(&[])
    }

    /// The status feedback values of the work's (first) manifest of `kind`.
    pub fn feedback(&self, kind: &str) -> &[FeedbackValue] {
        self.manifest_statuses()
            .iter()
            .find(|m| m.resource_meta.kind.as_deref() == Some(kind))
            .and_then(|m| m.status_feedback.as_ref())
            .and_then(|f| f.values.as_deref())
            .unwrap_or(&[])
    }

    /// The work's `Applied` condition, if reported.
    pub fn applied_condition(&self) -> Option<&Condition> {
        self.status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .and_then(|c| {
                c.iter()
                    .find(|c| c.type_ == crate::names::conditions::WORK_APPLIED)
            })
    }

    /// Whether the work is applied at its latest generation.
    pub fn applied(&self) -> bool {
        self.applied_condition()
            .is_some_and(|c| c.status == TRUE && c.observed_generation == self.metadata.generation)
    }

    /// Whether the work carries a manifest of `kind` (named `name`, if given) and is applied at
    /// its latest generation.
    pub fn applied_with(&self, kind: &str, name: Option<&str>) -> bool {
        // Read for every cluster at each reconcile of an agent: the condition first, then each
        // manifest's kind (one lookup among its few top-level fields) before its name.
        self.applied()
            && self.manifests().iter().any(|m| {
                m.get("kind").and_then(serde_json::Value::as_str) == Some(kind)
                    && name.is_none_or(|want| {
                        m.get("metadata")
                            .and_then(|meta| meta.get("name"))
                            .and_then(serde_json::Value::as_str)
                            == Some(want)
                    })
            })
    }

    /// Why a manifest of the work could not be applied (`Kind name: message` of the last one
    /// whose `Applied` condition is False), if one could not.
    pub fn manifest_not_applied(&self) -> Option<String> {
        self.manifest_statuses().iter().rev().find_map(|m| {
            let c = m
                .conditions
                .iter()
                .find(|c| c.type_ == crate::names::conditions::WORK_APPLIED && c.status == FALSE)?;
            Some(format!(
                "{} {}: {}",
                m.resource_meta.kind.as_deref().unwrap_or_default(),
                m.resource_meta.name.as_deref().unwrap_or_default(),
                c.message
            ))
        })
    }
}

/// The value named `name` among feedback `values`.
pub fn feedback_value<'a>(values: &'a [FeedbackValue], name: &str) -> Option<&'a FieldValue> {
    values
        .iter()
        .find(|v| v.name == name)
        .map(|v| &v.field_value)
}

/// Builders for tests (feature `test-util`).
#[cfg(any(test, feature = "test-util"))]
pub mod fixtures {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use crate::common::{Condition, Time};

    use super::{ManifestWork, ManifestWorkSpec, ManifestWorkStatus, ManifestsTemplate};

    /// The import's `<cluster>-klusterlet` work of `manifests` (kind, name) at generation 2, its
    /// Applied condition True at generation `applied_at`, or absent (`None`).
    pub fn klusterlet_work(
        cluster: &str,
        manifests: &[(&str, &str)],
        applied_at: Option<i64>,
    ) -> ManifestWork {
        let manifests: Vec<serde_json::Value> = manifests
            .iter()
            .map(|(kind, name)| {
                let api_version = if *kind == "Klusterlet" {
                    "operator.open-cluster-management.io/v1"
                } else {
                    "v1"
                };
                serde_json::json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}})
            })
            .collect();
        let conditions = applied_at.map(|g| Condition {
            type_: "Applied".into(),
            status: "True".into(),
            reason: "AppliedManifestWorkComplete".into(),
            message: String::new(),
            observed_generation: Some(g),
            last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
        });
        ManifestWork {
            metadata: ObjectMeta {
                name: Some(format!("{cluster}-klusterlet")),
                namespace: Some(cluster.into()),
                generation: Some(2),
                ..Default::default()
            },
            spec: ManifestWorkSpec {
                workload: Some(ManifestsTemplate {
                    manifests: Some(manifests),
                }),
                ..Default::default()
            },
            status: Some(ManifestWorkStatus {
                conditions: Some(conditions.into_iter().collect()),
                ..Default::default()
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::klusterlet_work;

    #[test]
    fn a_work_is_applied_with_a_manifest_it_carries_at_its_latest_generation() {
        let carried = [
            ("Namespace", "open-cluster-management-agent"),
            ("Secret", "bootstrap-hub-kubeconfig"),
            ("Secret", "open-cluster-management-image-pull-credentials"),
            ("Klusterlet", "klusterlet"),
        ];
        let current = klusterlet_work("c1", &carried, Some(2));
        // (kind, name) -> carried and applied
        for (kind, name, expected) in [
            ("Secret", Some("bootstrap-hub-kubeconfig"), true),
            ("Secret", Some("bootstrap-hub-kubeconfig-hub2"), false),
            ("Secret", None, true),
            ("Klusterlet", None, true),
            ("Klusterlet", Some("klusterlet-abc"), false),
            ("ConfigMap", Some("bootstrap-hub-kubeconfig"), false),
            ("Namespace", Some("klusterlet"), false),
        ] {
            assert_eq!(
                current.applied_with(kind, name),
                expected,
                "{kind} {name:?}"
            );
        }
        // Applied at an earlier generation, or not at all: not yet.
        for applied in [Some(1), None] {
            let older = klusterlet_work("c1", &carried, applied);
            assert!(!older.applied_with("Klusterlet", None), "{applied:?}");
            assert!(!older.applied_with("Secret", Some("bootstrap-hub-kubeconfig")));
        }
    }
}
