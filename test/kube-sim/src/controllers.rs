//! The controllers a real control plane runs beside the API server, reduced to what the
//! semantics need: garbage collection through ownerReferences (background, foreground,
//! orphan), namespace deletion, CRD instance cleanup, ServiceAccount token Secrets, the
//! `kubernetes.io/kube-apiserver-client` CSR signer and ClusterRole aggregation.

use std::collections::BTreeSet;
use std::sync::Arc;

use base64::Engine;
use serde_json::{Value, json};

use crate::auth::IssuedToken;
use crate::meta::{self, meta_str};
use crate::resources::ResourceType;
use crate::sim::{DeleteOpts, Sim, WriteOpts, mint_token};
use crate::store::{Event, EventType, Next, Store};

const CRD_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";
const CLUSTER_ROLES: &str = "rbac.authorization.k8s.io/clusterroles";
const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";

type Key = (String, String, String);

/// Objects waiting for something else to go away first.
#[derive(Default)]
struct Pending {
    held: BTreeSet<Key>,
}

/// Runs the controllers until the store is gone.
pub async fn run(sim: Sim) {
    let mut rx = sim.store().subscribe_all();
    let mut pending = Pending::default();
    resync(&sim, &mut pending);
    aggregate_cluster_roles(&sim);
    loop {
        match rx.recv().await {
            Next::Event(ev) => react(&sim, &mut pending, &ev),
            Next::FellBehind => {
                rx = sim.store().subscribe_all();
                resync(&sim, &mut pending);
                aggregate_cluster_roles(&sim);
            }
            Next::Closed => break,
        }
    }
}

fn rt_for(store: &Store, storage: &str) -> Option<Arc<ResourceType>> {
    store.registry.by_storage(storage).next().cloned()
}

fn opts() -> WriteOpts {
    WriteOpts {
        field_manager: Some("kube-controller-manager".into()),
        ..Default::default()
    }
}

