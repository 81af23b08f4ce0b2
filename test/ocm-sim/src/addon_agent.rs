//! The klusterlet's addon side: for each ManagedClusterAddOn of its cluster it follows
//! `status.registrations` (a CSR for the addon's hub identity, then `<addon>-hub-kubeconfig` in
//! the addon's install namespace), and judges the addon's health from its Lease on the cluster
//! (Available True ManagedClusterAddOnLeaseUpdated, False …LeaseUpdateStopped after five lease
//! periods, Unknown …LeaseNotFound) unless `healthCheck.mode` is Customized. Approving the
//! addon's CSRs is the addon manager's job, not this agent's.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use base64::Engine;
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use migration_api::common::{Condition, set_condition};
use migration_api::names::labels::ADDON_NAME;
use migration_api::names::reasons::{LEASE_NOT_FOUND, LEASE_UPDATE_STOPPED, LEASE_UPDATED};
use migration_api::names::{
    DEFAULT_ADDON_INSTALL_NAMESPACE, KUBE_APISERVER_CLIENT_SIGNER, hub_kubeconfig_secret,
};
use migration_api::ocm::addon::ManagedClusterAddOn;
use serde_json::json;

use crate::Error;
use crate::klusterlet::secret_text;
use crate::names::CLUSTER_NAME_LABEL;

const MANAGER: &str = "registration-agent-addons";

/// Settings of the addon side of a klusterlet.
#[derive(Clone, Debug)]
pub struct AddonAgentOptions {
    pub cluster_name: String,
    /// The addon lease period; Available turns False after five periods without renewal.
    pub lease_period: Duration,
    /// How often addons are looked at.
    pub resync: Duration,
    /// The connections of the klusterlet agent's process (registration, work and addon
    /// agents share them, as the singleton klusterlet agent does).
    pub transports: kube_sim::client::Transports,
    /// The hub the process is connected to (set by its registration agent).
    pub connection: tokio::sync::watch::Receiver<Option<crate::klusterlet::Connected>>,
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// Pending CSR per (addon, signer): its name and the private key it was made with.
type Pending = HashMap<String, (String, String)>;

/// Runs until aborted: watches the ManagedClusterAddOns of its cluster on the hub its
/// klusterlet is registered with (starting over when the hub kubeconfig changes), acts on each
/// change, and every `resync` looks at every addon again (lease health, pending CSRs).
pub async fn run(managed: Client, opts: AddonAgentOptions) -> Result<(), Error> {
    let mut pending: Pending = HashMap::new();
    let mut connection = opts.connection.clone();
    loop {
        // Singleton mode: it runs only while the process is connected to a hub.
        let Some(seen) = crate::klusterlet::connected(&mut connection).await else {
            return Ok(());
        };
        let hub = opts.transports.client(&seen.text).await?;
        tokio::select! {
            r = serve_hub(&managed, &hub, &seen.text, &opts, &mut pending) => r?,
            _ = connection.wait_for(|c| c.as_ref() != Some(&seen)) => {}
        }
    }
}

/// Serves the addons of one hub until its watch ends.
async fn serve_hub(
    managed: &Client,
    hub: &Client,
    hub_text: &str,
    opts: &AddonAgentOptions,
    pending: &mut Pending,
) -> Result<(), Error> {
    let addons: Api<ManagedClusterAddOn> = Api::namespaced(hub.clone(), &opts.cluster_name);
    let mut known: BTreeMap<String, ManagedClusterAddOn> = BTreeMap::new();
    let mut changes =
        std::pin::pin!(watcher(addons.clone(), watcher::Config::default()).default_backoff());
    let mut tick = tokio::time::interval(opts.resync);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let due: Vec<ManagedClusterAddOn> = tokio::select! {
            ev = changes.next() => match ev {
                Some(Ok(watcher::Event::Apply(a) | watcher::Event::InitApply(a))) => {
                    known.insert(a.name_any(), a.clone());
                    vec![a]
                }
                Some(Ok(watcher::Event::Delete(a))) => {
                    known.remove(&a.name_any());
                    pending.remove(&a.name_any());
                    Vec::new()
                }
                Some(Ok(watcher::Event::Init)) => {
                    known.clear();
                    Vec::new()
                }
                Some(Ok(watcher::Event::InitDone)) => Vec::new(),
                Some(Err(e)) => {
                    tracing::debug!(cluster = %opts.cluster_name, error = %e, "watching addons");
                    Vec::new()
                }
                None => return Ok(()),
            },
            _ = tick.tick() => known.values().cloned().collect(),
        };
        for addon in due {
            if let Err(e) = sync_addon(managed, hub, hub_text, &addons, opts, &addon, pending).await
            {
                tracing::debug!(cluster = %opts.cluster_name, addon = %addon.name_any(), error = %e, "addon sync");
            }
        }
    }
}

