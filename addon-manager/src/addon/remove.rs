//! Removing the addon from a hub: the pre-delete hook job, then everything the addon put there.

use super::*;

/// The cleanup Job's outcome as fed back: (succeeded, failed).
pub(super) fn job_feedback(work: &ManifestWork) -> (i64, i64) {
    let values = work.feedback("Job");
    let get = |n: &str| {
        feedback_value(values, n)
            .and_then(|v| v.integer)
            .unwrap_or(0)
    };
    (get("succeeded"), get("failed"))
}

/// Removal of a hub's addon: run the pre-delete hook (unless the agent never ran or the user
/// skips it), then delete the works and hub RBAC and release the ManagedClusterAddOn.
pub(super) async fn remove(
    ctx: &Ctx,
    mca: &ManagedClusterAddOn,
    d: &Desired,
) -> Result<Option<Duration>, Error> {
    let c = &ctx.client;
    let addon = mca.name_any();
    let hub = mca.namespace().unwrap_or_default();
    if !mca
        .finalizers()
        .iter()
        .any(|f| f == finalizers::ADDON_PRE_DELETE)
    {
        return Ok(None);
    }
    let works: Api<ManifestWork> = Api::namespaced(c.clone(), &hub);
    let pre_delete = names::addon_pre_delete_work(&addon);
    let skip = annotation(mca, ann::SKIP_PRE_DELETE) == Some("true");
    let installed = annotation(mca, ann::AGENT_LAST_GOOD_VERSION).is_some();
    let mut conds = own_conditions(mca);
    let hub_exists = Api::<ManagedCluster>::all(c.clone())
        .get_opt(&hub)
        .await
        .ctx(|| format!("reading ManagedCluster {hub}"))?
        .is_some();
    // Without the hub (detached) the hook cannot run; there is nothing left there to clean.
    // Once the deploy works are being removed the hook has already run (they are removed only
    // after it succeeded), so a retry or a restarted manager does not run it again.
    let listed = works
        .list(&ListParams::default().labels(&format!("{}={addon}", labels::ADDON_NAME)))
        .await
        .ctx(|| format!("listing works in {hub}"))?
        .items;
    let deployed = listed.iter().any(|w| {
        render::is_deploy_work(&addon, &w.name_any()) && w.metadata.deletion_timestamp.is_none()
    });
    if installed && !skip && hub_exists && deployed {
        let version = annotation(mca, ann::AGENT_VERSION)
            .unwrap_or(&ctx.cfg.defaults.version)
            .to_owned();
        // The hook runs where the agent is installed and as it was configured (namespace,
        // node placement, registries); a config that can no longer be used falls back to the
        // defaults.
        let spec = d.spec.as_ref().filter(|_| d.problem.is_none());
        let values = AgentValues::new(&ctx.cfg.defaults, &hub, spec, &version)?;
        let work = render::pre_delete_work(
            &addon,
            &hub,
            render::pre_delete_manifests(&values)?,
            &owner_of(mca),
        );
        apply_dynamic(c, &work).await?;
        let current = works
            .get_opt(&pre_delete)
            .await
            .ctx(|| format!("reading work {hub}/{pre_delete}"))?;
        let (succeeded, failed) = current.as_ref().map(job_feedback).unwrap_or((0, 0));
        if let Some((type_, reason, message)) = hook_pending(succeeded, failed, &hub) {
            set_condition(&mut conds, type_, TRUE, reason, &message, None);
            write_status(ctx, mca, conds, d, None).await?;
            return Ok(None);
        }
    }
    // Hook done (or skipped): remove everything of ours. `listed` has it all: a pre-delete
    // work whose Job succeeded existed before this reconcile.
    remove_all(c, mca, listed).await?;
    tracing::info!(hub = %hub, "addon removed");
    Ok(None)
}

/// While the pre-delete hook has not succeeded: the condition to report (type, reason,
/// message; status True): Degraded once its Job failed past the back-off limit, else
/// Progressing.
pub(super) fn hook_pending(
    succeeded: i64,
    failed: i64,
    hub: &str,
) -> Option<(&'static str, &'static str, String)> {
    if succeeded >= 1 {
        return None;
    }
    Some(if failed > render::CLEANUP_BACKOFF_LIMIT {
        (
            DEGRADED,
            "PreDeleteHookFailed",
            format!(
                "the cleanup Job {} failed {failed} times on {hub}; fix it or annotate the ManagedClusterAddOn with {}=true to delete without cleanup",
                render::CLEANUP_JOB,
                ann::SKIP_PRE_DELETE
            ),
        )
    } else {
        (
            PROGRESSING,
            "PreDeleteHookRunning",
            format!(
                "running the pre-delete cleanup Job {} on {hub}",
                render::CLEANUP_JOB
            ),
        )
    })
}

/// Deletes the addon's works (`listed`) and hub RBAC, and releases its ManagedClusterAddOn.
async fn remove_all(
    c: &Client,
    mca: &ManagedClusterAddOn,
    listed: Vec<ManifestWork>,
) -> Result<(), Error> {
    let addon = mca.name_any();
    let hub = mca.namespace().unwrap_or_default();
    let works: Api<ManifestWork> = Api::namespaced(c.clone(), &hub);
    for w in listed {
        let name = w.name_any();
        if w.metadata.deletion_timestamp.is_none() {
            works
                .delete(&name, &DeleteParams::default())
                .await
                .ctx(|| format!("deleting work {hub}/{name}"))?;
        }
    }
    let role = render::hub_role_name(&addon);
    let dp = DeleteParams::default();
    ignore_not_found(
        Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(c.clone(), &hub)
            .delete(&role, &dp)
            .await,
    )
    .ctx(|| format!("deleting RoleBinding {hub}/{role}"))?;
    ignore_not_found(
        Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(c.clone(), &hub)
            .delete(&role, &dp)
            .await,
    )
    .ctx(|| format!("deleting Role {hub}/{role}"))?;
    let remaining: Vec<String> = mca
        .finalizers()
        .iter()
        .filter(|f| *f != finalizers::ADDON_PRE_DELETE)
        .cloned()
        .collect();
    set_finalizers(c, mca, remaining).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pre_delete_hook_reports_running_then_failed_past_its_back_off() {
        assert_eq!(hook_pending(1, 0, "hub1"), None);
        assert_eq!(hook_pending(1, 9, "hub1"), None);
        let running = hook_pending(0, render::CLEANUP_BACKOFF_LIMIT, "hub1");
        assert_eq!(
            running.map(|(t, r, _)| (t, r)),
            Some((PROGRESSING, "PreDeleteHookRunning"))
        );
        let failed = hook_pending(0, render::CLEANUP_BACKOFF_LIMIT + 1, "hub1").unwrap();
        assert_eq!((failed.0, failed.1), (DEGRADED, "PreDeleteHookFailed"));
        assert!(failed.2.contains(ann::SKIP_PRE_DELETE), "{}", failed.2);
    }
}
