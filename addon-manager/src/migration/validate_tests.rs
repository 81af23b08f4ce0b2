//! Table tests of validation's decision ([`validate`]) on what it read ([`Checks`], built by
//! hand) and the step's clock: what refuses a migration before any hub is asked, what each
//! hub's agent is asked and when, and where a validated migration or dry run goes, with no
//! API server.

use super::deliver_tests::{task_in, writes};
use super::phase_tests::{answered_with, at};
use super::tests::step_of;
use super::*;
use ClusterState::*;
use migration_api::names::labels::CLUSTER_SET;
use migration_api::task_report::{Field, StageState};

const ADDON: &str = "cluster-migration";

fn conditions(type_: &str, status: &str) -> Value {
    json!([{"type": type_, "status": status, "reason": "Seen", "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}])
}

/// Hub `name` as validation finds a good one: an Available managed cluster of set `default`
/// with an API server URL, the addon Available, the managed-serviceaccount addon there.
fn hub(name: &str) -> HubSeen {
    let addon = |addon: &str| {
        serde_json::from_value(json!({
            "apiVersion": "addon.open-cluster-management.io/v1alpha1",
            "kind": "ManagedClusterAddOn",
            "metadata": {"name": addon, "namespace": name},
            "spec": {},
            "status": {"conditions": conditions(AVAILABLE, "True")}
        }))
        .unwrap()
    };
    HubSeen {
        cluster: Some(
            serde_json::from_value(json!({
                "apiVersion": "cluster.open-cluster-management.io/v1",
                "kind": "ManagedCluster",
                "metadata": {"name": name, "labels": {CLUSTER_SET: "default"}},
                "spec": {"hubAcceptsClient": true,
                         "managedClusterClientConfigs": [{"url": format!("https://{name}:6443")}]},
                "status": {"conditions": conditions(CLUSTER_AVAILABLE, "True")}
            }))
            .unwrap(),
        ),
        addon: Some(addon(ADDON)),
        msa: Some(addon(MSA_ADDON)),
    }
}

/// What validation reads when hub1 and hub2 are good hubs of a set bound to the namespace and
/// no other migration runs.
fn checks() -> Checks {
    Checks {
        addon: ADDON.into(),
        from: hub("hub1"),
        to: hub("hub2"),
        bound: vec![
            serde_json::from_value(json!({
                "apiVersion": "cluster.open-cluster-management.io/v1beta2",
                "kind": "ManagedClusterSet",
                "metadata": {"name": "default"},
                "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}
            }))
            .unwrap(),
        ],
        hubs: ["hub1", "hub2"].map(String::from).into(),
        source_ns: "open-cluster-management-agent-addon".into(),
        target_ns: "open-cluster-management-agent-addon".into(),
        msa_ns: "open-cluster-management-agent-addon".into(),
        ..Default::default()
    }
}

/// Migration ns/move of c1..c3 from hub1 to hub2, validating since `at(0)`.
fn validating_mcm() -> ManagedClusterMigration {
    let spec = ManagedClusterMigrationSpec {
        from: "hub1".into(),
        to: "hub2".into(),
        included_managed_clusters: Some(["c1", "c2", "c3"].map(String::from).into()),
        ..Default::default()
    };
    let mut mcm = ManagedClusterMigration::new("move", spec);
    mcm.metadata.namespace = Some("ns".into());
    mcm.metadata.uid = Some("u1".into());
    mcm.status = Some(ManagedClusterMigrationStatus {
        phase: Some(MigrationPhase::Validating),
        phase_start_time: Some(at(0)),
        ..Default::default()
    });
    mcm
}

fn m() -> Migration {
    Migration {
        clusters: 3,
        ..super::outcome_tests::migration()
    }
}

/// Runs [`validate`] at `secs` on `checks`.
fn run(checks: &Checks, mcm: &ManagedClusterMigration, secs: u64) -> Step {
    let mut step = step_of(mcm);
    step.now = at(secs);
    validate(checks, mcm, &m(), &mut step).unwrap();
    step
}

/// The phase the step is in, and the status and reason of its `ResourceValidated` condition.
fn outcome(step: &Step) -> (MigrationPhase, String, String) {
    let c = step.status.conditions.as_deref().unwrap_or_default();
    let c = find_condition(c, RESOURCE_VALIDATED).unwrap();
    (
        step.status.phase.unwrap_or_default(),
        c.status.clone(),
        c.reason.clone(),
    )
}

fn message(step: &Step) -> String {
    let c = step.status.conditions.as_deref().unwrap_or_default();
    find_condition(c, RESOURCE_VALIDATED)
        .unwrap()
        .message
        .clone()
}

fn work(role: MigrationRole) -> String {
    names::migration_work(&m().key, role)
}

/// Another migration `name` of `clusters`, in `phase`.
fn other(name: &str, phase: MigrationPhase, clusters: &[&str]) -> ManagedClusterMigration {
    let mut o = validating_mcm();
    o.metadata.name = Some(name.into());
    o.metadata.uid = Some(format!("uid-{name}"));
    o.spec.included_managed_clusters = Some(clusters.iter().map(|c| c.to_string()).collect());
    o.status = Some(ManagedClusterMigrationStatus {
        phase: Some(phase),
        ..Default::default()
    });
    o
}

/// Runs [`validate`] at `secs` and checks that it failed the migration for `reason`, saying
/// `words`, without delivering anything.
fn refused(
    what: &str,
    checks: &Checks,
    mcm: &ManagedClusterMigration,
    secs: u64,
    reason: &str,
    words: &str,
) {
    let step = run(checks, mcm, secs);
    assert_eq!(
        outcome(&step),
        (MigrationPhase::Failed, FALSE.into(), reason.into()),
        "{what}"
    );
    assert!(message(&step).contains(words), "{what}: {}", message(&step));
    assert!(step.effects.is_empty(), "{what}: nothing is delivered");
}

/// `conditions` as the status of a ManagedCluster or ManagedClusterAddOn.
fn status_of<T: serde::de::DeserializeOwned>(type_: &str, status: &str) -> Option<T> {
    serde_json::from_value(json!({"conditions": conditions(type_, status)})).ok()
}

#[test]
fn what_the_global_hub_sees_refuses_a_migration_before_any_hub_is_asked() {
    let mcm = validating_mcm();
    let mut same_hub = mcm.clone();
    same_hub.spec.to = "hub1".into();
    refused(
        "same hub",
        &checks(),
        &same_hub,
        1,
        reasons::INVALID_SPEC,
        "hub1",
    );
    let late = timeouts(&mcm).stage.as_secs() + 1;
    refused(
        "late",
        &checks(),
        &mcm,
        late,
        reasons::TIMEOUT,
        "did not report validation",
    );
    let unavailable = |c: &mut Checks| {
        if let Some(mc) = c.from.cluster.as_mut() {
            mc.status = status_of(CLUSTER_AVAILABLE, "Unknown");
        }
    };
    let addon_down = |c: &mut Checks| {
        if let Some(a) = c.from.addon.as_mut() {
            a.status = status_of(AVAILABLE, "False");
        }
    };
    let no_url = |c: &mut Checks| {
        if let Some(mc) = c.to.cluster.as_mut() {
            mc.spec.managed_cluster_client_configs = None;
        }
    };
    let target_outside = |c: &mut Checks| {
        if let Some(mc) = c.to.cluster.as_mut() {
            mc.metadata.labels = None;
        }
    };
    let busy = |c: &mut Checks| {
        c.migrations = vec![other("earlier", MigrationPhase::Registering, &["c9", "c3"])];
    };
    let hub_in = |c: &mut Checks| {
        c.hubs.insert("c2".into());
    };
    // (the change to what a good pair of hubs shows, the reason, words the message holds)
    type Edit = Box<dyn Fn(&mut Checks)>;
    let hub = reasons::HUB_INVALID;
    let set = reasons::FORBIDDEN;
    let table: [(Edit, &str, &str); 10] = [
        (
            Box::new(|c| c.from.cluster = None),
            hub,
            "source hub \"hub1\" is not a managed",
        ),
        (
            Box::new(unavailable),
            hub,
            "source hub hub1 is not Available",
        ),
        (
            Box::new(|c| c.to.addon = None),
            hub,
            "not enabled on target hub hub2",
        ),
        (
            Box::new(addon_down),
            hub,
            "addon on source hub hub1 is not Available",
        ),
        (
            Box::new(|c| c.to.msa = None),
            hub,
            "has no managed-serviceaccount addon",
        ),
        (Box::new(no_url), hub, "no managedClusterClientConfigs"),
        (
            Box::new(|c| c.bound.clear()),
            set,
            "hub hub1 and hub hub2 is in no ManagedClusterSet",
        ),
        (
            Box::new(target_outside),
            set,
            "hub hub2 is in no ManagedClusterSet bound to",
        ),
        (Box::new(hub_in), "ClusterIsHub", "c2 is itself a hub"),
        (
            Box::new(busy),
            reasons::CLUSTER_CONFLICT,
            "c3 is already in active migration ns/earlier",
        ),
    ];
    for (edit, reason, words) in table {
        let mut c = checks();
        edit(&mut c);
        refused(words, &c, &mcm, 1, reason, words);
    }
}

/// Checks that `step` waits in Validating, saying `words`.
fn waits(step: &Step, words: &str) {
    let waiting = (
        MigrationPhase::Validating,
        FALSE.into(),
        reasons::WAITING.into(),
    );
    assert_eq!(outcome(step), waiting, "{words}");
    assert!(message(step).contains(words), "{}", message(step));
}

/// `role`'s work as `step` delivered it, once its agent reported `state` and `clusters`, and
/// said `more`.
fn reply(
    step: &Step,
    role: MigrationRole,
    state: StageState,
    clusters: &[ClusterState],
    more: &[(Field, String)],
) -> Option<Arc<ManifestWork>> {
    answered_with(&step.effects, &work(role), state, clusters, more)
}

/// The names of the works `step` applies.
fn applied(step: &Step) -> Vec<String> {
    writes(&step.effects)
        .0
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}

/// The task `step` delivers to `role`'s hub.
fn task_to(step: &Step, role: MigrationRole) -> MigrationTaskSpec {
    let (applied, _) = writes(&step.effects);
    let (_, w) = applied.into_iter().find(|(n, _)| *n == work(role)).unwrap();
    task_in(w)
}

#[test]
fn a_migration_pending_or_finished_elsewhere_is_no_conflict() {
    let mcm = validating_mcm();
    for phase in [
        MigrationPhase::Pending,
        MigrationPhase::Completed,
        MigrationPhase::Failed,
    ] {
        let mut c = checks();
        c.migrations = vec![mcm.clone(), other("other", phase, &["c1"])];
        waits(&run(&c, &mcm, 1), "source hub hub1's agent");
    }
}

#[test]
fn the_source_is_asked_first_then_the_target_then_the_migration_initializes() {
    use MigrationRole::{Source, Target};
    let mcm = validating_mcm();
    let mut c = checks();
    // Nothing reported yet: only the source is asked.
    let step = run(&c, &mcm, 1);
    waits(&step, "source hub hub1's agent");
    assert!(!applied(&step).contains(&work(Target)));
    let task = task_to(&step, Source);
    assert_eq!(
        (task.stage, task.clusters.len()),
        (TaskStage::Validating, 3)
    );
    // The source checked them and says what they carry.
    let carried = ["c1", "c2", "c3"].map(|n| CarriedCluster {
        name: n.into(),
        ..Default::default()
    });
    let said = [
        (Field::Shape, "multipleHubsConfig".to_string()),
        (Field::Carry, serde_json::to_string(&carried).unwrap()),
    ];
    c.source_work = reply(&step, Source, StageState::Succeeded, &[Valid; 3], &said);
    let step = run(&c, &mcm, 2);
    waits(&step, "target hub hub2's agent");
    assert_eq!(task_to(&step, Target).clusters.len(), 3);
    c.target_work = reply(&step, Target, StageState::Succeeded, &[Valid; 3], &[]);
    let done = run(&c, &mcm, 3);
    let initializing = (
        MigrationPhase::Initializing,
        TRUE.into(),
        reasons::DONE.into(),
    );
    assert_eq!(outcome(&done), initializing);
    assert_eq!(
        done.status.resolved_clusters.as_ref().map(Vec::len),
        Some(3)
    );
    assert_eq!(done.states(), vec![Valid; 3]);
    assert_eq!(done.status.carry_over.as_ref().map(Vec::len), Some(3));
    assert!(done.status.plan.is_none());
    // The target refusing a cluster fails the migration, naming it, its state kept.
    let refusing = [Valid, Exists, Valid];
    c.target_work = reply(&step, Target, StageState::Failed, &refusing, &[]);
    let failed = run(&c, &mcm, 3);
    assert_eq!(outcome(&failed).0, MigrationPhase::Failed);
    assert!(message(&failed).contains("c2"), "{}", message(&failed));
    assert_eq!(failed.states(), refusing);
    // A dry run ends with the plan, naming pooled identities no other migration holds: not
    // the name it would take first, were it free.
    let mut dry = mcm.clone();
    dry.spec.dry_run = Some(true);
    let held = claim(1, &m().key, &[], &Default::default()).unwrap()[0].clone();
    c.held = [(held.clone(), Some("another".to_string()))].into();
    c.target_work = reply(&step, Target, StageState::Succeeded, &[Valid; 3], &[]);
    let planned = run(&c, &dry, 3);
    let completed = (MigrationPhase::Completed, TRUE.into(), reasons::DONE.into());
    assert_eq!(outcome(&planned), completed);
    let plan = planned.status.plan.as_ref().unwrap();
    assert_eq!(plan.clusters.len(), 3);
    assert!(!plan.objects.iter().any(|o| o.name == held));
    assert!(
        planned.status.carry_over.is_none(),
        "a dry run records nothing"
    );
}

#[test]
fn a_carry_over_in_parts_is_read_back_before_the_target_is_asked() {
    let mcm = validating_mcm();
    let mut c = checks();
    let first = run(&c, &mcm, 1);
    let said = [
        (Field::Shape, "multipleHubsConfig".to_string()),
        (Field::CarryParts, "2".to_string()),
        (Field::CarryDigest, "d1".to_string()),
    ];
    let source = MigrationRole::Source;
    c.source_work = reply(&first, source, StageState::Succeeded, &[Valid; 3], &said);
    let step = run(&c, &mcm, 2);
    waits(&step, "0 of 2 parts");
    let applied = applied(&step);
    for i in 0..2 {
        let part = names::carry_over_part(&m().key, source, i);
        assert!(applied.contains(&part), "read-back work {part}");
    }
    assert!(!applied.contains(&work(MigrationRole::Target)));
}

#[test]
fn the_status_of_a_dry_run_of_3000_clusters_with_the_longest_names_stays_well_within_limits() {
    use MigrationRole::{Source, Target};
    // The most clusters a spec may name, each name as long as a cluster's may be.
    let names: Vec<String> = (0..3000).map(|i| format!("c{i:0>62}")).collect();
    let mut mcm = validating_mcm();
    mcm.spec.included_managed_clusters = Some(names.clone());
    mcm.spec.dry_run = Some(true);
    mcm.spec.max_concurrency = Some(100);
    let m = Migration {
        clusters: names.len(),
        ..m()
    };
    let run = |c: &Checks, secs: u64| {
        let mut step = step_of(&mcm);
        step.now = at(secs);
        validate(c, &mcm, &m, &mut step).unwrap();
        step
    };
    let mut c = checks();
    let step = run(&c, 1);
    // What each cluster carries, inline (an agent would send more than 200 KiB in parts:
    // this is the larger status).
    let carried: Vec<CarriedCluster> = names
        .iter()
        .map(|n| CarriedCluster {
            name: n.clone(),
            ..Default::default()
        })
        .collect();
    let said = [
        (Field::Shape, "multipleHubsConfig".to_string()),
        (Field::Carry, serde_json::to_string(&carried).unwrap()),
    ];
    let all = vec![Valid; names.len()];
    c.source_work = reply(&step, Source, StageState::Succeeded, &all, &said);
    let step = run(&c, 2);
    for w in writes(&step.effects).0 {
        let size: usize = w.1["spec"]["workload"]["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| serde_json::to_vec(o).unwrap().len())
            .sum();
        assert!(size <= 500 * 1024, "{}: {size} bytes", w.0);
    }
    c.target_work = reply(&step, Target, StageState::Succeeded, &all, &[]);
    let planned = run(&c, 3);
    assert_eq!(
        outcome(&planned).0,
        MigrationPhase::Completed,
        "{}",
        message(&planned)
    );
    let plan = planned.status.plan.as_ref().unwrap();
    assert_eq!((plan.clusters.len(), plan.waves.len()), (3000, 30));
    // Its tasks named, without their bodies (which repeat the clusters).
    let tasks: Vec<&PlannedObject> = plan
        .objects
        .iter()
        .filter(|o| o.kind == "MigrationTask")
        .collect();
    assert_eq!(tasks.len(), 2);
    assert!(tasks.iter().all(|t| t.object.is_none()));
    // etcd keeps objects of up to 1.5 MiB, spec and managed fields included: the status,
    // plan included, stays under half of that.
    let size = serde_json::to_vec(&planned.status).unwrap().len();
    assert!(size < 768 * 1024, "the status is {size} bytes");
    // A migration that runs keeps less: the clusters, one character of state each, and what
    // they carry (inline up to 200 KiB; past that in parts, named by count and digest).
    let mut running = mcm.clone();
    running.spec.dry_run = None;
    let mut step = step_of(&running);
    step.now = at(3);
    validate(&c, &running, &m, &mut step).unwrap();
    assert_eq!(outcome(&step).0, MigrationPhase::Initializing);
    let size = serde_json::to_vec(&step.status).unwrap().len();
    assert!(size < 512 * 1024, "the status is {size} bytes");
}

#[test]
fn a_source_reporting_more_carry_over_parts_than_can_exist_is_refused_without_reading_them() {
    let mcm = validating_mcm();
    let source = MigrationRole::Source;
    // (the parts the source reports, refused)
    let most = migration_api::migration::MAX_CARRY_OVER_PARTS;
    let table = [
        ("4000000000".to_string(), true),
        ("-1".to_string(), true),
        ((most + 1).to_string(), true),
        (most.to_string(), false),
    ];
    for (count, refused) in table {
        let mut c = checks();
        let first = run(&c, &mcm, 1);
        let said = [
            (Field::Shape, "multipleHubsConfig".to_string()),
            (Field::CarryParts, count.clone()),
            (Field::CarryDigest, "d1".to_string()),
        ];
        c.source_work = reply(&first, source, StageState::Succeeded, &[Valid; 3], &said);
        let step = run(&c, &mcm, 2);
        if refused {
            let (phase, _, reason) = outcome(&step);
            assert_eq!(
                (phase, reason.as_str()),
                (MigrationPhase::Failed, reasons::HUB_INVALID),
                "{count}"
            );
            assert!(
                message(&step).contains("out of range"),
                "{}",
                message(&step)
            );
            // Not one read-back work for a count no source can have.
            assert!(
                !applied(&step).contains(&names::carry_over_part(&m().key, source, 0)),
                "{count}"
            );
        } else {
            waits(&step, &format!("0 of {count} parts"));
        }
    }
}
