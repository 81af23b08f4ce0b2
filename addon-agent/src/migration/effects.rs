//! What a role does to one cluster, as values: each per-cluster decision is a pure function of
//! what the handler observed, returning the cluster's state and the [`Effect`]s to carry out,
//! and [`apply`] is the one executor. The stage report follows from the states.

use super::*;

/// One change to a cluster, or to what the handler waits for.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Effect {
    /// Merge-patch the ManagedCluster.
    Patch(Value),
    /// Wake on (or stop waking on) the cluster's lease renewals.
    Await(bool),
    /// Delete the ManagedCluster: the hub lets go of a moved cluster.
    Detach,
    /// Force-delete the works left in the cluster's namespace (nothing connected removes them).
    ReleaseWorks,
}

/// Carries out `effects` on `cluster`, in order.
pub(super) async fn apply(ctx: &Ctx, cluster: &str, effects: Vec<Effect>) -> Result<(), Error> {
    for effect in effects {
        match effect {
            Effect::Patch(patch) => patch_cluster(ctx, cluster, patch).await?,
            Effect::Await(awaited) => await_return(ctx, cluster, awaited),
            Effect::Detach => {
                let api: Api<ManagedCluster> = Api::all(ctx.client.clone());
                ignore_not_found(api.delete(cluster, &DeleteParams::default()).await)
                    .map_err(ctx_err(format!("detaching ManagedCluster {cluster}")))?;
                tracing::info!(cluster = %cluster, "detached the moved cluster from this hub");
            }
            Effect::ReleaseWorks => release_works(ctx, cluster).await?,
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
    let mc = seen.mc;
    let restored_at = mc.annotations().get(RESTORED_AT);
    if (restored_at.is_none() && !seen.finish)
        || !mc.spec.hub_accepts_client
        || restore_needed(mc, task)
    {
        let mut patch = flight::patch(&flight::restored(mc.annotations(), &|k| ours(task, k)));
        patch["metadata"]["annotations"][RESTORED_AT] =
            json!(restored_at.map_or(now, String::as_str));
        patch["spec"] = json!({"hubAcceptsClient": true});
        return (
            ClusterState::RollingBack,
            vec![Effect::Patch(patch), Effect::Await(true)],
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
/// detach is deleted here (once) and its works released, and is `Detached` once gone; any
/// other (arrived, not confirmed yet) is left exactly as it is, its marks keeping auto-import
/// and its own KlusterletConfig from pulling it back meanwhile.
pub(super) fn let_go(detach: bool, mc: Option<&ManagedCluster>) -> (ClusterState, Vec<Effect>) {
    match (detach, mc) {
        (true, None) => (ClusterState::Detached, vec![]),
        (true, Some(m)) => {
            let mut effects = vec![];
            if m.metadata.deletion_timestamp.is_none() {
                effects.push(Effect::Detach);
            }
            effects.push(Effect::ReleaseWorks);
            (ClusterState::Switching, effects)
        }
        (false, _) => (ClusterState::Switching, vec![]),
    }
}
