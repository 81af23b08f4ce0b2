//! The decisions about carried objects' pauses, in tables.

use migration_api::carried::CarryOverResource;
use migration_api::names::annotations::OBJECTS_PAUSED;

use super::tests::{
    arriving, cluster_with, pending_csr, target_cluster, target_task, task_with_key,
};
use super::*;

fn carrying(mut task: MigrationTask, kinds: &[(&str, &str)]) -> MigrationTask {
    task.spec.carry_kinds = Some(
        kinds
            .iter()
            .map(|(g, r)| CarryOverResource {
                group: (*g).into(),
                resource: (*r).into(),
                label_selector: None,
            })
            .collect(),
    );
    task
}

const CD: (&str, &str) = ("hive.openshift.io", "clusterdeployments");
const SECRETS: (&str, &str) = ("", "secrets");

#[test]
fn the_source_pauses_once_and_only_what_has_a_pause() {
    let task = carrying(task_with_key("k1"), &[CD, SECRETS]);
    let fresh = cluster_with(&[], true, true);
    assert!(to_pause(&task, &fresh));
    assert!(!to_pause(
        &task,
        &cluster_with(&[(OBJECTS_PAUSED, "k1")], true, true)
    ));
    // Another migration's mark is not this one's.
    assert!(to_pause(
        &task,
        &cluster_with(&[(OBJECTS_PAUSED, "k0")], true, true)
    ));
    // Secrets have no controller to pause; no kinds, nothing.
    assert!(!to_pause(
        &carrying(task_with_key("k1"), &[SECRETS]),
        &fresh
    ));
    assert!(!to_pause(&task_with_key("k1"), &fresh));
}

#[test]
fn a_cluster_taken_back_has_its_objects_resumed_first_and_is_not_back_before() {
    let task = carrying(task_with_key("k1"), &[CD]);
    let paused = cluster_with(&[(OBJECTS_PAUSED, "k1")], true, true);
    let seen = Returning {
        mc: &paused,
        settings_back: true,
        renewed_since_restore: true,
        finish: false,
    };
    let (state, effects) = take_back(&task, &seen, "2026-01-01T00:00:00Z");
    assert_eq!(state, ClusterState::RollingBack);
    assert_eq!(effects.first(), Some(&Effect::ResumeObjects), "{effects:?}");
    // Without the mark: as before, no resume.
    let plain = cluster_with(&[], true, true);
    let (_, effects) = take_back(
        &task,
        &Returning { mc: &plain, ..seen },
        "2026-01-01T00:00:00Z",
    );
    assert!(!effects.contains(&Effect::ResumeObjects), "{effects:?}");
}

#[test]
fn the_targets_copies_are_resumed_once_the_cluster_registered_there() {
    use migration_api::names::annotations::{OBJECTS_CARRIED, OBJECTS_RESUMED, PRE_CREATED};
    let task = carrying(target_task(), &[CD]);
    let requests = pending_csr();
    let registered = |mc| Arriving {
        released: false,
        carries_objects: true,
        ..arriving(mc, &requests)
    };
    let up = target_cluster(
        &[(PRE_CREATED, "k1"), (OBJECTS_CARRIED, "k1")],
        true,
        true,
        true,
    );
    let (state, effects) = arrive(&task, &registered(Some(&up)));
    assert_eq!(state, ClusterState::Available);
    assert!(effects.contains(&Effect::ResumeObjects), "{effects:?}");
    // Once: resumed is marked.
    let resumed = target_cluster(
        &[
            (PRE_CREATED, "k1"),
            (OBJECTS_CARRIED, "k1"),
            (OBJECTS_RESUMED, "k1"),
        ],
        true,
        true,
        true,
    );
    let (_, effects) = arrive(&task, &registered(Some(&resumed)));
    assert!(!effects.contains(&Effect::ResumeObjects), "{effects:?}");
    // Not before it is Available.
    let joined = target_cluster(
        &[(PRE_CREATED, "k1"), (OBJECTS_CARRIED, "k1")],
        true,
        true,
        false,
    );
    let (_, effects) = arrive(&task, &registered(Some(&joined)));
    assert!(!effects.contains(&Effect::ResumeObjects), "{effects:?}");
    // Nothing pausable carried: nothing to resume.
    let (_, effects) = arrive(&carrying(target_task(), &[SECRETS]), &registered(Some(&up)));
    assert!(!effects.contains(&Effect::ResumeObjects), "{effects:?}");
}
