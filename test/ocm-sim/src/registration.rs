//! The hub's registration controller: CSR approval (renewals; auto-approval for users listed in
//! the ClusterManager when the ManagedClusterAutoApproval feature gate is on), acceptance
//! (cluster namespace, the agent's hub RBAC, the cluster lease, HubAcceptedManagedCluster),
//! denial (RBAC revoked), deletion as upstream's managedcluster and GC controllers do it
//! ([`reconcile`]: what is left in the cluster's namespace is deleted and waited for, the
//! namespace itself stays), and the lease judge (Unknown, with the unreachable taint, when the
//! lease goes stale; Available True is the agent's own report).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use migration_api::common::{Condition, find_condition, set_condition};
use migration_api::names::conditions::{CLUSTER_AVAILABLE, HUB_ACCEPTED};
use migration_api::ocm::addon::ManagedClusterAddOn;
use migration_api::ocm::cluster::{ManagedCluster, Taint};
use migration_api::ocm::operator::ClusterManager;
use migration_api::ocm::work::ManifestWork;
use serde_json::json;

use crate::finalizers::{self, ignore_not_found};
use crate::names::{self, CLUSTER_LEASE, CLUSTER_NAME_LABEL, UNAVAILABLE_TAINT, UNREACHABLE_TAINT};

const MANAGER: &str = "registration-controller";
/// The managedcluster controller's finalizer (open-cluster-management.io/api
/// `cluster/v1/types.go` `ManagedClusterFinalizer`).
pub const CLEANUP_FINALIZER: &str = "cluster.open-cluster-management.io/api-resource-cleanup";
/// The GC controller's finalizer (ocm `pkg/common/helpers/clusters.go` `GcFinalizer`).
pub const GC_FINALIZER: &str = "cluster.open-cluster-management.io/resource-cleanup";
/// The condition the GC controller reports a deletion's progress in.
pub const DELETING: &str = "Deleting";
/// Orders the GC's deletions in a cluster namespace (`CleanupPriorityAnnotationKey`).
pub const CLEANUP_PRIORITY: &str = "open-cluster-management.io/cleanup-priority";
/// How soon the GC looks again while resources remain (upstream's requeue time).
const GC_REQUEUE: Duration = Duration::from_secs(5);

/// Settings of a hub's registration controller.
#[derive(Clone, Debug)]
pub struct RegistrationOptions {
    /// How often the lease judge looks at every cluster lease.
    pub lease_check_interval: Duration,
}

impl Default for RegistrationOptions {
    fn default() -> Self {
        Self {
            lease_check_interval: Duration::from_secs(10),
        }
    }
}

/// Starts the controllers; they run until the returned handles are aborted.
pub fn spawn(client: Client, opts: RegistrationOptions) -> Vec<tokio::task::JoinHandle<()>> {
    vec![
        tokio::spawn(approve_csrs(client.clone())),
        tokio::spawn(run_cluster_controller(client.clone())),
        tokio::spawn(judge_leases(client.clone(), opts.lease_check_interval)),
        tokio::spawn(run_taint_controller(client)),
    ]
}

fn feature_enabled(cm: &ClusterManager, gate: &str) -> bool {
    cm.spec
        .registration_configuration
        .as_ref()
        .and_then(|r| r.feature_gates.as_ref())
        .is_some_and(|gs| {
            gs.iter()
                .any(|g| g.feature == gate && g.mode.as_deref() == Some("Enable"))
        })
}

fn auto_approve_users(cm: &ClusterManager) -> Vec<String> {
    cm.spec
        .registration_configuration
        .as_ref()
        .and_then(|r| r.auto_approve_users.clone())
        .unwrap_or_default()
}

fn decided(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Approved" || c.type_ == "Denied")
        })
}

async fn approve_csrs(client: Client) {
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let clusters: Api<ManagedCluster> = Api::all(client.clone());
    let cms: Api<ClusterManager> = Api::all(client.clone());
    let cfg = watcher::Config::default().labels(CLUSTER_NAME_LABEL);
    let mut stream = std::pin::pin!(kube::runtime::WatchStreamExt::default_backoff(watcher(
        csrs.clone(),
        cfg
    )));
    while let Some(ev) = stream.next().await {
        let csr = match ev {
            Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => c,
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "csr watch");
                continue;
            }
        };
        if decided(&csr) {
            continue;
        }
        if let Err(e) = consider_csr(&csrs, &clusters, &cms, &csr).await {
            tracing::warn!(csr = %csr.name_any(), error = %e, "csr approval failed");
        }
    }
}

