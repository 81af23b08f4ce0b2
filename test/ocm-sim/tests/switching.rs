//! Hub switching (MultipleHubs): a klusterlet given a second bootstrap kubeconfig moves when its
//! hub stops accepting it, and does not move when the other hub's bootstrap identity lacks RBAC;
//! the import controller delivers KlusterletConfigs of both shapes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::eventually;

/// How long each wait here may take.
const LIMIT: Duration = Duration::from_secs(30);

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use migration_api::common::condition_is_true;
use migration_api::ocm::cluster::ManagedCluster;
use migration_api::ocm::operator::Klusterlet;
use ocm_sim::cluster::{Role, SimCluster};
use ocm_sim::hub::{Agent, Hub, HubOptions};
use serde_json::json;

async fn available_on(hub: &Hub, cluster: &str) -> bool {
    let api: Api<ManagedCluster> = Api::all(hub.cluster.admin.clone());
    api.get_opt(cluster).await.unwrap().is_some_and(|m| {
        let c = m
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or(&[]);
        m.spec.hub_accepts_client
            && condition_is_true(c, "ManagedClusterJoined")
            && condition_is_true(c, "ManagedClusterConditionAvailable")
    })
}

/// Gives the cluster a second bootstrap kubeconfig and turns MultipleHubs on (what the import
/// controller delivers from a KlusterletConfig).
async fn offer_second_hub(cluster: &SimCluster, kubeconfig: &str) {
    let secrets: Api<Secret> =
        Api::namespaced(cluster.admin.clone(), "open-cluster-management-agent");
    secrets
        .patch("hub2-bootstrap", &PatchParams::apply("import-controller").force(), &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hub2-bootstrap", "namespace": "open-cluster-management-agent"},
            "stringData": {"kubeconfig": kubeconfig}
        })))
        .await
        .unwrap();
    Api::<Klusterlet>::all(cluster.admin.clone())
        .patch("klusterlet", &PatchParams::apply("import-controller").force(), &Patch::Apply(json!({
            "apiVersion": "operator.open-cluster-management.io/v1", "kind": "Klusterlet", "metadata": {"name": "klusterlet"},
            "spec": {"registrationConfiguration": {
                "featureGates": [{"feature": "MultipleHubs", "mode": "Enable"}],
                "bootstrapKubeConfigs": {"type": "LocalSecrets", "localSecretsConfig": {
                    "kubeConfigSecrets": [{"name": "bootstrap-hub-kubeconfig"}, {"name": "hub2-bootstrap"}],
                    "hubConnectionTimeoutSeconds": 180}}}}
        })))
        .await
        .unwrap();
}

fn hub_kubeconfig_server(secret: &Secret) -> String {
    let text = String::from_utf8(secret.data.as_ref().unwrap()["kubeconfig"].0.clone()).unwrap();
    let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
    kc.clusters[0]
        .cluster
        .as_ref()
        .unwrap()
        .server
        .clone()
        .unwrap()
}

/// Two hubs, and cluster1 joined and available on hub1.
async fn cluster_on_hub1_of_two() -> (Hub, Hub, SimCluster, Agent) {
    cluster_on_hub1_of_two_with(common::fast_hub()).await
}

/// [`cluster_on_hub1_of_two`], hub1 started with `hub1_opts`.
async fn cluster_on_hub1_of_two_with(hub1_opts: HubOptions) -> (Hub, Hub, SimCluster, Agent) {
    let hub1 = Hub::start("hub1", hub1_opts).await.unwrap();
    let hub2 = Hub::start("hub2", common::fast_hub()).await.unwrap();
    let cluster = SimCluster::start("cluster1", Role::Managed).await.unwrap();
    let agent = Agent::start(&cluster, &hub1.bootstrap_kubeconfig, common::fast_agent())
        .await
        .unwrap();
    eventually(LIMIT, "cluster1 on hub1", || async {
        available_on(&hub1, "cluster1").await.then_some(())
    })
    .await;
    (hub1, hub2, cluster, agent)
}

