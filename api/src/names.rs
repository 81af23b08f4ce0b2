//! Well-known names: labels, annotations, finalizers, conditions and reasons, declared once.

/// Our API group.
pub const GROUP: &str = "migration.open-cluster-management.io";
/// Our API version.
pub const VERSION: &str = "v1alpha1";
/// The addon's name (ClusterManagementAddOn, ManagedClusterAddOn, lease, score).
pub const ADDON_NAME: &str = "cluster-migration";
/// Default namespace for addon agents on managed clusters.
pub const DEFAULT_ADDON_INSTALL_NAMESPACE: &str = "open-cluster-management-agent-addon";
/// Secret, in the agent's install namespace, holding the agent's hub kubeconfig.
pub fn hub_kubeconfig_secret(addon: &str) -> String {
    format!("{addon}-hub-kubeconfig")
}
/// Name of the `i`th deploy ManifestWork of an addon.
pub fn addon_deploy_work(addon: &str, index: usize) -> String {
    format!("addon-{addon}-deploy-{index}")
}
/// Name of the pre-delete ManifestWork of an addon.
pub fn addon_pre_delete_work(addon: &str) -> String {
    format!("addon-{addon}-pre-delete")
}
/// Hub user of an addon agent registered with the CSR signer.
pub fn addon_agent_user(cluster: &str, addon: &str, agent: &str) -> String {
    format!("system:open-cluster-management:cluster:{cluster}:addon:{addon}:agent:{agent}")
}
/// Hub groups of an addon agent: per cluster, per addon, and `system:authenticated`.
pub fn addon_agent_groups(cluster: &str, addon: &str) -> Vec<String> {
    vec![
        format!("system:open-cluster-management:cluster:{cluster}:addon:{addon}"),
        format!("system:open-cluster-management:addon:{addon}"),
        "system:authenticated".to_owned(),
    ]
}
/// The key every object derived from one migration is named and marked with:
/// `<name (at most 54 characters of it)>-<8 hex digits>`, the digits hashed from its namespace, name and uid. Two migrations
/// of one name in two namespaces (or a migration deleted and created again under its old name)
/// never share a work, task, token, role, KlusterletConfig or annotation value.
pub fn migration_key(namespace: &str, name: &str, uid: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{namespace}/{name}/{uid}").as_bytes());
    let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    // At most 63 characters, so the key fits a label value too (the hash keeps long names
    // apart).
    let short: String = name.chars().take(54).collect();
    format!("{short}-{hex}")
}
/// Name of the KlusterletConfig a migration (by its [`migration_key`]) renders on the source
/// hub.
pub fn migration_klusterlet_config(key: &str) -> String {
    format!("migration-{key}")
}
/// The KlusterletConfig a cluster selects while it moves: the migration's (`base`,
/// [`migration_klusterlet_config`]), or, for a cluster with one of its own, the one derived
/// from both: `<base>-<own>`, cut and suffixed with a hash where that would pass the 253
/// characters a name may have.
pub fn derived_klusterlet_config(base: &str, own: Option<&str>) -> String {
    const MAX_NAME: usize = 253;
    let Some(own) = own else {
        return base.to_owned();
    };
    let name = format!("{base}-{own}");
    if name.len() <= MAX_NAME {
        return name;
    }
    use sha2::Digest;
    let digest: String = sha2::Sha256::digest(name.as_bytes())
        .iter()
        .take(5)
        .map(|b| format!("{b:02x}"))
        .collect();
    let keep = MAX_NAME - digest.len() - 1;
    let cut = name
        .char_indices()
        .map(|(i, _)| i)
        .take_while(|i| *i <= keep)
        .last()
        .unwrap_or(0);
    format!("{}-{digest}", name[..cut].trim_end_matches('-'))
}
/// Secret (on the source hub) holding the target hub's bootstrap kubeconfig for a migration.
pub fn migration_bootstrap_secret(key: &str) -> String {
    format!("bootstrap-{key}")
}
/// At most this many bootstrap identities a migration issues: one per cluster for up to this
/// many clusters; beyond, consecutive clusters of its list share one
/// ([`clusters_per_identity`]). Each identity's Secret and KlusterletConfig ride in the source
/// hub's ManifestWork, which upstream caps at 500 KiB (ocm `pkg/work/webhook/common`,
/// `ManifestValidator`), and the manager reads each token once per delivery.
pub const MAX_BOOTSTRAP_IDENTITIES: usize = 64;
/// How many consecutive clusters of a migration's list of `clusters` share one bootstrap
/// identity: one each up to [`MAX_BOOTSTRAP_IDENTITIES`] clusters.
pub fn clusters_per_identity(clusters: usize) -> usize {
    clusters.div_ceil(MAX_BOOTSTRAP_IDENTITIES).max(1)
}
/// How many bootstrap identities a migration of `clusters` clusters issues.
pub fn bootstrap_identities(clusters: usize) -> usize {
    clusters.div_ceil(clusters_per_identity(clusters))
}
/// The name of bootstrap identity `identity`'s object (ManagedServiceAccount, bootstrap
/// Secret, KlusterletConfig) of a migration whose single-identity name is `base`.
pub fn of_identity(base: &str, identity: usize) -> String {
    format!("{base}-{identity}")
}
/// ManifestWork (in the source hub's namespace on the global hub) carrying a migration's
/// bootstrap secrets and KlusterletConfigs.
pub fn migration_bootstrap_work(key: &str) -> String {
    format!("migration-{key}-bootstrap")
}
/// ManifestWork (in a cluster's namespace on an ACM/MCE hub) in which the hub's import
/// controller applies the cluster's klusterlet (stolostron/managedcluster-import-controller
/// `pkg/controller/manifestwork/manifestwork_controller.go`, `<cluster>-klusterlet`).
pub fn import_work(cluster: &str) -> String {
    format!("{cluster}-klusterlet")
}
/// ManifestWork (in a cluster's namespace on a plain OCM hub) that configures the cluster's
/// Klusterlet for a migration.
pub fn migration_klusterlet_work(key: &str) -> String {
    format!("migration-{key}-klusterlet")
}
/// ManagedServiceAccount (in the target hub's namespace on the global hub) whose token was
/// the bootstrap identity of a migration of an older manager (`<this>-<i>` per identity);
/// identities now come from [`BOOTSTRAP_IDENTITY_POOL`]. Kept to revoke what those left.
pub fn migration_service_account(key: &str) -> String {
    format!("migration-{key}")
}
/// How many names the pool of bootstrap identities holds on each target hub. A migration's
/// ManagedServiceAccounts (one per bootstrap identity) take free names of this pool
/// ([`pooled_bootstrap_identity`]) and give them back when it ends. The managed-serviceaccount
/// agent names the token Secret it syncs to the global hub after the ManagedServiceAccount
/// (upstream managed-serviceaccount `pkg/addon/agent/controller/token.go`, `TokenSecretRef`
/// set to the ManagedServiceAccount's own name), so fixed names let the manager's `get` on
/// Secrets be limited to these names (`resourceNames`) instead of every Secret of the global
/// hub. Room for four migrations of [`MAX_BOOTSTRAP_IDENTITIES`] identities each to one target
/// at once; a migration that finds too few free names waits for them in Initializing.
pub const BOOTSTRAP_IDENTITY_POOL: usize = 256;
/// The `n`th name of the pool of bootstrap identities ([`BOOTSTRAP_IDENTITY_POOL`]).
pub fn pooled_bootstrap_identity(n: usize) -> String {
    format!("cluster-migration-bootstrap-{n}")
}
/// Where `name` sits in the pool of bootstrap identities (`None`: not one of its names).
pub fn pool_index(name: &str) -> Option<usize> {
    let n: usize = name
        .strip_prefix("cluster-migration-bootstrap-")?
        .parse()
        .ok()?;
    (n < BOOTSTRAP_IDENTITY_POOL && pooled_bootstrap_identity(n) == name).then_some(n)
}
/// ClusterRole and ClusterRoleBinding of a migration's bootstrap identity on the target hub.
pub fn migration_bootstrap_role(key: &str) -> String {
    format!("open-cluster-management:cluster-migration:bootstrap:{key}")
}
/// ClusterRole, ClusterRoleBinding (and RoleBindings) through which a migration lets the
/// addon agent of one of its hubs write what it must there (its `role` on that hub).
pub fn migration_agent_role(key: &str, role: crate::migration::MigrationRole) -> String {
    format!(
        "open-cluster-management:cluster-migration:agent:{key}:{}",
        role.as_str()
    )
}
/// ManifestWork names of a migration, on the source and the target hub's namespace.
pub fn migration_work(key: &str, role: crate::migration::MigrationRole) -> String {
    format!("migration-{key}-{}", role.as_str())
}

