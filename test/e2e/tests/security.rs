//! What a holder of a migration's bootstrap token can and cannot do: each cluster has a
//! bootstrap identity of its own, and the target approves a bootstrap CSR only from the
//! cluster's own identity, only for a cluster the manager released, only before that cluster
//! joined, and only once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use base64::Engine;
use e2e::eventually;
use e2e::migration::{Setup, block, leftovers, refuse, registered, unblock};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use migration_api::common::find_condition;
use migration_api::migration::{MigrationPhase, MigrationTask, TaskStage};
use migration_api::ocm::cluster::ManagedCluster;
use migration_api::ocm::work::ManifestWork;

/// One fleet at a time: each runs a whole fleet on two cores.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const LONG: Duration = Duration::from_secs(120);

/// A client of the target hub with the bootstrap token of the migration's `identity` (what an
/// admin of the cluster it is issued to can read from its bootstrap kubeconfig).
async fn token_holder(s: &Setup, migration: &str, identity: usize) -> Client {
    let secrets: Api<Secret> = Api::namespaced(s.global.clone(), "hub2");
    let name = identity_name(s, migration, identity).await;
    let token = eventually(LONG, "the migration's bootstrap token", || async {
        let secret = secrets.get_opt(&name).await.ok()??;
        let token = secret.data?.get("token")?.0.clone();
        String::from_utf8(token).ok()
    })
    .await;
    let kubeconfig = s.fleet.hubs[1].cluster.api.kubeconfig_for_token(&token);
    kube_sim::client_from_kubeconfig(&kubeconfig).await.unwrap()
}

/// The ManagedServiceAccount (and token Secret) of a migration's bootstrap `identity`.
async fn identity_name(s: &Setup, migration: &str, identity: usize) -> String {
    s.identities(migration)
        .await
        .get(identity)
        .cloned()
        .unwrap_or_else(|| panic!("{migration} has no bootstrap identity {identity}"))
}

/// A CSR asking for `cluster`'s agent identity, as its klusterlet would.
async fn forge(client: &Client, cluster: &str) -> String {
    let groups = vec![
        format!("system:open-cluster-management:{cluster}"),
        "system:open-cluster-management:managed-clusters".to_owned(),
    ];
    let user = format!("system:open-cluster-management:{cluster}:forged");
    let (csr_pem, _key) = kube_sim::pki::make_csr(&user, &groups).unwrap();
    let csr: CertificateSigningRequest = serde_json::from_value(serde_json::json!({
        "metadata": {"generateName": format!("{cluster}-"),
                     "labels": {"open-cluster-management.io/cluster-name": cluster}},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(csr_pem),
                 "signerName": "kubernetes.io/kube-apiserver-client",
                 "usages": ["digital signature", "key encipherment", "client auth"]}
    }))
    .unwrap();
    // The identity may register once the target's part is deployed.
    let csrs = Api::<CertificateSigningRequest>::all(client.clone());
    eventually(LONG, "the bootstrap identity allowed to ask", || async {
        csrs.create(&PostParams::default(), &csr)
            .await
            .ok()
            .map(|c| c.name_any())
    })
    .await
}

fn approved(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Approved"))
}

/// A forged CSR for a listed cluster that is not released yet, and a second CSR for a
/// cluster that already joined, are never approved; the real clusters move all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_bootstrap_token_gets_no_certificate_for_another_cluster() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 2).await;
    let hub1 = e2e::kubeconfig(s.dir.path(), "hub1");
    block(&hub1, "cluster2", "forgery test");
    s.apply(
        "forgery",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1", "cluster2"]}"#,
    );
    // Each cluster's own identity (cluster1 is first in the list, cluster2 second).
    let holder1 = token_holder(&s, "forgery", 0).await;
    let holder2 = token_holder(&s, "forgery", 1).await;
    // cluster2 is listed, held on hub1: a CSR in its name is someone else's, even from its
    // own identity.
    let held = forge(&holder2, "cluster2").await;
    registered(&s, "forgery", 1).await;
    // cluster1 joined hub2: another CSR in its name is not its klusterlet's.
    let second = forge(&holder1, "cluster1").await;
    unblock(&hub1, "cluster2");
    s.phase("forgery", MigrationPhase::Completed, LONG).await;
    s.moved_to(["cluster1", "cluster2"], 2).await;
    let csrs: Api<CertificateSigningRequest> = Api::all(s.hub(2));
    for name in [&held, &second] {
        let csr = csrs.get(name).await.unwrap();
        assert!(
            !approved(&csr),
            "{name} was approved: {:?}",
            csr.status.and_then(|s| s.conditions)
        );
    }
}

