//! The Helm chart `charts/cluster-migration-addon`, checked with a real Helm engine: the
//! `helm-sdkpy` wheel (Helm as a Go library behind Python bindings), fetched from PyPI once and
//! unpacked under the target directory. Lint must pass without warnings; an install into a
//! kube-sim global hub must bring up the manager from the rendered Deployment (run by ocm-sim's
//! kubelet with the chart's ServiceAccount, so the chart's RBAC is what it gets), which then
//! installs agents and completes a migration; the manager must have asked for every permission
//! the chart grants and been refused none. Where the wheel cannot be obtained the Helm tests
//! say so and skip.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use e2e::{
    ADDON, addon_available, enable_addon, eventually, kubeconfig, kubectl_apply, kubectl_ok,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use kube::Api;
use migration_api::migration::{ManagedClusterMigration, MigrationPhase};
use migration_api::ocm::addon::ClusterManagementAddOn;
use serde_json::{Value, json};

const HELM_SDKPY: &str = "0.1.32";
const RELEASE: &str = "cluster-migration-addon";
const NS: &str = "open-cluster-management";
const MANAGER_IMAGE: &str = "quay.io/cluster-migration-addon/addon-manager";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn chart() -> PathBuf {
    workspace().join("charts/cluster-migration-addon")
}

/// The unpacked helm-sdkpy wheel, fetched with pip on first use; `Err` says why it is missing.
fn helm_sdk() -> Result<PathBuf, String> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("helm-sdkpy-{HELM_SDKPY}"));
    if dir.join("helm_sdkpy/__init__.py").is_file() {
        return Ok(dir);
    }
    let python = |args: &[&str]| {
        Command::new("python3")
            .args(args)
            .output()
            .map_err(|e| format!("python3: {e}"))
    };
    let cffi = python(&["-c", "import cffi"])?;
    if !cffi.status.success() {
        return Err("python3 cannot import cffi (pip install cffi)".into());
    }
    let download = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dl = download.path().to_string_lossy().into_owned();
    let got = python(&[
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--python-version",
        "3.12",
        "--only-binary=:all:",
        &format!("helm-sdkpy=={HELM_SDKPY}"),
        "-d",
        &dl,
    ])?;
    if !got.status.success() {
        return Err(format!(
            "pip download helm-sdkpy failed: {}",
            String::from_utf8_lossy(&got.stderr)
        ));
    }
    let wheel = std::fs::read_dir(download.path())
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or("pip downloaded no wheel")?;
    // Unpack next to the final place, then move it in (tests may race for it).
    let staging = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).map_err(|e| e.to_string())?;
    let unzip = python(&[
        "-m",
        "zipfile",
        "-e",
        &wheel.to_string_lossy(),
        &staging.path().to_string_lossy(),
    ])?;
    if !unzip.status.success() {
        return Err(format!(
            "unpacking {}: {}",
            wheel.display(),
            String::from_utf8_lossy(&unzip.stderr)
        ));
    }
    let staged = staging.keep();
    if std::fs::rename(&staged, &dir).is_err() && !dir.join("helm_sdkpy/__init__.py").is_file() {
        return Err(format!("could not move the wheel to {}", dir.display()));
    }
    Ok(dir)
}

/// Runs one Helm action through `test/e2e/helm/helm.py`; its JSON result.
fn helm(sdk: &Path, args: &[&str]) -> Result<Value, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("helm/helm.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(sdk)
        .args(args)
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("helm.py output: {e}"))
}

macro_rules! sdk_or_skip {
    () => {
        match helm_sdk() {
            Ok(d) => d,
            Err(why) => {
                eprintln!("SKIPPED: the helm-sdkpy wheel is not available: {why}");
                return;
            }
        }
    };
}

