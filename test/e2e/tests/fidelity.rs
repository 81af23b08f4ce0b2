//! Migrations against the strict simulator (the work agent's real identity, its raw feedback
//! gate off, klusterlets that never re-select while bootstrapping and prefer their current
//! hub's URL, the import controller's rendering, auto-import, eviction): what a real ACM/OCM
//! fleet would do with each of the addon's choices, end to end with the real binaries.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::migration::{Setup, block, cluster_api, refuse, registered, unblock};
use e2e::{eventually, kubeconfig, kubectl_apply, kubectl_ok};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use migration_api::common::find_condition;
use migration_api::migration::{MigrationPhase, MigrationTask, TaskStage};
use migration_api::ocm::cluster::ManagedCluster;
use migration_api::ocm::msa::ManagedServiceAccount;
use migration_api::ocm::operator::Klusterlet;
use migration_api::ocm::work::{AppliedManifestWork, ManifestWork};
use migration_api::task_report::StageState;

/// One fleet at a time: each runs a whole fleet on two cores.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const LONG: Duration = Duration::from_secs(120);

/// The server a cluster's klusterlet is connected to (its hub kubeconfig).
async fn connected_to(cluster: &Client) -> Option<String> {
    let s = Api::<Secret>::namespaced(cluster.clone(), "open-cluster-management-agent")
        .get_opt("hub-kubeconfig-secret")
        .await
        .ok()??;
    server_of(&s)
}

fn server_of(secret: &Secret) -> Option<String> {
    let text = String::from_utf8(secret.data.as_ref()?.get("kubeconfig")?.0.clone()).ok()?;
    kube::config::Kubeconfig::from_yaml(&text)
        .ok()?
        .clusters
        .first()?
        .cluster
        .as_ref()?
        .server
        .clone()
}

/// The ManagedCluster annotations of a cluster on a hub.
/// A CSR of `cluster`'s klusterlet on a hub.
async fn csr_of(
    csrs: &Api<CertificateSigningRequest>,
    cluster: &str,
) -> Option<CertificateSigningRequest> {
    csrs.list(&ListParams::default())
        .await
        .ok()?
        .items
        .into_iter()
        .find(|c| {
            c.labels()
                .get("open-cluster-management.io/cluster-name")
                .map(String::as_str)
                == Some(cluster)
        })
}

async fn annotations_on(hub: &Client, cluster: &str) -> BTreeMap<String, String> {
    Api::<ManagedCluster>::all(hub.clone())
        .get(cluster)
        .await
        .unwrap()
        .annotations()
        .clone()
}

/// What a cluster carries over travels as one string in status feedback: with the work
/// agents' `RawFeedbackJsonString` gate off (the default), a selector's clusters resolve and
/// arrive with their labels, addons, client URLs and the import's annotations, and no value
/// of the source work's feedback is raw JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn carry_over_arrives_with_raw_feedback_off() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 3).await;
    let hub1 = kubeconfig(s.dir.path(), "hub1");
    for c in ["cluster1", "cluster2"] {
        kubectl_ok(
            &hub1,
            &["label", "managedcluster", c, "move=yes", "env=prod"],
            None,
        );
    }
    kubectl_ok(
        &hub1,
        &[
            "annotate",
            "managedcluster",
            "cluster1",
            "open-cluster-management/created-via=other",
        ],
        None,
    );
    kubectl_apply(
        &hub1,
        r#"{"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
  "metadata": {"name": "search-collector", "namespace": "cluster1"}, "spec": {"installNamespace": "search"}}"#,
    );
    block(&hub1, "cluster2", "inspect");
    s.apply(
        "carry",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClustersSelector": {"matchLabels": {"move": "yes"}}}"#,
    );
    registered(&s, "carry", 1).await;
    // While cluster2 is held, the source work is there to read.
    let work = Api::<ManifestWork>::namespaced(s.global.clone(), "hub1")
        .get(&migration_api::names::migration_work(
            &s.key("carry").await,
            migration_api::migration::MigrationRole::Source,
        ))
        .await
        .unwrap();
    let values: Vec<_> = work
        .status
        .unwrap()
        .resource_status
        .unwrap()
        .manifests
        .unwrap()
        .into_iter()
        .flat_map(|m| m.status_feedback.and_then(|f| f.values).unwrap_or_default())
        .collect();
    assert!(!values.is_empty());
    assert!(
        values.iter().all(|v| v.field_value.json_raw.is_none()),
        "{values:?}"
    );
    unblock(&hub1, "cluster2");
    let done = s.phase("carry", MigrationPhase::Completed, LONG).await;
    assert_eq!(
        done.status.unwrap().resolved_clusters.unwrap(),
        ["cluster1", "cluster2"]
    );
    s.moved_to(["cluster1", "cluster2"], 2).await;
    let c1 = Api::<ManagedCluster>::all(s.hub(2))
        .get("cluster1")
        .await
        .unwrap();
    assert_eq!(c1.labels().get("env").map(String::as_str), Some("prod"));
    let a = c1.annotations();
    assert_eq!(
        a.get("open-cluster-management/created-via")
            .map(String::as_str),
        Some("other")
    );
    assert!(
        !a.keys()
            .any(|k| k.starts_with("migration.open-cluster-management.io/")),
        "{a:?}"
    );
    // The URL the cluster reported on hub1 shows on hub2 too.
    let url = &c1.spec.managed_cluster_client_configs.unwrap()[0].url;
    assert_eq!(url, &s.fleet.clusters[0].1.api.url());
    let hub2 = kubeconfig(s.dir.path(), "hub2");
    let addon = kubectl_ok(
        &hub2,
        &[
            "get",
            "managedclusteraddon",
            "search-collector",
            "-n",
            "cluster1",
            "-o",
            "jsonpath={.spec.installNamespace}",
        ],
        None,
    );
    assert_eq!(addon, "search");
}

