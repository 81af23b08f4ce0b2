//! Rollout of a new agent version across the hubs of one install placement: which hubs may
//! start now under the placement's rolloutStrategy (All, Progressive, ProgressivePerGroup), and
//! whether the rollout is halted by failures. Pure: the reconciler gathers each hub's state.

use std::collections::BTreeSet;
use std::time::Duration;

use migration_api::ocm::addon::RolloutStrategy;

/// Where one hub stands with respect to the version being rolled out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HubPhase {
    /// Runs an older version (or nothing) and has not started the new one.
    ToUpdate,
    /// Started the new version, not yet Available.
    InProgress,
    /// The new version became Available this long ago.
    Succeeded(Duration),
    /// The new version failed (and the hub was rolled back).
    Failed,
}

/// One hub of the placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubRollout {
    pub name: String,
    /// Decision group index (0 when the placement has no groups).
    pub group: i32,
    pub phase: HubPhase,
}

/// The rollout's parameters, parsed from the strategy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    pub kind: Kind,
    /// Hubs that may be in progress at once (Progressive).
    pub max_concurrency: MaxCount,
    /// Failures tolerated before the rollout halts.
    pub max_failures: MaxCount,
    /// How long a success keeps counting as in progress.
    pub min_success_time: Duration,
    /// How long a hub may take before it is failed (None: the manager's default).
    pub progress_deadline: Option<Duration>,
}

/// The rollout type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    All,
    Progressive,
    ProgressivePerGroup,
}

/// A count given as a number or a percentage of the hubs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxCount {
    Count(usize),
    Percent(u32),
    Unlimited,
}

impl MaxCount {
    fn of(self, total: usize) -> usize {
        match self {
            MaxCount::Count(n) => n,
            // Upstream rounds a percentage of hubs up, and at least one may proceed.
            MaxCount::Percent(p) => (total * p as usize).div_ceil(100),
            MaxCount::Unlimited => usize::MAX,
        }
    }
}

fn parse_count(v: Option<&serde_json::Value>, default: MaxCount) -> Result<MaxCount, String> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(default),
        Some(serde_json::Value::Number(n)) => n
            .as_u64()
            .map(|n| MaxCount::Count(n as usize))
            .ok_or_else(|| format!("{n} is not a non-negative integer")),
        Some(serde_json::Value::String(s)) => match s.strip_suffix('%') {
            Some(p) => p
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|p| *p <= 100)
                .map(MaxCount::Percent)
                .ok_or_else(|| format!("{s:?} is not a percentage")),
            None => s
                .trim()
                .parse::<usize>()
                .map(MaxCount::Count)
                .map_err(|_| format!("{s:?} is not a count or a percentage")),
        },
        Some(other) => Err(format!("{other} is not a count or a percentage")),
    }
}

fn parse_time(v: Option<&String>, what: &str) -> Result<Option<Duration>, String> {
    match v.map(String::as_str) {
        None | Some("") | Some("None") => Ok(None),
        Some(s) => migration_api::migration::parse_duration(s)
            .map(Some)
            .ok_or_else(|| format!("{what} {s:?} is not a duration such as 30s, 5m or 1h")),
    }
}