/// Each cluster has a bootstrap identity of its own: a holder of cluster1's token (an admin of
/// cluster1) gets no certificate for cluster2, not even once cluster2 is released and its own
/// klusterlet has not asked yet (here it cannot: hub2 fails every CSR its identity files until
/// Registering times out). Then its klusterlet, still bootstrapping against hub2, may ask; the
/// rollback lets its request through so that it can go back to hub1, and the forged CSR stays
/// unapproved through the rollback too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_clusters_token_gets_no_certificate_for_another_released_cluster() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 2).await;
    let hub1 = e2e::kubeconfig(s.dir.path(), "hub1");
    block(&hub1, "cluster2", "identity test");
    s.apply(
        "identity",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1", "cluster2"], "maxFailures": 1, "registeringTimeout": "60s"}"#,
    );
    // cluster1 is first in the list, cluster2 second.
    let holder1 = token_holder(&s, "identity", 0).await;
    let user2 = format!(
        "system:serviceaccount:{}:{}",
        ocm_sim::msa::MSA_NAMESPACE,
        identity_name(&s, "identity", 1).await
    );
    let faults = s.fleet.hubs[1].cluster.api.faults();
    faults.add_error(kube_sim::ErrorRule {
        verb: Some("create".into()),
        resource: Some("certificatesigningrequests".into()),
        rate: 1.0,
        code: 503,
        user: Some(user2),
    });
    registered(&s, "identity", 1).await;
    unblock(&hub1, "cluster2");
    // Released: hub2 records when, in its task's status (no CSR of cluster2 filed earlier
    // counts).
    let tasks = Api::<migration_api::migration::MigrationTask>::all(s.hub(2));
    eventually(LONG, "hub2 told of cluster2's release", || async {
        let list = tasks.list(&Default::default()).await.ok()?;
        list.items.iter().find_map(|t| {
            let times = t.status.as_ref()?.release_times.as_ref()?.decode(2);
            times[1].map(drop)
        })
    })
    .await;
    let forged = forge(&holder1, "cluster2").await;
    s.phase("identity", MigrationPhase::Rollbacking, LONG).await;
    faults.clear();
    s.phase("identity", MigrationPhase::Failed, LONG).await;
    let csr = Api::<CertificateSigningRequest>::all(s.hub(2))
        .get(&forged)
        .await
        .unwrap();
    assert!(
        !approved(&csr),
        "{forged} was approved: {:?}",
        csr.status.and_then(|s| s.conditions)
    );
    let mut expected = s.homes();
    expected.insert("cluster1".into(), 2);
    expected.insert("cluster2".into(), 1);
    s.invariant(&expected).await;
}

/// The source lets a cluster go only once the target has recorded its release, the first
/// release of a migration too: the target approves only the bootstrap CSRs filed after it
/// learnt of a release, so a klusterlet let go earlier would ask it for a certificate it never
/// grants. Here the migration's one cluster turns ready while the target cannot write its
/// task's status: the manager tells the target of the release and the source nothing, and the
/// cluster stays accepted on hub1 until the target's record comes through; then it moves.
/// (Until 38ab276 a source task that listed no release yet was told of every cluster in flight,
/// so the first release reached both hubs in one step.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_first_release_reaches_the_source_only_once_the_target_recorded_it() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 1).await;
    let hub1 = e2e::kubeconfig(s.dir.path(), "hub1");
    block(&hub1, "cluster1", "first release");
    s.apply(
        "first",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1"]}"#,
    );
    let target_tasks = Api::<MigrationTask>::all(s.hub(2));
    eventually(LONG, "the target at work on Registering", || async {
        let list = target_tasks.list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .any(|t| {
                t.spec.stage == TaskStage::Registering
                    && t.status.as_ref().is_some_and(|st| {
                        st.observed_stage == Some(TaskStage::Registering)
                            && st.observed_revision == t.spec.revision
                    })
            })
            .then_some(())
    })
    .await;
    // From here on the target's agent cannot write its task's status.
    let faults = s.fail_task_status_writes(2);
    unblock(&hub1, "cluster1");
    eventually(LONG, "hub2 told of cluster1's release", || async {
        let list = target_tasks.list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .any(|t| t.spec.released.iter().flatten().any(|c| c == "cluster1"))
            .then_some(())
    })
    .await;
    // The target has tried to record it since, and could not.
    let before = s.refused_task_status_writes(2);
    eventually(LONG, "the target's record refused", || async {
        (s.refused_task_status_writes(2) > before).then_some(())
    })
    .await;
    // The manager wrote the target's task before hub2 showed it: the source's task, on the
    // global hub, lists no release, and hub1 still accepts the cluster.
    let works = Api::<ManifestWork>::namespaced(s.global.clone(), "hub1")
        .list(&Default::default())
        .await
        .unwrap();
    let source_released: Vec<String> = works
        .items
        .iter()
        .flat_map(|w| {
            w.spec
                .workload
                .iter()
                .flat_map(|l| l.manifests.iter().flatten())
                .filter(|m| m["kind"] == "MigrationTask")
                .flat_map(|m| {
                    m["spec"]["released"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                })
                .collect::<Vec<_>>()
        })
        .filter_map(|c| c.as_str().map(str::to_owned))
        .collect();
    assert!(
        source_released.is_empty(),
        "the source was told of {source_released:?} before the target recorded it"
    );
    let cluster1 = Api::<ManagedCluster>::all(s.hub(1))
        .get("cluster1")
        .await
        .unwrap();
    assert!(
        cluster1.spec.hub_accepts_client,
        "hub1 let cluster1 go before hub2 recorded its release"
    );
    faults.clear();
    s.phase("first", MigrationPhase::Completed, LONG).await;
    s.moved_to(["cluster1"], 2).await;
}

