//! Validating: hubs, tenancy, the clusters on both hubs.

use super::*;

pub(super) async fn validating(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
) -> Result<Action, Error> {
    if let Some(refused) = precheck(ctx, mcm, m, step).await? {
        return Ok(step.settle(refused));
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
        && let Some((reason, message)) = cluster_problem(ctx, mcm, names, &hubs).await?
    {
        return Ok(step.settle(Outcome::invalid(reason, message)));
    }
    // The source resolves and checks its clusters.
    let source_ns = addon_namespace(hub_addon(ctx, &m.from, &ctx.config.addon_name).as_deref());
    let target_ns = addon_namespace(hub_addon(ctx, &m.to, &ctx.config.addon_name).as_deref());
    let mut source_task = base_task(
        mcm,
        MigrationRole::Source,
        TaskStage::Validating,
        named.clone().unwrap_or_default(),
    );
    source_task.cluster_selector = mcm.spec.included_managed_clusters_selector.clone();
    source_task.cluster_placement = mcm.spec.included_managed_clusters_placement_ref.clone();
    // Reading the kinds the clusters carry over, while validating only.
    let kinds = source_task.carry_kinds.clone().unwrap_or_default();
    let mut manifests = mr::carry_grants(
        m,
        MigrationRole::Source,
        &kinds,
        mr::CarryScope::Validating,
        &source_ns,
    )?;
    manifests.extend(mr::source_manifests(m, &source_ns, source_task)?);
    let role = MigrationRole::Source;
    let asked = ask(ctx, mcm, m, step, role, manifests, &source_ns);
    let mut source = match asked {
        Ok(f) => f,
        Err(wait) => return Ok(step.settle(wait)),
    };
    // What the clusters carry, when it is too large to come back inline, comes in parts.
    if source.carry.is_none()
        && let Some(parts) = &source.report.carry_parts
    {
        match gather(ctx, m, step, parts, &source_ns) {
            Gathered::Records(records) => source.carry = Some(Ok(records)),
            Gathered::Unreadable(why) => source.carry = Some(Err(why)),
            Gathered::Waiting(waiting) => {
                return Ok(step.settle(Outcome::Wait(
                    Said::no(RESOURCE_VALIDATED, reasons::WAITING, waiting),
                    Wake::Deadline(timeouts(mcm).stage),
                )));
            }
        }
    }
    let placement = mcm.spec.included_managed_clusters_placement_ref.as_deref();
    let checked = match judge_source(named.as_deref(), placement, &source, &m.from) {
        Ok(c) => c,
        Err(refusal) => return Ok(refusal.settle(step)),
    };
    if named.is_none()
        && let Some((reason, message)) = cluster_problem(ctx, mcm, &checked.resolved, &hubs).await?
    {
        return Ok(step.settle(Outcome::invalid(reason, message)));
    }
    // The target checks that none of them exists there.
    let target_task = base_task(
        mcm,
        MigrationRole::Target,
        TaskStage::Validating,
        checked.resolved.clone(),
    );
    let manifests = mr::target_manifests(m, &target_ns, target_task, None)?;
    let role = MigrationRole::Target;
    let asked = ask(ctx, mcm, m, step, role, manifests, &target_ns);
    let target = match asked {
        Ok(f) => f,
        Err(wait) => return Ok(step.settle(wait)),
    };
    step.status.resolved_clusters = Some(checked.resolved.clone());
    if let Err(refusal) = judge_target(&checked.resolved, &target, &m.to) {
        return Ok(refusal.settle(step));
    }
    step.set_states(&vec![ClusterState::Valid; checked.resolved.len()]);
    step.status.bootstrap_delivery = Some(checked.shape.delivery().into());
    if mcm.spec.dry_run == Some(true) {
        let plan = plan(
            ctx,
            mcm,
            m,
            &checked.resolved,
            &checked.carry,
            checked.shape,
            &source_ns,
            &target_ns,
        )
        .await?;
        step.status.plan = Some(plan);
    } else {
        // What the clusters carry is recorded before anything is pre-created from it: in
        // status, or, too large for it, where its parts are.
        match &source.report.carry_parts {
            Some(parts) => step.status.carry_over_parts = Some(parts.clone()),
            None => step.status.carry_over = Some(checked.carry.clone()),
        }
    }
    Ok(step.settle(validated(&checked, mcm.spec.dry_run == Some(true), m)))
}

/// What the global hub alone can refuse before asking any hub: the spec, the deadline, each
/// hub's addons, the tenancy of the hubs.
async fn precheck(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &Step,
) -> Result<Option<Outcome>, Error> {
    if let Err(e) = mcm.spec.validate() {
        return Ok(Some(Outcome::invalid(reasons::INVALID_SPEC, e.to_string())));
    }
    if remaining(step, timeouts(mcm).stage).is_none() {
        return Ok(Some(Outcome::invalid(
            reasons::TIMEOUT,
            format!(
                "the hubs' agents did not report validation within {}; are the {} addons Available on {} and {}?",
                format_duration(timeouts(mcm).stage),
                ctx.config.addon_name,
                m.from,
                m.to
            ),
        )));
    }
    for (hub, role, msa) in [(&m.from, "source", false), (&m.to, "target", true)] {
        if let Some(problem) = hub_problem(ctx, hub, role, msa).await? {
            return Ok(Some(Outcome::invalid(reasons::HUB_INVALID, problem)));
        }
    }
    Ok(hubs_forbidden(ctx, mcm)
        .await?
        .map(|problem| Outcome::invalid(reasons::FORBIDDEN, problem)))
}

/// Delivers a hub's validation task and reads its finished report; `Err` with what to say
/// while it has not finished (or when its work agent cannot apply the task).
fn ask(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
    role: MigrationRole,
    manifests: Vec<Value>,
    task_namespace: &str,
) -> Result<Feedback, Outcome> {
    let hub = m.hub(role);
    let rev = deliver(step, m, role, manifests, task_namespace);
    let (report, err) = report(existing_work(ctx, m, role).as_deref(), &rev);
    if let Some(problem) = work_agent_refused(&ctx.config.addon_name, hub, err.as_deref()) {
        return Err(Outcome::invalid(reasons::HUB_INVALID, problem));
    }
    if let Some(f) = report.filter(|f| f.succeeded() || f.failed()) {
        return Ok(f);
    }
    let mut msg = format!(
        "waiting for {} hub {hub}'s agent to check the clusters",
        role.as_str()
    );
    if let Some(e) = err {
        msg.push_str(&format!(" (the work reports: {e})"));
    }
    Err(Outcome::Wait(
        Said::no(RESOURCE_VALIDATED, reasons::WAITING, msg),
        Wake::Deadline(timeouts(mcm).stage),
    ))
}

/// What the source's validation report established.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SourceChecked {
    pub(super) resolved: Vec<String>,
    pub(super) carry: Vec<CarriedCluster>,
    pub(super) shape: Shape,
}

