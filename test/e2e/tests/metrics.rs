//! `/metrics` of the manager and of the agents, scraped as Prometheus would, during and after a
//! migration and an addon upgrade, and checked against what happened.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use e2e::migration::Setup;
use e2e::{Manager, addon_available, enable_addon, eventually, kubeconfig, kubectl_apply};
use migration_api::migration::MigrationPhase;
use migration_api::testing::http_get;

/// One fleet at a time: each runs a whole fleet on two cores.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const LONG: Duration = Duration::from_secs(120);

/// The health and metrics address a process logged at start.
fn metrics_addr(log: &str) -> Option<SocketAddr> {
    ocm_sim::demo::logged_metrics_addr(log)?.parse().ok()
}

/// The address of the agent on `hub` (its pod's log under the test directory).
fn agent_addr(dir: &Path, hub: &str) -> Option<SocketAddr> {
    ocm_sim::demo::agent_metrics_addrs(dir)
        .into_iter()
        .find(|(h, _)| h == hub)?
        .1
        .parse()
        .ok()
}

async fn scrape(addr: SocketAddr) -> Option<String> {
    match http_get(addr, "/metrics").await {
        Ok((200, text)) => Some(text),
        _ => None,
    }
}

/// The sum of the samples of `name` whose labels include `labels` (`None`: no such sample).
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut sum = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (metric, label_text) = match series.split_once('{') {
            Some((m, l)) => (m, l.trim_end_matches('}')),
            None => (series, ""),
        };
        if metric != name {
            continue;
        }
        let matches = labels
            .iter()
            .all(|(k, v)| label_text.split(',').any(|kv| kv == format!("{k}=\"{v}\"")));
        if matches && let Ok(v) = value.parse::<f64>() {
            *sum.get_or_insert(0.0) += v;
        }
    }
    sum
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_migration_shows_in_the_manager_and_agent_metrics() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let s = Setup::new(2, 2).await;
    let manager = metrics_addr(&s.logs()).expect("the manager logs its metrics address");
    let (hub1, hub2) = (
        agent_addr(s.dir.path(), "hub1").expect("hub1's agent address"),
        agent_addr(s.dir.path(), "hub2").expect("hub2's agent address"),
    );
    let before = scrape(manager).await.unwrap();
    assert_eq!(
        sample(&before, "cluster_migration_manager_leader", &[]),
        Some(1.0)
    );
    s.apply(
        "scraped",
        r#"{"from": "hub1", "to": "hub2", "includedManagedClusters": ["cluster1", "cluster2"]}"#,
    );
    // During: the migration counted in a phase of its own, its clusters on both agents.
    let in_flight = [
        "Validating",
        "Initializing",
        "Deploying",
        "Registering",
        "Cleaning",
    ];
    eventually(LONG, "the migration in flight in the metrics", || async {
        let text = scrape(manager).await?;
        in_flight
            .iter()
            .any(|p| sample(&text, "cluster_migration_migrations", &[("phase", p)]) == Some(1.0))
            .then_some(())
    })
    .await;
    let agents_in_flight = eventually(
        LONG,
        "both agents counting the migration's clusters",
        || async {
            let source = scrape(hub1).await?;
            let target = scrape(hub2).await?;
            let n =
                |t: &str, role| sample(t, "cluster_migration_agent_clusters", &[("role", role)]);
            (n(&source, "source") == Some(2.0) && n(&target, "target") == Some(2.0))
                .then(|| format!("{source}\n{target}"))
        },
    )
    .await;
    s.phase("scraped", MigrationPhase::Completed, LONG).await;
    // After: what the manager counted.
    let text = eventually(LONG, "the Completed migration in the metrics", || async {
        let text = scrape(manager).await?;
        (sample(
            &text,
            "cluster_migration_migrations",
            &[("phase", "Completed")],
        ) == Some(1.0))
        .then_some(text)
    })
    .await;
    let clusters = |state| {
        sample(
            &text,
            "cluster_migration_migration_clusters",
            &[("migration", "scraped"), ("state", state)],
        )
    };
    assert_eq!(clusters("registered"), Some(2.0), "{text}");
    assert_eq!(clusters("failed"), Some(0.0), "{text}");
    for phase in in_flight {
        assert_eq!(
            sample(
                &text,
                "cluster_migration_phase_duration_seconds_count",
                &[("phase", phase)]
            ),
            Some(1.0),
            "{phase} left once: {text}"
        );
    }
    assert_eq!(
        sample(
            &text,
            "cluster_migration_migration_duration_seconds_count",
            &[("result", "Completed")]
        ),
        Some(1.0)
    );
    assert!(
        sample(
            &text,
            "cluster_migration_reconciles_total",
            &[("controller", "migration")]
        )
        .is_some_and(|n| n >= 6.0),
        "{text}"
    );
    assert!(
        sample(
            &text,
            "cluster_migration_api_requests_total",
            &[("verb", "patch")]
        )
        .is_some_and(|n| n > 0.0)
    );
    assert_eq!(
        sample(
            &text,
            "cluster_migration_addon_hub_states",
            &[("state", "available")]
        ),
        Some(2.0),
        "{text}"
    );
    // What the agents counted: hub2 approved each cluster's bootstrap CSR once, refused none.
    let target = scrape(hub2).await.unwrap();
    assert_eq!(
        sample(
            &target,
            "cluster_migration_agent_csrs_approved_total",
            &[("reason", "expected")]
        ),
        Some(2.0),
        "{target}"
    );
    assert_eq!(
        sample(&target, "cluster_migration_agent_csrs_refused_total", &[]),
        Some(0.0)
    );
    // The tasks gone, so are their clusters from the agents' gauges.
    eventually(LONG, "the agents' cluster gauges empty", || async {
        let (source, target) = (scrape(hub1).await?, scrape(hub2).await?);
        let n = |t: &str| sample(t, "cluster_migration_agent_clusters", &[]);
        (n(&source).is_none() && n(&target).is_none()).then_some(())
    })
    .await;
    for (hub, text) in [("hub1", scrape(hub1).await.unwrap()), ("hub2", target)] {
        for counter in [
            "cluster_migration_agent_lease_renewals_total",
            "cluster_migration_agent_score_refreshes_total",
        ] {
            assert!(
                sample(&text, counter, &[]).is_some_and(|n| n > 0.0),
                "{hub}: {counter}: {text}"
            );
        }
    }
    // Every metric the chart's dashboard and alerts query is one the binaries serve.
    let mut served = std::collections::BTreeSet::new();
    let mut texts = vec![agents_in_flight];
    for addr in [manager, hub1, hub2] {
        texts.push(scrape(addr).await.unwrap());
    }
    for text in texts {
        served.extend(
            text.lines()
                .filter_map(|l| l.strip_prefix("# TYPE "))
                .filter_map(|l| l.split_whitespace().next())
                .map(str::to_owned),
        );
    }
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/cluster-migration-addon");
    for file in ["files/dashboard.json", "templates/prometheusrule.yaml"] {
        let text = std::fs::read_to_string(chart.join(file)).unwrap();
        let mut queried = 0;
        for (at, _) in text.match_indices("cluster_migration_") {
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            let base = ["_total", "_bucket", "_count", "_sum"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(&name);
            assert!(
                served.contains(base),
                "{file} queries {name}, which nothing serves ({served:?})"
            );
            queried += 1;
        }
        assert!(queried > 3, "{file}");
    }
    // The logs of a clean migration: no warning or error, and every line of the migration
    // controller names the migration.
    let log = s.logs();
    let loud: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    assert!(loud.is_empty(), "warnings in a clean run: {loud:#?}");
    let unnamed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("addon_manager::migration") && !l.contains("default/scraped"))
        .collect();
    assert!(
        log.contains("addon_manager::migration") && unnamed.is_empty(),
        "migration log lines without the migration's name: {unnamed:#?}"
    );
    s.moved_to(["cluster1", "cluster2"], 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_addon_upgrade_shows_in_the_manager_metrics() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let dir = e2e::test_dir();
    let fleet = e2e::fleet(1, 1, &["0.1.0", "0.2.0"], dir.path()).await;
    let global_kc = kubeconfig(dir.path(), "global-hub");
    let manager = Manager::start(&global_kc, dir.path(), &[("AGENT_VERSIONS", "0.1.0,0.2.0")]);
    let global = fleet.global.cluster.admin.clone();
    enable_addon(&global_kc, &["hub1"]);
    addon_available(&global, &["hub1"], Duration::from_secs(60)).await;
    let addr = eventually(LONG, "the manager's metrics address", || async {
        metrics_addr(&manager.logs())
    })
    .await;
    let on = |text: &str, version: &str| {
        sample(
            text,
            "cluster_migration_addon_hubs",
            &[("version", version)],
        ) == Some(1.0)
            && sample(
                text,
                "cluster_migration_addon_hub_states",
                &[("state", "available")],
            ) == Some(1.0)
    };
    eventually(LONG, "hub1 on 0.1.0, available", || async {
        on(&scrape(addr).await?, "0.1.0").then_some(())
    })
    .await;
    kubectl_apply(
        &global_kc,
        r#"{"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "AddOnDeploymentConfig",
  "metadata": {"name": "fast-lease", "namespace": "addon-configs"},
  "spec": {"customizedVariables": [{"name": "LEASE_DURATION_SECONDS", "value": "1"},
                                   {"name": "AGENT_VERSION", "value": "0.2.0"}]}}"#,
    );
    let text = eventually(LONG, "hub1 on 0.2.0, available", || async {
        let text = scrape(addr).await?;
        on(&text, "0.2.0").then_some(text)
    })
    .await;
    assert_eq!(
        sample(
            &text,
            "cluster_migration_addon_hubs",
            &[("version", "0.1.0")]
        ),
        None,
        "no hub left on 0.1.0: {text}"
    );
    assert!(
        sample(
            &text,
            "cluster_migration_reconciles_total",
            &[("controller", "addon")]
        )
        .is_some_and(|n| n > 0.0)
    );
    // The 0.1.0 agent was stopped as the kubelet stops a container (SIGTERM): it stopped
    // cleanly, and its shutdown (the API connections going away) logged no warning or error.
    let pods = dir.path().join("pods/hub1");
    let previous = eventually(LONG, "the 0.1.0 agent stopped", || async {
        let found = std::fs::read_dir(&pods)
            .ok()?
            .flatten()
            .find_map(|pod| std::fs::read_to_string(pod.path().join("agent.previous.log")).ok())?;
        found.contains("addon-agent stopped").then_some(found)
    })
    .await;
    let loud: Vec<&str> = previous
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    assert!(loud.is_empty(), "the stopped agent: {loud:#?}");
    drop(manager);
}
