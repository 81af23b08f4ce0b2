use super::*;
use ClusterState::*;
use migration_api::common::set_condition;

fn mcm(to: &str, phase: MigrationPhase, accepted_to: Option<&str>) -> ManagedClusterMigration {
    let spec = |to: &str| ManagedClusterMigrationSpec {
        from: "hub1".into(),
        to: to.into(),
        included_managed_clusters: Some(vec!["c1".into()]),
        ..Default::default()
    };
    let mut m = ManagedClusterMigration::new("m", spec(to));
    m.status = Some(ManagedClusterMigrationStatus {
        phase: Some(phase),
        accepted_spec: accepted_to.map(spec),
        ..Default::default()
    });
    m
}

pub(super) fn step_of(m: &ManagedClusterMigration) -> Step {
    Step {
        status: m.status.clone().unwrap_or_default(),
        events: Vec::new(),
        generation: None,
        now: now(),
        effects: Vec::new(),
    }
}

#[test]
fn a_phase_is_timed_on_the_clock_the_step_is_given() {
    let at = |secs: i64| Time(jiff::Timestamp::from_second(1_800_000_000 + secs).unwrap());
    let timeout = Duration::from_secs(600);
    let mut step = step_of(&mcm("hub2", MigrationPhase::Deploying, None));
    step.now = at(0);
    step.enter(MigrationPhase::Registering, "switching clusters");
    assert_eq!(step.status.phase_start_time, Some(at(0)));
    assert_eq!(step.status.completion_time, None);
    // (seconds since the phase began, time left, when a waiting phase looks again)
    let table = [
        (0, Some(600), Duration::from_millis(600_100)),
        (540, Some(60), Duration::from_millis(60_100)),
        (600, None, Duration::from_millis(1_100)),
        (900, None, Duration::from_millis(1_100)),
    ];
    for (elapsed, left, wake) in table {
        step.now = at(elapsed);
        let left = left.map(Duration::from_secs);
        assert_eq!(remaining(&step, timeout), left, "{elapsed}s");
        let waiting = Outcome::Wait(
            Said::no(CLUSTER_REGISTERED, reasons::WAITING, ""),
            Wake::Deadline(timeout),
        );
        assert_eq!(step.settle(waiting), Action::requeue(wake), "{elapsed}s");
    }
    // A condition that changes status is stamped with the step's clock, not the machine's.
    step.now = at(1_000);
    step.enter(MigrationPhase::Completed, "done");
    assert_eq!(step.status.completion_time, Some(at(1_000)));
    let c = find_condition(
        step.status.conditions.as_deref().unwrap(),
        CLUSTER_REGISTERED,
    );
    assert_eq!(c.map(|c| c.last_transition_time.clone()), Some(at(0)));
}

#[test]
fn clusters_count_as_touched_once_initializing_is_done() {
    let with = |status: Option<&str>| {
        let mut st = ManagedClusterMigrationStatus::default();
        if let Some(s) = status {
            set_condition(
                st.conditions.get_or_insert_with(Vec::new),
                RESOURCE_INITIALIZED,
                s,
                reasons::DONE,
                "",
                None,
            );
        }
        st
    };
    assert!(!touched(&with(None)), "validating or initializing");
    assert!(!touched(&with(Some("False"))), "failed while initializing");
    assert!(touched(&with(Some("True"))), "deploying and after");
}

