//! Hubs and managed clusters: a kube-sim instance each, with OCM's components running against
//! it under their own identities.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use migration_api::names::BOOTSTRAP_HUB_KUBECONFIG;
use migration_api::ocm::addon::ManagedClusterAddOn;
use migration_api::ocm::cluster::ClusterClaim;
use migration_api::ocm::operator::{ClusterManager, Klusterlet};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::Error;
use crate::addon_agent::{self, AddonAgentOptions};
use crate::backoff::CrashLoop;
use crate::cluster::{Role, SimCluster, all_rules};
use crate::klusterlet::{self, KlusterletOptions, Life};
use crate::names::{
    AGENT_NAMESPACE, BOOTSTRAP_NAMESPACE, BOOTSTRAP_SA, HUB_NAMESPACE, bootstrap_user,
};
use crate::registration::{self, RegistrationOptions};
use crate::work_agent::{self, WorkAgentOptions};

const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// Settings of a hub.
#[derive(Clone, Debug, Default)]
pub struct HubOptions {
    /// Approve and accept clusters that register with the bootstrap identity
    /// (ClusterManager autoApproveUsers with the ManagedClusterAutoApproval feature gate).
    pub auto_approve: bool,
    pub registration: RegistrationOptions,
    /// What runs the hub: ACM/MCE (current or older) or plain OCM.
    pub kind: HubKind,
    /// Its API server also takes this process's connections through memory (kube-sim's
    /// `Options::in_process_connections`): not OCM behaviour, the harness's open files.
    pub in_process_connections: bool,
}

/// What a hub runs, as far as migrations see it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HubKind {
    /// ACM/MCE with the current KlusterletConfig (`multipleHubsConfig`) and import controller.
    #[default]
    Acm,
    /// An older ACM/MCE: the KlusterletConfig CRD has `spec.bootstrapKubeConfigs`.
    OlderAcm(OlderMce),
    /// Plain OCM: no ACM APIs and no import controller (clusters keep the Klusterlet
    /// configuration they joined with unless something else changes it).
    Plain,
}

/// How an older ACM/MCE renders `spec.bootstrapKubeConfigs` (upstream
/// `pkg/bootstrap/render.go` on the import controller's `backplane-2.7` and `-2.8` branches).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OlderMce {
    /// MCE 2.7: the listed secrets alone (a klusterlet restarted with them goes there).
    Mce27,
    /// MCE 2.8: the listed secrets, then the current hub's (`bootstrap-hub-kubeconfig-current-hub`).
    Mce28,
}

/// A running hub.
#[derive(Debug)]
pub struct Hub {
    pub cluster: SimCluster,
    /// A kubeconfig for the hub's bootstrap identity (what clusters join with).
    pub bootstrap_kubeconfig: String,
    tasks: Vec<JoinHandle<()>>,
}

/// What OCM's `open-cluster-management:bootstrap` ClusterRole allows (ocm
/// `deploy/cluster-manager/chart/cluster-manager/templates/bootstrap_cluster_role.yaml`: no
/// `update` of ManagedClusters), plus the access reviews the klusterlet makes.
pub fn bootstrap_rules() -> serde_json::Value {
    json!([
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
        {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["create", "get", "list", "watch"]},
        {"apiGroups": ["cluster.open-cluster-management.io"], "resources": ["managedclusters"], "verbs": ["get", "create", "list", "watch"]},
        {"apiGroups": ["cluster.open-cluster-management.io"], "resources": ["managedclustersets/join"], "verbs": ["create"]},
        {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "subjectaccessreviews"], "verbs": ["create"]}
    ])
}

