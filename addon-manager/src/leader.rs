//! Leader election on a `coordination.k8s.io/v1` Lease, so that two or more replicas of the
//! manager are safe: one leads and runs the controllers, the others wait.
//!
//! The rules are client-go's (`tools/leaderelection/leaderelection.go`): a candidate takes the
//! Lease when it does not exist, is released (no holder) or has expired; every write is
//! guarded by the resourceVersion it read, so two candidates never both win. Expiry is judged
//! by the candidate's own clock, never by the `renewTime` another replica wrote: the Lease
//! expires `leaseDurationSeconds` after this candidate last *saw it change*, so clocks that
//! disagree between nodes cannot make a standby take a Lease that is still being renewed. A
//! waiting candidate watches the Lease and wakes when it is released or would expire. The
//! leader renews every `renew_period`; each attempt is cut off when the `renew_deadline` since
//! the last renewal runs out (a request that hangs cannot outlive it), and if it cannot renew
//! by then (or finds another holder) it has lost the lead and must stop at once, as a
//! controller-runtime manager does; `renew_deadline` is shorter than the lease duration, so it
//! stops before a standby may take over. On a clean shutdown it releases the Lease, so a
//! standby takes over without waiting for the expiry.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use migration_api::runtime::ctx_err;
use tokio::sync::watch;

/// Errors of the election: an API call that failed, and what it was for.
pub use migration_api::runtime::ApiError as Error;

/// Settings of the election.
#[derive(Clone, Debug)]
pub struct Config {
    pub namespace: String,
    pub name: String,
    /// This candidate's identity (pod name plus a random suffix).
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub renew_period: Duration,
}

/// What a look at the Lease found.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// We hold it now.
    Acquired,
    /// Somebody else holds it, for at most this long unless renewed.
    Held {
        holder: String,
        expires_in: Duration,
    },
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

/// What a candidate last saw of the Lease, and when by its own clock (client-go's
/// `observedRecord` and `observedTime`).
#[derive(Clone, Debug, Default)]
struct Observed {
    record: Option<LeaseSpec>,
    at: Option<tokio::time::Instant>,
}

impl Observed {
    /// Takes note of the Lease as read at `now`: the clock restarts only when its record
    /// changed.
    fn see(&mut self, lease: &Lease, now: tokio::time::Instant) {
        let record = lease.spec.clone().unwrap_or_default();
        if self.record.as_ref() != Some(&record) {
            self.record = Some(record);
            self.at = Some(now);
        }
    }

    /// How long the observed Lease stays valid from `now`: `leaseDurationSeconds` after it was
    /// last seen to change; zero when it has no holder or has expired.
    fn valid_for(&self, now: tokio::time::Instant) -> Duration {
        let (Some(record), Some(at)) = (&self.record, self.at) else {
            return Duration::ZERO;
        };
        if record.holder_identity.as_deref().unwrap_or("").is_empty() {
            return Duration::ZERO;
        }
        let secs = u64::try_from(record.lease_duration_seconds.unwrap_or(0)).unwrap_or(0);
        (at + Duration::from_secs(secs)).saturating_duration_since(now)
    }
}

/// The Lease a candidate writes to take or keep the lead.
fn held_by(mut lease: Lease, cfg: &Config, taking_over: bool) -> Lease {
    let t = now();
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if taking_over {
        spec.acquire_time = Some(t.clone());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.holder_identity = Some(cfg.identity.clone());
    spec.lease_duration_seconds = Some(i32::try_from(cfg.lease_duration.as_secs()).unwrap_or(15));
    spec.renew_time = Some(t);
    lease
}

/// One attempt to take or keep the Lease.
async fn try_acquire(
    api: &Api<Lease>,
    cfg: &Config,
    observed: &mut Observed,
) -> Result<Outcome, Error> {
    let current = api.get_opt(&cfg.name).await.map_err(ctx_err(format!(
        "reading Lease {}/{}",
        cfg.namespace, cfg.name
    )))?;
    let Some(lease) = current else {
        let fresh = Lease {
            metadata: ObjectMeta {
                name: Some(cfg.name.clone()),
                namespace: Some(cfg.namespace.clone()),
                ..Default::default()
            },
            spec: None,
        };
        let mut lease = held_by(fresh, cfg, true);
        if let Some(spec) = lease.spec.as_mut() {
            // The first holder is no transition.
            spec.lease_transitions = Some(0);
        }
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(Outcome::Acquired),
            // Another candidate created it first.
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Outcome::Held {
                holder: String::new(),
                expires_in: Duration::ZERO,
            }),
            Err(e) => Err(ctx_err(format!(
                "creating Lease {}/{}",
                cfg.namespace, cfg.name
            ))(e)),
        };
    };
    let holder = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default();
    let mine = holder == cfg.identity;
    let now = tokio::time::Instant::now();
    observed.see(&lease, now);
    let expires_in = observed.valid_for(now);
    if !mine && !expires_in.is_zero() {
        return Ok(Outcome::Held { holder, expires_in });
    }
    // Replace guarded by the resourceVersion just read: of two candidates, one wins.
    match api
        .replace(
            &cfg.name,
            &PostParams::default(),
            &held_by(lease, cfg, !mine),
        )
        .await
    {
        Ok(_) => Ok(Outcome::Acquired),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(Outcome::Held {
            holder,
            expires_in: Duration::ZERO,
        }),
        Err(e) => Err(ctx_err(format!(
            "writing Lease {}/{}",
            cfg.namespace, cfg.name
        ))(e)),
    }
}

