//! Work queue backoffs, as client-go's rate limiters compute them.

use std::time::{Duration, Instant};

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

/// `backOffPeriod` (kubernetes `pkg/kubelet/kubelet.go`): a container's first restart back-off.
const CONTAINER_BACKOFF: Duration = Duration::from_secs(10);
/// `MaxContainerBackOff` (the same file): the longest.
const MAX_CONTAINER_BACKOFF: Duration = Duration::from_secs(300);

/// The kubelet's restart back-off for one container of one pod (CrashLoopBackOff), kept as
/// kubernetes `pkg/kubelet/kuberuntime/kuberuntime_manager.go` (`doBackOff`) keeps it with
/// client-go's `util/flowcontrol/backoff.go`: a container that exits the first time, or the
/// first time in 600 s (twice the longest back-off) since its last restart, is started again
/// at once; after that, not before 10 s since it exited, doubled at each restart up to 300 s.
/// A new pod (a changed pod template, a deleted pod) starts with a new one.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CrashLoop {
    /// The current back-off and when the container was last restarted (`backoffEntry`).
    entry: Option<(Duration, Instant)>,
}

impl CrashLoop {
    /// The last restart is too long ago to count (`hasExpired`).
    fn current(&self, exited: Instant) -> Option<(Duration, Instant)> {
        self.entry.filter(|(_, restarted)| {
            exited.saturating_duration_since(*restarted) <= 2 * MAX_CONTAINER_BACKOFF
        })
    }

    /// When the container that exited at `exited` may start again (`IsInBackOffSince`):
    /// `exited` itself when it is not in back-off.
    pub(crate) fn ends(&self, exited: Instant) -> Instant {
        self.current(exited)
            .map_or(exited, |(backoff, _)| exited + backoff)
    }

    /// Records that the container that exited at `exited` was started again at `now` (`Next`).
    pub(crate) fn restarted(&mut self, exited: Instant, now: Instant) {
        let backoff = match self.current(exited) {
            Some((backoff, _)) => (backoff * 2).min(MAX_CONTAINER_BACKOFF),
            None => CONTAINER_BACKOFF,
        };
        self.entry = Some((backoff, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A container exiting again and again, `ran` after each start: how long after each exit
    /// the kubelet starts it again.
    fn delays(ran: &[u64]) -> Vec<u64> {
        let t0 = Instant::now();
        let mut crash = CrashLoop::default();
        let mut now = t0;
        ran.iter()
            .map(|ran| {
                let exited = now + Duration::from_secs(*ran);
                let start = crash.ends(exited);
                crash.restarted(exited, start);
                now = start;
                (start - exited).as_secs()
            })
            .collect()
    }

    /// Every OCM factory controller's queue (the klusterlet's status controller, the work
    /// agent's apply controller) retries with client-go's default controller rate limiter.
    #[test]
    fn a_controller_queue_retries_from_5_ms_doubling_to_1000_s() {
        for (failures, want) in [
            (1, Duration::from_millis(5)),
            (2, Duration::from_millis(10)),
            (11, Duration::from_millis(5120)),
            (18, Duration::from_millis(5 << 17)),
            (19, Duration::from_secs(1000)),
            (u32::MAX, Duration::from_secs(1000)),
        ] {
            assert_eq!(controller(failures), want, "{failures} failures");
        }
    }

    #[test]
    fn a_container_is_restarted_at_once_then_after_ten_seconds_doubling_to_five_minutes() {
        // Crashing at once, every time.
        assert_eq!(
            delays(&[0; 8]),
            [0, 10, 20, 40, 80, 160, 300, 300],
            "crash loop"
        );
        // Running a while does not reset it: only 600 s since the last restart does.
        assert_eq!(delays(&[0, 30, 30, 599]), [0, 10, 20, 40], "ran a while");
        assert_eq!(delays(&[0, 0, 601, 0]), [0, 10, 0, 10], "ran past 600 s");
        // The back-off counts from the exit, however long the container ran before it.
        let t0 = Instant::now();
        let mut crash = CrashLoop::default();
        crash.restarted(t0, t0);
        let exited = t0 + Duration::from_secs(3);
        assert_eq!(crash.ends(exited), exited + CONTAINER_BACKOFF);
    }
}
