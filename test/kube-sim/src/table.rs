//! `as=Table` output for `kubectl get`: CRD printer columns, the built-in kinds' usual
//! columns, dates rendered as ages.

use serde_json::{Value, json};

use crate::jsonpath;
use crate::meta::{meta_str, parse_time};
use crate::resources::{Builtin, PrinterColumn, ResourceType};

/// What each row carries besides its cells (`includeObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    /// Parses the query parameter (default Metadata).
    pub fn parse(s: Option<&str>) -> Self {
        match s {
            Some("None") => Self::None,
            Some("Object") => Self::Object,
            _ => Self::Metadata,
        }
    }
}

/// How a read presents its objects, from its `Accept` header: whole; as a Table (`as=Table`,
/// kubectl's); or as their metadata alone (`as=PartialObjectMetadata` for a get or a watch,
/// `as=PartialObjectMetadataList` for a list: client-go's metadata informers and kube-rs's
/// `Api<PartialObjectMeta<K>>`; k8s.io/apiserver `pkg/endpoints/handlers/response.go`,
/// `transformObject`). A media type with any other `as=` is passed over for the next one the
/// header lists; a header that lists none the server can serve gets 406, as the apiserver's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Shape {
    #[default]
    Full,
    Table(IncludeObject),
    Metadata,
}

impl Shape {
    /// The shape a request asks for with `accept` (its header) for `verb`, negotiated as the
    /// apiserver does (`k8s.io/apiserver` `pkg/endpoints/handlers/negotiation`): the first
    /// media type it can serve wins, one with an `as=` it cannot serve to this verb is passed
    /// over, and 406 when none is left. `include` is the `includeObject` parameter.
    pub fn parse(accept: &str, verb: &str, include: Option<&str>) -> Result<Self, String> {
        let wanted = if verb == "list" {
            "PartialObjectMetadataList"
        } else {
            "PartialObjectMetadata"
        };
        if accept.trim().is_empty() {
            return Ok(Self::Full);
        }
        for m in accept.split(',').map(str::trim) {
            let target = m.split(';').find_map(|p| p.trim().strip_prefix("as="));
            match target {
                None => return Ok(Self::Full),
                Some("Table") => return Ok(Self::Table(IncludeObject::parse(include))),
                Some(t) if t == wanted => return Ok(Self::Metadata),
                Some(_) => {}
            }
        }
        Err(format!(
            "only the following media types are accepted: application/json, application/json;as=Table;v=v1;g=meta.k8s.io, application/json;as={wanted};v=v1;g=meta.k8s.io"
        ))
    }
}

/// An object as a PartialObjectMetadata: its metadata alone.
pub fn partial_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
    })
}

/// Kubernetes' short human duration: `45s`, `3m2s`, `25m`, `5h3m`, `20h`, `3d4h`, `45d`, `2y`.
pub fn human_duration(secs: i64) -> String {
    let s = secs.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else if d < 365 * 8 {
        let y = d / 365;
        if d % 365 == 0 {
            format!("{y}y")
        } else {
            format!("{y}y{}d", d % 365)
        }
    } else {
        format!("{}y", d / 365)
    }
}

fn age_of(ts: Option<&str>) -> Value {
    match ts.and_then(parse_time) {
        Some(t) => json!(human_duration(
            jiff::Timestamp::now().as_second() - t.as_second()
        )),
        None => json!("<unknown>"),
    }
}

fn col(name: &str, type_: &str, format: &str) -> Value {
    json!({"name": name, "type": type_, "format": format, "description": "", "priority": 0})
}

