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

/// Retries per second client-go's default controller rate limiter allows across a queue
/// (`rate.NewLimiter(rate.Limit(10), 100)` in `DefaultTypedControllerRateLimiter`), and its burst.
const QUEUE_RETRIES_PER_SECOND: f64 = 10.0;
const QUEUE_RETRY_BURST: f64 = 100.0;

/// A work queue's retries of failed items, as client-go's `DefaultTypedControllerRateLimiter`
/// spaces them (`util/workqueue/default_rate_limiters.go`): the later of the item's own
/// backoff ([`controller`], counted per item until the item is forgotten) and the queue's
/// share of a bucket of 10 retries per second with bursts of 100 (golang.org/x/time/rate's
/// `Reserve`: a retry past the burst waits until its token is due). OCM's factory controllers
/// (sdk-go `pkg/basecontroller/factory`) and controller-runtime controllers without a
/// `RateLimiter` option (the import controller's) all take it; an item retried because of an
/// event comes at once, only the retries of failures wait.
#[derive(Debug)]
pub(crate) struct Retries {
    state: std::sync::Mutex<RetryState>,
}

#[derive(Debug)]
struct RetryState {
    /// Failures in a row, per item.
    failures: std::collections::HashMap<String, u32>,
    /// The bucket: its tokens when it was last drawn from (negative: retries queued past it).
    tokens: f64,
    drawn: Instant,
}

impl Default for Retries {
    fn default() -> Self {
        Self {
            state: std::sync::Mutex::new(RetryState {
                failures: Default::default(),
                tokens: QUEUE_RETRY_BURST,
                drawn: Instant::now(),
            }),
        }
    }
}

impl Retries {
    /// How long after `now` the item `key`, which just failed, is retried (`When`).
    pub(crate) fn when(&self, key: &str, now: Instant) -> Duration {
        let mut s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let failures = s.failures.entry(key.to_owned()).or_default();
        *failures = failures.saturating_add(1);
        let own = controller(*failures);
        let refilled =
            now.saturating_duration_since(s.drawn).as_secs_f64() * QUEUE_RETRIES_PER_SECOND;
        s.tokens = (s.tokens + refilled).min(QUEUE_RETRY_BURST) - 1.0;
        s.drawn = s.drawn.max(now);
        let queued = if s.tokens < 0.0 {
            Duration::from_secs_f64(-s.tokens / QUEUE_RETRIES_PER_SECOND)
        } else {
            Duration::ZERO
        };
        own.max(queued)
    }

    /// The item `key` was handled: its own backoff starts again (`Forget`).
    pub(crate) fn forget(&self, key: &str) {
        let mut s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.failures.remove(key);
    }

    /// `result` of a reconcile of `key`, which is forgotten when it succeeded (the queue's
    /// `Forget` after a handler returned no error).
    pub(crate) fn settled<T, E>(&self, key: &str, result: Result<T, E>) -> Result<T, E> {
        if result.is_ok() {
            self.forget(key);
        }
        result
    }
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

    /// One item failing again and again backs off on its own; a hundred items failing at once
    /// are retried at once, and the rest ten per second, whatever their own backoff; an item
    /// handled since starts again from 5 ms.
    #[test]
    fn a_queue_retries_each_item_with_its_backoff_and_all_of_them_ten_per_second_past_a_burst_of_100()
     {
        let t0 = Instant::now();
        let one = Retries::default();
        let own: Vec<_> = (0..4).map(|_| one.when("a", t0).as_millis()).collect();
        assert_eq!(own, [5, 10, 20, 40], "one item's own backoff");
        // A failed reconcile leaves it counted; a successful one forgets it.
        assert!(one.settled("a", Err::<(), ()>(())).is_err());
        assert_eq!(
            one.when("a", t0),
            Duration::from_millis(80),
            "still counted"
        );
        assert!(one.settled("a", Ok::<(), ()>(())).is_ok());
        assert_eq!(one.when("a", t0), Duration::from_millis(5), "forgotten");

        let many = Retries::default();
        let waits: Vec<Duration> = (0..120).map(|i| many.when(&format!("c{i}"), t0)).collect();
        assert!(
            waits[..100].iter().all(|w| *w == Duration::from_millis(5)),
            "the burst"
        );
        assert_eq!(waits[100].as_millis(), 100, "the first past the burst");
        assert_eq!(waits[119].as_millis(), 2000, "the twentieth past it");
        // A second later, the next retry still queues behind those twenty: its slot is the
        // twenty-first past the burst, 2.1 s after the first failures.
        let later = many.when("c0", t0 + Duration::from_secs(1));
        assert_eq!(later.as_millis(), 1100);
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
