//! Delivering each hub's part: the task, its grants and the bootstrap objects, in one ManifestWork per hub.

use super::*;

/// Applies a work, unless the watch shows it as it would be applied (marked with the hash of
/// what was last applied, [`names::annotations::APPLIED_HASH`]) and not going.
pub(super) async fn apply_work(ctx: &Ctx, work: &Value) -> Result<(), Error> {
    let ns = work["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = work["metadata"]["name"].as_str().unwrap_or_default();
    let hash = crate::render::spec_hash(work);
    // From here on it may be there, whatever the watch shows.
    ctx.gone_works.applying(ns, name);
    if let Some(w) = work_named(ctx, ns, name)
        && w.metadata.deletion_timestamp.is_none()
        && w.annotations().get(names::annotations::APPLIED_HASH) == Some(&hash)
    {
        return Ok(());
    }
    let mut work = work.clone();
    work["metadata"]["annotations"] = json!({ names::annotations::APPLIED_HASH: hash });
    let api: Api<ManifestWork> = Api::namespaced(ctx.client.clone(), ns);
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&work),
    )
    .await
    .map_err(ctx_err(format!("applying ManifestWork {ns}/{name}")))?;
    Ok(())
}

pub(super) fn base_task(
    mcm: &ManagedClusterMigration,
    role: MigrationRole,
    stage: TaskStage,
    clusters: Vec<String>,
) -> MigrationTaskSpec {
    let key = key_of(mcm);
    MigrationTaskSpec {
        migration: mcm.name_any(),
        migration_uid: mcm.uid(),
        migration_namespace: mcm.namespace(),
        bootstrap_secret_name: Some(names::migration_bootstrap_secret(&key)),
        klusterlet_config_name: Some(names::migration_klusterlet_config(&key)),
        clusters_per_identity: u32::try_from(names::clusters_per_identity(clusters.len())).ok(),
        key: Some(key),
        role,
        peer_hub: if role == MigrationRole::Source {
            mcm.spec.to.clone()
        } else {
            mcm.spec.from.clone()
        },
        clusters,
        stage,
        lift_disable_auto_import: (role == MigrationRole::Source)
            .then_some(mcm.spec.lift_disable_auto_import)
            .flatten(),
        carry_kinds: mcm.spec.carry_over.clone().filter(|k| !k.is_empty()),
        ..Default::default()
    }
}

/// Delivers a task (with the extra manifests before it) to one hub: the work goes into the
/// step's effects; returns the task's revision (what the hub's report must answer).
pub(super) fn deliver(
    step: &mut Step,
    m: &Migration,
    role: MigrationRole,
    manifests: Vec<Value>,
    (task_namespace, existing): (&str, Option<&ManifestWork>),
) -> String {
    let revision = task_revision(&manifests);
    let config = mr::task_config(m, task_namespace, mr::task_server_side_apply(existing));
    let work = mr::work(m, role, manifests, config);
    step.effects.push(Effect::ApplyWork(work));
    revision
}

