//! Initializing: the bootstrap identity on the target.

use super::*;

pub(super) async fn initializing(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
) -> Result<Action, Error> {
    // One bootstrap identity per cluster (or per group of clusters past
    // names::MAX_BOOTSTRAP_IDENTITIES): a holder of one cluster's token can ask for no other
    // cluster's certificate.
    let msas: Api<ManagedServiceAccount> = Api::namespaced(ctx.client.clone(), &m.to);
    for identity in 0..m.identities() {
        let name = m.service_account_name(identity);
        msas.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(m.service_account(identity)),
        )
        .await
        .map_err(ctx_err(format!("applying ManagedServiceAccount {name}")))?;
    }
    let token = match bootstrap(ctx, m, m.identities()).await {
        Ok(t) => Ok(t.is_some()),
        Err(Error::Render(e)) => Err(e.to_string()),
        Err(e) => return Err(e),
    };
    let seen = Initialized {
        token,
        timed_out: remaining(step, stage_timeout(mcm)).is_none(),
        shape: shape_of(step),
        timeout: stage_timeout(mcm),
    };
    Ok(step.settle(seen.outcome(m)))
}

/// What Initializing saw of the bootstrap identity.
#[derive(Clone, Debug)]
pub(super) struct Initialized {
    /// Whether the ManagedServiceAccount's token is there; `Err` when the bootstrap
    /// kubeconfig cannot be rendered from it.
    pub(super) token: Result<bool, String>,
    pub(super) timed_out: bool,
    pub(super) shape: Shape,
    pub(super) timeout: Duration,
}

impl Initialized {
    /// Initializing's decision: on to Deploying once the token is there; a rollback when it
    /// cannot be used or does not come in time; otherwise wait for it.
    pub(super) fn outcome(&self, m: &Migration) -> Outcome {
        match &self.token {
            Err(e) => Outcome::Rollback(
                Some(Said::no(RESOURCE_INITIALIZED, reasons::ERROR, e)),
                reasons::ERROR,
                e.clone(),
            ),
            Ok(false) if self.timed_out => Outcome::Rollback(
                Some(Said::no(
                    RESOURCE_INITIALIZED,
                    reasons::TIMEOUT,
                    format!(
                        "the ManagedServiceAccount on {} got no token in time; is the managed-serviceaccount addon running there?",
                        m.to
                    ),
                )),
                reasons::TIMEOUT,
                "initializing timed out".into(),
            ),
            Ok(false) => Outcome::Wait(
                Said::no(
                    RESOURCE_INITIALIZED,
                    reasons::WAITING,
                    format!(
                        "waiting for the bootstrap tokens of the {} ManagedServiceAccounts {}/{}-*",
                        m.identities(),
                        m.to,
                        names::migration_service_account(&m.key)
                    ),
                ),
                Wake::Deadline(self.timeout),
            ),
            Ok(true) => {
                let rendered = match self.shape {
                    Shape::ManifestWork => format!(
                        "bootstrap secrets {}-* rendered for each cluster's klusterlet work",
                        names::migration_bootstrap_secret(&m.key)
                    ),
                    _ => format!(
                        "KlusterletConfigs {}-* rendered",
                        names::migration_klusterlet_config(&m.key)
                    ),
                };
                Outcome::Enter(
                    Said::yes(
                        RESOURCE_INITIALIZED,
                        reasons::DONE,
                        format!(
                            "{} bootstrap identities ready on {} (one per cluster{}; tokens valid {} s, not rotated), {rendered}",
                            m.identities(),
                            m.to,
                            if m.identities() < m.clusters {
                                format!(
                                    ", shared by at most {} clusters each",
                                    names::clusters_per_identity(m.clusters)
                                )
                            } else {
                                String::new()
                            },
                            m.token_validity.as_secs(),
                        ),
                    ),
                    MigrationPhase::Deploying,
                    "delivering the tasks to both hubs".into(),
                )
            }
        }
    }
}
