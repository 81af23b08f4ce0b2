//! Initializing: the bootstrap identity on the target.

use super::*;

pub(super) async fn initializing(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
) -> Result<Action, Error> {
    let msas: Api<ManagedServiceAccount> = Api::namespaced(ctx.client.clone(), &m.to);
    msas.patch(
        &names::migration_service_account(&m.key),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(m.service_account()),
    )
    .await
    .map_err(ctx_err("applying the ManagedServiceAccount"))?;
    match bootstrap(ctx, m).await {
        Ok(Some(_)) => {}
        Ok(None) => {
            if remaining(step, stage_timeout(mcm)).is_none() {
                step.condition(RESOURCE_INITIALIZED, "False", reasons::TIMEOUT, &format!(
                    "the ManagedServiceAccount on {} got no token in time; is the managed-serviceaccount addon running there?", m.to));
                step.rollback(reasons::TIMEOUT, "initializing timed out");
                return Ok(Action::requeue(Duration::from_millis(10)));
            }
            step.condition(
                RESOURCE_INITIALIZED,
                "False",
                reasons::WAITING,
                &format!(
                    "waiting for the bootstrap token of ManagedServiceAccount {}/{}",
                    m.to,
                    names::migration_service_account(&m.key)
                ),
            );
            return Ok(until(step, stage_timeout(mcm)));
        }
        Err(Error::Render(e)) => {
            step.condition(
                RESOURCE_INITIALIZED,
                "False",
                reasons::ERROR,
                &e.to_string(),
            );
            step.rollback(reasons::ERROR, &e.to_string());
            return Ok(Action::requeue(Duration::from_millis(10)));
        }
        Err(e) => return Err(e),
    }
    let rendered = match shape_of(step) {
        Shape::ManifestWork => format!(
            "bootstrap secret {} rendered for each cluster's klusterlet work",
            names::migration_bootstrap_secret(&m.key)
        ),
        _ => format!(
            "KlusterletConfig {} rendered",
            names::migration_klusterlet_config(&m.key)
        ),
    };
    step.condition(
        RESOURCE_INITIALIZED,
        "True",
        reasons::DONE,
        &format!(
            "bootstrap identity ready on {} (token valid {} s, not rotated), {rendered}",
            m.to,
            m.token_validity.as_secs(),
        ),
    );
    step.enter(
        MigrationPhase::Deploying,
        "delivering the tasks to both hubs",
    );
    Ok(Action::requeue(Duration::from_millis(10)))
}