/// Waits until this candidate leads (`true`) or the process is stopping (`false`). Errors
/// reading the Lease are logged and retried with back-off (the API may be briefly unreachable).
pub async fn acquire(client: Client, cfg: &Config, mut stopping: watch::Receiver<bool>) -> bool {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    // Changes to the Lease wake the candidate early (a release, a deletion).
    let changes = watcher(
        api.clone(),
        watcher::Config::default().fields(&format!("metadata.name={}", cfg.name)),
    )
    .default_backoff();
    let mut changes = std::pin::pin!(changes);
    let mut announced = String::new();
    let mut backoff = cfg.renew_period;
    let mut observed = Observed::default();
    loop {
        let wait = match try_acquire(&api, cfg, &mut observed).await {
            Ok(Outcome::Acquired) => {
                tracing::info!(lease = %cfg.name, identity = %cfg.identity, "became the leader");
                return true;
            }
            Ok(Outcome::Held { holder, expires_in }) => {
                if holder != announced && !holder.is_empty() {
                    tracing::info!(lease = %cfg.name, leader = %holder, "standing by: another replica leads");
                    announced = holder;
                }
                backoff = cfg.renew_period;
                // Wake when it would expire; a zero wait (a lost race) retries after the
                // renew period.
                if expires_in.is_zero() {
                    cfg.renew_period
                } else {
                    expires_in + Duration::from_millis(50)
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "leader election");
                let wait = backoff;
                backoff = (backoff * 2).min(cfg.lease_duration);
                wait
            }
        };
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            tokio::select! {
                // Not a fixed wait: the deadline is the Lease's own expiry (a time, which no
                // watch reports) or the retry back-off after an error; a change to the Lease
                // (release, deletion) ends the wait early through the watch below.
                _ = tokio::time::sleep_until(deadline) => break,
                _ = stopping.wait_for(|s| *s) => return false,
                ev = changes.next() => match ev {
                    Some(Ok(watcher::Event::Delete(_))) => break,
                    Some(Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l))) => {
                        let now = tokio::time::Instant::now();
                        observed.see(&l, now);
                        // Released: try at once. A renewal leaves the deadline as it is (it
                        // restarted the observed clock, which the next attempt reads).
                        if observed.valid_for(now).is_zero() {
                            break;
                        }
                    }
                    Some(_) => {}
                    None => break,
                },
            }
        }
    }
}

/// Keeps the lead: renews the Lease every renew period until `release` turns true (the
/// controllers have stopped), then releases it. Returns `Err` as soon as the lead is lost; the
/// caller must stop its controllers at once then.
pub async fn hold(
    client: Client,
    cfg: Config,
    mut release: watch::Receiver<bool>,
) -> Result<(), String> {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let mut last_renewal = tokio::time::Instant::now();
    let mut observed = Observed::default();
    let mut tick = tokio::time::interval(cfg.renew_period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let done = tokio::select! {
            r = release.wait_for(|s| *s) => r.is_ok(),
            _ = tick.tick() => false,
        };
        if done {
            give_up(&api, &cfg).await;
            return Ok(());
        }
        // An attempt may take no longer than what is left of the renew deadline: a request
        // that hangs must not keep a leader that can no longer renew running past it.
        let left = renew_time_left(
            last_renewal,
            cfg.renew_deadline,
            tokio::time::Instant::now(),
        );
        let attempt = tokio::time::timeout(left, try_acquire(&api, &cfg, &mut observed)).await;
        let Ok(attempt) = attempt else {
            return Err(format!(
                "lost the lead: Lease {} not renewed within {:?} (the renewal hung)",
                cfg.name, cfg.renew_deadline
            ));
        };
        match attempt {
            Ok(Outcome::Acquired) => last_renewal = tokio::time::Instant::now(),
            Ok(Outcome::Held { holder, .. }) if !holder.is_empty() && holder != cfg.identity => {
                return Err(format!(
                    "lost the lead: Lease {} is held by {holder}",
                    cfg.name
                ));
            }
            Ok(Outcome::Held { .. }) => {}
            Err(e) => tracing::warn!(error = %e, "renewing the leader Lease"),
        }
        if last_renewal.elapsed() > cfg.renew_deadline {
            return Err(format!(
                "lost the lead: Lease {} not renewed for {:?}",
                cfg.name, cfg.renew_deadline
            ));
        }
    }
}

