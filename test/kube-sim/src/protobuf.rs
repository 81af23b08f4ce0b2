//! Decoding of Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`) for
//! the built-in kinds kubectl's typed commands send (`create configmap|secret|namespace|
//! serviceaccount|role|rolebinding|...`, `auth can-i`). Responses are always JSON, which
//! every client accepts.

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult};

#[derive(Clone, Copy)]
enum F {
    Str,
    Bool,
    Int,
    Time,
    MicroTime,
    MapStr,
    MapBytes,
    RepStr,
    Msg(&'static [Field]),
    RepMsg(&'static [Field]),
}

type Field = (u32, &'static str, F);

const OWNER_REF: &[Field] = &[
    (1, "kind", F::Str),
    (3, "name", F::Str),
    (4, "uid", F::Str),
    (5, "apiVersion", F::Str),
    (6, "controller", F::Bool),
    (7, "blockOwnerDeletion", F::Bool),
];
const OBJECT_META: &[Field] = &[
    (1, "name", F::Str),
    (2, "generateName", F::Str),
    (3, "namespace", F::Str),
    (5, "uid", F::Str),
    (6, "resourceVersion", F::Str),
    (7, "generation", F::Int),
    (8, "creationTimestamp", F::Time),
    (9, "deletionTimestamp", F::Time),
    (10, "deletionGracePeriodSeconds", F::Int),
    (11, "labels", F::MapStr),
    (12, "annotations", F::MapStr),
    (13, "ownerReferences", F::RepMsg(OWNER_REF)),
    (14, "finalizers", F::RepStr),
];
const OBJECT_REF: &[Field] = &[
    (1, "kind", F::Str),
    (2, "namespace", F::Str),
    (3, "name", F::Str),
    (4, "uid", F::Str),
    (5, "apiVersion", F::Str),
    (6, "resourceVersion", F::Str),
    (7, "fieldPath", F::Str),
];
const LOCAL_REF: &[Field] = &[(1, "name", F::Str)];
const CONFIG_MAP: &[Field] = &[
    (1, "metadata", F::Msg(OBJECT_META)),
    (2, "data", F::MapStr),
    (3, "binaryData", F::MapBytes),
    (4, "immutable", F::Bool),
];
const SECRET: &[Field] = &[
    (1, "metadata", F::Msg(OBJECT_META)),
    (2, "data", F::MapBytes),
    (3, "type", F::Str),
    (4, "stringData", F::MapStr),
    (5, "immutable", F::Bool),
];
const NAMESPACE_SPEC: &[Field] = &[(1, "finalizers", F::RepStr)];
const NAMESPACE: &[Field] = &[
    (1, "metadata", F::Msg(OBJECT_META)),
    (2, "spec", F::Msg(NAMESPACE_SPEC)),
];
const SERVICE_ACCOUNT: &[Field] = &[
    (1, "metadata", F::Msg(OBJECT_META)),
    (2, "secrets", F::RepMsg(OBJECT_REF)),
    (3, "imagePullSecrets", F::RepMsg(LOCAL_REF)),
    (4, "automountServiceAccountToken", F::Bool),
];
const SUBJECT: &[Field] = &[
    (1, "kind", F::Str),
    (2, "apiGroup", F::Str),
    (3, "name", F::Str),
    (4, "namespace", F::Str),
];
const ROLE_REF: &[Field] = &[
    (1, "apiGroup", F::Str),
    (2, "kind", F::Str),
    (3, "name", F::Str),
];
const BINDING: &[Field] = &[
    (1, "metadata", F::Msg(OBJECT_META)),
    (2, "subjects", F::RepMsg(SUBJECT)),
    (3, "roleRef", F::Msg(ROLE_REF)),
];
const POLICY_RULE: &[Field] = &[
    (1, "verbs", F::RepStr),
    (2, "apiGroups", F::RepStr),
    (3, "resources", F::RepStr),
    (4, "resourceNames", F::RepStr),
    (5, "nonResourceURLs", F::RepStr),
];
const ROLE: &[Field] = &[
    (1, "metadata", F::Msg(OBJECT_META)),
    (2, "rules", F::RepMsg(POLICY_RULE)),
];
const RESOURCE_ATTRS: &[Field] = &[
    (1, "namespace", F::Str),
    (2, "verb", F::Str),
    (3, "group", F::Str),
    (4, "version", F::Str),
    (5, "resource", F::Str),
    (6, "subresource", F::Str),
    (7, "name", F::Str),
];
const NON_RESOURCE_ATTRS: &[Field] = &[(1, "path", F::Str), (2, "verb", F::Str)];
const SSAR_SPEC: &[Field] = &[
    (1, "resourceAttributes", F::Msg(RESOURCE_ATTRS)),
    (2, "nonResourceAttributes", F::Msg(NON_RESOURCE_ATTRS)),
];
const SSAR: &[Field] = &[
    (1, "metadata", F::Msg(OBJECT_META)),
    (2, "spec", F::Msg(SSAR_SPEC)),
];
const SAR_SPEC: &[Field] = &[
    (1, "resourceAttributes", F::Msg(RESOURCE_ATTRS)),
    (2, "nonResourceAttributes", F::Msg(NON_RESOURCE_ATTRS)),
    (3, "user", F::Str),
    (4, "groups", F::RepStr),
    (6, "uid", F::Str),
];
const SAR: &[Field] = &[
    (1, "metadata", F::Msg(OBJECT_META)),
    (2, "spec", F::Msg(SAR_SPEC)),
];
const LEASE_SPEC: &[Field] = &[
    (1, "holderIdentity", F::Str),
    (2, "leaseDurationSeconds", F::Int),
    (3, "acquireTime", F::MicroTime),
    (4, "renewTime", F::MicroTime),
    (5, "leaseTransitions", F::Int),
];
const LEASE: &[Field] = &[
    (1, "metadata", F::Msg(OBJECT_META)),
    (2, "spec", F::Msg(LEASE_SPEC)),
];
const BOUND_REF: &[Field] = &[
    (1, "kind", F::Str),
    (2, "apiVersion", F::Str),
    (3, "name", F::Str),
    (4, "uid", F::Str),
];
const TOKEN_REQUEST_SPEC: &[Field] = &[
    (1, "audiences", F::RepStr),
    (3, "boundObjectRef", F::Msg(BOUND_REF)),
    (4, "expirationSeconds", F::Int),
];
const TOKEN_REQUEST: &[Field] = &[
    (1, "metadata", F::Msg(OBJECT_META)),
    (2, "spec", F::Msg(TOKEN_REQUEST_SPEC)),
];
const DELETE_PRECONDITIONS: &[Field] = &[(1, "uid", F::Str), (2, "resourceVersion", F::Str)];
const DELETE_OPTIONS: &[Field] = &[
    (1, "gracePeriodSeconds", F::Int),
    (2, "preconditions", F::Msg(DELETE_PRECONDITIONS)),
    (4, "propagationPolicy", F::Str),
    (5, "dryRun", F::RepStr),
];

fn schema_for(kind: &str) -> Option<&'static [Field]> {
    Some(match kind {
        "ConfigMap" => CONFIG_MAP,
        "Secret" => SECRET,
        "Namespace" => NAMESPACE,
        "ServiceAccount" => SERVICE_ACCOUNT,
        "RoleBinding" | "ClusterRoleBinding" => BINDING,
        "Role" | "ClusterRole" => ROLE,
        "SelfSubjectAccessReview" => SSAR,
        "SubjectAccessReview" => SAR,
        "Lease" => LEASE,
        "TokenRequest" => TOKEN_REQUEST,
        "DeleteOptions" => DELETE_OPTIONS,
        _ => return None,
    })
}

/// Whether a content type is Kubernetes protobuf.
pub fn is_protobuf(content_type: &str) -> bool {
    content_type.starts_with("application/vnd.kubernetes.protobuf")
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Option<u64> {
        let mut out = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos)?;
            self.pos += 1;
            out |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(out);
            }
        }
        None
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.varint()?).ok()?;
        let end = self.pos.checked_add(len)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    /// (field number, wire type, value) of the next field.
    fn field(&mut self) -> Option<(u32, Wire<'a>)> {
        let key = self.varint()?;
        let number = u32::try_from(key >> 3).ok()?;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                let s = self.buf.get(self.pos..self.pos + 8)?;
                self.pos += 8;
                Wire::Fixed(s)
            }
            2 => Wire::Len(self.bytes()?),
            5 => {
                let s = self.buf.get(self.pos..self.pos + 4)?;
                self.pos += 4;
                Wire::Fixed(s)
            }
            _ => return None,
        };
        Some((number, wire))
    }

    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }
}

