//! Plain OCM delivery: a hub without the KlusterletConfig API (no import controller) gets the
//! target's bootstrap kubeconfig to each cluster through a ManifestWork of the migration's own,
//! `migration-<name>-klusterlet` in the cluster's namespace. Everything here is pure: what the
//! work holds at each step, and what its status feedback says.
//!
//! Source hub, one cluster:
//! 1. **Probe**: the bootstrap secret, and the cluster's Klusterlet read-only, with its
//!    registration settings (`featureGates`, `bootstrapKubeConfigs`, both atomic lists that a
//!    server-side apply would replace whole) coming back as status feedback.
//! 2. **Switch**: the Klusterlet server-side applied (field manager [`FIELD_MANAGER`]) with the
//!    MultipleHubs feature gate added to its gates and the current hub first, then the target,
//!    in `bootstrapKubeConfigs`; the settings it had are kept in an annotation on the Klusterlet
//!    and on the work. The klusterlet stays on its hub until that hub stops accepting it.
//! 3. **Restore** (rollback): the settings it had, applied by the same field manager (so what
//!    the migration added goes); then the work is deleted (secret removed, Klusterlet orphaned).
//!
//! Target hub, once the cluster arrived (**Settle**): a probe reads the annotation back, then
//! the work restores those settings, makes the target's bootstrap kubeconfig the cluster's
//! `bootstrap-hub-kubeconfig` (so a restarted klusterlet never goes back to the hub it left),
//! and takes over the migration's secret, which goes with the work in cleanup.

use migration_api::names::{
    BOOTSTRAP_HUB_KUBECONFIG, HUB_CONNECTION_TIMEOUT_SECONDS, KLUSTERLET, KLUSTERLET_NAMESPACE,
    annotations::KLUSTERLET_ORIGINAL, labels,
};
use migration_api::ocm::work::{ManifestWork, feedback_value};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Field manager of the Klusterlet fields the migration sets on a cluster.
pub const FIELD_MANAGER: &str = "cluster-migration";
/// Work annotation: the step the work is at.
pub const STEP: &str = "migration.open-cluster-management.io/klusterlet-step";
const FEATURE: &str = "MultipleHubs";

/// A Klusterlet's registration settings that a migration changes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Registration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_gates: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_kube_configs: Option<Value>,
}

/// Where a cluster's klusterlet work is.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Reading the Klusterlet.
    Probe,
    /// Source: MultipleHubs set, the settings it had attached.
    Switch(Registration),
    /// Source rollback: the settings it had put back.
    Restore(Registration),
    /// Target: the settings it had put back, the target's bootstrap kubeconfig kept.
    Settle(Registration),
}

impl Step {
    fn name(&self) -> &'static str {
        match self {
            Self::Probe => "Probe",
            Self::Switch(_) => "Switch",
            Self::Restore(_) => "Restore",
            Self::Settle(_) => "Settle",
        }
    }
}

/// The registration settings with MultipleHubs on and the target's bootstrap kubeconfig after
/// the ones the klusterlet uses now.
pub fn switched(original: &Registration, target_secret: &str) -> Registration {
    let mut gates: Vec<Value> = original
        .feature_gates
        .as_ref()
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    gates.retain(|g| g.get("feature").and_then(Value::as_str) != Some(FEATURE));
    gates.push(json!({"feature": FEATURE, "mode": "Enable"}));
    let mut names: Vec<String> = original
        .bootstrap_kube_configs
        .as_ref()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("LocalSecrets"))
        .and_then(|b| b.pointer("/localSecretsConfig/kubeConfigSecrets"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if names.is_empty() {
        names.push(BOOTSTRAP_HUB_KUBECONFIG.to_owned());
    }
    if !names.iter().any(|n| n == target_secret) {
        names.push(target_secret.to_owned());
    }
    Registration {
        feature_gates: Some(Value::Array(gates)),
        bootstrap_kube_configs: Some(json!({
            "type": "LocalSecrets",
            "localSecretsConfig": {
                "kubeConfigSecrets": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
                "hubConnectionTimeoutSeconds": HUB_CONNECTION_TIMEOUT_SECONDS,
            }
        })),
    }
}

/// Everything a work needs besides its step.
#[derive(Clone, Debug)]
pub struct WorkContext<'a> {
    pub migration: &'a str,
    pub cluster: &'a str,
    /// Name of the secret carrying the target's bootstrap kubeconfig on the cluster.
    pub secret_name: &'a str,
    /// Its data (base64 values, as in a Secret's `data`); `None` when the hub no longer has it.
    pub secret_data: Option<&'a Value>,
    /// Target, settling: the cluster keeps the target's bootstrap kubeconfig (from the
    /// migration) as its own `bootstrap-hub-kubeconfig` (a plain OCM target, where nothing
    /// else provides one).
    pub own_bootstrap: bool,
}

