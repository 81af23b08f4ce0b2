//! Authentication (bearer tokens, ServiceAccount tokens, client certificates) and RBAC
//! authorization evaluated over the stored Roles, ClusterRoles and bindings.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::store::{Store, Subject};

/// Who is asking.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
    pub uid: String,
}

impl UserInfo {
    /// A user with `system:authenticated` added to its groups, as the server does.
    pub fn authenticated(name: impl Into<String>, mut groups: Vec<String>) -> Self {
        if !groups.iter().any(|g| g == "system:authenticated") {
            groups.push("system:authenticated".into());
        }
        Self {
            name: name.into(),
            groups,
            uid: String::new(),
        }
    }

    /// The anonymous user.
    pub fn anonymous() -> Self {
        Self {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            uid: String::new(),
        }
    }

    /// The server itself (controllers inside kube-sim).
    pub fn system() -> Self {
        Self::authenticated("system:kube-sim", vec!["system:masters".into()])
    }

    /// The user a ServiceAccount authenticates as.
    pub fn service_account(namespace: &str, name: &str, uid: &str) -> Self {
        let mut u = Self::authenticated(
            format!("system:serviceaccount:{namespace}:{name}"),
            vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
            ],
        );
        u.uid = uid.to_owned();
        u
    }
}

/// A token the server minted for a ServiceAccount.
#[derive(Clone, Debug)]
pub struct IssuedToken {
    pub namespace: String,
    pub service_account: String,
    pub service_account_uid: String,
    /// Unix seconds; `None` for secret-bound legacy tokens.
    pub expires: Option<i64>,
    /// A Secret the token is bound to: (namespace, name, uid).
    pub bound_secret: Option<(String, String, String)>,
}

/// Static and issued tokens.
#[derive(Debug, Default)]
pub struct Tokens {
    pub static_tokens: HashMap<String, UserInfo>,
    pub issued: HashMap<String, IssuedToken>,
}

/// Outcome of authentication.
#[derive(Debug, PartialEq, Eq)]
pub enum Authn {
    User(UserInfo),
    /// Credentials were presented and are invalid.
    Invalid,
}

/// Resolves a bearer token.
pub fn authenticate_token(tokens: &Tokens, store: &Store, token: &str, now_secs: i64) -> Authn {
    if let Some(u) = tokens.static_tokens.get(token) {
        return Authn::User(u.clone());
    }
    let Some(t) = tokens.issued.get(token) else {
        return Authn::Invalid;
    };
    if t.expires.is_some_and(|e| e <= now_secs) {
        return Authn::Invalid;
    }
    let sa = store.get("serviceaccounts", &t.namespace, &t.service_account);
    let sa_uid = sa.as_ref().and_then(|o| crate::meta::meta_str(o, "uid"));
    if sa_uid != Some(t.service_account_uid.as_str()) {
        return Authn::Invalid;
    }
    if let Some((ns, name, uid)) = &t.bound_secret {
        let secret = store.get("secrets", ns, name);
        if secret
            .as_ref()
            .and_then(|s| crate::meta::meta_str(s, "uid"))
            != Some(uid.as_str())
        {
            return Authn::Invalid;
        }
    }
    Authn::User(UserInfo::service_account(
        &t.namespace,
        &t.service_account,
        &t.service_account_uid,
    ))
}

/// What a request wants to do, for authorization.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    pub namespace: String,
    /// For non-resource requests (discovery, /version, /healthz).
    pub path: Option<String>,
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn matches_any(list: &[String], want: &str) -> bool {
    list.iter().any(|x| x == "*" || x == want)
}

fn rule_allows(rule: &Value, a: &Attributes) -> bool {
    if !matches_any(&strings(rule, "verbs"), &a.verb) {
        return false;
    }
    if let Some(path) = &a.path {
        return strings(rule, "nonResourceURLs").iter().any(|u| {
            u == "*" || u == path || u.strip_suffix('*').is_some_and(|p| path.starts_with(p))
        });
    }
    if !matches_any(&strings(rule, "apiGroups"), &a.api_group) {
        return false;
    }
    let combined = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let resource_ok = strings(rule, "resources").iter().any(|r| {
        r == "*"
            || *r == combined
            || (!a.subresource.is_empty() && *r == format!("*/{}", a.subresource))
    });
    if !resource_ok {
        return false;
    }
    let names = strings(rule, "resourceNames");
    names.is_empty() || (!a.name.is_empty() && names.contains(&a.name))
}

