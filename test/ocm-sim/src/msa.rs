//! The managed-serviceaccount addon, for one managed cluster: for each ManagedServiceAccount in
//! the cluster's namespace on its hub, a ServiceAccount on the cluster, a token with the
//! requested validity projected into the hub secret of the same name (`token`, `ca.crt`),
//! `tokenSecretRef`, `expirationTimestamp` and the SecretCreated/TokenReported conditions;
//! rotation before expiry; and revocation (the ServiceAccount deleted) once the
//! ManagedServiceAccount is gone.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use migration_api::common::{Condition, set_condition};
use migration_api::migration::parse_duration;
use migration_api::ocm::msa::ManagedServiceAccount;
use migration_api::runtime::cached_watch;
use serde_json::json;

use crate::Error;

/// Name of the addon (its ManagedClusterAddOn on the hub).
pub const ADDON_NAME: &str = "managed-serviceaccount";
/// Namespace of the managed ServiceAccounts on the managed cluster.
pub const MSA_NAMESPACE: &str = "open-cluster-management-managed-serviceaccount";
/// Label on the ServiceAccounts this addon manages.
pub const MSA_LABEL: &str = "authentication.open-cluster-management.io/is-managed-serviceaccount";
const MANAGER: &str = "managed-serviceaccount-addon-agent";
/// Upstream's default validity.
const DEFAULT_VALIDITY: Duration = Duration::from_secs(8640 * 3600);

/// What the agent reads, each kept by a watch, as upstream's token reconciler reads its caches
/// (managed-serviceaccount `pkg/addon/agent/controller/token.go`: the ManagedServiceAccounts
/// and token Secrets on the hub, the ServiceAccounts on the cluster): a sync sends requests
/// only for what needs doing.
struct Caches {
    msas: Store<ManagedServiceAccount>,
    secrets: Store<Secret>,
    sas: Store<ServiceAccount>,
}

/// Runs the addon for one cluster until aborted. `hub` is the addon's hub identity (it may
/// read and write ManagedServiceAccounts and Secrets in the cluster's namespace).
pub async fn run(
    hub: Client,
    managed: Client,
    cluster: String,
    managed_ca_pem: String,
    resync: Duration,
) -> Result<(), Error> {
    let (msas, msa_events) = cached_watch(
        Api::<ManagedServiceAccount>::namespaced(hub.clone(), &cluster),
        watcher::Config::default(),
    );
    let (secrets, secret_events) = cached_watch(
        Api::<Secret>::namespaced(hub.clone(), &cluster),
        watcher::Config::default(),
    );
    let (sas, sa_events) = cached_watch(
        Api::<ServiceAccount>::namespaced(managed.clone(), MSA_NAMESPACE),
        watcher::Config::default().labels(MSA_LABEL),
    );
    let caches = Caches { msas, secrets, sas };
    // Upstream's token reconciler is a controller on ManagedServiceAccounts that also watches
    // their Secrets and the managed ServiceAccounts (managed-serviceaccount
    // `pkg/addon/agent/controller/token.go`, `SetupWithManager`): a change is acted on when
    // its event arrives, not at the next resync. Events that come while a sync runs are
    // served by one more sync (a sync covers every ManagedServiceAccount).
    let changed = tokio::sync::Notify::new();
    let syncing = async {
        if caches.msas.wait_until_ready().await.is_err()
            || caches.secrets.wait_until_ready().await.is_err()
            || caches.sas.wait_until_ready().await.is_err()
        {
            return;
        }
        let mut tick = tokio::time::interval(resync);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = changed.notified() => {}
            }
            if let Err(e) = sync(&hub, &managed, &cluster, &managed_ca_pem, &caches).await {
                tracing::debug!(%cluster, error = %e, "managed-serviceaccount sync");
            }
        }
    };
    let wake = || {
        changed.notify_one();
        async {}
    };
    tokio::select! {
        _ = async {
            futures::join!(
                msa_events.for_each(|_| wake()),
                secret_events.for_each(|_| wake()),
                sa_events.for_each(|_| wake())
            )
        } => {}
        () = syncing => {}
    }
    Ok(())
}

