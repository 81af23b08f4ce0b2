//! What the agent tells the global hub: a condition on its own ManagedClusterAddOn (running
//! version and a one-line summary) and the AddOnPlacementScore `<addon>` in its cluster namespace.
//! Both are refreshed when the hub's clusters change and at least every refresh period.

use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};
use migration_api::common::condition_is_true;
use migration_api::migration::MigrationTask;
use migration_api::names::condition_status::TRUE;
use migration_api::names::conditions::CLUSTER_AVAILABLE;
use migration_api::names::labels::LOCAL_CLUSTER;
use migration_api::ocm::addon::ManagedClusterAddOn;
use migration_api::ocm::cluster::{AddOnPlacementScore, ManagedCluster};
use migration_api::runtime::apply_status_if_changed;
use serde_json::json;

/// Field manager of everything the agent writes on the global hub.
pub const FIELD_MANAGER: &str = "cluster-migration-agent";
/// The condition type the agent sets on its ManagedClusterAddOn.
pub const AGENT_CONDITION: &str = "AgentRunning";
/// Its reason while the agent runs.
pub const AGENT_RUNNING: &str = "Running";

/// What the agent counts on its hub.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Managed clusters (the hub's own `local-cluster` excluded).
    pub clusters: usize,
    /// Of those, how many are Available.
    pub available: usize,
    /// MigrationTasks on the hub (None until they are first listed).
    pub tasks: Option<usize>,
}

fn clamp(v: f64) -> i32 {
    v.round().clamp(-100.0, 100.0) as i32
}

/// The scores, each in [-100, 100]:
/// - `managedClusters`: how full the hub is, 100 × clusters / capacity (0 empty, 100 at or over capacity);
/// - `capacityHeadroom`: 100 − 200 × clusters / capacity (100 empty, 0 half full, −100 full);
/// - `availableRatio`: 200 × available / clusters − 100 (100 when all are Available or there are none).
pub fn scores(c: Counts, capacity: u32) -> Vec<(&'static str, i32)> {
    let cap = f64::from(capacity.max(1));
    let n = c.clusters as f64;
    let ratio = if c.clusters == 0 {
        100
    } else {
        clamp(200.0 * c.available as f64 / n - 100.0)
    };
    vec![
        ("managedClusters", clamp(100.0 * n / cap).max(0)),
        ("capacityHeadroom", clamp(100.0 - 200.0 * n / cap)),
        ("availableRatio", ratio),
    ]
}

/// The one-line summary in the agent's condition.
pub fn summary(version: &str, build: &str, cluster: &str, c: Counts) -> String {
    let tasks = c
        .tasks
        .map(|t| format!("{t} migration tasks"))
        .unwrap_or_else(|| "migration tasks unknown".into());
    let build = if build == version {
        String::new()
    } else {
        format!(" (binary {build})")
    };
    format!(
        "agent {version}{build} on {cluster}: {} managed clusters, {} available, {tasks}",
        c.clusters, c.available
    )
}

/// Settings of the reporter.
#[derive(Clone, Debug)]
pub struct ReportOptions {
    pub cluster_name: String,
    pub addon_name: String,
    /// Version the agent reports (its image tag).
    pub version: String,
    /// Version of this binary.
    pub build: String,
    pub capacity: u32,
    /// Scores and status are rewritten at least this often; scores stay valid for three periods.
    pub refresh: Duration,
    /// Counts each score refresh written.
    pub refreshes: prometheus_client::metrics::counter::Counter,
}

fn count(store: &reflector::Store<ManagedCluster>) -> (usize, usize) {
    let mut total = 0;
    let mut available = 0;
    for mc in store.state() {
        if mc.labels().get(LOCAL_CLUSTER).map(String::as_str) == Some("true") {
            continue;
        }
        total += 1;
        if condition_is_true(mc.conditions(), CLUSTER_AVAILABLE) {
            available += 1;
        }
    }
    (total, available)
}

/// Writes the agent's condition on its ManagedClusterAddOn.
pub async fn write_condition(
    hub: &Client,
    o: &ReportOptions,
    message: &str,
) -> Result<(), kube::Error> {
    let api: Api<ManagedClusterAddOn> = Api::namespaced(hub.clone(), &o.cluster_name);
    let current = api.get_status(&o.addon_name).await?;
    let mut conds: Vec<_> = current
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.type_ == AGENT_CONDITION)
        .collect();
    let changed = migration_api::common::set_condition(
        &mut conds,
        AGENT_CONDITION,
        TRUE,
        AGENT_RUNNING,
        message,
        None,
    );
    let body = json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
        "metadata": {"name": o.addon_name, "namespace": o.cluster_name},
        "status": {"conditions": conds}
    });
    apply_status_if_changed(&api, FIELD_MANAGER, &o.addon_name, &body, changed).await?;
    Ok(())
}