/// Secret data (`data`, base64) holding `kubeconfig`.
pub fn kubeconfig_data(kubeconfig: &str) -> Value {
    use base64::Engine;
    json!({"kubeconfig": base64::engine::general_purpose::STANDARD.encode(kubeconfig)})
}

/// A kubeconfig made from `connection` (one without credentials: server, CA, proxy) whose
/// users authenticate with `token`.
pub fn with_token(connection: &str, token: &str) -> Result<String, String> {
    let mut config: serde_yaml::Value = serde_yaml::from_str(connection)
        .map_err(|e| format!("the target's connection is not a kubeconfig: {e}"))?;
    let users = config
        .get_mut("users")
        .and_then(serde_yaml::Value::as_sequence_mut)
        .filter(|u| !u.is_empty())
        .ok_or("the target's connection names no user")?;
    for u in users {
        let mut user = serde_yaml::Mapping::new();
        user.insert("token".into(), token.into());
        if let Some(m) = u.as_mapping_mut() {
            m.insert("user".into(), user.into());
        }
    }
    serde_yaml::to_string(&config).map_err(|e| e.to_string())
}

fn secret(name: &str, data: &Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": name, "namespace": KLUSTERLET_NAMESPACE},
           "type": "Opaque", "data": data})
}

fn klusterlet(reg: Option<&Registration>, original: Option<&Registration>) -> Value {
    let mut k = json!({"apiVersion": "operator.open-cluster-management.io/v1", "kind": "Klusterlet",
                       "metadata": {"name": KLUSTERLET}});
    if let Some(o) = original {
        k["metadata"]["annotations"] =
            json!({KLUSTERLET_ORIGINAL: serde_json::to_string(o).unwrap_or_default()});
    }
    if let Some(r) = reg {
        k["spec"] = json!({"registrationConfiguration": r});
    }
    k
}

/// Name of the ClusterRole a klusterlet work brings so that the cluster's work agent may read
/// and configure the Klusterlet.
pub const KLUSTERLET_WORK_ROLE: &str = "open-cluster-management:cluster-migration:klusterlet";

/// The work agent runs as `admin` plus the ClusterRoles labelled aggregate-to-work (upstream
/// `manifests/klusterlet/managed/klusterlet-work-*.yaml`); a cluster joined with `clusteradm`
/// has none for Klusterlets, so the work brings one, just for the Klusterlet it touches. It
/// is applied first; the Klusterlet's own manifest succeeds once the role is aggregated.
fn klusterlet_role() -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
           "metadata": {"name": KLUSTERLET_WORK_ROLE,
                        "labels": {"open-cluster-management.io/aggregate-to-work": "true"}},
           "rules": [{"apiGroups": ["operator.open-cluster-management.io"], "resources": ["klusterlets"],
                      "resourceNames": [KLUSTERLET], "verbs": ["get", "list", "watch", "update", "patch"]}]})
}

fn klusterlet_id() -> Value {
    json!({"group": "operator.open-cluster-management.io", "resource": "klusterlets", "name": KLUSTERLET})
}

