//! One hub's addon: its deploy work observed, the version decision (`addon_version`) taken, its progress annotations and conditions written.

use super::*;

/// The agent's Deployment as the work agent reports it: (image, available and current).
pub(super) fn deployment_feedback(work: &ManifestWork) -> Option<(String, bool)> {
    let values = work.feedback("Deployment");
    let image = feedback_value(values, "image")?.string.clone()?;
    let int = |n: &str| feedback_value(values, n).and_then(|v| v.integer);
    let current = int("generation").is_some() && int("generation") == int("observedGeneration");
    Some((image, current && int("availableReplicas").unwrap_or(0) >= 1))
}

/// Applies what one hub should run and reports it; returns when to look again.
pub(super) async fn reconcile_hub(
    ctx: &Ctx,
    mca: &ManagedClusterAddOn,
    d: &Desired,
    may_start: bool,
    deadline: Duration,
) -> Result<Option<Duration>, Error> {
    let c = &ctx.client;
    let hub = mca.namespace().unwrap_or_default();
    let api: Api<ManagedClusterAddOn> = Api::namespaced(c.clone(), &hub);
    if !mca
        .finalizers()
        .iter()
        .any(|f| f == finalizers::ADDON_PRE_DELETE)
    {
        let mut f = mca.finalizers().to_vec();
        f.push(finalizers::ADDON_PRE_DELETE.to_owned());
        set_finalizers(c, mca, f).await?;
        // The update triggers the next reconcile.
        return Ok(None);
    }
    let mut conds = own_conditions(mca);
    let recorded = recorded(mca);

    if Api::<ManagedCluster>::all(c.clone())
        .get_opt(&hub)
        .await
        .ctx(|| format!("reading ManagedCluster {hub}"))?
        .is_none()
    {
        set_condition(
            &mut conds,
            MANIFEST_APPLIED,
            FALSE,
            "ClusterNotFound",
            &format!(
                "there is no ManagedCluster {hub} on this hub; the addon cannot be installed in namespace {hub}"
            ),
            None,
        );
        write_status(ctx, mca, conds, d, None).await?;
        return Ok(None);
    }

    // What to render: the desired version, unless it is refused, failed, or must wait its turn.
    let (status, reason, message) = configured(d);
    set_condition(&mut conds, CONFIGURED, status, &reason, &message, None);
    let target =
        addon_version::target_version(&d.version, d.problem.is_some(), &recorded, may_start);
    let Some(target) = target else {
        // Nothing deployable yet (a refused config on a hub that never ran the agent).
        set_condition(
            &mut conds,
            PROGRESSING,
            FALSE,
            FAILED,
            "nothing deployed: the config cannot be used",
            None,
        );
        set_condition(
            &mut conds,
            DEGRADED,
            TRUE,
            "ConfigurationInvalid",
            "see the Configured condition",
            None,
        );
        write_status(ctx, mca, conds, d, None).await?;
        return Ok(None);
    };

    let deploy_work = deploy(ctx, mca, d, &target, &mut conds).await?;

    // Version progress.
    let lease_ok = condition_is_true(mca.conditions(), AVAILABLE);
    let running = deploy_work.as_ref().and_then(deployment_feedback);
    let progress = addon_version::rollout(
        &recorded,
        &addon_version::Observed {
            desired: &d.version,
            target: &target,
            config_refused: d.problem.is_some(),
            may_start,
            lease_ok,
            running: running.as_ref().map(|(image, ok)| (image.as_str(), *ok)),
            deadline,
            now: jiff::Timestamp::now(),
        },
    );
    if progress.notes.get(ann::AGENT_FAILED_VERSION) == Some(&Some(target.clone())) {
        tracing::warn!(hub = %hub, version = %target, rollback = ?recorded.last_good, "agent not available in time; rolling back");
    }
    for (kind, c) in [
        (PROGRESSING, Some(&progress.progressing)),
        (DEGRADED, progress.degraded.as_ref()),
    ] {
        if let Some(c) = c {
            set_condition(&mut conds, kind, c.status, c.reason, &c.message, None);
        }
    }
    let (notes, up, requeue) = (progress.notes, progress.up, progress.requeue);
    record_versions(&api, mca, &notes).await?;
    write_status(ctx, mca, conds, d, up.then_some(d.hash.as_str())).await?;
    Ok(requeue)
}

/// The Configured condition (status, reason, message) of a hub's addon: the config it deploys
/// from, or why that config is refused.
pub(super) fn configured(d: &Desired) -> (&'static str, String, String) {
    if let Some((reason, message)) = &d.problem {
        return (FALSE, (*reason).to_owned(), message.clone());
    }
    let source = d
        .config
        .as_ref()
        .map(|r| format!("AddOnDeploymentConfig {}/{}", r.namespace, r.name))
        .unwrap_or_else(|| "the manager's defaults".into());
    (
        TRUE,
        "ConfigurationsConfigured".into(),
        format!("agent version {} from {source}", d.version),
    )
}

/// Writes the version annotations the decision changed (`None` removes one).
async fn record_versions(
    api: &Api<ManagedClusterAddOn>,
    mca: &ManagedClusterAddOn,
    notes: &BTreeMap<&'static str, Option<String>>,
) -> Result<(), Error> {
    let changed = notes
        .iter()
        .any(|(k, v)| annotation(mca, k).map(str::to_owned) != *v);
    if !changed {
        return Ok(());
    }
    let patch: serde_json::Map<String, Value> = notes
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    let (hub, addon) = (mca.namespace().unwrap_or_default(), mca.name_any());
    api.patch(
        &addon,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": patch}})),
    )
    .await
    .ctx(|| format!("recording versions on {hub}/{addon}"))?;
    Ok(())
}

/// What a ManagedClusterAddOn records of the agent's versions.
pub(super) fn recorded(mca: &ManagedClusterAddOn) -> addon_version::Recorded {
    let get = |key: &str| annotation(mca, key).map(str::to_owned);
    addon_version::Recorded {
        rendered: get(ann::AGENT_VERSION),
        last_good: get(ann::AGENT_LAST_GOOD_VERSION),
        failed: get(ann::AGENT_FAILED_VERSION),
        previous: get(ann::AGENT_PREVIOUS_VERSION),
        rollout_started: get(ann::AGENT_ROLLOUT_STARTED),
        rollout_completed: get(ann::AGENT_ROLLOUT_COMPLETED),
    }
}
