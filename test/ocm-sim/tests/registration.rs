//! Clusters register with a hub as OCM's do: CSR, approval, acceptance, Joined and Available
//! (the agent's report), Unknown and the unreachable taint when the lease stops, and RBAC
//! revoked on denial.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams};
use migration_api::common::find_condition;
use migration_api::ocm::cluster::ManagedCluster;
use ocm_sim::cluster::{Role, SimCluster};
use ocm_sim::hub::{Agent, Hub, HubOptions};
use serde_json::json;

fn status_of(mc: &ManagedCluster, t: &str) -> String {
    mc.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .and_then(|c| find_condition(c, t))
        .map(|c| c.status.clone())
        .unwrap_or_default()
}

async fn wait_for<F: Fn(&[ManagedCluster]) -> bool>(
    api: &Api<ManagedCluster>,
    deadline: Duration,
    what: &str,
    check: F,
) -> Vec<ManagedCluster> {
    let start = Instant::now();
    loop {
        let list = api.list(&ListParams::default()).await.unwrap().items;
        if check(&list) {
            return list;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out waiting for {what}: {list:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A hub started with `opts`, and cluster1, whose klusterlet bootstraps with it.
async fn hub_with_one_cluster(opts: HubOptions) -> (Hub, SimCluster, Agent, Api<ManagedCluster>) {
    let hub = Hub::start("hub1", opts).await.unwrap();
    let c = SimCluster::start("cluster1", Role::Managed).await.unwrap();
    let agent = Agent::start(&c, &hub.bootstrap_kubeconfig, common::fast_agent())
        .await
        .unwrap();
    let api: Api<ManagedCluster> = Api::all(hub.cluster.admin.clone());
    (hub, c, agent, api)
}

#[tokio::test]
async fn clusters_join_become_available_and_go_unknown_when_their_lease_stops() {
    let hub = Hub::start("hub1", common::fast_hub()).await.unwrap();
    let mut agents = Vec::new();
    let mut clusters = Vec::new();
    for i in 0..3 {
        let c = SimCluster::start(&format!("cluster{i}"), Role::Managed)
            .await
            .unwrap();
        agents.push(
            Agent::start(&c, &hub.bootstrap_kubeconfig, common::fast_agent())
                .await
                .unwrap(),
        );
        clusters.push(c);
    }
    let api: Api<ManagedCluster> = Api::all(hub.cluster.admin.clone());
    let list = wait_for(
        &api,
        Duration::from_secs(20),
        "3 joined and available clusters",
        |l| {
            l.len() == 3
                && l.iter().all(|m| {
                    status_of(m, "ManagedClusterJoined") == "True"
                        && status_of(m, "ManagedClusterConditionAvailable") == "True"
                })
        },
    )
    .await;
    for mc in &list {
        assert!(mc.spec.hub_accepts_client);
        assert_eq!(status_of(mc, "HubAcceptedManagedCluster"), "True");
        let claims = mc.status.as_ref().unwrap().cluster_claims.clone().unwrap();
        assert_eq!(claims[0].value.as_deref(), mc.metadata.name.as_deref());
        let url = &mc.spec.managed_cluster_client_configs.as_ref().unwrap()[0].url;
        assert!(url.starts_with("https://127.0.0.1:"));
    }
    // Every CSR was approved and issued.
    let csrs: Api<CertificateSigningRequest> = Api::all(hub.cluster.admin.clone());
    let csrs = csrs
        .list(&ListParams::default().labels("open-cluster-management.io/cluster-name"))
        .await
        .unwrap();
    assert_eq!(csrs.items.len(), 3);
    assert!(csrs.items.iter().all(|c| {
        c.status
            .as_ref()
            .and_then(|s| s.certificate.as_ref())
            .is_some()
    }));

    // Stop cluster1's klusterlet: its lease goes stale, the hub marks it Unknown and taints it.
    agents[1].stop();
    let list = wait_for(
        &api,
        Duration::from_secs(20),
        // The taint follows the condition (OCM's taint controller reacts to it), so wait
        // for both.
        "cluster1 to go Unknown and be tainted unreachable",
        |l| {
            l.iter().any(|m| {
                m.metadata.name.as_deref() == Some("cluster1")
                    && status_of(m, "ManagedClusterConditionAvailable") == "Unknown"
                    && m.spec
                        .taints
                        .iter()
                        .flatten()
                        .any(|t| t.key == "cluster.open-cluster-management.io/unreachable")
            })
        },
    )
    .await;
    for other in ["cluster0", "cluster2"] {
        let m = list
            .iter()
            .find(|m| m.metadata.name.as_deref() == Some(other))
            .unwrap();
        assert_eq!(status_of(m, "ManagedClusterConditionAvailable"), "True");
    }
}

/// Available True is the agent's own report, written as soon as the hub accepts the cluster
/// (upstream's status controller, `pkg/registration/spoke/managedcluster/status_controller.go`,
/// syncs at every change of its ManagedCluster): not the hub's lease judge, which here looks
/// only once an hour, and only ever writes Unknown.
#[tokio::test]
async fn a_cluster_reports_itself_available_as_the_hub_accepts_it() {
    let mut opts = common::fast_hub();
    opts.registration.lease_check_interval = Duration::from_secs(3600);
    let (_hub, _cluster, _agent, api) = hub_with_one_cluster(opts).await;
    let list = wait_for(
        &api,
        Duration::from_secs(20),
        "cluster1 Joined and Available",
        |l| {
            l.iter().any(|m| {
                status_of(m, "ManagedClusterJoined") == "True"
                    && status_of(m, "ManagedClusterConditionAvailable") == "True"
            })
        },
    )
    .await;
    // Written by the agent (its field manager owns the condition), not by the hub.
    let fields = serde_json::to_string(&list[0].metadata.managed_fields).unwrap();
    let agent_owns_available = list[0]
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| f.manager.as_deref() == Some("registration-agent"))
        .any(|f| {
            serde_json::to_string(&f.fields_v1)
                .unwrap()
                .contains(r#"{\"type\":\"ManagedClusterConditionAvailable\"}"#)
        });
    assert!(agent_owns_available, "{fields}");
}

#[tokio::test]
async fn without_auto_approval_a_cluster_waits_for_the_hub_admin() {
    let opts = HubOptions {
        auto_approve: false,
        ..common::fast_hub()
    };
    let (hub, _cluster, _agent, api) = hub_with_one_cluster(opts).await;
    wait_for(&api, Duration::from_secs(20), "the pending cluster", |l| {
        l.len() == 1 && !l[0].spec.hub_accepts_client
    })
    .await;
    let csrs: Api<CertificateSigningRequest> = Api::all(hub.cluster.admin.clone());
    let pending = loop {
        let l = csrs.list(&ListParams::default()).await.unwrap().items;
        if let Some(c) = l.into_iter().next() {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        pending
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_none(),
        "nobody approved it"
    );
    // The hub admin approves and accepts (what `clusteradm accept` does).
    let approval = json!({"status": {"conditions": [{"type": "Approved", "status": "True", "reason": "ClusterAdminApproved", "message": "ok"}]}});
    csrs.patch_approval(
        pending.metadata.name.as_deref().unwrap(),
        &PatchParams::default(),
        &Patch::Merge(approval),
    )
    .await
    .unwrap();
    api.patch(
        "cluster1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"hubAcceptsClient": true}})),
    )
    .await
    .unwrap();
    wait_for(&api, Duration::from_secs(20), "cluster1 available", |l| {
        status_of(&l[0], "ManagedClusterJoined") == "True"
            && status_of(&l[0], "ManagedClusterConditionAvailable") == "True"
    })
    .await;
    // Denying it again revokes the agent's hub RBAC.
    api.patch(
        "cluster1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"hubAcceptsClient": false}})),
    )
    .await
    .unwrap();
    wait_for(&api, Duration::from_secs(20), "HubAccepted False", |l| {
        status_of(&l[0], "HubAcceptedManagedCluster") == "False"
    })
    .await;
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> =
        Api::all(hub.cluster.admin.clone());
    assert!(
        bindings
            .get_opt("open-cluster-management:managedcluster:cluster1")
            .await
            .unwrap()
            .is_none()
    );
}

/// The hub creates an accepted cluster's lease renewed now, as upstream's lease controller
/// does (ocm `pkg/registration/hub/lease/controller.go`), so a cluster that has joined and
/// whose agent has not renewed yet is not judged unreachable: a fleet under load would
/// otherwise see its new clusters go Unknown, and ACM's import controller force-delete the
/// works of any of them deleted then.
#[tokio::test]
async fn a_joined_cluster_stays_available_before_its_agent_first_renews_its_lease() {
    let hub = Hub::start("hub1", common::fast_hub()).await.unwrap();
    let api: Api<ManagedCluster> = Api::all(hub.cluster.admin.clone());
    let mc: ManagedCluster = serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
        "metadata": {"name": "quiet"}, "spec": {"hubAcceptsClient": true, "leaseDurationSeconds": 60}
    }))
    .unwrap();
    api.create(&Default::default(), &mc).await.unwrap();
    wait_for(&api, Duration::from_secs(20), "quiet accepted", |l| {
        l.len() == 1 && status_of(&l[0], "HubAcceptedManagedCluster") == "True"
    })
    .await;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(hub.cluster.admin.clone(), "quiet");
    let lease = common::eventually(Duration::from_secs(20), "quiet's lease", || {
        let leases = leases.clone();
        async move { leases.get_opt("managed-cluster-lease").await.unwrap() }
    })
    .await;
    assert!(
        lease.spec.and_then(|s| s.renew_time).is_some(),
        "created renewed"
    );
    // Joined and Available, as its agent reports them; no agent renews the lease.
    api.patch_status(
        "quiet",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": [
            {"type": "HubAcceptedManagedCluster", "status": "True", "reason": "HubClusterAdminAccepted",
             "message": "Accepted by hub cluster admin", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "ManagedClusterJoined", "status": "True", "reason": "ManagedClusterJoined",
             "message": "joined", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "ManagedClusterConditionAvailable", "status": "True", "reason": "ManagedClusterAvailable",
             "message": "available", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]}})),
    )
    .await
    .unwrap();
    // The judge looks every 200 ms: over a second of its rounds the cluster stays Available.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1200) {
        let mc = api.get("quiet").await.unwrap();
        assert_eq!(
            status_of(&mc, "ManagedClusterConditionAvailable"),
            "True",
            "judged unreachable before its agent's first renewal"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // And the judge does look: the same lease, renewed long ago, makes it Unknown.
    leases
        .patch(
            "managed-cluster-lease",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"renewTime": "2026-01-01T00:00:00.000000Z"}})),
        )
        .await
        .unwrap();
    wait_for(&api, Duration::from_secs(20), "quiet judged Unknown", |l| {
        status_of(&l[0], "ManagedClusterConditionAvailable") == "Unknown"
    })
    .await;
}

