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
    let limit = MAX_CARRY_OVER_PER_CLUSTER;
    apply_carry_over_limits(
        &mut states,
        &[(100, limit), (limit + 1, limit), (100, limit)],
    );
    assert_eq!(states, [Valid, TooLarge, NotFound]);
    // A record with objects has a larger limit of its own.
    let mut states = [Valid, Valid];
    let big = MAX_CARRY_OVER_WITH_OBJECTS;
    apply_carry_over_limits(&mut states, &[(limit + 1, big), (big + 1, big)]);
    assert_eq!(states, [Valid, TooLarge]);
    // Records each within the limit, but more than the migration can carry: the ones
    // past the total fail.
    let n = MAX_CARRY_OVER_TOTAL / 10_000 + 3;
    let mut states = vec![Valid; n];
    apply_carry_over_limits(&mut states, &vec![(10_000, limit); n]);
    let fit = MAX_CARRY_OVER_TOTAL / 10_001;
    assert!(states[..fit].iter().all(|s| *s == Valid), "{states:?}");
    assert!(
        states[fit + 1..].iter().all(|s| *s == TooLarge),
        "{states:?}"
    );
    let mut small = [Valid; 3];
    apply_carry_over_limits(&mut small, &[(10, limit); 3]);
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

pub(super) fn task_with_key(key: &str) -> MigrationTask {
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
pub(super) fn cluster_with(
    annotations: &[(&str, &str)],
    accepted: bool,
    up: bool,
) -> ManagedCluster {
    serde_json::from_value(json!({
        "metadata": {"name": "c1", "uid": "u1", "resourceVersion": "1",
                     "annotations": annotations.iter().cloned().collect::<BTreeMap<_, _>>()},
        "spec": {"hubAcceptsClient": accepted},
        "status": {"conditions": [{"type": CLUSTER_AVAILABLE, "status": if up { "True" } else { "Unknown" },
            "reason": "r", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    }))
    .unwrap()
}

pub(super) fn returning(mc: &ManagedCluster, renewed: bool, finish: bool) -> Returning<'_> {
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
    // Tainted: the migrating taint comes off before the restore (sent after it, with the
    // resourceVersion read before it, it would always conflict); the restore goes as it is.
    let (_, effects) = take_back(
        &task,
        &returning(&tainted(refused.clone(), "k1"), false, false),
        now,
    );
    assert!(
        matches!(effects.as_slice(), [Effect::Taint(t), Effect::Patch(p), Effect::Await(true)] if t["spec"]["taints"] == json!([]) && p.get("metadata").and_then(|m| m.get("resourceVersion")).is_none()),
        "{effects:?}"
    );
    // Restored, Available, but no lease since: still awaited.
    let restored = cluster_with(&[(RESTORED_AT, at)], true, true);
    let (state, effects) = take_back(&task, &returning(&restored, false, false), now);
    assert_eq!((state, effects), (RollingBack, vec![Effect::Await(true)]));
    let (state, effects) = take_back(
        &task,
        &returning(&tainted(restored.clone(), "k1"), true, true),
        now,
    );
    assert_eq!(state, RollingBack);
    assert!(
        matches!(effects.as_slice(), [Effect::Taint(_), Effect::Await(true)]),
        "{effects:?}"
    );
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

/// `c1` in flight for migration `k1` as `register` leaves it: the annotations applied, the
/// migrating taint on.
fn in_flight_cluster(config: Option<&str>, freeze: bool, accepted: bool) -> ManagedCluster {
    let changes = flight::in_flight(&BTreeMap::new(), "k1", config, false, freeze);
    let annotations: Vec<(&str, &str)> = changes
        .iter()
        .filter_map(|(k, v)| Some((*k, v.as_deref()?)))
        .collect();
    tainted(cluster_with(&annotations, accepted, false), "k1")
}

/// `mc` with the migrating taint of `migration`, as the hub stores it.
pub(super) fn tainted(mut mc: ManagedCluster, migration: &str) -> ManagedCluster {
    mc.spec.taints = Some(vec![migration_api::ocm::cluster::Taint {
        key: migration_api::names::taints::MIGRATING.into(),
        value: Some(migration.into()),
        effect: "NoSelectIfNew".into(),
        time_added: Some(migration_api::common::now()),
    }]);
    mc
}

pub(super) fn source_task(delivery: BootstrapDelivery) -> MigrationTask {
    let mut task = task_with_key("k1");
    task.spec.clusters = vec!["c1".into()];
    task.spec.delivery = Some(delivery);
    task
}

#[test]
fn registering_on_the_source_marks_clusters_then_refuses_the_released() {
    use BootstrapDelivery::*;
    use ClusterState::*;
    let fresh = cluster_with(&[], true, true);
    let seen = |task: &MigrationTask, mc: &ManagedCluster, release: bool, delivered: bool| {
        let config = selected_config(task, 0, release);
        let seen = Registering {
            mc,
            release,
            config: config.as_deref(),
            derived_ready: true,
            switched: false,
            delivered,
            // Its klusterlet runs with the settings (see below for one that does not yet).
            restarted: delivered,
        };
        register(task, &seen)
    };
    let kinds = |effects: &[Effect]| -> Vec<&'static str> {
        effects
            .iter()
            .map(|e| match e {
                Effect::Patch(_) => "patch",
                Effect::Refuse(..) => "refuse",
                Effect::Switch => "switch",
                Effect::Taint(_) => "taint",
                _ => "other",
            })
            .collect()
    };
    let acm = source_task(KlusterletConfig);
    // Not released: marked in flight, selecting the migration's KlusterletConfig, and Ready
    // once its klusterlet work carries the target's bootstrap kubeconfig.
    // Tainted too, so that placements choose it no more while it moves (its resourceVersion
    // with the list, so another writer's taint is not overwritten), in the same write as the
    // marks: two writes would make the second conflict with the first, every time.
    let (state, effects) = seen(&acm, &fresh, false, false);
    assert_eq!((state, kinds(&effects)), (Waiting, vec!["taint"]));
    let Effect::Taint(t) = &effects[0] else {
        unreachable!()
    };
    assert_eq!(
        t["metadata"]["annotations"][KLUSTERLET_CONFIG],
        "migration-k1"
    );
    assert_eq!(t["metadata"]["annotations"][MIGRATING], "k1");
    assert_eq!(
        t["spec"]["taints"],
        json!([{"key": "migration.open-cluster-management.io/migrating", "value": "k1", "effect": "NoSelectIfNew"}])
    );
    assert_eq!(t["metadata"]["resourceVersion"], "1");
    let marked = in_flight_cluster(Some("migration-k1"), false, true);
    assert_eq!(
        seen(&acm, &marked, false, true),
        (Ready, vec![Effect::Await(false)])
    );
    // Its settings there, but its klusterlet not renewed its lease since (the change restarts
    // it): it waits, woken by its lease, and is not released to a process that may miss it.
    let restarting = Registering {
        mc: &marked,
        release: false,
        config: Some("migration-k1"),
        derived_ready: true,
        switched: false,
        delivered: true,
        restarted: false,
    };
    assert_eq!(
        register(&acm, &restarting),
        (Waiting, vec![Effect::Await(true)])
    );
    // Released: refused here (and frozen against auto-import) in one patch; once refused,
    // nothing more.
    let (state, effects) = seen(&acm, &marked, true, true);
    assert_eq!((state, kinds(&effects)), (Switching, vec!["refuse"]));
    let Effect::Refuse(p, _) = &effects[0] else {
        unreachable!()
    };
    assert_eq!(p["spec"]["hubAcceptsClient"], false);
    assert_eq!(p["metadata"]["annotations"][DISABLE_AUTO_IMPORT], "true");
    let refused = in_flight_cluster(Some("migration-k1"), true, false);
    assert_eq!(seen(&acm, &refused, true, true), (Switching, vec![]));
    // Held: made ready like the others, but stays.
    let mut held = marked.clone();
    held.annotations_mut()
        .insert(BLOCK_MOVE.into(), "true".into());
    assert_eq!(seen(&acm, &held, false, true), (Blocked, vec![]));
    // Its own KlusterletConfig's derived copy not in place yet: it waits, untouched.
    let waiting = Registering {
        mc: &fresh,
        release: false,
        config: Some("migration-k1"),
        derived_ready: false,
        switched: false,
        delivered: false,
        restarted: false,
    };
    assert_eq!(register(&acm, &waiting), (Waiting, vec![]));
    // The older shape: no KlusterletConfig before release, and refused only once its
    // klusterlet has the target's bootstrap kubeconfig.
    let legacy = source_task(LegacyKlusterletConfig);
    assert_eq!(selected_config(&legacy, 0, false), None);
    let before = in_flight_cluster(None, false, true);
    assert_eq!(seen(&legacy, &before, false, false), (Ready, vec![]));
    let (state, effects) = seen(&legacy, &before, true, false);
    assert_eq!((state, kinds(&effects)), (Switching, vec!["patch"]));
    let (_, effects) = seen(&legacy, &before, true, true);
    assert_eq!(kinds(&effects), vec!["refuse"]);
    // Plain OCM: the klusterlet work switches it, Ready once applied; a held one is switched
    // too.
    let plain = source_task(ManifestWork);
    let unmarked_plain = in_flight_cluster(None, false, true);
    assert_eq!(
        seen(&plain, &unmarked_plain, false, false),
        (Waiting, vec![Effect::Switch])
    );
    let switched = Registering {
        mc: &unmarked_plain,
        release: false,
        config: None,
        derived_ready: true,
        switched: true,
        delivered: false,
        restarted: true,
    };
    assert_eq!(
        register(&plain, &switched),
        (Ready, vec![Effect::Switch, Effect::Await(false)])
    );
    let restarting = Registering {
        restarted: false,
        ..switched.clone()
    };
    assert_eq!(
        register(&plain, &restarting),
        (Waiting, vec![Effect::Switch, Effect::Await(true)])
    );
    let mut held_plain = unmarked_plain.clone();
    held_plain
        .annotations_mut()
        .insert(BLOCK_MOVE.into(), "true".into());
    assert_eq!(
        seen(&plain, &held_plain, false, false),
        (Blocked, vec![Effect::Switch])
    );
}

/// A ManagedCluster on the target with these annotations: accepted or not, joined, Available.
pub(super) fn target_cluster(
    annotations: &[(&str, &str)],
    accepted: bool,
    joined: bool,
    up: bool,
) -> ManagedCluster {
    let cond = |t: &str, on: bool| {
        json!({"type": t, "status": if on { "True" } else { "Unknown" }, "reason": "r",
               "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"})
    };
    serde_json::from_value(json!({
        "metadata": {"name": "c1", "annotations": annotations.iter().cloned().collect::<BTreeMap<_, _>>()},
        "spec": {"hubAcceptsClient": accepted},
        "status": {"conditions": [cond(JOINED, joined), cond(CLUSTER_AVAILABLE, up)]}
    }))
    .unwrap()
}

fn at(t: &str) -> jiff::Timestamp {
    t.parse().unwrap()
}

/// The target's task of migration `k1`.
pub(super) fn target_task() -> MigrationTask {
    let mut task = task_with_key("k1");
    task.spec.role = MigrationRole::Target;
    task
}

/// One bootstrap CSR, filed at 00:06 and undecided.
pub(super) fn pending_csr() -> [admission::Request<'static>; 1] {
    [admission::Request {
        name: "csr-1",
        created: at("2026-01-01T00:06:00Z"),
        decision: admission::Decision::Pending,
    }]
}

/// What the target observes of `mc` at 00:10 while clusters register (ACM, released, the
/// import took over).
pub(super) fn arriving<'a>(
    mc: Option<&'a ManagedCluster>,
    requests: &'a [admission::Request<'a>],
) -> Arriving<'a> {
    Arriving {
        mc,
        registering: true,
        released: true,
        released_at: Some(at("2026-01-01T00:10:00Z")),
        settles: false,
        settled: false,
        acm_target: true,
        import_took_over: true,
        requests,
        now: at("2026-01-01T00:10:00Z"),
        carries_objects: false,
        addons_carried: false,
        reported_arrived: false,
    }
}

