//! Table tests of the phases that deliver tasks, run as the shell runs them but on a
//! [`World`] built by hand and the step's clock: what each decides from the hubs' reports,
//! the deadlines and a silent hub, with no API server.

use super::deliver_tests::{m, mcm, task_in, world, writes};
use super::tests::step_of;
use super::*;
use ClusterState::*;
use migration_api::common::set_condition;
use migration_api::ocm::work::{
    FeedbackValue, FieldValue, ManifestCondition, ManifestResourceMeta, ManifestResourceStatus,
    ManifestWorkStatus, StatusFeedbackResult,
};
use migration_api::task_report::{Field, StageState};

/// A moment `secs` after the phase began.
pub(super) fn at(secs: u64) -> Time {
    let start = jiff::Timestamp::from_second(1_800_000_000).unwrap();
    Time(start + Duration::from_secs(secs))
}

/// The migration of c1..c3 in `phase` (begun at `at(0)`, its clusters initialized), each
/// cluster in `states`.
fn in_phase(phase: MigrationPhase, states: &[ClusterState]) -> ManagedClusterMigration {
    let mut mcm = mcm(states);
    if let Some(s) = mcm.status.as_mut() {
        s.phase = Some(phase);
        s.phase_start_time = Some(at(0));
        let conditions = s.conditions.get_or_insert_with(Vec::new);
        set_condition(
            conditions,
            RESOURCE_INITIALIZED,
            "True",
            reasons::DONE,
            "",
            None,
        );
    }
    mcm
}

/// The work named `name` that `effects` apply, as its hub's work agent shows it once the
/// agent has reported `state` and `clusters` on the task's revision.
fn answered(
    effects: &[Effect],
    name: &str,
    state: StageState,
    clusters: &[ClusterState],
) -> Option<Arc<ManifestWork>> {
    answered_with(effects, name, state, clusters, &[])
}

/// [`answered`], the report also saying `more` (a count as an integer, the rest as text).
pub(super) fn answered_with(
    effects: &[Effect],
    name: &str,
    state: StageState,
    clusters: &[ClusterState],
    more: &[(Field, String)],
) -> Option<Arc<ManifestWork>> {
    let (applied, _) = writes(effects);
    let (_, work) = applied.into_iter().find(|(n, _)| n == name)?;
    let revision = task_in(work).revision.unwrap_or_default();
    let mut w: ManifestWork = serde_json::from_value(work.clone()).ok()?;
    let text = |name: &str, value: String| FeedbackValue {
        name: name.into(),
        field_value: FieldValue {
            type_: "String".into(),
            string: Some(value),
            ..Default::default()
        },
    };
    let mut values = vec![
        text("revision", revision),
        text("state", state.as_str().into()),
        text("clusters", ClusterState::encode(clusters)),
    ];
    values.extend(more.iter().map(|(f, v)| match (f, v.parse::<i64>()) {
        (Field::Total | Field::CarryParts, Ok(n)) => FeedbackValue {
            name: f.name().into(),
            field_value: FieldValue {
                type_: "Integer".into(),
                integer: Some(n),
                ..Default::default()
            },
        },
        _ => text(f.name(), v.clone()),
    }));
    let task = ManifestCondition {
        resource_meta: ManifestResourceMeta {
            kind: Some("MigrationTask".into()),
            ..Default::default()
        },
        status_feedback: Some(StatusFeedbackResult {
            values: Some(values),
        }),
        conditions: Vec::new(),
    };
    w.status = Some(ManifestWorkStatus {
        conditions: None,
        resource_status: Some(ManifestResourceStatus {
            manifests: Some(vec![task]),
        }),
    });
    Some(Arc::new(w))
}

/// Runs `decide` at `now` on `mcm` as it is; the step it leaves and what it returned.
fn decide_at(
    decide: Decide,
    world: &World,
    mcm: &ManagedClusterMigration,
    now: u64,
) -> (Step, Decided) {
    let mut step = step_of(mcm);
    step.now = at(now);
    let result = decide(world, mcm, &m(), &mut step).unwrap();
    (step, result)
}

