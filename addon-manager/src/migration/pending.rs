//! Pending: one migration per pair of hubs at a time.

use super::*;

pub(super) fn active(m: &ManagedClusterMigration) -> bool {
    !phase(m).is_terminal()
}

pub(super) fn same_pair(a: &ManagedClusterMigration, b: &ManagedClusterMigration) -> bool {
    let pair = |m: &ManagedClusterMigration| {
        let spec = m.effective_spec();
        let mut p = [spec.from.clone(), spec.to.clone()];
        p.sort();
        p
    };
    pair(a) == pair(b)
}

pub(super) fn older(a: &ManagedClusterMigration, b: &ManagedClusterMigration) -> bool {
    (a.creation_timestamp(), a.namespace(), a.name_any())
        < (b.creation_timestamp(), b.namespace(), b.name_any())
}

pub(super) async fn pending(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    step: &mut Step,
) -> Result<Action, Error> {
    let all = Api::<ManagedClusterMigration>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(ctx_err("listing migrations"))?;
    let outcome = started(mcm, &all.items);
    if matches!(outcome, Outcome::Enter(..)) {
        step.status.start_time = Some(now());
        // From here on the migration works from this copy: an edit of the spec changes nothing.
        step.status.accepted_spec = Some(mcm.spec.clone());
    }
    Ok(step.settle(outcome))
}

/// Whether `mcm` may start, given every migration (`all`): not while another active one on
/// the same pair of hubs started before it or is older and pending too (one migration per pair
/// of hubs at a time; the waiting one is woken when that one changes).
pub(super) fn started(mcm: &ManagedClusterMigration, all: &[ManagedClusterMigration]) -> Outcome {
    let blocker = all.iter().find(|o| {
        o.uid() != mcm.uid()
            && active(o)
            && same_pair(o, mcm)
            && (phase(o) != MigrationPhase::Pending || older(o, mcm))
    });
    if let Some(b) = blocker {
        let message = format!(
            "waiting for migration {}/{} ({} -> {}) to finish: one migration per pair of hubs at a time",
            b.namespace().unwrap_or_default(),
            b.name_any(),
            b.effective_spec().from,
            b.effective_spec().to
        );
        return Outcome::Wait(
            Said::no(MIGRATION_STARTED, reasons::WAITING, message),
            Wake::Change,
        );
    }
    Outcome::Enter(
        Said::yes(MIGRATION_STARTED, reasons::STARTED, "the migration started"),
        MigrationPhase::Validating,
        "checking hubs and clusters".into(),
    )
}
