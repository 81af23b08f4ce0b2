//! A cluster's writes: their order (a taint change carries the resourceVersion it was read at,
//! so it must never follow another write of the same cluster in one reconcile), and what the
//! source's cleanup writes.

use super::tests::{cluster_with, returning, source_task, tainted, target_cluster, target_task};
use super::*;

/// Whether a taint change comes after another write of the cluster in `effects`: it would
/// fail with a conflict every time (the first write changed the resourceVersion).
fn taint_after_a_write(effects: &[Effect]) -> bool {
    let first_write = effects
        .iter()
        .position(|e| matches!(e, Effect::Patch(_) | Effect::Refuse(..)));
    let last_taint = effects.iter().rposition(|e| matches!(e, Effect::Taint(_)));
    matches!((first_write, last_taint), (Some(w), Some(t)) if t > w)
}

#[test]
fn a_taint_change_never_follows_another_write_of_the_cluster() {
    let task = source_task(BootstrapDelivery::KlusterletConfig);
    let config = task.spec.klusterlet_config_at(0);
    // The source's first look at a cluster: marks and taint, in one write.
    let fresh = cluster_with(&[], true, true);
    let (_, marking) = register(
        &task,
        &Registering {
            mc: &fresh,
            release: false,
            config: config.as_deref(),
            derived_ready: true,
            switched: false,
            delivered: false,
            restarted: false,
        },
    );
    // Taking a tainted cluster back: the taint off, then the restore.
    let refused = tainted(cluster_with(&[(MIGRATING, "k1")], false, false), "k1");
    let (_, returning_effects) = take_back(&task, &returning(&refused, false, false), "now");
    // The target's cleanup of a cluster that stays, still tainted: marks and taint in one.
    let up = tainted(
        target_cluster(&[(PRE_CREATED, "k1"), (MIGRATING, "k1")], true, true, true),
        "k1",
    );
    let unmarking = unmark(Some(&up), "k1");
    for (what, effects) in [
        ("register", &marking),
        ("take_back", &returning_effects),
        ("unmark", &unmarking),
    ] {
        assert!(
            effects.iter().any(|e| matches!(e, Effect::Taint(_))),
            "{what}: {effects:?}"
        );
        assert!(!taint_after_a_write(effects), "{what}: {effects:?}");
    }
    assert_eq!(marking.len(), 1, "{marking:?}");
    let [Effect::Taint(t)] = unmarking.as_slice() else {
        panic!("{unmarking:?}")
    };
    assert_eq!(t["spec"]["taints"], json!([]));
    assert_eq!(t["metadata"]["annotations"][PRE_CREATED], Value::Null);
    assert!(t["metadata"]["annotations"].get(MIGRATING).is_some());
}

#[test]
fn the_executor_sends_taint_changes_first_and_keeps_the_rest_in_order() {
    let marks = Effect::Patch(json!({"metadata": {"annotations": {"a": "1"}}}));
    let taint = Effect::Taint(TaintChange {
        patch: json!({"spec": {"taints": []}}),
        removes: None,
        unmarks: vec![],
    });
    let effects = vec![
        marks.clone(),
        Effect::Await(true),
        taint.clone(),
        Effect::Detach,
    ];
    assert!(taint_after_a_write(&effects));
    let ordered = taint_first(effects);
    assert_eq!(
        ordered,
        vec![taint, marks, Effect::Await(true), Effect::Detach]
    );
    assert!(!taint_after_a_write(&ordered));
}

#[test]
fn a_patch_merged_with_a_taint_change_keeps_both_and_the_precondition() {
    let taint = Some(Effect::Taint(TaintChange {
        patch: json!({
            "spec": {"taints": []},
            "metadata": {"uid": "u1", "resourceVersion": "7"}
        }),
        removes: Some((vec![0], "k1".into())),
        unmarks: vec![],
    }));
    let merged = with_taint(
        json!({"metadata": {"annotations": {"a": null}}, "spec": {"hubAcceptsClient": true}}),
        taint,
    );
    // With the marks, the write is the merge patch with the resourceVersion (no JSON patch
    // for the taint alone: the marks need the whole object unchanged).
    let expected = TaintChange {
        patch: json!({
            "spec": {"taints": [], "hubAcceptsClient": true},
            "metadata": {"uid": "u1", "resourceVersion": "7", "annotations": {"a": null}}
        }),
        removes: None,
        unmarks: vec![],
    };
    assert_eq!(expected.json_patch(), None);
    assert_eq!(merged, Effect::Taint(expected));
    // No taint change: the patch goes as it is, without a precondition.
    let plain = json!({"metadata": {"annotations": {"a": "1"}}});
    assert_eq!(
        with_taint(plain.clone(), None),
        Effect::Patch(plain.clone())
    );
}

