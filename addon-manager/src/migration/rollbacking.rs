//! Rollbacking: the clusters that did not arrive go back.

use super::*;

pub(super) async fn rollbacking(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
) -> Result<Action, Error> {
    let names = step.status.resolved_clusters.clone().unwrap_or_default();
    let mut states = step.states();
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
            "True",
            reasons::DONE,
            "no cluster had been touched",
        );
        step.enter(MigrationPhase::Cleaning, "rolled back");
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    // The target first: it stops admitting them and removes what it pre-created; the source
    // then takes back each cluster the target has let go.
    let target_view = existing_work(ctx, m, MigrationRole::Target)
        .await?
        .map(|w| Feedback::of(&w));
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
        ctx,
        mcm,
        m,
        step,
        TaskStage::Rollbacking,
        to_roll.clone(),
        true,
    )
    .await?;
    let (target, _) = report(ctx, m, MigrationRole::Target, &target_rev).await?;
    // A target that does not answer (its API or agent down) cannot hold the clusters hostage:
    // after half the stage timeout the source takes back every cluster the target was never
    // seen to admit; the target's pre-created copies go in Cleaning, once it answers again.
    let target_silent = target.is_none() && remaining(step, stage_timeout(mcm) / 2).is_none();
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
    let src_rev = deliver_source(ctx, mcm, m, step, TaskStage::Rollbacking, part, false)
        .await?
        .unwrap_or_default();
    let (source, _) = report(ctx, m, MigrationRole::Source, &src_rev).await?;
    let target_ok = target.as_ref().is_some_and(Feedback::succeeded);
    let source_ok =
        source.as_ref().is_some_and(Feedback::succeeded) && source_list.len() == to_roll.len();
    mark_rolled_back(&mut states, source.as_ref());
    step.set_states(&states);
    let back = states
        .iter()
        .filter(|s| **s == ClusterState::RolledBack)
        .count();
    if (target_ok || target_silent) && source_ok {
        let mut msg = format!(
            "{} clusters back on {} and Available; {} stay on {}",
            to_roll.len(),
            m.from,
            ClusterState::counts(&states).registered,
            m.to
        );
        if !target_ok {
            msg.push_str(&format!(
                "; {} did not answer, so its pre-created copies are removed once it is back",
                m.to
            ));
        }
        step.condition(RESOURCE_ROLLED_BACK, "True", reasons::DONE, &msg);
        step.enter(MigrationPhase::Cleaning, &msg);
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    if remaining(step, stage_timeout(mcm)).is_none() {
        let msg = format!(
            "rollback did not finish in time: {back} of {} clusters verified back on {}",
            to_roll.len(),
            m.from
        );
        step.condition(RESOURCE_ROLLED_BACK, "False", reasons::TIMEOUT, &msg);
        step.enter(MigrationPhase::Cleaning, &msg);
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    let cause = step
        .status
        .conditions
        .as_deref()
        .and_then(|c| find_condition(c, RESOURCE_ROLLED_BACK))
        .map(|c| c.reason.clone())
        .unwrap_or_default();
    let mut msg = format!(
        "rolling back: {back} of {} clusters back on {}",
        to_roll.len(),
        m.from
    );
    if target.is_none() {
        msg.push_str(&format!("; waiting for {} to answer", m.to));
        if target_silent {
            msg.push_str(", taking the clusters back without it");
        }
    }
    step.condition(RESOURCE_ROLLED_BACK, "False", &cause, &msg);
    if target.is_none() && !target_silent {
        // Wake up when the target's grace ends (or earlier, on its report).
        return Ok(until(step, stage_timeout(mcm) / 2));
    }
    Ok(until(step, stage_timeout(mcm)))
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
