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
use migration_api::ocm::work::ManifestWork;
use ocm_sim::cluster::{Role, SimCluster};
use ocm_sim::hub::{Agent, AgentOptions, Hub, HubKind, HubOptions, OlderMce};
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

fn plain_hub() -> HubOptions {
    HubOptions {
        kind: HubKind::Plain,
        ..common::fast_hub()
    }
}

/// Two hubs, and cluster1 joined and available on hub1.
async fn cluster_on_hub1_of_two() -> (Hub, Hub, SimCluster, Agent) {
    cluster_on_hub1_of_two_with(common::fast_hub()).await
}

/// [`cluster_on_hub1_of_two`], hub1 started with `hub1_opts`.
async fn cluster_on_hub1_of_two_with(hub1_opts: HubOptions) -> (Hub, Hub, SimCluster, Agent) {
    cluster_on_hub1_of_two_with_agent(hub1_opts, common::fast_agent()).await
}

async fn cluster_on_hub1_of_two_with_agent(
    hub1_opts: HubOptions,
    agent_opts: AgentOptions,
) -> (Hub, Hub, SimCluster, Agent) {
    common::logs();
    let hub1 = Hub::start("hub1", hub1_opts).await.unwrap();
    let hub2 = Hub::start("hub2", common::fast_hub()).await.unwrap();
    let cluster = SimCluster::start("cluster1", Role::Managed).await.unwrap();
    let agent = Agent::start(&cluster, &hub1.bootstrap_kubeconfig, agent_opts)
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

/// Annotates a cluster to select a KlusterletConfig.
async fn select_config(admin: &kube::Client, cluster: &str, config: &str) {
    Api::<ManagedCluster>::all(admin.clone())
        .patch(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"agent.open-cluster-management.io/klusterlet-config": config}}})),
        )
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
    // A plain OCM hub1: nothing there renders the Klusterlet over what this test sets.
    let (hub1, hub2, cluster, _agent) = cluster_on_hub1_of_two_with(plain_hub()).await;
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
    let (hub1, hub2, cluster, _agent) = cluster_on_hub1_of_two_with(plain_hub()).await;
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
                // The current hub comes last (upstream `pkg/bootstrap/render.go`).
                (names == ["bootstrap-hub2", "bootstrap-hub-kubeconfig-current-hub"]
                    && secrets.get_opt("bootstrap-hub2").await.unwrap().is_some())
                .then_some(())
            }
        },
    )
    .await;
    // Listed last, the current hub is still the one its klusterlet keeps: its server is the
    // one it is connected to (`selectBootstrapKubeConfigs`).
    stays_on_hub1(&hub1, &hub2, &_agent, "bootstrap-hub2").await;
    // Removing the annotation takes the extra bootstrap kubeconfig out of the Klusterlet (the
    // secret itself stays: the klusterlet work orphans what it applied, upstream
    // `manifestwork_controller.go`).
    mcs.patch(
        "cluster1",
        &PatchParams::default(),
        &annotate(serde_json::Value::Null),
    )
    .await
    .unwrap();
    eventually(
        LIMIT,
        "the extra bootstrap kubeconfig out of the Klusterlet",
        || {
            let klusterlets = klusterlets.clone();
            async move {
                let k = klusterlets.get_opt("klusterlet").await.unwrap()?;
                k.spec
                    .registration_configuration
                    .and_then(|r| r.bootstrap_kube_configs)
                    .is_none()
                    .then_some(())
            }
        },
    )
    .await;
    // Annotate again, then the source stops accepting: the cluster moves to hub2.
    mcs.patch(
        "cluster1",
        &PatchParams::default(),
        &annotate(json!("migration-hub2")),
    )
    .await
    .unwrap();
    // Released only once its Klusterlet lists hub2 again (as a migration waits for it):
    // without MultipleHubs a klusterlet does not restart when its hub stops accepting it.
    eventually(LIMIT, "hub2 back in the Klusterlet", || {
        let klusterlets = klusterlets.clone();
        async move {
            let k = klusterlets.get_opt("klusterlet").await.unwrap()?;
            let listed = k
                .spec
                .registration_configuration?
                .bootstrap_kube_configs?
                .local_secrets_config?
                .kube_config_secrets
                .iter()
                .any(|s| s.name == "bootstrap-hub2");
            listed.then_some(())
        }
    })
    .await;
    stop_accepting(&hub1, "cluster1").await;
    eventually(LIMIT, "cluster1 on hub2", || async {
        available_on(&hub2, "cluster1").await.then_some(())
    })
    .await;
}

