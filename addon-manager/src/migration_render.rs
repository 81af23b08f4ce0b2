//! Pure rendering of a migration's objects: the target's bootstrap kubeconfig, the source's
//! KlusterletConfig and bootstrap secret, the bootstrap identity's RBAC on the target, the
//! MigrationTasks, and the ManifestWorks `migration-<name>-source` / `-target` carrying them.
//! Templates live in `templates/migration-*.yaml.hbs`; nothing here does I/O.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use migration_api::carried::CarryOverResource;
use migration_api::migration::{
    BootstrapDelivery, CARRY_OVER_DIGEST_KEY, CARRY_OVER_RECORDS_KEY, MigrationRole,
    MigrationTaskSpec,
};
use migration_api::names::{self, labels};
use migration_api::ocm::addon::ProxyConfig;
use serde_json::{Value, json};

use crate::render::{RenderError, render_template, spec_hash};

const BOOTSTRAP_SECRET: &str =
    include_str!("../../templates/migration-bootstrap-kubeconfig.yaml.hbs");
const KLUSTERLET_CONFIG: &str =
    include_str!("../../templates/migration-klusterlet-config.yaml.hbs");
const BOOTSTRAP_RBAC: &str = include_str!("../../templates/migration-bootstrap-rbac.yaml.hbs");
const TASK: &str = include_str!("../../templates/migration-task.yaml.hbs");
const AGENT_RBAC: &str = include_str!("../../templates/migration-agent-rbac.yaml.hbs");
const RELEASE_RBAC: &str = include_str!("../../templates/migration-release-rbac.yaml.hbs");
const CARRY_RBAC: &str = include_str!("../../templates/migration-carry-rbac.yaml.hbs");

/// Namespace the source hub's import controller reads bootstrap kubeconfig secrets from.
pub const BOOTSTRAP_SECRETS_NAMESPACE: &str = "multicluster-engine";
/// What replaces secret data in a dry run's plan.
pub const REDACTED: &str = "<redacted>";

/// Which KlusterletConfig shape the source hub serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `spec.multipleHubsConfig` (current ACM/MCE).
    MultipleHubsConfig,
    /// `spec.bootstrapKubeConfigs` (older ACM/MCE).
    BootstrapKubeConfigs,
    /// No KlusterletConfig API (plain OCM): the source agent configures each cluster's
    /// Klusterlet through a ManifestWork of its own.
    ManifestWork,
}

impl Shape {
    /// The shape a source agent reported (`None` reported: a hub without the API).
    pub fn from_report(text: &str) -> Option<Self> {
        match text {
            "multipleHubsConfig" => Some(Self::MultipleHubsConfig),
            "bootstrapKubeConfigs" => Some(Self::BootstrapKubeConfigs),
            "None" => Some(Self::ManifestWork),
            _ => None,
        }
    }

    /// The shape a migration's status names (see [`Shape::delivery`]).
    pub fn from_delivery(text: &str) -> Self {
        match text {
            "ManifestWork" => Self::ManifestWork,
            t if t.ends_with("bootstrapKubeConfigs") => Self::BootstrapKubeConfigs,
            _ => Self::MultipleHubsConfig,
        }
    }

    /// How the agents deliver the bootstrap kubeconfig.
    pub fn task_delivery(self) -> BootstrapDelivery {
        match self {
            Self::ManifestWork => BootstrapDelivery::ManifestWork,
            Self::BootstrapKubeConfigs => BootstrapDelivery::LegacyKlusterletConfig,
            Self::MultipleHubsConfig => BootstrapDelivery::KlusterletConfig,
        }
    }

    /// How the delivery shows in the migration's status.
    pub fn delivery(self) -> &'static str {
        match self {
            Self::MultipleHubsConfig => "KlusterletConfig/multipleHubsConfig",
            Self::BootstrapKubeConfigs => "KlusterletConfig/bootstrapKubeConfigs",
            Self::ManifestWork => "ManifestWork",
        }
    }
}

/// The migration an object is rendered for.
#[derive(Clone, Debug)]
pub struct Migration {
    pub name: String,
    pub namespace: String,
    /// [`names::migration_key`]: what every derived object is named after.
    pub key: String,
    /// Validity of the bootstrap token (`ManagedClusterMigrationSpec::token_validity`).
    pub token_validity: std::time::Duration,
    pub from: String,
    pub to: String,
    /// How many clusters it resolved.
    pub clusters: usize,
    /// The pooled names its bootstrap identities hold on the target hub, in order
    /// (`status.bootstrapIdentities`; empty until Initializing claims them).
    pub identity_names: Vec<String>,
}