#[test]
fn an_edit_after_pending_is_ignored_and_reported() {
    // (phase, spec.to, accepted to, the `to` the phases see, SpecAccepted status)
    let cases = [
        (MigrationPhase::Pending, "hub3", None, "hub3", None),
        (
            MigrationPhase::Registering,
            "hub3",
            Some("hub2"),
            "hub2",
            Some("False"),
        ),
        (
            MigrationPhase::Registering,
            "hub2",
            Some("hub2"),
            "hub2",
            None,
        ),
        // Started by a manager that kept no copy: the spec as it is now is taken.
        (MigrationPhase::Deploying, "hub2", None, "hub2", None),
    ];
    for (phase, to, accepted, sees, condition) in cases {
        let m = mcm(to, phase, accepted);
        let mut step = step_of(&m);
        let held = hold_spec(Arc::new(m), phase, &mut step);
        assert_eq!(held.spec.to, sees, "{phase:?} {to} {accepted:?}");
        let c = step
            .status
            .conditions
            .as_deref()
            .and_then(|c| find_condition(c, conditions::SPEC_ACCEPTED))
            .map(|c| c.status.clone());
        assert_eq!(c.as_deref(), condition, "{phase:?} {to} {accepted:?}");
        if phase != MigrationPhase::Pending {
            assert!(step.status.accepted_spec.is_some());
        }
    }
    // The message names the edit; the Warning is published once.
    let m = mcm("hub3", MigrationPhase::Registering, Some("hub2"));
    let mut step = step_of(&m);
    hold_spec(Arc::new(m.clone()), MigrationPhase::Registering, &mut step);
    let message = find_condition(
        step.status.conditions.as_deref().unwrap(),
        conditions::SPEC_ACCEPTED,
    )
    .unwrap()
    .message
    .clone();
    assert!(message.contains("to: hub2 -> hub3"), "{message}");
    assert_eq!(step.events.len(), 1);
    let mut again = m;
    again.status = Some(step.status.clone());
    let mut step2 = step_of(&again);
    hold_spec(Arc::new(again), MigrationPhase::Registering, &mut step2);
    assert!(step2.events.is_empty());
    // Put back: True again.
    let mut back = mcm("hub2", MigrationPhase::Registering, Some("hub2"));
    back.status = Some(step.status);
    let mut step3 = step_of(&back);
    hold_spec(Arc::new(back), MigrationPhase::Registering, &mut step3);
    let c = find_condition(
        step3.status.conditions.as_deref().unwrap(),
        conditions::SPEC_ACCEPTED,
    )
    .unwrap();
    assert_eq!(c.status, "True");
}

#[test]
fn the_source_holds_the_token_only_while_clusters_may_switch() {
    use TaskStage::*;
    for (stage, carries) in [
        (Validating, false),
        (Deploying, true),
        (Registering, true),
        (Rollbacking, false),
        (Cleaning, false),
    ] {
        assert_eq!(source_carries_token(stage), carries, "{stage:?}");
    }
}

#[test]
fn an_arrived_cluster_is_detached_only_with_the_targets_word() {
    // (recorded, target says, past the stage timeout, becomes)
    let cases = [
        (Available, Some(Available), false, Moved),
        (Available, Some(Refused), false, Lost),
        (Available, Some(Pending), false, Lost),
        (Available, Some(Joined), false, Available),
        (Available, Some(Created), false, Available),
        (Available, Some(Joined), true, Moved),
        (Available, Some(Refused), true, Lost),
        (Available, None, false, Available),
        (Available, None, true, Available),
        // Decided once: the target's later word changes nothing.
        (Moved, Some(Refused), false, Moved),
        (Lost, Some(Available), false, Lost),
        // Only arrived clusters are rechecked.
        (Refused, Some(Available), false, Refused),
        (RolledBack, Some(Pending), false, RolledBack),
    ];
    for (recorded, says, late, want) in cases {
        let mut states = [recorded];
        let target = says.map(|t| [t]);
        recheck_arrived(&mut states, target.as_ref().map(|t| &t[..]), late);
        assert_eq!(states[0], want, "{recorded:?} {says:?} late={late}");
    }
}

#[test]
fn a_silent_target_keeps_the_clusters_it_admitted() {
    let names: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
    let states = [Switching, Joined, Refused, Available];
    let to_roll: Vec<String> = names[..3].to_vec();
    let none = BTreeSet::new();
    assert_eq!(
        source_takes_back(&names, &states, &to_roll, &none, false),
        Vec::<String>::new(),
        "the target still has its say"
    );
    assert_eq!(
        source_takes_back(&names, &states, &to_roll, &none, true),
        ["a", "c"],
        "silent: never the joined one"
    );
    let b = names[1].clone();
    let done: BTreeSet<&String> = [&b].into();
    assert_eq!(
        source_takes_back(&names, &states, &to_roll, &done, false),
        ["b"],
        "let go by the target"
    );
}

