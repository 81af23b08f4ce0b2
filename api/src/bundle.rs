//! `kubectl mcm export` and `import`, the parts decided without a cluster: which kinds a
//! `--carry` flag names, what of a ManagedCluster travels, where each object is written, and in
//! which order a directory is applied. Like `clusterctl move --to-directory`, a directory holds
//! one folder per cluster, one YAML file per object.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::carried::{self, CarryOverResource};

/// The kinds `--carry` names (`secrets`, `clusterdeployments.hive.openshift.io`: kubectl's
/// `resource.group`), checked as `spec.carryOver` is; Secrets only with `include_secrets`, as
/// they would be written to disk in the clear.
pub fn carry_kinds(
    names: &[String],
    include_secrets: bool,
) -> Result<Vec<CarryOverResource>, String> {
    let kinds: Vec<CarryOverResource> = names
        .iter()
        .filter(|n| !n.trim().is_empty())
        .map(|n| {
            let (resource, group) = n.trim().split_once('.').unwrap_or((n.trim(), ""));
            CarryOverResource {
                group: group.to_owned(),
                resource: resource.to_owned(),
                label_selector: None,
            }
        })
        .collect();
    carried::check(&kinds).map_err(|e| format!("--carry: {e}"))?;
    if !include_secrets
        && kinds
            .iter()
            .any(|k| k.group.is_empty() && k.resource == "secrets")
    {
        return Err(
            "--carry secrets writes credentials to disk in the clear: add --include-secrets to mean it"
                .into(),
        );
    }
    Ok(kinds)
}

/// What of a ManagedCluster (as read from its hub) travels: a clean copy ([`carried::clean`])
/// without the hub's own bookkeeping (its taints; OCM's `name`, `local-cluster` and feature
/// labels; annotations other than those the target's import reads, so nothing of a
/// migration), accepted so the cluster may join the hub it is imported to. Its cluster set
/// label stays: the cluster joins the set of that name there.
pub fn exported_cluster(mc: &Value) -> Option<Value> {
    let mut out = carried::clean(mc)?;
    let meta = out["metadata"].as_object_mut()?;
    meta.remove("ownerReferences");
    if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
        labels.retain(|k, _| {
            k != "name"
                && k != "local-cluster"
                && !k.starts_with("feature.open-cluster-management.io/")
        });
    }
    if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
        a.retain(|k, _| crate::names::annotations::CARRIED_FOR_IMPORT.contains(&k.as_str()));
    }
    let spec = out["spec"].as_object_mut()?;
    spec.remove("taints");
    spec.insert("hubAcceptsClient".into(), json!(true));
    Some(out)
}

/// Where `object` of `cluster` is written in `dir`: `<cluster>/<resource>.<group>.<name>.yaml`
/// (`<resource>.<name>.yaml` in the core group); the ManagedCluster first by name.
pub fn file_of(dir: &Path, cluster: &str, resource: &str, object: &Value) -> PathBuf {
    let group = carried::group_of(object["apiVersion"].as_str().unwrap_or_default());
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let file = match (resource, group) {
        ("managedclusters", _) => "00-managedcluster.yaml".to_owned(),
        (r, "") => format!("{r}.{name}.yaml"),
        (r, g) => format!("{r}.{g}.{name}.yaml"),
    };
    dir.join(cluster).join(file)
}

