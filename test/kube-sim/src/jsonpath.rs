//! The JSONPath subset printer columns and ManifestWork status feedback use: `.a.b`, `.a[0]`,
//! `.a[*].b`, `.a[?(@.type=="X")].status`, and `\.` for a dot inside a field name
//! (`.metadata.annotations.example\.com/key`).
//!
//! [`find`] is lenient (printer columns show what they find); [`evaluate`] follows client-go's
//! `util/jsonpath` with `AllowMissingKeys(true)`, as the work agent's status feedback reader
//! (`pkg/work/spoke/statusfeedback/reader.go` in open-cluster-management-io/ocm) runs it: a
//! missing key selects nothing, but an index past the end of a list, or an index into
//! something that is not a list, is an error.

use serde_json::Value;

/// Every value the path selects, in document order; nothing for what does not fit.
pub fn find<'a>(obj: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut current = vec![obj];
    for step in split_steps(strip_braces(path)) {
        let mut next = Vec::new();
        for v in current {
            let _ = apply_step(v, &step, &mut next);
        }
        current = next;
    }
    current
}

/// Why a path could not be evaluated (client-go's wording).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("array index out of bounds: index {index}, length {length}")]
    OutOfBounds { index: usize, length: usize },
    #[error("{0} is not array or slice")]
    NotArray(&'static str),
}

/// The values the path selects, as client-go's jsonpath with missing keys allowed finds them.
pub fn evaluate<'a>(obj: &'a Value, path: &str) -> Result<Vec<&'a Value>, PathError> {
    let mut current = vec![obj];
    for step in split_steps(strip_braces(path)) {
        let mut next = Vec::new();
        for v in current {
            apply_step(v, &step, &mut next)?;
        }
        current = next;
    }
    Ok(current)
}

fn strip_braces(path: &str) -> &str {
    path.trim().trim_start_matches('{').trim_end_matches('}')
}

#[derive(Debug, PartialEq)]
enum Step {
    Field(String),
    Index(usize),
    All,
    Filter {
        field: String,
        eq: bool,
        value: String,
    },
}

/// A field name up to the next unescaped `.` or `[`; `\.` stands for a dot in the name.
fn field_name(chars: &[char], i: &mut usize) -> String {
    let mut name = String::new();
    while *i < chars.len() && chars[*i] != '.' && chars[*i] != '[' {
        if chars[*i] == '\\' && chars.get(*i + 1) == Some(&'.') {
            name.push('.');
            *i += 2;
        } else {
            name.push(chars[*i]);
            *i += 1;
        }
    }
    name
}

fn split_steps(path: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let chars: Vec<char> = path.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                let name = field_name(&chars, &mut i);
                if !name.is_empty() {
                    steps.push(Step::Field(name));
                }
            }
            '[' => {
                let start = i + 1;
                let mut depth = 0;
                while i < chars.len() {
                    match chars[i] {
                        '[' => depth += 1,
                        ']' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                let inner: String = chars[start..i.min(chars.len())].iter().collect();
                i += 1;
                steps.push(parse_bracket(inner.trim()));
            }
            _ => steps.push(Step::Field(field_name(&chars, &mut i))),
        }
    }
    steps
}

fn parse_bracket(inner: &str) -> Step {
    if inner == "*" {
        return Step::All;
    }
    if let Ok(n) = inner.parse() {
        return Step::Index(n);
    }
    if let Some(expr) = inner.strip_prefix("?(").and_then(|e| e.strip_suffix(')')) {
        let (lhs, eq, rhs) = if let Some((l, r)) = expr.split_once("!=") {
            (l, false, r)
        } else if let Some((l, r)) = expr.split_once("==") {
            (l, true, r)
        } else {
            (expr, true, "")
        };
        let field = lhs
            .trim()
            .trim_start_matches('@')
            .trim_start_matches('.')
            .to_owned();
        let value = rhs.trim().trim_matches('"').trim_matches('\'').to_owned();
        return Step::Filter { field, eq, value };
    }
    Step::Field(inner.trim_matches('\'').trim_matches('"').to_owned())
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "map[string]interface {}",
    }
}

fn apply_step<'a>(v: &'a Value, step: &Step, out: &mut Vec<&'a Value>) -> Result<(), PathError> {
    match step {
        Step::Field(name) => {
            if let Some(x) = v.get(name.as_str()) {
                out.push(x);
            }
        }
        Step::Index(n) => match v {
            Value::Null => {}
            Value::Array(a) => match a.get(*n) {
                Some(x) => out.push(x),
                None => {
                    return Err(PathError::OutOfBounds {
                        index: *n,
                        length: a.len(),
                    });
                }
            },
            other => return Err(PathError::NotArray(kind(other))),
        },
        Step::All => match v {
            Value::Array(a) => out.extend(a.iter()),
            Value::Object(m) => out.extend(m.values()),
            _ => {}
        },
        Step::Filter { field, eq, value } => {
            if let Value::Array(a) = v {
                for item in a {
                    let mut cur = Some(item);
                    for part in field.split('.').filter(|p| !p.is_empty()) {
                        cur = cur.and_then(|c| c.get(part));
                    }
                    let matched = cur.map(scalar_text).is_some_and(|t| t == *value);
                    if matched == *eq {
                        out.push(item);
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn printer_column_paths() {
        let obj = json!({"spec": {"hubAcceptsClient": true, "cc": [{"url": "a"}, {"url": "b"}]},
            "status": {"conditions": [{"type": "Joined", "status": "True"}, {"type": "Available", "status": "False"}]}});
        assert_eq!(find(&obj, ".spec.hubAcceptsClient"), vec![&json!(true)]);
        assert_eq!(
            find(&obj, ".spec.cc[*].url"),
            vec![&json!("a"), &json!("b")]
        );
        assert_eq!(find(&obj, ".spec.cc[1].url"), vec![&json!("b")]);
        assert_eq!(
            find(&obj, ".status.conditions[?(@.type==\"Available\")].status"),
            vec![&json!("False")]
        );
        assert!(find(&obj, ".status.missing").is_empty());
    }

    #[test]
    fn escaped_dots_name_one_field() {
        let obj = json!({"metadata": {"annotations": {"example.com/key": "v", "example": {"com/key": "no"}}}});
        assert_eq!(
            find(&obj, ".metadata.annotations.example\\.com/key"),
            vec![&json!("v")]
        );
    }

    #[test]
    fn evaluate_allows_missing_keys_but_not_indexes_past_the_end() {
        let obj = json!({"spec": {"gates": [{"feature": "A"}], "name": "x"}});
        assert_eq!(
            evaluate(&obj, ".spec.gates[0].feature"),
            Ok(vec![&json!("A")])
        );
        assert_eq!(evaluate(&obj, ".spec.missing.deeper"), Ok(vec![]));
        assert_eq!(evaluate(&obj, ".spec.missing[3]"), Ok(vec![]));
        assert_eq!(
            evaluate(&obj, ".spec.gates[1].feature"),
            Err(PathError::OutOfBounds {
                index: 1,
                length: 1
            })
        );
        assert_eq!(
            evaluate(&obj, ".spec.name[0]"),
            Err(PathError::NotArray("string"))
        );
        assert!(find(&obj, ".spec.gates[1].feature").is_empty());
    }
}