impl Migration {
    /// The hub that plays `role`.
    pub fn hub(&self, role: MigrationRole) -> &str {
        match role {
            MigrationRole::Source => &self.from,
            MigrationRole::Target => &self.to,
        }
    }

    /// Labels on everything rendered for this migration.
    pub fn labels(&self) -> Value {
        json!({
            labels::MIGRATION: self.name,
            labels::MIGRATION_NAMESPACE: self.namespace,
            labels::MANAGED_BY: labels::MANAGED_BY_VALUE,
        })
    }

    /// How many bootstrap identities it issues ([`names::bootstrap_identities`]): one per
    /// cluster, so that a holder of one cluster's bootstrap token can ask for no other
    /// cluster's certificate.
    pub fn identities(&self) -> usize {
        names::bootstrap_identities(self.clusters)
    }

    /// The ManagedServiceAccount `name` (a name of the pool, [`names::pooled_bootstrap_identity`])
    /// of one of its bootstrap identities, in the target hub's namespace on the global hub;
    /// marked with the migration's key, which tells whose the pooled name is.
    pub fn service_account(&self, name: &str) -> Value {
        let mut labels = self.labels();
        labels[labels::MIGRATION_KEY] = json!(self.key);
        json!({
            "apiVersion": "authentication.open-cluster-management.io/v1beta1",
            "kind": "ManagedServiceAccount",
            "metadata": {"name": name, "namespace": self.to, "labels": labels},
            // Rotation off: the token is needed only while clusters bootstrap, and its
            // validity covers that. (The managed-serviceaccount agent, upstream
            // `pkg/addon/agent/controller/token.go`, reads only `validity` and refreshes a
            // token near its expiry either way; the manager then renders the new one.)
            "spec": {"rotation": {"enabled": false, "validity": format!("{}s", self.token_validity.as_secs())}}
        })
    }
}

/// The target hub's bootstrap kubeconfig: its API server (from its ManagedCluster's
/// `managedClusterClientConfigs`), its CA (`ca_bundle`, base64 PEM) with an HTTPS proxy's CA
/// appended, the proxy URL when the target's addon config has one, and the token.
pub fn bootstrap_kubeconfig(
    server: &str,
    ca_bundle: Option<&str>,
    token: &str,
    proxy: Option<&ProxyConfig>,
) -> Result<String, RenderError> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut ca_pem = match ca_bundle.map(str::trim).filter(|s| !s.is_empty()) {
        Some(text) => String::from_utf8(b64.decode(text).map_err(|e| {
            RenderError::Config(format!("the target's caBundle is not base64: {e}"))
        })?)
        .map_err(|_| RenderError::Config("the target's caBundle is not a PEM bundle".into()))?,
        None => String::new(),
    };
    let non_empty = |s: Option<&String>| s.filter(|s| !s.trim().is_empty()).cloned();
    let https = server.starts_with("https://");
    let proxy_url = proxy.and_then(|p| {
        if https {
            non_empty(p.https_proxy.as_ref()).or_else(|| non_empty(p.http_proxy.as_ref()))
        } else {
            non_empty(p.http_proxy.as_ref())
        }
    });
    if let Some(p) = proxy
        .filter(|_| {
            proxy_url
                .as_deref()
                .is_some_and(|u| u.starts_with("https://"))
        })
        .and_then(|p| non_empty(p.ca_bundle.as_ref()))
    {
        let extra = String::from_utf8(b64.decode(p.trim()).map_err(|e| {
            RenderError::Config(format!(
                "the target's proxyConfig.caBundle is not base64: {e}"
            ))
        })?)
        .map_err(|_| {
            RenderError::Config("the target's proxyConfig.caBundle is not a PEM bundle".into())
        })?;
        if !ca_pem.is_empty() && !ca_pem.ends_with('\n') {
            ca_pem.push('\n');
        }
        ca_pem.push_str(&extra);
    }
    let mut cluster = json!({"server": server});
    if !ca_pem.is_empty() {
        cluster["certificate-authority-data"] = json!(b64.encode(&ca_pem));
    }
    if let Some(url) = proxy_url {
        cluster["proxy-url"] = json!(url);
    }
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "hub", "cluster": cluster}],
        "users": [{"name": "bootstrap", "user": {"token": token}}],
        "contexts": [{"name": "bootstrap", "context": {"cluster": "hub", "user": "bootstrap"}}],
        "current-context": "bootstrap",
    });
    serde_yaml::to_string(&config).map_err(|e| RenderError::Config(e.to_string()))
}

