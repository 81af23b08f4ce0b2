//! Field ownership (`metadata.managedFields`, FieldsV1) and server-side apply.
//!
//! A field set is the FieldsV1 trie: keys `f:<field>`, `k:<json key>` (list-map item),
//! `v:<json>` (set member) and `.` (the item itself), each mapping to the set below it.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::types::{ListType, TypeOracle};

/// A FieldsV1 trie.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet(pub BTreeMap<String, FieldSet>);

impl FieldSet {
    /// Parses `fieldsV1`.
    pub fn from_json(v: &Value) -> Self {
        Self(
            v.as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), Self::from_json(v)))
                        .collect()
                })
                .unwrap_or_default(),
        )
    }

    /// Renders `fieldsV1`.
    pub fn to_json(&self) -> Value {
        Value::Object(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), v.to_json()))
                .collect(),
        )
    }

    /// True when nothing is owned.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every leaf path (a `.` marker is a leaf).
    pub fn leaves(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        for (k, sub) in &self.0 {
            prefix.push(k.clone());
            if sub.is_empty() {
                out.push(prefix.clone());
            } else {
                sub.collect(prefix, out);
            }
            prefix.pop();
        }
    }

    /// Whether the leaf path is in the set.
    pub fn contains(&self, path: &[String]) -> bool {
        match path.split_first() {
            None => true,
            Some((head, rest)) => self.0.get(head).is_some_and(|s| s.contains(rest)),
        }
    }

    /// Whether the set owns the path or anything below it.
    pub fn touches(&self, path: &[String]) -> bool {
        match path.split_first() {
            None => true,
            Some((head, rest)) => self.0.get(head).is_some_and(|s| s.touches(rest)),
        }
    }

    /// Adds a leaf path.
    pub fn insert(&mut self, path: &[String]) {
        if let Some((head, rest)) = path.split_first() {
            self.0.entry(head.clone()).or_default().insert(rest);
        }
    }

    /// Removes a leaf path, pruning emptied parents.
    pub fn remove(&mut self, path: &[String]) {
        if let Some((head, rest)) = path.split_first() {
            if rest.is_empty() {
                self.0.remove(head);
            } else if let Some(sub) = self.0.get_mut(head) {
                sub.remove(rest);
                if sub.is_empty() {
                    self.0.remove(head);
                }
            }
        }
    }
}

/// Which part of an object a write covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The whole object.
    All,
    /// Everything but `status` (main resource of a kind with a status subresource).
    NoStatus,
    /// Only `status`.
    StatusOnly,
}

/// The field set an object's content implies.
pub fn fieldset_of(obj: &Value, oracle: &TypeOracle, scope: Scope) -> FieldSet {
    let mut set = FieldSet::default();
    let Some(map) = obj.as_object() else {
        return set;
    };
    for (k, v) in map {
        match k.as_str() {
            "apiVersion" | "kind" => continue,
            "status" if scope == Scope::NoStatus => continue,
            "metadata" => {
                if scope == Scope::StatusOnly {
                    continue;
                }
                let mut meta = FieldSet::default();
                if let Some(m) = v.as_object() {
                    for f in ["labels", "annotations", "finalizers", "ownerReferences"] {
                        if let Some(val) = m.get(f) {
                            let path = vec!["metadata", f];
                            meta.0
                                .insert(format!("f:{f}"), value_set(val, oracle, &path));
                        }
                    }
                }
                if !meta.is_empty() {
                    set.0.insert("f:metadata".into(), meta);
                }
            }
            _ if scope == Scope::StatusOnly && k != "status" => continue,
            _ => {
                set.0
                    .insert(format!("f:{k}"), value_set(v, oracle, &[k.as_str()]));
            }
        }
    }
    set
}

