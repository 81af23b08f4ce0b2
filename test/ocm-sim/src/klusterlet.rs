//! The klusterlet's registration agent, one run per life of the agent process (Singleton mode,
//! ACM's default: registration, work and addon agents in one process), as upstream's
//! `pkg/registration/spoke/spokeagent.go` (open-cluster-management-io/ocm) runs it:
//!
//! 1. **Selection.** Without the MultipleHubs feature gate the agent takes
//!    `bootstrap-hub-kubeconfig` as it is. With it, it takes the Klusterlet's
//!    `bootstrapKubeConfigs` in order (`selectBootstrapKubeConfigs` in
//!    `pkg/registration/spoke/bootstrapkubeconfigs.go`): first the one whose server is its
//!    current hub's, if that one is valid (a failed one ends this first pass), then the first
//!    valid one. Valid: the bootstrap identity passes the self access reviews for creating its
//!    ManagedCluster and CSRs, and the hub either has no such cluster or accepts it. With none
//!    valid, the process exits (the caller restarts it with a back-off).
//! 2. **Bootstrap**, only when the saved hub kubeconfig is not for the selected hub (same
//!    server and CA, `IsHubKubeconfigValid` in `pkg/registration/register/common.go`):
//!    create the ManagedCluster (or, where the bootstrap identity may, add this cluster's URL
//!    to the `managedClusterClientConfigs` of one that exists, `creating_controller.go`),
//!    create a CSR and wait for its certificate for as long as it takes: a denied CSR is just
//!    not approved (`IsApproved` in `pkg/registration/register/csr/certificate.go`), and only
//!    a CSR that disappears makes the agent ask again. Nothing here re-selects a hub.
//! 3. **Connected**: the work and addon agents start now, with the hub kubeconfig
//!    ([`Connection`]). The agent reports Joined and Available once the hub accepted it (its
//!    status controller, at every change of its ManagedCluster), renews its lease, and (with
//!    MultipleHubs only) restarts when the hub stops accepting it (`hub_accept_controller.go`,
//!    which can only see that while it may still read its ManagedCluster) or its lease on the
//!    hub is older than `hubConnectionTimeoutSeconds` (`hub_timeout_controller.go`, checked at
//!    least every minute, not in the first 10 s). A deleted ManagedCluster restarts it only through
//!    that timeout. It also restarts when `bootstrap-hub-kubeconfig` changes
//!    (`event_handler.go`) and when the Klusterlet's settings rendered into its pod template
//!    change (the operator redeploys it, [`pod_settings`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use base64::Engine;
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use migration_api::common::{Condition, condition_is_true, set_condition};
use migration_api::names::BOOTSTRAP_HUB_KUBECONFIG;
use migration_api::names::conditions::{CLUSTER_AVAILABLE, HUB_ACCEPTED, JOINED};
use migration_api::ocm::cluster::{ClusterClaim, ManagedCluster, ManagedClusterClaim};
use migration_api::ocm::operator::{Klusterlet, KlusterletRegistrationConfiguration};
use serde_json::json;
use tokio::sync::watch;

use crate::Error;
use crate::names::{
    self, AGENT_NAMESPACE, CLUSTER_LEASE, CLUSTER_NAME_LABEL, HUB_KUBECONFIG_SECRET,
};

const MANAGER: &str = "registration-agent";
/// `hubConnectionTimeoutSeconds` when the Klusterlet sets none (the CRD's default).
const DEFAULT_HUB_TIMEOUT: Duration = Duration::from_secs(600);

/// The hub the agent process is connected to, once bootstrap is done: the work and addon
/// agents run while it is `Some`, and start over when it changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Connected {
    /// The hub kubeconfig (the agent's own certificate).
    pub text: String,
    /// Counts the agent process's lives.
    pub life: u64,
    /// The Klusterlet's [`pod_settings`] this life started with (JSON).
    pub settings: String,
}

/// Shared by the agents of one klusterlet process.
pub type Connection = watch::Sender<Option<Connected>>;

/// Settings of one klusterlet.
#[derive(Clone, Debug)]
pub struct KlusterletOptions {
    pub cluster_name: String,
    pub agent_name: String,
    /// URL and CA (PEM) of the managed cluster's own API, reported to the hub.
    pub api_url: String,
    pub api_ca_pem: String,
    /// Simulated time to join a hub (pod start-up, the bootstrap's round trips), spent by a
    /// life that bootstraps, not by one that resumes with its saved hub kubeconfig; zero in
    /// fast tests.
    pub join_delay: Duration,
    pub lease_duration_secs: i32,
    /// Replaces the Klusterlet's `hubConnectionTimeoutSeconds` (at least 180 upstream) so
    /// tests need not wait minutes; `None` keeps it.
    pub hub_timeout: Option<Duration>,
    /// The connections of the klusterlet agent's process (registration, work and addon
    /// agents share them, as the singleton klusterlet agent does).
    pub transports: kube_sim::client::Transports,
    /// Where the process tells its work and addon agents which hub it is connected to.
    pub connection: Connection,
    /// Ends the process's current life at once (a pod killed), for tests.
    pub kill: std::sync::Arc<tokio::sync::Notify>,
    /// Counts the connected lives of the process (the connection is reset between lives).
    pub lives: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Where the process tells its work agent that it cancelled its context: one more than the
    /// last life that ended so ([`cancelled`]).
    pub cancels: Cancels,
    /// The Klusterlet's settings the agent's pod runs with ([`pod_settings`],
    /// read as each life starts): the operator replaces the pod when they change, also while
    /// its container waits out a restart back-off ([`replaced`]).
    pub deployed: Deployed,
}

/// The settings a klusterlet's pod was deployed with ([`pod_settings`]), `None` before its first life
/// read them.
pub type Deployed = std::sync::Arc<watch::Sender<Option<String>>>;

/// Shared by the registration and work agents of one klusterlet process: one more than the
/// number of the last life whose context the registration agent cancelled.
pub type Cancels = watch::Sender<u64>;

