//! Rollbacking: the clusters that did not arrive go back.

use super::*;

/// Rollbacking, from what was observed: the target lets go first, the source takes back
/// what the target let go (or, the target silent past its grace, never admitted).
pub(super) fn roll_back(
    world: &World,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
) -> Result<Decided, Error> {
    let (names, mut states) = step.clusters();
    let to_roll: Vec<String> = names
        .iter()
        .zip(&states)
        .filter(|(_, s)| **s != ClusterState::Available)
        .map(|(n, _)| n.clone())
        .collect();
    // Nothing was delivered yet (failed while initializing): only the credentials go. Decided
    // from status, not from whether a work is still there (one deleted by hand must not make
    // the migration forget the clusters it touched).
    if !touched(&step.status) {
        step.condition(
            RESOURCE_ROLLED_BACK,
            TRUE,
            reasons::DONE,
            "no cluster had been touched",
        );
        step.enter(MigrationPhase::Cleaning, "rolled back");
        return Ok(Decided::Wake(Action::requeue(Duration::from_millis(10))));
    }
    // The target first: it stops admitting them and removes what it pre-created; the source
    // then takes back each cluster the target has let go.
    let target_view = world.target_work.as_deref().map(Feedback::of);
    let target_states = target_view.as_ref().map(|f| f.states(names.len()));
    let target_done: BTreeSet<&String> = match &target_states {
        Some(ts) => names
            .iter()
            .zip(ts)
            .filter(|(_, s)| **s == ClusterState::RolledBack)
            .map(|(n, _)| n)
            .collect(),
        None => BTreeSet::new(),
    };
    // The bootstrap identity keeps its rights while rolling back: a klusterlet that already
    // chose the target must still see its CSR approved to get away again.
    let target_rev = deliver_target(
        world,
        mcm,
        m,
        step,
        TaskStage::Rollbacking,
        to_roll.clone(),
        true,
    )?;
    let (target, _) = world.report(MigrationRole::Target, &target_rev);
    // A target that does not answer (its API or agent down) cannot hold the clusters hostage:
    // after half the stage timeout the source takes back every cluster the target was never
    // seen to admit; the target's pre-created copies go in Cleaning, once it answers again.
    let target_silent = target.is_none()
        && (remaining(step, timeouts(mcm).stage / 2).is_none() || abandoned(&step.status));
    let source_list = source_takes_back(&names, &states, &to_roll, &target_done, target_silent);
    // Clusters that arrived after all stay where they are.
    if let Some(t) = &target {
        let ts = t.states(names.len());
        for (i, s) in states.iter_mut().enumerate() {
            if ts[i] == ClusterState::Available && *s != ClusterState::Available {
                *s = ClusterState::Available;
            }
        }
    }
    let part = SourcePart {
        rollback: source_list.clone(),
        ..Default::default()
    };
    let src_rev = deliver_source(world, mcm, m, step, TaskStage::Rollbacking, part, false)?
        .unwrap_or_default();
    let (source, _) = world.report(MigrationRole::Source, &src_rev);
    let target_ok = target.as_ref().is_some_and(Feedback::succeeded);
    let source_ok =
        source.as_ref().is_some_and(Feedback::succeeded) && source_list.len() == to_roll.len();
    mark_rolled_back(&mut states, source.as_ref());
    step.set_states(&states);
    let seen = RolledBack {
        to_roll: to_roll.len(),
        back: states
            .iter()
            .filter(|s| **s == ClusterState::RolledBack)
            .count(),
        stay: ClusterState::counts(&states).registered,
        target_answered: target.is_some(),
        target_ok,
        target_silent,
        source_ok,
        // Abandoned, the rollback ends once the source acted on its task (or was silent
        // past the grace), not once the clusters are back.
        timed_out: remaining(step, timeouts(mcm).stage).is_none()
            || abandon_settled(step, source.is_some()),
        cause: step
            .status
            .conditions
            .as_deref()
            .and_then(|c| find_condition(c, RESOURCE_ROLLED_BACK))
            .map(|c| c.reason.clone())
            .unwrap_or_default(),
        timeout: timeouts(mcm).stage,
    };
    let outcome = by_abandon_grace(step, seen.outcome(&m.from, &m.to));
    Ok(Decided::Wake(step.settle(outcome)))
}