/// Once the klusterlet process runs with Klusterlet settings naming `secret` (it restarted
/// for them) and has connected, it is on hub1, still, and not on hub2.
async fn stays_on_hub1(hub1: &Hub, hub2: &Hub, agent: &Agent, secret: &str) {
    let now = eventually(
        LIMIT,
        "the klusterlet restarted with the new settings",
        || async { agent.connected().filter(|c| c.settings.contains(secret)) },
    )
    .await;
    let server = kube::config::Kubeconfig::from_yaml(&now.text)
        .unwrap()
        .clusters[0]
        .cluster
        .clone()
        .unwrap()
        .server
        .unwrap();
    assert_eq!(
        server.replace("localhost", "127.0.0.1"),
        hub1.cluster.api.url()
    );
    assert!(
        Api::<ManagedCluster>::all(hub2.cluster.admin.clone())
            .get_opt("cluster1")
            .await
            .unwrap()
            .is_none(),
        "cluster1 went to hub2 while hub1 still accepts it"
    );
}

/// The server-match preference compares URLs: when the cluster's own KlusterletConfig points
/// it at its hub under another name (`hubKubeAPIServerConfig.url`), a KlusterletConfig that
/// drops that URL renders the current hub under the default one, nothing matches, and the
/// klusterlet, at its next start, takes the first valid kubeconfig: the other hub, while its
/// own still accepts it. Carrying the URL over keeps it where it is.
#[tokio::test]
async fn the_current_hub_is_recognised_by_its_url() {
    let (hub1, hub2, cluster, agent) = cluster_on_hub1_of_two().await;
    let admin = hub1.cluster.admin.clone();
    let localhost = hub1.cluster.api.url().replace("127.0.0.1", "localhost");
    // The cluster's own KlusterletConfig: the hub under another name.
    Api::<migration_api::ocm::config::KlusterletConfig>::all(admin.clone())
        .patch("own", &PatchParams::apply("test").force(), &Patch::Apply(json!({
            "apiVersion": "config.open-cluster-management.io/v1alpha1", "kind": "KlusterletConfig",
            "metadata": {"name": "own"}, "spec": {"hubKubeAPIServerConfig": {"url": localhost}}
        })))
        .await
        .unwrap();
    let mcs: Api<ManagedCluster> = Api::all(admin.clone());
    let annotate = |name: &str| {
        Patch::Merge(
            json!({"metadata": {"annotations": {"agent.open-cluster-management.io/klusterlet-config": name}}}),
        )
    };
    mcs.patch("cluster1", &PatchParams::default(), &annotate("own"))
        .await
        .unwrap();
    let secrets: Api<Secret> =
        Api::namespaced(cluster.admin.clone(), "open-cluster-management-agent");
    eventually(LIMIT, "cluster1 connected to hub1 as localhost", || {
        let secrets = secrets.clone();
        let localhost = localhost.clone();
        async move {
            let s = secrets.get_opt("hub-kubeconfig-secret").await.unwrap()?;
            (hub_kubeconfig_server(&s) == localhost).then_some(())
        }
    })
    .await;
    eventually(LIMIT, "cluster1 Available on hub1", || async {
        available_on(&hub1, "cluster1").await.then_some(())
    })
    .await;
    put_target_bootstrap_secret(&admin, &hub2).await;
    // With the URL carried over, the current hub matches and the cluster stays.
    put_klusterlet_config(
        &admin,
        json!({"hubKubeAPIServerConfig": {"url": localhost},
               "multipleHubsConfig": {"genBootstrapKubeConfigStrategy": "IncludeCurrentHub", "bootstrapKubeConfigs": hub2_alone()}}),
    )
    .await;
    mcs.patch(
        "cluster1",
        &PatchParams::default(),
        &annotate("migration-hub2"),
    )
    .await
    .unwrap();
    eventually(LIMIT, "MultipleHubs on the cluster", || {
        let k = Api::<Klusterlet>::all(cluster.admin.clone());
        async move {
            let b = k
                .get("klusterlet")
                .await
                .ok()?
                .spec
                .registration_configuration?
                .bootstrap_kube_configs?;
            (b.local_secrets_config?.kube_config_secrets.len() == 2).then_some(())
        }
    })
    .await;
    stays_on_hub1(&hub1, &hub2, &agent, "bootstrap-hub2").await;
    // Without it, the current hub is rendered under 127.0.0.1 and the cluster leaves once
    // the agent starts again with that. (The change of `bootstrap-hub-kubeconfig` restarts it
    // in the middle of the apply, before the current hub's secret changes, as the import
    // controller renders that one after it: the agent restarted then still finds its hub,
    // and nothing restarts it once the work agent has written the rest. Its next restart,
    // a pod deleted here, does.)
    put_klusterlet_config(
        &admin,
        json!({"multipleHubsConfig": {"genBootstrapKubeConfigStrategy": "IncludeCurrentHub", "bootstrapKubeConfigs": hub2_alone()}}),
    )
    .await;
    let hub1_url = hub1.cluster.api.url();
    eventually(
        LIMIT,
        "the current hub rendered under its default URL",
        || {
            let secrets = secrets.clone();
            let hub1_url = hub1_url.clone();
            async move {
                let s = secrets
                    .get_opt("bootstrap-hub-kubeconfig-current-hub")
                    .await
                    .unwrap()?;
                (hub_kubeconfig_server(&s) == hub1_url).then_some(())
            }
        },
    )
    .await;
    agent.kill();
    eventually(
        LIMIT,
        "cluster1 gone to hub2 although hub1 accepts it",
        || async { available_on(&hub2, "cluster1").await.then_some(()) },
    )
    .await;
}

