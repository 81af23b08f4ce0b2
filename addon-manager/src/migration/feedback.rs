//! A task's report, as its ManifestWork's status feedback carries it back.

use super::*;

/// One task's report as its work's status feedback shows it.
#[derive(Clone, Debug, Default)]
pub(super) struct Feedback {
    pub(super) revision: Option<String>,
    pub(super) state: Option<String>,
    pub(super) message: Option<String>,
    pub(super) clusters: Option<String>,
    pub(super) total: Option<i64>,
    pub(super) shape: Option<String>,
    /// The source's carry-over records (validation); `Err` when they do not decode.
    pub(super) carry: Option<Result<Vec<CarriedCluster>, String>>,
    /// Why the work could not apply (a manifest's Applied condition), if it could not.
    pub(super) apply_error: Option<String>,
}

impl Feedback {
    pub(super) fn of(work: &ManifestWork) -> Self {
        let mut fb = Feedback::default();
        let manifests = work
            .status
            .as_ref()
            .and_then(|s| s.resource_status.as_ref())
            .and_then(|r| r.manifests.as_ref());
        for m in manifests.into_iter().flatten() {
            if let Some(c) = m
                .conditions
                .iter()
                .find(|c| c.type_ == "Applied" && c.status == "False")
            {
                fb.apply_error = Some(format!(
                    "{} {}: {}",
                    m.resource_meta.kind.clone().unwrap_or_default(),
                    m.resource_meta.name.clone().unwrap_or_default(),
                    c.message
                ));
            }
            if m.resource_meta.kind.as_deref() != Some("MigrationTask") {
                continue;
            }
            for v in m
                .status_feedback
                .iter()
                .flat_map(|f| f.values.iter().flatten())
            {
                let text = v.field_value.string.clone();
                match v.name.as_str() {
                    "revision" => fb.revision = text,
                    "state" => fb.state = text,
                    "message" => fb.message = text,
                    "clusters" => fb.clusters = text,
                    "shape" => fb.shape = text,
                    "total" => fb.total = v.field_value.integer,
                    "carry" => {
                        fb.carry = text.map(|t| {
                            migration_api::migration::decode_carry_over(&t)
                                .map_err(|e| e.to_string())
                        });
                    }
                    _ => {}
                }
            }
        }
        fb
    }

    pub(super) fn states(&self, n: usize) -> Vec<ClusterState> {
        ClusterState::decode(self.clusters.as_deref().unwrap_or(""), n)
    }

    pub(super) fn succeeded(&self) -> bool {
        self.state.as_deref() == Some("Succeeded")
    }

    pub(super) fn failed(&self) -> bool {
        self.state.as_deref() == Some("Failed")
    }
}

/// The feedback of a migration's work on one hub, only if it reports on `revision`.
pub(super) async fn report(
    ctx: &Ctx,
    m: &Migration,
    role: MigrationRole,
    revision: &str,
) -> Result<(Option<Feedback>, Option<String>), Error> {
    let Some(work) = existing_work(ctx, m, role).await? else {
        return Ok((None, None));
    };
    let fb = Feedback::of(&work);
    let err = fb.apply_error.clone();
    Ok((
        (fb.revision.as_deref() == Some(revision)).then_some(fb),
        err,
    ))
}

pub(super) async fn existing_work(
    ctx: &Ctx,
    m: &Migration,
    role: MigrationRole,
) -> Result<Option<ManifestWork>, Error> {
    let works: Api<ManifestWork> = Api::namespaced(ctx.client.clone(), m.hub(role));
    ignore_not_found(works.get(&names::migration_work(&m.key, role)).await)
        .map_err(ctx_err(format!("reading the {} work", role.as_str())))
}

/// The task spec inside an existing work (to read back what was delivered).
pub(super) fn delivered_task(work: &ManifestWork) -> Option<MigrationTaskSpec> {
    work.spec
        .workload
        .iter()
        .flat_map(|w| w.manifests.iter().flatten())
        .find(|m| m.get("kind").and_then(Value::as_str) == Some("MigrationTask"))
        .and_then(|m| serde_json::from_value(m.get("spec")?.clone()).ok())
}