fn said(step: &Step, type_: &str) -> (String, String) {
    let c = step.status.conditions.as_deref().unwrap_or_default();
    let c = find_condition(c, type_).unwrap();
    (c.status.clone(), c.reason.clone())
}

fn work_name(role: MigrationRole) -> String {
    names::migration_work(&m().key, role)
}

/// The task `step` delivers to `role`'s hub.
fn delivered(step: &Step, role: MigrationRole) -> MigrationTaskSpec {
    let (applied, _) = writes(&step.effects);
    let (_, work) = applied
        .into_iter()
        .find(|(n, _)| *n == work_name(role))
        .unwrap();
    task_in(work)
}

/// `Some` list of these cluster names.
fn owned(v: &[&str]) -> Option<Vec<String>> {
    Some(v.iter().map(|s| s.to_string()).collect())
}

#[test]
fn deploying_moves_on_once_both_hubs_confirm_what_was_just_delivered() {
    let mcm = in_phase(MigrationPhase::Deploying, &[Valid; 3]);
    let stage = timeouts(&mcm).stage;
    let secs = stage.as_secs();
    let soon = Action::requeue(Duration::from_millis(10));
    let at_deadline =
        |now: u64| Action::requeue(stage - Duration::from_secs(now) + Duration::from_millis(100));
    let (source, target) = confirmed(&mcm);
    // (source report, target report, seconds since the phase began, phase after, condition reason, wake)
    let table = [
        (
            None,
            None,
            10,
            MigrationPhase::Deploying,
            reasons::WAITING,
            at_deadline(10),
        ),
        (
            source.clone(),
            None,
            10,
            MigrationPhase::Deploying,
            reasons::WAITING,
            at_deadline(10),
        ),
        (
            None,
            target.clone(),
            10,
            MigrationPhase::Deploying,
            reasons::WAITING,
            at_deadline(10),
        ),
        (
            source.clone(),
            target.clone(),
            10,
            MigrationPhase::Registering,
            reasons::DONE,
            soon.clone(),
        ),
        // Confirmed at the last moment still counts; past the deadline, a rollback.
        (
            source.clone(),
            target.clone(),
            secs - 1,
            MigrationPhase::Registering,
            reasons::DONE,
            soon.clone(),
        ),
        (
            source.clone(),
            None,
            secs - 1,
            MigrationPhase::Deploying,
            reasons::WAITING,
            at_deadline(secs - 1),
        ),
        (
            source.clone(),
            None,
            secs + 1,
            MigrationPhase::Rollbacking,
            reasons::TIMEOUT,
            soon.clone(),
        ),
    ];
    for (i, (source_work, target_work, now, phase, reason, wake)) in table.into_iter().enumerate() {
        let world = World {
            source_work,
            target_work,
            ..world()
        };
        let (step, result) = decide_at(deploy, &world, &mcm, now);
        assert_eq!(step.status.phase, Some(phase), "row {i}");
        assert_eq!(said(&step, RESOURCE_DEPLOYED).1, reason, "row {i}");
        assert_eq!(result, Decided::Wake(wake), "row {i}");
        if phase == MigrationPhase::Rollbacking {
            assert_eq!(
                step.status.rollback_cause.as_deref(),
                Some(reasons::TIMEOUT)
            );
        }
    }
}

/// What each hub's work shows once its agent confirmed the Deploying task `mcm` delivers.
fn confirmed(
    mcm: &ManagedClusterMigration,
) -> (Option<Arc<ManifestWork>>, Option<Arc<ManifestWork>>) {
    let (step, _) = decide_at(deploy, &world(), mcm, 10);
    let done = StageState::Succeeded;
    let source = answered(
        &step.effects,
        &work_name(MigrationRole::Source),
        done,
        &[Ready; 3],
    );
    let target = answered(
        &step.effects,
        &work_name(MigrationRole::Target),
        done,
        &[Valid; 3],
    );
    (source, target)
}