impl Hub {
    /// Starts a hub: OCM CRDs, the ClusterManager, the bootstrap identity and the
    /// registration controller.
    pub async fn start(name: &str, opts: HubOptions) -> Result<Self, Error> {
        let role = match opts.kind {
            HubKind::Plain => Role::PlainHub,
            HubKind::OlderAcm(_) => Role::LegacyHub,
            HubKind::Acm => Role::Hub,
        };
        let cluster = SimCluster::start_with(name, role, opts.in_process_connections).await?;
        let gates = if opts.auto_approve {
            json!([{"feature": "ManagedClusterAutoApproval", "mode": "Enable"}])
        } else {
            json!([])
        };
        let users = if opts.auto_approve {
            json!([bootstrap_user()])
        } else {
            json!([])
        };
        Api::<ClusterManager>::all(cluster.admin.clone())
            .patch("cluster-manager", &PatchParams::apply("ocm-sim-setup"), &Patch::Apply(json!({
                "apiVersion": "operator.open-cluster-management.io/v1", "kind": "ClusterManager",
                "metadata": {"name": "cluster-manager"},
                "spec": {"registrationConfiguration": {"featureGates": gates, "autoApproveUsers": users}}
            })))
            .await?;
        let boot_token = cluster
            .service_account(BOOTSTRAP_NAMESPACE, BOOTSTRAP_SA, bootstrap_rules(), YEAR)
            .await?;
        let bootstrap_kubeconfig = cluster.api.kubeconfig_for_token(&boot_token);
        let controller_token = cluster
            .service_account(HUB_NAMESPACE, "registration-controller", all_rules(), YEAR)
            .await?;
        let client = cluster.client_for_token(&controller_token).await?;
        let mut tasks = registration::spawn(client.clone(), opts.registration);
        tasks.push(tokio::spawn(crate::clustersets::run(client)));
        if opts.kind != HubKind::Plain {
            cluster
                .ensure_namespace(crate::import::BOOTSTRAP_SECRETS_NAMESPACE)
                .await?;
            let import_token = cluster
                .service_account(
                    HUB_NAMESPACE,
                    "managedcluster-import-controller",
                    all_rules(),
                    YEAR,
                )
                .await?;
            let older = match opts.kind {
                HubKind::OlderAcm(mce) => Some(mce),
                _ => None,
            };
            tasks.push(tokio::spawn(crate::import::run(
                cluster.client_for_token(&import_token).await?,
                bootstrap_kubeconfig.clone(),
                older,
            )));
        }
        let placement_token = cluster
            .service_account(HUB_NAMESPACE, "placement-controller", all_rules(), YEAR)
            .await?;
        tasks.push(tokio::spawn(crate::placement::run(
            cluster.client_for_token(&placement_token).await?,
        )));
        Ok(Self {
            cluster,
            bootstrap_kubeconfig,
            tasks,
        })
    }
}

/// Binds ManagedClusterSet `set` to `namespace` on `hub` (the namespace created if missing), as
/// an admin does with `clusteradm clusterset bind`.
pub async fn bind_cluster_set(hub: &SimCluster, namespace: &str, set: &str) -> Result<(), Error> {
    hub.ensure_namespace(namespace).await?;
    Api::<migration_api::ocm::cluster::ManagedClusterSetBinding>::namespaced(
        hub.admin.clone(),
        namespace,
    )
    .patch(
        set,
        &PatchParams::apply("ocm-sim-setup"),
        &Patch::Apply(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
            "metadata": {"name": set, "namespace": namespace}, "spec": {"clusterSet": set}
        })),
    )
    .await?;
    Ok(())
}

