//! What a holder of the migration's bootstrap token can and cannot do: the token is shared by
//! every cluster the migration moves, so the target approves a bootstrap CSR only for a
//! cluster the manager released, only before that cluster joined, and only once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use base64::Engine;
use e2e::eventually;
use e2e::migration::{Setup, block, registered, unblock};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use migration_api::common::find_condition;
use migration_api::migration::MigrationPhase;
use migration_api::ocm::cluster::ManagedCluster;
use migration_api::ocm::work::ManifestWork;

/// One fleet at a time: each runs a whole fleet on two cores.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const LONG: Duration = Duration::from_secs(120);

/// A client of the target hub with the migration's bootstrap token (what an admin of any
/// migrating cluster can read from its bootstrap kubeconfig).
async fn token_holder(s: &Setup, migration: &str) -> Client {
    let secrets: Api<Secret> = Api::namespaced(s.global.clone(), "hub2");
    let name = migration_api::names::migration_service_account(migration);
    let token = eventually(LONG, "the migration's bootstrap token", || async {
        let secret = secrets.get_opt(&name).await.ok()??;
        let token = secret.data?.get("token")?.0.clone();
        String::from_utf8(token).ok()
    })
    .await;
    let kubeconfig = s.fleet.hubs[1].cluster.api.kubeconfig_for_token(&token);
    kube_sim::client_from_kubeconfig(&kubeconfig).await.unwrap()
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
    let holder = token_holder(&s, "forgery").await;
    // cluster2 is listed, held on hub1: a CSR in its name is someone else's.
    let held = forge(&holder, "cluster2").await;
    registered(&s, "forgery", 1).await;
    // cluster1 joined hub2: another CSR in its name is not its klusterlet's.
    let second = forge(&holder, "cluster1").await;
    unblock(&hub1, "cluster2");
    s.phase("forgery", MigrationPhase::Completed, LONG).await;
    let mut expected = s.homes();
    expected.insert("cluster1".into(), 2);
    expected.insert("cluster2".into(), 2);
    s.invariant(&expected).await;
    let csrs: Api<CertificateSigningRequest> = Api::all(s.hub(2));
    for name in [&held, &second] {
        let csr = csrs.get(name).await.unwrap();
        assert!(!approved(&csr), "{name} was approved: {:?}", csr.status);
    }
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
    // The works and the token are still there for the source to finish with.
    assert!(
        Api::<ManifestWork>::namespaced(s.global.clone(), "hub1")
            .get_opt("migration-stalled-source")
            .await
            .unwrap()
            .is_some()
    );
    faults.clear();
    let m = s
        .phase("stalled", MigrationPhase::Failed, Duration::from_secs(180))
        .await;
    let counts = m.status.unwrap().clusters.unwrap();
    // cluster2 keeps its failure (refused by hub2) and is home: the invariant below.
    assert_eq!((counts.registered, counts.failed), (1, 1), "{counts:?}");
    let mut expected = s.homes();
    expected.insert("cluster1".into(), 2);
    s.invariant(&expected).await;
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
        });
    }
    let secrets: Api<Secret> = Api::namespaced(s.global.clone(), "hub2");
    let name = migration_api::names::migration_service_account("token-miss");
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
    let mut expected = s.homes();
    expected.insert("cluster1".into(), 2);
    expected.insert("cluster2".into(), 2);
    s.invariant(&expected).await;
}