#[test]
fn the_charts_crds_are_the_manifests_crds() {
    let crds = chart().join("crds");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&crds).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours =
            std::fs::read(workspace().join("manifests/crds").join(&name)).unwrap_or_else(|e| {
                panic!("chart CRD {name} has no counterpart in manifests/crds: {e}")
            });
        assert!(
            std::fs::read(entry.path()).unwrap() == ours,
            "charts/cluster-migration-addon/crds/{name} differs from manifests/crds/{name}: copy it again"
        );
        names.push(name);
    }
    // The global hub needs the migration API; MigrationTask is the agents' (the manager ships
    // it to each hub inside the agent's ManifestWork).
    assert_eq!(
        names,
        vec!["migration.open-cluster-management.io_managedclustermigrations.yaml"]
    );
}

#[test]
fn helm_lint_passes_without_warnings() {
    let sdk = sdk_or_skip!();
    lint_clean(&sdk, &chart());
}

/// Lint renders the templates with the chart's values: a copy of the chart whose values switch
/// the monitoring on gets its ServiceMonitor, PrometheusRule and dashboard linted too.
#[test]
fn helm_lint_passes_with_the_monitoring_on() {
    let sdk = sdk_or_skip!();
    let copy = tempfile::tempdir().unwrap();
    let dest = copy.path().join("cluster-migration-addon");
    copy_dir(&chart(), &dest);
    let values_path = dest.join("values.yaml");
    let mut values: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&values_path).unwrap()).unwrap();
    values["metrics"] = serde_yaml::to_value(&*MONITORING_ON).unwrap();
    std::fs::write(&values_path, serde_yaml::to_string(&values).unwrap()).unwrap();
    lint_clean(&sdk, &dest);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Lints `chart`: no error, no warning.
fn lint_clean(sdk: &Path, chart: &Path) {
    let result = helm(sdk, &["lint", &chart.to_string_lossy()]).unwrap();
    assert!(result["Errors"].is_null(), "lint errors: {result}");
    let messages = result["Messages"].as_array().cloned().unwrap_or_default();
    // Helm's severities: 1 info, 2 warning, 3 error.
    let serious: Vec<&Value> = messages
        .iter()
        .filter(|m| m["Severity"].as_i64().unwrap_or(3) >= 2)
        .collect();
    assert!(serious.is_empty(), "lint warnings or errors: {serious:?}");
    for m in &messages {
        eprintln!("lint info: {m}");
    }
}

/// The chart's monitoring switched on (ServiceMonitor, PrometheusRule, dashboard).
static MONITORING_ON: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
    json!({
        "service": {"enabled": true, "port": 8080},
        "serviceMonitor": {"enabled": true, "interval": "15s", "labels": {"release": "prometheus"}},
        "prometheusRule": {"enabled": true, "stuckAfter": "2h", "rolloutStuckAfter": "30m"},
        "dashboard": {"enabled": true},
    })
});

/// A CustomResourceDefinition of the Prometheus Operator's (`monitoring.coreos.com/v1`), as
/// much of it as an install needs.
fn monitoring_crd(plural: &str, kind: &str) -> String {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.monitoring.coreos.com")},
        "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                 "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind, "listKind": format!("{kind}List")},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    })
    .to_string()
}

