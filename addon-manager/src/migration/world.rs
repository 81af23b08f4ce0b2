//! What the phases that deliver tasks (Deploying, Registering, Rollbacking, the hubs' part
//! of Cleaning) read, gathered once per reconcile by the shell ([`observe`]): the hubs'
//! agents, the bootstrap kubeconfigs, what the clusters carry and the migration's works as
//! the watches have them. Those phases are then functions of the spec, the status, this
//! [`World`] and the step's clock: they put what to write into the step's effects and say
//! when to look again, without I/O, so each is tested in tables.

use super::*;

/// What a delivering phase decides from.
#[derive(Clone, Debug, Default)]
pub(super) struct World {
    /// Name of the addon whose agents carry out the tasks.
    pub(super) addon: String,
    /// Namespaces the addon's agent runs in on the source and on the target, and the
    /// target's managed-serviceaccount agent.
    pub(super) source_ns: String,
    pub(super) target_ns: String,
    pub(super) msa_ns: String,
    /// What the clusters carry, as status has it (inline or in parts).
    pub(super) carried: Option<Arc<Vec<CarriedCluster>>>,
    /// What the target is told the clusters carry: `carried`, or (a migration validated by an
    /// older manager kept it in the target's task only) what its task already holds.
    pub(super) target_carry: Option<Arc<Vec<CarriedCluster>>>,
    /// The bootstrap kubeconfigs of every identity, while the source carries the token
    /// ([`source_carries_token`]) and each has its token.
    pub(super) kubeconfigs: Option<Vec<String>>,
    /// The first identity's kubeconfig, in the stages whose target task names the connection
    /// (Registering, Cleaning).
    pub(super) connection: Option<String>,
    /// The migration's works on the source and the target, and the source's bootstrap work.
    pub(super) source_work: Option<Arc<ManifestWork>>,
    pub(super) target_work: Option<Arc<ManifestWork>>,
    pub(super) bootstrap_work: Option<Arc<ManifestWork>>,
    /// The works past the first of each kind, by name: grants that did not fit beside a task
    /// ([`names::migration_grants_work`], on both hubs) and bootstrap objects that did not fit
    /// in the source's bootstrap work ([`names::migration_bootstrap_part`]).
    pub(super) extra_works: std::collections::BTreeMap<String, Arc<ManifestWork>>,
    /// The source's task as the API server has it (not the watch, which may not have seen
    /// the last delivery), read only when Registering asks for it ([`Need::SourceTaskNow`]):
    /// `Some(None)` when there is none.
    pub(super) source_task_now: Option<Option<MigrationTaskSpec>>,
}

/// What a phase needs that the [`World`] it was handed does not hold: the shell reads it and
/// asks again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Need {
    /// [`World::source_task_now`].
    SourceTaskNow,
}

impl World {
    /// The migration's work on one hub.
    pub(super) fn work(&self, role: MigrationRole) -> Option<&ManifestWork> {
        match role {
            MigrationRole::Source => self.source_work.as_deref(),
            MigrationRole::Target => self.target_work.as_deref(),
        }
    }

    /// The report of `role`'s task, only if it is on `revision` ([`report`]); and why its
    /// work, or a work of its grants (which the task's work waits for), could not apply, if
    /// one could not.
    pub(super) fn report(
        &self,
        role: MigrationRole,
        revision: &str,
    ) -> (Option<Feedback>, Option<String>) {
        let (feedback, error) = report(self.work(role), revision);
        let grants = format!("-{}-grants-", role.as_str());
        let grants_error = || {
            self.extra_works.iter().find_map(|(name, w)| {
                let e = w
                    .manifest_not_applied()
                    .filter(|_| name.contains(&grants))?;
                Some(format!("{name}: {e}"))
            })
        };
        (feedback, error.or_else(grants_error))
    }

    /// For each of `n` clusters, whether the target's last report (on whichever revision)
    /// records when it learnt of the cluster's release.
    pub(super) fn recorded_releases(&self, n: usize) -> Vec<bool> {
        self.work(MigrationRole::Target).map_or_else(
            || vec![false; n],
            |w| Feedback::of(w).report.recorded_releases(n),
        )
    }

    /// Whether `work` (as rendered) is on its hub as the watch shows it: applied with this
    /// content ([`names::annotations::APPLIED_HASH`]) at its latest generation.
    pub(super) fn in_place(&self, work: &Value) -> bool {
        let name = work["metadata"]["name"].as_str().unwrap_or_default();
        let found = self.extra_works.get(name).cloned().or_else(|| {
            [&self.source_work, &self.target_work]
                .into_iter()
                .flatten()
                .find(|w| w.metadata.name.as_deref() == Some(name))
                .cloned()
        });
        found.is_some_and(|w| {
            w.metadata.deletion_timestamp.is_none()
                && w.applied()
                && w.annotations().get(names::annotations::APPLIED_HASH)
                    == Some(&crate::render::spec_hash(work))
        })
    }

    /// The source's bootstrap works, the first and its parts, as the watch has them.
    pub(super) fn bootstrap_works(&self, key: &str) -> impl Iterator<Item = &ManifestWork> {
        let parts = (1..=MAX_EXTRA_WORKS).filter_map(move |i| {
            self.extra_works
                .get(&names::migration_bootstrap_part(key, i))
        });
        self.bootstrap_work.iter().chain(parts).map(|w| &**w)
    }

