//! Which of the kinds a migration carries over (`spec.carryOver`) a hub serves, found through
//! its discovery API: each must be served there and namespaced (only objects in a cluster's
//! namespace travel).

use kube::Client;
use kube::api::DynamicObject;
use kube::discovery::{ApiResource, Discovery, Scope};
use serde_json::Value;

use crate::carried::CarryOverResource;

/// The API resource of each of `kinds` on the hub of `client`, in order; `Ok(Err(why))` naming
/// the first kind it does not serve, or serves cluster-scoped.
pub async fn served(
    client: &Client,
    kinds: &[CarryOverResource],
) -> Result<Result<Vec<ApiResource>, String>, kube::Error> {
    let discovery = discover(client, kinds).await?;
    Ok(kinds.iter().map(|k| lookup(&discovery, k)).collect())
}

/// Those of `kinds` the hub of `client` serves namespaced, each with its API resource; the
/// others are left out. One discovery for them all.
pub async fn served_each<'a>(
    client: &Client,
    kinds: &'a [CarryOverResource],
) -> Result<Vec<(&'a CarryOverResource, ApiResource)>, kube::Error> {
    let discovery = discover(client, kinds).await?;
    Ok(kinds
        .iter()
        .filter_map(|k| lookup(&discovery, k).ok().map(|ar| (k, ar)))
        .collect())
}

/// The hub's discovery of the groups of `kinds` (none queried without kinds).
async fn discover(
    client: &Client,
    kinds: &[CarryOverResource],
) -> Result<Option<Discovery>, kube::Error> {
    if kinds.is_empty() {
        return Ok(None);
    }
    let groups: Vec<&str> = kinds.iter().map(|k| k.group.as_str()).collect();
    Discovery::new(client.clone())
        .filter(&groups)
        .run()
        .await
        .map(Some)
}

/// The API resource of `k` in `discovery`, or why it cannot carry it.
fn lookup(discovery: &Option<Discovery>, k: &CarryOverResource) -> Result<ApiResource, String> {
    let hit = discovery.iter().flat_map(|d| {
        d.groups()
            .filter(|g| g.name() == k.group)
            .flat_map(|g| g.recommended_resources())
    });
    match hit.into_iter().find(|(ar, _)| ar.plural == k.resource) {
        Some((ar, caps)) if caps.scope == Scope::Namespaced => Ok(ar),
        Some(_) => Err(format!(
            "{} is cluster-scoped: only objects in a cluster's namespace are carried over",
            k.display()
        )),
        None => Err(format!("{} is not served", k.display())),
    }
}

/// A listed object as JSON, with the `apiVersion` and `kind` of `ar` (items of a list come
/// without them).
pub fn typed(o: &DynamicObject, ar: &ApiResource) -> Option<Value> {
    let mut v = serde_json::to_value(o).ok()?;
    v["apiVersion"] = Value::from(ar.api_version.clone());
    v["kind"] = Value::from(ar.kind.clone());
    Some(v)
}
