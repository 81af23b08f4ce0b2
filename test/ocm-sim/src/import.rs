//! The import controller of a hub (the ACM/MCE behaviour): every accepted cluster gets a
//! `<cluster>-klusterlet` ManifestWork carrying its Klusterlet configuration. A cluster
//! annotated `agent.open-cluster-management.io/klusterlet-config: <name>` gets the bootstrap
//! kubeconfigs that KlusterletConfig lists (`multipleHubsConfig.bootstrapKubeConfigs`, with the
//! current hub first under `IncludeCurrentHub`; or, on hubs with the older CRD,
//! `bootstrapKubeConfigs`, which names the hubs to use and nothing else; secrets read from the
//! hub's `multicluster-engine` namespace) with the MultipleHubs feature gate, so its klusterlet
//! can switch hubs. Removing the annotation restores the default configuration.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Client, ResourceExt};
use migration_api::common::BootstrapKubeConfigs;
use migration_api::names::BOOTSTRAP_HUB_KUBECONFIG;
use migration_api::names::annotations::KLUSTERLET_CONFIG;
use migration_api::ocm::cluster::ManagedCluster;
use migration_api::ocm::config::KlusterletConfig;
use migration_api::ocm::work::ManifestWork;
use serde_json::{Value, json};

use crate::names::AGENT_NAMESPACE;

/// Namespace on the hub holding the bootstrap kubeconfig secrets KlusterletConfigs name.
pub const BOOTSTRAP_SECRETS_NAMESPACE: &str = "multicluster-engine";
const MANAGER: &str = "managedcluster-import-controller";

/// Name of a cluster's klusterlet work.
pub fn klusterlet_work(cluster: &str) -> String {
    format!("{cluster}-klusterlet")
}

struct Ctx {
    client: Client,
    /// The hub's own bootstrap kubeconfig, which the klusterlet work keeps on every cluster
    /// (so a cluster that moved here restarts against this hub, not the one it left).
    bootstrap_kubeconfig: String,
}

/// Runs until aborted.
pub async fn run(client: Client, bootstrap_kubeconfig: String) {
    let clusters: Api<ManagedCluster> = Api::all(client.clone());
    let configs: Api<KlusterletConfig> = Api::all(client.clone());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), BOOTSTRAP_SECRETS_NAMESPACE);
    let controller = Controller::new(clusters, watcher::Config::default());
    let store = controller.store();
    let by_config = store.clone();
    let by_secret = store;
    controller
        .watches(
            configs,
            watcher::Config::default(),
            move |kc: KlusterletConfig| {
                let name = kc.name_any();
                by_config
                    .state()
                    .into_iter()
                    .filter(|mc| mc.annotations().get(KLUSTERLET_CONFIG) == Some(&name))
                    .map(|mc| ObjectRef::from_obj(&*mc))
                    .collect::<Vec<_>>()
            },
        )
        .watches(secrets, watcher::Config::default(), move |_: Secret| {
            by_secret
                .state()
                .into_iter()
                .filter(|mc| mc.annotations().contains_key(KLUSTERLET_CONFIG))
                .map(|mc| ObjectRef::from_obj(&*mc))
                .collect::<Vec<_>>()
        })
        .run(
            reconcile,
            |_, e: &kube::Error, _| {
                tracing::debug!(error = %e, "import reconcile failed");
                Action::requeue(Duration::from_millis(500))
            },
            Arc::new(Ctx {
                client,
                bootstrap_kubeconfig,
            }),
        )
        .for_each(|_| async {})
        .await;
}

async fn reconcile(mc: Arc<ManagedCluster>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    if !mc.spec.hub_accepts_client || mc.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let cluster = mc.name_any();
    let mut manifests: Vec<Value> = Vec::new();
    let mut registration = json!({});
    if let Some(config_name) = mc.annotations().get(KLUSTERLET_CONFIG) {
        // Read as JSON: hubs with the older CRD keep `bootstrapKubeConfigs` under `spec`.
        let configs: Api<DynamicObject> = Api::all_with(
            ctx.client.clone(),
            &ApiResource::erase::<KlusterletConfig>(&()),
        );
        if let Some(kc) = configs.get_opt(config_name).await? {
            let spec = kc.data.get("spec").cloned().unwrap_or_default();
            let (include_current, boot) = match spec.get("multipleHubsConfig") {
                Some(m) => (
                    m.get("genBootstrapKubeConfigStrategy")
                        .and_then(Value::as_str)
                        == Some("IncludeCurrentHub"),
                    m.get("bootstrapKubeConfigs").cloned(),
                ),
                // The older shape lists the hubs to use, the current one only if named.
                None => (false, spec.get("bootstrapKubeConfigs").cloned()),
            };
            if let Some(local) = boot
                .and_then(|b| serde_json::from_value::<BootstrapKubeConfigs>(b).ok())
                .filter(|b| b.type_ == "LocalSecrets")
                .and_then(|b| b.local_secrets_config)
            {
                let mut names: Vec<String> = Vec::new();
                if include_current {
                    names.push(BOOTSTRAP_HUB_KUBECONFIG.to_owned());
                }
                let secrets: Api<Secret> =
                    Api::namespaced(ctx.client.clone(), BOOTSTRAP_SECRETS_NAMESPACE);
                for s in &local.kube_config_secrets {
                    let Some(secret) = secrets.get_opt(&s.name).await? else {
                        tracing::info!(%cluster, secret = %s.name, "bootstrap kubeconfig secret not found on the hub");
                        continue;
                    };
                    manifests.push(json!({
                        "apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": s.name, "namespace": AGENT_NAMESPACE},
                        "type": "Opaque",
                        "data": serde_json::to_value(secret.data.unwrap_or_default()).unwrap_or(json!({}))
                    }));
                    names.push(s.name.clone());
                }
                registration = json!({
                    "featureGates": [{"feature": "MultipleHubs", "mode": "Enable"}],
                    "bootstrapKubeConfigs": {"type": "LocalSecrets", "localSecretsConfig": {
                        "kubeConfigSecrets": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
                        "hubConnectionTimeoutSeconds": local.hub_connection_timeout_seconds.unwrap_or(600)
                    }}
                });
            }
        }
    }
    manifests.insert(
        0,
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": BOOTSTRAP_HUB_KUBECONFIG, "namespace": AGENT_NAMESPACE},
            "type": "Opaque",
            "data": {"kubeconfig": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &ctx.bootstrap_kubeconfig)}
        }),
    );
    manifests.insert(
        0,
        json!({
            "apiVersion": "operator.open-cluster-management.io/v1", "kind": "Klusterlet",
            "metadata": {"name": "klusterlet"},
            "spec": {"clusterName": cluster, "registrationConfiguration": registration}
        }),
    );
    let works: Api<ManifestWork> = Api::namespaced(ctx.client.clone(), &cluster);
    let name = klusterlet_work(&cluster);
    works
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(json!({
                "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                "metadata": {"name": name, "namespace": cluster},
                "spec": {"workload": {"manifests": manifests},
                         "deleteOption": {"propagationPolicy": "Orphan"}}
            })),
        )
        .await?;
    Ok(Action::await_change())
}