/// A life that ends because the registration agent restarts to select a hub (its hub no longer
/// accepts the cluster, its lease went stale past the hub connection timeout, its bootstrap
/// kubeconfig changed or went): upstream's agent cancels the singleton process's root context
/// (`agentStopFunc`, ocm `pkg/registration/spoke/spokeagent.go`; `bootstrapKubeconfigEventHandler`,
/// `pkg/registration/spoke/event_handler.go`; the work agent runs on the same context,
/// `pkg/singleton/spoke/agent.go`), so the work agent's applies and status writes under way
/// stop at once, unlike a pod replaced, whose old pod runs on until the new one is ready.
fn cancelled(opts: &KlusterletOptions, life: u64) -> Life {
    opts.cancels.send_replace(life + 1);
    Life::Exited
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

/// Waits until the process is connected to a hub; `None` when the channel is gone.
pub(crate) async fn connected(rx: &mut watch::Receiver<Option<Connected>>) -> Option<Connected> {
    rx.wait_for(Option::is_some)
        .await
        .ok()
        .and_then(|c| c.clone())
}

/// Server URL and CA data of a kubeconfig's current cluster.
pub(crate) fn kubeconfig_server(text: &str) -> Option<(String, Option<String>)> {
    let kc = kube::config::Kubeconfig::from_yaml(text).ok()?;
    let cluster = kc.clusters.first()?.cluster.as_ref()?;
    Some((
        cluster.server.clone()?,
        cluster.certificate_authority_data.clone(),
    ))
}

/// What of the Klusterlet the operator renders into the singleton agent's pod template (ocm
/// `manifests/klusterlet/management/klusterlet-agent-deployment.yaml`, filled by
/// `klusterlet_controller.go`), as JSON: a change of it replaces the pod. Upstream renders
/// the cluster name, `imagePullSpec` (the singleton image; the registration and work images
/// are for the Default mode's two Deployments), the external server URLs, the node placement,
/// the registration and work feature gates, the bootstrap kubeconfig secrets and hub
/// connection timeout only with MultipleHubs on (`populateBootstrap`), the work status sync
/// interval, the cluster annotations with the `agent.open-cluster-management.io` prefix only
/// (`FilterClusterAnnotations`, ocm `pkg/common/helpers/annotations.go`) and the larger of the
/// registration and work QPS and burst. `clusterLabels` is not rendered: the operator never
/// reads it, so a change of it alone leaves the pod running. Feature gates are compared as
/// listed; upstream drops those set to their default (`ConvertToFeatureGateFlags`), so this is
/// stricter only in replacing a pod for a gate set to its default.
fn pod_settings(k: Option<&Klusterlet>) -> String {
    let Some(k) = k else {
        return String::new();
    };
    let spec = &k.spec;
    let reg = spec.registration_configuration.as_ref();
    let work = spec.work_configuration.as_ref();
    let gates = reg.and_then(|r| r.feature_gates.as_ref());
    let multiple_hubs = multiple_hubs(reg);
    let bootstrap = reg
        .and_then(|r| r.bootstrap_kube_configs.as_ref())
        .filter(|_| multiple_hubs)
        .and_then(|b| {
            b.local_secrets_config
                .as_ref()
                .filter(|_| b.type_ == "LocalSecrets")
        })
        .map(|l| {
            let names: Vec<&str> = l
                .kube_config_secrets
                .iter()
                .map(|s| s.name.as_str())
                .collect();
            (names, l.hub_connection_timeout_seconds)
        });
    let annotations: BTreeMap<&String, &String> = reg
        .and_then(|r| r.cluster_annotations.as_ref())
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("agent.open-cluster-management.io"))
        .collect();
    let urls: Vec<&str> = spec
        .external_server_urls
        .iter()
        .flatten()
        .map(|u| u.url.as_str())
        .collect();
    serde_json::json!({
        "clusterName": spec.cluster_name,
        "image": spec.image_pull_spec,
        "externalServerURLs": urls,
        "nodePlacement": spec.node_placement,
        "multipleHubs": multiple_hubs,
        "bootstrap": bootstrap,
        "registrationFeatureGates": gates,
        "workFeatureGates": work.and_then(|w| w.feature_gates.as_ref()),
        "statusSyncInterval": work.and_then(|w| w.status_sync_interval.as_ref()),
        "clusterAnnotations": annotations,
        "kubeAPIQPS": reg.and_then(|r| r.kube_api_qps),
        "kubeAPIBurst": reg.and_then(|r| r.kube_api_burst),
    })
    .to_string()
}

/// Whether the registration agent runs with the MultipleHubs feature gate on.
fn multiple_hubs(reg: Option<&KlusterletRegistrationConfiguration>) -> bool {
    reg.and_then(|r| r.feature_gates.as_ref()).is_some_and(|g| {
        g.iter()
            .any(|f| f.feature == "MultipleHubs" && f.mode.as_deref() == Some("Enable"))
    })
}