#[test]
fn a_cluster_the_target_admitted_is_recorded_joined_and_stays_released() {
    let mut s = vec![Switching, Switching];
    let p = advance(&mut s, None, Some(&[Joined, Created]), 2, 0);
    assert_eq!(s, [Joined, Switching]);
    assert_eq!(p, Progress::Running);
    let names: Vec<String> = ["a", "b"].map(String::from).to_vec();
    assert_eq!(released(&names, &s), ["a", "b"]);
    // Silent target afterwards: it stays Joined.
    let p = advance(&mut s, None, None, 2, 0);
    assert_eq!(s, [Joined, Switching]);
    assert_eq!(p, Progress::Running);
    let p = advance(&mut s, None, Some(&[Available, Available]), 2, 0);
    assert_eq!(p, Progress::Done);
}

#[test]
fn verdict_table() {
    let counts = |total: i32, registered: i32| ClusterCounts {
        total,
        registered,
        failed: total - registered,
        ..Default::default()
    };
    use MigrationPhase::{Completed, Failed};
    let cases = [
        ("all moved", None, true, counts(3, 3), 0, Completed),
        ("none moved", None, true, counts(3, 0), 3, Failed),
        (
            "refused within the budget",
            Some("Refused"),
            true,
            counts(3, 2),
            1,
            Completed,
        ),
        (
            "refused, rollback unfinished",
            Some("Refused"),
            false,
            counts(3, 2),
            1,
            Failed,
        ),
        (
            "refused beyond the budget",
            Some("Refused"),
            true,
            counts(3, 1),
            1,
            Failed,
        ),
        (
            "budget exceeded, even if it would fit now",
            Some("FailureBudgetExceeded"),
            true,
            counts(3, 2),
            1,
            Failed,
        ),
        (
            "timed out, even with all but one moved",
            Some("Timeout"),
            true,
            counts(3, 2),
            1,
            Failed,
        ),
        (
            "deleted in flight",
            Some("Deleted"),
            true,
            counts(3, 2),
            1,
            Failed,
        ),
        (
            "rolled back on request",
            Some("RollbackRequested"),
            true,
            counts(3, 2),
            1,
            Failed,
        ),
        ("an error", Some("Error"), true, counts(3, 3), 0, Failed),
    ];
    for (what, cause, clean, c, max, want) in cases {
        assert_eq!(verdict(cause, clean, &c, max), want, "{what}");
    }
}

#[test]
fn releases_ready_clusters_in_a_window_of_max_concurrency() {
    let mut s = vec![Valid; 5];
    let src = [Ready, Ready, Waiting, Ready, Blocked];
    assert_eq!(advance(&mut s, Some(&src), None, 2, 0), Progress::Running);
    assert_eq!(s, [Switching, Switching, Waiting, Ready, Blocked]);
    // One arrives: the next ready one goes.
    let tgt = [Available, Created, Created, Created, Created];
    assert_eq!(
        advance(&mut s, Some(&src), Some(&tgt), 2, 0),
        Progress::Running
    );
    assert_eq!(s, [Available, Switching, Waiting, Switching, Blocked]);
}

#[test]
fn done_when_every_cluster_is_available_on_the_target() {
    let mut s = vec![Switching; 3];
    assert_eq!(
        advance(&mut s, None, Some(&[Available; 3]), 3, 0),
        Progress::Done
    );
    assert_eq!(ClusterState::counts(&s).registered, 3);
}

#[test]
fn failures_past_the_budget_stop_new_releases_and_end_stuck() {
    let mut s = vec![Valid; 4];
    let src = [Ready; 4];
    advance(&mut s, Some(&src), None, 2, 0);
    let tgt = [Refused, Available, Created, Created];
    let p = advance(&mut s, Some(&src), Some(&tgt), 2, 0);
    assert_eq!(
        s,
        [Refused, Available, Ready, Ready],
        "no release after a failure over budget"
    );
    assert_eq!(p, Progress::Stuck);
    // With a budget of one the window keeps moving.
    let mut s = vec![Valid; 4];
    advance(&mut s, Some(&src), None, 2, 1);
    advance(&mut s, Some(&src), Some(&tgt), 2, 1);
    assert_eq!(s, [Refused, Available, Switching, Switching]);
}

