//! Cleaning: moved clusters detached, the rest taken back, the temporary objects removed, the verdict.

use super::*;

/// How long Cleaning waits for the migration's objects to go before it looks again without an
/// event.
const REMOVAL_RECHECK: Duration = Duration::from_secs(30);

/// How many of the migration's works, or of its ManagedServiceAccounts, Cleaning removes at
/// once (a migration has at most 64 ManagedServiceAccounts and a few dozen works).
const REMOVALS_AT_ONCE: usize = 16;

pub(super) async fn cleaning(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
) -> Result<Action, Error> {
    // The hubs' part is recorded as done (reason `Removing`) before the works are removed, so
    // that a work gone afterwards is not taken for one still to deliver.
    if touched(&step.status) && !hubs_part_done(&step.status) {
        return delivering(ctx, mcm, m, step, TaskStage::Cleaning, hubs_clean).await;
    }
    // Works first (their objects go with them), and the bootstrap credentials last. Their
    // removal is watched (works and ManagedServiceAccounts carry the migration's labels and
    // wake it when they go, `observed.rs`): the requeue only bounds the wait should an event
    // be missed.
    let parts = step.status.carry_over_parts.as_ref();
    if !remove_everything(ctx, m, parts, abandoned(&step.status)).await? {
        return Ok(step.settle(Outcome::Wait(
            Said::no(
                RESOURCE_CLEANED,
                reasons::REMOVING,
                "waiting for the hubs to remove the migration's objects",
            ),
            Wake::After(REMOVAL_RECHECK),
        )));
    }
    let counts = ClusterState::counts(&step.states());
    let end = end_of(&step.status, &counts, max_failures(mcm));
    let unconfirmed = names_in(&step.names(), &step.states(), ClusterState::Unconfirmed);
    Ok(step.settle(finished(end, &counts, m, &unconfirmed)))
}

/// Whether the hubs' part of Cleaning is over (`ResourceCleaned` reason `Removing`: the hubs
/// confirmed, or Cleaning gave up on them). An abandoned migration still runs it: that is
/// where it waits for the hubs' answers and names what they did not confirm.
pub(super) fn hubs_part_done(status: &ManagedClusterMigrationStatus) -> bool {
    status
        .conditions
        .as_deref()
        .and_then(|c| find_condition(c, RESOURCE_CLEANED))
        .is_some_and(|c| c.reason == reasons::REMOVING)
}

/// How a migration ends once Cleaning removed everything ([`verdict`]); one that stopped
/// waiting for its hubs fails, whatever moved: someone must check what it could not confirm.
pub(super) fn end_of(
    status: &ManagedClusterMigrationStatus,
    counts: &ClusterCounts,
    max_failures: usize,
) -> MigrationPhase {
    if abandoned(status) {
        return MigrationPhase::Failed;
    }
    let rolled_back_cleanly = status
        .conditions
        .as_deref()
        .and_then(|cs| find_condition(cs, RESOURCE_ROLLED_BACK))
        .is_none_or(|c| c.status == TRUE);
    verdict(
        status.rollback_cause.as_deref(),
        rolled_back_cleanly,
        counts,
        max_failures,
    )
}