/// MCE 2.8 renders the older shape with the current hub appended: the cluster stays until
/// its hub stops accepting it.
#[tokio::test]
async fn an_older_klusterlet_config_on_mce_2_8_keeps_the_current_hub() {
    let (hub1, hub2, _cluster, _agent) = cluster_on_hub1_of_two_with(HubOptions {
        kind: HubKind::OlderAcm(OlderMce::Mce28),
        ..common::fast_hub()
    })
    .await;
    let admin = hub1.cluster.admin.clone();
    put_target_bootstrap_secret(&admin, &hub2).await;
    put_klusterlet_config(&admin, json!({"bootstrapKubeConfigs": hub2_alone()})).await;
    select_config(&admin, "cluster1", "migration-hub2").await;
    stays_on_hub1(&hub1, &hub2, &_agent, "bootstrap-hub2").await;
    stop_accepting(&hub1, "cluster1").await;
    eventually(LIMIT, "cluster1 on hub2", || async {
        available_on(&hub2, "cluster1").await.then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_older_klusterlet_config_names_the_target_alone_and_the_cluster_goes_there_at_once() {
    let (hub1, hub2, _cluster, _agent) = cluster_on_hub1_of_two_with(HubOptions {
        kind: HubKind::OlderAcm(OlderMce::Mce27),
        ..common::fast_hub()
    })
    .await;
    let admin = hub1.cluster.admin.clone();
    put_target_bootstrap_secret(&admin, &hub2).await;
    // The older CRD: no multipleHubsConfig, the bootstrap kubeconfigs directly under spec.
    put_klusterlet_config(&admin, json!({"bootstrapKubeConfigs": hub2_alone()})).await;
    select_config(&admin, "cluster1", "migration-hub2").await;
    // hub1 still accepts it, but the Klusterlet now names hub2 alone (MCE 2.7 renders no
    // current hub): the agent restarts with the new settings and goes there.
    eventually(LIMIT, "hub1 rendering hub2 alone", || async {
        let w = Api::<ManifestWork>::namespaced(hub1.cluster.admin.clone(), "cluster1")
            .get_opt("cluster1-klusterlet")
            .await
            .unwrap()?;
        let k = w.spec.workload?.manifests?.into_iter().find(|m| m["kind"] == "Klusterlet")?;
        (k["spec"]["registrationConfiguration"]["bootstrapKubeConfigs"]["localSecretsConfig"]["kubeConfigSecrets"]
            == json!([{"name": "bootstrap-hub2"}]))
        .then_some(())
    })
    .await;
    eventually(LIMIT, "cluster1 on hub2", || async {
        available_on(&hub2, "cluster1").await.then_some(())
    })
    .await;
}

/// Upstream work agent: a resource its work's deleteOption orphans never carries the
/// AppliedManifestWork as owner (`manageOwnerRef`, `manifestwork_reconciler.go`); once the
/// cluster serves another hub, the old hub's AppliedManifestWorks are evicted after the grace
/// period (`unmanaged_appliedmanifestwork_controller.go`) with what they alone own: an
/// orphaned resource, or one a work of the new hub owns too, stays.
#[tokio::test]
async fn a_hub_left_behind_is_evicted_with_what_it_alone_owned() {
    // A grace long enough for hub2's work to take the shared ConfigMap over first.
    let agent = AgentOptions {
        eviction_grace: Duration::from_secs(10),
        ..common::fast_agent()
    };
    let (hub1, hub2, cluster, _agent) = cluster_on_hub1_of_two_with_agent(plain_hub(), agent).await;
    let cm = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}});
    let payload = |name: &str, manifests: Vec<serde_json::Value>| -> ManifestWork {
        serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": name, "namespace": "cluster1"},
            "spec": {"workload": {"manifests": manifests},
                     "deleteOption": {"propagationPolicy": "SelectivelyOrphan", "selectivelyOrphans": {"orphaningRules": [
                         {"resource": "configmaps", "namespace": "default", "name": "kept"}]}}}
        }))
        .unwrap()
    };
    Api::<ManifestWork>::namespaced(hub1.cluster.admin.clone(), "cluster1")
        .create(
            &kube::api::PostParams::default(),
            &payload("payload", vec![cm("kept"), cm("owned"), cm("shared")]),
        )
        .await
        .unwrap();
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(cluster.admin.clone(), "default");
    let owners = |name: &'static str| {
        let cms = cms.clone();
        async move {
            cms.get_opt(name)
                .await
                .unwrap()
                .map(|c| c.metadata.owner_references.unwrap_or_default().len())
        }
    };
    eventually(LIMIT, "the payload applied", || async {
        (owners("owned").await == Some(1) && owners("shared").await == Some(1)).then_some(())
    })
    .await;
    assert_eq!(
        owners("kept").await,
        Some(0),
        "an orphaned resource has no owner"
    );
    // The cluster moves to hub2, where a work holds the shared ConfigMap too.
    offer_second_hub(&cluster, &hub2.bootstrap_kubeconfig).await;
    stop_accepting(&hub1, "cluster1").await;
    eventually(LIMIT, "cluster1 on hub2", || async {
        available_on(&hub2, "cluster1").await.then_some(())
    })
    .await;
    Api::<ManifestWork>::namespaced(hub2.cluster.admin.clone(), "cluster1")
        .create(
            &kube::api::PostParams::default(),
            &payload("holder", vec![cm("shared")]),
        )
        .await
        .unwrap();
    eventually(
        LIMIT,
        "the shared ConfigMap owned by both hubs' works",
        || async { (owners("shared").await == Some(2)).then_some(()) },
    )
    .await;
    eventually(LIMIT, "hub1's AppliedManifestWork evicted", || async {
        (owners("owned").await.is_none()).then_some(())
    })
    .await;
    assert_eq!(owners("kept").await, Some(0), "orphaned: kept");
    assert_eq!(
        owners("shared").await,
        Some(1),
        "still owned by hub2's work"
    );
}