/// Looks at every object once (start-up, or after falling behind the event stream).
fn resync(sim: &Sim, pending: &mut Pending) {
    let keys: Vec<Key> = {
        let store = sim.store();
        store
            .storages()
            .into_iter()
            .flat_map(|s| {
                store
                    .list(&s, None, None)
                    .map(|((ns, name), _)| (s.clone(), ns.clone(), name.clone()))
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    for key in keys {
        examine(sim, pending, &key);
    }
}

fn react(sim: &Sim, pending: &mut Pending, ev: &Event) {
    if ev.storage == CLUSTER_ROLES {
        aggregate_cluster_roles(sim);
    }
    let key = (ev.storage.clone(), ev.namespace.clone(), ev.name.clone());
    if ev.type_ == EventType::Deleted {
        if let Some(uid) = meta_str(&ev.object, "uid") {
            collect_orphans_of(sim, uid);
        }
        if ev.storage == "serviceaccounts" {
            delete_token_secrets(sim, &ev.namespace, &ev.name);
        }
        pending.held.remove(&key);
        // Something went away: whatever waited may proceed.
        let waiting: Vec<Key> = pending.held.iter().cloned().collect();
        for k in waiting {
            examine(sim, pending, &k);
        }
        return;
    }
    examine(sim, pending, &key);
}

/// Acts on one object's current state.
fn examine(sim: &Sim, pending: &mut Pending, key: &Key) {
    let (storage, ns, name) = key;
    let Some(obj) = sim.store().get(storage, ns, name) else {
        pending.held.remove(key);
        return;
    };
    if obj.pointer("/metadata/deletionTimestamp").is_some() {
        let done = finish_deletion(sim, key, &obj);
        if done {
            pending.held.remove(key);
        } else {
            pending.held.insert(key.clone());
        }
        return;
    }
    match storage.as_str() {
        "secrets" => populate_token_secret(sim, ns, name, &obj),
        "certificates.k8s.io/certificatesigningrequests" => sign_csr(sim, name, &obj),
        _ => {}
    }
}

/// The ClusterRole aggregation controller (kube-controller-manager's
/// `pkg/controller/clusterroleaggregation`): every ClusterRole with an `aggregationRule` gets
/// the rules of the other ClusterRoles its selectors match (in name order, each rule once);
/// written only when they changed, so the events this causes settle.
fn aggregate_cluster_roles(sim: &Sim) {
    let roles: Vec<(String, Arc<Value>)> = sim
        .store()
        .list(CLUSTER_ROLES, None, None)
        .map(|((_, name), obj)| (name.clone(), obj.clone()))
        .collect();
    for (name, role) in &roles {
        let Some(selectors) = role
            .pointer("/aggregationRule/clusterRoleSelectors")
            .and_then(Value::as_array)
        else {
            continue;
        };
        let selectors: Vec<meta::LabelSelector> = selectors
            .iter()
            .filter_map(meta::LabelSelector::from_object)
            .collect();
        let mut rules: Vec<Value> = Vec::new();
        for selector in &selectors {
            for (other, obj) in &roles {
                if other == name || !selector.matches(&meta::labels(obj)) {
                    continue;
                }
                for rule in obj
                    .get("rules")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if !rules.contains(rule) {
                        rules.push(rule.clone());
                    }
                }
            }
        }
        let current = role.get("rules").cloned().unwrap_or(Value::Null);
        let current_rules = current.as_array().cloned().unwrap_or_default();
        if current_rules != rules {
            modify(
                sim,
                &(CLUSTER_ROLES.to_owned(), String::new(), name.clone()),
                "",
                |o| o["rules"] = Value::Array(rules),
            );
        }
    }
}

fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Works on an object being deleted; true once nothing more is to be done here.
fn finish_deletion(sim: &Sim, key: &Key, obj: &Value) -> bool {
    let (storage, ns, name) = key;
    let fins = finalizers(obj);
    let uid = meta_str(obj, "uid").unwrap_or_default().to_owned();
    let mut done = true;
    if fins.iter().any(|f| f == "foregroundDeletion") {
        let dependents = sim.store().dependents_of(&uid);
        if dependents.is_empty() {
            remove_finalizer(sim, key, "foregroundDeletion");
        } else {
            for (s, n, nm) in dependents {
                delete(sim, &s, &n, &nm, Some("Foreground"));
            }
            done = false;
        }
    }
    if fins.iter().any(|f| f == "orphan") {
        let dependents = sim.store().dependents_of(&uid);
        for (s, n, nm) in dependents {
            drop_owner_ref(sim, &(s, n, nm), &uid, false);
        }
        remove_finalizer(sim, key, "orphan");
    }
    if storage == "namespaces" {
        let remaining = delete_namespace_contents(sim, name);
        if remaining == 0 {
            finalize_namespace(sim, name, obj);
        } else {
            done = false;
        }
    }
    if storage == "apiextensions.k8s.io/customresourcedefinitions"
        && fins.iter().any(|f| f == CRD_FINALIZER)
    {
        let instances = crd_storage(obj);
        let remaining: Vec<(String, String)> = sim
            .store()
            .list(&instances, None, None)
            .map(|(k, _)| k.clone())
            .collect();
        if remaining.is_empty() {
            remove_finalizer(sim, key, CRD_FINALIZER);
        } else {
            for (n, nm) in remaining {
                delete(sim, &instances, &n, &nm, None);
            }
            done = false;
        }
    }
    let _ = ns;
    done
}

fn crd_storage(crd: &Value) -> String {
    let g = crd
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let p = crd
        .pointer("/spec/names/plural")
        .and_then(Value::as_str)
        .unwrap_or_default();
    format!("{g}/{p}")
}

fn delete(sim: &Sim, storage: &str, ns: &str, name: &str, propagation: Option<&str>) {
    let mut store = sim.store();
    let Some(rt) = rt_for(&store, storage) else {
        return;
    };
    let opts = DeleteOpts {
        propagation: propagation.map(str::to_owned),
        ..Default::default()
    };
    // NotFound means it is already gone: fine.
    let _ = sim.delete_locked(&mut store, &rt, ns, name, &opts);
}

/// Rewrites an object through the normal update path.
fn modify(sim: &Sim, key: &Key, sub: &str, f: impl FnOnce(&mut Value)) {
    let (storage, ns, name) = key;
    let rt = {
        let store = sim.store();
        rt_for(&store, storage)
    };
    let Some(rt) = rt else { return };
    let Ok(mut obj) = sim.get(&rt, ns, name) else {
        return;
    };
    f(&mut obj);
    if let Err(e) = sim.update(&rt, ns, name, sub, obj, &opts()) {
        tracing::debug!(%storage, %ns, %name, error = %e, "controller update did not apply");
    }
}

fn remove_finalizer(sim: &Sim, key: &Key, finalizer: &str) {
    modify(sim, key, "", |o| {
        if let Some(list) = o
            .pointer_mut("/metadata/finalizers")
            .and_then(Value::as_array_mut)
        {
            list.retain(|f| f.as_str() != Some(finalizer));
        }
    });
}

fn drop_owner_ref(sim: &Sim, key: &Key, owner_uid: &str, delete_if_orphaned: bool) {
    let Some(obj) = sim.store().get(&key.0, &key.1, &key.2) else {
        return;
    };
    let refs: Vec<Value> = obj
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let remaining: Vec<Value> = refs
        .into_iter()
        .filter(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid))
        .collect();
    if remaining.is_empty() && delete_if_orphaned {
        delete(sim, &key.0, &key.1, &key.2, None);
    } else {
        modify(sim, key, "", |o| {
            if remaining.is_empty() {
                if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("ownerReferences");
                }
            } else {
                o["metadata"]["ownerReferences"] = Value::Array(remaining);
            }
        });
    }
}

/// Background garbage collection: dependents of a deleted owner go when no owner is left.
fn collect_orphans_of(sim: &Sim, uid: &str) {
    let dependents = sim.store().dependents_of(uid);
    for key in dependents {
        drop_owner_ref(sim, &key, uid, true);
    }
}

