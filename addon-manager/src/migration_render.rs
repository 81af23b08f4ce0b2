//! Pure rendering of a migration's objects: the target's bootstrap kubeconfig, the source's
//! KlusterletConfig and bootstrap secret, the bootstrap identity's RBAC on the target, the
//! MigrationTasks, and the ManifestWorks `migration-<name>-source` / `-target` carrying them.
//! Templates live in `templates/migration-*.yaml.hbs`; nothing here does I/O.

use base64::Engine;
use migration_api::migration::{BootstrapDelivery, MigrationRole, MigrationTaskSpec};
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

    /// The ManagedServiceAccount of the migration's bootstrap identity, in the target hub's
    /// namespace on the global hub.
    pub fn service_account(&self) -> Value {
        json!({
            "apiVersion": "authentication.open-cluster-management.io/v1beta1",
            "kind": "ManagedServiceAccount",
            "metadata": {"name": names::migration_service_account(&self.key), "namespace": self.to, "labels": self.labels()},
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
    kubeconfig: &str,
) -> Result<Vec<Value>, RenderError> {
    render_template(
        "migration-bootstrap-kubeconfig",
        BOOTSTRAP_SECRET,
        &json!({
            "secretName": names::migration_bootstrap_secret(&m.key), "secretNamespace": namespace,
            "labels": m.labels(),
            "kubeconfigBase64": base64::engine::general_purpose::STANDARD.encode(kubeconfig),
        }),
    )
}

/// The source hub's objects once there is a bootstrap kubeconfig (`None` while validating):
/// the bootstrap secret and the KlusterletConfig (a plain OCM hub: the secret alone, in the
/// task's namespace, for the agent to hand to each cluster); then the task.
pub fn source_manifests(
    m: &Migration,
    task_namespace: &str,
    spec: MigrationTaskSpec,
    bootstrap: Option<(&str, Shape)>,
) -> Result<Vec<Value>, RenderError> {
    let mut out = Vec::new();
    if let Some((kubeconfig, Shape::ManifestWork)) = bootstrap {
        out.extend(bootstrap_secret(m, task_namespace, kubeconfig)?);
    } else if let Some((kubeconfig, shape)) = bootstrap {
        let secret = names::migration_bootstrap_secret(&m.key);
        out.extend(bootstrap_secret(
            m,
            BOOTSTRAP_SECRETS_NAMESPACE,
            kubeconfig,
        )?);
        out.extend(render_template(
            "migration-klusterlet-config",
            KLUSTERLET_CONFIG,
            &json!({
                "name": names::migration_klusterlet_config(&m.key), "labels": m.labels(),
                "legacyShape": shape == Shape::BootstrapKubeConfigs,
                "secretName": secret,
                "hubConnectionTimeoutSeconds": names::HUB_CONNECTION_TIMEOUT_SECONDS,
            }),
        )?);
    }
    out.push(task(m, task_namespace, spec)?);
    Ok(out)
}

/// The identity the target approves CSRs from: the ServiceAccount behind the migration's
/// ManagedServiceAccount, in `namespace` on the target hub.
pub fn bootstrap_user(m: &Migration, namespace: &str) -> String {
    format!(
        "system:serviceaccount:{namespace}:{}",
        names::migration_service_account(&m.key)
    )
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
                "serviceAccount": names::migration_service_account(&m.key),
                "serviceAccountNamespace": ns,
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

/// The agent's grants for `role` on its hub: nothing without clusters (an empty
/// `resourceNames` would allow every name).
pub fn agent_grants(
    m: &Migration,
    role: MigrationRole,
    g: &AgentGrants,
) -> Result<Vec<Value>, RenderError> {
    if g.clusters.is_empty() {
        return Ok(Vec::new());
    }
    let target = role == MigrationRole::Target;
    render_template(
        "migration-agent-rbac",
        AGENT_RBAC,
        &json!({
            "roleName": names::migration_agent_role(&m.key, role), "labels": m.labels(),
            "clusters": g.clusters, "klusterletWork": names::migration_klusterlet_work(&m.key),
            "target": target,
            "sets": if target { g.sets.clone() } else { Vec::new() },
            "addons": if target { g.addons.clone() } else { Vec::new() },
            "klusterletConfigs": if target { Vec::new() } else { g.klusterlet_configs.clone() },
            "agentName": crate::render::AGENT_NAME, "agentNamespace": g.agent_namespace,
            "releaseNamespaces": g.release,
            "releaseRole": crate::render::release_works_role(&g.addon),
        }),
    )
}

/// Feedback rules reading a task's status back: scalars only (the carry-over is one JSON
/// string), so nothing depends on the work agent's `RawFeedbackJsonString` gate.
pub fn task_feedback(m: &Migration, task_namespace: &str) -> Value {
    let paths = [
        ("revision", ".status.observedRevision"),
        ("state", ".status.stageState"),
        ("message", ".status.message"),
        ("clusters", ".status.clusterStates"),
        ("total", ".status.clusters.total"),
        ("shape", ".status.klusterletConfigShape"),
        ("carry", ".status.carryOverJson"),
    ]
    .map(|(name, path)| json!({"name": name, "path": path}));
    json!({
        "resourceIdentifier": {"group": names::GROUP, "resource": "migrationtasks", "name": m.key, "namespace": task_namespace},
        "feedbackRules": [{"type": "JSONPaths", "jsonPaths": paths}]
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
mod tests {
    use migration_api::migration::{CarriedCluster, TaskStage};

    use super::*;

    fn m() -> Migration {
        Migration {
            name: "move".into(),
            namespace: "default".into(),
            key: "move-0a1b2c3d".into(),
            token_validity: std::time::Duration::from_secs(1620),
            from: "hub1".into(),
            to: "hub2".into(),
        }
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn parse(text: &str) -> kube::config::Kubeconfig {
        kube::config::Kubeconfig::from_yaml(text).unwrap()
    }

    #[test]
    fn the_token_is_not_rotated_and_lives_as_the_spec_allows() {
        let msa = m().service_account();
        assert_eq!(
            msa["spec"]["rotation"],
            json!({"enabled": false, "validity": "1620s"})
        );
        assert_eq!(msa["metadata"]["name"], "migration-move-0a1b2c3d");
    }

    #[test]
    fn the_connection_keeps_server_ca_and_proxy_but_no_credentials() {
        let proxy = ProxyConfig {
            https_proxy: Some("https://proxy:3128".into()),
            ..Default::default()
        };
        let full = bootstrap_kubeconfig(
            "https://hub2:6443",
            Some(&b64("-----BEGIN CERTIFICATE-----\nx\n")),
            "secret-token",
            Some(&proxy),
        )
        .unwrap();
        let conn = without_credentials(&full).unwrap();
        assert!(!conn.contains("secret-token"), "{conn}");
        let kc = kube::config::Kubeconfig::from_yaml(&conn).unwrap();
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://hub2:6443"));
        assert_eq!(cluster.proxy_url.as_deref(), Some("https://proxy:3128"));
        assert!(cluster.certificate_authority_data.is_some());
        assert!(
            kc.auth_infos[0]
                .auth_info
                .as_ref()
                .is_none_or(|a| a.token.is_none())
        );
        assert!(without_credentials("not: [yaml").is_err());
    }

    fn grants() -> AgentGrants {
        AgentGrants {
            addon: "cluster-migration".into(),
            agent_namespace: "agent-ns".into(),
            clusters: vec!["c1".into(), "c2".into()],
            sets: vec!["east".into()],
            addons: vec!["search-collector".into()],
            klusterlet_configs: vec!["migration-move-0a1b2c3d-own".into()],
            release: vec!["c2".into()],
        }
    }

    fn rules_of(objs: &[Value]) -> Vec<Value> {
        objs[0]["rules"].as_array().unwrap().clone()
    }

    #[test]
    fn a_source_agent_may_write_only_the_migrations_clusters_and_klusterlet_work() {
        let objs = agent_grants(&m(), MigrationRole::Source, &grants()).unwrap();
        let kinds: Vec<&str> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["ClusterRole", "ClusterRoleBinding", "RoleBinding"]);
        assert_eq!(
            objs[0]["metadata"]["name"],
            "open-cluster-management:cluster-migration:agent:move-0a1b2c3d:source"
        );
        for r in rules_of(&objs) {
            // Every write is limited to names (none may be empty: that would be every name).
            let names = r["resourceNames"]
                .as_array()
                .unwrap_or_else(|| panic!("{r}"));
            assert!(!names.is_empty(), "{r}");
            assert!(!r["verbs"].as_array().unwrap().contains(&json!("*")), "{r}");
        }
        let resources: Vec<Value> = rules_of(&objs)
            .iter()
            .map(|r| r["resources"].clone())
            .collect();
        assert!(!resources.contains(&json!(["managedclustersets/join"])));
        assert!(!resources.contains(&json!(["managedclusteraddons"])));
        assert!(!resources.contains(&json!(["klusterletaddonconfigs"])));
        let works = rules_of(&objs)
            .into_iter()
            .find(|r| r["resources"] == json!(["manifestworks"]))
            .unwrap();
        assert_eq!(
            works["resourceNames"],
            json!(["migration-move-0a1b2c3d-klusterlet"])
        );
        // The KlusterletConfigs it derives, by name (never `global`, never the clusters' own).
        let configs = rules_of(&objs)
            .into_iter()
            .find(|r| r["resources"] == json!(["klusterletconfigs"]))
            .unwrap();
        assert_eq!(
            configs["resourceNames"],
            json!(["migration-move-0a1b2c3d-own"])
        );
        assert_eq!(
            objs[1]["subjects"],
            json!([{"kind": "ServiceAccount", "name": "cluster-migration-agent", "namespace": "agent-ns"}])
        );
        // The works of a cluster the hub lets go of: released in its namespace only.
        assert_eq!(objs[2]["metadata"]["namespace"], "c2");
        assert_eq!(
            objs[2]["roleRef"]["name"],
            "open-cluster-management:cluster-migration:release-works"
        );
    }

    #[test]
    fn a_target_agent_may_also_create_clusters_and_carry_what_they_carry() {
        let objs = agent_grants(&m(), MigrationRole::Target, &grants()).unwrap();
        let rules = rules_of(&objs);
        let unnamed: Vec<&Value> = rules
            .iter()
            .filter(|r| r.get("resourceNames").is_none())
            .collect();
        // A POST cannot be limited by name: creating ManagedClusters is the one unnamed right.
        assert_eq!(
            unnamed,
            [
                &json!({"apiGroups": ["cluster.open-cluster-management.io"], "resources": ["managedclusters"], "verbs": ["create"]})
            ]
        );
        let by = |res: &str| {
            rules
                .iter()
                .find(|r| r["resources"] == json!([res]))
                .map(|r| r["resourceNames"].clone())
        };
        assert_eq!(by("managedclustersets/join"), Some(json!(["east"])));
        assert_eq!(
            by("managedclusteraddons"),
            Some(json!(["search-collector"]))
        );
        assert_eq!(by("klusterletaddonconfigs"), Some(json!(["c1", "c2"])));
        // Nothing carried: no rule for it (an empty resourceNames would allow every name).
        let bare = AgentGrants {
            sets: vec![],
            addons: vec![],
            release: vec![],
            ..grants()
        };
        let objs = agent_grants(&m(), MigrationRole::Target, &bare).unwrap();
        assert_eq!(objs.len(), 2);
        assert!(
            rules_of(&objs)
                .iter()
                .all(|r| r["resources"] != json!(["managedclustersets/join"])
                    && r["resources"] != json!(["managedclusteraddons"]))
        );
        // No clusters, no grants at all.
        let none = AgentGrants {
            clusters: vec![],
            ..grants()
        };
        assert!(
            agent_grants(&m(), MigrationRole::Target, &none)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn kubeconfig_from_client_config_without_proxy() {
        let text = bootstrap_kubeconfig(
            "https://hub2:6443",
            Some(&b64(
                "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n",
            )),
            "tok",
            None,
        )
        .unwrap();
        let kc = parse(&text);
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://hub2:6443"));
        assert!(cluster.proxy_url.is_none());
        let ca = base64::engine::general_purpose::STANDARD
            .decode(cluster.certificate_authority_data.as_ref().unwrap())
            .unwrap();
        assert_eq!(
            String::from_utf8(ca).unwrap(),
            "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n"
        );
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(user.token.is_some());
    }

    #[test]
    fn kubeconfig_behind_an_https_proxy_carries_its_url_and_ca() {
        let proxy = ProxyConfig {
            http_proxy: Some("http://plain:3128".into()),
            https_proxy: Some("https://proxy:3129".into()),
            ca_bundle: Some(b64("PROXY-CA\n")),
            no_proxy: None,
        };
        let text =
            bootstrap_kubeconfig("https://hub2", Some(&b64("HUB-CA")), "t", Some(&proxy)).unwrap();
        let kc = parse(&text);
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.proxy_url.as_deref(), Some("https://proxy:3129"));
        let ca = base64::engine::general_purpose::STANDARD
            .decode(cluster.certificate_authority_data.as_ref().unwrap())
            .unwrap();
        assert_eq!(String::from_utf8(ca).unwrap(), "HUB-CA\nPROXY-CA\n");
        // An HTTP proxy has no CA to append.
        let plain = ProxyConfig {
            https_proxy: None,
            ..proxy
        };
        let text =
            bootstrap_kubeconfig("https://hub2", Some(&b64("HUB-CA")), "t", Some(&plain)).unwrap();
        let cluster = parse(&text).clusters[0].cluster.clone().unwrap();
        assert_eq!(cluster.proxy_url.as_deref(), Some("http://plain:3128"));
        let ca = base64::engine::general_purpose::STANDARD
            .decode(cluster.certificate_authority_data.unwrap())
            .unwrap();
        assert_eq!(ca, b"HUB-CA");
    }

    #[test]
    fn bad_ca_bundle_is_a_clear_error() {
        let err = bootstrap_kubeconfig("https://hub2", Some("%%%"), "t", None).unwrap_err();
        assert!(err.to_string().contains("caBundle is not base64"), "{err}");
    }

    #[test]
    fn plain_ocm_hubs_get_the_bootstrap_secret_next_to_the_task_and_no_klusterlet_config() {
        assert_eq!(Shape::from_report("None"), Some(Shape::ManifestWork));
        assert_eq!(Shape::from_report("something else"), None);
        for shape in [
            Shape::ManifestWork,
            Shape::MultipleHubsConfig,
            Shape::BootstrapKubeConfigs,
        ] {
            assert_eq!(Shape::from_delivery(shape.delivery()), shape);
        }
        let objs = source_manifests(
            &m(),
            "agent-ns",
            MigrationTaskSpec::default(),
            Some(("kc", Shape::ManifestWork)),
        )
        .unwrap();
        let kinds: Vec<&str> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["Secret", "MigrationTask"]);
        assert_eq!(objs[0]["metadata"]["namespace"], "agent-ns");
        assert_eq!(objs[0]["data"]["kubeconfig"], b64("kc"));
        // The token never goes to the target (it gets the connection without credentials).
        let target =
            target_manifests(&m(), "t-ns", MigrationTaskSpec::default(), Some("msa")).unwrap();
        assert!(target.iter().all(|o| o["kind"] != "Secret"));
    }

    #[test]
    fn klusterlet_config_in_both_shapes() {
        for (shape, path) in [
            (
                Shape::MultipleHubsConfig,
                "/spec/multipleHubsConfig/bootstrapKubeConfigs",
            ),
            (Shape::BootstrapKubeConfigs, "/spec/bootstrapKubeConfigs"),
        ] {
            let objs = source_manifests(
                &m(),
                "ns",
                MigrationTaskSpec::default(),
                Some(("kc", shape)),
            )
            .unwrap();
            assert_eq!(objs.len(), 3);
            assert_eq!(objs[0]["kind"], "Secret");
            assert_eq!(objs[0]["metadata"]["name"], "bootstrap-move-0a1b2c3d");
            assert_eq!(
                objs[0]["metadata"]["namespace"],
                BOOTSTRAP_SECRETS_NAMESPACE
            );
            assert_eq!(objs[0]["data"]["kubeconfig"], b64("kc"));
            let kc = &objs[1];
            assert_eq!(kc["kind"], "KlusterletConfig");
            assert_eq!(kc["metadata"]["name"], "migration-move-0a1b2c3d");
            let boot = kc
                .pointer(path)
                .unwrap_or_else(|| panic!("{shape:?}: {kc}"));
            assert_eq!(boot["type"], "LocalSecrets");
            assert_eq!(
                boot["localSecretsConfig"]["kubeConfigSecrets"],
                json!([{"name": "bootstrap-move-0a1b2c3d"}])
            );
            assert_eq!(objs[2]["kind"], "MigrationTask");
        }
        let shapes = |o: &Value| {
            (
                o.pointer("/spec/multipleHubsConfig").is_some(),
                o.pointer("/spec/bootstrapKubeConfigs").is_some(),
            )
        };
        let new = source_manifests(
            &m(),
            "ns",
            MigrationTaskSpec::default(),
            Some(("kc", Shape::MultipleHubsConfig)),
        )
        .unwrap();
        assert_eq!(shapes(&new[1]), (true, false));
        assert_eq!(
            new[1]["spec"]["multipleHubsConfig"]["genBootstrapKubeConfigStrategy"],
            "IncludeCurrentHub"
        );
    }

    #[test]
    fn validating_source_carries_only_the_task_with_its_revision() {
        let spec = MigrationTaskSpec {
            migration: "move".into(),
            clusters: vec!["c1".into()],
            stage: TaskStage::Validating,
            ..Default::default()
        };
        let objs = source_manifests(&m(), "agent-ns", spec.clone(), None).unwrap();
        assert_eq!(objs.len(), 1);
        assert_eq!(objs[0]["metadata"]["namespace"], "agent-ns");
        assert_eq!(objs[0]["spec"]["revision"], revision(&spec));
        let mut other = spec.clone();
        other.stage = TaskStage::Deploying;
        assert_ne!(revision(&spec), revision(&other));
    }

    #[test]
    fn target_rbac_binds_only_the_migration_service_account() {
        let objs =
            target_manifests(&m(), "ns", MigrationTaskSpec::default(), Some("msa-ns")).unwrap();
        assert_eq!(objs[0]["kind"], "ClusterRole");
        let verbs: Vec<&str> = objs[0]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| {
                r["verbs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap())
            })
            .collect();
        assert!(
            !verbs.contains(&"delete") && !verbs.contains(&"*"),
            "{verbs:?}"
        );
        // ManagedClusters: get and create only (no list, no update), as ACM's bootstrap role.
        let clusters = objs[0]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resources"] == json!(["managedclusters"]))
            .unwrap();
        assert_eq!(clusters["verbs"], json!(["get", "create"]));
        assert_eq!(
            objs[1]["subjects"],
            json!([{"kind": "ServiceAccount", "name": "migration-move-0a1b2c3d", "namespace": "msa-ns"}])
        );
        assert_eq!(
            bootstrap_user(&m(), "msa-ns"),
            "system:serviceaccount:msa-ns:migration-move-0a1b2c3d"
        );
        let without = target_manifests(&m(), "ns", MigrationTaskSpec::default(), None).unwrap();
        assert_eq!(without.len(), 1);
    }

    #[test]
    fn works_and_feedback() {
        let w = work(
            &m(),
            MigrationRole::Target,
            vec![],
            task_feedback(&m(), "ns"),
        );
        assert_eq!(w["metadata"]["name"], "migration-move-0a1b2c3d-target");
        assert_eq!(w["metadata"]["namespace"], "hub2");
        let paths = &w["spec"]["manifestConfigs"][0]["feedbackRules"][0]["jsonPaths"];
        assert_eq!(paths.as_array().unwrap().len(), 7);
        assert_eq!(paths[6]["path"], ".status.carryOverJson");
        let carried = CarriedCluster {
            name: "c1".into(),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&carried).unwrap(),
            json!({"name": "c1"})
        );
    }

    #[test]
    fn plans_never_show_secret_data() {
        let objs = source_manifests(
            &m(),
            "ns",
            MigrationTaskSpec::default(),
            Some(("token: abc", Shape::MultipleHubsConfig)),
        )
        .unwrap();
        let shown = redact(&objs[0]);
        assert_eq!(shown["data"]["kubeconfig"], REDACTED);
        assert!(!shown.to_string().contains(&b64("token: abc")));
        assert_eq!(redact(&objs[1]), objs[1]);
    }
}