/// Upstream `pkg/controller/manifestwork/manifestwork_controller.go` (`buildManifestConfigs`)
/// builds a klusterlet work's `manifestConfigs` afresh on every apply: ReadOnly for every
/// manifest while the cluster is annotated `disable-auto-import`, none once it is not. So
/// lifting the annotation lets the work update the Klusterlet again (what a rolled-back
/// migration relies on to render a cluster's own KlusterletConfig once more).
#[tokio::test]
async fn lifting_disable_auto_import_makes_the_klusterlet_work_apply_again() {
    let (hub1, _hub2, cluster, _agent) = cluster_on_hub1_of_two().await;
    let admin = hub1.cluster.admin.clone();
    let works: Api<ManifestWork> = Api::namespaced(admin.clone(), "cluster1");
    let read_only = |w: &ManifestWork| {
        let configs = w.spec.manifest_configs.clone().unwrap_or_default();
        !configs.is_empty()
            && configs
                .iter()
                .all(|c| serde_json::to_value(c).unwrap()["updateStrategy"]["type"] == "ReadOnly")
    };
    let disable = |v: serde_json::Value| {
        Patch::Merge(
            json!({"metadata": {"annotations": {ocm_sim::import::DISABLE_AUTO_IMPORT: v}}}),
        )
    };
    let mcs: Api<ManagedCluster> = Api::all(admin.clone());
    eventually(LIMIT, "cluster1's klusterlet work", || async {
        works
            .get_opt("cluster1-klusterlet")
            .await
            .unwrap()
            .map(|_| ())
    })
    .await;
    mcs.patch("cluster1", &PatchParams::default(), &disable(json!("")))
        .await
        .unwrap();
    eventually(LIMIT, "the klusterlet work made read-only", || async {
        let w = works.get_opt("cluster1-klusterlet").await.unwrap()?;
        read_only(&w).then_some(())
    })
    .await;
    // A KlusterletConfig of its own, selected while auto-import is disabled, and then the
    // annotation lifted: the work is writable again and the Klusterlet follows the config.
    Api::<migration_api::ocm::config::KlusterletConfig>::all(admin.clone())
        .patch("own", &PatchParams::apply("test").force(), &Patch::Apply(json!({
            "apiVersion": "config.open-cluster-management.io/v1alpha1", "kind": "KlusterletConfig",
            "metadata": {"name": "own"}, "spec": {"nodePlacement": {"nodeSelector": {"zone": "a"}}}
        })))
        .await
        .unwrap();
    select_config(&admin, "cluster1", "own").await;
    mcs.patch(
        "cluster1",
        &PatchParams::default(),
        &disable(serde_json::Value::Null),
    )
    .await
    .unwrap();
    eventually(LIMIT, "the klusterlet work writable again", || async {
        let w = works.get_opt("cluster1-klusterlet").await.unwrap()?;
        w.spec
            .manifest_configs
            .as_ref()
            .is_none_or(Vec::is_empty)
            .then_some(())
    })
    .await;
    let klusterlets: Api<Klusterlet> = Api::all(cluster.admin.clone());
    eventually(
        LIMIT,
        "the Klusterlet rendered from its own config",
        || async {
            let k = klusterlets.get_opt("klusterlet").await.unwrap()?;
            let v = serde_json::to_value(&k.spec).unwrap();
            (v["nodePlacement"]["nodeSelector"]["zone"] == "a").then_some(())
        },
    )
    .await;
}

