//! Table tests of the decisions that start a migration: Pending, validation, Initializing,
//! Deploying, and what deletion does in each phase.

use super::outcome_tests::{T, goes, message, migration};
use super::*;
use migration_api::task_report::StageState;

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
        judge_source(Some(&ab), None, &ok, "hub1"),
        Ok(SourceChecked {
            resolved: ab.clone(),
            carry: carried(&["a", "b"]),
            shape: Shape::MultipleHubsConfig,
        })
    );
    // A selector resolves to what the source reported.
    assert_eq!(
        judge_source(None, None, &ok, "hub1").map(|c| c.resolved),
        Ok(ab.clone())
    );
    let reason = |named: Option<&[String]>, f: Feedback| {
        judge_source(named, None, &f, "hub1").map_err(|r| r.reason)
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
    // A Placement resolves as a selector does; one that does not exist, or decided nothing,
    // is named.
    assert_eq!(
        judge_source(None, Some("east"), &ok, "hub1").map(|c| c.resolved),
        Ok(ab.clone())
    );
    let mut missing = finished_report(StageState::Failed, "", &[]);
    missing.report.shape = None;
    missing.report.message = Some("Placement default/east does not exist on this hub".into());
    // Failed with nothing carried but no refusal named: not taken for a missing Placement.
    let refusal = judge_source(None, Some("east"), &missing, "hub1").unwrap_err();
    assert_ne!(refusal.reason, reasons::PLACEMENT_NOT_FOUND);
    missing.report.refusal = Some(reasons::PLACEMENT_NOT_FOUND.into());
    let refusal = judge_source(None, Some("east"), &missing, "hub1").unwrap_err();
    assert_eq!(refusal.reason, reasons::PLACEMENT_NOT_FOUND);
    assert_eq!(
        refusal.message,
        "source hub hub1: Placement default/east does not exist on this hub"
    );
    let undecided = finished_report(StageState::Succeeded, "", &[]);
    let refusal = judge_source(None, Some("east"), &undecided, "hub1").unwrap_err();
    assert_eq!(refusal.reason, reasons::CLUSTER_NOT_FOUND);
    assert!(
        refusal.message.contains("Placement east"),
        "{}",
        refusal.message
    );
}

#[test]
fn a_hub_that_does_not_serve_a_carried_kind_refuses_the_migration_as_a_whole() {
    let mut refused = finished_report(StageState::Failed, "", &[]);
    refused.report.message =
        Some("carryOver: clusterdeployments.hive.openshift.io is not served on this hub".into());
    refused.report.refusal = Some(reasons::CARRY_OVER_NOT_SERVED.into());
    let named = names_of(&["a"]);
    let source = judge_source(Some(&named), None, &refused, "hub1").unwrap_err();
    assert_eq!(source.reason, reasons::CARRY_OVER_NOT_SERVED);
    assert_eq!(
        source.message,
        "source hub hub1: carryOver: clusterdeployments.hive.openshift.io is not served on this hub"
    );
    assert!(source.states.is_none());
    let target = judge_target(&named, &refused, "hub2").unwrap_err();
    assert_eq!(target.reason, reasons::CARRY_OVER_NOT_SERVED);
    assert!(
        target.message.starts_with("target hub hub2: carryOver: "),
        "{}",
        target.message
    );
    // Without the named refusal, a failed report is judged as before.
    refused.report.refusal = None;
    let other = judge_target(&named, &refused, "hub2").unwrap_err();
    assert_ne!(other.reason, reasons::CARRY_OVER_NOT_SERVED);
}

