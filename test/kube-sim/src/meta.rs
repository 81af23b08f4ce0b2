//! Object metadata helpers: timestamps, names, selectors.

use std::collections::BTreeMap;

use rand::Rng;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};

/// Now, as Kubernetes writes timestamps (RFC 3339, seconds, UTC).
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A time `secs` seconds from now, as a Kubernetes timestamp.
pub fn seconds_from_now(secs: i64) -> String {
    let t = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(secs))
        .unwrap_or(jiff::Timestamp::MAX);
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Parses a Kubernetes timestamp.
pub fn parse_time(s: &str) -> Option<jiff::Timestamp> {
    s.parse().ok()
}

/// A fresh UID.
pub fn uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// `generateName` plus five random characters, as the server does.
pub fn generate_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    let max = 63 - 5;
    let prefix = if prefix.len() > max {
        &prefix[..max]
    } else {
        prefix
    };
    format!("{prefix}{suffix}")
}

/// How an object's name is validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// DNS-1123 subdomain (most kinds).
    Subdomain,
    /// DNS-1123 label (namespaces).
    Label,
    /// Any path segment (RBAC objects, whose names contain colons).
    PathSegment,
}

/// Checks a name; returns the message the real server gives.
pub fn validate_name(name: &str, rule: NameRule) -> Result<(), String> {
    match rule {
        NameRule::PathSegment => {
            if name == "." || name == ".." {
                return Err(format!("may not be '{name}'"));
            }
            if name.contains('/') || name.contains('%') {
                return Err("may not contain '/' or '%'".into());
            }
            Ok(())
        }
        NameRule::Label => {
            if name.len() > 63 || !is_dns_label(name) {
                Err(format!(
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?') (got {name:?})"
                ))
            } else {
                Ok(())
            }
        }
        NameRule::Subdomain => {
            // The regex alone, as apimachinery's `IsDNS1123Subdomain`: no part between dots
            // is held to a label's 63 characters, only the whole name to 253.
            if name.len() > 253 || name.is_empty() || !name.split('.').all(is_dns_label_text) {
                Err(format!(
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*') (got {name:?})"
                ))
            } else {
                Ok(())
            }
        }
    }
}

/// A DNS-1123 label: at most 63 characters of [`is_dns_label_text`].
fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && is_dns_label_text(s)
}

