//! client-go's client-side rate limit, for simulated components whose upstream clients have
//! one.
//!
//! A client-go client made from a `rest.Config` with `QPS` and `Burst` (and no `RateLimiter`
//! of its own) waits, before every request it sends (watches included), on a token bucket
//! (`flowcontrol.NewTokenBucketRateLimiter(qps, burst)` in `client-go/util/flowcontrol/throttle.go`,
//! `golang.org/x/time/rate` underneath): it starts full with `burst` tokens, regains `qps` a
//! second, and a request that finds it empty waits for its turn. Each clientset made with
//! `NewForConfig` has a bucket of its own, shared by its API groups (`kubernetes.NewForConfig`
//! gives all the built-in groups one); the dynamic client has one for every kind it serves.
//! [`throttled`] gives a kube-rs client the same wait, with buckets split as [`Clientsets`]
//! says.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;
use tokio::time::Instant;

/// How a component's requests are spread over client-go clients, each with a bucket of its
/// own.
#[derive(Clone, Copy, Debug)]
pub enum Clientsets {
    /// One client (one clientset, or the dynamic client) for everything.
    Single,
    /// The typed clientsets: the built-in API groups share one (`kubernetes.Interface`),
    /// every other group has its own (OCM's `clusterv1`, `workv1`, ... clientsets).
    PerGroup,
    /// The built-in groups through the typed kube clientset, the listed groups through typed
    /// clientsets of their own, and every other group through one dynamic client (the work
    /// agent's applies of custom resources).
    Dynamic {
        /// Groups with a typed clientset of their own.
        typed: &'static [&'static str],
    },
}

/// A client-go rest config's `QPS` and `Burst`, and which clients share a bucket.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub qps: f64,
    pub burst: u32,
    pub clientsets: Clientsets,
}

impl Limits {
    /// OCM's defaults (`--kube-api-qps` 50, `--kube-api-burst` 100: `NewOptions` in
    /// ocm `pkg/common/options/options.go`; `--hub-kube-api-qps` and `--hub-kube-api-burst`
    /// likewise, `pkg/common/options/agent.go`).
    pub const fn ocm(clientsets: Clientsets) -> Self {
        Self {
            qps: 50.0,
            burst: 100,
            clientsets,
        }
    }
}

/// One token bucket (`rate.Limiter`): full at first, `qps` tokens a second up to `burst`; a
/// request takes a token, and one that finds none reserves the next and waits for it
/// (`Limiter.Wait`), so waiters are served in the order they came.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: u32, now: Instant) -> Self {
        Self {
            tokens: f64::from(burst),
            at: now,
        }
    }

    /// Takes a token and says how long to wait for it.
    fn reserve(&mut self, now: Instant, qps: f64, burst: u32) -> Duration {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * qps).min(f64::from(burst));
        self.at = self.at.max(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / qps)
        }
    }
}

/// The bucket a request's path falls to.
fn clientset_of(path: &str, clientsets: Clientsets) -> &str {
    // `/apis/<group>/...`; the core group (`/api/...`), discovery and `/version` are the
    // kube clientset's.
    let group = path
        .strip_prefix("/apis/")
        .and_then(|rest| rest.split('/').next())
        .filter(|g| !g.is_empty());
    let builtin = |g: &str| !g.contains('.') || (g.ends_with(".k8s.io") && g != API_EXTENSIONS);
    match (clientsets, group) {
        (Clientsets::Single, _) => "",
        (_, None) => "kube",
        (_, Some(g)) if builtin(g) => "kube",
        (Clientsets::PerGroup, Some(g)) => g,
        (Clientsets::Dynamic { typed }, Some(g)) if typed.contains(&g) => g,
        (Clientsets::Dynamic { .. }, Some(_)) => "dynamic",
    }
}

const API_EXTENSIONS: &str = "apiextensions.k8s.io";

