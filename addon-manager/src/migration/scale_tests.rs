//! A migration of the most clusters a spec may name (3000), with the longest names a cluster
//! may have (63 characters): every work it delivers stays within upstream's 500 KiB limit on a
//! work's manifests (ocm `pkg/work/webhook/common/validator.go`), nothing the agents need is
//! lost in the split, and the task's work waits for the grants it needs. Without an API
//! server: the phases' delivery runs on a [`World`] built by hand.

use super::deliver_tests::{mcm_of, world};
use super::outcome_tests::migration;
use super::tests::step_of;
use super::*;
use ClusterState::*;
use migration_api::carried::CarryOverResource;
use migration_api::common::set_condition;
use migration_api::migration::MigrationTaskSpec;
use migration_api::ocm::work::ManifestWorkStatus;

/// Upstream's limit on the manifests of one work.
const UPSTREAM_LIMIT: usize = 500 * 1024;

fn names(n: usize, len: usize) -> Vec<String> {
    (0..n).map(|i| format!("c{i:0>w$}", w = len - 1)).collect()
}

fn manifests_of(work: &Value) -> &[Value] {
    work["spec"]["workload"]["manifests"]
        .as_array()
        .map_or(&[], Vec::as_slice)
}

/// The size of a work's manifests as upstream's webhook adds them up.
fn manifests_size(work: &Value) -> usize {
    manifests_of(work)
        .iter()
        .map(|o| serde_json::to_vec(o).map_or(0, |b| b.len()))
        .sum()
}

/// `work` as the watch shows it once its hub applied it as delivered.
fn placed(work: &Value) -> Arc<ManifestWork> {
    let mut w: ManifestWork = serde_json::from_value(work.clone()).unwrap();
    w.metadata.generation = Some(1);
    w.metadata.annotations = Some(
        [(
            names::annotations::APPLIED_HASH.to_owned(),
            crate::render::spec_hash(work),
        )]
        .into(),
    );
    let mut conditions = Vec::new();
    set_condition(&mut conditions, "Applied", "True", "Applied", "", Some(1));
    w.status = Some(ManifestWorkStatus {
        conditions: Some(conditions),
        ..Default::default()
    });
    Arc::new(w)
}

/// What `role`'s hub is delivered in `stage` of a migration of `clusters` (all of them
/// released, and in Cleaning detached or rolled back), on `world`; the step's effects.
fn delivered(
    world: &World,
    clusters: &[String],
    shape: &str,
    stage: TaskStage,
    rolled_back: bool,
) -> Step {
    let n = clusters.len();
    let m = Migration {
        clusters: n,
        ..migration()
    };
    let mut mcm = mcm_of(clusters, &vec![Available; n]);
    mcm.spec.carry_over = Some(vec![CarryOverResource {
        group: "hive.openshift.io".into(),
        resource: "clusterdeployments".into(),
        label_selector: None,
    }]);
    if let Some(s) = mcm.status.as_mut() {
        s.bootstrap_delivery = Some(shape.into());
    }
    let mut step = step_of(&mcm);
    let (rollback, detach) = match (stage, rolled_back) {
        (TaskStage::Rollbacking | TaskStage::Cleaning, true) => (clusters.to_vec(), Vec::new()),
        (TaskStage::Cleaning, false) => (Vec::new(), clusters.to_vec()),
        _ => (Vec::new(), Vec::new()),
    };
    deliver_target(world, &mcm, &m, &mut step, stage, rollback.clone(), true).unwrap();
    let part = SourcePart {
        released: clusters.to_vec(),
        rollback,
        detach,
    };
    deliver_source(world, &mcm, &m, &mut step, stage, part, false).unwrap();
    step
}

fn applied(step: &Step) -> Vec<&Value> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::ApplyWork(w) => Some(w),
            _ => None,
        })
        .collect()
}