/// A klusterlet on a plain OCM hub (no import controller rewrites its Klusterlet or its
/// bootstrap kubeconfig), connected in its first life, and its agent namespace's Secrets.
async fn a_plain_klusterlet() -> (Hub, SimCluster, Agent, Api<Secret>) {
    let opts = HubOptions {
        kind: ocm_sim::hub::HubKind::Plain,
        ..common::fast_hub()
    };
    let (hub, c, agent, _api) = hub_with_one_cluster(opts).await;
    let secrets = Api::namespaced(c.admin.clone(), ocm_sim::names::AGENT_NAMESPACE);
    next_life(&agent, 0, Instant::now()).await;
    (hub, c, agent, secrets)
}

/// The agent process's life `life` (or a later one), connected: how long after `at` it came.
async fn next_life(agent: &Agent, life: u64, at: Instant) -> Duration {
    common::eventually(Duration::from_secs(30), &format!("life {life}"), || async {
        agent.connected().filter(|c| c.life >= life).map(|_| ())
    })
    .await;
    at.elapsed()
}

/// Changes the data of the bootstrap kubeconfig (the agent process exits); returns when.
async fn touch_bootstrap(secrets: &Api<Secret>, n: u32) -> Instant {
    let at = Instant::now();
    secrets
        .patch(
            migration_api::names::BOOTSTRAP_HUB_KUBECONFIG,
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"touched": n.to_string()}})),
        )
        .await
        .unwrap();
    at
}

