//! Addon registration (CSR for the addon's identity, `<addon>-hub-kubeconfig` on the cluster)
//! and lease-based addon health, as the klusterlet does them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::eventually;

/// How long each wait here may take.
const LIMIT: Duration = Duration::from_secs(30);

use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use migration_api::common::find_condition;
use migration_api::ocm::addon::ManagedClusterAddOn;
use migration_api::ocm::cluster::ManagedCluster;
use ocm_sim::cluster::{Role, SimCluster};
use ocm_sim::hub::{Agent, AgentOptions, Hub, HubKind, HubOptions};
use ocm_sim::registration::RegistrationOptions;
use serde_json::json;

fn available(a: &ManagedClusterAddOn) -> Option<(String, String)> {
    let c = find_condition(a.status.as_ref()?.conditions.as_deref()?, "Available")?;
    Some((c.status.clone(), c.reason.clone()))
}

#[tokio::test]
async fn addon_gets_its_hub_identity_and_its_health_follows_its_lease() {
    common::logs();
    let hub = Hub::start(
        "hub1",
        HubOptions {
            auto_approve: true,
            registration: RegistrationOptions {
                lease_check_interval: Duration::from_millis(200),
            },
            kind: HubKind::Acm,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let cluster = SimCluster::start("cluster1", Role::Managed).await.unwrap();
    let opts = AgentOptions {
        join_delay: Duration::ZERO,
        lease_duration_secs: 1,
        status_sync_interval: Duration::from_millis(200),
        addon_lease_period: Duration::from_secs(1),
        raw_feedback_json: false,
        hub_timeout: None,
        eviction_grace: Duration::from_secs(3600),
    };
    let _agent = Agent::start(&cluster, &hub.bootstrap_kubeconfig, opts)
        .await
        .unwrap();
    let mcs: Api<ManagedCluster> = Api::all(hub.cluster.admin.clone());
    eventually(LIMIT, "cluster1 accepted", || {
        let mcs = mcs.clone();
        // HubAcceptedManagedCluster comes after the cluster namespace and RBAC exist.
        async move {
            let m = mcs.get_opt("cluster1").await.unwrap()?;
            let c = m
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_deref())
                .unwrap_or(&[]);
            migration_api::common::condition_is_true(c, "HubAcceptedManagedCluster").then_some(())
        }
    })
    .await;
    let addons: Api<ManagedClusterAddOn> = Api::namespaced(hub.cluster.admin.clone(), "cluster1");
    let addon: ManagedClusterAddOn = serde_json::from_value(json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
        "metadata": {"name": "demo", "namespace": "cluster1"}, "spec": {"installNamespace": "demo-ns"}
    }))
    .unwrap();
    addons.create(&PostParams::default(), &addon).await.unwrap();
    let user = migration_api::names::addon_agent_user("cluster1", "demo", "agent");
    let groups = migration_api::names::addon_agent_groups("cluster1", "demo");
    addons
        .patch_status("demo", &PatchParams::apply("addon-manager"), &Patch::Apply(json!({
            "apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
            "metadata": {"name": "demo", "namespace": "cluster1"},
            "status": {"namespace": "demo-ns", "registrations": [{"signerName": "kubernetes.io/kube-apiserver-client",
                "subject": {"user": user, "groups": groups}}]}
        })))
        .await
        .unwrap();
    // The agent asks for the addon's certificate; the addon's manager (here: the test) approves.
    let csrs: Api<CertificateSigningRequest> = Api::all(hub.cluster.admin.clone());
    let csr = eventually(LIMIT, "the addon CSR", || {
        let csrs = csrs.clone();
        async move {
            csrs.list(&ListParams::default().labels("open-cluster-management.io/addon-name=demo"))
                .await
                .unwrap()
                .items
                .into_iter()
                .next()
        }
    })
    .await;
    let pem = String::from_utf8(csr.spec.request.0.clone()).unwrap();
    assert_eq!(
        kube_sim::pki::csr_subject(&pem).unwrap(),
        (user.clone(), groups)
    );
    let approval = json!({"status": {"conditions": [{"type": "Approved", "status": "True", "reason": "AddonApproved", "message": "ok"}]}});
    csrs.patch_approval(
        csr.metadata.name.as_deref().unwrap(),
        &PatchParams::default(),
        &Patch::Merge(approval),
    )
    .await
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(cluster.admin.clone(), "demo-ns");
    let secret = eventually(LIMIT, "demo-hub-kubeconfig", || {
        let secrets = secrets.clone();
        async move { secrets.get_opt("demo-hub-kubeconfig").await.unwrap() }
    })
    .await;
    let kubeconfig = String::from_utf8(secret.data.unwrap()["kubeconfig"].0.clone()).unwrap();
    let as_addon = kube_sim::client_from_kubeconfig(&kubeconfig).await.unwrap();
    // The certificate authenticates as the addon's user: a request it may not make names it.
    let err = Api::<ConfigMap>::namespaced(as_addon, "kube-system")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => assert!(s.code == 403 && s.message.contains(&user), "{}", s.message),
        other => panic!("{other:?}"),
    }

    // Health: no lease yet, then a fresh lease, then a stale one.
    let with = |want: &'static str| {
        let addons = addons.clone();
        move || {
            let addons = addons.clone();
            async move {
                addons
                    .get("demo")
                    .await
                    .ok()
                    .and_then(|a| available(&a))
                    .filter(|(_, r)| r == want)
            }
        }
    };
    eventually(
        LIMIT,
        "LeaseNotFound",
        with("ManagedClusterAddOnLeaseNotFound"),
    )
    .await;
    let leases: Api<Lease> = Api::namespaced(cluster.admin.clone(), "demo-ns");
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    leases
        .patch("demo", &PatchParams::apply("demo-agent"), &Patch::Apply(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "demo", "namespace": "demo-ns"},
            "spec": {"renewTime": now, "leaseDurationSeconds": 1}
        })))
        .await
        .unwrap();
    let (status, _) = eventually(
        LIMIT,
        "LeaseUpdated",
        with("ManagedClusterAddOnLeaseUpdated"),
    )
    .await;
    assert_eq!(status, "True");
    let (status, _) = eventually(
        LIMIT,
        "LeaseUpdateStopped",
        with("ManagedClusterAddOnLeaseUpdateStopped"),
    )
    .await;
    assert_eq!(status, "False");
    leases
        .delete("demo", &DeleteParams::default())
        .await
        .unwrap();
    let (status, _) = eventually(
        LIMIT,
        "LeaseNotFound again",
        with("ManagedClusterAddOnLeaseNotFound"),
    )
    .await;
    assert_eq!(status, "Unknown");
}