/// What a migration puts on the source hub next to its KlusterletConfig: the target's
/// bootstrap kubeconfig, where the import controller reads it.
async fn put_target_bootstrap_secret(admin: &kube::Client, hub2: &Hub) {
    Api::<Secret>::namespaced(admin.clone(), "multicluster-engine")
        .patch("bootstrap-hub2", &PatchParams::apply("test").force(), &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap-hub2", "namespace": "multicluster-engine"},
            "stringData": {"kubeconfig": hub2.bootstrap_kubeconfig}
        })))
        .await
        .unwrap();
}

/// `bootstrapKubeConfigs` naming hub2's secret alone.
fn hub2_alone() -> serde_json::Value {
    json!({"type": "LocalSecrets", "localSecretsConfig": {
        "kubeConfigSecrets": [{"name": "bootstrap-hub2"}], "hubConnectionTimeoutSeconds": 180}})
}

/// Applies KlusterletConfig `migration-hub2` with this spec.
async fn put_klusterlet_config(admin: &kube::Client, spec: serde_json::Value) {
    Api::<migration_api::ocm::config::KlusterletConfig>::all(admin.clone())
        .patch("migration-hub2", &PatchParams::apply("test").force(), &Patch::Apply(json!({
            "apiVersion": "config.open-cluster-management.io/v1alpha1", "kind": "KlusterletConfig",
            "metadata": {"name": "migration-hub2"}, "spec": spec
        })))
        .await
        .unwrap();
}

