//! This agent's own writes that its caches have not brought back yet. A reconcile decides on
//! the caches, and one that runs after a write of this agent but before the watch delivered
//! it decides on the object as it was before: it sends the same change again. For a task's
//! status that was a second write of the same report (a bench of 300 clusters saw a fifth of
//! the status writes go twice); for a cluster's taint, a JSON patch whose tests fail (the taint
//! it tests is gone: a refused request, 0.1 per cluster on the target).
//!
//! Each write is remembered with the object's uid, the resourceVersion it was decided on and
//! the one it produced. Resource versions of one resource compare as integers (KEP-5504,
//! stable in Kubernetes 1.35: apimachinery's `pkg/util/resourceversion` `CompareResourceVersion`
//! defines them as positive integers without leading zeros, of any length): while the cache's
//! copy is older than the write, the write is in place on the server and the cache is behind it,
//! whatever else changed the object meanwhile (the hub's own controllers write a joining
//! cluster every few seconds). A version that is not such an integer (an older or another
//! server) is compared for equality alone: behind while the cache still shows the version
//! read. A copy of another object of that name (another uid) ends the memory.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long a write is remembered at most: a watch that has not brought a write back in this
/// time is not waited for (the object is decided on again, as it was before this memory).
pub(super) const KEPT: Duration = Duration::from_secs(30);

/// Per object (by key), this agent's last write that changed it, with `T`: what it wrote.
#[derive(Debug)]
pub(super) struct OwnWrites<T> {
    by: BTreeMap<String, Wrote<T>>,
}

impl<T> Default for OwnWrites<T> {
    fn default() -> Self {
        Self {
            by: BTreeMap::new(),
        }
    }
}

#[derive(Debug)]
struct Wrote<T> {
    uid: Option<String>,
    /// The resourceVersion the write was decided on, and the one it produced.
    read: String,
    wrote: String,
    at: Instant,
    what: T,
}

/// `a` against `b` as KEP-5504 orders resource versions, if both are such versions.
pub(super) fn compare_versions(a: &str, b: &str) -> Option<std::cmp::Ordering> {
    let valid =
        |v: &str| !v.is_empty() && !v.starts_with('0') && v.bytes().all(|c| c.is_ascii_digit());
    (valid(a) && valid(b)).then(|| a.len().cmp(&b.len()).then_with(|| a.cmp(b)))
}

impl<T> OwnWrites<T> {
    /// Records that this agent wrote `what` to object `key` (`uid`), decided on its version
    /// `read`, producing version `wrote`, at `now` (a write that produced no new version changed
    /// nothing and is not recorded). Writes older than [`KEPT`] are forgotten, so the memory
    /// holds only the objects written in that time.
    pub(super) fn record(
        &mut self,
        key: &str,
        uid: Option<&str>,
        (read, wrote): (&str, &str),
        what: T,
        now: Instant,
    ) {
        self.by
            .retain(|_, w| now.saturating_duration_since(w.at) < KEPT);
        if read == wrote {
            self.by.remove(key);
            return;
        }
        self.by.insert(
            key.to_owned(),
            Wrote {
                uid: uid.map(str::to_owned),
                read: read.to_owned(),
                wrote: wrote.to_owned(),
                at: now,
                what,
            },
        );
    }

