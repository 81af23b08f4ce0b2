//! Deploying: the tasks go to both hubs.

use super::*;

pub(super) async fn deploying(
    ctx: &Ctx,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    step: &mut Step,
) -> Result<Action, Error> {
    let tgt_rev = deliver_target(ctx, mcm, m, step, TaskStage::Deploying, vec![], true).await?;
    let Some(src_rev) = deliver_source(
        ctx,
        mcm,
        m,
        step,
        TaskStage::Deploying,
        SourcePart::default(),
        true,
    )
    .await?
    else {
        return Ok(token_missing(step, stage_timeout(mcm), RESOURCE_DEPLOYED));
    };
    let (source, source_err) = report(ctx, m, MigrationRole::Source, &src_rev).await?;
    let (target, target_err) = report(ctx, m, MigrationRole::Target, &tgt_rev).await?;
    let ready = source.as_ref().is_some_and(Feedback::succeeded)
        && target.as_ref().is_some_and(Feedback::succeeded);
    if !ready {
        if remaining(step, stage_timeout(mcm)).is_none() {
            let msg = format!(
                "the hubs did not confirm the delivery in time{}",
                err_suffix(source_err.or(target_err))
            );
            step.condition(RESOURCE_DEPLOYED, "False", reasons::TIMEOUT, &msg);
            step.rollback(reasons::TIMEOUT, &msg);
            return Ok(Action::requeue(Duration::from_millis(10)));
        }
        let msg = format!(
            "waiting for {} to confirm the {} and {} to pre-create the clusters{}",
            m.from,
            delivered_what(step),
            m.to,
            err_suffix(source_err.or(target_err))
        );
        step.condition(RESOURCE_DEPLOYED, "False", reasons::WAITING, &msg);
        return Ok(until(step, stage_timeout(mcm)));
    }
    step.condition(
        RESOURCE_DEPLOYED,
        "True",
        reasons::DONE,
        &format!(
            "{} on {}; {} clusters pre-created on {}",
            delivered_what(step),
            m.from,
            step.status.resolved_clusters.as_ref().map_or(0, Vec::len),
            m.to
        ),
    );
    step.enter(MigrationPhase::Registering, "switching clusters");
    Ok(Action::requeue(Duration::from_millis(10)))
}