async fn consider_csr(
    csrs: &Api<CertificateSigningRequest>,
    clusters: &Api<ManagedCluster>,
    cms: &Api<ClusterManager>,
    csr: &CertificateSigningRequest,
) -> Result<(), kube::Error> {
    let Some(cluster) = csr.labels().get(CLUSTER_NAME_LABEL).cloned() else {
        return Ok(());
    };
    let username = csr.spec.username.clone().unwrap_or_default();
    let pem = String::from_utf8(csr.spec.request.0.clone()).unwrap_or_default();
    let Ok((cn, groups)) = kube_sim::pki::csr_subject(&pem) else {
        return Ok(());
    };
    let prefix = format!("system:open-cluster-management:{cluster}:");
    if !cn.starts_with(&prefix) || !groups.contains(&names::cluster_group(&cluster)) {
        return Ok(());
    }
    let mc = clusters.get_opt(&cluster).await?;
    let renewal = username == cn && mc.as_ref().is_some_and(|m| m.spec.hub_accepts_client);
    let auto = match cms.get_opt("cluster-manager").await? {
        Some(cm) => {
            feature_enabled(&cm, "ManagedClusterAutoApproval")
                && auto_approve_users(&cm).contains(&username)
        }
        None => false,
    };
    if !renewal && !auto {
        return Ok(());
    }
    let reason = if renewal {
        "AutoApprovedByHubCSRApprovingController"
    } else {
        "AutoApprovedByHubClusterAutoApproval"
    };
    let approval = json!({"status": {"conditions": [{"type": "Approved", "status": "True", "reason": reason,
        "message": "Auto approving Managed cluster agent certificate", "lastUpdateTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()}]}});
    csrs.patch_approval(
        &csr.name_any(),
        &PatchParams::default(),
        &Patch::Merge(approval),
    )
    .await?;
    if auto && mc.is_some_and(|m| !m.spec.hub_accepts_client) {
        let accept = PatchParams {
            field_manager: Some(MANAGER.into()),
            ..Default::default()
        };
        clusters
            .patch(
                &cluster,
                &accept,
                &Patch::Merge(json!({"spec": {"hubAcceptsClient": true}})),
            )
            .await?;
    }
    Ok(())
}

/// Why reconciling a ManagedCluster failed.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

struct Ctx {
    client: Client,
    /// The clusters (by uid) whose namespace, RBAC and lease this controller has applied and
    /// not revoked since. Upstream applies them through `resourceapply` with a resource cache
    /// (ocm pkg/registration/hub/managedcluster/controller.go), which writes nothing while
    /// what is required has not changed; so the simulator applies them once per acceptance,
    /// not on every status update of the cluster.
    granted: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The retries of failed reconciles, as the factory queue spaces them.
    retries: crate::backoff::Retries,
}

impl Ctx {
    fn granted(&self, uid: &str) -> bool {
        self.granted.lock().is_ok_and(|g| g.contains(uid))
    }

    fn set_granted(&self, uid: String, granted: bool) {
        if let Ok(mut g) = self.granted.lock() {
            if granted {
                g.insert(uid);
            } else {
                g.remove(&uid);
            }
        }
    }
}

async fn run_cluster_controller(client: Client) {
    let clusters: Api<ManagedCluster> = Api::all(client.clone());
    // Each watch has its own back-off and keeps its errors (`migration_api::runtime::controller`,
    // `watch_events`), as every informer's reflector does upstream (ocm's registration hub
    // controllers, on shared informers): client-go `tools/cache/reflector.go` (vendored in ocm)
    // gives each reflector `NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0)`, so one
    // watch's error never pauses another's.
    let controller = migration_api::runtime::controller(clusters, watcher::Config::default());
    // Deleting clusters wait for what is left in their namespace: watch it go.
    let deleting = controller.store();
    let by_addon = deleting.clone();
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        granted: std::sync::Mutex::default(),
        retries: crate::backoff::Retries::default(),
    });
    controller
        .watches_stream(
            migration_api::runtime::watch_events(
                Api::<ManifestWork>::all(client.clone()),
                watcher::Config::default(),
            ),
            move |w: ManifestWork| deleting_cluster(&deleting, w.namespace()),
        )
        .watches_stream(
            migration_api::runtime::watch_events(
                Api::<ManagedClusterAddOn>::all(client),
                watcher::Config::default(),
            ),
            move |a: ManagedClusterAddOn| deleting_cluster(&by_addon, a.namespace()),
        )
        .run(
            |mc, ctx| async move {
                let done = reconcile(mc.clone(), ctx.clone()).await;
                ctx.retries.settled(&mc.name_any(), done)
            },
            |mc, _, ctx| Action::requeue(ctx.retries.when(&mc.name_any(), Instant::now())),
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

/// The cluster of namespace `ns`, if it is being deleted.
fn deleting_cluster(
    store: &Store<ManagedCluster>,
    ns: Option<String>,
) -> Option<ObjectRef<ManagedCluster>> {
    let r = ObjectRef::new(&ns?);
    store
        .get(&r)
        .filter(|mc| mc.metadata.deletion_timestamp.is_some())
        .map(|_| r)
}

/// Upstream runs two controllers on a ManagedCluster, each with its finalizer:
/// `pkg/registration/hub/managedcluster/controller.go` (`api-resource-cleanup`: accept or
/// deny; on deletion the cluster's RBAC goes, and the finalizer only once no ManifestWork is
/// left in its namespace) and, with the ResourceCleanup feature gate (beta, on by default),
/// `pkg/registration/hub/gc/controller.go` (`resource-cleanup`, see [`collect_garbage`]).
/// Neither deletes the cluster's namespace (ACM's import controller does, `import.rs`).
async fn reconcile(mc: Arc<ManagedCluster>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let api: Api<ManagedCluster> = Api::all(ctx.client.clone());
    let client = &ctx.client;
    let name = mc.name_any();
    if mc.metadata.deletion_timestamp.is_none() {
        for f in [CLEANUP_FINALIZER, GC_FINALIZER] {
            if finalizers::add(&api, &*mc, f).await? {
                // The next event carries the list as it is now.
                return Ok(Action::await_change());
            }
        }
        let uid = mc.uid().unwrap_or_default();
        if mc.spec.hub_accepts_client {
            if !ctx.granted(&uid) {
                grant(client, &mc).await?;
                ctx.set_granted(uid, true);
            }
            accepted(client, &mc).await?;
        } else {
            ctx.set_granted(uid, false);
            deny(client, &mc).await?;
        }
        return Ok(Action::await_change());
    }
    ctx.set_granted(mc.uid().unwrap_or_default(), false);
    let mut requeue = false;
    if mc.finalizers().iter().any(|f| f == GC_FINALIZER) {
        match collect_garbage(client, &name).await? {
            Some(remaining) => {
                apply_condition(
                    client,
                    &mc,
                    DELETING,
                    "False",
                    "ResourceRemaining",
                    &remaining,
                )
                .await?;
                requeue = true;
            }
            None => {
                apply_condition(
                    client,
                    &mc,
                    DELETING,
                    "True",
                    "NoResource",
                    "No cleaned resource in cluster ns.",
                )
                .await?;
                finalizers::remove(&api, &name, GC_FINALIZER).await?;
            }
        }
    }
    if mc.finalizers().iter().any(|f| f == CLEANUP_FINALIZER) {
        if cleanup(client, &name).await? {
            finalizers::remove(&api, &name, CLEANUP_FINALIZER).await?;
        } else {
            requeue = true;
        }
    }
    Ok(if requeue {
        Action::requeue(GC_REQUEUE)
    } else {
        Action::await_change()
    })
}

/// Upstream `pkg/registration/hub/gc/gc_resources.go`: in the cluster's namespace, the first
/// kind of the gc-resource-list (default: managedclusteraddons, then manifestworks) that has
/// objects left has those of the lowest `open-cluster-management.io/cleanup-priority` deleted
/// (a ManifestWork then waits for its work agent to remove its finalizer), and the cluster's
/// `Deleting` condition says what remains; `None` once nothing does.
async fn collect_garbage(client: &Client, ns: &str) -> Result<Option<String>, kube::Error> {
    let addons: Api<ManagedClusterAddOn> = Api::namespaced(client.clone(), ns);
    let works: Api<ManifestWork> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default();
    // The first kind with objects left is the one worked on (works are read only once no
    // addon is left).
    let addon_list: Vec<ObjectMeta> = (addons.list_metadata(&lp).await?.items.into_iter())
        .map(|o| o.metadata)
        .collect();
    let (kind, items) = if !addon_list.is_empty() {
        ("managedclusteraddons", addon_list)
    } else {
        let work_list: Vec<ObjectMeta> = (works.list_metadata(&lp).await?.items.into_iter())
            .map(|o| o.metadata)
            .collect();
        if work_list.is_empty() {
            return Ok(None);
        }
        ("manifestworks", work_list)
    };
    let pending = items
        .iter()
        .filter(|m| m.finalizers.as_ref().is_some_and(|f| !f.is_empty()))
        .count();
    let first = items.iter().map(cleanup_priority).min().unwrap_or(0);
    for m in items.iter().filter(|m| cleanup_priority(m) == first) {
        let name = m.name.clone().unwrap_or_default();
        let deleted = if kind == "managedclusteraddons" {
            addons
                .delete(&name, &DeleteParams::default())
                .await
                .map(drop)
        } else {
            works
                .delete(&name, &DeleteParams::default())
                .await
                .map(drop)
        };
        ignore_not_found(deleted)?;
    }
    Ok(Some(format!(
        "The resource {kind} is remaning, the remaining count is {}, the finalizer pending count is {pending}",
        items.len()
    )))
}

/// `open-cluster-management.io/cleanup-priority`, 0 to 100 (0 when absent or invalid).
fn cleanup_priority(m: &ObjectMeta) -> i64 {
    m.annotations
        .as_ref()
        .and_then(|a| a.get(CLEANUP_PRIORITY))
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|p| (0..=100).contains(p))
        .unwrap_or(0)
}

fn ssa() -> PatchParams {
    PatchParams::apply(MANAGER).force()
}

/// What an accepted cluster's agent needs on the hub: its namespace, RBAC and lease.
async fn grant(client: &Client, mc: &ManagedCluster) -> Result<(), ReconcileError> {
    let name = mc.name_any();
    let role = names::cluster_role(&name);
    let group = names::cluster_group(&name);
    Api::<Namespace>::all(client.clone())
        .patch(
            &name,
            &ssa(),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
            ),
        )
        .await?;
    Api::<ClusterRole>::all(client.clone())
        .patch(&role, &ssa(), &Patch::Apply(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
            "rules": [
                {"apiGroups": ["cluster.open-cluster-management.io"], "resources": ["managedclusters"], "resourceNames": [name], "verbs": ["get", "list", "watch", "update", "patch"]},
                {"apiGroups": ["cluster.open-cluster-management.io"], "resources": ["managedclusters/status"], "resourceNames": [name], "verbs": ["get", "update", "patch"]},
                {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["create", "get", "list", "watch"]},
                {"apiGroups": ["register.open-cluster-management.io"], "resources": ["managedclusters/accept"], "resourceNames": [name], "verbs": ["update"]}
            ]
        })))
        .await?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(&role, &ssa(), &Patch::Apply(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]
        })))
        .await?;
    let agent_role = format!("{role}:agent");
    Api::<Role>::namespaced(client.clone(), &name)
        .patch(&agent_role, &ssa(), &Patch::Apply(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": agent_role, "namespace": name},
            "rules": [
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "watch", "create", "update", "patch"]},
                {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
                {"apiGroups": ["work.open-cluster-management.io"], "resources": ["manifestworks"], "verbs": ["get", "list", "watch", "update", "patch"]},
                {"apiGroups": ["work.open-cluster-management.io"], "resources": ["manifestworks/status"], "verbs": ["get", "update", "patch"]},
                {"apiGroups": ["addon.open-cluster-management.io"], "resources": ["managedclusteraddons"], "verbs": ["get", "list", "watch", "update", "patch"]},
                {"apiGroups": ["addon.open-cluster-management.io"], "resources": ["managedclusteraddons/status"], "verbs": ["get", "update", "patch"]}
            ]
        })))
        .await?;
    Api::<RoleBinding>::namespaced(client.clone(), &name)
        .patch(&agent_role, &ssa(), &Patch::Apply(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": agent_role, "namespace": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": agent_role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]
        })))
        .await?;
    create_lease(client, &name).await
}

