//! A carry-over too large for one status value ([`CARRY_OVER_PART_BYTES`]): the source agent
//! writes it in parts (Secrets, base64) next to its task, read-only works read each part back (their status
//! feedback, on the global hub, is where the migration keeps it: `status.carryOverParts`
//! names how many and their digest), and works of their own deliver each part to the target.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use migration_api::migration::{
    CARRY_OVER_DIGEST_KEY, CARRY_OVER_PART_BYTES, CARRY_OVER_RECORDS_KEY, CarryOverParts,
    carry_over_digest, join_carry_over,
};
use migration_api::ocm::work::feedback_value;

use super::*;

/// Where the works of a carry-over's parts are read: work `name` in `hub`'s namespace, as the
/// watch has it ([`work_named`]) or as an observation of it holds it ([`Checks::part_works`]).
pub(super) trait Works: Fn(&str, &str) -> Option<Arc<ManifestWork>> {}

impl<F: Fn(&str, &str) -> Option<Arc<ManifestWork>>> Works for F {}

/// The carry-over's parts as the source's read-only works report them or, where such a report
/// is gone, as they were delivered to the target: all of them, or how many are there.
pub(super) fn read_parts(
    works: &impl Works,
    m: &Migration,
    parts: &CarryOverParts,
) -> Result<Vec<String>, usize> {
    let mut found = Vec::with_capacity(parts.bounded());
    for i in 0..parts.bounded() {
        match reported_part(works, m, parts, i).or_else(|| delivered_part(works, m, parts, i)) {
            Some(p) => found.push(p),
            None => return Err(found.len()),
        }
    }
    if carry_over_digest(&found) == parts.digest {
        Ok(found)
    } else {
        Err(0)
    }
}

/// Part `i` as the source's read-only work reports it.
fn reported_part(
    works: &impl Works,
    m: &Migration,
    parts: &CarryOverParts,
    i: usize,
) -> Option<String> {
    let name = names::carry_over_part(&m.key, MigrationRole::Source, i);
    let work = works(&m.from, &name)?;
    let values = work.feedback("Secret");
    let text = |key: &str| decoded(feedback_value(values, key)?.string.as_deref()?);
    (text(CARRY_OVER_DIGEST_KEY)? == parts.digest)
        .then(|| text(CARRY_OVER_RECORDS_KEY))
        .flatten()
}

/// Part `i` as its work delivers it to the target.
fn delivered_part(
    works: &impl Works,
    m: &Migration,
    parts: &CarryOverParts,
    i: usize,
) -> Option<String> {
    delivered(works, m, parts, i, |data| {
        decoded(data.get(CARRY_OVER_RECORDS_KEY)?.as_str()?)
    })
}

/// A part's value as its Secret holds it (base64), decoded; `None` when it is not.
fn decoded(value: &str) -> Option<String> {
    String::from_utf8(B64.decode(value).ok()?).ok()
}

/// What `read` finds in the data of part `i`'s work to the target, if that work carries the
/// parts' digest.
fn delivered<T>(
    works: &impl Works,
    m: &Migration,
    parts: &CarryOverParts,
    i: usize,
    read: impl FnOnce(&serde_json::Value) -> Option<T>,
) -> Option<T> {
    let name = names::carry_over_part(&m.key, MigrationRole::Target, i);
    let work = works(&m.to, &name)?;
    let data = work.manifests().first()?.get("data")?;
    if decoded(data.get(CARRY_OVER_DIGEST_KEY)?.as_str()?)? != parts.digest {
        return None;
    }
    read(data)
}

/// What reading a carry-over's parts back came to.
pub(super) enum Gathered {
    /// All of them, decoded.
    Records(Vec<CarriedCluster>),
    /// Not all back yet: how far it got, for people.
    Waiting(String),
    /// All back, and they do not decode: why.
    Unreadable(String),
}

/// Reads the source's carry-over in `parts` back (the read-only works go into the step's
/// effects; applied already, they are not applied again).
pub(super) fn gather(
    works: &impl Works,
    m: &Migration,
    step: &mut Step,
    parts: &CarryOverParts,
    source_ns: &str,
) -> Gathered {
    for i in 0..parts.bounded() {
        let work = mr::carry_read_work(m, source_ns, i);
        step.effects.push(Effect::ApplyWork(work));
    }
    match read_parts(works, m, parts) {
        Ok(found) => match join_carry_over(&found) {
            Ok(records) => Gathered::Records(records),
            Err(e) => Gathered::Unreadable(e.to_string()),
        },
        Err(have) => Gathered::Waiting(format!(
            "reading what the clusters carry from source hub {}: {have} of {} parts of up to {} KiB back",
            m.from,
            parts.count,
            CARRY_OVER_PART_BYTES / 1024
        )),
    }
}

/// What the clusters carry, as the migration recorded it: inline in status, or in parts (read
/// back from their works' feedback, decoded once per digest). `None` when neither is there.
pub(super) fn carried(
    ctx: &Ctx,
    m: &Migration,
    status: &ManagedClusterMigrationStatus,
) -> Option<Arc<Vec<CarriedCluster>>> {
    if let Some(records) = &status.carry_over {
        return Some(Arc::new(records.clone()));
    }
    let parts = status.carry_over_parts.as_ref()?;
    if let Ok(memo) = ctx.carry_memo.lock()
        && let Some((digest, records)) = memo.get(&m.key)
        && *digest == parts.digest
    {
        return Some(records.clone());
    }
    let works = |hub: &str, name: &str| work_named(ctx, hub, name);
    let records = Arc::new(join_carry_over(&read_parts(&works, m, parts).ok()?).ok()?);
    if let Ok(mut memo) = ctx.carry_memo.lock() {
        memo.insert(m.key.clone(), (parts.digest.clone(), records.clone()));
    }
    Some(records)
}

/// Delivers to the target's agent (`target_ns`) each part its work does not yet carry (of this
/// digest), as [`read_parts`] has them: once delivered, a part is not read, hashed or sent
/// again on every reconcile.
pub(super) async fn deliver_parts(
    ctx: &Ctx,
    m: &Migration,
    parts: &CarryOverParts,
    target_ns: &str,
) -> Result<(), Error> {
    let works = |hub: &str, name: &str| work_named(ctx, hub, name);
    let missing: Vec<usize> = (0..parts.bounded())
        .filter(|&i| delivered(&works, m, parts, i, |_| Some(())).is_none())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let Ok(found) = read_parts(&works, m, parts) else {
        return Ok(());
    };
    for i in missing {
        apply_work(
            ctx,
            &mr::carry_work(m, target_ns, i, &found[i], &parts.digest),
        )
        .await?;
    }
    Ok(())
}

/// The works of a migration's carry-over parts on each hub: the `count` its status names, and
/// any more the watch has seen.
pub(super) fn part_works(ctx: &Ctx, m: &Migration, count: usize) -> Vec<(String, String)> {
    let mut works = Vec::new();
    for (hub, role) in [
        (&m.from, MigrationRole::Source),
        (&m.to, MigrationRole::Target),
    ] {
        for i in 0.. {
            let name = names::carry_over_part(&m.key, role, i);
            if i >= count && work_named(ctx, hub, &name).is_none() {
                break;
            }
            works.push((hub.clone(), name));
        }
    }
    works
}