/// What Rollbacking saw once the reports were in.
#[derive(Clone, Debug)]
pub(super) struct RolledBack {
    /// Clusters to roll back, and how many of them are back on the source.
    pub(super) to_roll: usize,
    pub(super) back: usize,
    /// Clusters that arrived and stay on the target.
    pub(super) stay: i32,
    pub(super) target_answered: bool,
    pub(super) target_ok: bool,
    /// The target has been silent past its grace.
    pub(super) target_silent: bool,
    pub(super) source_ok: bool,
    pub(super) timed_out: bool,
    /// The reason the rollback condition carries (its cause).
    pub(super) cause: String,
    pub(super) timeout: Duration,
}

impl RolledBack {
    /// Rollbacking's decision: on to Cleaning once the source has every cluster back and the
    /// target let them go (or stayed silent past its grace), or at the timeout; otherwise wait
    /// (until the target's grace ends while it is silent).
    pub(super) fn outcome(&self, from: &str, to: &str) -> Outcome {
        if (self.target_ok || self.target_silent) && self.source_ok {
            let mut msg = format!(
                "{} clusters back on {from} and Available; {} stay on {to}",
                self.to_roll, self.stay
            );
            if !self.target_ok {
                msg.push_str(&format!(
                    "; {to} did not answer, so its pre-created copies are removed once it is back"
                ));
            }
            return Outcome::Enter(
                Said::yes(RESOURCE_ROLLED_BACK, reasons::DONE, &msg),
                MigrationPhase::Cleaning,
                msg,
            );
        }
        if self.timed_out {
            let msg = format!(
                "rollback did not finish in time: {} of {} clusters verified back on {from}",
                self.back, self.to_roll
            );
            return Outcome::Enter(
                Said::no(RESOURCE_ROLLED_BACK, reasons::TIMEOUT, &msg),
                MigrationPhase::Cleaning,
                msg,
            );
        }
        let mut msg = format!(
            "rolling back: {} of {} clusters back on {from}",
            self.back, self.to_roll
        );
        if !self.target_answered {
            msg.push_str(&format!("; waiting for {to} to answer"));
            if self.target_silent {
                msg.push_str(", taking the clusters back without it");
            }
        }
        // While the target is silent within its grace, wake when the grace ends (or earlier,
        // on its report).
        let wake = if !self.target_answered && !self.target_silent {
            Wake::Deadline(self.timeout / 2)
        } else {
            Wake::Deadline(self.timeout)
        };
        Outcome::Wait(Said::no(RESOURCE_ROLLED_BACK, &self.cause, msg), wake)
    }
}

/// Which clusters to roll back the source takes back now: those the target has let go
/// (`target_done`) and, when the target has been silent past its grace, those it was never
/// seen to admit (a cluster recorded `Joined` or `Available` there may be connected to it;
/// taking it back behind the target's back would leave it accepted by both hubs).
pub(super) fn source_takes_back(
    names: &[String],
    states: &[ClusterState],
    to_roll: &[String],
    target_done: &BTreeSet<&String>,
    target_silent: bool,
) -> Vec<String> {
    names
        .iter()
        .zip(states)
        .filter(|(n, s)| {
            to_roll.contains(n)
                && (target_done.contains(n)
                    || (target_silent
                        && !matches!(s, ClusterState::Joined | ClusterState::Available)))
        })
        .map(|(n, _)| n.clone())
        .collect()
}

/// Marks the clusters the source reports back home as rolled back (failures keep their
/// reason).
pub(super) fn mark_rolled_back(states: &mut [ClusterState], source: Option<&Feedback>) {
    let Some(sf) = source else { return };
    let ss = sf.states(states.len());
    for (s, reported) in states.iter_mut().zip(ss) {
        if reported == ClusterState::RolledBack && !s.arrived() && s.failure().is_none() {
            *s = ClusterState::RolledBack;
        }
    }
}
