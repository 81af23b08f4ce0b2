//! Shapes shared by several OCM APIs, and schema helpers.
//!
//! OCM repeats a handful of small structures across its CRDs (node placement, feature gates,
//! config referents, bootstrap kubeconfig lists). They are declared once here.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use crate::names::condition_status::TRUE;

/// Schema of `Vec<T>` declared as a list-map with the given keys.
pub fn list_map<T: JsonSchema>(
    generator: &mut schemars::SchemaGenerator,
    keys: &[&str],
) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Vec<T>>();
    let obj = schema.ensure_object();
    obj.insert("x-kubernetes-list-type".into(), "map".into());
    obj.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::Value::Array(keys.iter().map(|k| (*k).into()).collect()),
    );
    schema
}

/// Marks `conditions` as a list-map keyed by `type`, as every OCM conditions list is, so that
/// server-side apply merges conditions per type. Use with `#[schemars(schema_with = ...)]`.
pub fn conditions(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    list_map::<Condition>(generator, &["type"])
}

/// An arbitrary embedded Kubernetes object (a ManifestWork manifest).
pub fn embedded_resource(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-embedded-resource": true,
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Value that is either an integer or a string such as `"25%"`.
pub fn int_or_string(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "x-kubernetes-int-or-string": true })
}

/// Node selector and tolerations for an agent's pods.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePlacement {
    pub node_selector: Option<BTreeMap<String, String>>,
    pub tolerations: Option<Vec<Toleration>>,
}

/// A feature gate switched on or off for an OCM component.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeatureGate {
    pub feature: String,
    /// `Enable` or `Disable`.
    pub mode: Option<String>,
}

/// The Kubernetes resource a config reference points at (group and resource).
#[skip_serializing_none]
#[derive(
    Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ConfigGroupResource {
    #[serde(default)]
    pub group: String,
    pub resource: String,
}

/// A named config object, optionally namespaced.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigReferent {
    pub name: String,
    pub namespace: Option<String>,
}

/// A config referent together with the hash of the spec that was observed.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigSpecHash {
    pub name: String,
    pub namespace: Option<String>,
    pub spec_hash: Option<String>,
}

/// A reference from an addon to one of its config objects.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddOnConfig {
    #[serde(default)]
    pub group: String,
    pub resource: String,
    pub name: String,
    pub namespace: Option<String>,
}

/// The bootstrap kubeconfigs a klusterlet may choose between (feature gate MultipleHubs).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapKubeConfigs {
    /// `None` or `LocalSecrets`.
    #[serde(rename = "type")]
    pub type_: String,
    pub local_secrets_config: Option<LocalSecretsConfig>,
}

/// Bootstrap kubeconfigs kept as secrets in the klusterlet's namespace.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalSecretsConfig {
    pub kube_config_secrets: Vec<KubeConfigSecret>,
    /// How long the klusterlet waits for an unreachable hub before it reselects (default 600).
    #[serde(default, deserialize_with = "crate::common::saturating::opt_i32")]
    pub hub_connection_timeout_seconds: Option<i32>,
}

/// One bootstrap kubeconfig secret, by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KubeConfigSecret {
    pub name: String,
}

/// A container image mirror.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageMirror {
    pub mirror: String,
    pub source: Option<String>,
}

/// Looks a condition up by type.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// True when the condition of that type exists and has status `True`.
pub fn condition_is_true(conditions: &[Condition], type_: &str) -> bool {
    find_condition(conditions, type_).is_some_and(|c| c.status == TRUE)
}

/// An object of any shape, kept as is.
pub fn preserve_unknown_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

/// Now, as a condition or status timestamp.
pub fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// Sets a condition the way `meta.SetStatusCondition` does: the transition time changes only
/// when the status does. Returns whether anything changed.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
) -> bool {
    let condition = Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation,
        last_transition_time: now(),
    };
    set_condition_at(conditions, condition)
}

/// [`set_condition`] with the time taken by the caller (`condition.last_transition_time`):
/// for a pure decision that is handed the clock. Returns whether anything changed.
pub fn set_condition_at(conditions: &mut Vec<Condition>, condition: Condition) -> bool {
    let Some(c) = conditions.iter_mut().find(|c| c.type_ == condition.type_) else {
        conditions.push(condition);
        return true;
    };
    let changed = c.status != condition.status
        || c.reason != condition.reason
        || c.message != condition.message
        || c.observed_generation != condition.observed_generation;
    if c.status != condition.status {
        c.last_transition_time = condition.last_transition_time;
    }
    c.status = condition.status;
    c.reason = condition.reason;
    c.message = condition.message;
    c.observed_generation = condition.observed_generation;
    changed
}

pub fn requirement_matches(
    r: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement,
    value: Option<&String>,
) -> bool {
    let values = r.values.clone().unwrap_or_default();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        _ => false,
    }
}

