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
