//! Objects carried over (`spec.carryOver`): which kinds a migration may carry, how a copy is
//! made fit for another hub, which controllers are paused while a cluster moves, and how owner
//! references are rewritten on the target. Pure functions, no I/O.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use serde_with::skip_serializing_none;

/// At most this many kinds in `spec.carryOver`.
pub const MAX_CARRY_OVER_KINDS: usize = 16;

/// One kind of object carried over: the objects of this resource in each moving cluster's
/// namespace on the source hub (those the selector matches, or all).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CarryOverResource {
    /// API group (`""` for the core group: Secrets, ConfigMaps).
    #[serde(default)]
    #[schemars(length(max = 253))]
    pub group: String,
    /// Resource, plural and lowercase (`secrets`, `clusterdeployments`, `baremetalhosts`).
    #[schemars(length(min = 1, max = 63))]
    pub resource: String,
    /// Only the objects with these labels (default: every object of the kind in the namespace).
    pub label_selector: Option<LabelSelector>,
}

impl CarryOverResource {
    /// `resource.group`, or `resource` for the core group: how kubectl names it.
    pub fn display(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}

/// One object carried over, as the source made it fit for the target ([`clean`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CarriedObject {
    /// Its resource (plural), for the target to address it; `apiVersion` and `kind` are the
    /// object's own.
    pub resource: String,
    #[schemars(schema_with = "crate::common::preserve_unknown_object")]
    pub object: Value,
}

/// Kinds a migration may not carry: what it moves itself (ManagedClusters, their addons,
/// KlusterletAddonConfigs), what belongs to the hub it is on (works, leases, events, pods,
/// service accounts and their tokens) and RBAC (carrying it would let the migration grant
/// what its user may not).
const REFUSED: &[(&str, &str)] = &[
    ("", "events"),
    ("", "pods"),
    ("", "serviceaccounts"),
    ("", "namespaces"),
    ("events.k8s.io", "events"),
    ("coordination.k8s.io", "leases"),
    ("cluster.open-cluster-management.io", "*"),
    ("addon.open-cluster-management.io", "*"),
    ("work.open-cluster-management.io", "*"),
    ("agent.open-cluster-management.io", "klusterletaddonconfigs"),
    ("migration.open-cluster-management.io", "*"),
    ("rbac.authorization.k8s.io", "*"),
    ("authentication.open-cluster-management.io", "*"),
];