/// A cluster with a KlusterletConfig of its own that points it at its hub under another URL:
/// the migration derives its KlusterletConfig from that one, so the import controller renders
/// the current hub under the same URL and the klusterlet, preferring it, stays until released
/// (held here); rolled back, the cluster selects its own KlusterletConfig again; moved, it
/// took its settings along as far as the target renders them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_clusters_own_klusterlet_config_is_kept_and_its_url_keeps_it_in_place() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 2).await;
    let hub1 = kubeconfig(s.dir.path(), "hub1");
    let localhost = s.fleet.hubs[0]
        .cluster
        .api
        .url()
        .replace("127.0.0.1", "localhost");
    kubectl_apply(
        &hub1,
        &format!(
            r#"{{"apiVersion": "config.open-cluster-management.io/v1alpha1", "kind": "KlusterletConfig",
  "metadata": {{"name": "own"}},
  "spec": {{"hubKubeAPIServerConfig": {{"url": "{localhost}"}}, "nodePlacement": {{"nodeSelector": {{"zone": "a"}}}}}}}}"#
        ),
    );
    for c in ["cluster1", "cluster2"] {
        kubectl_ok(
            &hub1,
            &[
                "annotate",
                "managedcluster",
                c,
                "agent.open-cluster-management.io/klusterlet-config=own",
            ],
            None,
        );
    }
    for c in ["cluster1", "cluster2"] {
        let api = cluster_api(&s, c);
        eventually(
            LONG,
            &format!("{c} connected to hub1 as localhost"),
            || async {
                (connected_to(&api).await.as_deref() == Some(localhost.as_str())).then_some(())
            },
        )
        .await;
    }
    s.invariant(&s.homes()).await;
    block(&hub1, "cluster2", "hold");
    s.apply(
        "own",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1", "cluster2"], "maxFailures": 1}"#,
    );
    registered(&s, "own", 1).await;
    // The held cluster selects the derived KlusterletConfig, restarts for it, and stays.
    let key = s.key("own").await;
    // Derived from cluster2's own identity's (second in the list).
    let derived = format!(
        "{}-own",
        migration_api::names::of_identity(
            &migration_api::names::migration_klusterlet_config(&key),
            1
        )
    );
    let derived = derived.as_str();
    eventually(LONG, "cluster2 on the derived KlusterletConfig", || async {
        let a = annotations_on(&s.hub(1), "cluster2").await;
        (a.get("agent.open-cluster-management.io/klusterlet-config")
            .map(String::as_str)
            == Some(derived))
        .then_some(())
    })
    .await;
    let kc = kubectl_ok(
        &hub1,
        &[
            "get",
            "klusterletconfig",
            derived,
            "-o",
            "jsonpath={.spec.hubKubeAPIServerConfig.url} {.spec.nodePlacement.nodeSelector.zone} {.spec.multipleHubsConfig.genBootstrapKubeConfigStrategy}",
        ],
        None,
    );
    assert_eq!(kc, format!("{localhost} a IncludeCurrentHub"));
    let agent2 = &s.fleet.clusters[1].2;
    let life = eventually(
        LONG,
        "cluster2's klusterlet restarted with hub2 listed",
        || async {
            agent2.connected().filter(|c| {
                c.settings.contains(&migration_api::names::of_identity(
                    &migration_api::names::migration_bootstrap_secret(&key),
                    1,
                ))
            })
        },
    )
    .await;
    assert!(
        kube::config::Kubeconfig::from_yaml(&life.text)
            .unwrap()
            .clusters[0]
            .cluster
            .as_ref()
            .unwrap()
            .server
            .as_deref()
            == Some(localhost.as_str())
    );
    assert!(
        Api::<ManagedCluster>::all(s.hub(2))
            .get("cluster2")
            .await
            .unwrap()
            .status
            .is_none_or(|st| st
                .conditions
                .unwrap_or_default()
                .iter()
                .all(|c| c.type_ != "ManagedClusterJoined")),
        "the held cluster joined hub2"
    );
    // The target refuses it, it is let go: rolled back, it selects its own config again.
    refuse(&kubeconfig(s.dir.path(), "hub2"), "cluster2");
    unblock(&hub1, "cluster2");
    let m = s.phase("own", MigrationPhase::Completed, LONG).await;
    let counts = m.status.unwrap().clusters.unwrap();
    assert_eq!((counts.registered, counts.failed), (1, 1));
    s.moved_to(["cluster1"], 2).await;
    let a = annotations_on(&s.hub(1), "cluster2").await;
    assert_eq!(
        a.get("agent.open-cluster-management.io/klusterlet-config")
            .map(String::as_str),
        Some("own"),
        "{a:?}"
    );
    assert!(
        !a.keys()
            .any(|k| k.starts_with("migration.open-cluster-management.io/")),
        "{a:?}"
    );
    eventually(LONG, "the derived KlusterletConfig removed", || async {
        kubectl_ok(&hub1, &["get", "klusterletconfig", "-o", "name"], None)
            .lines()
            .all(|l| !l.ends_with(derived))
            .then_some(())
    })
    .await;
    // The Klusterlet of the rolled-back cluster is rendered from its own config again (the
    // import controller re-renders its klusterlet work once the annotation is back, and the
    // work agent applies it: both asynchronous).
    let klusterlets = Api::<Klusterlet>::all(cluster_api(&s, "cluster2"));
    let rendered = eventually(
        LONG,
        "cluster2's Klusterlet from its own config",
        || async {
            let k = klusterlets.get("klusterlet").await.ok()?;
            let v = serde_json::to_value(&k.spec).ok()?;
            v["registrationConfiguration"]
                .get("bootstrapKubeConfigs")
                .is_none()
                .then_some(v)
        },
    )
    .await;
    assert_eq!(
        rendered["nodePlacement"]["nodeSelector"]["zone"], "a",
        "{rendered}"
    );
}

