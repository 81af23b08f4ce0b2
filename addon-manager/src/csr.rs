//! Approval of the addon agents' CSRs on the global hub: only a CSR that the hub's own
//! klusterlet made (requester `system:open-cluster-management:<hub>:…`), labelled for this addon
//! and that hub, for the kube-apiserver-client signer, asking for exactly the identity in the
//! ManagedClusterAddOn's `status.registrations`. Anything else is left alone (pending).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use migration_api::names::condition_status::TRUE;
use migration_api::names::{self, KUBE_APISERVER_CLIENT_SIGNER, labels};
use migration_api::ocm::addon::ManagedClusterAddOn;
use migration_api::runtime::{csr_decided, requested_identity};
use serde_json::json;

use crate::addon::AGENT_IDENTITY;

/// Why a CSR is not one to approve, or None when it is.
pub fn refusal(csr: &CertificateSigningRequest, addon: &str, registered: bool) -> Option<String> {
    let labels = csr.labels();
    let Some(hub) = labels.get(labels::CLUSTER_NAME) else {
        return Some("no cluster-name label".into());
    };
    if labels.get(labels::ADDON_NAME).map(String::as_str) != Some(addon) {
        return Some("not for this addon".into());
    }
    if csr.spec.signer_name != KUBE_APISERVER_CLIENT_SIGNER {
        return Some(format!(
            "signer {} is not {KUBE_APISERVER_CLIENT_SIGNER}",
            csr.spec.signer_name
        ));
    }
    if !registered {
        return Some(format!("no ManagedClusterAddOn {addon} in namespace {hub}"));
    }
    let requester = csr.spec.username.clone().unwrap_or_default();
    if !requester.starts_with(&format!("system:open-cluster-management:{hub}:")) {
        return Some(format!(
            "requested by {requester:?}, not by {hub}'s klusterlet"
        ));
    }
    let (user, mut groups) = match requested_identity(&csr.spec.request.0) {
        Ok(id) => id,
        Err(e) => return Some(e),
    };
    let want_user = names::addon_agent_user(hub, addon, AGENT_IDENTITY);
    let mut want_groups = names::addon_agent_groups(hub, addon);
    groups.sort();
    want_groups.sort();
    if user != want_user || groups != want_groups {
        return Some(format!(
            "asks for {user:?} in {groups:?}, not the addon's registered identity"
        ));
    }
    None
}

struct Ctx {
    client: Client,
    addon: String,
    metrics: crate::metrics::Metrics,
}

/// Runs the approver until `stop` resolves.
pub async fn run(
    client: Client,
    addon: String,
    metrics: crate::metrics::Metrics,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let cfg = watcher::Config::default().labels(&format!("{}={addon}", labels::ADDON_NAME));
    migration_api::runtime::controller(csrs, cfg)
        .graceful_shutdown_on(stop)
        .run(
            reconcile,
            |_, e: &Error, _| match e {
                Error::Kube(e) if migration_api::runtime::is_conflict(e) => {
                    tracing::debug!(error = %e, "csr approval raced a change; retrying");
                    Action::requeue(Duration::from_secs(2))
                }
                Error::Kube(e) => {
                    tracing::warn!(error = %e, "csr approval failed; retrying");
                    Action::requeue(Duration::from_secs(2))
                }
                Error::Panicked(_) => Action::requeue(migration_api::runtime::PANIC_RETRY),
            },
            Arc::new(Ctx {
                client,
                addon,
                metrics,
            }),
        )
        .for_each(|_| async {})
        .await;
}

/// Why an approval failed (it is retried).
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Panicked(#[from] migration_api::runtime::Panicked),
}

async fn reconcile(csr: Arc<CertificateSigningRequest>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    let result =
        migration_api::runtime::unwinding(async { Ok(reconcile_one(csr, &ctx).await?) }).await;
    ctx.metrics
        .reconciled("csr", started.elapsed(), result.is_ok());
    result
}

