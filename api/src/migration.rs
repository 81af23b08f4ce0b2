//! Our own APIs: ManagedClusterMigration (global hub) and MigrationTask (managed hubs).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use crate::common::{Condition, Time};

/// Pattern of a Go-style duration such as `90s`, `5m` or `1h30m`.
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$";
/// Pattern of a DNS-1123 label (cluster and hub names).
pub const DNS_LABEL_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// At most this many per-cluster failures are kept in status; the counts stay exact.
pub const MAX_REPORTED_FAILURES: usize = 100;

/// Moves a set of managed clusters from hub `from` to hub `to`.
#[skip_serializing_none]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "migration.open-cluster-management.io",
    version = "v1alpha1",
    kind = "ManagedClusterMigration",
    namespaced,
    status = "ManagedClusterMigrationStatus",
    shortname = "mcm",
    category = "ocm",
    derive = "Default",
    derive = "PartialEq",
    doc = "Moves a set of managed clusters from one managed hub to another.",
    printcolumn(name = "PHASE", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "FROM", type_ = "string", json_path = ".spec.from"),
    printcolumn(name = "TO", type_ = "string", json_path = ".status.target"),
    printcolumn(
        name = "TOTAL",
        type_ = "integer",
        json_path = ".status.clusters.total"
    ),
    printcolumn(
        name = "REGISTERED",
        type_ = "integer",
        json_path = ".status.clusters.registered"
    ),
    printcolumn(
        name = "FAILED",
        type_ = "integer",
        json_path = ".status.clusters.failed"
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[schemars(extend(
    "oneOf" = [
        { "required": ["includedManagedClusters"] },
        { "required": ["includedManagedClustersSelector"] },
        { "required": ["includedManagedClustersPlacementRef"] }
    ],
    "anyOf" = [{ "required": ["to"] }, { "required": ["toPlacement"] }],
    "x-kubernetes-validations" = [{
        "rule": "(has(self.includedManagedClusters) ? 1 : 0) + (has(self.includedManagedClustersSelector) ? 1 : 0) + (has(self.includedManagedClustersPlacementRef) ? 1 : 0) == 1",
        "message": "exactly one of includedManagedClusters, includedManagedClustersSelector or includedManagedClustersPlacementRef must be set"
    }, {
        "rule": "has(self.to) != has(self.toPlacement)",
        "message": "exactly one of to and toPlacement must be set"
    }]
))]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterMigrationSpec {
    /// Source hub: the name of its ManagedCluster on the global hub.
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub from: String,
    /// Target hub: the name of its ManagedCluster on the global hub. Exactly one of this and
    /// `toPlacement` is set.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub to: String,
    /// Target hub chosen by the Placement of this name in the migration's namespace on the
    /// global hub (over the hubs' ManagedClusters; give it `numberOfClusters: 1` and an
    /// AddOnPlacementScore prioritizer on `capacityHeadroom` to go where there is most room).
    /// Read once, when the migration leaves Pending; the hub chosen is `status.target`.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub to_placement: Option<String>,
    /// The clusters to move, by name. Exactly one of this and the selector is set.
    #[serde(default)]
    #[schemars(schema_with = "cluster_names")]
    pub included_managed_clusters: Option<Vec<String>>,
    /// The clusters to move, by labels evaluated on the source hub.
    pub included_managed_clusters_selector: Option<LabelSelector>,
    /// The clusters to move, as the Placement of this name in the migration's namespace on
    /// the source hub decided them (its PlacementDecisions), read once at validation.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub included_managed_clusters_placement_ref: Option<String>,
    /// Timeout of each stage but Registering (Go duration; default `5m` plus 100ms per
    /// cluster).
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub stage_timeout: Option<String>,
    /// Timeout of each wave of the Registering stage (Go duration; default `12m` plus 200ms
    /// per cluster of the wave): Registering may take this long for each wave of
    /// `maxConcurrency` clusters.
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub registering_timeout: Option<String>,
    /// How many clusters switch hubs at once (default: all).
    #[schemars(range(min = 1))]
    #[serde(default, deserialize_with = "crate::common::saturating::opt_i32")]
    pub max_concurrency: Option<i32>,
    /// How many clusters may fail before no new wave starts (default 0).
    #[schemars(range(min = 0))]
    #[serde(default, deserialize_with = "crate::common::saturating::opt_i32")]
    pub max_failures: Option<i32>,
    /// Validate and write the plan into status, changing nothing else.
    pub dry_run: Option<bool>,
    /// Clusters annotated `import.open-cluster-management.io/disable-auto-import` may move:
    /// the annotation is lifted while the migration configures them (their hub's import
    /// controller must deliver the target's bootstrap kubeconfig), and put back if they stay.
    /// Without it such clusters fail validation.
    pub lift_disable_auto_import: Option<bool>,
    /// Objects carried over besides what every migration carries: for each kind listed, the
    /// objects in each moving cluster's namespace on the source hub (those its selector
    /// matches), copied to the target before the cluster switches, without status, owner
    /// references pointing at the target's objects, removed from the target again if the
    /// cluster goes back. Kinds whose controller must not act twice (hive's
    /// ClusterDeployments, metal3's BareMetalHosts) arrive paused. At most 16 kinds.
    #[schemars(length(max = 16))]
    pub carry_over: Option<Vec<crate::carried::CarryOverResource>>,
}

fn cluster_names(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "minItems": 1,
        "x-kubernetes-list-type": "set",
        "maxItems": MAX_CLUSTERS,
        "items": { "type": "string", "maxLength": 63, "pattern": DNS_LABEL_PATTERN },
    })
}

/// Phase of a migration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MigrationPhase {
    /// Accepted, not yet started.
    #[default]
    Pending,
    /// Checking hubs and clusters.
    Validating,
    /// Preparing credentials, KlusterletConfig and RBAC.
    Initializing,
    /// Delivering the tasks to both hubs.
    Deploying,
    /// Clusters switching hubs.
    Registering,
    /// Undoing what did not complete.
    Rollbacking,
    /// Removing temporary objects.
    Cleaning,
    /// Every cluster moved (or, for a dry run, the plan is written).
    Completed,
    /// Stopped; the conditions say why.
    Failed,
}

impl MigrationPhase {
    /// True once the migration can make no more progress.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed)
    }
}

/// Observed state of a ManagedClusterMigration.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterMigrationStatus {
    pub phase: Option<MigrationPhase>,
    #[serde(default)]
    #[schemars(schema_with = "crate::common::conditions")]
    pub conditions: Option<Vec<Condition>>,
    pub observed_generation: Option<i64>,
    pub start_time: Option<Time>,
    pub completion_time: Option<Time>,
    pub clusters: Option<ClusterCounts>,
    /// Clusters that failed, with reasons (at most 100 kept; `clusters.failed` stays exact).
    #[serde(default)]
    #[schemars(schema_with = "failures")]
    pub failures: Option<Vec<ClusterFailure>>,
    /// For a dry run: what the migration would do.
    pub plan: Option<MigrationPlan>,
    /// When the current phase started (stage timeouts count from here).
    pub phase_start_time: Option<Time>,
    /// The clusters this migration moves, resolved at validation (from the names or the
    /// selector), in the order `clusterStates` follows.
    pub resolved_clusters: Option<Vec<String>>,
    /// One character per resolved cluster: its state (see [`ClusterState`]). Compact so that
    /// a migration of thousands of clusters keeps a small status.
    pub cluster_states: Option<String>,
    /// How the target's bootstrap kubeconfig reaches the clusters on the source hub:
    /// `KlusterletConfig/multipleHubsConfig`, `KlusterletConfig/bootstrapKubeConfigs`, or
    /// `ManifestWork` (a plain OCM source hub: each cluster's Klusterlet is configured through
    /// a ManifestWork of its own).
    pub bootstrap_delivery: Option<String>,
    /// Why the migration rolled back (`Refused`, `FailureBudgetExceeded`, `Timeout`,
    /// `Deleted`, `Error`), kept as first recorded: the final verdict reads it.
    pub rollback_cause: Option<String>,
    /// The spec as it was when the migration left Pending. The manager works from this copy
    /// alone: a later edit of the spec changes nothing (condition `SpecAccepted` False, reason
    /// `SpecImmutable`, says so).
    pub accepted_spec: Option<ManagedClusterMigrationSpec>,
    /// What each cluster takes along (labels, annotations, addons; never status or
    /// credentials), as the source reported it at validation, in the order of
    /// `resolvedClusters`: recorded before the target pre-creates anything, and what it
    /// pre-creates from (a work deleted by hand loses nothing).
    pub carry_over: Option<Vec<CarriedCluster>>,
    /// Where what the clusters take along is kept when it is too large for status (more than
    /// one part of [`CARRY_OVER_PART_BYTES`]): in parts on the source hub, read back through
    /// read-only ManifestWorks ([`crate::names::carry_over_part`]); `carryOverParts` names how
    /// many and their digest, and `carryOver` is then unset.
    pub carry_over_parts: Option<CarryOverParts>,
    /// The names its bootstrap identities hold in the target hub's pool of
    /// `cluster-migration-bootstrap-<n>` names (its ManagedServiceAccounts and their token
    /// Secrets), in the order of the identities: claimed in Initializing, given back (the
    /// ManagedServiceAccounts revoked) when it ends.
    pub bootstrap_identities: Option<Vec<String>>,
    /// The hub the clusters move to: `spec.to`, or the hub `spec.toPlacement` chose when the
    /// migration left Pending.
    pub target: Option<String>,
}

/// CEL transition rule at the root of the ManagedClusterMigration CRD: once the migration left
/// Pending, where it moves from and to and the clusters it names cannot change. The rule reads
/// the status, so it sits at the root; it compares bounded fields only (the selector's maps
/// would have no cost bound). The manager holds the whole spec regardless
/// ([`ManagedClusterMigrationStatus::accepted_spec`]).
pub const IMMUTABLE_SPEC_RULE: &str = "!has(oldSelf.status) || !has(oldSelf.status.phase) || oldSelf.status.phase == 'Pending' || (self.spec.from == oldSelf.spec.from && has(self.spec.to) == has(oldSelf.spec.to) && (!has(self.spec.to) || self.spec.to == oldSelf.spec.to) && has(self.spec.toPlacement) == has(oldSelf.spec.toPlacement) && (!has(self.spec.toPlacement) || self.spec.toPlacement == oldSelf.spec.toPlacement) && has(self.spec.includedManagedClusters) == has(oldSelf.spec.includedManagedClusters) && (!has(self.spec.includedManagedClusters) || self.spec.includedManagedClusters == oldSelf.spec.includedManagedClusters) && has(self.spec.includedManagedClustersPlacementRef) == has(oldSelf.spec.includedManagedClustersPlacementRef) && (!has(self.spec.includedManagedClustersPlacementRef) || self.spec.includedManagedClustersPlacementRef == oldSelf.spec.includedManagedClustersPlacementRef))";

