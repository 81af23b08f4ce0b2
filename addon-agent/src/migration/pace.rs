//! How often a task's status is written. A stage's report changes with every cluster that moves
//! on, and each change was one write of the task's status: more than one a cluster. The manager
//! reads the report through the work's status feedback, which the work agent syncs every few
//! seconds, so a report that only moves clusters on is written at most every [`PACE`]; what
//! the manager decides on (the stage's state, the revision answered, a refusal, the carry-over,
//! every cluster come to one state) goes at once. Nothing is lost by waiting: every reconcile
//! computes the whole report again from what it observes, and the one deferred is requeued for
//! when it is due.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use migration_api::migration::MigrationTaskStatus;

/// At most one progress-only write of a task's status this often.
pub(super) const PACE: Duration = Duration::from_secs(1);

/// Whether to write a task's status now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Due {
    /// It says what it said.
    Unchanged,
    Now,
    /// Only clusters moved on, and the last write was less than [`PACE`] ago: again after this.
    After(Duration),
}

/// When to write `new` over `current`, `since_last` after this agent last wrote it (`None`:
/// not since it started).
pub(super) fn due(
    current: Option<&MigrationTaskStatus>,
    new: &MigrationTaskStatus,
    since_last: Option<Duration>,
) -> Due {
    if current == Some(new) {
        return Due::Unchanged;
    }
    let progress_only =
        current.is_some_and(|c| decides_the_same(c, new) && !newly_unanimous(c, new));
    match since_last {
        Some(since) if progress_only && since < PACE => Due::After(PACE - since),
        _ => Due::Now,
    }
}

/// Whether every cluster of `new` is in one state, and was not so in `current`: the report a
/// stage's end waits for (every cluster registered, say) goes at once, not a pace later.
fn newly_unanimous(current: &MigrationTaskStatus, new: &MigrationTaskStatus) -> bool {
    let unanimous = new.cluster_states.as_deref().is_some_and(|states| {
        let mut each = states.chars();
        each.next().is_some_and(|first| each.all(|s| s == first))
    });
    unanimous && current.cluster_states != new.cluster_states
}

/// Records that task `name`'s status was written at `now`, and forgets every write older than
/// [`PACE`]: [`due`] treats those as no write at all, so the map holds only the tasks written
/// within the last [`PACE`], however many tasks come and go in the agent's life (a deleted
/// task is not always reconciled once more to be forgotten).
pub(super) fn record(written: &mut BTreeMap<String, Instant>, name: String, now: Instant) {
    written.retain(|_, at| now.saturating_duration_since(*at) < PACE);
    written.insert(name, now);
}

/// Whether `a` and `b` agree on everything but the clusters' progress (their states, counts,
/// failures and the summary). Every field is named, so a field added to the status counts as
/// one the manager decides on until it is listed here as progress; nothing is copied.
fn decides_the_same(a: &MigrationTaskStatus, b: &MigrationTaskStatus) -> bool {
    let MigrationTaskStatus {
        observed_stage,
        stage_state,
        observed_generation,
        observed_revision,
        carry_over_json,
        carry_over_parts,
        klusterlet_config_shape,
        refusal,
        release_times,
        cluster_states: _,
        clusters: _,
        failures: _,
        message: _,
    } = a;
    *observed_stage == b.observed_stage
        && *stage_state == b.stage_state
        && *observed_generation == b.observed_generation
        && *observed_revision == b.observed_revision
        && *carry_over_json == b.carry_over_json
        && *carry_over_parts == b.carry_over_parts
        && *klusterlet_config_shape == b.klusterlet_config_shape
        && *refusal == b.refusal
        && *release_times == b.release_times
}

#[cfg(test)]
mod tests {
    use super::*;
    use migration_api::migration::TaskStage;
    use migration_api::task_report::StageState;

    fn status(state: StageState, clusters: &str, revision: &str) -> MigrationTaskStatus {
        MigrationTaskStatus {
            observed_stage: Some(TaskStage::Registering),
            observed_revision: Some(revision.into()),
            stage_state: Some(state),
            cluster_states: Some(clusters.into()),
            message: Some(format!("{clusters} moving")),
            ..Default::default()
        }
    }

    #[test]
    fn progress_is_written_at_most_every_pace_and_what_the_manager_decides_on_at_once() {
        let ms = Duration::from_millis;
        let running = status(StageState::Running, "rrs", "r1");
        let moved = status(StageState::Running, "rss", "r1");
        let done = status(StageState::Succeeded, "sss", "r1");
        let answered = status(StageState::Running, "rrs", "r2");
        let mut refused = running.clone();
        refused.refusal = Some("PlacementNotFound".into());
        let cases = [
            (
                "same report",
                Some(&running),
                &running,
                Some(ms(10)),
                Due::Unchanged,
            ),
            ("first report", None, &running, None, Due::Now),
            ("first since start", Some(&running), &moved, None, Due::Now),
            (
                "progress, soon after",
                Some(&running),
                &moved,
                Some(ms(300)),
                Due::After(ms(700)),
            ),
            (
                "progress, a pace later",
                Some(&running),
                &moved,
                Some(PACE),
                Due::Now,
            ),
            (
                "stage state changed",
                Some(&running),
                &done,
                Some(ms(10)),
                Due::Now,
            ),
            (
                "new revision answered",
                Some(&running),
                &answered,
                Some(ms(10)),
                Due::Now,
            ),
            ("refusal", Some(&running), &refused, Some(ms(10)), Due::Now),
            (
                "every cluster in one state now",
                Some(&moved),
                &status(StageState::Running, "sss", "r1"),
                Some(ms(10)),
                Due::Now,
            ),
            (
                "every cluster in one state, the summary alone changed",
                Some(&status(StageState::Running, "sss", "r1")),
                &{
                    let mut s = status(StageState::Running, "sss", "r1");
                    s.message = Some("all moved".into());
                    s
                },
                Some(ms(10)),
                Due::After(ms(990)),
            ),
            (
                "no cluster at all",
                Some(&moved),
                &status(StageState::Running, "", "r1"),
                Some(ms(10)),
                Due::After(ms(990)),
            ),
        ];
        for (what, current, new, since, want) in cases {
            assert_eq!(due(current, new, since), want, "{what}");
        }
    }

    #[test]
    fn only_writes_within_a_pace_are_remembered_and_forgetting_one_changes_nothing() {
        let now = Instant::now() + Duration::from_secs(10);
        let ago = |ms: u64| now - Duration::from_millis(ms);
        let mut written: BTreeMap<String, Instant> = [
            ("old".to_string(), ago(5_000)),
            ("just-past".to_string(), ago(1_000)),
            ("recent".to_string(), ago(300)),
        ]
        .into_iter()
        .collect();
        record(&mut written, "new".into(), now);
        let kept: Vec<&str> = written.keys().map(String::as_str).collect();
        assert_eq!(kept, ["new", "recent"]);
        // A write forgotten is one older than a pace: `due` decides the same without it.
        let running = status(StageState::Running, "rrs", "r1");
        let moved = status(StageState::Running, "rss", "r1");
        for since in [PACE, Duration::from_secs(5)] {
            assert_eq!(
                due(Some(&running), &moved, Some(since)),
                due(Some(&running), &moved, None)
            );
        }
    }
}
