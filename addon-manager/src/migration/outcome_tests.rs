//! Table tests of each phase's pure decision ([`Outcome`]) and of how a step applies one.

use super::*;

pub(super) const T: Duration = Duration::from_secs(300);

fn counts(total: i32, registered: i32, failed: i32, switching: i32) -> ClusterCounts {
    ClusterCounts {
        total,
        registered,
        failed,
        switching,
        rolled_back: 0,
    }
}

/// The phase an outcome enters, the cause it rolls back for, or neither.
pub(super) fn goes(o: &Outcome) -> String {
    match o {
        Outcome::Wait(s, wake) => format!("wait {}/{} {wake:?}", s.type_, s.reason),
        Outcome::Enter(s, p, _) => format!("enter {p:?} {}/{}/{}", s.type_, s.ok, s.reason),
        Outcome::Rollback(_, cause, _) => format!("rollback {cause}"),
        Outcome::Invalid(reason, _) => format!("invalid {reason}"),
    }
}

pub(super) fn message(o: &Outcome) -> String {
    match o {
        Outcome::Wait(s, _) | Outcome::Enter(s, _, _) => s.message.clone(),
        Outcome::Rollback(_, _, m) | Outcome::Invalid(_, m) => m.clone(),
    }
}

fn registered(progress: Progress, c: ClusterCounts) -> Registered<'static> {
    Registered {
        progress,
        counts: c,
        blocked: 0,
        max_failures: 1,
        timed_out: false,
        changed: false,
        timeout: T,
        timeout_text: "12m",
    }
}

#[test]
fn registering_decides_from_progress_budget_and_deadline() {
    let cases: Vec<(&str, Registered, &str)> = vec![
        (
            "all registered",
            registered(Progress::Done, counts(3, 3, 0, 0)),
            "enter Cleaning ClusterRegistered/true/Done",
        ),
        (
            "stuck within the budget: the target refused",
            registered(Progress::Stuck, counts(3, 2, 1, 0)),
            "rollback Refused",
        ),
        (
            "stuck past the budget",
            registered(Progress::Stuck, counts(3, 1, 2, 0)),
            "rollback FailureBudgetExceeded",
        ),
        (
            "timed out while running",
            Registered {
                timed_out: true,
                ..registered(Progress::Running, counts(3, 1, 0, 2))
            },
            "rollback Timeout",
        ),
        (
            "done wins over the deadline",
            Registered {
                timed_out: true,
                ..registered(Progress::Done, counts(3, 3, 0, 0))
            },
            "enter Cleaning ClusterRegistered/true/Done",
        ),
        (
            "states changed: deliver the new release list at once",
            Registered {
                changed: true,
                ..registered(Progress::Running, counts(3, 1, 0, 2))
            },
            "wait ClusterRegistered/Waiting Soon",
        ),
        (
            "nothing changed: wait for a report or the deadline",
            registered(Progress::Running, counts(3, 1, 0, 2)),
            "wait ClusterRegistered/Waiting Deadline(300s)",
        ),
    ];
    for (what, seen, want) in cases {
        assert_eq!(goes(&seen.outcome("hub2")), want, "{what}");
    }
}

#[test]
fn registering_says_how_many_clusters_are_held() {
    let seen = Registered {
        blocked: 2,
        ..registered(Progress::Running, counts(5, 1, 0, 2))
    };
    let msg = message(&seen.outcome("hub2"));
    assert_eq!(
        msg,
        format!(
            "1 of 5 clusters registered on hub2, 2 switching, 2 held by the {} annotation",
            names::annotations::BLOCK_MOVE
        )
    );
    let timed_out = Registered {
        timed_out: true,
        ..registered(Progress::Running, counts(5, 1, 0, 2))
    };
    assert_eq!(
        message(&timed_out.outcome("hub2")),
        "1 of 5 clusters registered within 12m; rolling back the others"
    );
}

