//! The placement controller of a hub: selects ManagedClusters from the cluster sets bound to a
//! Placement's namespace, filters them by predicates (labels and claims) and taints
//! (tolerations), scores them (AddOn scores from AddOnPlacementScore, expired or missing
//! counting 0; the Steady built-in), keeps `numberOfClusters`, splits the decisions into
//! decision groups, and writes PlacementDecisions and the Placement's status.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use migration_api::common::{Condition, set_condition};
use migration_api::names::labels::{DECISION_GROUP_INDEX, DECISION_GROUP_NAME, PLACEMENT};
use migration_api::ocm::cluster::{
    AddOnPlacementScore, ClusterSelector, ManagedCluster, ManagedClusterSet,
    ManagedClusterSetBinding, Placement, PlacementDecision,
};
use serde_json::json;

const MANAGER: &str = "placement-controller";

struct Ctx {
    client: Client,
}

/// Runs until aborted.
pub async fn run(client: Client) {
    let placements: Api<Placement> = Api::all(client.clone());
    // Each watch has its own back-off and keeps its errors (`migration_api::runtime::controller`,
    // `watch_events`), as every informer's reflector does upstream (ocm's placement scheduling
    // controller, on shared informers): client-go `tools/cache/reflector.go` (vendored in ocm)
    // gives each reflector `NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0)`, so one
    // watch's error never pauses another's.
    let controller = migration_api::runtime::controller(placements, watcher::Config::default());
    let store = controller.store();
    let all = move || {
        store
            .state()
            .into_iter()
            .map(|p| ObjectRef::from_obj(&*p))
            .collect::<Vec<_>>()
    };
    let (a1, a2, a3, a4) = (all.clone(), all.clone(), all.clone(), all);
    controller
        .watches_stream(
            migration_api::runtime::watch_events(
                Api::<ManagedCluster>::all(client.clone()),
                watcher::Config::default(),
            ),
            move |_| a1(),
        )
        .watches_stream(
            migration_api::runtime::watch_events(
                Api::<AddOnPlacementScore>::all(client.clone()),
                watcher::Config::default(),
            ),
            move |_| a2(),
        )
        .watches_stream(
            migration_api::runtime::watch_events(
                Api::<ManagedClusterSetBinding>::all(client.clone()),
                watcher::Config::default(),
            ),
            move |_| a3(),
        )
        .watches_stream(
            migration_api::runtime::watch_events(
                Api::<ManagedClusterSet>::all(client.clone()),
                watcher::Config::default(),
            ),
            move |_| a4(),
        )
        .run(
            reconcile,
            |_, e: &kube::Error, _| {
                tracing::debug!(error = %e, "placement reconcile failed");
                Action::requeue(Duration::from_millis(500))
            },
            Arc::new(Ctx { client }),
        )
        .for_each(|_| async {})
        .await;
}

pub use migration_api::common::{requirement_matches, selector_matches};

fn cluster_selector_matches(sel: &ClusterSelector, mc: &ManagedCluster) -> bool {
    let labels: BTreeMap<String, String> = mc.labels().clone();
    let claims: BTreeMap<String, String> = mc
        .status
        .as_ref()
        .and_then(|s| s.cluster_claims.as_ref())
        .map(|cs| {
            cs.iter()
                .filter_map(|c| Some((c.name.clone()?, c.value.clone().unwrap_or_default())))
                .collect()
        })
        .unwrap_or_default();
    sel.label_selector
        .as_ref()
        .is_none_or(|l| selector_matches(l, &labels))
        && sel
            .claim_selector
            .as_ref()
            .and_then(|c| c.match_expressions.as_ref())
            .is_none_or(|rs| {
                rs.iter()
                    .all(|r| requirement_matches(r, claims.get(&r.key)))
            })
}

/// A set's members (sdk-go `pkg/apis/cluster/v1beta2/managedclusterset.go`
/// `BuildClusterSelector`: no label selector selects nothing, an empty one everything).
fn set_members<'a>(
    set: &ManagedClusterSet,
    clusters: &'a [ManagedCluster],
) -> Vec<&'a ManagedCluster> {
    clusters
        .iter()
        .filter(|mc| migration_api::tenancy::is_member(set, mc.labels()))
        .collect()
}