fn columns(rt: &ResourceType) -> Vec<Value> {
    let name = json!({"name": "Name", "type": "string", "format": "name",
        "description": "Name must be unique within a namespace.", "priority": 0});
    let age = col("Age", "string", "");
    if rt.builtin.is_none() {
        if rt.printer_columns.is_empty() {
            return vec![name, age];
        }
        let mut cols = vec![name];
        cols.extend(rt.printer_columns.iter().map(|c: &PrinterColumn| {
            json!({"name": c.name, "type": c.type_, "format": c.format.clone().unwrap_or_default(),
                   "description": c.description, "priority": c.priority})
        }));
        return cols;
    }
    use Builtin::*;
    match rt.builtin {
        Some(Namespace) => vec![name, col("Status", "string", ""), age],
        Some(Secret) => vec![
            name,
            col("Type", "string", ""),
            col("Data", "string", ""),
            age,
        ],
        Some(ConfigMap) => vec![name, col("Data", "string", ""), age],
        Some(ServiceAccount) => vec![name, col("Secrets", "string", ""), age],
        Some(CoreEvent | Event) => vec![
            col("Last Seen", "string", ""),
            col("Type", "string", ""),
            col("Reason", "string", ""),
            col("Object", "string", ""),
            col("Message", "string", ""),
        ],
        Some(Lease) => vec![name, col("Holder", "string", ""), age],
        Some(Deployment) => vec![
            name,
            col("Ready", "string", ""),
            col("Up-to-date", "string", ""),
            col("Available", "string", ""),
            age,
        ],
        Some(ClusterRoleBinding | RoleBinding) => vec![name, col("Role", "string", ""), age],
        Some(CertificateSigningRequest) => vec![
            name,
            age,
            col("SignerName", "string", ""),
            col("Requestor", "string", ""),
            col("RequestedDuration", "string", ""),
            col("Condition", "string", ""),
        ],
        _ => vec![name, col("Created At", "date", "")],
    }
}

fn cell_for(column: &PrinterColumn, obj: &Value) -> Value {
    let found = jsonpath::find(obj, &column.json_path);
    let Some(first) = found.first() else {
        return Value::Null;
    };
    match column.type_.as_str() {
        "date" => age_of(first.as_str()),
        "integer" => first.as_i64().map(Value::from).unwrap_or(Value::Null),
        "number" => first.as_f64().map(Value::from).unwrap_or(Value::Null),
        "boolean" => first.as_bool().map(Value::from).unwrap_or(Value::Null),
        _ => match first {
            Value::String(s) => json!(s),
            other => json!(other.to_string()),
        },
    }
}

fn count(obj: &Value, fields: &[&str]) -> usize {
    fields
        .iter()
        .filter_map(|f| obj.get(*f))
        .map(|v| {
            v.as_object()
                .map(|m| m.len())
                .or_else(|| v.as_array().map(Vec::len))
                .unwrap_or(0)
        })
        .sum()
}

fn s<'a>(obj: &'a Value, ptr: &str) -> &'a str {
    obj.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