#[test]
fn the_target_carries_a_clusters_objects_once_it_is_pre_created_until_it_is_marked() {
    use ClusterState::*;
    let task = target_task();
    let requests = pending_csr();
    let deploying = |mc| Arriving {
        registering: false,
        released: false,
        carries_objects: true,
        ..arriving(mc, &requests)
    };
    // Not there yet: pre-created first; the objects follow into its namespace.
    assert_eq!(
        arrive(&task, &deploying(None)),
        (Created, vec![Effect::Precreate])
    );
    let made = target_cluster(&[(PRE_CREATED, "k1")], true, false, false);
    assert_eq!(
        arrive(&task, &deploying(Some(&made))),
        (Created, vec![Effect::CarryObjects])
    );
    // Marked by this migration: done; marked by another, or not ours at all: not carried.
    let done = target_cluster(
        &[(PRE_CREATED, "k1"), (OBJECTS_CARRIED, "k1")],
        true,
        false,
        false,
    );
    assert_eq!(arrive(&task, &deploying(Some(&done))), (Created, vec![]));
    let other = target_cluster(
        &[(PRE_CREATED, "k1"), (OBJECTS_CARRIED, "k0")],
        true,
        false,
        false,
    );
    assert_eq!(
        arrive(&task, &deploying(Some(&other))),
        (Created, vec![Effect::CarryObjects])
    );
    let foreign = target_cluster(&[], true, false, false);
    assert_eq!(arrive(&task, &deploying(Some(&foreign))), (Refused, vec![]));
    // Without objects: nothing to carry.
    let plain = Arriving {
        carries_objects: false,
        ..deploying(Some(&made))
    };
    assert_eq!(arrive(&task, &plain), (Created, vec![]));
}

