//! Deploying what a hub's agent version needs: its hub RBAC, its deploy work and its registration.

use super::*;

/// Renders and applies what `target` needs on the hub (its deploy works, where the config can
/// be used: a refused one changes nothing there) and the agent's RBAC on the global hub, and
/// reports both (`ManifestApplied`, `RegistrationApplied`); returns the work holding the
/// Deployment (the last one).
pub(super) async fn deploy(
    ctx: &Ctx,
    mca: &ManagedClusterAddOn,
    d: &Desired,
    target: &str,
    conds: &mut Vec<Condition>,
) -> Result<Option<ManifestWork>, Error> {
    let c = &ctx.client;
    let addon = mca.name_any();
    let hub = mca.namespace().unwrap_or_default();
    // Render and apply the deploy works and the hub RBAC; a config that cannot be used
    // changes nothing on the hub.
    let works = if d.problem.is_none() {
        let values = AgentValues::new(&ctx.cfg.defaults, &hub, d.spec.as_ref(), target)?;
        let mut hashes = BTreeMap::new();
        if let Some(r) = &d.config {
            hashes.insert(
                format!("{ADC_RESOURCE}.{ADC_GROUP}/{}/{}", r.namespace, r.name),
                d.hash.clone(),
            );
        }
        render::deploy_works(
            &addon,
            &hub,
            render::agent_manifests(&values)?,
            &hashes,
            &owner_of(mca),
            ctx.cfg.work_size_limit,
        )
    } else {
        vec![]
    };
    let works_api: Api<ManifestWork> = Api::namespaced(c.clone(), &hub);
    let mut apply_error = None;
    for w in &works {
        if let Err(e) = apply_dynamic(c, w).await {
            apply_error = Some(e.to_string());
        }
    }
    // Works beyond the new count (the install shrank) go.
    let existing = works_api
        .list(&ListParams::default().labels(&format!("{}={addon}", labels::ADDON_NAME)))
        .await
        .ctx(|| format!("listing works in {hub}"))?;
    let wanted: Vec<String> = works
        .iter()
        .filter_map(|w| w["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    for w in &existing.items {
        let name = w.name_any();
        if !works.is_empty() && render::is_deploy_work(&addon, &name) && !wanted.contains(&name) {
            let _ = works_api.delete(&name, &DeleteParams::default()).await;
        }
    }
    apply_hub_rbac(ctx, mca, &hub, conds).await?;
    // The work holding the Deployment (the last one).
    let deploy_work = existing
        .items
        .into_iter()
        .filter(|w| render::is_deploy_work(&addon, &w.name_any()))
        .max_by_key(|w| w.name_any());
    let (status, reason, message) = manifest_applied(apply_error, deploy_work.as_ref());
    set_condition(conds, MANIFEST_APPLIED, status, reason, &message, None);
    Ok(deploy_work)
}

/// Applies the agent's RBAC on the global hub (owned by its ManagedClusterAddOn) and reports it
/// (`RegistrationApplied`).
async fn apply_hub_rbac(
    ctx: &Ctx,
    mca: &ManagedClusterAddOn,
    hub: &str,
    conds: &mut Vec<Condition>,
) -> Result<(), Error> {
    let addon = mca.name_any();
    let mut rbac_error = None;
    for obj in render::hub_rbac(&addon, hub)? {
        let mut obj = obj;
        obj["metadata"]["ownerReferences"] = json!([owner_of(mca)]);
        if let Err(e) = apply_dynamic(&ctx.client, &obj).await {
            rbac_error = Some(e.to_string());
        }
    }
    match &rbac_error {
        None => set_condition(
            conds,
            REGISTRATION_APPLIED,
            TRUE,
            "SetPermissionApplied",
            &format!(
                "the agent may read its ManagedClusterAddOn and write its status and score in namespace {hub}"
            ),
            None,
        ),
        Some(e) => set_condition(
            conds,
            REGISTRATION_APPLIED,
            FALSE,
            "SetPermissionFailed",
            e,
            None,
        ),
    };
    Ok(())
}

/// The `ManifestApplied` condition (status, reason, message): our own apply failed, or the
/// work agent reports the deploy work not Applied, or all is applied.
fn manifest_applied(
    apply_error: Option<String>,
    deploy_work: Option<&ManifestWork>,
) -> (&'static str, &'static str, String) {
    let not_applied = deploy_work
        .and_then(ManifestWork::applied_condition)
        .filter(|c| c.status == FALSE)
        .map(|c| c.message.clone());
    match apply_error.or(not_applied) {
        Some(e) => (FALSE, MANIFEST_WORK_APPLY_FAILED, e),
        None => (
            TRUE,
            ADDON_MANIFEST_APPLIED,
            "manifests of addon are applied successfully".into(),
        ),
    }
}