/// Delivers a hub's part whose agent needs `grants` to act on its task (`rest`, the task last):
/// in one work while everything fits within [`crate::render::WORK_SIZE_LIMIT`] (grants first,
/// so that the work agent applies them before the task); past that, the grants go in works of
/// their own ([`mr::grants_work`], split by size) and the task's work follows only once
/// the watch shows each of them applied as delivered now, so the agent never reads a task
/// whose grants are not in place yet. Grant works no longer needed go once the task's work
/// is in place (what they held may be in it now). Returns the task's revision.
pub(super) fn deliver_granted(
    world: &World,
    step: &mut Step,
    m: &Migration,
    role: MigrationRole,
    (grants, rest): (Vec<Value>, Vec<Value>),
    task_namespace: &str,
) -> String {
    let size = |v: &[Value]| -> usize {
        v.iter()
            .map(|o| serde_json::to_vec(o).map_or(0, |b| b.len()))
            .sum()
    };
    let limit = crate::render::WORK_SIZE_LIMIT;
    let (split, main) = if size(&grants) + size(&rest) <= limit {
        (Vec::new(), grants.into_iter().chain(rest).collect())
    } else {
        (crate::render::split_manifests(grants, limit), rest)
    };
    let mut ready = true;
    let mut wanted = BTreeSet::new();
    for (i, manifests) in split.into_iter().enumerate() {
        let work = mr::grants_work(m, role, i + 1, manifests);
        ready &= world.in_place(&work);
        wanted.insert(names::migration_grants_work(&m.key, role, i + 1));
        step.effects.push(Effect::ApplyWork(work));
    }
    let revision = task_revision(&main);
    if ready {
        let ssa = mr::task_server_side_apply(world.work(role));
        let work = mr::work(m, role, main, mr::task_config(m, task_namespace, ssa));
        let task_in_place = world.in_place(&work);
        step.effects.push(Effect::ApplyWork(work));
        if task_in_place {
            for i in 1..=MAX_EXTRA_WORKS {
                let name = names::migration_grants_work(&m.key, role, i);
                if !wanted.contains(&name) && world.extra_works.contains_key(&name) {
                    step.effects.push(Effect::RemoveWork {
                        hub: m.hub(role).to_owned(),
                        name,
                    });
                }
            }
        }
    }
    revision
}

/// The revision of the MigrationTask among `manifests`.
fn task_revision(manifests: &[Value]) -> String {
    manifests
        .iter()
        .find(|o| o["kind"] == "MigrationTask")
        .and_then(|o| o["spec"]["revision"].as_str())
        .unwrap_or_default()
        .to_owned()
}

pub(super) fn shape_of(step: &Step) -> Shape {
    Shape::from_delivery(
        step.status
            .bootstrap_delivery
            .as_deref()
            .unwrap_or_default(),
    )
}

/// What the source receives in Deploying, for people.
pub(super) fn delivered_what(step: &Step) -> &'static str {
    match shape_of(step) {
        Shape::ManifestWork => {
            "bootstrap kubeconfig (configuring each Klusterlet through a ManifestWork)"
        }
        _ => "KlusterletConfig and bootstrap kubeconfig",
    }
}

/// Tells a task how the bootstrap kubeconfig travels (the default, a current KlusterletConfig,
/// is left unsaid; plain OCM has no KlusterletConfig).
pub(super) fn set_delivery(task: &mut MigrationTaskSpec, shape: Shape) {
    if shape != Shape::MultipleHubsConfig {
        task.delivery = Some(shape.task_delivery());
    }
    if shape == Shape::ManifestWork {
        task.klusterlet_config_name = None;
    }
}

/// Delivers the target's part (into the step's effects); returns its revision. `rbac`: the
/// bootstrap identity may still register.
pub(super) fn deliver_target(
    world: &World,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
    stage: TaskStage,
    rollback: Vec<String>,
    rbac: bool,
) -> Result<String, Error> {
    let names = step.names();
    let target_ns = &world.target_ns;
    // The target approves the CSRs of the clusters the source released, and of no other.
    let released_now = if stage == TaskStage::Registering {
        released(&names, &step.states())
    } else {
        Vec::new()
    };
    let mut target = base_task(mcm, MigrationRole::Target, stage, names);
    match &step.status.carry_over_parts {
        // Too large for the task: in works of their own, next to it.
        Some(parts) => {
            step.effects.push(Effect::DeliverParts {
                parts: parts.clone(),
                target_ns: target_ns.clone(),
            });
            target.carry_over_parts = Some(parts.clone());
        }
        None => target.carry_over = world.target_carry.as_deref().cloned(),
    }
    target.bootstrap_users = Some(mr::bootstrap_users(m, &world.msa_ns));
    // The agent releases the works of the copies it removes in Cleaning.
    let release = if stage == TaskStage::Cleaning {
        rollback.clone()
    } else {
        Vec::new()
    };
    target.set_subsets(released_now, rollback, Vec::new());
    set_delivery(&mut target, shape_of(step));
    // Where and how to reach the target, without the token: a plain OCM target makes the
    // clusters that arrive a bootstrap kubeconfig of its own from it (cleanup may still have
    // to settle one that arrived as Registering ended). The token never goes to the target.
    if matches!(stage, TaskStage::Registering | TaskStage::Cleaning)
        && let Some(kubeconfig) = &world.connection
    {
        target.bootstrap_connection = Some(mr::without_credentials(kubeconfig)?);
    }
    // The agent writes what it must while the work carries its grants.
    let carry = world.target_carry.as_deref().map_or(&[][..], Vec::as_slice);
    let grants = agent_grants(&world.addon, &target, carry, target_ns, release);
    let mut granted = mr::agent_grants(m, MigrationRole::Target, &grants)?;
    granted.extend(mr::carry_grants(
        m,
        MigrationRole::Target,
        target.carry_kinds.as_deref().unwrap_or_default(),
        mr::CarryScope::Clusters(&target.clusters),
        target_ns,
    )?);
    let rest = mr::target_manifests(m, target_ns, target, rbac.then_some(world.msa_ns.as_str()))?;
    Ok(deliver_granted(
        world,
        step,
        m,
        MigrationRole::Target,
        (granted, rest),
        target_ns,
    ))
}