#[test]
fn registering_releases_on_its_first_step_the_clusters_the_source_found_ready_in_deploying() {
    let mcm = in_phase(MigrationPhase::Deploying, &[Valid; 3]);
    let (step, _) = decide_at(deploy, &world(), &mcm, 10);
    let done = StageState::Succeeded;
    let confirmed = World {
        source_work: answered(
            &step.effects,
            &work_name(MigrationRole::Source),
            done,
            &[Ready, Waiting, Blocked],
        ),
        target_work: answered(
            &step.effects,
            &work_name(MigrationRole::Target),
            done,
            &[Valid; 3],
        ),
        ..world()
    };
    let (step, _) = decide_at(deploy, &confirmed, &mcm, 10);
    assert_eq!(step.status.phase, Some(MigrationPhase::Registering));
    assert_eq!(step.states(), [Ready, Waiting, Blocked]);
    // Registering's first step: neither hub has answered on it yet, and the ready cluster is
    // released (the target hears of it first, on the next step).
    let mut registering = mcm.clone();
    registering.status = Some(step.status.clone());
    let silent = World {
        source_task_now: Some(None),
        ..world()
    };
    let (step, result) = decide_at(register, &silent, &registering, 11);
    assert!(matches!(result, Decided::Wake(_)));
    assert_eq!(step.states(), [Switching, Waiting, Blocked]);
    assert_eq!(delivered(&step, MigrationRole::Source).released, None);
}

#[test]
fn a_report_on_another_revision_is_no_answer() {
    let mcm = in_phase(MigrationPhase::Deploying, &[Valid; 3]);
    let (source, target) = confirmed(&mcm);
    // What the source confirmed of a task that said something else.
    let mut older = mcm.clone();
    older.spec.lift_disable_auto_import = Some(true);
    let (stale, _) = confirmed(&older);
    let revision =
        |w: &Option<Arc<ManifestWork>>| Feedback::of(w.as_deref().unwrap()).report.revision;
    assert_ne!(revision(&stale), revision(&source));
    // (the source's work, the phase after)
    let table = [
        (stale, MigrationPhase::Deploying),
        (source, MigrationPhase::Registering),
    ];
    for (source_work, phase) in table {
        let world = World {
            source_work,
            target_work: target.clone(),
            ..world()
        };
        let (step, _) = decide_at(deploy, &world, &mcm, 10);
        assert_eq!(step.status.phase, Some(phase));
    }
}

/// The target's report on a revision since replaced (each new release revises its task), with
/// the releases it recorded (`offsets`: its releaseTimes' offsets), for the task `step`
/// delivered.
fn target_behind(step: &Step, offsets: Option<&str>) -> Option<Arc<ManifestWork>> {
    let more: Vec<(Field, String)> = offsets
        .map(|o| (Field::Released, o.to_owned()))
        .into_iter()
        .collect();
    let work = answered_with(
        &step.effects,
        &work_name(MigrationRole::Target),
        StageState::Running,
        &[Created; 3],
        &more,
    )?;
    let mut work = ManifestWork::clone(&work);
    let values = work
        .status
        .as_mut()?
        .resource_status
        .as_mut()?
        .manifests
        .as_mut()?
        .first_mut()?
        .status_feedback
        .as_mut()?
        .values
        .as_mut()?;
    for v in values.iter_mut().filter(|v| v.name == "revision") {
        v.field_value.string = Some("an-older-revision".into());
    }
    Some(Arc::new(work))
}