fn cells(rt: &ResourceType, obj: &Value) -> Vec<Value> {
    let name = json!(meta_str(obj, "name").unwrap_or_default());
    let created = meta_str(obj, "creationTimestamp");
    let age = age_of(created);
    if rt.builtin.is_none() {
        if rt.printer_columns.is_empty() {
            return vec![name, age];
        }
        let mut out = vec![name];
        out.extend(rt.printer_columns.iter().map(|c| cell_for(c, obj)));
        return out;
    }
    use Builtin::*;
    match rt.builtin {
        Some(Namespace) => vec![name, json!(s(obj, "/status/phase")), age],
        Some(Secret) => vec![
            name,
            json!(s(obj, "/type")),
            json!(count(obj, &["data"])),
            age,
        ],
        Some(ConfigMap) => vec![name, json!(count(obj, &["data", "binaryData"])), age],
        Some(ServiceAccount) => vec![name, json!(count(obj, &["secrets"])), age],
        Some(CoreEvent | Event) => {
            let (last, regarding, message) = if rt.builtin == Some(CoreEvent) {
                let t = obj
                    .get("lastTimestamp")
                    .and_then(Value::as_str)
                    .or_else(|| obj.get("eventTime").and_then(Value::as_str));
                (t, obj.get("involvedObject"), s(obj, "/message"))
            } else {
                let t = obj
                    .get("eventTime")
                    .and_then(Value::as_str)
                    .or_else(|| obj.get("deprecatedLastTimestamp").and_then(Value::as_str));
                (t, obj.get("regarding"), s(obj, "/note"))
            };
            let object = regarding
                .map(|r| format!("{}/{}", s(r, "/kind").to_lowercase(), s(r, "/name")))
                .unwrap_or_default();
            vec![
                age_of(last.or(created)),
                json!(s(obj, "/type")),
                json!(s(obj, "/reason")),
                json!(object),
                json!(message),
            ]
        }
        Some(Lease) => vec![name, json!(s(obj, "/spec/holderIdentity")), age],
        Some(Deployment) => {
            let n = |p: &str| obj.pointer(p).and_then(Value::as_i64).unwrap_or(0);
            vec![
                name,
                json!(format!(
                    "{}/{}",
                    n("/status/readyReplicas"),
                    n("/spec/replicas")
                )),
                json!(n("/status/updatedReplicas")),
                json!(n("/status/availableReplicas")),
                age,
            ]
        }
        Some(ClusterRoleBinding | RoleBinding) => {
            vec![
                name,
                json!(format!(
                    "{}/{}",
                    s(obj, "/roleRef/kind"),
                    s(obj, "/roleRef/name")
                )),
                age,
            ]
        }
        Some(CertificateSigningRequest) => {
            let mut conds: Vec<String> = obj
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .map(|cs| {
                    cs.iter()
                        .filter_map(|c| c.get("type").and_then(Value::as_str).map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            if obj.pointer("/status/certificate").is_some() {
                conds.push("Issued".into());
            }
            let condition = if conds.is_empty() {
                "Pending".to_owned()
            } else {
                conds.join(",")
            };
            let duration = obj
                .pointer("/spec/expirationSeconds")
                .and_then(Value::as_i64)
                .map(human_duration)
                .unwrap_or_else(|| "<none>".into());
            vec![
                name,
                age,
                json!(s(obj, "/spec/signerName")),
                json!(s(obj, "/spec/username")),
                json!(duration),
                json!(condition),
            ]
        }
        _ => vec![name, json!(created.unwrap_or_default())],
    }
}

fn row(rt: &ResourceType, obj: &Value, include: IncludeObject) -> Value {
    let mut r = json!({"cells": cells(rt, obj)});
    match include {
        IncludeObject::None => {}
        IncludeObject::Object => r["object"] = obj.clone(),
        IncludeObject::Metadata => r["object"] = partial_metadata(obj),
    }
    r
}

/// A Table of the objects.
pub fn table(rt: &ResourceType, objs: &[Value], include: IncludeObject, list_meta: Value) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": columns(rt),
        "rows": objs.iter().map(|o| row(rt, o, include)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(human_duration(45), "45s");
        assert_eq!(human_duration(182), "3m2s");
        assert_eq!(human_duration(25 * 60), "25m");
        assert_eq!(human_duration(5 * 3600 + 180), "5h3m");
        assert_eq!(human_duration(20 * 3600), "20h");
        assert_eq!(human_duration(3 * 86400 + 4 * 3600), "3d4h");
        assert_eq!(human_duration(45 * 86400), "45d");
    }

    #[test]
    fn a_reads_shape_is_the_first_media_type_it_can_be_served_as() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        let client_go_meta = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        let kube_rs_watch = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
        for (accept, verb, want) in [
            ("", "list", Ok(Shape::Full)),
            ("application/json", "get", Ok(Shape::Full)),
            ("*/*", "watch", Ok(Shape::Full)),
            (kubectl, "list", Ok(Shape::Table(IncludeObject::Metadata))),
            (client_go_meta, "list", Ok(Shape::Metadata)),
            // A list's metadata is not served to a single object's read: the fallback is.
            (client_go_meta, "get", Ok(Shape::Full)),
            (kube_rs_watch, "watch", Ok(Shape::Metadata)),
            (kube_rs_watch, "get", Ok(Shape::Metadata)),
        ] {
            assert_eq!(Shape::parse(accept, verb, None), want, "{verb} {accept}");
        }
        assert!(Shape::parse(kube_rs_watch, "list", None).is_err());
        assert!(Shape::parse("application/json;as=Unknown;g=x;v=v1", "get", None).is_err());
    }
}