/// The cluster's lease, created as upstream's lease controller creates a missing one
/// (ocm `pkg/registration/hub/lease/controller.go` `sync`): renewed now, so that the cluster
/// has a full grace period before its agent's first renewal. One already there is kept (the
/// create fails with a conflict).
async fn create_lease(client: &Client, cluster: &str) -> Result<(), ReconcileError> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), cluster);
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(CLUSTER_LEASE.to_owned()),
            namespace: Some(cluster.to_owned()),
            labels: Some([(CLUSTER_NAME_LABEL.to_owned(), cluster.to_owned())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(CLUSTER_LEASE.to_owned()),
            renew_time: Some(MicroTime(jiff::Timestamp::now())),
            ..LeaseSpec::default()
        }),
    };
    match leases.create(&Default::default(), &lease).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn accepted(client: &Client, mc: &ManagedCluster) -> Result<(), ReconcileError> {
    apply_condition(
        client,
        mc,
        HUB_ACCEPTED,
        "True",
        "HubClusterAdminAccepted",
        "Accepted by hub cluster admin",
    )
    .await
}

async fn deny(client: &Client, mc: &ManagedCluster) -> Result<(), ReconcileError> {
    let name = mc.name_any();
    revoke(client, &name).await?;
    let accepted_before = find_condition(mc.conditions(), HUB_ACCEPTED).is_some();
    if accepted_before || !mc.spec.hub_accepts_client {
        apply_condition(
            client,
            mc,
            HUB_ACCEPTED,
            "False",
            "HubClusterAdminDenied",
            "Denied by hub cluster admin",
        )
        .await?;
    }
    Ok(())
}

