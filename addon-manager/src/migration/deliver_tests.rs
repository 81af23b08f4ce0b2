//! Table tests of what a stage delivers to each hub, built from what was read ([`World`])
//! and the status, without an API server: where the bootstrap token may go, what waits for
//! it, which clusters the target may admit, and the order of the writes.

use super::outcome_tests::migration;
use super::tests::step_of;
use super::*;
use base64::Engine;

const TOKEN: &str = "tok-3f9a77c1";

pub(super) fn kubeconfig() -> String {
    mr::bootstrap_kubeconfig("https://hub2.example:6443", None, TOKEN, None).unwrap()
}

/// Whether `v` holds the token, as written or inside the base64 kubeconfig.
fn holds_token(v: &Value) -> bool {
    let text = v.to_string();
    let encoded = base64::engine::general_purpose::STANDARD.encode(kubeconfig());
    text.contains(TOKEN) || text.contains(&encoded)
}

/// Migration ns/move of c1..c3 from hub1 to hub2, the clusters in `states`.
pub(super) fn mcm(states: &[ClusterState]) -> ManagedClusterMigration {
    mcm_of(&["c1".into(), "c2".into(), "c3".into()], states)
}

/// Migration ns/move of `clusters` from hub1 to hub2, in `states`.
pub(super) fn mcm_of(clusters: &[String], states: &[ClusterState]) -> ManagedClusterMigration {
    let spec = ManagedClusterMigrationSpec {
        from: "hub1".into(),
        to: "hub2".into(),
        included_managed_clusters: Some(clusters.to_vec()),
        ..Default::default()
    };
    let mut mcm = ManagedClusterMigration::new("move", spec);
    mcm.metadata.namespace = Some("ns".into());
    mcm.metadata.uid = Some("u1".into());
    mcm.status = Some(ManagedClusterMigrationStatus {
        resolved_clusters: Some(clusters.to_vec()),
        cluster_states: Some(ClusterState::encode(states)),
        ..Default::default()
    });
    mcm
}

/// What reading the global hub gave: every identity's kubeconfig and the connection.
pub(super) fn world() -> World {
    World {
        addon: "cluster-migration".into(),
        source_ns: "open-cluster-management-agent-addon".into(),
        target_ns: "open-cluster-management-agent-addon".into(),
        msa_ns: "open-cluster-management-agent-addon".into(),
        kubeconfigs: Some(vec![kubeconfig()]),
        connection: Some(kubeconfig()),
        ..Default::default()
    }
}

pub(super) fn m() -> Migration {
    Migration {
        clusters: 3,
        ..migration()
    }
}

/// The works the effects apply, by name, and the works they remove.
pub(super) fn writes(effects: &[Effect]) -> (Vec<(String, &Value)>, Vec<String>) {
    let mut applied = Vec::new();
    let mut removed = Vec::new();
    for e in effects {
        match e {
            Effect::ApplyWork(w) => {
                let name = w["metadata"]["name"].as_str().unwrap_or_default();
                applied.push((name.to_owned(), w));
            }
            Effect::RemoveWork { name, .. } => removed.push(name.clone()),
            Effect::DeliverParts { .. } => applied.push(("parts".into(), &Value::Null)),
        }
    }
    (applied, removed)
}

/// The MigrationTask a work carries.
pub(super) fn task_in(work: &Value) -> MigrationTaskSpec {
    let manifests = work["spec"]["workload"]["manifests"].as_array().unwrap();
    let task = manifests
        .iter()
        .find(|o| o["kind"] == "MigrationTask")
        .unwrap();
    serde_json::from_value(task["spec"].clone()).unwrap()
}

/// The source's part of `stage` with nothing released, taken back or detached; its revision.
fn source_only(
    world: &World,
    mcm: &ManagedClusterMigration,
    step: &mut Step,
    stage: TaskStage,
    need_bootstrap: bool,
) -> Option<String> {
    let part = SourcePart::default();
    deliver_source(world, mcm, &m(), step, stage, part, need_bootstrap).unwrap()
}

