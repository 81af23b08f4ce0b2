//! Helpers shared by the ocm-sim tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ocm_sim::hub::{AgentOptions, HubKind, HubOptions};
use ocm_sim::registration::RegistrationOptions;

#[allow(unused_imports)]
pub use migration_api::testing::eventually;

/// A hub that auto-approves its bootstrap identity and judges leases quickly.
pub fn fast_hub() -> HubOptions {
    HubOptions {
        auto_approve: true,
        registration: RegistrationOptions {
            lease_check_interval: Duration::from_millis(200),
        },
        kind: HubKind::Acm,
        ..Default::default()
    }
}

/// A klusterlet with no join delay, one-second leases, and AppliedManifestWorks of a hub it
/// left evicted after three seconds.
pub fn fast_agent() -> AgentOptions {
    AgentOptions {
        join_delay: Duration::ZERO,
        lease_duration_secs: 1,
        status_sync_interval: Duration::from_millis(200),
        addon_lease_period: Duration::from_secs(1),
        raw_feedback_json: false,
        hub_timeout: None,
        eviction_grace: Duration::from_secs(3),
    }
}

/// Logs to the test output at the level RUST_LOG asks for.
pub fn logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}
