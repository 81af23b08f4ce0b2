//! One simulated cluster: a kube-sim instance, its admin client, and helpers to set up the
//! identities OCM's components run with.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube_sim::{KubeSim, Options};
use serde_json::{Value, json};

use crate::Error;

/// Which CRDs a cluster gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A hub (or the global hub): every OCM CRD and ours, ACM's included.
    Hub,
    /// A plain OCM hub: no ACM APIs (KlusterletConfig, KlusterletAddonConfig).
    PlainHub,
    /// A hub with an older ACM: its KlusterletConfig CRD has `spec.bootstrapKubeConfigs`
    /// (no `multipleHubsConfig`).
    LegacyHub,
    /// A managed cluster: the agent-side CRDs only.
    Managed,
}

/// Upstream's limit on the manifests of one ManifestWork (ocm `pkg/work/webhook/option.go`:
/// `ManifestLimit`, 500 KiB).
pub const MANIFEST_LIMIT: usize = 500 * 1024;

/// A hub's ManifestWork validating webhook, as strict as upstream's
/// (ocm `pkg/work/webhook/common/validator.go` `ValidateManifests`): at least one manifest,
/// all of them together at most [`MANIFEST_LIMIT`] bytes, each named (no `generateName`),
/// none twice.
pub fn manifest_work_webhook() -> kube_sim::Validator {
    kube_sim::Validator {
        name: "manifestworkvalidators.admission.work.open-cluster-management.io".into(),
        group: "work.open-cluster-management.io".into(),
        kind: "ManifestWork".into(),
        check: std::sync::Arc::new(|work: &serde_json::Value| {
            let manifests = work
                .pointer("/spec/workload/manifests")
                .and_then(serde_json::Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            if manifests.is_empty() {
                return Err("Workload manifests should not be empty".into());
            }
            let size: usize = manifests
                .iter()
                .map(|m| serde_json::to_vec(m).map_or(0, |b| b.len()))
                .sum();
            if size > MANIFEST_LIMIT {
                return Err(format!(
                    "the size of manifests is {size} bytes which exceeds the {MANIFEST_LIMIT} limit"
                ));
            }
            let mut seen = std::collections::BTreeSet::new();
            for m in manifests {
                let text = |p: &str| {
                    m.pointer(p)
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or("")
                };
                if text("/metadata/name").is_empty() {
                    return Err("name must be set in manifest".into());
                }
                if !text("/metadata/generateName").is_empty() {
                    return Err("generateName must not be set in manifest".into());
                }
                let (api, kind, ns, name) = (
                    text("/apiVersion"),
                    text("/kind"),
                    text("/metadata/namespace"),
                    text("/metadata/name"),
                );
                if !seen.insert(format!("{api}/{kind}/{ns}/{name}")) {
                    return Err(format!(
                        "duplicate manifest for resource {ns}/{name} with resource type {api}.{kind}"
                    ));
                }
            }
            Ok(())
        }),
    }
}

/// A hub's ManagedCluster mutating webhook, as strict about taints as upstream's
/// (ocm `pkg/registration/webhook/v1/managedcluster_mutating.go` `processTaints`): on create
/// every taint's `timeAdded` is set to now; on update a new taint, or one whose value or effect
/// changed, must come without `timeAdded` (it is set to now), and an unchanged one must keep
/// the `timeAdded` it has, or the request is refused.
pub fn managed_cluster_webhook() -> kube_sim::Mutator {
    use serde_json::Value;
    kube_sim::Mutator {
        name: "managedclustermutators.admission.cluster.open-cluster-management.io".into(),
        group: "cluster.open-cluster-management.io".into(),
        kind: "ManagedCluster".into(),
        admit: std::sync::Arc::new(|old: Option<&Value>, mc: &mut Value| {
            let now = serde_json::to_value(migration_api::common::now()).unwrap_or_default();
            let before: Vec<Value> = old
                .and_then(|o| o.pointer("/spec/taints"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let Some(taints) = mc.pointer_mut("/spec/taints").and_then(Value::as_array_mut) else {
                return Ok(());
            };
            // A missing field, null and "" are one (Go's zero values).
            let text =
                |t: &Value, f: &str| t.get(f).and_then(Value::as_str).unwrap_or("").to_owned();
            let set = |t: &Value| !text(t, "timeAdded").is_empty();
            let mut invalid = Vec::new();
            for taint in taints.iter_mut() {
                let key = taint.get("key").cloned().unwrap_or(Value::Null);
                let original = before.iter().find(|o| o.get("key") == Some(&key));
                let same = |o: &Value, f: &str| text(o, f) == text(taint, f);
                match original {
                    _ if old.is_none() => taint["timeAdded"] = now.clone(),
                    Some(o) if same(o, "value") && same(o, "effect") => {
                        if !same(o, "timeAdded") {
                            invalid.push(key.as_str().unwrap_or_default().to_owned());
                        }
                    }
                    _ if set(taint) => invalid.push(key.as_str().unwrap_or_default().to_owned()),
                    _ => taint["timeAdded"] = now.clone(),
                }
            }
            if invalid.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "It is not allowed to set TimeAdded of Taint \"{}\".",
                    invalid.join(",")
                ))
            }
        }),
    }
}