/// The cluster names every ClusterRole of `works` lists for `resource`.
fn granted(works: &[&Value], resource: &str) -> BTreeSet<String> {
    works
        .iter()
        .flat_map(|w| manifests_of(w))
        .filter(|o| o["kind"] == "ClusterRole")
        .flat_map(|o| o["rules"].as_array().cloned().unwrap_or_default())
        .filter(|r| r["resources"][0] == resource)
        .flat_map(|r| r["resourceNames"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect()
}

fn task_of(works: &[&Value], role: MigrationRole) -> MigrationTaskSpec {
    let name = names::migration_work(&migration().key, role);
    let work = works
        .iter()
        .find(|w| w["metadata"]["name"] == name.as_str());
    let task = manifests_of(work.unwrap())
        .iter()
        .find(|o| o["kind"] == "MigrationTask")
        .unwrap();
    serde_json::from_value(task["spec"].clone()).unwrap()
}

#[test]
fn every_work_of_a_migration_of_3000_clusters_stays_within_upstreams_limit() {
    let clusters = names(3000, 63);
    let all: BTreeSet<String> = clusters.iter().cloned().collect();
    let table = [
        (TaskStage::Deploying, false),
        (TaskStage::Registering, false),
        (TaskStage::Rollbacking, true),
        (TaskStage::Cleaning, false),
        (TaskStage::Cleaning, true),
    ];
    for shape in ["MultipleHubsConfig", "ManifestWork"] {
        for (stage, rolled_back) in table {
            let what = format!("{shape} {stage:?} rolled back {rolled_back}");
            // First the grants that do not fit go alone; the tasks wait for them.
            let first = delivered(&world(), &clusters, shape, stage, rolled_back);
            let grant_works: Vec<&Value> = applied(&first)
                .into_iter()
                .filter(|w| w["metadata"]["name"].as_str().unwrap().contains("-grants-"))
                .collect();
            assert!(!grant_works.is_empty(), "{what}: grants split off");
            assert!(
                applied(&first).iter().all(|w| {
                    w["metadata"]["name"].as_str().unwrap().contains("-grants-")
                        || w["metadata"]["name"]
                            == names::migration_bootstrap_work(&migration().key).as_str()
                }),
                "{what}: no task before its grants are in place"
            );
            // Once they are, the tasks follow.
            let mut world = world();
            world.extra_works = grant_works
                .iter()
                .map(|w| {
                    (
                        w["metadata"]["name"].as_str().unwrap().to_owned(),
                        placed(w),
                    )
                })
                .collect();
            let step = delivered(&world, &clusters, shape, stage, rolled_back);
            let works = applied(&step);
            for w in &works {
                let size = manifests_size(w);
                assert!(
                    size <= UPSTREAM_LIMIT,
                    "{what}: {} is {size} bytes",
                    w["metadata"]["name"]
                );
            }
            // Nothing lost in the split: every cluster is granted on both hubs, and the
            // tasks name every cluster released (as marks: 3000 names would not fit thrice).
            assert_eq!(granted(&works, "managedclusters"), all, "{what}");
            assert_eq!(granted(&works, "managedclusters/accept"), all, "{what}");
            for role in [MigrationRole::Source, MigrationRole::Target] {
                let task = task_of(&works, role);
                assert_eq!(task.clusters.len(), 3000, "{what}");
                assert!(
                    task.cluster_marks.is_some() && task.released.is_none(),
                    "{what}"
                );
            }
            let source = task_of(&works, MigrationRole::Source);
            assert_eq!(source.released_names().len(), 3000, "{what}");
            let releases = works
                .iter()
                .flat_map(|w| manifests_of(w))
                .filter(|o| {
                    o["kind"] == "RoleBinding"
                        && o["roleRef"]["name"]
                            .as_str()
                            .is_some_and(|r| r.contains("release"))
                })
                .count();
            let detached = stage == TaskStage::Cleaning && !rolled_back;
            assert_eq!(source.detach_names().len(), if detached { 3000 } else { 0 });
            let target_released = stage == TaskStage::Cleaning && rolled_back;
            // Each hub releases the works of the clusters it lets go of in Cleaning, but an ACM
            // source, whose import controller force-deletes the works of the clusters it
            // detaches.
            let source_released = detached && shape == "ManifestWork";
            assert_eq!(
                releases,
                if source_released || target_released {
                    3000
                } else {
                    0
                },
                "{what}"
            );
        }
    }
}

#[test]
fn a_small_migration_keeps_one_work_per_hub_and_lists_its_clusters() {
    let clusters = names(20, 12);
    let step = delivered(
        &world(),
        &clusters,
        "MultipleHubsConfig",
        TaskStage::Cleaning,
        false,
    );
    let works = applied(&step);
    assert!(
        works
            .iter()
            .all(|w| !w["metadata"]["name"].as_str().unwrap().contains("-grants-")),
        "nothing split"
    );
    let source = task_of(&works, MigrationRole::Source);
    assert_eq!(source.detach.as_ref().map(Vec::len), Some(20));
    assert_eq!(
        source.cluster_marks, None,
        "lists, as every agent reads them"
    );
}

#[test]
fn grant_works_no_longer_needed_go_once_the_task_carries_what_they_held() {
    let clusters = names(3000, 63);
    let stage = TaskStage::Registering;
    let first = delivered(&world(), &clusters, "MultipleHubsConfig", stage, false);
    let mut world = world();
    for w in applied(&first) {
        world.extra_works.insert(
            w["metadata"]["name"].as_str().unwrap().to_owned(),
            placed(w),
        );
    }
    // A grant work beyond what is delivered now (a split of an earlier stage).
    let stale = names::migration_grants_work(&migration().key, MigrationRole::Source, 40);
    let mut extra = serde_json::to_value(&*placed(applied(&first)[0])).unwrap();
    extra["metadata"]["name"] = json!(stale);
    world.extra_works.insert(stale.clone(), placed(&extra));
    let removed = |step: &Step| -> Vec<String> {
        step.effects
            .iter()
            .filter_map(|e| match e {
                Effect::RemoveWork { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect()
    };
    // The task's work not in place yet: the stale grants stay.
    let step = delivered(&world, &clusters, "MultipleHubsConfig", stage, false);
    assert_eq!(removed(&step), Vec::<String>::new());
    // In place: they go.
    let tasks: Vec<Value> = applied(&step)
        .into_iter()
        .filter(|w| !w["metadata"]["name"].as_str().unwrap().contains("-grants-"))
        .cloned()
        .collect();
    for t in &tasks {
        let p = placed(t);
        match t["metadata"]["name"].as_str().unwrap() {
            n if n.ends_with("-source") => world.source_work = Some(p),
            n if n.ends_with("-target") => world.target_work = Some(p),
            _ => {}
        }
    }
    let step = delivered(&world, &clusters, "MultipleHubsConfig", stage, false);
    assert_eq!(removed(&step), vec![stale]);
}

#[test]
fn the_bootstrap_objects_of_many_identities_with_a_large_ca_bundle_go_in_works_within_the_limit() {
    use base64::Engine;
    // An OpenShift API server's CA bundle holds several signers: 8 KiB of PEM here, and a
    // service-account token of 1 KiB.
    let pem = format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        "A".repeat(8 * 1024)
    );
    let ca = base64::engine::general_purpose::STANDARD.encode(pem);
    let token = "t".repeat(1024);
    let kubeconfig =
        mr::bootstrap_kubeconfig("https://hub2.example:6443", Some(&ca), &token, None).unwrap();
    let clusters = names(3000, 12);
    let identities = names::clusters_per_identity(clusters.len());
    let identities = clusters.len().div_ceil(identities);
    let world = World {
        kubeconfigs: Some(vec![kubeconfig; identities]),
        ..world()
    };
    for shape in ["MultipleHubsConfig", "ManifestWork"] {
        let step = delivered(&world, &clusters, shape, TaskStage::Registering, false);
        let bootstrap: Vec<&Value> = applied(&step)
            .into_iter()
            .filter(|w| {
                w["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .contains("-bootstrap")
            })
            .collect();
        assert!(bootstrap.len() > 1, "{shape}: split");
        for w in &bootstrap {
            assert!(
                manifests_size(w) <= UPSTREAM_LIMIT,
                "{shape}: {}",
                w["metadata"]["name"]
            );
        }
        let secrets = bootstrap
            .iter()
            .flat_map(|w| manifests_of(w))
            .filter(|o| o["kind"] == "Secret")
            .count();
        assert_eq!(secrets, identities, "{shape}: every identity's secret");
        // Once no cluster may switch, every one of them goes.
        let mut later = World {
            kubeconfigs: None,
            ..world.clone()
        };
        for w in &bootstrap[1..] {
            later.extra_works.insert(
                w["metadata"]["name"].as_str().unwrap().to_owned(),
                placed(w),
            );
        }
        let step = delivered(&later, &clusters, shape, TaskStage::Cleaning, false);
        let removed = step
            .effects
            .iter()
            .filter(|e| matches!(e, Effect::RemoveWork { name, .. } if name.contains("-bootstrap")))
            .count();
        assert_eq!(removed, bootstrap.len(), "{shape}");
    }
}