#[test]
fn a_silent_target_gets_no_more_clusters_released_than_the_source_was_told() {
    // c1 joined the target, c2 is released (status), c3 is ready.
    let mcm = in_phase(MigrationPhase::Registering, &[Joined, Switching, Ready]);
    // The target has not answered: the source's task is read as the API server has it.
    let (step, result) = decide_at(register, &world(), &mcm, 10);
    assert_eq!(result, Decided::Need(Need::SourceTaskNow));
    let told = |released: Option<Vec<&str>>, stage| MigrationTaskSpec {
        stage,
        released: released.map(|r| r.into_iter().map(String::from).collect()),
        ..Default::default()
    };
    // (the source's task now, the offsets of the target's releaseTimes on a revision since
    // replaced, what the source is told is released)
    let table = [
        (
            Some(told(Some(vec!["c1", "c2"]), TaskStage::Registering)),
            None,
            owned(&["c1", "c2"]),
        ),
        // The first wave: the source's task of this stage lists no release yet, and the
        // target has not recorded c2's: the source hears of it only once the target has
        // (it was told at once before, so that its klusterlet could ask the target for a
        // bootstrap CSR that the target, learning of the release later, never approves).
        (
            Some(told(None, TaskStage::Registering)),
            None,
            owned(&["c1"]),
        ),
        (
            Some(told(None, TaskStage::Registering)),
            Some("0,3,"),
            owned(&["c1", "c2"]),
        ),
        // No task, or one of another stage: the clusters the target admitted, and those it
        // recorded.
        (None, None, owned(&["c1"])),
        (
            Some(told(Some(vec!["c1"]), TaskStage::Deploying)),
            None,
            owned(&["c1"]),
        ),
        (None, Some("0,3,"), owned(&["c1", "c2"])),
    ];
    for (i, (now, offsets, released)) in table.into_iter().enumerate() {
        let world = World {
            source_task_now: Some(now),
            target_work: target_behind(&step, offsets),
            ..world()
        };
        let (step, result) = decide_at(register, &world, &mcm, 10);
        assert!(matches!(result, Decided::Wake(_)), "row {i}");
        let source = delivered(&step, MigrationRole::Source);
        assert_eq!(source.released, released, "row {i}");
        // The target's task lists what status records as released.
        let target = delivered(&step, MigrationRole::Target);
        assert_eq!(target.released, owned(&["c1", "c2"]), "row {i}");
    }
}

#[test]
fn a_target_behind_the_latest_revision_still_lets_go_the_clusters_it_recorded_as_released() {
    // c1 and c2 are released (status), c3 is ready; the source was told of c1 only.
    let mcm = in_phase(MigrationPhase::Registering, &[Switching, Switching, Ready]);
    let told = MigrationTaskSpec {
        stage: TaskStage::Registering,
        released: owned(&["c1"]),
        ..Default::default()
    };
    let (step, _) = decide_at(
        register,
        &World {
            source_task_now: Some(Some(told.clone())),
            ..world()
        },
        &mcm,
        10,
    );
    // (the offsets of the target's releaseTimes, what the source is told is released)
    let table = [
        (None, owned(&["c1"])),
        (Some("0,,"), owned(&["c1"])),
        (Some("0,2,"), owned(&["c1", "c2"])),
        // The target's record of a cluster the status does not count as released lets it
        // go no sooner.
        (Some("0,2,5"), owned(&["c1", "c2"])),
    ];
    for (i, (offsets, released)) in table.into_iter().enumerate() {
        let world = World {
            target_work: target_behind(&step, offsets),
            source_task_now: Some(Some(told.clone())),
            ..world()
        };
        let (step, result) = decide_at(register, &world, &mcm, 10);
        assert!(matches!(result, Decided::Wake(_)), "row {i}");
        assert_eq!(
            delivered(&step, MigrationRole::Source).released,
            released,
            "row {i}"
        );
    }
}

