//! The import controller of an ACM/MCE hub (stolostron/managedcluster-import-controller): every
//! accepted cluster gets a `<cluster>-klusterlet` ManifestWork rendering its Klusterlet from
//! its KlusterletConfig, as upstream's `pkg/bootstrap/render.go` (`Generate`) and
//! `pkg/controller/manifestwork/manifestwork_controller.go` do:
//!
//! - The cluster's KlusterletConfig (annotation `agent.open-cluster-management.io/klusterlet-config`)
//!   is merged over the one named `global` (`GetMergedKlusterletConfigWithGlobal`, merge rules
//!   of stolostron/cluster-lifecycle-api `helpers/klusterletconfig/merge.go`, see
//!   [`merge_klusterlet_configs`]).
//! - The cluster's bootstrap kubeconfig (`bootstrap-hub-kubeconfig`) points at
//!   `hubKubeAPIServerConfig.url` (or the older `hubKubeAPIServerURL`) when set, else the hub.
//! - Feature gates go to the registration or the work agent; `nodePlacement`, `registries`
//!   (image overrides) and the work agent's eviction grace period and status sync interval are
//!   rendered on the Klusterlet.
//! - `multipleHubsConfig` with LocalSecrets: MultipleHubs on, the listed secrets (read from the
//!   import controller's own namespace; one missing fails the whole render, so the work is not
//!   changed) and, with `IncludeCurrentHub`, the current hub's bootstrap kubeconfig as
//!   `bootstrap-hub-kubeconfig-current-hub`, **last**. Hubs with the older CRD render
//!   `spec.bootstrapKubeConfigs` the same way, the current hub appended by MCE 2.8 and not by
//!   MCE 2.7 ([`OlderMce`]).
//! - A cluster annotated `import.open-cluster-management.io/disable-auto-import` keeps the
//!   works it has, every manifest of them made ReadOnly; nothing new is rendered for it.
//! - Deleting a cluster ([`clean_up`], [`delete_namespaces`]): the works of one the hub no
//!   longer accepts, or that is unavailable, are force-deleted; then its namespace goes, unless
//!   addons, HostedClusters, ClusterDeployments, InfraEnvs or pods are still in it.
//! - The work holds what upstream's holds, in its order ([`in_upstream_order`]): the
//!   Namespaces, the operator's RBAC, the Secrets by name (`bootstrap-hub-kubeconfig` only
//!   without a MultipleHubs list), the image pull secret, the operator's ServiceAccount and
//!   Deployment, the Klusterlet, then the ClusterRoles that let the work agent (`admin`)
//!   manage it (`pkg/bootstrap/manifests/klusterlet/clusterrole_aggregate.yaml`).
//!
//! Not simulated: the per-cluster bootstrap ServiceAccount tokens (every cluster of a hub
//! bootstraps with the hub's one identity), the PriorityClass, the operator's Deployment
//! running (nothing acts on it; the simulated klusterlet stands for it),
//! `installMode: noOperator` (the Klusterlet is rendered as for the default mode), hosted mode.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use migration_api::names::BOOTSTRAP_HUB_KUBECONFIG;
use migration_api::names::annotations::KLUSTERLET_CONFIG;
use migration_api::names::conditions::CLUSTER_AVAILABLE;
use migration_api::ocm::addon::ManagedClusterAddOn;
use migration_api::ocm::cluster::ManagedCluster;
use migration_api::ocm::config::KlusterletConfig;
use migration_api::ocm::work::ManifestWork;
use serde_json::{Map, Value, json};

use crate::finalizers;
use crate::hub::OlderMce;
use crate::names::AGENT_NAMESPACE;

/// The import controller's own namespace (MCE's `multicluster-engine`): the bootstrap
/// kubeconfig secrets KlusterletConfigs name are read from here.
pub const BOOTSTRAP_SECRETS_NAMESPACE: &str = "multicluster-engine";
/// The KlusterletConfig every cluster's own is merged over.
pub const GLOBAL_KLUSTERLET_CONFIG: &str = "global";
/// The current hub's bootstrap kubeconfig among several (`IncludeCurrentHub`).
pub const CURRENT_HUB_SECRET: &str = "bootstrap-hub-kubeconfig-current-hub";
/// A cluster whose klusterlet works the import controller must not change.
pub const DISABLE_AUTO_IMPORT: &str = "import.open-cluster-management.io/disable-auto-import";
const MANAGER: &str = "managedcluster-import-controller";
/// Work agent feature gates (upstream `DefaultSpokeWorkFeatureGates`); the others a
/// KlusterletConfig lists are the registration agent's.
const WORK_FEATURE_GATES: &[&str] = &[
    "RawFeedbackJsonString",
    "ExecutorValidatingCaches",
    "NilExecutorValidating",
    "ManifestWorkReplicaSet",
    "CloudEventsDrivers",
];

/// The ClusterRole ACM's import adds to every cluster so that the work agent (bound to
/// `admin`) can manage the Klusterlet.
pub fn klusterlet_admin_role() -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "open-cluster-management:klusterlet-admin-aggregate-clusterrole",
                     "labels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}},
        "rules": [{"apiGroups": ["operator.open-cluster-management.io"], "resources": ["klusterlets"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]
    })
}

/// Name of a cluster's klusterlet work.
pub fn klusterlet_work(cluster: &str) -> String {
    migration_api::names::import_work(cluster)
}

/// Whether a value is "zero" as Go's `reflect.Value.IsZero` sees the JSON it came from.
fn is_zero(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(o)) => o.values().all(|v| is_zero(Some(v))),
        Some(Value::Bool(b)) => !b,
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
    }
}