/// Adds [`IMMUTABLE_SPEC_RULE`] to the CRD's root schema.
pub fn immutable_spec_rule(
    crd: &mut k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::ValidationRule;
    for version in &mut crd.spec.versions {
        if let Some(root) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            root.x_kubernetes_validations
                .get_or_insert_with(Vec::new)
                .push(ValidationRule {
                    rule: IMMUTABLE_SPEC_RULE.into(),
                    message: Some("spec.from, spec.to, spec.toPlacement and the clusters named cannot change once the migration left Pending; create another migration".into()),
                    reason: Some("FieldValueForbidden".into()),
                    ..Default::default()
                });
        }
    }
}

impl ManagedClusterMigration {
    /// The spec the migration works from: the one it started with ([`ManagedClusterMigrationStatus::accepted_spec`]),
    /// or, while it is Pending, the spec itself.
    pub fn effective_spec(&self) -> &ManagedClusterMigrationSpec {
        self.status
            .as_ref()
            .and_then(|s| s.accepted_spec.as_ref())
            .unwrap_or(&self.spec)
    }

    /// The hub the clusters move to: the one recorded in `status.target`, else `spec.to`
    /// (`None` while a `toPlacement` has not chosen yet).
    pub fn target_hub(&self) -> Option<&str> {
        self.status
            .as_ref()
            .and_then(|s| s.target.as_deref())
            .or(Some(self.effective_spec().to.as_str()))
            .filter(|t| !t.is_empty())
    }
}

fn failures(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = crate::common::list_map::<ClusterFailure>(generator, &["name"]);
    schema
        .ensure_object()
        .insert("maxItems".into(), MAX_REPORTED_FAILURES.into());
    schema
}

/// How many clusters are in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterCounts {
    #[serde(deserialize_with = "crate::common::saturating::i32")]
    pub total: i32,
    #[serde(deserialize_with = "crate::common::saturating::i32")]
    pub switching: i32,
    #[serde(deserialize_with = "crate::common::saturating::i32")]
    pub registered: i32,
    #[serde(deserialize_with = "crate::common::saturating::i32")]
    pub failed: i32,
    #[serde(deserialize_with = "crate::common::saturating::i32")]
    pub rolled_back: i32,
}

/// One cluster that failed, and why.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterFailure {
    pub name: String,
    pub reason: String,
    pub message: Option<String>,
}

/// A dry run's plan.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MigrationPlan {
    /// The clusters that would move.
    pub clusters: Vec<String>,
    /// The waves they would switch in, in order.
    pub waves: Vec<Vec<String>>,
    /// Objects that would be created, as they would be applied, secrets redacted.
    pub objects: Vec<PlannedObject>,
}

/// One object of a plan.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PlannedObject {
    /// Cluster the object is created on: the global hub (`global-hub`) or a hub's name.
    pub hub: String,
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    /// The object as it would be applied (secret data redacted).
    #[serde(default)]
    #[schemars(schema_with = "crate::common::preserve_unknown_object")]
    pub object: Option<serde_json::Value>,
}

/// The side of a migration a hub plays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MigrationRole {
    /// The hub the clusters leave.
    #[default]
    Source,
    /// The hub the clusters join.
    Target,
}

impl MigrationRole {
    /// `source` or `target`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Source => "source",
            Self::Target => "target",
        }
    }
}

/// Stage a MigrationTask is asked to carry out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum TaskStage {
    /// Check the clusters (source) or that none exists yet (target).
    #[default]
    Validating,
    /// Pre-create objects (target) or stand ready (source).
    Deploying,
    /// Switch clusters (source) and admit them (target).
    Registering,
    /// Undo for clusters that did not arrive.
    Rollbacking,
    /// Remove temporary objects and detach moved clusters.
    Cleaning,
}

/// A hub's part of one migration, delivered to that hub inside a ManifestWork.
#[skip_serializing_none]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "migration.open-cluster-management.io",
    version = "v1alpha1",
    kind = "MigrationTask",
    namespaced,
    status = "MigrationTaskStatus",
    category = "ocm",
    derive = "Default",
    derive = "PartialEq",
    doc = "One managed hub's part of a ManagedClusterMigration.",
    printcolumn(name = "ROLE", type_ = "string", json_path = ".spec.role"),
    printcolumn(name = "PEER", type_ = "string", json_path = ".spec.peerHub"),
    printcolumn(name = "STAGE", type_ = "string", json_path = ".spec.stage"),
    printcolumn(
        name = "TOTAL",
        type_ = "integer",
        json_path = ".status.clusters.total"
    ),
    printcolumn(
        name = "REGISTERED",
        type_ = "integer",
        json_path = ".status.clusters.registered"
    ),
    printcolumn(
        name = "FAILED",
        type_ = "integer",
        json_path = ".status.clusters.failed"
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MigrationTaskSpec {
    /// Name of the ManagedClusterMigration on the global hub.
    pub migration: String,
    /// UID of that migration, so a re-created migration of the same name is a new task.
    pub migration_uid: Option<String>,
    /// Namespace of that migration on the global hub.
    pub migration_namespace: Option<String>,
    /// The migration's key ([`crate::names::migration_key`]): what the agent names the objects
    /// it creates for the migration after, and marks the clusters it moves with.
    pub key: Option<String>,
    pub role: MigrationRole,
    /// The other hub of the migration.
    pub peer_hub: String,
    /// The clusters this task concerns.
    #[serde(default)]
    pub clusters: Vec<String>,
    pub stage: TaskStage,
    /// Secret (in the klusterlet's namespace on each cluster) with the target's bootstrap
    /// kubeconfig.
    pub bootstrap_secret_name: Option<String>,
    /// KlusterletConfig selected by the migrating clusters (source only).
    pub klusterlet_config_name: Option<String>,
    /// Clusters selected by labels on the source hub, when the migration names none.
    pub cluster_selector: Option<LabelSelector>,
    /// Or: clusters the Placement of this name in the migration's namespace on the source hub
    /// decided (its PlacementDecisions), read while validating.
    pub cluster_placement: Option<String>,
    /// Changes whenever the manager changes this spec; the agent echoes it in status so the
    /// manager never acts on a report about an older spec.
    pub revision: Option<String>,
    /// Target only: the identity (user name) whose CSRs the agent may approve; with
    /// `clustersPerIdentity`, the base of each cluster's own ([`Self::bootstrap_user_at`]).
    pub bootstrap_user: Option<String>,
    /// How many consecutive clusters of `clusters` share one bootstrap identity
    /// ([`crate::names::clusters_per_identity`]): the cluster at index `i` has identity
    /// `i / clustersPerIdentity`, and its bootstrap secret and KlusterletConfig are the names
    /// above suffixed with `-<identity>` ([`crate::names::of_identity`]); its bootstrap user is
    /// `bootstrapUsers[identity]` (without that list, `bootstrapUser` suffixed alike).
    /// Unset: one identity under the names above.
    #[serde(default, deserialize_with = "crate::common::saturating::opt_u32")]
    pub clusters_per_identity: Option<u32>,
    /// Target only: the user of each bootstrap identity, in order (identity `i` is
    /// `bootstrapUsers[i]`); set, it replaces `bootstrapUser` with a suffix.
    pub bootstrap_users: Option<Vec<String>>,
    /// The clusters released to switch: the source stops accepting them
    /// (`hubAcceptsClient: false`), the target approves their bootstrap CSRs (and no other).
    pub released: Option<Vec<String>>,
    /// Clusters to roll back (Rollbacking).
    pub rollback: Option<Vec<String>>,
    /// Source only: moved clusters to detach (Cleaning).
    pub detach: Option<Vec<String>>,
    /// `released`, `rollback` and `detach` as marks, one hexadecimal digit per cluster of
    /// `clusters`, in order (1 released, 2 to roll back, 4 to detach, added up; `0` none),
    /// sent instead of the three lists by a task of many clusters ([`Self::set_subsets`]): a
    /// task of thousands of clusters then stays well within a ManifestWork's 500 KiB. Read
    /// through [`Self::released_names`] and its twins.
    pub cluster_marks: Option<String>,
    /// Target only: what to pre-create for each cluster.
    pub carry_over: Option<Vec<CarriedCluster>>,
    /// Target only: what to pre-create comes in ConfigMaps next to the task instead
    /// ([`crate::names::carry_over_part`]), this many, of this digest.
    pub carry_over_parts: Option<CarryOverParts>,
    /// Source: clusters annotated `disable-auto-import` may move (the annotation is lifted
    /// while the migration configures them).
    pub lift_disable_auto_import: Option<bool>,
    /// The kinds of objects the clusters carry over (the migration's `carryOver`): the source
    /// reads them, the target writes them.
    pub carry_kinds: Option<Vec<crate::carried::CarryOverResource>>,
    /// How the bootstrap kubeconfig reaches the clusters: through the source hub's
    /// KlusterletConfig (ACM/MCE, the default), or through a ManifestWork per cluster (plain
    /// OCM: the Klusterlet's MultipleHubs configuration, set on the source and restored on the
    /// target once the cluster arrived).
    pub delivery: Option<BootstrapDelivery>,
    /// Target only: the migration's bootstrap kubeconfig without its credentials (the
    /// target's URL, CA and proxy). A plain OCM target gives each cluster that arrived a
    /// bootstrap kubeconfig of its own hub made from it (see
    /// [`crate::names::HUB_BOOTSTRAP_SERVICE_ACCOUNTS`]), so nothing on the cluster depends on
    /// the migration's token.
    pub bootstrap_connection: Option<String>,
}

impl MigrationTaskSpec {
    /// The migration's key: what the objects the agent creates for it are named after, and
    /// the value of the annotations it marks clusters with (the migration's name for a task of
    /// a manager that sent no key).
    pub fn key(&self) -> &str {
        self.key.as_deref().unwrap_or(&self.migration)
    }

    /// The bootstrap identity of the cluster at `index` of `clusters` (`None`: the task's
    /// single identity, named by the base names).
    pub fn identity_at(&self, index: usize) -> Option<usize> {
        self.clusters_per_identity
            .map(|per| index / (per.max(1) as usize))
    }

    fn named_at(&self, base: Option<&String>, index: usize) -> Option<String> {
        let base = base?;
        Some(match self.identity_at(index) {
            Some(identity) => crate::names::of_identity(base, identity),
            None => base.clone(),
        })
    }

    /// The bootstrap secret of the cluster at `index` of `clusters`.
    pub fn bootstrap_secret_at(&self, index: usize) -> Option<String> {
        self.named_at(self.bootstrap_secret_name.as_ref(), index)
    }

    /// The KlusterletConfig the cluster at `index` of `clusters` selects (before any derived
    /// from its own).
    pub fn klusterlet_config_at(&self, index: usize) -> Option<String> {
        self.named_at(self.klusterlet_config_name.as_ref(), index)
    }

    /// The only identity whose bootstrap CSRs the target approves for the cluster at `index`
    /// of `clusters`.
    pub fn bootstrap_user_at(&self, index: usize) -> Option<String> {
        match &self.bootstrap_users {
            Some(users) => users.get(self.identity_at(index).unwrap_or(0)).cloned(),
            None => self.named_at(self.bootstrap_user.as_ref(), index),
        }
    }

    /// [`Self::bootstrap_secret_at`] for a cluster of the list by name (`None`: not listed).
    pub fn bootstrap_secret_for(&self, cluster: &str) -> Option<String> {
        let index = self.clusters.iter().position(|c| c == cluster)?;
        self.bootstrap_secret_at(index)
    }

    /// Where each cluster of `clusters` stands in it, by name.
    pub fn cluster_positions(&self) -> std::collections::HashMap<&str, usize> {
        self.clusters
            .iter()
            .enumerate()
            .map(|(i, c)| (c.as_str(), i))
            .collect()
    }

    /// Sets `released`, `rollback` and `detach` (set `clusters` first): as lists, what every
    /// agent reads, for a task whose `clusters` hold at most [`SUBSET_LISTS_LIMIT`] bytes of
    /// names; as [`Self::cluster_marks`] for a larger one, in every stage, so that its agent
    /// never sees one form give way to the other (clusters outside `clusters` cannot be
    /// marked and are left out).
    pub fn set_subsets(
        &mut self,
        released: Vec<String>,
        rollback: Vec<String>,
        detach: Vec<String>,
    ) {
        let bytes: usize = self.clusters.iter().map(|n| n.len() + 3).sum();
        let non_empty = |v: Vec<String>| (!v.is_empty()).then_some(v);
        if bytes <= SUBSET_LISTS_LIMIT {
            self.released = non_empty(released);
            self.rollback = non_empty(rollback);
            self.detach = non_empty(detach);
            self.cluster_marks = None;
            return;
        }
        let mut marks = vec![0u8; self.clusters.len()];
        let index = self.cluster_positions();
        for (list, bit) in [
            (&released, MARK_RELEASED),
            (&rollback, MARK_ROLLBACK),
            (&detach, MARK_DETACH),
        ] {
            for name in list {
                if let Some(&i) = index.get(name.as_str()) {
                    marks[i] |= bit;
                }
            }
        }
        self.released = None;
        self.rollback = None;
        self.detach = None;
        self.cluster_marks = Some(
            marks
                .iter()
                .map(|m| char::from_digit(u32::from(*m), 16).unwrap_or('0'))
                .collect(),
        );
    }

    /// The clusters of `list`, or of `clusters` marked with `bit` when the task came with
    /// marks. A mark that is no hexadecimal digit, or a cluster past the marks, is unmarked.
    fn subset<'a>(
        &'a self,
        list: Option<&'a Vec<String>>,
        bit: u8,
    ) -> std::collections::BTreeSet<&'a str> {
        if let Some(list) = list {
            return list.iter().map(String::as_str).collect();
        }
        let Some(marks) = &self.cluster_marks else {
            return std::collections::BTreeSet::new();
        };
        self.clusters
            .iter()
            .zip(marks.chars())
            .filter(|(_, m)| m.to_digit(16).is_some_and(|d| d & u32::from(bit) != 0))
            .map(|(c, _)| c.as_str())
            .collect()
    }

    /// The clusters released to switch ([`Self::released`], or marked so).
    pub fn released_names(&self) -> std::collections::BTreeSet<&str> {
        self.subset(self.released.as_ref(), MARK_RELEASED)
    }

    /// The clusters to roll back ([`Self::rollback`], or marked so).
    pub fn rollback_names(&self) -> std::collections::BTreeSet<&str> {
        self.subset(self.rollback.as_ref(), MARK_ROLLBACK)
    }

    /// The clusters to detach ([`Self::detach`], or marked so).
    pub fn detach_names(&self) -> std::collections::BTreeSet<&str> {
        self.subset(self.detach.as_ref(), MARK_DETACH)
    }
}