/// Whether the placement may select `mc` despite its taints (ocm
/// `pkg/placement/plugins/tainttoleration/taint_toleration.go` `isClusterTolerated`): a
/// `NoSelect` taint must be tolerated; a `NoSelectIfNew` one too, unless the placement already
/// decided on the cluster (`decided`), which it keeps; `PreferNoSelect` does not filter.
fn tolerated(placement: &Placement, mc: &ManagedCluster, decided: bool) -> bool {
    let tolerations = placement.spec.tolerations.clone().unwrap_or_default();
    mc.spec
        .taints
        .iter()
        .flatten()
        .filter(|t| t.effect == "NoSelect" || (t.effect == "NoSelectIfNew" && !decided))
        .all(|t| {
            tolerations.iter().any(|tol| {
                let key_ok = tol.key.as_deref().is_none_or(|k| k == t.key);
                let op_ok = match tol.operator.as_deref().unwrap_or("Equal") {
                    "Exists" => true,
                    _ => tol.value.as_deref().unwrap_or("") == t.value.as_deref().unwrap_or(""),
                };
                let effect_ok = tol.effect.as_deref().is_none_or(|e| e == t.effect);
                key_ok && op_ok && effect_ok
            })
        })
}

async fn reconcile(placement: Arc<Placement>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    let ns = placement.namespace().unwrap_or_default();
    let name = placement.name_any();
    let client = &ctx.client;
    let clusters = Api::<ManagedCluster>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let bound: BTreeSet<String> = Api::<ManagedClusterSetBinding>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter_map(|b| b.spec.cluster_set)
        .collect();
    let wanted_sets: BTreeSet<String> = match &placement.spec.cluster_sets {
        Some(sets) if !sets.is_empty() => sets
            .iter()
            .filter(|s| bound.contains(*s))
            .cloned()
            .collect(),
        _ => bound,
    };
    let sets = Api::<ManagedClusterSet>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let mut candidates: BTreeMap<String, &ManagedCluster> = BTreeMap::new();
    for set in sets.iter().filter(|s| wanted_sets.contains(&s.name_any())) {
        for mc in set_members(set, &clusters) {
            candidates.insert(mc.name_any(), mc);
        }
    }
    let previous: BTreeSet<String> = migration_api::ocm::cluster::decided_clusters(
        Api::<PlacementDecision>::namespaced(client.clone(), &ns)
            .list(&ListParams::default().labels(&migration_api::ocm::cluster::decisions_of(&name)))
            .await?,
    )
    .into_iter()
    .collect();
    let predicates = placement.spec.predicates.clone().unwrap_or_default();
    candidates.retain(|_, mc| {
        (predicates.is_empty()
            || predicates.iter().any(|p| {
                p.required_cluster_selector
                    .as_ref()
                    .is_none_or(|s| cluster_selector_matches(s, mc))
            }))
            && tolerated(&placement, mc, previous.contains(&mc.name_any()))
    });
    // Scores.
    let now = jiff::Timestamp::now();
    let configs = placement
        .spec
        .prioritizer_policy
        .as_ref()
        .and_then(|p| p.configurations.clone())
        .unwrap_or_default();
    let mut scored: Vec<(i64, String)> = Vec::new();
    for cluster in candidates.keys() {
        let mut total = 0i64;
        for cfg in &configs {
            let weight = i64::from(cfg.weight.unwrap_or(1));
            let c = &cfg.score_coordinate;
            let score = match (c.type_.as_str(), &c.add_on, c.built_in.as_deref()) {
                ("AddOn", Some(addon), _) => {
                    let s = Api::<AddOnPlacementScore>::namespaced(client.clone(), cluster)
                        .get_opt(&addon.resource_name)
                        .await?;
                    s.and_then(|s| s.status)
                        .filter(|st| st.valid_until.as_ref().is_none_or(|v| v.0 > now))
                        .and_then(|st| st.score(&addon.score_name))
                        .map(i64::from)
                        .unwrap_or(0)
                }
                (_, _, Some("Steady")) if previous.contains(cluster) => 100,
                _ => 0,
            };
            total += weight * score;
        }
        scored.push((total, cluster.clone()));
    }
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    if let Some(n) = placement.spec.number_of_clusters {
        scored.truncate(usize::try_from(n).unwrap_or(0));
    }
    let chosen: Vec<String> = scored.into_iter().map(|(_, c)| c).collect();
    write_decisions(client, &placement, &chosen, &candidates).await?;
    Ok(Action::await_change())
}