/// A klusterlet that already chose the target waits for its bootstrap CSR for as long as it
/// takes (upstream never re-selects while bootstrapping). Here the target cannot approve it,
/// the migration times out, and the rollback still brings the cluster home: the target
/// approves the CSR once it can (it must not be left waiting), refuses the cluster, and the
/// klusterlet goes back after its hub connection timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rollback_returns_a_cluster_stuck_bootstrapping_on_the_target() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 2).await;
    let faults = s.fleet.hubs[1].cluster.api.faults();
    faults.add_error(kube_sim::ErrorRule {
        verb: Some("patch".into()),
        resource: Some("certificatesigningrequests".into()),
        rate: 1.0,
        code: 503,
        user: None,
    });
    s.apply(
        "stuck",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1"], "registeringTimeout": "40s"}"#,
    );
    // cluster1 chose hub2 and asked for its certificate there.
    let csrs: Api<CertificateSigningRequest> = Api::all(s.hub(2));
    eventually(LONG, "cluster1's bootstrap CSR on hub2", || async {
        csr_of(&csrs, "cluster1").await.map(|_| ())
    })
    .await;
    s.phase("stuck", MigrationPhase::Rollbacking, LONG).await;
    // The target's agent learns of the rollback before it can approve anything.
    eventually(LONG, "hub2's task rolling back", || async {
        Api::<MigrationTask>::all(s.hub(2))
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .any(|t| t.spec.stage == TaskStage::Rollbacking)
            .then_some(())
    })
    .await;
    faults.clear();
    let m = s
        .phase("stuck", MigrationPhase::Failed, Duration::from_secs(180))
        .await;
    let status = m.status.unwrap();
    let rolled =
        find_condition(status.conditions.as_deref().unwrap(), "ResourceRolledBack").unwrap();
    assert_eq!(rolled.status, "True", "{rolled:?}");
    s.invariant(&s.homes()).await;
    let csr = csr_of(&csrs, "cluster1").await.unwrap();
    // Approved (nearly always by the rollback, to let it through; a retry of the Registering
    // approval that was already under way when the faults cleared may win the race, and the
    // cluster is refused all the same): either way it came home.
    let approved = csr.status.unwrap().conditions.unwrap_or_default();
    assert!(
        approved
            .iter()
            .any(|c| c.type_ == "Approved" && c.status == "True"),
        "{approved:?}"
    );
}

