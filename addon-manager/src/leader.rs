//! Leader election on a `coordination.k8s.io/v1` Lease, so that two or more replicas of the
//! manager are safe: one leads and runs the controllers, the others wait.
//!
//! The rules are client-go's: a candidate takes the Lease when it does not exist, is released
//! (no holder) or has expired (`renewTime + leaseDurationSeconds` in the past); every write is
//! guarded by the resourceVersion it read, so two candidates never both win. A waiting
//! candidate watches the Lease and wakes when it changes or when it would expire, whichever
//! comes first. The leader renews every `renew_period`; if it cannot renew for
//! `renew_deadline` (or finds another holder) it has lost the lead and must stop at once, as
//! a controller-runtime manager does. On a clean shutdown it releases the Lease, so a standby
//! takes over without waiting for the expiry.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::watch;

/// Errors of the election.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Api { what, source }
}

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

/// How long a Lease held by somebody else stays valid from now (zero: expired or released).
fn valid_for(lease: &Lease, at: jiff::Timestamp) -> Duration {
    let Some(spec) = &lease.spec else {
        return Duration::ZERO;
    };
    if spec.holder_identity.as_deref().unwrap_or("").is_empty() {
        return Duration::ZERO;
    }
    let Some(renewed) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
        return Duration::ZERO;
    };
    let secs = i64::from(spec.lease_duration_seconds.unwrap_or(0).max(0));
    let Ok(expiry) = renewed.0.checked_add(jiff::SignedDuration::from_secs(secs)) else {
        return Duration::ZERO;
    };
    Duration::try_from(expiry.duration_since(at)).unwrap_or(Duration::ZERO)
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
async fn try_acquire(api: &Api<Lease>, cfg: &Config) -> Result<Outcome, Error> {
    let current = api.get_opt(&cfg.name).await.map_err(api_err(format!(
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
            Err(e) => Err(api_err(format!(
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
    let expires_in = valid_for(&lease, jiff::Timestamp::now());
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
        Err(e) => Err(api_err(format!(
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
    loop {
        let wait = match try_acquire(&api, cfg).await {
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
                    Some(Ok(watcher::Event::Apply(l))) if valid_for(&l, jiff::Timestamp::now()).is_zero() => break,
                    // Other events (a renewal, a list) leave the deadline as it is.
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
        match try_acquire(&api, &cfg).await {
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
    fn a_lease_is_valid_until_renewal_plus_duration() {
        let at: jiff::Timestamp = "2026-01-01T00:00:10Z".parse().unwrap();
        let l = lease(Some("a"), "2026-01-01T00:00:00Z", 15);
        assert_eq!(valid_for(&l, at), Duration::from_secs(5));
        let expired = lease(Some("a"), "2026-01-01T00:00:00Z", 5);
        assert_eq!(valid_for(&expired, at), Duration::ZERO);
        let released = lease(None, "2026-01-01T00:00:09Z", 15);
        assert_eq!(valid_for(&released, at), Duration::ZERO);
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
