//! [`apply`] against a simulated hub (kube-sim): a cluster's writes are judged against the copy
//! its decision read, and remembered even when a later effect of the same decision fails, so a
//! decision on a copy from before the write never repeats it.

use super::effects::{Planned, apply};
use super::tests::target_task;
use super::*;
use kube::runtime::watcher::Event;
use migration_api::migration::CarriedAddOn;

/// What the admin client's creates of ManagedClusters were answered with, by code.
fn cluster_creates(hub: &kube_sim::KubeSim) -> BTreeMap<u16, u64> {
    hub.metrics()
        .answers_to("kube-sim-admin")
        .into_iter()
        .filter(|((verb, resource, _), _)| verb == "create" && resource == "managedclusters")
        .map(|((_, _, code), n)| (code, n))
        .collect()
}

/// A hub with the CRDs of `kinds`, and a handler context on it whose cluster cache is the
/// returned writer's (the test says what the cache shows, and when).
async fn hub_and_ctx(
    kinds: &[&str],
) -> (
    kube_sim::KubeSim,
    Ctx,
    reflector::store::Writer<ManagedCluster>,
) {
    let hub = kube_sim::KubeSim::start(kube_sim::Options::default())
        .await
        .unwrap();
    let client = hub.client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for entry in migration_api::crds::all() {
        if kinds.contains(&entry.crd.spec.names.kind.as_str()) {
            crds.create(&PostParams::default(), &entry.crd)
                .await
                .unwrap();
        }
    }
    let (clusters, writer) = reflector::store();
    let caches = Caches {
        clusters,
        import_works: reflector::store().0,
        own_works: reflector::store().0,
        work_metas: reflector::store().0,
        leases: reflector::store().0,
        awaited: Awaited::default(),
        lives: Default::default(),
        csrs: reflector::store().0,
        bootstrap_configs: reflector::store().0,
        secrets: reflector::store().0,
    };
    let ctx = Ctx {
        client,
        caches,
        metrics: Default::default(),
        shape: Default::default(),
        carry_memo: Default::default(),
        again: Default::default(),
        written: Default::default(),
        own_statuses: Default::default(),
        own_cluster_writes: Default::default(),
        configured: Default::default(),
        approved: Default::default(),
        csr_identities: Default::default(),
        released: Default::default(),
        addons_carried: Default::default(),
        tasks_seen: Default::default(),
    };
    (hub, ctx, writer)
}

#[tokio::test]
async fn a_decision_on_a_missing_cluster_does_not_create_it_again_once_the_cache_shows_it() {
    let (hub, ctx, mut cache) = hub_and_ctx(&["ManagedCluster"]).await;
    let task = target_task();
    // The first reconcile finds c1 missing and pre-creates it.
    apply(
        &ctx,
        &task,
        Planned::new("c1", None, vec![Effect::Precreate]),
    )
    .await
    .unwrap();
    assert_eq!(cluster_creates(&hub), BTreeMap::from([(201, 1)]));
    // The next reconcile decides before the cache shows it (the watch lags), and the cache
    // catches up before that decision is carried out.
    let deciding = Planned::new("c1", None, vec![Effect::Precreate]);
    let created: Api<ManagedCluster> = Api::all(ctx.client.clone());
    cache.apply_watcher_event(&Event::Apply(created.get("c1").await.unwrap()));
    apply(&ctx, &task, deciding).await.unwrap();
    // Decided on the copy from before its own write: nothing is sent again (no 409).
    assert_eq!(cluster_creates(&hub), BTreeMap::from([(201, 1)]));
    // Decided on the copy the cache shows now, the write is no longer ahead of it.
    let shown = get(&ctx.caches.clusters, None, "c1").unwrap();
    assert!(
        ctx.own_cluster_writes
            .lock()
            .unwrap()
            .ahead_of(
                "c1",
                shown.uid().as_deref(),
                &shown.resource_version().unwrap(),
                std::time::Instant::now()
            )
            .is_none()
    );
}

#[tokio::test]
async fn a_write_is_remembered_when_a_later_effect_of_its_decision_fails() {
    let (hub, ctx, _cache) = hub_and_ctx(&["ManagedCluster", "ManagedClusterAddOn"]).await;
    let mut task = target_task();
    task.spec.carry_over = Some(vec![CarriedCluster {
        name: "c1".into(),
        addons: vec![CarriedAddOn {
            name: "work-manager".into(),
            ..Default::default()
        }],
        ..Default::default()
    }]);
    // Its namespace is there, and the hub refuses the addon's write.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(ctx.client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "c1"}})).unwrap(),
        )
        .await
        .unwrap();
    hub.faults().add_error(kube_sim::ErrorRule {
        verb: Some("patch".into()),
        resource: Some("managedclusteraddons".into()),
        rate: 1.0,
        code: 500,
        user: None,
    });
    let arriving = || Planned::new("c1", None, vec![Effect::Precreate, Effect::CarryAddons]);
    let failed = apply(&ctx, &task, arriving()).await;
    assert!(failed.is_err(), "the addon's write fails: {failed:?}");
    assert_eq!(cluster_creates(&hub), BTreeMap::from([(201, 1)]));
    // The retry, decided on the cache that does not show the cluster yet, does not create it
    // again.
    let retried = apply(&ctx, &task, arriving()).await;
    assert_eq!(cluster_creates(&hub), BTreeMap::from([(201, 1)]));
    // Nor anything else of that decision: it is made again once the cache shows the cluster.
    assert!(retried.is_ok(), "{retried:?}");
    assert!(ctx.again.lock().unwrap().contains(&task.name_any()));
}

