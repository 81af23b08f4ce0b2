//! Deleting a ManagedCluster (detaching it) as upstream hubs do it: the registration GC
//! (ocm `pkg/registration/hub/gc/controller.go`, `gc_resources.go`) deletes what is left in the
//! cluster's namespace and waits for it, so a work whose agent is gone holds the cluster in
//! deletion on a plain OCM hub; ACM's import controller
//! (`pkg/controller/resourcecleanup/resourcecleanup_controller.go`) force-deletes the works
//! of a cluster it no longer accepts or that is unavailable, and deletes its namespace after it
//! (`pkg/controller/clusternamespacedeletion/controller.go`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::eventually;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use migration_api::common::{condition_is_true, find_condition};
use migration_api::ocm::cluster::ManagedCluster;
use migration_api::ocm::work::ManifestWork;
use ocm_sim::cluster::{Role, SimCluster};
use ocm_sim::hub::{Agent, Hub, HubKind, HubOptions};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(20);

/// A hub of `kind` with cluster1 joined and a work applied on it.
async fn joined_with_a_work(kind: HubKind) -> (Hub, SimCluster, Agent) {
    common::logs();
    let hub = Hub::start(
        "hub1",
        HubOptions {
            kind,
            ..common::fast_hub()
        },
    )
    .await
    .unwrap();
    let c = SimCluster::start("cluster1", Role::Managed).await.unwrap();
    let agent = Agent::start(&c, &hub.bootstrap_kubeconfig, common::fast_agent())
        .await
        .unwrap();
    let works: Api<ManifestWork> = Api::namespaced(hub.cluster.admin.clone(), "cluster1");
    let work: ManifestWork = serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": "app", "namespace": "cluster1"},
        "spec": {"workload": {"manifests": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "default"}, "data": {"mode": "blue"}}
        ]}}
    }))
    .unwrap();
    eventually(LIMIT, "cluster1's namespace", || {
        let works = works.clone();
        let work = work.clone();
        async move { works.create(&PostParams::default(), &work).await.ok() }
    })
    .await;
    eventually(
        LIMIT,
        "the work applied, with its agent's finalizer",
        || {
            let works = works.clone();
            async move {
                let w = works.get("app").await.unwrap();
                let conds = w.status.as_ref()?.conditions.clone().unwrap_or_default();
                (condition_is_true(&conds, "Applied") && !w.finalizers().is_empty()).then_some(())
            }
        },
    )
    .await;
    (hub, c, agent)
}

fn deleting(mc: &ManagedCluster) -> Option<(String, String)> {
    let c = find_condition(mc.status.as_ref()?.conditions.as_deref()?, "Deleting")?;
    Some((c.status.clone(), c.message.clone()))
}

async fn gone<K>(api: &Api<K>, name: &str, what: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(LIMIT, what, || {
        let api = api.clone();
        async move { api.get_opt(name).await.unwrap().is_none().then_some(()) }
    })
    .await;
}

/// Plain OCM: the cluster's agent is gone, so its work's finalizer stays and the deleted
/// cluster waits, `Deleting` False with the work counted; it goes once the finalizer does,
/// and its namespace stays (nothing in plain OCM deletes it).
#[tokio::test]
async fn plain_ocm_waits_for_works_only_a_connected_agent_finishes() {
    let (hub, _c, agent) = joined_with_a_work(HubKind::Plain).await;
    agent.stop();
    let mcs: Api<ManagedCluster> = Api::all(hub.cluster.admin.clone());
    let mc = mcs.get("cluster1").await.unwrap();
    assert!(
        mc.finalizers()
            .contains(&"cluster.open-cluster-management.io/resource-cleanup".to_owned()),
        "{:?}",
        mc.finalizers()
    );
    mcs.delete("cluster1", &DeleteParams::default())
        .await
        .unwrap();
    let works: Api<ManifestWork> = Api::namespaced(hub.cluster.admin.clone(), "cluster1");
    let message = eventually(LIMIT, "Deleting False, the work remaining", || {
        let mcs = mcs.clone();
        async move {
            match deleting(&mcs.get("cluster1").await.unwrap()) {
                Some((s, m)) if s == "False" => Some(m),
                _ => None,
            }
        }
    })
    .await;
    assert!(
        message.contains("manifestworks")
            && message.contains("remaining count is 1")
            && message.contains("finalizer pending count is 1"),
        "{message}"
    );
    let w = works.get("app").await.unwrap();
    assert!(w.metadata.deletion_timestamp.is_some());
    assert!(mcs.get_opt("cluster1").await.unwrap().is_some());
    works
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    gone(&mcs, "cluster1", "the cluster gone once its work is").await;
    let ns: Api<Namespace> = Api::all(hub.cluster.admin.clone());
    assert!(ns.get_opt("cluster1").await.unwrap().is_some());
}

/// ACM, a cluster the hub no longer accepts: its works are force-deleted (what they applied
/// stays on the cluster), the cluster goes, and its namespace after it.
#[tokio::test]
async fn acm_force_deletes_the_works_of_a_cluster_it_no_longer_accepts() {
    let (hub, c, agent) = joined_with_a_work(HubKind::Acm).await;
    agent.stop();
    let mcs: Api<ManagedCluster> = Api::all(hub.cluster.admin.clone());
    assert!(mcs.get("cluster1").await.unwrap().finalizers().contains(
        &"managedcluster-import-controller.open-cluster-management.io/cleanup".to_owned()
    ));
    mcs.patch(
        "cluster1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"hubAcceptsClient": false}})),
    )
    .await
    .unwrap();
    mcs.delete("cluster1", &DeleteParams::default())
        .await
        .unwrap();
    gone(&mcs, "cluster1", "the refused cluster gone").await;
    let ns: Api<Namespace> = Api::all(hub.cluster.admin.clone());
    gone(&ns, "cluster1", "its namespace gone").await;
    let cms: Api<ConfigMap> = Api::namespaced(c.admin.clone(), "default");
    assert!(cms.get_opt("settings").await.unwrap().is_some());
}

/// ACM, a cluster still accepted and available: its agent finishes the works the GC deletes
/// (removing what they applied), then the cluster and its namespace go.
#[tokio::test]
async fn acm_waits_for_a_connected_agent_to_finish_the_works() {
    let (hub, c, _agent) = joined_with_a_work(HubKind::Acm).await;
    let mcs: Api<ManagedCluster> = Api::all(hub.cluster.admin.clone());
    mcs.delete("cluster1", &DeleteParams::default())
        .await
        .unwrap();
    gone(&mcs, "cluster1", "the cluster gone").await;
    let cms: Api<ConfigMap> = Api::namespaced(c.admin.clone(), "default");
    assert!(
        cms.get_opt("settings").await.unwrap().is_none(),
        "the agent removed what the work applied"
    );
    let ns: Api<Namespace> = Api::all(hub.cluster.admin.clone());
    gone(&ns, "cluster1", "its namespace gone").await;
}
