//! Structural-schema processing of custom objects, as the real server does it: pruning of
//! unknown fields, defaulting, and validation (types, required, enum, pattern, bounds, list and
//! map semantics, oneOf/anyOf/allOf/not). CEL rules (`x-kubernetes-validations`) are not
//! evaluated.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use regex::Regex;
use serde_json::{Map, Value};

/// What processing found.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Outcome {
    /// `(field path, message)` for each violation.
    pub errors: Vec<(String, String)>,
    /// Paths of pruned unknown fields.
    pub unknown: Vec<String>,
}

/// ObjectMeta fields; others under `metadata` are unknown.
pub const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Prunes, defaults and validates a whole custom object against its CRD schema.
pub fn process_object(schema: &Value, obj: &mut Value) -> Outcome {
    let mut out = Outcome::default();
    let Some(map) = obj.as_object_mut() else {
        out.errors.push(("".into(), "must be an object".into()));
        return out;
    };
    if let Some(Value::Object(meta)) = map.get_mut("metadata") {
        prune_metadata(meta, "metadata", &mut out);
    }
    let props = schema.get("properties").and_then(Value::as_object);
    let keys: Vec<String> = map.keys().cloned().collect();
    for key in keys {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match props.and_then(|p| p.get(&key)) {
            Some(sub) => {
                if let Some(v) = map.get_mut(&key) {
                    process(sub, v, &key, &mut out);
                    if v.is_null() && !flag(sub, "nullable") {
                        map.remove(&key);
                    }
                }
            }
            None if flag(schema, "x-kubernetes-preserve-unknown-fields") => {}
            None => {
                map.remove(&key);
                out.unknown.push(key);
            }
        }
    }
    apply_defaults(schema, map, "", &mut out);
    check_object_constraints(schema, map, "", &mut out);
    check_combinators(schema, obj, "", &mut out);
    out
}

fn prune_metadata(meta: &mut Map<String, Value>, path: &str, out: &mut Outcome) {
    let unknown: Vec<String> = meta
        .keys()
        .filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str()))
        .cloned()
        .collect();
    for k in unknown {
        meta.remove(&k);
        out.unknown.push(format!("{path}.{k}"));
    }
}

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn short(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

/// Processes one value in place: prunes unknown fields below it, defaults, validates.
pub fn process(schema: &Value, value: &mut Value, path: &str, out: &mut Outcome) {
    if value.is_null() {
        // A null is kept only where the schema is nullable; the caller prunes it otherwise.
        return;
    }
    if !check_type(schema, value, path, out) {
        return;
    }
    check_scalar_constraints(schema, value, path, out);
    match value {
        Value::Object(map) => {
            if flag(schema, "x-kubernetes-embedded-resource") {
                for required in ["apiVersion", "kind"] {
                    if !map.contains_key(required) {
                        out.errors.push((
                            join(path, required),
                            "Required value: must not be empty".into(),
                        ));
                    }
                }
                if let Some(Value::Object(meta)) = map.get_mut("metadata") {
                    prune_metadata(meta, &join(path, "metadata"), out);
                }
            }
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let sub_path = join(path, &key);
                let sub_schema = props
                    .and_then(|p| p.get(&key))
                    .or_else(|| additional.filter(|a| a.is_object()));
                match sub_schema {
                    Some(sub) => {
                        if let Some(v) = map.get_mut(&key) {
                            process(sub, v, &sub_path, out);
                            if v.is_null() && !flag(sub, "nullable") {
                                map.remove(&key);
                            }
                        }
                    }
                    None if flag(schema, "x-kubernetes-preserve-unknown-fields")
                        || additional.and_then(Value::as_bool) == Some(true) => {}
                    None if flag(schema, "x-kubernetes-embedded-resource")
                        && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") => {}
                    None => {
                        map.remove(&key);
                        out.unknown.push(sub_path);
                    }
                }
            }
            apply_defaults(schema, map, path, out);
            check_object_constraints(schema, map, path, out);
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    process(item_schema, item, &format!("{path}[{i}]"), out);
                }
            }
            check_list_semantics(schema, items, path, out);
        }
        _ => {}
    }
    check_combinators(schema, value, path, out);
}

fn check_type(schema: &Value, value: &Value, path: &str, out: &mut Outcome) -> bool {
    let actual = type_name(value);
    if flag(schema, "x-kubernetes-int-or-string") {
        if actual == "integer" || actual == "string" {
            return true;
        }
        out.errors.push((
            path.into(),
            format!(
                "Invalid value: {}: {path} in body must be of type integer,string: {actual:?}",
                short(value)
            ),
        ));
        return false;
    }
    let Some(want) = schema.get("type").and_then(Value::as_str) else {
        return true;
    };
    let ok = want == actual || (want == "number" && actual == "integer");
    if !ok {
        out.errors.push((
            path.into(),
            format!(
                "Invalid value: {}: {path} in body must be of type {want}: {actual:?}",
                short(value)
            ),
        ));
    }
    ok
}