async fn revoke(client: &Client, name: &str) -> Result<(), kube::Error> {
    let role = names::cluster_role(name);
    ignore_not_found(
        Api::<ClusterRoleBinding>::all(client.clone())
            .delete(&role, &DeleteParams::default())
            .await,
    )?;
    let agent_role = format!("{role}:agent");
    ignore_not_found(
        Api::<RoleBinding>::namespaced(client.clone(), name)
            .delete(&agent_role, &DeleteParams::default())
            .await,
    )?;
    Ok(())
}

/// The deleted cluster's RBAC goes; its agent's namespaced role binding (upstream: the work
/// role binding, held by a finalizer) stays while ManifestWorks are left, so that its work
/// agent can still finish them. True once nothing is left.
async fn cleanup(client: &Client, name: &str) -> Result<bool, ReconcileError> {
    let role = names::cluster_role(name);
    ignore_not_found(
        Api::<ClusterRoleBinding>::all(client.clone())
            .delete(&role, &DeleteParams::default())
            .await,
    )?;
    ignore_not_found(
        Api::<ClusterRole>::all(client.clone())
            .delete(&role, &DeleteParams::default())
            .await,
    )?;
    let works: Api<ManifestWork> = Api::namespaced(client.clone(), name);
    if !works
        .list_metadata(&ListParams::default().limit(1))
        .await?
        .items
        .is_empty()
    {
        return Ok(false);
    }
    revoke(client, name).await?;
    Ok(true)
}

