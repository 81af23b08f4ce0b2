//! The klusterlet's registration agent: bootstraps from `bootstrap-hub-kubeconfig`, creates its
//! ManagedCluster and CSR on the hub, waits for the certificate and for acceptance, saves
//! `hub-kubeconfig-secret`, reports Joined, claims and version, and renews its lease. When the
//! hub stops accepting it (or deletes it), it starts over from the bootstrap kubeconfig.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use migration_api::common::{Condition, set_condition};
use migration_api::names::BOOTSTRAP_HUB_KUBECONFIG;
use migration_api::names::conditions::JOINED;
use migration_api::ocm::cluster::{ClusterClaim, ManagedCluster};
use migration_api::ocm::operator::Klusterlet;
use serde_json::json;

use crate::Error;
use crate::names::{
    self, AGENT_NAMESPACE, CLUSTER_LEASE, CLUSTER_NAME_LABEL, HUB_KUBECONFIG_SECRET,
};

const MANAGER: &str = "registration-agent";

/// Settings of one klusterlet.
#[derive(Clone, Debug)]
pub struct KlusterletOptions {
    pub cluster_name: String,
    pub agent_name: String,
    /// URL and CA (PEM) of the managed cluster's own API, reported to the hub.
    pub api_url: String,
    pub api_ca_pem: String,
    /// Simulated time to join (image pulls, pod start-up); zero in fast tests.
    pub join_delay: Duration,
    pub lease_duration_secs: i32,
    /// The connections of the klusterlet agent's process (registration, work and addon
    /// agents share them, as the singleton klusterlet agent does).
    pub transports: kube_sim::client::Transports,
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A Secret's value as text.
pub(crate) fn secret_text(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .and_then(|v| String::from_utf8(v.0.clone()).ok())
}

/// The hub kubeconfig the agent saved, as the work and addon agents use it.
pub(crate) struct HubKubeconfig {
    pub text: String,
    /// The Secret's resourceVersion: a new certificate or a new hub changes it.
    version: String,
}

/// Waits until `hub-kubeconfig-secret` (in `secrets`' namespace) holds a kubeconfig.
pub(crate) async fn hub_kubeconfig(secrets: &Api<Secret>) -> Result<HubKubeconfig, Error> {
    loop {
        let secret = await_condition(
            secrets.clone(),
            HUB_KUBECONFIG_SECRET,
            |s: Option<&Secret>| s.is_some_and(|s| secret_text(s, "kubeconfig").is_some()),
        )
        .await
        .map_err(|e| Error::Setup(format!("waiting for the hub kubeconfig: {e}")))?;
        if let Some(found) = secret.as_ref().and_then(|s| {
            Some(HubKubeconfig {
                text: secret_text(s, "kubeconfig")?,
                version: s.resource_version()?,
            })
        }) {
            return Ok(found);
        }
    }
}

/// Resolves once `hub-kubeconfig-secret` is no longer the one `seen` was read from.
pub(crate) async fn hub_kubeconfig_changed(secrets: &Api<Secret>, seen: &HubKubeconfig) {
    let version = seen.version.clone();
    let changed = await_condition(
        secrets.clone(),
        HUB_KUBECONFIG_SECRET,
        move |s: Option<&Secret>| {
            s.and_then(|s| s.resource_version()).as_deref() != Some(version.as_str())
        },
    );
    if let Err(e) = changed.await {
        tracing::debug!(error = %e, "watching the hub kubeconfig");
    }
}

/// Server URL and CA data of a kubeconfig's current cluster.
fn kubeconfig_server(text: &str) -> Option<(String, Option<String>)> {
    let kc = kube::config::Kubeconfig::from_yaml(text).ok()?;
    let cluster = kc.clusters.first()?.cluster.as_ref()?;
    Some((
        cluster.server.clone()?,
        cluster.certificate_authority_data.clone(),
    ))
}

/// The Klusterlet's registration settings, as the agent compares them: the operator redeploys
/// the registration agent when they change, so the agent starts over and selects again.
fn registration_settings(k: Option<&Klusterlet>) -> String {
    serde_json::to_string(&k.and_then(|k| k.spec.registration_configuration.as_ref()))
        .unwrap_or_default()
}

/// What the agent starts a session with.
struct Candidates {
    /// The bootstrap kubeconfigs, in order.
    texts: Vec<String>,
    hub_timeout: Duration,
    /// [`registration_settings`] of the Klusterlet they came from.
    settings: String,
}

/// The bootstrap kubeconfigs the agent may use, in order, and the hub connection timeout: the
/// Klusterlet's `bootstrapKubeConfigs` (LocalSecrets) when the MultipleHubs feature gate is on,
/// else `bootstrap-hub-kubeconfig` alone.
async fn candidates(managed: &Client, secrets: &Api<Secret>) -> Result<Candidates, Error> {
    let klusterlet = Api::<Klusterlet>::all(managed.clone())
        .get_opt("klusterlet")
        .await?;
    let settings = registration_settings(klusterlet.as_ref());
    let reg = klusterlet
        .as_ref()
        .and_then(|k| k.spec.registration_configuration.as_ref());
    let multiple = reg.and_then(|r| r.feature_gates.as_ref()).is_some_and(|g| {
        g.iter()
            .any(|f| f.feature == "MultipleHubs" && f.mode.as_deref() == Some("Enable"))
    });
    let local = reg
        .and_then(|r| r.bootstrap_kube_configs.as_ref())
        .filter(|b| b.type_ == "LocalSecrets")
        .and_then(|b| b.local_secrets_config.as_ref());
    let (names, timeout) = match (multiple, local) {
        (true, Some(l)) => (
            l.kube_config_secrets
                .iter()
                .map(|s| s.name.clone())
                .collect(),
            Duration::from_secs(
                u64::try_from(l.hub_connection_timeout_seconds.unwrap_or(600)).unwrap_or(600),
            ),
        ),
        _ => (
            vec![BOOTSTRAP_HUB_KUBECONFIG.to_owned()],
            Duration::from_secs(600),
        ),
    };
    let mut texts = Vec::new();
    for name in names {
        if let Some(text) = secrets
            .get_opt(&name)
            .await?
            .and_then(|s| secret_text(&s, "kubeconfig"))
        {
            texts.push(text);
        }
    }
    Ok(Candidates {
        texts,
        hub_timeout: timeout,
        settings,
    })
}

/// Whether a bootstrap kubeconfig is usable: its identity may create CSRs on that hub, and the
/// hub, if it already has this cluster, accepts it.
async fn usable(boot_text: &str, opts: &KlusterletOptions) -> bool {
    let cluster = opts.cluster_name.as_str();
    let Ok(boot) = opts.transports.client(boot_text).await else {
        return false;
    };
    let ssar: Api<SelfSubjectAccessReview> = Api::all(boot.clone());
    let review = json!({"spec": {"resourceAttributes": {"verb": "create", "group": "certificates.k8s.io", "resource": "certificatesigningrequests"}}});
    let Ok(review) = serde_json::from_value(review) else {
        return false;
    };
    let allowed = match ssar.create(&PostParams::default(), &review).await {
        Ok(r) => r.status.is_some_and(|s| s.allowed),
        Err(_) => false,
    };
    if !allowed {
        return false;
    }
    match Api::<ManagedCluster>::all(boot).get_opt(cluster).await {
        Ok(Some(mc)) => mc.spec.hub_accepts_client,
        Ok(None) => true,
        Err(_) => false,
    }
}

/// Runs the agent until the task is aborted.
pub async fn run(managed: Client, opts: KlusterletOptions) -> Result<(), Error> {
    let secrets: Api<Secret> = Api::namespaced(managed.clone(), AGENT_NAMESPACE);
    // How long to wait before looking for a usable hub again.
    let retry = Duration::from_secs(u64::try_from(opts.lease_duration_secs).unwrap_or(1).max(1));
    loop {
        await_condition(
            secrets.clone(),
            BOOTSTRAP_HUB_KUBECONFIG,
            |s: Option<&Secret>| s.and_then(|s| secret_text(s, "kubeconfig")).is_some(),
        )
        .await
        .map_err(|e| Error::Setup(format!("waiting for the bootstrap kubeconfig: {e}")))?;
        let found = candidates(&managed, &secrets).await?;
        let mut selected = None;
        for text in &found.texts {
            if usable(text, &opts).await {
                selected = Some(text);
                break;
            }
        }
        let Some(boot_text) = selected else {
            tracing::debug!(cluster = %opts.cluster_name, "no usable bootstrap kubeconfig");
            tokio::time::sleep(retry).await;
            continue;
        };
        match session(&managed, &secrets, boot_text, &opts, &found).await {
            Ok(()) => tracing::info!(cluster = %opts.cluster_name, "restarting registration"),
            Err(e) => {
                tracing::debug!(cluster = %opts.cluster_name, error = %e, "registration attempt failed");
                tokio::time::sleep(retry).await;
            }
        }
    }
}

/// One connection to one hub; returns when the agent must start over.
async fn session(
    managed: &Client,
    secrets: &Api<Secret>,
    boot_text: &str,
    opts: &KlusterletOptions,
    found: &Candidates,
) -> Result<(), Error> {
    let hub_timeout = found.hub_timeout;
    let (server, ca) = kubeconfig_server(boot_text)
        .ok_or_else(|| Error::Setup("bootstrap kubeconfig has no cluster".into()))?;
    let boot = opts.transports.client(boot_text).await?;
    let existing = secrets.get_opt(HUB_KUBECONFIG_SECRET).await?;
    let hub_text = match existing.and_then(|s| secret_text(&s, "kubeconfig")) {
        Some(t) if kubeconfig_server(&t).is_some_and(|(s, _)| s == server) => t,
        _ => register(&boot, secrets, &server, ca.as_deref(), opts).await?,
    };
    let hub = opts.transports.client(&hub_text).await?;
    let name = opts.cluster_name.clone();
    // Acceptance is visible to the bootstrap identity too; the agent's own RBAC comes with it.
    let clusters_boot: Api<ManagedCluster> = Api::all(boot.clone());
    await_condition(clusters_boot, &name, |mc: Option<&ManagedCluster>| {
        mc.is_some_and(|m| {
            m.spec.hub_accepts_client
                && m.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter().any(|c| {
                            c.type_ == migration_api::names::conditions::HUB_ACCEPTED
                                && c.status == "True"
                        })
                    })
        })
    })
    .await
    .map_err(|e| Error::Setup(format!("waiting for acceptance: {e}")))?;
    report_joined(managed, &hub, opts).await?;
    let leases: Api<Lease> = Api::namespaced(hub.clone(), &name);
    let clusters: Api<ManagedCluster> = Api::all(hub.clone());
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut watch = std::pin::pin!(watcher(clusters, cfg));
    let period = Duration::from_secs(u64::try_from(opts.lease_duration_secs).unwrap_or(60).max(1));
    let mut tick = tokio::time::interval(period);
    let mut last_contact = std::time::Instant::now();
    let klusterlets: Api<Klusterlet> = Api::all(managed.clone());
    let own = watcher::Config::default().fields("metadata.name=klusterlet");
    let mut config_watch = std::pin::pin!(watcher(klusterlets, own));
    loop {
        tokio::select! {
            ev = config_watch.next() => match ev {
                Some(Ok(watcher::Event::Apply(k) | watcher::Event::InitApply(k)))
                    if registration_settings(Some(&k)) != found.settings =>
                {
                    tracing::info!(cluster = %name, "Klusterlet registration settings changed; the agent restarts");
                    return Ok(());
                }
                Some(Err(e)) => {
                    tracing::debug!(cluster = %name, error = %e, "watching its Klusterlet");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                _ => {}
            },
            _ = tick.tick() => {
                let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
                match leases.patch(CLUSTER_LEASE, &PatchParams::default(), &Patch::Merge(json!({"spec": {"renewTime": now}}))).await {
                    Ok(_) => last_contact = std::time::Instant::now(),
                    Err(e) => {
                        tracing::debug!(cluster = %name, error = %e, "lease renewal failed");
                        if last_contact.elapsed() > hub_timeout {
                            tracing::info!(cluster = %name, "hub unreachable past the connection timeout");
                            return Ok(());
                        }
                    }
                }
            }
            ev = watch.next() => match ev {
                Some(Ok(watcher::Event::Apply(mc) | watcher::Event::InitApply(mc))) if !mc.spec.hub_accepts_client => {
                    tracing::info!(cluster = %name, "hub no longer accepts this cluster");
                    return Ok(());
                }
                Some(Ok(watcher::Event::Delete(_))) => return Ok(()),
                Some(Err(kube::runtime::watcher::Error::WatchError(s))) if s.code == 403 || s.code == 401 => return Ok(()),
                Some(Err(e)) => {
                    tracing::debug!(cluster = %name, error = %e, "watching its ManagedCluster");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Some(Ok(_)) => {}
                None => return Ok(()),
            },
        }
    }
}

/// Creates the ManagedCluster (if absent) and a CSR; waits for the certificate; saves
/// `hub-kubeconfig-secret`; returns its kubeconfig.
async fn register(
    boot: &Client,
    secrets: &Api<Secret>,
    server: &str,
    ca: Option<&str>,
    opts: &KlusterletOptions,
) -> Result<String, Error> {
    if !opts.join_delay.is_zero() {
        tokio::time::sleep(opts.join_delay).await;
    }
    let name = &opts.cluster_name;
    let clusters: Api<ManagedCluster> = Api::all(boot.clone());
    if clusters.get_opt(name).await?.is_none() {
        let mc: ManagedCluster = serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": name},
            "spec": {"hubAcceptsClient": false, "leaseDurationSeconds": opts.lease_duration_secs,
                     "managedClusterClientConfigs": [{"url": opts.api_url, "caBundle": b64(&opts.api_ca_pem)}]}
        }))?;
        match clusters.create(&PostParams::default(), &mc).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let user = names::agent_user(name, &opts.agent_name);
    let groups = vec![
        names::cluster_group(name),
        names::MANAGED_CLUSTERS_GROUP.to_owned(),
    ];
    let (csr_pem, key_pem) =
        kube_sim::pki::make_csr(&user, &groups).map_err(|e| Error::Setup(e.to_string()))?;
    let csrs: Api<CertificateSigningRequest> = Api::all(boot.clone());
    let csr: CertificateSigningRequest = serde_json::from_value(json!({
        "metadata": {"generateName": format!("{name}-"), "labels": {CLUSTER_NAME_LABEL: name}},
        "spec": {"request": b64(&csr_pem), "signerName": migration_api::names::KUBE_APISERVER_CLIENT_SIGNER,
                 "usages": ["digital signature", "key encipherment", "client auth"]}
    }))?;
    let created = csrs.create(&PostParams::default(), &csr).await?;
    let issued = await_condition(
        csrs,
        &created.name_any(),
        |c: Option<&CertificateSigningRequest>| {
            c.and_then(|c| c.status.as_ref()).is_some_and(|s| {
                s.certificate.is_some()
                    || s.conditions
                        .iter()
                        .flatten()
                        .any(|c| c.type_ == "Denied" && c.status == "True")
            })
        },
    )
    .await
    .map_err(|e| Error::Setup(format!("waiting for the certificate: {e}")))?;
    // A denied request sends the agent back to choosing a hub, as the real one does when its
    // bootstrap attempt fails.
    if issued
        .as_ref()
        .and_then(|c| c.status.as_ref())
        .is_some_and(|s| s.certificate.is_none())
    {
        return Err(Error::Setup(format!(
            "CSR {} was denied",
            created.name_any()
        )));
    }
    let cert = issued
        .and_then(|c| c.status)
        .and_then(|s| s.certificate)
        .map(|c| String::from_utf8_lossy(&c.0).into_owned())
        .ok_or_else(|| Error::Setup("the CSR disappeared".into()))?;
    let ca_line = ca
        .map(|c| format!("    certificate-authority-data: {c}\n"))
        .unwrap_or_default();
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: {server}\n{ca_line}users:\n- name: agent\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: hub\n  context:\n    cluster: hub\n    user: agent\ncurrent-context: hub\n",
        b64(&cert),
        b64(&key_pem)
    );
    let mut data = BTreeMap::new();
    for (k, v) in [
        ("kubeconfig", kubeconfig.as_str()),
        ("tls.crt", cert.as_str()),
        ("tls.key", key_pem.as_str()),
        ("cluster-name", name.as_str()),
        ("agent-name", opts.agent_name.as_str()),
    ] {
        data.insert(k.to_owned(), ByteString(v.as_bytes().to_vec()));
    }
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(HUB_KUBECONFIG_SECRET.into()),
            namespace: Some(AGENT_NAMESPACE.into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    secrets
        .patch(
            HUB_KUBECONFIG_SECRET,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await?;
    Ok(kubeconfig)
}

/// Reports Joined, the cluster's claims and its version in ManagedCluster status.
async fn report_joined(
    managed: &Client,
    hub: &Client,
    opts: &KlusterletOptions,
) -> Result<(), Error> {
    let claims: Vec<_> = Api::<ClusterClaim>::all(managed.clone())
        .list(&ListParams::default())
        .await?
        .into_iter()
        .map(|c| json!({"name": c.name_any(), "value": c.spec.value.unwrap_or_default()}))
        .collect();
    let mut conditions: Vec<Condition> = Vec::new();
    set_condition(
        &mut conditions,
        JOINED,
        "True",
        "ManagedClusterJoined",
        "Managed cluster joined",
        None,
    );
    let version = managed.apiserver_version().await?.git_version;
    let clusters: Api<ManagedCluster> = Api::all(hub.clone());
    clusters
        .patch_status(&opts.cluster_name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": opts.cluster_name},
            "status": {"conditions": conditions, "clusterClaims": claims, "version": {"kubernetes": version},
                       "capacity": {"cpu": "8", "memory": "32Gi"}, "allocatable": {"cpu": "7", "memory": "30Gi"}}
        })))
        .await?;
    Ok(())
}
