//! Compares the CRDs our types generate with the upstream CRDs they were written from.
//!
//! The rule: every property we declare must exist upstream with the same type (or int-or-string
//! where upstream has it, or sit under an upstream object that preserves unknown fields); every
//! field upstream requires in an object we declare must be required in ours; list semantics
//! (`x-kubernetes-list-type` map/set and their keys) must match, so server-side apply merges as
//! upstream does; enum values we declare must be allowed upstream.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

/// What a comparison found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    /// How many of our properties were compared.
    pub properties: usize,
    /// Each difference, with the path where it is.
    pub problems: Vec<String>,
}

/// Compares one of our CRDs with the upstream CRD of the same group and kind.
pub fn compare_crd(ours: &CustomResourceDefinition, upstream: &CustomResourceDefinition) -> Report {
    let mut report = Report::default();
    let kind = &ours.spec.names.kind;
    let mut check = |what: &str, a: &str, b: &str| {
        if a != b {
            report
                .problems
                .push(format!("{kind}: {what} is {a:?}, upstream has {b:?}"));
        }
    };
    check("group", &ours.spec.group, &upstream.spec.group);
    check("kind", kind, &upstream.spec.names.kind);
    check("scope", &ours.spec.scope, &upstream.spec.scope);
    check(
        "plural",
        &ours.spec.names.plural,
        &upstream.spec.names.plural,
    );
    for version in &ours.spec.versions {
        let Some(up) = upstream
            .spec
            .versions
            .iter()
            .find(|v| v.name == version.name)
        else {
            report.problems.push(format!(
                "{kind}: version {} does not exist upstream",
                version.name
            ));
            continue;
        };
        if !up.served {
            report.problems.push(format!(
                "{kind}: version {} is not served upstream",
                version.name
            ));
        }
        let has_status = |v: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion| {
            v.subresources.as_ref().is_some_and(|s| s.status.is_some())
        };
        if has_status(version) != has_status(up) {
            report.problems.push(format!(
                "{kind}: status subresource {} ours, {} upstream",
                has_status(version),
                has_status(up)
            ));
        }
        let schema = |v: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion| {
            v.schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .and_then(|s| serde_json::to_value(s).ok())
        };
        match (schema(version), schema(up)) {
            (Some(a), Some(b)) => {
                compare_schema(&a, &b, &format!("{kind}/{}", version.name), &mut report)
            }
            _ => report
                .problems
                .push(format!("{kind}: version {} lacks a schema", version.name)),
        }
    }
    report
}

