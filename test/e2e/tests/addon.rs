//! The addon's lifecycle end to end: the real addon-manager on the global hub, the real
//! addon-agent run by each hub's kubelet, driven with kubectl as a user would.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use e2e::{Manager, eventually, kubeconfig, kubectl, kubectl_apply, kubectl_ok};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use migration_api::common::{Condition, find_condition};
use migration_api::names::annotations as ann;
use migration_api::ocm::addon::{ClusterManagementAddOn, ManagedClusterAddOn};
use migration_api::ocm::cluster::AddOnPlacementScore;
use migration_api::ocm::work::ManifestWork;

const ADDON: &str = "cluster-migration";
const AGENT_NS: &str = "open-cluster-management-agent-addon";
const CONFIG_NS: &str = "addon-configs";

fn condition(m: &ManagedClusterAddOn, t: &str) -> Option<Condition> {
    find_condition(m.status.as_ref()?.conditions.as_deref()?, t).cloned()
}

async fn mca(global: &Client, hub: &str) -> Option<ManagedClusterAddOn> {
    Api::<ManagedClusterAddOn>::namespaced(global.clone(), hub)
        .get_opt(ADDON)
        .await
        .unwrap()
}

async fn agent_image(hub: &Client) -> Option<String> {
    let d = Api::<Deployment>::namespaced(hub.clone(), AGENT_NS)
        .get_opt("cluster-migration-agent")
        .await
        .unwrap()?;
    d.spec?.template.spec?.containers.first()?.image.clone()
}

fn adc(name: &str, version: &str) -> String {
    format!(
        r#"{{"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "AddOnDeploymentConfig",
  "metadata": {{"name": "{name}", "namespace": "{CONFIG_NS}"}},
  "spec": {{"customizedVariables": [{{"name": "AGENT_VERSION", "value": "{version}"}},
                                   {{"name": "LEASE_DURATION_SECONDS", "value": "1"}}]}}}}"#
    )
}

fn addon_for(hub: &str, config: &str) -> String {
    format!(
        r#"{{"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
  "metadata": {{"name": "{ADDON}", "namespace": "{hub}"}},
  "spec": {{"configs": [{{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs",
                         "namespace": "{CONFIG_NS}", "name": "{config}"}}]}}}}"#
    )
}

/// The AVAILABLE column of `kubectl get managedclusteraddon -A` for a hub.
fn available_column(global: &Path, hub: &str) -> Option<String> {
    let out = kubectl_ok(global, &["get", "managedclusteraddon", "-A"], None);
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next()?.split_whitespace().collect();
    let col = header.iter().position(|h| *h == "AVAILABLE")?;
    lines
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cols| cols.first() == Some(&hub) && cols.get(1) == Some(&ADDON))
        .and_then(|cols| cols.get(col).map(|s| (*s).to_owned()))
}

