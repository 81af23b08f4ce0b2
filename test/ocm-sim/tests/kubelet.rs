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

#[tokio::test(flavor = "multi_thread")]
async fn runs_the_agent_for_its_deployment() {
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
    let ready = |want: i32| {
        let deployments = deployments.clone();
        move || {
            let deployments = deployments.clone();
            async move {
                deployments
                    .get("cluster-migration-agent")
                    .await
                    .ok()
                    .filter(|d| available(d) == want)
            }
        }
    };
    eventually(LIMIT, "the agent to be available", ready(1)).await;
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
    let d = eventually(LIMIT, "the bad tag to be unavailable", ready(0)).await;
    assert_eq!(progressing_reason(&d), "ImagePullBackOff");
    deployments
        .patch(
            "cluster-migration-agent",
            &PatchParams::default(),
            &set_tag("0.1.0"),
        )
        .await
        .unwrap();
    eventually(LIMIT, "recovery", ready(1)).await;
    kubelet.abort();
}
