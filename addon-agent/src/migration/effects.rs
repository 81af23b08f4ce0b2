//! What a role does to one cluster, as values: each per-cluster decision is a pure function of
//! what the handler observed, returning the cluster's state and the [`Effect`]s to carry out,
//! and [`apply`] is the one executor. The stage report follows from the states.

use super::*;

/// One change to a cluster, or to what the handler waits for.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Effect {
    /// Merge-patch the ManagedCluster.
    Patch(Value),
    /// Merge-patch the ManagedCluster so this hub no longer accepts it, logging why.
    Refuse(Value, &'static str),
    /// Wake on (or stop waking on) the cluster's lease renewals.
    Await(bool),
    /// Delete the ManagedCluster: the hub lets go of a moved cluster.
    Detach,
    /// Target: delete the ManagedCluster this migration pre-created for a cluster that did not
    /// arrive.
    RemoveCopy,
    /// Force-delete the works left in the cluster's namespace (nothing connected removes them).
    ReleaseWorks,
    /// Target: pre-create the ManagedCluster from what the cluster carries.
    Precreate,
    /// Target: carry the cluster's addons and KlusterletAddonConfig over.
    CarryAddons,
    /// Target: create the objects the cluster carries over (`carryOver`) in its namespace, and
    /// mark its ManagedCluster once they are all there.
    CarryObjects,
    /// Source: pause the controllers of the objects the cluster carries over, and mark it.
    PauseObjects,
    /// Lift the migration's pauses from the cluster's objects (the source's when it goes back,
    /// the target's copies once it registered there), and mark it.
    ResumeObjects,
    /// Approve the bootstrap CSR of this name.
    Approve(String, Approval),
    /// Plain OCM target: drive the cluster's klusterlet work toward this hub's own settings.
    Settle,
    /// Plain OCM source: drive the cluster's klusterlet work toward the MultipleHubs settings.
    Switch,
    /// Change the ManagedCluster's taints ([`taint`]): a conflict is no failure, the decision
    /// is taken again on the newer version.
    Taint(TaintChange),
}

/// A change of a cluster's taints, as [`taint`] decided it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct TaintChange {
    /// The merge patch that writes it: the new list, with the uid and resourceVersion read
    /// (and the marks [`with_taint`] merges in).
    pub(super) patch: Value,
    /// When the change only takes the migration's taint off (and maybe its marks, below):
    /// where that taint is in the list read, and the migration (its value), for
    /// [`Self::json_patch`].
    pub(super) removes: Option<(Vec<usize>, String)>,
    /// The annotations that go with the taint's removal ([`unmark`]): each present when read.
    pub(super) unmarks: Vec<String>,
}

impl TaintChange {
    /// The removal of the migration's taint as a JSON patch: it tests the uid, and that each
    /// element it removes is the migration's taint, rather than the whole object's
    /// resourceVersion. Another writer's change of the list before it (an element moved, the
    /// cluster recreated) still fails it (422), and nothing but the migration's taint is
    /// touched; a write of the cluster's status does not fail it (the hub's registration
    /// controller writes the status of a joining cluster every few seconds, and each such
    /// write fails the resourceVersion's precondition: a request and a decision again). The
    /// marks going with it are removed by name (one removed meanwhile fails it: 422).
    pub(super) fn json_patch(&self) -> Option<json_patch::Patch> {
        use json_patch::jsonptr::PointerBuf;
        use json_patch::{PatchOperation, RemoveOperation, TestOperation};
        let (at, migration) = self.removes.as_ref()?;
        let uid = self.patch.pointer("/metadata/uid")?;
        let test = |path: PointerBuf, value: &str| {
            PatchOperation::Test(TestOperation {
                path,
                value: Value::from(value),
            })
        };
        let mut ops = vec![test(
            PointerBuf::from_tokens(["metadata", "uid"]),
            uid.as_str()?,
        )];
        // From the last, so that each index still points where it was read.
        let mut at = at.clone();
        at.sort_unstable();
        for i in at.into_iter().rev() {
            let path = PointerBuf::from_tokens(["spec", "taints"]).with_trailing_token(i);
            ops.push(test(
                path.with_trailing_token("key"),
                names::taints::MIGRATING,
            ));
            ops.push(test(path.with_trailing_token("value"), migration));
            ops.push(PatchOperation::Remove(RemoveOperation { path }));
        }
        for key in &self.unmarks {
            let path = PointerBuf::from_tokens(["metadata", "annotations", key.as_str()]);
            ops.push(PatchOperation::Remove(RemoveOperation { path }));
        }
        Some(json_patch::Patch(ops))
    }
}