/// Resolves when the klusterlet operator replaces the agent's pod, deployed from the Klusterlet
/// settings `deployed` ([`pod_settings`]): once the Klusterlet's are no longer those. The
/// operator renders them into the agent Deployment's pod template (`--bootstrap-kubeconfigs`, the feature gates;
/// ocm `manifests/klusterlet/management/klusterlet-agent-deployment.yaml`, applied at each
/// Klusterlet change by `klusterlet_runtime_reconcile.go`), whatever its pod is doing: a pod
/// whose container waits out the kubelet's restart back-off is replaced too, and the new pod
/// starts at once (the back-off is kept per pod, kubernetes
/// `pkg/kubelet/kuberuntime/kuberuntime_manager.go`). Never resolves for `None`.
pub async fn replaced(managed: Client, deployed: Option<String>) {
    let Some(deployed) = deployed else {
        return std::future::pending().await;
    };
    let own = watcher::Config::default().fields("metadata.name=klusterlet");
    let mut changes = std::pin::pin!(watcher(Api::<Klusterlet>::all(managed), own));
    while let Some(ev) = changes.next().await {
        match ev {
            Ok(watcher::Event::Apply(k) | watcher::Event::InitApply(k))
                if pod_settings(Some(&k)) != deployed =>
            {
                return;
            }
            Err(e) => {
                tracing::debug!(error = %e, "watching the Klusterlet");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            _ => {}
        }
    }
    std::future::pending().await
}

/// What the agent starts a life with.
struct Candidates {
    /// The bootstrap kubeconfigs, in order.
    texts: Vec<String>,
    /// Whether the MultipleHubs feature gate is on.
    multiple_hubs: bool,
    hub_timeout: Duration,
    /// [`pod_settings`] of the Klusterlet they came from.
    settings: String,
}

/// The bootstrap kubeconfigs the agent may use, in order, and the hub connection timeout: the
/// Klusterlet's `bootstrapKubeConfigs` (LocalSecrets) when the MultipleHubs feature gate is on,
/// else `bootstrap-hub-kubeconfig` alone. A listed secret that does not exist is left out.
async fn candidates(managed: &Client, secrets: &Api<Secret>) -> Result<Candidates, Error> {
    let klusterlet = Api::<Klusterlet>::all(managed.clone())
        .get_opt(migration_api::names::KLUSTERLET)
        .await?;
    let settings = pod_settings(klusterlet.as_ref());
    let reg = klusterlet
        .as_ref()
        .and_then(|k| k.spec.registration_configuration.as_ref());
    let multiple_hubs = multiple_hubs(reg);
    let local = reg
        .and_then(|r| r.bootstrap_kube_configs.as_ref())
        .filter(|b| b.type_ == "LocalSecrets")
        .and_then(|b| b.local_secrets_config.as_ref());
    let (names, timeout) = match (multiple_hubs, local) {
        (true, Some(l)) => (
            l.kube_config_secrets
                .iter()
                .map(|s| s.name.clone())
                .collect(),
            l.hub_connection_timeout_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(DEFAULT_HUB_TIMEOUT, Duration::from_secs),
        ),
        _ => (
            vec![BOOTSTRAP_HUB_KUBECONFIG.to_owned()],
            DEFAULT_HUB_TIMEOUT,
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
        multiple_hubs,
        hub_timeout: timeout,
        settings,
    })
}

/// Whether a bootstrap kubeconfig is valid (`checkBootstrapKubeConfigValid`): its identity
/// passes the bootstrap self access reviews (`GetBootstrapSSARs`: create and get
/// ManagedClusters; create, get, list and watch CSRs) and the hub, if it has this cluster,
/// accepts it.
async fn valid(boot_text: &str, opts: &KlusterletOptions) -> bool {
    let Ok(boot) = opts.transports.client(boot_text).await else {
        return false;
    };
    let ssar: Api<SelfSubjectAccessReview> = Api::all(boot.clone());
    let reviews = [
        (
            "cluster.open-cluster-management.io",
            "managedclusters",
            "create",
        ),
        (
            "cluster.open-cluster-management.io",
            "managedclusters",
            "get",
        ),
        (
            "certificates.k8s.io",
            "certificatesigningrequests",
            "create",
        ),
        ("certificates.k8s.io", "certificatesigningrequests", "get"),
        ("certificates.k8s.io", "certificatesigningrequests", "list"),
        ("certificates.k8s.io", "certificatesigningrequests", "watch"),
    ];
    for (group, resource, verb) in reviews {
        let review = json!({"spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource}}});
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
    }
    match Api::<ManagedCluster>::all(boot)
        .get_opt(&opts.cluster_name)
        .await
    {
        Ok(Some(mc)) => mc.spec.hub_accepts_client,
        Ok(None) => true,
        Err(_) => false,
    }
}

/// The bootstrap kubeconfig this life uses, as `selectBootstrapKubeConfigs` picks it; `None`
/// when none is valid.
async fn select<'a>(
    found: &'a Candidates,
    current_server: Option<&str>,
    opts: &KlusterletOptions,
) -> Option<&'a String> {
    if !found.multiple_hubs {
        return found.texts.first();
    }
    for text in &found.texts {
        let server = kubeconfig_server(text).map(|(s, _)| s);
        if server.is_some() && server.as_deref() == current_server {
            if valid(text, opts).await {
                return Some(text);
            }
            break;
        }
    }
    for text in &found.texts {
        if valid(text, opts).await {
            return Some(text);
        }
    }
    None
}

/// Sets the connection back to `None` when the agent process's life ends, however it ends.
struct Disconnect<'a>(&'a Connection);

impl Drop for Disconnect<'_> {
    fn drop(&mut self) {
        self.0.send_replace(None);
    }
}

/// How one life of the agent process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    /// The process exited: the kubelet starts it again in the same pod, after the container's
    /// restart back-off.
    Exited,
    /// The pod was replaced: deleted, or redeployed by the klusterlet operator for new
    /// settings (the Deployment's template changed); the new pod's container has no back-off.
    Replaced,
}

/// One life of the agent process: returns when the process would exit (the caller starts the
/// next one after a restart back-off), or when it is killed ([`KlusterletOptions::kill`]); an
/// error when no bootstrap kubeconfig is valid.
pub async fn run(managed: Client, opts: KlusterletOptions) -> Result<Life, Error> {
    let kill = opts.kill.clone();
    tokio::select! {
        r = life(managed, &opts) => r,
        () = kill.notified() => {
            tracing::info!(cluster = %opts.cluster_name, "the agent process was killed");
            Ok(Life::Replaced)
        }
    }
}

