//! Migrations end to end: the real addon-manager on the global hub and the real addon-agent on
//! each hub (run by the hubs' kubelets), the simulated klusterlets switching hubs, driven with
//! kubectl as a user would, and checked through the API.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use e2e::migration::{
    NS, Setup, block, bootstrap_of, json_list, kill_agent, klusterlet_of, leftovers,
    migration_api_version, names, refuse, registered, tail, unblock,
};
use e2e::{
    Manager, addon_available, enable_addon, eventually, kubeconfig, kubectl_apply, kubectl_ok,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use migration_api::common::{condition_is_true, find_condition};
use migration_api::migration::{ManagedClusterMigration, MigrationPhase, MigrationTask};
use migration_api::ocm::cluster::{self, AddOnPlacementScore, ManagedCluster, PlacementDecision};
use migration_api::ocm::config::KlusterletConfig;
use migration_api::ocm::msa::ManagedServiceAccount;
use migration_api::ocm::work::ManifestWork;
use serde_json::json;

/// The tests in this file run one at a time: each runs a whole fleet, and six at once on a
/// two-core machine slowed a rollback past its deadline in CI.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Nothing the migration created is left on the global hub or either hub (what is left is
/// named if it stays).
async fn no_leftovers(s: &Setup, name: &str) {
    let last = std::sync::Mutex::new(None);
    let found = tokio::time::timeout(
        Duration::from_secs(30),
        eventually(
            Duration::from_secs(60),
            "no temporary object left",
            || async {
                let left = leftovers(s, name).await;
                let done = left.is_none();
                *last.lock().unwrap() = left;
                done.then_some(())
            },
        ),
    )
    .await;
    assert!(
        found.is_ok(),
        "{name}: left after 30s: {:?}",
        last.lock().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn happy_path_moves_every_cluster_and_leaves_nothing_behind() {
    let _serial = ONE_AT_A_TIME.lock().await;
    // hub2 holds one cluster of its own: enough to show that what it had stays.
    let s = Setup::with_fleet(2, 20, |o| o.clusters_on = vec![20, 1]).await;
    let moving = names(1, 20);
    // What cluster1 carries over: labels, cluster set, an addon with its config reference, its
    // KlusterletAddonConfig.
    let hub1 = kubeconfig(s.dir.path(), "hub1");
    kubectl_ok(
        &hub1,
        &[
            "label",
            "managedcluster",
            "cluster1",
            "env=prod",
            "cluster.open-cluster-management.io/clusterset=blue",
        ],
        None,
    );
    kubectl_apply(
        &hub1,
        r#"{"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
  "metadata": {"name": "config-policy-controller", "namespace": "cluster1"},
  "spec": {"installNamespace": "open-cluster-management-agent-addon",
           "configs": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs",
                        "namespace": "addon-configs", "name": "fast-lease"}]}}"#,
    );
    kubectl_apply(
        &hub1,
        r#"{"apiVersion": "agent.open-cluster-management.io/v1", "kind": "KlusterletAddonConfig",
  "metadata": {"name": "cluster1", "namespace": "cluster1"},
  "spec": {"applicationManager": {"enabled": true}, "policyController": {"enabled": false},
           "certPolicyController": {"enabled": true}, "searchCollector": {"enabled": false}}}"#,
    );
    let global_api = &s.fleet.global.cluster.api;
    global_api.metrics().reset();
    s.apply(
        "move",
        &format!(
            r#"{{"from": "hub1", "to": "hub2", "includedManagedClusters": {}}}"#,
            json_list(&moving)
        ),
    );
    let t0 = std::time::Instant::now();
    let done = s
        .phase("move", MigrationPhase::Completed, Duration::from_secs(120))
        .await;
    eprintln!(
        "migrated in {:?}\n{}",
        t0.elapsed(),
        s.logs()
            .lines()
            .filter(|l| l.contains("migration"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let status = done.status.clone().unwrap();
    let counts = status.clusters.unwrap();
    assert_eq!(
        (counts.total, counts.registered, counts.failed),
        (20, 20, 0),
        "{status:#?}"
    );
    assert!(status.start_time.is_some() && status.completion_time.is_some());
    for c in [
        "MigrationStarted",
        "ResourceValidated",
        "ResourceInitialized",
        "ResourceDeployed",
        "ClusterRegistered",
        "ResourceCleaned",
    ] {
        let cond = find_condition(status.conditions.as_deref().unwrap(), c)
            .unwrap_or_else(|| panic!("{c} missing: {status:#?}"));
        assert_eq!(cond.status, "True", "{c}: {cond:?}");
    }
    s.moved_to(&moving, 2).await;
    // None left on hub1.
    let on_hub1: Vec<String> = Api::<ManagedCluster>::all(s.hub(1))
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|m| m.name_any())
        .collect();
    assert!(
        on_hub1.iter().all(|n| !moving.contains(n)),
        "left on hub1: {on_hub1:?}"
    );
    no_leftovers(&s, "move").await;
    // The manager asks the API server of a work it removes only until it says the work is
    // gone, not at every reconcile (Cleaning reads every work a migration may have had): one
    // read per work it deleted, and per work of the three every migration names (its two
    // tasks', its bootstrap work) that it never made.
    let requests = global_api.metrics().snapshot();
    let works = |verb: &str, code: Option<u16>| -> u64 {
        requests
            .iter()
            .filter(|((v, r, c), _)| {
                v == verb && r == "manifestworks" && code.is_none_or(|x| x == *c)
            })
            .map(|(_, n)| n)
            .sum()
    };
    let (asked_gone, deleted) = (works("get", Some(404)), works("delete", None));
    eprintln!("works read after they were gone: {asked_gone}, deletions of works: {deleted}");
    assert!(
        asked_gone <= deleted + 3,
        "works read after they were gone: {asked_gone}, deletions of works: {deleted}"
    );
    // cluster1 arrived with what it carried, and nothing of its source status.
    let hub2 = kubeconfig(s.dir.path(), "hub2");
    let c1 = Api::<ManagedCluster>::all(s.hub(2))
        .get("cluster1")
        .await
        .unwrap();
    let labels = c1.labels();
    assert_eq!(
        labels.get("env").map(String::as_str),
        Some("prod"),
        "{labels:?}"
    );
    assert_eq!(
        labels
            .get("cluster.open-cluster-management.io/clusterset")
            .map(String::as_str),
        Some("blue"),
        "{labels:?}"
    );
    let mca: serde_json::Value = serde_json::from_str(&kubectl_ok(
        &hub2,
        &[
            "get",
            "managedclusteraddon",
            "config-policy-controller",
            "-n",
            "cluster1",
            "-o",
            "json",
        ],
        None,
    ))
    .unwrap();
    assert_eq!(mca["spec"]["configs"][0]["name"], "fast-lease", "{mca:#}");
    assert_eq!(
        mca["spec"]["installNamespace"], "open-cluster-management-agent-addon",
        "{mca:#}"
    );
    let kac: serde_json::Value = serde_json::from_str(&kubectl_ok(
        &hub2,
        &[
            "get",
            "klusterletaddonconfig",
            "cluster1",
            "-n",
            "cluster1",
            "-o",
            "json",
        ],
        None,
    ))
    .unwrap();
    assert_eq!(
        (
            &kac["spec"]["applicationManager"]["enabled"],
            &kac["spec"]["policyController"]["enabled"]
        ),
        (&serde_json::json!(true), &serde_json::json!(false)),
        "{kac:#}"
    );
    let out = kubectl_ok(&s.global_kc, &["get", "mcm", "-n", NS], None);
    assert!(out.contains("Completed") && out.contains("20"), "{out}");
    // The target carries a cluster's addons once, not at each of its reconciles while clusters
    // register (one addon carried here; a second request only if the first found the cluster's
    // namespace not made yet).
    let carried: u64 = s.fleet.hubs[1]
        .cluster
        .api
        .metrics()
        .access_log()
        .iter()
        .filter(|(a, _)| {
            a.user == e2e::AGENT_USER && a.resource == "managedclusteraddons" && a.verb == "patch"
        })
        .map(|(_, n)| n)
        .sum();
    eprintln!("addons carried by hub2's agent: {carried} requests");
    assert!(
        (1..=2).contains(&carried),
        "requests carrying cluster1's one addon: {carried}"
    );
}

/// 40 clusters of about 14 KiB each to carry (140 labels): 560 KiB in all, more than a
/// ManifestWork may hold (500 KiB, the hubs' webhook refuses more) and more than the 256 KiB a
/// migration could carry before (its clusters failed validation as too large).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_carry_over_larger_than_a_work_moves_in_parts() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::with_fleet(2, 40, |o| o.clusters_on = vec![40, 1]).await;
    let moving = names(1, 40);
    let labels: serde_json::Map<String, serde_json::Value> = (0..140)
        .map(|j| (format!("example.com/label-{j:03}"), json!("v".repeat(63))))
        .collect();
    let clusters: Api<ManagedCluster> = Api::all(s.hub(1));
    for name in &moving {
        clusters
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"metadata": {"labels": labels}})),
            )
            .await
            .unwrap();
    }
    let status = s.move_all("big", &moving).await;
    // Kept in parts, not in status: the status stays small.
    let parts = status
        .carry_over_parts
        .clone()
        .expect("the carry-over went in parts");
    assert!(parts.count >= 3, "{parts:?}");
    assert!(status.carry_over.is_none());
    let size = serde_json::to_vec(&status).unwrap().len();
    assert!(size < 32 * 1024, "status of {size} bytes");
    // Every cluster on the target with every label it had.
    s.moved_to(&moving, 2).await;
    for name in &moving {
        let mc = Api::<ManagedCluster>::all(s.hub(2))
            .get(name)
            .await
            .unwrap();
        let carried = mc
            .labels()
            .iter()
            .filter(|(k, v)| k.starts_with("example.com/label-") && v.len() == 63)
            .count();
        assert_eq!(carried, 140, "{name} on hub2");
    }
    no_leftovers(&s, "big").await;
}

