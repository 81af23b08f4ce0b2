//! A whole fleet on one machine: a global hub, hubs registered to it as managed clusters, and
//! managed clusters registered to the hubs.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, ListParams};
use migration_api::common::condition_is_true;
use migration_api::names::conditions::{CLUSTER_AVAILABLE, JOINED};
use migration_api::ocm::cluster::ManagedCluster;

use crate::Error;
use crate::cluster::{Role, SimCluster};
use crate::hub::{
    Agent, AgentOptions, Hub, HubKind, HubOptions, OlderMce, start_managed_serviceaccount,
};
use crate::registration::RegistrationOptions;

/// The namespace the fleet binds the `global` cluster set to on every hub: migrations there may
/// name every hub and cluster.
pub const MIGRATION_NAMESPACE: &str = "default";
/// Name of the global hub.
pub const GLOBAL_HUB: &str = "global-hub";

/// Shape and timing of a fleet.
#[derive(Clone, Debug)]
pub struct FleetOptions {
    pub hubs: usize,
    pub clusters_per_hub: usize,
    /// Hubs (by index) holding another number of clusters than `clusters_per_hub`; a hub past
    /// the list's end holds `clusters_per_hub`. Cluster numbers stay as if each hub held
    /// `clusters_per_hub` (hub 2's first cluster is the `clusters_per_hub + 1`th).
    pub clusters_on: Vec<usize>,
    /// Simulated time each klusterlet takes to join.
    pub join_delay: Duration,
    /// Lease duration of every klusterlet (the hub judges availability from it).
    pub lease_duration_secs: i32,
    /// How often hubs judge leases.
    pub lease_check_interval: Duration,
    /// How often work agents re-read applied resources for feedback.
    pub status_sync_interval: Duration,
    /// Addon lease period the hubs' klusterlets judge addon health with (Available turns
    /// False after five periods without renewal).
    pub addon_lease_period: Duration,
    /// Run a kubelet on every hub, so addon agent Deployments (and hook Jobs) delivered to
    /// the hubs actually run.
    pub kubelet: Option<FleetKubelet>,
    /// Hubs (by name) that are plain OCM: no ACM APIs, no import controller.
    pub plain_hubs: Vec<String>,
    /// Hubs (by name) with an older ACM: KlusterletConfig's `spec.bootstrapKubeConfigs`,
    /// rendered as MCE 2.7 does (the listed hubs alone).
    pub legacy_hubs: Vec<String>,
    /// Hubs (by name) with MCE 2.8: `spec.bootstrapKubeConfigs`, the current hub appended.
    pub mce28_hubs: Vec<String>,
    /// Hubs (by name) whose work agent (towards the global hub) runs with the
    /// `RawFeedbackJsonString` feature gate; upstream it is alpha and off by default, and so
    /// it is here for every hub not named.
    pub raw_feedback_hubs: Vec<String>,
    /// Replaces every klusterlet's `hubConnectionTimeoutSeconds` (at least 180 s upstream)
    /// so tests need not wait minutes; `None` keeps what each Klusterlet says.
    pub hub_timeout: Option<Duration>,
    /// Every work agent's AppliedManifestWork eviction grace period (upstream 60 minutes).
    pub eviction_grace: Duration,
    /// What every managed cluster's name starts with (then its number, from 1): `cluster`
    /// by default; a long one makes names as long as Kubernetes allows (63 characters).
    pub cluster_prefix: String,
    /// The fleet's API servers also take connections from this process through memory
    /// (kube-sim's `Options::in_process_connections`): the simulated klusterlets and work
    /// agents then hold no open file per connection, so a fleet of thousands of clusters fits
    /// in one process's open-file limit. Not OCM behaviour: the addon's binaries, in their own
    /// processes, connect over TCP either way.
    pub in_process_connections: bool,
}

/// The kubelet every hub runs (see [`crate::kubelet`]).
#[derive(Clone, Debug)]
pub struct FleetKubelet {
    pub agent_binary: std::path::PathBuf,
    pub image_repository: String,
    pub known_tags: Vec<String>,
    /// Pod files and logs go to `<work_dir>/<hub>/`.
    pub work_dir: std::path::PathBuf,
}

impl Default for FleetOptions {
    fn default() -> Self {
        Self {
            hubs: 2,
            clusters_per_hub: 5,
            clusters_on: Vec::new(),
            join_delay: Duration::from_secs(2),
            lease_duration_secs: 60,
            lease_check_interval: Duration::from_secs(2),
            status_sync_interval: Duration::from_secs(2),
            addon_lease_period: Duration::from_secs(60),
            kubelet: None,
            plain_hubs: Vec::new(),
            legacy_hubs: Vec::new(),
            mce28_hubs: Vec::new(),
            raw_feedback_hubs: Vec::new(),
            hub_timeout: None,
            eviction_grace: Duration::from_secs(60 * 60),
            cluster_prefix: CLUSTER_PREFIX.to_owned(),
            in_process_connections: false,
        }
    }
}