/// Writes the AddOnPlacementScore (creating it first when missing).
pub async fn write_scores(
    hub: &Client,
    o: &ReportOptions,
    counts: Counts,
) -> Result<(), kube::Error> {
    let api: Api<AddOnPlacementScore> = Api::namespaced(hub.clone(), &o.cluster_name);
    if api.get_opt(&o.addon_name).await?.is_none() {
        let score: AddOnPlacementScore =
            serde_json::from_value(json!({"metadata": {"name": o.addon_name}}))
                .map_err(kube::Error::SerdeError)?;
        match api.create(&PostParams::default(), &score).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    let valid_for = o
        .refresh
        .checked_mul(3)
        .and_then(|d| jiff::SignedDuration::try_from(d).ok())
        .unwrap_or(jiff::SignedDuration::from_secs(180));
    let now = jiff::Timestamp::now();
    let valid = now.checked_add(valid_for).unwrap_or(now);
    let scores: Vec<_> = scores(counts, o.capacity)
        .into_iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    // Written every refresh: validUntil moves on.
    let body = json!({
        "apiVersion": "cluster.open-cluster-management.io/v1alpha1", "kind": "AddOnPlacementScore",
        "metadata": {"name": o.addon_name, "namespace": o.cluster_name},
        "status": {"scores": scores, "validUntil": valid.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()}
    });
    apply_status_if_changed(&api, FIELD_MANAGER, &o.addon_name, &body, true).await?;
    o.refreshes.inc();
    Ok(())
}

/// Watches the hub's ManagedClusters and reports until aborted.
pub async fn run(local: Client, hub: Client, o: ReportOptions) {
    let (store, writer) = reflector::store::<ManagedCluster>();
    let mut events = watcher(
        Api::<ManagedCluster>::all(local.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer)
    .boxed();
    // The tasks are counted from a watch of their metadata: a list at every report was one
    // request for every few clusters that moved.
    let (tasks, task_writer) = reflector::store::<PartialObjectMeta<MigrationTask>>();
    let mut task_events = watcher(
        Api::<PartialObjectMeta<MigrationTask>>::all(local),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(task_writer)
    .boxed();
    let mut tasks_listed = false;
    let mut last: Option<(Counts, Instant)> = None;
    let mut dirty = true;
    // Nothing is reported before the first full list of clusters.
    let mut listed = false;
    // Changes are coalesced: at most one report per flush period.
    let mut flush = tokio::time::interval(Duration::from_millis(500));
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            ev = events.next() => match ev {
                Some(Ok(ev)) => {
                    listed |= matches!(ev, watcher::Event::InitDone);
                    dirty = true;
                }
                Some(Err(e)) => tracing::debug!(error = %e, "watching managed clusters"),
                None => return,
            },
            ev = task_events.next() => match ev {
                Some(Ok(ev)) => {
                    tasks_listed |= matches!(ev, watcher::Event::InitDone);
                    dirty = true;
                }
                Some(Err(e)) => tracing::debug!(error = %e, "watching migration tasks"),
                None => return,
            },
            _ = flush.tick() => {
                let due = last.is_none_or(|(_, at)| at.elapsed() >= o.refresh);
                if !listed || !(dirty || due) {
                    continue;
                }
                let (clusters, available) = count(&store);
                let n_tasks = tasks_listed.then(|| tasks.state().len());
                let counts = Counts { clusters, available, tasks: n_tasks };
                dirty = false;
                if !due && last.is_some_and(|(c, _)| c == counts) {
                    continue;
                }
                let message = summary(&o.version, &o.build, &o.cluster_name, counts);
                let r1 = write_scores(&hub, &o, counts).await;
                let r2 = write_condition(&hub, &o, &message).await;
                match (r1, r2) {
                    (Ok(()), Ok(())) => last = Some((counts, Instant::now())),
                    (a, b) => {
                        for e in [a.err(), b.err()].into_iter().flatten() {
                            tracing::warn!(error = %e, "reporting to the global hub");
                        }
                        dirty = true;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(clusters: usize, available: usize) -> Counts {
        Counts {
            clusters,
            available,
            tasks: Some(0),
        }
    }

    #[test]
    fn scores_are_normalised() {
        assert_eq!(
            scores(c(0, 0), 100),
            [
                ("managedClusters", 0),
                ("capacityHeadroom", 100),
                ("availableRatio", 100)
            ]
        );
        assert_eq!(
            scores(c(50, 25), 100),
            [
                ("managedClusters", 50),
                ("capacityHeadroom", 0),
                ("availableRatio", 0)
            ]
        );
        assert_eq!(
            scores(c(100, 100), 100),
            [
                ("managedClusters", 100),
                ("capacityHeadroom", -100),
                ("availableRatio", 100)
            ]
        );
        assert_eq!(
            scores(c(300, 0), 100),
            [
                ("managedClusters", 100),
                ("capacityHeadroom", -100),
                ("availableRatio", -100)
            ]
        );
        for (_, v) in scores(c(7, 3), 0) {
            assert!((-100..=100).contains(&v));
        }
    }

    #[test]
    fn summary_names_version_and_counts() {
        let s = summary("0.2.0", "0.1.0", "hub1", c(5, 4));
        assert_eq!(
            s,
            "agent 0.2.0 (binary 0.1.0) on hub1: 5 managed clusters, 4 available, 0 migration tasks"
        );
        let s = summary(
            "0.1.0",
            "0.1.0",
            "hub1",
            Counts {
                clusters: 1,
                available: 1,
                tasks: None,
            },
        );
        assert_eq!(
            s,
            "agent 0.1.0 on hub1: 1 managed clusters, 1 available, migration tasks unknown"
        );
    }
}