/// A running simulated cluster.
pub struct SimCluster {
    pub name: String,
    pub api: KubeSim,
    pub admin: kube::Client,
}

impl std::fmt::Debug for SimCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCluster")
            .field("name", &self.name)
            .field("url", &self.api.url())
            .finish()
    }
}

const MANAGED_KINDS: &[&str] = &["ClusterClaim", "AppliedManifestWork", "Klusterlet"];
/// The work agent's ServiceAccount (in the klusterlet's namespace).
pub const WORK_SERVICE_ACCOUNT: &str = "klusterlet-work-sa";
/// The label that adds a ClusterRole's rules to the work agent's identity.
pub const WORK_AGGREGATE_LABEL: &str = "open-cluster-management.io/aggregate-to-work";
/// The APIs ACM/MCE adds to an OCM hub.
const ACM_KINDS: &[&str] = &["KlusterletConfig", "KlusterletAddonConfig"];

impl SimCluster {
    /// Starts a cluster on 127.0.0.1 with the CRDs its role needs.
    pub async fn start(name: &str, role: Role) -> Result<Self, Error> {
        Self::start_with(name, role, false).await
    }

    /// [`Self::start`], its API server also taking this process's connections through memory
    /// if `in_process_connections` (kube-sim's `Options::in_process_connections`).
    pub async fn start_with(
        name: &str,
        role: Role,
        in_process_connections: bool,
    ) -> Result<Self, Error> {
        let (validators, mutators) = match role {
            Role::Managed => (Vec::new(), Vec::new()),
            _ => (
                vec![manifest_work_webhook()],
                vec![managed_cluster_webhook()],
            ),
        };
        let api = KubeSim::start(Options {
            name: name.to_owned(),
            validators,
            mutators,
            in_process_connections,
            ..Default::default()
        })
        .await?;
        let admin = api.client().await?;
        let cluster = Self {
            name: name.to_owned(),
            api,
            admin,
        };
        let crds: Api<CustomResourceDefinition> = Api::all(cluster.admin.clone());
        for entry in migration_api::crds::all() {
            let kind = entry.crd.spec.names.kind.as_str();
            if (role == Role::Managed && !MANAGED_KINDS.contains(&kind))
                || (role == Role::PlainHub && ACM_KINDS.contains(&kind))
            {
                continue;
            }
            let crd = if role == Role::LegacyHub && kind == "KlusterletConfig" {
                legacy_klusterlet_config_crd(&entry.crd)?
            } else {
                entry.crd.clone()
            };
            crds.create(&PostParams::default(), &crd).await?;
        }
        Ok(cluster)
    }