/// A validation refused by a hub's report: why, and the per-cluster states it reported.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Refusal {
    pub(super) reason: &'static str,
    pub(super) message: String,
    /// The clusters and the states the hub reported for them, when it judged each one.
    pub(super) states: Option<(Vec<String>, Vec<ClusterState>)>,
}

impl Refusal {
    fn hub(message: String) -> Self {
        Refusal {
            reason: reasons::HUB_INVALID,
            message,
            states: None,
        }
    }

    fn settle(self, step: &mut Step) -> Action {
        if let Some((names, states)) = self.states {
            step.status.resolved_clusters = Some(names);
            step.set_states(&states);
        }
        step.settle(Outcome::Invalid(self.reason, self.message))
    }
}

/// The source's finished validation report, judged: the clusters it resolved (the names given,
/// or those the selector matched), what each carries over (which must come back whole, one
/// record per cluster), and the KlusterletConfig shape the hub serves.
pub(super) fn judge_source(
    named: Option<&[String]>,
    placement: Option<&str>,
    source: &Feedback,
    from: &str,
) -> Result<SourceChecked, Refusal> {
    if let Some(refusal) = carry_over_refused(source, "source", from) {
        return Err(refusal);
    }
    // A Placement that does not exist selects nothing: the source says so, and nothing else.
    if let Some(p) = placement
        && source.failed()
        && source.report.refusal.as_deref() == Some(reasons::PLACEMENT_NOT_FOUND)
    {
        return Err(Refusal {
            reason: reasons::PLACEMENT_NOT_FOUND,
            message: format!(
                "source hub {from}: {}",
                source
                    .report
                    .message
                    .clone()
                    .unwrap_or_else(|| format!("Placement {p} not found"))
            ),
            states: None,
        });
    }
    // What the clusters carry comes back whole, as one string (no raw JSON feedback needed).
    let carry: Vec<CarriedCluster> = match source.carry.clone() {
        Some(Ok(c)) => c,
        Some(Err(e)) => {
            return Err(Refusal::hub(format!(
                "source hub {from}'s agent reported what the clusters carry in a form this manager cannot read ({e}); run the same addon version on both"
            )));
        }
        None => {
            return Err(Refusal::hub(format!(
                "source hub {from}'s agent did not report what the clusters carry (an agent older than this manager?); upgrade the addon on that hub"
            )));
        }
    };
    let resolved: Vec<String> = match named {
        Some(n) => n.to_vec(),
        None if carry.is_empty() => {
            let message = match placement {
                Some(p) => format!(
                    "Placement {p} (includedManagedClustersPlacementRef) decided no cluster on source hub {from}"
                ),
                None => format!(
                    "includedManagedClustersSelector matches no cluster on source hub {from}"
                ),
            };
            return Err(Refusal {
                reason: reasons::CLUSTER_NOT_FOUND,
                message,
                states: None,
            });
        }
        None => carry.iter().map(|c| c.name.clone()).collect(),
    };
    if carry.len() != resolved.len() || carry.iter().zip(&resolved).any(|(c, n)| c.name != *n) {
        return Err(Refusal::hub(format!(
            "source hub {from}'s agent reported {} carry-over records for {} clusters; run the same addon version on both",
            carry.len(),
            resolved.len()
        )));
    }
    if source.failed() {
        let states = source.states(resolved.len());
        let (reason, message) =
            failure_summary(&resolved, &states, &format!("on source hub {from}"));
        return Err(Refusal {
            reason,
            message,
            states: Some((resolved, states)),
        });
    }
    let Some(shape) = source.report.shape.as_deref().and_then(Shape::from_report) else {
        return Err(Refusal::hub(format!(
            "source hub {from}'s agent did not say whether the hub serves a KlusterletConfig API (an agent older than this manager?); upgrade the addon on that hub"
        )));
    };
    Ok(SourceChecked {
        resolved,
        carry,
        shape,
    })
}

