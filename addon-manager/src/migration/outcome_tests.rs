//! Table tests of each phase's pure decision ([`Outcome`]) and of how a step applies one.

use super::*;
use migration_api::task_report::StageState;

const T: Duration = Duration::from_secs(300);

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
fn goes(o: &Outcome) -> String {
    match o {
        Outcome::Wait(s, wake) => format!("wait {}/{} {wake:?}", s.type_, s.reason),
        Outcome::Enter(s, p, _) => format!("enter {p:?} {}/{}/{}", s.type_, s.ok, s.reason),
        Outcome::Rollback(_, cause, _) => format!("rollback {cause}"),
        Outcome::Invalid(reason, _) => format!("invalid {reason}"),
    }
}

fn message(o: &Outcome) -> String {
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
        timeout: T,
    }
}

#[test]
fn cleaning_waits_for_every_hub_and_never_gives_up() {
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
            "a silent source past the deadline: still waiting, said so",
            Cleaned {
                source: None,
                late: true,
                ..cleaned()
            },
            "wait ResourceCleaned/Timeout After(300s)",
        ),
        (
            "a silent target with copies to remove",
            Cleaned {
                rollback: 2,
                target: None,
                ..cleaned()
            },
            "wait ResourceCleaned/Waiting After(300s)",
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
    let o = Cleaned {
        source: None,
        unconfirmed: 1,
        late: true,
        ..cleaned()
    }
    .outcome("hub1", "hub2");
    assert_eq!(
        message(&o),
        "waiting for hub1 to detach 3 moved clusters and take back 0; 1 arrived clusters are not Available on hub2 now, and are detached once they are; no answer from hub1 (past the stage timeout: the migration's objects stay until the hubs confirm)"
    );
}

fn migration() -> Migration {
    Migration {
        name: "move".into(),
        namespace: "ns".into(),
        key: "move-0a1b2c3d".into(),
        token_validity: T,
        from: "hub1".into(),
        to: "hub2".into(),
    }
}

#[test]
fn the_end_of_cleaning_enters_the_verdict_and_counts_who_stayed() {
    let o = finished(MigrationPhase::Completed, &counts(4, 3, 1, 0), &migration());
    assert_eq!(goes(&o), "enter Completed ResourceCleaned/true/Done");
    let Outcome::Enter(_, _, why) = o else {
        unreachable!()
    };
    assert_eq!(
        why,
        "3 of 4 clusters moved from hub1 to hub2; 1 stayed on hub1"
    );
    let o = finished(MigrationPhase::Failed, &counts(4, 0, 4, 0), &migration());
    assert_eq!(goes(&o), "enter Failed ResourceCleaned/true/Done");
}

fn carried(names: &[&str]) -> Vec<CarriedCluster> {
    names
        .iter()
        .map(|n| CarriedCluster {
            name: (*n).into(),
            ..Default::default()
        })
        .collect()
}

fn finished_report(state: StageState, clusters: &str, carry: &[&str]) -> Feedback {
    Feedback {
        report: TaskReport {
            state: Some(state),
            clusters: Some(clusters.into()),
            shape: Some("multipleHubsConfig".into()),
            ..Default::default()
        },
        carry: Some(Ok(carried(carry))),
        ..Default::default()
    }
}

fn names_of(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_string()).collect()
}

#[test]
fn the_sources_report_is_judged_whole() {
    let ab = names_of(&["a", "b"]);
    let ok = finished_report(StageState::Succeeded, "vv", &["a", "b"]);
    assert_eq!(
        judge_source(Some(&ab), &ok, "hub1"),
        Ok(SourceChecked {
            resolved: ab.clone(),
            carry: carried(&["a", "b"]),
            shape: Shape::MultipleHubsConfig,
        })
    );
    // A selector resolves to what the source reported.
    assert_eq!(
        judge_source(None, &ok, "hub1").map(|c| c.resolved),
        Ok(ab.clone())
    );
    let reason = |named: Option<&[String]>, f: Feedback| {
        judge_source(named, &f, "hub1").map_err(|r| r.reason)
    };
    let undecodable = Feedback {
        carry: Some(Err("expected value".into())),
        ..ok.clone()
    };
    assert_eq!(reason(Some(&ab), undecodable), Err(reasons::HUB_INVALID));
    let without_carry = Feedback {
        carry: None,
        ..ok.clone()
    };
    assert_eq!(reason(Some(&ab), without_carry), Err(reasons::HUB_INVALID));
    let none_matched = finished_report(StageState::Succeeded, "", &[]);
    assert_eq!(reason(None, none_matched), Err(reasons::CLUSTER_NOT_FOUND));
    let one_record_short = finished_report(StageState::Succeeded, "vv", &["a"]);
    assert_eq!(
        reason(Some(&ab), one_record_short),
        Err(reasons::HUB_INVALID)
    );
    let out_of_order = finished_report(StageState::Succeeded, "vv", &["b", "a"]);
    assert_eq!(reason(Some(&ab), out_of_order), Err(reasons::HUB_INVALID));
    let mut no_shape = ok.clone();
    no_shape.report.shape = None;
    assert_eq!(reason(Some(&ab), no_shape), Err(reasons::HUB_INVALID));
}