fn str_field<'a>(schema: &'a Value, key: &str) -> Option<&'a str> {
    schema.get(key).and_then(Value::as_str)
}

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn strings(schema: &Value, key: &str) -> Vec<String> {
    schema
        .get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Compares one schema node of ours with upstream's at the same path, and recurses.
pub fn compare_schema(ours: &Value, upstream: &Value, path: &str, report: &mut Report) {
    let int_or_string = "x-kubernetes-int-or-string";
    if flag(upstream, int_or_string) {
        if !flag(ours, int_or_string) {
            report.problems.push(format!(
                "{path}: upstream is int-or-string, ours is {:?}",
                str_field(ours, "type").unwrap_or("untyped")
            ));
        }
    } else {
        match (str_field(ours, "type"), str_field(upstream, "type")) {
            (Some(a), Some(b)) if a != b => report
                .problems
                .push(format!("{path}: type is {a}, upstream has {b}")),
            (None, Some(b)) if flag(ours, int_or_string) => report.problems.push(format!(
                "{path}: ours is int-or-string, upstream has type {b}"
            )),
            _ => {}
        }
    }

    // List semantics matter to server-side apply; an absent list type means atomic.
    let list_type = |s: &Value| {
        str_field(s, "x-kubernetes-list-type")
            .unwrap_or("atomic")
            .to_owned()
    };
    if str_field(ours, "type") == Some("array") || str_field(upstream, "type") == Some("array") {
        let (a, b) = (list_type(ours), list_type(upstream));
        if a != b {
            report
                .problems
                .push(format!("{path}: list type is {a}, upstream has {b}"));
        } else if a == "map" {
            let (ka, kb) = (
                strings(ours, "x-kubernetes-list-map-keys"),
                strings(upstream, "x-kubernetes-list-map-keys"),
            );
            if ka != kb {
                report.problems.push(format!(
                    "{path}: list map keys are {ka:?}, upstream has {kb:?}"
                ));
            }
        }
    }

    // Enum values we allow must be allowed upstream.
    if let (Some(a), Some(b)) = (
        ours.get("enum"),
        upstream.get("enum").and_then(Value::as_array),
    ) {
        for value in a.as_array().into_iter().flatten() {
            if !value.is_null() && !b.contains(value) {
                report.problems.push(format!(
                    "{path}: enum value {value} is not allowed upstream"
                ));
            }
        }
    }

    let open = flag(upstream, "x-kubernetes-preserve-unknown-fields");
    let empty = serde_json::Map::new();
    let up_props = upstream
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    if let Some(props) = ours.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            report.properties += 1;
            let sub_path = format!("{path}.{name}");
            match up_props.get(name) {
                Some(up) => compare_schema(sub, up, &sub_path, report),
                None if open => {}
                None => report
                    .problems
                    .push(format!("{sub_path}: declared by us, absent upstream")),
            }
        }
        let ours_required = strings(ours, "required");
        for required in strings(upstream, "required") {
            if !ours_required.contains(&required) {
                report.problems.push(format!(
                    "{path}.{required}: required upstream, optional or absent in ours"
                ));
            }
        }
    }
    if let (Some(a), Some(b)) = (ours.get("items"), upstream.get("items")) {
        compare_schema(a, b, &format!("{path}[]"), report);
    }
    if let (Some(a @ Value::Object(_)), Some(b @ Value::Object(_))) = (
        ours.get("additionalProperties"),
        upstream.get("additionalProperties"),
    ) {
        compare_schema(a, b, &format!("{path}{{}}"), report);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn upstream() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["url"],
                    "properties": {
                        "url": {"type": "string"},
                        "replicas": {"type": "integer"},
                        "maxFailures": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                        "mode": {"type": "string", "enum": ["A", "B"]},
                        "conditions": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["type"],
                            "items": {"type": "object", "properties": {"type": {"type": "string"}}}
                        },
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                    }
                }
            }
        })
    }

    fn ours() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["url"],
                    "properties": {
                        "url": {"type": "string"},
                        "replicas": {"type": "integer", "nullable": true},
                        "maxFailures": {"x-kubernetes-int-or-string": true},
                        "mode": {"type": "string", "enum": ["A"]},
                        "conditions": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["type"],
                            "items": {"type": "object", "properties": {"type": {"type": "string"}}}
                        },
                        "free": {"type": "object", "properties": {"anything": {"type": "string"}}}
                    }
                }
            }
        })
    }

    fn run(ours: &Value) -> Report {
        let mut report = Report::default();
        compare_schema(ours, &upstream(), "T", &mut report);
        report
    }

    #[test]
    fn matching_schemas_have_no_problems_and_count_properties() {
        let report = run(&ours());
        assert_eq!(report.problems, Vec::<String>::new());
        // spec, its six properties, conditions[].type and free.anything
        assert_eq!(report.properties, 9);
    }

    #[test]
    fn renamed_property_is_reported() {
        let mut o = ours();
        let props = o["properties"]["spec"]["properties"]
            .as_object_mut()
            .unwrap();
        let v = props.remove("replicas").unwrap();
        props.insert("replicaCount".into(), v);
        let report = run(&o);
        assert_eq!(
            report.problems,
            vec!["T.spec.replicaCount: declared by us, absent upstream".to_owned()]
        );
    }

    #[test]
    fn changed_type_is_reported() {
        let mut o = ours();
        o["properties"]["spec"]["properties"]["replicas"]["type"] = json!("string");
        let report = run(&o);
        assert_eq!(
            report.problems,
            vec!["T.spec.replicas: type is string, upstream has integer".to_owned()]
        );
    }

    #[test]
    fn int_or_string_must_stay_int_or_string() {
        let mut o = ours();
        o["properties"]["spec"]["properties"]["maxFailures"] = json!({"type": "integer"});
        assert_eq!(run(&o).problems.len(), 1);
    }

    #[test]
    fn upstream_required_field_must_be_required() {
        let mut o = ours();
        o["properties"]["spec"]["required"] = json!([]);
        assert_eq!(
            run(&o).problems,
            vec!["T.spec.url: required upstream, optional or absent in ours".to_owned()]
        );
    }

    #[test]
    fn list_semantics_must_match() {
        let mut o = ours();
        o["properties"]["spec"]["properties"]["conditions"]
            .as_object_mut()
            .unwrap()
            .remove("x-kubernetes-list-type");
        assert_eq!(
            run(&o).problems,
            vec!["T.spec.conditions: list type is atomic, upstream has map".to_owned()]
        );
        let mut o = ours();
        o["properties"]["spec"]["properties"]["conditions"]["x-kubernetes-list-map-keys"] =
            json!(["name"]);
        assert_eq!(run(&o).problems.len(), 1);
    }

    #[test]
    fn enum_value_unknown_upstream_is_reported() {
        let mut o = ours();
        o["properties"]["spec"]["properties"]["mode"]["enum"] = json!(["A", "C"]);
        assert_eq!(
            run(&o).problems,
            vec!["T.spec.mode: enum value \"C\" is not allowed upstream".to_owned()]
        );
    }
}