/// After a move, nothing depends on the migration's bootstrap token: the ManagedServiceAccount
/// goes only once the target's import has given the cluster the target's own bootstrap
/// kubeconfig; a klusterlet restarted without its certificate re-registers with the target
/// (and auto-import on the source, frozen while the cluster moved, does not pull it back);
/// and the source's AppliedManifestWorks, evicted after their grace period, remove nothing it
/// needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_moved_cluster_needs_nothing_of_the_migration_afterwards() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 2).await;
    // Auto-import keeps syncing cluster1's klusterlet from hub1 (ImportAndSync, the secret kept).
    let admin_kubeconfig = s.fleet.clusters[0].1.api.kubeconfig();
    Api::<Secret>::namespaced(s.hub(1), "cluster1")
        .patch(
            "auto-import-secret",
            &PatchParams::apply("test").force(),
            &Patch::Apply(serde_json::json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "auto-import-secret", "namespace": "cluster1",
                             "annotations": {"managedcluster-import-controller.open-cluster-management.io/keeping-auto-import-secret": ""}},
                "stringData": {"kubeconfig": admin_kubeconfig}
            })),
        )
        .await
        .unwrap();
    s.apply(
        "token",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1"]}"#,
    );
    // While the migration runs, its ManagedServiceAccount is gone only after hub2's import
    // work is applied on the cluster.
    let msas: Api<ManagedServiceAccount> = Api::namespaced(s.global.clone(), "hub2");
    let import_work = Api::<ManifestWork>::namespaced(s.hub(2), "cluster1");
    let mut saw_msa = false;
    // cluster1's bootstrap identity (the only one).
    let msa_name = s.identities("token").await[0].clone();
    loop {
        let m = s.migration("token").await.unwrap();
        let phase = m.status.as_ref().and_then(|st| st.phase);
        let msa = msas.get_opt(&msa_name).await.unwrap();
        saw_msa |= msa.is_some();
        if saw_msa && msa.is_none() {
            let w = import_work.get_opt("cluster1-klusterlet").await.unwrap();
            let applied = w
                .and_then(|w| w.status)
                .and_then(|st| st.conditions)
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Applied" && c.status == "True"));
            assert!(
                applied,
                "the token was revoked before hub2's import took over"
            );
        }
        if phase == Some(MigrationPhase::Completed) {
            break;
        }
        assert!(
            !phase.is_some_and(MigrationPhase::is_terminal),
            "migration ended {phase:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(saw_msa);
    s.moved_to(["cluster1"], 2).await;
    let hub2_url = s.fleet.hubs[1].cluster.api.url();
    let cluster = cluster_api(&s, "cluster1");
    let secrets: Api<Secret> = Api::namespaced(cluster.clone(), "open-cluster-management-agent");
    eventually(
        LONG,
        "hub2's own bootstrap kubeconfig on cluster1",
        || async {
            let b = secrets.get_opt("bootstrap-hub-kubeconfig").await.ok()??;
            (server_of(&b).as_deref() == Some(hub2_url.as_str())).then_some(())
        },
    )
    .await;
    // The klusterlet loses its certificate and restarts: it bootstraps again, with hub2.
    secrets
        .delete("hub-kubeconfig-secret", &DeleteParams::default())
        .await
        .unwrap();
    let agent = &s.fleet.clusters[0].2;
    let before = agent.connected().map_or(0, |c| c.life);
    agent.kill();
    eventually(LONG, "cluster1 reconnected to hub2", || async {
        agent.connected().filter(|c| c.life > before)?;
        (connected_to(&cluster).await? == hub2_url).then_some(())
    })
    .await;
    s.moved_to(["cluster1"], 2).await;
    // hub1's AppliedManifestWorks on cluster1 are evicted (20 s grace here, 60 min upstream);
    // the klusterlet and its hub2 connection stay.
    let amws: Api<AppliedManifestWork> = Api::all(cluster.clone());
    eventually(LONG, "only hub2's AppliedManifestWorks left", || async {
        let left = amws.list(&ListParams::default()).await.ok()?;
        let hub2_works: Vec<String> = Api::<ManifestWork>::namespaced(s.hub(2), "cluster1")
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .map(|w| w.name_any())
            .collect();
        left.items
            .iter()
            .all(|a| hub2_works.contains(&a.spec.manifest_work_name))
            .then_some(())
    })
    .await;
    assert!(
        Api::<Klusterlet>::all(cluster.clone())
            .get_opt("klusterlet")
            .await
            .unwrap()
            .is_some()
    );
    s.moved_to(["cluster1"], 2).await;
}

/// The work agent of a hub applies only what `admin` and the roles labelled aggregate-to-work
/// allow: a hub where it may not apply MigrationTasks fails validation at once, with the
/// reason, and nothing is touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hub_whose_work_agent_may_not_apply_our_kinds_fails_validation() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 1).await;
    // hub2's work agent loses its aggregated rules (what the addon's role adds among them).
    Api::<ClusterRoleBinding>::all(s.hub(2))
        .delete(
            "open-cluster-management:klusterlet-work:aggregate",
            &DeleteParams::default(),
        )
        .await
        .unwrap();
    s.apply(
        "forbidden",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1"]}"#,
    );
    let m = s.phase("forbidden", MigrationPhase::Failed, LONG).await;
    let status = m.status.unwrap();
    let v = find_condition(status.conditions.as_deref().unwrap(), "ResourceValidated").unwrap();
    assert_eq!(v.reason, "HubInvalid", "{v:?}");
    assert!(
        v.message.contains("aggregate-to-work") && v.message.contains("hub2"),
        "{}",
        v.message
    );
    assert!(
        !annotations_on(&s.hub(1), "cluster1")
            .await
            .keys()
            .any(|k| k.starts_with("migration.open-cluster-management.io/")),
    );
    s.invariant(&s.homes()).await;
}

