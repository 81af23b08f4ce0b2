//! Validating: hubs, tenancy, the clusters on both hubs. What validation reads is read once per
//! reconcile ([`Checks::read`]); the decision ([`validate`]) is a function of it, the spec,
//! the status and the step's clock.

use std::collections::BTreeMap;

use super::*;

pub(super) async fn validating(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
) -> Result<Action, Error> {
    if let Some(refused) = refused_at_once(mcm, m, step, &ctx.config.addon_name) {
        return Ok(step.settle(refused));
    }
    let checks = Checks::read(ctx, mcm, m).await?;
    validate(&checks, mcm, m, step)
}

/// What validation decides from: the hubs, the tenancy of the migration's namespace and the
/// other migrations as the API server has them (validation's word is final: a migration it
/// refuses fails), the hubs' agents and the migration's works as the watches have them.
#[derive(Clone, Debug, Default)]
pub(super) struct Checks {
    /// Name of the addon whose agents carry out the tasks.
    pub(super) addon: String,
    pub(super) from: HubSeen,
    pub(super) to: HubSeen,
    /// The ManagedClusterSets bound to the migration's namespace.
    pub(super) bound: Vec<cluster::ManagedClusterSet>,
    /// The global hub's managed clusters (the hubs), by name.
    pub(super) hubs: BTreeSet<String>,
    /// Every migration, this one included.
    pub(super) migrations: Vec<ManagedClusterMigration>,
    /// Namespaces the addon's agent runs in on the source and the target, and the target's
    /// managed-serviceaccount agent.
    pub(super) source_ns: String,
    pub(super) target_ns: String,
    pub(super) msa_ns: String,
    /// The target's proxy settings ([`target_proxy`]).
    pub(super) proxy: Option<ProxyConfig>,
    pub(super) source_work: Option<Arc<ManifestWork>>,
    pub(super) target_work: Option<Arc<ManifestWork>>,
    /// The works reading the source's carry-over parts back, by name.
    pub(super) part_works: BTreeMap<String, Arc<ManifestWork>>,
    /// A dry run's: who holds the names of the target's pool of bootstrap identities.
    pub(super) held: BTreeMap<String, Option<String>>,
}

