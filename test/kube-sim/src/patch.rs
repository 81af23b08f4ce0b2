//! JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch.

use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::types::{ListType, TypeOracle};

/// Applies an RFC 6902 JSON patch; a failed operation (a `test` included) is 422.
pub fn json_patch(target: &Value, patch: &[u8]) -> ApiResult<Value> {
    let ops: json_patch::Patch = serde_json::from_slice(patch)
        .map_err(|e| ApiError::bad_request(format!("json: cannot unmarshal the patch: {e}")))?;
    let mut doc = target.clone();
    for op in ops.0 {
        // As the real server does, `test` of a missing path against null succeeds (kube-rs's
        // finalizer helper relies on it).
        if let json_patch::PatchOperation::Test(t) = &op
            && t.value.is_null()
            && doc.pointer(&t.path.to_string()).is_none()
        {
            continue;
        }
        json_patch::patch(&mut doc, &[op]).map_err(|e| {
            ApiError::unprocessable(format!(
                "the server rejected our request due to an error in our request: {e}"
            ))
        })?;
    }
    Ok(doc)
}

/// Applies an RFC 7386 JSON merge patch.
pub fn merge_patch(target: &Value, patch: &[u8]) -> ApiResult<Value> {
    let p: Value = serde_json::from_slice(patch)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    if !p.is_object() {
        return Err(ApiError::bad_request("a merge patch must be a JSON object"));
    }
    let mut doc = target.clone();
    json_patch::merge(&mut doc, &p);
    Ok(doc)
}

/// Applies a strategic merge patch (built-in kinds only; the caller refuses custom ones).
pub fn strategic_merge_patch(
    target: &Value,
    patch: &[u8],
    oracle: &TypeOracle,
) -> ApiResult<Value> {
    let p: Value = serde_json::from_slice(patch)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    if !p.is_object() {
        return Err(ApiError::bad_request(
            "a strategic merge patch must be a JSON object",
        ));
    }
    smp(target, &p, oracle, &mut Vec::new()).map_err(ApiError::bad_request)
}

fn smp(
    original: &Value,
    patch: &Value,
    oracle: &TypeOracle,
    path: &mut Vec<String>,
) -> Result<Value, String> {
    let (Value::Object(orig), Value::Object(p)) = (original, patch) else {
        return Ok(patch.clone());
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut out = p.clone();
            out.remove("$patch");
            return Ok(Value::Object(out));
        }
        Some("delete") => return Ok(Value::Null),
        Some(other) if other != "merge" => return Err(format!("unknown patch type: {other}")),
        _ => {}
    }
    let mut out: Map<String, Value> = orig.clone();
    // `$deleteFromPrimitiveList/<field>` removes values from a primitive list.
    for (k, v) in p {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/")
            && let (Some(Value::Array(items)), Some(remove)) = (out.get_mut(field), v.as_array())
        {
            items.retain(|i| !remove.contains(i));
        }
    }
    for (k, v) in p {
        if k.starts_with('$') {
            // $setElementOrder, $retainKeys and the like only order or retain: nothing to merge.
            continue;
        }
        if v.is_null() {
            out.remove(k);
            continue;
        }
        path.push(k.clone());
        let merged = match (out.get(k), v) {
            (Some(o @ Value::Object(_)), Value::Object(_)) => smp(o, v, oracle, path)?,
            (Some(Value::Array(o)), Value::Array(items)) => merge_list(o, items, oracle, path)?,
            (None, Value::Object(_)) => smp(&Value::Object(Map::new()), v, oracle, path)?,
            (None, Value::Array(items)) => merge_list(&[], items, oracle, path)?,
            _ => v.clone(),
        };
        path.pop();
        if merged.is_null() {
            out.remove(k);
        } else {
            out.insert(k.clone(), merged);
        }
    }
    Ok(Value::Object(out))
}

fn merge_list(
    orig: &[Value],
    patch: &[Value],
    oracle: &TypeOracle,
    path: &mut Vec<String>,
) -> Result<Value, String> {
    if patch
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        return Ok(Value::Array(
            patch
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .cloned()
                .collect(),
        ));
    }
    let str_path: Vec<&str> = path.iter().map(String::as_str).collect();
    match oracle.list_type(&str_path) {
        ListType::Map(keys) => {
            let mut out = orig.to_vec();
            let same = |a: &Value, b: &Value| keys.iter().all(|k| a.get(k) == b.get(k));
            path.push("[]".into());
            for item in patch {
                if item.get("$patch").and_then(Value::as_str) == Some("delete") {
                    out.retain(|o| !same(o, item));
                    continue;
                }
                match out.iter_mut().find(|o| same(o, item)) {
                    Some(existing) => *existing = smp(existing, item, oracle, path)?,
                    None => out.push(item.clone()),
                }
            }
            path.pop();
            Ok(Value::Array(out))
        }
        ListType::Set => {
            let mut out = orig.to_vec();
            for item in patch {
                if !out.contains(item) {
                    out.push(item.clone());
                }
            }
            Ok(Value::Array(out))
        }
        ListType::Atomic => Ok(Value::Array(patch.to_vec())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Builtin;
    use serde_json::json;

    #[test]
    fn json_patch_test_failure_is_422() {
        let doc = json!({"a": 1});
        let err = json_patch(&doc, br#"[{"op":"test","path":"/a","value":2}]"#).unwrap_err();
        assert_eq!(err.code, 422);
        let ok = json_patch(
            &doc,
            br#"[{"op":"test","path":"/a","value":1},{"op":"replace","path":"/a","value":3}]"#,
        )
        .unwrap();
        assert_eq!(ok, json!({"a": 3}));
        assert_eq!(json_patch(&doc, b"{}").unwrap_err().code, 400);
    }

    #[test]
    fn merge_patch_deletes_with_null() {
        let doc = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        let out = merge_patch(&doc, br#"{"a":{"b":null},"l":[3]}"#).unwrap();
        assert_eq!(out, json!({"a": {"c": 2}, "l": [3]}));
    }

    #[test]
    fn strategic_merge_by_key() {
        let o = TypeOracle::Builtin(Builtin::Deployment);
        let doc = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
            {"name": "b", "image": "b:1"}]}}}});
        let patch = br#"{"spec":{"template":{"spec":{"containers":[
            {"name":"a","image":"a:2","env":[{"name":"Y","value":"2"}]},
            {"name":"b","$patch":"delete"}],
            "$setElementOrder/containers":[{"name":"a"}]}}}}"#;
        let out = strategic_merge_patch(&doc, patch, &o).unwrap();
        let containers = out["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        assert_eq!(containers.len(), 1);
        assert_eq!(containers[0]["image"], "a:2");
        assert_eq!(containers[0]["env"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn strategic_merge_finalizers_union_and_delete_from_primitive_list() {
        let o = TypeOracle::Builtin(Builtin::ConfigMap);
        let doc = json!({"metadata": {"finalizers": ["a", "b"]}});
        let out = strategic_merge_patch(&doc, br#"{"metadata":{"finalizers":["c"]}}"#, &o).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b", "c"]));
        let out = strategic_merge_patch(
            &out,
            br#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["a"]}}"#,
            &o,
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b", "c"]));
    }
}
