//! Names OCM's components use.

/// Namespace of the klusterlet agents on a managed cluster.
pub const AGENT_NAMESPACE: &str = migration_api::names::KLUSTERLET_NAMESPACE;
/// Namespace of the hub's OCM components.
pub const HUB_NAMESPACE: &str = "open-cluster-management-hub";
/// Namespace of the bootstrap ServiceAccount on a hub.
pub const BOOTSTRAP_NAMESPACE: &str = "open-cluster-management";
/// The bootstrap ServiceAccount on a hub: the one `clusteradm init` creates and `clusteradm get
/// token` issues tokens of (open-cluster-management-io/clusteradm `pkg/config/env.go`,
/// `BootstrapSAName`; older releases named it `cluster-bootstrap`).
pub const BOOTSTRAP_SA: &str = "agent-registration-bootstrap";
/// Secret on a managed cluster with the agent's own hub kubeconfig.
pub const HUB_KUBECONFIG_SECRET: &str = "hub-kubeconfig-secret";
/// The cluster lease, in the cluster namespace on the hub.
pub const CLUSTER_LEASE: &str = "managed-cluster-lease";
/// Label naming the cluster of a CSR.
pub const CLUSTER_NAME_LABEL: &str = "open-cluster-management.io/cluster-name";
/// The taint upstream's taint controller puts on a cluster whose Available condition is
/// Unknown or not there yet.
pub const UNREACHABLE_TAINT: &str = "cluster.open-cluster-management.io/unreachable";
/// The taint upstream's taint controller puts on a cluster whose Available condition is False.
pub const UNAVAILABLE_TAINT: &str = "cluster.open-cluster-management.io/unavailable";
/// Group every registered cluster agent is in.
pub const MANAGED_CLUSTERS_GROUP: &str = "system:open-cluster-management:managed-clusters";

/// The agent user of a cluster.
pub fn agent_user(cluster: &str, agent: &str) -> String {
    format!("system:open-cluster-management:{cluster}:{agent}")
}

/// The per-cluster group.
pub fn cluster_group(cluster: &str) -> String {
    format!("system:open-cluster-management:{cluster}")
}

/// ClusterRole (and binding) the hub grants an accepted cluster's agent.
pub fn cluster_role(cluster: &str) -> String {
    format!("open-cluster-management:managedcluster:{cluster}")
}

/// The bootstrap identity's user name.
pub fn bootstrap_user() -> String {
    format!("system:serviceaccount:{BOOTSTRAP_NAMESPACE}:{BOOTSTRAP_SA}")
}