async fn life(managed: Client, opts: &KlusterletOptions) -> Result<Life, Error> {
    let opts = opts.clone();
    let _disconnect = Disconnect(&opts.connection);
    opts.connection.send_replace(None);
    let secrets: Api<Secret> = Api::namespaced(managed.clone(), AGENT_NAMESPACE);
    await_condition(
        secrets.clone(),
        BOOTSTRAP_HUB_KUBECONFIG,
        |s: Option<&Secret>| s.and_then(|s| secret_text(s, "kubeconfig")).is_some(),
    )
    .await
    .map_err(|e| Error::Setup(format!("waiting for the bootstrap kubeconfig: {e}")))?;
    let mut choice = choose(&managed, &secrets, &opts).await?;
    // Joining takes its time only where the life bootstraps: one that finds its saved hub
    // kubeconfig valid for the selected hub skips the bootstrap (ocm
    // `pkg/registration/spoke/spokeagent.go`, `internalHubConfigValidFunc` before the
    // bootstrap controller), as after a restart for a rewritten bootstrap kubeconfig.
    if choice.resumes.is_none() && !opts.join_delay.is_zero() {
        tokio::time::sleep(opts.join_delay).await;
        choice = choose(&managed, &secrets, &opts).await?;
    }
    opts.deployed
        .send_replace(Some(choice.found.settings.clone()));
    tracing::debug!(cluster = %opts.cluster_name, server = %choice.selected.0, "bootstrap kubeconfig selected");
    let hub_text = match choice.resumes.take() {
        Some(t) => t,
        // The operator replaces the pod when the Klusterlet's settings change whatever its
        // process does (it applies the agent's Deployment at each change,
        // `klusterlet_runtime_reconcile.go`, and the Deployment rolls the pod), a process that
        // waits for its bootstrap CSR too.
        None => tokio::select! {
            r = bootstrap(&secrets, &choice.boot_text, &choice.selected, &opts) => r?,
            () = replaced(managed.clone(), Some(choice.found.settings.clone())) => {
                tracing::info!(cluster = %opts.cluster_name, "the Klusterlet's pod settings changed while it bootstrapped; the operator redeploys the agent");
                return Ok(Life::Replaced);
            }
        },
    };
    connected_life(&managed, &secrets, &hub_text, &opts, &choice.found).await
}

/// What a life of the agent starts from: the bootstrap kubeconfigs it found, the one it
/// selected (and its server), and the saved hub kubeconfig when that is for the selected hub
/// (no bootstrap then).
struct Choice {
    found: Candidates,
    boot_text: String,
    selected: (String, Option<String>),
    resumes: Option<String>,
}

async fn choose(
    managed: &Client,
    secrets: &Api<Secret>,
    opts: &KlusterletOptions,
) -> Result<Choice, Error> {
    let found = candidates(managed, secrets).await?;
    let current = secrets
        .get_opt(HUB_KUBECONFIG_SECRET)
        .await?
        .and_then(|s| secret_text(&s, "kubeconfig"));
    let current_server = current
        .as_deref()
        .and_then(kubeconfig_server)
        .map(|(s, _)| s);
    let Some(boot_text) = select(&found, current_server.as_deref(), opts)
        .await
        .cloned()
    else {
        return Err(Error::Setup(format!(
            "no bootstrap kubeconfig is available for managed cluster {}",
            opts.cluster_name
        )));
    };
    let selected = kubeconfig_server(&boot_text)
        .ok_or_else(|| Error::Setup("bootstrap kubeconfig has no cluster".into()))?;
    let resumes = current.filter(|t| kubeconfig_server(t).as_ref() == Some(&selected));
    Ok(Choice {
        found,
        boot_text,
        selected,
        resumes,
    })
}

