//! The addon-agent binary connects to its local hub and the global hub, serves health and
//! metrics, and stops on SIGTERM.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::process::Command;
use std::time::Duration;

use migration_api::testing;

fn agent(local: &std::path::Path, hub: &std::path::Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_addon-agent"));
    cmd.arg("--kubeconfig")
        .arg(local)
        .arg("--hub-kubeconfig")
        .arg(hub)
        .args(["--cluster-name", "hub1"]);
    cmd
}

#[tokio::test]
async fn starts_with_both_clients_and_stops_on_sigterm() {
    let local_api = testing::fake_version_api().unwrap();
    let hub_api = testing::fake_version_api().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (local, hub) = (dir.path().join("local.yaml"), dir.path().join("hub.yaml"));
    testing::write_kubeconfig(&local, &format!("http://{local_api}")).unwrap();
    testing::write_kubeconfig(&hub, &format!("http://{hub_api}")).unwrap();
    let life = testing::ready_then_terminate(agent(&local, &hub))
        .await
        .unwrap();
    assert!(
        life.status.success(),
        "exit {:?}\n{}",
        life.status,
        life.stderr
    );
    assert!(
        life.metrics
            .contains("cluster_migration_build_info{component=\"addon-agent\""),
        "{}",
        life.metrics
    );
    assert!(
        life.stderr.contains("addon-agent started"),
        "{}",
        life.stderr
    );
    assert!(life.stderr.contains("cluster=hub1"), "{}", life.stderr);
    assert!(
        life.stderr.contains("addon-agent stopped"),
        "{}",
        life.stderr
    );
}

#[tokio::test]
async fn unreachable_global_hub_is_named_in_the_error() {
    let local_api = testing::fake_version_api().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (local, hub) = (dir.path().join("local.yaml"), dir.path().join("hub.yaml"));
    testing::write_kubeconfig(&local, &format!("http://{local_api}")).unwrap();
    let closed = testing::free_port().unwrap();
    testing::write_kubeconfig(&hub, &format!("http://127.0.0.1:{closed}")).unwrap();
    let mut cmd = agent(&local, &hub);
    cmd.args(["--health-addr", "127.0.0.1:0"]);
    let (status, _, stderr) = testing::run_to_exit(cmd, Duration::from_secs(30)).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("127.0.0.1:{closed}")), "{stderr}");
    assert!(stderr.contains("did not answer"), "{stderr}");
}

#[test]
fn cluster_name_is_required() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_addon-agent"));
    cmd.args(["--hub-kubeconfig", "/x"])
        .env_remove("CLUSTER_NAME");
    let (status, _, stderr) = testing::run_to_exit(cmd, Duration::from_secs(30)).unwrap();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--cluster-name"), "{stderr}");
}

#[test]
fn help_lists_every_flag() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_addon-agent"));
    cmd.arg("--help");
    let (status, stdout, _) = testing::run_to_exit(cmd, Duration::from_secs(30)).unwrap();
    assert!(status.success());
    for flag in [
        "--kubeconfig",
        "--hub-kubeconfig",
        "--cluster-name",
        "--addon-name",
        "--install-namespace",
        "--log-format",
        "--log-level",
        "--health-addr",
    ] {
        assert!(
            stdout.contains(flag),
            "{flag} missing from --help:\n{stdout}"
        );
    }
}