    /// What this agent last wrote to object `key`, if the cache's copy of it (`uid`, version
    /// `cached`, seen at `now`) is older than that write. A copy that caught up, or is another
    /// object of that name, ends the memory.
    pub(super) fn ahead_of(
        &mut self,
        key: &str,
        uid: Option<&str>,
        cached: &str,
        now: Instant,
    ) -> Option<&T> {
        let behind = self.by.get(key).is_some_and(|w| {
            w.uid.as_deref() == uid
                && now.saturating_duration_since(w.at) < KEPT
                && match compare_versions(cached, &w.wrote) {
                    Some(order) => order.is_lt(),
                    None => cached == w.read,
                }
        });
        if !behind {
            self.by.remove(key);
            return None;
        }
        self.by.get(key).map(|w| &w.what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_versions_compare_as_kep_5504_defines_them() {
        use std::cmp::Ordering::*;
        let table = [
            ("9", "10", Some(Less)),
            ("10", "10", Some(Equal)),
            ("123456789012345678901", "99", Some(Greater)),
            ("010", "10", None),
            ("0", "1", None),
            ("", "1", None),
            ("a1", "1", None),
            ("-1", "1", None),
        ];
        for (a, b, want) in table {
            assert_eq!(compare_versions(a, b), want, "{a} vs {b}");
        }
    }

    #[test]
    fn a_write_stands_for_the_object_until_the_cache_catches_up_with_it() {
        let t0 = Instant::now();
        let secs = |s| t0 + Duration::from_secs(s);
        // (written: read, wrote; the cache: uid, version; seconds after the write; what it gives)
        type Case<'a> = (
            &'a str,
            (&'a str, &'a str),
            Option<&'a str>,
            &'a str,
            u64,
            Option<&'a str>,
        );
        let table: [Case; 10] = [
            (
                "the cache still shows the version read",
                ("10", "12"),
                Some("u1"),
                "10",
                1,
                Some("report"),
            ),
            (
                "another writer's change, before the write",
                ("10", "12"),
                Some("u1"),
                "11",
                1,
                Some("report"),
            ),
            (
                "the cache brought the write back",
                ("10", "12"),
                Some("u1"),
                "12",
                1,
                None,
            ),
            (
                "and a later change",
                ("10", "12"),
                Some("u1"),
                "13",
                1,
                None,
            ),
            (
                "another object of that name",
                ("10", "12"),
                Some("u2"),
                "10",
                1,
                None,
            ),
            (
                "an object without a uid is not the one written",
                ("10", "12"),
                None,
                "10",
                1,
                None,
            ),
            (
                "a write not seen for longer than kept",
                ("10", "12"),
                Some("u1"),
                "10",
                31,
                None,
            ),
            (
                "opaque versions: the version read",
                ("a", "b"),
                Some("u1"),
                "a",
                1,
                Some("report"),
            ),
            (
                "opaque versions: any other",
                ("a", "b"),
                Some("u1"),
                "c",
                1,
                None,
            ),
            (
                "a write that changed nothing",
                ("10", "10"),
                Some("u1"),
                "10",
                1,
                None,
            ),
        ];
        for (case, read_wrote, uid, cached, after, want) in table {
            let mut w = OwnWrites::default();
            w.record("task", Some("u1"), read_wrote, "report", t0);
            assert_eq!(
                w.ahead_of("task", uid, cached, secs(after)).copied(),
                want,
                "{case}"
            );
            // Once ended, the memory is gone even if the cache showed the old version again.
            if want.is_none() {
                assert_eq!(
                    w.ahead_of("task", Some("u1"), read_wrote.0, secs(1)),
                    None,
                    "{case}"
                );
            }
        }
        let mut w: OwnWrites<()> = OwnWrites::default();
        assert_eq!(w.ahead_of("never", Some("u1"), "10", t0), None);
        // A creation: decided on no copy (no uid, version ""); ahead while the cache has none,
        // caught up once it shows the object created.
        w.record("c1", None, ("", "12"), (), t0);
        assert!(w.ahead_of("c1", None, "", secs(1)).is_some());
        assert!(w.ahead_of("c1", Some("u9"), "12", secs(1)).is_none());
        assert!(w.ahead_of("c1", None, "", secs(1)).is_none());
    }

    #[test]
    fn the_memory_holds_only_the_writes_of_the_last_kept_seconds() {
        let t0 = Instant::now();
        let mut w = OwnWrites::default();
        for i in 0..1000 {
            w.record(&format!("c{i}"), None, ("1", "2"), (), t0);
        }
        w.record("late", None, ("1", "2"), (), t0 + KEPT);
        assert_eq!(w.by.len(), 1);
        // A later write of the same object replaces the earlier.
        w.record("late", None, ("2", "3"), (), t0 + KEPT);
        assert_eq!(w.by.len(), 1);
        assert!(w.ahead_of("late", None, "2", t0 + KEPT).is_some());
    }
}
