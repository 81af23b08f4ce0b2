//! Label syntax as the API server checks it: keys, values and selectors a user writes are
//! refused here with the same rules, before anything acts on them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// The longest label value, and the longest name part of a key.
const MAX_NAME: usize = 63;
/// The longest prefix of a key (a DNS-1123 subdomain).
const MAX_PREFIX: usize = 253;

/// Whether `text` is a qualified name's name part (apimachinery `IsQualifiedName`): at most 63
/// characters, alphanumeric at both ends, `-`, `_` and `.` between.
fn is_name_part(text: &str) -> bool {
    let b = text.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.');
    !b.is_empty()
        && b.len() <= MAX_NAME
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(inner)
}

/// Whether `key` is a label key (apimachinery `IsQualifiedName`): a name part, optionally
/// behind a DNS-1123 subdomain prefix and `/`.
pub fn is_label_key(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => {
            prefix.len() <= MAX_PREFIX
                && crate::migration::is_dns_subdomain(prefix)
                && is_name_part(name)
        }
        None => is_name_part(key),
    }
}

/// Whether `value` is a label value (apimachinery `IsValidLabelValue`): empty, or a name part.
pub fn is_label_value(value: &str) -> bool {
    value.is_empty() || is_name_part(value)
}

/// A label selector's own rules (apimachinery `ValidateLabelSelector` and
/// `LabelSelectorAsSelector`): valid keys and values, known operators, values with In and
/// NotIn only.
pub fn check_label_selector(selector: &LabelSelector) -> Result<(), String> {
    for (key, value) in selector.match_labels.iter().flatten() {
        check_key(key)?;
        check_value(key, value)?;
    }
    for e in selector.match_expressions.as_deref().unwrap_or(&[]) {
        check_key(&e.key)?;
        let values = e.values.as_deref().unwrap_or(&[]);
        match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(format!("{} {} needs at least one value", e.key, e.operator));
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(format!("{} {} takes no values", e.key, e.operator));
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => {
                return Err(format!(
                    "unknown operator {other:?} (In, NotIn, Exists or DoesNotExist)"
                ));
            }
        }
        for value in values {
            check_value(&e.key, value)?;
        }
    }
    Ok(())
}

fn check_key(key: &str) -> Result<(), String> {
    if is_label_key(key) {
        return Ok(());
    }
    Err(format!(
        "{key:?} is not a label key (an optional DNS subdomain prefix and '/', then up to 63 alphanumerics, '-', '_' or '.', alphanumeric at both ends)"
    ))
}

fn check_value(key: &str, value: &str) -> Result<(), String> {
    if is_label_value(value) {
        return Ok(());
    }
    Err(format!(
        "{value:?} (for {key}) is not a label value (up to 63 alphanumerics, '-', '_' or '.', alphanumeric at both ends)"
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    #[test]
    fn keys_and_values_follow_apimachinery() {
        // (text, a valid key, a valid value)
        let table = [
            ("app", true, true),
            ("", false, true),
            ("a", true, true),
            ("example.com/tier", true, false),
            ("Example.com/tier", false, false),
            ("example.com/", false, false),
            ("/tier", false, false),
            ("a/b/c", false, false),
            ("-app", false, false),
            ("app-", false, false),
            ("my_app.v1", true, true),
            ("has space", false, false),
            ("ünicode", false, false),
        ];
        for (text, key, value) in table {
            assert_eq!(is_label_key(text), key, "key {text:?}");
            assert_eq!(is_label_value(text), value, "value {text:?}");
        }
        let long = "a".repeat(63);
        assert!(is_label_key(&long) && is_label_value(&long));
        let longer = "a".repeat(64);
        assert!(!is_label_key(&longer) && !is_label_value(&longer));
        let prefix = |last: usize| format!("{0}.{0}.{0}.{1}", "a".repeat(63), "a".repeat(last));
        assert_eq!(prefix(61).len(), 253);
        assert!(is_label_key(&format!("{}/x", prefix(61))));
        assert!(!is_label_key(&format!("{}/x", prefix(62))));
    }

    fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelector {
        LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.into(),
                operator: operator.into(),
                values: (!values.is_empty())
                    .then(|| values.iter().map(|v| (*v).to_owned()).collect()),
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn a_selector_is_refused_as_the_api_server_refuses_it() {
        let labels = |k: &str, v: &str| LabelSelector {
            match_labels: Some(BTreeMap::from([(k.to_owned(), v.to_owned())])),
            ..Default::default()
        };
        // (selector, accepted)
        let table = [
            (labels("env", "prod"), true),
            (labels("env", ""), true),
            (labels("", "prod"), false),
            (labels("env", "not a value"), false),
            (labels("bad key", "x"), false),
            (expression("env", "In", &["a", "b"]), true),
            (expression("", "Exists", &[]), false),
            (expression("env", "In", &[]), false),
            (expression("env", "Exists", &["a"]), false),
            (expression("env", "In", &["ok", "-bad"]), false),
            (expression("env", "Gt", &["1"]), false),
        ];
        for (i, (selector, accepted)) in table.into_iter().enumerate() {
            assert_eq!(
                check_label_selector(&selector).is_ok(),
                accepted,
                "row {i}: {selector:?}"
            );
        }
    }
}
