//! The annotations of a ManagedCluster on the source hub while a migration moves it, worked
//! out purely from what the cluster carries now.
//!
//! - It selects the migration's KlusterletConfig. A cluster that selected a KlusterletConfig of
//!   its own gets one derived from it ([`derived_config_name`], [`derived_config_spec`]): its
//!   own settings with the migration's bootstrap kubeconfigs, so the import controller still
//!   renders its current hub as before (the same `hubKubeAPIServerConfig.url`, which the
//!   klusterlet's preference for the bootstrap kubeconfig of its current hub compares).
//! - What it had is recorded (`original-klusterlet-config`, `original-disable-auto-import`)
//!   the first time, and put back on rollback and cleanup ([`restored`]).
//! - On an ACM hub, once released, it is annotated `disable-auto-import`, so auto-import cannot
//!   push the source's klusterlet back onto it while it moves (upstream
//!   `pkg/controller/autoimport/autoimport_controller.go`); that also freezes its klusterlet
//!   works read-only (`manifestwork_controller.go`), which is why it is set only once the
//!   migration's bootstrap kubeconfig is on the cluster. A cluster that carried it before, with
//!   the user's consent, has it lifted while the migration configures it.

use std::collections::BTreeMap;

use migration_api::names::annotations::{
    DISABLE_AUTO_IMPORT, KLUSTERLET_CONFIG, MIGRATING, ORIGINAL_DISABLE_AUTO_IMPORT,
    ORIGINAL_KLUSTERLET_CONFIG,
};
use migration_api::names::taints;
use migration_api::ocm::cluster::Taint;
use serde_json::{Value, json};

/// What a cluster in flight had before the migration touched it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Original {
    /// The KlusterletConfig it selected, if any.
    pub klusterlet_config: Option<String>,
    /// Whether it was annotated `disable-auto-import`.
    pub disable_auto_import: bool,
}

/// What the cluster had: as recorded, or (not recorded yet) as it is now.
pub fn original(annotations: &BTreeMap<String, String>) -> Original {
    let recorded = annotations.contains_key(ORIGINAL_KLUSTERLET_CONFIG);
    let klusterlet_config = if recorded {
        annotations
            .get(ORIGINAL_KLUSTERLET_CONFIG)
            .filter(|v| !v.is_empty())
            .cloned()
    } else {
        annotations.get(KLUSTERLET_CONFIG).cloned()
    };
    let disable_auto_import = match annotations.get(ORIGINAL_DISABLE_AUTO_IMPORT) {
        Some(v) => v == "true",
        None if recorded => false,
        None => annotations.contains_key(DISABLE_AUTO_IMPORT),
    };
    Original {
        klusterlet_config,
        disable_auto_import,
    }
}

/// The KlusterletConfig a cluster selects while it moves
/// ([`migration_api::names::derived_klusterlet_config`]).
pub fn derived_config_name(base: &str, own: Option<&str>) -> String {
    migration_api::names::derived_klusterlet_config(base, own)
}

/// The spec of a derived KlusterletConfig: the cluster's own, with the migration's bootstrap
/// kubeconfigs (`multipleHubsConfig`, or on older hubs `bootstrapKubeConfigs`).
pub fn derived_config_spec(own: &Value, base: &Value) -> Value {
    let mut spec = own.clone();
    if !spec.is_object() {
        spec = json!({});
    }
    for field in ["multipleHubsConfig", "bootstrapKubeConfigs"] {
        match base.get(field) {
            Some(v) => spec[field] = v.clone(),
            None => {
                if let Some(m) = spec.as_object_mut() {
                    m.remove(field);
                }
            }
        }
    }
    spec
}