/// Applies one condition the registration controller owns (server-side apply keeps the
/// agent's conditions: the list is keyed by type).
async fn apply_condition(
    client: &Client,
    mc: &ManagedCluster,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
) -> Result<(), ReconcileError> {
    // Server-side apply: every apply carries all the conditions this controller owns, or the
    // ones left out would be removed.
    let mut current: Vec<Condition> = mc
        .conditions()
        .iter()
        .filter(|c| [HUB_ACCEPTED, CLUSTER_AVAILABLE, DELETING].contains(&c.type_.as_str()))
        .cloned()
        .collect();
    if !set_condition(&mut current, type_, status, reason, message, None) {
        return Ok(());
    }
    let api: Api<ManagedCluster> = Api::all(client.clone());
    api.patch_status(
        &mc.name_any(),
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": mc.name_any()}, "status": {"conditions": current}
        })),
    )
    .await?;
    Ok(())
}

/// Marks clusters Unknown (with the unreachable taint) once their lease is older than five
/// lease durations. Clusters and leases are read from watch caches, as upstream's lease
/// controller reads them from informers (ocm pkg/registration/hub/lease/controller.go), never
/// listed from the API server per round.
async fn judge_leases(client: Client, every: Duration) {
    let (clusters, cluster_events) = migration_api::runtime::cached_watch(
        Api::<ManagedCluster>::all(client.clone()),
        watcher::Config::default(),
    );
    let (leases, lease_events) = migration_api::runtime::cached_watch(
        Api::<Lease>::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={CLUSTER_LEASE}")),
    );
    let feeding = futures::future::join(
        cluster_events.for_each(|_| async {}),
        lease_events.for_each(|_| async {}),
    );
    let judging = async {
        // Judged only once both caches are filled: an empty lease cache would make every
        // cluster look stale.
        if clusters.wait_until_ready().await.is_err() || leases.wait_until_ready().await.is_err() {
            return;
        }
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            judge_once(&client, &clusters, &leases).await;
        }
    };
    tokio::select! {
        _ = feeding => {}
        () = judging => {}
    }
}