/// The binding subjects that can name `user`: the user, its groups and, for a
/// ServiceAccount token, the ServiceAccount.
fn subjects_of(user: &UserInfo) -> Vec<Subject> {
    let subject = |kind: &str, name: &str| Subject {
        kind: kind.to_owned(),
        name: name.to_owned(),
    };
    let mut out = vec![subject("User", &user.name)];
    out.extend(user.groups.iter().map(|g| subject("Group", g)));
    if let Some(sa) = user.name.strip_prefix("system:serviceaccount:") {
        out.push(subject("ServiceAccount", sa));
    }
    out
}

/// Whether a binding's `subjects` entry names one of the requester's subjects.
fn subject_matches(entry: &Value, requester: &[Subject], binding_ns: &str) -> bool {
    Subject::of_entry(entry, binding_ns).is_some_and(|s| requester.contains(&s))
}

/// The role a binding's `roleRef` names (a Role in the binding's namespace, or a
/// ClusterRole), shared with the store rather than copied: every authorized request reads it.
fn bound_role(store: &Store, role_ref: &Value, binding_ns: &str) -> Option<Arc<Value>> {
    let kind = role_ref
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = role_ref
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match kind {
        "ClusterRole" => store.get("rbac.authorization.k8s.io/clusterroles", "", name),
        "Role" => store.get("rbac.authorization.k8s.io/roles", binding_ns, name),
        _ => None,
    }
}

/// Whether RBAC allows the request.
pub fn authorize(store: &Store, user: &UserInfo, a: &Attributes) -> bool {
    if user.groups.iter().any(|g| g == "system:masters") {
        return true;
    }
    let requester = subjects_of(user);
    let allowed_by = |binding: &Value, ns: &str| -> bool {
        let subjects = binding.get("subjects").and_then(Value::as_array);
        if !subjects.is_some_and(|s| s.iter().any(|s| subject_matches(s, &requester, ns))) {
            return false;
        }
        let Some(role_ref) = binding.get("roleRef") else {
            return false;
        };
        bound_role(store, role_ref, ns).is_some_and(|role| {
            role.get("rules")
                .and_then(Value::as_array)
                .is_some_and(|rules| rules.iter().any(|r| rule_allows(r, a)))
        })
    };
    for b in store.cluster_role_bindings_of(&requester) {
        if allowed_by(&b, "") {
            return true;
        }
    }
    if !a.namespace.is_empty() && a.path.is_none() {
        for (_, b) in store.list(
            "rbac.authorization.k8s.io/rolebindings",
            Some(&a.namespace),
            None,
        ) {
            if allowed_by(b, &a.namespace) {
                return true;
            }
        }
    }
    false
}

/// The message of a 403, as the real server words it.
pub fn forbidden_message(user: &UserInfo, a: &Attributes) -> String {
    if let Some(path) = &a.path {
        return format!(
            "forbidden: User \"{}\" cannot {} path \"{path}\"",
            user.name, a.verb
        );
    }
    let resource = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let group = format!(" in API group \"{}\"", a.api_group);
    let scope = if a.namespace.is_empty() {
        " at the cluster scope".to_owned()
    } else {
        format!(" in the namespace \"{}\"", a.namespace)
    };
    let qualified = crate::error::qualified(&resource, &a.api_group);
    let head = if a.name.is_empty() {
        format!("{qualified} is forbidden")
    } else {
        format!("{qualified} \"{}\" is forbidden", a.name)
    };
    format!(
        "{head}: User \"{}\" cannot {} resource \"{resource}\"{group}{scope}",
        user.name, a.verb
    )
}