/// A kubeconfig without its users' credentials: what a hub's bootstrap kubeconfig says of
/// where and how to connect (server, CA, proxy), safe to put in a task's spec.
pub fn without_credentials(kubeconfig: &str) -> Result<String, RenderError> {
    let mut config: serde_yaml::Value =
        serde_yaml::from_str(kubeconfig).map_err(|e| RenderError::Config(e.to_string()))?;
    if let Some(users) = config
        .get_mut("users")
        .and_then(serde_yaml::Value::as_sequence_mut)
    {
        for u in users {
            if let Some(m) = u.as_mapping_mut() {
                m.insert("user".into(), serde_yaml::Mapping::new().into());
            }
        }
    }
    serde_yaml::to_string(&config).map_err(|e| RenderError::Config(e.to_string()))
}

/// The revision of a task spec (what the agent echoes back once it acted on it).
pub fn revision(task: &MigrationTaskSpec) -> String {
    let mut t = task.clone();
    t.revision = None;
    spec_hash(&t)[..16].to_owned()
}

fn task(m: &Migration, namespace: &str, mut spec: MigrationTaskSpec) -> Result<Value, RenderError> {
    spec.revision = Some(revision(&spec));
    let ctx = json!({
        "name": m.key, "namespace": namespace, "labels": m.labels(),
        "spec": serde_json::to_value(&spec).map_err(|e| RenderError::Config(e.to_string()))?,
    });
    Ok(render_template("migration-task", TASK, &ctx)?.remove(0))
}

fn bootstrap_secret(
    m: &Migration,
    namespace: &str,
    identity: usize,
    kubeconfig: &str,
) -> Result<Vec<Value>, RenderError> {
    render_template(
        "migration-bootstrap-kubeconfig",
        BOOTSTRAP_SECRET,
        &json!({
            "secretName": names::of_identity(&names::migration_bootstrap_secret(&m.key), identity),
            "secretNamespace": namespace,
            "labels": m.labels(),
            "kubeconfigBase64": base64::engine::general_purpose::STANDARD.encode(kubeconfig),
        }),
    )
}

/// The bootstrap objects on the source hub, one set per bootstrap identity (`kubeconfigs`, in
/// order): its secret and its KlusterletConfig (a plain OCM hub: the secrets alone, in the
/// task's namespace, for the agent to hand to each cluster). They travel in a ManifestWork of
/// their own ([`bootstrap_work`]), which does not change as clusters are released and goes as
/// soon as no cluster may switch any more.
pub fn bootstrap_manifests(
    m: &Migration,
    task_namespace: &str,
    kubeconfigs: &[String],
    shape: Shape,
) -> Result<Vec<Value>, RenderError> {
    let mut out = Vec::new();
    for (identity, kubeconfig) in kubeconfigs.iter().enumerate() {
        if shape == Shape::ManifestWork {
            out.extend(bootstrap_secret(m, task_namespace, identity, kubeconfig)?);
            continue;
        }
        out.extend(bootstrap_secret(
            m,
            BOOTSTRAP_SECRETS_NAMESPACE,
            identity,
            kubeconfig,
        )?);
        out.extend(render_template(
            "migration-klusterlet-config",
            KLUSTERLET_CONFIG,
            &json!({
                "name": names::of_identity(&names::migration_klusterlet_config(&m.key), identity),
                "labels": m.labels(),
                "legacyShape": shape == Shape::BootstrapKubeConfigs,
                "secretName": names::of_identity(&names::migration_bootstrap_secret(&m.key), identity),
                "hubConnectionTimeoutSeconds": names::HUB_CONNECTION_TIMEOUT_SECONDS,
            }),
        )?);
    }
    Ok(out)
}

/// The source hub's task.
pub fn source_manifests(
    m: &Migration,
    task_namespace: &str,
    spec: MigrationTaskSpec,
) -> Result<Vec<Value>, RenderError> {
    Ok(vec![task(m, task_namespace, spec)?])
}