/// The source hub's agent cannot act while a cluster must be taken back (every write of a
/// ManagedCluster there fails) for longer than the stage timeouts: Cleaning says it is waiting
/// past its timeout instead of deleting the works and the token, and once the source can act
/// again the cluster is taken back: none is left refused by both hubs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_source_that_cannot_act_in_cleaning_strands_no_cluster() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 2).await;
    let hub1 = e2e::kubeconfig(s.dir.path(), "hub1");
    let hub2 = e2e::kubeconfig(s.dir.path(), "hub2");
    block(&hub1, "cluster2", "later");
    s.apply(
        "stalled",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1", "cluster2"], "maxFailures": 1, "stageTimeout": "30s"}"#,
    );
    registered(&s, "stalled", 1).await;
    // Once hub1 has let cluster2 go, hub2 refuses it (before it can join) and hub1's agent
    // can no longer write any ManagedCluster, so it cannot take cluster2 back.
    unblock(&hub1, "cluster2");
    let clusters1: Api<ManagedCluster> = Api::all(s.hub(1));
    eventually(LONG, "cluster2 released on hub1", || async {
        let mc = clusters1.get_opt("cluster2").await.ok()??;
        (!mc.spec.hub_accepts_client).then_some(())
    })
    .await;
    let faults = s.fleet.hubs[0].cluster.api.faults();
    faults.add_error(kube_sim::ErrorRule {
        verb: Some("patch".into()),
        resource: Some("managedclusters".into()),
        rate: 1.0,
        code: 503,
        user: None,
    });
    e2e::migration::refuse(&hub2, "cluster2");
    eventually(
        Duration::from_secs(180),
        "Cleaning waiting past its timeout",
        || async {
            let st = s.migration("stalled").await?.status?;
            let cleaned = find_condition(st.conditions.as_deref()?, "ResourceCleaned")?.clone();
            (st.phase == Some(MigrationPhase::Cleaning)
                && cleaned.reason == "Timeout"
                && cleaned.message.contains("stay until the hubs confirm"))
            .then_some(())
        },
    )
    .await;
    // The works are still there for the source to finish with; the bootstrap token is no
    // longer on the source (every cluster has its own credentials or goes home): neither in
    // the task's work nor in the bootstrap work, which is gone with the Secrets it put there.
    let key = s.key("stalled").await;
    let works = Api::<ManifestWork>::namespaced(s.global.clone(), "hub1");
    let work = works
        .get_opt(&migration_api::names::migration_work(
            &key,
            migration_api::migration::MigrationRole::Source,
        ))
        .await
        .unwrap()
        .expect("the source's work");
    let kinds: Vec<&str> = work
        .manifests()
        .iter()
        .map(|m| m["kind"].as_str().unwrap_or_default())
        .collect();
    assert!(!kinds.contains(&"Secret"), "{kinds:?}");
    let secret_prefix = format!(
        "{}-",
        migration_api::names::migration_bootstrap_secret(&key)
    );
    let secrets: Api<Secret> = Api::namespaced(s.hub(1), "multicluster-engine");
    eventually(LONG, "the bootstrap work and its Secrets gone", || async {
        let work = works
            .get_opt(&migration_api::names::migration_bootstrap_work(&key))
            .await
            .ok()?;
        let left = secrets.list(&Default::default()).await.ok()?.items;
        let left = left
            .iter()
            .any(|x| x.name_any().starts_with(&secret_prefix));
        (work.is_none() && !left).then_some(())
    })
    .await;
    faults.clear();
    let m = s
        .phase("stalled", MigrationPhase::Failed, Duration::from_secs(180))
        .await;
    let counts = m.status.unwrap().clusters.unwrap();
    // cluster2 keeps its failure (refused by hub2) and is home: the invariant below.
    assert_eq!((counts.registered, counts.failed), (1, 1), "{counts:?}");
    s.moved_to(["cluster1"], 2).await;
}

/// The bootstrap token's Secret goes missing mid-Registering (as while the
/// managed-serviceaccount addon re-creates it) and stays missing a while: the migration waits,
/// says why, and completes once the Secret is back; it does not roll back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_token_secret_is_waited_for_not_rolled_back() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 2).await;
    let hub1 = e2e::kubeconfig(s.dir.path(), "hub1");
    block(&hub1, "cluster2", "later");
    s.apply(
        "token-miss",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1", "cluster2"]}"#,
    );
    registered(&s, "token-miss", 1).await;
    // The addon cannot re-create the Secret for now.
    let faults = s.fleet.global.cluster.api.faults();
    // (It writes the Secret with server-side apply, a patch.)
    for verb in ["create", "patch"] {
        faults.add_error(kube_sim::ErrorRule {
            verb: Some(verb.into()),
            resource: Some("secrets".into()),
            rate: 1.0,
            code: 503,
            user: None,
        });
    }
    let secrets: Api<Secret> = Api::namespaced(s.global.clone(), "hub2");
    let name = identity_name(&s, "token-miss", 0).await;
    secrets.delete(&name, &Default::default()).await.unwrap();
    // The manager does not watch Secrets (it may not read them cluster-wide); the next event
    // of the migration makes it look. Here: an annotation.
    Api::<migration_api::migration::ManagedClusterMigration>::namespaced(
        s.global.clone(),
        e2e::migration::NS,
    )
    .patch(
        "token-miss",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(
            serde_json::json!({"metadata": {"annotations": {"test/poke": "1"}}}),
        ),
    )
    .await
    .unwrap();
    eventually(LONG, "the migration waiting for the token", || async {
        let st = s.migration("token-miss").await?.status?;
        assert_ne!(st.phase, Some(MigrationPhase::Rollbacking), "{st:#?}");
        let c = find_condition(st.conditions.as_deref()?, "ClusterRegistered")?.clone();
        c.message.contains("bootstrap token's Secret").then_some(())
    })
    .await;
    faults.clear();
    unblock(&hub1, "cluster2");
    s.phase("token-miss", MigrationPhase::Completed, LONG).await;
    s.moved_to(["cluster1", "cluster2"], 2).await;
}