enum Wire<'a> {
    Varint(u64),
    Fixed(#[allow(dead_code)] &'a [u8]),
    Len(&'a [u8]),
}

fn time_of(buf: &[u8], micro: bool) -> Option<Value> {
    let mut r = Reader { buf, pos: 0 };
    let (mut secs, mut nanos) = (0i64, 0i64);
    while !r.done() {
        match r.field()? {
            (1, Wire::Varint(v)) => secs = v as i64,
            (2, Wire::Varint(v)) => nanos = v as i64,
            _ => {}
        }
    }
    let t = jiff::Timestamp::new(secs, nanos as i32).ok()?;
    let text = if micro {
        t.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
    } else {
        t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    };
    Some(json!(text))
}

fn map_entry(buf: &[u8], bytes_value: bool) -> Option<(String, Value)> {
    let mut r = Reader { buf, pos: 0 };
    let (mut k, mut v) = (String::new(), Value::String(String::new()));
    while !r.done() {
        if let (n, Wire::Len(b)) = r.field()? {
            match n {
                1 => k = String::from_utf8_lossy(b).into_owned(),
                2 if bytes_value => v = json!(base64::engine::general_purpose::STANDARD.encode(b)),
                2 => v = json!(String::from_utf8_lossy(b)),
                _ => {}
            }
        }
    }
    Some((k, v))
}

fn message(buf: &[u8], schema: &[Field]) -> Option<Value> {
    let mut r = Reader { buf, pos: 0 };
    let mut out = Map::new();
    while !r.done() {
        let (number, wire) = r.field()?;
        let Some((_, name, kind)) = schema.iter().find(|(n, _, _)| *n == number) else {
            continue;
        };
        let name = (*name).to_owned();
        match (kind, wire) {
            // Kubernetes' protobuf carries empty strings that JSON would omit.
            (F::Str, Wire::Len([])) => {}
            (F::Str, Wire::Len(b)) => {
                out.insert(name, json!(String::from_utf8_lossy(b)));
            }
            (F::Bool, Wire::Varint(v)) => {
                out.insert(name, json!(v != 0));
            }
            (F::Int, Wire::Varint(v)) => {
                out.insert(name, json!(v as i64));
            }
            (F::Time, Wire::Len(b)) => {
                out.insert(name, time_of(b, false)?);
            }
            (F::MicroTime, Wire::Len(b)) => {
                out.insert(name, time_of(b, true)?);
            }
            (F::MapStr | F::MapBytes, Wire::Len(b)) => {
                let (k, v) = map_entry(b, matches!(kind, F::MapBytes))?;
                let m = out.entry(name).or_insert_with(|| json!({}));
                if let Some(m) = m.as_object_mut() {
                    m.insert(k, v);
                }
            }
            (F::RepStr, Wire::Len(b)) => {
                let list = out.entry(name).or_insert_with(|| json!([]));
                if let Some(a) = list.as_array_mut() {
                    a.push(json!(String::from_utf8_lossy(b)));
                }
            }
            (F::Msg(s), Wire::Len(b)) => {
                out.insert(name, message(b, s)?);
            }
            (F::RepMsg(s), Wire::Len(b)) => {
                let item = message(b, s)?;
                let list = out.entry(name).or_insert_with(|| json!([]));
                if let Some(a) = list.as_array_mut() {
                    a.push(item);
                }
            }
            _ => return None,
        }
    }
    Some(Value::Object(out))
}

/// Decodes a `k8s\0`-prefixed protobuf body into the JSON object it encodes.
pub fn decode(body: &[u8]) -> ApiResult<Value> {
    let bad = |m: &str| ApiError::bad_request(format!("unable to decode protobuf body: {m}"));
    let payload = body
        .strip_prefix(b"k8s\0")
        .ok_or_else(|| bad("missing the k8s magic prefix"))?;
    let mut r = Reader {
        buf: payload,
        pos: 0,
    };
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    while !r.done() {
        match r.field().ok_or_else(|| bad("malformed envelope"))? {
            (1, Wire::Len(tm)) => {
                let mut t = Reader { buf: tm, pos: 0 };
                while !t.done() {
                    match t.field().ok_or_else(|| bad("malformed type meta"))? {
                        (1, Wire::Len(b)) => api_version = String::from_utf8_lossy(b).into_owned(),
                        (2, Wire::Len(b)) => kind = String::from_utf8_lossy(b).into_owned(),
                        _ => {}
                    }
                }
            }
            (2, Wire::Len(b)) => raw = b,
            _ => {}
        }
    }
    let schema = schema_for(&kind).ok_or_else(|| {
        ApiError::unsupported_media_type(format!(
            "protobuf bodies of kind {kind:?} are not supported by this server; send JSON"
        ))
    })?;
    let mut obj = message(raw, schema).ok_or_else(|| bad("malformed object"))?;
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(n: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![((n << 3) | 2) as u8, payload.len() as u8];
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn decodes_a_configmap() {
        let meta = [
            field(1, b"c1"),
            field(3, b"default"),
            field(11, &[field(1, b"app"), field(2, b"web")].concat()),
        ]
        .concat();
        let cm = [
            field(1, &meta),
            field(2, &[field(1, b"a"), field(2, b"b")].concat()),
        ]
        .concat();
        let type_meta = [field(1, b"v1"), field(2, b"ConfigMap")].concat();
        let envelope = [b"k8s\0".to_vec(), field(1, &type_meta), field(2, &cm)].concat();
        let v = decode(&envelope).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c1", "namespace": "default", "labels": {"app": "web"}}, "data": {"a": "b"}})
        );
    }

    #[test]
    fn unknown_kind_is_415() {
        let type_meta = [field(1, b"apps/v1"), field(2, b"Deployment")].concat();
        let envelope = [b"k8s\0".to_vec(), field(1, &type_meta)].concat();
        assert_eq!(decode(&envelope).unwrap_err().code, 415);
        assert_eq!(decode(b"{}").unwrap_err().code, 400);
    }
}