#[test]
fn the_token_goes_only_in_the_sources_bootstrap_work_and_only_while_clusters_may_switch() {
    use ClusterState::*;
    let m = m();
    let source_work = names::migration_work(&m.key, MigrationRole::Source);
    let target_work = names::migration_work(&m.key, MigrationRole::Target);
    let bootstrap_work = names::migration_bootstrap_work(&m.key);
    // (stage, the bootstrap work applied with the token, removed)
    let table = [
        (TaskStage::Deploying, true, false),
        (TaskStage::Registering, true, false),
        (TaskStage::Rollbacking, false, true),
        (TaskStage::Cleaning, false, true),
    ];
    for (stage, carries, removes) in table {
        let mcm = mcm(&[Switching, Ready, Available]);
        let mut step = step_of(&mcm);
        // Even handed the kubeconfigs in every stage, the builder keeps to the rule.
        let world = world();
        deliver_target(&world, &mcm, &m, &mut step, stage, vec![], true).unwrap();
        let src = source_only(&world, &mcm, &mut step, stage, false);
        assert!(src.is_some(), "{stage:?}");
        let (applied, removed) = writes(&step.effects);
        let names: Vec<&str> = applied.iter().map(|(n, _)| n.as_str()).collect();
        let mut want = vec![target_work.as_str()];
        if carries {
            want.push(bootstrap_work.as_str());
        }
        want.push(source_work.as_str());
        assert_eq!(names, want, "{stage:?}: the bootstrap work before the task");
        assert_eq!(removed.contains(&bootstrap_work), removes, "{stage:?}");
        for (name, work) in &applied {
            assert_eq!(
                holds_token(work),
                *name == bootstrap_work,
                "{stage:?}: {name}"
            );
        }
    }
}

#[test]
fn a_source_that_needs_the_token_waits_for_it_and_sends_nothing() {
    use ClusterState::*;
    let m = m();
    let mcm = mcm(&[Ready, Ready, Ready]);
    for stage in [TaskStage::Deploying, TaskStage::Registering] {
        let mut step = step_of(&mcm);
        let world = World {
            kubeconfigs: None,
            ..world()
        };
        let src = source_only(&world, &mcm, &mut step, stage, true);
        assert_eq!(src, None, "{stage:?}");
        assert_eq!(step.effects, vec![], "{stage:?}: nothing is written");
    }
    // A bootstrap work being deleted is not applied again; the task still goes.
    let mut step = step_of(&mcm);
    let mut going = ManifestWork::default();
    going.metadata.deletion_timestamp = Some(now());
    let world = World {
        bootstrap_work: Some(Arc::new(going)),
        ..world()
    };
    let src = source_only(&world, &mcm, &mut step, TaskStage::Registering, true);
    assert!(src.is_some());
    let (applied, removed) = writes(&step.effects);
    let names: Vec<&str> = applied.iter().map(|(n, _)| n.as_str()).collect();
    let source_work = names::migration_work(&m.key, MigrationRole::Source);
    assert_eq!((names, removed), (vec![source_work.as_str()], vec![]));
}

#[test]
fn the_target_admits_only_released_clusters_and_hears_of_parts_before_its_task() {
    use ClusterState::*;
    let m = m();
    let mut mcm = mcm(&[Switching, Ready, Available]);
    let parts = CarryOverParts {
        count: 2,
        digest: "d1".into(),
    };
    if let Some(s) = mcm.status.as_mut() {
        s.carry_over_parts = Some(parts.clone());
    }
    let world = world();
    // (stage, released, the connection named)
    let table = [
        (TaskStage::Deploying, None, false),
        (
            TaskStage::Registering,
            Some(vec!["c1".to_string(), "c3".to_string()]),
            true,
        ),
        (TaskStage::Cleaning, None, true),
    ];
    for (stage, released, connection) in table {
        let mut step = step_of(&mcm);
        let rev = deliver_target(&world, &mcm, &m, &mut step, stage, vec![], true).unwrap();
        assert_eq!(
            step.effects.first(),
            Some(&Effect::DeliverParts {
                parts: parts.clone(),
                target_ns: world.target_ns.clone(),
            }),
            "{stage:?}"
        );
        let (applied, _) = writes(&step.effects);
        let task = task_in(applied[1].1);
        assert_eq!(task.released, released, "{stage:?}");
        assert_eq!(task.carry_over_parts.as_ref(), Some(&parts), "{stage:?}");
        assert_eq!(task.revision.as_deref(), Some(rev.as_str()), "{stage:?}");
        let named = task.bootstrap_connection.as_deref();
        assert_eq!(named.is_some(), connection, "{stage:?}");
        assert!(!named.unwrap_or_default().contains(TOKEN), "{stage:?}");
    }
}
