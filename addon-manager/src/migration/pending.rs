//! Pending: one migration per pair of hubs at a time.

use super::*;

pub(super) fn active(m: &ManagedClusterMigration) -> bool {
    !phase(m).is_terminal()
}

pub(super) fn same_pair(a: &ManagedClusterMigration, b: &ManagedClusterMigration) -> bool {
    fn pair(m: &ManagedClusterMigration) -> [&str; 2] {
        let mut p = [
            m.effective_spec().from.as_str(),
            m.target_hub().unwrap_or_default(),
        ];
        p.sort();
        p
    }
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
    let migrations = Api::<ManagedClusterMigration>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(ctx_err("listing migrations"))?
        .items;
    // An invalid spec goes on to Validating, which says what is wrong with it.
    let placement = match &mcm.spec.to_placement {
        Some(placement) if mcm.spec.validate().is_ok() => {
            let ns = mcm.namespace().unwrap_or_default();
            Some(read_placement(ctx, &ns, placement).await?)
        }
        _ => None,
    };
    Ok(pend(&migrations, placement, mcm, step))
}

/// Pending's decision, from every migration and, for a `toPlacement`, the Placement as read
/// (`None`: there is none to read, the spec names its target or is invalid): the target, then
/// whether it may start now.
pub(super) fn pend(
    migrations: &[ManagedClusterMigration],
    placement: Option<PlacementSeen>,
    mcm: &ManagedClusterMigration,
    step: &mut Step,
) -> Action {
    let target = match (&mcm.spec.to_placement, placement) {
        (Some(name), Some(seen)) => {
            let ns = mcm.namespace().unwrap_or_default();
            let waited = mcm
                .creation_timestamp()
                .map(|t| step.now.0.duration_since(t.0))
                .and_then(|d| Duration::try_from(d).ok())
                .unwrap_or_default();
            let choice = choose_target(
                &mcm.spec.from,
                &format!("{ns}/{name}"),
                seen,
                waited >= timeouts(mcm).stage,
            );
            match choice {
                Ok(hub) => Some(hub),
                Err(outcome) => return step.settle(outcome),
            }
        }
        _ => (!mcm.spec.to.is_empty()).then(|| mcm.spec.to.clone()),
    };
    step.status.target = target.clone();
    let mut chosen = mcm.clone();
    chosen.status.get_or_insert_with(Default::default).target = target;
    let outcome = started(&chosen, migrations);
    if matches!(outcome, Outcome::Enter(..)) {
        step.status.start_time = Some(step.now.clone());
        // From here on the migration works from this copy: an edit of the spec changes nothing.
        step.status.accepted_spec = Some(mcm.spec.clone());
    }
    step.settle(outcome)
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
            b.target_hub().unwrap_or("a hub not chosen yet")
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

/// A Placement on the global hub as read: `None` when it does not exist; else whether it has
/// decided (its `PlacementSatisfied` condition is set) and the hubs its decisions name.
pub(super) type PlacementSeen = Option<(bool, Vec<String>)>;

/// Reads the Placement `name` in `namespace` on the global hub and its PlacementDecisions.
async fn read_placement(ctx: &Ctx, namespace: &str, name: &str) -> Result<PlacementSeen, Error> {
    let placement = Api::<Placement>::namespaced(ctx.client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(ctx_err(format!("reading Placement {namespace}/{name}")))?;
    let Some(placement) = placement else {
        return Ok(None);
    };
    // Upstream's scheduler sets PlacementSatisfied once it has scheduled the Placement (ocm
    // pkg/placement/controllers/scheduling/scheduling_controller.go); before that its
    // decisions say nothing yet.
    let decided = placement
        .status
        .and_then(|s| s.conditions)
        .is_some_and(|c| find_condition(&c, "PlacementSatisfied").is_some());
    let decisions = Api::<PlacementDecision>::namespaced(ctx.client.clone(), namespace)
        .list(&ListParams::default().labels(&cluster::decisions_of(name)))
        .await
        .map_err(ctx_err(format!(
            "listing the PlacementDecisions of {namespace}/{name}"
        )))?;
    Ok(Some((decided, cluster::decided_clusters(decisions))))
}

/// The target hub `spec.toPlacement` (`placement`, as namespace/name) chose for a migration
/// from `from`: the one hub it decided besides the source. Not yet decided: wait (and give up
/// once `gave_up`, the stage timeout since creation); missing, or deciding no hub or several
/// besides the source: refused, nothing touched.
pub(super) fn choose_target(
    from: &str,
    placement: &str,
    seen: PlacementSeen,
    gave_up: bool,
) -> Result<String, Outcome> {
    let Some((decided, hubs)) = seen else {
        return Err(Outcome::invalid(
            reasons::PLACEMENT_NOT_FOUND,
            format!("Placement {placement} (spec.toPlacement) does not exist on the global hub"),
        ));
    };
    if !decided {
        let message = format!("Placement {placement} (spec.toPlacement) has not chosen a hub yet");
        if gave_up {
            return Err(Outcome::invalid(reasons::TARGET_NOT_CHOSEN, message));
        }
        return Err(Outcome::Wait(
            Said::no(MIGRATION_STARTED, reasons::WAITING, message),
            Wake::After(Duration::from_secs(2)),
        ));
    }
    let candidates: Vec<&String> = hubs.iter().filter(|h| *h != from).collect();
    match candidates.as_slice() {
        [hub] => Ok((*hub).clone()),
        [] => Err(Outcome::invalid(
            reasons::TARGET_NOT_CHOSEN,
            format!(
                "Placement {placement} (spec.toPlacement) chose no hub other than the source {from}{}; the hubs it may choose are those of the ManagedClusterSets bound to the namespace, without the source",
                if hubs.is_empty() {
                    String::new()
                } else {
                    format!(" (it chose {})", hubs.join(", "))
                }
            ),
        )),
        several => Err(Outcome::invalid(
            reasons::TARGET_NOT_CHOSEN,
            format!(
                "Placement {placement} (spec.toPlacement) chose {} hubs besides the source ({}); give it numberOfClusters: 1",
                several.len(),
                several
                    .iter()
                    .map(|h| h.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}
