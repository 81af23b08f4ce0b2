//! The agent's Prometheus metrics, served at `/metrics` with the `cluster_migration_` prefix
//! (beside `build_info` and `api_requests_total`): the clusters of its tasks by role and
//! state, the bootstrap CSRs it approved (and why) and refused, its health lease renewals and
//! its score refreshes.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use migration_api::migration::{ClusterState, MigrationTask};
use migration_api::runtime::Health;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    pub role: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

/// The agent's metrics; clones share them.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    pub clusters: Family<ClusterLabels, Gauge>,
    pub csrs_approved: Family<ReasonLabels, Counter>,
    pub csrs_refused: Counter,
    pub lease_renewals: Counter,
    pub score_refreshes: Counter,
    /// The CSRs counted already (each counts once, however often it is seen or approved: a
    /// reconcile that reads the CSR cache before it shows the approval approves it again, and
    /// that second approval changes nothing).
    counted: Arc<Mutex<BTreeSet<String>>>,
}

impl Metrics {
    /// New metrics, registered with the process's health endpoint.
    pub fn registered(health: &Health) -> Self {
        let m = Self::default();
        health.register(
            "agent_clusters",
            "Clusters of the migration tasks on this hub, by role and state",
            m.clusters.clone(),
        );
        health.register(
            "agent_csrs_approved",
            "Bootstrap CSRs approved for migrating clusters, by reason (expected, let_through)",
            m.csrs_approved.clone(),
        );
        health.register(
            "agent_csrs_refused",
            "CSRs filed with a migration's bootstrap identity for a cluster that identity was not issued for, or asking for another identity: never approved",
            m.csrs_refused.clone(),
        );
        health.register(
            "agent_lease_renewals",
            "Renewals of the agent's health lease",
            m.lease_renewals.clone(),
        );
        health.register(
            "agent_score_refreshes",
            "AddOnPlacementScore refreshes written to the global hub",
            m.score_refreshes.clone(),
        );
        // Both reasons from the start (at 0), so that their rates are defined.
        for reason in ["expected", "let_through"] {
            let _series = m.csrs_approved.get_or_create(&ReasonLabels {
                reason: reason.into(),
            });
        }
        m
    }

    /// Counts a CSR refused, once per CSR.
    pub fn refused(&self, csr: &str) {
        if self.first_time(csr) {
            self.csrs_refused.inc();
        }
    }

    /// Counts a CSR approved for `reason`, once per CSR.
    pub fn approved(&self, csr: &str, reason: &str) {
        if self.first_time(csr) {
            self.csrs_approved
                .get_or_create(&ReasonLabels {
                    reason: reason.into(),
                })
                .inc();
        }
    }

    fn first_time(&self, csr: &str) -> bool {
        self.counted
            .lock()
            .is_ok_and(|mut seen| seen.insert(csr.to_owned()))
    }

    /// Sets the cluster gauge from every task there is (their reported states).
    pub fn tasks_seen<'a>(&self, tasks: impl IntoIterator<Item = &'a MigrationTask>) {
        self.clusters.clear();
        for task in tasks {
            let n = task.spec.clusters.len();
            let states = task
                .status
                .as_ref()
                .and_then(|s| s.cluster_states.as_deref())
                .map(|s| ClusterState::decode(s, n))
                .unwrap_or_default();
            for state in states {
                self.clusters
                    .get_or_create(&ClusterLabels {
                        role: task.spec.role.as_str().to_owned(),
                        state: format!("{state:?}"),
                    })
                    .inc();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use migration_api::migration::{MigrationRole, MigrationTaskSpec, MigrationTaskStatus};

    #[test]
    fn clusters_are_counted_by_role_and_state_and_refusals_once() {
        let m = Metrics::default();
        let mut task = MigrationTask::new(
            "t",
            MigrationTaskSpec {
                role: MigrationRole::Target,
                clusters: vec!["a".into(), "b".into(), "c".into()],
                ..Default::default()
            },
        );
        task.status = Some(MigrationTaskStatus {
            cluster_states: Some(ClusterState::encode(&[
                ClusterState::Available,
                ClusterState::Available,
                ClusterState::Created,
            ])),
            ..Default::default()
        });
        m.tasks_seen([&task]);
        let get = |state: &str| {
            m.clusters
                .get_or_create(&ClusterLabels {
                    role: "target".into(),
                    state: state.into(),
                })
                .get()
        };
        assert_eq!((get("Available"), get("Created")), (2, 1));
        m.tasks_seen([]);
        assert_eq!(get("Available"), 0);
        m.refused("csr-1");
        m.refused("csr-1");
        m.refused("csr-2");
        assert_eq!(m.csrs_refused.get(), 2);
        m.approved("csr-3", "expected");
        m.approved("csr-3", "expected");
        let expected = ReasonLabels {
            reason: "expected".into(),
        };
        assert_eq!(m.csrs_approved.get_or_create(&expected).get(), 1);
    }
}