async fn write_decisions(
    client: &Client,
    placement: &Placement,
    chosen: &[String],
    candidates: &BTreeMap<String, &ManagedCluster>,
) -> Result<(), kube::Error> {
    let ns = placement.namespace().unwrap_or_default();
    let name = placement.name_any();
    // Decision groups: each named group takes the chosen clusters its selector matches; the
    // rest form one unnamed group. Groups are split by clustersPerDecisionGroup.
    let strategy = placement
        .spec
        .decision_strategy
        .as_ref()
        .and_then(|d| d.group_strategy.clone())
        .unwrap_or_default();
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    let mut left: Vec<String> = chosen.to_vec();
    for g in strategy.decision_groups.iter().flatten() {
        let members: Vec<String> = left
            .iter()
            .filter(|c| {
                candidates
                    .get(*c)
                    .is_some_and(|mc| cluster_selector_matches(&g.group_cluster_selector, mc))
            })
            .cloned()
            .collect();
        left.retain(|c| !members.contains(c));
        groups.push((g.group_name.clone(), members));
    }
    if !left.is_empty() || groups.is_empty() {
        groups.push((String::new(), left));
    }
    let per_group = match &strategy.clusters_per_decision_group {
        Some(serde_json::Value::Number(n)) => n.as_u64().map(|n| n as usize),
        Some(serde_json::Value::String(s)) => s
            .strip_suffix('%')
            .and_then(|p| p.parse::<f64>().ok())
            .map(|p| ((chosen.len() as f64 * p / 100.0).ceil() as usize).max(1)),
        _ => None,
    };
    let mut split: Vec<(String, Vec<String>)> = Vec::new();
    for (gname, members) in groups {
        match per_group {
            Some(n) if n > 0 && members.len() > n => {
                for chunk in members.chunks(n) {
                    split.push((gname.clone(), chunk.to_vec()));
                }
            }
            _ => split.push((gname, members)),
        }
    }
    let decisions: Api<PlacementDecision> = Api::namespaced(client.clone(), &ns);
    let mut status_groups = Vec::new();
    let mut written = BTreeSet::new();
    for (index, (gname, members)) in split.iter().enumerate() {
        let pd_name = format!("{name}-decision-{}", index + 1);
        written.insert(pd_name.clone());
        decisions
            .patch(&pd_name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(json!({
                "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "PlacementDecision",
                "metadata": {"name": pd_name, "namespace": ns, "labels": {PLACEMENT: name, DECISION_GROUP_INDEX: index.to_string(), DECISION_GROUP_NAME: gname},
                             "ownerReferences": [{"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
                                                  "name": name, "uid": placement.uid().unwrap_or_default(), "controller": true, "blockOwnerDeletion": true}]}
            })))
            .await?;
        let ds: Vec<_> = members
            .iter()
            .map(|c| json!({"clusterName": c, "reason": ""}))
            .collect();
        decisions
            .patch_status(&pd_name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(json!({
                "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "PlacementDecision",
                "metadata": {"name": pd_name, "namespace": ns}, "status": {"decisions": ds}
            })))
            .await?;
        status_groups.push(json!({"decisionGroupIndex": index, "decisionGroupName": gname, "decisions": [pd_name], "clusterCount": members.len()}));
    }
    for stale in decisions
        .list(&ListParams::default().labels(&format!("{PLACEMENT}={name}")))
        .await?
    {
        if !written.contains(&stale.name_any()) {
            decisions
                .delete(&stale.name_any(), &DeleteParams::default())
                .await?;
        }
    }
    let satisfied = match placement.spec.number_of_clusters {
        Some(n) => chosen.len() == usize::try_from(n).unwrap_or(0),
        None => !chosen.is_empty(),
    };
    let mut conditions: Vec<Condition> = placement
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    if satisfied {
        set_condition(
            &mut conditions,
            "PlacementSatisfied",
            "True",
            "AllDecisionsScheduled",
            "All cluster decisions scheduled",
            None,
        );
    } else if chosen.is_empty() {
        set_condition(
            &mut conditions,
            "PlacementSatisfied",
            "False",
            "NoManagedClusterMatched",
            "No valid ManagedClusterSetBindings found in placement namespace or no managed cluster matched",
            None,
        );
    } else {
        set_condition(
            &mut conditions,
            "PlacementSatisfied",
            "False",
            "NotAllDecisionsScheduled",
            "Not all cluster decisions scheduled",
            None,
        );
    }
    Api::<Placement>::namespaced(client.clone(), &ns)
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({"status": {
            "numberOfSelectedClusters": chosen.len(), "decisionGroups": status_groups, "conditions": conditions
        }})))
        .await?;
    Ok(())
}