fn value_set(v: &Value, oracle: &TypeOracle, path: &[&str]) -> FieldSet {
    match v {
        Value::Object(m) if !m.is_empty() => {
            let mut set = FieldSet::default();
            for (k, sub) in m {
                let mut p = path.to_vec();
                p.push(k);
                set.0.insert(format!("f:{k}"), value_set(sub, oracle, &p));
            }
            set
        }
        Value::Array(items) => match oracle.list_type(path) {
            ListType::Atomic => FieldSet::default(),
            ListType::Set => FieldSet(
                items
                    .iter()
                    .map(|i| (format!("v:{i}"), FieldSet::default()))
                    .collect(),
            ),
            ListType::Map(keys) => {
                let mut set = FieldSet::default();
                let mut item_path = path.to_vec();
                item_path.push("[]");
                for item in items {
                    let mut sub = value_set(item, oracle, &item_path);
                    sub.0.insert(".".into(), FieldSet::default());
                    set.0.insert(item_key(item, &keys), sub);
                }
                set
            }
        },
        _ => FieldSet::default(),
    }
}

/// `k:{"name":"x"}` for a list-map item.
fn item_key(item: &Value, keys: &[String]) -> String {
    let key: BTreeMap<&str, Value> = keys
        .iter()
        .map(|k| (k.as_str(), item.get(k).cloned().unwrap_or(Value::Null)))
        .collect();
    format!("k:{}", serde_json::to_string(&key).unwrap_or_default())
}

fn item_matches(item: &Value, key_json: &str) -> bool {
    match serde_json::from_str::<Map<String, Value>>(key_json) {
        Ok(key) => key.iter().all(|(k, v)| item.get(k) == Some(v)),
        Err(_) => false,
    }
}

/// The value at a field path, if present.
pub fn value_at<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    let Some((head, rest)) = path.split_first() else {
        return Some(obj);
    };
    let next = if head == "." {
        return Some(obj);
    } else if let Some(f) = head.strip_prefix("f:") {
        obj.get(f)?
    } else if let Some(k) = head.strip_prefix("k:") {
        obj.as_array()?.iter().find(|i| item_matches(i, k))?
    } else if let Some(v) = head.strip_prefix("v:") {
        let want: Value = serde_json::from_str(v).ok()?;
        obj.as_array()?.iter().find(|i| **i == want)?
    } else {
        return None;
    };
    value_at(next, rest)
}

/// Removes the field at a path (a `.` marker removes the list item it marks). A nested map
/// the removal leaves empty goes too, as structured-merge-diff's `RemoveItems` turns it into
/// null (kubernetes-sigs/structured-merge-diff#184; its keeping `{}` instead, #306, was
/// reverted); top-level fields (`spec`) stay.
pub fn remove_at(obj: &mut Value, path: &[String]) {
    remove_nested(obj, path, 0);
}

fn remove_nested(obj: &mut Value, path: &[String], depth: usize) {
    let Some((head, rest)) = path.split_first() else {
        return;
    };
    let last = rest.is_empty() || (rest.len() == 1 && rest[0] == ".");
    if let Some(f) = head.strip_prefix("f:") {
        if let Some(m) = obj.as_object_mut() {
            if last {
                m.remove(f);
            } else if let Some(next) = m.get_mut(f) {
                remove_nested(next, rest, depth + 1);
                if depth >= 1 && next.as_object().is_some_and(serde_json::Map::is_empty) {
                    m.remove(f);
                }
            }
        }
    } else if let Some(k) = head.strip_prefix("k:") {
        if let Some(items) = obj.as_array_mut() {
            if last {
                items.retain(|i| !item_matches(i, k));
            } else if let Some(next) = items.iter_mut().find(|i| item_matches(i, k)) {
                remove_nested(next, rest, depth + 1);
            }
        }
    } else if let Some(v) = head.strip_prefix("v:")
        && let (Some(items), Ok(want)) = (obj.as_array_mut(), serde_json::from_str::<Value>(v))
    {
        items.retain(|i| *i != want);
    }
}

/// Human form of a path, as conflict messages show it: `.spec.containers[name="x"].image`.
pub fn display_path(path: &[String]) -> String {
    let mut out = String::new();
    for p in path {
        if let Some(f) = p.strip_prefix("f:") {
            out.push('.');
            out.push_str(f);
        } else if let Some(k) = p.strip_prefix("k:") {
            if let Ok(m) = serde_json::from_str::<Map<String, Value>>(k) {
                let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
                out.push_str(&format!("[{}]", parts.join(",")));
            }
        } else if let Some(v) = p.strip_prefix("v:") {
            out.push_str(&format!("[{v}]"));
        }
    }
    out
}