/// The annotation changes (`None`: remove) that put a cluster in flight.
///
/// `config`: the KlusterletConfig it must select now (`None`: keep its own: plain OCM, or the
/// older shape before release). `lift`: the user allowed lifting `disable-auto-import`.
/// `freeze`: it is released on an ACM hub, so auto-import must leave it alone.
pub fn in_flight(
    annotations: &BTreeMap<String, String>,
    migration: &str,
    config: Option<&str>,
    lift: bool,
    freeze: bool,
) -> BTreeMap<&'static str, Option<String>> {
    let was = original(annotations);
    let selected = match config {
        Some(base) => Some(derived_config_name(base, was.klusterlet_config.as_deref())),
        None => was.klusterlet_config.clone(),
    };
    let disable = if freeze || (was.disable_auto_import && !lift) {
        Some("true".to_owned())
    } else {
        None
    };
    BTreeMap::from([
        (KLUSTERLET_CONFIG, selected),
        (MIGRATING, Some(migration.to_owned())),
        (
            ORIGINAL_KLUSTERLET_CONFIG,
            Some(was.klusterlet_config.unwrap_or_default()),
        ),
        (
            ORIGINAL_DISABLE_AUTO_IMPORT,
            Some(was.disable_auto_import.to_string()),
        ),
        (DISABLE_AUTO_IMPORT, disable),
    ])
}

/// The annotation changes that put back what a cluster had (for one that stays on its hub).
/// `ours`: the KlusterletConfig names this migration may have selected for it.
pub fn restored(
    annotations: &BTreeMap<String, String>,
    ours: &dyn Fn(&str) -> bool,
) -> BTreeMap<&'static str, Option<String>> {
    let recorded = annotations.contains_key(ORIGINAL_KLUSTERLET_CONFIG);
    let was = original(annotations);
    let klusterlet_config = if recorded {
        was.klusterlet_config
    } else {
        annotations
            .get(KLUSTERLET_CONFIG)
            .filter(|k| !ours(k))
            .cloned()
    };
    BTreeMap::from([
        (KLUSTERLET_CONFIG, klusterlet_config),
        (MIGRATING, None),
        (ORIGINAL_KLUSTERLET_CONFIG, None),
        (ORIGINAL_DISABLE_AUTO_IMPORT, None),
        (
            DISABLE_AUTO_IMPORT,
            was.disable_auto_import.then(|| "true".to_owned()),
        ),
    ])
}

/// A cluster's taints with the migrating taint ([`taints::MIGRATING`], valued `migration`) when
/// `present` (in place of any other migration's: a cluster is in one migration at a time),
/// without this migration's when not (another's is not this one's to lift); `None` when they
/// are that already. The others are kept as they are (with their `timeAdded`); the new one
/// comes without `timeAdded`, which the hub's ManagedCluster webhook sets and refuses from a
/// client (ocm `pkg/registration/webhook/v1/managedcluster_mutating.go` `processTaints`).
pub fn taints(current: &[Taint], migration: &str, present: bool) -> Option<Vec<Value>> {
    let keyed = |t: &Taint| t.key == taints::MIGRATING;
    let this = |t: &Taint| keyed(t) && t.value.as_deref() == Some(migration);
    let mine = |t: &Taint| this(t) && t.effect == taints::MIGRATING_EFFECT;
    let settled = if present {
        current.iter().filter(|t| keyed(t)).count() == 1 && current.iter().any(mine)
    } else {
        !current.iter().any(this)
    };
    if settled {
        return None;
    }
    let drop = |t: &Taint| if present { keyed(t) } else { this(t) };
    let mut list: Vec<Value> = current
        .iter()
        .filter(|t| !drop(t))
        .map(|t| serde_json::to_value(t).unwrap_or_default())
        .collect();
    if present {
        list.push(json!({"key": taints::MIGRATING, "value": migration, "effect": taints::MIGRATING_EFFECT}));
    }
    Some(list)
}

/// Whether the changes would change nothing.
pub fn settled(
    annotations: &BTreeMap<String, String>,
    changes: &BTreeMap<&'static str, Option<String>>,
) -> bool {
    changes
        .iter()
        .all(|(k, v)| annotations.get(*k) == v.as_ref())
}

