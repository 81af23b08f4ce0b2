//! What the manager reads of the hubs on the global hub: their addons, problems, proxy, and the bootstrap kubeconfig of the target.

use super::*;

/// ManagedClusterAddOn `addon` of `hub`, as the watch last saw it.
pub(super) fn hub_addon(ctx: &Ctx, hub: &str, addon: &str) -> Option<Arc<ManagedClusterAddOn>> {
    ctx.observed.addon(hub, addon)
}

/// Namespace an addon's agent runs in on its hub.
pub(super) fn addon_namespace(mca: Option<&ManagedClusterAddOn>) -> String {
    mca.and_then(|a| {
        a.status
            .as_ref()
            .and_then(|s| s.namespace.clone())
            .or_else(|| a.spec.install_namespace.clone())
    })
    .filter(|s| !s.is_empty())
    .unwrap_or_else(|| DEFAULT_ADDON_INSTALL_NAMESPACE.into())
}

/// A hub as validation reads it from the API server (its word is final: a migration it
/// refuses fails): its ManagedCluster on the global hub, the addon's ManagedClusterAddOn
/// and, on the target, the managed-serviceaccount addon's.
#[derive(Clone, Debug, Default)]
pub(super) struct HubSeen {
    pub(super) cluster: Option<ManagedCluster>,
    pub(super) addon: Option<ManagedClusterAddOn>,
    pub(super) msa: Option<ManagedClusterAddOn>,
}

impl HubSeen {
    /// Reads `hub` (and its managed-serviceaccount addon when `needs_msa`).
    pub(super) async fn read(ctx: &Ctx, hub: &str, needs_msa: bool) -> Result<Self, Error> {
        let clusters: Api<ManagedCluster> = Api::all(ctx.client.clone());
        let cluster = ignore_not_found(clusters.get(hub).await)
            .map_err(ctx_err(format!("reading hub {hub}")))?;
        if cluster.is_none() {
            return Ok(HubSeen::default());
        }
        let addons: Api<ManagedClusterAddOn> = Api::namespaced(ctx.client.clone(), hub);
        let get = async |name: &str| {
            ignore_not_found(addons.get(name).await)
                .map_err(ctx_err(format!("reading ManagedClusterAddOn {hub}/{name}")))
        };
        let addon = get(&ctx.config.addon_name).await?;
        let msa = if needs_msa {
            get(MSA_ADDON).await?
        } else {
            None
        };
        Ok(HubSeen {
            cluster,
            addon,
            msa,
        })
    }
}

/// Why a hub (`seen`) cannot take part as `role`, if it cannot: it must be an Available
/// managed cluster with the `addon` addon Available and, as the target (`needs_msa`), the
/// managed-serviceaccount addon and an API server URL to point the clusters at.
pub(super) fn hub_problem(
    seen: &HubSeen,
    addon: &str,
    hub: &str,
    role: &str,
    needs_msa: bool,
) -> Option<String> {
    let Some(mc) = &seen.cluster else {
        return Some(format!(
            "{role} hub {hub:?} is not a managed cluster of the global hub"
        ));
    };
    if !condition_is_true(mc.conditions(), CLUSTER_AVAILABLE) {
        return Some(format!(
            "{role} hub {hub} is not Available on the global hub"
        ));
    }
    let Some(a) = &seen.addon else {
        return Some(format!(
            "the {addon} addon is not enabled on {role} hub {hub} (create ManagedClusterAddOn {addon} in namespace {hub}, or `clusteradm addon enable --names {addon} --clusters {hub}`)"
        ));
    };
    if !condition_is_true(a.conditions(), AVAILABLE) {
        return Some(format!(
            "the {addon} addon on {role} hub {hub} is not Available"
        ));
    }
    if !needs_msa {
        return None;
    }
    if seen.msa.is_none() {
        return Some(format!(
            "{role} hub {hub} has no {MSA_ADDON} addon: the migration's bootstrap identity is a ManagedServiceAccount"
        ));
    }
    let has_url = mc
        .spec
        .managed_cluster_client_configs
        .as_ref()
        .is_some_and(|c| c.iter().any(|c| !c.url.is_empty()));
    (!has_url).then(|| {
        format!(
            "{role} hub {hub} reports no managedClusterClientConfigs: there is no API server URL to point the clusters at"
        )
    })
}

/// Who may move what (OCM's tenancy model, [`migration_api::tenancy`]): both hubs must belong
/// to a ManagedClusterSet `bound` to the migration's namespace `ns` on the global hub, as they
/// must for a Placement there to select them. (The source agent checks the clusters the same
/// way on its hub.)
pub(super) fn hubs_forbidden(
    ns: &str,
    bound: &[cluster::ManagedClusterSet],
    hubs: [(&str, &HubSeen); 2],
) -> Option<String> {
    let outside: Vec<&str> = hubs
        .into_iter()
        .filter(|(_, seen)| {
            let labels = seen.cluster.as_ref().map(|mc| mc.labels().clone());
            !migration_api::tenancy::admitted(bound, &labels.unwrap_or_default())
        })
        .map(|(hub, _)| hub)
        .collect();
    (!outside.is_empty()).then(|| {
        format!(
            "hub {} is in no ManagedClusterSet bound to namespace {ns}: a migration in {ns} may name only hubs a Placement in {ns} could select; bind a set that holds it (a ManagedClusterSetBinding in {ns}, e.g. `clusteradm clusterset bind global --namespace {ns}` on the global hub)",
            outside.join(" and hub ")
        )
    })
}