/// Registration and health of one addon.
async fn sync_addon(
    managed: &Client,
    hub: &Client,
    hub_text: &str,
    addons: &Api<ManagedClusterAddOn>,
    opts: &AddonAgentOptions,
    addon: &ManagedClusterAddOn,
    pending: &mut Pending,
) -> Result<(), Error> {
    let ns = addon
        .status
        .as_ref()
        .and_then(|s| s.namespace.clone())
        .or_else(|| addon.spec.install_namespace.clone())
        .unwrap_or_else(|| DEFAULT_ADDON_INSTALL_NAMESPACE.to_owned());
    register(managed, hub, hub_text, opts, addon, &ns, pending).await?;
    judge_health(managed, addons, opts, addon, &ns).await
}

/// Follows `status.registrations` for the kube-apiserver-client signer.
async fn register(
    managed: &Client,
    hub: &Client,
    hub_text: &str,
    opts: &AddonAgentOptions,
    addon: &ManagedClusterAddOn,
    ns: &str,
    pending: &mut Pending,
) -> Result<(), Error> {
    let name = addon.name_any();
    let Some(reg) = addon
        .status
        .as_ref()
        .and_then(|s| s.registrations.as_ref())
        .and_then(|r| {
            r.iter()
                .find(|r| r.signer_name == KUBE_APISERVER_CLIENT_SIGNER)
        })
    else {
        return Ok(());
    };
    let subject = reg.subject.clone().unwrap_or_default();
    let user = subject.user.clone().unwrap_or_default();
    let groups = subject.groups.clone().unwrap_or_default();
    let secret_name = hub_kubeconfig_secret(&name);
    let secrets: Api<Secret> = Api::namespaced(managed.clone(), ns);
    // Up to date when the saved certificate names the same user.
    if let Some(existing) = secrets.get_opt(&secret_name).await? {
        let cert_user = secret_text(&existing, "tls.crt")
            .and_then(|pem| kube_sim::pki::first_cert_der(&pem))
            .and_then(|der| kube_sim::pki::identity_of(&der))
            .map(|(u, _)| u);
        if cert_user.as_deref() == Some(user.as_str()) {
            return Ok(());
        }
    }
    let csrs: Api<CertificateSigningRequest> = Api::all(hub.clone());
    let key = name.clone();
    if let Some((csr_name, key_pem)) = pending.get(&key).cloned() {
        let Some(csr) = csrs.get_opt(&csr_name).await? else {
            pending.remove(&key);
            return Ok(());
        };
        let Some(cert) = csr
            .status
            .and_then(|s| s.certificate)
            .map(|c| String::from_utf8_lossy(&c.0).into_owned())
        else {
            return Ok(());
        };
        let (server, ca) = kube::config::Kubeconfig::from_yaml(hub_text)
            .ok()
            .and_then(|k| k.clusters.first().and_then(|c| c.cluster.clone()))
            .map(|c| (c.server.unwrap_or_default(), c.certificate_authority_data))
            .unwrap_or_default();
        let ca_line = ca
            .map(|c| format!("    certificate-authority-data: {c}\n"))
            .unwrap_or_default();
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: {server}\n{ca_line}users:\n- name: addon\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: hub\n  context:\n    cluster: hub\n    user: addon\ncurrent-context: hub\n",
            b64(&cert),
            b64(&key_pem)
        );
        let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(managed.clone());
        ns_api
            .patch(
                ns,
                &PatchParams::apply(MANAGER),
                &Patch::Apply(
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                ),
            )
            .await?;
        let mut data = BTreeMap::new();
        for (k, v) in [
            ("kubeconfig", kubeconfig.as_str()),
            ("tls.crt", cert.as_str()),
            ("tls.key", key_pem.as_str()),
            ("cluster-name", opts.cluster_name.as_str()),
        ] {
            data.insert(k.to_owned(), ByteString(v.as_bytes().to_vec()));
        }
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(secret_name.clone()),
                namespace: Some(ns.to_owned()),
                ..Default::default()
            },
            data: Some(data),
            ..Default::default()
        };
        secrets
            .patch(
                &secret_name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&secret),
            )
            .await?;
        pending.remove(&key);
        return Ok(());
    }
    let (csr_pem, key_pem) =
        kube_sim::pki::make_csr(&user, &groups).map_err(|e| Error::Setup(e.to_string()))?;
    let csr: CertificateSigningRequest = serde_json::from_value(json!({
        "metadata": {"generateName": format!("addon-{}-{name}-", opts.cluster_name),
                     "labels": {CLUSTER_NAME_LABEL: opts.cluster_name, ADDON_NAME: name}},
        "spec": {"request": b64(&csr_pem), "signerName": KUBE_APISERVER_CLIENT_SIGNER,
                 "usages": ["digital signature", "key encipherment", "client auth"]}
    }))?;
    let created = csrs.create(&PostParams::default(), &csr).await?;
    pending.insert(key, (created.name_any(), key_pem));
    Ok(())
}

