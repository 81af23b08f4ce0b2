//! What the server knows of each field's type where merging depends on it: list semantics
//! (atomic, set, or map by keys) from a CRD's schema, or from a table for built-in kinds
//! (their strategic-merge-patch keys).

use serde_json::Value;

use crate::resources::{Builtin, ResourceType};

/// How a list merges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListType {
    /// Replaced as a whole.
    Atomic,
    /// Scalars, merged as a set.
    Set,
    /// Objects, merged by these key fields.
    Map(Vec<String>),
}

/// Answers list semantics for field paths (field names, `[]` for list items).
#[derive(Clone, Debug)]
pub enum TypeOracle<'a> {
    /// A CRD's structural schema.
    Schema(&'a Value),
    /// A built-in kind, from the table below.
    Builtin(Builtin),
    /// Nothing known: every list is atomic.
    Unknown,
}

/// Merge keys of built-in kinds' lists (their `patchMergeKey`s), by path.
const BUILTIN_LISTS: &[(&str, &[&str])] = &[
    ("spec.template.spec.containers", &["name"]),
    ("spec.template.spec.initContainers", &["name"]),
    ("spec.template.spec.containers[].env", &["name"]),
    ("spec.template.spec.initContainers[].env", &["name"]),
    (
        "spec.template.spec.containers[].ports",
        &["containerPort", "protocol"],
    ),
    (
        "spec.template.spec.containers[].volumeMounts",
        &["mountPath"],
    ),
    (
        "spec.template.spec.initContainers[].volumeMounts",
        &["mountPath"],
    ),
    ("spec.template.spec.volumes", &["name"]),
    ("spec.template.spec.imagePullSecrets", &["name"]),
    ("status.conditions", &["type"]),
    ("secrets", &["name"]),
    ("imagePullSecrets", &["name"]),
];

impl<'a> TypeOracle<'a> {
    /// The oracle for a served type.
    pub fn for_type(rt: &'a ResourceType) -> Self {
        match (&rt.schema, rt.builtin) {
            (Some(s), _) => Self::Schema(s),
            (None, Some(b)) => Self::Builtin(b),
            _ => Self::Unknown,
        }
    }

    /// List semantics of the list at `path`.
    pub fn list_type(&self, path: &[&str]) -> ListType {
        // Metadata lists are the same for every kind.
        match path {
            ["metadata", "finalizers"] => return ListType::Set,
            ["metadata", "ownerReferences"] => return ListType::Map(vec!["uid".into()]),
            _ => {}
        }
        match self {
            Self::Schema(schema) => {
                let Some(node) = walk(schema, path) else {
                    return ListType::Atomic;
                };
                match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
                    Some("set") => ListType::Set,
                    Some("map") => ListType::Map(
                        node.get("x-kubernetes-list-map-keys")
                            .and_then(Value::as_array)
                            .map(|a| {
                                a.iter()
                                    .filter_map(|k| k.as_str().map(str::to_owned))
                                    .collect()
                            })
                            .unwrap_or_default(),
                    ),
                    _ => ListType::Atomic,
                }
            }
            Self::Builtin(_) => {
                let joined = path.join(".").replace(".[]", "[]");
                BUILTIN_LISTS
                    .iter()
                    .find(|(p, _)| *p == joined)
                    .map(|(_, keys)| ListType::Map(keys.iter().map(|k| (*k).to_owned()).collect()))
                    .unwrap_or(ListType::Atomic)
            }
            Self::Unknown => ListType::Atomic,
        }
    }
}

/// The schema node at a path (`[]` steps into items; unknown names into additionalProperties).
fn walk<'v>(schema: &'v Value, path: &[&str]) -> Option<&'v Value> {
    let mut node = schema;
    for step in path {
        node = if *step == "[]" {
            node.get("items")?
        } else {
            node.get("properties")
                .and_then(|p| p.get(*step))
                .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()))?
        };
    }
    Some(node)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_and_builtin_list_types() {
        let schema = serde_json::json!({"properties": {"status": {"properties": {"conditions": {
            "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
            "items": {"type": "object"}}}}}});
        let o = TypeOracle::Schema(&schema);
        assert_eq!(
            o.list_type(&["status", "conditions"]),
            ListType::Map(vec!["type".into()])
        );
        assert_eq!(o.list_type(&["spec", "x"]), ListType::Atomic);
        assert_eq!(o.list_type(&["metadata", "finalizers"]), ListType::Set);
        let b = TypeOracle::Builtin(Builtin::Deployment);
        assert_eq!(
            b.list_type(&["spec", "template", "spec", "containers", "[]", "env"]),
            ListType::Map(vec!["name".into()])
        );
    }
}