impl Params {
    /// Reads a rollout strategy (None: All).
    pub fn parse(s: Option<&RolloutStrategy>) -> Result<Self, String> {
        let ty = s.and_then(|s| s.type_.as_deref()).unwrap_or("All");
        let (kind, mst, pd, mf, mc) = match ty {
            "All" => {
                let a = s.and_then(|s| s.all.as_ref());
                (
                    Kind::All,
                    a.and_then(|a| a.min_success_time.as_ref()),
                    a.and_then(|a| a.progress_deadline.as_ref()),
                    a.and_then(|a| a.max_failures.as_ref()),
                    None,
                )
            }
            "Progressive" => {
                let p = s.and_then(|s| s.progressive.as_ref());
                (
                    Kind::Progressive,
                    p.and_then(|p| p.min_success_time.as_ref()),
                    p.and_then(|p| p.progress_deadline.as_ref()),
                    p.and_then(|p| p.max_failures.as_ref()),
                    p.and_then(|p| p.max_concurrency.as_ref()),
                )
            }
            "ProgressivePerGroup" => {
                let p = s.and_then(|s| s.progressive_per_group.as_ref());
                (
                    Kind::ProgressivePerGroup,
                    p.and_then(|p| p.min_success_time.as_ref()),
                    p.and_then(|p| p.progress_deadline.as_ref()),
                    p.and_then(|p| p.max_failures.as_ref()),
                    None,
                )
            }
            other => return Err(format!("unknown rollout type {other:?}")),
        };
        Ok(Self {
            kind,
            max_concurrency: parse_count(mc, MaxCount::Unlimited)
                .map_err(|e| format!("maxConcurrency {e}"))?,
            max_failures: parse_count(mf, MaxCount::Count(0))
                .map_err(|e| format!("maxFailures {e}"))?,
            min_success_time: parse_time(mst, "minSuccessTime")?.unwrap_or_default(),
            progress_deadline: parse_time(pd, "progressDeadline")?,
        })
    }
}

/// The outcome of planning.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Hubs that may start the new version now.
    pub start: BTreeSet<String>,
    /// Why no further hub may start, when the rollout is halted.
    pub halted: Option<String>,
    pub succeeded: usize,
    pub in_progress: usize,
    pub failed: usize,
    pub waiting: usize,
}

