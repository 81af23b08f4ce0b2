//! Registering: clusters released in waves, admitted by the target.

use super::*;

/// The outcome of one Registering step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Clusters are still switching or waiting.
    Running,
    /// Every cluster is registered on the target.
    Done,
    /// Nothing more can happen: some clusters must be rolled back.
    Stuck,
}

/// Advances the manager's per-cluster states from the hubs' reports and releases the next
/// clusters (a sliding window of `max_concurrency`; no new release once failures exceed
/// `max_failures`). Pure, so the wave logic is unit-tested.
pub fn advance(
    states: &mut [ClusterState],
    source: Option<&[ClusterState]>,
    target: Option<&[ClusterState]>,
    max_concurrency: usize,
    max_failures: usize,
) -> Progress {
    merge_reports(states, source, target);
    let failed = states.iter().filter(|s| s.failure().is_some()).count();
    let mut in_flight = states.iter().filter(|s| s.in_flight()).count();
    if failed <= max_failures {
        for s in states.iter_mut() {
            if in_flight >= max_concurrency.max(1) {
                break;
            }
            if *s == ClusterState::Ready {
                *s = ClusterState::Switching;
                in_flight += 1;
            }
        }
    }
    if states.iter().all(|s| *s == ClusterState::Available) {
        return Progress::Done;
    }
    let waiting = states.iter().any(|s| s.in_flight());
    let may_release = failed <= max_failures
        && states.iter().any(|s| {
            matches!(
                s,
                ClusterState::Ready
                    | ClusterState::Waiting
                    | ClusterState::Valid
                    | ClusterState::Blocked
                    | ClusterState::Pending
            )
        });
    if waiting || may_release {
        Progress::Running
    } else {
        Progress::Stuck
    }
}

/// Merges the hubs' reports into the manager's per-cluster states: the target's word on a
/// cluster (Available, Refused, admitted) first; the source's readiness for one not released.
/// Registering does this on each step; Deploying once, as it hands over to Registering, so
/// that the clusters the source already found ready are released on Registering's first step
/// rather than after the source's first report on it.
pub(super) fn merge_reports(
    states: &mut [ClusterState],
    source: Option<&[ClusterState]>,
    target: Option<&[ClusterState]>,
) {
    for (i, s) in states.iter_mut().enumerate() {
        let t = target.map(|t| t[i]);
        let src = source.map(|s| s[i]);
        match (*s, t) {
            (ClusterState::Available, _) => {}
            (_, Some(ClusterState::Available)) => *s = ClusterState::Available,
            (_, Some(ClusterState::Refused)) => *s = ClusterState::Refused,
            // Admitted by the target (its klusterlet joined there): recorded, so that a
            // rollback without the target's word never takes it back behind its back.
            (ClusterState::Switching, Some(ClusterState::Joined)) => *s = ClusterState::Joined,
            (
                ClusterState::Switching
                | ClusterState::Joined
                | ClusterState::Refused
                | ClusterState::NotFound,
                _,
            ) => {}
            _ => {
                if let Some(src) = src
                    && matches!(
                        src,
                        ClusterState::Waiting
                            | ClusterState::Ready
                            | ClusterState::Blocked
                            | ClusterState::NotFound
                    )
                {
                    *s = src;
                }
            }
        }
    }
}

/// A Warning event (`reason`) for each cluster that failed between `before` and `after`.
pub(super) fn warn_new_failures(
    step: &mut Step,
    names: &[String],
    before: &[ClusterState],
    after: &[ClusterState],
    reason: &str,
) {
    for ((name, b), a) in names.iter().zip(before).zip(after) {
        if let Some((_, why)) = a.failure()
            && b.failure().is_none()
        {
            step.event(EventType::Warning, reason, format!("{name} {why}"));
        }
    }
}

pub(super) fn released(names: &[String], states: &[ClusterState]) -> Vec<String> {
    names
        .iter()
        .zip(states)
        .filter(|(_, s)| is_released(**s))
        .map(|(n, _)| n.clone())
        .collect()
}

/// Whether the manager has released a cluster in this state (it may have arrived since).
fn is_released(s: ClusterState) -> bool {
    matches!(
        s,
        ClusterState::Switching
            | ClusterState::Joined
            | ClusterState::Available
            | ClusterState::Refused
    )
}