/// Judges the addon's Available condition from its lease on the cluster.
async fn judge_health(
    managed: &Client,
    addons: &Api<ManagedClusterAddOn>,
    opts: &AddonAgentOptions,
    addon: &ManagedClusterAddOn,
    ns: &str,
) -> Result<(), Error> {
    let mode = addon
        .status
        .as_ref()
        .and_then(|s| s.health_check.as_ref())
        .and_then(|h| h.mode.clone());
    if mode.as_deref() == Some("Customized") {
        return Ok(());
    }
    let name = addon.name_any();
    let lease = Api::<Lease>::namespaced(managed.clone(), ns)
        .get_opt(&name)
        .await?;
    let grace = 5.0 * opts.lease_period.as_secs_f64();
    let (status, reason, message) = match lease.and_then(|l| l.spec).and_then(|s| s.renew_time) {
        None => (
            "Unknown",
            LEASE_NOT_FOUND,
            format!("The status of {name} add-on is unknown."),
        ),
        Some(t) => {
            let age =
                (jiff::Timestamp::now().as_millisecond() - t.0.as_millisecond()) as f64 / 1000.0;
            if age <= grace {
                (
                    "True",
                    LEASE_UPDATED,
                    format!("{name} add-on is available."),
                )
            } else {
                (
                    "False",
                    LEASE_UPDATE_STOPPED,
                    format!("{name} add-on is not available."),
                )
            }
        }
    };
    let mut current: Vec<Condition> = addon
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|cs| {
            cs.iter()
                .filter(|c| c.type_ == "Available")
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    if set_condition(&mut current, "Available", status, reason, &message, None) {
        addons
            .patch_status(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(json!({
                "apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
                "metadata": {"name": name, "namespace": opts.cluster_name},
                "status": {"conditions": current}
            })))
            .await?;
    }
    Ok(())
}
