//! Which agent version a hub gets, and how its rollout stands: pure functions of what the
//! hub's ManagedClusterAddOn records, what was observed of the agent, and the time. The addon
//! controller (`addon::reconcile_hub`) observes, asks these, and applies the answer: the
//! annotations to record, the `Progressing` and `Degraded` conditions, when to look again.
//!
//! The rules: the desired version is rendered unless the hub's config is refused (the hub
//! keeps what it runs), the desired version already failed there (the last good one runs
//! instead), or the hub must wait its turn in the rollout (what it runs stays). A version is
//! *up* once its Deployment is available with that image and the addon's lease is fresh; one
//! not up within the deadline is recorded as failed, which brings the rollback to the last
//! good version (if there is one).

use std::collections::BTreeMap;
use std::time::Duration;

use migration_api::names::annotations as ann;
use migration_api::names::condition_status::{FALSE, TRUE};
use migration_api::names::reasons::{COMPLETED, FAILED, PROGRESSING, WAITING};

/// What a hub's ManagedClusterAddOn records of its versions (its annotations; empty values
/// count as absent).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recorded {
    /// The version rendered into the hub's works (`AGENT_VERSION`).
    pub rendered: Option<String>,
    /// The last version seen up (`AGENT_LAST_GOOD_VERSION`).
    pub last_good: Option<String>,
    /// A version that did not come up in time (`AGENT_FAILED_VERSION`).
    pub failed: Option<String>,
    /// What ran before the current rollout (`AGENT_PREVIOUS_VERSION`).
    pub previous: Option<String>,
    /// When the current rollout started and completed, RFC 3339.
    pub rollout_started: Option<String>,
    pub rollout_completed: Option<String>,
}

/// The version to render on a hub whose desired version is `desired`; `None` when nothing can
/// be deployed (a refused config on a hub that never ran the agent).
pub fn target_version(
    desired: &str,
    config_refused: bool,
    r: &Recorded,
    may_start: bool,
) -> Option<String> {
    if config_refused {
        return r.rendered.clone();
    }
    if r.failed.as_deref() == Some(desired) {
        return r.last_good.clone().or_else(|| r.rendered.clone());
    }
    if r.rendered.is_some() && r.rendered.as_deref() != Some(desired) && !may_start {
        return r.rendered.clone();
    }
    Some(desired.to_owned())
}

/// What one reconcile observed of the hub, besides what it records.
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    /// The version the hub is asked to run.
    pub desired: &'a str,
    /// The version rendered now ([`target_version`]).
    pub target: &'a str,
    /// The hub's config is refused (it keeps what it runs).
    pub config_refused: bool,
    /// The rollout lets this hub change version now.
    pub may_start: bool,
    /// The addon's lease is fresh (`Available` True).
    pub lease_ok: bool,
    /// The agent's Deployment as its work reports it: image, and whether it is available at
    /// its latest generation.
    pub running: Option<(&'a str, bool)>,
    /// How long a rollout may take before it counts as failed.
    pub deadline: Duration,
    pub now: jiff::Timestamp,
}

/// One condition to set: status, reason, message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cond {
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

fn cond(status: &'static str, reason: &'static str, message: String) -> Cond {
    Cond {
        status,
        reason,
        message,
    }
}

/// How the rollout stands, and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rollout {
    /// Annotations to set (`None`: remove).
    pub notes: BTreeMap<&'static str, Option<String>>,
    pub progressing: Cond,
    /// `None`: left as it is.
    pub degraded: Option<Cond>,
    /// The rendered version is up.
    pub up: bool,
    /// When to look again (the rollout's deadline), if before any event.
    pub requeue: Option<Duration>,
}