impl std::ops::Index<&str> for TaintChange {
    type Output = Value;

    /// A field of the merge patch.
    fn index(&self, key: &str) -> &Value {
        &self.patch[key]
    }
}

/// The migrating taint of `mc` put on (`present`) or taken off, as an effect, when that changes
/// its taints ([`flight::taints`]). The whole list goes with the uid and resourceVersion it was
/// read at, as upstream's patcher sends them (sdk-go `pkg/patcher/patcher.go`): a list changed
/// since by another writer (the hub's taint controller) fails with a conflict instead of being
/// overwritten. A removal that goes alone is sent as [`TaintChange::json_patch`] instead.
pub(super) fn taint(mc: &ManagedCluster, migration: &str, present: bool) -> Option<Effect> {
    let list = flight::taints(
        mc.spec.taints.as_deref().unwrap_or_default(),
        migration,
        present,
    )?;
    let mut patch = json!({"spec": {"taints": list}});
    if let (Some(uid), Some(version)) = (mc.uid(), mc.resource_version()) {
        patch["metadata"] = json!({"uid": uid, "resourceVersion": version});
    }
    // A removal: where the migration's taint is in the list (what `flight::taints` leaves out).
    let current = mc.spec.taints.as_deref().unwrap_or_default();
    let removes = (!present).then(|| {
        let at = current
            .iter()
            .enumerate()
            .filter(|(_, t)| {
                t.key == names::taints::MIGRATING && t.value.as_deref() == Some(migration)
            })
            .map(|(i, _)| i)
            .collect::<Vec<_>>();
        (at, migration.to_owned())
    });
    Some(Effect::Taint(TaintChange {
        patch,
        removes,
        unmarks: Vec::new(),
    }))
}

/// Whether the hub's own availability taints are on the cluster (unavailable, unreachable).
fn hub_tainted(mc: &ManagedCluster) -> bool {
    mc.spec
        .taints
        .iter()
        .flatten()
        .any(|t| [names::taints::UNAVAILABLE, names::taints::UNREACHABLE].contains(&t.key.as_str()))
}

/// `patch` and the taint change as one write of the ManagedCluster. A taint change goes with the
/// resourceVersion it was read at ([`taint`]): any write of the cluster before it in the same
/// list makes it fail with a conflict, every time, and the taint waits for the next reconcile
/// (a write and a retry more per cluster). Merged, the patch shares that precondition: a
/// conflict means the decision is taken again on the newer version.
pub(super) fn with_taint(patch: Value, taint: Option<Effect>) -> Effect {
    match taint {
        Some(Effect::Taint(mut t)) => {
            merge_objects(&mut t.patch, patch);
            // No longer the taint alone: written with the resourceVersion.
            t.removes = None;
            t.unmarks.clear();
            Effect::Taint(t)
        }
        _ => Effect::Patch(patch),
    }
}

/// Merges `from` into `into`, objects key by key (`from` wins elsewhere).
fn merge_objects(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (k, v) in from {
                merge_objects(into.entry(k).or_insert(Value::Null), v);
            }
        }
        (into, from) => *into = from,
    }
}

/// `effects` with the taint changes first, each list's order kept otherwise: a taint change
/// after another write of the same cluster would always conflict ([`with_taint`]).
pub(super) fn taint_first(effects: Vec<Effect>) -> Vec<Effect> {
    let (mut first, rest): (Vec<Effect>, Vec<Effect>) = effects
        .into_iter()
        .partition(|e| matches!(e, Effect::Taint(_)));
    first.extend(rest);
    first
}

/// How many clusters' effects are carried out at once: a stage writes to hundreds of clusters,
/// one request each, and the hub serves many at a time.
pub(super) const CONCURRENCY: usize = 16;

/// The uid and resourceVersion of a cluster as a decision read it: no uid and no version when
/// it was not there; `None` for a copy without a version (nothing to compare with).
pub(super) type Read = Option<(Option<String>, String)>;

/// What a decision read of cluster `mc` ([`Read`]).
pub(super) fn read(mc: Option<&ManagedCluster>) -> Read {
    match mc {
        Some(mc) => Some((mc.uid(), mc.resource_version()?)),
        None => Some((None, String::new())),
    }
}