/// How many bytes of names a task's `clusters` may hold for `released`, `rollback` and
/// `detach` to go as lists ([`MigrationTaskSpec::set_subsets`]): a couple of hundred clusters
/// (which agents older than the marks can move too); past that, marks.
pub const SUBSET_LISTS_LIMIT: usize = 4 * 1024;
/// [`MigrationTaskSpec::cluster_marks`]: released.
pub const MARK_RELEASED: u8 = 1;
/// [`MigrationTaskSpec::cluster_marks`]: to roll back.
pub const MARK_ROLLBACK: u8 = 2;
/// [`MigrationTaskSpec::cluster_marks`]: to detach.
pub const MARK_DETACH: u8 = 4;

/// How a migration's bootstrap kubeconfig reaches its clusters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum BootstrapDelivery {
    /// The source hub's import controller, through a KlusterletConfig (ACM/MCE) whose
    /// `multipleHubsConfig` keeps the current hub first: clusters are annotated ahead of time.
    #[default]
    KlusterletConfig,
    /// The same through the older `bootstrapKubeConfigs` shape, which lists the target alone
    /// (a klusterlet restarted after the change goes straight there): a cluster is annotated
    /// only when it is released.
    LegacyKlusterletConfig,
    /// A ManifestWork per cluster (plain OCM hubs, which serve no KlusterletConfig API).
    ManifestWork,
}

/// What a cluster takes with it to the target hub: never status, never credentials.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CarriedCluster {
    pub name: String,
    /// Labels of the ManagedCluster (OCM's own bookkeeping labels left out).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// ManagedClusterSet the cluster belongs to.
    pub cluster_set: Option<String>,
    /// ManagedClusterAddOns enabled for the cluster, with their config references.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addons: Vec<CarriedAddOn>,
    /// Whether the cluster had a KlusterletAddonConfig (ACM); its spec is carried.
    #[serde(default)]
    #[schemars(schema_with = "crate::common::preserve_unknown_object")]
    pub klusterlet_addon_config: Option<serde_json::Value>,
    /// The ManagedCluster annotations the target's import controller reads
    /// (`names::annotations::CARRIED_FOR_IMPORT`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub annotations: std::collections::BTreeMap<String, String>,
    /// The cluster's API server URLs and CAs (`managedClusterClientConfigs`), which its
    /// klusterlet writes only when it creates its ManagedCluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_configs: Vec<crate::ocm::cluster::ClientConfig>,
    /// Source: the KlusterletConfig the cluster selects of its own (the source derives the one
    /// it selects while it moves from it, [`crate::names::derived_klusterlet_config`]). Not
    /// carried to the target.
    pub own_klusterlet_config: Option<String>,
    /// The objects of the migration's `carryOver` kinds in its namespace, as the source made
    /// them fit for the target ([`crate::carried::clean`]). A record with objects never
    /// travels in status: they may be Secrets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<crate::carried::CarriedObject>,
}

/// One ManagedClusterAddOn carried over.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CarriedAddOn {
    pub name: String,
    pub install_namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub configs: Vec<crate::common::AddOnConfig>,
}

/// One cluster's state in a migration, as a single character so that per-cluster state stays
/// small in status and fits one ManifestWork status-feedback value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ClusterState {
    /// Nothing done yet.
    #[default]
    Pending,
    /// Passed validation.
    Valid,
    /// Source: does not exist.
    NotFound,
    /// Source: not Available.
    Unavailable,
    /// Source: the cluster is itself a hub (`local-cluster`).
    IsHub,
    /// Source: already in another migration.
    Conflict,
    /// Target: a cluster of that name already exists.
    Exists,
    /// Source: its carried-over data is too large to report.
    TooLarge,
    /// Source (ACM): annotated `disable-auto-import`, and the migration was not told it may
    /// lift it.
    AutoImportDisabled,
    /// Source: its klusterlet runs in hosted mode (on another cluster).
    Hosted,
    /// Source: in no ManagedClusterSet bound to the migration's namespace on the source hub.
    Forbidden,
    /// Source: annotated; waiting for its klusterlet to receive the bootstrap kubeconfig.
    Waiting,
    /// Source: ready to switch.
    Ready,
    /// Source: held by the block-move annotation.
    Blocked,
    /// Source: released (`hubAcceptsClient: false`).
    Switching,
    /// Target: pre-created, waiting for the cluster.
    Created,
    /// Target: joined.
    Joined,
    /// Target: joined and Available (registered).
    Available,
    /// Target: refused (its ManagedCluster there no longer accepts it).
    Refused,
    /// Rolling back: waiting for the cluster to be Available on the source again.
    RollingBack,
    /// Rolled back: Available on the source (source) or removed (target).
    RolledBack,
    /// Source: detached after moving.
    Detached,
    /// Cleaning: arrived, and the target confirmed again that it is Available there; it is
    /// detached from the source (counts as registered).
    Moved,
    /// Cleaning: arrived, but the target no longer has it (refused there, or its ManagedCluster
    /// removed): not detached from the source, which accepts it again.
    Lost,
    /// Cleaning gave up on it (past its bound, or abandoned): neither hub confirmed where it
    /// is.
    Unconfirmed,
}