/// Two migrations of one name in two namespaces, from the same source hub to two targets,
/// run side by side: each has its own works, task, token and KlusterletConfig (named after its
/// key), and each moves its own cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migrations_named_alike_in_two_namespaces_run_side_by_side() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(3, 2).await;
    // Each team may see every hub and the source's clusters.
    for ns in ["team-a", "team-b"] {
        bind(&s, 0, ns).await;
        bind(&s, 1, ns).await;
    }
    // cluster1 stays held until both migrations are under way, so they overlap.
    let hub1 = e2e::kubeconfig(s.dir.path(), "hub1");
    block(&hub1, "cluster1", "overlap");
    s.apply_in(
        "team-a",
        "move",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1"]}"#,
    );
    s.apply_in(
        "team-b",
        "move",
        r#"{"from": "hub1", "to": "hub3", "includedManagedClusters": ["cluster2"]}"#,
    );
    let (a, b) = (
        s.key_in("team-a", "move").await,
        s.key_in("team-b", "move").await,
    );
    assert_ne!(a, b);
    let works = Api::<ManifestWork>::namespaced(s.global.clone(), "hub1");
    eventually(LONG, "both source works on hub1", || async {
        let role = migration_api::migration::MigrationRole::Source;
        for key in [&a, &b] {
            works
                .get_opt(&migration_api::names::migration_work(key, role))
                .await
                .ok()??;
        }
        Some(())
    })
    .await;
    s.phase_in("team-b", "move", MigrationPhase::Completed, LONG)
        .await;
    unblock(&hub1, "cluster1");
    s.phase_in("team-a", "move", MigrationPhase::Completed, LONG)
        .await;
    let mut expected = s.homes();
    expected.insert("cluster1".into(), 2);
    expected.insert("cluster2".into(), 3);
    s.invariant(&expected).await;
}

/// An edit of `to` while clusters are in flight changes nothing: the migration says so
/// (`SpecAccepted` False, `SpecImmutable`) and finishes with the hub it started with; the hub
/// named by the edit gets nothing. (kube-sim evaluates no CEL, so the edit reaches the manager,
/// as it would on an API server without the CRD's transition rule.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_edit_of_the_target_mid_flight_changes_nothing() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(3, 2).await;
    let hub1 = e2e::kubeconfig(s.dir.path(), "hub1");
    block(&hub1, "cluster2", "edit test");
    s.apply(
        "edit",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1", "cluster2"]}"#,
    );
    registered(&s, "edit", 1).await;
    s.apply(
        "edit",
        r#"{"from": "hub1", "to": "hub3", "includedManagedClusters": ["cluster1", "cluster2"]}"#,
    );
    eventually(LONG, "the edit refused", || async {
        let st = s.migration("edit").await?.status?;
        let c = find_condition(st.conditions.as_deref()?, "SpecAccepted")?.clone();
        (c.status == "False"
            && c.reason == "SpecImmutable"
            && c.message.contains("to: hub2 -> hub3"))
        .then_some(())
    })
    .await;
    unblock(&hub1, "cluster2");
    let m = s.phase("edit", MigrationPhase::Completed, LONG).await;
    assert_eq!(
        m.status.unwrap().accepted_spec.map(|a| a.to).as_deref(),
        Some("hub2")
    );
    s.moved_to(["cluster1", "cluster2"], 2).await;
    let on_hub3 = Api::<ManifestWork>::namespaced(s.global.clone(), "hub3")
        .list(
            &kube::api::ListParams::default()
                .labels("migration.open-cluster-management.io/migration"),
        )
        .await
        .unwrap();
    assert!(on_hub3.items.is_empty(), "{:?}", on_hub3.items);
}

/// Binds the `global` cluster set to `namespace` on the global hub (`hub` 0) or on hub `hub`.
async fn bind(s: &Setup, hub: usize, namespace: &str) {
    let cluster = if hub == 0 {
        &s.fleet.global.cluster
    } else {
        &s.fleet.hubs[hub - 1].cluster
    };
    ocm_sim::hub::bind_cluster_set(cluster, namespace, "global")
        .await
        .unwrap();
}

/// OCM's tenancy model: a migration in a namespace with no ManagedClusterSetBinding may not
/// name the hubs (refused by the manager, `Forbidden`), and one whose namespace sees the hubs
/// but not the clusters on the source hub is refused by the source agent (`Forbidden`). Neither
/// touches anything, and the clusters stay where they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_namespace_without_bindings_may_move_nothing() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 2).await;
    e2e::kubectl_ok(&s.global_kc, &["create", "namespace", "team-c"], None);
    s.apply_in(
        "team-c",
        "grab",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1"]}"#,
    );
    let m = s
        .phase_in("team-c", "grab", MigrationPhase::Failed, LONG)
        .await;
    let st = m.status.unwrap();
    let c = find_condition(st.conditions.as_deref().unwrap(), "ResourceValidated").unwrap();
    assert_eq!(c.reason, "Forbidden", "{c:?}");
    assert!(
        c.message.contains("hub hub1 and hub hub2") && c.message.contains("team-c"),
        "{}",
        c.message
    );
    // The global hub's set is bound now, the source hub's is not: the clusters stay out.
    bind(&s, 0, "team-c").await;
    s.apply_in(
        "team-c",
        "grab-again",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1"]}"#,
    );
    let m = s
        .phase_in("team-c", "grab-again", MigrationPhase::Failed, LONG)
        .await;
    let st = m.status.unwrap();
    let c = find_condition(st.conditions.as_deref().unwrap(), "ResourceValidated").unwrap();
    assert_eq!(c.reason, "Forbidden", "{c:?}");
    assert!(
        c.message
            .contains("cluster1 is in no ManagedClusterSet bound"),
        "{}",
        c.message
    );
    eventually(LONG, "the validation works removed", || async {
        let works = Api::<ManifestWork>::namespaced(s.global.clone(), "hub1")
            .list(
                &kube::api::ListParams::default()
                    .labels("migration.open-cluster-management.io/migration"),
            )
            .await
            .ok()?;
        works.items.is_empty().then_some(())
    })
    .await;
    for name in ["grab", "grab-again"] {
        assert_eq!(leftovers(&s, name).await, None, "{name}");
    }
    s.invariant(&s.homes()).await;
}