#[test]
fn the_target_carries_a_clusters_addons_once_not_at_every_reconcile() {
    use ClusterState::*;
    let task = target_task();
    let requests = pending_csr();
    let up = tainted(
        target_cluster(&[(PRE_CREATED, "k1")], true, true, true),
        "k1",
    );
    let pending = target_cluster(&[(PRE_CREATED, "k1")], true, false, false);
    // (what the cluster is, the import took over, addons carried already) -> effects
    for (mc, took_over, carried, expected) in [
        (&pending, false, false, (Created, vec![Effect::CarryAddons])),
        (&pending, false, true, (Created, vec![])),
        (&up, false, false, (Joined, vec![Effect::CarryAddons])),
        (&up, false, true, (Joined, vec![])),
        (&up, true, false, (Available, vec![Effect::CarryAddons])),
        (&up, true, true, (Available, vec![])),
    ] {
        let seen = Arriving {
            import_took_over: took_over,
            released: false,
            addons_carried: carried,
            ..arriving(Some(mc), &requests)
        };
        assert_eq!(arrive(&task, &seen), expected, "{took_over} {carried}");
    }
    // Before Registering nothing is carried, whatever was.
    let deploying = Arriving {
        registering: false,
        released: false,
        ..arriving(Some(&up), &requests)
    };
    assert_eq!(arrive(&task, &deploying).1, vec![]);
}