/// The user-facing roles kube-apiserver's RBAC bootstrap policy creates
/// (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go`): `admin`, `edit` and `view`
/// are aggregated (each from ClusterRoles labelled `rbac.authorization.k8s.io/aggregate-to-<role>`,
/// `view` into `edit`, `edit` into `admin`), and `system:aggregate-to-*` hold the built-in
/// rules. The aggregation controller fills their `rules`.
fn user_facing_roles() -> Vec<Value> {
    use serde_json::json;
    let all_write = json!(["create", "delete", "deletecollection", "patch", "update"]);
    let read = json!(["get", "list", "watch"]);
    let role = |name: &str, label: Option<&str>, rules: Value| {
        let mut r = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                           "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
                           "rules": rules});
        if let Some(l) = label {
            r["metadata"]["labels"][format!("rbac.authorization.k8s.io/aggregate-to-{l}")] =
                json!("true");
        }
        r
    };
    let aggregated = |name: &str, from: &str, label: Option<&str>| {
        let mut r = role(name, label, json!([]));
        r["aggregationRule"] = json!({"clusterRoleSelectors": [
            {"matchLabels": {format!("rbac.authorization.k8s.io/aggregate-to-{from}"): "true"}}]});
        r
    };
    vec![
        aggregated("admin", "admin", None),
        aggregated("edit", "edit", Some("admin")),
        aggregated("view", "view", Some("edit")),
        role(
            "system:aggregate-to-admin",
            Some("admin"),
            json!([
                {"apiGroups": ["authorization.k8s.io"], "resources": ["localsubjectaccessreviews"], "verbs": ["create"]},
                {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings", "roles"],
                 "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]}
            ]),
        ),
        role(
            "system:aggregate-to-edit",
            Some("edit"),
            json!([
                {"apiGroups": [""], "resources": ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"], "verbs": read},
                {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]},
                {"apiGroups": [""], "resources": ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"], "verbs": all_write},
                {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["configmaps", "events", "persistentvolumeclaims", "replicationcontrollers",
                                                  "replicationcontrollers/scale", "secrets", "serviceaccounts", "services", "services/proxy"], "verbs": all_write},
                {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
                {"apiGroups": ["apps"], "resources": ["daemonsets", "deployments", "deployments/rollback", "deployments/scale",
                                                      "replicasets", "replicasets/scale", "statefulsets", "statefulsets/scale"], "verbs": all_write},
                {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": all_write},
                {"apiGroups": ["batch"], "resources": ["cronjobs", "jobs"], "verbs": all_write},
                {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": all_write},
                {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "networkpolicies"], "verbs": all_write},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                 "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]}
            ]),
        ),
        role(
            "system:aggregate-to-view",
            Some("view"),
            json!([
                {"apiGroups": [""], "resources": ["configmaps", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status",
                                                  "pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
                                                  "services", "services/status"], "verbs": read},
                {"apiGroups": [""], "resources": ["bindings", "events", "limitranges", "namespaces/status", "pods/log", "pods/status",
                                                  "replicationcontrollers/status", "resourcequotas", "resourcequotas/status"], "verbs": read},
                {"apiGroups": [""], "resources": ["namespaces"], "verbs": read},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
                {"apiGroups": ["apps"], "resources": ["controllerrevisions", "daemonsets", "daemonsets/status", "deployments",
                                                      "deployments/scale", "deployments/status", "replicasets", "replicasets/scale",
                                                      "replicasets/status", "statefulsets", "statefulsets/scale", "statefulsets/status"], "verbs": read},
                {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers", "horizontalpodautoscalers/status"], "verbs": read},
                {"apiGroups": ["batch"], "resources": ["cronjobs", "cronjobs/status", "jobs", "jobs/status"], "verbs": read},
                {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets", "poddisruptionbudgets/status"], "verbs": read},
                {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "ingresses/status", "networkpolicies"], "verbs": read}
            ]),
        ),
    ]
}

/// RBAC objects every cluster starts with: cluster-admin for system:masters, the discovery
/// and self-review permissions every authenticated user has, and the user-facing roles.
pub fn bootstrap_rbac() -> Vec<(&'static str, Value)> {
    use serde_json::json;
    let cr = "rbac.authorization.k8s.io/clusterroles";
    let crb = crate::store::CLUSTER_ROLE_BINDINGS;
    let binding = |name: &str, role: &str, group: &str| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]})
    };
    vec![
        (
            cr,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "cluster-admin"},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                      {"nonResourceURLs": ["*"], "verbs": ["*"]}]}),
        ),
        (
            crb,
            binding("cluster-admin", "cluster-admin", "system:masters"),
        ),
        (
            cr,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "system:discovery"},
            "rules": [{"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", "/version", "/version/", "/healthz", "/livez", "/readyz"],
                       "verbs": ["get"]}]}),
        ),
        (
            crb,
            binding(
                "system:discovery",
                "system:discovery",
                "system:authenticated",
            ),
        ),
        (
            cr,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "system:public-info-viewer"},
            "rules": [{"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]}]}),
        ),
        (
            crb,
            binding(
                "system:public-info-viewer",
                "system:public-info-viewer",
                "system:unauthenticated",
            ),
        ),
        (
            cr,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "system:basic-user"},
            "rules": [{"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]},
                      {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]}]}),
        ),
        (
            crb,
            binding(
                "system:basic-user",
                "system:basic-user",
                "system:authenticated",
            ),
        ),
    ]
    .into_iter()
    .chain(user_facing_roles().into_iter().map(|r| (cr, r)))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attrs(verb: &str, resource: &str, sub: &str, name: &str, ns: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            api_group: "".into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            namespace: ns.into(),
            path: None,
        }
    }

    #[test]
    fn rules_match_verbs_resources_subresources_and_names() {
        let rule = json!({"apiGroups": [""], "resources": ["secrets", "pods/status"], "verbs": ["get", "list"], "resourceNames": ["s1"]});
        assert!(rule_allows(&rule, &attrs("get", "secrets", "", "s1", "ns")));
        assert!(!rule_allows(
            &rule,
            &attrs("get", "secrets", "", "s2", "ns")
        ));
        assert!(
            !rule_allows(&rule, &attrs("list", "secrets", "", "", "ns")),
            "resourceNames never allow unnamed requests"
        );
        assert!(!rule_allows(
            &rule,
            &attrs("delete", "secrets", "", "s1", "ns")
        ));
        let sub = json!({"apiGroups": [""], "resources": ["pods/status"], "verbs": ["*"]});
        assert!(rule_allows(
            &sub,
            &attrs("update", "pods", "status", "p", "ns")
        ));
        assert!(!rule_allows(&sub, &attrs("update", "pods", "", "p", "ns")));
        let star = json!({"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["get"]});
        assert!(rule_allows(&star, &attrs("get", "x", "status", "", "")));
        let nr = json!({"nonResourceURLs": ["/apis/*"], "verbs": ["get"]});
        let mut a = attrs("get", "", "", "", "");
        a.path = Some("/apis/apps/v1".into());
        assert!(rule_allows(&nr, &a));
    }

    #[test]
    fn subjects() {
        let u = subjects_of(&UserInfo::service_account("ns1", "sa", "uid"));
        // A ServiceAccount entry without a namespace is in the binding's.
        assert!(subject_matches(
            &json!({"kind": "ServiceAccount", "name": "sa"}),
            &u,
            "ns1"
        ));
        assert!(!subject_matches(
            &json!({"kind": "ServiceAccount", "name": "sa"}),
            &u,
            "ns2"
        ));
        assert!(subject_matches(
            &json!({"kind": "ServiceAccount", "name": "sa", "namespace": "ns1"}),
            &u,
            "x"
        ));
        assert!(subject_matches(
            &json!({"kind": "Group", "name": "system:serviceaccounts:ns1"}),
            &u,
            "x"
        ));
        assert!(!subject_matches(
            &json!({"kind": "User", "name": "sa"}),
            &u,
            "x"
        ));
    }
}