    /// Ensures a namespace exists.
    pub async fn ensure_namespace(&self, ns: &str) -> Result<(), Error> {
        apply(
            Api::<Namespace>::all(self.admin.clone()),
            ns,
            json!({
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}
            }),
        )
        .await
    }

    /// A ServiceAccount bound to a ClusterRole with these rules; returns a token for it.
    pub async fn service_account(
        &self,
        ns: &str,
        name: &str,
        rules: Value,
        validity: Duration,
    ) -> Result<String, Error> {
        self.ensure_namespace(ns).await?;
        apply(Api::<ServiceAccount>::namespaced(self.admin.clone(), ns), name, json!({
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}
        }))
        .await?;
        let role = format!("ocm-sim:{ns}:{name}");
        apply(
            Api::<ClusterRole>::all(self.admin.clone()),
            &role,
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": role}, "rules": rules
            }),
        )
        .await?;
        apply(Api::<ClusterRoleBinding>::all(self.admin.clone()), &role, json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]
        }))
        .await?;
        self.token(ns, name, validity).await
    }

    /// The work agent's identity on this cluster, as the klusterlet operator sets it up
    /// (upstream `manifests/klusterlet/managed/klusterlet-work-*.yaml` and
    /// `klusterlet_managed_reconcile.go`, open-cluster-management-io/ocm): ServiceAccount
    /// `klusterlet-work-sa` bound to the built-in `admin` role (namespaced kinds in every
    /// namespace), to its own mandatory role (AppliedManifestWorks, access reviews), and to the
    /// aggregate role `open-cluster-management:klusterlet-work:aggregate`, which gathers every
    /// ClusterRole labelled `open-cluster-management.io/aggregate-to-work: "true"`; the
    /// execution role (namespaces, CRDs, RBAC with escalate and bind, ...) is one of them.
    /// Custom resources are reachable only through such a labelled role. Returns a token.
    pub async fn work_agent_identity(&self, validity: Duration) -> Result<String, Error> {
        let ns = crate::names::AGENT_NAMESPACE;
        let sa = WORK_SERVICE_ACCOUNT;
        self.ensure_namespace(ns).await?;
        apply(Api::<ServiceAccount>::namespaced(self.admin.clone(), ns), sa, json!({
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": ns}
        }))
        .await?;
        let roles = Api::<ClusterRole>::all(self.admin.clone());
        let rw = json!([
            "get", "list", "watch", "create", "update", "patch", "delete"
        ]);
        for role in [
            json!({"metadata": {"name": "open-cluster-management:klusterlet-work:agent"}, "rules": [
                {"apiGroups": ["work.open-cluster-management.io"], "resources": ["appliedmanifestworks"], "verbs": rw},
                {"apiGroups": ["work.open-cluster-management.io"], "resources": ["appliedmanifestworks/status"], "verbs": ["patch", "update"]},
                {"apiGroups": ["work.open-cluster-management.io"], "resources": ["appliedmanifestworks/finalizers"], "verbs": ["update"]},
                {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]}
            ]}),
            json!({"metadata": {"name": "open-cluster-management:klusterlet-work:execution",
                                "labels": {WORK_AGGREGATE_LABEL: "true"}}, "rules": [
                {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get", "list", "watch", "create", "delete", "update"]},
                {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["create", "update", "patch", "delete"]},
                {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterrolebindings", "rolebindings"], "verbs": rw},
                {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles", "roles"],
                 "verbs": ["get", "list", "watch", "create", "update", "patch", "delete", "escalate", "bind"]},
                {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": rw},
                {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
                 "verbs": ["get", "list", "watch", "create", "update", "patch"]}
            ]}),
            json!({"metadata": {"name": "open-cluster-management:klusterlet-work:aggregate"},
                   "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {WORK_AGGREGATE_LABEL: "true"}}]},
                   "rules": []}),
        ] {
            let name = role["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let mut body = role;
            body["apiVersion"] = json!("rbac.authorization.k8s.io/v1");
            body["kind"] = json!("ClusterRole");
            apply(roles.clone(), &name, body).await?;
        }
        let bindings = Api::<ClusterRoleBinding>::all(self.admin.clone());
        for (binding, role) in [
            (
                "open-cluster-management:klusterlet-work:agent",
                "open-cluster-management:klusterlet-work:agent",
            ),
            (
                "open-cluster-management:klusterlet-work:aggregate",
                "open-cluster-management:klusterlet-work:aggregate",
            ),
            (
                "open-cluster-management:klusterlet-work:execution-admin",
                "admin",
            ),
        ] {
            apply(bindings.clone(), binding, json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": binding},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]
            }))
            .await?;
        }
        self.token(ns, sa, validity).await
    }

    async fn token(&self, ns: &str, name: &str, validity: Duration) -> Result<String, Error> {
        let sas: Api<ServiceAccount> = Api::namespaced(self.admin.clone(), ns);
        let tr = serde_json::from_value(
            json!({"spec": {"audiences": [], "expirationSeconds": validity.as_secs()}}),
        )?;
        let token = sas
            .create_token_request(name, &PostParams::default(), &tr)
            .await?;
        token
            .status
            .map(|s| s.token)
            .ok_or_else(|| Error::Setup(format!("no token for {ns}/{name}")))
    }

    /// A kube-rs client with a bearer token.
    pub async fn client_for_token(&self, token: &str) -> Result<kube::Client, Error> {
        Ok(kube_sim::client_from_kubeconfig(&self.api.kubeconfig_for_token(token)).await?)
    }
}

/// The KlusterletConfig CRD as older ACM/MCE releases serve it: the bootstrap kubeconfigs
/// directly under `spec` instead of `multipleHubsConfig`.
fn legacy_klusterlet_config_crd(
    crd: &CustomResourceDefinition,
) -> Result<CustomResourceDefinition, Error> {
    let mut v = serde_json::to_value(crd)?;
    for version in v
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        let Some(props) = version
            .pointer_mut("/schema/openAPIV3Schema/properties/spec/properties")
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        let boot = props
            .remove("multipleHubsConfig")
            .and_then(|m| m.pointer("/properties/bootstrapKubeConfigs").cloned())
            .ok_or_else(|| {
                Error::Setup("KlusterletConfig CRD without multipleHubsConfig".into())
            })?;
        props.insert("bootstrapKubeConfigs".into(), boot);
    }
    Ok(serde_json::from_value(v)?)
}

/// Server-side apply of a whole object by the simulator's setup manager.
pub async fn apply<K>(api: Api<K>, name: &str, obj: Value) -> Result<(), Error>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    api.patch(
        name,
        &PatchParams::apply("ocm-sim-setup").force(),
        &Patch::Apply(&obj),
    )
    .await?;
    Ok(())
}

/// Every permission (what OCM's hub controllers and agents effectively hold where they run).
pub fn all_rules() -> Value {
    json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])
}
