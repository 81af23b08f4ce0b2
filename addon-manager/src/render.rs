//! Rendering of the addon agent's install: pure functions from an AddOnDeploymentConfig (and
//! the manager's defaults) to the objects that go into the deploy ManifestWorks and the agent's
//! hub-side RBAC. Templates live in `templates/` (handlebars; every value goes through the
//! `json` helper, so it is quoted and escaped).

use std::collections::BTreeMap;

use handlebars::Handlebars;
use migration_api::names::{self, labels};
use migration_api::ocm::addon::AddOnDeploymentConfigSpec;
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Customized variable naming the agent version to run.
pub const AGENT_VERSION_VAR: &str = "AGENT_VERSION";
/// Customized variable setting the agent's log level.
pub const LOG_LEVEL_VAR: &str = "LOG_LEVEL";
/// Customized variable setting the agent's health lease duration in seconds.
pub const LEASE_DURATION_VAR: &str = "LEASE_DURATION_SECONDS";
/// Customized variable setting how many managed clusters the hub is meant to hold (scores).
pub const CAPACITY_VAR: &str = "MANAGED_CLUSTER_CAPACITY";
/// Every customized variable the agent's templates read.
pub const KNOWN_VARIABLES: [&str; 4] = [
    AGENT_VERSION_VAR,
    LOG_LEVEL_VAR,
    LEASE_DURATION_VAR,
    CAPACITY_VAR,
];

/// Name of the agent's Deployment, ServiceAccount and lease role on the hub.
pub const AGENT_NAME: &str = "cluster-migration-agent";
/// The ClusterRole, installed with the agent and bound to it by no one, that a migration binds
/// in the namespace of each cluster its hub lets go of: delete that namespace's works and
/// clear their finalizers.
pub fn release_works_role(addon: &str) -> String {
    format!("open-cluster-management:{addon}:release-works")
}
/// Name of the agent's container.
pub const CONTAINER_NAME: &str = "addon-agent";
/// Where the agent's hub kubeconfig secret is mounted.
pub const HUB_KUBECONFIG_MOUNT: &str = "/var/run/secrets/open-cluster-management/hub";
/// Where the proxy CA is mounted when the config has one.
pub const PROXY_CA_MOUNT: &str = "/etc/cluster-migration/proxy-ca";
/// Name of the pre-delete Job.
pub const CLEANUP_JOB: &str = "cluster-migration-cleanup";
/// Retries of the pre-delete Job (its `backoffLimit`): it fails for good after one more run.
pub const CLEANUP_BACKOFF_LIMIT: i64 = 2;
/// The addon's display name and description (ClusterManagementAddOn and status `addOnMeta`).
pub const ADDON_DISPLAY_NAME: &str = "Cluster Migration";
pub const ADDON_DESCRIPTION: &str =
    "Moves managed clusters between hubs, driven from the global hub";
/// Upper bound of one ManifestWork's manifests (the API server's object limit is ~1.5 MiB; OCM
/// splits near 400 KiB).
pub const WORK_SIZE_LIMIT: usize = 400 * 1024;

const INSTALL: &str = include_str!("../../templates/agent-install.yaml.hbs");
const RBAC: &str = include_str!("../../templates/agent-rbac.yaml.hbs");
/// The label that adds a ClusterRole's rules to the work agent's identity (upstream
/// `manifests/klusterlet/managed/klusterlet-work-clusterrole-execution.yaml`).
pub const WORK_AGGREGATE_LABEL: &str = "open-cluster-management.io/aggregate-to-work";
const HUB_RBAC: &str = include_str!("../../templates/agent-hub-rbac.yaml.hbs");
const PRE_DELETE: &str = include_str!("../../templates/agent-pre-delete.yaml.hbs");
const MIGRATION_TASK_CRD: &str =
    include_str!("../../manifests/crds/migration.open-cluster-management.io_migrationtasks.yaml");

