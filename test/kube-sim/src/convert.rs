//! Presenting stored objects at the version a client asked for. Versions of one custom
//! resource share storage and differ only in apiVersion (conversion strategy None); core and
//! events.k8s.io Events share storage and are converted field by field.

use serde_json::{Map, Value, json};

use crate::resources::{Builtin, ResourceType};

/// The object as `rt`'s version shows it.
pub fn present(rt: &ResourceType, stored: &Value) -> Value {
    let stored_api = stored
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut obj = match rt.builtin {
        Some(Builtin::CoreEvent) if stored_api == "events.k8s.io/v1" => events_to_core(stored),
        Some(Builtin::Event) if stored_api == "v1" => core_to_events(stored),
        _ => stored.clone(),
    };
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!(rt.api_version()));
        m.insert("kind".into(), json!(rt.kind));
    }
    obj
}

/// The object as `rt`'s version shows it, encoded as JSON: the same bytes as encoding
/// [`present`]'s answer, written from the stored object without copying it where only
/// apiVersion and kind change (the object's keys are in order, so these two are written in
/// their places).
pub fn encode_presented(rt: &ResourceType, stored: &Value) -> Vec<u8> {
    let converted = matches!(rt.builtin, Some(Builtin::CoreEvent | Builtin::Event));
    let in_place = !converted
        && stored
            .as_object()
            .is_some_and(|m| m.contains_key("apiVersion") && m.contains_key("kind"));
    let encoded = if in_place {
        serde_json::to_vec(&Presented {
            api_version: &rt.api_version(),
            kind: &rt.kind,
            stored,
        })
    } else {
        serde_json::to_vec(&present(rt, stored))
    };
    encoded.unwrap_or_default()
}

/// A stored object written with its apiVersion and kind replaced.
struct Presented<'a> {
    api_version: &'a str,
    kind: &'a str,
    stored: &'a Value,
}

impl serde::Serialize for Presented<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Some(fields) = self.stored.as_object() else {
            return self.stored.serialize(s);
        };
        let mut map = s.serialize_map(Some(fields.len()))?;
        for (k, v) in fields {
            match k.as_str() {
                "apiVersion" => map.serialize_entry(k, self.api_version)?,
                "kind" => map.serialize_entry(k, self.kind)?,
                _ => map.serialize_entry(k, v)?,
            }
        }
        map.end()
    }
}

fn copy(from: &Value, to: &mut Map<String, Value>, src: &str, dst: &str) {
    if let Some(v) = from.get(src) {
        to.insert(dst.into(), v.clone());
    }
}

fn events_to_core(e: &Value) -> Value {
    let mut out = Map::new();
    copy(e, &mut out, "metadata", "metadata");
    copy(e, &mut out, "regarding", "involvedObject");
    copy(e, &mut out, "related", "related");
    copy(e, &mut out, "reason", "reason");
    copy(e, &mut out, "note", "message");
    copy(e, &mut out, "type", "type");
    copy(e, &mut out, "action", "action");
    copy(e, &mut out, "eventTime", "eventTime");
    copy(e, &mut out, "series", "series");
    copy(e, &mut out, "reportingController", "reportingComponent");
    copy(e, &mut out, "reportingInstance", "reportingInstance");
    copy(e, &mut out, "deprecatedSource", "source");
    copy(e, &mut out, "deprecatedFirstTimestamp", "firstTimestamp");
    copy(e, &mut out, "deprecatedLastTimestamp", "lastTimestamp");
    copy(e, &mut out, "deprecatedCount", "count");
    if !out.contains_key("involvedObject") {
        out.insert("involvedObject".into(), json!({}));
    }
    Value::Object(out)
}

fn core_to_events(e: &Value) -> Value {
    let mut out = Map::new();
    copy(e, &mut out, "metadata", "metadata");
    copy(e, &mut out, "involvedObject", "regarding");
    copy(e, &mut out, "related", "related");
    copy(e, &mut out, "reason", "reason");
    copy(e, &mut out, "message", "note");
    copy(e, &mut out, "type", "type");
    copy(e, &mut out, "action", "action");
    copy(e, &mut out, "eventTime", "eventTime");
    copy(e, &mut out, "series", "series");
    copy(e, &mut out, "reportingComponent", "reportingController");
    copy(e, &mut out, "reportingInstance", "reportingInstance");
    copy(e, &mut out, "source", "deprecatedSource");
    copy(e, &mut out, "firstTimestamp", "deprecatedFirstTimestamp");
    copy(e, &mut out, "lastTimestamp", "deprecatedLastTimestamp");
    copy(e, &mut out, "count", "deprecatedCount");
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Registry;

    #[test]
    fn an_object_is_encoded_as_its_presented_copy_is() {
        let reg = Registry::with_builtins();
        let cm = reg.find("", "v1", "configmaps").unwrap();
        let core = reg.find("", "v1", "events").unwrap();
        let new = reg.find("events.k8s.io", "v1", "events").unwrap();
        // Another version of one storage: only apiVersion differs.
        let mut other_version = (*cm).clone();
        other_version.version = "v2".into();
        let event = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
                           "regarding": {"kind": "Pod", "name": "p"}, "note": "hello \"quoted\""});
        let objects = [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"},
                   "data": {"b": "x", "a": "é\n"}, "zz": [1, 2.5, null, true]}),
            json!({"kind": "ConfigMap", "metadata": {"name": "no-api-version"}}),
            json!({"metadata": {"name": "bare"}}),
            json!("not an object"),
            event,
        ];
        for rt in [&*cm, &other_version, &*core, &*new] {
            for o in &objects {
                assert_eq!(
                    String::from_utf8(encode_presented(rt, o)).unwrap(),
                    serde_json::to_string(&present(rt, o)).unwrap(),
                    "{} {o}",
                    rt.api_version()
                );
            }
        }
    }

    #[test]
    fn events_convert_both_ways() {
        let reg = Registry::with_builtins();
        let core = reg.find("", "v1", "events").unwrap();
        let new = reg.find("events.k8s.io", "v1", "events").unwrap();
        let stored = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
                            "regarding": {"kind": "Pod", "name": "p"}, "note": "hello", "reason": "R", "type": "Normal"});
        let c = present(&core, &stored);
        assert_eq!(c["apiVersion"], "v1");
        assert_eq!(c["message"], "hello");
        assert_eq!(c["involvedObject"]["name"], "p");
        let back = present(&new, &c);
        assert_eq!(back["note"], "hello");
        assert_eq!(back["regarding"]["kind"], "Pod");
    }
}