/// The identities the target approves CSRs from, one per bootstrap identity in order
/// ([`MigrationTaskSpec::bootstrap_user_at`]): the ServiceAccounts behind the migration's
/// ManagedServiceAccounts, in `namespace` on the target hub.
pub fn bootstrap_users(m: &Migration, namespace: &str) -> Vec<String> {
    m.identity_names
        .iter()
        .map(|name| format!("system:serviceaccount:{namespace}:{name}"))
        .collect()
}

/// The target hub's objects: the bootstrap identity's RBAC (while clusters may register:
/// `Some(namespace of its ServiceAccount)`); with plain OCM delivery, the bootstrap secret in
/// the task's namespace (each cluster that arrives keeps it as its bootstrap kubeconfig); then
/// the task.
pub fn target_manifests(
    m: &Migration,
    task_namespace: &str,
    spec: MigrationTaskSpec,
    rbac_namespace: Option<&str>,
) -> Result<Vec<Value>, RenderError> {
    let mut out = Vec::new();
    if let Some(ns) = rbac_namespace {
        out.extend(render_template(
            "migration-bootstrap-rbac",
            BOOTSTRAP_RBAC,
            &json!({
                "roleName": names::migration_bootstrap_role(&m.key), "labels": m.labels(),
                "subjects": m.identity_names.iter().map(|name| json!({
                    "kind": "ServiceAccount", "name": name, "namespace": ns,
                })).collect::<Vec<_>>(),
            }),
        )?);
    }
    out.push(task(m, task_namespace, spec)?);
    Ok(out)
}

/// What one migration lets the addon agent of one of its hubs write there, for as long as the
/// hub's work carries it (see `templates/migration-agent-rbac.yaml.hbs`).
#[derive(Clone, Debug, Default)]
pub struct AgentGrants {
    /// The addon's name (the release role is named after it).
    pub addon: String,
    /// The agent's install namespace on the hub.
    pub agent_namespace: String,
    /// The migration's clusters.
    pub clusters: Vec<String>,
    /// Target: the cluster sets the clusters join.
    pub sets: Vec<String>,
    /// Target: the addons the clusters carry, by name.
    pub addons: Vec<String>,
    /// Source: the KlusterletConfigs it derives from the clusters' own.
    pub klusterlet_configs: Vec<String>,
    /// Namespaces of the clusters the hub lets go of now, whose works the agent releases.
    pub release: Vec<String>,
}

/// Bytes of cluster names one ClusterRole of an agent's grants lists (in each of its two or
/// three rules that name clusters): more clusters take more roles, so that no role, and no
/// work carrying one, grows with the migration past upstream's 500 KiB work limit.
pub const ROLE_NAMES_BYTES: usize = 48 * 1024;

/// `names` in consecutive groups of at most `bytes` of names each (quoted, with a comma); a
/// name longer than that alone.
pub fn chunks_by_bytes(names: &[String], bytes: usize) -> Vec<&[String]> {
    let mut chunks = Vec::new();
    let (mut start, mut size) = (0, 0);
    for (i, n) in names.iter().enumerate() {
        let len = n.len() + 3;
        if i > start && size + len > bytes {
            chunks.push(&names[start..i]);
            (start, size) = (i, 0);
        }
        size += len;
    }
    if start < names.len() {
        chunks.push(&names[start..]);
    }
    chunks
}