impl ClusterState {
    const TABLE: [(Self, char); 25] = [
        (Self::Pending, '-'),
        (Self::Valid, 'v'),
        (Self::NotFound, 'N'),
        (Self::Unavailable, 'U'),
        (Self::IsHub, 'H'),
        (Self::Conflict, 'C'),
        (Self::Exists, 'E'),
        (Self::TooLarge, 'T'),
        (Self::AutoImportDisabled, 'I'),
        (Self::Hosted, 'O'),
        (Self::Forbidden, 'X'),
        (Self::Waiting, 'w'),
        (Self::Ready, 'r'),
        (Self::Blocked, 'b'),
        (Self::Switching, 's'),
        (Self::Created, 'c'),
        (Self::Joined, 'j'),
        (Self::Available, 'A'),
        (Self::Refused, 'F'),
        (Self::RollingBack, 'k'),
        (Self::RolledBack, 'R'),
        (Self::Detached, 'D'),
        (Self::Moved, 'M'),
        (Self::Lost, 'L'),
        (Self::Unconfirmed, 'u'),
    ];

    /// The state's character.
    pub fn code(self) -> char {
        Self::TABLE
            .iter()
            .find(|(s, _)| *s == self)
            .map_or('-', |(_, c)| *c)
    }

    /// The state a character stands for (`Pending` for anything unknown).
    pub fn from_code(c: char) -> Self {
        Self::TABLE
            .iter()
            .find(|(_, code)| *code == c)
            .map_or(Self::Pending, |(s, _)| *s)
    }

    /// A string of states, one character each.
    pub fn encode(states: &[Self]) -> String {
        states.iter().map(|s| s.code()).collect()
    }

    /// The states of a string, padded with `Pending` (or cut) to `len`.
    pub fn decode(text: &str, len: usize) -> Vec<Self> {
        let mut v: Vec<Self> = text.chars().map(Self::from_code).take(len).collect();
        v.resize(len, Self::Pending);
        v
    }

    /// Released and not arrived yet (switching, or joined the target but not Available).
    pub fn in_flight(self) -> bool {
        matches!(self, Self::Switching | Self::Joined)
    }

    /// Arrived on the target: Available there (and, in Cleaning, confirmed again).
    pub fn arrived(self) -> bool {
        matches!(self, Self::Available | Self::Moved)
    }

    /// How many clusters are in each state.
    pub fn counts(states: &[Self]) -> ClusterCounts {
        let n = |f: &dyn Fn(Self) -> bool| states.iter().filter(|s| f(**s)).count() as i32;
        ClusterCounts {
            total: states.len() as i32,
            switching: n(&|s| s.in_flight()),
            registered: n(&|s| s.arrived()),
            failed: n(&|s| s.failure().is_some()),
            rolled_back: n(&|s| s == Self::RolledBack),
        }
    }

    /// The failed clusters with their reasons (at most [`MAX_REPORTED_FAILURES`]).
    pub fn failures(names: &[String], states: &[Self]) -> Vec<ClusterFailure> {
        names
            .iter()
            .zip(states)
            .filter_map(|(n, s)| {
                s.failure().map(|(reason, why)| ClusterFailure {
                    name: n.clone(),
                    reason: reason.into(),
                    message: Some(format!("{n} {why}")),
                })
            })
            .take(MAX_REPORTED_FAILURES)
            .collect()
    }

    /// A validation failure, with the condition reason and a sentence for people.
    pub fn failure(self) -> Option<(&'static str, &'static str)> {
        Some(match self {
            Self::NotFound => ("ClusterNotFound", "not found on the source hub"),
            Self::Unavailable => ("ClusterUnavailable", "not Available on the source hub"),
            Self::IsHub => ("ClusterIsHub", "is itself a hub"),
            Self::Conflict => ("ClusterConflict", "is in another active migration"),
            Self::Exists => ("ClusterConflict", "already exists on the target hub"),
            Self::TooLarge => (
                "ClusterTooLarge",
                "carries more than a migration can take along (at most 16 KiB of labels, annotations and addons per cluster, 256 KiB per migration)",
            ),
            Self::Refused => ("ClusterRefused", "was refused by the target hub"),
            Self::Lost => (
                "ClusterLost",
                "arrived on the target hub, which no longer has it (refused there, or its ManagedCluster removed) when the migration came to detach it: it was kept on the source hub, which accepts it again (if its klusterlet cannot reach the source hub, import it there again)",
            ),
            Self::Unconfirmed => (
                "Unconfirmed",
                "was not confirmed on either hub before the migration stopped waiting: check on the source hub that its ManagedCluster accepts it (hubAcceptsClient true) and that it turns Available there, or on the target hub that it is Available; if it is on neither, import it again",
            ),
            Self::AutoImportDisabled => (
                "AutoImportDisabled",
                "is annotated import.open-cluster-management.io/disable-auto-import, so its hub would not deliver it the target's bootstrap kubeconfig (set spec.liftDisableAutoImport to lift it while the migration runs)",
            ),
            Self::Forbidden => (
                "Forbidden",
                "is in no ManagedClusterSet bound to the migration's namespace on the source hub: a migration may name only clusters a Placement in its namespace could select (bind a set that holds it with a ManagedClusterSetBinding in that namespace on the source hub)",
            ),
            Self::Hosted => (
                "ClusterHosted",
                "runs its klusterlet in hosted mode, on another cluster: hosted clusters cannot be migrated",
            ),
            _ => return None,
        })
    }
}

/// Observed state of a MigrationTask, carried back to the manager through ManifestWork
/// status feedback (scalar fields only, so JSONPaths can read them).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigrationTaskStatus {
    /// The stage the agent last acted on.
    pub observed_stage: Option<TaskStage>,
    /// How far the agent got with the observed stage.
    pub stage_state: Option<crate::task_report::StageState>,
    pub message: Option<String>,
    pub observed_generation: Option<i64>,
    pub clusters: Option<ClusterCounts>,
    /// Failed clusters, with reasons (at most 100 kept).
    #[serde(default)]
    #[schemars(schema_with = "failures")]
    pub failures: Option<Vec<ClusterFailure>>,
    /// The spec revision this status reports on.
    pub observed_revision: Option<String>,
    /// One character per cluster of the task (see [`ClusterState`]).
    pub cluster_states: Option<String>,
    /// Source, at validation: the resolved clusters (the selector case) and what each takes
    /// along, in the order `clusterStates` follows, as one JSON array in a string. A string
    /// is a scalar, so ManifestWork status feedback carries it whole; a list would need the
    /// work agent's `RawFeedbackJsonString` gate (alpha, off by default) and 1 KiB at most.
    pub carry_over_json: Option<String>,
    /// Source, at validation, when the records are larger than one part
    /// ([`CARRY_OVER_PART_BYTES`]): they are in ConfigMaps next to the task
    /// ([`crate::names::carry_over_part`]), this many, of this digest, and `carryOverJson` is
    /// unset.
    pub carry_over_parts: Option<CarryOverParts>,
    /// Source, at validation: the KlusterletConfig API the hub serves (`multipleHubsConfig`,
    /// `bootstrapKubeConfigs`, or `None`).
    pub klusterlet_config_shape: Option<String>,
    /// Why the stage was refused as a whole rather than cluster by cluster: a reason of
    /// [`crate::names::reasons`] (`PlacementNotFound`: the Placement that selects the clusters
    /// does not exist).
    pub refusal: Option<String>,
    /// Target, while clusters register: when this hub learnt that each cluster was released
    /// (a bootstrap CSR filed before is never approved for it). Kept here, one write per wave
    /// of releases, rather than on each ManagedCluster.
    pub release_times: Option<ReleaseTimes>,
}

/// When a target learnt of each cluster's release, in whole seconds: the earliest, and each
/// cluster's offset from it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseTimes {
    /// The earliest release, RFC 3339.
    pub since: String,
    /// One entry per cluster of the task, in `clusterStates`' order, comma-separated: its
    /// release in seconds after `since`; empty while it is not released.
    pub offsets: String,
}

impl ReleaseTimes {
    /// `times` (one per cluster, `None`: not released), floored to whole seconds; `None` when
    /// no cluster has one.
    pub fn encode(times: &[Option<jiff::Timestamp>]) -> Option<Self> {
        let secs: Vec<Option<i64>> = times
            .iter()
            .map(|t| t.map(jiff::Timestamp::as_second))
            .collect();
        let since = secs.iter().flatten().min().copied()?;
        let offsets: Vec<String> = secs
            .iter()
            .map(|s| s.map(|s| (s - since).to_string()).unwrap_or_default())
            .collect();
        Some(Self {
            since: jiff::Timestamp::from_second(since).ok()?.to_string(),
            offsets: offsets.join(","),
        })
    }

    /// The times of `n` clusters (`None` where none is recorded, or what is recorded does not
    /// parse: as if not yet seen released).
    pub fn decode(&self, n: usize) -> Vec<Option<jiff::Timestamp>> {
        let since = self.since.parse::<jiff::Timestamp>().ok();
        Self::offsets(&self.offsets, n)
            .into_iter()
            .map(|offset| {
                since?
                    .checked_add(jiff::SignedDuration::from_secs(offset?))
                    .ok()
            })
            .collect()
    }

    /// The offsets of `n` clusters as `offsets` lists them (`None` where an entry is empty,
    /// missing or does not parse).
    pub fn offsets(offsets: &str, n: usize) -> Vec<Option<i64>> {
        let mut parsed: Vec<Option<i64>> = offsets
            .split(',')
            .take(n)
            .map(|o| o.parse::<i64>().ok())
            .collect();
        parsed.resize(n, None);
        parsed
    }
}

/// Most a cluster may carry over (its record as JSON).
pub const MAX_CARRY_OVER_PER_CLUSTER: usize = 16 * 1024;
/// Most a cluster may carry over with objects of `carryOver` kinds (its record as JSON): a
/// kubeconfig Secret and a ClusterDeployment are a few KiB each; still well within one part.
pub const MAX_CARRY_OVER_WITH_OBJECTS: usize = 128 * 1024;
/// Most a migration may carry over (every record, as JSON): the parts are held in memory by
/// the manager and the agents (3 000 clusters of 2 KiB each are 6 MiB).
pub const MAX_CARRY_OVER_TOTAL: usize = 32 * 1024 * 1024;
/// Most one part of the carry-over holds (records, as a JSON array). A part travels whole as
/// one status feedback value of a ManifestWork (its status must stay under etcd's 1.5 MiB)
/// and as one ConfigMap inside a ManifestWork (upstream caps a work's manifests at 500 KiB,
/// ocm `pkg/work/webhook/common/validator.go`); records that fit one part stay inline, in
/// the task's status and the migration's.
pub const CARRY_OVER_PART_BYTES: usize = 200 * 1024;
/// Most parts a carry-over travels in: [`MAX_CARRY_OVER_TOTAL`] in parts of
/// [`CARRY_OVER_PART_BYTES`].
pub const MAX_CARRY_OVER_PARTS: usize = MAX_CARRY_OVER_TOTAL.div_ceil(CARRY_OVER_PART_BYTES);
/// The ConfigMap keys of a carry-over part: the records (a JSON array), and the digest of
/// the whole carry-over the part belongs to.
pub const CARRY_OVER_RECORDS_KEY: &str = "records";
pub const CARRY_OVER_DIGEST_KEY: &str = "digest";