/// The source's work deleted by hand while one cluster has moved and another is held in
/// Registering: the migration decides from its status what it touched, not from the work, so
/// deleting the migration then rolls the held cluster back (its marks removed) and detaches
/// the one that moved; nothing of the migration is left on hub1.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_source_work_deleted_mid_registering_loses_nothing() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 2).await;
    let hub1 = e2e::kubeconfig(s.dir.path(), "hub1");
    block(&hub1, "cluster2", "held");
    s.apply(
        "lost",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1", "cluster2"]}"#,
    );
    registered(&s, "lost", 1).await;
    // The source's work (the task's; its bootstrap objects travel in another).
    let works = Api::<ManifestWork>::namespaced(s.global.clone(), "hub1");
    let source = migration_api::names::migration_work(
        &s.key("lost").await,
        migration_api::migration::MigrationRole::Source,
    );
    works.delete(&source, &Default::default()).await.unwrap();
    e2e::kubectl_ok(
        &s.global_kc,
        &[
            "delete",
            "mcm",
            "lost",
            "-n",
            e2e::migration::NS,
            "--wait=false",
        ],
        None,
    );
    eventually(
        Duration::from_secs(240),
        "the migration rolled back and gone",
        || async { s.migration("lost").await.is_none().then_some(()) },
    )
    .await;
    s.moved_to(["cluster1"], 2).await;
    unblock(&hub1, "cluster2");
    eventually(
        LONG,
        "hub1 without the moved cluster and without marks",
        || async {
            let clusters = Api::<ManagedCluster>::all(s.hub(1))
                .list(&kube::api::ListParams::default())
                .await
                .ok()?;
            let moved_gone = clusters.items.iter().all(|mc| mc.name_any() != "cluster1");
            let unmarked = clusters.items.iter().all(|mc| {
                !mc.annotations().keys().any(|k| {
                    k.starts_with("migration.open-cluster-management.io/")
                        || k == "agent.open-cluster-management.io/klusterlet-config"
                })
            });
            (moved_gone && unmarked).then_some(())
        },
    )
    .await;
    s.moved_to(["cluster1"], 2).await;
}

/// A cluster that arrived on the target and that the target then lost (its admin refused it)
/// before the migration came to detach it from the source: Cleaning asks the target again, so
/// the source does not detach it but accepts it again (`ClusterLost`, the migration Failed),
/// and once the source's admin re-imports it (ACM's auto-import secret, in case its
/// klusterlet, which knows only the target by now, cannot find its way back) it is Available
/// on the source. Detached, as it was before the target was asked again, it would be on
/// neither hub.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_lost_on_the_target_after_arriving_ends_on_the_source() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 2).await;
    let hub1 = e2e::kubeconfig(s.dir.path(), "hub1");
    let hub2 = e2e::kubeconfig(s.dir.path(), "hub2");
    block(&hub1, "cluster2", "held");
    s.apply(
        "lose",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1", "cluster2"]}"#,
    );
    registered(&s, "lose", 1).await;
    refuse(&hub2, "cluster1");
    unblock(&hub1, "cluster2");
    let hub1_clusters = Api::<ManagedCluster>::all(s.hub(1));
    eventually(
        LONG,
        "cluster1 lost, and accepted by hub1 again",
        || async {
            let st = s.migration("lose").await?.status?;
            let lost = st
                .failures?
                .iter()
                .any(|f| f.name == "cluster1" && f.reason == "ClusterLost");
            let mc = hub1_clusters.get_opt("cluster1").await.ok()??;
            (lost && mc.spec.hub_accepts_client && mc.metadata.deletion_timestamp.is_none())
                .then_some(())
        },
    )
    .await;
    // The source's admin imports it again.
    Api::<Secret>::namespaced(s.hub(1), "cluster1")
        .patch(
            "auto-import-secret",
            &kube::api::PatchParams::apply("test").force(),
            &kube::api::Patch::Apply(serde_json::json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "auto-import-secret", "namespace": "cluster1"},
                "stringData": {"kubeconfig": s.fleet.clusters[0].1.api.kubeconfig()}
            })),
        )
        .await
        .unwrap();
    let m = s.phase("lose", MigrationPhase::Failed, LONG).await;
    let counts = m.status.unwrap().clusters.unwrap();
    assert_eq!((counts.registered, counts.failed), (1, 1), "{counts:?}");
    s.moved_to(["cluster2"], 2).await;
}