async fn reconcile_one(
    csr: Arc<CertificateSigningRequest>,
    ctx: &Ctx,
) -> Result<Action, kube::Error> {
    if csr_decided(&csr) {
        return Ok(Action::await_change());
    }
    let hub = csr
        .labels()
        .get(labels::CLUSTER_NAME)
        .cloned()
        .unwrap_or_default();
    let registered = !hub.is_empty()
        && Api::<ManagedClusterAddOn>::namespaced(ctx.client.clone(), &hub)
            .get_opt(&ctx.addon)
            .await?
            .is_some_and(|m| m.metadata.deletion_timestamp.is_none());
    if let Some(why) = refusal(&csr, &ctx.addon, registered) {
        tracing::info!(csr = %csr.name_any(), reason = %why, "not approving CSR");
        return Ok(Action::await_change());
    }
    let approval = json!({"status": {"conditions": [{
        "type": "Approved", "status": TRUE, "reason": "AutoApprovedByClusterMigrationAddon",
        "message": format!("the {} agent of {hub} asked for its registered identity", ctx.addon),
        "lastUpdateTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    }]}});
    Api::<CertificateSigningRequest>::all(ctx.client.clone())
        .patch_approval(
            &csr.name_any(),
            &PatchParams::default(),
            &Patch::Merge(approval),
        )
        .await?;
    tracing::info!(csr = %csr.name_any(), hub = %hub, "approved the addon agent's CSR");
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr(
        user: &str,
        groups: &[String],
        requester: &str,
        signer: &str,
    ) -> CertificateSigningRequest {
        let (pem, _key) = kube_sim::pki::make_csr(user, groups).unwrap();
        serde_json::from_value(json!({
            "metadata": {"name": "c1", "labels": {labels::CLUSTER_NAME: "hub1", labels::ADDON_NAME: "cluster-migration"}},
            "spec": {"request": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, pem),
                     "signerName": signer, "username": requester, "usages": ["client auth"]}
        }))
        .unwrap()
    }

    fn good_user() -> String {
        names::addon_agent_user("hub1", "cluster-migration", AGENT_IDENTITY)
    }

    const KLUSTERLET: &str = "system:open-cluster-management:hub1:hub1-agent";

    #[test]
    fn approves_only_the_registered_identity_from_the_hubs_klusterlet() {
        let groups = names::addon_agent_groups("hub1", "cluster-migration");
        let ok = csr(
            &good_user(),
            &groups,
            KLUSTERLET,
            KUBE_APISERVER_CLIENT_SIGNER,
        );
        assert_eq!(
            requested_identity(&ok.spec.request.0).unwrap().0,
            good_user()
        );
        assert_eq!(refusal(&ok, "cluster-migration", true), None);
        assert!(
            refusal(&ok, "cluster-migration", false)
                .unwrap()
                .contains("no ManagedClusterAddOn")
        );
        assert!(refusal(&ok, "other-addon", true).is_some());
        let admin = csr(
            "system:admin",
            &groups,
            KLUSTERLET,
            KUBE_APISERVER_CLIENT_SIGNER,
        );
        assert!(
            refusal(&admin, "cluster-migration", true)
                .unwrap()
                .contains("system:admin")
        );
        let masters = csr(
            &good_user(),
            &["system:masters".to_owned()],
            KLUSTERLET,
            KUBE_APISERVER_CLIENT_SIGNER,
        );
        assert!(refusal(&masters, "cluster-migration", true).is_some());
        let other_hub = csr(
            &good_user(),
            &groups,
            "system:open-cluster-management:hub2:hub2-agent",
            KUBE_APISERVER_CLIENT_SIGNER,
        );
        assert!(
            refusal(&other_hub, "cluster-migration", true)
                .unwrap()
                .contains("klusterlet")
        );
        let signer = csr(
            &good_user(),
            &groups,
            KLUSTERLET,
            "kubernetes.io/kubelet-serving",
        );
        assert!(
            refusal(&signer, "cluster-migration", true)
                .unwrap()
                .contains("signer")
        );
    }

    #[test]
    fn garbage_requests_are_refused_not_panics() {
        let mut c = csr(&good_user(), &[], KLUSTERLET, KUBE_APISERVER_CLIENT_SIGNER);
        c.spec.request.0 = b"not a csr".to_vec();
        assert!(
            refusal(&c, "cluster-migration", true)
                .unwrap()
                .contains("PEM")
        );
    }
}