/// What is left of the renew deadline at `now` for a leader last renewed at `last_renewal`
/// (at least a millisecond, so an attempt is always made and cut off rather than skipped).
fn renew_time_left(
    last_renewal: tokio::time::Instant,
    renew_deadline: Duration,
    now: tokio::time::Instant,
) -> Duration {
    (last_renewal + renew_deadline)
        .saturating_duration_since(now)
        .max(Duration::from_millis(1))
}

/// Gives the Lease up (no holder, expired at once) if this candidate still holds it.
async fn give_up(api: &Api<Lease>, cfg: &Config) {
    let Ok(Some(mut lease)) = api.get_opt(&cfg.name).await else {
        return;
    };
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if spec.holder_identity.as_deref() != Some(cfg.identity.as_str()) {
        return;
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(now());
    match api
        .replace(&lease.name_any(), &PostParams::default(), &lease)
        .await
    {
        Ok(_) => tracing::info!(lease = %cfg.name, "released the lead"),
        Err(e) => tracing::warn!(error = %e, "releasing the leader Lease"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed: &str, secs: i32) -> Lease {
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                renew_time: Some(MicroTime(renewed.parse().unwrap())),
                lease_duration_seconds: Some(secs),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn expiry_is_judged_by_the_local_clock_from_the_last_change_seen() {
        let t0 = tokio::time::Instant::now();
        let s = Duration::from_secs;
        // (what happens, seen at [(offset, renewTime, holder)], asked at, valid for)
        type Case = (
            &'static str,
            Vec<(u64, &'static str, Option<&'static str>)>,
            u64,
            u64,
        );
        let cases: Vec<Case> = vec![
            (
                "a renewTime from a clock far behind still counts from when it was seen",
                vec![(0, "2020-01-01T00:00:00Z", Some("a"))],
                10,
                5,
            ),
            (
                "a renewTime from a clock far ahead does not make it live longer",
                vec![(0, "2099-01-01T00:00:00Z", Some("a"))],
                16,
                0,
            ),
            (
                "unchanged for longer than its duration: expired",
                vec![
                    (0, "2026-01-01T00:00:00Z", Some("a")),
                    (10, "2026-01-01T00:00:00Z", Some("a")),
                ],
                16,
                0,
            ),
            (
                "a renewal seen restarts the clock",
                vec![
                    (0, "2026-01-01T00:00:00Z", Some("a")),
                    (10, "2026-01-01T00:00:02Z", Some("a")),
                ],
                16,
                9,
            ),
            (
                "released: free at once",
                vec![(0, "2026-01-01T00:00:00Z", None)],
                1,
                0,
            ),
        ];
        for (what, seen, at, want) in cases {
            let mut o = Observed::default();
            for (offset, renewed, holder) in seen {
                o.see(&lease(holder, renewed, 15), t0 + s(offset));
            }
            assert_eq!(o.valid_for(t0 + s(at)), s(want), "{what}");
        }
        assert_eq!(Observed::default().valid_for(t0), Duration::ZERO);
    }

    #[test]
    fn a_renewal_attempt_never_outlives_the_renew_deadline() {
        let t0 = tokio::time::Instant::now();
        let s = Duration::from_secs;
        let deadline = s(10);
        assert_eq!(renew_time_left(t0, deadline, t0 + s(2)), s(8));
        assert_eq!(renew_time_left(t0, deadline, t0 + s(9)), s(1));
        // Past it: the attempt gets a millisecond and is cut off.
        assert_eq!(
            renew_time_left(t0, deadline, t0 + s(30)),
            Duration::from_millis(1)
        );
    }

    #[test]
    fn taking_over_counts_a_transition_and_renewing_does_not() {
        let cfg = Config {
            namespace: "ns".into(),
            name: "l".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            renew_period: Duration::from_secs(2),
        };
        let mut l = lease(Some("other"), "2026-01-01T00:00:00Z", 15);
        l.spec.as_mut().unwrap().lease_transitions = Some(3);
        let taken = held_by(l, &cfg, true);
        let s = taken.spec.clone().unwrap();
        assert_eq!(s.holder_identity.as_deref(), Some("me"));
        assert_eq!(s.lease_transitions, Some(4));
        assert_eq!(s.lease_duration_seconds, Some(15));
        let renewed = held_by(taken, &cfg, false).spec.unwrap();
        assert_eq!(renewed.lease_transitions, Some(4));
        assert_eq!(renewed.acquire_time, s.acquire_time);
    }
}