/// Starts the managed-serviceaccount addon for `cluster`, a managed cluster of `hub`, with an
/// identity of its own on the hub. Its agent renews a Lease named after the addon in its
/// namespace on the cluster every `lease_period`, as upstream's does
/// (managed-serviceaccount `pkg/addon/agent/health/lease.go`), and its health is judged from
/// that Lease (the addon-framework's default prober), not reported by the addon itself.
pub async fn start_managed_serviceaccount(
    hub: &Hub,
    cluster: &SimCluster,
    resync: Duration,
    lease_period: Duration,
) -> Result<JoinHandle<()>, Error> {
    let rules = json!([
        {"apiGroups": ["authentication.open-cluster-management.io"], "resources": ["managedserviceaccounts", "managedserviceaccounts/status"], "verbs": ["get", "list", "watch", "update", "patch"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}
    ]);
    let sa = format!("managed-serviceaccount-{}", cluster.name);
    let token = hub
        .cluster
        .service_account("open-cluster-management-agent-addon", &sa, rules, YEAR)
        .await?;
    let client = hub.cluster.client_for_token(&token).await?;
    let managed = cluster.admin.clone();
    let name = cluster.name.clone();
    let ca = cluster.api.ca_pem().to_owned();
    let global = hub.cluster.admin.clone();
    Ok(tokio::spawn(async move {
        if let Err(e) = register_msa_addon(&global, &name).await {
            tracing::warn!(cluster = %name, error = %e, "registering the managed-serviceaccount addon");
        }
        let lease = tokio::spawn(renew_msa_lease(managed.clone(), lease_period));
        if let Err(e) = crate::msa::run(client, managed, name.clone(), ca, resync).await {
            tracing::warn!(cluster = %name, error = %e, "managed-serviceaccount addon stopped");
        }
        lease.abort();
    }))
}

/// The managed-serviceaccount agent's health Lease on its cluster (named after the addon, in
/// the agent's namespace, as upstream's `pkg/addon/agent/health/lease.go` has addon-framework's
/// lease updater write it), renewed every `period`.
async fn renew_msa_lease(managed: kube::Client, period: Duration) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(managed.clone());
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(managed, crate::msa::MSA_NAMESPACE);
    let pp = PatchParams::apply("managed-serviceaccount-addon-agent").force();
    // The agent's namespace is there before the agent runs (its Deployment lives in it); the
    // updater only writes the Lease, and retries a failed write on its next tick.
    if let Err(e) = namespaces
        .patch(crate::msa::MSA_NAMESPACE, &pp, &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": crate::msa::MSA_NAMESPACE}})))
        .await
    {
        tracing::debug!(error = %e, "the managed-serviceaccount agent's namespace");
    }
    let mut tick = tokio::time::interval(period.max(Duration::from_millis(100)));
    loop {
        tick.tick().await;
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
            .to_string();
        let renewed = leases
            .patch(crate::msa::ADDON_NAME, &pp, &Patch::Apply(json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": crate::msa::ADDON_NAME, "namespace": crate::msa::MSA_NAMESPACE},
                "spec": {"renewTime": now}})))
            .await;
        if let Err(e) = renewed {
            tracing::debug!(error = %e, "renewing the managed-serviceaccount lease");
        }
    }
}

/// Shows the managed-serviceaccount addon on the hub as its ManagedClusterAddOn (installed by
/// its own manager, health judged from its agent's Lease, with the namespace its agent runs
/// in), once the hub has made the cluster's namespace.
async fn register_msa_addon(hub: &kube::Client, cluster: &str) -> Result<(), Error> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(hub.clone());
    kube::runtime::wait::await_condition(
        namespaces,
        cluster,
        |n: Option<&k8s_openapi::api::core::v1::Namespace>| n.is_some(),
    )
    .await
    .map_err(|e| Error::Setup(format!("waiting for namespace {cluster}: {e}")))?;
    let addons: Api<ManagedClusterAddOn> = Api::namespaced(hub.clone(), cluster);
    let pp = PatchParams::apply("managed-serviceaccount-addon-manager").force();
    addons
        .patch(crate::msa::ADDON_NAME, &pp, &Patch::Apply(json!({
            "apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
            "metadata": {"name": crate::msa::ADDON_NAME, "namespace": cluster},
            "spec": {"installNamespace": crate::msa::MSA_NAMESPACE}
        })))
        .await?;
    addons
        .patch_status(crate::msa::ADDON_NAME, &pp, &Patch::Apply(json!({
            "apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
            "metadata": {"name": crate::msa::ADDON_NAME, "namespace": cluster},
            "status": {"namespace": crate::msa::MSA_NAMESPACE, "healthCheck": {"mode": "Lease"}}
        })))
        .await?;
    Ok(())
}