fn rolled_back() -> RolledBack {
    RolledBack {
        to_roll: 2,
        back: 0,
        stay: 1,
        target_answered: true,
        target_ok: false,
        target_silent: false,
        source_ok: false,
        timed_out: false,
        cause: "Refused".into(),
        timeout: T,
    }
}

#[test]
fn rollbacking_ends_when_both_hubs_are_done_or_the_target_is_silent() {
    let cases: Vec<(&str, RolledBack, &str)> = vec![
        (
            "both done",
            RolledBack {
                back: 2,
                target_ok: true,
                source_ok: true,
                ..rolled_back()
            },
            "enter Cleaning ResourceRolledBack/true/Done",
        ),
        (
            "the source is done, the target silent past its grace",
            RolledBack {
                back: 2,
                target_answered: false,
                target_silent: true,
                source_ok: true,
                ..rolled_back()
            },
            "enter Cleaning ResourceRolledBack/true/Done",
        ),
        (
            "the target is done, the source not yet",
            RolledBack {
                target_ok: true,
                ..rolled_back()
            },
            "wait ResourceRolledBack/Refused Deadline(300s)",
        ),
        (
            "the source is done, the target silent within its grace",
            RolledBack {
                target_answered: false,
                source_ok: true,
                ..rolled_back()
            },
            "wait ResourceRolledBack/Refused Deadline(150s)",
        ),
        (
            "timed out: Cleaning takes over, the condition says so",
            RolledBack {
                back: 1,
                timed_out: true,
                ..rolled_back()
            },
            "enter Cleaning ResourceRolledBack/false/Timeout",
        ),
    ];
    for (what, seen, want) in cases {
        assert_eq!(goes(&seen.outcome("hub1", "hub2")), want, "{what}");
    }
}

#[test]
fn rollbacking_keeps_its_cause_and_names_a_silent_target() {
    let silent = RolledBack {
        back: 1,
        target_answered: false,
        target_silent: true,
        cause: "Timeout".into(),
        ..rolled_back()
    };
    let o = silent.outcome("hub1", "hub2");
    assert_eq!(goes(&o), "wait ResourceRolledBack/Timeout Deadline(300s)");
    assert_eq!(
        message(&o),
        "rolling back: 1 of 2 clusters back on hub1; waiting for hub2 to answer, taking the clusters back without it"
    );
    let done_without_target = RolledBack {
        back: 2,
        target_answered: false,
        target_silent: true,
        source_ok: true,
        ..rolled_back()
    };
    assert!(
        message(&done_without_target.outcome("hub1", "hub2"))
            .contains("hub2 did not answer, so its pre-created copies are removed once it is back")
    );
}

fn cleaned() -> Cleaned {
    Cleaned {
        rollback: 0,
        detach: 3,
        unconfirmed: 0,
        source: Some(true),
        target: Some(true),
        late: false,
        past_bound: false,
        timeout: T,
    }
}