/// The spec of `own` merged over `global` (`MergeKlusterletConfigs`): most fields are taken
/// from `own` when set there; `hubKubeAPIServerConfig` merges field by field (trusted CA
/// bundles by name); feature gates are `own`'s plus `global`'s for other features; the larger
/// `maxCustomClusterClaims` wins.
pub fn merge_klusterlet_configs(global: Option<&Value>, own: Option<&Value>) -> Value {
    let (Some(base), Some(over)) = (global, own) else {
        return own.or(global).cloned().unwrap_or_else(|| json!({}));
    };
    let empty = Map::new();
    let base_map = base.as_object().unwrap_or(&empty);
    let over_map = over.as_object().unwrap_or(&empty);
    let mut merged = base_map.clone();
    let keys: std::collections::BTreeSet<&String> =
        base_map.keys().chain(over_map.keys()).collect();
    for key in keys {
        let (b, o) = (base_map.get(key), over_map.get(key));
        let value = match key.as_str() {
            "hubKubeAPIServerConfig" => match (b, o) {
                (Some(b), Some(o)) if !o.is_null() && !b.is_null() => {
                    let mut c = o.clone();
                    for field in ["url", "proxyURL", "serverVerificationStrategy"] {
                        if is_zero(c.get(field)) && !is_zero(b.get(field)) {
                            c[field] = b[field].clone();
                        }
                    }
                    let mut bundles = c
                        .get("trustedCABundles")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    for bundle in b
                        .get("trustedCABundles")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if !bundles.iter().any(|x| x.get("name") == bundle.get("name")) {
                            bundles.push(bundle.clone());
                        }
                    }
                    if !bundles.is_empty() {
                        c["trustedCABundles"] = Value::Array(bundles);
                    }
                    Some(c)
                }
                (b, o) => o.filter(|o| !o.is_null()).or(b).cloned(),
            },
            "featureGates" => {
                let mut gates = o.and_then(Value::as_array).cloned().unwrap_or_default();
                for g in b.and_then(Value::as_array).into_iter().flatten() {
                    if !gates.iter().any(|x| x.get("feature") == g.get("feature")) {
                        gates.push(g.clone());
                    }
                }
                Some(Value::Array(gates))
            }
            "clusterClaimConfiguration" => match (b, o) {
                (Some(b), Some(o)) if !o.is_null() && !b.is_null() => {
                    let max = |v: &Value| v["maxCustomClusterClaims"].as_i64().unwrap_or(0);
                    let mut c = o.clone();
                    c["maxCustomClusterClaims"] = json!(max(o).max(max(b)));
                    Some(c)
                }
                (b, o) => o.filter(|o| !o.is_null()).or(b).cloned(),
            },
            _ => {
                if is_zero(o) {
                    b.cloned()
                } else {
                    o.cloned()
                }
            }
        };
        match value {
            Some(v) => merged.insert(key.clone(), v),
            None => merged.remove(key),
        };
    }
    // The deprecated URL moves into hubKubeAPIServerConfig when that is present.
    if let Some(config) = merged
        .get("hubKubeAPIServerConfig")
        .filter(|c| c.is_object())
        .cloned()
    {
        let mut config = config;
        if is_zero(config.get("url")) && !is_zero(merged.get("hubKubeAPIServerURL")) {
            config["url"] = merged["hubKubeAPIServerURL"].clone();
        }
        merged.insert("hubKubeAPIServerConfig".into(), config);
    }
    Value::Object(merged)
}

/// The hub's bootstrap kubeconfig with its server replaced (the URL a KlusterletConfig names).
fn with_server(kubeconfig: &str, server: &str) -> String {
    let Ok(mut kc) = serde_yaml::from_str::<Value>(kubeconfig) else {
        return kubeconfig.to_owned();
    };
    for c in kc
        .get_mut("clusters")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        c["cluster"]["server"] = json!(server);
    }
    serde_yaml::to_string(&kc).unwrap_or_else(|_| kubeconfig.to_owned())
}

/// Why a cluster's klusterlet manifests cannot be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Config(String),
}

/// What the render reads besides the cluster: the merged KlusterletConfig spec, the
/// bootstrap secrets it names (name, kubeconfig; `None` when missing), and the hub's kind.
#[derive(Clone, Copy, Debug)]
pub struct RenderInput<'a> {
    pub cluster: &'a str,
    pub spec: &'a Value,
    pub hub_bootstrap_kubeconfig: &'a str,
    pub secrets: &'a [(String, Option<String>)],
    pub older: Option<OlderMce>,
}

/// The names of the bootstrap kubeconfig secrets the merged spec lists, and whether the
/// current hub's is appended.
pub fn listed_secrets(spec: &Value, older: Option<OlderMce>) -> (Vec<String>, bool) {
    let (boot, include_current) = match older {
        None => {
            let m = spec.get("multipleHubsConfig");
            (
                m.and_then(|m| m.get("bootstrapKubeConfigs")),
                m.and_then(|m| m.get("genBootstrapKubeConfigStrategy"))
                    .and_then(Value::as_str)
                    == Some("IncludeCurrentHub"),
            )
        }
        Some(mce) => (spec.get("bootstrapKubeConfigs"), mce == OlderMce::Mce28),
    };
    let local = boot
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("LocalSecrets"))
        .and_then(|b| b.get("localSecretsConfig"));
    let Some(local) = local else {
        return (Vec::new(), false);
    };
    // An empty (or absent) list is still a list: with IncludeCurrentHub it holds the current
    // hub alone (upstream appends it whatever the list holds, `pkg/bootstrap/render.go`).
    let names = local
        .get("kubeConfigSecrets")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    (names, include_current)
}