fn rfc3339(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `d` as people write it in a timeout: `5m`, `1h`, `90s`.
pub fn humantime(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s >= 60 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// The rollout of `o.target` on a hub that records `r`.
pub fn rollout(r: &Recorded, o: &Observed) -> Rollout {
    let target = o.target;
    let now = rfc3339(o.now);
    let mut notes = BTreeMap::new();
    notes.insert(ann::AGENT_DESIRED_VERSION, Some(o.desired.to_owned()));
    if r.failed.is_some() && r.failed.as_deref() != Some(o.desired) {
        // Asked for something else: a failed version may be tried again later.
        notes.insert(ann::AGENT_FAILED_VERSION, None);
    }
    let new_rollout = r.rendered.as_deref() != Some(target);
    if new_rollout {
        notes.insert(ann::AGENT_VERSION, Some(target.to_owned()));
        notes.insert(ann::AGENT_PREVIOUS_VERSION, r.last_good.clone());
        notes.insert(ann::AGENT_ROLLOUT_STARTED, Some(now.clone()));
        notes.insert(ann::AGENT_ROLLOUT_COMPLETED, None);
    }
    let image_tag = o
        .running
        .and_then(|(image, _)| image.rsplit_once(':').map(|(_, t)| t));
    let up = !new_rollout
        && o.lease_ok
        && o.running.is_some_and(|(_, ok)| ok)
        && image_tag == Some(target);
    let started_ago = started_ago(r, o.now, new_rollout);
    let previous = if new_rollout {
        r.last_good.as_deref()
    } else {
        r.previous.as_deref()
    };
    let change = change_of(previous, target);
    let completed = r.rollout_completed.clone().unwrap_or_else(|| now.clone());
    if up && (r.last_good.as_deref() != Some(target) || r.rollout_completed.is_none()) {
        notes.insert(ann::AGENT_LAST_GOOD_VERSION, Some(target.to_owned()));
        notes.insert(ann::AGENT_ROLLOUT_COMPLETED, Some(completed.clone()));
    }
    let deadline = humantime(o.deadline);
    let mut requeue = None;
    let (progressing, degraded) = if r.failed.as_deref() == Some(o.desired) && o.desired != target {
        rolled_back(o.desired, target, &deadline)
    } else if target != o.desired && !o.config_refused && !o.may_start {
        (
            cond(
                FALSE,
                WAITING,
                format!(
                    "agent {} waits for its turn in the rollout; {target} keeps running",
                    o.desired
                ),
            ),
            None,
        )
    } else if up {
        let started = r.rollout_started.clone().unwrap_or_default();
        let degraded = if o.config_refused {
            cond(
                TRUE,
                "ConfigurationRefused",
                format!("agent {target} keeps running; see the Configured condition"),
            )
        } else {
            cond(
                FALSE,
                "AsExpected",
                format!("agent {target} is running as desired"),
            )
        };
        (
            cond(
                FALSE,
                COMPLETED,
                format!(
                    "agent {target} is available ({change} started {started}, completed {completed})"
                ),
            ),
            Some(degraded),
        )
    } else {
        let elapsed = started_ago.unwrap_or_default();
        if elapsed > o.deadline && r.last_good.as_deref() != Some(target) {
            past_deadline(r, target, &change, &deadline, &mut notes)
        } else {
            if let Some(left) = o.deadline.checked_sub(elapsed) {
                requeue = Some(left + Duration::from_millis(200));
            }
            let since = if new_rollout {
                now.clone()
            } else {
                r.rollout_started.clone().unwrap_or_else(|| now.clone())
            };
            (
                cond(
                    TRUE,
                    PROGRESSING,
                    format!("{change} in progress since {since}"),
                ),
                None,
            )
        }
    };
    Rollout {
        notes,
        progressing,
        degraded,
        up,
        requeue,
    }
}

/// The conditions of a hub rolled back from the failed version `f` to `target`.
fn rolled_back(f: &str, target: &str, deadline: &str) -> (Cond, Option<Cond>) {
    (
        cond(
            FALSE,
            FAILED,
            format!(
                "agent {f} did not become available within {deadline}; rolled back to {target}"
            ),
        ),
        Some(cond(
            TRUE,
            "UpgradeFailed",
            format!(
                "running {target} instead of the desired {f}; point AGENT_VERSION elsewhere to retry"
            ),
        )),
    )
}

/// How long ago the current rollout started (`None`: not recorded).
fn started_ago(r: &Recorded, now: jiff::Timestamp, new_rollout: bool) -> Option<Duration> {
    if new_rollout {
        return Some(Duration::ZERO);
    }
    let t: jiff::Timestamp = r.rollout_started.as_deref()?.parse().ok()?;
    Some(Duration::try_from(now.duration_since(t)).unwrap_or_default())
}

/// The change a rollout to `target` makes, from the version that ran before it.
fn change_of(previous: Option<&str>, target: &str) -> String {
    match previous {
        Some(p) if p != target => format!("upgrade from {p} to {target}"),
        Some(_) => format!("redeploy of {target}"),
        None => format!("install of {target}"),
    }
}

/// The conditions of a rollout of `target` past its deadline (`deadline`, as written); records
/// the failure in `notes` when there is a last good version to roll back to.
fn past_deadline(
    r: &Recorded,
    target: &str,
    change: &str,
    deadline: &str,
    notes: &mut BTreeMap<&'static str, Option<String>>,
) -> (Cond, Option<Cond>) {
    let back = r.last_good.as_deref().filter(|g| *g != target);
    if back.is_some() {
        // Recording the failure changes the ManagedClusterAddOn, and that event brings the
        // reconcile that renders the rollback.
        notes.insert(ann::AGENT_FAILED_VERSION, Some(target.to_owned()));
    }
    (
        cond(
            FALSE,
            FAILED,
            format!(
                "agent {target} did not become available within {deadline} ({change}); {}",
                back.map(|g| format!("rolling back to {g}"))
                    .unwrap_or_else(|| "no earlier version to roll back to".into())
            ),
        ),
        Some(cond(
            TRUE,
            "UpgradeFailed",
            format!("agent {target} is not available"),
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(rendered: Option<&str>, last_good: Option<&str>, failed: Option<&str>) -> Recorded {
        Recorded {
            rendered: rendered.map(Into::into),
            last_good: last_good.map(Into::into),
            failed: failed.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn the_version_to_render() {
        // (desired, config refused, rendered, last good, failed, may start, renders)
        let cases = [
            ("2", false, None, None, None, true, Some("2")),
            // A first install starts whatever the rollout says.
            ("2", false, None, None, None, false, Some("2")),
            ("2", false, Some("1"), Some("1"), None, true, Some("2")),
            // Not this hub's turn: what it runs stays.
            ("2", false, Some("1"), Some("1"), None, false, Some("1")),
            ("2", false, Some("2"), Some("1"), None, false, Some("2")),
            // The desired version failed here: the last good one runs.
            ("2", false, Some("2"), Some("1"), Some("2"), true, Some("1")),
            // ... or, with none, what is rendered.
            ("2", false, Some("2"), None, Some("2"), true, Some("2")),
            // Another version failed before: the desired one may be tried.
            ("3", false, Some("1"), Some("1"), Some("2"), true, Some("3")),
            // A refused config: the hub keeps what it runs; nothing on a new hub.
            ("2", true, Some("1"), Some("1"), None, true, Some("1")),
            ("2", true, None, None, None, true, None),
        ];
        for (desired, refused, rendered, good, failed, may, want) in cases {
            let r = rec(rendered, good, failed);
            assert_eq!(
                target_version(desired, refused, &r, may).as_deref(),
                want,
                "{desired} refused={refused} {r:?} may_start={may}"
            );
        }
    }

    fn at(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    const T0: &str = "2026-01-01T00:00:00Z";

    fn obs<'a>(
        desired: &'a str,
        target: &'a str,
        running: Option<(&'a str, bool)>,
    ) -> Observed<'a> {
        Observed {
            desired,
            target,
            config_refused: false,
            may_start: true,
            lease_ok: true,
            running,
            deadline: Duration::from_secs(300),
            now: at("2026-01-01T00:01:00Z"),
        }
    }

    fn started(mut r: Recorded, previous: Option<&str>) -> Recorded {
        r.rollout_started = Some(T0.into());
        r.previous = previous.map(Into::into);
        r
    }

    #[test]
    fn a_new_rollout_records_itself_and_is_in_progress() {
        let r = rec(Some("1"), Some("1"), None);
        let out = rollout(&r, &obs("2", "2", Some(("img:1", true))));
        assert_eq!(out.notes[ann::AGENT_VERSION].as_deref(), Some("2"));
        assert_eq!(out.notes[ann::AGENT_PREVIOUS_VERSION].as_deref(), Some("1"));
        assert_eq!(
            out.notes[ann::AGENT_ROLLOUT_STARTED].as_deref(),
            Some("2026-01-01T00:01:00Z")
        );
        assert_eq!(out.notes[ann::AGENT_ROLLOUT_COMPLETED], None);
        assert!(!out.up);
        assert_eq!(out.progressing.status, "True");
        assert!(
            out.progressing.message.starts_with("upgrade from 1 to 2"),
            "{}",
            out.progressing.message
        );
        assert_eq!(out.requeue, Some(Duration::from_millis(300_200)));
        assert_eq!(out.degraded, None);
    }

    #[test]
    fn a_version_up_is_recorded_good_and_completed() {
        let r = started(rec(Some("2"), Some("1"), None), Some("1"));
        let out = rollout(&r, &obs("2", "2", Some(("img:2", true))));
        assert!(out.up);
        assert_eq!(
            out.notes[ann::AGENT_LAST_GOOD_VERSION].as_deref(),
            Some("2")
        );
        assert_eq!(
            out.notes[ann::AGENT_ROLLOUT_COMPLETED].as_deref(),
            Some("2026-01-01T00:01:00Z")
        );
        assert_eq!(
            (out.progressing.status, out.progressing.reason),
            ("False", COMPLETED)
        );
        assert_eq!(out.degraded.map(|d| d.reason), Some("AsExpected"));
        assert_eq!(out.requeue, None);
        // Already recorded: nothing more to record.
        let mut done = started(rec(Some("2"), Some("2"), None), Some("1"));
        done.rollout_completed = Some("2026-01-01T00:00:30Z".into());
        let out = rollout(&done, &obs("2", "2", Some(("img:2", true))));
        assert!(!out.notes.contains_key(ann::AGENT_LAST_GOOD_VERSION));
        assert!(
            out.progressing
                .message
                .contains("completed 2026-01-01T00:00:30Z")
        );
    }

    #[test]
    fn up_needs_the_lease_the_image_and_an_available_deployment() {
        let r = started(rec(Some("2"), Some("1"), None), Some("1"));
        for (lease, running) in [
            (false, Some(("img:2", true))),
            (true, Some(("img:1", true))),
            (true, Some(("img:2", false))),
            (true, None),
        ] {
            let mut o = obs("2", "2", running);
            o.lease_ok = lease;
            let out = rollout(&r, &o);
            assert!(!out.up, "{lease} {running:?}");
            assert_eq!(out.progressing.reason, PROGRESSING);
            assert_eq!(out.requeue, Some(Duration::from_millis(240_200)));
        }
    }

    #[test]
    fn past_the_deadline_the_version_fails_and_the_last_good_one_comes_back() {
        let r = started(rec(Some("2"), Some("1"), None), Some("1"));
        let mut o = obs("2", "2", Some(("img:1", true)));
        o.now = at("2026-01-01T00:06:00Z");
        let out = rollout(&r, &o);
        assert_eq!(out.notes[ann::AGENT_FAILED_VERSION].as_deref(), Some("2"));
        assert_eq!(out.progressing.reason, FAILED);
        assert!(out.progressing.message.contains("rolling back to 1"));
        assert_eq!(out.degraded.map(|d| d.reason), Some("UpgradeFailed"));
        // A first install has nothing to roll back to: no failure is recorded.
        let first = started(rec(Some("2"), None, None), None);
        let out = rollout(&first, &o);
        assert!(!out.notes.contains_key(ann::AGENT_FAILED_VERSION));
        assert!(out.progressing.message.contains("no earlier version"));
        // Rolled back: says so, and what it runs instead.
        let back = started(rec(Some("1"), Some("1"), Some("2")), Some("1"));
        let out = rollout(&back, &obs("2", "1", Some(("img:1", true))));
        assert_eq!(out.progressing.reason, FAILED);
        assert!(out.progressing.message.contains("rolled back to 1"));
        assert!(
            out.degraded
                .unwrap()
                .message
                .contains("instead of the desired 2")
        );
        // A new desired version clears the failure record.
        let out = rollout(&back, &obs("3", "3", None));
        assert_eq!(out.notes.get(ann::AGENT_FAILED_VERSION), Some(&None));
    }

    #[test]
    fn a_hub_waiting_its_turn_or_with_a_refused_config_keeps_what_it_runs() {
        let r = started(rec(Some("1"), Some("1"), None), None);
        let mut o = obs("2", "1", Some(("img:1", true)));
        o.may_start = false;
        let out = rollout(&r, &o);
        assert_eq!(out.progressing.reason, WAITING);
        assert!(out.progressing.message.contains("waits for its turn"));
        assert!(!out.notes.contains_key(ann::AGENT_VERSION));
        let mut o = obs("2", "1", Some(("img:1", true)));
        o.config_refused = true;
        let out = rollout(&r, &o);
        assert!(out.up);
        assert_eq!(out.degraded.map(|d| d.reason), Some("ConfigurationRefused"));
    }

    #[test]
    fn timeouts_read_as_people_write_them() {
        assert_eq!(humantime(Duration::from_secs(300)), "5m");
        assert_eq!(humantime(Duration::from_secs(7200)), "2h");
        assert_eq!(humantime(Duration::from_secs(90)), "90s");
    }
}
