//! The `kube-sim serve` binary: writes the admin kubeconfig once ready, loads CRDs from a
//! directory, serves until SIGTERM.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Widget, eventually};
use kube::CustomResourceExt;
use kube::api::{Api, ListParams};

#[tokio::test]
async fn serve_writes_kubeconfig_loads_crds_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let crds = dir.path().join("crds");
    std::fs::create_dir(&crds).unwrap();
    std::fs::write(
        crds.join("widget.yaml"),
        serde_yaml::to_string(&Widget::crd()).unwrap(),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let kubeconfig = dir.path().join("admin.yaml");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-sim"))
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--kubeconfig-out",
        ])
        .arg(&kubeconfig)
        .arg("--crds")
        .arg(&crds)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let text = eventually(Duration::from_secs(20), "the kubeconfig", || {
        let kubeconfig = kubeconfig.clone();
        async move { std::fs::read_to_string(&kubeconfig).ok() }
    })
    .await;
    assert!(text.contains(&format!("https://127.0.0.1:{port}")));
    let client = kube_sim::client_from_kubeconfig(&text).await.unwrap();
    let widgets: Api<Widget> = Api::namespaced(client, "default");
    assert!(
        widgets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let pid = child.id().unwrap();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "{exit:?}");
}
