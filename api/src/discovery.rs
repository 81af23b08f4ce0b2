//! Which of the kinds a migration carries over (`spec.carryOver`) a hub serves, found through
//! its discovery API: each must be served there and namespaced (only objects in a cluster's
//! namespace travel).

use kube::Client;
use kube::discovery::{ApiResource, Discovery, Scope};

use crate::carried::CarryOverResource;

/// The API resource of each of `kinds` on the hub of `client`, in order; `Ok(Err(why))` naming
/// the first kind it does not serve, or serves cluster-scoped.
pub async fn served(
    client: &Client,
    kinds: &[CarryOverResource],
) -> Result<Result<Vec<ApiResource>, String>, kube::Error> {
    if kinds.is_empty() {
        return Ok(Ok(Vec::new()));
    }
    let groups: Vec<&str> = kinds.iter().map(|k| k.group.as_str()).collect();
    let discovery = Discovery::new(client.clone()).filter(&groups).run().await?;
    let mut found = Vec::with_capacity(kinds.len());
    for k in kinds {
        let hit = discovery
            .groups()
            .filter(|g| g.name() == k.group)
            .flat_map(|g| g.recommended_resources())
            .find(|(ar, _)| ar.plural == k.resource);
        match hit {
            Some((ar, caps)) if caps.scope == Scope::Namespaced => found.push(ar),
            Some(_) => {
                return Ok(Err(format!(
                    "{} is cluster-scoped: only objects in a cluster's namespace are carried over",
                    k.display()
                )));
            }
            None => return Ok(Err(format!("{} is not served", k.display()))),
        }
    }
    Ok(Ok(found))
}