/// Decides which hubs may start now.
pub fn plan(p: &Params, hubs: &[HubRollout]) -> Plan {
    let total = hubs.len();
    let mut out = Plan::default();
    let mut busy = 0;
    for h in hubs {
        match h.phase {
            HubPhase::ToUpdate => out.waiting += 1,
            HubPhase::InProgress => {
                out.in_progress += 1;
                busy += 1;
            }
            HubPhase::Succeeded(ago) => {
                out.succeeded += 1;
                if ago < p.min_success_time {
                    busy += 1;
                }
            }
            HubPhase::Failed => out.failed += 1,
        }
    }
    let max_failures = p.max_failures.of(total);
    if out.failed > max_failures {
        out.halted = Some(format!(
            "halted: {} hub(s) failed, more than maxFailures {max_failures}",
            out.failed
        ));
        return out;
    }
    let mut waiting: Vec<&HubRollout> = hubs
        .iter()
        .filter(|h| h.phase == HubPhase::ToUpdate)
        .collect();
    waiting.sort_by(|a, b| (a.group, &a.name).cmp(&(b.group, &b.name)));
    match p.kind {
        Kind::All => out.start = waiting.iter().map(|h| h.name.clone()).collect(),
        Kind::Progressive => {
            let room = p.max_concurrency.of(total).max(1).saturating_sub(busy);
            out.start = waiting.iter().take(room).map(|h| h.name.clone()).collect();
        }
        Kind::ProgressivePerGroup => {
            // The lowest group with unfinished hubs goes first, and all of it at once.
            let unfinished = |h: &HubRollout| match h.phase {
                HubPhase::ToUpdate | HubPhase::InProgress => true,
                HubPhase::Succeeded(ago) => ago < p.min_success_time,
                HubPhase::Failed => false,
            };
            if let Some(group) = hubs.iter().filter(|h| unfinished(h)).map(|h| h.group).min() {
                out.start = waiting
                    .iter()
                    .filter(|h| h.group == group)
                    .map(|h| h.name.clone())
                    .collect();
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn hub(name: &str, group: i32, phase: HubPhase) -> HubRollout {
        HubRollout {
            name: name.into(),
            group,
            phase,
        }
    }

    fn strategy(v: serde_json::Value) -> Params {
        Params::parse(Some(&serde_json::from_value(v).unwrap())).unwrap()
    }

    fn names(p: &Plan) -> Vec<&str> {
        p.start.iter().map(String::as_str).collect()
    }

    #[test]
    fn all_starts_everyone() {
        let p = Params::parse(None).unwrap();
        let hubs = [
            hub("a", 0, HubPhase::ToUpdate),
            hub("b", 0, HubPhase::ToUpdate),
        ];
        assert_eq!(names(&plan(&p, &hubs)), ["a", "b"]);
    }

    #[test]
    fn progressive_one_at_a_time_and_halts_after_a_failure() {
        let p = strategy(
            json!({"type": "Progressive", "progressive": {"maxConcurrency": 1, "maxFailures": 0}}),
        );
        let mut hubs = vec![
            hub("hub1", 0, HubPhase::ToUpdate),
            hub("hub2", 0, HubPhase::ToUpdate),
            hub("hub3", 0, HubPhase::ToUpdate),
        ];
        assert_eq!(names(&plan(&p, &hubs)), ["hub1"]);
        hubs[0].phase = HubPhase::InProgress;
        assert!(plan(&p, &hubs).start.is_empty());
        hubs[0].phase = HubPhase::Succeeded(Duration::from_secs(1));
        assert_eq!(names(&plan(&p, &hubs)), ["hub2"]);
        hubs[1].phase = HubPhase::Failed;
        let out = plan(&p, &hubs);
        assert!(out.start.is_empty());
        assert!(
            out.halted.as_deref().unwrap().contains("maxFailures 0"),
            "{out:?}"
        );
    }

    #[test]
    fn min_success_time_holds_the_next_hub() {
        let p = strategy(json!({"type": "Progressive",
            "progressive": {"maxConcurrency": 1, "minSuccessTime": "30s"}}));
        let mut hubs = vec![
            hub("a", 0, HubPhase::Succeeded(Duration::from_secs(5))),
            hub("b", 0, HubPhase::ToUpdate),
        ];
        assert!(plan(&p, &hubs).start.is_empty());
        hubs[0].phase = HubPhase::Succeeded(Duration::from_secs(31));
        assert_eq!(names(&plan(&p, &hubs)), ["b"]);
    }

    #[test]
    fn percentages_round_up() {
        let p = strategy(json!({"type": "Progressive", "progressive": {"maxConcurrency": "25%"}}));
        let hubs: Vec<_> = (0..6)
            .map(|i| hub(&format!("h{i}"), 0, HubPhase::ToUpdate))
            .collect();
        assert_eq!(plan(&p, &hubs).start.len(), 2);
    }

    #[test]
    fn per_group_finishes_a_group_before_the_next() {
        let p = strategy(
            json!({"type": "ProgressivePerGroup", "progressivePerGroup": {"maxFailures": 1}}),
        );
        let mut hubs = vec![
            hub("a", 0, HubPhase::ToUpdate),
            hub("b", 0, HubPhase::ToUpdate),
            hub("c", 1, HubPhase::ToUpdate),
        ];
        assert_eq!(names(&plan(&p, &hubs)), ["a", "b"]);
        hubs[0].phase = HubPhase::Succeeded(Duration::from_secs(9));
        hubs[1].phase = HubPhase::InProgress;
        assert!(plan(&p, &hubs).start.is_empty());
        hubs[1].phase = HubPhase::Failed;
        assert_eq!(
            names(&plan(&p, &hubs)),
            ["c"],
            "one failure is within maxFailures 1"
        );
    }

    #[test]
    fn bad_strategies_are_errors() {
        for bad in [
            json!({"type": "Sometimes"}),
            json!({"type": "Progressive", "progressive": {"maxConcurrency": "lots"}}),
            json!({"type": "Progressive", "progressive": {"maxFailures": "120%"}}),
            json!({"type": "Progressive", "progressive": {"progressDeadline": "soon"}}),
        ] {
            let s = serde_json::from_value(bad.clone()).unwrap();
            assert!(Params::parse(Some(&s)).is_err(), "{bad}");
        }
        let none = strategy(json!({"type": "All", "all": {"progressDeadline": "None"}}));
        assert_eq!(none.progress_deadline, None);
    }
}