/// Why `spec.carryOver` cannot be taken as written, if it cannot.
pub fn check(list: &[CarryOverResource]) -> Result<(), String> {
    if list.len() > MAX_CARRY_OVER_KINDS {
        return Err(format!(
            "lists {} kinds, at most {MAX_CARRY_OVER_KINDS}",
            list.len()
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for r in list {
        if !crate::migration::is_dns_label(&r.resource) {
            return Err(format!(
                "resource {:?} is not a resource name (plural, lowercase: secrets, clusterdeployments)",
                r.resource
            ));
        }
        if !r.group.is_empty() && !crate::migration::is_dns_subdomain(&r.group) {
            return Err(format!("group {:?} is not an API group", r.group));
        }
        if REFUSED
            .iter()
            .any(|(g, res)| *g == r.group && (*res == "*" || *res == r.resource))
        {
            return Err(format!(
                "{} cannot be carried over: the migration moves ManagedClusters, their addons and KlusterletAddonConfigs itself, and never carries RBAC, works, leases, events, pods or service accounts",
                r.display()
            ));
        }
        if !seen.insert((r.group.as_str(), r.resource.as_str())) {
            return Err(format!("{} is listed more than once", r.display()));
        }
        if let Some(sel) = &r.label_selector {
            crate::migration::check_label_selector(sel)
                .map_err(|e| format!("{}: labelSelector: {e}", r.display()))?;
        }
    }
    Ok(())
}

/// The annotation that stops the controller of `group`/`resource` from acting on an object,
/// and its value, where its API has one:
/// - hive's ClusterDeployment: `hive.openshift.io/reconcile-pause`, read with Go's
///   `strconv.ParseBool` (hive `pkg/controller/clusterdeployment/clusterdeployment_controller.go`
///   returns before anything else, deletion included, when it parses as true);
/// - metal3's BareMetalHost: `baremetalhost.metal3.io/paused`, whose presence pauses it
///   (baremetal-operator `apis/metal3.io/v1alpha1/baremetalhost_types.go`, `PausedAnnotation`).
pub fn pause_annotation(group: &str, resource: &str) -> Option<(&'static str, &'static str)> {
    match (group, resource) {
        ("hive.openshift.io", "clusterdeployments") => {
            Some(("hive.openshift.io/reconcile-pause", "true"))
        }
        ("metal3.io", "baremetalhosts") => Some(("baremetalhost.metal3.io/paused", "true")),
        _ => None,
    }
}

/// Whether `annotations` pause the controller of `group`/`resource` ([`pause_annotation`]):
/// hive's value as `strconv.ParseBool` reads it, metal3's by its presence.
pub fn paused(group: &str, resource: &str, annotations: &BTreeMap<String, String>) -> bool {
    let Some((key, _)) = pause_annotation(group, resource) else {
        return false;
    };
    match (group, annotations.get(key)) {
        (_, None) => false,
        ("hive.openshift.io", Some(v)) => {
            matches!(v.as_str(), "1" | "t" | "T" | "TRUE" | "true" | "True")
        }
        (_, Some(_)) => true,
    }
}

/// Label on each object a migration created on the target: its key, so a rollback removes what
/// it made and nothing else.
pub const CARRIED_BY: &str = "migration.open-cluster-management.io/carried-by";
/// Annotation beside a pause a migration set: its key (a pause that was there before is not
/// the migration's to lift).
pub const PAUSED_BY: &str = "migration.open-cluster-management.io/paused-by";

/// `carried` as the target creates it in `cluster`'s namespace: labelled with the migration's
/// `key` ([`CARRIED_BY`]), paused where its controller has a pause ([`pause_annotation`],
/// marked [`PAUSED_BY`]), its owner references rewritten for the target ([`rewrite_owners`]).
pub fn for_target(
    carried: &CarriedObject,
    cluster: &str,
    key: &str,
    uids: &BTreeMap<ObjectKey, String>,
) -> Value {
    let mut out = carried.object.clone();
    let group = group_of(out["apiVersion"].as_str().unwrap_or_default()).to_owned();
    let owners = out["metadata"]["ownerReferences"]
        .as_array()
        .map(|refs| rewrite_owners(refs, uids))
        .unwrap_or_default();
    let meta = &mut out["metadata"];
    meta["namespace"] = json!(cluster);
    meta["labels"][CARRIED_BY] = json!(key);
    // Paused unless it already is (a pause of the user's, copied as it is, stays theirs).
    let annotations: BTreeMap<String, String> =
        serde_json::from_value(meta["annotations"].clone()).unwrap_or_default();
    if let Some((k, v)) = pause_annotation(&group, &carried.resource)
        && !paused(&group, &carried.resource, &annotations)
    {
        meta["annotations"][k] = json!(v);
        meta["annotations"][PAUSED_BY] = json!(key);
    }
    match meta.as_object_mut() {
        Some(m) if owners.is_empty() => {
            m.remove("ownerReferences");
        }
        Some(m) => {
            m.insert("ownerReferences".into(), json!(owners));
        }
        None => {}
    }
    out
}

/// A copy of `object` fit for another hub: no status, no server-set metadata (uid,
/// resourceVersion, generation, creation and deletion times, managed fields), no finalizers
/// (the target's controllers add their own), no `kubectl apply` record. Owner references stay,
/// for the target to rewrite ([`rewrite_owners`]). `None` for what must not travel: a
/// ServiceAccount token Secret (the token is the source hub's).
pub fn clean(object: &Value) -> Option<Value> {
    if object["kind"] == "Secret" && object["type"] == "kubernetes.io/service-account-token" {
        return None;
    }
    let mut out = object.clone();
    let map = out.as_object_mut()?;
    map.remove("status");
    let meta = map.get_mut("metadata")?.as_object_mut()?;
    for key in [
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "finalizers",
        "selfLink",
        "generateName",
    ] {
        meta.remove(key);
    }
    if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
        if a.is_empty() {
            meta.remove("annotations");
        }
    }
    Some(out)
}

/// How an owner reference names an object: its API group, kind and name.
pub type ObjectKey = (String, String, String);

/// The [`ObjectKey`] of the object of `api_version`, `kind` and `name`.
pub fn key_of(api_version: &str, kind: &str, name: &str) -> ObjectKey {
    (
        group_of(api_version).to_owned(),
        kind.to_owned(),
        name.to_owned(),
    )
}

/// The [`ObjectKey`] an owner reference points at (`None` when it lacks a field).
pub fn owner_key(r: &Value) -> Option<ObjectKey> {
    Some(key_of(
        r["apiVersion"].as_str()?,
        r["kind"].as_str()?,
        r["name"].as_str()?,
    ))
}

/// The [`ObjectKey`] of an object (empty fields where it lacks them).
pub fn object_key(o: &Value) -> ObjectKey {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    key_of(
        &text(&o["apiVersion"]),
        &text(&o["kind"]),
        &text(&o["metadata"]["name"]),
    )
}

/// The group of an `apiVersion` (`""` for `v1`).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// `refs` (an object's owner references on the source) rewritten for the target: one to an
/// object the target has (`uids`, by group, kind and name: the objects carried with it and the
/// cluster's ManagedCluster) points at that object's uid there; any other is dropped, since
/// the garbage collector deletes an object whose owner does not exist.
pub fn rewrite_owners(refs: &[Value], uids: &BTreeMap<ObjectKey, String>) -> Vec<Value> {
    refs.iter()
        .filter_map(|r| {
            let uid = uids.get(&owner_key(r)?)?;
            let mut out = r.clone();
            out["uid"] = json!(uid);
            Some(out)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(group: &str, resource: &str) -> CarryOverResource {
        CarryOverResource {
            group: group.into(),
            resource: resource.into(),
            label_selector: None,
        }
    }

    #[test]
    fn what_may_be_carried() {
        let ok = [
            kind("", "secrets"),
            kind("", "configmaps"),
            kind("hive.openshift.io", "clusterdeployments"),
            kind("metal3.io", "baremetalhosts"),
        ];
        assert_eq!(check(&ok), Ok(()));
        for (list, says) in [
            (vec![kind("", "Secrets")], "not a resource name"),
            (vec![kind("", "")], "not a resource name"),
            (vec![kind("Hive_IO", "x")], "not an API group"),
            (
                vec![kind("", "secrets"), kind("", "secrets")],
                "more than once",
            ),
            (
                vec![kind("rbac.authorization.k8s.io", "roles")],
                "cannot be carried",
            ),
            (
                vec![kind(
                    "cluster.open-cluster-management.io",
                    "managedclusters",
                )],
                "cannot be carried",
            ),
            (
                vec![kind(
                    "agent.open-cluster-management.io",
                    "klusterletaddonconfigs",
                )],
                "cannot be carried",
            ),
            (vec![kind("", "serviceaccounts")], "cannot be carried"),
            (vec![kind("", "configmaps"); 17], "at most 16"),
        ] {
            let e = check(&list).expect_err(says);
            assert!(e.contains(says), "{e}");
        }
        let bad_selector = CarryOverResource {
            label_selector: Some(LabelSelector {
                match_expressions: Some(vec![
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                        key: "a".into(),
                        operator: "Near".into(),
                        values: None,
                    },
                ]),
                ..Default::default()
            }),
            ..kind("", "secrets")
        };
        let e = check(&[bad_selector]).unwrap_err();
        assert!(e.starts_with("secrets: labelSelector: "), "{e}");
    }

    #[test]
    fn pauses_follow_each_controllers_own_reading() {
        let a = |k: &str, v: &str| BTreeMap::from([(k.to_owned(), v.to_owned())]);
        let hive = ("hive.openshift.io", "clusterdeployments");
        let bmh = ("metal3.io", "baremetalhosts");
        for (v, p) in [
            ("true", true),
            ("True", true),
            ("1", true),
            ("false", false),
            ("yes", false),
            ("", false),
        ] {
            assert_eq!(
                paused(hive.0, hive.1, &a("hive.openshift.io/reconcile-pause", v)),
                p,
                "{v:?}"
            );
        }
        // metal3: present is paused, whatever the value.
        assert!(paused(
            bmh.0,
            bmh.1,
            &a("baremetalhost.metal3.io/paused", "")
        ));
        assert!(!paused(bmh.0, bmh.1, &BTreeMap::new()));
        // Another kind has no pause, and another kind's annotation does not pause.
        assert_eq!(pause_annotation("", "secrets"), None);
        assert!(!paused(
            "",
            "configmaps",
            &a("hive.openshift.io/reconcile-pause", "true")
        ));
        // What we write pauses by the controller's own reading.
        for (g, r) in [hive, bmh] {
            let (k, v) = pause_annotation(g, r).unwrap();
            assert!(paused(g, r, &a(k, v)));
        }
    }

    #[test]
    fn a_clean_copy_keeps_what_the_user_wrote_and_nothing_the_server_set() {
        let cd = json!({
            "apiVersion": "hive.openshift.io/v1", "kind": "ClusterDeployment",
            "metadata": {"name": "c1", "namespace": "c1", "uid": "u", "resourceVersion": "7",
                "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z",
                "managedFields": [{}], "finalizers": ["hive.openshift.io/deprovision"],
                "labels": {"a": "b"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "x": "y"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "old"}]},
            "spec": {"clusterName": "c1"},
            "status": {"installed": true}
        });
        assert_eq!(
            clean(&cd).unwrap(),
            json!({
                "apiVersion": "hive.openshift.io/v1", "kind": "ClusterDeployment",
                "metadata": {"name": "c1", "namespace": "c1", "labels": {"a": "b"},
                    "annotations": {"x": "y"},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "old"}]},
                "spec": {"clusterName": "c1"}
            })
        );
        let token = json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
                           "metadata": {"name": "t", "namespace": "c1"}});
        assert_eq!(clean(&token), None);
        let only_applied = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "m", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}}});
        assert!(
            clean(&only_applied).unwrap()["metadata"]
                .get("annotations")
                .is_none()
        );
    }

    #[test]
    fn a_copy_on_the_target_is_labelled_paused_where_it_can_be_and_owned_there() {
        let cd = CarriedObject {
            resource: "clusterdeployments".into(),
            object: json!({"apiVersion": "hive.openshift.io/v1", "kind": "ClusterDeployment",
                "metadata": {"name": "c1", "namespace": "c1",
                    "ownerReferences": [{"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster", "name": "c1", "uid": "src"}]},
                "spec": {"clusterName": "c1"}}),
        };
        let uids = BTreeMap::from([(
            (
                "cluster.open-cluster-management.io".into(),
                "ManagedCluster".into(),
                "c1".into(),
            ),
            "dst".to_owned(),
        )]);
        let out = for_target(&cd, "c1", "k1", &uids);
        assert_eq!(out["metadata"]["labels"][CARRIED_BY], "k1");
        assert_eq!(
            out["metadata"]["annotations"]["hive.openshift.io/reconcile-pause"],
            "true"
        );
        assert_eq!(out["metadata"]["annotations"][PAUSED_BY], "k1");
        assert_eq!(out["metadata"]["ownerReferences"][0]["uid"], "dst");
        assert_eq!(out["spec"], cd.object["spec"]);
        // A kind without a pause is only labelled; an owner not on the target goes.
        let cm = CarriedObject {
            resource: "configmaps".into(),
            object: json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "elsewhere",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Secret", "name": "gone", "uid": "u"}]}}),
        };
        // One the user paused stays paused, and theirs: the migration will not resume it.
        let mut user_paused = cd.clone();
        user_paused.object["metadata"]["annotations"] =
            json!({"hive.openshift.io/reconcile-pause": "True"});
        let out = for_target(&user_paused, "c1", "k1", &uids);
        assert_eq!(
            out["metadata"]["annotations"],
            json!({"hive.openshift.io/reconcile-pause": "True"})
        );
        let out = for_target(&cm, "c1", "k1", &BTreeMap::new());
        assert_eq!(out["metadata"]["namespace"], "c1");
        assert!(out["metadata"].get("annotations").is_none(), "{out}");
        assert!(out["metadata"].get("ownerReferences").is_none(), "{out}");
    }

    #[test]
    fn owners_point_at_the_targets_objects_or_go() {
        let refs = vec![
            json!({"apiVersion": "hive.openshift.io/v1", "kind": "ClusterDeployment", "name": "c1", "uid": "src-cd", "controller": true}),
            json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster", "name": "c1", "uid": "src-mc"}),
            json!({"apiVersion": "v1", "kind": "Secret", "name": "not-carried", "uid": "src-s"}),
        ];
        let uids = BTreeMap::from([
            (
                (
                    "hive.openshift.io".into(),
                    "ClusterDeployment".into(),
                    "c1".into(),
                ),
                "dst-cd".to_owned(),
            ),
            (
                (
                    "cluster.open-cluster-management.io".into(),
                    "ManagedCluster".into(),
                    "c1".into(),
                ),
                "dst-mc".to_owned(),
            ),
        ]);
        assert_eq!(
            rewrite_owners(&refs, &uids),
            vec![
                json!({"apiVersion": "hive.openshift.io/v1", "kind": "ClusterDeployment", "name": "c1", "uid": "dst-cd", "controller": true}),
                json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster", "name": "c1", "uid": "dst-mc"}),
            ]
        );
        assert_eq!(rewrite_owners(&refs, &BTreeMap::new()), Vec::<Value>::new());
        assert_eq!(group_of("v1"), "");
        assert_eq!(group_of("metal3.io/v1alpha1"), "metal3.io");
    }
}