#[test]
fn registering_merges_the_reports_releases_the_next_and_ends_when_all_arrived() {
    let mcm = in_phase(MigrationPhase::Registering, &[Switching, Switching, Ready]);
    let (step, _) = decide_at(
        register,
        &World {
            source_task_now: Some(None),
            ..world()
        },
        &mcm,
        10,
    );
    let delivered = step.effects;
    let report = |role, clusters: &[ClusterState]| {
        answered(&delivered, &work_name(role), StageState::Running, clusters)
    };
    // (maxFailures, target's states, source's states, the states after, phase after, the
    // rollback's cause)
    let table = [
        (
            0,
            [Available, Joined, Pending],
            [Switching, Switching, Ready],
            vec![Available, Joined, Switching],
            MigrationPhase::Registering,
            None,
        ),
        // A refusal within the budget: the next cluster goes all the same.
        (
            1,
            [Refused, Available, Pending],
            [Switching, Switching, Ready],
            vec![Refused, Available, Switching],
            MigrationPhase::Registering,
            None,
        ),
        // Past the budget: no more releases, and nothing left in flight: roll back.
        (
            0,
            [Refused, Available, Pending],
            [Switching, Switching, Ready],
            vec![Refused, Available, Ready],
            MigrationPhase::Rollbacking,
            Some("FailureBudgetExceeded"),
        ),
        (
            0,
            [Available, Available, Available],
            [Switching, Switching, Switching],
            vec![Available, Available, Available],
            MigrationPhase::Cleaning,
            None,
        ),
    ];
    for (i, (budget, target, source, after, phase, cause)) in table.into_iter().enumerate() {
        let world = World {
            target_work: report(MigrationRole::Target, &target),
            source_work: report(MigrationRole::Source, &source),
            ..world()
        };
        let mut mcm = mcm.clone();
        mcm.spec.max_failures = Some(budget);
        let (step, result) = decide_at(register, &world, &mcm, 10);
        assert_eq!(
            result,
            Decided::Wake(Action::requeue(Duration::from_millis(10))),
            "row {i}"
        );
        assert_eq!(step.states(), after, "row {i}");
        assert_eq!(step.status.rollback_cause.as_deref(), cause, "row {i}");
        assert_eq!(step.status.phase, Some(phase), "row {i}");
    }
}

#[test]
fn a_rollback_takes_back_behind_a_silent_target_only_after_its_grace_and_never_an_admitted_cluster()
{
    let mcm = rolled_back_on_timeout(MigrationPhase::Rollbacking, &[Switching, Joined, Available]);
    let grace = timeouts(&mcm).stage.as_secs() / 2;
    // (seconds since the rollback began, what the source takes back)
    let table = [
        (grace - 1, None, MigrationPhase::Rollbacking),
        (grace + 1, owned(&["c1"]), MigrationPhase::Rollbacking),
        (grace * 2 - 1, owned(&["c1"]), MigrationPhase::Rollbacking),
        // Past the stage timeout the rollback ends unfinished (ResourceRolledBack Timeout)
        // and Cleaning goes on: c2, admitted by the target, is never taken back blind.
        (grace * 2 + 1, owned(&["c1"]), MigrationPhase::Cleaning),
    ];
    for (now, takes_back, phase) in table {
        let (step, result) = decide_at(roll_back, &world(), &mcm, now);
        assert!(matches!(result, Decided::Wake(_)), "{now}s");
        let source = delivered(&step, MigrationRole::Source);
        assert_eq!(source.rollback, takes_back, "{now}s");
        // The target is told to let go of both clusters that did not arrive.
        let target = delivered(&step, MigrationRole::Target);
        assert_eq!(target.rollback, owned(&["c1", "c2"]), "{now}s");
        assert_eq!(step.status.phase, Some(phase), "{now}s");
        // The cause stays the one that started the rollback.
        assert_eq!(
            step.status.rollback_cause.as_deref(),
            Some(reasons::TIMEOUT)
        );
    }
    let (step, _) = decide_at(roll_back, &world(), &mcm, grace * 2 + 1);
    assert_eq!(
        said(&step, RESOURCE_ROLLED_BACK),
        ("False".into(), reasons::TIMEOUT.into())
    );
}

/// The migration of c1..c3 in Cleaning after a rollback: c1 arrived and c2, c3 go back.
fn cleaning_after_rollback() -> ManagedClusterMigration {
    rolled_back_on_timeout(MigrationPhase::Cleaning, &[Available, Switching, Refused])
}

/// [`in_phase`], after a rollback that Registering's timeout started (`ResourceRolledBack`
/// False, reason and cause `Timeout`).
fn rolled_back_on_timeout(
    phase: MigrationPhase,
    states: &[ClusterState],
) -> ManagedClusterMigration {
    let mut mcm = in_phase(phase, states);
    if let Some(s) = mcm.status.as_mut() {
        let conditions = s.conditions.get_or_insert_with(Vec::new);
        set_condition(
            conditions,
            RESOURCE_ROLLED_BACK,
            "False",
            reasons::TIMEOUT,
            "",
            None,
        );
        s.rollback_cause = Some(reasons::TIMEOUT.into());
    }
    mcm
}

