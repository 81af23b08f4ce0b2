//! Which bootstrap CSR the target approves for a cluster, worked out purely from what was
//! observed: the migration's bootstrap identity is one token shared by every cluster it moves,
//! so whoever holds it (an admin of any migrating cluster) can ask for a certificate in any
//! migrating cluster's name. The target therefore approves
//!
//! - only for a cluster the manager released (the source stopped accepting it), and only a
//!   request made after the target learnt of the release (one filed earlier, while the cluster
//!   was held or waiting, cannot be its klusterlet's: that asks only once released),
//! - only while that cluster has not joined here (a second CSR for a joined cluster is
//!   someone else's, or a replay),
//! - only once: not after a CSR of that cluster was approved, unless that join failed: the
//!   signer refused it (`Failed`), or the cluster has not joined [`RETRY_AFTER`] after it (its
//!   klusterlet restarted before it stored the certificate, and asks again),
//! - the newest pending one: a klusterlet restarted while it waited asks again, and only its
//!   latest request is still polled (ocm `pkg/registration/register/csr/csr.go`).
//!
//! Caller's part ([`crate::migration`]): only CSRs of the bootstrap identity, labelled for the
//! cluster, for the kube-apiserver-client signer and the cluster's own agent identity.

use std::time::Duration;

use jiff::Timestamp;
use migration_api::migration::ClusterState;

/// How long an approved cluster has to join before its join counts as failed.
pub const RETRY_AFTER: Duration = Duration::from_secs(120);

/// A CSR as far as approval goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub name: &'a str,
    pub created: Timestamp,
    pub decision: Decision,
}

/// Where a CSR stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Pending,
    /// Approved at this time.
    Approved(Timestamp),
    /// Approved, and then the signer refused it (`Failed` condition).
    ApprovedFailed,
    Denied,
}

/// The CSR to approve at `now` for a cluster in `state` on the target, released at
/// `released_at` (`None`: not released), if any.
pub fn approve<'a>(
    released_at: Option<Timestamp>,
    state: ClusterState,
    requests: &[Request<'a>],
    now: Timestamp,
) -> Option<&'a str> {
    let released_at = released_at?;
    if state != ClusterState::Created {
        return None;
    }
    // Creation times have whole seconds.
    let since = released_at
        .round(
            jiff::TimestampRound::new()
                .smallest(jiff::Unit::Second)
                .mode(jiff::RoundMode::Floor),
        )
        .unwrap_or(released_at);
    let latest_approval = requests
        .iter()
        .filter_map(|r| match r.decision {
            Decision::Approved(at) => Some(at),
            _ => None,
        })
        .max();
    if let Some(at) = latest_approval {
        let waited = now.duration_since(at);
        if waited < jiff::SignedDuration::try_from(RETRY_AFTER).unwrap_or_default() {
            return None;
        }
    }
    requests
        .iter()
        .filter(|r| r.decision == Decision::Pending && r.created >= since)
        // Asked after the last approval (an older request is not the one a restarted
        // klusterlet polls).
        .filter(|r| latest_approval.is_none_or(|at| r.created > at))
        .max_by(|a, b| a.created.cmp(&b.created).then(a.name.cmp(b.name)))
        .map(|r| r.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ClusterState::{Available, Created, Joined, Refused};
    use Decision::*;

    fn r(name: &str, created: Timestamp, decision: Decision) -> Request<'_> {
        Request {
            name,
            created,
            decision,
        }
    }

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    type Case<'a> = (
        &'a str,
        Option<Timestamp>,
        ClusterState,
        Vec<Request<'a>>,
        Timestamp,
        Option<&'a str>,
    );

    fn check(cases: &[Case]) {
        for (what, released, state, requests, at, want) in cases {
            assert_eq!(approve(*released, *state, requests, *at), *want, "{what}");
        }
    }

    #[test]
    fn approval_needs_the_release_and_a_cluster_not_joined_yet() {
        let early = t("2026-01-01T00:00:00Z");
        let late = t("2026-01-01T00:01:00Z");
        let now = t("2026-01-01T00:01:30Z");
        let rel = Some(t("2025-12-31T23:59:00Z"));
        check(&[
            (
                "released, one pending",
                rel,
                Created,
                vec![r("a", early, Pending)],
                now,
                Some("a"),
            ),
            (
                "not released: forged or early",
                None,
                Created,
                vec![r("a", early, Pending)],
                now,
                None,
            ),
            (
                "joined already",
                rel,
                Joined,
                vec![r("b", late, Pending)],
                now,
                None,
            ),
            (
                "available already",
                rel,
                Available,
                vec![r("b", late, Pending)],
                now,
                None,
            ),
            (
                "refused here (rollback's business)",
                rel,
                Refused,
                vec![r("a", early, Pending)],
                now,
                None,
            ),
            (
                "asked before the release (while held): never",
                Some(late),
                Created,
                vec![r("a", early, Pending)],
                now,
                None,
            ),
            (
                "asked in the second of the release",
                Some(t("2026-01-01T00:01:00.700Z")),
                Created,
                vec![r("a", early, Pending), r("b", late, Pending)],
                now,
                Some("b"),
            ),
            ("nothing pending", rel, Created, vec![], now, None),
        ]);
    }

    #[test]
    fn approval_happens_once_unless_that_join_failed() {
        let early = t("2026-01-01T00:00:00Z");
        let late = t("2026-01-01T00:01:00Z");
        let now = t("2026-01-01T00:01:30Z");
        let much_later = t("2026-01-01T00:05:00Z");
        let rel = Some(t("2025-12-31T23:59:00Z"));
        check(&[
            (
                "one approved already",
                rel,
                Created,
                vec![r("a", early, Approved(early)), r("b", late, Pending)],
                now,
                None,
            ),
            (
                "approved, and no join long after: the newer request",
                rel,
                Created,
                vec![r("a", early, Approved(early)), r("b", late, Pending)],
                much_later,
                Some("b"),
            ),
            (
                "approved long ago, but nothing asked since",
                rel,
                Created,
                vec![r("z", early, Pending), r("a", late, Approved(late))],
                much_later,
                None,
            ),
            (
                "the first approval failed: once more",
                rel,
                Created,
                vec![r("a", early, ApprovedFailed), r("b", late, Pending)],
                now,
                Some("b"),
            ),
            (
                "restarted while waiting: the newest",
                rel,
                Created,
                vec![r("b", late, Pending), r("a", early, Pending)],
                now,
                Some("b"),
            ),
            (
                "a denied one is not asked again",
                rel,
                Created,
                vec![r("a", early, Denied)],
                now,
                None,
            ),
        ]);
    }
}
