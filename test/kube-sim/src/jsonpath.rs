//! The JSONPath subset printer columns use: `.a.b`, `.a[0]`, `.a[*].b`,
//! `.a[?(@.type=="X")].status`.

use serde_json::Value;

/// Every value the path selects, in document order.
pub fn find<'a>(obj: &'a Value, path: &str) -> Vec<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut current = vec![obj];
    for step in split_steps(path) {
        let mut next = Vec::new();
        for v in current {
            apply_step(v, &step, &mut next);
        }
        current = next;
    }
    current
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

fn split_steps(path: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let chars: Vec<char> = path.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                let start = i;
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
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
            _ => {
                let start = i;
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    i += 1;
                }
                steps.push(Step::Field(chars[start..i].iter().collect()));
            }
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

fn apply_step<'a>(v: &'a Value, step: &Step, out: &mut Vec<&'a Value>) {
    match step {
        Step::Field(name) => {
            if let Some(x) = v.get(name.as_str()) {
                out.push(x);
            }
        }
        Step::Index(n) => {
            if let Some(x) = v.get(*n) {
                out.push(x);
            }
        }
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
}