/// Cleaning's hubs' part at `now`, run again on what it recorded while a pass only records
/// the target's confirmations (as the shell does at the requeue that follows).
fn clean_at(world: &World, mcm: &ManagedClusterMigration, now: u64) -> Step {
    let mut mcm = mcm.clone();
    for _ in 0..3 {
        let (step, _) = decide_at(hubs_clean, world, &mcm, now);
        if step.states() == mcm_states(&mcm) {
            return step;
        }
        mcm.status = Some(step.status.clone());
    }
    panic!("Cleaning at {now}s does not settle");
}

fn mcm_states(mcm: &ManagedClusterMigration) -> Vec<ClusterState> {
    step_of(mcm).states()
}

/// The hubs' answers to the Cleaning tasks of `mcm`: the target's, then the source's to the
/// task it gets once the target's confirmations are recorded.
fn cleaning_answers(
    mcm: &ManagedClusterMigration,
    target: [ClusterState; 3],
    source: [ClusterState; 3],
) -> World {
    cleaning_answers_done(mcm, StageState::Running, target, source)
}

/// [`cleaning_answers`], the target reporting `target_state`.
fn cleaning_answers_done(
    mcm: &ManagedClusterMigration,
    target_state: StageState,
    target: [ClusterState; 3],
    source: [ClusterState; 3],
) -> World {
    let (first, _) = decide_at(hubs_clean, &world(), mcm, 1);
    let mut answers = World {
        target_work: answered(
            &first.effects,
            &work_name(MigrationRole::Target),
            target_state,
            &target,
        ),
        ..world()
    };
    let settled = clean_at(&answers, mcm, 1);
    answers.source_work = answered(
        &settled.effects,
        &work_name(MigrationRole::Source),
        StageState::Running,
        &source,
    );
    answers
}

#[test]
fn cleaning_gives_up_at_its_bound_on_a_cluster_that_never_comes_back_and_names_it() {
    let mcm = cleaning_after_rollback();
    let bound = cleaning_bound(timeouts(&mcm).stage).as_secs();
    // The target confirms c1 and is done; the source detached c1 and took c2 and c3 back,
    // but c2 never reports there again (a cluster that lost power).
    let world = cleaning_answers_done(
        &mcm,
        StageState::Succeeded,
        [Available, RolledBack, RolledBack],
        [Detached, RollingBack, RolledBack],
    );
    // (seconds into Cleaning, c2's state, ResourceCleaned's reason)
    let table = [
        (bound / 2 - 1, Switching, reasons::WAITING),
        (bound / 2 + 1, Switching, reasons::TIMEOUT),
        (bound - 1, Switching, reasons::TIMEOUT),
        (bound + 1, Unconfirmed, reasons::REMOVING),
    ];
    for (now, c2, reason) in table {
        let step = clean_at(&world, &mcm, now);
        assert_eq!(step.states()[0], Moved, "{now}s: the target confirmed c1");
        assert_eq!(step.states()[1], c2, "{now}s");
        assert_eq!(said(&step, RESOURCE_CLEANED).1, reason, "{now}s");
        assert_eq!(abandoned(&step.status), c2 == Unconfirmed, "{now}s");
    }
    let step = clean_at(&world, &mcm, bound + 1);
    // c3 came back and c1 moved: only c2 is reported, by name, with what to check.
    assert_eq!(step.states(), vec![Moved, Unconfirmed, Refused]);
    let failures = step.status.failures.clone().unwrap_or_default();
    let c2 = failures.iter().find(|f| f.name == "c2").unwrap();
    assert_eq!(c2.reason, "Unconfirmed");
    let c = step.status.conditions.as_deref().unwrap();
    let gave_up = find_condition(c, conditions::ABANDONED).unwrap();
    assert_eq!(gave_up.reason, reasons::UNCONFIRMED);
    assert!(
        gave_up.message.contains("not confirmed: c2 "),
        "{}",
        gave_up.message
    );
    // It ends Failed, whatever moved and whatever the budget.
    let counts = ClusterState::counts(&step.states());
    assert_eq!(end_of(&step.status, &counts, 5), MigrationPhase::Failed);
    // A source that has not taken c2 back (its ManagedCluster still refuses it), a target
    // not done, or hubs that do not answer, are waited for past the bound: ending could leave
    // c2 refused by both, or the target's copies behind.
    let not_taken_back = cleaning_answers_done(
        &mcm,
        StageState::Succeeded,
        [Available, RolledBack, RolledBack],
        [Detached, Switching, RolledBack],
    );
    let target_busy = cleaning_answers(
        &mcm,
        [Available, RolledBack, RolledBack],
        [Detached, RollingBack, RolledBack],
    );
    let silent = super::deliver_tests::world();
    for (i, world) in [not_taken_back, target_busy, silent].iter().enumerate() {
        let step = clean_at(world, &mcm, bound * 3);
        assert_eq!(step.states()[1], Switching, "row {i}");
        assert_ne!(
            said(&step, RESOURCE_CLEANED).1,
            reasons::REMOVING,
            "row {i}"
        );
        assert!(!abandoned(&step.status), "row {i}");
    }
}