#[test]
fn a_source_that_failed_clusters_names_them_and_keeps_their_states() {
    let ab = names_of(&["a", "b"]);
    let failed = finished_report(StageState::Failed, "vN", &["a", "b"]);
    let r = judge_source(Some(&ab), &failed, "hub1").unwrap_err();
    assert_eq!(r.reason, "ClusterNotFound");
    assert_eq!(
        r.message,
        "1 of 2 clusters cannot move on source hub hub1: b not found on the source hub"
    );
    assert_eq!(
        r.states,
        Some((ab, vec![ClusterState::Valid, ClusterState::NotFound]))
    );
}

#[test]
fn the_targets_report_refuses_clusters_or_the_hub_itself() {
    let ab = names_of(&["a", "b"]);
    let ok = finished_report(StageState::Succeeded, "vv", &[]);
    assert_eq!(judge_target(&ab, &ok, "hub2"), Ok(()));
    let exists = finished_report(StageState::Failed, "Ev", &[]);
    let r = judge_target(&ab, &exists, "hub2").unwrap_err();
    assert_eq!(r.reason, reasons::CLUSTER_CONFLICT);
    assert!(
        r.message.contains("a already exists on the target hub"),
        "{}",
        r.message
    );
    // No cluster failed: the hub cannot take any, in its agent's words.
    let mut hub = finished_report(StageState::Failed, "vv", &[]);
    hub.report.message = Some("no bootstrap ServiceAccount".into());
    let r = judge_target(&ab, &hub, "hub2").unwrap_err();
    assert_eq!(r.reason, reasons::HUB_INVALID);
    assert_eq!(r.message, "target hub hub2: no bootstrap ServiceAccount");
    let silent_failure = finished_report(StageState::Failed, "vv", &[]);
    let r = judge_target(&ab, &silent_failure, "hub2").unwrap_err();
    assert_eq!(r.reason, reasons::ERROR);
}

#[test]
fn validation_passes_to_initializing_or_ends_a_dry_run() {
    let checked = SourceChecked {
        resolved: names_of(&["a"]),
        carry: carried(&["a"]),
        shape: Shape::ManifestWork,
    };
    let o = validated(&checked, false, &migration());
    assert_eq!(goes(&o), "enter Initializing ResourceValidated/true/Done");
    assert_eq!(
        message(&o),
        format!(
            "1 clusters can move from hub1 to hub2 ({})",
            Shape::ManifestWork.delivery()
        )
    );
    let o = validated(&checked, true, &migration());
    assert_eq!(goes(&o), "enter Completed ResourceValidated/true/Done");
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

#[test]
fn deleting_fails_before_anything_was_touched_and_rolls_back_in_flight() {
    use MigrationPhase::*;
    let cases = [
        (Pending, Some("invalid Error")),
        (Validating, Some("invalid Error")),
        (Initializing, Some("rollback Deleted")),
        (Deploying, Some("rollback Deleted")),
        (Registering, Some("rollback Deleted")),
        (Rollbacking, None),
        (Cleaning, None),
        (Completed, None),
        (Failed, None),
    ];
    for (phase, want) in cases {
        assert_eq!(
            on_delete(phase).as_ref().map(goes).as_deref(),
            want,
            "{phase:?}"
        );
    }
}

fn pending_mcm(
    name: &str,
    from: &str,
    to: &str,
    created: &str,
    phase: MigrationPhase,
) -> ManagedClusterMigration {
    let mut m = ManagedClusterMigration::new(
        name,
        ManagedClusterMigrationSpec {
            from: from.into(),
            to: to.into(),
            included_managed_clusters: Some(vec!["c1".into()]),
            ..Default::default()
        },
    );
    m.metadata.namespace = Some("ns".into());
    m.metadata.uid = Some(format!("uid-{name}"));
    m.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        created.parse().unwrap(),
    ));
    m.status = Some(ManagedClusterMigrationStatus {
        phase: Some(phase),
        ..Default::default()
    });
    m
}