/// A plain OCM source detaches a moved cluster only once the works in its namespace are gone,
/// and only a connected work agent finishes a deleted work (ocm's registration GC): a work
/// of the source's own left on the moved cluster must not hold the migration (nor the
/// cluster, Terminating on the source, forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plain_source_detaches_a_moved_cluster_that_has_works_of_its_own() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::with_hub_kinds(2, 2, &["hub1"], &[]).await;
    let hub1 = kubeconfig(s.dir.path(), "hub1");
    kubectl_apply(
        &hub1,
        r#"{"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
  "metadata": {"name": "app", "namespace": "cluster1"},
  "spec": {"workload": {"manifests": [
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-settings", "namespace": "default"}, "data": {"mode": "blue"}}]}}}"#,
    );
    let works = Api::<ManifestWork>::namespaced(s.hub(1), "cluster1");
    eventually(LONG, "hub1's app work applied on cluster1", || async {
        let w = works.get_opt("app").await.ok()??;
        let applied = w
            .status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Applied" && c.status == "True");
        (applied && !w.metadata.finalizers.unwrap_or_default().is_empty()).then_some(())
    })
    .await;
    s.apply(
        "works",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1"]}"#,
    );
    s.phase("works", MigrationPhase::Completed, LONG).await;
    s.moved_to(["cluster1"], 2).await;
    assert!(
        Api::<ManagedCluster>::all(s.hub(1))
            .get_opt("cluster1")
            .await
            .unwrap()
            .is_none(),
        "cluster1 detached from hub1"
    );
    assert!(
        works
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "no work left in cluster1's namespace on hub1"
    );
}

/// On a plain OCM target (no import controller), a cluster that arrived is settled with a
/// bootstrap kubeconfig of the target's own bootstrap identity (a token of its
/// `agent-registration-bootstrap` ServiceAccount, as `clusteradm get token` issues one), from a
/// plain source and from an ACM source alike: once the migrations' tokens are revoked, the
/// cluster's `bootstrap-hub-kubeconfig` still names the target and still authenticates there,
/// the migration's secret is gone from the cluster, and the Klusterlet lists no other hub.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plain_target_gives_a_moved_cluster_a_bootstrap_kubeconfig_of_its_own() {
    let _serial = ONE_AT_A_TIME.lock().await;
    // hub1 plain OCM, hub2 ACM, hub3 plain OCM (the target); one cluster each.
    let s = Setup::with_hub_kinds(3, 1, &["hub1", "hub3"], &[]).await;
    s.apply(
        "from-plain",
        r#"{"from": "hub1", "to": "hub3", "includedManagedClusters": ["cluster1"]}"#,
    );
    s.apply(
        "from-acm",
        r#"{"from": "hub2", "to": "hub3", "includedManagedClusters": ["cluster2"]}"#,
    );
    let keys = [s.key("from-plain").await, s.key("from-acm").await];
    let identities = [
        s.identities("from-plain").await,
        s.identities("from-acm").await,
    ];
    for name in ["from-plain", "from-acm"] {
        s.phase(name, MigrationPhase::Completed, LONG).await;
    }
    s.moved_to(["cluster1", "cluster2"], 3).await;
    let hub3_url = s.fleet.hubs[2].cluster.api.url();
    let msas: Api<ManagedServiceAccount> = Api::namespaced(s.global.clone(), "hub3");
    for (cluster, key, identities) in [
        ("cluster1", &keys[0], &identities[0]),
        ("cluster2", &keys[1], &identities[1]),
    ] {
        // The migration's token is revoked (its ManagedServiceAccount gone).
        let msa = &identities[0];
        assert!(msas.get_opt(msa).await.unwrap().is_none(), "{msa}");
        let secrets: Api<Secret> =
            Api::namespaced(cluster_api(&s, cluster), "open-cluster-management-agent");
        let (text, left) = eventually(
            LONG,
            &format!("{cluster}'s own bootstrap kubeconfig, the migration's secret gone"),
            || async {
                let boot = secrets.get_opt("bootstrap-hub-kubeconfig").await.ok()??;
                let text = String::from_utf8(boot.data?.get("kubeconfig")?.0.clone()).ok()?;
                let left = secrets
                    .get_opt(&migration_api::names::of_identity(
                        &migration_api::names::migration_bootstrap_secret(key),
                        0,
                    ))
                    .await
                    .ok()?;
                (text.contains(&hub3_url) && left.is_none()).then_some((text, left))
            },
        )
        .await;
        assert!(left.is_none());
        // It authenticates to hub3 as the hub's bootstrap identity may (it lists CSRs).
        let client = kube_sim::client_from_kubeconfig(&text).await.unwrap();
        Api::<CertificateSigningRequest>::all(client)
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("{cluster}'s bootstrap kubeconfig is refused by hub3: {e}"));
        let k = Api::<Klusterlet>::all(cluster_api(&s, cluster))
            .get("klusterlet")
            .await
            .unwrap();
        // No other hub listed: no bootstrap list, or one turned off (`type: None`).
        let v = serde_json::to_value(&k.spec).unwrap();
        let list = &v["registrationConfiguration"]["bootstrapKubeConfigs"];
        assert!(list.is_null() || list["type"] == "None", "{cluster}: {v}");
    }
}