/// What a task's hub agent may write for it ([`mr::AgentGrants`]): nothing while it validates
/// (it only reads); then the task's clusters, on the target what they carry, and on the
/// source the KlusterletConfigs it derives from the clusters' own (`carry`: the records the
/// source reported).
pub(super) fn agent_grants(
    addon: &str,
    task: &MigrationTaskSpec,
    carry: &[CarriedCluster],
    agent_namespace: &str,
    release: Vec<String>,
) -> mr::AgentGrants {
    if task.stage == TaskStage::Validating {
        return mr::AgentGrants::default();
    }
    // Each cluster's derived KlusterletConfig is made from its own identity's.
    let index = task.cluster_positions();
    let (source_carry, target_carry) = match task.role {
        MigrationRole::Source => (carry, &[][..]),
        MigrationRole::Target => (&[][..], carry),
    };
    let derived: BTreeSet<String> = source_carry
        .iter()
        .filter_map(|c| {
            let own = c.own_klusterlet_config.as_deref()?;
            let base = task.klusterlet_config_at(*index.get(c.name.as_str())?)?;
            Some(names::derived_klusterlet_config(&base, Some(own)))
        })
        .collect();
    let sets: BTreeSet<String> = target_carry
        .iter()
        .filter_map(|c| c.cluster_set.clone())
        .collect();
    let addons: BTreeSet<String> = target_carry
        .iter()
        .flat_map(|c| c.addons.iter().map(|a| a.name.clone()))
        .collect();
    mr::AgentGrants {
        addon: addon.to_owned(),
        agent_namespace: agent_namespace.to_owned(),
        clusters: task.clusters.clone(),
        sets: sets.into_iter().collect(),
        addons: addons.into_iter().collect(),
        klusterlet_configs: derived.into_iter().collect(),
        release,
    }
}

/// The source's part of a stage.
#[derive(Default)]
pub(super) struct SourcePart {
    pub(super) released: Vec<String>,
    pub(super) rollback: Vec<String>,
    pub(super) detach: Vec<String>,
}