/// The target's work deleted by hand while a cluster is held in Registering: what the clusters
/// carry is recorded in the migration's status at validation, so the task delivered again to
/// the target still has every record, and the held cluster arrives with its labels and addon.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_work_deleted_mid_registering_keeps_what_the_clusters_carry() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 2).await;
    let hub1 = e2e::kubeconfig(s.dir.path(), "hub1");
    e2e::kubectl_ok(
        &hub1,
        &["label", "managedcluster", "cluster2", "env=prod"],
        None,
    );
    e2e::kubectl_apply(
        &hub1,
        r#"{"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
  "metadata": {"name": "search-collector", "namespace": "cluster2"}, "spec": {"installNamespace": "search"}}"#,
    );
    block(&hub1, "cluster2", "held");
    s.apply(
        "carried",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1", "cluster2"]}"#,
    );
    registered(&s, "carried", 1).await;
    let works = Api::<ManifestWork>::namespaced(s.global.clone(), "hub2");
    let name = migration_api::names::migration_work(
        &s.key("carried").await,
        migration_api::migration::MigrationRole::Target,
    );
    let old = works.get(&name).await.unwrap().metadata.uid;
    works.delete(&name, &Default::default()).await.unwrap();
    let tasks = Api::<migration_api::migration::MigrationTask>::all(s.hub(2));
    eventually(
        LONG,
        "the target's task delivered again, with the records",
        || async {
            let again = works.get_opt(&name).await.ok()??;
            if again.metadata.uid == old {
                return None;
            }
            let task = tasks
                .list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .next()?;
            let records = task.spec.carry_over.unwrap_or_default();
            records
                .iter()
                .any(|r| {
                    r.name == "cluster2" && r.labels.get("env").map(String::as_str) == Some("prod")
                })
                .then_some(())
        },
    )
    .await;
    unblock(&hub1, "cluster2");
    s.phase("carried", MigrationPhase::Completed, LONG).await;
    s.moved_to(["cluster1", "cluster2"], 2).await;
    let hub2 = e2e::kubeconfig(s.dir.path(), "hub2");
    let addon = e2e::kubectl_ok(
        &hub2,
        &[
            "get",
            "managedclusteraddon",
            "search-collector",
            "-n",
            "cluster2",
            "-o",
            "jsonpath={.spec.installNamespace}",
        ],
        None,
    );
    assert_eq!(addon, "search");
}

/// A client of hub `hub` with the addon agent's own identity (the in-cluster credentials the
/// kubelet gave its pod).
async fn agent_client(s: &Setup, hub: &str) -> Client {
    let path = s.dir.path().join(format!(
        "pods/{hub}/open-cluster-management-agent-addon-cluster-migration-agent/in-cluster.kubeconfig"
    ));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    kube_sim::client_from_kubeconfig(&text).await.unwrap()
}

/// Whether `client` may `verb` the ManagedCluster `name` (a SelfSubjectAccessReview).
async fn may(client: &Client, verb: &str, name: &str) -> bool {
    may_on(
        client,
        "cluster.open-cluster-management.io",
        "managedclusters",
        verb,
        name,
    )
    .await
}

/// Whether `client` may `verb` the `group`/`resource` object `name` (cluster-scoped).
async fn may_on(client: &Client, group: &str, resource: &str, verb: &str, name: &str) -> bool {
    may_do(client, &format!("{verb} {resource}.{group} {name}")).await
}