/// What goes wrong while rendering.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("template {0}: {1}")]
    Template(&'static str, String),
    #[error("template {0} produced invalid YAML: {1}")]
    Yaml(&'static str, String),
    #[error("invalid config: {0}")]
    Config(String),
}

/// The manager's side of the values: what holds when no config says otherwise.
#[derive(Clone, Debug)]
pub struct Defaults {
    pub addon_name: String,
    /// Agent image repository; the tag is the version.
    pub image_repository: String,
    /// Version deployed when no config names one.
    pub version: String,
    pub log_level: String,
    pub lease_duration_secs: u32,
    pub capacity: u32,
}

impl Defaults {
    /// Defaults for `addon` deploying `version` from `image_repository`: log level info,
    /// 60 s leases, a capacity of 500 managed clusters.
    pub fn new(addon_name: &str, image_repository: &str, version: &str) -> Self {
        Self {
            addon_name: addon_name.to_owned(),
            image_repository: image_repository.to_owned(),
            version: version.to_owned(),
            log_level: "info".into(),
            lease_duration_secs: 60,
            capacity: 500,
        }
    }
}

/// Every value the agent's templates see.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentValues {
    pub addon_name: String,
    pub cluster_name: String,
    pub namespace: String,
    pub version: String,
    pub image: String,
    pub log_level: String,
    pub lease_duration_secs: u32,
    pub capacity: u32,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Value>,
    pub resources: Option<Value>,
    pub http_proxy: Option<String>,
    pub https_proxy: Option<String>,
    pub no_proxy: Option<String>,
    /// PEM of the proxy's CA (decoded from the config's base64).
    pub proxy_ca_bundle: Option<String>,
}