/// Work `index` (from 1) of a migration's bootstrap objects past the first
/// ([`migration_bootstrap_work`]): many bootstrap identities with large CA bundles do not fit
/// in one.
pub fn migration_bootstrap_part(key: &str, index: usize) -> String {
    format!("{}-{index}", migration_bootstrap_work(key))
}

/// Work `index` (from 1) of the grants of a migration's hub agent that do not fit in its task's
/// work ([`migration_work`]) beside the task.
pub fn migration_grants_work(
    key: &str,
    role: crate::migration::MigrationRole,
    index: usize,
) -> String {
    format!("migration-{key}-{}-grants-{index}", role.as_str())
}

/// Part `index` of a migration's carry-over on a hub: the ConfigMap in the agent's namespace
/// that holds it, and the ManifestWork that reads it back (source, read-only) or delivers it
/// (target).
pub fn carry_over_part(key: &str, role: crate::migration::MigrationRole, index: usize) -> String {
    format!("migration-{key}-{}-carry-{index}", role.as_str())
}

/// Signer of client certificates for the kube-apiserver.
pub const KUBE_APISERVER_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";
/// Klusterlet's bootstrap kubeconfig secret.
pub const BOOTSTRAP_HUB_KUBECONFIG: &str = "bootstrap-hub-kubeconfig";
/// The ServiceAccounts (namespace, name) a plain OCM hub's clusters bootstrap with, as
/// `clusteradm init` creates them and `clusteradm get token` issues their tokens
/// (open-cluster-management-io/clusteradm `pkg/config/env.go` `BootstrapSAName`, and the name
/// older releases used): the target's agent issues a moved cluster its own bootstrap
/// kubeconfig from the first that exists.
pub const HUB_BOOTSTRAP_SERVICE_ACCOUNTS: [(&str, &str); 2] = [
    ("open-cluster-management", "agent-registration-bootstrap"),
    ("open-cluster-management", "cluster-bootstrap"),
];
/// Validity of that bootstrap token: what `clusteradm get token` asks for
/// (clusteradm `pkg/helpers/client.go`, `GetBootstrapTokenFromSA`), so a moved cluster is left
/// as `clusteradm join` leaves one; it keeps its hub connection through its client
/// certificate, which the klusterlet renews.
pub const HUB_BOOTSTRAP_TOKEN_SECONDS: i64 = 3600;
/// Namespace of the klusterlet (and its bootstrap kubeconfig secrets) on a managed cluster.
pub const KLUSTERLET_NAMESPACE: &str = "open-cluster-management-agent";
/// Name of the Klusterlet every managed cluster has.
pub const KLUSTERLET: &str = "klusterlet";
/// How long a klusterlet keeps trying an unreachable hub before it selects again, in the
/// bootstrap kubeconfig lists a migration gives it (the CRDs' minimum).
pub const HUB_CONNECTION_TIMEOUT_SECONDS: i64 = 180;

