//! Discovery (`/version`, `/api`, `/apis`, group and group-version resource lists) and the
//! OpenAPI v3 documents kubectl reads to decide on field validation and patch types.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use serde_json::{Value, json};

use crate::resources::{Registry, ResourceType};

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "33", "gitVersion": "v1.33.0-kube-sim", "gitCommit": "kube-sim",
        "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.0",
        "compiler": "gc", "platform": "linux/amd64"
    })
}

/// `/api`.
pub fn core_versions(addr: &str) -> Value {
    json!({
        "kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]
    })
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let gv = |v: &str| json!({"groupVersion": format!("{name}/{v}"), "version": v});
    json!({
        "name": name,
        "versions": versions.iter().map(|v| gv(v)).collect::<Vec<_>>(),
        "preferredVersion": gv(versions.first().map(String::as_str).unwrap_or("v1")),
    })
}

/// `/apis`.
pub fn group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`.
pub fn group(reg: &Registry, name: &str) -> Option<Value> {
    let groups = reg.groups();
    let versions = groups.get(name)?;
    let mut g = group_json(name, versions);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

fn subresource_entry(t: &ResourceType, sub: &str) -> Value {
    let (kind, group, version, verbs): (&str, &str, &str, &[&str]) = match sub {
        "token" => ("TokenRequest", "authentication.k8s.io", "v1", &["create"]),
        "finalize" => (t.kind.as_str(), "", "", &["update"]),
        "scale" => ("Scale", "autoscaling", "v1", &["get", "patch", "update"]),
        _ => (t.kind.as_str(), "", "", &["get", "patch", "update"]),
    };
    let mut e = json!({
        "name": format!("{}/{sub}", t.plural), "singularName": "", "namespaced": t.namespaced,
        "kind": kind, "verbs": verbs,
    });
    if !group.is_empty() {
        e["group"] = json!(group);
        e["version"] = json!(version);
    }
    e
}

/// `/api/v1` or `/apis/<group>/<version>`.
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let types: Vec<_> = reg
        .all()
        .iter()
        .filter(|t| t.group == group && t.version == version)
        .collect();
    if types.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for t in types {
        let mut e = json!({
            "name": t.plural, "singularName": t.singular, "namespaced": t.namespaced,
            "kind": t.kind, "verbs": t.verbs(),
        });
        if !t.short_names.is_empty() {
            e["shortNames"] = json!(t.short_names);
        }
        if !t.categories.is_empty() {
            e["categories"] = json!(t.categories);
        }
        resources.push(e);
        for sub in &t.subresources {
            resources.push(subresource_entry(t, sub));
        }
    }
    let gv = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: the index of per-group-version documents.
pub fn openapi_index(reg: &Registry) -> Value {
    let mut paths = BTreeMap::new();
    for (g, versions) in reg.groups() {
        for v in versions {
            let doc = openapi_doc(reg, &g, &v).unwrap_or(Value::Null);
            let mut h = std::collections::hash_map::DefaultHasher::new();
            doc.to_string().hash(&mut h);
            let path = gv_path(&g, &v);
            paths.insert(path.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={:016X}", h.finish())}));
        }
    }
    json!({"paths": paths})
}

fn schema_name(t: &ResourceType) -> String {
    let group = if t.group.is_empty() {
        "io.k8s.api.core".to_owned()
    } else {
        t.group.split('.').rev().collect::<Vec<_>>().join(".")
    };
    format!("{group}.{}.{}", t.version, t.kind)
}

/// `/openapi/v3/<api|apis/group>/<version>`.
pub fn openapi_doc(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let types: Vec<_> = reg
        .all()
        .iter()
        .filter(|t| t.group == group && t.version == version)
        .collect();
    if types.is_empty() {
        return None;
    }
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    let field_validation = json!({"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true},
        "description": "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields."});
    let field_manager = json!({"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}});
    let dry_run =
        json!({"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}});
    for t in types {
        if t.virtual_kind {
            continue;
        }
        let gvk = json!({"group": t.group, "version": t.version, "kind": t.kind});
        let base = if t.namespaced {
            format!(
                "/{}/namespaces/{{namespace}}/{}",
                gv_path(group, version),
                t.plural
            )
        } else {
            format!("/{}/{}", gv_path(group, version), t.plural)
        };
        let sref = json!({"$ref": format!("#/components/schemas/{}", schema_name(t))});
        let body = json!({"content": {"application/json": {"schema": sref}}});
        let mut patch_types = serde_json::Map::new();
        for ct in [
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml",
        ] {
            patch_types.insert(ct.into(), json!({"schema": {"type": "object"}}));
        }
        let op = |action: &str, params: Vec<Value>, with_body: Option<Value>| {
            let mut o = json!({
                "operationId": format!("{action}{}", t.kind),
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": params,
                "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": sref}}}},
            });
            if let Some(b) = with_body {
                o["requestBody"] = b;
            }
            o
        };
        paths.insert(base.clone(), json!({
            "get": op("list", vec![], None),
            "post": op("post", vec![field_validation.clone(), field_manager.clone(), dry_run.clone()], Some(body.clone())),
        }));
        paths.insert(format!("{base}/{{name}}"), json!({
            "get": op("get", vec![], None),
            "put": op("put", vec![field_validation.clone(), field_manager.clone(), dry_run.clone()], Some(body.clone())),
            "patch": op("patch", vec![field_validation.clone(), field_manager.clone(), dry_run.clone()],
                        Some(json!({"content": Value::Object(patch_types.clone())}))),
            "delete": op("delete", vec![dry_run.clone()], None),
        }));
        let mut schema = t.schema.as_deref().cloned().unwrap_or_else(
            || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        );
        schema["x-kubernetes-group-version-kind"] = json!([gvk]);
        schemas.insert(schema_name(t), schema);
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}