/// The target's finished validation report, judged: it must take every resolved cluster. A
/// refusal that names no cluster is the hub's own (it cannot take any), in its agent's words.
/// A hub that does not serve a kind `carryOver` lists refuses the stage as a whole, saying
/// which (`status.refusal`).
fn carry_over_refused(f: &Feedback, role: &str, hub: &str) -> Option<Refusal> {
    (f.failed() && f.report.refusal.as_deref() == Some(reasons::CARRY_OVER_NOT_SERVED)).then(|| {
        Refusal {
            reason: reasons::CARRY_OVER_NOT_SERVED,
            message: format!(
                "{role} hub {hub}: {}",
                f.report.message.clone().unwrap_or_default()
            ),
            states: None,
        }
    })
}

pub(super) fn judge_target(
    resolved: &[String],
    target: &Feedback,
    to: &str,
) -> Result<(), Refusal> {
    if !target.failed() {
        return Ok(());
    }
    if let Some(refusal) = carry_over_refused(target, "target", to) {
        return Err(refusal);
    }
    let states = target.states(resolved.len());
    let (reason, message) = match failure_summary(resolved, &states, &format!("on target hub {to}"))
    {
        (reasons::ERROR, _)
            if target
                .report
                .message
                .as_deref()
                .is_some_and(|m| !m.is_empty()) =>
        {
            (
                reasons::HUB_INVALID,
                format!(
                    "target hub {to}: {}",
                    target.report.message.clone().unwrap_or_default()
                ),
            )
        }
        other => other,
    };
    Err(Refusal {
        reason,
        message,
        states: Some((resolved.to_vec(), states)),
    })
}

/// Validation passed: a dry run ends here (its plan is in status), a migration goes on to
/// Initializing.
pub(super) fn validated(checked: &SourceChecked, dry_run: bool, m: &Migration) -> Outcome {
    let n = checked.resolved.len();
    if dry_run {
        return Outcome::Enter(
            Said::yes(
                RESOURCE_VALIDATED,
                reasons::DONE,
                format!("{n} clusters can move from {} to {}", m.from, m.to),
            ),
            MigrationPhase::Completed,
            "dry run: the plan is in status.plan; nothing was changed".into(),
        );
    }
    Outcome::Enter(
        Said::yes(
            RESOURCE_VALIDATED,
            reasons::DONE,
            format!(
                "{n} clusters can move from {} to {} ({})",
                m.from,
                m.to,
                checked.shape.delivery()
            ),
        ),
        MigrationPhase::Initializing,
        "validated; preparing the bootstrap identity on the target".into(),
    )
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