/// Bootstrap: the ManagedCluster, then a CSR, waited for until it is issued; saves
/// `hub-kubeconfig-secret` and returns its kubeconfig.
async fn bootstrap(
    secrets: &Api<Secret>,
    boot_text: &str,
    (server, ca): &(String, Option<String>),
    opts: &KlusterletOptions,
) -> Result<String, Error> {
    tracing::debug!(cluster = %opts.cluster_name, %server, "bootstrapping");
    let boot = opts.transports.client(boot_text).await?;
    ensure_cluster(&boot, opts).await;
    let name = &opts.cluster_name;
    let user = names::agent_user(name, &opts.agent_name);
    let groups = vec![
        names::cluster_group(name),
        names::MANAGED_CLUSTERS_GROUP.to_owned(),
    ];
    let csrs: Api<CertificateSigningRequest> = Api::all(boot.clone());
    let (cert, key_pem) = loop {
        let (csr_pem, key_pem) =
            kube_sim::pki::make_csr(&user, &groups).map_err(|e| Error::Setup(e.to_string()))?;
        let csr: CertificateSigningRequest = serde_json::from_value(json!({
            "metadata": {"generateName": format!("{name}-"), "labels": {CLUSTER_NAME_LABEL: name}},
            "spec": {"request": b64(&csr_pem), "signerName": migration_api::names::KUBE_APISERVER_CLIENT_SIGNER,
                     "usages": ["digital signature", "key encipherment", "client auth"]}
        }))?;
        let created = match csrs.create(&PostParams::default(), &csr).await {
            Ok(c) => c,
            Err(e) => {
                // The secret controller tries again; the agent does not re-select.
                tracing::debug!(cluster = %name, error = %e, "creating the bootstrap CSR");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        match issued(&csrs, &created.name_any()).await {
            Some(cert) => break (cert, key_pem),
            // The CSR is gone: ask again.
            None => continue,
        }
    };
    let ca_line = ca
        .as_ref()
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

/// Waits for a CSR's certificate: `None` once the CSR is gone. A denied CSR is waited on like
/// any other that is not approved yet.
async fn issued(csrs: &Api<CertificateSigningRequest>, name: &str) -> Option<String> {
    loop {
        match await_condition(
            csrs.clone(),
            name,
            |c: Option<&CertificateSigningRequest>| {
                c.is_none_or(|c| c.status.as_ref().is_some_and(|s| s.certificate.is_some()))
            },
        )
        .await
        {
            Ok(Some(csr)) => {
                return csr
                    .status
                    .and_then(|s| s.certificate)
                    .map(|c| String::from_utf8_lossy(&c.0).into_owned());
            }
            Ok(None) => return None,
            Err(e) => {
                // The hub is unreachable (or the bootstrap identity revoked): keep waiting.
                tracing::debug!(csr = %name, error = %e, "waiting for the certificate");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// The creating controller: the ManagedCluster is created if absent; one that exists gets this
/// cluster's URL in `managedClusterClientConfigs` if it lacks it, where the bootstrap identity
/// may update it (neither OCM's `open-cluster-management:bootstrap` role nor ACM's per-cluster
/// bootstrap role grants `update`: the update is refused and skipped, as upstream skips it).
async fn ensure_cluster(boot: &Client, opts: &KlusterletOptions) {
    let name = &opts.cluster_name;
    let clusters: Api<ManagedCluster> = Api::all(boot.clone());
    let config = json!({"url": opts.api_url, "caBundle": b64(&opts.api_ca_pem)});
    let result = match clusters.get_opt(name).await {
        Ok(None) => {
            let mc = serde_json::from_value::<ManagedCluster>(json!({
                "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
                "metadata": {"name": name},
                "spec": {"hubAcceptsClient": false, "leaseDurationSeconds": opts.lease_duration_secs,
                         "managedClusterClientConfigs": [config]}
            }));
            match mc {
                Ok(mc) => clusters.create(&PostParams::default(), &mc).await.map(drop),
                Err(e) => Err(kube::Error::SerdeError(e)),
            }
        }
        Ok(Some(mut mc)) => {
            let configs = mc
                .spec
                .managed_cluster_client_configs
                .get_or_insert_with(Vec::new);
            if configs.iter().any(|c| c.url == opts.api_url) {
                Ok(())
            } else {
                match serde_json::from_value(config) {
                    Ok(c) => configs.push(c),
                    Err(e) => tracing::debug!(error = %e, "client config"),
                }
                clusters
                    .replace(name, &PostParams::default(), &mc)
                    .await
                    .map(drop)
            }
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => {}
        Err(kube::Error::Api(s)) if matches!(s.code, 401 | 403 | 409) => {}
        Err(e) => tracing::debug!(cluster = %name, error = %e, "creating controller"),
    }
}

/// The agent's life once connected to a hub; returns when the process would exit.
async fn connected_life(
    managed: &Client,
    secrets: &Api<Secret>,
    hub_text: &str,
    opts: &KlusterletOptions,
    found: &Candidates,
) -> Result<Life, Error> {
    let life = opts
        .lives
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let hub = opts.transports.client(hub_text).await?;
    // The bootstrap kubeconfig as this life starts, before its work agent runs: upstream's
    // registration agent starts the informer that watches it (and cancels the process on its
    // change) before the work agent starts (ocm `pkg/registration/spoke/spokeagent.go`,
    // `pkg/singleton/spoke/agent.go`), so a change the work agent makes is always seen. (Not
    // read, or not there: the watch's first sight of it is what later ones compare with.)
    let boot_at_start = secrets
        .get_opt(BOOTSTRAP_HUB_KUBECONFIG)
        .await
        .ok()
        .flatten()
        .map(|s| s.data);
    opts.connection.send_replace(Some(Connected {
        text: hub_text.to_owned(),
        life,
        settings: found.settings.clone(),
    }));
    let name = opts.cluster_name.clone();
    // The lease, Joined and the hub timeout run on their own (the status, lease and
    // hub-timeout controllers): a request awaited here, while a watch below waits for its
    // connection, would stall both.
    let (restart_tx, mut restart) = tokio::sync::oneshot::channel::<()>();
    let (seen_tx, seen) = watch::channel::<Option<ManagedCluster>>(None);
    let heartbeat = tokio::spawn(heartbeat(
        hub.clone(),
        opts.clone(),
        found
            .multiple_hubs
            .then(|| opts.hub_timeout.unwrap_or(found.hub_timeout)),
        restart_tx,
    ));
    let _stop_heartbeat = AbortOnDrop(heartbeat);
    let status = tokio::spawn(status_controller(
        managed.clone(),
        hub.clone(),
        name.clone(),
        seen,
    ));
    let _stop_status = AbortOnDrop(status);
    let clusters: Api<ManagedCluster> = Api::all(hub.clone());
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut accept_watch = std::pin::pin!(watcher(clusters, cfg));
    let mut redeployed = std::pin::pin!(replaced(managed.clone(), Some(found.settings.clone())));
    let boot =
        watcher::Config::default().fields(&format!("metadata.name={BOOTSTRAP_HUB_KUBECONFIG}"));
    let mut boot_watch = std::pin::pin!(watcher(secrets.clone(), boot));
    let mut boot_data: Option<Option<BTreeMap<String, ByteString>>> = boot_at_start;
    // Whether the watch's initial list held the bootstrap kubeconfig.
    let mut listed = false;
    loop {
        tokio::select! {
            _ = &mut restart => {
                tracing::info!(cluster = %name, "its lease on the hub is older than the hub connection timeout; the agent restarts");
                return Ok(cancelled(opts, life));
            }
            () = &mut redeployed => {
                tracing::info!(cluster = %name, "the Klusterlet's pod settings changed; the operator redeploys the agent");
                return Ok(Life::Replaced);
            }
            ev = boot_watch.next() => match ev {
                Some(Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s))) => {
                    listed = true;
                    let data = s.data.clone();
                    match &boot_data {
                        Some(seen) if *seen != data => {
                            tracing::info!(cluster = %name, "the bootstrap kubeconfig changed; the agent restarts");
                            return Ok(cancelled(opts, life));
                        }
                        _ => boot_data = Some(data),
                    }
                }
                Some(Ok(watcher::Event::Delete(_))) => {
                    tracing::info!(cluster = %name, "the bootstrap kubeconfig was deleted; the agent restarts");
                    return Ok(cancelled(opts, life));
                }
                // Gone between the life's start and the watch's first list.
                Some(Ok(watcher::Event::InitDone)) if !listed && boot_data.is_some() => {
                    tracing::info!(cluster = %name, "the bootstrap kubeconfig was deleted; the agent restarts");
                    return Ok(cancelled(opts, life));
                }
                Some(Ok(watcher::Event::Init)) => listed = false,
                Some(Err(e)) => {
                    tracing::debug!(cluster = %name, error = %e, "watching the bootstrap kubeconfig");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                _ => {}
            },
            ev = accept_watch.next() => match ev {
                Some(Ok(watcher::Event::Apply(mc) | watcher::Event::InitApply(mc))) => {
                    if found.multiple_hubs && !mc.spec.hub_accepts_client {
                        tracing::info!(cluster = %name, "hub no longer accepts this cluster; the agent restarts");
                        return Ok(cancelled(opts, life));
                    }
                    // The status controller syncs on its ManagedCluster's changes.
                    seen_tx.send_replace(Some(mc));
                }
                Some(Err(e)) => {
                    tracing::debug!(cluster = %name, error = %e, "watching its ManagedCluster");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Some(Ok(_)) => {}
                None => tokio::time::sleep(Duration::from_millis(500)).await,
            },
        }
    }
}

/// Aborts a task when dropped (the agent process's life ended).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// When the lease is renewed: at once, then a period after each renewal however late it came.
/// Upstream's updater runs `wait.JitterUntilWithContext(update, leaseDuration, 0.25, true)`
/// (ocm `pkg/registration/spoke/lease/lease_controller.go`): sliding, so a late renewal is
/// never followed by a catch-up one, and two renewals of one process are a period or more
/// apart (the addon agent reads a sooner one as a new process). A plain `interval` would burst
/// the ticks a busy loop missed.
fn renewal_ticker(period: Duration) -> tokio::time::Interval {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

/// The lease controller and (with `hub_timeout`, i.e. MultipleHubs) the hub-timeout
/// controller: `restart` fires when the cluster's lease on the hub has not been renewed for
/// longer than the timeout (its first failed read counts as the last renewal; never in the
/// first 10 s, `hub_timeout_controller.go`).
async fn heartbeat(
    hub: Client,
    opts: KlusterletOptions,
    hub_timeout: Option<Duration>,
    restart: tokio::sync::oneshot::Sender<()>,
) {
    let name = opts.cluster_name.clone();
    let leases: Api<Lease> = Api::namespaced(hub.clone(), &name);
    let period = Duration::from_secs(u64::try_from(opts.lease_duration_secs).unwrap_or(60).max(1));
    let mut tick = renewal_ticker(period);
    let check_every = hub_timeout.map_or(Duration::from_secs(60), |t| {
        (t / 4).clamp(Duration::from_secs(1), Duration::from_secs(60))
    });
    let mut timeout_check = tokio::time::interval(check_every);
    let started = Instant::now();
    let mut last_renew: Option<jiff::Timestamp> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
                if let Err(e) = leases.patch(CLUSTER_LEASE, &PatchParams::default(), &Patch::Merge(json!({"spec": {"renewTime": now}}))).await {
                    tracing::debug!(cluster = %name, error = %e, "lease renewal failed");
                }
            }
            _ = timeout_check.tick(), if hub_timeout.is_some() => {
                match leases.get(CLUSTER_LEASE).await {
                    Ok(l) => last_renew = l.spec.and_then(|s| s.renew_time).map(|t| t.0),
                    Err(_) => {
                        if last_renew.is_none() {
                            last_renew = Some(jiff::Timestamp::now());
                        }
                    }
                }
                let timeout = hub_timeout.unwrap_or(DEFAULT_HUB_TIMEOUT);
                let stale = last_renew.is_some_and(|t| {
                    let age = jiff::Timestamp::now().duration_since(t);
                    Duration::try_from(age).unwrap_or_default() > timeout
                });
                if started.elapsed() >= Duration::from_secs(10) && stale {
                    let _ = restart.send(());
                    return;
                }
            }
        }
    }
}

/// Upstream's `--cluster-healthcheck-period` (`pkg/registration/spoke/options.go`): the status
/// controller's resync.
const STATUS_RESYNC: Duration = Duration::from_secs(60);

/// How long failed health checks must last before Available goes False, and how soon a failed
/// one is checked again (`failureThreshold`, `healthCheckRetryInterval` in upstream's
/// `pkg/registration/spoke/managedcluster/available_reconcile.go`).
const HEALTH_FAILURE_THRESHOLD: Duration = Duration::from_secs(20);
const HEALTH_RETRY: Duration = Duration::from_secs(5);

/// The status controller (ocm `pkg/registration/spoke/managedcluster/status_controller.go`):
/// it syncs at every change of its ManagedCluster on the hub (`seen`, fed by the agent's watch
/// of it), of the cluster's ClusterClaims (its claim informer, the ClusterClaim feature gate
/// being on by default; the claims are read from that informer's cache, `claimLister`) and
/// every [`STATUS_RESYNC`]; a failed sync is retried with its work queue's backoff (sdk-go
/// `pkg/basecontroller/factory/controller_context.go`: client-go's default controller rate
/// limiter), a failed health check after [`HEALTH_RETRY`]. Nothing syncs before the claims'
/// cache has listed them once (an OCM controller starts once its informers have synced).
async fn status_controller(
    managed: Client,
    hub: Client,
    name: String,
    mut seen: watch::Receiver<Option<ManagedCluster>>,
) {
    let (claims, writer) = kube::runtime::reflector::store::<ClusterClaim>();
    let mut claim_events = std::pin::pin!(kube::runtime::WatchStreamExt::default_backoff(
        kube::runtime::reflector(
            writer,
            watcher(Api::all(managed.clone()), watcher::Config::default()),
        )
    ));
    let mut claims_synced = false;
    let mut resync = tokio::time::interval(STATUS_RESYNC);
    let mut again: Option<Duration> = None;
    let mut failures = 0u32;
    let mut failing_since: Option<Instant> = None;
    loop {
        let after = again;
        tokio::select! {
            changed = seen.changed() => if changed.is_err() { return },
            ev = claim_events.next() => match ev {
                Some(Ok(watcher::Event::InitDone)) => claims_synced = true,
                Some(Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_))) => {}
                Some(Ok(watcher::Event::Init | watcher::Event::InitApply(_))) => continue,
                Some(Err(e)) => {
                    tracing::debug!(cluster = %name, error = %e, "watching its ClusterClaims");
                    continue;
                }
                None => return,
            },
            _ = resync.tick() => {}
            () = async {
                match after {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
        if !claims_synced {
            continue;
        }
        let Some(mc) = seen.borrow_and_update().clone() else {
            continue;
        };
        match sync_status(&managed, &hub, &mc, &claims, &mut failing_since).await {
            Ok(recheck) => {
                failures = 0;
                again = recheck;
            }
            Err(e) => {
                tracing::debug!(cluster = %name, error = %e, "status sync failed");
                failures = failures.saturating_add(1);
                again = Some(crate::backoff::controller(failures));
            }
        }
    }
}

/// What a health check of the cluster's own API server makes of Available
/// (`available_reconcile.go`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Health {
    /// It answered: Available True.
    Up,
    /// It has not answered for less than [`HEALTH_FAILURE_THRESHOLD`]: Available stays as it
    /// is, and it is checked again after [`HEALTH_RETRY`].
    Failing,
    /// It has not answered for [`HEALTH_FAILURE_THRESHOLD`] or longer: Available False.
    Down,
}

/// The health check's verdict, `answered` or not at `now`; `failing_since` is when the failures
/// in a row began (reset by an answer).
fn health(answered: bool, failing_since: &mut Option<Instant>, now: Instant) -> Health {
    if answered {
        *failing_since = None;
        return Health::Up;
    }
    let since = *failing_since.get_or_insert(now);
    if now.saturating_duration_since(since) >= HEALTH_FAILURE_THRESHOLD {
        Health::Down
    } else {
        Health::Failing
    }
}

/// One status sync, as upstream's reconcilers run in order: nothing before the hub accepted
/// the cluster (`joining_reconcile.go` stops there); then Joined; then the health check
/// (`available_reconcile.go` asks `/livez`, here the version, a request to the cluster's API
/// server all the same: [`health`]), which stops the sync unless it answered; then its version
/// and claims (`resource_reconcile.go`, `claim_reconcile.go`). Written only when that changes
/// what the hub has, as upstream's patcher compares before it patches (sdk-go `pkg/patcher`).
/// Returns when to sync again whatever happens (a failing health check).
async fn sync_status(
    managed: &Client,
    hub: &Client,
    mc: &ManagedCluster,
    cached_claims: &kube::runtime::reflector::Store<ClusterClaim>,
    failing_since: &mut Option<Instant>,
) -> Result<Option<Duration>, Error> {
    if !condition_is_true(mc.conditions(), HUB_ACCEPTED) {
        return Ok(None);
    }
    // The conditions this agent owns, as the hub has them: a transition time moves only on a
    // transition.
    let mut conditions: Vec<Condition> = mc
        .conditions()
        .iter()
        .filter(|c| [JOINED, CLUSTER_AVAILABLE].contains(&c.type_.as_str()))
        .cloned()
        .collect();
    let mut changed = set_condition(
        &mut conditions,
        JOINED,
        "True",
        "ManagedClusterJoined",
        "Managed cluster joined",
        None,
    );
    let status = mc.status.as_ref();
    let mut version = status
        .and_then(|s| s.version.as_ref()?.kubernetes.clone())
        .unwrap_or_default();
    let mut claims = status
        .and_then(|s| s.cluster_claims.clone())
        .unwrap_or_default();
    let answer = managed.apiserver_version().await;
    let verdict = health(answer.is_ok(), failing_since, Instant::now());
    match (answer, verdict) {
        (Ok(info), _) => {
            changed |= set_condition(
                &mut conditions,
                CLUSTER_AVAILABLE,
                "True",
                "ManagedClusterAvailable",
                "Managed cluster is available",
                None,
            );
            let mut now_claims: Vec<ManagedClusterClaim> = cached_claims
                .state()
                .iter()
                .map(|c| ManagedClusterClaim {
                    name: Some(c.name_any()),
                    value: Some(c.spec.value.clone().unwrap_or_default()),
                })
                .collect();
            // By name, as `claim_reconcile.go` sorts them (it puts the reserved ones first and
            // keeps at most 20 others: not simulated).
            now_claims.sort_by(|a, b| a.name.cmp(&b.name));
            changed |= version != info.git_version || claims != now_claims;
            version = info.git_version;
            claims = now_claims;
        }
        (Err(e), Health::Down) => {
            changed |= set_condition(
                &mut conditions,
                CLUSTER_AVAILABLE,
                "False",
                "ManagedClusterKubeAPIServerUnavailable",
                &format!("The kube-apiserver is not ok: {e}"),
                None,
            );
        }
        (Err(_), _) => {}
    }
    let recheck = (verdict == Health::Failing).then_some(HEALTH_RETRY);
    if !changed {
        return Ok(recheck);
    }
    // Version and claims go as the hub has them when they were not read again: an apply that
    // left them out would remove them.
    let name = mc.name_any();
    Api::<ManagedCluster>::all(hub.clone())
        .patch_status(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": name},
            "status": {"conditions": conditions, "clusterClaims": claims, "version": {"kubernetes": version},
                       "capacity": {"cpu": "8", "memory": "32Gi"}, "allocatable": {"cpu": "7", "memory": "30Gi"}}
        })))
        .await?;
    Ok(recheck)
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_late_renewal_is_not_followed_by_a_catch_up_one() {
        let period = Duration::from_millis(50);
        let mut tick = super::renewal_ticker(period);
        tick.tick().await;
        // The loop is busy for more than three periods (a slow patch, a loaded machine).
        std::thread::sleep(period * 3 + period / 2);
        tick.tick().await;
        let late = Instant::now();
        tick.tick().await;
        let gap = late.elapsed();
        assert!(
            gap + Duration::from_millis(5) >= period,
            "the next renewal came {gap:?} after a late one"
        );
    }

    use super::*;

    /// Upstream's `available_reconcile.go`: an answer makes the cluster Available at once and
    /// forgets earlier failures; failures make it unavailable only once they have lasted 20 s.
    #[test]
    fn available_goes_false_only_after_twenty_seconds_of_failed_health_checks() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut since = None;
        for (what, answered, at, want, failing_from) in [
            ("answered", true, t0, Health::Up, None),
            (
                "first failure",
                false,
                t0 + s(1),
                Health::Failing,
                Some(t0 + s(1)),
            ),
            (
                "19 s of failures",
                false,
                t0 + s(20),
                Health::Failing,
                Some(t0 + s(1)),
            ),
            (
                "20 s of failures",
                false,
                t0 + s(21),
                Health::Down,
                Some(t0 + s(1)),
            ),
            (
                "still failing",
                false,
                t0 + s(40),
                Health::Down,
                Some(t0 + s(1)),
            ),
            ("answered again", true, t0 + s(41), Health::Up, None),
            (
                "a new failure counts anew",
                false,
                t0 + s(42),
                Health::Failing,
                Some(t0 + s(42)),
            ),
        ] {
            assert_eq!(health(answered, &mut since, at), want, "{what}");
            assert_eq!(since, failing_from, "{what}");
        }
    }

    /// The operator replaces the agent's pod only when what its template renders changes
    /// (ocm `klusterlet-agent-deployment.yaml`): not for `clusterLabels`, annotations without
    /// the agent prefix, the Default mode's images, or bootstrap kubeconfigs with MultipleHubs
    /// off.
    #[test]
    fn only_what_the_pod_template_renders_replaces_the_pod() {
        use serde_json::{Value, json};
        let klusterlet = |gates: Value| {
            json!({
                "apiVersion": "operator.open-cluster-management.io/v1", "kind": "Klusterlet",
                "metadata": {"name": "klusterlet"},
                "spec": {"clusterName": "c1", "registrationConfiguration": {
                    "featureGates": gates,
                    "bootstrapKubeConfigs": {"type": "LocalSecrets", "localSecretsConfig": {
                        "kubeConfigSecrets": [{"name": "hub1"}], "hubConnectionTimeoutSeconds": 180}}}}
            })
        };
        // The settings of `k` with the value at `path` (a JSON pointer) set to `v`.
        let settings = |mut k: Value, path: &str, v: Value| {
            let (parent, key) = path.rsplit_once('/').unwrap_or_default();
            if let Some(o) = k.pointer_mut(parent).and_then(Value::as_object_mut) {
                o.insert(key.to_owned(), v);
            }
            let k: Klusterlet = serde_json::from_value(k).expect("a valid Klusterlet");
            pod_settings(Some(&k))
        };
        let reg = "/spec/registrationConfiguration";
        let secrets = format!("{reg}/bootstrapKubeConfigs/localSecretsConfig/kubeConfigSecrets");
        let two_hubs = json!([{"name": "hub1"}, {"name": "hub2"}]);
        let on = klusterlet(json!([{"feature": "MultipleHubs", "mode": "Enable"}]));
        let unchanged = settings(on.clone(), "/spec/clusterName", json!("c1"));
        assert_ne!(unchanged, pod_settings(None), "a Klusterlet renders a pod");
        for (what, path, value, replaces) in [
            (
                "clusterLabels",
                format!("{reg}/clusterLabels"),
                json!({"env": "prod"}),
                false,
            ),
            (
                "an annotation without the agent prefix",
                format!("{reg}/clusterAnnotations"),
                json!({"team": "a"}),
                false,
            ),
            (
                "an agent annotation",
                format!("{reg}/clusterAnnotations"),
                json!({"agent.open-cluster-management.io/team": "a"}),
                true,
            ),
            (
                "the registration image (Default mode only)",
                "/spec/registrationImagePullSpec".to_owned(),
                json!("quay.io/r:2"),
                false,
            ),
            (
                "the singleton image",
                "/spec/imagePullSpec".to_owned(),
                json!("quay.io/a:2"),
                true,
            ),
            (
                "the bootstrap kubeconfigs",
                secrets.clone(),
                two_hubs.clone(),
                true,
            ),
            (
                "the hub connection timeout",
                format!(
                    "{reg}/bootstrapKubeConfigs/localSecretsConfig/hubConnectionTimeoutSeconds"
                ),
                json!(600),
                true,
            ),
            ("the QPS", format!("{reg}/kubeAPIQPS"), json!(100), true),
            (
                "the work status sync interval",
                "/spec/workConfiguration".to_owned(),
                json!({"statusSyncInterval": "5s"}),
                true,
            ),
            (
                "the node placement",
                "/spec/nodePlacement".to_owned(),
                json!({"nodeSelector": {"infra": "true"}}),
                true,
            ),
        ] {
            let changed = settings(on.clone(), &path, value) != unchanged;
            assert_eq!(changed, replaces, "{what}");
        }
        // With MultipleHubs off the template names `bootstrap-hub-kubeconfig` alone.
        let off = klusterlet(json!([]));
        assert_eq!(
            settings(off.clone(), &secrets, two_hubs),
            settings(off, "/spec/clusterName", json!("c1")),
            "bootstrap kubeconfigs with MultipleHubs off"
        );
    }
}