/// The hubs' part of Cleaning: the target confirms what arrived, the source detaches it and
/// takes back the rest.
pub(super) fn hubs_clean(
    world: &World,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
) -> Result<Decided, Error> {
    let (names, mut states) = step.clusters();
    // Whatever did not arrive goes back, and so does a cluster the target lost since.
    let rollback: Vec<String> = names
        .iter()
        .zip(&states)
        .filter(|(_, s)| !s.arrived())
        .map(|(n, _)| n.clone())
        .collect();
    let tgt = deliver_target(
        world,
        mcm,
        m,
        step,
        TaskStage::Cleaning,
        rollback.clone(),
        false,
    )?;
    // Before the source lets go of a cluster that arrived, the target says again that it
    // has it; the verdict goes into status before the source hears of it.
    let (target, _) = world.report(MigrationRole::Target, &tgt);
    let before = states.clone();
    let late = remaining(step, timeouts(mcm).stage).is_none();

    recheck_arrived(
        &mut states,
        target.as_ref().map(|f| f.states(names.len())).as_deref(),
        late,
    );
    if states != before {
        warn_new_failures(step, &names, &before, &states, "ClusterLost");
        step.set_states(&states);
        return Ok(Decided::Wake(Action::requeue(Duration::from_millis(10))));
    }
    let detach: Vec<String> = names
        .iter()
        .zip(&states)
        .filter(|(_, s)| **s == ClusterState::Moved)
        .map(|(n, _)| n.clone())
        .collect();
    let part = SourcePart {
        rollback: rollback.clone(),
        detach: detach.clone(),
        ..Default::default()
    };
    let src =
        deliver_source(world, mcm, m, step, TaskStage::Cleaning, part, false)?.unwrap_or_default();
    let (source, _) = world.report(MigrationRole::Source, &src);
    mark_rolled_back(&mut states, source.as_ref());
    let bound = cleaning_bound(timeouts(mcm).stage);
    let forced = abandon_settled(step, target.is_some() && source.is_some());
    if forced || remaining(step, bound).is_none() {
        let reported = source.as_ref().map(|f| f.states(names.len()));
        let target_done = target.as_ref().is_some_and(Feedback::succeeded);
        if let Some(given_up) = give_up(&states, reported.as_deref(), target_done, forced) {
            return Ok(Decided::Wake(gave_up(step, m, bound, given_up)));
        }
    }
    step.set_states(&states);
    let seen = Cleaned {
        rollback: rollback.len(),
        detach: detach.len(),
        unconfirmed: states
            .iter()
            .filter(|s| **s == ClusterState::Available)
            .count(),
        source: source.as_ref().map(Feedback::succeeded),
        target: target.as_ref().map(Feedback::succeeded),
        late,
        past_bound: remaining(step, bound).is_none(),
        timeout: timeouts(mcm).stage,
    };
    let outcome = by_abandon_grace(step, seen.outcome(&m.from, &m.to));
    Ok(Decided::Wake(step.settle(outcome)))
}

/// What the hubs' part of Cleaning saw.
#[derive(Clone, Debug)]
pub(super) struct Cleaned {
    /// Clusters the source takes back, and moved clusters it detaches.
    pub(super) rollback: usize,
    pub(super) detach: usize,
    /// Arrived clusters the target has not confirmed yet.
    pub(super) unconfirmed: usize,
    /// Each hub's answer: `None` when it did not answer, else whether it is done.
    pub(super) source: Option<bool>,
    pub(super) target: Option<bool>,
    /// Past the stage timeout.
    pub(super) late: bool,
    /// Past [`cleaning_bound`] (and still waiting: a hub must act).
    pub(super) past_bound: bool,
    /// The stage timeout; Cleaning gives up at [`cleaning_bound`] of it.
    pub(super) timeout: Duration,
}

impl Cleaned {
    /// When a Cleaning that waits for a hub looks again without an event: at its bound, then
    /// every stage timeout (past the bound nothing is due at a set time).
    fn next_look(&self) -> Wake {
        if self.past_bound {
            Wake::After(self.timeout)
        } else {
            Wake::Deadline(cleaning_bound(self.timeout))
        }
    }