/// The klusterlet's agent process exits when its bootstrap kubeconfig changes
/// (`event_handler.go`), and the kubelet starts it again as it starts any container that
/// exits (CrashLoopBackOff, kubernetes `pkg/kubelet/kuberuntime/kuberuntime_manager.go`): at
/// once the first time, only 10 s after the second exit; a new pod (the old one deleted, or
/// redeployed by the operator) starts with no back-off.
#[tokio::test]
async fn a_klusterlet_that_restarts_itself_twice_waits_out_the_kubelets_back_off() {
    let (_hub, _c, agent, secrets) = a_plain_klusterlet().await;
    let first = next_life(&agent, 1, touch_bootstrap(&secrets, 1).await).await;
    assert!(
        first < Duration::from_secs(5),
        "first restart after {first:?}"
    );
    let second = next_life(&agent, 2, touch_bootstrap(&secrets, 2).await).await;
    assert!(
        second >= Duration::from_millis(9500),
        "second restart after {second:?}: the kubelet holds it 10 s"
    );
    // A deleted pod's replacement, then its first exit: neither is held.
    agent.kill();
    let replaced = next_life(&agent, 3, Instant::now()).await;
    assert!(
        replaced < Duration::from_secs(5),
        "new pod after {replaced:?}"
    );
    let again = next_life(&agent, 4, touch_bootstrap(&secrets, 3).await).await;
    assert!(
        again < Duration::from_secs(5),
        "new pod's first restart after {again:?}"
    );
}