#[test]
fn an_abandoned_cleaning_waits_only_for_the_hubs_answers_or_their_grace() {
    let mut mcm = cleaning_after_rollback();
    if let Some(s) = mcm.status.as_mut() {
        let conditions = s.conditions.get_or_insert_with(Vec::new);
        set_condition(
            conditions,
            conditions::ABANDONED,
            "True",
            reasons::ABANDON_REQUESTED,
            "",
            None,
        );
        // Asked 10 s into Cleaning.
        if let Some(c) = conditions
            .iter_mut()
            .find(|c| c.type_ == conditions::ABANDONED)
        {
            c.last_transition_time = at(10);
        }
    }
    // Abandoned, the hubs' part still runs (it names what the hubs did not confirm).
    assert!(!hubs_part_done(mcm.status.as_ref().unwrap()));
    let grace = ABANDON_GRACE.as_secs();
    // Silent hubs are waited for until the grace ends, and it wakes then without an event.
    let (_, woke) = decide_at(hubs_clean, &world(), &mcm, 10 + grace - 20);
    assert_eq!(
        woke,
        Decided::Wake(Action::requeue(Duration::from_millis(20_100))),
        "woken at the grace's end"
    );
    let step = clean_at(&world(), &mcm, 10 + grace - 1);
    assert_eq!(step.states()[1], Switching);
    assert_ne!(said(&step, RESOURCE_CLEANED).1, reasons::REMOVING);
    let step = clean_at(&world(), &mcm, 10 + grace + 1);
    assert_eq!(step.states(), vec![Unconfirmed, Unconfirmed, Refused]);
    assert_eq!(said(&step, RESOURCE_CLEANED).1, reasons::REMOVING);
    // Hubs that answer their task end the wait at once, whatever the clusters do.
    let world = cleaning_answers(
        &mcm,
        [Available, RolledBack, RolledBack],
        [Switching, RollingBack, RollingBack],
    );
    let step = clean_at(&world, &mcm, 12);
    assert_eq!(step.states(), vec![Moved, Unconfirmed, Refused]);
    assert_eq!(said(&step, RESOURCE_CLEANED).1, reasons::REMOVING);
    // Without the request the same answers are waited on.
    let plain = cleaning_after_rollback();
    let world = cleaning_answers(
        &plain,
        [Available, RolledBack, RolledBack],
        [Switching, RollingBack, RollingBack],
    );
    let step = clean_at(&world, &plain, 12);
    assert_eq!(step.states(), vec![Moved, Switching, Refused]);
    assert_eq!(said(&step, RESOURCE_CLEANED).1, reasons::WAITING);
}
