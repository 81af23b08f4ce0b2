//! The kubelet runs the real addon-agent binary for its Deployment: Available once the agent
//! is ready; an unknown image tag never becomes available; going back recovers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::eventually;

/// How long each wait here may take.
const LIMIT: Duration = Duration::from_secs(30);

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{Api, Patch, PatchParams, PostParams};
use ocm_sim::cluster::{Role, SimCluster};
use ocm_sim::kubelet::{KubeletOptions, find_agent_binary};
use serde_json::json;

const REPO: &str = "quay.io/cluster-migration-addon/addon-agent";
const NS: &str = "open-cluster-management-agent-addon";

fn available(d: &Deployment) -> i32 {
    d.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

fn progressing_reason(d: &Deployment) -> String {
    d.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Progressing"))
        .and_then(|c| c.reason.clone())
        .unwrap_or_default()
}

/// Waits for the agent's Deployment to have `want` available replicas.
async fn available_replicas(deployments: &Api<Deployment>, want: i32, what: &str) -> Deployment {
    eventually(LIMIT, what, || async {
        deployments
            .get("cluster-migration-agent")
            .await
            .ok()
            .filter(|d| available(d) == want)
    })
    .await
}

/// A hub whose kubelet runs the agent's Deployment, available.
struct Running {
    _global: SimCluster,
    _hub1: SimCluster,
    work: tempfile::TempDir,
    kubelet: tokio::task::JoinHandle<()>,
    deployments: Api<Deployment>,
}

async fn agent_running() -> Running {
    let agent = find_agent_binary().expect(
        "target/<profile>/addon-agent: build the workspace (cargo test --workspace builds it)",
    );
    let global = SimCluster::start("global-hub", Role::Hub).await.unwrap();
    let hub1 = SimCluster::start("hub1", Role::Hub).await.unwrap();
    hub1.ensure_namespace(NS).await.unwrap();
    let admin = hub1.admin.clone();
    Api::<ServiceAccount>::namespaced(admin.clone(), NS)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "cluster-migration-agent"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    Api::<Secret>::namespaced(admin.clone(), NS)
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "cluster-migration-hub-kubeconfig"},
            "stringData": {"kubeconfig": global.api.kubeconfig()}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let opts = KubeletOptions {
        agent_binary: agent,
        image_repository: REPO.into(),
        other_images: Vec::new(),
        known_tags: vec!["0.1.0".into()],
        work_dir: work.path().to_path_buf(),
        api_url: hub1.api.url(),
        api_ca_pem: hub1.api.ca_pem().into(),
    };
    let kubelet = tokio::spawn(ocm_sim::kubelet::run(admin.clone(), opts));
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), NS);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "cluster-migration-agent"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "agent"}}, "template": {
            "metadata": {"labels": {"app": "agent"}},
            "spec": {"serviceAccountName": "cluster-migration-agent",
                "containers": [{"name": "agent", "image": format!("{REPO}:0.1.0"),
                    "args": ["--hub-kubeconfig=/var/run/hub/kubeconfig", "--cluster-name=hub1"],
                    "volumeMounts": [{"name": "hub-kubeconfig", "mountPath": "/var/run/hub"}]}],
                "volumes": [{"name": "hub-kubeconfig", "secret": {"secretName": "cluster-migration-hub-kubeconfig"}}]}}}
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    available_replicas(&deployments, 1, "the agent to be available").await;
    Running {
        _global: global,
        _hub1: hub1,
        work,
        kubelet,
        deployments,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_the_agent_for_its_deployment() {
    let Running {
        work,
        kubelet,
        deployments,
        ..
    } = &agent_running().await;
    let log = std::fs::read_to_string(
        work.path()
            .join(format!("{NS}-cluster-migration-agent/agent.log")),
    )
    .unwrap();
    assert!(
        log.contains("addon-agent started") && log.contains("cluster=hub1"),
        "{log}"
    );
    // An image tag that does not exist never becomes available.
    let set_tag = |tag: &str| {
        Patch::Strategic(
            json!({"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": format!("{REPO}:{tag}")}]}}}}),
        )
    };
    deployments
        .patch(
            "cluster-migration-agent",
            &PatchParams::default(),
            &set_tag("9.9.9"),
        )
        .await
        .unwrap();
    let d = available_replicas(deployments, 0, "the bad tag to be unavailable").await;
    assert_eq!(progressing_reason(&d), "ImagePullBackOff");
    deployments
        .patch(
            "cluster-migration-agent",
            &PatchParams::default(),
            &set_tag("0.1.0"),
        )
        .await
        .unwrap();
    available_replicas(deployments, 1, "recovery").await;
    kubelet.abort();
}

/// The agent's process id, as the kubelet wrote it.
fn pid(work: &tempfile::TempDir) -> Option<u32> {
    std::fs::read_to_string(
        work.path()
            .join(format!("{NS}-cluster-migration-agent/pid")),
    )
    .ok()?
    .trim()
    .parse()
    .ok()
}

/// Kills the agent's process and returns how long the kubelet took to start another.
async fn kill_and_time_restart(work: &tempfile::TempDir) -> Duration {
    let old = pid(work).expect("a running agent");
    let status = std::process::Command::new("kill")
        .args(["-9", &old.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -9 {old}");
    let killed = std::time::Instant::now();
    eventually(LIMIT, "a new agent process", || async {
        pid(work).filter(|p| *p != old)
    })
    .await;
    killed.elapsed()
}

/// The kubelet's CrashLoopBackOff (kubernetes `pkg/kubelet/kuberuntime/kuberuntime_manager.go`,
/// `doBackOff`): a container that exits is started again at once the first time, and the
/// next time only 10 s after it exited.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_that_exits_twice_is_restarted_the_second_time_after_ten_seconds() {
    let running = agent_running().await;
    let first = kill_and_time_restart(&running.work).await;
    assert!(
        first < Duration::from_secs(5),
        "first restart after {first:?}"
    );
    let second = kill_and_time_restart(&running.work).await;
    assert!(
        second >= Duration::from_millis(9500),
        "second restart after {second:?}: the kubelet holds it 10 s"
    );
    running.kubelet.abort();
}