/// Whether `client` may do `what`: `verb resource[/subresource].group [name] [namespace]`
/// (the core group as an empty group: `create serviceaccounts/token. cluster-bootstrap
/// open-cluster-management`).
async fn may_do(client: &Client, what: &str) -> bool {
    use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
    let words: Vec<&str> = what.split(' ').collect();
    let (resource, group) = words[1].split_once('.').unwrap();
    let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
    let review: SelfSubjectAccessReview = serde_json::from_value(serde_json::json!({
        "spec": {"resourceAttributes": {"group": group, "resource": resource,
                 "subresource": subresource, "verb": words[0],
                 "name": words.get(2).copied().unwrap_or_default(),
                 "namespace": words.get(3).copied().unwrap_or_default()}}
    }))
    .unwrap();
    Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

/// What a stolen token of an idle agent could do on its hub, that it must not: approve a
/// certificate, issue a token of the hub's bootstrap identity, change a cluster, a work, a
/// KlusterletConfig or RBAC, read a Secret outside its namespace.
const NEVER_IDLE: [&str; 14] = [
    "update certificatesigningrequests/approval.certificates.k8s.io c1",
    "patch certificatesigningrequests/approval.certificates.k8s.io c1",
    "approve signers.certificates.k8s.io kubernetes.io/kube-apiserver-client",
    "create serviceaccounts/token. cluster-bootstrap open-cluster-management",
    "create serviceaccounts/token. agent-registration-bootstrap open-cluster-management",
    "patch managedclusters.cluster.open-cluster-management.io cluster1",
    "create managedclusters.cluster.open-cluster-management.io",
    "update managedclusters/accept.register.open-cluster-management.io cluster1",
    "create manifestworks.work.open-cluster-management.io x cluster1",
    "patch klusterletconfigs.config.open-cluster-management.io global",
    "create clusterrolebindings.rbac.authorization.k8s.io",
    "create rolebindings.rbac.authorization.k8s.io x cluster1",
    "get secrets. x open-cluster-management",
    "create managedclustersets/join.cluster.open-cluster-management.io default",
];

/// What an idle agent reads and runs: its standing rights.
const STANDING: [&str; 9] = [
    "list managedclusters.cluster.open-cluster-management.io",
    "watch managedclusteraddons.addon.open-cluster-management.io",
    "list klusterletaddonconfigs.agent.open-cluster-management.io",
    "watch certificatesigningrequests.certificates.k8s.io",
    "list klusterletconfigs.config.open-cluster-management.io",
    "patch migrationtasks/status.migration.open-cluster-management.io x open-cluster-management-agent-addon",
    "update leases.coordination.k8s.io cluster-migration open-cluster-management-agent-addon",
    "get placements.cluster.open-cluster-management.io x default",
    "create events. x open-cluster-management-agent-addon",
];

/// Every right in `rights` that `client` has (`allowed`) or lacks (`!allowed`).
async fn rights_where(
    client: &Client,
    rights: &[&'static str],
    allowed: bool,
) -> Vec<&'static str> {
    let mut out = Vec::new();
    for what in rights {
        if may_do(client, what).await == allowed {
            out.push(*what);
        }
    }
    out
}

/// The addon agent writes on its hub only what a running migration grants it: with no
/// migration its own identity reads what it watches but may not change a cluster, create a
/// ManifestWork (which runs whatever it holds on a cluster), approve a CSR or issue a token of
/// the hub's bootstrap identity (`NEVER_IDLE`, probed on both hubs); during a migration it
/// may change that migration's clusters and no other, and only the target's agent may
/// approve CSRs and issue those tokens; once the migration is over, nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_agent_writes_only_what_a_running_migration_grants() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 2).await;
    let hub1 = e2e::kubeconfig(s.dir.path(), "hub1");
    let agent = agent_client(&s, "hub1").await;
    let target_agent = agent_client(&s, "hub2").await;
    for (hub, client) in [("hub1", &agent), ("hub2", &target_agent)] {
        assert_eq!(
            rights_where(client, &NEVER_IDLE, true).await,
            Vec::<&str>::new(),
            "{hub}"
        );
        assert_eq!(
            rights_where(client, &STANDING, false).await,
            Vec::<&str>::new(),
            "{hub}"
        );
    }
    let clusters = Api::<ManagedCluster>::all(agent.clone());
    assert!(
        !clusters
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let annotate = serde_json::json!({"metadata": {"annotations": {"example.com/x": "y"}}});
    let refused = clusters
        .patch(
            "cluster2",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&annotate),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(refused, kube::Error::Api(ref e) if e.code == 403),
        "{refused}"
    );
    let work = serde_json::json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": "anything", "namespace": "cluster1"}, "spec": {"workload": {"manifests": []}}});
    let refused = Api::<ManifestWork>::namespaced(agent.clone(), "cluster1")
        .patch(
            "anything",
            &kube::api::PatchParams::apply("test"),
            &kube::api::Patch::Apply(&work),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(refused, kube::Error::Api(ref e) if e.code == 403),
        "{refused}"
    );
    // While cluster1 moves (held here), its ManagedCluster is the agent's to change; cluster2's
    // is not.
    block(&hub1, "cluster1", "held");
    s.apply(
        "granted",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1"]}"#,
    );
    eventually(LONG, "the agent granted cluster1", || async {
        may(&agent, "patch", "cluster1").await.then_some(())
    })
    .await;
    assert!(!may(&agent, "patch", "cluster2").await);
    assert!(!may(&agent, "delete", "cluster2").await);
    // The target's agent approves the clusters' CSRs and issues bootstrap tokens while the
    // migration runs; the source's never does.
    let approve = &NEVER_IDLE[..5];
    eventually(LONG, "the target's agent granted approval", || async {
        rights_where(&target_agent, approve, false)
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    assert_eq!(
        rights_where(&agent, approve, true).await,
        Vec::<&str>::new()
    );
    // The KlusterletConfig every cluster of the hub is rendered from is never the agent's.
    let config = "config.open-cluster-management.io";
    for verb in ["patch", "update", "delete", "create"] {
        assert!(
            !may_on(&agent, config, "klusterletconfigs", verb, "global").await,
            "{verb} global"
        );
    }
    unblock(&hub1, "cluster1");
    s.phase("granted", MigrationPhase::Completed, LONG).await;
    eventually(LONG, "the grants gone with the migration", || async {
        (!may(&agent, "patch", "cluster1").await && !may(&agent, "delete", "cluster1").await)
            .then_some(())
    })
    .await;
    eventually(
        LONG,
        "the target's grants gone with the migration",
        || async {
            rights_where(&target_agent, &NEVER_IDLE, true)
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
    s.moved_to(["cluster1"], 2).await;
}

/// A bootstrap work the source hub cannot apply (its KlusterletConfig refused there) is named
/// in the Deploying condition, with the hub's answer, instead of a silent wait for the stage
/// timeout; once the hub takes it the migration goes on and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bootstrap_work_the_source_refuses_is_named_in_deploying() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 2).await;
    let faults = s.fleet.hubs[0].cluster.api.faults();
    for verb in ["create", "patch", "update"] {
        faults.add_error(kube_sim::ErrorRule {
            verb: Some(verb.into()),
            resource: Some("klusterletconfigs".into()),
            rate: 1.0,
            code: 403,
            user: None,
        });
    }
    s.apply(
        "refused",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1"]}"#,
    );
    let work = migration_api::names::migration_bootstrap_work(&s.key("refused").await);
    let said = eventually(
        LONG,
        "Deploying names the refused bootstrap work",
        || async {
            let m = s.migration("refused").await?;
            let st = m.status?;
            let c = find_condition(st.conditions.as_deref()?, "ResourceDeployed")?.clone();
            (c.status == "False" && c.message.contains(&work)).then_some(c.message)
        },
    )
    .await;
    assert!(said.contains("KlusterletConfig"), "{said}");
    faults.clear();
    s.phase("refused", MigrationPhase::Completed, LONG).await;
    s.moved_to(["cluster1"], 2).await;
}

/// Hostile specs applied with kubectl as a tenant would: a stageTimeout that rounds to 2^64
/// seconds (no `Duration` holds it), and a maxConcurrency past int32 (stored as it is: the
/// API server does not enforce the int32 format; a typed list of every migration must still
/// decode) beside a carry-over selector with an empty label key. Each fails alone with
/// InvalidSpec, the manager keeps running, and a good migration applied after them
/// completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_specs_fail_only_themselves_and_the_manager_goes_on() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut s = Setup::new(2, 2).await;
    s.apply(
        "overflow",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1"],
            "stageTimeout": "18446744073709551615s"}"#,
    );
    s.apply(
        "huge",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1"],
            "maxConcurrency": 9999999999,
            "carryOver": [{"resource": "configmaps", "labelSelector": {"matchLabels": {"": "x"}}}]}"#,
    );
    for (name, field) in [("overflow", "stageTimeout"), ("huge", "carryOver")] {
        let failed = s.phase(name, MigrationPhase::Failed, LONG).await;
        let conditions = failed.status.and_then(|s| s.conditions).unwrap_or_default();
        let validated = find_condition(&conditions, "ResourceValidated").unwrap();
        assert_eq!(validated.reason, "InvalidSpec", "{name}: {validated:?}");
        assert!(validated.message.contains(field), "{name}: {validated:?}");
    }
    s.apply(
        "good",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1"]}"#,
    );
    s.phase("good", MigrationPhase::Completed, LONG).await;
    s.moved_to(["cluster1"], 2).await;
    let manager = s.manager.as_mut().unwrap();
    assert!(manager.running(), "the manager exited:\n{}", manager.logs());
    let logs = s.logs();
    assert!(!logs.contains("panicked"), "a reconcile panicked:\n{logs}");
}