/// The changes as a merge patch of `metadata.annotations`.
pub fn patch(changes: &BTreeMap<&'static str, Option<String>>) -> Value {
    let map: serde_json::Map<String, Value> = changes
        .iter()
        .map(|(k, v)| {
            (
                (*k).to_owned(),
                v.clone().map_or(Value::Null, Value::String),
            )
        })
        .collect();
    json!({"metadata": {"annotations": map}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn applied(
        mut a: BTreeMap<String, String>,
        changes: &BTreeMap<&'static str, Option<String>>,
    ) -> BTreeMap<String, String> {
        for (k, v) in changes {
            match v {
                Some(v) => a.insert((*k).to_owned(), v.clone()),
                None => a.remove(*k),
            };
        }
        a
    }

    #[test]
    fn a_cluster_without_a_klusterlet_config_selects_the_migrations_and_gets_nothing_back() {
        let start = annotations(&[("other", "x")]);
        let flying = applied(
            start.clone(),
            &in_flight(&start, "m", Some("migration-hub2"), false, false),
        );
        assert_eq!(
            flying.get(KLUSTERLET_CONFIG).map(String::as_str),
            Some("migration-hub2")
        );
        assert_eq!(
            flying.get(ORIGINAL_KLUSTERLET_CONFIG).map(String::as_str),
            Some("")
        );
        assert!(!flying.contains_key(DISABLE_AUTO_IMPORT));
        // Released on an ACM hub: auto-import frozen.
        let released = applied(
            flying.clone(),
            &in_flight(&flying, "m", Some("migration-hub2"), false, true),
        );
        assert_eq!(
            released.get(DISABLE_AUTO_IMPORT).map(String::as_str),
            Some("true")
        );
        // Back: exactly what it had.
        let back = applied(released.clone(), &restored(&released, &|_| true));
        assert_eq!(back, start);
    }

    #[test]
    fn a_clusters_own_klusterlet_config_is_derived_from_and_put_back() {
        let start = annotations(&[(KLUSTERLET_CONFIG, "proxy-east")]);
        let changes = in_flight(&start, "m", Some("migration-hub2"), false, false);
        let flying = applied(start.clone(), &changes);
        assert_eq!(
            flying.get(KLUSTERLET_CONFIG).map(String::as_str),
            Some("migration-hub2-proxy-east")
        );
        // Applying again changes nothing (the recorded original wins over the live value).
        assert!(settled(
            &flying,
            &in_flight(&flying, "m", Some("migration-hub2"), false, false)
        ));
        let back = applied(flying.clone(), &restored(&flying, &|_| true));
        assert_eq!(back, start);
    }

    #[test]
    fn disable_auto_import_is_lifted_only_with_consent_and_put_back() {
        let start = annotations(&[(DISABLE_AUTO_IMPORT, "")]);
        let kept = applied(
            start.clone(),
            &in_flight(&start, "m", Some("c"), false, false),
        );
        assert_eq!(
            kept.get(DISABLE_AUTO_IMPORT).map(String::as_str),
            Some("true")
        );
        let lifted = applied(
            start.clone(),
            &in_flight(&start, "m", Some("c"), true, false),
        );
        assert!(!lifted.contains_key(DISABLE_AUTO_IMPORT));
        assert_eq!(
            lifted.get(ORIGINAL_DISABLE_AUTO_IMPORT).map(String::as_str),
            Some("true")
        );
        let frozen = applied(
            lifted.clone(),
            &in_flight(&lifted, "m", Some("c"), true, true),
        );
        let back = applied(frozen.clone(), &restored(&frozen, &|_| true));
        assert_eq!(
            back.get(DISABLE_AUTO_IMPORT).map(String::as_str),
            Some("true")
        );
        assert!(!back.contains_key(ORIGINAL_DISABLE_AUTO_IMPORT));
    }

    #[test]
    fn plain_ocm_and_the_older_shape_before_release_keep_the_clusters_own_selection() {
        let start = annotations(&[(KLUSTERLET_CONFIG, "own")]);
        let flying = applied(start.clone(), &in_flight(&start, "m", None, false, false));
        assert_eq!(
            flying.get(KLUSTERLET_CONFIG).map(String::as_str),
            Some("own")
        );
        assert_eq!(flying.get(MIGRATING).map(String::as_str), Some("m"));
    }

    #[test]
    fn an_unrecorded_selection_of_ours_is_removed_anothers_kept() {
        let ours = annotations(&[(KLUSTERLET_CONFIG, "migration-hub2"), (MIGRATING, "m")]);
        let back = restored(&ours, &|k| k == "migration-hub2");
        assert_eq!(back[KLUSTERLET_CONFIG], None);
        let theirs = annotations(&[(KLUSTERLET_CONFIG, "own")]);
        assert_eq!(
            restored(&theirs, &|k| k == "migration-hub2")[KLUSTERLET_CONFIG].as_deref(),
            Some("own")
        );
    }

    fn taint(key: &str, value: &str, effect: &str, added: bool) -> Taint {
        Taint {
            key: key.into(),
            value: Some(value.into()),
            effect: effect.into(),
            time_added: added.then(migration_api::common::now),
        }
    }

    #[test]
    fn the_migrating_taint_is_added_without_a_time_and_removed_leaving_the_others_as_they_are() {
        let unreachable = taint(
            "cluster.open-cluster-management.io/unreachable",
            "",
            "NoSelect",
            true,
        );
        let added = taints(std::slice::from_ref(&unreachable), "m", true).unwrap();
        assert_eq!(added.len(), 2);
        assert_eq!(added[0], serde_json::to_value(&unreachable).unwrap());
        assert_eq!(
            added[1],
            json!({"key": taints::MIGRATING, "value": "m", "effect": "NoSelectIfNew"})
        );
        // As the hub stores it (with the time it was added): nothing more to do.
        let stored: Vec<Taint> = added
            .iter()
            .map(|t| {
                let mut t: Taint = serde_json::from_value(t.clone()).unwrap();
                t.time_added = Some(migration_api::common::now());
                t
            })
            .collect();
        assert_eq!(taints(&stored, "m", true), None);
        // Another migration's taint (a leftover) is replaced, as a new taint.
        let other = [taint(taints::MIGRATING, "old", "NoSelectIfNew", true)];
        assert_eq!(
            taints(&other, "m", true).unwrap(),
            vec![json!({"key": taints::MIGRATING, "value": "m", "effect": "NoSelectIfNew"})]
        );
        // Removed: the others stay exactly as they were; none left to remove: nothing to do.
        let removed = taints(&stored, "m", false).unwrap();
        assert_eq!(removed, vec![serde_json::to_value(&stored[0]).unwrap()]);
        assert_eq!(taints(&stored[..1], "m", false), None);
        assert_eq!(taints(&[], "m", false), None);
        // Another migration's taint is not this one's to lift.
        assert_eq!(taints(&other, "m", false), None);
    }

    #[test]
    fn derived_specs() {
        let own = json!({"hubKubeAPIServerConfig": {"url": "https://hub1.example:6443"}, "nodePlacement": {"nodeSelector": {"a": "b"}},
                         "multipleHubsConfig": {"genBootstrapKubeConfigStrategy": "Default"}});
        let base = json!({"multipleHubsConfig": {"genBootstrapKubeConfigStrategy": "IncludeCurrentHub",
                          "bootstrapKubeConfigs": {"type": "LocalSecrets"}}});
        let spec = derived_config_spec(&own, &base);
        assert_eq!(
            spec["hubKubeAPIServerConfig"],
            own["hubKubeAPIServerConfig"]
        );
        assert_eq!(spec["nodePlacement"], own["nodePlacement"]);
        assert_eq!(spec["multipleHubsConfig"], base["multipleHubsConfig"]);
    }
}