/// Labels.
pub mod labels {
    /// Set (to "true") by ACM's import controller on a cluster's klusterlet works
    /// (`<cluster>-klusterlet`, `<cluster>-klusterlet-crds`; stolostron/
    /// managedcluster-import-controller `pkg/constants/constants.go`, `KlusterletWorksLabel`).
    pub const KLUSTERLET_WORKS: &str = "import.open-cluster-management.io/klusterlet-works";
    /// Names the addon an object belongs to (deploy works, hub RBAC).
    pub const ADDON_NAME: &str = "open-cluster-management.io/addon-name";
    /// Exclusive cluster-set membership of a ManagedCluster.
    pub const CLUSTER_SET: &str = "cluster.open-cluster-management.io/clusterset";
    /// PlacementDecision's placement.
    pub const PLACEMENT: &str = "cluster.open-cluster-management.io/placement";
    /// PlacementDecision's decision group index.
    pub const DECISION_GROUP_INDEX: &str =
        "cluster.open-cluster-management.io/decision-group-index";
    /// PlacementDecision's decision group name.
    pub const DECISION_GROUP_NAME: &str = "cluster.open-cluster-management.io/decision-group-name";
    /// Name of the cluster a namespace, CSR or RBAC object belongs to.
    pub const CLUSTER_NAME: &str = "open-cluster-management.io/cluster-name";
    /// Marks the hub's own cluster (ACM `local-cluster`).
    pub const LOCAL_CLUSTER: &str = "local-cluster";
    /// Objects our manager created, so only those are removed again.
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
    /// Value of [`MANAGED_BY`] for our manager.
    pub const MANAGED_BY_VALUE: &str = "cluster-migration-addon";
    /// The ManagedClusterMigration an object was rendered for.
    pub const MIGRATION: &str = "migration.open-cluster-management.io/migration";
    /// The namespace of that ManagedClusterMigration.
    pub const MIGRATION_NAMESPACE: &str =
        "migration.open-cluster-management.io/migration-namespace";
    /// The [`super::migration_key`] of the migration that holds a pooled bootstrap identity
    /// (its ManagedServiceAccount): the name alone does not say whose it is.
    pub const MIGRATION_KEY: &str = "migration.open-cluster-management.io/key";
    /// ManagedClusterMigration created by a `retry` request: the uid of the one it retries.
    pub const RETRY_OF: &str = "migration.open-cluster-management.io/retry-of";
}