/// The agent's grants for `role` on its hub: nothing without clusters (an empty
/// `resourceNames` would allow every name). The clusters are named in one ClusterRole per
/// [`ROLE_NAMES_BYTES`] of names (the first named after the migration, the others suffixed
/// `-<i>`), what they carry and the KlusterletConfigs in the first; the RoleBindings that let
/// it release works come last, one per namespace.
pub fn agent_grants(
    m: &Migration,
    role: MigrationRole,
    g: &AgentGrants,
) -> Result<Vec<Value>, RenderError> {
    if g.clusters.is_empty() {
        return Ok(Vec::new());
    }
    let target = role == MigrationRole::Target;
    let base = names::migration_agent_role(&m.key, role);
    let mut out = Vec::new();
    for (i, clusters) in chunks_by_bytes(&g.clusters, ROLE_NAMES_BYTES)
        .into_iter()
        .enumerate()
    {
        let first = i == 0;
        let none = Vec::new();
        out.extend(render_template(
            "migration-agent-rbac",
            AGENT_RBAC,
            &json!({
                "roleName": if first { base.clone() } else { format!("{base}-{i}") },
                "labels": m.labels(),
                "clusters": clusters, "klusterletWork": names::migration_klusterlet_work(&m.key),
                "target": target,
                "sets": if target && first { &g.sets } else { &none },
                "addons": if target && first { &g.addons } else { &none },
                "klusterletConfigs": if !target && first { &g.klusterlet_configs } else { &none },
                "agentName": crate::render::AGENT_NAME, "agentNamespace": g.agent_namespace,
            }),
        )?);
    }
    out.extend(render_template(
        "migration-release-rbac",
        RELEASE_RBAC,
        &json!({
            "roleName": base, "labels": m.labels(),
            "agentName": crate::render::AGENT_NAME, "agentNamespace": g.agent_namespace,
            "releaseNamespaces": g.release,
            "releaseRole": crate::render::release_works_role(&g.addon),
        }),
    )?);
    Ok(out)
}

/// Where the agent may act on the kinds the clusters carry over ([`carry_grants`]).
#[derive(Clone, Copy, Debug)]
pub enum CarryScope<'a> {
    /// The source validating: read, cluster-wide (which namespaces is not known yet).
    Validating,
    /// Then: in these clusters' namespaces alone.
    Clusters(&'a [String]),
}

/// What the agent of `role`'s hub may do with the kinds the clusters carry over
/// (`templates/migration-carry-rbac.yaml.hbs`): while validating, the source reads them,
/// cluster-wide; then, in each of the clusters' namespaces alone, the source reads and pauses
/// them, the target reads, creates, resumes and removes its copies. Nothing without kinds, for
/// a target validating, or without clusters.
pub fn carry_grants(
    m: &Migration,
    role: MigrationRole,
    kinds: &[CarryOverResource],
    scope: CarryScope<'_>,
    agent_namespace: &str,
) -> Result<Vec<Value>, RenderError> {
    let target = role == MigrationRole::Target;
    let (everywhere, clusters) = match scope {
        CarryScope::Validating if !target => (true, &[][..]),
        CarryScope::Clusters(c) if !c.is_empty() => (false, c),
        _ => return Ok(Vec::new()),
    };
    if kinds.is_empty() {
        return Ok(Vec::new());
    }
    let verbs: &[&str] = match (target, everywhere) {
        (false, true) => &["get", "list"],
        (false, false) => &["get", "list", "patch"],
        (true, _) => &["get", "list", "create", "patch", "delete"],
    };
    render_template(
        "migration-carry-rbac",
        CARRY_RBAC,
        &json!({
            "roleName": format!("{}:carry", names::migration_agent_role(&m.key, role)),
            "labels": m.labels(), "kinds": kinds, "verbs": verbs,
            "everywhere": everywhere, "namespaces": clusters,
            "agentName": crate::render::AGENT_NAME, "agentNamespace": agent_namespace,
        }),
    )
}

/// The resource a task's manifest config names (MigrationTask's plural).
const TASK_RESOURCE: &str = "migrationtasks";

/// How the work agent applies and reads back a task.
///
/// Feedback rules reading a task's status back: scalars only (the carry-over is one JSON
/// string), so nothing depends on the work agent's `RawFeedbackJsonString` gate. Watched, not
/// polled: the work agent reports each status write of the task when it happens (ocm v1.2+,
/// `feedbackScrapeType: Watch`; it may list and watch MigrationTasks through the addon's
/// aggregate-to-work role), where a poll waits for its next status sync (10 to 19 s with
/// upstream's defaults) at every step of the migration. An older work agent polls.
///
/// With `server_side_apply`, the task is applied server-side under the manager's field manager
/// ([`crate::addon::FIELD_MANAGER`], forced). Upstream's default `Update` strategy reads the
/// object and replaces it at the version it read (ocm `pkg/work/spoke/apply/update_apply.go`),
/// so each status write of the hub's agent between that read and that write fails the apply
/// with a conflict and it is retried; an agent reporting progress every second starves a new
/// spec on a hub whose API server answers that pair slower than that. A server-side apply names
/// no version (`server_side_apply.go`), and the agent writes only the status, which it does not
/// touch. See [`task_server_side_apply`] for when it is used.
pub fn task_config(m: &Migration, task_namespace: &str, server_side_apply: bool) -> Value {
    let mut config = json!({
        "resourceIdentifier": {"group": names::GROUP, "resource": TASK_RESOURCE, "name": m.key, "namespace": task_namespace},
        "feedbackRules": [migration_api::task_report::feedback_rule()],
        "feedbackScrapeType": "Watch"
    });
    if server_side_apply {
        config["updateStrategy"] = json!({
            "type": "ServerSideApply",
            "serverSideApply": {"fieldManager": crate::addon::FIELD_MANAGER, "force": true}
        });
    }
    config
}