#[tokio::test]
async fn a_target_looks_its_clusters_records_up_in_them_sorted_once_per_generation() {
    let (hub, ctx, _cache) = hub_and_ctx(&["ManagedCluster"]).await;
    let mut task = target_task();
    task.metadata.uid = Some("uid-1".into());
    task.metadata.generation = Some(1);
    // In the clusters' order, as the manager relays the source's report.
    let names = ["c2", "c10", "c1"];
    task.spec.clusters = names.iter().map(|n| n.to_string()).collect();
    task.spec.carry_over = Some(
        names
            .iter()
            .map(|n| CarriedCluster {
                name: n.to_string(),
                labels: [("from".to_owned(), format!("record-of-{n}"))].into(),
                ..Default::default()
            })
            .collect(),
    );
    let records = carry::target_records(&ctx, &task).unwrap().unwrap();
    let order: Vec<&str> = records.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(order, ["c1", "c10", "c2"]);
    // Sorted once: the same generation gets the same records back, whatever status the
    // agent wrote meanwhile (a new version); a new generation, new records.
    task.metadata.resource_version = Some("7".into());
    let again = carry::target_records(&ctx, &task).unwrap().unwrap();
    assert!(Arc::ptr_eq(&records, &again));
    task.metadata.generation = Some(2);
    let newer = carry::target_records(&ctx, &task).unwrap().unwrap();
    assert!(!Arc::ptr_eq(&records, &newer));
    assert_eq!(*newer, *records);
    // Each cluster is pre-created from its own record, looked up in the sorted ones.
    let mut sorted = task.clone();
    sorted.spec.carry_over = Some((*records).clone());
    for name in names {
        apply(
            &ctx,
            &sorted,
            Planned::new(name, None, vec![Effect::Precreate]),
        )
        .await
        .unwrap();
    }
    assert_eq!(cluster_creates(&hub), BTreeMap::from([(201, 3)]));
    let clusters: Api<ManagedCluster> = Api::all(ctx.client.clone());
    for name in names {
        let mc = clusters.get(name).await.unwrap();
        assert_eq!(
            mc.labels().get("from"),
            Some(&format!("record-of-{name}")),
            "{name}"
        );
    }
}

/// A klusterlet whose new process renews its lease before this agent sees its import work
/// applied (the old process stopped before it could report it), while the handler runs for
/// other clusters in between: the restart counts, where before the baseline took that renewal
/// in and the cluster waited a whole lease period for the next one. A renewal a period after
/// the last (the old process's) does not count.
#[tokio::test]
async fn a_restart_seen_before_the_work_is_seen_applied_counts() {
    use super::tests::{cluster_with, source_task};
    let (_hub, mut ctx, _) = hub_and_ctx(&[]).await;
    let (leases, mut lease_cache) = reflector::store();
    ctx.caches.leases = leases;
    let task = source_task(BootstrapDelivery::KlusterletConfig);
    let mc = cluster_with(&[], true, true);
    let t0: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    // When the agent saw each event: `ms` after the start, on its own clock.
    let base = std::time::Instant::now();
    let seen = move |ms: u64| base + std::time::Duration::from_millis(ms);
    let mut renew = |secs: i64, seen_ms: u64| {
        let at = t0 + jiff::SignedDuration::from_secs(secs);
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": CLUSTER_LEASE, "namespace": "c1"},
            "spec": {"renewTime": at.to_string()},
        }))
        .unwrap();
        lease_cache.apply_watcher_event(&Event::Apply(lease));
        restarts::record(&ctx.caches.lives, "c1", |l| l.renewed(at, seen(seen_ms)));
    };
    let restarted = |ctx: &Ctx, configured: bool| {
        source::restarted_since_configured(ctx, &task, &mc, configured, false)
    };
    renew(0, 0);
    assert!(!restarted(&ctx, false));
    restarts::record(&ctx.caches.lives, "c1", |l| l.work_generation(2, seen(1)));
    // The new process renews; the handler runs (for another cluster) before the work is
    // seen applied.
    renew(20, 2);
    assert!(!restarted(&ctx, false));
    assert!(
        restarted(&ctx, true),
        "the renewal by the process started after the work changed counts"
    );

    // Another task, the same steps, but the renewal after the change is the old process's
    // periodic one: not a restart.
    let mut task = task.clone();
    task.metadata.name = Some("other".into());
    let restarted = |ctx: &Ctx, configured: bool| {
        source::restarted_since_configured(ctx, &task, &mc, configured, false)
    };
    assert!(!restarted(&ctx, false));
    restarts::record(&ctx.caches.lives, "c1", |l| l.work_generation(3, seen(3)));
    renew(80, 4);
    assert!(!restarted(&ctx, false));
    assert!(!restarted(&ctx, true), "a periodic renewal is no restart");
}