/// Annotations.
pub mod annotations {
    /// ManagedCluster annotation selecting a KlusterletConfig.
    pub const KLUSTERLET_CONFIG: &str = "agent.open-cluster-management.io/klusterlet-config";
    /// On a Klusterlet (and on the ManifestWork that configures it): its registration settings
    /// before a migration changed them (JSON: `featureGates`, `bootstrapKubeConfigs`), so a
    /// rollback, or the target once the cluster arrived, can put them back.
    pub const KLUSTERLET_ORIGINAL: &str =
        "migration.open-cluster-management.io/klusterlet-original";
    /// Hash of the addon configs a deploy work was rendered from.
    pub const CONFIG_SPEC_HASH: &str = "open-cluster-management.io/config-spec-hash";
    /// On a migration's ManifestWork: hash of what the manager last applied, so that it
    /// applies again only what changed.
    pub const APPLIED_HASH: &str = "migration.open-cluster-management.io/applied-hash";
    /// Manifest that runs only while an addon is being deleted.
    pub const ADDON_PRE_DELETE: &str = "addon.open-cluster-management.io/addon-pre-delete";
    /// Who manages an addon's lifecycle: `self` (its own manager) or `addon-manager`.
    pub const ADDON_LIFECYCLE: &str = "addon.open-cluster-management.io/lifecycle";
    /// Value of [`ADDON_LIFECYCLE`] for an addon that manages itself.
    pub const ADDON_LIFECYCLE_SELF: &str = "self";
    /// ManagedCluster held back from migration until the annotation is removed.
    pub const BLOCK_MOVE: &str = "migration.open-cluster-management.io/block-move";
    /// ManagedCluster being migrated; the value names the migration.
    pub const MIGRATING: &str = "migration.open-cluster-management.io/migrating";
    /// ManagedCluster being migrated: the KlusterletConfig it selected before (empty: none),
    /// so rollback and cleanup put it back.
    pub const ORIGINAL_KLUSTERLET_CONFIG: &str =
        "migration.open-cluster-management.io/original-klusterlet-config";
    /// ManagedCluster being migrated that carried [`DISABLE_AUTO_IMPORT`] before (`"true"`),
    /// lifted while the migration configured it, put back on rollback.
    pub const ORIGINAL_DISABLE_AUTO_IMPORT: &str =
        "migration.open-cluster-management.io/original-disable-auto-import";
    /// ACM: a cluster whose import controller must not touch its klusterlet (its klusterlet
    /// works turn read-only, and auto-import skips it).
    pub const DISABLE_AUTO_IMPORT: &str = "import.open-cluster-management.io/disable-auto-import";
    /// ACM: how the klusterlet is deployed (`Default`, `Singleton`, `Hosted`, `SingletonHosted`).
    pub const KLUSTERLET_DEPLOY_MODE: &str =
        "import.open-cluster-management.io/klusterlet-deploy-mode";
    /// ACM, hosted mode: the managed cluster whose namespace holds the klusterlet works.
    pub const HOSTING_CLUSTER_NAME: &str = "import.open-cluster-management.io/hosting-cluster-name";
    /// ManagedCluster annotations the target hub's import controller reads, carried over
    /// (upstream stolostron/managedcluster-import-controller `pkg/constants` and
    /// `pkg/helpers/helpers.go`): the klusterlet's namespace, node selector and tolerations,
    /// deploy mode, and how the cluster was created. The migration's own never travel.
    pub const CARRIED_FOR_IMPORT: &[&str] = &[
        "import.open-cluster-management.io/klusterlet-namespace",
        "open-cluster-management/nodeSelector",
        "open-cluster-management/tolerations",
        KLUSTERLET_DEPLOY_MODE,
        "open-cluster-management/created-via",
    ];
    /// On a ManagedCluster pre-created on the target: the objects its cluster carries over
    /// (`carryOver`) are there; the value is the migration's key.
    pub const OBJECTS_CARRIED: &str = "migration.open-cluster-management.io/objects-carried";
    /// On a ManagedCluster on the source: the controllers of the objects it carries over were
    /// paused by the migration of this key.
    pub const OBJECTS_PAUSED: &str = "migration.open-cluster-management.io/objects-paused";
    /// On a ManagedCluster on the target: its copies of the objects it carried over were
    /// resumed once it registered there.
    pub const OBJECTS_RESUMED: &str = "migration.open-cluster-management.io/objects-resumed";
    /// ManagedCluster pre-created on the target by a migration; the value names it (so only
    /// what the migration created is removed on rollback).
    pub const PRE_CREATED: &str = "migration.open-cluster-management.io/pre-created-by";
    /// ManagedCluster on the target: when the target learnt that the source released it (the
    /// target approves only bootstrap CSRs asked for from then on). Written by older agents;
    /// the target task's status (`releaseTimes`) holds it now, and cleanup removes this one.
    pub const RELEASED_AT: &str = "migration.open-cluster-management.io/released-at";
    /// ManagedClusterAddOn: the agent version rendered into the deploy work now.
    pub const AGENT_VERSION: &str = "migration.open-cluster-management.io/agent-version";
    /// ManagedClusterAddOn: the agent version its config asks for.
    pub const AGENT_DESIRED_VERSION: &str =
        "migration.open-cluster-management.io/agent-desired-version";
    /// ManagedClusterAddOn: the last agent version that became Available on this hub.
    pub const AGENT_LAST_GOOD_VERSION: &str =
        "migration.open-cluster-management.io/agent-last-good-version";
    /// ManagedClusterAddOn: the version running before the current rollout started.
    pub const AGENT_PREVIOUS_VERSION: &str =
        "migration.open-cluster-management.io/agent-previous-version";
    /// ManagedClusterAddOn: a version that failed on this hub and was rolled back.
    pub const AGENT_FAILED_VERSION: &str =
        "migration.open-cluster-management.io/agent-failed-version";
    /// ManagedClusterAddOn: when the current version was first rendered (RFC 3339).
    pub const AGENT_ROLLOUT_STARTED: &str =
        "migration.open-cluster-management.io/agent-rollout-started";
    /// ManagedClusterAddOn: when the current version became Available (RFC 3339).
    pub const AGENT_ROLLOUT_COMPLETED: &str =
        "migration.open-cluster-management.io/agent-rollout-completed";
    /// ManagedClusterAddOn created from an install placement: which one (`<namespace>/<name>`).
    pub const INSTALL_PLACEMENT: &str = "migration.open-cluster-management.io/install-placement";
    /// ManagedClusterMigration: a user's request: `rollback` rolls back the clusters not yet
    /// registered on the target (before any was touched, the migration fails at once); `retry`
    /// (once it ended) creates migration `<name>-retry` for the clusters that stayed;
    /// `abandon` stops waiting for silent hubs and clusters: what is in flight is rolled back
    /// without waiting, the clusters not confirmed are reported `Unconfirmed`, the
    /// migration's objects are removed and it ends Failed.
    pub const REQUEST: &str = "migration.open-cluster-management.io/request";
    /// ManagedClusterAddOn: set to "true" to delete it without running the pre-delete hook.
    pub const SKIP_PRE_DELETE: &str = "migration.open-cluster-management.io/skip-pre-delete";
}