/// The hub admin stops accepting a cluster.
async fn stop_accepting(hub: &Hub, cluster: &str) {
    Api::<ManagedCluster>::all(hub.cluster.admin.clone())
        .patch(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hubAcceptsClient": false}})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn switches_hubs_when_the_current_hub_stops_accepting() {
    let (hub1, hub2, cluster, _agent) = cluster_on_hub1_of_two().await;
    offer_second_hub(&cluster, &hub2.bootstrap_kubeconfig).await;
    // Still on hub1: the first usable bootstrap kubeconfig wins.
    assert!(available_on(&hub1, "cluster1").await);
    stop_accepting(&hub1, "cluster1").await;
    eventually(LIMIT, "cluster1 on hub2", || async {
        available_on(&hub2, "cluster1").await.then_some(())
    })
    .await;
    let secrets: Api<Secret> =
        Api::namespaced(cluster.admin.clone(), "open-cluster-management-agent");
    let secret = secrets.get("hub-kubeconfig-secret").await.unwrap();
    assert_eq!(hub_kubeconfig_server(&secret), hub2.cluster.api.url());
}

#[tokio::test]
async fn does_not_switch_when_the_bootstrap_identity_lacks_rbac() {
    let (hub1, hub2, cluster, _agent) = cluster_on_hub1_of_two().await;
    // A hub2 identity with no bootstrap permissions.
    let token = hub2
        .cluster
        .service_account(
            "open-cluster-management",
            "powerless",
            json!([]),
            Duration::from_secs(3600),
        )
        .await
        .unwrap();
    offer_second_hub(&cluster, &hub2.cluster.api.kubeconfig_for_token(&token)).await;
    stop_accepting(&hub1, "cluster1").await;
    // Give it several selection rounds: nothing may appear on hub2.
    let api2: Api<ManagedCluster> = Api::all(hub2.cluster.admin.clone());
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(4) {
        assert!(
            api2.get_opt("cluster1").await.unwrap().is_none(),
            "cluster1 must not register on hub2"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let secrets: Api<Secret> =
        Api::namespaced(cluster.admin.clone(), "open-cluster-management-agent");
    assert_eq!(
        hub_kubeconfig_server(&secrets.get("hub-kubeconfig-secret").await.unwrap()),
        hub1.cluster.api.url()
    );
}

#[tokio::test]
async fn import_controller_delivers_a_klusterlet_config_and_the_cluster_switches() {
    let (hub1, hub2, cluster, _agent) = cluster_on_hub1_of_two().await;
    // What a migration puts on the source hub: the target's bootstrap secret and a KlusterletConfig.
    let admin = hub1.cluster.admin.clone();
    put_target_bootstrap_secret(&admin, &hub2).await;
    put_klusterlet_config(
        &admin,
        json!({"multipleHubsConfig": {"genBootstrapKubeConfigStrategy": "IncludeCurrentHub",
        "bootstrapKubeConfigs": hub2_alone()}}),
    )
    .await;
    let mcs: Api<ManagedCluster> = Api::all(admin.clone());
    let annotate = |v: serde_json::Value| {
        Patch::Merge(
            json!({"metadata": {"annotations": {"agent.open-cluster-management.io/klusterlet-config": v}}}),
        )
    };
    mcs.patch(
        "cluster1",
        &PatchParams::default(),
        &annotate(json!("migration-hub2")),
    )
    .await
    .unwrap();
    let secrets: Api<Secret> =
        Api::namespaced(cluster.admin.clone(), "open-cluster-management-agent");
    let klusterlets: Api<Klusterlet> = Api::all(cluster.admin.clone());
    eventually(
        LIMIT,
        "the bootstrap secret and MultipleHubs on the cluster",
        || {
            let (secrets, klusterlets) = (secrets.clone(), klusterlets.clone());
            async move {
                let k = klusterlets.get_opt("klusterlet").await.unwrap()?;
                let names: Vec<String> = k
                    .spec
                    .registration_configuration?
                    .bootstrap_kube_configs?
                    .local_secrets_config?
                    .kube_config_secrets
                    .into_iter()
                    .map(|s| s.name)
                    .collect();
                (names == ["bootstrap-hub-kubeconfig", "bootstrap-hub2"]
                    && secrets.get_opt("bootstrap-hub2").await.unwrap().is_some())
                .then_some(())
            }
        },
    )
    .await;
    // Removing the annotation takes the extra bootstrap kubeconfig away again.
    mcs.patch(
        "cluster1",
        &PatchParams::default(),
        &annotate(serde_json::Value::Null),
    )
    .await
    .unwrap();
    eventually(LIMIT, "the extra secret to be removed", || {
        let secrets = secrets.clone();
        async move {
            secrets
                .get_opt("bootstrap-hub2")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        }
    })
    .await;
    // Annotate again, then the source stops accepting: the cluster moves to hub2.
    mcs.patch(
        "cluster1",
        &PatchParams::default(),
        &annotate(json!("migration-hub2")),
    )
    .await
    .unwrap();
    eventually(LIMIT, "the secret back", || {
        let secrets = secrets.clone();
        async move { secrets.get_opt("bootstrap-hub2").await.unwrap().map(|_| ()) }
    })
    .await;
    stop_accepting(&hub1, "cluster1").await;
    eventually(LIMIT, "cluster1 on hub2", || async {
        available_on(&hub2, "cluster1").await.then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_older_klusterlet_config_names_the_target_alone_and_the_cluster_goes_there_at_once() {
    let (hub1, hub2, cluster, _agent) = cluster_on_hub1_of_two_with(HubOptions {
        legacy_klusterlet_config: true,
        ..common::fast_hub()
    })
    .await;
    let admin = hub1.cluster.admin.clone();
    put_target_bootstrap_secret(&admin, &hub2).await;
    // The older CRD: no multipleHubsConfig, the bootstrap kubeconfigs directly under spec.
    put_klusterlet_config(&admin, json!({"bootstrapKubeConfigs": hub2_alone()})).await;
    Api::<ManagedCluster>::all(admin)
        .patch(
            "cluster1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"agent.open-cluster-management.io/klusterlet-config": "migration-hub2"}}})),
        )
        .await
        .unwrap();
    // hub1 still accepts it, but the Klusterlet now names hub2 alone: the agent restarts with
    // the new settings and goes there.
    eventually(LIMIT, "cluster1 on hub2", || async {
        available_on(&hub2, "cluster1").await.then_some(())
    })
    .await;
    let k = Api::<Klusterlet>::all(cluster.admin.clone())
        .get("klusterlet")
        .await
        .unwrap();
    let names: Vec<String> = k
        .spec
        .registration_configuration
        .and_then(|r| r.bootstrap_kube_configs)
        .and_then(|b| b.local_secrets_config)
        .map(|l| l.kube_config_secrets.into_iter().map(|s| s.name).collect())
        .unwrap_or_default();
    assert_eq!(names, ["bootstrap-hub2"]);
}