/// A cluster's klusterlet manifests (pure), in upstream's order ([`in_upstream_order`]).
pub fn render(input: &RenderInput<'_>) -> Result<Vec<Value>, RenderError> {
    let spec = input.spec;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let url = spec
        .pointer("/hubKubeAPIServerConfig/url")
        .or_else(|| spec.get("hubKubeAPIServerURL"))
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty());
    let bootstrap = match url {
        Some(u) => with_server(input.hub_bootstrap_kubeconfig, u),
        None => input.hub_bootstrap_kubeconfig.to_owned(),
    };
    let secret = |name: &str, kubeconfig: &str| {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": name, "namespace": AGENT_NAMESPACE},
               "type": "Opaque", "data": {"kubeconfig": b64(kubeconfig)}})
    };
    // The chart's Secrets: `bootstrap-hub-kubeconfig` only without a MultipleHubs list, which
    // replaces it (`{{- else if .Values.bootstrapHubKubeConfig }}`, ocm
    // `deploy/klusterlet/chart/klusterlet/templates/bootstrap_kubeconfig_secret.yaml`; the
    // import controller's own template did the same since it learnt MultipleHubs, its
    // `manifests/klusterlet/bootstrap_secret.yaml` of MCE 2.7 and 2.8).
    let mut secrets = Vec::new();
    let (mut registration_gates, mut work_gates) = (Vec::new(), Vec::new());
    for g in spec
        .get("featureGates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let feature = g.get("feature").and_then(Value::as_str).unwrap_or_default();
        if WORK_FEATURE_GATES.contains(&feature) {
            work_gates.push(g.clone());
        } else {
            registration_gates.push(g.clone());
        }
    }
    let mut registration = json!({});
    let (names, include_current) = listed_secrets(spec, input.older);
    // MultipleHubs whenever the KlusterletConfig has a LocalSecrets list that renders at least
    // one Secret: the chart renders `bootstrap-hub-kubeconfig` only when
    // `multiHubBootstrapHubKubeConfigs` is empty, and the current hub alone (an empty list
    // with IncludeCurrentHub) is not (stolostron/managedcluster-import-controller
    // `pkg/bootstrap/render.go`, which enables MultipleHubs for any LocalSecrets
    // `multipleHubsConfig`, not only a non-empty one).
    if !names.is_empty() || include_current {
        let mut listed = Vec::new();
        for name in &names {
            let Some((_, Some(kubeconfig))) = input.secrets.iter().find(|(n, _)| n == name) else {
                return Err(RenderError::Config(format!(
                    "secrets \"{name}\" not found in namespace {BOOTSTRAP_SECRETS_NAMESPACE}"
                )));
            };
            secrets.push(secret(name, kubeconfig));
            listed.push(json!({"name": name}));
        }
        if include_current {
            secrets.push(secret(CURRENT_HUB_SECRET, &bootstrap));
            listed.push(json!({"name": CURRENT_HUB_SECRET}));
        }
        if !registration_gates
            .iter()
            .any(|g| g.get("feature").and_then(Value::as_str) == Some("MultipleHubs"))
        {
            registration_gates.push(json!({"feature": "MultipleHubs", "mode": "Enable"}));
        }
        let boot = match input.older {
            None => spec.pointer("/multipleHubsConfig/bootstrapKubeConfigs"),
            Some(_) => spec.get("bootstrapKubeConfigs"),
        };
        let timeout = boot
            .and_then(|b| b.pointer("/localSecretsConfig/hubConnectionTimeoutSeconds"))
            .cloned()
            .unwrap_or(json!(600));
        registration["bootstrapKubeConfigs"] = json!({"type": "LocalSecrets", "localSecretsConfig": {
            "kubeConfigSecrets": listed, "hubConnectionTimeoutSeconds": timeout}});
    } else {
        secrets.push(secret(BOOTSTRAP_HUB_KUBECONFIG, &bootstrap));
    }
    if !registration_gates.is_empty() {
        registration["featureGates"] = Value::Array(registration_gates);
    }
    let mut work = json!({});
    if !work_gates.is_empty() {
        work["featureGates"] = Value::Array(work_gates);
    }
    for (from, to) in [
        (
            "appliedManifestWorkEvictionGracePeriod",
            "appliedManifestWorkEvictionGracePeriod",
        ),
        ("workStatusSyncInterval", "statusSyncInterval"),
    ] {
        if let Some(v) = spec.get(from).filter(|v| !is_zero(Some(v))) {
            work[to] = v.clone();
        }
    }
    let mut klusterlet_spec = json!({"clusterName": input.cluster, "namespace": AGENT_NAMESPACE,
                                     "registrationConfiguration": registration});
    if work.as_object().is_some_and(|w| !w.is_empty()) {
        klusterlet_spec["workConfiguration"] = work;
    }
    if let Some(p) = spec.get("nodePlacement").filter(|p| !is_zero(Some(p))) {
        klusterlet_spec["nodePlacement"] = p.clone();
    }
    // Registries rewrite the agent images (source prefix -> mirror).
    let image = |default: &str| {
        spec.get("registries")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find_map(|r| {
                let source = r.get("source")?.as_str()?;
                let mirror = r.get("mirror")?.as_str()?;
                default
                    .strip_prefix(source)
                    .map(|rest| format!("{mirror}{rest}"))
            })
            .unwrap_or_else(|| default.to_owned())
    };
    klusterlet_spec["registrationImagePullSpec"] = json!(image(
        "registry.redhat.io/multicluster-engine/registration-rhel9:latest"
    ));
    klusterlet_spec["workImagePullSpec"] = json!(image(
        "registry.redhat.io/multicluster-engine/work-rhel9:latest"
    ));
    // The singleton agent's image: the chart's `imagePullSpec` is the operator's image, whose
    // binary runs the singleton agent too (ocm `deploy/klusterlet/chart/klusterlet/templates/klusterlet.yaml`;
    // the operator renders it into the agent's pod, `SingletonImage`).
    let operator =
        image("registry.redhat.io/multicluster-engine/registration-operator-rhel9:latest");
    klusterlet_spec["imagePullSpec"] = json!(operator);
    Ok(in_upstream_order(
        secrets,
        &operator,
        json!({
            "apiVersion": "operator.open-cluster-management.io/v1", "kind": "Klusterlet",
            "metadata": {"name": migration_api::names::KLUSTERLET},
            "spec": klusterlet_spec
        }),
    ))
}

/// The managed cluster's namespace of the klusterlet operator (the chart's release namespace).
pub const OPERATOR_NAMESPACE: &str = "open-cluster-management";
/// The image pull secret the chart renders (ACM's import always creates image credentials).
pub const IMAGE_PULL_SECRET: &str = "open-cluster-management-image-pull-credentials";

/// A klusterlet work's manifests in the order upstream's import controller writes them
/// (`AggregateObjects`, stolostron/managedcluster-import-controller `pkg/bootstrap/render.go`,
/// over the klusterlet chart, ocm `deploy/klusterlet/chart/klusterlet/templates`): the
/// Namespaces first; then the chart's other objects sorted by their YAML text, which puts the
/// operator's ClusterRole and ClusterRoleBinding (`apiVersion: rbac...`) before the Secrets
/// (`apiVersion: v1`, by name, so the image pull secret after every `bootstrap-hub-kubeconfig*`),
/// then the ServiceAccount, then the operator's Deployment (its template starts with `kind:`,
/// after every `apiVersion:`); the Klusterlet last of the chart's; then the two ClusterRoles
/// of `additionalClusterRoleFiles`, the Klusterlet's aggregate role among them, appended.
/// So the work agent writes the image pull secret, the ServiceAccount and the Deployment
/// between a changed `bootstrap-hub-kubeconfig` (which restarts the registration agent and,
/// in the singleton agent, cancels the work agent's context) and the Klusterlet. Not
/// rendered: the PriorityClass (before the Secrets, so it does not change that order).
fn in_upstream_order(
    mut secrets: Vec<Value>,
    operator_image: &str,
    klusterlet: Value,
) -> Vec<Value> {
    let namespace =
        |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    secrets.push(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": IMAGE_PULL_SECRET, "namespace": OPERATOR_NAMESPACE, "labels": {"app": "klusterlet"}},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64::engine::general_purpose::STANDARD.encode("{\"auths\":{}}")}}));
    secrets.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
    let mut manifests = vec![
        namespace(OPERATOR_NAMESPACE),
        namespace(AGENT_NAMESPACE),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "klusterlet"},
               "rules": [{"apiGroups": ["operator.open-cluster-management.io"],
                          "resources": ["klusterlets", "klusterlets/status"], "verbs": ["get", "list", "watch", "update", "patch"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "klusterlet"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "klusterlet"},
               "subjects": [{"kind": "ServiceAccount", "name": "klusterlet", "namespace": OPERATOR_NAMESPACE}]}),
    ];
    manifests.extend(secrets);
    manifests.push(json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "klusterlet", "namespace": OPERATOR_NAMESPACE},
        "imagePullSecrets": [{"name": IMAGE_PULL_SECRET}]}));
    manifests.push(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "klusterlet", "namespace": OPERATOR_NAMESPACE, "labels": {"app": "klusterlet"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "klusterlet"}},
                 "template": {"metadata": {"labels": {"app": "klusterlet"}},
                              "spec": {"serviceAccountName": "klusterlet",
                                       "containers": [{"name": "klusterlet", "image": operator_image,
                                                       "args": ["/registration-operator", "klusterlet"]}]}}}}));
    manifests.push(klusterlet);
    manifests.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "klusterlet-bootstrap-kubeconfig"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [BOOTSTRAP_HUB_KUBECONFIG],
                   "verbs": ["get", "update"]}]}));
    manifests.push(klusterlet_admin_role());
    manifests
}

