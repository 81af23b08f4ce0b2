//! Deploying: the tasks go to both hubs.

use super::*;

/// Deploying, from what was observed: both tasks delivered, then their reports read.
pub(super) fn deploy(
    world: &World,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
) -> Result<Decided, Error> {
    let stage = TaskStage::Deploying;
    let tgt_rev = deliver_target(world, mcm, m, step, stage, vec![], true)?;
    let part = SourcePart::default();
    let Some(src_rev) = deliver_source(world, mcm, m, step, stage, part, true)? else {
        let timed_out = remaining(step, timeouts(mcm).stage).is_none();
        let missing = token_missing(timed_out, timeouts(mcm).stage, RESOURCE_DEPLOYED);
        return Ok(Decided::Wake(step.settle(missing)));
    };
    let (source, source_err) = world.report(MigrationRole::Source, &src_rev);
    let (target, target_err) = world.report(MigrationRole::Target, &tgt_rev);
    // The bootstrap objects travel in a work of their own: the source agent only waits for
    // them, so why they do not arrive is read here.
    let bootstrap_err = world.bootstrap_works(&m.key).find_map(|w| {
        let e = w.manifest_not_applied()?;
        Some(format!("{}: {e}", w.name_any()))
    });
    let seen = Deployed {
        ready: source.as_ref().is_some_and(Feedback::succeeded)
            && target.as_ref().is_some_and(Feedback::succeeded),
        work_error: source_err.or(bootstrap_err).or(target_err),
        timed_out: remaining(step, timeouts(mcm).stage).is_none(),
        what: delivered_what(step),
        clusters: step.status.resolved_clusters.as_ref().map_or(0, Vec::len),
        timeout: timeouts(mcm).stage,
    };
    if seen.ready
        && let Some(source) = &source
    {
        // On to Registering: what the source found of each cluster (ready to switch, still
        // waiting for its klusterlet, held, gone) counts from now, so that Registering's first
        // step releases the ready ones without waiting for the source's first report on it.
        let (names, mut states) = step.clusters();
        let before = states.clone();
        merge_reports(&mut states, Some(&source.states(names.len())), None);
        warn_new_failures(step, &names, &before, &states, "ClusterFailed");
        step.set_states(&states);
    }
    Ok(Decided::Wake(step.settle(seen.outcome(&m.from, &m.to))))
}

/// What Deploying saw of the hubs' reports.
#[derive(Clone, Debug)]
pub(super) struct Deployed {
    /// Both hubs confirmed their part.
    pub(super) ready: bool,
    /// Why a work could not apply, if one could not.
    pub(super) work_error: Option<String>,
    pub(super) timed_out: bool,
    /// What the source was given ([`delivered_what`]).
    pub(super) what: &'static str,
    pub(super) clusters: usize,
    pub(super) timeout: Duration,
}

impl Deployed {
    /// Deploying's decision: on to Registering once both hubs confirmed; a rollback at the
    /// timeout; otherwise wait.
    pub(super) fn outcome(&self, from: &str, to: &str) -> Outcome {
        let suffix = err_suffix(self.work_error.clone());
        if self.ready {
            return Outcome::Enter(
                Said::yes(
                    RESOURCE_DEPLOYED,
                    reasons::DONE,
                    format!(
                        "{} on {from}; {} clusters pre-created on {to}",
                        self.what, self.clusters
                    ),
                ),
                MigrationPhase::Registering,
                "switching clusters".into(),
            );
        }
        if self.timed_out {
            let msg = format!("the hubs did not confirm the delivery in time{suffix}");
            return Outcome::Rollback(
                Some(Said::no(RESOURCE_DEPLOYED, reasons::TIMEOUT, &msg)),
                reasons::TIMEOUT,
                msg,
            );
        }
        Outcome::Wait(
            Said::no(
                RESOURCE_DEPLOYED,
                reasons::WAITING,
                format!(
                    "waiting for {from} to confirm the {} and {to} to pre-create the clusters{suffix}",
                    self.what
                ),
            ),
            Wake::Deadline(self.timeout),
        )
    }
}