/// The objects of one cluster's folder in the order `import` applies them: its ManagedCluster
/// first, then every other object with no owner in the folder, then those whose owners are
/// (so each owner exists, with its uid, before what it owns). Returns indexes into `objects`.
pub fn import_order(objects: &[Value]) -> Vec<usize> {
    let present: BTreeMap<_, usize> = objects
        .iter()
        .enumerate()
        .map(|(i, o)| (carried::object_key(o), i))
        .collect();
    let depth = |i: usize| {
        // Owners within the folder, followed up to a bound (a cycle is not a reason to hang).
        let mut d = 0;
        let mut at = i;
        while d < objects.len() {
            let Some(owner) = objects[at]["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .find_map(|r| {
                    present
                        .get(&carried::owner_key(r)?)
                        .copied()
                        .filter(|&o| o != at)
                })
            else {
                break;
            };
            d += 1;
            at = owner;
        }
        d
    };
    let mut order: Vec<usize> = (0..objects.len()).collect();
    order.sort_by_key(|&i| (objects[i]["kind"] != "ManagedCluster", depth(i), i));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carry_names_kinds_as_kubectl_does_and_secrets_only_when_asked() {
        let kinds = carry_kinds(
            &[
                "configmaps".into(),
                "clusterdeployments.hive.openshift.io".into(),
            ],
            false,
        )
        .unwrap();
        assert_eq!(
            kinds
                .iter()
                .map(|k| (k.group.as_str(), k.resource.as_str()))
                .collect::<Vec<_>>(),
            vec![
                ("", "configmaps"),
                ("hive.openshift.io", "clusterdeployments")
            ]
        );
        let e = carry_kinds(&["secrets".into()], false).unwrap_err();
        assert!(e.contains("--include-secrets"), "{e}");
        assert_eq!(carry_kinds(&["secrets".into()], true).unwrap().len(), 1);
        let e = carry_kinds(&["roles.rbac.authorization.k8s.io".into()], true).unwrap_err();
        assert!(
            e.starts_with("--carry: ") && e.contains("cannot be carried"),
            "{e}"
        );
        assert_eq!(carry_kinds(&[], false).unwrap(), vec![]);
    }

    #[test]
    fn an_exported_cluster_keeps_the_users_labels_and_what_import_reads() {
        let mc = json!({
            "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": "c1", "uid": "u", "resourceVersion": "1",
                "labels": {"env": "prod", "name": "c1", "cluster.open-cluster-management.io/clusterset": "s1",
                           "feature.open-cluster-management.io/addon-x": "available"},
                "annotations": {"open-cluster-management/created-via": "hive", "migration.open-cluster-management.io/migrating": "m"},
                "finalizers": ["cluster.open-cluster-management.io/api-resource-cleanup"]},
            "spec": {"hubAcceptsClient": false, "leaseDurationSeconds": 60,
                     "managedClusterClientConfigs": [{"url": "https://c1:6443"}],
                     "taints": [{"key": "cluster.open-cluster-management.io/unreachable", "effect": "NoSelect"}]},
            "status": {"conditions": []}
        });
        assert_eq!(
            exported_cluster(&mc).unwrap(),
            json!({
                "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
                "metadata": {"name": "c1",
                    "labels": {"env": "prod", "cluster.open-cluster-management.io/clusterset": "s1"},
                    "annotations": {"open-cluster-management/created-via": "hive"}},
                "spec": {"hubAcceptsClient": true, "leaseDurationSeconds": 60,
                         "managedClusterClientConfigs": [{"url": "https://c1:6443"}]}
            })
        );
    }

    #[test]
    fn files_are_named_by_kind_group_and_name() {
        let dir = Path::new("/d");
        let cd = json!({"apiVersion": "hive.openshift.io/v1", "kind": "ClusterDeployment", "metadata": {"name": "c1"}});
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "extra"}});
        let mc = json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster", "metadata": {"name": "c1"}});
        assert_eq!(
            file_of(dir, "c1", "clusterdeployments", &cd),
            Path::new("/d/c1/clusterdeployments.hive.openshift.io.c1.yaml")
        );
        assert_eq!(
            file_of(dir, "c1", "configmaps", &cm),
            Path::new("/d/c1/configmaps.extra.yaml")
        );
        assert_eq!(
            file_of(dir, "c1", "managedclusters", &mc),
            Path::new("/d/c1/00-managedcluster.yaml")
        );
    }

    #[test]
    fn owners_are_applied_before_what_they_own() {
        let obj = |kind: &str, name: &str, owner: Option<(&str, &str)>| {
            let mut o = json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}});
            if let Some((k, n)) = owner {
                o["metadata"]["ownerReferences"] =
                    json!([{"apiVersion": "v1", "kind": k, "name": n, "uid": "x"}]);
            }
            o
        };
        let objects = vec![
            obj("Secret", "grandchild", Some(("ConfigMap", "child"))),
            obj("ConfigMap", "child", Some(("Service", "root"))),
            obj("Service", "root", None),
            obj("Secret", "orphan", Some(("Service", "elsewhere"))),
            json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster", "metadata": {"name": "c1"}}),
        ];
        assert_eq!(import_order(&objects), vec![4, 2, 3, 1, 0]);
        // A cycle still yields every object once.
        let cycle = vec![
            obj("ConfigMap", "a", Some(("ConfigMap", "b"))),
            obj("ConfigMap", "b", Some(("ConfigMap", "a"))),
        ];
        let mut o = import_order(&cycle);
        o.sort();
        assert_eq!(o, vec![0, 1]);
    }
}
