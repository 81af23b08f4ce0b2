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

/// Deletes work `name` in `hub`'s namespace unless it is gone or going already; true once
/// it is gone. "Gone" is the API server's word, not the watch's: the watch may not have seen
/// the manager's last apply yet.
pub(super) async fn remove_work(ctx: &Ctx, hub: &str, name: &str) -> Result<bool, Error> {
    let deleting = match work_named(ctx, hub, name) {
        Some(w) => w.metadata.deletion_timestamp.is_some(),
        None => match work_now(ctx, hub, name).await? {
            Some(w) => w.metadata.deletion_timestamp.is_some(),
            None => return Ok(true),
        },
    };
    if !deleting {
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
