//! `fleet up` as a user runs it: ready quickly, kubeconfigs that work with kubectl, clean stop.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

/// kubectl's output with `kubeconfig` and `args`; it must succeed.
fn kubectl_ok(kubeconfig: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl must be installed (.ci/run installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn fleet_up_two_hubs_five_clusters_each() {
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args(["up", "--hubs", "2", "--clusters-per-hub", "5", "--dir"])
        .arg(dir.path())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let ready = dir.path().join("ready");
    while !ready.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "fleet not ready within 30 s"
        );
        if let Some(status) = child.try_wait().unwrap() {
            panic!("fleet exited early: {status}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let kubectl = |name: &str, args: &[&str]| {
        kubectl_ok(
            &dir.path().join("kubeconfig").join(format!("{name}.yaml")),
            args,
        )
    };
    let table = kubectl("hub1", &["get", "managedclusters"]);
    let lines: Vec<&str> = table.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "HUB",
            "ACCEPTED",
            "MANAGED",
            "CLUSTER",
            "URLS",
            "JOINED",
            "AVAILABLE",
            "AGE"
        ],
        "{table}"
    );
    assert_eq!(lines.len(), 6, "{table}");
    for row in &lines[1..] {
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            &cells[1..],
            &["true", cells[2], "True", "True", cells[5]][..],
            "{table}"
        );
    }
    let hubs = kubectl(
        "global-hub",
        &[
            "get",
            "managedclusters",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
    );
    assert_eq!(hubs, "hub1 hub2");
    let hub2 = kubectl(
        "hub2",
        &[
            "get",
            "managedclusters",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
    );
    assert_eq!(hub2, "cluster10 cluster6 cluster7 cluster8 cluster9");
    let pid = child.id().unwrap();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
}

/// A fleet whose own clients reach its API servers through memory (what lets thousands of
/// clusters fit one process's open files) registers every cluster as over TCP, takes none of
/// its own connections over TCP, and still serves other processes (kubectl) on its ports.
#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_connected_through_memory_comes_up_and_still_serves_kubectl() {
    use ocm_sim::fleet::{Fleet, FleetOptions};
    let opts = FleetOptions {
        hubs: 2,
        clusters_per_hub: 2,
        join_delay: Duration::ZERO,
        lease_duration_secs: 1,
        lease_check_interval: Duration::from_millis(200),
        in_process_connections: true,
        ..Default::default()
    };
    let fleet = Fleet::up(&opts).await.unwrap();
    fleet.wait_ready(Duration::from_secs(30)).await.unwrap();
    for server in std::iter::once(&fleet.global)
        .chain(&fleet.hubs)
        .map(|h| &h.cluster.api)
        .chain(fleet.clusters.iter().map(|(_, c, _)| &c.api))
    {
        let connections = server.metrics().connections();
        assert!(
            !connections.is_empty() && connections.keys().all(|k| k.ends_with(" in process")),
            "{connections:?}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("hub1.yaml");
    std::fs::write(&kubeconfig, fleet.hubs[0].cluster.api.kubeconfig()).unwrap();
    let names = kubectl_ok(&kubeconfig, &["get", "managedclusters", "-o", "name"]);
    assert_eq!(names.lines().count(), 2, "hub1's two clusters: {names}");
    assert!(
        fleet.hubs[0]
            .cluster
            .api
            .metrics()
            .connections()
            .contains_key("h2"),
        "kubectl connected over TCP"
    );
}