#[test]
fn a_blocked_cluster_holds_the_migration_until_released() {
    let mut s = vec![Valid; 2];
    assert_eq!(
        advance(&mut s, Some(&[Ready, Blocked]), None, 5, 0),
        Progress::Running
    );
    assert_eq!(
        advance(
            &mut s,
            Some(&[Switching, Blocked]),
            Some(&[Available, Created]),
            5,
            0
        ),
        Progress::Running
    );
    assert_eq!(s, [Available, Blocked]);
    assert_eq!(
        advance(
            &mut s,
            Some(&[Switching, Ready]),
            Some(&[Available, Created]),
            5,
            0
        ),
        Progress::Running
    );
    assert_eq!(s, [Available, Switching]);
}

#[test]
fn a_work_agent_refused_our_kinds_makes_the_hub_invalid() {
    let why = work_agent_refused(
        "cluster-migration",
        "hub2",
        Some("MigrationTask m: migrationtasks.migration.open-cluster-management.io \"m\" is forbidden: User \"system:serviceaccount:open-cluster-management-agent:klusterlet-work-sa\" cannot get resource"),
    )
    .unwrap();
    assert!(
        why.contains("hub2") && why.contains("aggregate-to-work"),
        "{why}"
    );
    assert_eq!(
        work_agent_refused("a", "hub2", Some("the server is busy")),
        None
    );
    assert_eq!(work_agent_refused("a", "hub2", None), None);
}

#[test]
fn failure_summaries_name_the_clusters() {
    let (reason, msg) = failure_summary(
        &["a".into(), "b".into()],
        &[NotFound, Valid],
        "on source hub hub1",
    );
    assert_eq!(reason, "ClusterNotFound");
    assert_eq!(
        msg,
        "1 of 2 clusters cannot move on source hub hub1: a not found on the source hub"
    );
}

#[test]
fn the_phases_see_the_hub_a_target_placement_chose_as_to() {
    let mut m = mcm("", MigrationPhase::Registering, None);
    m.spec.to_placement = Some("most-room".into());
    if let Some(st) = m.status.as_mut() {
        st.accepted_spec = Some(m.spec.clone());
        st.target = Some("hub3".into());
    }
    let mut step = step_of(&m);
    let held = hold_spec(Arc::new(m.clone()), MigrationPhase::Registering, &mut step);
    assert_eq!(held.spec.to, "hub3");
    assert_eq!(held.spec.to_placement, None);
    assert_eq!(held.spec.validate(), Ok(()));
    // The spec as written is no edit of the spec accepted.
    assert!(step.events.is_empty());
    assert!(
        step.status
            .conditions
            .as_deref()
            .and_then(|c| find_condition(c, conditions::SPEC_ACCEPTED))
            .is_none()
    );
    assert_eq!(step.status.target.as_deref(), Some("hub3"));
    // A migration by name records its target too (the TO column reads it).
    let named = mcm("hub2", MigrationPhase::Completed, Some("hub2"));
    let mut step = step_of(&named);
    hold_spec(Arc::new(named), MigrationPhase::Completed, &mut step);
    assert_eq!(step.status.target.as_deref(), Some("hub2"));
}

#[test]
fn a_work_is_asked_of_the_api_server_only_until_it_said_it_is_gone() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let there = ManifestWork::default();
    let mut going = ManifestWork::default();
    going.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    // (what the watch shows, whether the API server said it is gone, what removal takes)
    let table = [
        (Some(&there), false, Removal::Delete),
        (Some(&going), false, Removal::Going),
        (None, false, Removal::Ask),
        (None, true, Removal::Gone),
        // Shown again: applied since (the memory is forgotten then), or the watch behind.
        (Some(&there), true, Removal::Delete),
        (Some(&going), true, Removal::Going),
    ];
    for (watched, said_gone, want) in table {
        assert_eq!(removal(watched, said_gone), want, "{watched:?} {said_gone}");
    }
    // Said gone until this process applies it again.
    let gone = GoneWorks::default();
    assert!(!gone.said("hub1", "w"));
    gone.gone("hub1", "w");
    assert!(gone.said("hub1", "w") && !gone.said("hub2", "w"));
    gone.applying("hub1", "w");
    assert!(!gone.said("hub1", "w"));
    // Bounded: past the limit it starts again.
    for i in 0..=GONE_WORKS_REMEMBERED {
        gone.gone("hub1", &format!("w{i}"));
    }
    assert!(gone.0.lock().unwrap().len() <= GONE_WORKS_REMEMBERED);
}