/// A cluster created accepted (as a migration's target pre-creates one) gets its klusterlet
/// work only once its namespace is there: the import controller waits for it, as upstream's
/// waits for the cluster's import secret in it, instead of writing into a namespace that does
/// not exist yet, over and over.
#[tokio::test]
async fn the_import_controller_waits_for_a_clusters_namespace() {
    common::logs();
    let hub = Hub::start("hub1", common::fast_hub()).await.unwrap();
    let admin = hub.cluster.admin.clone();
    let api = &hub.cluster.api;
    let registration = "system:serviceaccount:open-cluster-management-hub:registration-controller";
    let import =
        "system:serviceaccount:open-cluster-management-hub:managedcluster-import-controller";
    // The registration controller cannot make namespaces for now (it applies them).
    api.faults().add_error(kube_sim::ErrorRule {
        verb: Some("patch".into()),
        resource: Some("namespaces".into()),
        rate: 1.0,
        code: 500,
        user: Some(registration.into()),
    });
    let mcs: Api<ManagedCluster> = Api::all(admin.clone());
    mcs.create(
        &Default::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "precreated"},
            "spec": {"hubAcceptsClient": true, "leaseDurationSeconds": 60}
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    let refused = |user: &str, verb: &str, resource: &str| -> u64 {
        api.metrics()
            .answers_to(user)
            .iter()
            .filter(|((v, r, code), _)| v == verb && r == resource && *code >= 400)
            .map(|(_, n)| *n)
            .sum()
    };
    eventually(LIMIT, "the namespace refused twice", || async {
        (refused(registration, "patch", "namespaces") >= 2).then_some(())
    })
    .await;
    let works: Api<ManifestWork> = Api::namespaced(admin.clone(), "precreated");
    assert_eq!(
        refused(import, "patch", "manifestworks"),
        0,
        "klusterlet work written before the cluster's namespace was there"
    );
    api.faults().clear();
    eventually(
        LIMIT,
        "the klusterlet work once the namespace is made",
        || async {
            works
                .get_opt("precreated-klusterlet")
                .await
                .ok()
                .flatten()
                .map(|_| ())
        },
    )
    .await;
    assert_eq!(refused(import, "patch", "manifestworks"), 0);
}