#[test]
fn the_target_keeps_the_migrating_taint_until_a_cluster_is_registered() {
    use ClusterState::*;
    let task = target_task();
    let requests = pending_csr();
    let up = tainted(
        target_cluster(&[(PRE_CREATED, "k1")], true, true, true),
        "k1",
    );
    // Still tainted while Joined (the import has not taken over).
    let joined = Arriving {
        import_took_over: false,
        released: false,
        ..arriving(Some(&up), &requests)
    };
    assert_eq!(arrive(&task, &joined), (Joined, vec![Effect::CarryAddons]));
    // Registered, not yet in the task's status: reported first, nothing written to it.
    let registered = Arriving {
        released: false,
        ..arriving(Some(&up), &requests)
    };
    assert_eq!(
        arrive(&task, &registered),
        (Available, vec![Effect::CarryAddons])
    );
    // Reported: the taint and the marks come off in one write, the others' taints as they
    // were; cleanup has nothing left to write.
    let mut read = up.clone();
    read.metadata.uid = Some("u1".into());
    read.metadata.resource_version = Some("41".into());
    let reported = Arriving {
        reported_arrived: true,
        mc: Some(&read),
        ..registered.clone()
    };
    let (state, effects) = arrive(&task, &reported);
    assert_eq!(state, Available);
    let [Effect::CarryAddons, Effect::Taint(t)] = effects.as_slice() else {
        panic!("{effects:?}")
    };
    assert_eq!(t["spec"]["taints"], json!([]));
    assert_eq!(t["metadata"]["annotations"][PRE_CREATED], Value::Null);
    // As a JSON patch (a status write of the hub's meanwhile does not refuse it): the
    // cluster loses the taint and the marks.
    let ops = t.json_patch().expect("a JSON patch");
    let mut doc = serde_json::to_value(&read).unwrap();
    doc["metadata"]["resourceVersion"] = json!("42");
    json_patch::patch(&mut doc, &ops).unwrap();
    assert_eq!(doc["spec"]["taints"], json!([]));
    assert_eq!(doc["metadata"]["annotations"], json!({}));
    // Unmarked since: still this migration's, registered, nothing more to write; a cluster
    // of that name never reported arrived is not (refused, as one this migration did not
    // make), nor one this hub no longer accepts.
    let unmarked = target_cluster(&[], true, true, true);
    let after = Arriving {
        mc: Some(&unmarked),
        ..reported.clone()
    };
    assert_eq!(
        arrive(&task, &after),
        (Available, vec![Effect::CarryAddons])
    );
    assert_eq!(
        unmark(Some(&unmarked), task.spec.key()),
        vec![],
        "cleanup writes nothing"
    );
    let never = Arriving {
        reported_arrived: false,
        ..after.clone()
    };
    assert_eq!(arrive(&task, &never), (Refused, vec![]));
    let refused = target_cluster(&[], false, true, true);
    let gone_back = Arriving {
        mc: Some(&refused),
        ..after.clone()
    };
    assert_eq!(arrive(&task, &gone_back).0, Refused);
    // Registered, but the hub's own taint still on (its taint controller takes it off after
    // the cluster turned Available): the migration's waits, its removal would race that one.
    for hub_taint in [
        migration_api::names::taints::UNREACHABLE,
        migration_api::names::taints::UNAVAILABLE,
    ] {
        let mut unreachable = up.clone();
        unreachable
            .spec
            .taints
            .get_or_insert_default()
            .push(migration_api::ocm::cluster::Taint {
                key: hub_taint.into(),
                effect: "NoSelect".into(),
                ..Default::default()
            });
        let (state, effects) = arrive(
            &task,
            &Arriving {
                released: false,
                ..arriving(Some(&unreachable), &requests)
            },
        );
        assert_eq!((state, effects), (Available, vec![Effect::CarryAddons]));
    }
}

