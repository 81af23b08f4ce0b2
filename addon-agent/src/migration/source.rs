//! The source role: deploy, release, roll back and detach.

use super::*;

pub(super) async fn source_deploy(
    ctx: &Ctx,
    task: &MigrationTask,
    names: &[String],
) -> Result<Report, Error> {
    let (present, name) = bootstrap_in_place(ctx, task, names);
    // The clusters are annotated now, so their klusterlets have the target's bootstrap
    // kubeconfig by the time Registering starts.
    let states = source_register_all(ctx, task, names).await?;
    // And the controllers of the objects they carry paused, before any switches.
    let planned: Vec<Planned> = names
        .iter()
        .filter_map(|n| {
            let mc = get(&ctx.caches.clusters, None, n).filter(|mc| to_pause(task, mc))?;
            Some(Planned::new(n, Some(&mc), vec![Effect::PauseObjects]))
        })
        .collect();
    let pausing = planned.len();
    apply_all(ctx, task, planned).await?;
    let done = present && pausing == 0;
    Ok(Report {
        states,
        state: StageState::done_if(done),
        message: if !present {
            format!("waiting for {name}")
        } else if pausing > 0 {
            format!("pausing the objects {pausing} clusters carry")
        } else {
            format!("{name} in place")
        },
        ..Default::default()
    })
}

/// Whether every bootstrap identity's secret (plain OCM) or KlusterletConfig is on this hub;
/// the first missing one's description when not.
fn bootstrap_in_place(ctx: &Ctx, task: &MigrationTask, names: &[String]) -> (bool, String) {
    let spec = &task.spec;
    // One object per identity: the first cluster of each names it.
    let mut firsts: Vec<usize> = (0..names.len()).collect();
    firsts.dedup_by_key(|i| spec.identity_at(*i));
    for i in firsts {
        if plain(task) {
            let secret = spec.bootstrap_secret_at(i).unwrap_or_default();
            if bootstrap_secret_data(ctx, task, &secret).is_none() {
                return (false, format!("bootstrap secret {secret}"));
            }
        } else {
            let name = spec.klusterlet_config_at(i).unwrap_or_default();
            if get(&ctx.caches.bootstrap_configs, None, &name).is_none() {
                return (false, format!("KlusterletConfig {name}"));
            }
        }
    }
    let what = if plain(task) {
        "bootstrap secrets"
    } else {
        "KlusterletConfigs"
    };
    (true, format!("{what} of {} clusters", names.len()))
}

pub(super) async fn source_register(
    ctx: &Ctx,
    task: &MigrationTask,
    names: &[String],
) -> Result<Report, Error> {
    let states = source_register_all(ctx, task, names).await?;
    let switching = states
        .iter()
        .filter(|s| **s == ClusterState::Switching)
        .count();
    Ok(Report {
        message: format!("{switching} of {} clusters released", names.len()),
        state: StageState::Running,
        states,
        ..Default::default()
    })
}

/// Observes, decides ([`register`]) and acts for each cluster of the source while clusters
/// register.
async fn source_register_all(
    ctx: &Ctx,
    task: &MigrationTask,
    names: &[String],
) -> Result<Vec<ClusterState>, Error> {
    let spec = &task.spec;
    let released = spec.released_names();
    let mut derived = DerivedConfigs::default();
    let mut states = Vec::with_capacity(names.len());
    let mut planned = Vec::with_capacity(names.len());
    for (index, name) in names.iter().enumerate() {
        let Some(mc) = get(&ctx.caches.clusters, None, name) else {
            states.push(ClusterState::NotFound);
            continue;
        };
        let release = released.contains(name.as_str());
        let config = selected_config(task, index, release);
        // A cluster with a KlusterletConfig of its own selects one derived from it, made
        // here from the migration's (each bootstrap identity's own names its secret alone).
        let derived_ready = match (
            config.as_deref(),
            flight::original(mc.annotations()).klusterlet_config,
        ) {
            (Some(base), Some(own)) => derived.ensure(ctx, task, base, &own).await?,
            _ => true,
        };
        let switched = plain(task) && !release && klusterlet_done(ctx, task, name, true);
        let delivered = bootstrap_delivered(
            &ctx.caches.import_works,
            name,
            &spec.bootstrap_secret_at(index).unwrap_or_default(),
        );
        let configured = if plain(task) { switched } else { delivered };
        let seen = Registering {
            mc: &mc,
            release,
            config: config.as_deref(),
            derived_ready,
            switched,
            delivered,
            restarted: restarted_since_configured(ctx, task, &mc, configured, release),
        };
        let (state, effects) = register(task, &seen);
        planned.push(Planned::new(name, Some(&mc), effects));
        states.push(state);
    }
    apply_all(ctx, task, planned).await?;
    Ok(states)
}