/// How many parts a carry-over travels in, and the digest of all of them
/// ([`carry_over_digest`]): a part of another digest is stale.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CarryOverParts {
    #[serde(deserialize_with = "crate::common::saturating::u32")]
    pub count: u32,
    pub digest: String,
}

impl CarryOverParts {
    /// How many parts there are to read, write or remove: `count`, at most
    /// [`MAX_CARRY_OVER_PARTS`] whoever wrote it.
    pub fn bounded(&self) -> usize {
        usize::try_from(self.count).map_or(MAX_CARRY_OVER_PARTS, |n| n.min(MAX_CARRY_OVER_PARTS))
    }
}

/// The carry-over records a source task reports (see `MigrationTaskStatus::carry_over_json`).
pub fn decode_carry_over(json: &str) -> Result<Vec<CarriedCluster>, serde_json::Error> {
    serde_json::from_str(json)
}

/// Whether `records`, split into `parts`, travel inline in a status: when they fit one part
/// and carry no objects (those may be Secrets, and never travel in a status).
pub fn carry_over_inline(records: &[CarriedCluster], parts: usize) -> bool {
    parts == 1 && records.iter().all(|r| r.objects.is_empty())
}

/// The records in parts of at most [`CARRY_OVER_PART_BYTES`] (a record larger than that, which
/// the per-cluster limit rules out, gets a part of its own), each a JSON array; at least one.
pub fn split_carry_over(records: &[CarriedCluster]) -> Result<Vec<String>, serde_json::Error> {
    let mut parts = Vec::new();
    let mut part = String::from("[");
    for record in records {
        let json = serde_json::to_string(record)?;
        if part.len() > 1 && part.len() + json.len() + 2 > CARRY_OVER_PART_BYTES {
            part.push(']');
            parts.push(std::mem::replace(&mut part, String::from("[")));
        }
        if part.len() > 1 {
            part.push(',');
        }
        part.push_str(&json);
    }
    part.push(']');
    parts.push(part);
    Ok(parts)
}

/// The records of all `parts`, in order.
pub fn join_carry_over<S: AsRef<str>>(
    parts: &[S],
) -> Result<Vec<CarriedCluster>, serde_json::Error> {
    let mut records = Vec::new();
    for part in parts {
        records.extend(decode_carry_over(part.as_ref())?);
    }
    Ok(records)
}

/// The record of cluster `name` among `records`: found by binary search when they are in
/// order of name, as a target agent keeps them ([`sort_carry_over`]), so that a target looking
/// up each of thousands of clusters at every reconcile does not scan the whole list for each;
/// by a scan of them all otherwise (the source reports them in the order of its clusters, which
/// the manager checks them against), so that the answer never depends on the order.
pub fn find_carried<'a>(records: &'a [CarriedCluster], name: &str) -> Option<&'a CarriedCluster> {
    match records.binary_search_by(|r| r.name.as_str().cmp(name)) {
        Ok(i) => records.get(i),
        Err(_) => records.iter().find(|r| r.name == name),
    }
}

/// Puts carry-over records in order of name ([`find_carried`]).
pub fn sort_carry_over(records: &mut [CarriedCluster]) {
    records.sort_by(|a, b| a.name.cmp(&b.name));
}