impl Drop for Hub {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Timing of a klusterlet.
#[derive(Clone, Copy, Debug)]
pub struct AgentOptions {
    /// Simulated time to join a hub, spent by a klusterlet's life that bootstraps (not by one
    /// that resumes with its saved hub kubeconfig: `klusterlet::KlusterletOptions`).
    pub join_delay: Duration,
    pub lease_duration_secs: i32,
    /// How often the work agent re-reads applied resources for status feedback.
    pub status_sync_interval: Duration,
    /// Addon lease period (addons go unavailable after five periods without renewal).
    pub addon_lease_period: Duration,
    /// The work agent's `RawFeedbackJsonString` feature gate (upstream alpha, off by default).
    pub raw_feedback_json: bool,
    /// Replaces the Klusterlet's `hubConnectionTimeoutSeconds` (at least 180 s upstream), so
    /// that tests need not wait minutes for a klusterlet to give up on a hub.
    pub hub_timeout: Option<Duration>,
    /// The work agent's AppliedManifestWork eviction grace period (upstream 60 minutes).
    pub eviction_grace: Duration,
}

impl Default for AgentOptions {
    fn default() -> Self {
        Self {
            join_delay: Duration::from_secs(2),
            lease_duration_secs: 60,
            status_sync_interval: Duration::from_secs(10),
            addon_lease_period: Duration::from_secs(60),
            raw_feedback_json: false,
            hub_timeout: None,
            eviction_grace: Duration::from_secs(60 * 60),
        }
    }
}

/// A klusterlet (registration agent and work agent) running for a cluster.
#[derive(Debug)]
pub struct Agent {
    tasks: Vec<JoinHandle<()>>,
    connection: crate::klusterlet::Connection,
    kill: std::sync::Arc<tokio::sync::Notify>,
    /// How long the klusterlet agent's container has waited out its restart back-off, in
    /// all, in milliseconds ([`restarting`]).
    backoff_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Agent {
    /// Gives `cluster` its Klusterlet, the hub's bootstrap kubeconfig and a `id.k8s.io` claim
    /// (what `clusteradm join` leaves), and starts its klusterlet.
    pub async fn start(
        cluster: &SimCluster,
        bootstrap_kubeconfig: &str,
        agent: AgentOptions,
    ) -> Result<Self, Error> {
        cluster.ensure_namespace(AGENT_NAMESPACE).await?;
        let secrets: Api<Secret> = Api::namespaced(cluster.admin.clone(), AGENT_NAMESPACE);
        secrets
            .patch(
                BOOTSTRAP_HUB_KUBECONFIG,
                &PatchParams::apply("ocm-sim-setup").force(),
                &Patch::Apply(json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": BOOTSTRAP_HUB_KUBECONFIG, "namespace": AGENT_NAMESPACE},
                    "stringData": {"kubeconfig": bootstrap_kubeconfig}
                })),
            )
            .await?;
        Api::<Klusterlet>::all(cluster.admin.clone())
            .patch(migration_api::names::KLUSTERLET, &PatchParams::apply("clusteradm"), &Patch::Apply(json!({
                "apiVersion": "operator.open-cluster-management.io/v1", "kind": "Klusterlet",
                "metadata": {"name": migration_api::names::KLUSTERLET},
                "spec": {"clusterName": cluster.name, "namespace": AGENT_NAMESPACE,
                         "registrationConfiguration": {"featureGates": [{"feature": "ClusterClaim", "mode": "Enable"}]}}
            })))
            .await?;
        Api::<ClusterClaim>::all(cluster.admin.clone())
            .patch("id.k8s.io", &PatchParams::apply("ocm-sim-setup"), &Patch::Apply(json!({
                "apiVersion": "cluster.open-cluster-management.io/v1alpha1", "kind": "ClusterClaim",
                "metadata": {"name": "id.k8s.io"}, "spec": {"value": cluster.name}
            })))
            .await?;
        // One klusterlet agent process (registration, work and addon agents), one set of
        // connections.
        let transports = kube_sim::client::Transports::default();
        let connection = tokio::sync::watch::Sender::new(None);
        let cancels = tokio::sync::watch::Sender::new(0);
        let kill = std::sync::Arc::new(tokio::sync::Notify::new());
        let opts = KlusterletOptions {
            cluster_name: cluster.name.clone(),
            agent_name: format!("{}-agent", cluster.name),
            api_url: cluster.api.url(),
            api_ca_pem: cluster.api.ca_pem().to_owned(),
            join_delay: agent.join_delay,
            lease_duration_secs: agent.lease_duration_secs,
            hub_timeout: agent.hub_timeout,
            transports: transports.clone(),
            connection: connection.clone(),
            kill: kill.clone(),
            lives: std::sync::Arc::default(),
            cancels: cancels.clone(),
            deployed: std::sync::Arc::default(),
        };
        let managed = cluster.admin.clone();
        let name = cluster.name.clone();
        let deployed = opts.deployed.clone();
        let watched = managed.clone();
        let backoff_ms = std::sync::Arc::<std::sync::atomic::AtomicU64>::default();
        let registration = restarting(
            name.clone(),
            "registration agent",
            move || klusterlet::run(managed.clone(), opts.clone()),
            move || klusterlet::replaced(watched.clone(), deployed.borrow().clone()),
            backoff_ms.clone(),
        );
        // The work agent applies under its own identity, not as cluster-admin.
        let work_token = cluster.work_agent_identity(YEAR).await?;
        let managed = cluster.client_for_token(&work_token).await?;
        let work_opts = WorkAgentOptions {
            cluster_name: name.clone(),
            status_sync_interval: agent.status_sync_interval,
            transports: transports.clone(),
            raw_feedback_json: agent.raw_feedback_json,
            connection: connection.subscribe(),
            cancels: cancels.subscribe(),
            eviction_grace: agent.eviction_grace,
        };
        let work = restarting(
            name.clone(),
            "work agent",
            move || {
                let run = work_agent::run(managed.clone(), work_opts.clone());
                async move { run.await.map(|()| Life::Exited) }
            },
            std::future::pending,
            std::sync::Arc::default(),
        );
        let managed = cluster.admin.clone();
        let addon_opts = AddonAgentOptions {
            cluster_name: name.clone(),
            lease_period: agent.addon_lease_period,
            resync: agent.status_sync_interval,
            transports,
            connection: connection.subscribe(),
        };
        let addons = restarting(
            name,
            "addon agent",
            move || {
                let run = addon_agent::run(managed.clone(), addon_opts.clone());
                async move { run.await.map(|()| Life::Exited) }
            },
            std::future::pending,
            std::sync::Arc::default(),
        );
        Ok(Self {
            tasks: vec![registration, work, addons],
            connection,
            kill,
            backoff_ms,
        })
    }

