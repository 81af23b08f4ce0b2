//! The real kubectl against kube-sim, as a user drives it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use common::Widget;
use kube::CustomResourceExt;

struct Kubectl {
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Kubectl {
    fn new(kubeconfig_text: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig.yaml");
        std::fs::write(&kubeconfig, kubeconfig_text).unwrap();
        Self {
            kubeconfig,
            _dir: dir,
        }
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.kubeconfig.parent().unwrap().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    async fn run(&self, args: &[&str]) -> Out {
        let out = tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env_remove("KUBECONFIG")
            .output()
            .await
            .expect("kubectl must be installed (.ci/run installs it)");
        Out {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            out.ok,
            "kubectl {} failed:\n{}{}",
            args.join(" "),
            out.stdout,
            out.stderr
        );
        out.stdout
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

async fn setup() -> (kube_sim::KubeSim, Kubectl) {
    // The Widget CRD is applied by kubectl itself below, so start without it.
    let sim = kube_sim::KubeSim::start(kube_sim::Options::default())
        .await
        .unwrap();
    let k = Kubectl::new(&sim.kubeconfig());
    let crd = k.file("crd.yaml", &serde_yaml::to_string(&Widget::crd()).unwrap());
    let out = k.ok(&["apply", "-f", path_str(&crd)]).await;
    assert!(
        out.contains("customresourcedefinition.apiextensions.k8s.io/widgets.example.io created"),
        "{out}"
    );
    (sim, k)
}

const WIDGET: &str = "apiVersion: example.io/v1\nkind: Widget\nmetadata:\n  name: w1\n  namespace: default\n  labels: {app: demo}\nspec:\n  size: 3\n";

#[tokio::test(flavor = "multi_thread")]
async fn apply_get_and_printer_columns() {
    let (sim, k) = setup().await;
    // kubectl negotiates HTTP/2, as it does with kube-apiserver.
    assert!(
        sim.metrics().connections().contains_key("h2"),
        "{:?}",
        sim.metrics().connections()
    );
    let w = k.file("w.yaml", WIDGET);
    assert!(
        k.ok(&["apply", "-f", path_str(&w)])
            .await
            .contains("widget.example.io/w1 created")
    );
    assert!(
        k.ok(&["apply", "-f", path_str(&w)])
            .await
            .contains("widget.example.io/w1 unchanged")
    );
    let table = k.ok(&["get", "widgets"]).await;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "SIZE", "READY", "AGE"], "{table}");
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..2], ["w1", "3"], "{table}");
    assert!(
        row[2].ends_with('s') || row[2].ends_with('m'),
        "age cell: {table}"
    );
    // Short name and -A.
    assert!(k.ok(&["get", "wd", "-A"]).await.starts_with("NAMESPACE"));
    let yaml = k.ok(&["get", "widget", "w1", "-o", "yaml"]).await;
    assert!(
        yaml.contains("size: 3") && yaml.contains("uid:") && yaml.contains("resourceVersion:"),
        "{yaml}"
    );
    // Client-side apply of a change patches the object.
    let w2 = k.file("w2.yaml", &WIDGET.replace("size: 3", "size: 4"));
    assert!(
        k.ok(&["apply", "-f", path_str(&w2)])
            .await
            .contains("configured")
    );
    assert_eq!(
        k.ok(&["get", "widget", "w1", "-o", "jsonpath={.spec.size}"])
            .await,
        "4"
    );
    // Schema violations and unknown fields are refused with the server's message.
    let bad = k.file(
        "bad.yaml",
        &WIDGET.replace("size: 3", "size: 300\n  bogus: 1"),
    );
    let out = k.run(&["apply", "-f", path_str(&bad)]).await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains("unknown field \"spec.bogus\"") || out.stderr.contains("spec.size"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn server_side_apply_and_patches() {
    let (_sim, k) = setup().await;
    let w = k.file("w.yaml", WIDGET);
    assert!(
        k.ok(&["apply", "--server-side", "-f", path_str(&w)])
            .await
            .contains("serverside-applied")
    );
    let managed = k
        .ok(&["get", "widget", "w1", "-o", "yaml", "--show-managed-fields"])
        .await;
    assert!(
        managed.contains("manager: kubectl") && managed.contains("operation: Apply"),
        "{managed}"
    );
    // Another manager changing the same field conflicts, unless forced.
    let w2 = k.file("w2.yaml", &WIDGET.replace("size: 3", "size: 5"));
    let out = k
        .run(&[
            "apply",
            "--server-side",
            "--field-manager=other",
            "-f",
            path_str(&w2),
        ])
        .await;
    assert!(!out.ok && out.stderr.contains("conflict"), "{}", out.stderr);
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "--force-conflicts",
        "-f",
        path_str(&w2),
    ])
    .await;
    assert_eq!(
        k.ok(&["get", "widget", "w1", "-o", "jsonpath={.spec.size}"])
            .await,
        "5"
    );

    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--type=merge",
        "-p",
        r#"{"spec":{"color":"red"}}"#,
    ])
    .await;
    k.ok(&["patch", "widget", "w1", "--type=json", "-p", r#"[{"op":"test","path":"/spec/color","value":"red"},{"op":"replace","path":"/spec/size","value":6}]"#]).await;
    assert_eq!(
        k.ok(&[
            "get",
            "widget",
            "w1",
            "-o",
            "jsonpath={.spec.size} {.spec.color}"
        ])
        .await,
        "6 red"
    );
    let out = k
        .run(&[
            "patch",
            "widget",
            "w1",
            "--type=strategic",
            "-p",
            r#"{"spec":{"size":7}}"#,
        ])
        .await;
    assert!(
        !out.ok && out.stderr.contains("strategic-merge-patch"),
        "{}",
        out.stderr
    );
    k.ok(&["create", "configmap", "cfg", "--from-literal=a=1"])
        .await;
    k.ok(&[
        "patch",
        "configmap",
        "cfg",
        "--type=strategic",
        "-p",
        r#"{"data":{"b":"2"}}"#,
    ])
    .await;
    assert_eq!(
        k.ok(&["get", "cm", "cfg", "-o", "jsonpath={.data.a}{.data.b}"])
            .await,
        "12"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn wait_for_condition_and_delete_with_finalizer() {
    let (_sim, k) = setup().await;
    let w = k.file(
        "w.yaml",
        &WIDGET.replace(
            "labels: {app: demo}",
            "labels: {app: demo}\n  finalizers: [example.io/hold]",
        ),
    );
    k.ok(&["apply", "-f", path_str(&w)]).await;
    let kubeconfig = k.kubeconfig.clone();
    let waiter = tokio::spawn(async move {
        tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "wait",
                "--for=condition=Ready",
                "widget/w1",
                "--timeout=30s",
            ])
            .output()
            .await
            .unwrap()
    });
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#,
    ])
    .await;
    let out = waiter.await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("condition met"));
    assert!(k.ok(&["get", "widgets"]).await.contains("True"));

    k.ok(&["delete", "widget", "w1", "--wait=false"]).await;
    assert!(
        !k.ok(&[
            "get",
            "widget",
            "w1",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}"
        ])
        .await
        .is_empty()
    );
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ])
    .await;
    k.ok(&["wait", "--for=delete", "widget/w1", "--timeout=30s"])
        .await;
    let out = k.run(&["get", "widget", "w1"]).await;
    assert!(!out.ok && out.stderr.contains("NotFound"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn auth_can_i_as_a_service_account() {
    let (_sim, k) = setup().await;
    k.ok(&["create", "serviceaccount", "robot"]).await;
    let sa = "--as=system:serviceaccount:default:robot";
    assert_eq!(
        k.run(&["auth", "can-i", "list", "widgets", sa])
            .await
            .stdout
            .trim(),
        "no"
    );
    k.ok(&[
        "create",
        "role",
        "widget-reader",
        "--verb=get,list",
        "--resource=widgets.example.io",
    ])
    .await;
    k.ok(&[
        "create",
        "rolebinding",
        "robot-reads",
        "--role=widget-reader",
        "--serviceaccount=default:robot",
    ])
    .await;
    assert_eq!(
        k.ok(&["auth", "can-i", "list", "widgets", sa]).await.trim(),
        "yes"
    );
    assert_eq!(
        k.run(&["auth", "can-i", "delete", "widgets", sa])
            .await
            .stdout
            .trim(),
        "no"
    );
    assert_eq!(
        k.run(&["auth", "can-i", "list", "widgets", "-n", "kube-system", sa])
            .await
            .stdout
            .trim(),
        "no"
    );
    // And with the ServiceAccount's own token.
    let token = k.ok(&["create", "token", "robot"]).await;
    let listed = k.ok(&["--token", token.trim(), "get", "widgets"]).await;
    assert!(
        listed.is_empty() || listed.contains("No resources"),
        "{listed}"
    );
    let out = k.run(&["--token", token.trim(), "get", "secrets"]).await;
    assert!(
        !out.ok && out.stderr.contains("Forbidden"),
        "{}",
        out.stderr
    );
}