/// One cluster's effects, with the cluster as the decision read it: [`apply`] judges its own
/// earlier writes against that copy, not against the cache's copy when it acts (the cache may
/// have caught up in between, and a decision on the older copy would then repeat the write).
#[derive(Debug)]
pub(super) struct Planned<'a> {
    pub(super) cluster: &'a str,
    pub(super) read: Read,
    pub(super) effects: Vec<Effect>,
}

impl<'a> Planned<'a> {
    pub(super) fn new(cluster: &'a str, mc: Option<&ManagedCluster>, effects: Vec<Effect>) -> Self {
        Self {
            cluster,
            read: read(mc),
            effects,
        }
    }
}

/// Carries out each cluster's effects ([`apply`], each cluster's in order), up to
/// [`CONCURRENCY`] clusters at once; every cluster is tried, and the first error is returned.
pub(super) async fn apply_all(
    ctx: &Ctx,
    task: &MigrationTask,
    planned: Vec<Planned<'_>>,
) -> Result<(), Error> {
    // (Boxed: a stream of borrowing futures inside the reconcile future is otherwise not
    // provably Send for every lifetime.)
    type Applying<'a> = std::pin::Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>>;
    let applying: Vec<Applying<'_>> = planned
        .into_iter()
        .filter(|p| !p.effects.is_empty())
        .map(|p| Box::pin(apply(ctx, task, p)) as Applying<'_>)
        .collect();
    let mut running = futures::stream::iter(applying).buffer_unordered(CONCURRENCY);
    let mut first = None;
    while let Some(done) = running.next().await {
        if let Err(e) = done {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// Carries out `planned`'s effects on its cluster (of `task`), in order, unless the decision
/// read the cluster as it was before this agent's last write of it.
pub(super) async fn apply(
    ctx: &Ctx,
    task: &MigrationTask,
    planned: Planned<'_>,
) -> Result<(), Error> {
    let Planned {
        cluster,
        read,
        effects,
    } = planned;
    let now = std::time::Instant::now();
    // `read`: the version of the cluster these effects were decided on, the copy a taint
    // change among them was made from too (a cluster that was not there is no version, "",
    // which its pre-creation by this agent is ahead of until the decision reads it there).
    if let Some((uid, rv)) = &read
        && ctx
            .own_cluster_writes
            .lock()
            .is_ok_and(|mut own| own.ahead_of(cluster, uid.as_deref(), rv, now).is_some())
    {
        // Decided on the cluster as it was before this agent's last write of it: that write
        // stands, and the cluster is decided on again once the cache shows it.
        tracing::debug!(cluster = %cluster, "own write not seen yet; deciding again once it is");
        if let Ok(mut again) = ctx.again.lock() {
            again.insert(task.name_any());
        }
        return Ok(());
    }
    // The cluster's version after this agent's last write of it here, recorded even when a
    // later effect fails (the next reconcile would otherwise repeat the write).
    let mut wrote = None;
    let uid = read.as_ref().and_then(|(uid, _)| uid.as_deref());
    let done = carry_out(ctx, task, cluster, uid, effects, &mut wrote).await;
    // A write that changed the cluster: until the cache shows it, decisions on the cache
    // would only repeat it.
    if let (Some((uid, read)), Some(wrote)) = (&read, &wrote)
        && let Ok(mut own) = ctx.own_cluster_writes.lock()
    {
        own.record(cluster, uid.as_deref(), (read, wrote), (), now);
    }
    done
}

/// Carries out `effects` on `cluster` (of `uid`, as the decision read it) in order (taint
/// changes first), up to the first that fails; `wrote`: the cluster's version after the last
/// write of it that changed it.
async fn carry_out(
    ctx: &Ctx,
    task: &MigrationTask,
    cluster: &str,
    uid: Option<&str>,
    effects: Vec<Effect>,
    wrote: &mut Option<String>,
) -> Result<(), Error> {
    for effect in taint_first(effects) {
        match effect {
            Effect::Patch(patch) => {
                *wrote = patch_cluster(ctx, cluster, patch).await?.or(wrote.take())
            }
            Effect::Refuse(patch, why) => {
                *wrote = patch_cluster(ctx, cluster, patch).await?.or(wrote.take());
                tracing::info!(cluster = %cluster, "{why}");
            }
            Effect::Await(awaited) => await_return(ctx, cluster, awaited),
            Effect::Detach | Effect::RemoveCopy => {
                if effect == Effect::RemoveCopy {
                    remove_carried(ctx, task, cluster).await?;
                }
                let api: Api<ManagedCluster> = Api::all(ctx.client.clone());
                match api.delete(cluster, &DeleteParams::default()).await {
                    // Held by finalizers (the hub's own cleanup): marked for deletion at a
                    // new version, which the cache is to show before this cluster is decided
                    // on again (a decision on the copy before would delete it again).
                    Ok(answer) => {
                        *wrote = answer
                            .left()
                            .and_then(|deleting| deleting.resource_version())
                            .or(wrote.take());
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => {
                        return Err(ctx_err(format!("deleting ManagedCluster {cluster}"))(e).into());
                    }
                }
                if effect == Effect::Detach {
                    tracing::info!(cluster = %cluster, "detached the moved cluster from this hub");
                } else {
                    tracing::info!(cluster = %cluster, "removed pre-created ManagedCluster");
                }
            }
            Effect::ReleaseWorks => release_works(ctx, cluster).await?,
            Effect::Precreate => *wrote = precreate(ctx, task, cluster).await?.or(wrote.take()),
            Effect::CarryAddons => {
                if carry_addons(ctx, task, cluster).await?
                    && let Some(uid) = uid
                    && let Ok(mut carried) = ctx.addons_carried.lock()
                {
                    carried
                        .entry(task.name_any())
                        .or_default()
                        .insert(cluster.to_owned(), uid.to_owned());
                }
            }
            Effect::CarryObjects => carry_objects(ctx, task, cluster).await?,
            Effect::PauseObjects => pause_on_source(ctx, task, cluster).await?,
            Effect::ResumeObjects => resume(ctx, task, cluster).await?,
            Effect::Approve(csr, why) => approve_csr(ctx, &csr, why).await?,
            Effect::Settle => {
                klusterlet_settle(ctx, task, cluster).await?;
            }
            Effect::Switch => {
                klusterlet_switch(ctx, task, cluster).await?;
            }
            Effect::Taint(change) => {
                // The taint's removal alone goes as a JSON patch that tests what it removes,
                // anything else with the resourceVersion read. Refused (the list or the
                // cluster changed meanwhile), the next reconcile decides again on the newer
                // version.
                let (patch, tolerated) = match change.json_patch() {
                    // 422: a test of the JSON patch failed.
                    Some(ops) => (Patch::Json(ops), &[404, 409, 422][..]),
                    None => (Patch::Merge(change.patch), &[404, 409][..]),
                };
                match patch_cluster_unless(ctx, cluster, patch, tolerated).await? {
                    Patched::Applied(rv) => *wrote = rv.or(wrote.take()),
                    Patched::Refused(code) => {
                        tracing::debug!(cluster = %cluster, code, "changed meanwhile; deciding again");
                        if let Ok(mut again) = ctx.again.lock() {
                            again.insert(task.name_any());
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// What the source observed of a cluster it takes back.
#[derive(Clone, Debug)]
pub(super) struct Returning<'a> {
    pub(super) mc: &'a ManagedCluster,
    /// Plain OCM: the Klusterlet's own settings are back (always true on ACM).
    pub(super) settings_back: bool,
    /// Its lease was renewed after the restore mark (false without one).
    pub(super) renewed_since_restore: bool,
    /// Cleaning: the restore mark goes once the cluster is back.
    pub(super) finish: bool,
}

/// Taking a cluster back on the source: accepted again with the migration's annotations gone
/// and the time marked (`RESTORED_AT`), then back once Available with a lease renewed since
/// (and, finishing, the mark removed). One without the mark and without anything to restore is
/// back already. `now`: the time to mark.
pub(super) fn take_back(
    task: &MigrationTask,
    seen: &Returning,
    now: &str,
) -> (ClusterState, Vec<Effect>) {
    let (state, mut effects) = take_back_cluster(task, seen, now);
    // Its objects' controllers act again here, first (not back until they do).
    if to_resume_on_source(task, seen.mc) {
        effects.insert(0, Effect::ResumeObjects);
        return (ClusterState::RollingBack, effects);
    }
    (state, effects)
}

/// [`take_back`] of the ManagedCluster itself.
fn take_back_cluster(
    task: &MigrationTask,
    seen: &Returning,
    now: &str,
) -> (ClusterState, Vec<Effect>) {
    let mc = seen.mc;
    let restored_at = mc.annotations().get(RESTORED_AT);
    // Placements may choose it again.
    let untaint = taint(mc, task.spec.key(), false);
    if (restored_at.is_none() && !seen.finish)
        || !mc.spec.hub_accepts_client
        || restore_needed(mc, task)
    {
        let mut patch = flight::patch(&flight::restored(mc.annotations(), &|k| ours(task, k)));
        patch["metadata"]["annotations"][RESTORED_AT] =
            json!(restored_at.map_or(now, String::as_str));
        patch["spec"] = json!({"hubAcceptsClient": true});
        // The taint first: sent after the restore it would always conflict ([`with_taint`]);
        // the restore itself goes unconditionally.
        let mut effects: Vec<Effect> = untaint.into_iter().collect();
        effects.extend([Effect::Patch(patch), Effect::Await(true)]);
        return (ClusterState::RollingBack, effects);
    }
    if let Some(untaint) = untaint {
        return (
            ClusterState::RollingBack,
            vec![untaint, Effect::Await(true)],
        );
    }
    if restored_at.is_none() {
        let state = if seen.settings_back {
            ClusterState::RolledBack
        } else {
            ClusterState::RollingBack
        };
        return (state, vec![]);
    }
    let back = seen.settings_back && available(mc) && seen.renewed_since_restore;
    let mut effects = vec![Effect::Await(!back)];
    if back && seen.finish {
        effects.push(Effect::Patch(
            json!({"metadata": {"annotations": {RESTORED_AT: Value::Null}}}),
        ));
    }
    let state = if back {
        ClusterState::RolledBack
    } else {
        ClusterState::RollingBack
    };
    (state, effects)
}

/// Cleaning on the source, for a cluster not taken back: a moved cluster the manager says to
/// detach is deleted here (once), its works released where nothing else does it, and is
/// `Detached` once gone, or once its deletion is under way and the hub finishes it without
/// this agent; any other (arrived,
/// not confirmed yet) is left exactly as it is, its marks keeping auto-import and its own
/// KlusterletConfig from pulling it back meanwhile.
///
/// `import_controller`: the hub runs ACM's import controller, which force-deletes the works
/// (and addons) of a deleted cluster it no longer accepts or that is not Available
/// (stolostron/managedcluster-import-controller `pkg/controller/resourcecleanup/
/// resourcecleanup_controller.go`, `clusterNeedForceDelete`; a moved cluster is refused here,
/// and its lease here runs out should someone accept it again), and then lifts its own
/// finalizers; the registration GC's and cleanup finalizers follow from it (ocm
/// `pkg/registration/hub/gc`, requeued every 5 s while works remain). There the works are
/// left to it (two requests a cluster fewer, and the manager grants this agent nothing in
/// the clusters' namespaces) and the cluster counts as detached as soon as it is deleting:
/// nothing of the migration's is needed for the rest, and waiting for the hub's GC cost
/// every migration about 5 s. On plain OCM no controller force-deletes them (the work agent
/// that would finish them now serves the target): they are released here, and the cluster
/// is detached once gone.
pub(super) fn let_go(
    detach: bool,
    mc: Option<&ManagedCluster>,
    import_controller: bool,
) -> (ClusterState, Vec<Effect>) {
    match (detach, mc) {
        (true, None) => (ClusterState::Detached, vec![]),
        (true, Some(m)) => {
            let deleting = m.metadata.deletion_timestamp.is_some();
            if deleting && import_controller {
                return (ClusterState::Detached, vec![]);
            }
            let mut effects = vec![];
            if !deleting {
                effects.push(Effect::Detach);
            }
            if !import_controller {
                effects.push(Effect::ReleaseWorks);
            }
            (ClusterState::Switching, effects)
        }
        (false, _) => (ClusterState::Switching, vec![]),
    }
}

/// What the source observed of a cluster while clusters register.
#[derive(Clone, Debug)]
pub(super) struct Registering<'a> {
    pub(super) mc: &'a ManagedCluster,
    /// The manager released it.
    pub(super) release: bool,
    /// The KlusterletConfig it is to select ([`selected_config`]).
    pub(super) config: Option<&'a str>,
    /// Whether the KlusterletConfig derived from its own is in place (true when it has none).
    pub(super) derived_ready: bool,
    /// Plain OCM, not released: whether its klusterlet work carries the MultipleHubs settings.
    pub(super) switched: bool,
    /// Its klusterlet work carries the target's bootstrap kubeconfig.
    pub(super) delivered: bool,
    /// Its klusterlet renewed its lease here since this agent first saw its settings in place
    /// (`switched` or `delivered`): it runs with them.
    pub(super) restarted: bool,
}

/// Whether a cluster is held where it is (`block-move`) though not released.
pub(super) fn held(mc: &ManagedCluster, release: bool) -> bool {
    mc.annotations().contains_key(BLOCK_MOVE) && !release
}

/// The KlusterletConfig a cluster selects while clusters register: none on plain OCM (the
/// migrating marker alone); on a hub of the older shape, which lists the target alone, only
/// once released, when it stops being accepted here once its klusterlet has it.
pub(super) fn selected_config(task: &MigrationTask, index: usize, release: bool) -> Option<String> {
    if plain(task) || (legacy(task) && !release) {
        None
    } else {
        task.spec.klusterlet_config_at(index)
    }
}

/// A source cluster while clusters register: made ready like the others (a held one too, so
/// that it can switch as soon as it is let go), marked in flight with the KlusterletConfig it
/// selects, and once released refused here (on the older shape only once its klusterlet has
/// the target's bootstrap kubeconfig) and frozen against auto-import (ACM).
pub(super) fn register(task: &MigrationTask, seen: &Registering) -> (ClusterState, Vec<Effect>) {
    let mc = seen.mc;
    let held = held(mc, seen.release);
    if held && plain(task) {
        return (ClusterState::Blocked, vec![Effect::Switch]);
    }
    if !seen.derived_ready {
        let state = if held {
            ClusterState::Blocked
        } else {
            ClusterState::Waiting
        };
        return (state, vec![]);
    }
    let accepted = mc.spec.hub_accepts_client;
    let refuse = seen.release && accepted && (!legacy(task) || seen.delivered);
    // Released on an ACM hub: auto-import must leave it alone from now on.
    let freeze = seen.release && !plain(task) && (refuse || !accepted);
    let changes = flight::in_flight(
        mc.annotations(),
        task.spec.key(),
        seen.config,
        task.spec.lift_disable_auto_import == Some(true),
        freeze,
    );
    // Placements choose it no more while it moves: the taint goes with the marks, in one write.
    let taint = taint(mc, task.spec.key(), true);
    let mut effects = Vec::new();
    if refuse {
        let mut patch = flight::patch(&changes);
        patch["spec"] = json!({"hubAcceptsClient": false});
        effects.extend(taint);
        effects.push(Effect::Refuse(
            patch,
            "released: this hub no longer accepts it",
        ));
    } else if !flight::settled(mc.annotations(), &changes) {
        effects.push(with_taint(flight::patch(&changes), taint));
    } else {
        effects.extend(taint);
    }
    // With its settings in place (the MultipleHubs gate and the target's bootstrap kubeconfig
    // in its Klusterlet), a cluster is ready once its klusterlet runs with them. The change
    // restarts the klusterlet; released before the new process watches its ManagedCluster
    // here, it may find itself no longer accepted only after the hub has withdrawn its access
    // (the hub revokes it as it stops accepting the cluster), see nothing, and leave only at
    // its hub connection timeout (ocm `hub_accept_controller.go`, `hub_timeout_controller.go`;
    // the new process renews its lease first, `lease_controller.go`). Its lease renewals wake
    // this agent meanwhile. (The older shape lists the target alone and switches the
    // klusterlet by the change itself.)
    let configured = if plain(task) {
        seen.switched
    } else {
        seen.delivered
    };
    let state = if seen.release {
        ClusterState::Switching
    } else if held {
        ClusterState::Blocked
    } else if legacy(task) || (configured && seen.restarted) {
        ClusterState::Ready
    } else {
        ClusterState::Waiting
    };
    if plain(task) && !seen.release {
        effects.push(Effect::Switch);
    }
    if !seen.release && !held && !legacy(task) && configured {
        effects.push(Effect::Await(!seen.restarted));
    }
    (state, effects)
}

/// What the target observed of a cluster while clusters register.
#[derive(Clone, Debug)]
pub(super) struct Arriving<'a> {
    pub(super) mc: Option<&'a ManagedCluster>,
    /// Registering (not Deploying): CSRs are admitted, addons carried.
    pub(super) registering: bool,
    /// The manager released it.
    pub(super) released: bool,
    /// When this hub saw it released (recorded in the task's status).
    pub(super) released_at: Option<jiff::Timestamp>,
    /// The Klusterlet is settled by a klusterlet work here (plain OCM delivery, or a hub
    /// without an import controller to take over).
    pub(super) settles: bool,
    /// That work carries this hub's own settings, applied.
    pub(super) settled: bool,
    /// An import controller serves this hub: its import work must have taken over.
    pub(super) acm_target: bool,
    pub(super) import_took_over: bool,
    /// The bootstrap CSRs of the cluster's own bootstrap identity.
    pub(super) requests: &'a [admission::Request<'a>],
    pub(super) now: jiff::Timestamp,
    /// The cluster carries objects over (`carryOver`).
    pub(super) carries_objects: bool,
    /// This agent has put what it carries of addons (ManagedClusterAddOns and
    /// KlusterletAddonConfig) on this very ManagedCluster (by uid) since it started.
    pub(super) addons_carried: bool,
    /// The task's status already says it arrived here (reported Available while it carried
    /// this migration's marks): the marks may go, and it stays this migration's without them.
    pub(super) reported_arrived: bool,
}

/// A target cluster while clusters register: pre-created when missing; refused when a
/// ManagedCluster of that name is not this migration's; registered once nothing ties it to
/// the migration's bootstrap identity any more (its token is revoked in cleanup): on an ACM
/// hub once this hub's import has taken over its klusterlet, on a plain OCM hub once its
/// Klusterlet is settled here. Its bootstrap CSR is approved only once it was released
/// ([`admission::approve`], from when this hub learnt of the release: `released_at`, which the
/// task's status records), and what it carries comes over once it is in. Registered and
/// reported so, its marks and taint go in one write, and it stays this migration's.
pub(super) fn arrive(task: &MigrationTask, seen: &Arriving) -> (ClusterState, Vec<Effect>) {
    let mut effects = Vec::new();
    let state = match seen.mc {
        None => {
            effects.push(Effect::Precreate);
            ClusterState::Created
        }
        // Unmarked: ours only once the status reported it arrived (then registered for good,
        // whatever its lease does since, as long as this hub accepts it); else not ours.
        Some(m) if !marked(m, PRE_CREATED, task) && !marked(m, MIGRATING, task) => {
            if seen.reported_arrived && m.spec.hub_accepts_client {
                ClusterState::Available
            } else {
                ClusterState::Refused
            }
        }
        Some(m) => target_state(Some(m)),
    };
    let state = if state != ClusterState::Available {
        state
    } else if seen.settles && !seen.settled {
        // The Klusterlet's own settings back (what the source changed) and, on a plain OCM
        // hub, this hub's own bootstrap kubeconfig.
        effects.push(Effect::Settle);
        ClusterState::Joined
    } else if seen.acm_target && !seen.import_took_over {
        ClusterState::Joined
    } else {
        state
    };
    // The objects it carries, before it may switch: once its namespace is here (made for the
    // ManagedCluster pre-created), each stage reconcile until its ManagedCluster is marked.
    if seen.carries_objects
        && let Some(m) = seen.mc.filter(|m| marked(m, PRE_CREATED, task))
        && !marked(m, OBJECTS_CARRIED, task)
    {
        effects.push(Effect::CarryObjects);
    }
    if seen.registering {
        let ours = seen.mc.filter(|m| marked(m, PRE_CREATED, task));
        // When it was released, as the task's status records it (an agent before that marked
        // the ManagedCluster instead: the earlier of the two).
        let released_at = match ours {
            Some(m) if seen.released => {
                let marked_at = m
                    .annotations()
                    .get(RELEASED_AT)
                    .and_then(|v| v.parse::<jiff::Timestamp>().ok());
                [seen.released_at, marked_at].into_iter().flatten().min()
            }
            _ => None,
        };
        if let Some(csr) =
            admission::approve(released_at, target_state(seen.mc), seen.requests, seen.now)
        {
            effects.push(Effect::Approve(csr.to_owned(), Approval::Expected));
        }
        // Once per cluster: applied at every reconcile, they were requests for each cluster
        // and addon at every event of the stage.
        if !seen.addons_carried
            && matches!(
                state,
                ClusterState::Joined | ClusterState::Available | ClusterState::Created
            )
        {
            effects.push(Effect::CarryAddons);
        }
    }
    // Registered here: placements may choose it, and its copies' controllers may act (the
    // source's were paused before any cluster switched). The migration's taint comes off once
    // the hub's own availability taints have: its taint controller takes those off after the
    // cluster turned Available (ocm `pkg/registration/hub/taint`), and a removal of ours at the
    // same moment races its write (one of the two is refused and sent again). A hub that keeps
    // one on leaves ours to cleanup's `unmark`. The marks go with the taint, in one write,
    // once the task's status says the cluster arrived (written within a second, and it keeps
    // the cluster this migration's without them): cleanup has nothing left to write.
    if state == ClusterState::Available
        && let Some(m) = seen.mc
    {
        if to_resume_on_target(task, m) {
            if !hub_tainted(m) {
                effects.extend(taint(m, task.spec.key(), false));
            }
            effects.push(Effect::ResumeObjects);
        } else if !hub_tainted(m) && seen.reported_arrived {
            effects.extend(unmark(Some(m), task.spec.key()));
        }
    }
    (state, effects)
}

/// What the target observed of a cluster to roll back.
#[derive(Clone, Debug)]
pub(super) struct Leaving<'a> {
    pub(super) mc: Option<&'a ManagedCluster>,
    /// The undecided bootstrap CSRs of the cluster's own identity.
    pub(super) pending: Vec<String>,
    /// Cleaning: what this migration pre-created for it goes once it is refused and no CSR of
    /// its waits.
    pub(super) remove: bool,
}

/// Letting a cluster that did not arrive go back from the target: refused here (a klusterlet
/// connected here restarts and goes back; none chooses this hub any more), and a klusterlet
/// that already chose this hub and waits for its bootstrap CSR gets it approved
/// ([`Approval::LetThrough`]) instead of being left waiting forever. The refused copy stays
/// (deleting it would make this hub a valid choice again) until `remove` (Cleaning). Only what
/// this migration created, or a klusterlet made while switching that never got in, is touched;
/// one that arrived stays.
pub(super) fn let_back(task: &MigrationTask, seen: &Leaving) -> (ClusterState, Vec<Effect>) {
    let Some(m) = seen.mc else {
        return (ClusterState::RolledBack, vec![]);
    };
    if target_state(Some(m)) == ClusterState::Available {
        return (ClusterState::Available, vec![]);
    }
    if !marked(m, PRE_CREATED, task) && m.spec.hub_accepts_client {
        return (ClusterState::RolledBack, vec![]);
    }
    let mut effects: Vec<Effect> = seen
        .pending
        .iter()
        .map(|csr| Effect::Approve(csr.clone(), Approval::LetThrough))
        .collect();
    let accepted = m.spec.hub_accepts_client;
    if accepted {
        effects.push(Effect::Refuse(
            json!({"spec": {"hubAcceptsClient": false}}),
            "no longer accepted here (rollback)",
        ));
    }
    let quiet = !accepted && seen.pending.is_empty();
    if seen.remove && quiet {
        if m.metadata.deletion_timestamp.is_none() {
            effects.push(Effect::RemoveCopy);
        }
        // The cluster went back: nothing here will finish the works of its namespace.
        effects.push(Effect::ReleaseWorks);
        return (ClusterState::RollingBack, effects);
    }
    let state = if !seen.remove && quiet {
        ClusterState::RolledBack
    } else {
        ClusterState::RollingBack
    };
    (state, effects)
}

/// The marks a target puts on a cluster it pre-creates.
const TARGET_MARKS: [&str; 5] = [
    PRE_CREATED,
    MIGRATING,
    RELEASED_AT,
    OBJECTS_CARRIED,
    OBJECTS_RESUMED,
];

/// The migration's marks and taint off a target cluster that stays, in one write: once it
/// registered, and again in cleanup (a no-op where nothing is left). With the taint, a JSON
/// patch that removes the taint and the marks read ([`TaintChange::json_patch`]), so the
/// hub's writes of the cluster's status meanwhile do not refuse it; the marks alone, a merge
/// patch.
pub(super) fn unmark(mc: Option<&ManagedCluster>, migration: &str) -> Vec<Effect> {
    let Some(m) = mc else {
        return vec![];
    };
    let untaint = taint(m, migration, false);
    let present: Vec<String> = TARGET_MARKS
        .iter()
        .filter(|k| m.annotations().contains_key(**k))
        .map(|k| (*k).to_owned())
        .collect();
    if present.is_empty() {
        return untaint.into_iter().collect();
    }
    let marks = json!({"metadata": {"annotations": present
        .iter()
        .map(|k| (k.clone(), Value::Null))
        .collect::<serde_json::Map<_, _>>()}});
    match untaint {
        Some(Effect::Taint(mut t)) => {
            merge_objects(&mut t.patch, marks);
            t.unmarks = present;
            vec![Effect::Taint(t)]
        }
        _ => vec![Effect::Patch(marks)],
    }
}