/// Whether labels satisfy a LabelSelector (an empty selector matches everything).
pub fn selector_matches(
    sel: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    sel.match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
        && sel
            .match_expressions
            .iter()
            .flatten()
            .all(|r| requirement_matches(r, labels.get(&r.key)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_condition_keeps_transition_time_unless_status_changes() {
        let mut cs = Vec::new();
        assert!(set_condition(
            &mut cs, "Ready", "False", "Waiting", "w", None
        ));
        let first = cs[0].last_transition_time.clone();
        assert!(set_condition(
            &mut cs, "Ready", "False", "Waiting", "still", None
        ));
        assert_eq!(cs[0].last_transition_time, first);
        assert!(!set_condition(
            &mut cs, "Ready", "False", "Waiting", "still", None
        ));
        assert!(set_condition(
            &mut cs,
            "Ready",
            "True",
            "Done",
            "ok",
            Some(2)
        ));
        assert!(condition_is_true(&cs, "Ready"));
        assert_eq!(cs.len(), 1);
    }
}

/// Tolerant decoding of 32-bit integers from objects anyone may write.
///
/// An API server stores any integer within int64 in a field its schema calls `int32` (the
/// format is not enforced before Kubernetes 1.36, and never for `uint32`), and one such
/// object would fail the decoding of a whole typed list, stopping every watch of its kind.
/// A value out of range saturates at the type's bounds instead; validation then judges it
/// as it judges any large value.
pub mod saturating {
    use serde::Deserializer;
    use serde::de::{Error, Visitor};

    /// An integer of `T`'s range from any JSON number, saturated at its bounds.
    struct Saturate<T>(std::marker::PhantomData<T>);

    /// What a 32-bit integer type tells the visitor.
    trait Bounded: Sized {
        fn from_i128(v: i128) -> Self;
    }

    impl Bounded for i32 {
        fn from_i128(v: i128) -> Self {
            v.clamp(i128::from(i32::MIN), i128::from(i32::MAX)) as i32
        }
    }

    impl Bounded for u32 {
        fn from_i128(v: i128) -> Self {
            v.clamp(0, i128::from(u32::MAX)) as u32
        }
    }

    impl<'de, T: Bounded> Visitor<'de> for Saturate<T> {
        type Value = T;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an integer")
        }

        fn visit_i64<E: Error>(self, v: i64) -> Result<T, E> {
            Ok(T::from_i128(i128::from(v)))
        }

        fn visit_u64<E: Error>(self, v: u64) -> Result<T, E> {
            Ok(T::from_i128(i128::from(v)))
        }

        fn visit_f64<E: Error>(self, v: f64) -> Result<T, E> {
            if v.is_nan() {
                return Err(E::custom("NaN is not an integer"));
            }
            // `as` saturates a float at the integer's bounds.
            Ok(T::from_i128(v as i128))
        }
    }

    /// An optional integer, saturated (`null` and absence are `None`).
    struct SaturateOption<T>(std::marker::PhantomData<T>);

    impl<'de, T: Bounded> Visitor<'de> for SaturateOption<T> {
        type Value = Option<T>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an integer or null")
        }

        fn visit_none<E: Error>(self) -> Result<Option<T>, E> {
            Ok(None)
        }

        fn visit_unit<E: Error>(self) -> Result<Option<T>, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
            d.deserialize_any(Saturate(std::marker::PhantomData))
                .map(Some)
        }
    }

    /// An `i32` field.
    pub fn i32<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
        d.deserialize_any(Saturate(std::marker::PhantomData))
    }

    /// An `Option<i32>` field (with `#[serde(default)]`).
    pub fn opt_i32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i32>, D::Error> {
        d.deserialize_option(SaturateOption(std::marker::PhantomData))
    }

    /// A `u32` field.
    pub fn u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        d.deserialize_any(Saturate(std::marker::PhantomData))
    }

    /// An `Option<u32>` field (with `#[serde(default)]`).
    pub fn opt_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        d.deserialize_option(SaturateOption(std::marker::PhantomData))
    }

    #[cfg(test)]
    mod tests {
        use serde_json::json;

        use crate::migration::ManagedClusterMigration;
        use crate::ocm::work::ManifestWork;

        #[test]
        fn one_object_out_of_range_does_not_break_the_list_of_its_kind() {
            let mcm = |max_concurrency: serde_json::Value| {
                json!({
                    "apiVersion": "migration.open-cluster-management.io/v1alpha1",
                    "kind": "ManagedClusterMigration",
                    "metadata": {"name": "m", "namespace": "ns"},
                    "spec": {"from": "hub1", "to": "hub2", "includedManagedClusters": ["c1"],
                             "maxConcurrency": max_concurrency, "maxFailures": -99999999999i64},
                    "status": {"clusters": {"total": 9999999999i64}},
                })
            };
            let list = json!([mcm(json!(9999999999i64)), mcm(json!(2)), mcm(json!(null))]);
            let decoded: Vec<ManagedClusterMigration> =
                serde_json::from_value(list).expect("the list decodes");
            let concurrency: Vec<_> = decoded.iter().map(|m| m.spec.max_concurrency).collect();
            assert_eq!(concurrency, [Some(i32::MAX), Some(2), None]);
            assert_eq!(decoded[0].spec.max_failures, Some(i32::MIN));
            let total = decoded[0]
                .status
                .as_ref()
                .and_then(|s| s.clusters)
                .map(|c| c.total);
            assert_eq!(total, Some(i32::MAX));
            // A work whose feedback names a manifest past int32, and a float where an
            // integer belongs.
            let work: ManifestWork = serde_json::from_value(json!({
                "apiVersion": "work.open-cluster-management.io/v1",
                "kind": "ManifestWork",
                "metadata": {"name": "w", "namespace": "hub1"},
                "spec": {},
                "status": {"resourceStatus": {"manifests": [
                    {"resourceMeta": {"ordinal": 1099511627776i64}, "conditions": []},
                    {"resourceMeta": {"ordinal": -2.5}, "conditions": []},
                ]}},
            }))
            .expect("the work decodes");
            let ordinals: Vec<i32> = work
                .status
                .iter()
                .flat_map(|s| s.resource_status.iter())
                .flat_map(|r| r.manifests.iter().flatten())
                .map(|m| m.resource_meta.ordinal)
                .collect();
            assert_eq!(ordinals, [i32::MAX, -2]);
        }
    }
}