    /// The hubs' part of Cleaning: done once both hubs are and every arrived cluster is
    /// confirmed (the removal follows). Removing the works and the token without the hubs'
    /// word could leave a cluster refused by its source or moved but still listed there, so
    /// a silent hub is waited for (past the stage timeout the condition says so); a cluster
    /// that alone is late is given up on at [`cleaning_bound`] ([`give_up`]).
    pub(super) fn outcome(&self, from: &str, to: &str) -> Outcome {
        if self.target.is_none() && self.rollback > 0 {
            // Only the target can remove its pre-created copies of the clusters that did not
            // arrive; its work stays until it has, however long it is unreachable.
            return Outcome::Wait(
                Said::no(
                    RESOURCE_CLEANED,
                    reasons::WAITING,
                    format!(
                        "waiting for {to} to answer: it must remove its pre-created copies of {} clusters that did not arrive",
                        self.rollback
                    ),
                ),
                self.next_look(),
            );
        }
        let done = self.unconfirmed == 0 && self.source == Some(true) && self.target == Some(true);
        if done {
            return Outcome::Wait(
                Said::no(
                    RESOURCE_CLEANED,
                    reasons::REMOVING,
                    "the hubs are done; removing the migration's objects",
                ),
                Wake::Soon,
            );
        }
        let silent: Vec<&str> = [(from, self.source.is_none()), (to, self.target.is_none())]
            .into_iter()
            .filter(|(_, s)| *s)
            .map(|(h, _)| h)
            .collect();
        let mut msg = format!(
            "waiting for {from} to detach {} moved clusters and take back {}",
            self.detach, self.rollback
        );
        if self.unconfirmed > 0 {
            msg.push_str(&format!(
                "; {} arrived clusters are not Available on {to} now, and are detached once they are",
                self.unconfirmed
            ));
        }
        if !silent.is_empty() {
            msg.push_str(&format!("; no answer from {}", silent.join(" and ")));
        }
        if self.late {
            msg.push_str(&format!(
                " (past the stage timeout: clusters a hub must still act on stay until the hubs confirm; past {} only clusters that have to come back themselves are given up on; annotate the migration request=abandon to stop waiting)",
                format_duration(cleaning_bound(self.timeout))
            ));
            return Outcome::Wait(
                Said::no(RESOURCE_CLEANED, reasons::TIMEOUT, msg),
                self.next_look(),
            );
        }
        Outcome::Wait(
            Said::no(RESOURCE_CLEANED, reasons::WAITING, msg),
            Wake::Deadline(self.timeout),
        )
    }
}

/// The end of Cleaning: everything removed, and the migration ends as `end` says.
pub(super) fn finished(
    end: MigrationPhase,
    c: &ClusterCounts,
    m: &Migration,
    unconfirmed: &[String],
) -> Outcome {
    // The counts keep each cluster's last state (a refused cluster stays "failed"), so the
    // ones that stayed are the ones that did not move.
    let not_moved = (c.total - c.registered).max(0);
    let mut why = format!(
        "{} of {} clusters moved from {} to {}; {not_moved} stayed on {}",
        c.registered, c.total, m.from, m.to, m.from
    );
    if !unconfirmed.is_empty() {
        why.push_str("; ");
        why.push_str(&unconfirmed_message(unconfirmed, &m.from));
    }
    Outcome::Enter(
        Said::yes(
            RESOURCE_CLEANED,
            reasons::DONE,
            format!(
                "temporary objects removed from {} and {}; bootstrap ServiceAccount revoked",
                m.from, m.to
            ),
        ),
        end,
        why,
    )
}

/// Cleaning: the target's word (`target`, its report on the current Cleaning task) on each
/// cluster recorded as arrived, before the source may detach it. Available there: `Moved`
/// (the source detaches it). Refused there or gone from it: `Lost` (not detached; the source
/// takes it back). Accepted there but not Available (its lease late): left for now, and
/// `Moved` once `past_timeout` (it belongs to the hub that accepts it). Without a report,
/// nothing changes.
pub fn recheck_arrived(
    states: &mut [ClusterState],
    target: Option<&[ClusterState]>,
    past_timeout: bool,
) {
    let Some(target) = target else { return };
    for (s, t) in states.iter_mut().zip(target) {
        if *s != ClusterState::Available {
            continue;
        }
        *s = match t {
            ClusterState::Available => ClusterState::Moved,
            ClusterState::Refused | ClusterState::Pending => ClusterState::Lost,
            _ if past_timeout => ClusterState::Moved,
            _ => ClusterState::Available,
        };
    }
}