/// Whether a hub's task is to be applied server-side ([`task_config`]), given its work as
/// observed: always for a new work; for one that exists, as it already is. A task first
/// applied with `Update` (by a manager from before this rule) has its fields owned by that
/// update, and a server-side apply would never remove those it stops listing (a list of
/// releases or rollbacks emptied, say), so such a task keeps `Update` until its work goes.
pub fn task_server_side_apply(existing: Option<&migration_api::ocm::work::ManifestWork>) -> bool {
    use migration_api::ocm::work::UpdateStrategyType;
    existing.is_none_or(|w| {
        w.spec.manifest_configs.iter().flatten().any(|c| {
            c.resource_identifier.resource == TASK_RESOURCE
                && c.update_strategy.as_ref().map(|u| u.type_)
                    == Some(UpdateStrategyType::ServerSideApply)
        })
    })
}

/// The ManifestWork carrying one hub's part of the migration.
pub fn work(m: &Migration, role: MigrationRole, manifests: Vec<Value>, feedback: Value) -> Value {
    let hub = m.hub(role);
    json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": names::migration_work(&m.key, role), "namespace": hub, "labels": m.labels()},
        "spec": {
            "workload": {"manifests": manifests},
            "deleteOption": {"propagationPolicy": "Foreground"},
            "manifestConfigs": [feedback],
        }
    })
}

/// ManifestWork `index` (from 1) carrying grants of `role`'s agent that do not fit beside its
/// task ([`work`]).
pub fn grants_work(
    m: &Migration,
    role: MigrationRole,
    index: usize,
    manifests: Vec<Value>,
) -> Value {
    json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": names::migration_grants_work(&m.key, role, index), "namespace": m.hub(role), "labels": m.labels()},
        "spec": {
            "workload": {"manifests": manifests},
            "deleteOption": {"propagationPolicy": "Foreground"},
        }
    })
}

/// How many works a hub's work agent applies, and removes, at once: upstream's
/// `--workload-agent-workers` (default 10, ocm `pkg/work/spoke/options.go`) for each of its
/// apply and finalize controllers, while the manifests of one work go one after another.
pub const WORKS_AT_ONCE: usize = 10;

/// The ManifestWorks carrying the source hub's bootstrap objects ([`bootstrap_manifests`] of
/// `identities` identities): whole identities spread over up to [`WORKS_AT_ONCE`] works, so the
/// work agent applies and removes them side by side, each split further while it does not fit
/// in [`crate::render::WORK_SIZE_LIMIT`] ([`names::migration_bootstrap_part`] past the first).
pub fn bootstrap_works(m: &Migration, manifests: Vec<Value>, identities: usize) -> Vec<Value> {
    let per_identity = manifests.len().div_ceil(identities.max(1)).max(1);
    let chunk = per_identity * identities.div_ceil(WORKS_AT_ONCE).max(1);
    manifests
        .chunks(chunk)
        .flat_map(|c| crate::render::split_manifests(c.to_vec(), crate::render::WORK_SIZE_LIMIT))
        .enumerate()
        .map(|(i, part)| {
            let mut work = bootstrap_work(m, part);
            if i > 0 {
                work["metadata"]["name"] = json!(names::migration_bootstrap_part(&m.key, i));
            }
            work
        })
        .collect()
}