fn regex(pattern: &str) -> Option<Regex> {
    static CACHE: OnceLock<Mutex<HashMap<String, Option<Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut guard = cache.lock().ok()?;
    guard
        .entry(pattern.to_owned())
        .or_insert_with(|| Regex::new(pattern).ok())
        .clone()
}

fn number(schema: &Value, key: &str) -> Option<f64> {
    schema.get(key).and_then(Value::as_f64)
}

fn check_scalar_constraints(schema: &Value, value: &Value, path: &str, out: &mut Outcome) {
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed.iter().map(short).collect();
        out.errors.push((
            path.into(),
            format!(
                "Unsupported value: {}: supported values: {}",
                short(value),
                list.join(", ")
            ),
        ));
    }
    match value {
        Value::String(s) => {
            let len = s.chars().count() as f64;
            if let Some(max) = number(schema, "maxLength").filter(|m| len > *m) {
                out.errors.push((
                    path.into(),
                    format!("Too long: may not be more than {max} bytes"),
                ));
            }
            if let Some(min) = number(schema, "minLength").filter(|m| len < *m) {
                out.errors.push((
                    path.into(),
                    format!(
                        "Invalid value: {}: {path} in body should be at least {min} chars long",
                        short(value)
                    ),
                ));
            }
            if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
                match regex(p) {
                    Some(re) if !re.is_match(s) => out.errors.push((
                        path.into(),
                        format!(
                            "Invalid value: {}: {path} in body should match '{p}'",
                            short(value)
                        ),
                    )),
                    _ => {}
                }
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            let excl_max = flag(schema, "exclusiveMaximum");
            let excl_min = flag(schema, "exclusiveMinimum");
            if let Some(max) = number(schema, "maximum")
                && (x > max || (excl_max && x >= max))
            {
                out.errors.push((
                    path.into(),
                    format!(
                        "Invalid value: {x}: {path} in body should be less than or equal to {max}"
                    ),
                ));
            }
            if let Some(min) = number(schema, "minimum")
                && (x < min || (excl_min && x <= min))
            {
                out.errors.push((
                        path.into(),
                        format!("Invalid value: {x}: {path} in body should be greater than or equal to {min}"),
                    ));
            }
        }
        Value::Array(items) => {
            let n = items.len() as f64;
            if let Some(max) = number(schema, "maxItems").filter(|m| n > *m) {
                out.errors.push((
                    path.into(),
                    format!("Too many: {n}: must have at most {max} items"),
                ));
            }
            if let Some(min) = number(schema, "minItems").filter(|m| n < *m) {
                out.errors.push((
                    path.into(),
                    format!("Invalid value: {n}: {path} in body should have at least {min} items"),
                ));
            }
        }
        _ => {}
    }
}

fn apply_defaults(schema: &Value, map: &mut Map<String, Value>, path: &str, out: &mut Outcome) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (key, sub) in props {
        if map.get(key).is_none_or(Value::is_null)
            && let Some(default) = sub.get("default")
        {
            let mut v = default.clone();
            process(sub, &mut v, &join(path, key), out);
            map.insert(key.clone(), v);
        }
    }
}

fn check_object_constraints(
    schema: &Value,
    map: &Map<String, Value>,
    path: &str,
    out: &mut Outcome,
) {
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for r in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(r) {
                out.errors.push((join(path, r), "Required value".into()));
            }
        }
    }
    let n = map.len() as f64;
    if let Some(max) = number(schema, "maxProperties").filter(|m| n > *m) {
        out.errors.push((
            path.into(),
            format!("Too many: {n}: must have at most {max} items"),
        ));
    }
    if let Some(min) = number(schema, "minProperties").filter(|m| n < *m) {
        out.errors.push((
            path.into(),
            format!("Invalid value: {n}: {path} in body should have at least {min} properties"),
        ));
    }
}

fn check_list_semantics(schema: &Value, items: &[Value], path: &str, out: &mut Outcome) {
    match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => {
            for (i, item) in items.iter().enumerate() {
                if items[..i].contains(item) {
                    out.errors.push((
                        format!("{path}[{i}]"),
                        format!("Duplicate value: {}", short(item)),
                    ));
                }
            }
        }
        Some("map") => {
            let keys: Vec<&str> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let key_of = |item: &Value| -> Vec<Value> {
                keys.iter()
                    .map(|k| item.get(*k).cloned().unwrap_or(Value::Null))
                    .collect()
            };
            for (i, item) in items.iter().enumerate() {
                let k = key_of(item);
                if items[..i].iter().any(|other| key_of(other) == k) {
                    let shown: Vec<String> = keys
                        .iter()
                        .zip(&k)
                        .map(|(name, v)| format!("\"{name}\":{v}"))
                        .collect();
                    out.errors.push((
                        format!("{path}[{i}]"),
                        format!(
                            "Duplicate value: map[string]interface {{}}{{{}}}",
                            shown.join(", ")
                        ),
                    ));
                }
            }
        }
        _ => {}
    }
}