/// The digest of a carry-over's parts (SHA-256 over each part's length and bytes, hex).
pub fn carry_over_digest<S: AsRef<str>>(parts: &[S]) -> String {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    for part in parts {
        let part = part.as_ref();
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Default timeout of each stage but Registering.
pub const DEFAULT_STAGE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5 * 60);
/// Default timeout of the Registering stage.
pub const DEFAULT_REGISTERING_TIMEOUT: std::time::Duration =
    std::time::Duration::from_secs(12 * 60);

/// Why a ManagedClusterMigration spec cannot be carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Neither or both cluster selectors are set.
    #[error(
        "exactly one of includedManagedClusters, includedManagedClustersSelector or includedManagedClustersPlacementRef must be set, {0}"
    )]
    Selector(&'static str),
    /// Neither or both of `to` and `toPlacement` are set.
    #[error("exactly one of to and toPlacement must be set, {0}")]
    Target(&'static str),
    /// `from` and `to` name the same hub.
    #[error("from and to are both {0:?}: a migration needs two different hubs")]
    SameHub(String),
    /// A hub name is empty.
    #[error("{0} must name a hub")]
    EmptyHub(&'static str),
    /// A cluster is listed twice.
    #[error("cluster {0:?} is listed more than once in includedManagedClusters")]
    DuplicateCluster(String),
    /// A duration does not parse.
    #[error("{field} {value:?} is not a duration such as 90s, 5m or 1h30m")]
    Duration { field: &'static str, value: String },
    /// A duration is outside [`MIN_TIMEOUT`]..=[`MAX_TIMEOUT`].
    #[error("{field} {value:?} must be between 30s and 24h")]
    DurationRange { field: &'static str, value: String },
    /// A number is out of range.
    #[error("{0}")]
    Range(&'static str),
    /// The selector matches too much or cannot be evaluated.
    #[error("includedManagedClustersSelector: {0}")]
    BadSelector(String),
    /// A name is not a DNS-1123 label.
    #[error(
        "{field} {value:?} is not a valid name (lowercase letters, digits and '-', at most 63)"
    )]
    Name { field: &'static str, value: String },
    /// `carryOver` names a kind that cannot travel, or names it badly.
    #[error("carryOver: {0}")]
    CarryOver(String),
}

/// Shortest stage timeout: less could not see a single cluster through.
pub const MIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// Longest stage timeout (also what keeps deadlines far from any overflow).
pub const MAX_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
/// Most clusters one migration may name (what its status can list).
pub const MAX_CLUSTERS: usize = 3000;

/// A DNS-1123 subdomain (the name of most objects, a Placement's among them).
pub const DNS_SUBDOMAIN_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// Whether `name` is a DNS-1123 subdomain: dot-separated labels, at most 253 bytes.
pub fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_label)
}

/// Whether `name` is a DNS-1123 label (a ManagedCluster's name).
pub fn is_dns_label(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// The cluster selector's rules: it must select by something, by a selector's own rules
/// ([`check_label_selector`]).
fn check_selector(selector: &LabelSelector) -> Result<(), SpecError> {
    let labels = selector.match_labels.as_ref().map_or(0, |m| m.len());
    let expressions = selector.match_expressions.as_deref().unwrap_or(&[]);
    if labels == 0 && expressions.is_empty() {
        return Err(SpecError::BadSelector(
            "an empty selector would move every cluster of the hub; name them, or a label they share".into(),
        ));
    }
    check_label_selector(selector).map_err(SpecError::BadSelector)
}

pub use crate::labels::check_label_selector;

impl ManagedClusterMigrationSpec {
    /// Checks what the schema cannot (or what a server without CEL would let through).
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.from.is_empty() {
            return Err(SpecError::EmptyHub("from"));
        }
        match (self.to.is_empty(), &self.to_placement) {
            (true, None) => return Err(SpecError::Target("neither is set")),
            (false, Some(_)) => return Err(SpecError::Target("both are set")),
            (true, Some(p)) if !is_dns_subdomain(p) => {
                return Err(SpecError::Name {
                    field: "toPlacement",
                    value: p.clone(),
                });
            }
            _ => {}
        }
        for (field, value) in [("from", &self.from), ("to", &self.to)] {
            if (field != "to" || !value.is_empty()) && !is_dns_label(value) {
                return Err(SpecError::Name {
                    field,
                    value: value.clone(),
                });
            }
        }
        if self.from == self.to {
            return Err(SpecError::SameHub(self.from.clone()));
        }
        let set = [
            self.included_managed_clusters.is_some(),
            self.included_managed_clusters_selector.is_some(),
            self.included_managed_clusters_placement_ref.is_some(),
        ]
        .iter()
        .filter(|s| **s)
        .count();
        if set > 1 {
            return Err(SpecError::Selector("more than one is set"));
        }
        if let Some(placement) = &self.included_managed_clusters_placement_ref
            && !is_dns_subdomain(placement)
        {
            return Err(SpecError::Name {
                field: "includedManagedClustersPlacementRef",
                value: placement.clone(),
            });
        }
        match (
            &self.included_managed_clusters,
            &self.included_managed_clusters_selector,
        ) {
            (None, None) if self.included_managed_clusters_placement_ref.is_some() => {}
            (Some(_), Some(_)) => return Err(SpecError::Selector("more than one is set")),
            (None, None) => return Err(SpecError::Selector("none is set")),
            (Some(names), None) => {
                if names.is_empty() {
                    return Err(SpecError::Selector("includedManagedClusters is empty"));
                }
                if names.len() > MAX_CLUSTERS {
                    return Err(SpecError::Range(
                        "includedManagedClusters lists more than 3000 clusters; split the migration",
                    ));
                }
                let mut seen = std::collections::BTreeSet::new();
                for n in names {
                    if !is_dns_label(n) {
                        return Err(SpecError::Name {
                            field: "includedManagedClusters",
                            value: n.clone(),
                        });
                    }
                    if !seen.insert(n) {
                        return Err(SpecError::DuplicateCluster(n.clone()));
                    }
                }
            }
            (None, Some(selector)) => check_selector(selector)?,
        }
        self.stage_timeout()?;
        self.registering_timeout()?;
        crate::carried::check(self.carry_over.as_deref().unwrap_or_default())
            .map_err(SpecError::CarryOver)?;
        if self.max_concurrency.is_some_and(|c| c < 1) {
            return Err(SpecError::Range("maxConcurrency must be at least 1"));
        }
        if self.max_failures.is_some_and(|c| c < 0) {
            return Err(SpecError::Range("maxFailures must not be negative"));
        }
        Ok(())
    }

    /// Timeout of each stage but Registering.
    pub fn stage_timeout(&self) -> Result<std::time::Duration, SpecError> {
        optional_duration(
            "stageTimeout",
            self.stage_timeout.as_deref(),
            DEFAULT_STAGE_TIMEOUT,
        )
    }

    /// Timeout of the Registering stage.
    pub fn registering_timeout(&self) -> Result<std::time::Duration, SpecError> {
        optional_duration(
            "registeringTimeout",
            self.registering_timeout.as_deref(),
            DEFAULT_REGISTERING_TIMEOUT,
        )
    }

    /// The timeouts a migration of `clusters` clusters works with ([`Timeouts`]); an
    /// invalid value (refused at validation) counts as unset.
    pub fn timeouts(&self, clusters: usize) -> Timeouts {
        let n = u32::try_from(clusters).unwrap_or(u32::MAX);
        let stage = match &self.stage_timeout {
            Some(_) => self.stage_timeout().ok(),
            None => None,
        }
        .unwrap_or_else(|| DEFAULT_STAGE_TIMEOUT.saturating_add(STAGE_TIMEOUT_PER_CLUSTER * n))
        .min(MAX_TIMEOUT);
        let concurrency = self
            .max_concurrency
            .and_then(|c| u32::try_from(c).ok())
            .filter(|c| *c > 0)
            .unwrap_or(n.max(1));
        let wave_size = concurrency.min(n);
        let waves = n.div_ceil(concurrency).max(1);
        let wave = match &self.registering_timeout {
            Some(_) => self.registering_timeout().ok(),
            None => None,
        }
        .unwrap_or_else(|| {
            DEFAULT_REGISTERING_TIMEOUT.saturating_add(REGISTERING_TIMEOUT_PER_CLUSTER * wave_size)
        })
        .min(MAX_TIMEOUT);
        Timeouts {
            stage,
            wave,
            registering: wave.saturating_mul(waves).min(MAX_TIMEOUT),
        }
    }

    /// How long the migration's bootstrap token is valid: as long as clusters may bootstrap
    /// with it (Initializing, Deploying and Registering, each to its timeout, plus one stage
    /// timeout of margin), and at least the ten minutes Kubernetes' TokenRequest asks for. The
    /// token is revoked at the end anyway; its validity bounds what a leaked copy is worth if
    /// the revocation cannot happen.
    pub fn token_validity(&self, clusters: usize) -> std::time::Duration {
        let t = self.timeouts(clusters);
        (t.stage * 3 + t.registering).max(MIN_TOKEN_VALIDITY)
    }
}

/// What each cluster adds to the default stage timeout (a stage's work grows with the clusters:
/// 3 000 clusters get 10 minutes instead of 5).
pub const STAGE_TIMEOUT_PER_CLUSTER: std::time::Duration = std::time::Duration::from_millis(100);
/// What each cluster of a wave adds to the default Registering timeout of that wave (the
/// target's registration controllers accept, approve and sign one cluster after another).
pub const REGISTERING_TIMEOUT_PER_CLUSTER: std::time::Duration =
    std::time::Duration::from_millis(200);

/// The timeouts of one migration, scaled to its clusters so that a large move is never cut
/// off by a default meant for a few: a default grows with the clusters, a value the spec sets
/// is taken as it is, and Registering gets its timeout for each wave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Each stage but Registering: `stageTimeout`, else [`DEFAULT_STAGE_TIMEOUT`] plus
    /// [`STAGE_TIMEOUT_PER_CLUSTER`] for each cluster.
    pub stage: std::time::Duration,
    /// One wave of Registering (`maxConcurrency` clusters, all of them without it):
    /// `registeringTimeout`, else [`DEFAULT_REGISTERING_TIMEOUT`] plus
    /// [`REGISTERING_TIMEOUT_PER_CLUSTER`] for each cluster of the wave.
    pub wave: std::time::Duration,
    /// Registering as a whole, from the moment it starts: `wave` for each wave, at most
    /// [`MAX_TIMEOUT`].
    pub registering: std::time::Duration,
}

/// The shortest token a TokenRequest issues (Kubernetes' `expirationSeconds` minimum).
pub const MIN_TOKEN_VALIDITY: std::time::Duration = std::time::Duration::from_secs(600);

fn optional_duration(
    field: &'static str,
    value: Option<&str>,
    default: std::time::Duration,
) -> Result<std::time::Duration, SpecError> {
    let Some(v) = value else {
        return Ok(default);
    };
    let d = parse_duration(v).ok_or_else(|| {
        // Well formed but longer than any duration: out of range, as a user reads it.
        if v.starts_with(|c: char| c.is_ascii_digit())
            && v.chars()
                .all(|c| c.is_ascii_digit() || ".nsuµmh".contains(c))
        {
            SpecError::DurationRange {
                field,
                value: v.to_owned(),
            }
        } else {
            SpecError::Duration {
                field,
                value: v.to_owned(),
            }
        }
    })?;
    if !(MIN_TIMEOUT..=MAX_TIMEOUT).contains(&d) {
        return Err(SpecError::DurationRange {
            field,
            value: v.to_owned(),
        });
    }
    Ok(d)
}

/// A duration as a Go duration to whole seconds (`45s`, `5m`, `12m30s`, `1h0m5s`), as a
/// status message shows a timeout.
pub fn format_duration(d: std::time::Duration) -> String {
    let s = d.as_secs();
    let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
    match (h, m, s) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, 0, 0) => format!("{h}h"),
        (h, m, 0) => format!("{h}h{m}m"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

/// Parses a Go duration (`300ms`, `90s`, `5m`, `1h30m`, `1.5h`); `None` if malformed.
pub fn parse_duration(text: &str) -> Option<std::time::Duration> {
    if text == "0" {
        return Some(std::time::Duration::ZERO);
    }
    let mut rest = text;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let number: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * scale;
    }
    // Go's durations are int64 nanoseconds: anything longer is refused there, and here. The
    // bound is checked on the float itself: `u64::MAX as f64` is 2^64, which no `Duration`
    // holds.
    if !(0.0..=MAX_GO_DURATION_SECS).contains(&total) {
        return None;
    }
    std::time::Duration::try_from_secs_f64(total).ok()
}

/// The longest Go duration, in seconds: `math.MaxInt64` nanoseconds (about 292 years).
const MAX_GO_DURATION_SECS: f64 = i64::MAX as f64 / 1e9;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use std::collections::BTreeSet;

    use kube::CustomResourceExt;

    use super::*;

    fn spec() -> ManagedClusterMigrationSpec {
        ManagedClusterMigrationSpec {
            from: "hub1".into(),
            to: "hub2".into(),
            included_managed_clusters: Some(vec!["c1".into(), "c2".into()]),
            ..Default::default()
        }
    }

    #[test]
    fn a_large_tasks_subsets_go_as_marks_a_small_ones_as_lists_and_read_back_alike() {
        let names = |n: usize, len: usize| -> Vec<String> {
            (0..n).map(|i| format!("c{i:0>len$}")).collect()
        };
        let pick = |all: &[String], every: usize| -> Vec<String> {
            all.iter().step_by(every).cloned().collect()
        };
        // (clusters, marks expected)
        for (clusters, marks) in [(names(3, 1), false), (names(300, 12), true)] {
            let mut task = MigrationTaskSpec {
                clusters: clusters.clone(),
                ..Default::default()
            };
            let (released, rollback, detach) =
                (pick(&clusters, 1), pick(&clusters, 2), pick(&clusters, 3));
            task.set_subsets(released.clone(), rollback.clone(), detach.clone());
            assert_eq!(task.cluster_marks.is_some(), marks, "{}", clusters.len());
            assert_eq!(task.released.is_some(), !marks);
            fn set(v: &[String]) -> BTreeSet<&str> {
                v.iter().map(String::as_str).collect()
            }
            assert_eq!(task.released_names(), set(&released));
            assert_eq!(task.rollback_names(), set(&rollback));
            assert_eq!(task.detach_names(), set(&detach));
            // One character per cluster, however many are marked.
            if let Some(m) = &task.cluster_marks {
                assert_eq!(m.len(), clusters.len());
                assert!(m.starts_with("7135"), "{m}");
            }
            // Nothing asked: nothing read back, in either form.
            task.set_subsets(vec![], vec![], vec![]);
            assert!(task.released_names().is_empty() && task.detach_names().is_empty());
        }
        // Marks past the list, unknown characters and names not in the task mark nothing.
        let mut task = MigrationTaskSpec {
            clusters: vec!["a".into(), "b".into(), "c".into()],
            cluster_marks: Some("1z".into()),
            ..Default::default()
        };
        assert_eq!(task.released_names(), BTreeSet::from(["a"]));
        task.clusters = names(300, 12);
        task.set_subsets(vec!["elsewhere".into()], vec![], vec![]);
        assert!(task.released_names().is_empty());
    }

    #[test]
    fn each_cluster_of_a_task_has_the_names_of_its_own_bootstrap_identity() {
        let mut task = MigrationTaskSpec {
            clusters: vec!["c0".into(), "c1".into(), "c2".into()],
            bootstrap_secret_name: Some("bootstrap-k".into()),
            klusterlet_config_name: Some("migration-k".into()),
            bootstrap_user: Some("system:serviceaccount:msa:migration-k".into()),
            clusters_per_identity: Some(1),
            ..Default::default()
        };
        assert_eq!(
            task.bootstrap_secret_at(2).as_deref(),
            Some("bootstrap-k-2")
        );
        assert_eq!(
            task.klusterlet_config_at(1).as_deref(),
            Some("migration-k-1")
        );
        assert_eq!(
            task.bootstrap_user_at(0).as_deref(),
            Some("system:serviceaccount:msa:migration-k-0")
        );
        assert_eq!(
            task.bootstrap_secret_for("c1").as_deref(),
            Some("bootstrap-k-1")
        );
        assert_eq!(task.bootstrap_secret_for("other"), None);
        // Two clusters per identity.
        task.clusters_per_identity = Some(2);
        assert_eq!(
            (0..3).map(|i| task.identity_at(i)).collect::<Vec<_>>(),
            [Some(0), Some(0), Some(1)]
        );
        // A task of a manager that issues one identity: the names as they are.
        task.clusters_per_identity = None;
        assert_eq!(task.bootstrap_user_at(2), task.bootstrap_user);
        task.bootstrap_user = None;
        assert_eq!(task.bootstrap_user_at(0), None);
        // Users named one by one (pooled identities): the identity's own, none past the list.
        task.clusters_per_identity = Some(2);
        task.bootstrap_users = Some(vec!["u7".into(), "u3".into()]);
        assert_eq!(
            (0..5)
                .map(|i| task.bootstrap_user_at(i))
                .collect::<Vec<_>>(),
            [
                Some("u7".into()),
                Some("u7".into()),
                Some("u3".into()),
                Some("u3".into()),
                None
            ]
        );
    }

    #[test]
    fn crd_has_short_name_printer_columns_and_status() {
        let crd = ManagedClusterMigration::crd();
        assert_eq!(crd.spec.names.short_names, Some(vec!["mcm".to_owned()]));
        let version = &crd.spec.versions[0];
        let columns: Vec<_> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            columns,
            [
                "PHASE",
                "FROM",
                "TO",
                "TOTAL",
                "REGISTERED",
                "FAILED",
                "AGE"
            ]
        );
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
        assert_eq!(crd.spec.scope, "Namespaced");
    }

    #[test]
    fn crd_requires_exactly_one_selector() {
        let crd = ManagedClusterMigration::crd();
        let schema = serde_json::to_value(
            crd.spec.versions[0]
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap(),
        )
        .unwrap();
        let spec = &schema["properties"]["spec"];
        assert_eq!(
            spec["oneOf"],
            serde_json::json!([
                {"required": ["includedManagedClusters"]},
                {"required": ["includedManagedClustersSelector"]},
                {"required": ["includedManagedClustersPlacementRef"]}
            ])
        );
        assert_eq!(spec["required"], serde_json::json!(["from"]));
        assert_eq!(
            spec["anyOf"],
            serde_json::json!([{"required": ["to"]}, {"required": ["toPlacement"]}])
        );
        assert_eq!(
            spec["x-kubernetes-validations"][1]["rule"],
            "has(self.to) != has(self.toPlacement)"
        );
        assert!(
            spec["x-kubernetes-validations"][0]["rule"]
                .as_str()
                .unwrap()
                .contains("has(")
        );
    }

    #[test]
    fn every_cluster_state_has_a_code_of_its_own() {
        let codes: std::collections::BTreeSet<char> =
            ClusterState::TABLE.iter().map(|(_, c)| *c).collect();
        assert_eq!(codes.len(), ClusterState::TABLE.len());
        for (state, code) in ClusterState::TABLE {
            assert_eq!(ClusterState::from_code(code), state);
            assert_eq!(state.code(), code);
        }
        // Arrived clusters count as registered; a lost one as failed.
        let c = ClusterState::counts(&[
            ClusterState::Available,
            ClusterState::Moved,
            ClusterState::Lost,
        ]);
        assert_eq!((c.registered, c.failed), (2, 1));
    }

    #[test]
    fn timeouts_grow_with_the_clusters_and_registering_gets_one_per_wave() {
        let secs = std::time::Duration::from_secs;
        let m = |stage: Option<&str>, registering: Option<&str>, conc: Option<i32>| {
            ManagedClusterMigrationSpec {
                stage_timeout: stage.map(Into::into),
                registering_timeout: registering.map(Into::into),
                max_concurrency: conc,
                ..spec()
            }
        };
        // (spec, clusters, (stage, wave, registering))
        let cases = [
            // Defaults, for a few clusters: what they were before.
            (m(None, None, None), 0, (secs(300), secs(720), secs(720))),
            (m(None, None, None), 20, (secs(302), secs(724), secs(724))),
            // 3 000 clusters in one wave: 10 minutes a stage, 22 for Registering.
            (
                m(None, None, None),
                3000,
                (secs(600), secs(1320), secs(1320)),
            ),
            // In waves of 100: each wave's default grows with the wave, and there are 30.
            (
                m(None, None, Some(100)),
                3000,
                (secs(600), secs(740), secs(740 * 30)),
            ),
            // A wave wider than the migration is one wave of all its clusters.
            (
                m(None, None, Some(500)),
                20,
                (secs(302), secs(724), secs(724)),
            ),
            // Values the spec sets are taken as they are; Registering's is per wave.
            (
                m(Some("1m"), Some("2m"), None),
                3000,
                (secs(60), secs(120), secs(120)),
            ),
            (
                m(Some("1m"), Some("2m"), Some(1000)),
                3000,
                (secs(60), secs(120), secs(360)),
            ),
            // Whole migration bounded by the longest timeout there is.
            (
                m(None, Some("1h"), Some(1)),
                3000,
                (secs(600), secs(3600), MAX_TIMEOUT),
            ),
            // An invalid value (refused at validation) counts as unset.
            (
                m(Some("forever"), Some("-1s"), None),
                0,
                (secs(300), secs(720), secs(720)),
            ),
        ];
        for (spec, n, (stage, wave, registering)) in cases {
            let want = Timeouts {
                stage,
                wave,
                registering,
            };
            assert_eq!(spec.timeouts(n), want, "{spec:?} with {n} clusters");
        }
        // The token outlives them all.
        let big = m(None, None, Some(100));
        assert_eq!(big.token_validity(3000), secs(600 * 3 + 740 * 30));
    }

    #[test]
    fn durations_read_as_go_durations() {
        let secs = std::time::Duration::from_secs;
        for (d, text) in [
            (secs(0), "0s"),
            (secs(45), "45s"),
            (secs(300), "5m"),
            (secs(750), "12m30s"),
            (secs(3600), "1h"),
            (secs(3660), "1h1m"),
            (secs(3605), "1h0m5s"),
            (secs(86_400), "24h"),
        ] {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(text), Some(d), "{text}");
        }
    }

    #[test]
    fn a_large_carry_over_splits_into_parts_that_join_back_whole() {
        let record = |i: usize| CarriedCluster {
            name: format!("cluster-{i}"),
            labels: [("big".to_owned(), "x".repeat(10_000))].into(),
            ..Default::default()
        };
        // Nothing, or what fits one part: a single part, as the inline JSON always was.
        assert_eq!(split_carry_over(&[]).unwrap(), vec!["[]".to_owned()]);
        let few: Vec<CarriedCluster> = (0..3).map(record).collect();
        let one = split_carry_over(&few).unwrap();
        assert_eq!(one, vec![serde_json::to_string(&few).unwrap()]);
        // 100 records of 10 KB: parts of at most 200 KiB, in order, all records in them.
        let many: Vec<CarriedCluster> = (0..100).map(record).collect();
        let parts = split_carry_over(&many).unwrap();
        assert_eq!(
            parts.len(),
            5,
            "{:?}",
            parts.iter().map(String::len).collect::<Vec<_>>()
        );
        assert!(parts.iter().all(|p| p.len() <= CARRY_OVER_PART_BYTES));
        assert_eq!(join_carry_over(&parts).unwrap(), many);
        // The digest names the parts: any other split or content is another digest.
        let digest = carry_over_digest(&parts);
        assert_eq!(digest.len(), 64);
        assert_eq!(digest, carry_over_digest(&parts.clone()));
        let mut swapped = parts.clone();
        swapped.swap(0, 1);
        assert_ne!(carry_over_digest(&swapped), digest);
        assert_ne!(carry_over_digest(&parts[..4]), digest);
        assert!(join_carry_over(&["[{\"name\": 1}]"]).is_err());
    }

    #[test]
    fn a_carried_record_is_found_by_name_in_any_order() {
        let record = |name: &str| CarriedCluster {
            name: name.to_owned(),
            cluster_set: Some(format!("set-of-{name}")),
            ..Default::default()
        };
        // The clusters' own order ("cluster10" before "cluster2" by name only once sorted).
        let names = ["cluster2", "cluster10", "cluster1", "cluster33", "cluster3"];
        let listed: Vec<CarriedCluster> = names.iter().map(|n| record(n)).collect();
        let mut sorted = listed.clone();
        sort_carry_over(&mut sorted);
        assert_eq!(
            sorted.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            ["cluster1", "cluster10", "cluster2", "cluster3", "cluster33"]
        );
        for records in [&listed, &sorted] {
            for name in names {
                assert_eq!(
                    find_carried(records, name).map(|r| r.cluster_set.clone()),
                    Some(Some(format!("set-of-{name}"))),
                    "{name} in {:?}",
                    records.iter().map(|r| &r.name).collect::<Vec<_>>()
                );
            }
            assert_eq!(find_carried(records, "cluster4"), None);
            assert_eq!(find_carried(records, ""), None);
        }
        assert_eq!(find_carried(&[], "cluster1"), None);
    }

    #[test]
    fn the_token_lives_as_long_as_clusters_may_bootstrap() {
        let m = |stage: Option<&str>, registering: Option<&str>| ManagedClusterMigrationSpec {
            stage_timeout: stage.map(Into::into),
            registering_timeout: registering.map(Into::into),
            ..spec()
        };
        let min = |n: u64| std::time::Duration::from_secs(n * 60);
        // (stage, registering, validity)
        let cases = [
            (None, None, min(27)),
            (Some("30s"), Some("30s"), min(10)),
            (Some("10m"), Some("1h"), min(90)),
            (Some("24h"), Some("24h"), min(96 * 60)),
            // An invalid value (refused at validation) falls back to the default.
            (Some("forever"), None, min(27)),
        ];
        for (stage, registering, want) in cases {
            assert_eq!(
                m(stage, registering).token_validity(0),
                want,
                "{stage:?} {registering:?}"
            );
        }
    }

    #[test]
    fn the_installed_crd_freezes_the_spec_after_pending() {
        let entry = crate::crds::all()
            .into_iter()
            .find(|e| e.crd.spec.names.kind == "ManagedClusterMigration")
            .unwrap();
        let root = entry.crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .unwrap();
        let rules = root.x_kubernetes_validations.as_ref().unwrap();
        assert_eq!(rules.len(), 1);
        let rule = &rules[0].rule;
        for part in [
            "oldSelf.status.phase == 'Pending'",
            "self.spec.to == oldSelf.spec.to",
            "self.spec.toPlacement == oldSelf.spec.toPlacement",
            "self.spec.from == oldSelf.spec.from",
            "self.spec.includedManagedClusters == oldSelf.spec.includedManagedClusters",
        ] {
            assert!(rule.contains(part), "{part} missing from {rule}");
        }
        // Only bounded fields are compared (a rule without a cost bound fails the CRD).
        assert!(!rule.contains("Selector =="), "{rule}");
    }

    #[test]
    fn valid_spec_passes() {
        assert_eq!(spec().validate(), Ok(()));
        assert_eq!(spec().stage_timeout(), Ok(DEFAULT_STAGE_TIMEOUT));
        assert_eq!(
            spec().registering_timeout(),
            Ok(DEFAULT_REGISTERING_TIMEOUT)
        );
    }

    #[test]
    fn target_rules() {
        let mut placed = spec();
        placed.to = String::new();
        placed.to_placement = Some("most-room".into());
        assert_eq!(placed.validate(), Ok(()));
        // Not written when empty, so the schema's `has(self.to)` rule sees it absent.
        let v = serde_json::to_value(&placed).unwrap_or_default();
        assert!(v.get("to").is_none(), "{v}");
        let mut both = placed.clone();
        both.to = "hub2".into();
        assert_eq!(both.validate(), Err(SpecError::Target("both are set")));
        let mut neither = placed.clone();
        neither.to_placement = None;
        assert_eq!(neither.validate(), Err(SpecError::Target("neither is set")));
        placed.to_placement = Some("Most_Room".into());
        assert!(matches!(
            placed.validate(),
            Err(SpecError::Name {
                field: "toPlacement",
                ..
            })
        ));
    }

    #[test]
    fn selector_rules() {
        let mut both = spec();
        both.included_managed_clusters_selector = Some(LabelSelector::default());
        assert_eq!(
            both.validate(),
            Err(SpecError::Selector("more than one is set"))
        );
        let mut neither = spec();
        neither.included_managed_clusters = None;
        assert_eq!(neither.validate(), Err(SpecError::Selector("none is set")));
        // A Placement alone selects; with names too, or a name that is no object name, not.
        let mut placed = neither.clone();
        placed.included_managed_clusters_placement_ref = Some("east.edge".into());
        assert_eq!(placed.validate(), Ok(()));
        let mut placed_and_named = spec();
        placed_and_named.included_managed_clusters_placement_ref = Some("east".into());
        assert_eq!(
            placed_and_named.validate(),
            Err(SpecError::Selector("more than one is set"))
        );
        placed.included_managed_clusters_placement_ref = Some("East_1".into());
        assert!(matches!(placed.validate(), Err(SpecError::Name { .. })));
        let mut empty = spec();
        empty.included_managed_clusters = Some(vec![]);
        assert!(matches!(empty.validate(), Err(SpecError::Selector(_))));
        let mut dup = spec();
        dup.included_managed_clusters = Some(vec!["c1".into(), "c1".into()]);
        assert_eq!(
            dup.validate(),
            Err(SpecError::DuplicateCluster("c1".into()))
        );
    }

    #[test]
    fn hubs_must_differ() {
        let mut s = spec();
        s.to = "hub1".into();
        assert_eq!(s.validate(), Err(SpecError::SameHub("hub1".into())));
        assert!(
            s.validate()
                .unwrap_err()
                .to_string()
                .contains("two different hubs")
        );
    }

    #[test]
    fn bad_durations_and_ranges_are_refused() {
        let mut s = spec();
        s.stage_timeout = Some("five minutes".into());
        assert!(matches!(
            s.validate(),
            Err(SpecError::Duration {
                field: "stageTimeout",
                ..
            })
        ));
        let mut s = spec();
        s.max_concurrency = Some(0);
        assert!(matches!(s.validate(), Err(SpecError::Range(_))));
        let mut s = spec();
        s.registering_timeout = Some("20m".into());
        assert_eq!(s.registering_timeout(), Ok(Duration::from_secs(1200)));
        // Bounded: nothing near an overflow, nothing too short to move one cluster.
        for (value, ok) in [
            ("29s", false),
            ("30s", true),
            ("24h", true),
            ("24h1s", false),
            ("99999999999h", false),
        ] {
            let mut s = spec();
            s.stage_timeout = Some(value.into());
            assert_eq!(s.validate().is_ok(), ok, "{value}");
            if !ok {
                assert!(
                    matches!(
                        s.validate(),
                        Err(SpecError::DurationRange {
                            field: "stageTimeout",
                            ..
                        })
                    ),
                    "{value}"
                );
            }
        }
    }

    #[test]
    fn a_carry_over_travels_inline_only_in_one_part_and_without_objects() {
        let plain = CarriedCluster {
            name: "c1".into(),
            ..Default::default()
        };
        let with = CarriedCluster {
            objects: vec![crate::carried::CarriedObject::default()],
            ..plain.clone()
        };
        assert!(carry_over_inline(std::slice::from_ref(&plain), 1));
        assert!(!carry_over_inline(std::slice::from_ref(&plain), 2));
        assert!(!carry_over_inline(&[plain, with], 1));
    }

    #[test]
    fn carry_over_is_checked_with_the_spec() {
        use crate::carried::CarryOverResource;
        let with = |kinds: Vec<(&str, &str)>| {
            let mut s = spec();
            s.carry_over = Some(
                kinds
                    .into_iter()
                    .map(|(g, r)| CarryOverResource {
                        group: g.into(),
                        resource: r.into(),
                        label_selector: None,
                    })
                    .collect(),
            );
            s.validate()
        };
        assert_eq!(with(vec![]), Ok(()));
        assert_eq!(
            with(vec![
                ("", "secrets"),
                ("hive.openshift.io", "clusterdeployments")
            ]),
            Ok(())
        );
        let e = with(vec![("rbac.authorization.k8s.io", "clusterroles")]).unwrap_err();
        assert!(matches!(e, SpecError::CarryOver(_)), "{e}");
        assert!(
            e.to_string().starts_with(
                "carryOver: clusterroles.rbac.authorization.k8s.io cannot be carried over"
            ),
            "{e}"
        );
    }

    #[test]
    fn selectors_must_select_by_something_valid() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
        let with = |sel: LabelSelector| {
            let mut s = spec();
            s.included_managed_clusters = None;
            s.included_managed_clusters_selector = Some(sel);
            s.validate()
        };
        let expr = |op: &str, values: Option<Vec<&str>>| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "env".into(),
                operator: op.into(),
                values: values.map(|v| v.into_iter().map(String::from).collect()),
            }]),
            ..Default::default()
        };
        let cases = [
            ("empty", LabelSelector::default(), false),
            (
                "matchLabels",
                LabelSelector {
                    match_labels: Some([("env".to_owned(), "prod".to_owned())].into()),
                    ..Default::default()
                },
                true,
            ),
            ("In with values", expr("In", Some(vec!["prod"])), true),
            ("In without values", expr("In", None), false),
            ("NotIn, empty values", expr("NotIn", Some(vec![])), false),
            ("Exists", expr("Exists", None), true),
            ("Exists with values", expr("Exists", Some(vec!["x"])), false),
            ("unknown operator", expr("Like", Some(vec!["x"])), false),
        ];
        for (what, sel, ok) in cases {
            let r = with(sel);
            assert_eq!(r.is_ok(), ok, "{what}: {r:?}");
            if !ok {
                assert!(matches!(r, Err(SpecError::BadSelector(_))), "{what}: {r:?}");
            }
        }
    }

    #[test]
    fn names_are_dns_labels() {
        for (name, ok) in [
            ("cluster-1", true),
            ("Cluster1", false),
            ("-c", false),
            ("c-", false),
            ("", false),
            ("a.b", false),
        ] {
            assert_eq!(is_dns_label(name), ok, "{name:?}");
        }
        assert!(is_dns_label(&"a".repeat(63)));
        assert!(!is_dns_label(&"a".repeat(64)));
        let mut s = spec();
        s.included_managed_clusters = Some(vec!["c1".into(), "Bad_Name".into()]);
        assert!(matches!(s.validate(), Err(SpecError::Name { .. })));
        let mut s = spec();
        s.included_managed_clusters = Some((0..=MAX_CLUSTERS).map(|i| format!("c{i}")).collect());
        assert!(matches!(s.validate(), Err(SpecError::Range(_))));
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        for bad in ["", "5", "m", "5x", "-5m", "5m3"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn task_status_round_trips_with_lowercase_role() {
        let task = MigrationTaskSpec {
            migration: "m1".into(),
            role: MigrationRole::Target,
            peer_hub: "hub1".into(),
            clusters: vec!["c1".into()],
            stage: TaskStage::Registering,
            ..Default::default()
        };
        let json = serde_json::to_value(&task).unwrap();
        assert_eq!(json["role"], "target");
        assert_eq!(json["stage"], "Registering");
        assert!(
            json.get("bootstrapSecretName").is_none(),
            "None must not serialize as null"
        );
        let back: MigrationTaskSpec = serde_json::from_value(json).unwrap();
        assert_eq!(back, task);
    }

    #[test]
    fn release_times_round_trip_in_whole_seconds_and_stay_small() {
        let t = |s: &str| Some(s.parse::<jiff::Timestamp>().unwrap());
        let times = vec![
            t("2026-01-01T00:10:05.7Z"),
            None,
            t("2026-01-01T00:10:00Z"),
            t("2026-01-01T01:00:00Z"),
        ];
        let encoded = ReleaseTimes::encode(&times).unwrap();
        assert_eq!(encoded.since, "2026-01-01T00:10:00Z");
        assert_eq!(encoded.offsets, "5,,0,3000");
        assert_eq!(
            encoded.decode(4),
            vec![
                t("2026-01-01T00:10:05Z"),
                None,
                t("2026-01-01T00:10:00Z"),
                t("2026-01-01T01:00:00Z")
            ]
        );
        // Fewer entries than clusters (a shorter list): the rest not released; more: cut.
        assert_eq!(encoded.decode(6)[4..], [None, None]);
        assert_eq!(encoded.decode(2).len(), 2);
        assert_eq!(ReleaseTimes::encode(&[None, None]), None);
        // Garbage is as if not seen released (the agent records the time again, later).
        let bad = ReleaseTimes {
            since: "yesterday".into(),
            offsets: "1,x".into(),
        };
        assert_eq!(bad.decode(2), vec![None, None]);
        // 5 000 clusters released over an hour: about 25 KiB.
        let many: Vec<_> = (0..5000)
            .map(|i| {
                t("2026-01-01T00:00:00Z").map(|s| s + jiff::SignedDuration::from_secs(i % 3600))
            })
            .collect();
        let size = serde_json::to_string(&ReleaseTimes::encode(&many))
            .unwrap()
            .len();
        assert!(size < 25 * 1024, "{size}");
    }
}