async fn sync(
    hub: &Client,
    managed: &Client,
    cluster: &str,
    ca_pem: &str,
    caches: &Caches,
) -> Result<(), Error> {
    let sas: Api<ServiceAccount> = Api::namespaced(managed.clone(), MSA_NAMESPACE);
    let list = caches.msas.state();
    let wanted: BTreeSet<String> = list
        .iter()
        .filter(|m| m.meta().deletion_timestamp.is_none())
        .map(|m| m.name_any())
        .collect();
    // Revoke: a managed ServiceAccount whose ManagedServiceAccount is gone is deleted.
    for sa in caches.sas.state() {
        if !wanted.contains(&sa.name_any()) {
            match sas.delete(&sa.name_any(), &DeleteParams::default()).await {
                Ok(_) => {}
                // Deleted meanwhile; the cache has not seen it yet.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    let mut namespace_applied = false;
    for msa in list.iter().filter(|m| wanted.contains(&m.name_any())) {
        let name = msa.name_any();
        // The ServiceAccount made when missing (upstream creates it, AlreadyExists being no
        // error), in its namespace.
        if caches
            .sas
            .get(&ObjectRef::new(&name).within(MSA_NAMESPACE))
            .is_none()
        {
            if !namespace_applied {
                let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(managed.clone());
                ns_api
                    .patch(MSA_NAMESPACE, &PatchParams::apply(MANAGER), &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MSA_NAMESPACE}})))
                    .await?;
                namespace_applied = true;
            }
            sas.patch(
                &name,
                &PatchParams::apply(MANAGER),
                &Patch::Apply(json!({
                    "apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": name, "namespace": MSA_NAMESPACE, "labels": {MSA_LABEL: "true"}}
                })),
            )
            .await?;
        }
        let secret_exists = caches
            .secrets
            .get(&ObjectRef::new(&name).within(cluster))
            .is_some();
        reconcile(hub, &sas, cluster, ca_pem, msa, secret_exists).await?;
    }
    Ok(())
}

/// The token of `msa`: issued when its secret is missing or its expiry near.
async fn reconcile(
    hub: &Client,
    sas: &Api<ServiceAccount>,
    cluster: &str,
    ca_pem: &str,
    msa: &ManagedServiceAccount,
    secret_exists: bool,
) -> Result<(), Error> {
    let name = msa.name_any();
    let validity = msa
        .spec
        .rotation
        .validity
        .as_deref()
        .and_then(parse_duration)
        .unwrap_or(DEFAULT_VALIDITY);
    let now = jiff::Timestamp::now();
    let status = msa.status.clone().unwrap_or_default();
    let msas: Api<ManagedServiceAccount> = Api::namespaced(hub.clone(), cluster);
    // Refresh when missing, or with less than a fifth of the validity left.
    let fresh = status.expiration_timestamp.as_ref().is_some_and(|exp| {
        let left = exp.0.as_second() - now.as_second();
        left > i64::try_from(validity.as_secs() / 5).unwrap_or(i64::MAX)
    });
    if secret_exists && fresh {
        return Ok(());
    }
    let token = match issue(hub, sas, cluster, ca_pem, msa, validity).await {
        Ok(t) => t,
        Err(e) => {
            // As upstream's token reconciler on a failed sync (managed-serviceaccount
            // pkg/addon/agent/controller/token.go, Reconcile): TokenReported False with the
            // error, the rest of the status (tokenSecretRef, expiry) as it was.
            let mut conditions: Vec<Condition> = status.conditions.clone().unwrap_or_default();
            set_condition(
                &mut conditions,
                "TokenReported",
                "False",
                "TokenReportFailed",
                &e.to_string(),
                None,
            );
            msas.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": conditions}})),
            )
            .await?;
            return Err(e);
        }
    };
    let mut conditions: Vec<Condition> = status.conditions.clone().unwrap_or_default();
    set_condition(
        &mut conditions,
        "SecretCreated",
        "True",
        "SecretCreated",
        "The token secret is created",
        None,
    );
    set_condition(
        &mut conditions,
        "TokenReported",
        "True",
        "TokenReported",
        "The token is reported",
        None,
    );
    msas.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "conditions": conditions,
            "expirationTimestamp": token.expiration_timestamp,
            "tokenSecretRef": {"name": name, "lastRefreshTimestamp": migration_api::common::now()}
        }})),
    )
    .await?;
    Ok(())
}

/// Requests a token for `msa`'s ServiceAccount and writes it to the hub Secret of the same name.
async fn issue(
    hub: &Client,
    sas: &Api<ServiceAccount>,
    cluster: &str,
    ca_pem: &str,
    msa: &ManagedServiceAccount,
    validity: Duration,
) -> Result<k8s_openapi::api::authentication::v1::TokenRequestStatus, Error> {
    let name = msa.name_any();
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), cluster);
    let tr: TokenRequest = serde_json::from_value(
        json!({"spec": {"audiences": [], "expirationSeconds": validity.as_secs()}}),
    )?;
    let token = sas
        .create_token_request(&name, &PostParams::default(), &tr)
        .await?
        .status
        .ok_or_else(|| Error::Setup(format!("no token for {name}")))?;
    let mut data = BTreeMap::new();
    data.insert(
        "token".to_owned(),
        ByteString(token.token.as_bytes().to_vec()),
    );
    data.insert("ca.crt".to_owned(), ByteString(ca_pem.as_bytes().to_vec()));
    let owner = msa.controller_owner_ref(&()).map(|o| vec![o]);
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(cluster.to_owned()),
            owner_references: owner,
            ..Default::default()
        },
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    secrets
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await?;
    Ok(token)
}