#[test]
fn the_target_admits_a_cluster_only_once_released_and_registers_it_once_settled() {
    use ClusterState::*;
    let task = target_task();
    let requests = pending_csr();
    let base = |mc| arriving(mc, &requests);
    // Missing: pre-created (its addons follow once its namespace is there).
    assert_eq!(
        arrive(&task, &base(None)),
        (Created, vec![Effect::Precreate, Effect::CarryAddons])
    );
    let deploying = Arriving {
        registering: false,
        ..base(None)
    };
    assert_eq!(
        arrive(&task, &deploying),
        (Created, vec![Effect::Precreate])
    );
    // A ManagedCluster of that name this migration did not make: refused, no CSR approved.
    let foreign = target_cluster(&[], true, false, false);
    assert_eq!(arrive(&task, &base(Some(&foreign))), (Refused, vec![]));
    // Pre-created and released, seen released just now: a CSR filed before is not approved,
    // and nothing is written to the cluster (the time goes in the task's status).
    let precreated = target_cluster(&[(PRE_CREATED, "k1")], true, false, false);
    assert_eq!(
        arrive(&task, &base(Some(&precreated))),
        (Created, vec![Effect::CarryAddons])
    );
    // Seen released earlier: the CSR filed since is approved.
    let approved = (
        Created,
        vec![
            Effect::Approve("csr-1".into(), Approval::Expected),
            Effect::CarryAddons,
        ],
    );
    let earlier = Arriving {
        released_at: Some(at("2026-01-01T00:05:00Z")),
        ..base(Some(&precreated))
    };
    assert_eq!(arrive(&task, &earlier), approved);
    // So too where an older agent marked the time on the cluster (the earlier one counts).
    let released = target_cluster(
        &[(PRE_CREATED, "k1"), (RELEASED_AT, "2026-01-01T00:05:00Z")],
        true,
        false,
        false,
    );
    assert_eq!(arrive(&task, &base(Some(&released))), approved);
    // No time at all (not seen released): nothing approved.
    let untimed = Arriving {
        released_at: None,
        ..base(Some(&precreated))
    };
    assert_eq!(
        arrive(&task, &untimed),
        (Created, vec![Effect::CarryAddons])
    );
    // Not released: nothing approved.
    let unreleased = Arriving {
        released: false,
        ..base(Some(&released))
    };
    assert_eq!(
        arrive(&task, &unreleased),
        (Created, vec![Effect::CarryAddons])
    );
    // Available, but on an ACM hub whose import has not taken over yet: Joined.
    let up = target_cluster(&[(PRE_CREATED, "k1")], true, true, true);
    let not_yet = Arriving {
        import_took_over: false,
        released: false,
        ..base(Some(&up))
    };
    assert_eq!(arrive(&task, &not_yet), (Joined, vec![Effect::CarryAddons]));
    assert_eq!(
        arrive(
            &task,
            &Arriving {
                released: false,
                ..base(Some(&up))
            }
        ),
        (Available, vec![Effect::CarryAddons])
    );
    // A plain hub settles the Klusterlet first.
    let plain = Arriving {
        settles: true,
        acm_target: false,
        released: false,
        ..base(Some(&up))
    };
    assert_eq!(
        arrive(&task, &plain),
        (Joined, vec![Effect::Settle, Effect::CarryAddons])
    );
    let settled = Arriving {
        settled: true,
        ..plain.clone()
    };
    assert_eq!(
        arrive(&task, &settled),
        (Available, vec![Effect::CarryAddons])
    );
}

#[test]
fn rolling_back_on_the_target_refuses_and_lets_a_waiting_klusterlet_through() {
    use ClusterState::*;
    let mut task = task_with_key("k1");
    task.spec.role = MigrationRole::Target;
    let seen = |mc, pending: &[&str], remove| Leaving {
        mc,
        pending: pending.iter().map(|p| (*p).to_owned()).collect(),
        remove,
    };
    assert_eq!(
        let_back(&task, &seen(None, &[], false)),
        (RolledBack, vec![])
    );
    // Arrived: stays.
    let up = target_cluster(&[(PRE_CREATED, "k1")], true, true, true);
    assert_eq!(
        let_back(&task, &seen(Some(&up), &[], true)),
        (Available, vec![])
    );
    // Not this migration's and accepted: untouched.
    let foreign = target_cluster(&[], true, false, false);
    assert_eq!(
        let_back(&task, &seen(Some(&foreign), &["csr-1"], true)),
        (RolledBack, vec![])
    );
    // Ours, still accepted, a klusterlet waiting for its CSR: approved through, refused.
    let ours = target_cluster(&[(PRE_CREATED, "k1")], true, false, false);
    let (state, effects) = let_back(&task, &seen(Some(&ours), &["csr-1"], false));
    assert_eq!(state, RollingBack);
    assert_eq!(
        effects[0],
        Effect::Approve("csr-1".into(), Approval::LetThrough)
    );
    assert!(
        matches!(&effects[1], Effect::Refuse(p, _) if p["spec"]["hubAcceptsClient"] == false),
        "{effects:?}"
    );
    // Refused and quiet: rolled back; in Cleaning the copy goes, then it is rolled back once
    // gone. A copy a klusterlet made while switching (refused, unmarked) counts as ours.
    let refused = target_cluster(&[(PRE_CREATED, "k1")], false, false, false);
    assert_eq!(
        let_back(&task, &seen(Some(&refused), &[], false)),
        (RolledBack, vec![])
    );
    assert_eq!(
        let_back(&task, &seen(Some(&refused), &[], true)),
        (RollingBack, vec![Effect::RemoveCopy, Effect::ReleaseWorks])
    );
    let made_by_klusterlet = target_cluster(&[], false, false, false);
    assert_eq!(
        let_back(&task, &seen(Some(&made_by_klusterlet), &[], true)),
        (RollingBack, vec![Effect::RemoveCopy, Effect::ReleaseWorks])
    );
    let mut going = refused.clone();
    going.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        at("2026-01-01T00:00:00Z"),
    ));
    assert_eq!(
        let_back(&task, &seen(Some(&going), &[], true)),
        (RollingBack, vec![Effect::ReleaseWorks])
    );
    // A CSR still waiting holds the removal.
    assert_eq!(
        let_back(&task, &seen(Some(&refused), &["csr-2"], true)),
        (
            RollingBack,
            vec![Effect::Approve("csr-2".into(), Approval::LetThrough)]
        )
    );
    // Cleanup of a cluster that stays: its marks go, once.
    assert_eq!(
        unmark(Some(&up), "k1"),
        vec![Effect::Patch(
            json!({"metadata": {"annotations": {PRE_CREATED: null}}})
        )]
    );
    // Its objects' mark alone is one of them (found by the e2e test's leftover check).
    let carried_only = target_cluster(&[(OBJECTS_CARRIED, "k1")], true, true, true);
    assert_eq!(unmark(Some(&carried_only), "k1").len(), 1);
    assert_eq!(unmark(Some(&foreign), "k1"), vec![]);
    assert_eq!(unmark(None, "k1"), vec![]);
    // And its taint, if it still has one.
    let effects = unmark(Some(&tainted(foreign.clone(), "k1")), "k1");
    assert!(
        matches!(effects.as_slice(), [Effect::Taint(t)] if t["spec"]["taints"] == json!([])),
        "{effects:?}"
    );
}