/// Joining takes its time only where the klusterlet bootstraps: its first life does (the join
/// delay), while a restart that finds its saved hub kubeconfig valid for the hub it selects
/// skips the bootstrap and is back at once (ocm `pkg/registration/spoke/spokeagent.go`).
#[tokio::test]
async fn a_klusterlet_that_restarts_with_a_valid_hub_kubeconfig_does_not_join_again() {
    let join = Duration::from_secs(3);
    let hub = Hub::start(
        "hub1",
        HubOptions {
            kind: ocm_sim::hub::HubKind::Plain,
            ..common::fast_hub()
        },
    )
    .await
    .unwrap();
    let c = SimCluster::start("cluster1", Role::Managed).await.unwrap();
    let started = Instant::now();
    let agent = Agent::start(
        &c,
        &hub.bootstrap_kubeconfig,
        ocm_sim::hub::AgentOptions {
            join_delay: join,
            ..common::fast_agent()
        },
    )
    .await
    .unwrap();
    let first = next_life(&agent, 0, started).await;
    assert!(first >= join, "joined after {first:?}");
    let secrets: Api<Secret> = Api::namespaced(c.admin.clone(), ocm_sim::names::AGENT_NAMESPACE);
    let again = next_life(&agent, 1, touch_bootstrap(&secrets, 1).await).await;
    assert!(again < join, "back after {again:?}, without joining again");
}

/// A klusterlet whose process exited and waits out the kubelet's back-off is not held by it
/// when the operator replaces its pod meanwhile: a change of the Klusterlet's registration
/// settings changes the agent Deployment's pod template (ocm
/// `manifests/klusterlet/management/klusterlet-agent-deployment.yaml`), and the new pod has no
/// back-off (kubernetes `pkg/kubelet/kuberuntime/kuberuntime_manager.go`). As when an import
/// work rewrites `bootstrap-hub-kubeconfig` and the Klusterlet in one apply.
#[tokio::test]
async fn a_klusterlet_redeployed_while_it_waits_out_its_back_off_starts_at_once() {
    let (_hub, c, agent, secrets) = a_plain_klusterlet().await;
    // The first exit is restarted at once; the second one would be held 10 s.
    next_life(&agent, 1, touch_bootstrap(&secrets, 1).await).await;
    touch_bootstrap(&secrets, 2).await;
    common::eventually(Duration::from_secs(5), "the second exit", || async {
        agent.connected().is_none().then_some(())
    })
    .await;
    let at = Instant::now();
    Api::<migration_api::ocm::operator::Klusterlet>::all(c.admin.clone())
        .patch(
            migration_api::names::KLUSTERLET,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"registrationConfiguration": {"kubeAPIQPS": 60}}})),
        )
        .await
        .unwrap();
    let replaced = next_life(&agent, 2, at).await;
    assert!(
        replaced < Duration::from_secs(5),
        "the new pod started {replaced:?} after the Klusterlet changed"
    );
}