impl Checks {
    pub(super) async fn read(
        ctx: &Ctx,
        mcm: &ManagedClusterMigration,
        m: &Migration,
    ) -> Result<Self, Error> {
        let ns = mcm.namespace().unwrap_or_default();
        let bound = migration_api::runtime::bound_cluster_sets(&ctx.client, &ns)
            .await
            .map_err(|(what, e)| Error::Kube(ApiError::new(what, e)))?;
        let hubs = Api::<ManagedCluster>::all(ctx.client.clone())
            .list_metadata(&ListParams::default())
            .await
            .map_err(ctx_err("listing the global hub's clusters"))?
            .items
            .into_iter()
            .filter_map(|o| o.metadata.name)
            .collect();
        let migrations = Api::<ManagedClusterMigration>::all(ctx.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(ctx_err("listing migrations"))?
            .items;
        let source_work = existing_work(ctx, m, MigrationRole::Source);
        let parts = source_work
            .as_deref()
            .and_then(|w| Feedback::of(w).report.carry_parts);
        let part_works = (0..parts.as_ref().map_or(0, CarryOverParts::bounded))
            .map(|i| names::carry_over_part(&m.key, MigrationRole::Source, i))
            .filter_map(|name| Some((name.clone(), work_named(ctx, &m.from, &name)?)))
            .collect();
        let held = if mcm.spec.dry_run == Some(true) {
            pool_of(ctx, &m.to).await?
        } else {
            BTreeMap::new()
        };
        let addon = &ctx.config.addon_name;
        Ok(Checks {
            addon: addon.clone(),
            from: HubSeen::read(ctx, &m.from, false).await?,
            to: HubSeen::read(ctx, &m.to, true).await?,
            bound,
            hubs,
            migrations,
            source_ns: addon_namespace(hub_addon(ctx, &m.from, addon).as_deref()),
            target_ns: addon_namespace(hub_addon(ctx, &m.to, addon).as_deref()),
            msa_ns: addon_namespace(hub_addon(ctx, &m.to, MSA_ADDON).as_deref()),
            proxy: target_proxy(ctx, &m.to),
            source_work,
            target_work: existing_work(ctx, m, MigrationRole::Target),
            part_works,
            held,
        })
    }

    fn work(&self, role: MigrationRole) -> Option<&ManifestWork> {
        match role {
            MigrationRole::Source => self.source_work.as_deref(),
            MigrationRole::Target => self.target_work.as_deref(),
        }
    }
}

/// Validation's decision: the hubs, the clusters, then each hub's agent's report on them.
pub(super) fn validate(
    checks: &Checks,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
) -> Result<Action, Error> {
    if let Some(refused) =
        refused_at_once(mcm, m, step, &checks.addon).or_else(|| hub_refused(checks, mcm, m))
    {
        return Ok(step.settle(refused));
    }
    let named = mcm.spec.included_managed_clusters.clone();
    if let Some(names) = &named
        && let Some((reason, message)) = cluster_problem(mcm, names, checks)
    {
        return Ok(step.settle(Outcome::invalid(reason, message)));
    }
    // The source resolves and checks its clusters.
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
        &checks.source_ns,
    )?;
    manifests.extend(mr::source_manifests(m, &checks.source_ns, source_task)?);
    let mut source = match ask(checks, mcm, m, step, MigrationRole::Source, manifests) {
        Ok(f) => f,
        Err(wait) => return Ok(step.settle(wait)),
    };
    // What the clusters carry, when it is too large to come back inline, comes in parts.
    if source.carry.is_none()
        && let Some(parts) = &source.report.carry_parts
    {
        let works = |hub: &str, name: &str| {
            (hub == m.from)
                .then(|| checks.part_works.get(name).cloned())
                .flatten()
        };
        match gather(&works, m, step, parts, &checks.source_ns) {
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
        && let Some((reason, message)) = cluster_problem(mcm, &checked.resolved, checks)
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
    let manifests = mr::target_manifests(m, &checks.target_ns, target_task, None)?;
    let target = match ask(checks, mcm, m, step, MigrationRole::Target, manifests) {
        Ok(f) => f,
        Err(wait) => return Ok(step.settle(wait)),
    };
    step.status.resolved_clusters = Some(checked.resolved.clone());
    if let Err(refusal) = judge_target(&checked.resolved, &target, &m.to) {
        return Ok(refusal.settle(step));
    }
    step.set_states(&vec![ClusterState::Valid; checked.resolved.len()]);
    step.status.bootstrap_delivery = Some(checked.shape.delivery().into());
    let dry_run = mcm.spec.dry_run == Some(true);
    if dry_run {
        step.status.plan = Some(plan(checks, mcm, m, &checked)?);
    } else {
        // What the clusters carry is recorded before anything is pre-created from it: in
        // status, or, too large for it, where its parts are.
        match &source.report.carry_parts {
            Some(parts) => step.status.carry_over_parts = Some(parts.clone()),
            None => step.status.carry_over = Some(checked.carry.clone()),
        }
    }
    Ok(step.settle(validated(&checked, dry_run, m)))
}

/// What the spec and the clock alone refuse, before anything is read: an invalid spec, a
/// validation past its deadline.
fn refused_at_once(
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &Step,
    addon: &str,
) -> Option<Outcome> {
    if let Err(e) = mcm.spec.validate() {
        return Some(Outcome::invalid(reasons::INVALID_SPEC, e.to_string()));
    }
    remaining(step, timeouts(mcm).stage).is_none().then(|| {
        Outcome::invalid(
            reasons::TIMEOUT,
            format!(
                "the hubs' agents did not report validation within {}; are the {addon} addons Available on {} and {}?",
                format_duration(timeouts(mcm).stage),
                m.from,
                m.to
            ),
        )
    })
}

/// What the hubs refuse: each hub's own state and addons, the tenancy of the migration's
/// namespace.
fn hub_refused(checks: &Checks, mcm: &ManagedClusterMigration, m: &Migration) -> Option<Outcome> {
    for (hub, seen, role, msa) in [
        (&m.from, &checks.from, "source", false),
        (&m.to, &checks.to, "target", true),
    ] {
        if let Some(problem) = hub_problem(seen, &checks.addon, hub, role, msa) {
            return Some(Outcome::invalid(reasons::HUB_INVALID, problem));
        }
    }
    let ns = mcm.namespace().unwrap_or_default();
    let hubs = [(m.from.as_str(), &checks.from), (m.to.as_str(), &checks.to)];
    hubs_forbidden(&ns, &checks.bound, hubs)
        .map(|problem| Outcome::invalid(reasons::FORBIDDEN, problem))
}

/// Delivers a hub's validation task and reads its finished report; `Err` with what to say
/// while it has not finished (or when its work agent cannot apply the task).
fn ask(
    checks: &Checks,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
    role: MigrationRole,
    manifests: Vec<Value>,
) -> Result<Feedback, Outcome> {
    let hub = m.hub(role);
    let task_namespace = match role {
        MigrationRole::Source => &checks.source_ns,
        MigrationRole::Target => &checks.target_ns,
    };
    let rev = deliver(
        step,
        m,
        role,
        manifests,
        (task_namespace, checks.work(role)),
    );
    let (report, err) = report(checks.work(role), &rev);
    if let Some(problem) = work_agent_refused(&checks.addon, hub, err.as_deref()) {
        return Err(Outcome::invalid(reasons::HUB_INVALID, problem));
    }
    if let Some(f) = report.filter(|f| f.succeeded() || f.failed()) {
        if let Some(what) = &f.report.out_of_range {
            return Err(Outcome::invalid(
                reasons::HUB_INVALID,
                format!(
                    "{} hub {hub}'s agent reported values out of range ({what}); check the agent's version and who else writes MigrationTasks there",
                    role.as_str()
                ),
            ));
        }
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
pub(super) fn cluster_problem(
    mcm: &ManagedClusterMigration,
    clusters: &[String],
    checks: &Checks,
) -> Option<(&'static str, String)> {
    if let Some(c) = clusters.iter().find(|c| checks.hubs.contains(*c)) {
        return Some((
            "ClusterIsHub",
            format!(
                "{c} is itself a hub (a managed cluster of the global hub) and cannot be migrated"
            ),
        ));
    }
    let mine: BTreeSet<&String> = clusters.iter().collect();
    checks
        .migrations
        .iter()
        .filter(|o| o.uid() != mcm.uid() && active(o) && phase(o) != MigrationPhase::Pending)
        .find_map(|other| {
            let c = clusters_of(other).into_iter().find(|c| mine.contains(c))?;
            Some((
                reasons::CLUSTER_CONFLICT,
                format!(
                    "{c} is already in active migration {}/{}",
                    other.namespace().unwrap_or_default(),
                    other.name_any()
                ),
            ))
        })
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