    /// The source's bootstrap work is being deleted.
    pub(super) fn bootstrap_going(&self) -> bool {
        self.bootstrap_work
            .as_ref()
            .is_some_and(|w| w.metadata.deletion_timestamp.is_some())
    }
}

/// Reads the [`World`] of a phase delivering `stage`'s tasks (a token's Secret is read only
/// when its ManagedServiceAccount reports a new one; the rest comes from the watches).
pub(super) async fn observe(
    ctx: &Ctx,
    m: &Migration,
    status: &ManagedClusterMigrationStatus,
    stage: TaskStage,
) -> Result<World, Error> {
    let carried = carried(ctx, m, status);
    let target_work = existing_work(ctx, m, MigrationRole::Target);
    let target_carry = match (&status.carry_over, &status.carry_over_parts) {
        (None, None) => target_work
            .as_deref()
            .and_then(delivered_task)
            .and_then(|t| t.carry_over)
            .map(Arc::new),
        _ => carried.clone(),
    };
    let kubeconfigs = if source_carries_token(stage) {
        bootstrap(ctx, m, m.identities()).await?
    } else {
        None
    };
    let connection = if matches!(stage, TaskStage::Registering | TaskStage::Cleaning) {
        bootstrap(ctx, m, 1)
            .await?
            .and_then(|k| k.into_iter().next())
    } else {
        None
    };
    let addon = &ctx.config.addon_name;
    Ok(World {
        addon: addon.clone(),
        source_ns: addon_namespace(hub_addon(ctx, &m.from, addon).as_deref()),
        target_ns: addon_namespace(hub_addon(ctx, &m.to, addon).as_deref()),
        msa_ns: addon_namespace(hub_addon(ctx, &m.to, MSA_ADDON).as_deref()),
        carried,
        target_carry,
        kubeconfigs,
        connection,
        source_work: existing_work(ctx, m, MigrationRole::Source),
        target_work,
        bootstrap_work: work_named(ctx, &m.from, &names::migration_bootstrap_work(&m.key)),
        extra_works: extra_works(ctx, m)
            .into_iter()
            .map(|(_, name, work)| (name, work))
            .collect(),
        source_task_now: None,
    })
}

/// How many works past the first of a kind a hub's part may have: more than a migration of
/// the most clusters with the longest names needs.
pub(super) const MAX_EXTRA_WORKS: usize = 64;

/// The migration's works past the first of each kind ([`World::extra_works`]) as the watch
/// has them: (hub, name, work).
pub(super) fn extra_works(ctx: &Ctx, m: &Migration) -> Vec<(String, String, Arc<ManifestWork>)> {
    let mut candidates = Vec::new();
    for i in 1..=MAX_EXTRA_WORKS {
        for role in [MigrationRole::Source, MigrationRole::Target] {
            candidates.push((m.hub(role), names::migration_grants_work(&m.key, role, i)));
        }
        candidates.push((&m.from, names::migration_bootstrap_part(&m.key, i)));
    }
    candidates
        .into_iter()
        .filter_map(|(hub, name)| {
            let work = work_named(ctx, hub, &name)?;
            Some((hub.to_owned(), name, work))
        })
        .collect()
}

/// Reads what `need` asks into `world`.
pub(super) async fn fetch(
    ctx: &Ctx,
    m: &Migration,
    world: &mut World,
    need: Need,
) -> Result<(), Error> {
    match need {
        Need::SourceTaskNow => {
            let name = names::migration_work(&m.key, MigrationRole::Source);
            let work = work_now(ctx, &m.from, &name).await?;
            world.source_task_now = Some(work.as_ref().and_then(delivered_task));
        }
    }
    Ok(())
}

/// Runs a delivering phase's decision `decide` on what was observed for `stage`, reading
/// more when it asks ([`Need`]): each attempt starts from the step as it was, so an
/// attempt that asked leaves nothing behind.
pub(super) async fn delivering(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
    stage: TaskStage,
    decide: Decide,
) -> Result<Action, Error> {
    let mut world = observe(ctx, m, &step.status, stage).await?;
    let mut read = Vec::new();
    loop {
        let mut attempt = step.clone();
        match decide(&world, mcm, m, &mut attempt)? {
            Decided::Wake(action) => {
                *step = attempt;
                return Ok(action);
            }
            // Asked again for what was just read: a bug; try again later rather than spin.
            Decided::Need(need) if read.contains(&need) => {
                tracing::warn!(?need, "a phase asked twice for the same reading");
                return Ok(Action::requeue(Duration::from_secs(2)));
            }
            Decided::Need(need) => {
                fetch(ctx, m, &mut world, need).await?;
                read.push(need);
            }
        }
    }
}

/// What a delivering phase decided: when to look again (its step holds the rest), or what
/// it needs read first.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Decided {
    Wake(Action),
    Need(Need),
}

/// A delivering phase's pure decision.
pub(super) type Decide =
    fn(&World, &ManagedClusterMigration, &Migration, &mut Step) -> Result<Decided, Error>;