async fn judge_once(client: &Client, clusters: &Store<ManagedCluster>, leases: &Store<Lease>) {
    let renewed: std::collections::HashMap<String, Option<jiff::Timestamp>> = leases
        .state()
        .iter()
        .filter_map(|l| {
            let ns = l.namespace()?;
            Some((ns, l.spec.as_ref()?.renew_time.as_ref().map(|t| t.0)))
        })
        .collect();
    let now = jiff::Timestamp::now();
    for mc in clusters.state() {
        let name = mc.name_any();
        let duration = i64::from(mc.spec.lease_duration_seconds.unwrap_or(60).max(1));
        let lease = match renewed.get(&name) {
            Some(t) => SeenLease::Renewed(*t),
            None => SeenLease::Missing,
        };
        let verdict = lease_verdict(&mc, lease, now.as_second(), duration);
        // One cluster's failed update does not hold up the others' judgement.
        let result = match verdict {
            LeaseVerdict::Skip => Ok(()),
            LeaseVerdict::CreateLease => create_lease(client, &name).await,
            LeaseVerdict::Judge { fresh } => judge_cluster(client, &mc, fresh).await,
        };
        if let Err(e) = result {
            tracing::debug!(cluster = %name, error = %e, "lease judge");
        }
    }
}

/// A cluster's lease as the judge's cache holds it.
#[derive(Clone, Copy, Debug)]
enum SeenLease {
    Missing,
    Renewed(Option<jiff::Timestamp>),
}

/// What the lease judge does with one cluster.
#[derive(Debug, PartialEq, Eq)]
enum LeaseVerdict {
    Skip,
    CreateLease,
    Judge { fresh: bool },
}

/// Upstream's lease controller (ocm `pkg/registration/hub/lease/controller.go` `sync`): a
/// cluster never accepted (no HubAccepted condition) is skipped; one accepted now or before
/// whose lease is missing gets one (renewed now), unless it is being deleted, which makes it
/// Unknown at once; otherwise it is stale once its lease is older than five lease durations.
/// Available True is the agent's report (its status controller), not the judge's.
fn lease_verdict(mc: &ManagedCluster, lease: SeenLease, now: i64, duration: i64) -> LeaseVerdict {
    if find_condition(mc.conditions(), HUB_ACCEPTED).is_none() {
        return LeaseVerdict::Skip;
    }
    let deleting = mc.metadata.deletion_timestamp.is_some();
    match lease {
        SeenLease::Missing if deleting => LeaseVerdict::Judge { fresh: false },
        SeenLease::Missing => LeaseVerdict::CreateLease,
        SeenLease::Renewed(t) => LeaseVerdict::Judge {
            fresh: t.is_some_and(|t| now - t.as_second() < 5 * duration),
        },
    }
}

