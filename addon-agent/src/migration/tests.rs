use super::*;

#[test]
fn bookkeeping_labels_stay_behind() {
    let labels: BTreeMap<String, String> = [
        ("name", "c1"),
        ("env", "prod"),
        (CLUSTER_SET, "east"),
        ("feature.open-cluster-management.io/addon-x", "available"),
        ("vendor", "OpenShift"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let carried = carried_labels(&labels);
    assert_eq!(carried.keys().collect::<Vec<_>>(), ["env", "vendor"]);
}

#[test]
fn carry_over_past_the_limits_fails_the_clusters_it_concerns() {
    use ClusterState::*;
    // One cluster over its own limit fails alone.
    let mut states = [Valid, Valid, NotFound];
    apply_carry_over_limits(&mut states, &[100, MAX_CARRY_OVER_PER_CLUSTER + 1, 100]);
    assert_eq!(states, [Valid, TooLarge, NotFound]);
    // Records each within the limit, but more than the migration can carry: the ones
    // past the total fail.
    let n = MAX_CARRY_OVER_TOTAL / 10_000 + 3;
    let mut states = vec![Valid; n];
    apply_carry_over_limits(&mut states, &vec![10_000; n]);
    let fit = MAX_CARRY_OVER_TOTAL / 10_001;
    assert!(states[..fit].iter().all(|s| *s == Valid), "{states:?}");
    assert!(
        states[fit + 1..].iter().all(|s| *s == TooLarge),
        "{states:?}"
    );
    let mut small = [Valid; 3];
    apply_carry_over_limits(&mut small, &[10, 10, 10]);
    assert_eq!(small, [Valid; 3]);
}

#[test]
fn states_round_trip_and_name_their_failures() {
    let states = [
        ClusterState::Valid,
        ClusterState::NotFound,
        ClusterState::Available,
        ClusterState::Blocked,
    ];
    let text = ClusterState::encode(&states);
    assert_eq!(text.len(), 4);
    assert_eq!(ClusterState::decode(&text, 5)[..4], states);
    assert_eq!(ClusterState::decode(&text, 5)[4], ClusterState::Pending);
    assert_eq!(
        ClusterState::NotFound.failure().unwrap().0,
        "ClusterNotFound"
    );
    assert!(ClusterState::Blocked.failure().is_none());
    let msg = summary(
        &["a".into(), "b".into()],
        &[ClusterState::Valid, ClusterState::IsHub],
    );
    assert_eq!(msg, "1 of 2 clusters cannot move: b is itself a hub");
}

fn task_with_key(key: &str) -> MigrationTask {
    let mut t = MigrationTask::new(
        key,
        migration_api::migration::MigrationTaskSpec {
            key: Some(key.into()),
            role: MigrationRole::Source,
            klusterlet_config_name: Some(format!("migration-{key}")),
            ..Default::default()
        },
    );
    t.metadata.namespace = Some("addon-ns".into());
    t
}

/// A ManagedCluster with these annotations, accepted or not, Available or not.
fn cluster_with(annotations: &[(&str, &str)], accepted: bool, up: bool) -> ManagedCluster {
    serde_json::from_value(json!({
        "metadata": {"name": "c1", "annotations": annotations.iter().cloned().collect::<BTreeMap<_, _>>()},
        "spec": {"hubAcceptsClient": accepted},
        "status": {"conditions": [{"type": CLUSTER_AVAILABLE, "status": if up { "True" } else { "Unknown" },
            "reason": "r", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    }))
    .unwrap()
}

fn returning(mc: &ManagedCluster, renewed: bool, finish: bool) -> Returning<'_> {
    Returning {
        mc,
        settings_back: true,
        renewed_since_restore: renewed,
        finish,
    }
}

#[test]
fn taking_a_cluster_back_restores_marks_then_waits_for_its_lease() {
    use ClusterState::*;
    let task = task_with_key("k1");
    let now = "2026-01-01T00:10:00Z";
    let at = "2026-01-01T00:05:00Z";
    // Refused and still marked: accepted again, marks gone, the time marked, awaited.
    let refused = cluster_with(&[(MIGRATING, "k1")], false, false);
    let (state, effects) = take_back(&task, &returning(&refused, false, false), now);
    assert_eq!(state, RollingBack);
    let [Effect::Patch(patch), Effect::Await(true)] = effects.as_slice() else {
        panic!("{effects:?}")
    };
    assert_eq!(patch["spec"]["hubAcceptsClient"], true);
    assert_eq!(patch["metadata"]["annotations"][RESTORED_AT], now);
    assert_eq!(patch["metadata"]["annotations"][MIGRATING], Value::Null);
    // Restored, Available, but no lease since: still awaited.
    let restored = cluster_with(&[(RESTORED_AT, at)], true, true);
    let (state, effects) = take_back(&task, &returning(&restored, false, false), now);
    assert_eq!((state, effects), (RollingBack, vec![Effect::Await(true)]));
    // Its lease renewed since: back, no longer awaited; finishing also removes the mark.
    let (state, effects) = take_back(&task, &returning(&restored, true, false), now);
    assert_eq!((state, effects), (RolledBack, vec![Effect::Await(false)]));
    let (state, effects) = take_back(&task, &returning(&restored, true, true), now);
    assert_eq!(state, RolledBack);
    assert_eq!(
        effects,
        vec![
            Effect::Await(false),
            Effect::Patch(json!({"metadata": {"annotations": {RESTORED_AT: null}}}))
        ]
    );
    // A restore already marked keeps its time when it is patched again.
    let refused_again = cluster_with(&[(RESTORED_AT, at)], false, false);
    let (_, effects) = take_back(&task, &returning(&refused_again, false, false), now);
    let Some(Effect::Patch(patch)) = effects.first() else {
        panic!("{effects:?}")
    };
    assert_eq!(patch["metadata"]["annotations"][RESTORED_AT], at);
    // Finishing a cluster never touched (no mark, nothing to restore): back already, unless
    // the Klusterlet's own settings are not.
    let untouched = cluster_with(&[], true, true);
    assert_eq!(
        take_back(&task, &returning(&untouched, false, true), now),
        (RolledBack, vec![])
    );
    let settings_pending = Returning {
        settings_back: false,
        ..returning(&untouched, false, true)
    };
    assert_eq!(
        take_back(&task, &settings_pending, now),
        (RollingBack, vec![])
    );
    // Another migration's mark is not ours to lift, but ours on the config is.
    let ours_config = cluster_with(&[(KLUSTERLET_CONFIG, "migration-k1")], true, true);
    assert_eq!(
        take_back(&task, &returning(&ours_config, false, true), now).0,
        RollingBack
    );
}

#[test]
fn cleaning_detaches_only_what_the_manager_names_and_only_once() {
    use ClusterState::*;
    let present = cluster_with(&[], false, false);
    assert_eq!(
        let_go(true, Some(&present)),
        (Switching, vec![Effect::Detach, Effect::ReleaseWorks])
    );
    let mut deleting = present.clone();
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-01-01T00:00:00Z".parse().unwrap(),
        ));
    assert_eq!(
        let_go(true, Some(&deleting)),
        (Switching, vec![Effect::ReleaseWorks])
    );
    assert_eq!(let_go(true, None), (Detached, vec![]));
    // Arrived but not confirmed by the target: left exactly as it is.
    assert_eq!(let_go(false, Some(&present)), (Switching, vec![]));
}