/// ManagedCluster taints.
pub mod taints {
    /// ManagedCluster in flight (on the source from the moment the migration marks it until it
    /// is detached or taken back; on the target from pre-creation until it is registered there).
    /// The value names the migration.
    pub const MIGRATING: &str = "migration.open-cluster-management.io/migrating";
    /// Its effect: placements choose no new cluster that carries it, and keep the ones they
    /// already chose (`NoSelect` would withdraw their workloads from a cluster that only moves;
    /// ocm api `cluster/v1/types.go` `TaintEffectNoSelectIfNew`).
    pub const MIGRATING_EFFECT: &str = "NoSelectIfNew";
    /// The hub's own taint of a cluster whose Available condition is False (ocm api
    /// `cluster/v1/types.go` `ManagedClusterTaintUnavailable`).
    pub const UNAVAILABLE: &str = "cluster.open-cluster-management.io/unavailable";
    /// The hub's own taint of a cluster without an Available condition, or with it Unknown
    /// (`ManagedClusterTaintUnreachable`).
    pub const UNREACHABLE: &str = "cluster.open-cluster-management.io/unreachable";
}

/// Finalizers.
pub mod finalizers {
    /// Work agent's finalizer on ManifestWork.
    pub const MANIFEST_WORK_CLEANUP: &str =
        "cluster.open-cluster-management.io/manifest-work-cleanup";
    /// Addon framework's pre-delete hook finalizer on ManagedClusterAddOn.
    pub const ADDON_PRE_DELETE: &str = "addon.open-cluster-management.io/addon-pre-delete";
    /// Our finalizer on ManagedClusterMigration: roll an in-flight migration back first.
    pub const MIGRATION_CLEANUP: &str = "migration.open-cluster-management.io/migration-cleanup";
}