/// Validates without pruning or defaulting (for combinator subschemas).
fn valid_against(schema: &Value, value: &Value) -> bool {
    let mut copy = value.clone();
    let mut out = Outcome::default();
    // Subschemas of a structural schema may not prune; only their errors count.
    check_type(schema, &copy, "", &mut out);
    check_scalar_constraints(schema, &copy, "", &mut out);
    if let (Value::Object(map), Some(props)) = (
        &mut copy,
        schema.get("properties").and_then(Value::as_object),
    ) {
        for (k, sub) in props {
            if let Some(v) = map.get(k)
                && !valid_against(sub, v)
            {
                return false;
            }
        }
    }
    if let Value::Object(map) = &copy {
        check_object_constraints(schema, map, "", &mut out);
    }
    check_combinators(schema, &copy, "", &mut out);
    out.errors.is_empty()
}

fn check_combinators(schema: &Value, value: &Value, path: &str, out: &mut Outcome) {
    let list = |k: &str| schema.get(k).and_then(Value::as_array);
    let shown = if path.is_empty() { "body" } else { path };
    if let Some(subs) = list("oneOf") {
        let n = subs.iter().filter(|s| valid_against(s, value)).count();
        if n != 1 {
            out.errors.push((
                path.into(),
                format!("Invalid value: {}: {shown} in body must validate one and only one schema (oneOf)", short(value)),
            ));
        }
    }
    if let Some(subs) = list("anyOf")
        && !subs.iter().any(|s| valid_against(s, value))
    {
        out.errors.push((
            path.into(),
            format!(
                "Invalid value: {}: {shown} in body must validate at least one schema (anyOf)",
                short(value)
            ),
        ));
    }
    if let Some(subs) = list("allOf")
        && !subs.iter().all(|s| valid_against(s, value))
    {
        out.errors.push((
            path.into(),
            format!(
                "Invalid value: {}: {shown} in body must validate all the schemas (allOf)",
                short(value)
            ),
        ));
    }
    if let Some(sub) = schema.get("not")
        && valid_against(sub, value)
    {
        out.errors.push((
            path.into(),
            format!(
                "Invalid value: {}: {shown} in body must not validate the schema (not)",
                short(value)
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["from"],
                    "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
                    "properties": {
                        "from": {"type": "string", "minLength": 1, "pattern": "^[a-z]+$"},
                        "a": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                        "b": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "n": {"type": "integer", "minimum": 1, "maximum": 5},
                        "mode": {"type": "string", "enum": ["X", "Y"], "default": "X"},
                        "ios": {"x-kubernetes-int-or-string": true},
                        "conds": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                                  "items": {"type": "object", "properties": {"type": {"type": "string"}}}},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "opt": {"type": "string", "nullable": true}
                    }
                }
            }
        })
    }

    #[test]
    fn valid_object_is_defaulted_and_pruned() {
        let mut obj = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a", "bogus": 1},
                             "spec": {"from": "hub", "a": ["x"], "extra": 1, "ios": "25%", "labels": {"k": "v"}, "opt": null},
                             "other": true});
        let out = process_object(&schema(), &mut obj);
        assert_eq!(out.errors, vec![]);
        assert_eq!(out.unknown, vec!["metadata.bogus", "other", "spec.extra"]);
        assert_eq!(obj["spec"]["mode"], "X");
        assert!(obj["spec"].get("extra").is_none());
        assert!(
            obj["spec"].get("opt").unwrap().is_null(),
            "nullable null is kept"
        );
    }

    #[test]
    fn violations_are_reported() {
        let mut obj = json!({"spec": {"from": "Hub1", "a": ["x", "x"], "b": {}, "n": 9, "mode": "Z", "ios": true,
                                      "conds": [{"type": "A"}, {"type": "A"}], "labels": {"k": 1}}});
        let out = process_object(&schema(), &mut obj);
        let fields: Vec<&str> = out.errors.iter().map(|(f, _)| f.as_str()).collect();
        for f in [
            "spec.from",
            "spec.a[1]",
            "spec.n",
            "spec.mode",
            "spec.ios",
            "spec.conds[1]",
            "spec.labels.k",
            "spec",
        ] {
            assert!(fields.contains(&f), "{f} missing in {:?}", out.errors);
        }
    }

    #[test]
    fn required_and_type_errors() {
        let mut obj = json!({"spec": {"a": "notalist"}});
        let out = process_object(&schema(), &mut obj);
        assert!(
            out.errors
                .iter()
                .any(|(f, m)| f == "spec.from" && m == "Required value")
        );
        assert!(
            out.errors
                .iter()
                .any(|(f, m)| f == "spec.a" && m.contains("must be of type array"))
        );
    }
}