/// The ManifestWork for a step, or `None` when the step needs the bootstrap secret and the hub
/// has none to give.
pub fn work(ctx: &WorkContext<'_>, step: &Step) -> Option<Value> {
    let name = migration_api::names::migration_klusterlet_work(ctx.migration);
    let data = ctx.secret_data;
    let (manifests, config, original): (Vec<Value>, Value, Option<&Registration>) = match step {
        Step::Probe => {
            let mut m = vec![klusterlet_role()];
            if let Some(d) = data {
                m.push(secret(ctx.secret_name, d));
            }
            m.push(klusterlet(None, None));
            let config = json!({
                "resourceIdentifier": klusterlet_id(),
                "updateStrategy": {"type": "ReadOnly"},
                "feedbackRules": [{"type": "JSONPaths", "jsonPaths": probe_paths()}]
            });
            (m, config, None)
        }
        Step::Switch(original) => {
            let reg = switched(original, ctx.secret_name);
            (
                vec![
                    klusterlet_role(),
                    secret(ctx.secret_name, data?),
                    klusterlet(Some(&reg), Some(original)),
                ],
                ssa(),
                Some(original),
            )
        }
        Step::Restore(original) => {
            let mut m = vec![klusterlet_role()];
            if let Some(d) = data {
                m.push(secret(ctx.secret_name, d));
            }
            m.push(klusterlet(Some(original), None));
            (m, ssa(), Some(original))
        }
        Step::Settle(original) => {
            let d = data?;
            let mut m = vec![klusterlet_role()];
            // Only where no import controller gives the cluster this hub's bootstrap
            // kubeconfig (an ACM hub's would fight this one over it).
            if ctx.own_bootstrap {
                m.push(secret(BOOTSTRAP_HUB_KUBECONFIG, d));
            }
            m.push(secret(ctx.secret_name, d));
            m.push(klusterlet(Some(original), None));
            (m, ssa(), Some(original))
        }
    };
    let mut annotations = json!({STEP: step.name()});
    if let Some(o) = original {
        annotations[KLUSTERLET_ORIGINAL] = json!(serde_json::to_string(o).unwrap_or_default());
    }
    // The Klusterlet (and, on the target, the bootstrap kubeconfig it now uses) outlive the
    // work; the migration's secret goes with it.
    let mut orphans = vec![
        json!({"group": "operator.open-cluster-management.io", "resource": "klusterlets", "name": KLUSTERLET}),
    ];
    if matches!(step, Step::Settle(_)) {
        orphans.push(json!({"group": "", "resource": "secrets", "namespace": KLUSTERLET_NAMESPACE, "name": BOOTSTRAP_HUB_KUBECONFIG}));
    }
    Some(json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": name, "namespace": ctx.cluster,
                     "labels": {labels::MIGRATION: ctx.migration, labels::MANAGED_BY: labels::MANAGED_BY_VALUE},
                     "annotations": annotations},
        "spec": {
            "workload": {"manifests": manifests},
            "manifestConfigs": [config],
            "deleteOption": {"propagationPolicy": "SelectivelyOrphan",
                             "selectivelyOrphans": {"orphaningRules": orphans}}
        }
    }))
}

fn ssa() -> Value {
    json!({
        "resourceIdentifier": klusterlet_id(),
        "updateStrategy": {"type": "ServerSideApply",
                           "serverSideApply": {"fieldManager": FIELD_MANAGER, "force": true}}
    })
}

/// The step a work is at, as its annotations say.
pub fn step_of(work: &ManifestWork) -> Option<Step> {
    let a = work.metadata.annotations.as_ref()?;
    let original = || {
        a.get(KLUSTERLET_ORIGINAL)
            .and_then(|t| serde_json::from_str::<Registration>(t).ok())
            .unwrap_or_default()
    };
    Some(match a.get(STEP)?.as_str() {
        "Probe" => Step::Probe,
        "Switch" => Step::Switch(original()),
        "Restore" => Step::Restore(original()),
        "Settle" => Step::Settle(original()),
        _ => return None,
    })
}

/// How many feature gates and bootstrap kubeconfig secrets a probe reads, one value each.
pub const PROBED_GATES: usize = 32;
pub const PROBED_SECRETS: usize = 8;
const REGISTRATION: &str = ".spec.registrationConfiguration";

/// The probe's status feedback: scalars only (each gate's feature and mode, the bootstrap
/// type, timeout and each secret's name by index; the recorded original as a string), so it
/// works without the work agent's `RawFeedbackJsonString` gate, which upstream leaves off.
/// An index past the end of a list selects nothing (the work agent reports it as a feedback
/// error and carries the other values).
fn probe_paths() -> Vec<Value> {
    let boot = format!("{REGISTRATION}.bootstrapKubeConfigs");
    let mut paths = vec![
        json!({"name": "klusterlet", "path": ".metadata.name"}),
        json!({"name": "boot-type", "path": format!("{boot}.type")}),
        json!({"name": "boot-timeout", "path": format!("{boot}.localSecretsConfig.hubConnectionTimeoutSeconds")}),
        json!({"name": "original", "path": format!(".metadata.annotations.{}", KLUSTERLET_ORIGINAL.replace('.', "\\."))}),
    ];
    for i in 0..PROBED_GATES {
        let gate = format!("{REGISTRATION}.featureGates[{i}]");
        paths.push(json!({"name": format!("gate-{i}"), "path": format!("{gate}.feature")}));
        paths.push(json!({"name": format!("gate-{i}-mode"), "path": format!("{gate}.mode")}));
    }
    for i in 0..PROBED_SECRETS {
        paths.push(json!({"name": format!("boot-secret-{i}"),
                          "path": format!("{boot}.localSecretsConfig.kubeConfigSecrets[{i}].name")}));
    }
    paths
}