impl AgentValues {
    /// Values for the agent on `cluster`, from the config (if any) over the defaults.
    pub fn new(
        defaults: &Defaults,
        cluster: &str,
        config: Option<&AddOnDeploymentConfigSpec>,
        version: &str,
    ) -> Result<Self, RenderError> {
        let namespace = install_namespace(config);
        let image = mirror_image(&format!("{}:{version}", defaults.image_repository), config);
        let placement = config.and_then(|c| c.node_placement.as_ref());
        let proxy = config.and_then(|c| c.proxy_config.as_ref());
        let proxy_ca_bundle = match proxy
            .and_then(|p| p.ca_bundle.as_deref())
            .filter(|s| !s.is_empty())
        {
            None => None,
            Some(b64) => {
                let bytes =
                    base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b64.trim())
                        .map_err(|e| {
                            RenderError::Config(format!("proxyConfig.caBundle is not base64: {e}"))
                        })?;
                Some(String::from_utf8(bytes).map_err(|_| {
                    RenderError::Config("proxyConfig.caBundle is not a PEM bundle".into())
                })?)
            }
        };
        let non_empty = |s: Option<&String>| s.filter(|s| !s.is_empty()).cloned();
        Ok(Self {
            addon_name: defaults.addon_name.clone(),
            cluster_name: cluster.to_owned(),
            namespace,
            version: version.to_owned(),
            image,
            log_level: variable(config, LOG_LEVEL_VAR)
                .unwrap_or(&defaults.log_level)
                .to_owned(),
            lease_duration_secs: parse_u32(
                config,
                LEASE_DURATION_VAR,
                defaults.lease_duration_secs,
                MAX_LEASE_DURATION_SECS,
            )?,
            capacity: parse_u32(config, CAPACITY_VAR, defaults.capacity, MAX_CAPACITY)?,
            node_selector: placement
                .and_then(|p| p.node_selector.clone())
                .unwrap_or_default(),
            tolerations: placement
                .and_then(|p| p.tolerations.as_ref())
                .map(|t| {
                    t.iter()
                        .filter_map(|t| serde_json::to_value(t).ok())
                        .collect()
                })
                .unwrap_or_default(),
            resources: config
                .and_then(|c| c.resource_requirements.as_deref())
                .and_then(container_resources),
            http_proxy: non_empty(proxy.and_then(|p| p.http_proxy.as_ref())),
            https_proxy: non_empty(proxy.and_then(|p| p.https_proxy.as_ref())),
            no_proxy: non_empty(proxy.and_then(|p| p.no_proxy.as_ref())),
            proxy_ca_bundle,
        })
    }

    fn labels(&self) -> Value {
        json!({
            labels::ADDON_NAME: self.addon_name,
            labels::MANAGED_BY: labels::MANAGED_BY_VALUE,
        })
    }

    fn env(&self) -> Vec<Value> {
        let mut env = vec![
            json!({"name": "AGENT_VERSION", "value": self.version}),
            json!({"name": "LEASE_DURATION_SECONDS", "value": self.lease_duration_secs.to_string()}),
            json!({"name": "MANAGED_CLUSTER_CAPACITY", "value": self.capacity.to_string()}),
            json!({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}),
        ];
        for (names, value) in [
            (["HTTP_PROXY", "http_proxy"], &self.http_proxy),
            (["HTTPS_PROXY", "https_proxy"], &self.https_proxy),
            (["NO_PROXY", "no_proxy"], &self.no_proxy),
        ] {
            if let Some(v) = value {
                for n in names {
                    env.push(json!({"name": n, "value": v}));
                }
            }
        }
        if self.proxy_ca_bundle.is_some() {
            env.push(
                json!({"name": "PROXY_CA_BUNDLE", "value": format!("{PROXY_CA_MOUNT}/ca.crt")}),
            );
        }
        env
    }

    fn volumes(&self) -> (Vec<Value>, Vec<Value>) {
        let mut volumes = vec![
            json!({"name": "hub-kubeconfig", "secret": {"secretName": names::hub_kubeconfig_secret(&self.addon_name)}}),
        ];
        let mut mounts = vec![
            json!({"name": "hub-kubeconfig", "mountPath": HUB_KUBECONFIG_MOUNT, "readOnly": true}),
        ];
        if self.proxy_ca_bundle.is_some() {
            volumes.push(json!({"name": "proxy-ca", "secret": {"secretName": proxy_ca_secret(&self.addon_name)}}));
            mounts.push(json!({"name": "proxy-ca", "mountPath": PROXY_CA_MOUNT, "readOnly": true}));
        }
        (volumes, mounts)
    }

    fn common_args(&self) -> Vec<String> {
        vec![
            format!("--cluster-name={}", self.cluster_name),
            format!("--addon-name={}", self.addon_name),
            format!("--hub-kubeconfig={HUB_KUBECONFIG_MOUNT}/kubeconfig"),
            format!("--log-level={}", self.log_level),
        ]
    }

    /// Everything the templates see.
    fn context(&self) -> Value {
        let (volumes, mounts) = self.volumes();
        let mut cleanup_args = self.common_args();
        cleanup_args.push("cleanup".to_owned());
        let mut work_role_labels = self.labels();
        work_role_labels[WORK_AGGREGATE_LABEL] = json!("true");
        json!({
            "addonName": self.addon_name,
            "clusterName": self.cluster_name,
            "namespace": self.namespace,
            "agentName": AGENT_NAME,
            "containerName": CONTAINER_NAME,
            "clusterRoleName": format!("open-cluster-management:{}:agent", self.addon_name),
            "workRoleName": format!("open-cluster-management:{}:work", self.addon_name),
            "releaseRoleName": release_works_role(&self.addon_name),
            "workRoleLabels": work_role_labels,
            "labels": self.labels(),
            "image": self.image,
            "args": self.common_args(),
            "cleanupArgs": cleanup_args,
            "env": self.env(),
            "volumes": volumes,
            "volumeMounts": mounts,
            "nodeSelector": if self.node_selector.is_empty() { Value::Null } else { json!(self.node_selector) },
            "tolerations": if self.tolerations.is_empty() { Value::Null } else { json!(self.tolerations) },
            "resources": self.resources,
            "proxyCaBundle": self.proxy_ca_bundle,
            "proxyCaSecret": proxy_ca_secret(&self.addon_name),
            "jobName": CLEANUP_JOB,
            "backoffLimit": CLEANUP_BACKOFF_LIMIT,
        })
    }
}

