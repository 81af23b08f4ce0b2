//! A task's report, as its ManifestWork's status feedback carries it back.

use super::*;

/// One task's report as its work's status feedback shows it ([`TaskReport`], the wire
/// contract), with its carry-over decoded and why the work could not apply, if it could not.
#[derive(Clone, Debug, Default)]
pub(super) struct Feedback {
    pub(super) report: TaskReport,
    /// The source's carry-over records (validation); `Err` when they do not decode.
    pub(super) carry: Option<Result<Vec<CarriedCluster>, String>>,
    /// Why the work could not apply (a manifest's Applied condition), if it could not.
    pub(super) apply_error: Option<String>,
}

impl Feedback {
    pub(super) fn of(work: &ManifestWork) -> Self {
        let report = TaskReport::from_feedback(work.feedback("MigrationTask"));
        let carry = report
            .carry
            .as_deref()
            .map(|t| migration_api::migration::decode_carry_over(t).map_err(|e| e.to_string()));
        Feedback {
            report,
            carry,
            apply_error: work.manifest_not_applied(),
        }
    }

    pub(super) fn states(&self, n: usize) -> Vec<ClusterState> {
        self.report.states(n)
    }

    pub(super) fn succeeded(&self) -> bool {
        self.report.succeeded()
    }

    pub(super) fn failed(&self) -> bool {
        self.report.failed()
    }
}

/// The feedback of a migration's work on one hub, only if it reports on `revision`.
pub(super) fn report(
    work: Option<&ManifestWork>,
    revision: &str,
) -> (Option<Feedback>, Option<String>) {
    let Some(work) = work else {
        return (None, None);
    };
    let fb = Feedback::of(work);
    let err = fb.apply_error.clone();
    (
        (fb.report.revision.as_deref() == Some(revision)).then_some(fb),
        err,
    )
}

/// A migration's work on one hub, as the watch last saw it.
pub(super) fn existing_work(
    ctx: &Ctx,
    m: &Migration,
    role: MigrationRole,
) -> Option<Arc<ManifestWork>> {
    work_named(ctx, m.hub(role), &names::migration_work(&m.key, role))
}

/// Work `name` in `hub`'s namespace, as the watch last saw it.
pub(super) fn work_named(ctx: &Ctx, hub: &str, name: &str) -> Option<Arc<ManifestWork>> {
    ctx.observed.work(hub, name)
}

/// Work `name` in `hub`'s namespace as the API server has it now.
pub(super) async fn work_now(
    ctx: &Ctx,
    hub: &str,
    name: &str,
) -> Result<Option<ManifestWork>, Error> {
    let works: Api<ManifestWork> = Api::namespaced(ctx.client.clone(), hub);
    Ok(ignore_not_found(works.get(name).await)
        .map_err(ctx_err(format!("reading work {hub}/{name}")))?)
}

/// What removing a work takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Removal {
    /// It is gone: nothing.
    Gone,
    /// It is being deleted: wait until it is gone.
    Going,
    /// It is there: delete it.
    Delete,
    /// The watch does not show it, and the API server has not said it is gone since this
    /// process last applied it: ask the API server (the watch may not have seen the manager's
    /// last apply yet).
    Ask,
}

/// What removing a work takes, from what the watch shows of it (`watched`) and whether the API
/// server said it is gone since this process last applied it (`said_gone`).
pub(super) fn removal(watched: Option<&ManifestWork>, said_gone: bool) -> Removal {
    match watched {
        Some(w) if w.metadata.deletion_timestamp.is_some() => Removal::Going,
        Some(_) => Removal::Delete,
        None if said_gone => Removal::Gone,
        None => Removal::Ask,
    }
}

/// The works (hub, name) the API server said are gone since this process last applied them:
/// none of them comes back but by this process's own apply ([`GoneWorks::applying`]), and
/// no other process writes them while this one leads (a new lead starts with none). So a
/// removal asks the API server of each once, not at every reconcile (Cleaning reads every
/// work a migration may have had, most of them long gone or never made).
#[derive(Debug, Default)]
pub(super) struct GoneWorks(
    pub(super) std::sync::Mutex<std::collections::HashSet<(String, String)>>,
);

/// Past this many, the memory starts again (each then costs one more read): it never grows
/// without bound, whatever the number of migrations a manager lives through.
pub(super) const GONE_WORKS_REMEMBERED: usize = 4096;

impl GoneWorks {
    pub(super) fn said(&self, hub: &str, name: &str) -> bool {
        self.0
            .lock()
            .is_ok_and(|gone| gone.contains(&(hub.to_owned(), name.to_owned())))
    }

    pub(super) fn gone(&self, hub: &str, name: &str) {
        if let Ok(mut gone) = self.0.lock() {
            if gone.len() >= GONE_WORKS_REMEMBERED {
                gone.clear();
            }
            gone.insert((hub.to_owned(), name.to_owned()));
        }
    }

    /// This process applies the work: it may be there from now on.
    pub(super) fn applying(&self, hub: &str, name: &str) {
        if let Ok(mut gone) = self.0.lock() {
            gone.remove(&(hub.to_owned(), name.to_owned()));
        }
    }
}

/// Deletes work `name` in `hub`'s namespace unless it is gone or going already; true once
/// it is gone (or, with `deleting_is_gone`, being deleted). "Gone" is the API server's word,
/// not the watch's: the watch may not have seen the manager's last apply yet.
pub(super) async fn remove_work(
    ctx: &Ctx,
    hub: &str,
    name: &str,
    deleting_is_gone: bool,
) -> Result<bool, Error> {
    let watched = work_named(ctx, hub, name);
    let delete = match removal(watched.as_deref(), ctx.gone_works.said(hub, name)) {
        Removal::Gone => return Ok(true),
        Removal::Going => return Ok(deleting_is_gone),
        Removal::Delete => true,
        Removal::Ask => match work_now(ctx, hub, name).await? {
            Some(w) if w.metadata.deletion_timestamp.is_some() => return Ok(deleting_is_gone),
            Some(_) => true,
            None => {
                ctx.gone_works.gone(hub, name);
                return Ok(true);
            }
        },
    };
    if delete {
        let works: Api<ManifestWork> = Api::namespaced(ctx.client.clone(), hub);
        ignore_not_found(works.delete(name, &DeleteParams::default()).await)
            .map_err(ctx_err(format!("deleting work {hub}/{name}")))?;
    }
    Ok(false)
}

/// The task spec inside an existing work (to read back what was delivered).
pub(super) fn delivered_task(work: &ManifestWork) -> Option<MigrationTaskSpec> {
    work.manifests()
        .iter()
        .find(|m| m.get("kind").and_then(Value::as_str) == Some("MigrationTask"))
        .and_then(|m| serde_json::from_value(m.get("spec")?.clone()).ok())
}