#[test]
fn one_migration_per_pair_of_hubs_starts_at_a_time() {
    use MigrationPhase::*;
    let me = pending_mcm("me", "hub1", "hub2", "2026-01-01T00:01:00Z", Pending);
    let started_ok = "enter Validating MigrationStarted/true/Started";
    let waits = "wait MigrationStarted/Waiting Change";
    let cases = [
        ("alone", vec![], started_ok),
        (
            "another on the pair in flight",
            vec![pending_mcm(
                "a",
                "hub1",
                "hub2",
                "2026-01-01T00:02:00Z",
                Registering,
            )],
            waits,
        ),
        (
            "another on the pair, older and pending too",
            vec![pending_mcm(
                "a",
                "hub1",
                "hub2",
                "2026-01-01T00:00:00Z",
                Pending,
            )],
            waits,
        ),
        (
            "another on the pair, younger and pending",
            vec![pending_mcm(
                "a",
                "hub1",
                "hub2",
                "2026-01-01T00:02:00Z",
                Pending,
            )],
            started_ok,
        ),
        (
            "another on the pair, ended",
            vec![pending_mcm(
                "a",
                "hub1",
                "hub2",
                "2026-01-01T00:00:00Z",
                Completed,
            )],
            started_ok,
        ),
        (
            "another on another pair",
            vec![pending_mcm(
                "a",
                "hub1",
                "hub3",
                "2026-01-01T00:00:00Z",
                Registering,
            )],
            started_ok,
        ),
    ];
    for (what, mut others, want) in cases {
        others.push(me.clone());
        assert_eq!(goes(&started(&me, &others)), want, "{what}");
    }
    let blocked = started(
        &me,
        &[pending_mcm(
            "a",
            "hub1",
            "hub2",
            "2026-01-01T00:02:00Z",
            Registering,
        )],
    );
    assert_eq!(
        message(&blocked),
        "waiting for migration ns/a (hub1 -> hub2) to finish: one migration per pair of hubs at a time"
    );
}

#[test]
fn initializing_waits_for_the_token_and_rolls_back_without_one() {
    let seen = |token: Result<bool, String>, timed_out: bool| Initialized {
        token,
        timed_out,
        shape: Shape::MultipleHubsConfig,
        timeout: T,
    };
    let m = migration();
    let cases = [
        (
            seen(Ok(true), false),
            "enter Deploying ResourceInitialized/true/Done",
        ),
        (
            seen(Ok(true), true),
            "enter Deploying ResourceInitialized/true/Done",
        ),
        (
            seen(Ok(false), false),
            "wait ResourceInitialized/Waiting Deadline(300s)",
        ),
        (seen(Ok(false), true), "rollback Timeout"),
        (seen(Err("no CA".into()), false), "rollback Error"),
    ];
    for (s, want) in cases {
        assert_eq!(goes(&s.outcome(&m)), want, "{s:?}");
    }
    let plain = Initialized {
        shape: Shape::ManifestWork,
        ..seen(Ok(true), false)
    };
    assert!(
        message(&plain.outcome(&m)).contains("rendered for each cluster's klusterlet work"),
        "{}",
        message(&plain.outcome(&m))
    );
}

#[test]
fn deploying_waits_for_both_hubs_until_its_deadline() {
    let seen = |ready: bool, timed_out: bool| Deployed {
        ready,
        work_error: None,
        timed_out,
        what: "KlusterletConfig and bootstrap kubeconfig",
        clusters: 4,
        timeout: T,
    };
    let cases = [
        (
            seen(true, false),
            "enter Registering ResourceDeployed/true/Done",
        ),
        (
            seen(true, true),
            "enter Registering ResourceDeployed/true/Done",
        ),
        (
            seen(false, false),
            "wait ResourceDeployed/Waiting Deadline(300s)",
        ),
        (seen(false, true), "rollback Timeout"),
    ];
    for (s, want) in cases {
        assert_eq!(goes(&s.outcome("hub1", "hub2")), want, "{s:?}");
    }
    let refused = Deployed {
        work_error: Some("MigrationTask t: forbidden".into()),
        ..seen(false, false)
    };
    assert!(
        message(&refused.outcome("hub1", "hub2"))
            .ends_with(" (a work reports: MigrationTask t: forbidden)")
    );
}

#[test]
fn a_missing_token_secret_is_waited_for_until_the_stage_times_out() {
    assert_eq!(
        goes(&token_missing(false, T, CLUSTER_REGISTERED)),
        "wait ClusterRegistered/Waiting Deadline(300s)"
    );
    assert_eq!(
        goes(&token_missing(true, T, CLUSTER_REGISTERED)),
        "rollback Timeout"
    );
}