/// Whether the cluster's klusterlet restarted since its settings were put in place: its lease
/// renewed since ([`renewed_since_configured`]), or, on an ACM hub, by a process started
/// after its import work changed ([`restarts`]: the renewal the baseline took in before the
/// work was seen applied).
pub(super) fn restarted_since_configured(
    ctx: &Ctx,
    task: &MigrationTask,
    mc: &ManagedCluster,
    configured: bool,
    released: bool,
) -> bool {
    let name = mc.name_any();
    let period = std::time::Duration::from_secs(
        mc.spec
            .lease_duration_seconds
            .filter(|s| *s > 0)
            .map_or(60, |s| s.unsigned_abs().into()),
    );
    if renewed_since_configured(ctx, task, &name, configured) {
        return true;
    }
    let started = configured
        && !plain(task)
        && super::restarts::started_since_work_changed(&ctx.caches.lives, &name, period);
    if started && !released {
        tracing::debug!(cluster = %name, "restarted: renewed by a process started after its import work changed, before the work was seen applied");
    }
    started
}

/// Whether the cluster's lease here was renewed since its settings were put in place: the
/// renewal last seen before this agent saw it `configured` is kept (by value: the klusterlet
/// writes it with the cluster's clock, which need not agree with this hub's), and any other
/// counts, so that a renewal by the restarted klusterlet that this agent sees before the work
/// that configured it counts too. A cluster first seen configured (this agent restarted) waits
/// for the next renewal.
fn renewed_since_configured(
    ctx: &Ctx,
    task: &MigrationTask,
    cluster: &str,
    configured: bool,
) -> bool {
    let key = (task.name_any(), cluster.to_owned());
    let renewed = get(&ctx.caches.leases, Some(cluster), CLUSTER_LEASE)
        .and_then(|l| l.spec.clone())
        .and_then(|s| s.renew_time)
        .map(|t| t.0);
    let Ok(mut seen) = ctx.configured.lock() else {
        return false;
    };
    match (configured, seen.get(&key)) {
        (true, Some(base)) => renewed != *base,
        // Not configured yet (the baseline moves with each renewal), or first seen configured.
        _ => {
            seen.insert(key, renewed);
            false
        }
    }
}

pub(super) fn lease_renewed_since(ctx: &Ctx, cluster: &str, since: &str) -> bool {
    let Ok(since) = since.parse::<jiff::Timestamp>() else {
        return false;
    };
    get(&ctx.caches.leases, Some(cluster), CLUSTER_LEASE)
        .and_then(|l| l.spec.clone())
        .and_then(|s| s.renew_time)
        .is_some_and(|t| t.0 > since)
}

/// Marks a cluster as awaited (its lease renewals wake the handler) or not.
pub(super) fn await_return(ctx: &Ctx, cluster: &str, awaited: bool) {
    if let Ok(mut a) = ctx.caches.awaited.lock() {
        if awaited {
            a.insert(cluster.to_owned());
        } else {
            a.remove(cluster);
        }
    }
}

