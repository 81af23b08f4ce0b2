//! A ManagedServiceAccount yields a token that authenticates on the managed hub, and is refused
//! once the ManagedServiceAccount is deleted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::eventually;

/// How long each wait here may take.
const LIMIT: Duration = Duration::from_secs(30);

use std::time::Duration;

use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use migration_api::common::condition_is_true;
use migration_api::ocm::msa::ManagedServiceAccount;
use ocm_sim::fleet::{Fleet, FleetOptions};
use serde_json::json;

/// A fleet of one hub and no clusters, whose addons resync every `resync`, and a
/// ManagedServiceAccount `name` (one hour's tokens) created for hub1 on the global hub.
async fn fleet_with_msa(resync: Duration, name: &str) -> (Fleet, Api<ManagedServiceAccount>) {
    let opts = FleetOptions {
        hubs: 1,
        clusters_per_hub: 0,
        join_delay: Duration::ZERO,
        lease_duration_secs: 1,
        lease_check_interval: Duration::from_millis(200),
        status_sync_interval: resync,
        ..Default::default()
    };
    let fleet = Fleet::up(&opts).await.unwrap();
    fleet.wait_ready(Duration::from_secs(30)).await.unwrap();
    let msas: Api<ManagedServiceAccount> =
        Api::namespaced(fleet.global.cluster.admin.clone(), "hub1");
    let msa: ManagedServiceAccount = serde_json::from_value(json!({
        "apiVersion": "authentication.open-cluster-management.io/v1beta1", "kind": "ManagedServiceAccount",
        "metadata": {"name": name, "namespace": "hub1"},
        "spec": {"rotation": {"enabled": true, "validity": "1h"}}
    }))
    .unwrap();
    msas.create(&PostParams::default(), &msa).await.unwrap();
    (fleet, msas)
}

#[tokio::test]
async fn managed_serviceaccount_token_works_until_revoked() {
    let (fleet, msas) = fleet_with_msa(Duration::from_millis(200), "migration-bootstrap").await;
    let global = fleet.global.cluster.admin.clone();
    let done = eventually(LIMIT, "the token to be reported", || {
        let msas = msas.clone();
        async move {
            let m = msas.get("migration-bootstrap").await.unwrap();
            let st = m.status.clone()?;
            (condition_is_true(st.conditions.as_deref().unwrap_or(&[]), "TokenReported")
                && st.token_secret_ref.is_some())
            .then_some(m)
        }
    })
    .await;
    // Reported, the token is left alone: a second of resyncs (200 ms each here) sends nothing,
    // as upstream's token reconciler reads its ManagedServiceAccounts, Secrets and
    // ServiceAccounts from caches and acts on events.
    let agent =
        "system:serviceaccount:open-cluster-management-agent-addon:managed-serviceaccount-hub1";
    let global_metrics = fleet.global.cluster.api.metrics();
    let hub1_metrics = fleet.hubs[0].cluster.api.metrics();
    // What it asks beyond its watches (a watch that ends is listed and watched again).
    let asked = |m: &kube_sim::Metrics| -> u64 {
        m.access_log()
            .iter()
            .filter(|(a, _)| a.user == agent && !matches!(a.verb.as_str(), "list" | "watch"))
            .map(|(_, n)| n)
            .sum()
    };
    let sa_writes = |m: &kube_sim::Metrics| {
        m.total(Some("patch"), Some("serviceaccounts"))
            + m.total(Some("create"), Some("serviceaccounts"))
            + m.total(Some("patch"), Some("namespaces"))
    };
    // Settled: the status write's own event has reached the agent's cache.
    eventually(LIMIT, "the agent to go quiet", || {
        let before = (asked(global_metrics), sa_writes(hub1_metrics));
        async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            (asked(global_metrics), sa_writes(hub1_metrics))
                .eq(&before)
                .then_some(())
        }
    })
    .await;
    let status = done.status.unwrap();
    let expires = status.expiration_timestamp.unwrap().0;
    let hours = (expires.as_second() - jiff::Timestamp::now().as_second()) as f64 / 3600.0;
    assert!(
        (0.9..=1.01).contains(&hours),
        "validity honoured: {hours} h"
    );
    let secrets: Api<Secret> = Api::namespaced(global.clone(), "hub1");
    let secret = secrets.get("migration-bootstrap").await.unwrap();
    let data = secret.data.unwrap();
    let token = String::from_utf8(data["token"].0.clone()).unwrap();
    let hub1 = &fleet.hubs[0].cluster;
    assert_eq!(
        String::from_utf8(data["ca.crt"].0.clone()).unwrap(),
        hub1.api.ca_pem()
    );
    // The token authenticates on hub1 as the managed ServiceAccount.
    let client = hub1.client_for_token(&token).await.unwrap();
    let ssar: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let review = serde_json::from_value(
        json!({"spec": {"nonResourceAttributes": {"verb": "get", "path": "/version"}}}),
    )
    .unwrap();
    assert!(
        ssar.create(&PostParams::default(), &review)
            .await
            .unwrap()
            .status
            .unwrap()
            .allowed
    );
    match Api::<ConfigMap>::namespaced(client.clone(), "default").list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert!(
            s.code == 403 && s.message.contains("system:serviceaccount:open-cluster-management-managed-serviceaccount:migration-bootstrap"),
            "{}",
            s.message
        ),
        other => panic!("{other:?}"),
    }
    // Revocation: deleting the ManagedServiceAccount deletes the ServiceAccount; the token stops working.
    msas.delete("migration-bootstrap", &DeleteParams::default())
        .await
        .unwrap();
    eventually(LIMIT, "the token to be refused", || {
        let client = client.clone();
        async move {
            match Api::<ConfigMap>::namespaced(client, "default")
                .list(&ListParams::default())
                .await
            {
                Err(kube::Error::Api(s)) if s.code == 401 => Some(()),
                _ => None,
            }
        }
    })
    .await;
    eventually(LIMIT, "the hub secret to be collected", || {
        let secrets = secrets.clone();
        async move {
            secrets
                .get_opt("migration-bootstrap")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        }
    })
    .await;
}

/// Upstream's token reconciler acts on a ManagedServiceAccount's event (managed-serviceaccount
/// `pkg/addon/agent/controller/token.go`): its token is reported, and its ServiceAccount
/// revoked once it is deleted, long before the next periodic resync (an hour here).
#[tokio::test]
async fn a_managed_serviceaccount_is_served_when_its_event_arrives() {
    let (fleet, msas) = fleet_with_msa(Duration::from_secs(3600), "prompt").await;
    // Well within the hour the periodic resync would take.
    let soon = Duration::from_secs(20);
    eventually(soon, "the token to be reported on the event", || {
        let msas = msas.clone();
        async move {
            let st = msas.get("prompt").await.unwrap().status?;
            (condition_is_true(st.conditions.as_deref().unwrap_or(&[]), "TokenReported")
                && st.token_secret_ref.is_some())
            .then_some(())
        }
    })
    .await;
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(
        fleet.hubs[0].cluster.admin.clone(),
        ocm_sim::msa::MSA_NAMESPACE,
    );
    assert!(sas.get_opt("prompt").await.unwrap().is_some());
    msas.delete("prompt", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        soon,
        "the ServiceAccount to be revoked on the event",
        || {
            let sas = sas.clone();
            async move { sas.get_opt("prompt").await.unwrap().is_none().then_some(()) }
        },
    )
    .await;
}
