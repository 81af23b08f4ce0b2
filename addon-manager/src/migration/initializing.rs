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
    // cluster's certificate. Each takes a free name of the target's pool.
    let msas: Api<ManagedServiceAccount> = Api::namespaced(ctx.client.clone(), &m.to);
    let recorded = step.status.bootstrap_identities.clone().unwrap_or_default();
    // Once every name it needs is recorded and its own (as the watch shows them), the claim
    // stands and the pool need not be listed again while the tokens come.
    let own = service_accounts(ctx, m);
    let held = if recorded.len() >= m.identities()
        && recorded.iter().all(|n| {
            own.get(n)
                .is_some_and(|msa| msa.labels().get(labels::MIGRATION_KEY) == Some(&m.key))
        }) {
        pool_holders(own.values().map(|msa| &**msa))
    } else {
        pool_of(ctx, &m.to).await?
    };
    let mut seen = Initialized {
        pool: Pool::Claimed,
        token: Ok(false),
        timed_out: remaining(step, timeouts(mcm).stage).is_none(),
        shape: shape_of(step),
        timeout: timeouts(mcm).stage,
    };
    match claim(m.identities(), &m.key, &recorded, &held) {
        Err(free) => seen.pool = Pool::TooFew { free },
        Ok(claimed) => {
            // Recorded with this status write; a claim a crash kept from status is found
            // again by its key label (and revoked by label at the end either way).
            step.status.bootstrap_identities = Some(claimed.clone());
            let m = Migration {
                identity_names: claimed,
                ..m.clone()
            };
            for name in m.identity_names.iter().filter(|n| !held.contains_key(*n)) {
                let msa: ManagedServiceAccount = serde_json::from_value(m.service_account(name))
                    .map_err(|e| {
                        RenderError::Config(format!("ManagedServiceAccount {name}: {e}"))
                    })?;
                let params = PostParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..Default::default()
                };
                match msas.create(&params, &msa).await {
                    Ok(_) => {}
                    // Another migration took the name first: choose again.
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        seen.pool = Pool::Raced;
                        break;
                    }
                    Err(e) => {
                        return Err(
                            ctx_err(format!("creating ManagedServiceAccount {name}"))(e).into()
                        );
                    }
                }
            }
            if seen.pool == Pool::Claimed {
                seen.token = match bootstrap(ctx, &m, m.identities()).await {
                    Ok(t) => Ok(t.is_some()),
                    Err(Error::Render(e)) => Err(e.to_string()),
                    Err(e) => return Err(e),
                };
            }
        }
    }
    Ok(step.settle(seen.outcome(m)))
}

/// Who holds the names of `hub`'s pool of bootstrap identities ([`pool_holders`]).
pub(super) async fn pool_of(
    ctx: &Ctx,
    hub: &str,
) -> Result<std::collections::BTreeMap<String, Option<String>>, Error> {
    let msas: Api<ManagedServiceAccount> = Api::namespaced(ctx.client.clone(), hub);
    let list = msas
        .list(&ListParams::default())
        .await
        .map_err(ctx_err(format!(
            "listing the ManagedServiceAccounts of {hub}"
        )))?;
    Ok(pool_holders(&list.items))
}

/// Who holds each name of the target hub's pool of bootstrap identities in use: the key of the
/// migration whose ManagedServiceAccount has it (`None`: not one of ours, the name is taken all
/// the same).
pub(super) fn pool_holders<'a>(
    msas: impl IntoIterator<Item = &'a ManagedServiceAccount>,
) -> std::collections::BTreeMap<String, Option<String>> {
    msas.into_iter()
        .filter(|msa| names::pool_index(&msa.name_any()).is_some())
        .map(|msa| {
            (
                msa.name_any(),
                msa.labels().get(labels::MIGRATION_KEY).cloned(),
            )
        })
        .collect()
}

/// Which names of the target hub's pool the `needed` bootstrap identities of the migration
/// `key` take: those it recorded, while still its own or free (so a claim never moves once
/// made), then those it holds without having recorded them (a crash between the claim and the
/// status write), then free names in pool order from a place its key decides, so that
/// migrations starting together seldom reach for the same name, and a name just given back is
/// seldom taken again at once. `Err(free)`: fewer names free than it needs.
pub(super) fn claim(
    needed: usize,
    key: &str,
    recorded: &[String],
    held: &std::collections::BTreeMap<String, Option<String>>,
) -> Result<Vec<String>, usize> {
    let mine = |n: &String| held.get(n).is_some_and(|k| k.as_deref() == Some(key));
    let free = |n: &String| !held.contains_key(n);
    let mut out: Vec<String> = Vec::with_capacity(needed);
    let take = |n: &String, out: &mut Vec<String>| {
        if out.len() < needed && !out.contains(n) {
            out.push(n.clone());
        }
    };
    for n in recorded {
        if names::pool_index(n).is_some() && (mine(n) || free(n)) {
            take(n, &mut out);
        }
    }
    for n in held.keys().filter(|n| mine(n)) {
        take(n, &mut out);
    }
    let start = key
        .bytes()
        .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b.into()))
        % names::BOOTSTRAP_IDENTITY_POOL;
    let pool = (0..names::BOOTSTRAP_IDENTITY_POOL)
        .map(|i| names::pooled_bootstrap_identity((start + i) % names::BOOTSTRAP_IDENTITY_POOL));
    let mut free_names = 0;
    for n in pool.filter(|n| free(n)) {
        free_names += 1;
        take(&n, &mut out);
    }
    if out.len() < needed {
        return Err(free_names);
    }
    Ok(out)
}

/// The first `n` of `names`, and how many more.
fn shorten(names: &[String], n: usize) -> String {
    let mut out = names.iter().take(n).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > n {
        out.push_str(&format!(" and {} more", names.len() - n));
    }
    out
}

/// Whether Initializing got its names of the target's pool of bootstrap identities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pool {
    Claimed,
    /// Fewer than it needs are free (other migrations to the same hub hold the rest).
    TooFew {
        free: usize,
    },
    /// Another migration created one of the chosen names first.
    Raced,
}

/// What Initializing saw of the bootstrap identity.
#[derive(Clone, Debug)]
pub(super) struct Initialized {
    pub(super) pool: Pool,
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
        match self.pool {
            Pool::Claimed => {}
            Pool::TooFew { free } => {
                let message = format!(
                    "{} bootstrap identities needed on {}, {free} of its pool's {} names free (other migrations to {} hold the rest)",
                    m.identities(),
                    m.to,
                    names::BOOTSTRAP_IDENTITY_POOL,
                    m.to
                );
                return if self.timed_out {
                    Outcome::Rollback(
                        Some(Said::no(RESOURCE_INITIALIZED, reasons::TIMEOUT, &message)),
                        reasons::TIMEOUT,
                        "initializing timed out".into(),
                    )
                } else {
                    // Another migration to the same hub that ends wakes this one.
                    Outcome::Wait(
                        Said::no(RESOURCE_INITIALIZED, reasons::WAITING, message),
                        Wake::Deadline(self.timeout),
                    )
                };
            }
            Pool::Raced => {
                return Outcome::Wait(
                    Said::no(
                        RESOURCE_INITIALIZED,
                        reasons::WAITING,
                        format!(
                            "another migration took a bootstrap identity name on {} first; choosing again",
                            m.to
                        ),
                    ),
                    Wake::Soon,
                );
            }
        }
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
                        "waiting for the bootstrap tokens of the {} ManagedServiceAccounts {}/{}",
                        m.identities(),
                        m.to,
                        shorten(&m.identity_names, 3)
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
