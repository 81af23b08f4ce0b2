//! The registration hub's cluster-set controllers, as upstream runs them:
//!
//! - with the `DefaultClusterSet` feature gate (on by default, ocm
//!   `vendor/open-cluster-management.io/api/feature/feature.go`), the sets `default`
//!   (`ExclusiveClusterSetLabel`) and `global` (`LabelSelector` with an empty selector: every
//!   cluster) exist (ocm `pkg/registration/hub/managedclusterset/default_managedclusterset_controller.go`,
//!   `global_managedclusterset_controller.go`);
//! - a ManagedClusterSetBinding is `Bound` (reason `ClusterSetBound`) while the set named by
//!   its `spec.clusterSet` exists, and `Bound` False (`ClusterSetNotFound`) otherwise (ocm
//!   `pkg/registration/hub/managedclustersetbinding/controller.go`).
//!
//! Not simulated: the webhooks (a binding's name must equal its `spec.clusterSet`, and creating
//! one takes `managedclustersets/bind` on the set; clusters get the `default` set label when
//! created without one).

use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use migration_api::common::{Condition, set_condition};
use migration_api::ocm::cluster::{ManagedClusterSet, ManagedClusterSetBinding};
use migration_api::tenancy::BINDING_BOUND;
use serde_json::json;

const MANAGER: &str = "registration-controller";

/// Creates the `default` and `global` sets (absent ones only), then keeps every binding's
/// `Bound` condition true to its set; runs until aborted.
pub async fn run(client: Client) {
    let sets: Api<ManagedClusterSet> = Api::all(client.clone());
    for (name, selector) in [
        (
            "default",
            json!({"selectorType": "ExclusiveClusterSetLabel"}),
        ),
        (
            "global",
            json!({"selectorType": "LabelSelector", "labelSelector": {}}),
        ),
    ] {
        let body = json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSet",
            "metadata": {"name": name}, "spec": {"clusterSelector": selector}
        });
        if let Err(e) = sets
            .patch(name, &PatchParams::apply(MANAGER), &Patch::Apply(&body))
            .await
        {
            tracing::warn!(set = name, error = %e, "creating a default cluster set");
        }
    }
    let bindings: Api<ManagedClusterSetBinding> = Api::all(client.clone());
    // Each watch has its own back-off and keeps its errors (`migration_api::runtime::controller`,
    // `watch_events`), as every informer's reflector does upstream (ocm's cluster-set controllers,
    // on library-go informers): client-go `tools/cache/reflector.go` (vendored in ocm) gives each
    // reflector `NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0)`, so one watch's error
    // never pauses another's.
    let controller = migration_api::runtime::controller(bindings, watcher::Config::default());
    let store = controller.store();
    controller
        .watches_stream(
            migration_api::runtime::watch_events(sets, watcher::Config::default()),
            move |set: ManagedClusterSet| {
                let name = set.name_any();
                store
                    .state()
                    .into_iter()
                    .filter(|b| b.spec.cluster_set.as_deref() == Some(name.as_str()))
                    .map(|b| ObjectRef::from_obj(&*b))
                    .collect::<Vec<_>>()
            },
        )
        .run(
            |binding, ctx| async move {
                let done = reconcile(binding.clone(), ctx.clone()).await;
                ctx.1.settled(&key(&binding), done)
            },
            // A failed one is retried as the factory's work queue retries it.
            |binding, e: &kube::Error, ctx| {
                tracing::debug!(error = %e, "cluster set binding reconcile failed");
                Action::requeue(ctx.1.when(&key(&binding), std::time::Instant::now()))
            },
            Arc::new((client, crate::backoff::Retries::default())),
        )
        .for_each(|_| async {})
        .await;
}

/// A binding's key in the controller's queue.
fn key(binding: &ManagedClusterSetBinding) -> String {
    format!(
        "{}/{}",
        binding.namespace().unwrap_or_default(),
        binding.name_any()
    )
}

async fn reconcile(
    binding: Arc<ManagedClusterSetBinding>,
    ctx: Arc<(Client, crate::backoff::Retries)>,
) -> Result<Action, kube::Error> {
    let client = &ctx.0;
    let ns = binding.namespace().unwrap_or_default();
    let set = binding.spec.cluster_set.clone().unwrap_or_default();
    let exists = !set.is_empty()
        && Api::<ManagedClusterSet>::all(client.clone())
            .get_opt(&set)
            .await?
            .is_some();
    let mut conditions: Vec<Condition> = binding
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let (status, reason) = if exists {
        ("True", "ClusterSetBound")
    } else {
        ("False", "ClusterSetNotFound")
    };
    if set_condition(&mut conditions, BINDING_BOUND, status, reason, "", None) {
        Api::<ManagedClusterSetBinding>::namespaced(client.clone(), &ns)
            .patch_status(
                &binding.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": conditions}})),
            )
            .await?;
    }
    Ok(Action::await_change())
}