/// Creates work `rotate-bootstrap` for cluster1 on `hub`: cluster1's `bootstrap-hub-kubeconfig`
/// with one more key (the same hub, other data), then `after`. Returns hub's works of cluster1.
async fn rotate_bootstrap(hub: &Hub, after: Vec<serde_json::Value>) -> Api<ManifestWork> {
    let works: Api<ManifestWork> = Api::namespaced(hub.cluster.admin.clone(), "cluster1");
    let mut manifests = vec![json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "bootstrap-hub-kubeconfig", "namespace": "open-cluster-management-agent"},
        "stringData": {"kubeconfig": hub.bootstrap_kubeconfig, "rotated": "yes"}})];
    manifests.extend(after);
    let work: ManifestWork = serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": "rotate-bootstrap", "namespace": "cluster1"},
        "spec": {"workload": {"manifests": manifests}}
    }))
    .unwrap();
    works
        .create(&kube::api::PostParams::default(), &work)
        .await
        .unwrap();
    works
}

#[tokio::test]
async fn a_work_that_changes_the_bootstrap_kubeconfig_is_reported_by_the_agents_next_life() {
    // Upstream's singleton agent cancels its root context as soon as the bootstrap kubeconfig
    // changes (ocm `pkg/registration/spoke/event_handler.go`): the work agent, on that
    // context, stops in the middle of the apply that changed it, so that apply's status is
    // written by the next life of the process (which re-applies every work), not the
    // cancelled one.
    let (hub1, _hub2, cluster, agent) = cluster_on_hub1_of_two_with(plain_hub()).await;
    let before = agent.connected().expect("connected to hub1").life;
    let works = rotate_bootstrap(
        &hub1,
        vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "after-the-secret", "namespace": "open-cluster-management-agent"},
             "data": {"k": "v"}})],
    )
    .await;
    // The first report of the work applied, and which life of the process was connected then.
    let reporter = eventually(LIMIT, "the work reported applied", || async {
        let w = works.get("rotate-bootstrap").await.unwrap();
        w.applied().then(|| agent.connected().map(|c| c.life))
    })
    .await;
    assert!(
        reporter.is_some_and(|life| life > before),
        "the work's Applied was written while life {before} was being cancelled (connected now: {reporter:?}), not by a later life"
    );
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(cluster.admin.clone(), "open-cluster-management-agent");
    assert!(cms.get_opt("after-the-secret").await.unwrap().is_some());
    assert!(available_on(&hub1, "cluster1").await);
}

#[tokio::test]
async fn a_bootstrap_kubeconfig_changed_as_the_agent_starts_restarts_it() {
    // A work waiting while the agent restarts changes the bootstrap kubeconfig as soon as the
    // new life's work agent runs: upstream's registration agent watches that secret from
    // before its work agent starts, so the change restarts it, however soon it comes.
    let (hub1, _hub2, _cluster, agent) = cluster_on_hub1_of_two_with(plain_hub()).await;
    let first = agent.connected().expect("connected to hub1").life;
    agent.kill();
    eventually(LIMIT, "the agent between two lives", || async {
        agent.connected().is_none().then_some(())
    })
    .await;
    let works = rotate_bootstrap(&hub1, vec![]).await;
    // The life that applied it restarted: the one after the kill is not the last.
    eventually(LIMIT, "the agent restarted by the change", || async {
        agent.connected().filter(|c| c.life > first + 1).map(|_| ())
    })
    .await;
    eventually(LIMIT, "the work reported applied", || async {
        works
            .get("rotate-bootstrap")
            .await
            .unwrap()
            .applied()
            .then_some(())
    })
    .await;
}