/// A condition's status, as Kubernetes spells it (`metav1.ConditionStatus`; the addon never
/// writes `Unknown`).
pub mod condition_status {
    pub const TRUE: &str = "True";
    pub const FALSE: &str = "False";
}

/// Condition types.
pub mod conditions {
    /// ManifestWork: every manifest was applied.
    pub const WORK_APPLIED: &str = "Applied";
    /// ManifestWork and ManagedClusterAddOn: available.
    pub const AVAILABLE: &str = "Available";
    /// Progressing (ManifestWork, ManagedClusterAddOn).
    pub const PROGRESSING: &str = "Progressing";
    /// Degraded (ManifestWork, ManagedClusterAddOn).
    pub const DEGRADED: &str = "Degraded";

    /// ManagedCluster accepted by the hub.
    pub const HUB_ACCEPTED: &str = "HubAcceptedManagedCluster";
    /// ManagedCluster joined the hub.
    pub const JOINED: &str = "ManagedClusterJoined";
    /// ManagedCluster available (its lease is fresh).
    pub const CLUSTER_AVAILABLE: &str = "ManagedClusterConditionAvailable";

    /// ManagedClusterAddOn: deploy work applied.
    pub const MANIFEST_APPLIED: &str = "ManifestApplied";
    /// ManagedClusterAddOn: registrations set.
    pub const REGISTRATION_APPLIED: &str = "RegistrationApplied";
    /// ManagedClusterAddOn: configs resolved.
    pub const CONFIGURED: &str = "Configured";