#[derive(Debug)]
struct Shared {
    limits: Limits,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl Shared {
    fn wait_for(&self, path: &str) -> Duration {
        let key = clientset_of(path, self.limits.clientsets);
        let now = Instant::now();
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Limits { qps, burst, .. } = self.limits;
        if let Some(b) = buckets.get_mut(key) {
            return b.reserve(now, qps, burst);
        }
        let mut b = Bucket::full(burst, now);
        let wait = b.reserve(now, qps, burst);
        buckets.insert(key.to_owned(), b);
        wait
    }
}

/// The client's requests, each sent once its bucket has a token for it.
#[derive(Clone)]
struct Throttled {
    inner: kube::Client,
    shared: Arc<Shared>,
}

impl tower::Service<Request<Body>> for Throttled {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, kube::Error>> + Send>,
    >;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let wait = self.shared.wait_for(req.uri().path());
        let inner = self.inner.clone();
        Box::pin(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            inner.send(req).await
        })
    }
}

/// `client` with client-go's rate limit: clones of the result share its buckets, as the
/// controllers of one component share their clientsets.
pub fn throttled(client: kube::Client, limits: Limits) -> kube::Client {
    let ns = client.default_namespace().to_owned();
    let shared = Arc::new(Shared {
        limits,
        buckets: Mutex::default(),
    });
    kube::Client::new(
        Throttled {
            inner: client,
            shared,
        },
        ns,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_lets_its_burst_through_then_paces_at_its_rate() {
        let start = Instant::now();
        let mut b = Bucket::full(3, start);
        let waits: Vec<Duration> = (0..5).map(|_| b.reserve(start, 10.0, 3)).collect();
        assert_eq!(&waits[..3], &[Duration::ZERO; 3]);
        // The fourth and fifth wait for the first and second token regained (0.1 s apart).
        assert!((waits[3].as_secs_f64() - 0.1).abs() < 1e-9, "{waits:?}");
        assert!((waits[4].as_secs_f64() - 0.2).abs() < 1e-9, "{waits:?}");
        // A second later the reservations are paid and 8 of the 10 tokens regained are
        // there (the bucket holds at most 3).
        let later = start + Duration::from_secs(1);
        let waits: Vec<Duration> = (0..4).map(|_| b.reserve(later, 10.0, 3)).collect();
        assert_eq!(&waits[..3], &[Duration::ZERO; 3]);
        assert!(waits[3] > Duration::ZERO, "{waits:?}");
    }

    #[test]
    fn requests_fall_to_the_clientset_upstream_would_send_them_through() {
        let per_group = Clientsets::PerGroup;
        let dynamic = Clientsets::Dynamic {
            typed: &["work.open-cluster-management.io", API_EXTENSIONS],
        };
        let cases = [
            ("/api/v1/namespaces/a/secrets/s", per_group, "kube"),
            (
                "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                per_group,
                "kube",
            ),
            ("/apis/apps/v1/deployments", per_group, "kube"),
            ("/version", per_group, "kube"),
            (
                "/apis/cluster.open-cluster-management.io/v1/managedclusters",
                per_group,
                "cluster.open-cluster-management.io",
            ),
            (
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                per_group,
                API_EXTENSIONS,
            ),
            ("/api/v1/namespaces/a/secrets/s", dynamic, "kube"),
            (
                "/apis/work.open-cluster-management.io/v1/appliedmanifestworks/x",
                dynamic,
                "work.open-cluster-management.io",
            ),
            (
                "/apis/config.open-cluster-management.io/v1alpha1/klusterletconfigs/k",
                dynamic,
                "dynamic",
            ),
            (
                "/apis/cluster.open-cluster-management.io/v1/managedclusters",
                dynamic,
                "dynamic",
            ),
            (
                "/apis/anything.example.com/v1/things",
                Clientsets::Single,
                "",
            ),
            ("/api/v1/pods", Clientsets::Single, ""),
        ];
        for (path, sets, want) in cases {
            assert_eq!(clientset_of(path, sets), want, "{path} with {sets:?}");
        }
    }
}
