//! Work queue backoffs, as client-go's rate limiters compute them.

use std::time::Duration;

/// A work queue's per-item exponential backoff (client-go's
/// `NewTypedItemExponentialFailureRateLimiter(base, max)`): `base` doubled at each failure in a
/// row, at most `max`.
pub(crate) fn item(base: Duration, max: Duration, failures: u32) -> Duration {
    base.saturating_mul(2u32.saturating_pow(failures.saturating_sub(1)))
        .min(max)
}

/// The retry of a controller whose queue uses client-go's `DefaultTypedControllerRateLimiter`
/// (sdk-go `pkg/basecontroller/factory/controller_context.go` gives every OCM factory
/// controller one): 5 ms doubled at each failure up to 1 000 s (its overall 10 per second
/// bucket is not simulated).
pub(crate) fn controller(failures: u32) -> Duration {
    item(
        Duration::from_millis(5),
        Duration::from_secs(1000),
        failures,
    )
}