/// Waits until a hub's Progressing condition has `reason` (and its message contains `text`).
async fn progressing(
    global: &Client,
    hub: &str,
    reason: &str,
    text: &str,
    limit: Duration,
) -> Condition {
    let start = std::time::Instant::now();
    loop {
        let m = mca(global, hub).await;
        let c = m.as_ref().and_then(|m| condition(m, "Progressing"));
        if let Some(c) = c
            .as_ref()
            .filter(|c| c.reason == reason && c.message.contains(text))
        {
            return c.clone();
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {hub} Progressing {reason} mentioning {text:?}; last seen: {:#?}",
            m.map(|m| (m.metadata.annotations, m.status))
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn agent_reports(global: &Client, hub: &str, version: &str) {
    eventually(
        Duration::from_secs(30),
        &format!("{hub}'s agent reporting {version}"),
        || async {
            let m = mca(global, hub).await?;
            condition(&m, "AgentRunning")
                .filter(|c| c.message.starts_with(&format!("agent {version} ")))
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn install_report_upgrade_refuse_roll_back_and_remove() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = e2e::fleet(2, 1, &["0.1.0", "0.2.0"], dir.path()).await;
    let global_kc = kubeconfig(dir.path(), "global-hub");
    let manager = Manager::start(
        &global_kc,
        dir.path(),
        &[
            ("AGENT_VERSIONS", "0.1.0,0.2.0,0.3.0"),
            ("PROGRESS_DEADLINE", "15s"),
        ],
    );
    let global = fleet.global.cluster.admin.clone();
    let hub1 = fleet.hubs[0].cluster.admin.clone();
    let hub2 = fleet.hubs[1].cluster.admin.clone();

    // The manager publishes its ClusterManagementAddOn, self-managed.
    let cma = eventually(
        Duration::from_secs(20),
        "the ClusterManagementAddOn",
        || async {
            Api::<ClusterManagementAddOn>::all(global.clone())
                .get_opt(ADDON)
                .await
                .unwrap()
        },
    )
    .await;
    assert_eq!(
        cma.annotations()
            .get(ann::ADDON_LIFECYCLE)
            .map(String::as_str),
        Some("self")
    );
    assert_eq!(
        cma.spec.install_strategy.and_then(|s| s.type_).as_deref(),
        Some("Manual")
    );

    // Install on both hubs with kubectl; AVAILABLE True within 30 s.
    kubectl_ok(&global_kc, &["create", "namespace", CONFIG_NS], None);
    kubectl_apply(&global_kc, &adc("fast", "0.1.0"));
    kubectl_apply(&global_kc, &addon_for("hub1", "fast"));
    kubectl_apply(&global_kc, &addon_for("hub2", "fast"));
    let started = std::time::Instant::now();
    eventually(
        Duration::from_secs(30),
        "kubectl showing hub1 AVAILABLE True",
        || async {
            (available_column(&global_kc, "hub1").as_deref() == Some("True")).then_some(())
        },
    )
    .await;
    println!("hub1 Available after {:?}", started.elapsed());
    eventually(Duration::from_secs(30), "hub2 AVAILABLE True", || async {
        (available_column(&global_kc, "hub2").as_deref() == Some("True")).then_some(())
    })
    .await;
    agent_reports(&global, "hub1", "0.1.0").await;
    let m1 = mca(&global, "hub1").await.unwrap();
    let status = m1.status.clone().unwrap();
    let reg = &status.registrations.unwrap()[0];
    assert_eq!(
        reg.subject.as_ref().and_then(|s| s.user.as_deref()),
        Some("system:open-cluster-management:cluster:hub1:addon:cluster-migration:agent:agent")
    );
    assert_eq!(status.namespace.as_deref(), Some(AGENT_NS));
    for t in ["ManifestApplied", "RegistrationApplied", "Configured"] {
        assert_eq!(
            condition(&m1, t).map(|c| c.status).as_deref(),
            Some("True"),
            "{t}: {m1:?}"
        );
    }
    let refs = status.config_references.unwrap();
    assert!(
        refs[0]
            .desired_config
            .as_ref()
            .and_then(|d| d.spec_hash.as_ref())
            .is_some()
    );

    // The agent's score, with valid values.
    let score = eventually(
        Duration::from_secs(20),
        "hub1's AddOnPlacementScore",
        || async {
            Api::<AddOnPlacementScore>::namespaced(global.clone(), "hub1")
                .get_opt(ADDON)
                .await
                .unwrap()
                .and_then(|s| s.status)
                .filter(|s| s.scores.as_ref().is_some_and(|v| v.len() >= 3))
        },
    )
    .await;
    let scores = score.scores.clone().unwrap();
    for s in &scores {
        assert!((-100..=100).contains(&s.value), "{s:?}");
    }
    let get = |n: &str| score.score(n);
    assert_eq!(
        get("managedClusters"),
        Some(0),
        "1 cluster of a 500 capacity"
    );
    assert_eq!(get("capacityHeadroom"), Some(100));
    assert!(score.valid_until.is_some());

    // Upgrade hub1 only.
    kubectl_apply(&global_kc, &adc("hub1-next", "0.2.0"));
    kubectl_apply(&global_kc, &addon_for("hub1", "hub1-next"));
    let done = progressing(
        &global,
        "hub1",
        "Completed",
        "upgrade from 0.1.0 to 0.2.0",
        Duration::from_secs(40),
    )
    .await;
    assert!(
        done.message.contains("started") && done.message.contains("completed"),
        "{}",
        done.message
    );
    agent_reports(&global, "hub1", "0.2.0").await;
    let m1 = mca(&global, "hub1").await.unwrap();
    assert_eq!(
        m1.annotations()
            .get(ann::AGENT_LAST_GOOD_VERSION)
            .map(String::as_str),
        Some("0.2.0")
    );
    assert!(m1.annotations().contains_key(ann::AGENT_ROLLOUT_STARTED));
    assert!(m1.annotations().contains_key(ann::AGENT_ROLLOUT_COMPLETED));
    assert_eq!(
        agent_image(&hub2).await.as_deref(),
        Some("quay.io/cluster-migration-addon/addon-agent:0.1.0"),
        "hub2 untouched"
    );
    let lr = m1
        .status
        .as_ref()
        .unwrap()
        .config_references
        .as_ref()
        .unwrap();
    assert_eq!(lr[0].name, "hub1-next");
    assert_eq!(
        lr[0]
            .last_applied_config
            .as_ref()
            .and_then(|c| c.spec_hash.clone()),
        lr[0]
            .desired_config
            .as_ref()
            .and_then(|c| c.spec_hash.clone())
    );

    // A version the manager does not support is refused; hub1 keeps running 0.2.0.
    kubectl_apply(&global_kc, &adc("hub1-next", "9.9.9"));
    let refused = eventually(
        Duration::from_secs(20),
        "Configured False for 9.9.9",
        || async {
            condition(&mca(&global, "hub1").await?, "Configured").filter(|c| c.status == "False")
        },
    )
    .await;
    assert_eq!(refused.reason, "UnsupportedVersion");
    assert!(
        refused.message.contains("9.9.9") && refused.message.contains("0.1.0, 0.2.0, 0.3.0"),
        "{}",
        refused.message
    );
    assert_eq!(
        agent_image(&hub1).await.as_deref(),
        Some("quay.io/cluster-migration-addon/addon-agent:0.2.0")
    );
    assert_eq!(
        available_column(&global_kc, "hub1").as_deref(),
        Some("True")
    );

    // A version whose agent never becomes available is rolled back.
    kubectl_apply(&global_kc, &adc("hub1-next", "0.3.0"));
    progressing(
        &global,
        "hub1",
        "Progressing",
        "upgrade from 0.2.0 to 0.3.0",
        Duration::from_secs(20),
    )
    .await;
    let failed = progressing(
        &global,
        "hub1",
        "Failed",
        "rolled back to 0.2.0",
        Duration::from_secs(40),
    )
    .await;
    assert!(failed.message.contains("0.3.0"), "{}", failed.message);
    eventually(
        Duration::from_secs(30),
        "hub1 back on 0.2.0 and Available",
        || async {
            let image = agent_image(&hub1).await?;
            (image.ends_with(":0.2.0")
                && available_column(&global_kc, "hub1").as_deref() == Some("True"))
            .then_some(())
        },
    )
    .await;
    let m1 = mca(&global, "hub1").await.unwrap();
    assert_eq!(
        m1.annotations()
            .get(ann::AGENT_FAILED_VERSION)
            .map(String::as_str),
        Some("0.3.0")
    );
    assert_eq!(
        condition(&m1, "Degraded").map(|c| c.reason).as_deref(),
        Some("UpgradeFailed")
    );

    // Rollback on request: point the config back.
    kubectl_apply(&global_kc, &addon_for("hub1", "fast"));
    progressing(
        &global,
        "hub1",
        "Completed",
        "0.1.0",
        Duration::from_secs(40),
    )
    .await;
    agent_reports(&global, "hub1", "0.1.0").await;
    // It counts the migration tasks on its hub from a watch: none there.
    eventually(
        Duration::from_secs(30),
        "hub1's agent counting no tasks",
        || async {
            let m = mca(&global, "hub1").await?;
            condition(&m, "AgentRunning").filter(|c| c.message.ends_with(", 0 migration tasks"))
        },
    )
    .await;

    // The agent cannot renew its lease on its hub: AVAILABLE turns False.
    fleet.hubs[0]
        .cluster
        .api
        .faults()
        .add_error(kube_sim::faults::ErrorRule {
            verb: Some("patch".into()),
            resource: Some("leases".into()),
            rate: 1.0,
            code: 500,
            user: None,
        });
    eventually(Duration::from_secs(30), "hub1 AVAILABLE False", || async {
        matches!(
            available_column(&global_kc, "hub1").as_deref(),
            Some("False" | "Unknown")
        )
        .then_some(())
    })
    .await;
    fleet.hubs[0].cluster.api.faults().clear();
    eventually(
        Duration::from_secs(30),
        "hub1 AVAILABLE True again",
        || async {
            (available_column(&global_kc, "hub1").as_deref() == Some("True")).then_some(())
        },
    )
    .await;

    // Removal runs the cleanup hook and leaves nothing of ours behind.
    kubectl_ok(
        &global_kc,
        &[
            "delete",
            "managedclusteraddon",
            "-n",
            "hub1",
            ADDON,
            "--wait=false",
        ],
        None,
    );
    let start = std::time::Instant::now();
    while let Some(m) = mca(&global, "hub1").await {
        let hook = Api::<ManifestWork>::namespaced(global.clone(), "hub1")
            .get_opt("addon-cluster-migration-pre-delete")
            .await
            .unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "hub1's ManagedClusterAddOn not gone: {:#?}\n{:#?}",
            m.status.map(|s| s.conditions),
            hook.map(|w| w.status)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eventually(
        Duration::from_secs(30),
        "nothing of ours left on hub1 or for it on the global hub",
        || async {
            let works = Api::<ManifestWork>::namespaced(global.clone(), "hub1")
                .list(&ListParams::default())
                .await
                .unwrap();
            let ours = works.items.iter().any(|w| {
                w.labels()
                    .get("open-cluster-management.io/addon-name")
                    .map(String::as_str)
                    == Some(ADDON)
            });
            let score = Api::<AddOnPlacementScore>::namespaced(global.clone(), "hub1")
                .get_opt(ADDON)
                .await
                .unwrap();
            let role = Api::<Role>::namespaced(global.clone(), "hub1")
                .get_opt("open-cluster-management:cluster-migration:agent")
                .await
                .unwrap();
            let deploy = agent_image(&hub1).await;
            let cr = Api::<ClusterRole>::all(hub1.clone())
                .get_opt("open-cluster-management:cluster-migration:agent")
                .await
                .unwrap();
            let lease = Api::<Lease>::namespaced(hub1.clone(), AGENT_NS)
                .get_opt(ADDON)
                .await
                .unwrap();
            (!ours
                && score.is_none()
                && role.is_none()
                && deploy.is_none()
                && cr.is_none()
                && lease.is_none())
            .then_some(())
        },
    )
    .await;
    // hub2 still has its agent.
    assert_eq!(
        available_column(&global_kc, "hub2").as_deref(),
        Some("True")
    );
    let logs = manager.logs();
    assert!(
        !logs.contains("BEGIN CERTIFICATE") && !logs.contains("token:"),
        "secrets in the manager log"
    );
    drop(manager);
    let out = kubectl(&global_kc, &["get", "managedclusteraddon", "-A"], None);
    assert!(out.status.success());
}

fn annotation(m: &ManagedClusterAddOn, key: &str) -> Option<String> {
    m.annotations().get(key).cloned()
}

async fn all_hubs(global: &Client) -> Vec<ManagedClusterAddOn> {
    let mut v: Vec<ManagedClusterAddOn> = Api::<ManagedClusterAddOn>::all(global.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|m| m.name_any() == ADDON)
        .collect();
    v.sort_by_key(|m| m.namespace());
    v
}

/// Waits until all three hubs run `v`; returns the most hubs seen upgrading at once.
async fn wait_version(global: &Client, v: &str) -> usize {
    let start = std::time::Instant::now();
    let mut max_in_flight = 0;
    loop {
        let hubs = all_hubs(global).await;
        let in_flight = hubs
            .iter()
            .filter(|m| {
                annotation(m, ann::AGENT_VERSION).as_deref() == Some(v)
                    && annotation(m, ann::AGENT_LAST_GOOD_VERSION).as_deref() != Some(v)
            })
            .count();
        max_in_flight = max_in_flight.max(in_flight);
        if hubs.len() == 3
            && hubs
                .iter()
                .all(|m| annotation(m, ann::AGENT_LAST_GOOD_VERSION).as_deref() == Some(v))
        {
            return max_in_flight;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "hubs not all on {v}: {:#?}",
            hubs.iter()
                .map(|m| (m.namespace(), m.annotations().clone()))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn progressive_rollout_one_hub_at_a_time_halts_on_failure() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = e2e::fleet(3, 0, &["0.1.0", "0.2.0"], dir.path()).await;
    let global_kc = kubeconfig(dir.path(), "global-hub");
    let manager = Manager::start(
        &global_kc,
        dir.path(),
        &[
            ("AGENT_VERSIONS", "0.1.0,0.2.0,0.3.0"),
            ("PROGRESS_DEADLINE", "10m"),
        ],
    );
    let global = fleet.global.cluster.admin.clone();
    kubectl_ok(&global_kc, &["create", "namespace", CONFIG_NS], None);
    kubectl_apply(&global_kc, &adc("fleet", "0.1.0"));
    for hub in ["hub1", "hub2", "hub3"] {
        kubectl_ok(
            &global_kc,
            &[
                "label",
                "managedcluster",
                hub,
                "cluster.open-cluster-management.io/clusterset=hubs",
            ],
            None,
        );
    }
    // hub3's addon is the user's own: the placement must never remove it.
    kubectl_apply(
        &global_kc,
        &format!(
            r#"{{"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
  "metadata": {{"name": "{ADDON}", "namespace": "hub3"}}, "spec": {{}}}}"#
        ),
    );
    for obj in [
        r#"{"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSet", "metadata": {"name": "hubs"},
            "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}}"#.to_owned(),
        format!(r#"{{"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
            "metadata": {{"name": "hubs", "namespace": "{CONFIG_NS}"}}, "spec": {{"clusterSet": "hubs"}}}}"#),
        format!(r#"{{"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
            "metadata": {{"name": "all-hubs", "namespace": "{CONFIG_NS}"}}, "spec": {{"clusterSets": ["hubs"]}}}}"#),
    ] {
        kubectl_apply(&global_kc, &obj);
    }
    eventually(
        Duration::from_secs(20),
        "the ClusterManagementAddOn",
        || async {
            Api::<ClusterManagementAddOn>::all(global.clone())
                .get_opt(ADDON)
                .await
                .unwrap()
        },
    )
    .await;
    kubectl_ok(
        &global_kc,
        &[
            "patch",
            "clustermanagementaddon",
            ADDON,
            "--type=merge",
            "-p",
            &format!(
                r#"
{{"spec": {{"installStrategy": {{"type": "Placements", "placements": [{{
  "namespace": "{CONFIG_NS}", "name": "all-hubs",
  "configs": [{{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs", "namespace": "{CONFIG_NS}", "name": "fleet"}}],
  "rolloutStrategy": {{"type": "Progressive", "progressive": {{"maxConcurrency": 1, "maxFailures": 0, "progressDeadline": "12s"}}}}
}}]}}}}}}"#
            ),
        ],
        None,
    );

    // Placement creates the addon on hub1 and hub2 (hub3 has the user's); all reach 0.1.0.
    // (hub3 started before the strategy existed, so the first install is not gated.)
    wait_version(&global, "0.1.0").await;
    let hubs = all_hubs(&global).await;
    assert_eq!(
        hubs[0]
            .labels()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("cluster-migration-addon")
    );
    assert!(
        !hubs[2]
            .labels()
            .contains_key("app.kubernetes.io/managed-by"),
        "hub3's addon stays the user's"
    );

    // Upgrade the fleet default: one hub at a time, in order.
    kubectl_apply(&global_kc, &adc("fleet", "0.2.0"));
    assert!(
        wait_version(&global, "0.2.0").await <= 1,
        "more than one hub upgraded at once"
    );
    let hubs = all_hubs(&global).await;
    for pair in hubs.windows(2) {
        let done = annotation(&pair[0], ann::AGENT_ROLLOUT_COMPLETED).unwrap();
        let next = annotation(&pair[1], ann::AGENT_ROLLOUT_STARTED).unwrap();
        assert!(
            next >= done,
            "{} started {next} before {} completed {done}",
            pair[1].namespace().unwrap(),
            pair[0].namespace().unwrap()
        );
    }

    // A version that never becomes available: the hub that tries it first (one at a time)
    // fails and rolls back, the rollout halts (maxFailures 0), the others keep 0.2.0.
    kubectl_apply(&global_kc, &adc("fleet", "0.3.0"));
    let first = eventually(
        Duration::from_secs(60),
        "a hub Progressing Failed, rolled back to 0.2.0",
        || async {
            for hub in ["hub1", "hub2", "hub3"] {
                let m = mca(&global, hub).await?;
                if condition(&m, "Progressing").is_some_and(|c| {
                    c.reason == "Failed" && c.message.contains("rolled back to 0.2.0")
                }) {
                    return Some(hub);
                }
            }
            None
        },
    )
    .await;
    let halted = eventually(
        Duration::from_secs(20),
        "the install progression saying halted",
        || async {
            let cma = Api::<ClusterManagementAddOn>::all(global.clone())
                .get_opt(ADDON)
                .await
                .unwrap()?;
            let p = cma.status?.install_progressions?.into_iter().next()?;
            find_condition(p.conditions.as_deref()?, "Progressing")
                .filter(|c| c.message.contains("halted"))
                .cloned()
        },
    )
    .await;
    assert_eq!(halted.reason, "Failed");
    for hub in ["hub1", "hub2", "hub3"].into_iter().filter(|h| *h != first) {
        let c = progressing(&global, hub, "Waiting", "0.3.0", Duration::from_secs(20)).await;
        assert!(c.message.contains("0.2.0 keeps running"), "{}", c.message);
        let m = mca(&global, hub).await.unwrap();
        assert_eq!(annotation(&m, ann::AGENT_VERSION).as_deref(), Some("0.2.0"));
    }

    // Hubs leaving the placement: the addon the manager created goes, the user's stays.
    for hub in ["hub2", "hub3"] {
        kubectl_ok(
            &global_kc,
            &[
                "label",
                "managedcluster",
                hub,
                "cluster.open-cluster-management.io/clusterset-",
            ],
            None,
        );
    }
    let start = std::time::Instant::now();
    while let Some(m) = mca(&global, "hub2").await {
        if start.elapsed() > Duration::from_secs(60) {
            let hook = Api::<ManifestWork>::namespaced(global.clone(), "hub2")
                .get_opt("addon-cluster-migration-pre-delete")
                .await
                .unwrap();
            let job = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(
                fleet.hubs[1].cluster.admin.clone(),
                AGENT_NS,
            )
            .get_opt("cluster-migration-cleanup")
            .await
            .unwrap();
            let pod_log = std::fs::read_to_string(dir.path().join("pods/hub2/open-cluster-management-agent-addon-cluster-migration-cleanup-job/agent.log")).unwrap_or_default();
            panic!(
                "hub2's placement-made addon not removed: {:#?}\n{:#?}\nhook work: {:#?}\njob: {:#?}\njob log: {pod_log}\nmanager log: {}",
                m.metadata.finalizers,
                m.status.map(|s| s.conditions),
                hook.map(|w| w.status),
                job.map(|j| j.status),
                manager.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let m3 = mca(&global, "hub3")
        .await
        .expect("the user's addon on hub3 stays");
    assert!(m3.metadata.deletion_timestamp.is_none());
}