/// Why a hub cannot take part when its work agent was refused the migration's objects: it
/// runs as `admin` plus the ClusterRoles labelled aggregate-to-work, and the addon's install
/// brings the one for our kinds. Waiting would not help, so validation fails at once.
pub fn work_agent_refused(addon: &str, hub: &str, apply_error: Option<&str>) -> Option<String> {
    let e = apply_error?;
    e.to_ascii_lowercase().contains("forbidden").then(|| {
        format!(
            "the work agent on hub {hub} may not apply the migration's objects ({e}); it needs the addon's ClusterRole open-cluster-management:{addon}:work (labelled open-cluster-management.io/aggregate-to-work), which the {addon} addon installs: re-enable or upgrade the addon on {hub}"
        )
    })
}

/// The target hub's proxy settings: the proxyConfig of the AddOnDeploymentConfig its
/// cluster-migration addon uses.
pub(super) fn target_proxy(ctx: &Ctx, hub: &str) -> Option<ProxyConfig> {
    let mca = hub_addon(ctx, hub, &ctx.config.addon_name)?;
    let reference = mca
        .status
        .as_ref()
        .and_then(|s| s.config_references.as_ref())
        .and_then(|r| r.iter().find(|c| c.resource == "addondeploymentconfigs"))?;
    let (name, ns) = match &reference.desired_config {
        Some(d) => (d.name.clone(), d.namespace.clone()),
        None => (reference.name.clone(), reference.namespace.clone()),
    };
    ctx.observed
        .config(&ns.unwrap_or_default(), &name)
        .and_then(|c| c.spec.proxy_config.clone())
}

/// Whether `msa` is one of migration `m`'s: marked with its key (the pooled names), or named
/// after its key by an older manager. (Another incarnation of a migration of the same name
/// has another key.)
fn is_own(m: &Migration, msa: &ManagedServiceAccount) -> bool {
    let name = msa.name_any();
    let older = format!("{}-", names::migration_service_account(&m.key));
    msa.labels().get(labels::MIGRATION_KEY) == Some(&m.key)
        || name.starts_with(&older)
        || name == names::migration_service_account(&m.key)
}

/// The migration's ManagedServiceAccounts on the global hub (in the target hub's namespace),
/// by name, as the watch last saw them.
pub(super) fn service_accounts(
    ctx: &Ctx,
    m: &Migration,
) -> std::collections::BTreeMap<String, Arc<ManagedServiceAccount>> {
    ctx.observed
        .service_accounts(&m.to, &m.namespace, &m.name)
        .into_iter()
        .filter(|msa| is_own(m, msa))
        .map(|msa| (msa.name_any(), msa))
        .collect()
}

/// The migration's ManagedServiceAccounts as the API server has them now: one list, however
/// many bootstrap identities it has.
pub(super) async fn service_accounts_now(
    ctx: &Ctx,
    m: &Migration,
) -> Result<std::collections::BTreeMap<String, ManagedServiceAccount>, Error> {
    let msas: Api<ManagedServiceAccount> = Api::namespaced(ctx.client.clone(), &m.to);
    let selector = format!(
        "{}={},{}={}",
        labels::MIGRATION,
        m.name,
        labels::MIGRATION_NAMESPACE,
        m.namespace
    );
    Ok(msas
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(ctx_err("listing the ManagedServiceAccounts"))?
        .items
        .into_iter()
        .filter(|msa| is_own(m, msa))
        .map(|msa| (msa.name_any(), msa))
        .collect())
}

/// The target's bootstrap kubeconfigs of the migration's first `identities` bootstrap
/// identities, in order, once each ManagedServiceAccount has its token (`None` until then).
/// A token's Secret is read only when its ManagedServiceAccount reports a new one.
pub(super) async fn bootstrap(
    ctx: &Ctx,
    m: &Migration,
    identities: usize,
) -> Result<Option<Vec<String>>, Error> {
    if identities == 0 || m.identity_names.len() < identities {
        return Ok(None);
    }
    let msas = service_accounts(ctx, m);
    let mut tokens = Vec::with_capacity(identities);
    for name in m.identity_names.iter().take(identities) {
        let Some(msa) = msas.get(name) else {
            return Ok(None);
        };
        let Some(token) = ctx.observed.token(&ctx.client, msa).await? else {
            return Ok(None);
        };
        tokens.push(token);
    }
    let Some(hub) = ctx.observed.hub(&m.to) else {
        return Err(RenderError::Config(format!("target hub {} is gone", m.to)).into());
    };
    let Some(client_config) = hub
        .spec
        .managed_cluster_client_configs
        .iter()
        .flatten()
        .find(|c| !c.url.is_empty())
    else {
        return Err(RenderError::Config(format!(
            "target hub {} reports no managedClusterClientConfigs",
            m.to
        ))
        .into());
    };
    let proxy = target_proxy(ctx, &m.to);
    let mut kubeconfigs = Vec::with_capacity(identities);
    for t in tokens {
        let ca = client_config.ca_bundle.clone().or(t.ca.clone());
        kubeconfigs.push(mr::bootstrap_kubeconfig(
            &client_config.url,
            ca.as_deref(),
            &t.token,
            proxy.as_ref(),
        )?);
    }
    Ok(Some(kubeconfigs))
}