#[test]
fn a_release_is_timed_when_first_seen_and_keeps_its_earliest_time() {
    let t = |s: &str| Some(at(s));
    let now = at("2026-01-01T00:10:00Z");
    // Cluster 0 recorded at 00:05 in the status, remembered later (a stale read): 00:05.
    // Cluster 1 remembered only (the status write not back yet): kept. Cluster 2 released
    // now, never seen: now. Cluster 3 not released: none. Cluster 4 recorded, no longer
    // released: kept.
    let recorded = [
        t("2026-01-01T00:05:00Z"),
        None,
        None,
        None,
        t("2026-01-01T00:01:00Z"),
    ];
    let remembered = [t("2026-01-01T00:07:00Z"), t("2026-01-01T00:08:00Z")];
    let released = [true, true, true, false, false];
    assert_eq!(
        target::release_times(&recorded, &remembered, &released, now),
        vec![
            t("2026-01-01T00:05:00Z"),
            t("2026-01-01T00:08:00Z"),
            Some(now),
            None,
            t("2026-01-01T00:01:00Z"),
        ]
    );
    // Nothing recorded or remembered (a new agent, a status lost): seen released now.
    assert_eq!(
        target::release_times(&[], &[], &[true, false], now),
        vec![Some(now), None]
    );
}

/// What the agent does not do again once its status says it did: list the derived
/// KlusterletConfigs once this revision's Cleaning is reported done, validate once this
/// revision's verdict is given.
#[test]
fn a_revisions_report_says_what_is_done_already() {
    let mut task = source_task(BootstrapDelivery::KlusterletConfig);
    task.spec.revision = Some("r2".into());
    let status = |stage, state, revision: &str| MigrationTaskStatus {
        observed_stage: Some(stage),
        stage_state: Some(state),
        observed_revision: Some(revision.into()),
        ..Default::default()
    };
    use StageState::{Failed, Running, Succeeded};
    use TaskStage::{Cleaning, Registering, Validating};
    // (case, the cached status, this agent's own last write while the cache is behind,
    // cleaned already, validated already)
    let table = [
        ("no status yet", None, None, false, false),
        (
            "cleaning under way",
            Some(status(Cleaning, Running, "r2")),
            None,
            false,
            false,
        ),
        (
            "cleaning done",
            Some(status(Cleaning, Succeeded, "r2")),
            None,
            true,
            false,
        ),
        (
            "done in an earlier revision",
            Some(status(Cleaning, Succeeded, "r1")),
            None,
            false,
            false,
        ),
        (
            "another stage done",
            Some(status(Registering, Succeeded, "r2")),
            None,
            false,
            false,
        ),
        (
            "done as written, the cache not there yet",
            Some(status(Cleaning, Running, "r2")),
            Some(status(Cleaning, Succeeded, "r2")),
            true,
            false,
        ),
        (
            "the write stands over the cache",
            Some(status(Cleaning, Succeeded, "r2")),
            Some(status(Cleaning, Running, "r2")),
            false,
            false,
        ),
        (
            "still validating",
            Some(status(Validating, Running, "r2")),
            None,
            false,
            false,
        ),
        (
            "validation passed",
            Some(status(Validating, Succeeded, "r2")),
            None,
            false,
            true,
        ),
        (
            "validation refused",
            Some(status(Validating, Failed, "r2")),
            None,
            false,
            true,
        ),
        (
            "an earlier revision's verdict",
            Some(status(Validating, Succeeded, "r1")),
            None,
            false,
            false,
        ),
        (
            "a verdict as written, the cache not there yet",
            Some(status(Validating, Running, "r2")),
            Some(status(Validating, Failed, "r2")),
            false,
            true,
        ),
    ];
    for (case, cached, own, cleaned, validated) in table {
        task.status = cached;
        assert_eq!(
            (
                cleaned_already(&task, own.clone()),
                validated_already(&task, own)
            ),
            (cleaned, validated),
            "{case}"
        );
    }
}

