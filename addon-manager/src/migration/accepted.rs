//! The spec a migration runs with once it left Pending (`status.acceptedSpec`): an edit
//! since is reported and changes nothing.

use super::*;

/// The migration as its phases see it: past Pending, with the spec it started with
/// (`status.acceptedSpec`; taken now if an older manager started it without one). An edit since
/// is reported (condition `SpecAccepted` False, a Warning event once) and changes nothing.
pub(super) fn hold_spec(
    mcm: Arc<ManagedClusterMigration>,
    current: MigrationPhase,
    step: &mut Step,
) -> Arc<ManagedClusterMigration> {
    if current == MigrationPhase::Pending {
        return mcm;
    }
    let accepted = step
        .status
        .accepted_spec
        .get_or_insert_with(|| mcm.spec.clone())
        .clone();
    let edited = spec_edits(&accepted, &mcm.spec);
    let was_refused = step
        .status
        .conditions
        .as_deref()
        .and_then(|c| find_condition(c, conditions::SPEC_ACCEPTED))
        .is_some_and(|c| c.status == FALSE);
    if !edited.is_empty() {
        let message = format!(
            "the spec was edited after the migration started ({}); the edit is ignored: the migration goes on with the spec it started with (status.acceptedSpec). To move clusters elsewhere, create another migration",
            edited.join(", ")
        );
        if !was_refused {
            step.event(EventType::Warning, reasons::SPEC_IMMUTABLE, message.clone());
        }
        step.condition(
            conditions::SPEC_ACCEPTED,
            FALSE,
            reasons::SPEC_IMMUTABLE,
            &message,
        );
    } else if was_refused {
        step.condition(
            conditions::SPEC_ACCEPTED,
            TRUE,
            reasons::DONE,
            "the spec is the one the migration started with",
        );
    }
    // The hub the migration goes to: `spec.to`, or the one `spec.toPlacement` chose in
    // Pending (recorded in status.target); the phases see it as `to`.
    let target = step
        .status
        .target
        .clone()
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| accepted.to.clone());
    if !target.is_empty() {
        step.status.target = Some(target.clone());
    }
    if accepted == mcm.spec && accepted.to == target {
        return mcm;
    }
    let mut held = (*mcm).clone();
    held.spec = accepted;
    if held.spec.to.is_empty() {
        held.spec.to = target;
        held.spec.to_placement = None;
    }
    Arc::new(held)
}

/// The top-level spec fields that differ between `accepted` and `now`.
pub(super) fn spec_edits(
    accepted: &ManagedClusterMigrationSpec,
    now: &ManagedClusterMigrationSpec,
) -> Vec<String> {
    let (a, b) = (
        serde_json::to_value(accepted).unwrap_or_default(),
        serde_json::to_value(now).unwrap_or_default(),
    );
    let empty = serde_json::Map::new();
    let (a, b) = (
        a.as_object().unwrap_or(&empty),
        b.as_object().unwrap_or(&empty),
    );
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| match (a.get(k), b.get(k)) {
            (Some(Value::String(x)), Some(Value::String(y))) => format!("{k}: {x} -> {y}"),
            _ => k.clone(),
        })
        .collect()
}