/// What a probe read from the Klusterlet: `None` until the feedback came back. `Some(Ok((now,
/// original)))`: its settings now, and those recorded before a migration changed them (if one
/// did); `Some(Err(why))` when the Klusterlet holds more than a probe can read.
pub fn probed(work: &ManifestWork) -> Option<Result<(Registration, Option<Registration>), String>> {
    if !work.applied() {
        return None;
    }
    let values = work.feedback("Klusterlet");
    let text = |name: &str| -> Option<String> { feedback_value(values, name)?.string.clone() };
    let number = |name: &str| feedback_value(values, name)?.integer;
    text("klusterlet")?;
    let gates: Vec<Value> = (0..PROBED_GATES)
        .map_while(|i| {
            let feature = text(&format!("gate-{i}"))?;
            let mode = text(&format!("gate-{i}-mode")).unwrap_or_else(|| "Disable".into());
            Some(json!({"feature": feature, "mode": mode}))
        })
        .collect();
    let secrets: Vec<Value> = (0..PROBED_SECRETS)
        .map_while(|i| text(&format!("boot-secret-{i}")).map(|n| json!({"name": n})))
        .collect();
    if gates.len() == PROBED_GATES || secrets.len() == PROBED_SECRETS {
        return Some(Err(format!(
            "the Klusterlet has {PROBED_GATES} or more registration feature gates or {PROBED_SECRETS} or more bootstrap kubeconfig secrets, more than a migration reads"
        )));
    }
    let bootstrap_kube_configs = text("boot-type").map(|type_| {
        let mut b = json!({"type": type_});
        if !secrets.is_empty() || number("boot-timeout").is_some() {
            b["localSecretsConfig"] = json!({"kubeConfigSecrets": secrets});
            if let Some(t) = number("boot-timeout") {
                b["localSecretsConfig"]["hubConnectionTimeoutSeconds"] = json!(t);
            }
        }
        b
    });
    let now = Registration {
        feature_gates: (!gates.is_empty()).then_some(Value::Array(gates)),
        bootstrap_kube_configs,
    };
    let original = text("original").and_then(|t| serde_json::from_str(&t).ok());
    Some(Ok((now, original)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_with_a_token_is_a_kubeconfig_of_that_identity() {
        let conn = "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: https://hub2:6443\n    proxy-url: https://proxy:3128\nusers:\n- name: bootstrap\n  user: {}\ncontexts:\n- name: bootstrap\n  context: {cluster: hub, user: bootstrap}\ncurrent-context: bootstrap\n";
        let text = with_token(conn, "t0k3n").unwrap();
        let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://hub2:6443"));
        assert_eq!(cluster.proxy_url.as_deref(), Some("https://proxy:3128"));
        let v: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(v["users"][0]["user"]["token"].as_str(), Some("t0k3n"));
        assert!(with_token("users: []", "t").is_err());
        assert!(with_token("not: [yaml", "t").is_err());
        let data = kubeconfig_data("kc");
        assert_eq!(data, json!({"kubeconfig": "a2M="}));
    }

    fn ctx(data: Option<&Value>) -> WorkContext<'_> {
        WorkContext {
            migration: "move",
            cluster: "c1",
            secret_name: "bootstrap-hub2",
            secret_data: data,
            own_bootstrap: true,
        }
    }

    #[test]
    fn switching_adds_multiple_hubs_and_keeps_the_other_gates() {
        let original = Registration {
            feature_gates: Some(json!([{"feature": "ClusterClaim", "mode": "Enable"},
                                       {"feature": "MultipleHubs", "mode": "Disable"}])),
            bootstrap_kube_configs: None,
        };
        let r = switched(&original, "bootstrap-hub2");
        assert_eq!(
            r.feature_gates.unwrap(),
            json!([{"feature": "ClusterClaim", "mode": "Enable"}, {"feature": "MultipleHubs", "mode": "Enable"}])
        );
        let b = r.bootstrap_kube_configs.unwrap();
        assert_eq!(b["type"], "LocalSecrets");
        assert_eq!(
            b["localSecretsConfig"]["kubeConfigSecrets"],
            json!([{"name": "bootstrap-hub-kubeconfig"}, {"name": "bootstrap-hub2"}])
        );
    }

    #[test]
    fn switching_keeps_an_existing_list_first() {
        let original = Registration {
            feature_gates: None,
            bootstrap_kube_configs: Some(json!({"type": "LocalSecrets", "localSecretsConfig": {
                "kubeConfigSecrets": [{"name": "hub1-a"}, {"name": "hub1-b"}]}})),
        };
        let b = switched(&original, "bootstrap-hub2")
            .bootstrap_kube_configs
            .unwrap();
        assert_eq!(
            b["localSecretsConfig"]["kubeConfigSecrets"],
            json!([{"name": "hub1-a"}, {"name": "hub1-b"}, {"name": "bootstrap-hub2"}])
        );
    }

    fn as_work(v: Value) -> ManifestWork {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn works_by_step() {
        let data = json!({"kubeconfig": "a2M="});
        let probe = work(&ctx(Some(&data)), &Step::Probe).unwrap();
        let kinds = |w: &Value| -> Vec<String> {
            w["spec"]["workload"]["manifests"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    format!(
                        "{}/{}",
                        m["kind"].as_str().unwrap(),
                        m["metadata"]["name"].as_str().unwrap()
                    )
                })
                .collect()
        };
        assert_eq!(
            kinds(&probe),
            [
                "ClusterRole/open-cluster-management:cluster-migration:klusterlet",
                "Secret/bootstrap-hub2",
                "Klusterlet/klusterlet"
            ]
        );
        assert_eq!(
            probe["spec"]["manifestConfigs"][0]["updateStrategy"]["type"],
            "ReadOnly"
        );
        assert_eq!(step_of(&as_work(probe)), Some(Step::Probe));

        let original = Registration {
            feature_gates: Some(json!([{"feature": "ClusterClaim", "mode": "Enable"}])),
            bootstrap_kube_configs: None,
        };
        let sw = work(&ctx(Some(&data)), &Step::Switch(original.clone())).unwrap();
        let k = &sw["spec"]["workload"]["manifests"][2];
        assert_eq!(
            k["spec"]["registrationConfiguration"]["featureGates"][1]["feature"],
            "MultipleHubs"
        );
        let kept: Registration = serde_json::from_str(
            k["metadata"]["annotations"][KLUSTERLET_ORIGINAL]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(kept, original);
        assert_eq!(
            sw["spec"]["manifestConfigs"][0]["updateStrategy"]["serverSideApply"]["fieldManager"],
            FIELD_MANAGER
        );
        assert_eq!(step_of(&as_work(sw)), Some(Step::Switch(original.clone())));
        // Switching needs the secret; without it there is nothing to switch to.
        assert!(work(&ctx(None), &Step::Switch(original.clone())).is_none());

        let restore = work(&ctx(None), &Step::Restore(original.clone())).unwrap();
        let k = &restore["spec"]["workload"]["manifests"][1];
        assert_eq!(
            k["spec"]["registrationConfiguration"],
            json!({"featureGates": [{"feature": "ClusterClaim", "mode": "Enable"}]})
        );
        assert!(k["metadata"].get("annotations").is_none());

        let settle = work(&ctx(Some(&data)), &Step::Settle(Registration::default())).unwrap();
        assert_eq!(
            kinds(&settle),
            [
                "ClusterRole/open-cluster-management:cluster-migration:klusterlet",
                "Secret/bootstrap-hub-kubeconfig",
                "Secret/bootstrap-hub2",
                "Klusterlet/klusterlet"
            ]
        );
        let orphans = &settle["spec"]["deleteOption"]["selectivelyOrphans"]["orphaningRules"];
        assert_eq!(orphans.as_array().unwrap().len(), 2);
        assert_eq!(
            settle["spec"]["workload"]["manifests"][3]["spec"]["registrationConfiguration"],
            json!({})
        );
    }

    /// What the work agent reports for a probe, by value name (scalars only, as upstream's
    /// reader returns them without the RawFeedbackJsonString gate).
    fn probe_status(w: &mut ManifestWork, values: &[(&str, Value)]) {
        let values: Vec<Value> = values
            .iter()
            .map(|(name, v)| {
                let field = match v {
                    Value::Number(n) => json!({"type": "Integer", "integer": n}),
                    other => json!({"type": "String", "string": other}),
                };
                json!({"name": name, "fieldValue": field})
            })
            .collect();
        w.status = serde_json::from_value(json!({
            "conditions": [{"type": "Applied", "status": "True", "reason": "x", "message": "",
                            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}],
            "resourceStatus": {"manifests": [{"resourceMeta": {"ordinal": 0, "kind": "Klusterlet", "name": "klusterlet"},
                "conditions": [], "statusFeedback": {"values": values}}]}
        }))
        .unwrap();
    }

    #[test]
    fn a_probe_asks_for_scalars_only() {
        let w = work(&ctx(None), &Step::Probe).unwrap();
        let paths = w["spec"]["manifestConfigs"][0]["feedbackRules"][0]["jsonPaths"]
            .as_array()
            .unwrap()
            .clone();
        let by_name = |n: &str| {
            paths
                .iter()
                .find(|p| p["name"] == n)
                .map(|p| p["path"].as_str().unwrap().to_owned())
        };
        assert_eq!(
            by_name("gate-3").as_deref(),
            Some(".spec.registrationConfiguration.featureGates[3].feature")
        );
        assert_eq!(
            by_name("original").as_deref(),
            Some(
                ".metadata.annotations.migration\\.open-cluster-management\\.io/klusterlet-original"
            )
        );
        // No path selects a list or an object.
        for p in &paths {
            let path = p["path"].as_str().unwrap();
            assert!(
                !path.ends_with("featureGates")
                    && !path.ends_with("bootstrapKubeConfigs")
                    && !path.ends_with("annotations"),
                "{path}"
            );
        }
    }

    #[test]
    fn a_probe_reads_its_feedback() {
        let mut w = as_work(work(&ctx(None), &Step::Probe).unwrap());
        w.metadata.generation = Some(1);
        assert_eq!(probed(&w), None);
        let original = Registration {
            feature_gates: Some(json!([{"feature": "ClusterClaim", "mode": "Enable"}])),
            bootstrap_kube_configs: None,
        };
        probe_status(
            &mut w,
            &[
                ("klusterlet", json!("klusterlet")),
                ("gate-0", json!("ClusterClaim")),
                ("gate-0-mode", json!("Enable")),
                ("gate-1", json!("MultipleHubs")),
                ("gate-1-mode", json!("Enable")),
                ("boot-type", json!("LocalSecrets")),
                ("boot-timeout", json!(180)),
                ("boot-secret-0", json!("bootstrap-hub-kubeconfig")),
                ("boot-secret-1", json!("bootstrap-hub2")),
                ("original", json!(serde_json::to_string(&original).unwrap())),
            ],
        );
        let (now, orig) = probed(&w).unwrap().unwrap();
        assert_eq!(
            now.feature_gates,
            Some(
                json!([{"feature": "ClusterClaim", "mode": "Enable"}, {"feature": "MultipleHubs", "mode": "Enable"}])
            )
        );
        assert_eq!(
            now.bootstrap_kube_configs,
            Some(json!({"type": "LocalSecrets", "localSecretsConfig": {
                "kubeConfigSecrets": [{"name": "bootstrap-hub-kubeconfig"}, {"name": "bootstrap-hub2"}],
                "hubConnectionTimeoutSeconds": 180}}))
        );
        assert_eq!(orig, Some(original));
        // A Klusterlet as `clusteradm join` leaves it: one gate, no bootstrap list.
        probe_status(
            &mut w,
            &[
                ("klusterlet", json!("klusterlet")),
                ("gate-0", json!("ClusterClaim")),
                ("gate-0-mode", json!("Enable")),
            ],
        );
        let (now, orig) = probed(&w).unwrap().unwrap();
        assert_eq!(
            now,
            Registration {
                feature_gates: Some(json!([{"feature": "ClusterClaim", "mode": "Enable"}])),
                bootstrap_kube_configs: None
            }
        );
        assert_eq!(orig, None);
        // More gates than a probe reads: refused, not cut short.
        let many: Vec<(String, Value)> = (0..PROBED_GATES)
            .flat_map(|i| {
                [
                    (format!("gate-{i}"), json!(format!("G{i}"))),
                    (format!("gate-{i}-mode"), json!("Enable")),
                ]
            })
            .chain([("klusterlet".to_owned(), json!("klusterlet"))])
            .collect();
        let many: Vec<(&str, Value)> = many.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        probe_status(&mut w, &many);
        assert!(probed(&w).unwrap().is_err());
        // Feedback about an older generation does not count.
        w.metadata.generation = Some(2);
        assert_eq!(probed(&w), None);
    }
}
