//! The manager's Prometheus metrics, served at `/metrics` with the `cluster_migration_` prefix
//! (beside `build_info`, `api_requests_total` and `manager_leader`): migrations by phase,
//! clusters by state per migration, how long phases and whole migrations take, each
//! controller's reconciles, and the addon's hubs by version and by state. Everything here is
//! set from what the controllers observed; nothing is kept that the API does not hold.

use std::time::Duration;

use migration_api::migration::{ManagedClusterMigration, ManagedClusterMigrationStatus};
use migration_api::runtime::Health;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MigrationLabels {
    pub namespace: String,
    pub migration: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MigrationPhaseLabels {
    pub namespace: String,
    pub migration: String,
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VersionLabels {
    pub version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Phases and migrations: half a second to a little over an hour.
fn phase_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.5, 2.0, 14))
}

/// Reconciles: a millisecond to about four minutes.
fn reconcile_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 4.0, 10))
}

/// The states a migration's clusters are counted in (`status.clusters`).
pub const CLUSTER_STATES: [&str; 4] = ["switching", "registered", "failed", "rolled_back"];

/// The manager's metrics; clones share them.
#[derive(Clone, Debug)]
pub struct Metrics {
    pub migrations: Family<PhaseLabels, Gauge>,
    pub migration_clusters: Family<MigrationLabels, Gauge>,
    pub phase_started: Family<MigrationPhaseLabels, Gauge>,
    pub phase_seconds: Histograms<PhaseLabels>,
    pub migration_seconds: Histograms<ResultLabels>,
    pub reconciles: Family<ControllerLabels, Counter>,
    pub reconcile_errors: Family<ControllerLabels, Counter>,
    pub reconcile_seconds: Histograms<ControllerLabels>,
    pub addon_hubs: Family<VersionLabels, Gauge>,
    pub addon_hub_states: Family<StateLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            migrations: Family::default(),
            migration_clusters: Family::default(),
            phase_started: Family::default(),
            phase_seconds: Family::new_with_constructor(phase_buckets),
            migration_seconds: Family::new_with_constructor(phase_buckets),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_seconds: Family::new_with_constructor(reconcile_buckets),
            addon_hubs: Family::default(),
            addon_hub_states: Family::default(),
        }
    }
}

impl Metrics {
    /// New metrics, registered with the process's health endpoint.
    pub fn registered(health: &Health) -> Self {
        let m = Self::default();
        health.register(
            "migrations",
            "ManagedClusterMigrations by phase",
            m.migrations.clone(),
        );
        health.register(
            "migration_clusters",
            "Clusters of each migration by state (switching, registered, failed, rolled_back)",
            m.migration_clusters.clone(),
        );
        health.register(
            "migration_phase_start_timestamp_seconds",
            "When each migration entered the phase it is in (Unix time)",
            m.phase_started.clone(),
        );
        health.register(
            "phase_duration_seconds",
            "How long migrations spent in each phase they left",
            m.phase_seconds.clone(),
        );
        health.register(
            "migration_duration_seconds",
            "How long migrations took from start to their verdict, by verdict",
            m.migration_seconds.clone(),
        );
        health.register(
            "reconciles",
            "Reconciles by controller",
            m.reconciles.clone(),
        );
        health.register(
            "reconcile_errors",
            "Reconciles that failed (and are retried), by controller",
            m.reconcile_errors.clone(),
        );
        health.register(
            "reconcile_duration_seconds",
            "How long reconciles took, by controller",
            m.reconcile_seconds.clone(),
        );
        health.register(
            "addon_hubs",
            "Hubs the addon is enabled on, by the agent version they run",
            m.addon_hubs.clone(),
        );
        health.register(
            "addon_hub_states",
            "Hubs the addon is enabled on, by state (available, upgrading, degraded, rolled_back)",
            m.addon_hub_states.clone(),
        );
        m
    }

    /// Counts one reconcile of `controller` that took `took`.
    pub fn reconciled(&self, controller: &str, took: Duration, ok: bool) {
        let labels = ControllerLabels {
            controller: controller.to_owned(),
        };
        self.reconciles.get_or_create(&labels).inc();
        // Present from the first reconcile on (at 0), so that its rate is defined.
        let errors = self.reconcile_errors.get_or_create(&labels);
        if !ok {
            errors.inc();
        }
        self.reconcile_seconds
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// Sets the migration gauges from every migration there is.
    pub fn migrations_seen<'a>(&self, all: impl IntoIterator<Item = &'a ManagedClusterMigration>) {
        self.migrations.clear();
        self.migration_clusters.clear();
        self.phase_started.clear();
        for mcm in all {
            let status = mcm.status.clone().unwrap_or_default();
            let phase = format!("{:?}", status.phase.unwrap_or_default());
            let (namespace, migration) = (
                mcm.metadata.namespace.clone().unwrap_or_default(),
                mcm.metadata.name.clone().unwrap_or_default(),
            );
            if let Some(since) = &status.phase_start_time {
                self.phase_started
                    .get_or_create(&MigrationPhaseLabels {
                        namespace: namespace.clone(),
                        migration: migration.clone(),
                        phase: phase.clone(),
                    })
                    .set(since.0.as_second());
            }
            self.migrations.get_or_create(&PhaseLabels { phase }).inc();
            let counts = status.clusters.unwrap_or_default();
            for (state, n) in CLUSTER_STATES.iter().zip([
                counts.switching,
                counts.registered,
                counts.failed,
                counts.rolled_back,
            ]) {
                self.migration_clusters
                    .get_or_create(&MigrationLabels {
                        namespace: namespace.clone(),
                        migration: migration.clone(),
                        state: (*state).to_owned(),
                    })
                    .set(n.into());
            }
        }
    }

