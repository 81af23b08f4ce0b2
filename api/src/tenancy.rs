//! Who may move what: OCM's own tenancy model. A Placement in namespace N selects only from
//! the ManagedClusterSets bound to N by a ManagedClusterSetBinding (creating one takes the
//! `managedclustersets/bind` right on the set); a migration in N may likewise only name hubs
//! (ManagedClusters of the global hub) and clusters (ManagedClusters of the source hub) that
//! belong to a set bound to N on that hub.
//!
//! Upstream, read for this: a binding counts once the registration hub marked it `Bound`
//! (ocm `pkg/registration/hub/managedclustersetbinding/controller.go`; sdk-go
//! `pkg/apis/cluster/v1beta2/managedclusterset.go` `GetBoundManagedClusterSetBindings`), and
//! only if its set exists (ocm `pkg/placement/controllers/scheduling/helpers.go`
//! `GetValidManagedClusterSetBindings`, which looks the set up by the binding's name); a set's
//! members are the clusters labelled `cluster.open-cluster-management.io/clusterset=<set>`
//! (`ExclusiveClusterSetLabel`, the default) or matched by its label selector
//! (`LabelSelector`; no selector matches nothing, an empty one everything, as
//! `metav1.LabelSelectorAsSelector` has it), sdk-go `BuildClusterSelector`.

use std::collections::BTreeMap;

use kube::ResourceExt;

use crate::common::{condition_is_true, selector_matches};
use crate::names::labels::CLUSTER_SET;
use crate::ocm::cluster::{ManagedClusterSet, ManagedClusterSetBinding};

/// The condition the registration hub sets on a binding whose set exists.
pub const BINDING_BOUND: &str = "Bound";

/// The sets bound to the bindings' namespace: a binding counts when it is `Bound` and a set
/// of its name exists.
pub fn bound_sets<'a>(
    bindings: &[ManagedClusterSetBinding],
    sets: &'a [ManagedClusterSet],
) -> Vec<&'a ManagedClusterSet> {
    sets.iter()
        .filter(|set| {
            bindings.iter().any(|b| {
                b.name_any() == set.name_any()
                    && b.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_deref())
                        .is_some_and(|c| condition_is_true(c, BINDING_BOUND))
            })
        })
        .collect()
}

/// Whether a cluster with these labels belongs to `set`.
pub fn is_member(set: &ManagedClusterSet, labels: &BTreeMap<String, String>) -> bool {
    let selector = set.spec.cluster_selector.clone().unwrap_or_default();
    match selector.selector_type.as_str() {
        "" | "ExclusiveClusterSetLabel" => labels.get(CLUSTER_SET) == Some(&set.name_any()),
        "LabelSelector" => selector
            .label_selector
            .as_ref()
            .is_some_and(|l| selector_matches(l, labels)),
        // An unknown selector type selects nothing (upstream fails the lookup).
        _ => false,
    }
}

/// Whether a cluster with these labels belongs to one of the bound sets.
pub fn admitted<'a>(
    bound: impl IntoIterator<Item = &'a ManagedClusterSet>,
    labels: &BTreeMap<String, String>,
) -> bool {
    bound.into_iter().any(|set| is_member(set, labels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::Condition;
    use crate::common::LabelSelector;
    use crate::ocm::cluster::{
        ManagedClusterSelector, ManagedClusterSetBindingSpec, ManagedClusterSetBindingStatus,
        ManagedClusterSetSpec,
    };

    fn set(name: &str, selector_type: &str, selector: Option<LabelSelector>) -> ManagedClusterSet {
        ManagedClusterSet::new(
            name,
            ManagedClusterSetSpec {
                cluster_selector: Some(ManagedClusterSelector {
                    selector_type: selector_type.into(),
                    label_selector: selector,
                }),
            },
        )
    }

    fn binding(name: &str, bound: Option<&str>) -> ManagedClusterSetBinding {
        let mut b = ManagedClusterSetBinding::new(
            name,
            ManagedClusterSetBindingSpec {
                cluster_set: Some(name.into()),
            },
        );
        b.status = bound.map(|status| ManagedClusterSetBindingStatus {
            conditions: Some(vec![Condition {
                type_: BINDING_BOUND.into(),
                status: status.into(),
                reason: "ClusterSetBound".into(),
                message: String::new(),
                last_transition_time: crate::common::now(),
                observed_generation: None,
            }]),
        });
        b
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn membership_follows_the_selector_type() {
        let in_a = labels(&[(CLUSTER_SET, "a"), ("env", "prod")]);
        let nowhere = labels(&[("env", "dev")]);
        let prod = LabelSelector {
            match_labels: Some(labels(&[("env", "prod")])),
            ..Default::default()
        };
        let cases = [
            (
                "exclusive, labelled",
                set("a", "ExclusiveClusterSetLabel", None),
                &in_a,
                true,
            ),
            ("exclusive by default", set("a", "", None), &in_a, true),
            ("exclusive, other set", set("b", "", None), &in_a, false),
            (
                "selector matches",
                set("p", "LabelSelector", Some(prod.clone())),
                &in_a,
                true,
            ),
            (
                "selector does not",
                set("p", "LabelSelector", Some(prod)),
                &nowhere,
                false,
            ),
            (
                "empty selector: everything (the global set)",
                set("global", "LabelSelector", Some(LabelSelector::default())),
                &nowhere,
                true,
            ),
            (
                "no selector: nothing",
                set("n", "LabelSelector", None),
                &in_a,
                false,
            ),
            ("unknown type", set("a", "Whatever", None), &in_a, false),
        ];
        for (what, s, l, want) in cases {
            assert_eq!(is_member(&s, l), want, "{what}");
        }
    }

    #[test]
    fn only_bound_bindings_of_existing_sets_count() {
        let sets = vec![set("a", "", None), set("b", "", None), set("c", "", None)];
        let bindings = vec![
            binding("a", Some("True")),
            binding("b", Some("False")),
            binding("c", None),
            binding("gone", Some("True")),
        ];
        let bound: Vec<String> = bound_sets(&bindings, &sets)
            .iter()
            .map(|s| s.name_any())
            .collect();
        assert_eq!(bound, ["a"]);
        let b = bound_sets(&bindings, &sets);
        assert!(admitted(b.iter().copied(), &labels(&[(CLUSTER_SET, "a")])));
        assert!(!admitted(b.iter().copied(), &labels(&[(CLUSTER_SET, "b")])));
        assert!(!admitted(&[], &labels(&[(CLUSTER_SET, "a")])));
    }
}