/// The status controller syncs when a ClusterClaim changes (its claim informer,
/// `status_controller.go`), not only at its ManagedCluster's changes and its minutely resync.
#[tokio::test]
async fn a_new_cluster_claim_reaches_the_hub_without_waiting_for_a_resync() {
    // Plain OCM, and a lease judge looking once an hour: nothing else writes the ManagedCluster.
    let mut opts = HubOptions {
        kind: ocm_sim::hub::HubKind::Plain,
        ..common::fast_hub()
    };
    opts.registration.lease_check_interval = Duration::from_secs(3600);
    let (_hub, c, _agent, api) = hub_with_one_cluster(opts).await;
    wait_for(&api, Duration::from_secs(20), "cluster1 Available", |l| {
        l.iter()
            .any(|m| status_of(m, "ManagedClusterConditionAvailable") == "True")
    })
    .await;
    Api::<migration_api::ocm::cluster::ClusterClaim>::all(c.admin.clone())
        .patch(
            "region.example.com",
            &PatchParams::apply("test"),
            &Patch::Apply(json!({
                "apiVersion": "cluster.open-cluster-management.io/v1alpha1", "kind": "ClusterClaim",
                "metadata": {"name": "region.example.com"}, "spec": {"value": "eu-west"}
            })),
        )
        .await
        .unwrap();
    wait_for(&api, Duration::from_secs(10), "the claim on the hub", |l| {
        l.iter().any(|m| {
            m.status
                .as_ref()
                .and_then(|s| s.cluster_claims.as_ref())
                .is_some_and(|claims| {
                    claims.iter().any(|c| {
                        c.name.as_deref() == Some("region.example.com")
                            && c.value.as_deref() == Some("eu-west")
                    })
                })
        })
    })
    .await;
}

/// A hub controller whose write is refused tries again as upstream's work queue would: the
/// taint controller's retries of one cluster back off from 5 ms, doubling (client-go's default
/// controller rate limiter, `backoff::Retries`), so its eleventh refusal comes more than five
/// seconds after the first, where a fixed pace of 200 ms reached it within two.
#[tokio::test]
async fn the_taint_controller_backs_off_a_refused_write() {
    common::logs();
    let hub = Hub::start("hub1", HubOptions::default()).await.unwrap();
    let api = &hub.cluster.api;
    let registration = "system:serviceaccount:open-cluster-management-hub:registration-controller";
    let mcs: Api<ManagedCluster> = Api::all(hub.cluster.admin.clone());
    mcs.create(
        &Default::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "refused"},
            "spec": {"hubAcceptsClient": false, "leaseDurationSeconds": 60}
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    let tainted = |l: &[ManagedCluster]| {
        l.iter().any(|mc| {
            mc.spec
                .taints
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|t| t.key == ocm_sim::names::UNREACHABLE_TAINT)
        })
    };
    // Settled: denied (the cluster controller has nothing more to write) and tainted.
    wait_for(&mcs, Duration::from_secs(30), "denied and tainted", |l| {
        tainted(l)
            && l.iter()
                .any(|mc| status_of(mc, "HubAcceptedManagedCluster") == "False")
    })
    .await;
    // The controller's writes to the cluster itself (its status is the cluster controller's).
    let writes = || -> u64 {
        api.metrics()
            .access_log()
            .iter()
            .filter(|(a, _)| {
                a.user == registration && a.verb == "patch" && a.resource == "managedclusters"
            })
            .map(|(_, n)| *n)
            .sum()
    };
    let before = writes();
    let refused = || writes() - before;
    api.faults().add_error(kube_sim::ErrorRule {
        verb: Some("patch".into()),
        resource: Some("managedclusters".into()),
        rate: 1.0,
        code: 409,
        user: Some(registration.into()),
    });
    // The admin takes the taint off: the controller puts it back, and is refused.
    mcs.patch(
        "refused",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"taints": []}})),
    )
    .await
    .unwrap();
    let first = common::eventually(Duration::from_secs(10), "the taint refused", || async {
        (refused() >= 1).then(Instant::now)
    })
    .await;
    common::eventually(Duration::from_secs(30), "eleven refusals", || async {
        (refused() >= 11).then_some(())
    })
    .await;
    let took = first.elapsed();
    assert!(
        took >= Duration::from_secs(4),
        "eleven refused taint writes within {took:?}: retried at a fixed pace"
    );
    api.faults().clear();
    // Once writes go through again, the next retry puts the taint back.
    wait_for(&mcs, Duration::from_secs(30), "the taint back", tainted).await;
}