    /// Kills the klusterlet agent process (a pod deleted): it starts again, selects a
    /// bootstrap kubeconfig and, where its hub kubeconfig does not fit, bootstraps.
    pub fn kill(&self) {
        self.kill.notify_one();
    }

    /// How long the klusterlet agent's container has waited, in all, for the kubelet to start
    /// it again after it exited (its CrashLoopBackOff, beyond the kubelet's relist).
    pub fn restart_backoff(&self) -> Duration {
        Duration::from_millis(self.backoff_ms.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The hub the klusterlet process is connected to, and in which of its lives.
    pub fn connected(&self) -> Option<crate::klusterlet::Connected> {
        self.connection.borrow().clone()
    }

    /// Stops the klusterlet (its lease stops being renewed, its works are no longer served).
    pub fn stop(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Runs an agent the way a Deployment's pod runs: when its process exits (on an error, or
/// when it restarts itself) the kubelet starts it again after its restart back-off
/// ([`CrashLoop`]: at once the first time, then after 10 s doubling to 5 min), and no sooner
/// than its next relist sees the exit (`plegRelistPeriod`, 1 s, kubernetes
/// `pkg/kubelet/kubelet.go`). A life that ends with [`Life::Replaced`] is a new pod: it
/// starts after that relist too, with no back-off yet. So is a pod replaced while its
/// container waits out its back-off (`replaced`, made at each exit, resolves then): the
/// Deployment's new pod does not wait for the old one's back-off. The time waited beyond
/// the relist is added to `waited` (milliseconds).
fn restarting<F, Fut, E, R, RFut>(
    cluster: String,
    what: &'static str,
    run: F,
    replaced: R,
    waited: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> tokio::task::JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<Life, E>> + Send + 'static,
    E: std::fmt::Display,
    R: Fn() -> RFut + Send + 'static,
    RFut: std::future::Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        let mut crash = CrashLoop::default();
        loop {
            let life = match run().await {
                Ok(life) => life,
                Err(e) => {
                    tracing::warn!(%cluster, error = %e, "{what} stopped; restarting it");
                    Life::Exited
                }
            };
            if life == Life::Replaced {
                // A new pod: its container's first start is no restart.
                crash = CrashLoop::default();
                tokio::time::sleep(PLEG_RELIST).await;
                continue;
            }
            let exited = std::time::Instant::now();
            let start = crash.ends(exited).max(exited + PLEG_RELIST);
            let backs_off = start > exited + PLEG_RELIST;
            tokio::select! {
                () = tokio::time::sleep_until(start.into()) => {
                    crash.restarted(exited, std::time::Instant::now());
                }
                () = replaced() => {
                    tracing::info!(%cluster, "{what}: its pod was replaced while it waited to restart");
                    crash = CrashLoop::default();
                    tokio::time::sleep(PLEG_RELIST).await;
                }
            }
            if backs_off {
                let backoff = exited.elapsed().saturating_sub(PLEG_RELIST);
                waited.fetch_add(
                    u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX),
                    std::sync::atomic::Ordering::Relaxed,
                );
            }
        }
    })
}

/// How often the kubelet's generic PLEG relists its containers (`plegRelistPeriod`).
const PLEG_RELIST: Duration = Duration::from_secs(1);

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop();
    }
}