#[test]
fn what_is_remembered_of_a_task_goes_with_the_task() {
    let set =
        |names: &[&str]| -> BTreeSet<String> { names.iter().map(|n| (*n).to_owned()).collect() };
    // (seen before, on the hub now) -> removed
    let table: [(&[&str], &[&str], &[&str]); 5] = [
        (&[], &["a"], &[]),
        (&["a"], &["a"], &[]),
        (&["a", "b"], &["b", "c"], &["a"]),
        (&["a", "b"], &[], &["a", "b"]),
        // A task the controller knows before this watch does is not taken for removed.
        (&["a"], &["a", "new"], &[]),
    ];
    for (before, now, removed) in table {
        let mut seen = set(before);
        assert_eq!(
            removed_tasks(&mut seen, set(now)),
            set(removed),
            "{before:?} -> {now:?}"
        );
        assert_eq!(seen, set(now));
    }
    // Per-cluster memories of a removed task go; those of the others stay.
    let mut configured: BTreeMap<(String, String), u8> = [
        (("a".into(), "c1".into()), 1),
        (("a".into(), "c2".into()), 2),
        (("b".into(), "c1".into()), 3),
    ]
    .into();
    drop_removed(&mut configured, &set(&["a"]), |(t, _)| t.as_str());
    assert_eq!(
        configured.keys().cloned().collect::<Vec<_>>(),
        [("b".to_owned(), "c1".to_owned())]
    );
}

#[test]
fn a_clusters_deletion_labels_and_identity_wake_the_handler_its_status_churn_does_not() {
    type Edit = dyn Fn(&mut ManagedCluster);
    let base = cluster_with(&[("a", "1")], true, true);
    let print = cluster_fingerprint(&base);
    let changed = |f: &Edit| {
        let mut mc = base.clone();
        f(&mut mc);
        cluster_fingerprint(&mc) != print
    };
    // What the handler decides on: `let_go` and the rollback read the deletion, the
    // selector, tenancy and carry-over read labels, a re-created cluster is a new one.
    let deciding: [(&str, &Edit); 6] = [
        ("deletion", &|mc| {
            mc.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at("2026-01-01T00:00:01Z")),
            )
        }),
        ("labels", &|mc| {
            mc.metadata.labels = Some([("env".to_owned(), "prod".to_owned())].into())
        }),
        ("annotations", &|mc| {
            mc.metadata.annotations = Some(BTreeMap::new())
        }),
        ("acceptance", &|mc| mc.spec.hub_accepts_client = false),
        ("conditions", &|mc| {
            *mc = cluster_with(&[("a", "1")], true, false);
        }),
        ("uid", &|mc| mc.metadata.uid = Some("u2".into())),
    ];
    for (what, f) in deciding {
        assert!(changed(f), "a change of {what} must wake the handler");
    }
    // What it does not: the registration agent's and the API server's churn.
    let churn: [(&str, &Edit); 2] = [
        ("resourceVersion", &|mc| {
            mc.metadata.resource_version = Some("2".into())
        }),
        ("version", &|mc| {
            if let Some(st) = mc.status.as_mut() {
                st.version = Some(migration_api::ocm::cluster::ManagedClusterVersion {
                    kubernetes: Some("v1.33.0".into()),
                });
            }
        }),
    ];
    for (what, f) in churn {
        assert!(
            !changed(f),
            "a change of {what} alone must not wake the handler"
        );
    }
}

#[test]
fn an_import_work_is_kept_as_what_the_agent_reads_of_it_without_its_contents() {
    use migration_api::ocm::work::fixtures::klusterlet_work;
    let mut work = klusterlet_work(
        "c1",
        &[
            ("Secret", "bootstrap-hub-kubeconfig"),
            ("Deployment", "klusterlet"),
            ("Klusterlet", "klusterlet"),
        ],
        Some(2),
    );
    let token = "secret-token-".repeat(200);
    let manifests = work
        .spec
        .workload
        .as_mut()
        .and_then(|t| t.manifests.as_mut())
        .unwrap();
    manifests[0]["data"] = json!({"kubeconfig": token});
    manifests[0]["metadata"]["namespace"] = json!("open-cluster-management-agent");
    manifests[1]["spec"] =
        json!({"template": {"spec": {"containers": [{"image": "x".repeat(1000)}]}}});
    work.metadata.managed_fields = Some(vec![Default::default()]);
    work.status.as_mut().unwrap().resource_status = Some(Default::default());
    let asked = [
        ("Secret", Some("bootstrap-hub-kubeconfig")),
        ("Secret", Some("bootstrap-hub-kubeconfig-hub2")),
        ("Klusterlet", None),
        ("Deployment", Some("klusterlet")),
        ("ConfigMap", None),
    ];
    let before: Vec<bool> = asked
        .iter()
        .map(|(kind, name)| work.applied_with(kind, *name))
        .collect();
    let size = serde_json::to_string(&work).unwrap().len();
    slim_import_work(&mut work);
    let after: Vec<bool> = asked
        .iter()
        .map(|(kind, name)| work.applied_with(kind, *name))
        .collect();
    assert_eq!(before, [true, false, true, true, false]);
    assert_eq!(after, before, "the same answers from the slimmed work");
    let text = serde_json::to_string(&work).unwrap();
    assert!(!text.contains("secret-token"), "no credential kept: {text}");
    assert!(text.len() * 4 < size, "{} of {size} bytes kept", text.len());
    assert!(work.metadata.managed_fields.is_none());
    assert!(work.status.as_ref().unwrap().resource_status.is_none());
    assert_eq!(
        work.manifests()[0]["metadata"]["namespace"],
        "open-cluster-management-agent"
    );
    // A cluster-scoped manifest keeps no namespace, not even a null one.
    assert_eq!(
        work.manifests()[2]["metadata"],
        json!({"name": "klusterlet"}),
        "{text}"
    );
}