impl FleetOptions {
    /// How many clusters hub `h` (0-based) holds.
    pub fn clusters_of(&self, h: usize) -> usize {
        self.clusters_on
            .get(h)
            .copied()
            .unwrap_or(self.clusters_per_hub)
    }

    /// How many managed clusters the fleet holds.
    pub fn size(&self) -> usize {
        (0..self.hubs).map(|h| self.clusters_of(h)).sum()
    }

    /// Name of the `k`th managed cluster of this fleet (1-based).
    pub fn cluster_name(&self, k: usize) -> String {
        format!("{}{k}", self.cluster_prefix)
    }
}

/// A running fleet.
#[derive(Debug)]
pub struct Fleet {
    pub global: Hub,
    pub hubs: Vec<Hub>,
    /// Each hub's klusterlet towards the global hub.
    pub hub_agents: Vec<Agent>,
    /// Managed clusters, with the index of the hub they start on.
    pub clusters: Vec<(usize, SimCluster, Agent)>,
    /// The managed-serviceaccount addon of each hub.
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Each hub's kubelet (when the fleet runs kubelets), by hub index.
    kubelets: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for t in self.tasks.iter().chain(&self.kubelets) {
            t.abort();
        }
    }
}

/// Name of the `i`th hub (1-based).
pub fn hub_name(i: usize) -> String {
    format!("hub{i}")
}

/// What a fleet's managed clusters are named by default: `cluster1`, `cluster2`, ...
pub const CLUSTER_PREFIX: &str = "cluster";

/// Name of the `k`th managed cluster of a fleet of default names (1-based).
pub fn cluster_name(k: usize) -> String {
    format!("{CLUSTER_PREFIX}{k}")
}

/// How many of a hub's managed clusters are Joined and Available.
pub async fn ready_clusters(hub: &Hub) -> Result<usize, Error> {
    let api: Api<ManagedCluster> = Api::all(hub.cluster.admin.clone());
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|m| {
            let c = m.conditions();
            condition_is_true(c, JOINED) && condition_is_true(c, CLUSTER_AVAILABLE)
        })
        .count())
}

impl Fleet {
    /// Starts every cluster and agent; does not wait for them to join.
    pub async fn up(opts: &FleetOptions) -> Result<Self, Error> {
        let hub_opts = HubOptions {
            auto_approve: true,
            registration: RegistrationOptions {
                lease_check_interval: opts.lease_check_interval,
            },
            kind: HubKind::Acm,
            in_process_connections: opts.in_process_connections,
        };
        let agent = AgentOptions {
            join_delay: opts.join_delay,
            lease_duration_secs: opts.lease_duration_secs,
            status_sync_interval: opts.status_sync_interval,
            addon_lease_period: opts.addon_lease_period,
            raw_feedback_json: false,
            hub_timeout: opts.hub_timeout,
            eviction_grace: opts.eviction_grace,
        };
        let global = Hub::start(GLOBAL_HUB, hub_opts.clone()).await?;
        let mut hubs = Vec::new();
        let mut hub_agents = Vec::new();
        for i in 1..=opts.hubs {
            let name = hub_name(i);
            let hub = Hub::start(
                &name,
                HubOptions {
                    kind: if opts.plain_hubs.contains(&name) {
                        HubKind::Plain
                    } else if opts.legacy_hubs.contains(&name) {
                        HubKind::OlderAcm(OlderMce::Mce27)
                    } else if opts.mce28_hubs.contains(&name) {
                        HubKind::OlderAcm(OlderMce::Mce28)
                    } else {
                        HubKind::Acm
                    },
                    ..hub_opts.clone()
                },
            )
            .await?;
            let hub_agent = AgentOptions {
                raw_feedback_json: opts.raw_feedback_hubs.contains(&name),
                ..agent
            };
            hub_agents
                .push(Agent::start(&hub.cluster, &global.bootstrap_kubeconfig, hub_agent).await?);
            hubs.push(hub);
        }
        // The fleet's admin lets the `default` namespace (where the demo's and the tests'
        // migrations live) see every hub and every cluster, as `clusteradm clusterset bind
        // global --namespace default` does on each hub.
        for hub in std::iter::once(&global).chain(hubs.iter()) {
            crate::hub::bind_cluster_set(&hub.cluster, MIGRATION_NAMESPACE, "global").await?;
        }
        let mut tasks = Vec::new();
        let mut kubelets = Vec::new();
        for hub in &hubs {
            tasks.push(
                start_managed_serviceaccount(
                    &global,
                    &hub.cluster,
                    opts.status_sync_interval,
                    opts.addon_lease_period,
                )
                .await?,
            );
            if let Some(k) = &opts.kubelet {
                let kopts = crate::kubelet::KubeletOptions {
                    agent_binary: k.agent_binary.clone(),
                    image_repository: k.image_repository.clone(),
                    other_images: Vec::new(),
                    known_tags: k.known_tags.clone(),
                    work_dir: k.work_dir.join(&hub.cluster.name),
                    api_url: hub.cluster.api.url(),
                    api_ca_pem: hub.cluster.api.ca_pem().to_owned(),
                };
                kubelets.push(tokio::spawn(crate::kubelet::run(
                    hub.cluster.admin.clone(),
                    kopts,
                )));
            }
        }
        // Clusters start a few at a time: each is its own API server and klusterlet.
        let specs: Vec<(usize, String, String)> = hubs
            .iter()
            .enumerate()
            .flat_map(|(h, hub)| {
                (1..=opts.clusters_of(h)).map(move |j| {
                    (
                        h,
                        opts.cluster_name(h * opts.clusters_per_hub + j),
                        hub.bootstrap_kubeconfig.clone(),
                    )
                })
            })
            .collect();
        let mut started: Vec<Result<(usize, SimCluster, Agent), Error>> =
            futures::stream::iter(specs)
                .map(|(h, name, bootstrap)| async move {
                    let c =
                        SimCluster::start_with(&name, Role::Managed, opts.in_process_connections)
                            .await?;
                    let klusterlet = Agent::start(&c, &bootstrap, agent).await?;
                    Ok((h, c, klusterlet))
                })
                .buffer_unordered(16)
                .collect()
                .await;
        let mut clusters = Vec::with_capacity(started.len());
        for r in started.drain(..) {
            clusters.push(r?);
        }
        clusters.sort_by(|a, b| a.1.name.cmp(&b.1.name));
        Ok(Self {
            global,
            hubs,
            hub_agents,
            clusters,
            tasks,
            kubelets,
        })
    }