/// Delivers the source's part (into the step's effects); returns its revision, or `None` when
/// the bootstrap kubeconfig is needed (`need_bootstrap`) but its token is gone. Without the
/// token the bootstrap secret and KlusterletConfig are left out (rollback and cleanup do not
/// need them).
pub(super) fn deliver_source(
    world: &World,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
    stage: TaskStage,
    part: SourcePart,
    need_bootstrap: bool,
) -> Result<Option<String>, Error> {
    let names = step.names();
    let source_ns = &world.source_ns;
    // Only while clusters may switch does the token leave the global hub.
    let kubeconfig = world
        .kubeconfigs
        .as_ref()
        .filter(|_| source_carries_token(stage));
    if need_bootstrap && kubeconfig.is_none() {
        return Ok(None);
    }
    let mut source = base_task(mcm, MigrationRole::Source, stage, names);
    // Grants first, so that they are in place when the agent reads its task. In Cleaning a
    // plain OCM source's agent also releases the works of the clusters it detaches; on a hub
    // with ACM's import controller that controller force-deletes the works of every deleted
    // cluster it no longer accepts or that is not Available (stolostron/managedcluster-import-
    // controller `resourcecleanup_controller.go`, `clusterNeedForceDelete`), which a moved
    // cluster always becomes there, so that agent gets no RoleBinding in their namespaces:
    // it needs none, and a task's work with one per cluster costs a read of each at every
    // status sync of the work (upstream's status controller reads every manifest's object).
    let shape = shape_of(step);
    let release = if shape == Shape::ManifestWork {
        part.detach.clone()
    } else {
        Vec::new()
    };
    source.set_subsets(part.released, part.rollback, part.detach);
    set_delivery(&mut source, shape);
    let carried = world.carried.as_deref().map_or(&[][..], Vec::as_slice);
    let grants = agent_grants(&world.addon, &source, carried, source_ns, release);
    let mut granted = mr::agent_grants(m, MigrationRole::Source, &grants)?;
    granted.extend(mr::carry_grants(
        m,
        MigrationRole::Source,
        source.carry_kinds.as_deref().unwrap_or_default(),
        mr::CarryScope::Clusters(&source.clusters),
        source_ns,
    )?);
    let rest = mr::source_manifests(m, source_ns, source)?;
    // The bootstrap objects first, in a work of their own that stays as it is while clusters
    // are released (unless it is going; a token missing for a moment leaves it as it was);
    // it goes once no cluster may switch any more: the work agent removes what it carried.
    // (In several works, applied side by side, and as many more as their size takes: the
    // source agent waits for each cluster's own, so their order does not matter.)
    if let Some(kubeconfigs) = kubeconfig {
        if !world.bootstrap_going() {
            let objects = mr::bootstrap_manifests(m, source_ns, kubeconfigs, shape)?;
            for work in mr::bootstrap_works(m, objects, kubeconfigs.len()) {
                step.effects.push(Effect::ApplyWork(work));
            }
        }
    } else if !source_carries_token(stage) {
        let parts = (1..=MAX_EXTRA_WORKS)
            .map(|i| names::migration_bootstrap_part(&m.key, i))
            .filter(|name| world.extra_works.contains_key(name));
        for name in std::iter::once(names::migration_bootstrap_work(&m.key)).chain(parts) {
            step.effects.push(Effect::RemoveWork {
                hub: m.from.clone(),
                name,
            });
        }
    }
    Ok(Some(deliver_granted(
        world,
        step,
        m,
        MigrationRole::Source,
        (granted, rest),
        source_ns,
    )))
}

/// Whether the source's work carries the bootstrap token (its Secret, and the
/// KlusterletConfig naming it): only while clusters may still switch to the target. From
/// Rollbacking on every cluster either holds its own credentials on the target or goes back
/// to the source, and the token stays on no hub longer than that.
pub(super) fn source_carries_token(stage: TaskStage) -> bool {
    matches!(stage, TaskStage::Deploying | TaskStage::Registering)
}

pub(super) fn err_suffix(e: Option<String>) -> String {
    e.map(|e| format!(" (a work reports: {e})"))
        .unwrap_or_default()
}

/// The bootstrap token's Secret is missing while a stage needs it: a moment's miss (the
/// managed-serviceaccount addon re-creating or rotating it) is waited for, woken by the
/// ManagedServiceAccount's status; only when it stays missing past the stage's timeout does
/// the migration roll back.
pub(super) fn token_missing(
    timed_out: bool,
    timeout: Duration,
    condition: &'static str,
) -> Outcome {
    if timed_out {
        return Outcome::Rollback(
            None,
            reasons::TIMEOUT,
            "the bootstrap token's Secret stayed missing past the stage timeout".into(),
        );
    }
    Outcome::Wait(
        Said::no(
            condition,
            reasons::WAITING,
            "waiting for the bootstrap token's Secret (the managed-serviceaccount addon re-creates it)",
        ),
        Wake::Deadline(timeout),
    )
}