#[test]
fn a_work_wakes_the_handler_only_where_its_cluster_is_going() {
    let staying = cluster_with(&[], true, true);
    let mut going = staying.clone();
    going.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        at("2026-01-01T00:00:01Z"),
    ));
    let held = ObjectMeta {
        name: Some("addon-x-deploy".into()),
        namespace: Some("c1".into()),
        finalizers: Some(vec![
            "cluster.open-cluster-management.io/manifest-work-cleanup".into(),
        ]),
        ..Default::default()
    };
    let mut deleting = held.clone();
    deleting.deletion_timestamp = going.metadata.deletion_timestamp.clone();
    let mut released = deleting.clone();
    released.finalizers = None;
    // A cluster that stays: none of its works' changes wake the handler.
    for w in [&held, &deleting, &released] {
        assert_eq!(work_meta_fingerprint(w, Some(&staying)), None);
    }
    // A cluster that goes (deleting, or gone already): each step of its works' removal does.
    for cluster in [Some(&going), None] {
        let prints: Vec<Option<String>> = [&held, &deleting, &released]
            .into_iter()
            .map(|w| work_meta_fingerprint(w, cluster))
            .collect();
        assert!(prints.iter().all(Option::is_some), "{prints:?}");
        assert_ne!(prints[0], prints[1], "its deletion");
        assert_ne!(prints[1], prints[2], "its finalizers' release");
    }
}

#[test]
fn what_is_seen_of_a_cluster_goes_when_the_cluster_leaves_the_hub() {
    let (clusters, mut clusters_w) = reflector::store::<ManagedCluster>();
    let (leases, mut leases_w) = reflector::store::<Lease>();
    let caches = Caches {
        clusters,
        import_works: reflector::store().0,
        own_works: reflector::store().0,
        work_metas: reflector::store().0,
        leases,
        awaited: Awaited::default(),
        lives: Default::default(),
        csrs: reflector::store().0,
        bootstrap_configs: reflector::store().0,
        secrets: reflector::store().0,
    };
    let lease = |ns: &str| -> Lease {
        serde_json::from_value(json!({"metadata": {"name": CLUSTER_LEASE, "namespace": ns}}))
            .unwrap()
    };
    let cluster = |name: &str| -> ManagedCluster {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {}})).unwrap()
    };
    let now = std::time::Instant::now();
    // c1 registered (cluster and lease), c2 deleted but its namespace (and lease) not yet
    // gone, c3 gone altogether, c4 pre-created without a lease yet.
    for c in ["c1", "c4"] {
        clusters_w.apply_watcher_event(&watcher::Event::Apply(cluster(c)));
    }
    for ns in ["c1", "c2"] {
        leases_w.apply_watcher_event(&watcher::Event::Apply(lease(ns)));
    }
    for c in ["c1", "c2", "c3", "c4"] {
        restarts::record(&caches.lives, c, |l| l.work_generation(1, now));
    }
    forget_departed_clusters(&caches);
    assert_eq!(restarts::len(&caches.lives), 3, "c3 is forgotten");
    assert!(!restarts::started_since_work_changed(
        &caches.lives,
        "c3",
        std::time::Duration::from_secs(60)
    ));
    // Its lease goes with its namespace: c2 is forgotten too.
    leases_w.apply_watcher_event(&watcher::Event::Delete(lease("c2")));
    forget_departed_clusters(&caches);
    assert_eq!(restarts::len(&caches.lives), 2);
}

#[test]
fn a_reflector_remembers_the_fingerprints_of_the_objects_it_shows_only() {
    let lease = |ns: &str, holder: &str| -> Lease {
        serde_json::from_value(json!({
            "metadata": {"name": CLUSTER_LEASE, "namespace": ns},
            "spec": {"holderIdentity": holder},
        }))
        .unwrap()
    };
    let print = |l: &Lease| l.spec.as_ref()?.holder_identity.clone();
    let mut prints = Fingerprints::default();
    use watcher::Event::*;
    // (event, wakes the handler, fingerprints remembered after)
    let steps: Vec<(watcher::Event<Lease>, bool, usize)> = vec![
        (Init, false, 0),
        (InitApply(lease("a", "1")), true, 1),
        (InitApply(lease("b", "1")), true, 2),
        (InitDone, true, 2),
        (Apply(lease("a", "1")), false, 2),
        (Apply(lease("a", "2")), true, 2),
        (Apply(lease("c", "1")), true, 3),
        (Delete(lease("c", "1")), true, 2),
        // The watch restarts; b went meanwhile (no event for it), a did not change.
        (Init, false, 2),
        (InitApply(lease("a", "2")), false, 2),
        (InitDone, true, 1),
        // Back later, b is new again.
        (Apply(lease("b", "1")), true, 2),
    ];
    for (i, (ev, wakes, remembered)) in steps.into_iter().enumerate() {
        assert_eq!(prints.changed(&ev, print), wakes, "step {i}");
        assert_eq!(prints.len(), remembered, "step {i}");
    }
}