/// The ManifestWork carrying the source hub's bootstrap objects ([`bootstrap_manifests`]).
///
/// Its KlusterletConfigs are watched, not polled ([`watched_klusterlet_configs`]): the hub's
/// work agent reads every manifest of a work at each status sync, with a GET unless a watch of
/// its resource has synced (ocm `pkg/work/spoke/objectreader/reader.go`, v1.2+; older agents
/// poll). Its Secrets are polled still: a watch of them would cache every Secret of the
/// namespace they are in, the import controller's among them, in the work agent.
pub fn bootstrap_work(m: &Migration, manifests: Vec<Value>) -> Value {
    let configs = watched_klusterlet_configs(&manifests);
    let mut spec = json!({
        "workload": {"manifests": manifests},
        "deleteOption": {"propagationPolicy": "Foreground"},
    });
    if !configs.is_empty() {
        spec["manifestConfigs"] = Value::Array(configs);
    }
    json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": names::migration_bootstrap_work(&m.key), "namespace": m.from, "labels": m.labels()},
        "spec": spec,
    })
}

/// A `feedbackScrapeType: Watch` config, no feedback rules, for each KlusterletConfig among
/// `manifests`: the work agent then reads them at each status sync from one watch of the
/// (cluster-scoped) KlusterletConfigs, which it may list and watch through the addon's
/// aggregate-to-work role, instead of a GET of each (at 3 000 clusters, 600 KlusterletConfigs:
/// 60 GETs a second at upstream's 10 s status sync, over its 50-a-second client limit).
pub fn watched_klusterlet_configs(manifests: &[Value]) -> Vec<Value> {
    use kube::Resource;
    use migration_api::ocm::config::KlusterletConfig;
    let (group, resource) = (KlusterletConfig::group(&()), KlusterletConfig::plural(&()));
    manifests
        .iter()
        .filter(|o| o["kind"] == "KlusterletConfig")
        .filter_map(|o| o["metadata"]["name"].as_str())
        .map(|name| {
            json!({
                "resourceIdentifier": {"group": group, "resource": resource, "name": name},
                "feedbackScrapeType": "Watch"
            })
        })
        .collect()
}

/// The read-only ManifestWork that reads part `index` of the source's carry-over back (the
/// Secret the source agent wrote in `agent_namespace`; its values come back base64-encoded, as
/// the Secret holds them): the work agent never writes it
/// (upstream `pkg/work/spoke/apply/read_only_apply.go`) and reports its records and digest as
/// status feedback.
pub fn carry_read_work(m: &Migration, agent_namespace: &str, index: usize) -> Value {
    let name = names::carry_over_part(&m.key, MigrationRole::Source, index);
    json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": name, "namespace": m.from, "labels": m.labels()},
        "spec": {
            "workload": {"manifests": [{
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": agent_namespace}
            }]},
            "manifestConfigs": [{
                "resourceIdentifier": {"group": "", "resource": "secrets", "name": name, "namespace": agent_namespace},
                "updateStrategy": {"type": "ReadOnly"},
                "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [
                    {"name": CARRY_OVER_RECORDS_KEY, "path": format!(".data.{CARRY_OVER_RECORDS_KEY}")},
                    {"name": CARRY_OVER_DIGEST_KEY, "path": format!(".data.{CARRY_OVER_DIGEST_KEY}")}
                ]}]
            }]
        }
    })
}

/// The ManifestWork that delivers part `index` of the carry-over to the target (`records`, of
/// the whole's `digest`) as a Secret in its agent's namespace.
pub fn carry_work(
    m: &Migration,
    agent_namespace: &str,
    index: usize,
    records: &str,
    digest: &str,
) -> Value {
    let name = names::carry_over_part(&m.key, MigrationRole::Target, index);
    json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": name, "namespace": m.to, "labels": m.labels()},
        "spec": {
            "workload": {"manifests": [{
                "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name, "namespace": agent_namespace, "labels": {
                    labels::MANAGED_BY: labels::MANAGED_BY_VALUE
                }},
                "data": {
                    CARRY_OVER_RECORDS_KEY: B64.encode(records),
                    CARRY_OVER_DIGEST_KEY: B64.encode(digest)
                }
            }]},
            "deleteOption": {"propagationPolicy": "Foreground"},
        }
    })
}

/// A copy of `object` fit for a plan: Secret data and kubeconfig tokens replaced.
pub fn redact(object: &Value) -> Value {
    let mut out = object.clone();
    if out["kind"] == "Secret" {
        for key in ["data", "stringData"] {
            if let Some(map) = out.get_mut(key).and_then(Value::as_object_mut) {
                for v in map.values_mut() {
                    *v = json!(REDACTED);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