    /// ManagedClusterMigration conditions, in phase order.
    pub const MIGRATION_STARTED: &str = "MigrationStarted";
    /// Validation passed.
    pub const RESOURCE_VALIDATED: &str = "ResourceValidated";
    /// Credentials, KlusterletConfig and RBAC prepared.
    pub const RESOURCE_INITIALIZED: &str = "ResourceInitialized";
    /// Works delivered to both hubs.
    pub const RESOURCE_DEPLOYED: &str = "ResourceDeployed";
    /// Clusters registered on the target.
    pub const CLUSTER_REGISTERED: &str = "ClusterRegistered";
    /// Rollback done.
    pub const RESOURCE_ROLLED_BACK: &str = "ResourceRolledBack";
    /// Temporary objects removed.
    pub const RESOURCE_CLEANED: &str = "ResourceCleaned";
    /// The spec is the one the migration started with (False: it was edited since, and the
    /// edit is ignored).
    pub const SPEC_ACCEPTED: &str = "SpecAccepted";
    /// A user's request on the migration (annotation [`super::annotations::REQUEST`]) was
    /// acted on (False: it is not known, or came too late to do anything).
    pub const REQUEST_ACCEPTED: &str = "RequestAccepted";
    /// The migration stopped waiting for its hubs and clusters (past its bound in Cleaning,
    /// or on a user's `abandon`): what they had not confirmed is reported, not waited for.
    pub const ABANDONED: &str = "Abandoned";
}

/// Condition reasons.
pub mod reasons {
    /// Addon lease renewed in time.
    pub const LEASE_UPDATED: &str = "ManagedClusterAddOnLeaseUpdated";
    /// Addon lease stale.
    pub const LEASE_UPDATE_STOPPED: &str = "ManagedClusterAddOnLeaseUpdateStopped";
    /// Addon lease missing.
    pub const LEASE_NOT_FOUND: &str = "ManagedClusterAddOnLeaseNotFound";
    /// Deploy work applied.
    pub const ADDON_MANIFEST_APPLIED: &str = "AddonManifestApplied";
    /// Deploy work could not be applied.
    pub const MANIFEST_WORK_APPLY_FAILED: &str = "ManifestWorkApplyFailed";
    /// Progressing: a change is rolling out.
    pub const PROGRESSING: &str = "Progressing";
    /// Progressing: done.
    pub const COMPLETED: &str = "Completed";
    /// Progressing: failed.
    pub const FAILED: &str = "Failed";

    /// Migration: waiting for something named in the message.
    pub const WAITING: &str = "Waiting";
    /// Migration: stage started.
    pub const STARTED: &str = "Started";
    /// Migration: stage failed with an error.
    pub const ERROR: &str = "Error";
    /// Migration: stage timed out.
    pub const TIMEOUT: &str = "Timeout";
    /// Migration: a hub is missing, unavailable or lacks the addon.
    pub const HUB_INVALID: &str = "HubInvalid";
    /// Migration: a cluster does not exist on the source.
    pub const CLUSTER_NOT_FOUND: &str = "ClusterNotFound";
    /// Migration: the Placement that selects the clusters does not exist on the source.
    pub const PLACEMENT_NOT_FOUND: &str = "PlacementNotFound";
    /// Migration: a hub does not serve a kind `carryOver` lists (or serves it cluster-scoped).
    pub const CARRY_OVER_NOT_SERVED: &str = "CarryOverNotServed";
    /// Migration: `spec.toPlacement` chose no single hub (none besides the source, several, or
    /// none in time).
    pub const TARGET_NOT_CHOSEN: &str = "TargetNotChosen";
    /// Migration: a cluster is in another active migration or already on the target.
    pub const CLUSTER_CONFLICT: &str = "ClusterConflict";
    /// Migration: the spec is malformed.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// Migration: stage completed.
    pub const DONE: &str = "Done";
    /// Migration (Cleaning): the hubs have done their part; the migration's objects are being
    /// removed.
    pub const REMOVING: &str = "Removing";
    /// Migration: the spec was edited after the migration left Pending.
    pub const SPEC_IMMUTABLE: &str = "SpecImmutable";
    /// Migration: a user asked for a rollback (annotation `request: rollback`); also the
    /// rollback's cause.
    pub const ROLLBACK_REQUESTED: &str = "RollbackRequested";
    /// Migration: a user asked to stop waiting (annotation `request: abandon`).
    pub const ABANDON_REQUESTED: &str = "AbandonRequested";
    /// Migration: Cleaning ran past its bound with clusters or hubs that never confirmed.
    pub const UNCONFIRMED: &str = "Unconfirmed";
    /// Migration: the request annotation names nothing known.
    pub const UNKNOWN_REQUEST: &str = "UnknownRequest";
    /// Migration: the request does not apply to the migration as it stands (nothing left to
    /// roll back; a retry of a migration not ended, or with nothing to retry).
    pub const REQUEST_NOT_APPLICABLE: &str = "RequestNotApplicable";
    /// Migration: a retry of it was created (annotation `request: retry`).
    pub const RETRY_CREATED: &str = "RetryCreated";
    /// Migration: the retry's name is taken by a migration that is not its retry.
    pub const RETRY_NAME_TAKEN: &str = "RetryNameTaken";
    /// Migration: the hubs or clusters are not in a ManagedClusterSet bound to the
    /// migration's namespace.
    pub const FORBIDDEN: &str = "Forbidden";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_klusterlet_config_names_fit_and_stay_apart() {
        assert_eq!(
            derived_klusterlet_config("migration-k", None),
            "migration-k"
        );
        assert_eq!(
            derived_klusterlet_config("migration-k", Some("own")),
            "migration-k-own"
        );
        let long = "x".repeat(300);
        let name = derived_klusterlet_config("migration-k", Some(&long));
        assert!(name.len() <= 253, "{}", name.len());
        assert_ne!(
            name,
            derived_klusterlet_config("migration-k", Some(&"y".repeat(300)))
        );
    }