/// Takes back the clusters of the task's rollback list: accepted again, the migration's
/// annotations gone, and back once Available with a lease renewed after the restore (the
/// `RESTORED_AT` mark). `finish` (cleanup) also removes the mark of each cluster that is back;
/// one without the mark and without anything to restore is back already.
pub(super) async fn source_rollback(
    ctx: &Ctx,
    task: &MigrationTask,
    names: &[String],
) -> Result<Report, Error> {
    let rollback = task.spec.rollback_names();
    let mut states = Vec::with_capacity(names.len());
    let mut planned = Vec::with_capacity(rollback.len());
    for name in names {
        if !rollback.contains(name.as_str()) {
            states.push(ClusterState::Pending);
            continue;
        }
        let (state, one) = source_take_back(ctx, task, name, false).await?;
        states.push(state);
        planned.push(one);
    }
    apply_all(ctx, task, planned).await?;
    Ok(rollback_report(
        names,
        states,
        &rollback,
        "clusters back on this hub",
    ))
}

/// Observes, decides ([`take_back`]) and acts for one cluster the source takes back.
async fn source_take_back<'a>(
    ctx: &Ctx,
    task: &MigrationTask,
    name: &'a str,
    finish: bool,
) -> Result<(ClusterState, Planned<'a>), Error> {
    let Some(mc) = get(&ctx.caches.clusters, None, name) else {
        return Ok((ClusterState::NotFound, Planned::new(name, None, Vec::new())));
    };
    // Plain OCM: the Klusterlet's own settings go back too (its work applies them once the
    // cluster is connected here again).
    let settings_back = !plain(task) || klusterlet_restore(ctx, task, name).await?;
    let seen = Returning {
        mc: &mc,
        settings_back,
        renewed_since_restore: mc
            .annotations()
            .get(RESTORED_AT)
            .is_some_and(|at| lease_renewed_since(ctx, name, at)),
        finish,
    };
    let (state, effects) = take_back(task, &seen, &jiff::Timestamp::now().to_string());
    Ok((state, Planned::new(name, Some(&mc), effects)))
}

pub(super) async fn source_clean(
    ctx: &Ctx,
    task: &MigrationTask,
    names: &[String],
) -> Result<Report, Error> {
    let detach = task.spec.detach_names();
    let rollback = task.spec.rollback_names();
    let mut states = Vec::with_capacity(names.len());
    let mut planned = Vec::with_capacity(names.len());
    for name in names {
        // The clusters that stay are taken back (again, or for the first time when the
        // rollback ran out of time) before their marks go: none is left refused by both hubs.
        let (state, one) = if rollback.contains(name.as_str()) {
            source_take_back(ctx, task, name, true).await?
        } else {
            let mc = get(&ctx.caches.clusters, None, name);
            // A hub with KlusterletConfigs (ACM) runs the import controller; plain OCM does not.
            let (state, effects) =
                let_go(detach.contains(name.as_str()), mc.as_deref(), !plain(task));
            (state, Planned::new(name, mc.as_deref(), effects))
        };
        planned.push(one);
        states.push(state);
    }
    apply_all(ctx, task, planned).await?;
    let left = states
        .iter()
        .filter(|s| matches!(s, ClusterState::Switching | ClusterState::RollingBack))
        .count();
    // No cluster selects them any more once none is switching: one rolling back selects its
    // own again, and may never come back (the manager then gives up on it and removes the
    // task). A report of this stage done says they went already (it is written only after
    // they did): the hub is not asked again at every later event.
    let switching = states.contains(&ClusterState::Switching);
    if !switching && !cleaned_already(task, own_status(ctx, task, std::time::Instant::now())) {
        remove_derived_configs(ctx, task).await?;
    }
    Ok(Report {
        message: format!(
            "{} detached, {left} to go",
            states
                .iter()
                .filter(|s| **s == ClusterState::Detached)
                .count()
        ),
        state: StageState::done_if(left == 0),
        states,
        ..Default::default()
    })
}

/// Whether the task's status (`own`: this agent's last write of it, if the cache is behind it)
/// reports this revision's Cleaning done: the derived KlusterletConfigs went before that report
/// was written.
pub(super) fn cleaned_already(task: &MigrationTask, own: Option<MigrationTaskStatus>) -> bool {
    reported(task, own, TaskStage::Cleaning, &[StageState::Succeeded])
}