#[test]
fn a_source_that_failed_clusters_names_them_and_keeps_their_states() {
    let ab = names_of(&["a", "b"]);
    let failed = finished_report(StageState::Failed, "vN", &["a", "b"]);
    let r = judge_source(Some(&ab), None, &failed, "hub1").unwrap_err();
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
    // One whose spec.toPlacement chose hub2: the same pair.
    let mut placed = pending_mcm("p", "hub1", "", "2026-01-01T00:02:00Z", Registering);
    placed.spec.to_placement = Some("most-room".into());
    if let Some(st) = placed.status.as_mut() {
        st.accepted_spec = Some(placed.spec.clone());
        st.target = Some("hub2".into());
    }
    let mut cases = cases.to_vec();
    cases.push((
        "another on the pair, chosen by placement",
        vec![placed],
        waits,
    ));
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
        pool: Pool::Claimed,
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
    // Too few names of the target's pool free: wait for them, roll back past the deadline; a
    // name another migration took first: choose again at once. No token is read meanwhile.
    for (pool, timed_out, want) in [
        (
            Pool::TooFew { free: 1 },
            false,
            "wait ResourceInitialized/Waiting Deadline(300s)",
        ),
        (Pool::TooFew { free: 1 }, true, "rollback Timeout"),
        (Pool::Raced, false, "wait ResourceInitialized/Waiting Soon"),
    ] {
        let s = Initialized {
            pool,
            ..seen(Ok(true), timed_out)
        };
        assert_eq!(goes(&s.outcome(&m)), want, "{s:?}");
    }
    assert_eq!(
        message(
            &Initialized {
                pool: Pool::TooFew { free: 1 },
                ..seen(Ok(false), false)
            }
            .outcome(&m)
        ),
        "2 bootstrap identities needed on hub2, 1 of its pool's 256 names free (other migrations to hub2 hold the rest)"
    );
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

#[test]
fn bootstrap_identities_take_free_names_of_the_pool_and_keep_them() {
    use std::collections::BTreeMap;
    let name = names::pooled_bootstrap_identity;
    let held = |pairs: &[(usize, Option<&str>)]| -> BTreeMap<String, Option<String>> {
        pairs
            .iter()
            .map(|(n, k)| (name(*n), k.map(str::to_owned)))
            .collect()
    };
    let pool = names::BOOTSTRAP_IDENTITY_POOL;
    // Nothing held: distinct pool names, consecutive from a place the key decides.
    let first = claim(3, "a-1", &[], &held(&[])).unwrap();
    assert_eq!(first.len(), 3);
    let at = names::pool_index(&first[0]).unwrap();
    assert_eq!(
        first,
        (0..3).map(|i| name((at + i) % pool)).collect::<Vec<_>>()
    );
    // Names held by another migration, or by something not ours, are never taken.
    let busy = held(&[(at, Some("b-2")), (at + 1, None)]);
    let got = claim(3, "a-1", &[], &busy).unwrap();
    assert!(got.iter().all(|n| !busy.contains_key(n)), "{got:?}");
    // A recorded claim stands, in its order, while it is its own or free.
    let recorded = vec![name(9), name(4)];
    assert_eq!(
        claim(2, "a-1", &recorded, &held(&[(9, Some("a-1"))])).unwrap(),
        recorded
    );
    // A recorded name another took meanwhile is replaced; one held but not recorded (a crash
    // before the status write) is taken back before any free one.
    let got = claim(
        2,
        "a-1",
        &recorded,
        &held(&[(9, Some("b-2")), (4, Some("a-1")), (11, Some("a-1"))]),
    )
    .unwrap();
    assert_eq!(got, [name(4), name(11)]);
    // Names outside the pool in a status are ignored.
    let got = claim(1, "a-1", &["migration-a-1-0".into()], &held(&[])).unwrap();
    assert!(names::pool_index(&got[0]).is_some());
    // Too few free: how many are.
    let full: BTreeMap<String, Option<String>> =
        (2..pool).map(|n| (name(n), Some("b-2".into()))).collect();
    assert_eq!(claim(3, "a-1", &[], &full), Err(2));
    assert_eq!(claim(2, "a-1", &[], &full).unwrap().len(), 2);
    // No identity needed, none taken.
    assert_eq!(claim(0, "a-1", &recorded, &held(&[])), Ok(Vec::new()));
}

#[test]
fn a_target_placement_chooses_one_hub_besides_the_source_or_says_why_not() {
    let hubs = |v: &[&str]| v.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>();
    let choose =
        |seen: PlacementSeen, gave_up: bool| choose_target("hub1", "ns/most-room", seen, gave_up);
    // One hub besides the source: that one, whether the source was chosen too or not.
    assert_eq!(
        choose(Some((true, hubs(&["hub3"]))), false),
        Ok("hub3".into())
    );
    assert_eq!(
        choose(Some((true, hubs(&["hub1", "hub3"]))), false),
        Ok("hub3".into())
    );
    let refused = |seen: PlacementSeen, gave_up: bool| match choose(seen, gave_up) {
        Err(Outcome::Invalid(reason, message)) => (reason, message),
        other => panic!("not refused: {other:?}"),
    };
    let (reason, message) = refused(None, false);
    assert_eq!(reason, reasons::PLACEMENT_NOT_FOUND);
    assert_eq!(
        message,
        "Placement ns/most-room (spec.toPlacement) does not exist on the global hub"
    );
    let (reason, message) = refused(Some((true, hubs(&["hub1"]))), false);
    assert_eq!(reason, reasons::TARGET_NOT_CHOSEN);
    assert!(
        message.contains("no hub other than the source hub1 (it chose hub1)"),
        "{message}"
    );
    let (reason, message) = refused(Some((true, vec![])), false);
    assert_eq!(reason, reasons::TARGET_NOT_CHOSEN);
    assert!(!message.contains("it chose"), "{message}");
    let (reason, message) = refused(Some((true, hubs(&["hub2", "hub3"]))), false);
    assert_eq!(reason, reasons::TARGET_NOT_CHOSEN);
    assert!(
        message
            .contains("chose 2 hubs besides the source (hub2, hub3); give it numberOfClusters: 1"),
        "{message}"
    );
    // Not scheduled yet: wait, until the stage timeout since creation.
    assert!(matches!(
        choose(Some((false, vec![])), false),
        Err(Outcome::Wait(_, Wake::After(_)))
    ));
    assert_eq!(
        refused(Some((false, vec![])), true).0,
        reasons::TARGET_NOT_CHOSEN
    );
}

#[test]
fn pending_records_the_chosen_target_and_starts_with_the_spec_it_accepted() {
    use MigrationPhase::*;
    let created = "2026-01-01T00:01:00Z";
    let mut me = pending_mcm("me", "hub1", "", created, Pending);
    me.spec.to_placement = Some("most-room".into());
    let at = |secs: i64| {
        Time(created.parse::<jiff::Timestamp>().unwrap() + Duration::from_secs(secs as u64))
    };
    let run = |all: &[ManagedClusterMigration], seen: Option<PlacementSeen>, secs: i64| {
        let mut step = super::tests::step_of(&me);
        step.now = at(secs);
        let action = pend(all, seen, &me, &mut step);
        (step, action)
    };
    let chose = |hubs: &[&str]| Some(Some((true, hubs.iter().map(|h| h.to_string()).collect())));
    // The Placement chose hub3: the migration starts towards it, holding its spec from now on.
    let (step, _) = run(&[], chose(&["hub1", "hub3"]), 5);
    assert_eq!(step.status.phase, Some(Validating));
    assert_eq!(step.status.target.as_deref(), Some("hub3"));
    assert_eq!(step.status.start_time, Some(at(5)));
    assert_eq!(step.status.accepted_spec.as_ref(), Some(&me.spec));
    // Another migration in flight between hub1 and hub3 holds it back, the target recorded.
    let mut busy = pending_mcm("a", "hub3", "hub1", "2026-01-01T00:00:00Z", Deploying);
    busy.status.get_or_insert_with(Default::default).target = Some("hub1".into());
    let (step, action) = run(&[busy], chose(&["hub3"]), 5);
    assert_eq!(step.status.phase.unwrap_or_default(), Pending);
    assert_eq!(step.status.target.as_deref(), Some("hub3"));
    assert!(step.status.accepted_spec.is_none() && step.status.start_time.is_none());
    assert_eq!(action, Action::await_change());
    // Not decided yet: look again soon; past the stage timeout since creation: refused.
    let (step, action) = run(&[], Some(Some((false, vec![]))), 5);
    assert_eq!(step.status.phase.unwrap_or_default(), Pending);
    assert_eq!(action, Action::requeue(Duration::from_secs(2)));
    let late = timeouts(&me).stage.as_secs() as i64 + 1;
    let (step, _) = run(&[], Some(Some((false, vec![]))), late);
    assert_eq!(step.status.phase, Some(Failed));
    // No such Placement: refused at once.
    let (step, _) = run(&[], Some(None), 5);
    assert_eq!(step.status.phase, Some(Failed));
    assert!(step.status.target.is_none());
}
