//! The addon-manager binary starts, serves health and metrics, and stops on SIGTERM.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::process::Command;
use std::time::Duration;

use migration_api::testing;

fn manager() -> Command {
    Command::new(env!("CARGO_BIN_EXE_addon-manager"))
}

#[tokio::test]
async fn starts_ready_and_stops_on_sigterm() {
    let api = testing::fake_version_api().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("global-hub.yaml");
    testing::write_kubeconfig(&kubeconfig, &format!("http://{api}")).unwrap();
    let mut cmd = manager();
    cmd.arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--log-format")
        .arg("json");
    let life = testing::ready_then_terminate(cmd).await.unwrap();
    assert!(
        life.status.success(),
        "exit {:?}\n{}",
        life.status,
        life.stderr
    );
    assert!(
        life.metrics
            .contains("cluster_migration_build_info{component=\"addon-manager\""),
        "{}",
        life.metrics
    );
    // JSON logs: every line is an object; start and stop are logged.
    for line in life.stderr.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v.get("level").is_some(), "{line}");
    }
    assert!(
        life.stderr.contains("addon-manager started"),
        "{}",
        life.stderr
    );
    assert!(
        life.stderr.contains("addon-manager stopped"),
        "{}",
        life.stderr
    );
}

#[test]
fn unreachable_api_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("nowhere.yaml");
    let port = testing::free_port().unwrap();
    testing::write_kubeconfig(&kubeconfig, &format!("http://127.0.0.1:{port}")).unwrap();
    let mut cmd = manager();
    cmd.arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--health-addr")
        .arg("127.0.0.1:0");
    let (status, _, stderr) = testing::run_to_exit(cmd, Duration::from_secs(30)).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("did not answer"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn missing_kubeconfig_file_is_a_clear_error() {
    let mut cmd = manager();
    cmd.arg("--kubeconfig")
        .arg("/nonexistent/kubeconfig")
        .arg("--health-addr")
        .arg("127.0.0.1:0");
    let (status, _, stderr) = testing::run_to_exit(cmd, Duration::from_secs(30)).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("reading kubeconfig /nonexistent/kubeconfig"),
        "{stderr}"
    );
}

#[test]
fn bad_log_level_exits_2() {
    let mut cmd = manager();
    cmd.args(["--log-level", "info,=[", "--kubeconfig", "/x"]);
    let (status, _, stderr) = testing::run_to_exit(cmd, Duration::from_secs(30)).unwrap();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("invalid log level"), "{stderr}");
}

#[test]
fn leader_election_settings_client_go_refuses_exit_2() {
    // (lease, renew deadline, retry period, what the error names)
    let table = [
        ("10s", "10s", "2s", "--leader-election-lease-duration"),
        ("15s", "2s", "2s", "--leader-election-renew-deadline"),
        ("15s", "10s", "0s", "--leader-election-retry-period"),
        (
            "10.5s",
            "10s",
            "2s",
            "--leader-election-lease-duration 10.5s must be longer",
        ),
        (
            "900ms",
            "500ms",
            "100ms",
            "--leader-election-lease-duration 900ms must be longer",
        ),
        ("100h", "10s", "2s", "from 1s to 24h"),
    ];
    for (lease, renew, retry, named) in table {
        let mut cmd = manager();
        cmd.args(["--kubeconfig", "/x", "--leader-elect"]);
        cmd.args(["--leader-election-lease-duration", lease]);
        cmd.args(["--leader-election-renew-deadline", renew]);
        cmd.args(["--leader-election-retry-period", retry]);
        let (status, _, stderr) = testing::run_to_exit(cmd, Duration::from_secs(30)).unwrap();
        assert_eq!(status.code(), Some(2), "{lease} {renew} {retry}: {stderr}");
        assert!(stderr.contains(named), "{named}: {stderr}");
    }
}

#[test]
fn version_and_help() {
    let mut cmd = manager();
    cmd.arg("--version");
    let (status, stdout, _) = testing::run_to_exit(cmd, Duration::from_secs(30)).unwrap();
    assert!(status.success());
    assert_eq!(
        stdout.trim(),
        format!("addon-manager {}", env!("CARGO_PKG_VERSION"))
    );
    let mut cmd = manager();
    cmd.arg("--help");
    let (status, stdout, _) = testing::run_to_exit(cmd, Duration::from_secs(30)).unwrap();
    assert!(status.success());
    for flag in [
        "--kubeconfig",
        "--log-format",
        "--log-level",
        "--health-addr",
        "--addon-name",
    ] {
        assert!(
            stdout.contains(flag),
            "{flag} missing from --help:\n{stdout}"
        );
    }
}