/// A cluster released by the source loses power before it reaches the target: Registering
/// times out, the source accepts it again, and it never reports. Cleaning does not wait for
/// it forever: past its bound it names the cluster (`Unconfirmed`), removes the migration's
/// objects and ends Failed; the hub pair is free, and the next migration on it completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_that_never_comes_back_holds_no_hub_forever() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 3).await;
    let hub1 = e2e::kubeconfig(s.dir.path(), "hub1");
    block(&hub1, "cluster2", "later");
    s.apply(
        "lost",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1", "cluster2"],
            "maxFailures": 1, "stageTimeout": "30s", "registeringTimeout": "30s"}"#,
    );
    registered(&s, "lost", 1).await;
    // cluster2 goes dark, then is let go: it never joins hub2 and never comes back to hub1.
    let (_, _, klusterlet) = s
        .fleet
        .clusters
        .iter()
        .find(|(_, c, _)| c.name == "cluster2")
        .unwrap();
    klusterlet.stop();
    unblock(&hub1, "cluster2");
    let m = s
        .phase("lost", MigrationPhase::Failed, Duration::from_secs(300))
        .await;
    let st = m.status.unwrap();
    let failures = st.failures.clone().unwrap_or_default();
    let c2 = failures.iter().find(|f| f.name == "cluster2");
    assert_eq!(
        c2.map(|f| f.reason.as_str()),
        Some("Unconfirmed"),
        "{failures:?}"
    );
    let abandoned = find_condition(st.conditions.as_deref().unwrap(), "Abandoned").unwrap();
    assert_eq!(
        (abandoned.status.as_str(), abandoned.reason.as_str()),
        ("True", "Unconfirmed")
    );
    assert!(abandoned.message.contains("cluster2"), "{abandoned:?}");
    // Its source accepts it again (it is home when it comes back); nothing of the migration
    // is left on the global hub.
    let mc = Api::<ManagedCluster>::all(s.hub(1))
        .get("cluster2")
        .await
        .unwrap();
    assert!(mc.spec.hub_accepts_client, "hub1 refuses cluster2");
    assert!(
        Api::<ManagedCluster>::all(s.hub(2))
            .get_opt("cluster2")
            .await
            .unwrap()
            .is_none(),
        "hub2 kept a copy of cluster2"
    );
    // Its works go once hub1's work agent has let them go (the migration ended as soon as
    // they were being deleted: a hub that never answers would hold them forever).
    let works = Api::<ManifestWork>::namespaced(s.global.clone(), "hub1");
    let key = s.key("lost").await;
    for name in [
        migration_api::names::migration_work(&key, migration_api::migration::MigrationRole::Source),
        migration_api::names::migration_bootstrap_work(&key),
    ] {
        eventually(LONG, &format!("{name} gone"), || async {
            works.get_opt(&name).await.ok()?.is_none().then_some(())
        })
        .await;
    }
    let msas =
        Api::<migration_api::ocm::msa::ManagedServiceAccount>::namespaced(s.global.clone(), "hub2");
    let own = kube::api::ListParams::default()
        .labels("migration.open-cluster-management.io/migration=lost");
    eventually(LONG, "the bootstrap identities revoked", || async {
        msas.list(&own).await.ok()?.items.is_empty().then_some(())
    })
    .await;
    // The hub pair is free: the next migration runs and completes.
    s.apply(
        "next",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster3"]}"#,
    );
    s.phase("next", MigrationPhase::Completed, LONG).await;
    let mut expected = s.homes();
    expected.remove("cluster2");
    expected.insert("cluster1".into(), 2);
    expected.insert("cluster3".into(), 2);
    s.invariant(&expected).await;
}