/// 66 clusters named as long as Kubernetes allows (61 to 63 characters): their names fill
/// more than the 4 KiB a task lists released, rolled-back and detached clusters in, so the
/// tasks mark them by position (`clusterMarks`, one digit per cluster) as they do for
/// thousands of clusters, and the agents read the marks: every cluster moves. The target's
/// CA bundle is large (its CA sixteen times over, about 10 KiB, as an OpenShift API server's
/// bundle of several signers may be), so the bootstrap kubeconfigs of the 64 identities are
/// past one work's 400 KiB: they go in several bootstrap works, which the source's work agent
/// applies, the klusterlets connect with, and Cleaning removes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clusters_past_the_task_list_limit_are_released_by_marks_and_move() {
    let _serial = ONE_AT_A_TIME.lock().await;
    const PREFIX: &str = "cluster-named-as-long-as-a-kubernetes-namespace-name-may-be-";
    let s = Setup::with_fleet(2, 66, |o| {
        o.cluster_prefix = PREFIX.into();
        // hub2 holds one cluster of its own: what it had stays.
        o.clusters_on = vec![66, 1];
    })
    .await;
    large_target_ca_bundle(&s, 16).await;
    // The source's bootstrap works, watched while the migration runs: more than one.
    let works: Api<ManifestWork> = Api::namespaced(s.global.clone(), "hub1");
    let split = tokio::spawn(eventually(
        Duration::from_secs(600),
        "the bootstrap objects in more than one work",
        move || {
            let works = works.clone();
            async move {
                let list = works.list(&ListParams::default()).await.ok()?;
                let parts = list
                    .items
                    .iter()
                    .filter(|w| w.name_any().contains("-bootstrap"))
                    .count();
                (parts > 1).then_some(parts)
            }
        },
    ));
    let moving: Vec<String> = s
        .homes()
        .into_iter()
        .filter(|(_, h)| *h == 1)
        .map(|(c, _)| c)
        .collect();
    assert_eq!(moving.len(), 66);
    assert!(s.homes().keys().all(|n| n.len() <= 63));
    let bytes: usize = moving.iter().map(|n| n.len() + 3).sum();
    assert!(
        bytes > migration_api::migration::SUBSET_LISTS_LIMIT,
        "{bytes}"
    );
    // The source's task, watched while the migration runs: its released clusters are marks.
    let tasks: Api<MigrationTask> = Api::all(s.hub(1));
    let marked = tokio::spawn(eventually(
        Duration::from_secs(600),
        "the source's task releasing clusters by marks",
        move || {
            let tasks = tasks.clone();
            async move {
                let list = tasks.list(&ListParams::default()).await.ok()?;
                list.items.into_iter().find_map(|t| {
                    let released = t.spec.released_names().len();
                    (t.spec.released.is_none() && t.spec.cluster_marks.is_some() && released > 0)
                        .then_some(released)
                })
            }
        },
    ));
    s.move_all("long", &moving).await;
    assert!(marked.is_finished(), "no task with marks was seen");
    assert!(marked.await.unwrap() > 0);
    assert!(split.is_finished(), "the bootstrap objects were not split");
    assert!(split.await.unwrap() > 1);
    s.moved_to(&moving, 2).await;
    no_leftovers(&s, "long").await;
}

/// Makes the target's CA bundle, as the global hub knows it (hub2's
/// `managedClusterClientConfigs`), its CA `copies` times over: still a bundle its klusterlets
/// trust the hub by.
async fn large_target_ca_bundle(s: &Setup, copies: usize) {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let hubs: Api<ManagedCluster> = Api::all(s.global.clone());
    let hub2 = hubs.get("hub2").await.unwrap();
    let mut configs = hub2.spec.managed_cluster_client_configs.clone().unwrap();
    let pem = String::from_utf8(
        b64.decode(configs[0].ca_bundle.as_deref().unwrap())
            .unwrap(),
    )
    .unwrap();
    configs[0].ca_bundle = Some(b64.encode(format!("{}\n", pem.trim_end()).repeat(copies)));
    hubs.patch(
        "hub2",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"spec": {"managedClusterClientConfigs": configs}})),
    )
    .await
    .unwrap();
}