/// A plain OCM target without the ServiceAccount its clusters bootstrap with could not give a
/// cluster that arrived a bootstrap kubeconfig of its own: the migration fails validation
/// (`HubInvalid`, the ServiceAccount named) and touches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plain_target_without_a_bootstrap_identity_fails_validation() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::with_hub_kinds(2, 1, &["hub2"], &[]).await;
    let hub2 = kubeconfig(s.dir.path(), "hub2");
    kubectl_ok(
        &hub2,
        &[
            "delete",
            "serviceaccount",
            "agent-registration-bootstrap",
            "-n",
            "open-cluster-management",
        ],
        None,
    );
    s.apply(
        "nobody",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1"]}"#,
    );
    let m = s.phase("nobody", MigrationPhase::Failed, LONG).await;
    let st = m.status.unwrap();
    let c = find_condition(st.conditions.as_deref().unwrap(), "ResourceValidated").unwrap();
    assert_eq!(c.reason, "HubInvalid", "{c:?}");
    assert!(
        c.message
            .contains("open-cluster-management/agent-registration-bootstrap"),
        "{}",
        c.message
    );
    assert!(
        Api::<ManagedCluster>::all(s.hub(2))
            .get_opt("cluster1")
            .await
            .unwrap()
            .is_none(),
        "cluster1 pre-created on hub2"
    );
    s.invariant(&s.homes()).await;
}

