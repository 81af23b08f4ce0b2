//! `crdgen` writes one file per CRD, and `--check` names every file that differs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::process::Command;

fn crdgen(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_crdgen"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn writes_then_checks_clean() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = crdgen(&["--dir", d]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
    assert_eq!(files.len(), migration_api::crds::all().len());
    assert!(
        dir.path()
            .join("migration.open-cluster-management.io_managedclustermigrations.yaml")
            .is_file()
    );
    let out = crdgen(&["--check", "--dir", d]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn check_names_stale_missing_and_unexpected_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    assert!(crdgen(&["--dir", d]).status.success());
    let stale = dir
        .path()
        .join("cluster.open-cluster-management.io_managedclusters.yaml");
    let text = std::fs::read_to_string(&stale).unwrap();
    std::fs::write(
        &stale,
        text.replace("hubAcceptsClient", "hubAcceptsClients"),
    )
    .unwrap();
    std::fs::remove_file(
        dir.path()
            .join("work.open-cluster-management.io_manifestworks.yaml"),
    )
    .unwrap();
    std::fs::write(dir.path().join("old.yaml"), "x").unwrap();
    let out = crdgen(&["--check", "--dir", d]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("stale:") && err.contains("managedclusters.yaml"),
        "{err}"
    );
    assert!(
        err.contains("missing:") && err.contains("manifestworks.yaml"),
        "{err}"
    );
    assert!(
        err.contains("unexpected:") && err.contains("old.yaml"),
        "{err}"
    );
}

#[test]
fn committed_crds_are_current() {
    let out = crdgen(&["--check"]);
    assert!(
        out.status.success(),
        "run `cargo run -p migration-api --bin crdgen` and commit:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