/// Registering, from what was observed: the release list delivered, the reports merged into
/// the clusters' states, the next clusters released.
pub(super) fn register(
    world: &World,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
) -> Result<Decided, Error> {
    let (names, mut states) = step.clusters();
    let timeout = timeouts(mcm).registering;
    let stage = TaskStage::Registering;
    // Deliver what the status says (the release list), then read the reports on it. The
    // target hears of a release first: the source lets a cluster go only once the target has
    // reported on a revision that lists it (and so has recorded when it was released, the
    // earliest its bootstrap CSR may be asked for); until then the source keeps what it had.
    let tgt_rev = deliver_target(world, mcm, m, step, stage, vec![], true)?;
    let (target, _) = world.report(MigrationRole::Target, &tgt_rev);
    // What the target recorded as released, whichever revision it last answered.
    let recorded = world.recorded_releases(names.len());
    let release = if target.is_some() {
        released(&names, &states)
    } else {
        // The target is silent on this revision: release no more than the source was told
        // (as the API server has it: the watch may not have seen the last delivery yet)...
        let Some(task_now) = &world.source_task_now else {
            return Ok(Decided::Need(Need::SourceTaskNow));
        };
        // ... and what the target already recorded as released, whichever revision it last
        // answered: that record (when it learnt of the release, which no earlier bootstrap CSR
        // gets past) is what the wait for its answer stands for. Each wave of releases
        // revises its task, so waiting for an answer on the latest could hold a wave back
        // for as long as new ones keep coming.
        let told: BTreeSet<&str> = task_now
            .as_ref()
            .filter(|t| t.stage == stage)
            .map(|t| t.released_names())
            .unwrap_or_default();
        // And, whatever the source's task says now (its work gone, or re-made), the clusters
        // the target admitted, so that none already let go is held back (on ACM its
        // auto-import freeze would go). Never one the target has not recorded: told first,
        // the source could let a cluster go before the target knew, and the bootstrap CSR
        // it asked for before that would never be approved.
        names
            .iter()
            .zip(&states)
            .zip(&recorded)
            .filter(|((n, s), r)| {
                told.contains(n.as_str())
                    || **s == ClusterState::Joined
                    || (**r && is_released(**s))
            })
            .map(|((n, _), _)| n.clone())
            .collect()
    };
    // Where each release stands (for timing a run from the log): decided, recorded by the
    // target, sent to the source.
    tracing::debug!(
        decided = states.iter().filter(|s| is_released(**s)).count(),
        target_answered = target.is_some(),
        recorded = recorded.iter().filter(|r| **r).count(),
        to_source = release.len(),
        "releases"
    );
    let part = SourcePart {
        released: release,
        ..Default::default()
    };
    let Some(src_rev) = deliver_source(world, mcm, m, step, stage, part, true)? else {
        let timed_out = remaining(step, timeout).is_none();
        let missing = token_missing(timed_out, timeout, CLUSTER_REGISTERED);
        return Ok(Decided::Wake(step.settle(missing)));
    };
    let (source, _) = world.report(MigrationRole::Source, &src_rev);
    let before = states.clone();
    let max_conc = mcm
        .spec
        .max_concurrency
        .map_or(names.len(), |c| c.max(1) as usize);
    let max_fail = max_failures(mcm);
    let progress = advance(
        &mut states,
        source.as_ref().map(|f| f.states(names.len())).as_deref(),
        target.as_ref().map(|f| f.states(names.len())).as_deref(),
        max_conc,
        max_fail,
    );
    warn_new_failures(step, &names, &before, &states, "ClusterFailed");
    step.set_states(&states);
    let seen = Registered {
        progress,
        counts: ClusterState::counts(&states),
        blocked: states
            .iter()
            .filter(|s| **s == ClusterState::Blocked)
            .count(),
        max_failures: max_fail,
        timed_out: remaining(step, timeout).is_none(),
        changed: states != before,
        timeout,
        timeout_text: &format_duration(timeout),
    };
    Ok(Decided::Wake(step.settle(seen.outcome(&m.to))))
}

/// What Registering saw once the reports were merged into the states.
#[derive(Clone, Debug)]
pub(super) struct Registered<'a> {
    pub(super) progress: Progress,
    pub(super) counts: ClusterCounts,
    /// Clusters held by the block annotation.
    pub(super) blocked: usize,
    pub(super) max_failures: usize,
    pub(super) timed_out: bool,
    /// The states changed in this step (the next reconcile delivers the new release list).
    pub(super) changed: bool,
    pub(super) timeout: Duration,
    pub(super) timeout_text: &'a str,
}

impl Registered<'_> {
    /// Registering's decision: on to Cleaning when every cluster is registered; a rollback when
    /// nothing more can happen (`FailureBudgetExceeded` past `maxFailures`, else `Refused`) or
    /// at the timeout; otherwise wait, at once when the states changed.
    pub(super) fn outcome(&self, to: &str) -> Outcome {
        let c = &self.counts;
        match self.progress {
            Progress::Done => {
                return Outcome::Enter(
                    Said::yes(
                        CLUSTER_REGISTERED,
                        reasons::DONE,
                        format!("all {} clusters are Available on {to}", c.total),
                    ),
                    MigrationPhase::Cleaning,
                    "every cluster registered on the target".into(),
                );
            }
            Progress::Stuck => {
                let msg = format!(
                    "{} of {} clusters registered; {} failed",
                    c.registered, c.total, c.failed
                );
                let reason = if c.failed as usize > self.max_failures {
                    "FailureBudgetExceeded"
                } else {
                    "Refused"
                };
                return Outcome::Rollback(
                    Some(Said::no(CLUSTER_REGISTERED, "PartiallyRegistered", &msg)),
                    reason,
                    format!("{msg}; rolling back the clusters that did not arrive"),
                );
            }
            Progress::Running => {}
        }
        if self.timed_out {
            let msg = format!(
                "{} of {} clusters registered within {}",
                c.registered, c.total, self.timeout_text
            );
            return Outcome::Rollback(
                Some(Said::no(CLUSTER_REGISTERED, reasons::TIMEOUT, &msg)),
                reasons::TIMEOUT,
                format!("{msg}; rolling back the others"),
            );
        }
        let mut msg = format!(
            "{} of {} clusters registered on {to}, {} switching",
            c.registered, c.total, c.switching
        );
        if self.blocked > 0 {
            msg.push_str(&format!(
                ", {} held by the {} annotation",
                self.blocked,
                names::annotations::BLOCK_MOVE
            ));
        }
        let wake = if self.changed {
            Wake::Soon
        } else {
            Wake::Deadline(self.timeout)
        };
        Outcome::Wait(Said::no(CLUSTER_REGISTERED, reasons::WAITING, msg), wake)
    }
}