/// Deletes what a terminating namespace holds; returns how many objects remain.
fn delete_namespace_contents(sim: &Sim, ns: &str) -> usize {
    let keys: Vec<(String, String)> = {
        let store = sim.store();
        store
            .storages()
            .into_iter()
            .filter(|s| s != "namespaces")
            .flat_map(|s| {
                store
                    .list(&s, Some(ns), None)
                    .map(|((_, name), _)| (s.clone(), name.clone()))
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    for (storage, name) in &keys {
        delete(sim, storage, ns, name, None);
    }
    let store = sim.store();
    keys.iter()
        .filter(|(s, n)| store.get(s, ns, n).is_some())
        .count()
}

fn finalize_namespace(sim: &Sim, name: &str, obj: &Value) {
    let has_kubernetes = obj
        .pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty());
    if has_kubernetes {
        modify(
            sim,
            &("namespaces".into(), String::new(), name.into()),
            "finalize",
            |o| {
                o["spec"]["finalizers"] = json!([]);
            },
        );
    }
}

fn populate_token_secret(sim: &Sim, ns: &str, name: &str, secret: &Value) {
    if secret.get("type").and_then(Value::as_str) != Some("kubernetes.io/service-account-token") {
        return;
    }
    if secret.pointer("/data/token").is_some() {
        return;
    }
    let Some(sa_name) = secret
        .pointer("/metadata/annotations/kubernetes.io~1service-account.name")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return;
    };
    let Some(sa) = sim.store().get("serviceaccounts", ns, &sa_name) else {
        return;
    };
    let sa_uid = meta_str(&sa, "uid").unwrap_or_default().to_owned();
    let secret_uid = meta_str(secret, "uid").unwrap_or_default().to_owned();
    let token = mint_token(ns, &sa_name, i64::MAX);
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let ca = sim.inner.pki.ca_pem().to_owned();
    sim.tokens().issued.insert(
        token.clone(),
        IssuedToken {
            namespace: ns.into(),
            service_account: sa_name.clone(),
            service_account_uid: sa_uid.clone(),
            expires: None,
            bound_secret: Some((ns.into(), name.into(), secret_uid)),
        },
    );
    modify(sim, &("secrets".into(), ns.into(), name.into()), "", |o| {
        o["data"]["token"] = json!(b64(&token));
        o["data"]["ca.crt"] = json!(b64(&ca));
        o["data"]["namespace"] = json!(b64(ns));
        o["metadata"]["annotations"]["kubernetes.io/service-account.uid"] = json!(sa_uid);
    });
}

fn delete_token_secrets(sim: &Sim, ns: &str, sa_name: &str) {
    let names: Vec<String> = sim
        .store()
        .list("secrets", Some(ns), None)
        .filter(|(_, s)| {
            s.get("type").and_then(Value::as_str) == Some("kubernetes.io/service-account-token")
                && s.pointer("/metadata/annotations/kubernetes.io~1service-account.name")
                    .and_then(Value::as_str)
                    == Some(sa_name)
        })
        .map(|((_, n), _)| n.clone())
        .collect();
    for n in names {
        delete(sim, "secrets", ns, &n, None);
    }
}

fn has_condition(obj: &Value, t: &str) -> bool {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(t)
                    && c.get("status").and_then(Value::as_str) != Some("False")
            })
        })
}

fn sign_csr(sim: &Sim, name: &str, csr: &Value) {
    if csr.pointer("/spec/signerName").and_then(Value::as_str) != Some(CLIENT_SIGNER)
        || !has_condition(csr, "Approved")
        || has_condition(csr, "Denied")
        || has_condition(csr, "Failed")
        || csr.pointer("/status/certificate").is_some()
    {
        return;
    }
    let key = (
        "certificates.k8s.io/certificatesigningrequests".to_owned(),
        String::new(),
        name.to_owned(),
    );
    let pem = csr
        .pointer("/spec/request")
        .and_then(Value::as_str)
        .and_then(|r| base64::engine::general_purpose::STANDARD.decode(r).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .unwrap_or_default();
    let usages: Vec<&str> = csr
        .pointer("/spec/usages")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let allowed = ["client auth", "digital signature", "key encipherment"];
    let bad_usage = usages
        .iter()
        .find(|u| !allowed.contains(u))
        .map(|u| (*u).to_owned());
    let seconds = csr
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_u64)
        .unwrap_or(365 * 24 * 3600)
        .max(600);
    let outcome = match bad_usage {
        Some(u) => Err(format!("invalid usage for client certificate: {u}")),
        None if !usages.contains(&"client auth") => Err("missing usage \"client auth\"".to_owned()),
        None => sim
            .inner
            .pki
            .sign_client_csr(&pem, seconds)
            .map_err(|e| e.to_string()),
    };
    modify(sim, &key, "status", |o| match outcome {
        Ok(cert) => {
            o["status"]["certificate"] =
                json!(base64::engine::general_purpose::STANDARD.encode(cert));
        }
        Err(message) => {
            let conds = o["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let mut conds = conds;
            conds.push(json!({"type": "Failed", "status": "True", "reason": "SignerValidationFailure",
                              "message": message, "lastUpdateTime": meta::now(), "lastTransitionTime": meta::now()}));
            o["status"]["conditions"] = Value::Array(conds);
        }
    });
}
