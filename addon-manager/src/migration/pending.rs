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
    let blocker = all.items.iter().find(|o| {
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
        step.condition(MIGRATION_STARTED, "False", reasons::WAITING, &message);
        return Ok(Action::await_change());
    }
    step.status.start_time = Some(now());
    // From here on the migration works from this copy: an edit of the spec changes nothing.
    step.status.accepted_spec = Some(mcm.spec.clone());
    step.condition(
        MIGRATION_STARTED,
        "True",
        reasons::STARTED,
        "the migration started",
    );
    step.enter(MigrationPhase::Validating, "checking hubs and clusters");
    Ok(Action::requeue(Duration::from_millis(10)))
}