/// How a migration ends, from why it rolled back (`cause`, as first recorded; `None`: it did
/// not), whether that rollback finished, the final counts and the failures the spec allows:
/// Completed only if some cluster moved, those that did not are within `maxFailures`, and a
/// rollback there was came from clusters the target refused (within that budget) and finished.
/// Any other cause (FailureBudgetExceeded, Timeout, Deleted, Error) fails the migration.
pub(super) fn verdict(
    cause: Option<&str>,
    rolled_back_cleanly: bool,
    counts: &ClusterCounts,
    max_failures: usize,
) -> MigrationPhase {
    let not_moved = (counts.total - counts.registered).max(0) as usize;
    let benign = match cause {
        None => true,
        Some("Refused") => rolled_back_cleanly,
        Some(_) => false,
    };
    if benign && counts.registered > 0 && not_moved <= max_failures {
        MigrationPhase::Completed
    } else {
        MigrationPhase::Failed
    }
}

/// Whether the migration may have touched clusters: it left Initializing (its
/// `ResourceInitialized` condition turned True in the same status write that entered
/// Deploying, before the first task that changes a cluster went out).
pub(super) fn touched(status: &ManagedClusterMigrationStatus) -> bool {
    status
        .conditions
        .as_deref()
        .is_some_and(|c| condition_is_true(c, RESOURCE_INITIALIZED))
}

/// Deletes the works (the bootstrap work too) and the ManagedServiceAccounts; true once all
/// are gone. The ManagedServiceAccounts go only after the works, so a klusterlet mid-switch
/// never loses its bootstrap credentials while the target still expects it.
///
/// A migration that gave up on its hubs (`deleting_is_gone`) counts an object being deleted
/// as gone: a hub that never comes back never lets its works go (their finalizer is its
/// work agent's), and what they applied there goes when it does.
pub(super) async fn remove_everything(
    ctx: &Ctx,
    m: &Migration,
    parts: Option<&CarryOverParts>,
    deleting_is_gone: bool,
) -> Result<bool, Error> {
    if m.to.is_empty() {
        // No target was ever chosen (a `toPlacement` refused in Pending): nothing was created
        // anywhere.
        return Ok(true);
    }
    let parts = part_works(ctx, m, parts.map_or(0, CarryOverParts::bounded));
    let works_of = [
        (m.from.as_str(), names::migration_bootstrap_work(&m.key)),
        (
            m.from.as_str(),
            names::migration_work(&m.key, MigrationRole::Source),
        ),
        (
            m.to.as_str(),
            names::migration_work(&m.key, MigrationRole::Target),
        ),
    ];
    let extra = extra_works(ctx, m)
        .into_iter()
        .map(|(hub, name, _)| (hub, name));
    let works: Vec<(String, String)> = works_of
        .into_iter()
        .map(|(hub, name)| (hub.to_owned(), name))
        .chain(parts)
        .chain(extra)
        .collect();
    // Side by side (each is a read or a delete of its own), a few at a time.
    let mut removed = Vec::with_capacity(works.len());
    for chunk in works.chunks(REMOVALS_AT_ONCE) {
        let some = chunk
            .iter()
            .map(|(hub, name)| remove_work(ctx, hub, name, deleting_is_gone));
        removed.extend(futures::future::try_join_all(some).await?);
    }
    if !removed.iter().all(|gone| *gone) {
        return Ok(false);
    }
    // Every bootstrap identity the migration has, however many it issued.
    let msas: Api<ManagedServiceAccount> = Api::namespaced(ctx.client.clone(), &m.to);
    // The API server's word: the watch may not have seen the last one yet.
    let left = service_accounts_now(ctx, m).await?;
    let revoke: Vec<&String> = left
        .iter()
        .filter(|(_, msa)| msa.metadata.deletion_timestamp.is_none())
        .map(|(name, _)| name)
        .collect();
    for chunk in revoke.chunks(REMOVALS_AT_ONCE) {
        let msas = &msas;
        let some = chunk.iter().map(|name| async move {
            ignore_not_found(msas.delete(name, &DeleteParams::default()).await)
                .map_err(ctx_err(format!("revoking ManagedServiceAccount {name}")))
        });
        futures::future::try_join_all(some).await?;
    }
    let gone = left
        .values()
        .all(|msa| deleting_is_gone && msa.metadata.deletion_timestamp.is_some());
    if gone {
        ctx.observed.forget_tokens(&m.to, &m.identity_names);
    }
    Ok(gone)
}
