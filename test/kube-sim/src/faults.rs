//! Fault injection, set per instance at run time: latency, error responses at a rate for a
//! verb/resource, dropped watch streams, lagging watch streams, and a full outage (connections
//! refused).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;

/// A rule answering matching requests with an error at some rate.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ErrorRule {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`...; `None` matches any.
    pub verb: Option<String>,
    /// Plural resource name; `None` matches any.
    pub resource: Option<String>,
    /// Fraction of matching requests that fail, in [0, 1].
    pub rate: f64,
    /// HTTP code of the injected error (e.g. 500, 503, 429).
    pub code: u16,
    /// The authenticated user's name; `None` matches any.
    pub user: Option<String>,
}

/// The fault switches of one instance.
#[derive(Debug)]
pub struct Faults {
    latency: Mutex<Duration>,
    /// Nanoseconds, read for every watch event of every watcher: no lock on that path.
    watch_lag_nanos: AtomicU64,
    rules: Mutex<Vec<ErrorRule>>,
    outage: watch::Sender<bool>,
    drop_watches: watch::Sender<u64>,
    any: AtomicBool,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            latency: Mutex::new(Duration::ZERO),
            watch_lag_nanos: AtomicU64::new(0),
            rules: Mutex::new(Vec::new()),
            outage: watch::channel(false).0,
            drop_watches: watch::channel(0).0,
            any: AtomicBool::new(false),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Faults {
    /// Adds latency to every request.
    pub fn set_latency(&self, d: Duration) {
        *lock(&self.latency) = d;
        self.refresh();
    }

    /// The added latency.
    pub fn latency(&self) -> Duration {
        *lock(&self.latency)
    }

    /// Delivers every watch event this long after the change it reports. A real API server
    /// answers a write before its watchers hear of it (its watch cache follows etcd's own watch,
    /// and each watcher's stream is fed from there), so a client's informer can be behind the
    /// client's own last write for a while; by default the simulator's lag is a few
    /// microseconds, which hides a controller that acts again on its cache before its own
    /// write came back.
    pub fn set_watch_lag(&self, d: Duration) {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.watch_lag_nanos.store(nanos, Ordering::SeqCst);
    }

    /// The lag of watch events.
    pub fn watch_lag(&self) -> Duration {
        Duration::from_nanos(self.watch_lag_nanos.load(Ordering::Relaxed))
    }

    /// Adds an error rule.
    pub fn add_error(&self, rule: ErrorRule) {
        lock(&self.rules).push(rule);
        self.refresh();
    }

    /// Removes every error rule, the latency and the watch lag.
    pub fn clear(&self) {
        lock(&self.rules).clear();
        *lock(&self.latency) = Duration::ZERO;
        self.watch_lag_nanos.store(0, Ordering::SeqCst);
        self.refresh();
    }

    fn refresh(&self) {
        let any = !lock(&self.rules).is_empty() || !lock(&self.latency).is_zero();
        self.any.store(any, Ordering::SeqCst);
    }

    /// Whether any latency or error rule is set (a fast path for the common case).
    pub fn active(&self) -> bool {
        self.any.load(Ordering::SeqCst)
    }

    /// The code of an error to inject for this request, if a rule fires.
    pub fn error_for(&self, verb: &str, resource: &str, user: &str) -> Option<u16> {
        let rules = lock(&self.rules);
        rules
            .iter()
            .filter(|r| r.verb.as_deref().is_none_or(|v| v == verb))
            .filter(|r| r.resource.as_deref().is_none_or(|x| x == resource))
            .filter(|r| r.user.as_deref().is_none_or(|u| u == user))
            .find(|r| rand::random::<f64>() < r.rate)
            .map(|r| r.code)
    }

    /// Starts (true) or ends (false) an outage: the port refuses connections meanwhile and
    /// open connections are cut.
    pub fn set_outage(&self, on: bool) {
        self.outage.send_replace(on);
    }

    /// Whether an outage is on.
    pub fn outage(&self) -> bool {
        *self.outage.borrow()
    }

    /// Subscribes to outage changes.
    pub fn outage_changes(&self) -> watch::Receiver<bool> {
        self.outage.subscribe()
    }

    /// Cuts every open watch stream now (clients see the stream end and re-watch).
    pub fn drop_watches(&self) {
        self.drop_watches.send_modify(|n| *n += 1);
    }

    /// Subscribes to watch drops.
    pub fn watch_drops(&self) -> watch::Receiver<u64> {
        self.drop_watches.subscribe()
    }
}
