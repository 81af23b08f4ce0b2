//! Whether a klusterlet runs a process started after its settings changed, from what its
//! lease and its klusterlet work showed this agent and when.
//!
//! A running registration agent renews its cluster's lease every lease period or a little
//! later (ocm `pkg/registration/spoke/lease/lease_controller.go`: `JitterUntilWithContext`
//! with the lease duration and a jitter factor of 0.25), and a new process renews it as it
//! starts (the loop runs its first update at once). So a renewal that follows the one before
//! it by less than the lease period was made by a process started in between; and when this
//! agent saw that renewal only after it saw the cluster's klusterlet work change, the process
//! started after the change was written (its cause, or later).
//!
//! This covers the order the baseline of `renewed_since_configured` misses: the new process
//! renews the lease before its work agent reports the work applied (the old process stopped
//! before it could), and the handler, woken for another cluster, records that renewal as the
//! baseline; the next renewal then comes a whole lease period later.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One renewal of a cluster's lease: its time (the klusterlet's clock) and when this agent
/// saw it (its own clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Renewal {
    pub(super) at: jiff::Timestamp,
    pub(super) seen: Instant,
}

/// A cluster's last two renewals, and when this agent last saw its klusterlet work's spec
/// change (its generation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Lives {
    prev: Option<Renewal>,
    last: Option<Renewal>,
    work: Option<(i64, Instant)>,
}

impl Lives {
    /// A lease event: a time other than the last one is a renewal.
    pub(super) fn renewed(&mut self, at: jiff::Timestamp, seen: Instant) {
        if self.last.is_some_and(|l| l.at == at) {
            return;
        }
        self.prev = self.last;
        self.last = Some(Renewal { at, seen });
    }

    /// A klusterlet work event: a generation other than the last one is a spec change.
    pub(super) fn work_generation(&mut self, generation: i64, seen: Instant) {
        if self.work.is_some_and(|(g, _)| g == generation) {
            return;
        }
        self.work = Some((generation, seen));
    }

    /// Whether the last renewal was made by a process that started after this agent saw the
    /// work's spec change: seen after it, and less than `period` (the cluster's lease
    /// duration) after the renewal before it. False when unsure (no earlier renewal seen, or
    /// one a period or more before): the caller's baseline decides then.
    pub(super) fn started_since_work_changed(&self, period: Duration) -> bool {
        let (Some(prev), Some(last), Some((_, changed))) = (self.prev, self.last, self.work) else {
            return false;
        };
        let gap = last.at.duration_since(prev.at);
        last.seen > changed
            && gap > jiff::SignedDuration::ZERO
            && gap < jiff::SignedDuration::try_from(period).unwrap_or(jiff::SignedDuration::MAX)
    }
}

/// Per cluster (its namespace on this hub), what its lease and klusterlet work showed.
pub(super) type Seen = Arc<Mutex<HashMap<String, Lives>>>;

/// Records in `seen` for `cluster` with `f`.
pub(super) fn record(seen: &Seen, cluster: &str, f: impl FnOnce(&mut Lives)) {
    if let Ok(mut all) = seen.lock() {
        f(all.entry(cluster.to_owned()).or_default());
    }
}

/// Forgets the clusters for which `here` is false (those this hub no longer holds): what a
/// cluster's lease and work showed matters only while it is here, and the map would otherwise
/// keep every cluster that ever passed through the hub.
pub(super) fn forget_gone(seen: &Seen, here: impl Fn(&str) -> bool) {
    if let Ok(mut all) = seen.lock() {
        all.retain(|cluster, _| here(cluster));
    }
}

/// How many clusters `seen` holds.
#[cfg(test)]
pub(super) fn len(seen: &Seen) -> usize {
    seen.lock().map_or(0, |all| all.len())
}

/// Whether `cluster`'s last renewal came from a process started after its work changed.
pub(super) fn started_since_work_changed(seen: &Seen, cluster: &str, period: Duration) -> bool {
    seen.lock().is_ok_and(|all| {
        all.get(cluster)
            .is_some_and(|l| l.started_since_work_changed(period))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renewal_sooner_than_the_period_after_a_work_change_is_a_new_process() {
        let t0: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let at = |s: i64| t0 + jiff::SignedDuration::from_secs(s);
        let base = Instant::now();
        let seen = |ms: u64| base + Duration::from_millis(ms);
        let period = Duration::from_secs(60);
        // (renewals as (klusterlet's second, seen at ms), work changed at ms, new process?)
        type Row = (&'static str, &'static [(i64, u64)], Option<u64>, bool);
        let table: [Row; 8] = [
            (
                "restarted by the change: renewed 20 s after the last periodic renewal",
                &[(0, 0), (20, 20_500)],
                Some(20_000),
                true,
            ),
            (
                "a periodic renewal after the change is the old process",
                &[(0, 0), (60, 60_500)],
                Some(60_000),
                false,
            ),
            (
                "a periodic renewal with jitter, too",
                &[(0, 0), (73, 73_500)],
                Some(60_000),
                false,
            ),
            (
                "restarted before the change (say, set up just before): not this change's",
                &[(0, 0), (5, 5_000)],
                Some(6_000),
                false,
            ),
            ("no work change seen", &[(0, 0), (5, 5_000)], None, false),
            ("one renewal alone", &[(5, 5_000)], Some(1_000), false),
            (
                "the same renewal seen again is no renewal",
                &[(0, 0), (20, 20_500), (20, 21_000)],
                Some(20_000),
                true,
            ),
            (
                "the new process's next (periodic) renewal: the baseline's case, not this one's",
                &[(0, 0), (20, 20_500), (80, 80_500)],
                Some(20_000),
                false,
            ),
        ];
        for (what, renewals, changed, want) in table {
            let mut l = Lives::default();
            if let Some(ms) = changed {
                l.work_generation(2, seen(ms));
            }
            for (s, ms) in renewals {
                l.renewed(at(*s), seen(*ms));
            }
            assert_eq!(l.started_since_work_changed(period), want, "{what}");
        }
        // The generation seen again does not move the change's time.
        let mut l = Lives::default();
        l.work_generation(2, seen(1_000));
        l.renewed(at(0), seen(0));
        l.renewed(at(20), seen(20_500));
        l.work_generation(2, seen(30_000));
        assert!(l.started_since_work_changed(period));
        l.work_generation(3, seen(30_000));
        assert!(!l.started_since_work_changed(period), "changed again since");
    }
}