/// A real API server answers a write before its watchers hear of it, so an informer can be
/// behind its own controller's last write (kube-sim's watch lag). The agents must not decide
/// again on what their caches show until their own writes come back: on hubs whose watches lag
/// by 300 ms, no ManagedCluster patch of theirs is refused for testing a taint already gone
/// (422), no cluster is pre-created twice (409), and each write of a task's status changes it (the simulator, as the real server,
/// keeps no write that changes nothing, so a repeated report is a request and no change).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agents_do_not_repeat_their_writes_on_a_hub_whose_watches_lag() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::with_fleet(2, 10, |o| o.clusters_on = vec![10, 1]).await;
    let lag = Duration::from_millis(300);
    // Every change of each hub's tasks' status, counted as the test's own watch hears it, and
    // each task's last status heard.
    type Heard = std::sync::Arc<std::sync::Mutex<(u64, BTreeMap<String, String>)>>;
    let mut heard: Vec<Heard> = Vec::new();
    let mut hearing_tasks = Vec::new();
    for (i, hub) in s.fleet.hubs.iter().enumerate() {
        hub.cluster.api.faults().set_watch_lag(lag);
        hub.cluster.api.metrics().reset();
        let hub_heard = Heard::default();
        let hearing = hub_heard.clone();
        let tasks = Api::<MigrationTask>::all(s.hub(i + 1));
        hearing_tasks.push(tokio::spawn(async move {
            use futures::StreamExt;
            use kube::runtime::WatchStreamExt;
            use kube::runtime::watcher::{Event, watcher};
            let stream = watcher(tasks, Default::default()).default_backoff();
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                let mut h = hearing.lock().unwrap();
                match ev {
                    Ok(Event::Apply(t) | Event::InitApply(t)) if t.status.is_some() => {
                        let status = serde_json::to_string(&t.status).unwrap();
                        if h.1.insert(t.name_any(), status.clone()) != Some(status) {
                            h.0 += 1;
                        }
                    }
                    Ok(Event::Delete(t)) => {
                        h.1.remove(&t.name_any());
                    }
                    _ => {}
                }
            }
        }));
        heard.push(hub_heard);
    }
    let moving: Vec<String> = (1..=10).map(|k| format!("cluster{k}")).collect();
    s.apply(
        "lagging",
        &format!(
            r#"{{"from": "hub1", "to": "hub2", "includedManagedClusters": {}}}"#,
            serde_json::to_string(&moving).unwrap()
        ),
    );
    s.phase(
        "lagging",
        MigrationPhase::Completed,
        Duration::from_secs(240),
    )
    .await;
    s.moved_to(&moving, 2).await;
    let agent = e2e::AGENT_USER;
    for (i, hub) in s.fleet.hubs.iter().enumerate() {
        // The test's watch lags too: it has heard every change once it holds each task's
        // status as the hub serves it.
        let tasks = Api::<MigrationTask>::all(s.hub(i + 1));
        eventually(LONG, "every status change heard", || async {
            let served: BTreeMap<String, String> = tasks
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .iter()
                .filter(|t| t.status.is_some())
                .map(|t| (t.name_any(), serde_json::to_string(&t.status).unwrap()))
                .collect();
            (served == heard[i].lock().unwrap().1).then_some(())
        })
        .await;
        let m = hub.cluster.api.metrics();
        let answers = m.answers_to(agent);
        let answered = |verb: &str, code| {
            answers
                .get(&(verb.to_owned(), "managedclusters".to_owned(), code))
                .copied()
                .unwrap_or(0)
        };
        let answered_on = |verb: &str, resource: &str| -> u64 {
            answers
                .iter()
                .filter(|((v, r, _), _)| v == verb && r == resource)
                .map(|(_, c)| *c)
                .sum()
        };
        let refused = answered("patch", 422);
        // A pre-creation again, of a cluster the cache did not show yet: 409 AlreadyExists.
        let created_again = answered("create", 409);
        let status_writes: u64 = m
            .access_log()
            .iter()
            .filter(|(a, _)| {
                a.user == agent && a.verb == "patch" && a.resource == "migrationtasks/status"
            })
            .map(|(_, c)| *c)
            .sum();
        let changed = heard[i].lock().unwrap().0;
        // Each moved cluster detached from the source once (not again on a copy from before
        // the deletion); the target deletes none.
        let deletes = answered_on("delete", "managedclusters");
        eprintln!(
            "hub{}: {refused} cluster patches refused (422), {created_again} created again (409), {deletes} deletions, {status_writes} status writes, {changed} changes",
            i + 1
        );
        assert_eq!(refused, 0, "hub{}: cluster patches refused", i + 1);
        // (Seen twice in CI: a reconcile decided on a cache without the cluster, which showed it
        // by the time the decision was carried out, so the agent's memory of its pre-creation
        // was judged against the newer copy and the create repeated. The agent now judges it
        // against the copy the decision read: `migration::apply_tests`. What the hub's agents
        // logged of their starts and pre-creations tells two overlapping agents apart.)
        assert_eq!(
            created_again,
            0,
            "hub{}: clusters created again; its agents logged:\n{}",
            i + 1,
            agent_lines(
                &s,
                i + 1,
                &[
                    "addon-agent started",
                    "addon-agent stopped",
                    "pre-created",
                    "failed"
                ]
            )
        );
        let detached = if i == 0 { moving.len() as u64 } else { 0 };
        assert_eq!(deletes, detached, "hub{}: clusters deleted", i + 1);
        // One write the same as the last is allowed for: a status write that crosses a change
        // of the task's spec (the manager moving its stage) is decided on a copy that shows
        // neither.
        assert!(
            status_writes <= changed + 1,
            "hub{}: {status_writes} status writes for {changed} changes",
            i + 1
        );
    }
    for t in hearing_tasks {
        t.abort();
    }
}

