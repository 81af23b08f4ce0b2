//! Two replicas of the real addon-manager with leader election on: the second stays passive
//! while the leader's Lease is valid, takes over once it expires after the leader is killed,
//! and takes over at once when a leader shutting down cleanly releases it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use e2e::{Manager, addon_available, enable_addon, enable_addon_on, eventually, kubeconfig};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

const NS: &str = "open-cluster-management";
const LEASE: &str = "cluster-migration-addon-manager";
const LEASE_SECS: u64 = 4;

fn replica(name: &str, kc: &Path, dir: &Path) -> Manager {
    Manager::start_named(
        name,
        kc,
        dir,
        &[
            ("LEADER_ELECT", "true"),
            ("POD_NAMESPACE", NS),
            ("POD_NAME", name),
            ("LEADER_ELECTION_LEASE_DURATION", "4s"),
            ("LEADER_ELECTION_RENEW_DEADLINE", "3s"),
            ("LEADER_ELECTION_RETRY_PERIOD", "500ms"),
        ],
    )
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt(LEASE)
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

fn leads(m: &Manager) -> bool {
    m.logs().contains("became the leader")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_replica_stays_passive_until_the_leaders_lease_expires() {
    let dir = e2e::test_dir();
    let fleet = e2e::fleet(2, 1, &[env!("CARGO_PKG_VERSION")], dir.path()).await;
    let kc = kubeconfig(dir.path(), "global-hub");
    let global = fleet.global.cluster.admin.clone();
    let leases: Api<Lease> = Api::namespaced(global.clone(), NS);

    let mut a = replica("manager-a", &kc, dir.path());
    eventually(Duration::from_secs(30), "manager-a leads", || async {
        holder(&leases)
            .await
            .filter(|h| h.starts_with("manager-a_"))
            .map(|_| ())
    })
    .await;
    let b = replica("manager-b", &kc, dir.path());
    eventually(Duration::from_secs(30), "manager-b standing by", || async {
        b.logs().contains("standing by").then_some(())
    })
    .await;
    // The leader does the work: the addon becomes Available on hub1.
    enable_addon(&kc, &["hub1"]);
    addon_available(&global, &["hub1"], Duration::from_secs(60)).await;
    // Passivity shows only over time: for three lease durations b never leads (checked
    // every 250 ms), and a still holds the Lease at the end.
    let watch_until = Instant::now() + Duration::from_secs(3 * LEASE_SECS);
    while Instant::now() < watch_until {
        assert!(
            !leads(&b),
            "manager-b led while manager-a held the Lease:\n{}",
            b.logs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        holder(&leases).await.unwrap().starts_with("manager-a_"),
        "the Lease changed hands"
    );
    assert!(
        !b.logs().contains("addon-manager started"),
        "the standby started its controllers:\n{}",
        b.logs()
    );

    // The leader dies without releasing: b waits for the Lease to expire, then leads.
    let renewed = leases
        .get(LEASE)
        .await
        .unwrap()
        .spec
        .unwrap()
        .renew_time
        .unwrap()
        .0;
    a.kill();
    eventually(
        Duration::from_secs(4 * LEASE_SECS),
        "manager-b leads",
        || async {
            holder(&leases)
                .await
                .filter(|h| h.starts_with("manager-b_"))
                .map(|_| ())
        },
    )
    .await;
    let acquired = leases.get(LEASE).await.unwrap().spec.unwrap();
    let taken_at = acquired.acquire_time.unwrap().0;
    let waited = taken_at.duration_since(renewed);
    assert!(
        waited >= jiff::SignedDuration::from_secs(LEASE_SECS as i64),
        "manager-b took over {waited:?} after the last renewal, before the Lease expired"
    );
    assert_eq!(acquired.lease_transitions, Some(1));
    // And it does the work now: enabling the addon on hub2 completes.
    enable_addon_on(&kc, "hub2");
    addon_available(&global, &["hub2"], Duration::from_secs(60)).await;

    // A clean shutdown releases the Lease: a new standby leads well before an expiry.
    let c = replica("manager-c", &kc, dir.path());
    eventually(Duration::from_secs(30), "manager-c standing by", || async {
        c.logs().contains("standing by").then_some(())
    })
    .await;
    // b renews every 500 ms; without the release c would wait about a lease duration after
    // b exits.
    drop(b);
    let exited = Instant::now();
    eventually(
        Duration::from_secs(30),
        "manager-c leads after the release",
        || async { leads(&c).then_some(()) },
    )
    .await;
    assert!(
        exited.elapsed() < Duration::from_secs(LEASE_SECS / 2),
        "manager-c led {:?} after manager-b exited: the Lease was not released",
        exited.elapsed()
    );
    drop(c);
    drop(a);
}

/// A leader whose renewals hang (the API server accepts the request and answers only after
/// 30 s) stops within its renew deadline, before the Lease could expire for a standby; it does
/// not wait for the hung request to come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_whose_renewal_hangs_stops_before_its_lease_expires() {
    let dir = e2e::test_dir();
    let fleet = e2e::fleet(1, 1, &[env!("CARGO_PKG_VERSION")], dir.path()).await;
    let kc = kubeconfig(dir.path(), "global-hub");
    let leases: Api<Lease> = Api::namespaced(fleet.global.cluster.admin.clone(), NS);
    let a = replica("manager-a", &kc, dir.path());
    eventually(Duration::from_secs(30), "manager-a leads", || async {
        (leads(&a) && a.logs().contains("addon-manager started")).then_some(())
    })
    .await;
    eventually(Duration::from_secs(30), "the Lease held", || async {
        holder(&leases).await.map(|_| ())
    })
    .await;
    let faults = fleet.global.cluster.api.faults();
    faults.set_latency(Duration::from_secs(30));
    let hung = Instant::now();
    eventually(
        Duration::from_secs(40),
        "manager-a gives up the lead",
        || async { a.logs().contains("lost the lead").then_some(()) },
    )
    .await;
    let after = hung.elapsed();
    faults.set_latency(Duration::ZERO);
    assert!(
        after < Duration::from_secs(LEASE_SECS + 1),
        "manager-a kept leading {after:?} after its renewals hung (the Lease lasts {LEASE_SECS} s):\n{}",
        a.logs()
    );
}