/// ReadOnly manifest configs for every manifest of a work (`buildManifestConfigs` with
/// auto-import disabled).
pub fn read_only_configs(manifests: &[Value]) -> Vec<Value> {
    manifests
        .iter()
        .map(|m| {
            let (group, _) = m["apiVersion"]
                .as_str()
                .unwrap_or_default()
                .rsplit_once('/')
                .unwrap_or(("", ""));
            let kind = m["kind"].as_str().unwrap_or_default().to_ascii_lowercase();
            let resource = if kind.ends_with('s') {
                format!("{kind}es")
            } else if let Some(stem) = kind.strip_suffix('y') {
                format!("{stem}ies")
            } else {
                format!("{kind}s")
            };
            let mut id =
                json!({"group": group, "resource": resource, "name": m["metadata"]["name"]});
            if let Some(ns) = m["metadata"]["namespace"].as_str() {
                id["namespace"] = json!(ns);
            }
            json!({"resourceIdentifier": id, "updateStrategy": {"type": "ReadOnly"}})
        })
        .collect()
}

struct Ctx {
    client: Client,
    /// What the controller reads, from its watches (upstream reads through informers too):
    /// KlusterletConfigs, the bootstrap kubeconfig Secrets of its namespace, every
    /// `auto-import-secret`, the klusterlet works.
    configs: Store<DynamicObject>,
    kc_type: ApiResource,
    secrets: Store<Secret>,
    auto_import: Store<Secret>,
    works: Store<ManifestWork>,
    /// The hub's namespaces: a cluster's works go in its own, which the registration
    /// controller makes.
    namespaces: Store<Namespace>,
    /// The hub's own bootstrap kubeconfig, which the klusterlet work keeps on every cluster
    /// (so a cluster that moved here restarts against this hub, not the one it left).
    bootstrap_kubeconfig: String,
    older: Option<OlderMce>,
    /// The retries of failed reconciles: controller-runtime's default rate limiter (upstream's
    /// `pkg/controller/manifestwork/manager.go` sets no `RateLimiter` of its own).
    retries: crate::backoff::Retries,
}

/// The bootstrap kubeconfig Secrets a cluster's KlusterletConfigs (the global one merged
/// under its own) name.
fn secrets_named(
    mc: &ManagedCluster,
    configs: &Store<DynamicObject>,
    kc_type: &ApiResource,
    older: Option<OlderMce>,
) -> Vec<String> {
    listed_secrets(&merged_config(mc, configs, kc_type), older).0
}

/// A cluster's KlusterletConfig spec: its own merged over the global one, as JSON (hubs with
/// the older CRD keep `bootstrapKubeConfigs` under `spec`).
fn merged_config(
    mc: &ManagedCluster,
    configs: &Store<DynamicObject>,
    kc_type: &ApiResource,
) -> Value {
    let spec_of = |name: &str| {
        configs
            .get(&ObjectRef::new_with(name, kc_type.clone()))
            .and_then(|k| k.data.get("spec").cloned())
    };
    let global = spec_of(GLOBAL_KLUSTERLET_CONFIG);
    let own = mc
        .annotations()
        .get(KLUSTERLET_CONFIG)
        .and_then(|n| spec_of(n));
    merge_klusterlet_configs(global.as_ref(), own.as_ref())
}