/// Name of the secret holding the proxy CA on the hub.
pub fn proxy_ca_secret(addon: &str) -> String {
    format!("{addon}-proxy-ca")
}

pub(crate) fn engine() -> Handlebars<'static> {
    let mut h = Handlebars::new();
    h.set_strict_mode(true);
    h.register_escape_fn(handlebars::no_escape);
    h.register_helper(
        "json",
        Box::new(
            |helper: &handlebars::Helper,
             _: &Handlebars,
             _: &handlebars::Context,
             _: &mut handlebars::RenderContext,
             out: &mut dyn handlebars::Output|
             -> handlebars::HelperResult {
                let value = helper
                    .param(0)
                    .map(|p| p.value().clone())
                    .unwrap_or(Value::Null);
                let text = serde_json::to_string(&value)
                    .map_err(|e| handlebars::RenderErrorReason::Other(e.to_string()))?;
                out.write(&text)?;
                Ok(())
            },
        ),
    );
    h
}

/// Renders one template into its objects (one per YAML document; empty documents skipped).
pub(crate) fn render_template(
    name: &'static str,
    template: &str,
    ctx: &Value,
) -> Result<Vec<Value>, RenderError> {
    let text = engine()
        .render_template(template, ctx)
        .map_err(|e| RenderError::Template(name, e.to_string()))?;
    parse_documents(name, &text)
}

fn parse_documents(name: &'static str, text: &str) -> Result<Vec<Value>, RenderError> {
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let v: Value = serde::Deserialize::deserialize(doc)
            .map_err(|e| RenderError::Yaml(name, e.to_string()))?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// The objects of the agent's install on its hub, in apply order: namespace, service account,
/// RBAC, the MigrationTask CRD, then the Deployment.
pub fn agent_manifests(values: &AgentValues) -> Result<Vec<Value>, RenderError> {
    let ctx = values.context();
    let mut install = render_template("agent-install.yaml.hbs", INSTALL, &ctx)?;
    let deployment = install.pop();
    let mut out = install;
    out.extend(render_template("agent-rbac.yaml.hbs", RBAC, &ctx)?);
    out.extend(parse_documents("migrationtasks CRD", MIGRATION_TASK_CRD)?);
    out.extend(deployment);
    Ok(out)
}

/// The pre-delete hook's objects (the cleanup Job).
pub fn pre_delete_manifests(values: &AgentValues) -> Result<Vec<Value>, RenderError> {
    render_template("agent-pre-delete.yaml.hbs", PRE_DELETE, &values.context())
}

/// Name of the agent's Role and RoleBinding on the global hub.
pub fn hub_role_name(addon: &str) -> String {
    format!("open-cluster-management:{addon}:agent")
}

/// The agent's RBAC on the global hub, in its cluster namespace.
pub fn hub_rbac(addon: &str, cluster: &str) -> Result<Vec<Value>, RenderError> {
    let groups = names::addon_agent_groups(cluster, addon);
    let ctx = json!({
        "addonName": addon,
        "clusterName": cluster,
        "roleName": hub_role_name(addon),
        "group": groups.first(),
        "labels": {labels::ADDON_NAME: addon, labels::MANAGED_BY: labels::MANAGED_BY_VALUE},
    });
    render_template("agent-hub-rbac.yaml.hbs", HUB_RBAC, &ctx)
}

/// SHA-256 (hex) of a value's canonical JSON (serde_json keeps object keys sorted).
pub fn spec_hash(value: &impl Serialize) -> String {
    let text = serde_json::to_vec(value).unwrap_or_default();
    let digest = Sha256::digest(&text);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Splits manifests into groups whose serialized size stays under `limit` (a manifest larger
/// than the limit gets a group of its own). Order is kept.
pub fn split_manifests(manifests: Vec<Value>, limit: usize) -> Vec<Vec<Value>> {
    let mut groups: Vec<Vec<Value>> = Vec::new();
    let mut size = 0;
    for m in manifests {
        let len = serde_json::to_vec(&m).map(|v| v.len()).unwrap_or(0);
        match groups.last_mut() {
            Some(g) if size + len <= limit => {
                g.push(m);
                size += len;
            }
            _ => {
                groups.push(vec![m]);
                size = len;
            }
        }
    }
    groups
}

/// Status feedback the manager reads from the agent's Deployment in `namespace`.
pub fn deployment_feedback(namespace: &str) -> Value {
    json!({
        "resourceIdentifier": {"group": "apps", "resource": "deployments", "name": AGENT_NAME, "namespace": namespace},
        "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [
            {"name": "image", "path": ".spec.template.spec.containers[0].image"},
            {"name": "generation", "path": ".metadata.generation"},
            {"name": "observedGeneration", "path": ".status.observedGeneration"},
            {"name": "availableReplicas", "path": ".status.availableReplicas"}
        ]}]
    })
}