#[test]
fn cleaning_waits_for_every_hub_up_to_its_bound() {
    let cases: Vec<(&str, Cleaned, &str)> = vec![
        (
            "both hubs done: remove the objects",
            cleaned(),
            "wait ResourceCleaned/Removing Soon",
        ),
        (
            "an arrived cluster not confirmed yet",
            Cleaned {
                unconfirmed: 1,
                ..cleaned()
            },
            "wait ResourceCleaned/Waiting Deadline(300s)",
        ),
        (
            "the source still working",
            Cleaned {
                source: Some(false),
                ..cleaned()
            },
            "wait ResourceCleaned/Waiting Deadline(300s)",
        ),
        (
            "a silent source past the deadline: still waiting up to the bound, said so",
            Cleaned {
                source: None,
                late: true,
                ..cleaned()
            },
            "wait ResourceCleaned/Timeout Deadline(600s)",
        ),
        (
            "a silent target with copies to remove",
            Cleaned {
                rollback: 2,
                target: None,
                ..cleaned()
            },
            "wait ResourceCleaned/Waiting Deadline(600s)",
        ),
        (
            "a silent target with nothing to remove still has to answer",
            Cleaned {
                target: None,
                ..cleaned()
            },
            "wait ResourceCleaned/Waiting Deadline(300s)",
        ),
    ];
    for (what, seen, want) in cases {
        assert_eq!(goes(&seen.outcome("hub1", "hub2")), want, "{what}");
    }
    // Past the bound, still waiting for a hub, it looks again every stage timeout (the
    // deadline has passed: waking "at" it would be at once, over and over).
    for seen in [
        Cleaned {
            source: None,
            late: true,
            past_bound: true,
            ..cleaned()
        },
        Cleaned {
            rollback: 2,
            target: None,
            past_bound: true,
            ..cleaned()
        },
    ] {
        assert!(
            goes(&seen.outcome("hub1", "hub2")).ends_with("After(300s)"),
            "{seen:?}"
        );
    }
    let o = Cleaned {
        source: None,
        unconfirmed: 1,
        late: true,
        ..cleaned()
    }
    .outcome("hub1", "hub2");
    assert_eq!(
        message(&o),
        "waiting for hub1 to detach 3 moved clusters and take back 0; 1 arrived clusters are not Available on hub2 now, and are detached once they are; no answer from hub1 (past the stage timeout: clusters a hub must still act on stay until the hubs confirm; past 10m only clusters that have to come back themselves are given up on; annotate the migration request=abandon to stop waiting)"
    );
}

pub(super) fn migration() -> Migration {
    Migration {
        name: "move".into(),
        namespace: "ns".into(),
        key: "move-0a1b2c3d".into(),
        token_validity: T,
        from: "hub1".into(),
        to: "hub2".into(),
        clusters: 2,
        identity_names: Vec::new(),
    }
}

#[test]
fn the_end_of_cleaning_enters_the_verdict_and_counts_who_stayed() {
    let o = finished(
        MigrationPhase::Completed,
        &counts(4, 3, 1, 0),
        &migration(),
        &[],
    );
    assert_eq!(goes(&o), "enter Completed ResourceCleaned/true/Done");
    let Outcome::Enter(_, _, why) = o else {
        unreachable!()
    };
    assert_eq!(
        why,
        "3 of 4 clusters moved from hub1 to hub2; 1 stayed on hub1"
    );
    let o = finished(
        MigrationPhase::Failed,
        &counts(4, 0, 4, 0),
        &migration(),
        &[],
    );
    assert_eq!(goes(&o), "enter Failed ResourceCleaned/true/Done");
}

#[test]
fn settling_applies_the_condition_the_phase_and_the_first_rollback_cause() {
    let mut step = Step {
        status: ManagedClusterMigrationStatus {
            phase: Some(MigrationPhase::Registering),
            ..Default::default()
        },
        events: Vec::new(),
        generation: Some(3),
        now: now(),
        effects: Vec::new(),
    };
    let first = registered(Progress::Stuck, counts(2, 1, 1, 0)).outcome("hub2");
    step.settle(first);
    assert_eq!(step.status.phase, Some(MigrationPhase::Rollbacking));
    assert_eq!(step.status.rollback_cause.as_deref(), Some("Refused"));
    let registered_cond = step
        .status
        .conditions
        .as_deref()
        .and_then(|c| find_condition(c, CLUSTER_REGISTERED))
        .cloned();
    assert_eq!(
        registered_cond.map(|c| (c.status, c.reason, c.observed_generation)),
        Some(("False".into(), "PartiallyRegistered".into(), Some(3)))
    );
    // A later cause (the rollback timing out) does not replace the first.
    step.settle(Outcome::Rollback(None, reasons::TIMEOUT, "late".into()));
    assert_eq!(step.status.rollback_cause.as_deref(), Some("Refused"));
    // A failed validation enters Failed with a Warning event.
    step.settle(Outcome::invalid(reasons::FORBIDDEN, "not bound"));
    assert_eq!(step.status.phase, Some(MigrationPhase::Failed));
    assert!(
        step.events
            .iter()
            .any(|(k, r, _)| *k == EventType::Warning && r == "Failed")
    );
}