#[test]
fn cleaning_detaches_only_what_the_manager_names_and_only_once() {
    use ClusterState::*;
    let present = cluster_with(&[], false, false);
    // Plain OCM: nothing else releases the works of a cluster that left.
    assert_eq!(
        let_go(true, Some(&present), false),
        (Switching, vec![Effect::Detach, Effect::ReleaseWorks])
    );
    // ACM: the import controller force-deletes the works of a deleted cluster it refuses, or
    // that is not Available (an accepted one, once its lease here runs out): the agent, which
    // the manager grants nothing in the clusters' namespaces there, leaves them to it.
    assert_eq!(
        let_go(true, Some(&present), true),
        (Switching, vec![Effect::Detach])
    );
    let accepted = cluster_with(&[], true, false);
    assert_eq!(
        let_go(true, Some(&accepted), true),
        (Switching, vec![Effect::Detach])
    );
    let mut deleting = present.clone();
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-01-01T00:00:00Z".parse().unwrap(),
        ));
    assert_eq!(
        let_go(true, Some(&deleting), false),
        (Switching, vec![Effect::ReleaseWorks])
    );
    // ACM, refused and deleting: the import controller and the registration GC finish it.
    assert_eq!(let_go(true, Some(&deleting), true), (Detached, vec![]));
    let mut accepted_deleting = accepted.clone();
    accepted_deleting.metadata.deletion_timestamp = deleting.metadata.deletion_timestamp.clone();
    assert_eq!(
        let_go(true, Some(&accepted_deleting), true),
        (Detached, vec![])
    );
    assert_eq!(let_go(true, None, false), (Detached, vec![]));
    // Arrived but not confirmed by the target: left exactly as it is.
    assert_eq!(let_go(false, Some(&present), true), (Switching, vec![]));
}

#[test]
fn the_taints_removal_alone_tests_what_it_removes_not_the_whole_object() {
    let task = target_task();
    // A cluster that arrived on the target, still tainted, behind another writer's taint: the
    // migration's taint comes off alone.
    let mut up = tainted(
        target_cluster(&[(PRE_CREATED, "k1"), (MIGRATING, "k1")], true, true, true),
        "k1",
    );
    let other = migration_api::ocm::cluster::Taint {
        key: "cluster.open-cluster-management.io/unreachable".into(),
        effect: "NoSelect".into(),
        ..Default::default()
    };
    up.spec.taints.get_or_insert_default().insert(0, other);
    up.metadata.uid = Some("u1".into());
    up.metadata.resource_version = Some("41".into());
    let Some(Effect::Taint(change)) = taint(&up, task.spec.key(), false) else {
        panic!("no taint change");
    };
    let ops = change.json_patch().expect("a lone removal");
    assert_eq!(
        serde_json::to_value(&ops).unwrap(),
        json!([
            {"op": "test", "path": "/metadata/uid", "value": "u1"},
            {"op": "test", "path": "/spec/taints/1/key", "value": names::taints::MIGRATING},
            {"op": "test", "path": "/spec/taints/1/value", "value": "k1"},
            {"op": "remove", "path": "/spec/taints/1"}
        ])
    );
    // Applied (RFC 6902, as the API server applies it): the cluster as read, and again after a
    // status write (a newer resourceVersion, which the merge patch's precondition refuses),
    // lose the migration's taint alone; a list another writer changed meanwhile refuses it.
    let read = serde_json::to_value(&up).unwrap();
    let mut written = read.clone();
    written["metadata"]["resourceVersion"] = json!("42");
    written["status"] = json!({"conditions": [{"type": "ManagedClusterJoined", "status": "True"}]});
    for doc in [read.clone(), written] {
        let mut doc = doc;
        json_patch::patch(&mut doc, &ops).unwrap();
        assert_eq!(
            doc["spec"]["taints"],
            json!([{"key": "cluster.open-cluster-management.io/unreachable", "effect": "NoSelect"}])
        );
    }
    let mut moved = read;
    moved["spec"]["taints"].as_array_mut().unwrap().remove(0);
    assert!(json_patch::patch(&mut moved, &ops).is_err());
    // The merge patch keeps the other writer's taint and the resourceVersion read.
    assert_eq!(change["metadata"]["resourceVersion"], "41");
    assert_eq!(change["spec"]["taints"].as_array().map(Vec::len), Some(1));
    // Putting the taint on goes with the resourceVersion (a JSON patch cannot test that the
    // list lacks it).
    let mut bare = up.clone();
    bare.spec.taints = None;
    let Some(Effect::Taint(change)) = taint(&bare, task.spec.key(), true) else {
        panic!("no taint change");
    };
    assert_eq!(change.json_patch(), None);
    assert_eq!(change["metadata"]["resourceVersion"], "41");
}
