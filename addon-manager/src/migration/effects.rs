//! What a reconcile writes to the hubs, as values: the phases put the works they deliver into
//! the step's effects ([`Step::effects`]); the shell applies them, in order, once the phase
//! has decided and before the status is written. Building a delivery is then a function of
//! what was read ([`World`]) and the status, tested without an API server.

use super::*;

/// One write to a hub's namespace on the global hub.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Effect {
    /// Apply this ManifestWork (skipped when the watch shows it as it would be applied).
    ApplyWork(Value),
    /// Delete work `name` in `hub`'s namespace (its work agent removes what it carried).
    RemoveWork { hub: String, name: String },
    /// Deliver to the target each carry-over part its work does not carry yet.
    DeliverParts {
        parts: CarryOverParts,
        target_ns: String,
    },
}

/// Applies `effects` in order; the first failure stops (the reconcile is retried, and every
/// effect is idempotent).
pub(super) async fn apply_effects(
    ctx: &Ctx,
    m: &Migration,
    effects: Vec<Effect>,
) -> Result<(), Error> {
    for effect in effects {
        match effect {
            Effect::ApplyWork(work) => apply_work(ctx, &work).await?,
            Effect::RemoveWork { hub, name } => {
                remove_work(ctx, &hub, &name, false).await?;
            }
            Effect::DeliverParts { parts, target_ns } => {
                deliver_parts(ctx, m, &parts, &target_ns).await?
            }
        }
    }
    Ok(())
}