    /// Stops the kubelet of the hub at `index` (0-based), killing the pods it runs: the
    /// addon agent there stops, as on a node that went down.
    pub fn stop_kubelet(&self, index: usize) {
        if let Some(k) = self.kubelets.get(index) {
            k.abort();
        }
    }

    /// Waits until every hub and cluster is Joined and Available where it registered.
    pub async fn wait_ready(&self, deadline: Duration) -> Result<(), Error> {
        let start = Instant::now();
        let mut targets: Vec<(&Hub, usize)> = vec![(&self.global, self.hubs.len())];
        for (h, hub) in self.hubs.iter().enumerate() {
            targets.push((
                hub,
                self.clusters.iter().filter(|(i, _, _)| *i == h).count(),
            ));
        }
        for (hub, want) in targets {
            loop {
                let ready = ready_clusters(hub).await?;
                if ready >= want {
                    break;
                }
                if start.elapsed() > deadline {
                    return Err(Error::Setup(format!(
                        "{}: {ready} of {want} clusters ready after {deadline:?}",
                        hub.cluster.name
                    )));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// For every cluster, the hubs (1-based) where it is accepted and Available: after a
    /// migration each must have exactly one.
    pub async fn cluster_homes(
        &self,
    ) -> Result<std::collections::BTreeMap<String, Vec<usize>>, Error> {
        let mut homes: std::collections::BTreeMap<String, Vec<usize>> = self
            .clusters
            .iter()
            .map(|(_, c, _)| (c.name.clone(), Vec::new()))
            .collect();
        for (i, hub) in self.hubs.iter().enumerate() {
            for mc in Api::<ManagedCluster>::all(hub.cluster.admin.clone())
                .list(&ListParams::default())
                .await?
            {
                if mc.spec.hub_accepts_client
                    && condition_is_true(mc.conditions(), CLUSTER_AVAILABLE)
                {
                    homes
                        .entry(mc.metadata.name.clone().unwrap_or_default())
                        .or_default()
                        .push(i + 1);
                }
            }
        }
        Ok(homes)
    }

    /// Writes `dir/kubeconfig/<name>.yaml` (admin, HTTPS) for the global hub and every hub.
    pub fn write_kubeconfigs(&self, dir: &Path) -> Result<(), Error> {
        let kdir = dir.join("kubeconfig");
        std::fs::create_dir_all(&kdir)
            .map_err(|e| Error::Setup(format!("{}: {e}", kdir.display())))?;
        for hub in std::iter::once(&self.global).chain(self.hubs.iter()) {
            let path = kdir.join(format!("{}.yaml", hub.cluster.name));
            std::fs::write(&path, hub.cluster.api.kubeconfig())
                .map_err(|e| Error::Setup(format!("{}: {e}", path.display())))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hub_holds_its_own_count_of_clusters_or_the_common_one() {
        let opts = FleetOptions {
            hubs: 3,
            clusters_per_hub: 4,
            clusters_on: vec![4, 0],
            ..Default::default()
        };
        assert_eq!(
            (0..3).map(|h| opts.clusters_of(h)).collect::<Vec<_>>(),
            [4, 0, 4]
        );
        assert_eq!(opts.size(), 8);
        assert_eq!(FleetOptions::default().size(), 10);
    }
}
