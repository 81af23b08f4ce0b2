//! A carry-over too large for one status value travels in parts: Secrets in the agent's
//! namespace ([`names::carry_over_part`]), each a JSON array of records with the digest of the
//! whole. Secrets, not ConfigMaps: the objects a migration carries over may be Secrets. The source writes its parts at validation (owned by its task, so they go with it)
//! and the manager reads them back through read-only ManifestWorks; the target's parts arrive
//! in ManifestWorks of their own, and the target reads them from its cache.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use k8s_openapi::api::core::v1::Secret;
use migration_api::migration::{
    CARRY_OVER_DIGEST_KEY, CARRY_OVER_RECORDS_KEY, CarryOverParts, carry_over_digest,
    join_carry_over, sort_carry_over,
};

use super::*;

/// Writes the source's `parts` next to its task (those already there as they should be are
/// left alone) and says where they are.
pub(super) async fn publish(
    ctx: &Ctx,
    task: &MigrationTask,
    parts: &[String],
) -> Result<CarryOverParts, Error> {
    let digest = carry_over_digest(parts);
    let namespace = task.namespace().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    for (i, part) in parts.iter().enumerate() {
        let name = names::carry_over_part(task.spec.key(), MigrationRole::Source, i);
        if part_of(ctx, &namespace, &name).is_some_and(|(d, _)| d == digest) {
            continue;
        }
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {
                "name": name, "namespace": namespace,
                "labels": {names::labels::MANAGED_BY: names::labels::MANAGED_BY_VALUE},
                // Gone with the task.
                "ownerReferences": [{
                    "apiVersion": "migration.open-cluster-management.io/v1alpha1",
                    "kind": "MigrationTask", "name": task.name_any(),
                    "uid": task.uid().unwrap_or_default()
                }]
            },
            "data": {
                CARRY_OVER_RECORDS_KEY: B64.encode(part),
                CARRY_OVER_DIGEST_KEY: B64.encode(&digest)
            }
        });
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await
        .map_err(ctx_err(format!("writing carry-over part {name}")))?;
    }
    Ok(CarryOverParts {
        count: u32::try_from(parts.len()).unwrap_or(u32::MAX),
        digest,
    })
}

/// A part in the cache: its digest and records.
fn part_of(ctx: &Ctx, namespace: &str, name: &str) -> Option<(String, String)> {
    let secret = get(&ctx.caches.secrets, Some(namespace), name)?;
    let data = secret.data.as_ref()?;
    let text = |key: &str| String::from_utf8(data.get(key)?.0.clone()).ok();
    Some((text(CARRY_OVER_DIGEST_KEY)?, text(CARRY_OVER_RECORDS_KEY)?))
}

/// What a target task's clusters carry, from its parts: `Ok(None)` while some part has not
/// arrived (or is of another digest), an error when they do not decode. Decoded once per
/// digest.
fn target_carry_over(
    ctx: &Ctx,
    task: &MigrationTask,
    parts: &CarryOverParts,
) -> Result<Option<Arc<Vec<CarriedCluster>>>, Error> {
    if let Ok(memo) = ctx.carry_memo.lock()
        && let Some((digest, records)) = memo.as_ref()
        && *digest == parts.digest
    {
        return Ok(Some(records.clone()));
    }
    let namespace = task.namespace().unwrap_or_default();
    let mut found = Vec::with_capacity(parts.bounded());
    for i in 0..parts.bounded() {
        let name = names::carry_over_part(task.spec.key(), MigrationRole::Target, i);
        match part_of(ctx, &namespace, &name) {
            Some((digest, records)) if digest == parts.digest => found.push(records),
            _ => return Ok(None),
        }
    }
    if carry_over_digest(&found) != parts.digest {
        return Ok(None);
    }
    let mut records = join_carry_over(&found).map_err(|e| {
        Error::Config(format!(
            "the carry-over parts of this task do not decode ({e}); run the same addon version as the manager"
        ))
    })?;
    sort_carry_over(&mut records);
    let records = Arc::new(records);
    if let Ok(mut memo) = ctx.carry_memo.lock() {
        *memo = Some((parts.digest.clone(), records.clone()));
    }
    Ok(Some(records))
}

/// What a target task's clusters carry, in order of name, so that each cluster's record is
/// found by binary search ([`find_carried`]) rather than by a scan of them all, at every
/// reconcile: from its parts ([`target_carry_over`]; `Ok(None)` while one has not arrived) or
/// its own spec (in the clusters' order, as the manager relays the source's report), sorted
/// once per digest or per generation of the task (per version, for one without).
pub(super) fn target_records(
    ctx: &Ctx,
    task: &MigrationTask,
) -> Result<Option<Arc<Vec<CarriedCluster>>>, Error> {
    if let Some(parts) = &task.spec.carry_over_parts {
        return target_carry_over(ctx, task, parts);
    }
    // Its generation moves with its spec, not with the status this agent writes.
    let key = format!(
        "inline/{}/{}",
        task.uid().unwrap_or_default(),
        task.metadata.generation.map_or_else(
            || format!("rv {}", task.resource_version().unwrap_or_default()),
            |g| g.to_string()
        )
    );
    if let Ok(memo) = ctx.carry_memo.lock()
        && let Some((memo_key, records)) = memo.as_ref()
        && *memo_key == key
    {
        return Ok(Some(records.clone()));
    }
    let mut records = task.spec.carry_over.clone().unwrap_or_default();
    sort_carry_over(&mut records);
    let records = Arc::new(records);
    if let Ok(mut memo) = ctx.carry_memo.lock() {
        *memo = Some((key, records.clone()));
    }
    Ok(Some(records))
}