/// What a DNS-1123 label's regex accepts (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`), at any length.
fn is_dns_label_text(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Reads `metadata.<field>` as a string.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// The object's labels.
pub fn labels(obj: &Value) -> BTreeMap<String, String> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requirement {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector: every requirement must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(pub Vec<Requirement>);

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (x,y),f notin (z),g,!h`.
    pub fn parse(text: &str) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        for part in split_top_level(text) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            reqs.push(parse_requirement(part).ok_or_else(|| {
                ApiError::bad_request(format!("unable to parse requirement: {part:?}"))
            })?);
        }
        Ok(Self(reqs))
    }

    /// Whether the labels satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Eq(k, v) => labels.get(k) == Some(v),
            Requirement::NotEq(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
        })
    }

    /// True when there is no requirement.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A `metav1.LabelSelector` object (`matchLabels`, `matchExpressions` with `In`, `NotIn`,
    /// `Exists`, `DoesNotExist`); `None` for an operator it does not know.
    pub fn from_object(selector: &Value) -> Option<Self> {
        let mut reqs: Vec<Requirement> = selector
            .get("matchLabels")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some(Requirement::Eq(k.clone(), v.as_str()?.to_owned())))
            .collect();
        for e in selector
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = e.get("key").and_then(Value::as_str)?.to_owned();
            let values: Vec<String> = e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect();
            reqs.push(match e.get("operator").and_then(Value::as_str)? {
                "In" => Requirement::In(key, values),
                "NotIn" => Requirement::NotIn(key, values),
                "Exists" => Requirement::Exists(key),
                "DoesNotExist" => Requirement::NotExists(key),
                _ => return None,
            });
        }
        Some(Self(reqs))
    }
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn parse_set(rest: &str) -> Option<Vec<String>> {
    let rest = rest.trim();
    let inner = rest.strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

fn parse_requirement(part: &str) -> Option<Requirement> {
    if let Some(k) = part.strip_prefix('!') {
        let k = k.trim();
        return valid_key(k).then(|| Requirement::NotExists(k.to_owned()));
    }
    if let Some((k, v)) = part.split_once("!=") {
        return valid_key(k.trim()).then(|| Requirement::NotEq(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = part.split_once("==") {
        return valid_key(k.trim()).then(|| Requirement::Eq(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = part.split_once('=') {
        return valid_key(k.trim()).then(|| Requirement::Eq(k.trim().into(), v.trim().into()));
    }
    let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
    if words.len() == 2 {
        let (k, rest) = (words[0], words[1].trim_start());
        if let Some(r) = rest.strip_prefix("notin") {
            return Some(Requirement::NotIn(k.into(), parse_set(r)?));
        }
        if let Some(r) = rest.strip_prefix("in") {
            return Some(Requirement::In(k.into(), parse_set(r)?));
        }
        return None;
    }
    valid_key(part).then(|| Requirement::Exists(part.to_owned()))
}

/// A parsed field selector: `path=value`, `path==value`, `path!=value`, comma-separated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(pub Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses and checks each field against the supported ones.
    pub fn parse(text: &str, supported: &dyn Fn(&str) -> bool) -> ApiResult<Self> {
        let mut terms = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, eq, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{part}'; can't understand '{part}'"
                )));
            };
            let field = field.trim();
            if !supported(field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            terms.push((field.to_owned(), eq, value.trim().to_owned()));
        }
        Ok(Self(terms))
    }

    /// Whether the object satisfies every term.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0
            .iter()
            .all(|(field, eq, value)| (field_value(obj, field) == *value) == *eq)
    }

    /// The value a `metadata.name=` term pins, if any (lets watches filter cheaply).
    pub fn name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(f, eq, _)| f == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }
}

/// Reads a dotted field path as a string (absent as empty, like the real field sets).
fn field_value(obj: &Value, path: &str) -> String {
    let mut cur = obj;
    for part in path.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn label_selector_operators() {
        let s = LabelSelector::parse(
            "app=web,tier!=db,env in (prod, staging),zone notin (a),team,!legacy",
        )
        .unwrap();
        assert_eq!(s.0.len(), 6);
        assert!(s.matches(&l(&[
            ("app", "web"),
            ("env", "prod"),
            ("zone", "b"),
            ("team", "x")
        ])));
        assert!(!s.matches(&l(&[("app", "web"), ("env", "dev"), ("team", "x")])));
        assert!(!s.matches(&l(&[
            ("app", "web"),
            ("env", "prod"),
            ("team", "x"),
            ("legacy", "1")
        ])));
        assert!(
            LabelSelector::parse("a==b")
                .unwrap()
                .matches(&l(&[("a", "b")]))
        );
        assert!(LabelSelector::parse("a in (x").is_err());
        assert!(LabelSelector::parse("").unwrap().is_empty());
    }

    #[test]
    fn field_selector_terms() {
        let obj =
            serde_json::json!({"metadata": {"name": "x", "namespace": "ns"}, "type": "Opaque"});
        let ok = |f: &str| f.starts_with("metadata.") || f == "type";
        assert!(
            FieldSelector::parse("metadata.name=x,type==Opaque", &ok)
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=x", &ok)
                .unwrap()
                .matches(&obj)
        );
        assert!(
            FieldSelector::parse("metadata.namespace!=other", &ok)
                .unwrap()
                .matches(&obj)
        );
        assert_eq!(FieldSelector::parse("spec.x=1", &ok).unwrap_err().code, 400);
    }

    #[test]
    fn names() {
        assert!(validate_name("a.b-c", NameRule::Subdomain).is_ok());
        assert!(validate_name("A", NameRule::Subdomain).is_err());
        assert!(validate_name("a.b", NameRule::Label).is_err());
        assert!(validate_name("system:x:y", NameRule::PathSegment).is_ok());
        assert!(validate_name("a/b", NameRule::PathSegment).is_err());
        // A subdomain is held to 253 characters, not its parts to 63 (apimachinery's
        // IsDNS1123Subdomain): a 63-character cluster's `<cluster>-klusterlet` work is valid.
        let long = format!("{}-klusterlet", "c".repeat(63));
        assert!(validate_name(&long, NameRule::Subdomain).is_ok());
        assert!(validate_name(&long, NameRule::Label).is_err());
        assert!(validate_name(&"c".repeat(254), NameRule::Subdomain).is_err());
        assert!(validate_name("a..b", NameRule::Subdomain).is_err());
        let g = generate_name("web-");
        assert!(g.starts_with("web-") && g.len() == 9);
    }
}