/// What the chart's monitoring installed: a ServiceMonitor on the metrics Service's port, the
/// alerts (with the stuck threshold in seconds), and a dashboard whose every query names a
/// metric of ours.
fn check_monitoring(global_kc: &Path) {
    let get = |kind: &str, name: &str| -> Value {
        serde_json::from_str(&kubectl_ok(
            global_kc,
            &["get", kind, name, "-n", NS, "-o", "json"],
            None,
        ))
        .unwrap()
    };
    let sm = get("servicemonitors.monitoring.coreos.com", RELEASE);
    assert_eq!(sm["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "http-metrics");
    assert_eq!(sm["spec"]["endpoints"][0]["interval"], "15s");
    let service = get("service", &format!("{RELEASE}-metrics"));
    assert_eq!(service["spec"]["ports"][0]["name"], "http-metrics");
    let rule = get("prometheusrules.monitoring.coreos.com", RELEASE);
    let rules = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
    let alerts: Vec<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
    for alert in [
        "ClusterMigrationStuck",
        "ClusterMigrationFailed",
        "ClusterMigrationAddonDegraded",
        "ClusterMigrationAddonRolloutHalted",
    ] {
        assert!(alerts.contains(&alert), "{alert} in {alerts:?}");
    }
    let stuck = rules[0]["expr"].as_str().unwrap();
    assert!(stuck.trim_end().ends_with("> 7200"), "{stuck}");
    // Prometheus templates stay templates for Prometheus.
    assert!(
        rules[0]["annotations"]["summary"]
            .as_str()
            .unwrap()
            .contains("{{ $labels.migration }}")
    );
    let dashboard = get("configmap", &format!("{RELEASE}-dashboard"));
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: Value = serde_json::from_str(
        dashboard["data"]["cluster-migration-addon.json"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let panels = json["panels"].as_array().unwrap();
    assert!(panels.len() >= 10, "{} panels", panels.len());
    for p in panels {
        let exprs = p["targets"].as_array().unwrap();
        assert!(
            exprs
                .iter()
                .all(|t| t["expr"].as_str().unwrap().contains("cluster_migration_")),
            "{}",
            p["title"]
        );
    }
}

/// Granted, needed, but not reached by the install test's scenario, each with the reason.
const NOT_REACHED: &[(&str, &str, &str, &str)] = &[
    (
        "certificates.k8s.io",
        "signers",
        "approve",
        "the API server requires it of whoever approves a CSR for that signer; no request of its own",
    ),
    (
        "addon.open-cluster-management.io",
        "clustermanagementaddons/status",
        "patch",
        "install progressions under a Placements install strategy (tests/addon.rs)",
    ),
    (
        "migration.open-cluster-management.io",
        "managedclustermigrations",
        "create",
        "the retry a user asks for with `request: retry` (tests/migration.rs)",
    ),
    (
        "cluster.open-cluster-management.io",
        "placements",
        "get",
        "a migration's spec.toPlacement (tests/migration.rs)",
    ),
];

/// (group, resource, verb) triples a set of rules grants (resourceNames ignored).
fn granted(rules: &[PolicyRule]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for r in rules {
        for g in r.api_groups.iter().flatten() {
            for res in r.resources.iter().flatten() {
                for v in &r.verbs {
                    out.insert((g.clone(), res.clone(), v.clone()));
                }
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_chart_installs_a_manager_that_works_with_exactly_its_rbac() {
    let sdk = sdk_or_skip!();
    let dir = e2e::test_dir();
    let version = env!("CARGO_PKG_VERSION");
    let fleet = e2e::fleet(2, 2, &[version], dir.path()).await;
    let global_kc = kubeconfig(dir.path(), "global-hub");
    let api = &fleet.global.cluster.api;
    // The global hub's kubelet runs the manager image the chart names.
    let kubelet = tokio::spawn(ocm_sim::kubelet::run(
        fleet.global.cluster.admin.clone(),
        ocm_sim::kubelet::KubeletOptions {
            agent_binary: e2e::binary("addon-agent"),
            image_repository: e2e::AGENT_IMAGE.into(),
            other_images: vec![(MANAGER_IMAGE.into(), e2e::binary("addon-manager"))],
            known_tags: vec![version.into()],
            work_dir: dir.path().join("pods/global-hub"),
            api_url: api.url(),
            api_ca_pem: api.ca_pem().to_owned(),
        },
    ));
    // The chart's defaults but for text logs and the default config: two replicas, one leads.
    let values = json!({
        "logFormat": "text",
        "defaultConfig": {"create": true},
    });
    let installed = helm(
        &sdk,
        &[
            "install",
            &global_kc.to_string_lossy(),
            NS,
            RELEASE,
            &chart().to_string_lossy(),
            &values.to_string(),
        ],
    )
    .unwrap_or_else(|e| panic!("helm install: {e}"));
    eprintln!("installed: {}", installed["name"]);
    let global = fleet.global.cluster.admin.clone();
    let deployments: Api<Deployment> = Api::namespaced(global.clone(), NS);
    let pods = dir.path().join("pods/global-hub");
    let replica_log = |i: usize| {
        let pod = if i == 0 {
            format!("{NS}-{RELEASE}")
        } else {
            format!("{NS}-{RELEASE}-{i}")
        };
        std::fs::read_to_string(pods.join(pod).join("agent.log")).unwrap_or_default()
    };
    let log = || format!("{}\n{}", replica_log(0), replica_log(1));
    eventually(
        Duration::from_secs(60),
        "the manager Deployment available",
        || async {
            let d = deployments.get_opt(RELEASE).await.ok()??;
            (d.status?.available_replicas? == 2).then_some(())
        },
    )
    .await;
    // One replica leads (the chart turns leader election on), the other stands by.
    eventually(
        Duration::from_secs(30),
        "one replica leads, one stands by",
        || async {
            let (a, b) = (replica_log(0), replica_log(1));
            let leads = |l: &str| l.contains("addon-manager started");
            let waits = |l: &str| l.contains("standing by");
            ((leads(&a) && waits(&b)) || (leads(&b) && waits(&a))).then_some(())
        },
    )
    .await;
    let cma = Api::<ClusterManagementAddOn>::all(global.clone())
        .get(ADDON)
        .await
        .unwrap();
    assert_eq!(
        cma.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app.kubernetes.io/managed-by"))
            .map(String::as_str),
        Some("Helm"),
        "the manager must keep Helm's ownership of the ClusterManagementAddOn"
    );
    let default_config = cma.spec.supported_configs.iter().flatten().find_map(|c| {
        c.default_config
            .as_ref()
            .map(|d| (d.namespace.clone(), d.name.clone()))
    });
    assert_eq!(
        default_config,
        Some((Some(NS.into()), "cluster-migration-default".into()))
    );

    // The manager at work, with only the chart's permissions: agents, then a migration.
    enable_addon(&global_kc, &["hub1", "hub2"]);
    addon_available(&global, &["hub1", "hub2"], Duration::from_secs(90)).await;
    // What the manager hands on to each hub's agent (a Role in the hub's namespace) it must
    // hold itself: Kubernetes refuses to grant more than the granter has.
    let handed_on: BTreeSet<_> = {
        let hub_role = Api::<Role>::namespaced(global.clone(), "hub1")
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|r| {
                r.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.contains(ADDON))
            })
            .expect("the agent's Role in hub1's namespace");
        granted(hub_role.rules.as_deref().unwrap_or_default())
    };
    kubectl_apply(
        &global_kc,
        r#"{"apiVersion": "migration.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterMigration",
  "metadata": {"name": "through-the-chart", "namespace": "default"},
  "spec": {"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1"]}}"#,
    );
    let mcms: Api<ManagedClusterMigration> = Api::namespaced(global.clone(), "default");
    eventually(
        Duration::from_secs(120),
        "the migration Completed",
        || async {
            let m = mcms.get_opt("through-the-chart").await.ok()??;
            (m.status?.phase? == MigrationPhase::Completed).then_some(())
        },
    )
    .await;
    kubectl_ok(
        &global_kc,
        &["delete", "mcm", "through-the-chart", "-n", "default"],
        None,
    );
    // Disabling the addon on the hubs (before an uninstall, as the README says): the agents
    // and the manager's objects for them go.
    for hub in ["hub1", "hub2"] {
        kubectl_ok(
            &global_kc,
            &[
                "delete",
                "managedclusteraddon",
                ADDON,
                "-n",
                hub,
                "--wait=false",
            ],
            None,
        );
    }

    let mcas: Api<migration_api::ocm::addon::ManagedClusterAddOn> = Api::all(global.clone());
    eventually(
        Duration::from_secs(90),
        "the addon removed from both hubs",
        || async {
            let left = mcas.list(&Default::default()).await.ok()?;
            (!left
                .items
                .iter()
                .any(|m| m.metadata.name.as_deref() == Some(ADDON)))
            .then_some(())
        },
    )
    .await;

    // What the manager asked for, as kube-sim logged it, against what the chart grants.
    let user = format!("system:serviceaccount:{NS}:{RELEASE}");
    let log_entries = api.metrics().access_log();
    let mut asked = BTreeSet::new();
    let mut denied = Vec::new();
    for (a, _) in log_entries.iter().filter(|(a, _)| a.user == user) {
        asked.insert((a.api_group.clone(), a.resource.clone(), a.verb.clone()));
        if !a.allowed {
            denied.push(a.clone());
        }
    }
    assert!(
        denied.is_empty(),
        "the chart's RBAC refused the manager: {denied:#?}\n{}",
        log()
    );
    let cluster_role = Api::<ClusterRole>::all(global.clone())
        .get(RELEASE)
        .await
        .unwrap();
    let lease_role = Api::<Role>::namespaced(global.clone(), NS)
        .get(&format!("{RELEASE}-leader-election"))
        .await
        .unwrap();
    // No Secret of the global hub but the bootstrap tokens of the pool is readable: every
    // grant on Secrets names exactly the pool's names (and the migration above completed
    // with that, no request refused).
    let pool: BTreeSet<String> = (0..migration_api::names::BOOTSTRAP_IDENTITY_POOL)
        .map(migration_api::names::pooled_bootstrap_identity)
        .collect();
    for rule in cluster_role
        .rules
        .iter()
        .flatten()
        .chain(lease_role.rules.iter().flatten())
    {
        if rule
            .resources
            .iter()
            .flatten()
            .any(|r| r == "secrets" || r == "*")
        {
            let named: BTreeSet<String> = rule.resource_names.iter().flatten().cloned().collect();
            assert_eq!(
                named, pool,
                "a grant on Secrets beyond the pool's: {rule:?}"
            );
        }
    }
    let mut grants = granted(cluster_role.rules.as_deref().unwrap_or_default());
    grants.extend(granted(lease_role.rules.as_deref().unwrap_or_default()));
    let unused: Vec<_> = grants
        .iter()
        .filter(|g| {
            !asked.contains(*g)
                && !handed_on.contains(*g)
                && !NOT_REACHED.iter().any(|(gr, r, v, _)| {
                    (*gr, *r, *v) == (g.0.as_str(), g.1.as_str(), g.2.as_str())
                })
        })
        .collect();
    assert!(
        unused.is_empty(),
        "the chart grants what the manager never used: {unused:#?}"
    );
    let missing: Vec<_> = asked.iter().filter(|a| !grants.contains(*a)).collect();
    assert!(missing.is_empty(), "used but not granted: {missing:#?}");

    // Upgrade: a new value rolls the Deployment, and with the Prometheus Operator's CRDs on
    // the hub the monitoring objects come on; uninstall removes the manager.
    for crd in [
        ("servicemonitors", "ServiceMonitor"),
        ("prometheusrules", "PrometheusRule"),
    ] {
        kubectl_apply(&global_kc, &monitoring_crd(crd.0, crd.1));
    }
    helm(
        &sdk,
        &[
            "upgrade",
            &global_kc.to_string_lossy(),
            NS,
            RELEASE,
            &chart().to_string_lossy(),
            &json!({"logFormat": "text", "logLevel": "debug", "defaultConfig": {"create": true},
                    "metrics": MONITORING_ON.clone()})
            .to_string(),
        ],
    )
    .unwrap_or_else(|e| panic!("helm upgrade: {e}"));
    check_monitoring(&global_kc);
    let args = deployments
        .get(RELEASE)
        .await
        .unwrap()
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers[0]
        .args
        .clone()
        .unwrap_or_default();
    assert!(args.contains(&"--log-level=debug".to_owned()), "{args:?}");
    helm(
        &sdk,
        &["uninstall", &global_kc.to_string_lossy(), NS, RELEASE],
    )
    .unwrap_or_else(|e| panic!("helm uninstall: {e}"));
    eventually(Duration::from_secs(30), "the Deployment gone", || async {
        deployments
            .get_opt(RELEASE)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    kubelet.abort();
}