/// Merges an applied configuration into the live object.
pub fn merge(live: &Value, config: &Value, oracle: &TypeOracle, path: &[&str]) -> Value {
    match (live, config) {
        (Value::Object(l), Value::Object(c)) => {
            let mut out = l.clone();
            for (k, v) in c {
                let mut p = path.to_vec();
                p.push(k);
                let merged = match l.get(k) {
                    Some(lv) => merge(lv, v, oracle, &p),
                    None => v.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Value::Array(l), Value::Array(c)) => match oracle.list_type(path) {
            ListType::Atomic => config.clone(),
            ListType::Set => {
                let mut out = l.clone();
                for v in c {
                    if !out.contains(v) {
                        out.push(v.clone());
                    }
                }
                Value::Array(out)
            }
            ListType::Map(keys) => {
                let mut out = l.clone();
                let mut item_path = path.to_vec();
                item_path.push("[]");
                for item in c {
                    let key = item_key(item, &keys);
                    let k = key.trim_start_matches("k:");
                    match out.iter_mut().find(|i| item_matches(i, k)) {
                        Some(existing) => *existing = merge(existing, item, oracle, &item_path),
                        None => out.push(item.clone()),
                    }
                }
                Value::Array(out)
            }
        },
        _ => config.clone(),
    }
}

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub subresource: String,
    pub fields: FieldSet,
}

impl Entry {
    fn same_slot(&self, manager: &str, operation: &str, subresource: &str) -> bool {
        self.manager == manager && self.operation == operation && self.subresource == subresource
    }
}

/// Reads `metadata.managedFields`.
pub fn read_entries(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| {
                    let s = |k: &str| {
                        e.get(k)
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned()
                    };
                    Entry {
                        manager: s("manager"),
                        operation: s("operation"),
                        api_version: s("apiVersion"),
                        time: s("time"),
                        subresource: s("subresource"),
                        fields: FieldSet::from_json(e.get("fieldsV1").unwrap_or(&Value::Null)),
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Writes `metadata.managedFields` (removing it when empty).
pub fn write_entries(obj: &mut Value, entries: &[Entry]) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": e.fields.to_json(),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    if list.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

fn subtract(entries: &mut [Entry], skip: Option<usize>, paths: &[Vec<String>]) {
    for (i, e) in entries.iter_mut().enumerate() {
        if Some(i) == skip {
            continue;
        }
        for p in paths {
            e.fields.remove(p);
        }
    }
}

fn upsert(
    entries: &mut Vec<Entry>,
    slot: (&str, &str, &str),
    api_version: &str,
    now: &str,
) -> usize {
    let (manager, operation, subresource) = slot;
    if let Some(i) = entries
        .iter()
        .position(|e| e.same_slot(manager, operation, subresource))
    {
        return i;
    }
    entries.push(Entry {
        manager: manager.to_owned(),
        operation: operation.to_owned(),
        api_version: api_version.to_owned(),
        time: now.to_owned(),
        subresource: subresource.to_owned(),
        fields: FieldSet::default(),
    });
    entries.len() - 1
}

/// Records an Update-operation write by `manager`: it takes the fields it changed; fields that
/// disappeared are owned by nobody.
#[allow(clippy::too_many_arguments)]
pub fn track_update(
    old: Option<&Value>,
    new: &mut Value,
    oracle: &TypeOracle,
    scope: Scope,
    manager: &str,
    subresource: &str,
    api_version: &str,
    now: &str,
) {
    let mut entries = old.map(read_entries).unwrap_or_default();
    let new_set = fieldset_of(new, oracle, scope);
    let old_set = old
        .map(|o| fieldset_of(o, oracle, scope))
        .unwrap_or_default();
    let changed: Vec<Vec<String>> = new_set
        .leaves()
        .into_iter()
        .filter(|p| match old {
            None => true,
            Some(o) => !old_set.contains(p) || value_at(o, p) != value_at(new, p),
        })
        .collect();
    let removed: Vec<Vec<String>> = old_set
        .leaves()
        .into_iter()
        .filter(|p| !new_set.contains(p))
        .collect();
    subtract(&mut entries, None, &removed);
    if !changed.is_empty() {
        let i = upsert(
            &mut entries,
            (manager, "Update", subresource),
            api_version,
            now,
        );
        subtract(&mut entries, Some(i), &changed);
        for p in &changed {
            entries[i].fields.insert(p);
        }
        entries[i].time = now.to_owned();
        entries[i].api_version = api_version.to_owned();
    }
    entries.retain(|e| !e.fields.is_empty());
    write_entries(new, &entries);
}

/// A server-side apply that conflicts with other managers.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflicts(pub Vec<(String, String)>);

impl Conflicts {
    /// The message the real server gives.
    pub fn message(&self) -> String {
        let n = self.0.len();
        if n == 1 {
            let (m, p) = &self.0[0];
            return format!("Apply failed with 1 conflict: conflict with \"{m}\": {p}");
        }
        let lines: Vec<String> = self
            .0
            .iter()
            .map(|(m, p)| format!("- conflict with \"{m}\": {p}"))
            .collect();
        format!("Apply failed with {n} conflicts:\n{}", lines.join("\n"))
    }
}

/// Server-side apply of `config` by `manager` onto `live` (an empty object when creating).
/// Returns the merged object with updated `managedFields`.
#[allow(clippy::too_many_arguments)]
pub fn apply(
    live: &Value,
    config: &Value,
    oracle: &TypeOracle,
    scope: Scope,
    manager: &str,
    subresource: &str,
    force: bool,
    api_version: &str,
    now: &str,
) -> Result<Value, Conflicts> {
    let mut entries = read_entries(live);
    let config_set = fieldset_of(config, oracle, scope);
    let config_leaves = config_set.leaves();

    let mut conflicts = Vec::new();
    let mut taken: Vec<(usize, Vec<String>)> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if e.manager == manager {
            continue;
        }
        for p in &config_leaves {
            if p.last().map(String::as_str) == Some(".") || !e.fields.contains(p) {
                continue;
            }
            if value_at(live, p) != value_at(config, p) {
                conflicts.push((e.manager.clone(), display_path(p)));
                taken.push((i, p.clone()));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        conflicts.sort();
        conflicts.dedup();
        return Err(Conflicts(conflicts));
    }
    for (i, p) in &taken {
        entries[*i].fields.remove(p);
    }

    let mut merged = merge(live, config, oracle, &[]);
    let slot = upsert(
        &mut entries,
        (manager, "Apply", subresource),
        api_version,
        now,
    );
    let previous = entries[slot].fields.clone();
    for p in previous.leaves() {
        if config_set.contains(&p) {
            continue;
        }
        // For an item marker, the item goes only if nobody else owns anything in it.
        let (target, owned_elsewhere) = if p.last().map(String::as_str) == Some(".") {
            let item = &p[..p.len() - 1];
            let elsewhere = config_set.touches(item)
                || entries
                    .iter()
                    .enumerate()
                    .any(|(j, e)| j != slot && e.fields.touches(item));
            (p.clone(), elsewhere)
        } else {
            let elsewhere = entries
                .iter()
                .enumerate()
                .any(|(j, e)| j != slot && e.fields.contains(&p));
            (p.clone(), elsewhere)
        };
        if !owned_elsewhere {
            remove_at(&mut merged, &target);
        }
    }
    if entries[slot].fields != config_set {
        entries[slot].fields = config_set;
        entries[slot].time = now.to_owned();
        entries[slot].api_version = api_version.to_owned();
    }
    entries.retain(|e| !e.fields.is_empty());
    write_entries(&mut merged, &entries);
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oracle_schema() -> Value {
        json!({"properties": {"spec": {"properties": {
            "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                      "items": {"type": "object"}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set"}
        }}}})
    }

    fn ap(live: &Value, config: Value, manager: &str, force: bool) -> Result<Value, Conflicts> {
        let schema = oracle_schema();
        let o = TypeOracle::Schema(&schema);
        apply(
            live,
            &config,
            &o,
            Scope::All,
            manager,
            "",
            force,
            "x/v1",
            "2026-01-01T00:00:00Z",
        )
    }

    #[test]
    fn two_managers_share_disjoint_fields() {
        let a = ap(&json!({}), json!({"spec": {"x": 1}}), "a", false).unwrap();
        let b = ap(&a, json!({"spec": {"y": 2}}), "b", false).unwrap();
        assert_eq!(b["spec"], json!({"x": 1, "y": 2}));
        assert_eq!(read_entries(&b).len(), 2);
    }

    #[test]
    fn dropping_a_field_removes_it_unless_shared() {
        let a = ap(&json!({}), json!({"spec": {"x": 1, "y": 1}}), "a", false).unwrap();
        let a2 = ap(&a, json!({"spec": {"x": 1}}), "a", false).unwrap();
        assert_eq!(a2["spec"], json!({"x": 1}));
        // Shared with an equal value: b co-owns y, so a dropping it keeps it.
        let b = ap(&a, json!({"spec": {"y": 1}}), "b", false).unwrap();
        let a3 = ap(&b, json!({"spec": {"x": 1}}), "a", false).unwrap();
        assert_eq!(a3["spec"], json!({"x": 1, "y": 1}));
    }

    /// structured-merge-diff: a struct whose every field its applier stops applying goes with
    /// them, not left as `{}` (which defaulting and validation would then trip over).
    #[test]
    fn dropping_every_field_of_a_nested_map_drops_the_map() {
        let a = ap(
            &json!({}),
            json!({"spec": {"x": 1, "y": {"z": {"w": 1}}}}),
            "a",
            false,
        )
        .unwrap();
        let a2 = ap(&a, json!({"spec": {"x": 1}}), "a", false).unwrap();
        assert_eq!(a2["spec"], json!({"x": 1}));
        let a3 = ap(&a2, json!({"spec": {}}), "a", false).unwrap();
        assert_eq!(a3["spec"], json!({}), "a top-level field stays");
    }

    #[test]
    fn conflicting_value_needs_force() {
        let a = ap(&json!({}), json!({"spec": {"x": 1}}), "a", false).unwrap();
        let err = ap(&a, json!({"spec": {"x": 2}}), "b", false).unwrap_err();
        assert_eq!(
            err.message(),
            "Apply failed with 1 conflict: conflict with \"a\": .spec.x"
        );
        let forced = ap(&a, json!({"spec": {"x": 2}}), "b", true).unwrap();
        assert_eq!(forced["spec"]["x"], 2);
        let entries = read_entries(&forced);
        assert_eq!(entries.len(), 1, "a lost its only field");
        assert_eq!(entries[0].manager, "b");
    }

    #[test]
    fn list_map_items_merge_by_key() {
        let a = ap(
            &json!({}),
            json!({"spec": {"items": [{"name": "p", "v": 1}], "tags": ["t1"]}}),
            "a",
            false,
        )
        .unwrap();
        let b = ap(
            &a,
            json!({"spec": {"items": [{"name": "q", "v": 2}], "tags": ["t2"]}}),
            "b",
            false,
        )
        .unwrap();
        assert_eq!(b["spec"]["items"].as_array().unwrap().len(), 2);
        assert_eq!(b["spec"]["tags"], json!(["t1", "t2"]));
        // a stops applying its item: removed; b's stays.
        let a2 = ap(&b, json!({"spec": {"tags": ["t1"]}}), "a", false).unwrap();
        assert_eq!(a2["spec"]["items"], json!([{"name": "q", "v": 2}]));
    }

    #[test]
    fn update_takes_changed_fields() {
        let a = ap(&json!({}), json!({"spec": {"x": 1, "y": 1}}), "a", false).unwrap();
        let mut updated = a.clone();
        updated["spec"]["x"] = json!(5);
        let o = TypeOracle::Unknown;
        track_update(
            Some(&a),
            &mut updated,
            &o,
            Scope::All,
            "editor",
            "",
            "x/v1",
            "t",
        );
        let entries = read_entries(&updated);
        let editor = entries.iter().find(|e| e.manager == "editor").unwrap();
        assert!(editor.fields.contains(&["f:spec".into(), "f:x".into()]));
        let a_entry = entries.iter().find(|e| e.manager == "a").unwrap();
        assert!(!a_entry.fields.contains(&["f:spec".into(), "f:x".into()]));
        // Now a re-applying x=1 conflicts with editor.
        assert!(ap(&updated, json!({"spec": {"x": 1, "y": 1}}), "a", false).is_err());
    }
}
