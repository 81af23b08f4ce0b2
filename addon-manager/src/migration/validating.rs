//! Validating: hubs, tenancy, the clusters on both hubs.

use super::*;

pub(super) async fn validating(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
) -> Result<Action, Error> {
    if let Err(e) = mcm.spec.validate() {
        step.fail_validation(reasons::INVALID_SPEC, &e.to_string());
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    if remaining(step, stage_timeout(mcm)).is_none() {
        step.fail_validation(reasons::TIMEOUT, &format!(
            "the hubs' agents did not report validation within {}; are the {} addons Available on {} and {}?",
            mcm.spec.stage_timeout.as_deref().unwrap_or("5m"), ctx.config.addon_name, m.from, m.to));
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    for (hub, role, msa) in [(&m.from, "source", false), (&m.to, "target", true)] {
        if let Some(problem) = hub_problem(ctx, hub, role, msa).await? {
            step.fail_validation(reasons::HUB_INVALID, &problem);
            return Ok(Action::requeue(Duration::from_millis(10)));
        }
    }
    if let Some(problem) = hubs_forbidden(ctx, mcm).await? {
        step.fail_validation(reasons::FORBIDDEN, &problem);
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    let hubs: BTreeSet<String> = Api::<ManagedCluster>::all(ctx.client.clone())
        .list_metadata(&ListParams::default())
        .await
        .map_err(ctx_err("listing the global hub's clusters"))?
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    let named = mcm.spec.included_managed_clusters.clone();
    if let Some(names) = &named
        && let Some(problem) = cluster_problem(ctx, mcm, names, &hubs).await?
    {
        step.fail_validation(problem.0, &problem.1);
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    // The source resolves and checks its clusters.
    let source_ns = addon_namespace(
        hub_addon(ctx, &m.from, &ctx.config.addon_name)
            .await?
            .as_ref(),
    );
    let target_ns = addon_namespace(
        hub_addon(ctx, &m.to, &ctx.config.addon_name)
            .await?
            .as_ref(),
    );
    let mut source_task = base_task(
        mcm,
        MigrationRole::Source,
        TaskStage::Validating,
        named.clone().unwrap_or_default(),
    );
    source_task.cluster_selector = mcm.spec.included_managed_clusters_selector.clone();
    let source_rev = deliver(
        ctx,
        m,
        MigrationRole::Source,
        mr::source_manifests(m, &source_ns, source_task, None)?,
        &source_ns,
    )
    .await?;
    let (source, source_err) = report(ctx, m, MigrationRole::Source, &source_rev).await?;
    if let Some(problem) =
        work_agent_refused(&ctx.config.addon_name, &m.from, source_err.as_deref())
    {
        step.fail_validation(reasons::HUB_INVALID, &problem);
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    let waiting = |what: &str, err: Option<String>| {
        let mut msg = format!("waiting for {what}");
        if let Some(e) = err {
            msg.push_str(&format!(" (the work reports: {e})"));
        }
        msg
    };
    let Some(source) = source.filter(|f| f.succeeded() || f.failed()) else {
        step.condition(
            RESOURCE_VALIDATED,
            "False",
            reasons::WAITING,
            &waiting(
                &format!("source hub {}'s agent to check the clusters", m.from),
                source_err,
            ),
        );
        return Ok(until(step, stage_timeout(mcm)));
    };
    // What the clusters carry comes back whole, as one string (no raw JSON feedback needed).
    let carry: Vec<CarriedCluster> = match source.carry.clone() {
        Some(Ok(c)) => c,
        Some(Err(e)) => {
            step.fail_validation(reasons::HUB_INVALID, &format!(
                "source hub {}'s agent reported what the clusters carry in a form this manager cannot read ({e}); run the same addon version on both", m.from));
            return Ok(Action::requeue(Duration::from_millis(10)));
        }
        None => {
            step.fail_validation(reasons::HUB_INVALID, &format!(
                "source hub {}'s agent did not report what the clusters carry (an agent older than this manager?); upgrade the addon on that hub", m.from));
            return Ok(Action::requeue(Duration::from_millis(10)));
        }
    };
    let resolved: Vec<String> = match &named {
        Some(n) => n.clone(),
        None => {
            if carry.is_empty() {
                step.fail_validation(
                    reasons::CLUSTER_NOT_FOUND,
                    &format!(
                        "includedManagedClustersSelector matches no cluster on source hub {}",
                        m.from
                    ),
                );
                return Ok(Action::requeue(Duration::from_millis(10)));
            }
            carry.iter().map(|c| c.name.clone()).collect()
        }
    };
    if carry.len() != resolved.len() || carry.iter().zip(&resolved).any(|(c, n)| c.name != *n) {
        step.fail_validation(reasons::HUB_INVALID, &format!(
            "source hub {}'s agent reported {} carry-over records for {} clusters; run the same addon version on both", m.from, carry.len(), resolved.len()));
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    let source_states = source.states(resolved.len());
    if source.failed() {
        let (reason, message) = failure_summary(
            &resolved,
            &source_states,
            &format!("on source hub {}", m.from),
        );
        step.status.resolved_clusters = Some(resolved);
        step.set_states(&source_states);
        step.fail_validation(reason, &message);
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    if named.is_none()
        && let Some(problem) = cluster_problem(ctx, mcm, &resolved, &hubs).await?
    {
        step.fail_validation(problem.0, &problem.1);
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    let Some(shape) = source.shape.as_deref().and_then(Shape::from_report) else {
        step.fail_validation(reasons::HUB_INVALID, &format!(
            "source hub {}'s agent did not say whether the hub serves a KlusterletConfig API (an agent older than this manager?); upgrade the addon on that hub", m.from));
        return Ok(Action::requeue(Duration::from_millis(10)));
    };
    // The target checks that none of them exists there.
    let target_task = base_task(
        mcm,
        MigrationRole::Target,
        TaskStage::Validating,
        resolved.clone(),
    );
    let target_rev = deliver(
        ctx,
        m,
        MigrationRole::Target,
        mr::target_manifests(m, &target_ns, target_task, None)?,
        &target_ns,
    )
    .await?;
    let (target, target_err) = report(ctx, m, MigrationRole::Target, &target_rev).await?;
    if let Some(problem) = work_agent_refused(&ctx.config.addon_name, &m.to, target_err.as_deref())
    {
        step.fail_validation(reasons::HUB_INVALID, &problem);
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    let Some(target) = target.filter(|f| f.succeeded() || f.failed()) else {
        step.condition(
            RESOURCE_VALIDATED,
            "False",
            reasons::WAITING,
            &waiting(
                &format!("target hub {}'s agent to check the clusters", m.to),
                target_err,
            ),
        );
        return Ok(until(step, stage_timeout(mcm)));
    };
    let target_states = target.states(resolved.len());
    step.status.resolved_clusters = Some(resolved.clone());
    if target.failed() {
        let (reason, message) = match failure_summary(
            &resolved,
            &target_states,
            &format!("on target hub {}", m.to),
        ) {
            // No cluster failed: the hub itself cannot take them, and its agent says why.
            (reasons::ERROR, _) if target.message.as_deref().is_some_and(|m| !m.is_empty()) => (
                reasons::HUB_INVALID,
                format!(
                    "target hub {}: {}",
                    m.to,
                    target.message.clone().unwrap_or_default()
                ),
            ),
            other => other,
        };
        step.set_states(&target_states);
        step.fail_validation(reason, &message);
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    step.set_states(&vec![ClusterState::Valid; resolved.len()]);
    step.status.bootstrap_delivery = Some(shape.delivery().into());
    if mcm.spec.dry_run == Some(true) {
        step.status.plan = Some(
            plan(
                ctx, mcm, m, &resolved, &carry, shape, &source_ns, &target_ns,
            )
            .await?,
        );
        step.condition(
            RESOURCE_VALIDATED,
            "True",
            reasons::DONE,
            &format!(
                "{} clusters can move from {} to {}",
                resolved.len(),
                m.from,
                m.to
            ),
        );
        step.enter(
            MigrationPhase::Completed,
            "dry run: the plan is in status.plan; nothing was changed",
        );
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    // What the clusters carry is recorded before anything is pre-created from it.
    step.status.carry_over = Some(carry);
    step.condition(
        RESOURCE_VALIDATED,
        "True",
        reasons::DONE,
        &format!(
            "{} clusters can move from {} to {} ({})",
            resolved.len(),
            m.from,
            m.to,
            shape.delivery()
        ),
    );
    step.enter(
        MigrationPhase::Initializing,
        "validated; preparing the bootstrap identity on the target",
    );
    Ok(Action::requeue(Duration::from_millis(10)))
}

/// Problems the global hub alone can see: a cluster that is a hub, or one in another active
/// migration.
pub(super) async fn cluster_problem(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    clusters: &[String],
    hubs: &BTreeSet<String>,
) -> Result<Option<(&'static str, String)>, Error> {
    if let Some(c) = clusters.iter().find(|c| hubs.contains(*c)) {
        return Ok(Some((
            "ClusterIsHub",
            format!(
                "{c} is itself a hub (a managed cluster of the global hub) and cannot be migrated"
            ),
        )));
    }
    let all = Api::<ManagedClusterMigration>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(ctx_err("listing migrations"))?;
    let mine: BTreeSet<&String> = clusters.iter().collect();
    for other in all
        .items
        .iter()
        .filter(|o| o.uid() != mcm.uid() && active(o) && phase(o) != MigrationPhase::Pending)
    {
        if let Some(c) = clusters_of(other).iter().find(|c| mine.contains(c)) {
            return Ok(Some((
                reasons::CLUSTER_CONFLICT,
                format!(
                    "{c} is already in active migration {}/{}",
                    other.namespace().unwrap_or_default(),
                    other.name_any()
                ),
            )));
        }
    }
    Ok(None)
}

/// The reason and message of a failed validation report.
pub(super) fn failure_summary(
    names: &[String],
    states: &[ClusterState],
    where_: &str,
) -> (&'static str, String) {
    let failed: Vec<(&String, (&'static str, &'static str))> = names
        .iter()
        .zip(states)
        .filter_map(|(n, s)| s.failure().map(|f| (n, f)))
        .collect();
    let Some((_, (reason, _))) = failed.first() else {
        return (reasons::ERROR, format!("validation failed {where_}"));
    };
    let listed: Vec<String> = failed
        .iter()
        .take(5)
        .map(|(n, (_, why))| format!("{n} {why}"))
        .collect();
    let more = if failed.len() > 5 {
        format!(" (and {} more; see status.failures)", failed.len() - 5)
    } else {
        String::new()
    };
    (
        reason,
        format!(
            "{} of {} clusters cannot move {where_}: {}{more}",
            failed.len(),
            names.len(),
            listed.join("; ")
        ),
    )
}