/// Runs until aborted.
pub async fn run(client: Client, bootstrap_kubeconfig: String, older: Option<OlderMce>) {
    use kube::runtime::WatchStreamExt;
    use kube::runtime::reflector::{self, store::Writer};
    let clusters: Api<ManagedCluster> = Api::all(client.clone());
    let kc_type = ApiResource::erase::<KlusterletConfig>(&());
    let configs_api: Api<DynamicObject> = Api::all_with(client.clone(), &kc_type);
    let secrets_api: Api<Secret> = Api::namespaced(client.clone(), BOOTSTRAP_SECRETS_NAMESPACE);
    let kc_writer = Writer::<DynamicObject>::new(kc_type.clone());
    let configs = kc_writer.as_reader();
    // Each watch has its own back-off and keeps its errors (`migration_api::runtime::controller`,
    // `watch_events`), as every informer's reflector does upstream (the import controller, on
    // controller-runtime's informers; one back-off over all its watches held them here for minutes
    // after a hub's API server came back): client-go `tools/cache/reflector.go` (vendored in ocm)
    // gives each reflector `NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0)`, so one
    // watch's error never pauses another's.
    let config_events = migration_api::runtime::errors_stay_in_the_watch(
        reflector::reflector(
            kc_writer,
            watcher::watcher(configs_api, watcher::Config::default()),
        )
        .default_backoff()
        .touched_objects(),
    );
    let (secrets, secret_events) =
        migration_api::runtime::cached_watch(secrets_api, watcher::Config::default());
    let (auto_import, auto_import_events) = migration_api::runtime::cached_watch(
        Api::<Secret>::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={AUTO_IMPORT_SECRET}")),
    );
    let (works, work_events) = migration_api::runtime::cached_watch(
        Api::<ManifestWork>::all(client.clone()),
        watcher::Config::default(),
    );
    let (namespaces, namespace_events) = migration_api::runtime::cached_watch(
        Api::<Namespace>::all(client.clone()),
        watcher::Config::default(),
    );
    let controller = migration_api::runtime::controller(clusters, watcher::Config::default());
    let store = controller.store();
    let by_config = store.clone();
    let by_secret = store.clone();
    let by_work = store;
    let (secret_configs, secret_kc_type) = (configs.clone(), kc_type.clone());
    tokio::spawn(delete_namespaces(client.clone()));
    let ctx = Arc::new(Ctx {
        client,
        configs,
        kc_type: kc_type.clone(),
        secrets,
        auto_import,
        works,
        namespaces,
        bootstrap_kubeconfig,
        older,
        retries: crate::backoff::Retries::default(),
    });
    controller
        // A cluster's namespace made wakes it (see `reconcile`).
        .watches_stream(namespace_events, |ns: Namespace| {
            Some(ObjectRef::<ManagedCluster>::new(&ns.name_any()))
        })
        .watches_stream(work_events, move |w: ManifestWork| {
            let r = ObjectRef::<ManagedCluster>::new(&w.namespace()?);
            by_work
                .get(&r)
                .filter(|mc| mc.metadata.deletion_timestamp.is_some())
                .map(|_| r)
        })
        .watches_stream_with(
            config_events,
            move |kc: DynamicObject| {
                let name = kc.name_any();
                by_config
                    .state()
                    .into_iter()
                    .filter(|mc| {
                        name == GLOBAL_KLUSTERLET_CONFIG
                            || mc.annotations().get(KLUSTERLET_CONFIG) == Some(&name)
                    })
                    .map(|mc| ObjectRef::from_obj(&*mc))
                    .collect::<Vec<_>>()
            },
            kc_type,
        )
        // A bootstrap kubeconfig Secret wakes the clusters whose configs name it.
        .watches_stream(secret_events, move |s: Secret| {
            let name = s.name_any();
            by_secret
                .state()
                .into_iter()
                .filter(|mc| {
                    secrets_named(mc, &secret_configs, &secret_kc_type, older).contains(&name)
                })
                .map(|mc| ObjectRef::from_obj(&*mc))
                .collect::<Vec<_>>()
        })
        .watches_stream(auto_import_events, |s: Secret| {
            s.namespace()
                .map(|ns| ObjectRef::<ManagedCluster>::new(&ns))
        })
        .run(
            |mc, ctx| async move {
                let done = reconcile(mc.clone(), ctx.clone()).await;
                ctx.retries.settled(&mc.name_any(), done)
            },
            |mc, e: &RenderError, ctx| {
                tracing::debug!(error = %e, "import reconcile failed");
                Action::requeue(ctx.retries.when(&mc.name_any(), std::time::Instant::now()))
            },
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

async fn reconcile(mc: Arc<ManagedCluster>, ctx: Arc<Ctx>) -> Result<Action, RenderError> {
    // Nothing is rendered from caches that have not listed yet.
    for ready in [
        ctx.configs.wait_until_ready().await,
        ctx.secrets.wait_until_ready().await,
        ctx.auto_import.wait_until_ready().await,
        ctx.works.wait_until_ready().await,
    ] {
        if ready.is_err() {
            return Ok(Action::await_change());
        }
    }
    if mc.metadata.deletion_timestamp.is_some() {
        return Ok(clean_up(&ctx.client, &mc).await?);
    }
    // Upstream `pkg/controller/managedcluster/managedcluster_controller.go`.
    let clusters: Api<ManagedCluster> = Api::all(ctx.client.clone());
    if finalizers::add(&clusters, &*mc, IMPORT_FINALIZER).await? {
        return Ok(Action::await_change());
    }
    let cluster = mc.name_any();
    let works: Api<ManifestWork> = Api::namespaced(ctx.client.clone(), &cluster);
    let name = klusterlet_work(&cluster);
    let current = ctx.works.get(&ObjectRef::new(&name).within(&cluster));
    let current_spec = current
        .as_ref()
        .and_then(|w| serde_json::to_value(&w.spec).ok());
    if mc.annotations().contains_key(DISABLE_AUTO_IMPORT) {
        // The works stay as they are, read-only (upstream's DR restore guard): written through
        // the same apply as ever, so that the configs go again once the annotation does.
        if let Some(w) = current {
            let manifests = w.manifests().to_vec();
            let configs = read_only_configs(&manifests);
            apply_klusterlet_work(&works, current_spec, &cluster, manifests, configs).await?;
        }
        return Ok(Action::await_change());
    }
    let spec = merged_config(&mc, &ctx.configs, &ctx.kc_type);
    let secrets: Vec<(String, Option<String>)> = listed_secrets(&spec, ctx.older)
        .0
        .into_iter()
        .map(|n| {
            let text = ctx
                .secrets
                .get(&ObjectRef::new(&n).within(BOOTSTRAP_SECRETS_NAMESPACE))
                .and_then(|s| crate::klusterlet::secret_text(&s, "kubeconfig"));
            (n, text)
        })
        .collect();
    let manifests = render(&RenderInput {
        cluster: &cluster,
        spec: &spec,
        hub_bootstrap_kubeconfig: &ctx.bootstrap_kubeconfig,
        secrets: &secrets,
        older: ctx.older,
    })?;
    if let Some(secret) = ctx
        .auto_import
        .get(&ObjectRef::new(AUTO_IMPORT_SECRET).within(&cluster))
    {
        auto_import(&ctx.client, &cluster, &secret, &manifests).await?;
    }
    // Klusterlet works only for clusters the hub accepts, and only once the cluster's
    // namespace is there: upstream's `pkg/controller/manifestwork/manifestwork_controller.go`
    // applies them only once the cluster's import secret, in that namespace, is in its cache
    // (none yet: done, woken by the secret's creation), not again and again into a namespace
    // that does not exist yet (404 each time).
    if !mc.spec.hub_accepts_client
        || ctx
            .namespaces
            .get(&ObjectRef::new(&cluster))
            .is_none_or(|ns| ns.metadata.deletion_timestamp.is_some())
    {
        return Ok(Action::await_change());
    }
    apply_klusterlet_work(&works, current_spec, &cluster, manifests, Vec::new()).await?;
    Ok(Action::await_change())
}

/// Whether a klusterlet work's spec (as read back) is `desired` in what this controller writes.
fn same_work_spec(current: &Value, desired: &Value) -> bool {
    let configs = |v: &Value| {
        v.get("manifestConfigs")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    current.pointer("/workload/manifests") == desired.pointer("/workload/manifests")
        && current.pointer("/deleteOption/propagationPolicy")
            == desired.pointer("/deleteOption/propagationPolicy")
        && configs(current) == configs(desired)
}

/// Writes a cluster's klusterlet work whole, `manifestConfigs` included, as upstream's
/// `createManifestWorks` and `buildManifestConfigs` (`manifestwork_controller.go`) build it
/// afresh on every apply: ReadOnly configs while auto-import is disabled, none otherwise.
/// (Not written when `current`, the work's spec as last seen, is already the one it would
/// write: upstream compares too before it updates.)
async fn apply_klusterlet_work(
    works: &Api<ManifestWork>,
    current: Option<Value>,
    cluster: &str,
    manifests: Vec<Value>,
    configs: Vec<Value>,
) -> Result<(), kube::Error> {
    let name = klusterlet_work(cluster);
    let mut spec = json!({"workload": {"manifests": manifests},
                          "deleteOption": {"propagationPolicy": "Orphan"}});
    if !configs.is_empty() {
        spec["manifestConfigs"] = Value::Array(configs);
    }
    if current.is_some_and(|c| same_work_spec(&c, &spec)) {
        return Ok(());
    }
    works
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(json!({
                "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                "metadata": {"name": name, "namespace": cluster,
                             "labels": {migration_api::names::labels::KLUSTERLET_WORKS: "true"}},
                "spec": spec
            })),
        )
        .await?;
    Ok(())
}

/// Auto-import (upstream `pkg/controller/autoimport/autoimport_controller.go`): with an
/// `auto-import-secret` (a kubeconfig of the managed cluster) in the cluster's namespace, and
/// no `disable-auto-import` on it (checked by the caller), the klusterlet manifests are applied
/// straight onto the cluster, whether the hub accepts it or not. The secret is deleted after
/// a successful import unless annotated `keeping-auto-import-secret`, and as long as it is kept
/// every reconcile imports again: the `ImportAndSync` strategy, the one that can pull a
/// cluster back onto this hub.
async fn auto_import(
    client: &Client,
    cluster: &str,
    secret: &Secret,
    manifests: &[Value],
) -> Result<(), RenderError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), cluster);
    let Some(kubeconfig) = crate::klusterlet::secret_text(secret, "kubeconfig") else {
        return Ok(());
    };
    let managed = kube_sim::client_from_kubeconfig(&kubeconfig)
        .await
        .map_err(|e| RenderError::Config(format!("auto-import-secret of {cluster}: {e}")))?;
    for m in manifests {
        let gvk = kube::core::GroupVersionKind::try_from(&kube::core::TypeMeta {
            api_version: m["apiVersion"].as_str().unwrap_or_default().to_owned(),
            kind: m["kind"].as_str().unwrap_or_default().to_owned(),
        })
        .map_err(|e| RenderError::Config(e.to_string()))?;
        let (ar, caps) = kube::discovery::pinned_kind(&managed, &gvk).await?;
        let name = m["metadata"]["name"].as_str().unwrap_or_default();
        let api: Api<DynamicObject> = match (caps.scope, m["metadata"]["namespace"].as_str()) {
            (kube::discovery::Scope::Namespaced, Some(ns)) => {
                Api::namespaced_with(managed.clone(), ns, &ar)
            }
            _ => Api::all_with(managed.clone(), &ar),
        };
        // Created, or written whole over what is there: upstream's `ApplyResources`
        // (`pkg/helpers/helpers.go`) replaces an existing Klusterlet's spec (`applyKlusterlet`)
        // and a Secret's data (library-go `resourceapply.ApplySecret`), merging only the
        // metadata, so nothing another writer set (a MultipleHubs list a hub's klusterlet work
        // left, say) outlives the import.
        match api.get_opt(name).await? {
            None => {
                let object: DynamicObject = serde_json::from_value(m.clone())
                    .map_err(|e| RenderError::Config(e.to_string()))?;
                api.create(&PostParams::default(), &object).await?;
            }
            Some(existing) => {
                let existing = serde_json::to_value(existing)
                    .map_err(|e| RenderError::Config(e.to_string()))?;
                if let Some(required) = crate::work_agent::updated(&existing, m.clone(), None) {
                    let object: DynamicObject = serde_json::from_value(required)
                        .map_err(|e| RenderError::Config(e.to_string()))?;
                    api.replace(name, &PostParams::default(), &object).await?;
                }
            }
        }
    }
    tracing::info!(%cluster, "auto-imported: the klusterlet manifests applied onto the cluster");
    if !secret.annotations().contains_key(KEEP_AUTO_IMPORT_SECRET) {
        secrets
            .delete(AUTO_IMPORT_SECRET, &Default::default())
            .await?;
    }
    Ok(())
}