/// The phase a migration ended in, and its ResourceValidated reason and message.
fn validation(m: &ManagedClusterMigration) -> (Option<MigrationPhase>, String, String) {
    let s = m.status.clone().unwrap_or_default();
    let c = find_condition(
        s.conditions.as_deref().unwrap_or_default(),
        "ResourceValidated",
    );
    (
        s.phase,
        c.map(|c| c.reason.clone()).unwrap_or_default(),
        c.map(|c| c.message.clone()).unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_inputs_fail_validation_and_touch_nothing() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let fleet = e2e::fleet(3, 2, &[migration_api_version()], dir.path()).await;
    let global_kc = kubeconfig(dir.path(), "global-hub");
    let manager = Manager::start(&global_kc, dir.path(), &[]);
    let global = fleet.global.cluster.admin.clone();
    // hub3 runs no addon.
    enable_addon(&global_kc, &["hub1", "hub2"]);
    addon_available(&global, &["hub1", "hub2"], Duration::from_secs(60)).await;
    let s = Setup {
        dir,
        fleet,
        manager: Some(manager),
        global,
        global_kc,
    };
    // A cluster of the same name as cluster1 already on the target.
    kubectl_apply(
        &kubeconfig(s.dir.path(), "hub2"),
        r#"{"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
  "metadata": {"name": "cluster1"}, "spec": {"hubAcceptsClient": false}}"#,
    );
    let cases = [
        (
            "unknown-hub",
            r#"{"from": "hub1", "to": "hub9", "includedManagedClusters": ["cluster2"]}"#,
            "HubInvalid",
            "hub9",
        ),
        (
            "same-hub",
            r#"{"from": "hub1", "to": "hub1", "includedManagedClusters": ["cluster2"]}"#,
            "InvalidSpec",
            "two different hubs",
        ),
        (
            "no-addon",
            r#"{"from": "hub1", "to": "hub3", "includedManagedClusters": ["cluster2"]}"#,
            "HubInvalid",
            "not enabled on target hub hub3",
        ),
        (
            "unknown-cluster",
            r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster2", "cluster99"]}"#,
            "ClusterNotFound",
            "cluster99 not found",
        ),
        (
            "a-hub",
            r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["hub3"]}"#,
            "ClusterIsHub",
            "hub3 is itself a hub",
        ),
        (
            "already-there",
            r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1", "cluster2"]}"#,
            "ClusterConflict",
            "cluster1 already exists on the target hub",
        ),
        (
            "empty-selector",
            r#"{"from": "hub1", "to": "hub2", "includedManagedClustersSelector": {"matchLabels": {"nothing": "here"}}}"#,
            "ClusterNotFound",
            "matches no cluster",
        ),
        (
            "whole-hub",
            r#"{"from": "hub1", "to": "hub2", "includedManagedClustersSelector": {}}"#,
            "InvalidSpec",
            "every cluster of the hub",
        ),
        (
            "bad-operator",
            r#"{"from": "hub1", "to": "hub2", "includedManagedClustersSelector": {"matchExpressions": [{"key": "env", "operator": "Like", "values": ["p"]}]}}"#,
            "InvalidSpec",
            "unknown operator",
        ),
        (
            "huge-timeout",
            r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster2"], "stageTimeout": "99999999999h"}"#,
            "InvalidSpec",
            "between 30s and 24h",
        ),
    ];
    for (name, spec, reason, text) in cases {
        let message = refused(&s, name, spec, reason).await;
        assert!(
            message.contains(text),
            "{name}: {message:?} should mention {text:?}"
        );
    }
    // Both or neither selector: the API server refuses the object with a readable message.
    for (name, spec) in [
        (
            "both",
            r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster2"], "includedManagedClustersSelector": {}}"#,
        ),
        ("neither", r#"{"from": "hub1", "to": "hub2"}"#),
    ] {
        let manifest = format!(
            r#"{{"apiVersion": "migration.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterMigration",
  "metadata": {{"name": "{name}", "namespace": "{NS}"}}, "spec": {spec}}}"#
        );
        let out = e2e::kubectl(&s.global_kc, &["apply", "-f", "-"], Some(&manifest));
        assert!(!out.status.success(), "{name} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        // kube-sim reports the schema's oneOf; servers evaluating CEL add the rule's message.
        assert!(
            err.contains("oneOf") || err.contains("exactly one of includedManagedClusters"),
            "{name}: {err}"
        );
    }
    // Nothing was touched: no work, no credentials, no annotation, every cluster where it was.
    let mut expected = s.homes();
    expected.remove("cluster1");
    s.invariant(&expected).await;
    no_leftovers(&s, "already-there").await;
    let on_hub2 = Api::<ManagedCluster>::all(s.hub(2))
        .get("cluster1")
        .await
        .unwrap();
    assert!(!on_hub2.spec.hub_accepts_client, "{on_hub2:?}");
    assert!(
        !on_hub2
            .annotations()
            .keys()
            .any(|k| k.starts_with("migration.")),
        "{on_hub2:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn block_move_holds_a_cluster_conflicts_are_refused_and_delete_rolls_back() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(3, 4).await;
    let hub1 = kubeconfig(s.dir.path(), "hub1");
    block(&hub1, "cluster2", "waiting-for-backup");
    s.apply(
        "first",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1", "cluster2"]}"#,
    );
    registered(&s, "first", 1).await;
    let m = s
        .phase(
            "first",
            MigrationPhase::Registering,
            Duration::from_secs(10),
        )
        .await;
    let cond = find_condition(
        m.status.as_ref().unwrap().conditions.as_deref().unwrap(),
        "ClusterRegistered",
    )
    .unwrap()
    .clone();
    assert!(
        cond.message
            .contains("1 held by the migration.open-cluster-management.io/block-move annotation"),
        "{cond:?}"
    );
    // In flight, cluster2 carries the migrating taint on its source and on the copy the target
    // pre-created for it, so placements choose it nowhere anew; cluster1, registered on hub2,
    // is untainted there (its refused source copy keeps it until it is detached).
    eventually(
        Duration::from_secs(30),
        "cluster2 tainted on both hubs, cluster1 on its source alone",
        || async {
            let tainted = s.migrating_taints().await;
            (tainted == ["hub1/cluster1", "hub1/cluster2", "hub2/cluster2"]).then_some(())
        },
    )
    .await;
    let c2 = Api::<ManagedCluster>::all(s.hub(1))
        .get("cluster2")
        .await
        .unwrap();
    let taint = c2
        .spec
        .taints
        .iter()
        .flatten()
        .find(|t| t.key == "migration.open-cluster-management.io/migrating")
        .unwrap();
    assert_eq!(taint.effect, "NoSelectIfNew", "{taint:?}");
    assert!(taint.time_added.is_some(), "{taint:?}");
    // A cluster in an active migration cannot be in another.
    let message = refused(
        &s,
        "second",
        r#"{"from": "hub1", "to": "hub3", "includedManagedClusters": ["cluster2"]}"#,
        "ClusterConflict",
    )
    .await;
    assert!(
        message.contains("cluster2 is already in active migration default/first"),
        "{message}"
    );
    // Removing the annotation lets it go.
    unblock(&hub1, "cluster2");
    s.phase("first", MigrationPhase::Completed, Duration::from_secs(90))
        .await;
    // Deleting a migration in flight rolls back what has not arrived; what arrived stays.
    block(&hub1, "cluster4", "hold");
    s.apply(
        "third",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster3", "cluster4"]}"#,
    );
    registered(&s, "third", 1).await;
    kubectl_ok(
        &s.global_kc,
        &["delete", "mcm", "third", "-n", NS, "--wait=false"],
        None,
    );
    eventually(
        Duration::from_secs(90),
        "the deleted migration gone after rolling back",
        || async { s.migration("third").await.is_none().then_some(()) },
    )
    .await;
    s.moved_to(["cluster1", "cluster2", "cluster3"], 2).await;
    let c4 = Api::<ManagedCluster>::all(s.hub(1))
        .get("cluster4")
        .await
        .unwrap();
    let left: Vec<&String> = c4
        .annotations()
        .keys()
        .filter(|k| !k.ends_with("block-move"))
        .collect();
    assert!(
        left.is_empty(),
        "cluster4 keeps migration annotations: {left:?}"
    );
    assert!(
        Api::<ManagedCluster>::all(s.hub(2))
            .get_opt("cluster4")
            .await
            .unwrap()
            .is_none(),
        "cluster4's pre-created copy left on hub2"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dry_run_writes_a_plan_and_changes_nothing() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 3).await;
    let snapshot = || async {
        let mut out = Vec::new();
        for (i, client) in [s.global.clone(), s.hub(1), s.hub(2)]
            .into_iter()
            .enumerate()
        {
            for mc in Api::<ManagedCluster>::all(client.clone())
                .list(&ListParams::default())
                .await
                .unwrap()
            {
                out.push(format!(
                    "{i} mc {} {:?} {:?} {:?}",
                    mc.name_any(),
                    mc.labels(),
                    mc.annotations(),
                    mc.spec
                ));
            }
            for w in Api::<ManifestWork>::all(client.clone())
                .list(&ListParams::default())
                .await
                .unwrap()
            {
                out.push(format!(
                    "{i} work {}/{}",
                    w.namespace().unwrap_or_default(),
                    w.name_any()
                ));
            }
            for k in Api::<KlusterletConfig>::all(client.clone())
                .list(&ListParams::default())
                .await
                .unwrap()
            {
                out.push(format!("{i} kc {}", k.name_any()));
            }
            for m in Api::<ManagedServiceAccount>::all(client.clone())
                .list(&ListParams::default())
                .await
                .unwrap()
            {
                out.push(format!("{i} msa {}", m.name_any()));
            }
        }
        out.sort();
        out
    };
    let before = snapshot().await;
    s.apply("rehearsal", r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1", "cluster2"], "maxConcurrency": 1, "dryRun": true}"#);
    let m = s
        .phase(
            "rehearsal",
            MigrationPhase::Completed,
            Duration::from_secs(60),
        )
        .await;
    let plan = m.status.unwrap().plan.unwrap();
    assert_eq!(plan.clusters, ["cluster1", "cluster2"]);
    assert_eq!(
        plan.waves,
        [vec!["cluster1".to_owned()], vec!["cluster2".to_owned()]]
    );
    let kinds: Vec<(String, String)> = plan
        .objects
        .iter()
        .map(|o| (o.hub.clone(), o.kind.clone()))
        .collect();
    for want in [
        ("global-hub", "ManagedServiceAccount"),
        ("hub1", "Secret"),
        ("hub1", "KlusterletConfig"),
        ("hub1", "MigrationTask"),
        ("hub2", "ClusterRole"),
        ("hub2", "MigrationTask"),
        ("hub2", "ManagedCluster"),
    ] {
        assert!(
            kinds.contains(&(want.0.into(), want.1.into())),
            "plan lacks {want:?}: {kinds:?}"
        );
    }
    let secret = plan.objects.iter().find(|o| o.kind == "Secret").unwrap();
    assert_eq!(
        secret.object.as_ref().unwrap()["data"]["kubeconfig"],
        "<redacted>"
    );
    eventually(
        Duration::from_secs(30),
        "every hub as before the dry run",
        || async { (snapshot().await == before).then_some(()) },
    )
    .await;
}

/// A target hub whose global KlusterletConfig lists bootstrap kubeconfigs (MultipleHubs) renders
/// no `bootstrap-hub-kubeconfig` in its import works (the list replaces it, ocm
/// `deploy/klusterlet/chart/klusterlet/templates/bootstrap_kubeconfig_secret.yaml`): the
/// clusters still register there once its import took over their Klusterlet.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_whose_global_klusterlet_config_lists_hubs_takes_the_clusters() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 2).await;
    let hub2 = kubeconfig(s.dir.path(), "hub2");
    let own = &s.fleet.hubs[1].bootstrap_kubeconfig;
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "hub2-backup", "namespace": ocm_sim::import::BOOTSTRAP_SECRETS_NAMESPACE},
        "stringData": {"kubeconfig": own}});
    kubectl_apply(&hub2, &secret.to_string());
    let global = json!({"apiVersion": "config.open-cluster-management.io/v1alpha1", "kind": "KlusterletConfig",
        "metadata": {"name": ocm_sim::import::GLOBAL_KLUSTERLET_CONFIG},
        "spec": {"multipleHubsConfig": {"genBootstrapKubeConfigStrategy": "IncludeCurrentHub",
            "bootstrapKubeConfigs": {"type": "LocalSecrets", "localSecretsConfig": {
                "kubeConfigSecrets": [{"name": "hub2-backup"}], "hubConnectionTimeoutSeconds": 180}}}}});
    kubectl_apply(&hub2, &global.to_string());
    let clusters = names(1, 2);
    s.move_all("listed", &clusters).await;
    s.moved_to(&clusters, 2).await;
    // Each runs with the target's list: its backup and the current hub.
    for c in &clusters {
        let (registration, _) = klusterlet_of(&s, c).await;
        assert_eq!(
            registration["bootstrapKubeConfigs"]["localSecretsConfig"]["kubeConfigSecrets"],
            json!([{"name": "hub2-backup"}, {"name": "bootstrap-hub-kubeconfig-current-hub"}]),
            "{c}"
        );
    }
    no_leftovers(&s, "listed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_the_target_refuses_rolls_back_and_the_rest_complete() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 3).await;
    let hub1 = kubeconfig(s.dir.path(), "hub1");
    let hub2 = kubeconfig(s.dir.path(), "hub2");
    block(&hub1, "cluster2", "hold");
    s.apply("partial", r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1", "cluster2", "cluster3"], "maxFailures": 1}"#);
    registered(&s, "partial", 2).await;
    // The target's admin refuses cluster2's pre-created ManagedCluster; then it is unblocked.
    refuse(&hub2, "cluster2");
    unblock(&hub1, "cluster2");
    let m = s
        .phase(
            "partial",
            MigrationPhase::Completed,
            Duration::from_secs(90),
        )
        .await;
    let status = m.status.unwrap();
    let counts = status.clusters.unwrap();
    assert_eq!((counts.registered, counts.failed), (2, 1), "{status:#?}");
    let failure = &status.failures.unwrap()[0];
    assert_eq!(
        (failure.name.as_str(), failure.reason.as_str()),
        ("cluster2", "ClusterRefused")
    );
    s.moved_to(["cluster1", "cluster3"], 2).await;
}

/// The condition `type_` of migration `m`: (status, reason, message).
fn condition_of(m: &ManagedClusterMigration, type_: &str) -> Option<(String, String, String)> {
    let c = find_condition(m.status.as_ref()?.conditions.as_deref()?, type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rollback_request_takes_back_the_clusters_not_registered_and_a_retry_moves_them() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 3).await;
    let hub1 = kubeconfig(s.dir.path(), "hub1");
    // cluster2 held, so the migration stays in Registering with cluster1 registered.
    block(&hub1, "cluster2", "hold");
    s.apply(
        "manual",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1", "cluster2"]}"#,
    );
    registered(&s, "manual", 1).await;
    let request = |value: &str| {
        kubectl_ok(
            &s.global_kc,
            &[
                "annotate",
                "mcm",
                "manual",
                "-n",
                NS,
                "--overwrite",
                &format!("migration.open-cluster-management.io/request={value}"),
            ],
            None,
        );
    };
    // A request of no known kind is refused by name and changes nothing.
    request("rolback");
    let m = eventually(
        Duration::from_secs(30),
        "the unknown request refused",
        || async {
            let m = s.migration("manual").await?;
            let (status, reason, _) = condition_of(&m, "RequestAccepted")?;
            (status == "False" && reason == "UnknownRequest").then_some(m)
        },
    )
    .await;
    let (_, _, message) = condition_of(&m, "RequestAccepted").unwrap();
    assert!(message.contains("\"rolback\""), "{message}");
    assert_eq!(
        m.status.as_ref().unwrap().phase,
        Some(MigrationPhase::Registering)
    );
    // Rolled back: cluster1, registered on hub2, stays there; cluster2 goes nowhere.
    request("rollback");
    let m = s
        .phase("manual", MigrationPhase::Failed, Duration::from_secs(120))
        .await;
    let status = m.status.as_ref().unwrap();
    assert_eq!(
        status.rollback_cause.as_deref(),
        Some("RollbackRequested"),
        "{status:#?}"
    );
    let (accepted, reason, _) = condition_of(&m, "RequestAccepted").unwrap();
    assert_eq!(
        (accepted.as_str(), reason.as_str()),
        ("True", "RollbackRequested")
    );
    let counts = status.clusters.as_ref().unwrap();
    assert_eq!(counts.registered, 1, "{status:#?}");
    s.moved_to(["cluster1"], 2).await;
    // Retried once cluster2 is let go (its block-move annotation, the user's, gone): a new
    // migration for the cluster that stayed.
    unblock(&hub1, "cluster2");
    no_leftovers(&s, "manual").await;
    request("retry");
    let retry = s
        .phase(
            "manual-retry",
            MigrationPhase::Completed,
            Duration::from_secs(120),
        )
        .await;
    assert_eq!(
        retry.spec.included_managed_clusters.as_deref(),
        Some(&["cluster2".to_owned()][..])
    );
    let m = s.migration("manual").await.unwrap();
    let (accepted, reason, message) = condition_of(&m, "RequestAccepted").unwrap();
    assert_eq!(
        (accepted.as_str(), reason.as_str()),
        ("True", "RetryCreated")
    );
    assert!(message.contains("default/manual-retry"), "{message}");
    assert_eq!(m.status.unwrap().phase, Some(MigrationPhase::Failed));
    s.moved_to(["cluster1", "cluster2"], 2).await;
    no_leftovers(&s, "manual-retry").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_placement_on_the_source_selects_the_clusters_once() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 4).await;
    let hub1 = kubeconfig(s.dir.path(), "hub1");
    let label = |cluster: &str| {
        kubectl_ok(
            &hub1,
            &[
                "label",
                "managedcluster",
                cluster,
                "tier=edge",
                "--overwrite",
            ],
            None,
        );
    };
    label("cluster2");
    label("cluster3");
    // A Placement that does not exist: refused at validation, by name, touching nothing.
    let message = refused(
        &s,
        "nowhere",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClustersPlacementRef": "missing"}"#,
        "PlacementNotFound",
    )
    .await;
    assert!(
        message.contains("Placement default/missing") && message.contains("does not exist"),
        "{message}"
    );
    no_leftovers(&s, "nowhere").await;
    // The user's Placement in the migration's namespace on the source hub.
    kubectl_apply(
        &hub1,
        r#"{"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
  "metadata": {"name": "edge", "namespace": "default"},
  "spec": {"predicates": [{"requiredClusterSelector": {"labelSelector": {"matchLabels": {"tier": "edge"}}}}]}}"#,
    );
    let decisions: Api<PlacementDecision> = Api::namespaced(s.hub(1), NS);
    eventually(
        Duration::from_secs(30),
        "the Placement decided cluster2 and cluster3",
        || async {
            let chosen = cluster::decided_clusters(
                decisions
                    .list(&ListParams::default().labels(&cluster::decisions_of("edge")))
                    .await
                    .ok()?,
            );
            (chosen == ["cluster2", "cluster3"]).then_some(())
        },
    )
    .await;
    s.apply(
        "by-placement",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClustersPlacementRef": "edge"}"#,
    );
    // Resolved once: a cluster the Placement decides on later is not part of it.
    let resolved = eventually(
        Duration::from_secs(60),
        "the migration resolved its clusters",
        || async { s.migration("by-placement").await?.status?.resolved_clusters },
    )
    .await;
    assert_eq!(resolved, ["cluster2", "cluster3"]);
    label("cluster4");
    let m = s
        .phase(
            "by-placement",
            MigrationPhase::Completed,
            Duration::from_secs(120),
        )
        .await;
    assert_eq!(
        m.status.unwrap().resolved_clusters.as_deref(),
        Some(&["cluster2".to_owned(), "cluster3".to_owned()][..])
    );
    s.moved_to(["cluster2", "cluster3"], 2).await;
    no_leftovers(&s, "by-placement").await;
}