/// Auto-import writes the klusterlet's manifests whole, as upstream's `ApplyResources`
/// (stolostron/managedcluster-import-controller `pkg/helpers/helpers.go`, `applyKlusterlet`)
/// replaces an existing Klusterlet's spec: a MultipleHubs list another writer left (here, as
/// another hub's klusterlet work leaves it) does not outlive the import.
#[tokio::test]
async fn auto_import_replaces_what_the_klusterlet_listed_before() {
    common::logs();
    let hub1 = Hub::start("hub1", common::fast_hub()).await.unwrap();
    let cluster = SimCluster::start("cluster1", Role::Managed).await.unwrap();
    let klusterlets: Api<Klusterlet> = Api::all(cluster.admin.clone());
    klusterlets
        .patch("klusterlet", &PatchParams::apply("work-agent"), &Patch::Apply(json!({
            "apiVersion": "operator.open-cluster-management.io/v1", "kind": "Klusterlet", "metadata": {"name": "klusterlet"},
            "spec": {"clusterName": "cluster1", "namespace": "open-cluster-management-agent",
                "registrationConfiguration": {
                "featureGates": [{"feature": "MultipleHubs", "mode": "Enable"}],
                "bootstrapKubeConfigs": {"type": "LocalSecrets", "localSecretsConfig": {
                    "kubeConfigSecrets": [{"name": "hub2-bootstrap"}],
                    "hubConnectionTimeoutSeconds": 180}}}}
        })))
        .await
        .unwrap();
    let admin = hub1.cluster.admin.clone();
    Api::<ManagedCluster>::all(admin.clone())
        .patch(
            "cluster1",
            &PatchParams::apply("test"),
            &Patch::Apply(json!({
                "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
                "metadata": {"name": "cluster1"}, "spec": {"hubAcceptsClient": true}
            })),
        )
        .await
        .unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .patch(
            "cluster1",
            &PatchParams::apply("test"),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "cluster1"}
            })),
        )
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "cluster1");
    secrets
        .patch(
            "auto-import-secret",
            &PatchParams::apply("test"),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "auto-import-secret", "namespace": "cluster1"},
                "stringData": {"kubeconfig": cluster.api.kubeconfig()}
            })),
        )
        .await
        .unwrap();
    eventually(
        LIMIT,
        "cluster1 imported (its auto-import-secret gone)",
        || async {
            let gone = secrets.get_opt("auto-import-secret").await.ok()?.is_none();
            gone.then_some(())
        },
    )
    .await;
    let k = klusterlets.get("klusterlet").await.unwrap();
    let reg = k.spec.registration_configuration.unwrap_or_default();
    assert!(reg.bootstrap_kube_configs.is_none(), "{reg:?}");
    assert!(
        !reg.feature_gates
            .iter()
            .flatten()
            .any(|g| g.feature == "MultipleHubs"),
        "{reg:?}"
    );
}

/// The klusterlet operator redeploys the agent when the Klusterlet's settings change, whatever
/// its process does (ocm `klusterlet_runtime_reconcile.go` applies the agent's Deployment,
/// and the Deployment rolls its pod): one that switched to a hub whose CSR approval never
/// comes, waiting there for its certificate, starts again with the new settings.
#[tokio::test]
async fn a_klusterlet_waiting_for_its_certificate_restarts_with_new_settings() {
    let (hub1, _, cluster, agent) = cluster_on_hub1_of_two_with(plain_hub()).await;
    let hub2 = Hub::start(
        "hub2-manual",
        HubOptions {
            auto_approve: false,
            ..plain_hub()
        },
    )
    .await
    .unwrap();
    offer_second_hub(&cluster, &hub2.bootstrap_kubeconfig).await;
    stop_accepting(&hub1, "cluster1").await;
    let csrs: Api<k8s_openapi::api::certificates::v1::CertificateSigningRequest> =
        Api::all(hub2.cluster.admin.clone());
    eventually(LIMIT, "cluster1 asking hub2 for a certificate", || async {
        let asked = !csrs.list(&Default::default()).await.ok()?.items.is_empty();
        (asked && agent.connected().is_none()).then_some(())
    })
    .await;
    // Its settings back to hub1 alone, and hub1 accepting it again.
    Api::<Klusterlet>::all(cluster.admin.clone())
        .patch("klusterlet", &PatchParams::apply("import-controller").force(), &Patch::Apply(json!({
            "apiVersion": "operator.open-cluster-management.io/v1", "kind": "Klusterlet", "metadata": {"name": "klusterlet"},
            "spec": {"registrationConfiguration": {"featureGates": []}}
        })))
        .await
        .unwrap();
    Api::<ManagedCluster>::all(hub1.cluster.admin.clone())
        .patch(
            "cluster1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hubAcceptsClient": true}})),
        )
        .await
        .unwrap();
    let hub1_url = hub1.cluster.api.url();
    eventually(LIMIT, "cluster1 connected to hub1 again", || async {
        let c = agent.connected()?;
        c.text.contains(&hub1_url).then_some(())
    })
    .await;
}
