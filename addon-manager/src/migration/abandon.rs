//! Ending a wait on hubs and clusters: Cleaning's bound on clusters that never come back,
//! and a user's `abandon`. Both mark what no hub confirmed `Unconfirmed`, name it, and let
//! the removal of the migration's objects begin; both are decided from the status, the
//! hubs' reports and the step's clock alone.

use super::*;

/// Whether the migration stopped waiting for its hubs and clusters (condition
/// [`conditions::ABANDONED`]): past Cleaning's bound, or at a user's `abandon`.
pub(super) fn abandoned(status: &ManagedClusterMigrationStatus) -> bool {
    status
        .conditions
        .as_deref()
        .is_some_and(|c| condition_is_true(c, conditions::ABANDONED))
}

/// How long an abandoned migration still waits, in each phase, for each hub to answer the
/// task that phase sends it (a report on it is written only once the hub's agent carried out
/// what it could: taking clusters back, letting copies go); a hub silent this long is given
/// up on too.
pub(super) const ABANDON_GRACE: Duration = Duration::from_secs(60);

/// How much of [`ABANDON_GRACE`] is left in this phase: counted from the later of the user's
/// request (the condition's transition time) and the phase's start. `None`: not abandoned.
pub(super) fn abandon_grace_left(step: &Step) -> Option<Duration> {
    let asked = step
        .status
        .conditions
        .as_deref()
        .and_then(|c| find_condition(c, conditions::ABANDONED))
        .filter(|c| c.status == TRUE)?
        .last_transition_time
        .0;
    let since = step
        .status
        .phase_start_time
        .as_ref()
        .map_or(asked, |p| p.0.max(asked));
    let waited = Duration::try_from(step.now.0.duration_since(since)).unwrap_or_default();
    Some(ABANDON_GRACE.saturating_sub(waited))
}

/// Whether an abandoned migration stops waiting now: each hub answered this phase's task
/// (`answered`), or its grace is over.
pub(super) fn abandon_settled(step: &Step, answered: bool) -> bool {
    abandon_grace_left(step).is_some_and(|left| answered || left.is_zero())
}

/// `outcome`, woken no later than the end of an abandoned migration's grace (no event may
/// come from a silent hub).
pub(super) fn by_abandon_grace(step: &Step, outcome: Outcome) -> Outcome {
    let Some(left) = abandon_grace_left(step).filter(|l| !l.is_zero()) else {
        return outcome;
    };
    let at_grace = left + Duration::from_millis(100);
    match outcome {
        Outcome::Wait(said, wake) => {
            let sooner = match wake {
                Wake::Soon => Wake::Soon,
                Wake::After(d) => Wake::After(d.min(at_grace)),
                Wake::Deadline(t) => match remaining(step, t) {
                    Some(r) if r < at_grace => Wake::Deadline(t),
                    _ => Wake::After(at_grace),
                },
                Wake::Change => Wake::After(at_grace),
            };
            Outcome::Wait(said, sooner)
        }
        other => other,
    }
}

/// How long Cleaning waits for its clusters before it gives up on them ([`give_up`]): twice
/// the stage timeout (past one, it says it is late; past two, it reports the clusters that
/// never came back and ends, so that no powered-off cluster holds the hubs forever).
pub(super) fn cleaning_bound(stage: Duration) -> Duration {
    stage.saturating_mul(2)
}

/// The names of the clusters in `state`.
pub(super) fn names_in(
    names: &[String],
    states: &[ClusterState],
    state: ClusterState,
) -> Vec<String> {
    names
        .iter()
        .zip(states)
        .filter(|(_, s)| **s == state)
        .map(|(n, _)| n.clone())
        .collect()
}

/// The clusters' states once Cleaning gives up on them, or `None` while it may not.
///
/// At its bound (`forced` false) Cleaning gives up only on clusters that have nothing left
/// to wait for but themselves: the target is done, and the source reports every cluster
/// detached or back home but those it reports `RollingBack` (its report is written only once
/// its ManagedCluster accepts the cluster again: one that comes back later is home). A hub
/// that does not answer, or a source that has not taken a cluster back, keeps it waiting:
/// ending then could leave a cluster refused by both hubs (the user's `abandon` decides that,
/// `forced`). Giving up marks every cluster whose place no hub confirmed `Unconfirmed`.
pub(super) fn give_up(
    states: &[ClusterState],
    source: Option<&[ClusterState]>,
    target_done: bool,
    forced: bool,
) -> Option<Vec<ClusterState>> {
    let confirmed = |s: &ClusterState| {
        matches!(
            s,
            ClusterState::Moved | ClusterState::RolledBack | ClusterState::Detached
        ) || s.failure().is_some()
    };
    if !forced {
        let source = source?;
        let settled_but_late = |reported: &ClusterState| {
            matches!(
                reported,
                ClusterState::Detached | ClusterState::RolledBack | ClusterState::RollingBack
            )
        };
        let some_late = source.contains(&ClusterState::RollingBack);
        if !(target_done && some_late && source.iter().all(settled_but_late)) {
            return None;
        }
    }
    Some(
        states
            .iter()
            .map(|s| {
                if confirmed(s) {
                    *s
                } else {
                    ClusterState::Unconfirmed
                }
            })
            .collect(),
    )
}

/// Cleaning gives up on its hubs (past `bound`, or abandoned): what no hub confirmed is
/// marked `Unconfirmed` and named, and the removal of the migration's objects begins.
pub(super) fn gave_up(
    step: &mut Step,
    m: &Migration,
    bound: Duration,
    states: Vec<ClusterState>,
) -> Action {
    step.set_states(&states);
    let unconfirmed = names_in(&step.names(), &states, ClusterState::Unconfirmed);
    if !abandoned(&step.status) {
        let message = format!(
            "Cleaning waited {} for {} and {} to confirm where every cluster is; {}",
            format_duration(bound),
            m.from,
            m.to,
            unconfirmed_message(&unconfirmed, &m.from)
        );
        step.condition(conditions::ABANDONED, TRUE, reasons::UNCONFIRMED, &message);
        step.event(EventType::Warning, reasons::UNCONFIRMED, message);
    }
    step.settle(Outcome::Wait(
        Said::no(
            RESOURCE_CLEANED,
            reasons::REMOVING,
            "stopped waiting for the hubs; removing the migration's objects",
        ),
        Wake::Soon,
    ))
}

/// What a migration that gave up says of the clusters it never saw confirmed.
pub(super) fn unconfirmed_message(unconfirmed: &[String], from: &str) -> String {
    if unconfirmed.is_empty() {
        return "every cluster was confirmed".into();
    }
    let shown: Vec<&str> = unconfirmed.iter().take(20).map(String::as_str).collect();
    let more = unconfirmed.len().saturating_sub(shown.len());
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "not confirmed: {}{more} (status.failures, reason Unconfirmed): check on {from} that each is accepted (hubAcceptsClient true) and Available",
        shown.join(", ")
    )
}