/// The lines of hub `hub`'s agent logs (every pod of it, current and previous container) that
/// hold any of `needles`, each after its pod and file.
fn agent_lines(s: &Setup, hub: usize, needles: &[&str]) -> String {
    let pods = s.dir.path().join("pods").join(format!("hub{hub}"));
    let mut lines = Vec::new();
    for pod in std::fs::read_dir(&pods).into_iter().flatten().flatten() {
        // The previous container's log too (the kubelet keeps it beside the current one).
        for file in ["agent.previous.log", "agent.log"] {
            let log = std::fs::read_to_string(pod.path().join(file)).unwrap_or_default();
            let name = pod.file_name().to_string_lossy().into_owned();
            lines.extend(
                log.lines()
                    .filter(|l| needles.iter().any(|n| l.contains(n)))
                    .map(|l| format!("{name}/{file}: {l}")),
            );
        }
    }
    lines.join("\n")
}

/// A hub's agent gives the verdict on the revision it was asked once: while the manager waits
/// for the other hub (here the target cannot write its answer), events on the source's
/// clusters do not make the source validate again, that is, list the hub's addons,
/// KlusterletAddonConfigs (which validation alone reads) and carried kinds each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hub_validates_a_revision_once_however_many_events_follow() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 3).await;
    let agent = e2e::AGENT_USER;
    let target_faults = s.fail_task_status_writes(2);
    let moving = ["cluster1", "cluster2", "cluster3"];
    s.apply(
        "once",
        &format!(
            r#"{{"from": "hub1", "to": "hub2", "includedManagedClusters": {}}}"#,
            serde_json::to_string(&moving).unwrap()
        ),
    );
    let source_tasks = Api::<MigrationTask>::all(s.hub(1));
    eventually(LONG, "the source's verdict", || async {
        source_tasks
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .any(|t| {
                t.status.as_ref().is_some_and(|st| {
                    st.observed_stage == Some(TaskStage::Validating)
                        && st.observed_revision == t.spec.revision
                        && st.stage_state == Some(StageState::Succeeded)
                })
            })
            .then_some(())
    })
    .await;
    // The target has tried to answer and could not: the manager waits for it.
    eventually(LONG, "the target's answer refused", || async {
        (s.refused_task_status_writes(2) > 0).then_some(())
    })
    .await;
    // Events on the source's clusters meanwhile: each a change of a ManagedCluster there.
    let hub1 = kubeconfig(s.dir.path(), "hub1");
    for round in 1..=3 {
        for c in moving {
            kubectl_ok(
                &hub1,
                &[
                    "label",
                    "--overwrite",
                    "managedcluster",
                    c,
                    &format!("touched={round}"),
                ],
                None,
            );
        }
    }
    target_faults.clear();
    s.phase("once", MigrationPhase::Completed, LONG).await;
    let kac_lists: u64 = s.fleet.hubs[0]
        .cluster
        .api
        .metrics()
        .answers_to(agent)
        .iter()
        .filter(|((verb, resource, _), _)| verb == "list" && resource == "klusterletaddonconfigs")
        .map(|(_, n)| *n)
        .sum();
    assert_eq!(kac_lists, 1, "hub1: KlusterletAddonConfigs listed");
}
