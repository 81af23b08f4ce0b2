//! ocm-sim: OCM's own components simulated as small kube-rs controllers against kube-sim
//! instances, with the identities the real components have, and the fleet launcher.

pub mod addon_agent;
mod backoff;
pub mod cluster;
pub mod clustersets;
pub mod demo;
pub mod feedback_watch;
pub mod finalizers;
pub mod fleet;
pub mod hub;
pub mod import;
pub mod klusterlet;
pub mod kubelet;
pub mod msa;
pub mod names;
pub mod placement;
pub mod registration;
pub mod work_agent;

/// Errors of the simulators.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("starting a cluster: {0}")]
    Start(#[from] kube_sim::StartError),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("setup: {0}")]
    Setup(String),
}