    /// Records what one status write of a migration finished: the phase it left (and how long
    /// it took), and the whole migration once it reached its verdict.
    pub fn transitioned(
        &self,
        before: &ManagedClusterMigrationStatus,
        after: &ManagedClusterMigrationStatus,
    ) {
        for t in transitions(before, after) {
            match t {
                Transition::Left(phase, secs) => self
                    .phase_seconds
                    .get_or_create(&PhaseLabels { phase })
                    .observe(secs),
                Transition::Finished(result, secs) => self
                    .migration_seconds
                    .get_or_create(&ResultLabels { result })
                    .observe(secs),
            }
        }
    }

    /// Sets the addon gauges: each hub's agent version and state.
    pub fn hubs_seen<'a>(&self, hubs: impl IntoIterator<Item = (&'a str, &'a str)>) {
        self.addon_hubs.clear();
        self.addon_hub_states.clear();
        for (version, state) in hubs {
            self.addon_hubs
                .get_or_create(&VersionLabels {
                    version: version.to_owned(),
                })
                .inc();
            self.addon_hub_states
                .get_or_create(&StateLabels {
                    state: state.to_owned(),
                })
                .inc();
        }
    }
}

/// What one status change of a migration finished.
#[derive(Clone, Debug, PartialEq)]
pub enum Transition {
    /// It left this phase after this many seconds in it.
    Left(String, f64),
    /// It reached this verdict (`Completed`, `Failed`) this many seconds after it started.
    Finished(String, f64),
}

/// What changed between two statuses of a migration (pure: the times are the statuses' own).
pub fn transitions(
    before: &ManagedClusterMigrationStatus,
    after: &ManagedClusterMigrationStatus,
) -> Vec<Transition> {
    let (from, to) = (
        before.phase.unwrap_or_default(),
        after.phase.unwrap_or_default(),
    );
    if from == to || before.phase.is_none() {
        return Vec::new();
    }
    let secs = |a: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
                b: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        Some(b?.0.duration_since(a?.0).as_secs_f64().max(0.0))
    };
    let mut out = Vec::new();
    if let Some(s) = secs(
        before.phase_start_time.as_ref(),
        after.phase_start_time.as_ref(),
    ) {
        out.push(Transition::Left(format!("{from:?}"), s));
    }
    if to.is_terminal()
        && let Some(s) = secs(after.start_time.as_ref(), after.completion_time.as_ref())
    {
        out.push(Transition::Finished(format!("{to:?}"), s));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use migration_api::migration::{ClusterCounts, MigrationPhase};

    fn at(t: &str) -> Option<Time> {
        Some(Time(t.parse().unwrap()))
    }

    fn status(phase: MigrationPhase, since: &str) -> ManagedClusterMigrationStatus {
        ManagedClusterMigrationStatus {
            phase: Some(phase),
            phase_start_time: at(since),
            start_time: at("2026-01-01T00:00:00Z"),
            ..Default::default()
        }
    }

    #[test]
    fn a_phase_left_counts_its_time_and_a_verdict_the_whole_migration() {
        use MigrationPhase::*;
        let deploying = status(Deploying, "2026-01-01T00:00:10Z");
        let registering = status(Registering, "2026-01-01T00:00:25Z");
        assert_eq!(
            transitions(&deploying, &registering),
            [Transition::Left("Deploying".into(), 15.0)]
        );
        // No change, or a first status: nothing.
        assert_eq!(transitions(&deploying, &deploying), []);
        assert_eq!(
            transitions(&ManagedClusterMigrationStatus::default(), &deploying),
            []
        );
        let mut done = status(Completed, "2026-01-01T00:01:00Z");
        done.completion_time = at("2026-01-01T00:01:00Z");
        let cleaning = status(Cleaning, "2026-01-01T00:00:40Z");
        assert_eq!(
            transitions(&cleaning, &done),
            [
                Transition::Left("Cleaning".into(), 20.0),
                Transition::Finished("Completed".into(), 60.0)
            ]
        );
    }

    #[test]
    fn the_gauges_follow_the_migrations_there_are() {
        let m = Metrics::default();
        let mut a = ManagedClusterMigration::new("a", Default::default());
        a.metadata.namespace = Some("ns".into());
        a.status = Some(ManagedClusterMigrationStatus {
            phase: Some(MigrationPhase::Registering),
            clusters: Some(ClusterCounts {
                total: 5,
                switching: 2,
                registered: 3,
                failed: 0,
                rolled_back: 0,
            }),
            ..Default::default()
        });
        let b = ManagedClusterMigration::new("b", Default::default());
        m.migrations_seen([&a, &b]);
        let phase = |p: &str| {
            m.migrations
                .get_or_create(&PhaseLabels { phase: p.into() })
                .get()
        };
        assert_eq!((phase("Registering"), phase("Pending")), (1, 1));
        let clusters = |state: &str| {
            m.migration_clusters
                .get_or_create(&MigrationLabels {
                    namespace: "ns".into(),
                    migration: "a".into(),
                    state: state.into(),
                })
                .get()
        };
        assert_eq!((clusters("registered"), clusters("switching")), (3, 2));
        // A migration gone: its series go with it.
        m.migrations_seen([&b]);
        assert_eq!(phase("Registering"), 0);
        assert_eq!(clusters("registered"), 0);
        m.reconciled("migration", Duration::from_millis(3), false);
        let labels = ControllerLabels {
            controller: "migration".into(),
        };
        assert_eq!(m.reconciles.get_or_create(&labels).get(), 1);
        assert_eq!(m.reconcile_errors.get_or_create(&labels).get(), 1);
    }
}