async fn judge_cluster(
    client: &Client,
    mc: &ManagedCluster,
    fresh: bool,
) -> Result<(), ReconcileError> {
    // Upstream's lease controller writes nothing for a fresh lease: Available True is the
    // agent's own report (its status controller, `klusterlet.rs`), never the hub's.
    if fresh {
        return Ok(());
    }
    apply_condition(
        client,
        mc,
        CLUSTER_AVAILABLE,
        "Unknown",
        "ManagedClusterLeaseUpdateStopped",
        "Registration agent stopped updating its lease.",
    )
    .await
}

/// Upstream's taint controller (ocm `pkg/registration/hub/taint/controller.go`), run on
/// every change of a ManagedCluster: its availability taints follow its Available condition,
/// none or Unknown: `unreachable`, False: `unavailable`, True: neither; a cluster being
/// deleted is left alone. The list is written through sdk-go's patcher, which sends the uid
/// and resourceVersion it read (`pkg/patcher/patcher.go`): a list changed since by anyone else
/// is not overwritten, the write fails with a conflict and the cluster is looked at again.
/// A refused write is retried as the controller's factory queue retries it
/// ([`crate::backoff::Retries`]), or at once when the cluster changes meanwhile.
async fn run_taint_controller(client: Client) {
    let clusters: Api<ManagedCluster> = Api::all(client.clone());
    let ctx = Arc::new((client, crate::backoff::Retries::default()));
    // One watch, with its own back-off (see `run_cluster_controller`).
    migration_api::runtime::controller(clusters, watcher::Config::default())
        .run(
            |mc: Arc<ManagedCluster>, ctx: Arc<(Client, crate::backoff::Retries)>| async move {
                if let Some(taints) = availability_taints(&mc) {
                    Api::<ManagedCluster>::all(ctx.0.clone())
                        .patch(
                            &mc.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(json!({
                                "metadata": {"uid": mc.uid(), "resourceVersion": mc.resource_version()},
                                "spec": {"taints": taints}
                            })),
                        )
                        .await?;
                }
                ctx.1.forget(&mc.name_any());
                Ok::<_, ReconcileError>(Action::await_change())
            },
            |mc, _, ctx| Action::requeue(ctx.1.when(&mc.name_any(), Instant::now())),
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

/// The taints `mc` should carry as upstream's taint controller decides them, if they are not
/// what it carries.
fn availability_taints(mc: &ManagedCluster) -> Option<Vec<Taint>> {
    if mc.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let available = find_condition(mc.conditions(), CLUSTER_AVAILABLE).map(|c| c.status.as_str());
    let wanted: &[&str] = match available {
        None | Some("Unknown") => &[UNREACHABLE_TAINT],
        Some("False") => &[UNAVAILABLE_TAINT],
        _ => &[],
    };
    let current = mc.spec.taints.as_deref().unwrap_or_default();
    let mut taints: Vec<Taint> = current
        .iter()
        .filter(|t| {
            ![UNREACHABLE_TAINT, UNAVAILABLE_TAINT].contains(&t.key.as_str())
                || wanted.contains(&t.key.as_str())
        })
        .cloned()
        .collect();
    for key in wanted {
        if !taints.iter().any(|t| t.key == *key) {
            // No `timeAdded`: the ManagedCluster webhook sets it, and refuses a new taint that
            // comes with one (ocm pkg/registration/webhook/v1/managedcluster_mutating.go).
            taints.push(Taint {
                key: (*key).to_owned(),
                value: None,
                effect: "NoSelect".into(),
                time_added: None,
            });
        }
    }
    (taints.as_slice() != current).then_some(taints)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(accepted_condition: bool, deleting: bool) -> ManagedCluster {
        let mut mc: ManagedCluster = serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": "c1"}, "spec": {"hubAcceptsClient": true}
        }))
        .unwrap();
        if accepted_condition {
            set_condition(
                mc.status
                    .get_or_insert_default()
                    .conditions
                    .get_or_insert_default(),
                HUB_ACCEPTED,
                "True",
                "HubClusterAdminAccepted",
                "Accepted by hub cluster admin",
                None,
            );
        }
        if deleting {
            mc.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
            );
        }
        mc
    }

    /// Upstream `pkg/registration/hub/lease/controller.go` `sync`, case by case.
    #[test]
    fn the_lease_judge_follows_upstreams_lease_controller() {
        let at = |s: i64| Some(jiff::Timestamp::from_second(s).unwrap());
        let now = 1_000;
        let rows = [
            // (HubAccepted present, deleting, lease, verdict)
            (false, false, SeenLease::Renewed(None), LeaseVerdict::Skip),
            (false, false, SeenLease::Missing, LeaseVerdict::Skip),
            (true, false, SeenLease::Missing, LeaseVerdict::CreateLease),
            (
                true,
                true,
                SeenLease::Missing,
                LeaseVerdict::Judge { fresh: false },
            ),
            (
                true,
                false,
                SeenLease::Renewed(at(now - 299)),
                LeaseVerdict::Judge { fresh: true },
            ),
            (
                true,
                false,
                SeenLease::Renewed(at(now - 300)),
                LeaseVerdict::Judge { fresh: false },
            ),
            (
                true,
                true,
                SeenLease::Renewed(at(now)),
                LeaseVerdict::Judge { fresh: true },
            ),
            (
                true,
                false,
                SeenLease::Renewed(None),
                LeaseVerdict::Judge { fresh: false },
            ),
        ];
        for (accepted, deleting, lease, want) in rows {
            let got = lease_verdict(&cluster(accepted, deleting), lease, now, 60);
            assert_eq!(
                got, want,
                "accepted {accepted}, deleting {deleting}, {lease:?}"
            );
        }
    }

    /// Upstream `pkg/registration/hub/taint/controller.go`: the availability taints follow
    /// the Available condition, others stay as they are, a cluster being deleted is left alone.
    #[test]
    fn availability_taints_follow_the_available_condition() {
        let ours = Taint {
            key: "example.com/ours".into(),
            value: Some("v".into()),
            effect: "NoSelectIfNew".into(),
            time_added: None,
        };
        let with = |available: Option<&str>, keys: &[&str], deleting: bool| {
            let mut mc = cluster(true, deleting);
            if let Some(status) = available {
                set_condition(
                    mc.status
                        .get_or_insert_default()
                        .conditions
                        .get_or_insert_default(),
                    CLUSTER_AVAILABLE,
                    status,
                    "r",
                    "m",
                    None,
                );
            }
            let mut taints = vec![ours.clone()];
            taints.extend(keys.iter().map(|k| Taint {
                key: (*k).to_owned(),
                value: None,
                effect: "NoSelect".into(),
                time_added: None,
            }));
            mc.spec.taints = Some(taints);
            mc
        };
        let keys =
            |t: Option<Vec<Taint>>| t.map(|t| t.into_iter().map(|t| t.key).collect::<Vec<_>>());
        let (r, u, o) = (UNREACHABLE_TAINT, UNAVAILABLE_TAINT, "example.com/ours");
        // (Available, availability taints on, deleting, the taint keys written: None = none)
        type Row<'a> = (Option<&'a str>, &'a [&'a str], bool, Option<Vec<&'a str>>);
        let rows: [Row; 8] = [
            (None, &[], false, Some(vec![o, r])),
            (None, &[r], false, None),
            (Some("Unknown"), &[u], false, Some(vec![o, r])),
            (Some("False"), &[r], false, Some(vec![o, u])),
            (Some("False"), &[u], false, None),
            (Some("True"), &[r, u], false, Some(vec![o])),
            (Some("True"), &[], false, None),
            (None, &[], true, None),
        ];
        for (available, have, deleting, want) in rows {
            let got = keys(availability_taints(&with(available, have, deleting)));
            let want = want.map(|w| w.into_iter().map(str::to_owned).collect::<Vec<_>>());
            assert_eq!(got, want, "{available:?} {have:?} deleting {deleting}");
        }
    }
}