/// A hub's headroom as its agent publishes it (AddOnPlacementScore `cluster-migration`,
/// `capacityHeadroom`) on the global hub.
async fn headroom(s: &Setup, hub: &str) -> Option<i32> {
    let score = Api::<AddOnPlacementScore>::namespaced(s.global.clone(), hub)
        .get_opt("cluster-migration")
        .await
        .ok()??;
    score.status?.score("capacityHeadroom")
}

/// Applies migration `name` with `spec` (JSON) and waits for it to fail validation with
/// `reason`, having touched nothing; returns the condition's message.
async fn refused(s: &Setup, name: &str, spec: &str, reason: &str) -> String {
    s.apply(name, spec);
    let m = s
        .phase(name, MigrationPhase::Failed, Duration::from_secs(60))
        .await;
    let (_, got_reason, message) = validation(&m);
    assert_eq!(got_reason, reason, "{name}: {message}");
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_placement_sends_the_clusters_to_the_hub_with_the_most_room() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(3, 2).await;
    let kc = &s.global_kc;
    // A Placement that does not exist: refused by name, nothing touched.
    let message = refused(
        &s,
        "nowhere",
        r#"{"from": "hub1", "toPlacement": "missing", "includedManagedClusters": ["cluster1"]}"#,
        "PlacementNotFound",
    )
    .await;
    assert!(
        message.contains("Placement default/missing (spec.toPlacement)"),
        "{message}"
    );
    no_leftovers(&s, "nowhere").await;
    // hub2 and hub3 hold two clusters each; hub2's agent is told it has room for 4, so it
    // publishes no headroom, and hub3 (room for 500) the most.
    kubectl_apply(
        kc,
        r#"{"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "AddOnDeploymentConfig",
  "metadata": {"name": "small", "namespace": "default"},
  "spec": {"customizedVariables": [{"name": "MANAGED_CLUSTER_CAPACITY", "value": "4"}]}}"#,
    );
    kubectl_ok(
        kc,
        &[
            "patch",
            "managedclusteraddon",
            "cluster-migration",
            "-n",
            "hub2",
            "--type=merge",
            "-p",
            r#"{"spec": {"configs": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs", "namespace": "default", "name": "small"}]}}"#,
        ],
        None,
    );
    eventually(
        Duration::from_secs(90),
        "hub2 publishing no headroom, hub3 plenty",
        || async {
            (headroom(&s, "hub2").await? <= 0 && headroom(&s, "hub3").await? > 50).then_some(())
        },
    )
    .await;
    // The candidate hubs: a set of hub2 and hub3, bound to the migration's namespace; the
    // Placement takes the one with the most headroom.
    for hub in ["hub2", "hub3"] {
        kubectl_ok(
            kc,
            &[
                "label",
                "managedcluster",
                hub,
                "cluster.open-cluster-management.io/clusterset=targets",
            ],
            None,
        );
    }
    for obj in [
        r#"{"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSet", "metadata": {"name": "targets"},
            "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}}"#,
        r#"{"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
            "metadata": {"name": "targets", "namespace": "default"}, "spec": {"clusterSet": "targets"}}"#,
        r#"{"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
            "metadata": {"name": "most-room", "namespace": "default"},
            "spec": {"clusterSets": ["targets"], "numberOfClusters": 1,
              "prioritizerPolicy": {"mode": "Exact", "configurations": [{"weight": 1,
                "scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "cluster-migration", "scoreName": "capacityHeadroom"}}}]}}}"#,
    ] {
        kubectl_apply(kc, obj);
    }
    let decisions: Api<PlacementDecision> = Api::namespaced(s.global.clone(), NS);
    eventually(
        Duration::from_secs(30),
        "the Placement chose hub3",
        || async {
            let chosen = cluster::decided_clusters(
                decisions
                    .list(&ListParams::default().labels(&cluster::decisions_of("most-room")))
                    .await
                    .ok()?,
            );
            (chosen == ["hub3"]).then_some(())
        },
    )
    .await;
    s.apply(
        "by-score",
        r#"{"from": "hub1", "toPlacement": "most-room", "includedManagedClusters": ["cluster1", "cluster2"]}"#,
    );
    let m = s
        .phase(
            "by-score",
            MigrationPhase::Completed,
            Duration::from_secs(120),
        )
        .await;
    let status = m.status.unwrap();
    assert_eq!(status.target.as_deref(), Some("hub3"));
    // Recorded as written: the spec accepted still names the Placement.
    let accepted = status.accepted_spec.unwrap();
    assert_eq!(
        (accepted.to.as_str(), accepted.to_placement.as_deref()),
        ("", Some("most-room"))
    );
    // What a user sees: the chosen hub in the TO column.
    let table = kubectl_ok(
        kc,
        &["get", "mcm", "by-score", "-n", NS, "--no-headers"],
        None,
    );
    let cells: Vec<&str> = table.split_whitespace().collect();
    assert_eq!(
        &cells[..4],
        ["by-score", "Completed", "hub1", "hub3"],
        "{table}"
    );
    s.moved_to(["cluster1", "cluster2"], 3).await;
    no_leftovers(&s, "by-score").await;
}

/// `kubectl mcm <args>` as a user runs the plugin: `kubectl-mcm` on the PATH, the global
/// hub's kubeconfig in `KUBECONFIG`; (exit code, stdout, stderr).
fn kubectl_mcm(s: &Setup, args: &[&str]) -> (Option<i32>, String, String) {
    let plugin = e2e::binary("kubectl-mcm");
    let dir = plugin.parent().unwrap().to_path_buf();
    let path = std::env::join_paths(std::iter::once(dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = std::process::Command::new(kubectl)
        .arg("mcm")
        .args(args)
        .env("PATH", path)
        .env("KUBECONFIG", &s.global_kc)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubectl_mcm_move_creates_a_migration_and_follows_it_to_the_end() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 2).await;
    // Flags that make no migration: refused by name, exit 2, nothing created.
    let (code, _, err) = kubectl_mcm(
        &s,
        &[
            "move",
            "--from",
            "hub1",
            "--to",
            "hub1",
            "--clusters",
            "cluster1",
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("two different hubs") && err.contains("nothing was created"),
        "{err}"
    );
    let all = Api::<ManagedClusterMigration>::all(s.global.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        all.items.is_empty(),
        "created: {:?}",
        all.items.iter().map(|m| m.name_any()).collect::<Vec<_>>()
    );
    // A move, followed to the end.
    let (code, out, err) = kubectl_mcm(
        &s,
        &[
            "move",
            "--from",
            "hub1",
            "--to",
            "hub2",
            "--clusters",
            "cluster1,cluster2",
            "--name",
            "by-cli",
            "--watch",
            "--timeout",
            "180",
        ],
    );
    assert_eq!(
        code,
        Some(0),
        "stdout: {out}\nstderr: {err}\n{}",
        tail(&s.logs(), 30)
    );
    assert!(
        out.contains("managedclustermigration default/by-cli created"),
        "{out}"
    );
    assert!(
        out.contains("Completed") && out.contains("2/2 registered"),
        "{out}"
    );
    assert!(out.contains("hub1 -> hub2"), "{out}");
    // Without --name or --watch: a generated name, printed, and the command returns at once
    // (a dry run, so that it changes nothing).
    let (code, out, err) = kubectl_mcm(
        &s,
        &[
            "move",
            "--from",
            "hub2",
            "--to",
            "hub1",
            "--clusters",
            "cluster1",
            "--dry-run",
        ],
    );
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    let generated = out
        .trim()
        .strip_prefix("managedclustermigration default/")
        .and_then(|rest| rest.strip_suffix(" created"))
        .unwrap_or_else(|| panic!("{out}"))
        .to_owned();
    assert!(
        generated.starts_with("move-hub2-") && generated.len() > "move-hub2-".len(),
        "{generated}"
    );
    s.phase(
        &generated,
        MigrationPhase::Completed,
        Duration::from_secs(60),
    )
    .await;
    s.moved_to(["cluster1", "cluster2"], 2).await;
    no_leftovers(&s, "by-cli").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubectl_mcm_export_and_import_carry_clusters_through_a_directory() {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use std::os::unix::fs::PermissionsExt;
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 1).await;
    let homes = s.homes();
    let cluster = homes.iter().find(|(_, h)| **h == 1).unwrap().0.clone();
    let (hub1_kc, hub2_kc) = (
        kubeconfig(s.dir.path(), "hub1"),
        kubeconfig(s.dir.path(), "hub2"),
    );
    // In the cluster's namespace on hub1: a ConfigMap, one it owns, and a pull secret.
    kubectl_apply(
        &hub1_kc,
        &format!(
            r#"{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "extra", "namespace": "{cluster}", "labels": {{"ztp": "yes"}}}}, "data": {{"a": "1"}}}}"#
        ),
    );
    kubectl_apply(
        &hub1_kc,
        &format!(
            r#"{{"apiVersion": "v1", "kind": "Secret", "metadata": {{"name": "pull", "namespace": "{cluster}"}}, "stringData": {{"auth": "s3cr3t"}}}}"#
        ),
    );
    let cms: Api<ConfigMap> = Api::namespaced(s.hub(1), &cluster);
    let owner_uid = cms.get("extra").await.unwrap().uid().unwrap();
    kubectl_apply(
        &hub1_kc,
        &format!(
            r#"{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "child", "namespace": "{cluster}",
  "ownerReferences": [{{"apiVersion": "v1", "kind": "ConfigMap", "name": "extra", "uid": "{owner_uid}"}}]}}, "data": {{"b": "2"}}}}"#
        ),
    );
    let dir = s.dir.path().join("bundle");
    let d = dir.to_str().unwrap();
    let export = |extra: &[&str]| {
        let mut args = vec![
            "export",
            "--kubeconfig",
            hub1_kc.to_str().unwrap(),
            "--to-directory",
            d,
        ];
        args.extend_from_slice(extra);
        kubectl_mcm(&s, &args)
    };
    // Secrets only when asked: refused, nothing written.
    let (code, _, err) = export(&["--clusters", &cluster, "--carry", "configmaps,secrets"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--include-secrets"), "{err}");
    assert!(!dir.exists());
    // A cluster the hub does not have: refused, nothing written.
    let (code, _, err) = export(&["--clusters", "no-such-cluster"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("does not exist") && err.contains("nothing was written"),
        "{err}"
    );
    assert!(!dir.exists());
    let (code, out, err) = export(&[
        "--clusters",
        &cluster,
        "--carry",
        "configmaps,secrets",
        "--include-secrets",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let folder = dir.join(&cluster);
    let secret_file = folder.join("secrets.pull.yaml");
    let mode = std::fs::metadata(&secret_file)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{}", secret_file.display());
    let mc: serde_json::Value = serde_yaml::from_str(
        &std::fs::read_to_string(folder.join("00-managedcluster.yaml")).unwrap(),
    )
    .unwrap();
    assert!(
        mc.get("status").is_none() && mc["metadata"].get("uid").is_none(),
        "{mc}"
    );
    assert_eq!(mc["spec"]["hubAcceptsClient"], true);
    // Never over an earlier export.
    let (code, _, err) = export(&["--clusters", &cluster]);
    assert_eq!(code, Some(2), "{err}");
    // Import to hub2: a dry run applies nothing; then everything, owners rewritten.
    let import = |extra: &[&str]| {
        let mut args = vec![
            "import",
            "--kubeconfig",
            hub2_kc.to_str().unwrap(),
            "--from-directory",
            d,
        ];
        args.extend_from_slice(extra);
        kubectl_mcm(&s, &args)
    };
    let (code, out, err) = import(&["--dry-run"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let hub2_mcs: Api<ManagedCluster> = Api::all(s.hub(2));
    assert!(hub2_mcs.get_opt(&cluster).await.unwrap().is_none());
    let (code, out, err) = import(&[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("imported 1 clusters"), "{out}");
    let imported = hub2_mcs.get(&cluster).await.unwrap();
    assert!(imported.spec.hub_accepts_client);
    let hub2_cms: Api<ConfigMap> = Api::namespaced(s.hub(2), &cluster);
    let extra = hub2_cms.get("extra").await.unwrap();
    assert_eq!(extra.labels().get("ztp").map(String::as_str), Some("yes"));
    let child = hub2_cms.get("child").await.unwrap();
    let refs = child.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(refs.len(), 1, "{refs:?}");
    assert_eq!(
        Some(refs[0].uid.clone()),
        extra.uid(),
        "owner rewritten to hub2's uid"
    );
    assert_ne!(refs[0].uid, owner_uid);
    let pull = Api::<Secret>::namespaced(s.hub(2), &cluster)
        .get("pull")
        .await
        .unwrap();
    assert_eq!(
        pull.data
            .unwrap_or_default()
            .get("auth")
            .map(|b| b.0.clone()),
        Some(b"s3cr3t".to_vec())
    );
    // Again: everything is there already, nothing is overwritten.
    let (code, _, err) = import(&[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("already exists") && err.contains("nothing was applied"),
        "{err}"
    );
    // Nothing moved: every cluster still on its hub.
    s.invariant(&homes).await;
}

/// A namespaced ClusterDeployment kind, as hive serves it (its schema left open here).
const HIVE_CD_CRD: &str = r#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "clusterdeployments.hive.openshift.io"},
  "spec": {"group": "hive.openshift.io", "scope": "Namespaced",
    "names": {"plural": "clusterdeployments", "singular": "clusterdeployment", "kind": "ClusterDeployment", "listKind": "ClusterDeploymentList"},
    "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn carried_objects_arrive_paused_before_the_switch_and_go_again_on_rollback() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::DynamicObject;
    use kube::discovery::ApiResource;
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 2).await;
    let (hub1, hub2) = (
        kubeconfig(s.dir.path(), "hub1"),
        kubeconfig(s.dir.path(), "hub2"),
    );
    kubectl_apply(&hub1, HIVE_CD_CRD);
    let cd_api = |i: usize, ns: &str| {
        let ar = ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("hive.openshift.io", "v1", "ClusterDeployment"),
            "clusterdeployments",
        );
        Api::<DynamicObject>::namespaced_with(s.hub(i), ns, &ar)
    };
    // Each cluster's namespace on hub1: its ClusterDeployment, the admin kubeconfig it owns
    // (labelled for carrying), and a Secret not selected.
    for c in ["cluster1", "cluster2"] {
        kubectl_apply(
            &hub1,
            &format!(
                r#"{{"apiVersion": "hive.openshift.io/v1", "kind": "ClusterDeployment", "metadata": {{"name": "{c}", "namespace": "{c}"}}, "spec": {{"clusterName": "{c}", "baseDomain": "example.com"}}}}"#
            ),
        );
        let uid = cd_api(1, c).get(c).await.unwrap().uid().unwrap();
        kubectl_apply(
            &hub1,
            &format!(
                r#"{{"apiVersion": "v1", "kind": "Secret", "metadata": {{"name": "{c}-admin-kubeconfig", "namespace": "{c}", "labels": {{"ztp": "yes"}},
  "ownerReferences": [{{"apiVersion": "hive.openshift.io/v1", "kind": "ClusterDeployment", "name": "{c}", "uid": "{uid}"}}]}}, "stringData": {{"kubeconfig": "admin-of-{c}"}}}}"#
            ),
        );
        kubectl_apply(
            &hub1,
            &format!(
                r#"{{"apiVersion": "v1", "kind": "Secret", "metadata": {{"name": "{c}-other", "namespace": "{c}"}}, "stringData": {{"x": "y"}}}}"#
            ),
        );
    }
    let carry = r#""carryOver": [{"group": "hive.openshift.io", "resource": "clusterdeployments"},
        {"resource": "secrets", "labelSelector": {"matchLabels": {"ztp": "yes"}}}]"#;
    // A kind the source does not serve: refused by the source, nothing touched.
    let message = refused(
        &s,
        "no-kind-here",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1"],
            "carryOver": [{"group": "metal3.io", "resource": "baremetalhosts"}]}"#,
        "CarryOverNotServed",
    )
    .await;
    assert!(
        message.contains("source hub hub1")
            && message.contains("baremetalhosts.metal3.io is not served"),
        "{message}"
    );
    no_leftovers(&s, "no-kind-here").await;
    // A kind the target does not serve: refused by the target, nothing touched.
    let message = refused(
        &s,
        "no-kind",
        &format!(
            r#"{{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1"], {carry}}}"#
        ),
        "CarryOverNotServed",
    )
    .await;
    assert!(
        message.contains("target hub hub2")
            && message.contains("clusterdeployments.hive.openshift.io is not served"),
        "{message}"
    );
    no_leftovers(&s, "no-kind").await;
    kubectl_apply(&hub2, HIVE_CD_CRD);
    // A dry run plans the copies, and no secret's data reaches the migration's status.
    s.apply(
        "carry-plan",
        &format!(r#"{{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1"], "dryRun": true, {carry}}}"#),
    );
    let m = s
        .phase(
            "carry-plan",
            MigrationPhase::Completed,
            Duration::from_secs(120),
        )
        .await;
    let plan = m.status.clone().unwrap().plan.unwrap();
    let planned: Vec<(&str, &str, &str)> = plan
        .objects
        .iter()
        .filter(|o| o.namespace.as_deref() == Some("cluster1"))
        .map(|o| (o.hub.as_str(), o.kind.as_str(), o.name.as_str()))
        .collect();
    assert!(
        planned.contains(&("hub2", "ClusterDeployment", "cluster1")),
        "{planned:?}"
    );
    assert!(
        planned.contains(&("hub2", "Secret", "cluster1-admin-kubeconfig")),
        "{planned:?}"
    );
    let status_text = serde_json::to_string(&m.status).unwrap();
    assert!(
        !status_text.contains("admin-of-cluster1")
            && !status_text.contains("YWRtaW4tb2YtY2x1c3RlcjE"),
        "a carried secret's data in the status"
    );
    no_leftovers(&s, "carry-plan").await;
    // cluster2 held, so the migration stays in Registering with cluster1 registered.
    block(&hub1, "cluster2", "hold");
    s.apply(
        "carry",
        &format!(r#"{{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1", "cluster2"], {carry}}}"#),
    );
    registered(&s, "carry", 1).await;
    let m = s.migration("carry").await.unwrap();
    let status = m.status.clone().unwrap();
    assert!(
        status.carry_over.is_none(),
        "objects never travel in status"
    );
    assert!(status.carry_over_parts.is_some());
    let pause = |o: &DynamicObject| {
        (
            o.annotations()
                .get("hive.openshift.io/reconcile-pause")
                .cloned(),
            o.annotations()
                .get("migration.open-cluster-management.io/paused-by")
                .cloned(),
        )
    };
    let key = pause(&cd_api(1, "cluster1").get("cluster1").await.unwrap())
        .1
        .expect("the source's ClusterDeployment paused by the migration");
    let by_us = (Some("true".to_owned()), Some(key.clone()));
    // Both clusters' objects are on hub2 (carried before any switched): labelled, without
    // status, the kubeconfig owned by hub2's ClusterDeployment; both sources' paused before
    // any switched.
    for c in ["cluster1", "cluster2"] {
        let cd = cd_api(2, c).get(c).await.unwrap();
        assert!(
            cd.labels()
                .contains_key("migration.open-cluster-management.io/carried-by"),
            "{c}"
        );
        assert_eq!(cd.data["spec"]["clusterName"], c);
        let secrets: Api<Secret> = Api::namespaced(s.hub(2), c);
        let kc = secrets.get(&format!("{c}-admin-kubeconfig")).await.unwrap();
        assert_eq!(
            kc.data
                .clone()
                .unwrap_or_default()
                .get("kubeconfig")
                .map(|b| b.0.clone()),
            Some(format!("admin-of-{c}").into_bytes())
        );
        let owners = kc.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(owners.len(), 1, "{owners:?}");
        assert_eq!(
            Some(owners[0].uid.clone()),
            cd.uid(),
            "{c}: owner is hub2's ClusterDeployment"
        );
        assert!(
            secrets
                .get_opt(&format!("{c}-other"))
                .await
                .unwrap()
                .is_none(),
            "{c}: not selected"
        );
        assert_eq!(
            pause(&cd_api(1, c).get(c).await.unwrap()),
            by_us,
            "{c} on hub1"
        );
    }
    // cluster2, held, has its copy paused on hub2; cluster1, registered there, has its own
    // resumed: one hub's controller acts on each cluster at a time.
    assert_eq!(
        pause(&cd_api(2, "cluster2").get("cluster2").await.unwrap()),
        by_us
    );
    eventually(
        Duration::from_secs(60),
        "cluster1's copy resumed on hub2",
        || async {
            let cd = cd_api(2, "cluster1").get("cluster1").await.ok()?;
            (pause(&cd) == (None, None)).then_some(())
        },
    )
    .await;
    // Rolled back: cluster2's copies go from hub2; cluster1, registered there, keeps its own.
    kubectl_ok(
        &s.global_kc,
        &[
            "annotate",
            "mcm",
            "carry",
            "-n",
            NS,
            "--overwrite",
            "migration.open-cluster-management.io/request=rollback",
        ],
        None,
    );
    s.phase("carry", MigrationPhase::Failed, Duration::from_secs(120))
        .await;
    eventually(
        Duration::from_secs(60),
        "cluster2's copies removed from hub2",
        || async {
            let cd = cd_api(2, "cluster2").get_opt("cluster2").await.ok()?;
            let kc = Api::<Secret>::namespaced(s.hub(2), "cluster2")
                .get_opt("cluster2-admin-kubeconfig")
                .await
                .ok()?;
            (cd.is_none() && kc.is_none()).then_some(())
        },
    )
    .await;
    assert!(
        cd_api(2, "cluster1")
            .get_opt("cluster1")
            .await
            .unwrap()
            .is_some()
    );
    // The source keeps its own: cluster2's, back, resumed; cluster1's, moved away, paused.
    eventually(
        Duration::from_secs(60),
        "cluster2's resumed on hub1",
        || async {
            let cd = cd_api(1, "cluster2").get("cluster2").await.ok()?;
            (pause(&cd) == (None, None)).then_some(())
        },
    )
    .await;
    assert_eq!(
        pause(&cd_api(1, "cluster1").get("cluster1").await.unwrap()),
        by_us
    );
    unblock(&hub1, "cluster2");
    s.moved_to(["cluster1"], 2).await;
    no_leftovers(&s, "carry").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_manager_restarted_in_every_phase_still_completes() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut s = Setup::new(2, 5).await;
    s.apply("restarts", &format!(r#"{{"from": "hub1", "to": "hub2", "includedManagedClusters": {}, "maxConcurrency": 2}}"#, json_list(&names(1, 5))));
    let mut seen = Vec::new();
    let start = std::time::Instant::now();
    loop {
        let phase = s.migration("restarts").await.and_then(|m| m.status?.phase);
        if let Some(p) = phase
            && !seen.contains(&p)
        {
            seen.push(p);
            if p.is_terminal() {
                break;
            }
            // Stop it (SIGTERM, as Kubernetes does) the moment it enters a phase, and start a
            // new one. A stop mid-migration is an expected event: it is logged as such, with
            // no warning or error (the API connections going away included).
            drop(s.manager.take());
            let stopped = s.logs_of_stopped_manager();
            let loud: Vec<&str> = stopped
                .lines()
                .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
                .collect();
            assert!(
                loud.is_empty() && stopped.contains("addon-manager stopped"),
                "a manager stopped in {p:?}: {loud:#?}\n{}",
                tail(&stopped, 30)
            );
            s.manager = Some(Manager::start(&s.global_kc, s.dir.path(), &[]));
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "stuck after {seen:?}:\n{}",
            tail(&s.logs(), 60)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        seen.last(),
        Some(&MigrationPhase::Completed),
        "{seen:?}\n{}",
        tail(&s.logs(), 60)
    );
    s.moved_to(names(1, 5), 2).await;
    no_leftovers(&s, "restarts").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agents_killed_mid_registering_pick_up_where_they_were() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 4).await;
    let hub1 = kubeconfig(s.dir.path(), "hub1");
    block(&hub1, "cluster4", "hold");
    s.apply("agents", &format!(r#"{{"from": "hub1", "to": "hub2", "includedManagedClusters": {}, "maxConcurrency": 2}}"#, json_list(&names(1, 4))));
    registered(&s, "agents", 3).await;
    // Both agents die while cluster4 is held, and again right after it is let go, so its
    // release, CSR approval and acceptance all happen across restarts.
    kill_agent(&s, "hub1").await;
    kill_agent(&s, "hub2").await;
    unblock(&hub1, "cluster4");
    kill_agent(&s, "hub2").await;
    kill_agent(&s, "hub1").await;
    let m = s
        .phase(
            "agents",
            MigrationPhase::Completed,
            Duration::from_secs(120),
        )
        .await;
    let counts = m.status.unwrap().clusters.unwrap();
    assert_eq!((counts.registered, counts.failed), (4, 0), "{counts:?}");
    s.moved_to(names(1, 4), 2).await;
    no_leftovers(&s, "agents").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_down_past_the_timeout_rolls_back_to_the_source() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 4).await;
    let hub1 = kubeconfig(s.dir.path(), "hub1");
    block(&hub1, "cluster3", "hold");
    s.apply("outage", &format!(r#"{{"from": "hub1", "to": "hub2", "includedManagedClusters": {}, "maxConcurrency": 1, "registeringTimeout": "30s", "stageTimeout": "60s"}}"#, json_list(&names(1, 3))));
    registered(&s, "outage", 2).await;
    // hub2's API goes down (connections refused) for longer than the stage timeouts; cluster3
    // is let go meanwhile, so it is released towards a hub it cannot reach.
    let hub2_api = s.fleet.hubs[1].cluster.api.faults();
    hub2_api.set_outage(true);
    unblock(&hub1, "cluster3");
    // Registering times out, the source takes cluster3 back without hub2's word, and cleanup
    // waits for hub2 (its pre-created copy of cluster3 must go).
    // (Registering 30 s, then half the 60 s stage timeout of silence before the source acts.)
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        let st = s.migration("outage").await.and_then(|m| m.status);
        let done = st.as_ref().is_some_and(|st| {
            let conds = st.conditions.as_deref().unwrap_or_default();
            let rolled = find_condition(conds, "ResourceRolledBack");
            let cleaned = find_condition(conds, "ResourceCleaned");
            st.phase == Some(MigrationPhase::Cleaning)
                && rolled.is_some_and(|c| {
                    c.status == "True" && c.message.contains("hub2 did not answer")
                })
                && cleaned.is_some_and(|c| c.message.contains("waiting for hub2 to answer"))
        });
        if done {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not rolled back without the target with cleanup waiting for it: {st:#?}\n{}",
            tail(&s.logs(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let reg = find_condition(
        s.migration("outage")
            .await
            .unwrap()
            .status
            .unwrap()
            .conditions
            .as_deref()
            .unwrap(),
        "ClusterRegistered",
    )
    .unwrap()
    .clone();
    assert_eq!(reg.reason, "Timeout", "{reg:?}");
    // cluster3 is back home while hub2 is still down.
    eventually(
        Duration::from_secs(30),
        "cluster3 accepted and Available on hub1",
        || async {
            let mc = Api::<ManagedCluster>::all(s.hub(1))
                .get_opt("cluster3")
                .await
                .ok()??;
            (mc.spec.hub_accepts_client
                && condition_is_true(
                    mc.status?.conditions.as_deref()?,
                    "ManagedClusterConditionAvailable",
                ))
            .then_some(())
        },
    )
    .await;
    // hub2 comes back: its copy of cluster3 goes and the migration ends, Failed (not all
    // moved) with the two that arrived staying on hub2.
    hub2_api.set_outage(false);
    // Cleaning waits for hub2 however long it takes (it never gives up on a silent hub).
    // After the outage every watch of the agents, the manager and the simulated hub's
    // controllers comes back within its own back-off (30 s at most, jittered up to twice
    // that); a controller's watches once shared one back-off, and the stale errors of its
    // starved watches held hub2's import controller for three minutes and more (this waited
    // 300 s and failed once in CI).
    let m = s
        .phase("outage", MigrationPhase::Failed, Duration::from_secs(180))
        .await;
    let counts = m.status.unwrap().clusters.unwrap();
    assert_eq!(
        (counts.registered, counts.rolled_back),
        (2, 1),
        "{counts:?}"
    );
    s.moved_to(["cluster1", "cluster2"], 2).await;
    no_leftovers(&s, "outage").await;
}

/// A managed cluster's own API (admin).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plain_ocm_source_hub_moves_clusters_through_klusterlet_works() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::with_hub_kinds(2, 3, &["hub1"], &[]).await;
    let hub1 = kubeconfig(s.dir.path(), "hub1");
    let hub2 = kubeconfig(s.dir.path(), "hub2");
    let crd = Api::<CustomResourceDefinition>::all(s.hub(1))
        .get_opt("klusterletconfigs.config.open-cluster-management.io")
        .await
        .unwrap();
    assert!(crd.is_none(), "hub1 must be a plain OCM hub");
    let (original, _) = klusterlet_of(&s, "cluster1").await;
    assert_eq!(
        original,
        serde_json::json!({"featureGates": [{"feature": "ClusterClaim", "mode": "Enable"}]})
    );
    // cluster2 is held, and the target will refuse it: it rolls back, the others move.
    block(&hub1, "cluster2", "hold");
    s.apply(
        "plain",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1", "cluster2", "cluster3"], "maxFailures": 1, "maxConcurrency": 1}"#,
    );
    registered(&s, "plain", 2).await;
    let key = s.key("plain").await;
    // cluster2's own bootstrap identity (second in the list).
    let secret = migration_api::names::of_identity(
        &migration_api::names::migration_bootstrap_secret(&key),
        1,
    );
    let m = s.migration("plain").await.unwrap();
    let status = m.status.unwrap();
    assert_eq!(status.bootstrap_delivery.as_deref(), Some("ManifestWork"));
    let validated = find_condition(status.conditions.as_deref().unwrap(), "ResourceValidated")
        .unwrap()
        .message
        .clone();
    assert!(validated.contains("ManifestWork"), "{validated}");
    // The held cluster's Klusterlet is ready to switch: MultipleHubs added to its gates, its
    // own hub first, the target second, and what it had kept for later.
    eventually(
        Duration::from_secs(30),
        "cluster2's Klusterlet configured for MultipleHubs",
        || async {
            let (reg, annotations) = klusterlet_of(&s, "cluster2").await;
            let names: Vec<&str> = reg["bootstrapKubeConfigs"]["localSecretsConfig"]["kubeConfigSecrets"]
                .as_array()?
                .iter()
                .filter_map(|n| n["name"].as_str())
                .collect();
            (reg["featureGates"]
                == serde_json::json!([{"feature": "ClusterClaim", "mode": "Enable"}, {"feature": "MultipleHubs", "mode": "Enable"}])
                && names == ["bootstrap-hub-kubeconfig", secret.as_str()]
                && annotations.contains_key("migration.open-cluster-management.io/klusterlet-original"))
            .then_some(())
        },
    )
    .await;
    refuse(&hub2, "cluster2");
    unblock(&hub1, "cluster2");
    let m = s
        .phase("plain", MigrationPhase::Completed, Duration::from_secs(120))
        .await;
    let status = m.status.unwrap();
    let counts = status.clusters.unwrap();
    assert_eq!((counts.registered, counts.failed), (2, 1), "{status:#?}");
    s.moved_to(["cluster1", "cluster3"], 2).await;
    no_leftovers(&s, "plain").await;
    let hub1_url = s.fleet.hubs[0].cluster.api.url();
    let hub2_url = s.fleet.hubs[1].cluster.api.url();
    // Moved clusters: nothing of the migration left in the Klusterlet (hub2 is an ACM hub,
    // whose import renders the Klusterlet as it wants it), the target's bootstrap kubeconfig
    // the cluster's own (a restarted klusterlet comes back to hub2), the migration's secret
    // gone. The rolled-back cluster: the Klusterlet as it was, bootstrapping from hub1.
    for (cluster, home) in [
        ("cluster1", &hub2_url),
        ("cluster3", &hub2_url),
        ("cluster2", &hub1_url),
    ] {
        eventually(
            Duration::from_secs(30),
            &format!("{cluster}'s klusterlet settings restored"),
            || async {
                let (reg, annotations) = klusterlet_of(&s, cluster).await;
                let (server, leftover) = bootstrap_of(&s, cluster, &key).await;
                let settings_ok = if home == &hub1_url {
                    reg == original
                } else {
                    reg.get("bootstrapKubeConfigs").is_none()
                        && !reg.to_string().contains("MultipleHubs")
                };
                (settings_ok
                    && !annotations.keys().any(|k| k.starts_with("migration."))
                    && &server == home
                    && !leftover)
                    .then_some(())
            },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_older_acm_source_hub_switches_a_cluster_only_once_it_is_released() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::with_hub_kinds(2, 3, &[], &["hub1"]).await;
    let hub1 = kubeconfig(s.dir.path(), "hub1");
    // The older shape names the target alone, so a klusterlet given it goes there as soon as
    // it restarts (the simulated one restarts whenever its Klusterlet changes, as the
    // operator's redeploy does). A watcher records any cluster that joins hub2 while hub1
    // still accepts it, i.e. before the migration released it.
    let (h1, h2) = (s.hub(1), s.hub(2));
    let early = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = early.clone();
    let watch = tokio::spawn(async move {
        loop {
            let joined: Vec<String> = Api::<ManagedCluster>::all(h2.clone())
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
                .into_iter()
                .filter(|m| {
                    m.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_deref())
                        .is_some_and(|c| condition_is_true(c, "ManagedClusterJoined"))
                })
                .map(|m| m.name_any())
                .collect();
            for name in joined {
                if let Ok(Some(on1)) = Api::<ManagedCluster>::all(h1.clone()).get_opt(&name).await
                    && on1.spec.hub_accepts_client
                {
                    seen.lock().unwrap().push(name);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    s.apply(
        "legacy",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1", "cluster2", "cluster3"], "maxConcurrency": 1}"#,
    );
    registered(&s, "legacy", 1).await;
    let m = s.migration("legacy").await.unwrap();
    assert_eq!(
        m.status.unwrap().bootstrap_delivery.as_deref(),
        Some("KlusterletConfig/bootstrapKubeConfigs")
    );
    let key = s.key("legacy").await;
    let kc: serde_json::Value = serde_json::from_str(&kubectl_ok(
        &hub1,
        &[
            "get",
            "klusterletconfig",
            // cluster1's (first in the list).
            &migration_api::names::of_identity(
                &migration_api::names::migration_klusterlet_config(&key),
                0,
            ),
            "-o",
            "json",
        ],
        None,
    ))
    .unwrap();
    assert!(kc["spec"].get("multipleHubsConfig").is_none(), "{kc:#}");
    assert_eq!(
        kc["spec"]["bootstrapKubeConfigs"]["localSecretsConfig"]["kubeConfigSecrets"],
        serde_json::json!([{"name": migration_api::names::of_identity(
            &migration_api::names::migration_bootstrap_secret(&key),
            0
        )}]),
        "{kc:#}"
    );
    let m = s
        .phase(
            "legacy",
            MigrationPhase::Completed,
            Duration::from_secs(120),
        )
        .await;
    watch.abort();
    let counts = m.status.unwrap().clusters.unwrap();
    assert_eq!((counts.registered, counts.failed), (3, 0));
    let early = early.lock().unwrap().clone();
    assert!(
        early.is_empty(),
        "joined hub2 before being released: {early:?}"
    );
    s.moved_to(["cluster1", "cluster2", "cluster3"], 2).await;
    no_leftovers(&s, "legacy").await;
}