/// Status feedback the manager reads from the cleanup Job in `namespace`.
pub fn job_feedback(namespace: &str) -> Value {
    json!({
        "resourceIdentifier": {"group": "batch", "resource": "jobs", "name": CLEANUP_JOB, "namespace": namespace},
        "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [
            {"name": "succeeded", "path": ".status.succeeded"},
            {"name": "failed", "path": ".status.failed"}
        ]}]
    })
}

/// Whether `work` is one of the addon's deploy works (`addon-<addon>-deploy-<i>`).
pub fn is_deploy_work(addon: &str, work: &str) -> bool {
    work.strip_prefix(&format!("addon-{addon}-deploy-"))
        .is_some_and(|i| i.parse::<usize>().is_ok())
}

/// The deploy ManifestWorks `addon-<addon>-deploy-<i>` for a cluster: the manifests split by
/// size, each work annotated with the config spec hashes and owned by the ManagedClusterAddOn.
pub fn deploy_works(
    addon: &str,
    cluster: &str,
    manifests: Vec<Value>,
    config_hashes: &BTreeMap<String, String>,
    owner: &Value,
    limit: usize,
) -> Vec<Value> {
    let hashes = serde_json::to_string(config_hashes).unwrap_or_default();
    split_manifests(manifests, limit)
        .into_iter()
        .enumerate()
        .map(|(i, group)| {
            let mut configs = Vec::new();
            if let Some(d) = group.iter().find(|m| m["kind"] == "Deployment") {
                configs.push(deployment_feedback(
                    d["metadata"]["namespace"].as_str().unwrap_or_default(),
                ));
            }
            work(
                &names::addon_deploy_work(addon, i),
                addon,
                cluster,
                group,
                configs,
                &hashes,
                owner,
            )
        })
        .collect()
}

/// The pre-delete ManifestWork `addon-<addon>-pre-delete`.
pub fn pre_delete_work(addon: &str, cluster: &str, manifests: Vec<Value>, owner: &Value) -> Value {
    let ns = manifests
        .iter()
        .find(|m| m["kind"] == "Job")
        .and_then(|m| m["metadata"]["namespace"].as_str())
        .unwrap_or_default()
        .to_owned();
    work(
        &names::addon_pre_delete_work(addon),
        addon,
        cluster,
        manifests,
        vec![job_feedback(&ns)],
        "{}",
        owner,
    )
}

fn work(
    name: &str,
    addon: &str,
    cluster: &str,
    manifests: Vec<Value>,
    manifest_configs: Vec<Value>,
    hashes: &str,
    owner: &Value,
) -> Value {
    json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "ManifestWork",
        "metadata": {
            "name": name,
            "namespace": cluster,
            "labels": {labels::ADDON_NAME: addon, labels::MANAGED_BY: labels::MANAGED_BY_VALUE},
            "annotations": {migration_api::names::annotations::CONFIG_SPEC_HASH: hashes},
            "ownerReferences": [owner],
        },
        "spec": {
            "workload": {"manifests": manifests},
            "manifestConfigs": manifest_configs,
        }
    })
}

mod config;
pub use config::*;

#[cfg(test)]
mod tests;