/// Upstream `pkg/controller/resourcecleanup/resourcecleanup_controller.go`: a deleted cluster
/// the hub no longer accepts, or whose `ManagedClusterConditionAvailable` is False or Unknown,
/// has its ManagedClusterAddOns and ManifestWorks force-deleted (deleted, then their finalizers
/// cleared: `pkg/helpers/manifestwork.go` `ForceDeleteManifestWork`), whatever they applied
/// left on the cluster; any other waits for its work agent to finish the works the
/// registration GC deletes. The import finalizer goes once none is left.
async fn clean_up(client: &Client, mc: &ManagedCluster) -> Result<Action, kube::Error> {
    let name = mc.name_any();
    let works: Api<ManifestWork> = Api::namespaced(client.clone(), &name);
    let addons: Api<ManagedClusterAddOn> = Api::namespaced(client.clone(), &name);
    let unavailable = mc
        .conditions()
        .iter()
        .find(|c| c.type_ == CLUSTER_AVAILABLE)
        .is_some_and(|c| c.status == "False" || c.status == "Unknown");
    let lp = ListParams::default();
    if !mc.spec.hub_accepts_client || unavailable {
        for a in addons.list_metadata(&lp).await?.items {
            finalizers::force_delete(&addons, &a.name_any()).await?;
        }
        for w in works.list_metadata(&lp).await?.items {
            finalizers::force_delete(&works, &w.name_any()).await?;
        }
    }
    let left_works = works.list_metadata(&lp).await?.items.len();
    let left_addons = addons.list_metadata(&lp).await?.items.len();
    if left_works > 0 || left_addons > 0 {
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    finalizers::remove(
        &Api::<ManagedCluster>::all(client.clone()),
        &name,
        IMPORT_FINALIZER,
    )
    .await?;
    Ok(Action::await_change())
}

/// Upstream `pkg/controller/clusternamespacedeletion/controller.go`: once a cluster is gone,
/// its namespace goes too, unless annotated `open-cluster-management.io/retain-namespace` or
/// anything in it still needs it ([`keeps_namespace`]).
async fn delete_namespaces(client: Client) {
    let clusters: Api<ManagedCluster> = Api::all(client.clone());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut events = std::pin::pin!(kube::runtime::WatchStreamExt::default_backoff(watcher(
        clusters,
        watcher::Config::default()
    )));
    while let Some(ev) = events.next().await {
        let Ok(watcher::Event::Delete(mc)) = ev else {
            continue;
        };
        let name = mc.name_any();
        let result = async {
            let Some(ns) = namespaces.get_opt(&name).await? else {
                return Ok(());
            };
            if ns.annotations().contains_key(RETAIN_NAMESPACE)
                || ns.metadata.deletion_timestamp.is_some()
                || keeps_namespace(&client, &name).await?
            {
                return Ok(());
            }
            finalizers::ignore_not_found(namespaces.delete(&name, &DeleteParams::default()).await)
        }
        .await;
        if let Err(e) = result {
            tracing::warn!(cluster = %name, error = %e, "deleting the cluster namespace");
        }
    }
}

/// Whether something in a deleted cluster's namespace keeps it, as upstream checks in order:
/// ManagedClusterAddOns, HostedClusters, hive's ClusterDeployments, assisted-service's
/// InfraEnvs (each only where the hub serves it: a kind it does not serve has none), and pods
/// other than a curator's or hook's jobs (a running one always, unless it is the cluster's
/// uninstall).
async fn keeps_namespace(client: &Client, ns: &str) -> Result<bool, kube::Error> {
    use kube::api::DynamicObject;
    use kube::core::GroupVersionKind;
    use kube::discovery::ApiResource;
    let addons: Api<ManagedClusterAddOn> = Api::namespaced(client.clone(), ns);
    if !addons
        .list_metadata(&ListParams::default())
        .await?
        .items
        .is_empty()
    {
        return Ok(true);
    }
    for (group, version, kind, plural) in [
        (
            "hypershift.openshift.io",
            "v1beta1",
            "HostedCluster",
            "hostedclusters",
        ),
        (
            "hive.openshift.io",
            "v1",
            "ClusterDeployment",
            "clusterdeployments",
        ),
        (
            "agent-install.openshift.io",
            "v1beta1",
            "InfraEnv",
            "infraenvs",
        ),
    ] {
        let ar =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        match api.list_metadata(&ListParams::default()).await {
            Ok(l) if !l.items.is_empty() => return Ok(true),
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
    let pods = match pods.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
        Err(e) => return Err(e),
    };
    Ok(pods.iter().any(|p| {
        let name = p.name_any();
        let job = ["curator-job", "posthookjob", "prehookjob"]
            .iter()
            .any(|prefix| name.starts_with(prefix));
        let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        !job || (running && !name.contains(&format!("{ns}-uninstall")))
    }))
}

/// The import controller's finalizer on every ManagedCluster.
pub const IMPORT_FINALIZER: &str =
    "managedcluster-import-controller.open-cluster-management.io/cleanup";
/// Keeps a deleted cluster's namespace.
pub const RETAIN_NAMESPACE: &str = "open-cluster-management.io/retain-namespace";

/// The secret auto-import reads the managed cluster's kubeconfig from.
pub const AUTO_IMPORT_SECRET: &str = "auto-import-secret";
/// Keeps the auto-import secret after an import.
pub const KEEP_AUTO_IMPORT_SECRET: &str =
    "managedcluster-import-controller.open-cluster-management.io/keeping-auto-import-secret";

#[cfg(test)]
mod tests {
    use super::*;

    /// `helpers/klusterletconfig/merge.go`: the cluster's own KlusterletConfig over `global`.
    #[test]
    fn a_clusters_klusterlet_config_merges_over_the_global_one() {
        let global = json!({"hubKubeAPIServerConfig": {"url": "https://global:6443", "serverVerificationStrategy": "UseSystemTruststore",
                                                       "trustedCABundles": [{"name": "a"}]},
                            "featureGates": [{"feature": "ClusterClaim", "mode": "Enable"}, {"feature": "AddonManagement", "mode": "Enable"}],
                            "nodePlacement": {"nodeSelector": {"zone": "g"}},
                            "appliedManifestWorkEvictionGracePeriod": "60m"});
        let own = json!({"hubKubeAPIServerConfig": {"proxyURL": "http://proxy", "trustedCABundles": [{"name": "b"}, {"name": "a"}]},
                         "featureGates": [{"feature": "ClusterClaim", "mode": "Disable"}],
                         "registries": [{"source": "registry.redhat.io", "mirror": "mirror.io"}]});
        let m = merge_klusterlet_configs(Some(&global), Some(&own));
        assert_eq!(m["hubKubeAPIServerConfig"]["url"], "https://global:6443");
        assert_eq!(m["hubKubeAPIServerConfig"]["proxyURL"], "http://proxy");
        assert_eq!(
            m["hubKubeAPIServerConfig"]["serverVerificationStrategy"],
            "UseSystemTruststore"
        );
        assert_eq!(
            m["hubKubeAPIServerConfig"]["trustedCABundles"],
            json!([{"name": "b"}, {"name": "a"}])
        );
        assert_eq!(
            m["featureGates"],
            json!([{"feature": "ClusterClaim", "mode": "Disable"}, {"feature": "AddonManagement", "mode": "Enable"}])
        );
        assert_eq!(m["nodePlacement"], global["nodePlacement"]);
        assert_eq!(m["registries"], own["registries"]);
        assert_eq!(m["appliedManifestWorkEvictionGracePeriod"], "60m");
        assert_eq!(merge_klusterlet_configs(None, Some(&own)), own);
        assert_eq!(merge_klusterlet_configs(Some(&global), None), global);
        assert_eq!(merge_klusterlet_configs(None, None), json!({}));
    }

    fn names_of(manifests: &[Value]) -> Vec<String> {
        manifests
            .iter()
            .map(|m| {
                format!(
                    "{}/{}",
                    m["kind"].as_str().unwrap(),
                    m["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect()
    }

    const HUB: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: https://127.0.0.1:1\ncontexts: []\nusers: []\n";

    /// `pkg/bootstrap/render.go`: with IncludeCurrentHub the current hub's bootstrap
    /// kubeconfig comes last in the Klusterlet's list, under its own name, and points where
    /// the KlusterletConfig says; the MultipleHubs list replaces `bootstrap-hub-kubeconfig`;
    /// the manifests are in upstream's order (`AggregateObjects`).
    #[test]
    fn include_current_hub_renders_the_current_hub_last_with_the_configured_url() {
        let spec = json!({"hubKubeAPIServerConfig": {"url": "https://localhost:1"},
                          "multipleHubsConfig": {"genBootstrapKubeConfigStrategy": "IncludeCurrentHub",
                              "bootstrapKubeConfigs": {"type": "LocalSecrets", "localSecretsConfig": {
                                  "kubeConfigSecrets": [{"name": "bootstrap-hub2"}], "hubConnectionTimeoutSeconds": 180}}},
                          "featureGates": [{"feature": "RawFeedbackJsonString", "mode": "Enable"}],
                          "nodePlacement": {"nodeSelector": {"infra": "true"}},
                          "registries": [{"source": "registry.redhat.io/multicluster-engine", "mirror": "mirror.io/mce"}]});
        let secrets = [("bootstrap-hub2".to_owned(), Some("target".to_owned()))];
        let input = RenderInput {
            cluster: "c1",
            spec: &spec,
            hub_bootstrap_kubeconfig: HUB,
            secrets: &secrets,
            older: None,
        };
        let m = render(&input).unwrap();
        assert_eq!(
            names_of(&m),
            [
                "Namespace/open-cluster-management",
                "Namespace/open-cluster-management-agent",
                "ClusterRole/klusterlet",
                "ClusterRoleBinding/klusterlet",
                "Secret/bootstrap-hub-kubeconfig-current-hub",
                "Secret/bootstrap-hub2",
                "Secret/open-cluster-management-image-pull-credentials",
                "ServiceAccount/klusterlet",
                "Deployment/klusterlet",
                "Klusterlet/klusterlet",
                "ClusterRole/klusterlet-bootstrap-kubeconfig",
                "ClusterRole/open-cluster-management:klusterlet-admin-aggregate-clusterrole",
            ]
        );
        let named = |kind: &str, name: &str| {
            m.iter()
                .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
                .unwrap()
        };
        assert_eq!(
            named("Deployment", "klusterlet")["spec"]["template"]["spec"]["containers"][0]["image"],
            "mirror.io/mce/registration-operator-rhel9:latest"
        );
        assert_eq!(
            named("Klusterlet", "klusterlet")["spec"]["imagePullSpec"],
            "mirror.io/mce/registration-operator-rhel9:latest"
        );
        // Without a MultipleHubs list, `bootstrap-hub-kubeconfig` is the Secret.
        let plain = json!({});
        let only = render(&RenderInput {
            spec: &plain,
            ..input
        })
        .unwrap();
        assert_eq!(
            names_of(&only)[4..7],
            [
                "Secret/bootstrap-hub-kubeconfig",
                "Secret/open-cluster-management-image-pull-credentials",
                "ServiceAccount/klusterlet",
            ]
        );
        let k = &named("Klusterlet", "klusterlet")["spec"];
        assert_eq!(
            k["registrationConfiguration"]["bootstrapKubeConfigs"]["localSecretsConfig"]["kubeConfigSecrets"],
            json!([{"name": "bootstrap-hub2"}, {"name": CURRENT_HUB_SECRET}])
        );
        assert_eq!(
            k["registrationConfiguration"]["featureGates"],
            json!([{"feature": "MultipleHubs", "mode": "Enable"}])
        );
        assert_eq!(
            k["workConfiguration"]["featureGates"],
            json!([{"feature": "RawFeedbackJsonString", "mode": "Enable"}])
        );
        assert_eq!(k["nodePlacement"]["nodeSelector"]["infra"], "true");
        assert_eq!(
            k["registrationImagePullSpec"],
            "mirror.io/mce/registration-rhel9:latest"
        );
        let current = base64::engine::general_purpose::STANDARD
            .decode(
                named("Secret", CURRENT_HUB_SECRET)["data"]["kubeconfig"]
                    .as_str()
                    .unwrap(),
            )
            .unwrap();
        assert!(
            String::from_utf8(current)
                .unwrap()
                .contains("https://localhost:1")
        );
        // A listed secret the hub does not have fails the render (nothing is half applied).
        let missing = [("bootstrap-hub2".to_owned(), None)];
        let input = RenderInput {
            secrets: &missing,
            ..input
        };
        assert!(
            render(&input)
                .unwrap_err()
                .to_string()
                .contains("not found")
        );
    }

    /// `pkg/bootstrap/render.go` enables MultipleHubs for any LocalSecrets
    /// `multipleHubsConfig`: with IncludeCurrentHub and no secrets of its own, the Klusterlet
    /// lists the current hub alone, and `bootstrap-hub-kubeconfig` is not rendered (the
    /// chart's `multiHubBootstrapHubKubeConfigs` holds the current hub).
    #[test]
    fn include_current_hub_with_no_secrets_lists_the_current_hub_alone() {
        let spec = json!({"multipleHubsConfig": {"genBootstrapKubeConfigStrategy": "IncludeCurrentHub",
                              "bootstrapKubeConfigs": {"type": "LocalSecrets", "localSecretsConfig": {
                                  "kubeConfigSecrets": []}}}});
        let m = render(&RenderInput {
            cluster: "c1",
            spec: &spec,
            hub_bootstrap_kubeconfig: HUB,
            secrets: &[],
            older: None,
        })
        .unwrap();
        let secrets: Vec<String> = names_of(&m)
            .into_iter()
            .filter(|n| n.starts_with("Secret/bootstrap"))
            .collect();
        assert_eq!(secrets, [format!("Secret/{CURRENT_HUB_SECRET}")]);
        let k = &m.iter().find(|o| o["kind"] == "Klusterlet").unwrap()["spec"];
        assert_eq!(
            k["registrationConfiguration"]["bootstrapKubeConfigs"]["localSecretsConfig"]["kubeConfigSecrets"],
            json!([{"name": CURRENT_HUB_SECRET}])
        );
        assert_eq!(
            k["registrationConfiguration"]["featureGates"],
            json!([{"feature": "MultipleHubs", "mode": "Enable"}])
        );
    }

    /// The older `spec.bootstrapKubeConfigs`: MCE 2.8 appends the current hub, 2.7 does not.
    #[test]
    fn older_shapes_by_mce_version() {
        let spec = json!({"bootstrapKubeConfigs": {"type": "LocalSecrets", "localSecretsConfig": {
            "kubeConfigSecrets": [{"name": "bootstrap-hub2"}]}}});
        assert_eq!(
            listed_secrets(&spec, Some(OlderMce::Mce27)),
            (vec!["bootstrap-hub2".to_owned()], false)
        );
        assert_eq!(
            listed_secrets(&spec, Some(OlderMce::Mce28)),
            (vec!["bootstrap-hub2".to_owned()], true)
        );
        // The current CRD's field is not read on an older hub, nor the older one on a current hub.
        assert_eq!(listed_secrets(&spec, None), (vec![], false));
    }

    #[test]
    fn disabled_auto_import_makes_every_manifest_read_only() {
        let configs = read_only_configs(&[
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}}),
            json!({"apiVersion": "operator.open-cluster-management.io/v1", "kind": "Klusterlet", "metadata": {"name": "klusterlet"}}),
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "p"}}),
        ]);
        let ids: Vec<String> = configs
            .iter()
            .map(|c| {
                format!(
                    "{}/{}/{}",
                    c["resourceIdentifier"]["group"].as_str().unwrap(),
                    c["resourceIdentifier"]["resource"].as_str().unwrap(),
                    c["updateStrategy"]["type"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(
            ids,
            [
                "/secrets/ReadOnly",
                "operator.open-cluster-management.io/klusterlets/ReadOnly",
                "scheduling.k8s.io/priorityclasses/ReadOnly"
            ]
        );
    }
}