    #[test]
    fn bootstrap_identities_are_one_per_cluster_up_to_the_cap() {
        // (clusters, clusters per identity, identities)
        for (n, per, ids) in [
            (0, 1, 0),
            (1, 1, 1),
            (64, 1, 64),
            (65, 2, 33),
            (128, 2, 64),
            (129, 3, 43),
            (3000, 47, 64),
        ] {
            assert_eq!(clusters_per_identity(n), per, "{n} clusters");
            assert_eq!(bootstrap_identities(n), ids, "{n} clusters");
            assert!(ids <= MAX_BOOTSTRAP_IDENTITIES);
        }
        assert_eq!(of_identity("migration-k", 3), "migration-k-3");
    }

    #[test]
    fn the_pool_of_bootstrap_identities_knows_its_own_names_only() {
        assert_eq!(pool_index(&pooled_bootstrap_identity(0)), Some(0));
        let last = BOOTSTRAP_IDENTITY_POOL - 1;
        assert_eq!(pool_index(&pooled_bootstrap_identity(last)), Some(last));
        for other in [
            pooled_bootstrap_identity(BOOTSTRAP_IDENTITY_POOL),
            "cluster-migration-bootstrap-07".into(),
            "cluster-migration-bootstrap-".into(),
            "cluster-migration-bootstrap-+1".into(),
            "migration-k-0".into(),
        ] {
            assert_eq!(pool_index(&other), None, "{other}");
        }
    }

    #[test]
    fn migration_keys_tell_namespaces_and_incarnations_apart() {
        let a = migration_key("team-a", "move", "uid-1");
        assert!(
            a.starts_with("move-") && a.len() == "move-".len() + 8,
            "{a}"
        );
        assert_eq!(a, migration_key("team-a", "move", "uid-1"), "stable");
        assert_ne!(a, migration_key("team-b", "move", "uid-1"), "namespace");
        assert_ne!(a, migration_key("team-a", "move", "uid-2"), "re-created");
        // "a/b-c" versus "a-b/c": the separator keeps them apart.
        assert_ne!(
            migration_key("a", "b-c", "u"),
            migration_key("a-b", "c", "u")
        );
        let long = "x".repeat(63);
        let k = migration_key("ns", &long, "u");
        assert_eq!(k.len(), 63, "fits a label value: {k}");
        assert_ne!(k, migration_key("ns", &format!("{}y", &long[..62]), "u"));
    }
}
