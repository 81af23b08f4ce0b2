//! Process plumbing shared by the addon-manager and the addon-agent (feature `runtime`):
//! common command-line options, logging, the Kubernetes client, the health and metrics endpoint
//! and graceful shutdown. Each binary's `main.rs` stays thin on top of this.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;

mod panics;
pub use panics::{PANIC_RETRY, Panicked, unwinding};

/// Errors of process start-up.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The log level or filter does not parse.
    #[error("invalid log level {level:?}: {source}")]
    LogLevel {
        level: String,
        source: tracing_subscriber::filter::ParseError,
    },
    /// A global logger was already installed.
    #[error("installing the logger: {0}")]
    Logger(String),
    /// The kubeconfig could not be read.
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    /// No kubeconfig was given and none could be inferred (in-cluster or default file).
    #[error("no Kubernetes configuration: pass --kubeconfig, set KUBECONFIG or run in a pod: {0}")]
    InferConfig(#[from] kube::config::InferConfigError),
    /// The client could not be built from the configuration.
    #[error("building the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    /// The API server did not answer.
    #[error("the Kubernetes API at {url} did not answer: {source}")]
    Unreachable { url: String, source: kube::Error },
    /// The health port could not be bound.
    #[error("binding the health and metrics endpoint on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Options every binary of ours takes.
#[derive(Clone, Debug, clap::Args)]
pub struct CommonArgs {
    /// Kubeconfig of the cluster this process runs against; without it, the in-cluster
    /// configuration or the default kubeconfig is used.
    #[arg(long, env = "KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log level or filter (`info`, `debug`, or a directive such as `info,kube=warn`).
    #[arg(long, env = "LOG_LEVEL", default_value = "info", value_name = "LEVEL")]
    pub log_level: String,

    /// Address of the health and metrics endpoint (`/healthz`, `/readyz`, `/metrics`).
    #[arg(
        long,
        env = "HEALTH_ADDR",
        default_value = "0.0.0.0:8080",
        value_name = "ADDR"
    )]
    pub health_addr: SocketAddr,
}

/// Installs the global logger.
pub fn init_tracing(format: LogFormat, level: &str) -> Result<(), StartupError> {
    let filter = tracing_subscriber::EnvFilter::builder()
        .parse(level)
        .map_err(|source| StartupError::LogLevel {
            level: level.to_owned(),
            source,
        })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    result.map_err(|e| StartupError::Logger(e.to_string()))
}

/// Builds a client from a kubeconfig file, or infers one (in-cluster, then `~/.kube/config`).
pub async fn client(
    kubeconfig: Option<&PathBuf>,
    requests: &Family<RequestLabels, Counter>,
) -> Result<kube::Client, StartupError> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|source| {
                StartupError::Kubeconfig {
                    path: path.clone(),
                    source,
                }
            })?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|source| StartupError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?
        }
        None => kube::Config::infer().await?,
    };
    let url = config.cluster_url.to_string();
    // kube-client's own retry, on by default, answers a 429, 503 or 504 with up to 15 more
    // tries, 5 ms apart doubling up to 1000 s: a write to an API server that answered 503 for
    // a minute then sleeps a minute or more inside the reconcile that made it, long after the
    // server is back. client-go retries only when the server asks (`Retry-After`); here the
    // error reaches the controller, which requeues (every reconcile is idempotent).
    let mut config = config;
    config.default_retry = false;
    let counted = requests.clone();
    let count = tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
        counted
            .get_or_create(&RequestLabels {
                verb: verb_of(req.method(), req.uri().query()),
            })
            .inc();
        req
    });
    let client = kube::client::ClientBuilder::try_from(config)
        .map_err(StartupError::Client)?
        .with_layer(&count)
        .build();
    client
        .apiserver_version()
        .await
        .map_err(|source| StartupError::Unreachable { url, source })?;
    Ok(client)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    component: String,
    version: String,
}

/// Labels of `cluster_migration_api_requests_total`: the Kubernetes verb of each request
/// made, as its HTTP method tells it (`get` for a read and a list alike, `watch` for a watch).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: String,
}

/// The Kubernetes verb of a request by its HTTP method and query.
pub fn verb_of(method: &http::Method, query: Option<&str>) -> String {
    let watch = query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    match *method {
        _ if watch => "watch".into(),
        http::Method::GET => "get".into(),
        http::Method::POST => "create".into(),
        http::Method::PUT => "update".into(),
        http::Method::PATCH => "patch".into(),
        http::Method::DELETE => "delete".into(),
        ref other => other.as_str().to_ascii_lowercase(),
    }
}

/// Readiness flag and metrics registry behind the health endpoint.
#[derive(Debug)]
pub struct Health {
    ready: AtomicBool,
    registry: std::sync::Mutex<Registry>,
    api_requests: Family<RequestLabels, Counter>,
}

impl Health {
    /// A not-yet-ready health state whose registry already holds `<prefix>_build_info`.
    pub fn new(component: &str, version: &str) -> Arc<Self> {
        let mut registry = Registry::with_prefix("cluster_migration");
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                component: component.to_owned(),
                version: version.to_owned(),
            })
            .set(1);
        registry.register("build_info", "Build information", build);
        let api_requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "api_requests",
            "Requests this process made to Kubernetes API servers, by verb",
            api_requests.clone(),
        );
        Arc::new(Self {
            ready: AtomicBool::new(false),
            registry: std::sync::Mutex::new(registry),
            api_requests,
        })
    }

    /// The counter of API requests ([`client`] counts each request it makes there).
    pub fn api_requests(&self) -> &Family<RequestLabels, Counter> {
        &self.api_requests
    }

    /// Marks the process ready (or not) for `/readyz`.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// Registers more metrics (controllers add theirs).
    pub fn register<M: prometheus_client::registry::Metric>(
        &self,
        name: &str,
        help: &str,
        metric: M,
    ) {
        if let Ok(mut r) = self.registry.lock() {
            r.register(name, help, metric);
        }
    }

    /// The metrics in Prometheus text format.
    pub fn encode_metrics(&self) -> String {
        let mut out = String::new();
        if let Ok(r) = self.registry.lock() {
            // Writing into a String cannot fail.
            let _ = prometheus_client::encoding::text::encode(&mut out, &r);
        }
        out
    }
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(health): State<Arc<Health>>) -> impl IntoResponse {
    if health.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

async fn metrics(State(health): State<Arc<Health>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        health.encode_metrics(),
    )
}

/// Binds the health and metrics endpoint; returns the bound address (the port may have been 0)
/// and the server future, which ends when `shutdown` fires.
pub async fn serve_health(
    addr: SocketAddr,
    health: Arc<Health>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, impl Future<Output = std::io::Result<()>>), StartupError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartupError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| StartupError::Bind { addr, source })?;
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/livez", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(health);
    let server = async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = shutdown.wait_for(|stop| *stop).await;
            })
            .await
    };
    Ok((bound, server))
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
                    _ = tokio::signal::ctrl_c() => tracing::info!("interrupt received, shutting down"),
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops this process");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// A running process: its health endpoint and the means to stop it.
#[derive(Debug)]
pub struct Process {
    health: Arc<Health>,
    health_addr: SocketAddr,
    stop: watch::Sender<bool>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Process {
    /// Starts the health and metrics endpoint (not ready yet).
    pub async fn start(
        component: &str,
        version: &str,
        addr: SocketAddr,
    ) -> Result<Self, StartupError> {
        let health = Health::new(component, version);
        let (stop, stopped) = watch::channel(false);
        let (health_addr, server) = serve_health(addr, health.clone(), stopped).await?;
        tracing::info!(%health_addr, "health and metrics endpoint listening");
        Ok(Self {
            health,
            health_addr,
            stop,
            server: tokio::spawn(server),
        })
    }

    /// The health state, to mark readiness and register metrics.
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    /// Where the health endpoint listens.
    pub fn health_addr(&self) -> SocketAddr {
        self.health_addr
    }

    /// A receiver that turns true when shutdown starts, for controllers to stop on.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Waits for SIGTERM (or Ctrl-C), turns unready, tells everyone to stop and closes the
    /// health endpoint.
    pub async fn wait_for_shutdown(self) {
        shutdown_signal().await;
        self.health.set_ready(false);
        let _ = self.stop.send(true);
        match self.server.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "health endpoint ended with an error"),
            Err(e) => tracing::warn!(error = %e, "health endpoint task failed"),
        }
    }
}

/// The process's controller tasks. Each runs until the process stops, so one that ends
/// before (returned, failed or panicked) leaves the process half-alive: [`Supervisor::first_end`]
/// says which ended and how, and the caller turns unready and exits non-zero, so the pod
/// restarts and a standby can take over.
#[derive(Debug, Default)]
pub struct Supervisor {
    set: tokio::task::JoinSet<Result<(), String>>,
    names: std::collections::HashMap<tokio::task::Id, &'static str>,
}

impl Supervisor {
    /// Runs `task` under supervision.
    pub fn spawn<F, E>(&mut self, name: &'static str, task: F)
    where
        F: std::future::Future<Output = Result<(), E>> + Send + 'static,
        E: std::fmt::Display,
    {
        let handle = self
            .set
            .spawn(async move { task.await.map_err(|e| e.to_string()) });
        self.names.insert(handle.id(), name);
    }

    /// Waits for the first task to end; which it was and how. Pending forever while they all
    /// run (or when there are none).
    pub async fn first_end(&mut self) -> String {
        let Some(ended) = self.set.join_next_with_id().await else {
            return std::future::pending().await;
        };
        let (id, outcome) = match ended {
            Ok((id, r)) => (id, r.map_err(|e| format!("failed: {e}"))),
            Err(e) if e.is_panic() => (e.id(), Err("panicked".to_owned())),
            Err(e) => (e.id(), Err(format!("was cancelled: {e}"))),
        };
        let name = self.names.get(&id).copied().unwrap_or("controller");
        match outcome {
            Ok(()) => format!("the {name} ended"),
            Err(how) => format!("the {name} {how}"),
        }
    }

    /// Lets the tasks finish within `grace` (they were told to stop), then aborts the rest.
    pub async fn shutdown(mut self, grace: std::time::Duration) {
        let all = async {
            while let Some(ended) = self.set.join_next_with_id().await {
                match ended {
                    Ok((id, Err(e))) => {
                        let name = self.names.get(&id).copied().unwrap_or("controller");
                        tracing::warn!(task = name, error = %e, "stopped with an error");
                    }
                    Ok(_) => {}
                    Err(e) if e.is_panic() => tracing::warn!("a task panicked while stopping"),
                    Err(_) => {}
                }
            }
        };
        if tokio::time::timeout(grace, all).await.is_err() {
            tracing::info!("stopped controllers mid-reconcile");
        }
        self.set.abort_all();
    }

    /// Stops every task at once.
    pub fn abort_all(&mut self) {
        self.set.abort_all();
    }
}

/// The ManagedClusterSets bound to `namespace` on the hub `client` talks to
/// ([`crate::tenancy::bound_sets`]).
pub async fn bound_cluster_sets(
    client: &kube::Client,
    namespace: &str,
) -> Result<Vec<crate::ocm::cluster::ManagedClusterSet>, (String, kube::Error)> {
    use crate::ocm::cluster::{ManagedClusterSet, ManagedClusterSetBinding};
    let lp = kube::api::ListParams::default();
    let bindings = kube::Api::<ManagedClusterSetBinding>::namespaced(client.clone(), namespace)
        .list(&lp)
        .await
        .map_err(|e| {
            (
                format!("listing ManagedClusterSetBindings in {namespace}"),
                e,
            )
        })?
        .items;
    let sets = kube::Api::<ManagedClusterSet>::all(client.clone())
        .list(&lp)
        .await
        .map_err(|e| ("listing ManagedClusterSets".to_owned(), e))?
        .items;
    Ok(crate::tenancy::bound_sets(&bindings, &sets)
        .into_iter()
        .cloned()
        .collect())
}

/// A merge patch turning `current` into `new`: what `new` holds, and null for each top-level
/// field only `current` holds (a merge patch leaves a field it does not name as it was).
pub fn replacing_patch<S: serde::Serialize>(current: Option<&S>, new: &S) -> serde_json::Value {
    let mut patch = serde_json::to_value(new).unwrap_or_default();
    if let (Some(p), Some(Ok(serde_json::Value::Object(c)))) =
        (patch.as_object_mut(), current.map(serde_json::to_value))
    {
        for k in c.keys() {
            p.entry(k.clone()).or_insert(serde_json::Value::Null);
        }
    }
    patch
}

/// What [`write_status_if_changed`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatusWrite {
    /// The status was already `new`.
    Unchanged,
    /// Written: the object's resourceVersion after the write.
    Written(Option<String>),
    /// The object changed since it was read (409) or is gone (404): its next event brings the
    /// caller back with fresh state.
    Stale,
}

/// Writes `new` as the status of object `name` when it differs from `current`, with a merge
/// patch that also clears what `new` no longer holds, guarded by `resource_version` when given:
/// the one "patch status if changed" of both binaries.
pub async fn write_status_if_changed<K, S>(
    api: &kube::Api<K>,
    name: &str,
    resource_version: Option<String>,
    current: Option<&S>,
    new: &S,
) -> Result<StatusWrite, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    S: serde::Serialize + PartialEq,
{
    if current == Some(new) {
        return Ok(StatusWrite::Unchanged);
    }
    let mut patch = serde_json::json!({"status": replacing_patch(current, new)});
    if let Some(rv) = resource_version {
        patch["metadata"] = serde_json::json!({"resourceVersion": rv});
    }
    match api
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
    {
        Ok(o) => Ok(StatusWrite::Written(o.meta().resource_version.clone())),
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(StatusWrite::Stale),
        Err(e) => Err(e),
    }
}

/// Server-side applies `body` (apiVersion, kind, metadata and the status fields `manager`
/// owns) as the status of object `name`, unless `changed` is false: the one "apply status if
/// changed" of both binaries, for objects whose status several writers share (a
/// ManagedClusterAddOn's conditions are the manager's, the agent's and the lease judge's), where
/// a merge patch of the whole status would take the others' fields. The caller compares what it
/// owns, since only it knows which fields those are.
pub async fn apply_status_if_changed<K>(
    api: &kube::Api<K>,
    manager: &str,
    name: &str,
    body: &serde_json::Value,
    changed: bool,
) -> Result<StatusWrite, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if !changed {
        return Ok(StatusWrite::Unchanged);
    }
    match api
        .patch_status(
            name,
            &kube::api::PatchParams::apply(manager).force(),
            &kube::api::Patch::Apply(body),
        )
        .await
    {
        Ok(o) => Ok(StatusWrite::Written(o.meta().resource_version.clone())),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(StatusWrite::Stale),
        Err(e) => Err(e),
    }
}

/// A failed API call, with what was being done: the one error with context both binaries'
/// controllers return for what the API server refused or could not answer.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct ApiError {
    pub what: String,
    #[source]
    pub source: kube::Error,
}

impl ApiError {
    pub fn new(what: impl Into<String>, source: kube::Error) -> Self {
        ApiError {
            what: what.into(),
            source,
        }
    }

    /// Whether the API server refused a write of an object that changed since it was read
    /// (409): expected now and then, the retry reads it again.
    pub fn is_conflict(&self) -> bool {
        is_conflict(&self.source)
    }
}

/// What a watch feeding a controller can hold.
pub trait Watched:
    kube::Resource<DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// A watch of `api` and the cache it fills: each event comes out of the stream once the cache
/// holds it, so a controller woken by the stream reads what woke it (for `watches_stream`).
/// The watch retries on its own (see [`errors_stay_in_the_watch`]).
pub fn cached_watch<K: Watched>(
    api: kube::Api<K>,
    config: kube::runtime::watcher::Config,
) -> (
    kube::runtime::reflector::Store<K>,
    impl futures::Stream<Item = Result<K, kube::runtime::watcher::Error>> + Send + 'static,
) {
    use kube::runtime::WatchStreamExt;
    let (store, writer) = kube::runtime::reflector::store();
    let events = kube::runtime::reflector(writer, kube::runtime::watcher(api, config))
        .default_backoff()
        .touched_objects();
    (store, errors_stay_in_the_watch::<K, _>(events))
}

/// The objects of `api` that change, appear or go, for a controller's `watches_stream` (in
/// place of `watches`, whose watch has no back-off of its own); see
/// [`errors_stay_in_the_watch`].
pub fn watch_events<K: Watched>(
    api: kube::Api<K>,
    config: kube::runtime::watcher::Config,
) -> impl futures::Stream<Item = Result<K, kube::runtime::watcher::Error>> + Send + 'static {
    use kube::runtime::WatchStreamExt;
    errors_stay_in_the_watch::<K, _>(
        kube::runtime::watcher(api, config)
            .default_backoff()
            .touched_objects(),
    )
}

/// A controller of the objects of `api` (in place of `Controller::new`, whose own watch has
/// no back-off of its own); see [`errors_stay_in_the_watch`].
pub fn controller<K: Watched>(
    api: kube::Api<K>,
    config: kube::runtime::watcher::Config,
) -> kube::runtime::Controller<K> {
    use kube::runtime::WatchStreamExt;
    let (store, writer) = kube::runtime::reflector::store();
    let objects = kube::runtime::reflector(writer, kube::runtime::watcher(api, config))
        .default_backoff()
        .applied_objects();
    kube::runtime::Controller::for_stream(errors_stay_in_the_watch::<K, _>(objects), store)
}

/// The events of one watch, which backs off on its own (`default_backoff()`: 0.8 s doubling
/// up to 30 s, client-go's reflector defaults), with its errors logged and dropped here, so
/// that none reaches a kube-runtime `Controller`.
///
/// A `Controller` merges its watches into one stream and backs that stream off as a whole at
/// every error it yields: while it sleeps (up to 30 s, jittered up to twice that) none of its
/// watches is read. A request one of them had started meanwhile (a re-list waiting for the
/// HTTP/2 connection another request was opening) fails while nobody reads it, and its error
/// comes out at the next wake-up, long after the API server is back: another back-off. After
/// an outage of a minute the import controller of our simulated hub slept through three
/// minutes of such stale errors, one at each wake-up, with the server answering all along (the e2e
/// test `a_target_down_past_the_timeout_rolls_back_to_the_source` failed so in CI); the
/// addon-manager's two controllers, with seven and five watches, had the same shape
/// (stackabletech/trino-operator#936 reports operators stuck so). client-go gives every
/// informer its own reflector and back-off (`tools/cache/reflector.go`): one watch's error
/// never holds up the others, which is what this restores.
pub fn errors_stay_in_the_watch<T, S>(
    events: S,
) -> impl futures::Stream<Item = Result<T, kube::runtime::watcher::Error>> + Send + 'static
where
    T: Send + 'static,
    S: futures::Stream<Item = Result<T, kube::runtime::watcher::Error>> + Send + 'static,
{
    use futures::StreamExt;
    let what = std::any::type_name::<T>()
        .rsplit("::")
        .next()
        .unwrap_or_default();
    events.filter_map(move |event| {
        futures::future::ready(match event {
            Ok(object) => Some(Ok(object)),
            Err(e) if watch_expired(&e) => {
                tracing::debug!(kind = what, error = %e, "watch expired; it lists again after its back-off");
                None
            }
            Err(e) => {
                tracing::warn!(kind = what, error = %e, "watch failed; it is retried after its back-off");
                None
            }
        })
    })
}

/// Whether a watch ended only because the resource version it resumed from is older than the
/// API server keeps (410 Gone, "too old resource version"): routine for a long watch, which
/// lists again (kube-runtime's watcher goes back to its initial list on a 410). client-go's
/// reflector logs this at verbosity 4 and warns only of other errors
/// (`tools/cache/reflector.go`, `isExpiredError`); so do we, at debug.
pub fn watch_expired(e: &kube::runtime::watcher::Error) -> bool {
    use kube::runtime::watcher::Error as W;
    match e {
        W::WatchError(status) => status.code == 410,
        W::InitialListFailed(e) | W::WatchStartFailed(e) | W::WatchFailed(e) => {
            matches!(e, kube::Error::Api(s) if s.code == 410)
        }
        W::NoResourceVersion => false,
    }
}

/// Whether an error is a 409 Conflict (see [`ApiError::is_conflict`]).
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// `map_err(ctx_err("reading X"))`: the call's error, saying what it was doing.
pub fn ctx_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ApiError {
    let what = what.into();
    move |e| ApiError::new(what, e)
}

/// `.ctx(|| format!("reading {name}"))`: the call's error, saying what it was doing (the text
/// is built only on failure).
pub trait Context<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T, ApiError>;
}

impl<T> Context<T> for Result<T, kube::Error> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T, ApiError> {
        self.map_err(|source| ApiError::new(what(), source))
    }
}

/// Treats "not found" as done: `Ok(None)` for a 404, the value or other errors as they are
/// (for deletes and reads where absence is a valid outcome).
pub fn ignore_not_found<T>(r: Result<T, kube::Error>) -> Result<Option<T>, kube::Error> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// The body of a binary's `main`: installs the logger, runs the process to completion and turns
/// the outcome into an exit code (2 for bad options, 1 for a start-up or run-time failure).
pub async fn main<F>(name: &str, common: &CommonArgs, run: F) -> std::process::ExitCode
where
    F: Future<Output = Result<(), Box<dyn std::error::Error + Send + Sync>>>,
{
    if let Err(e) = init_tracing(common.log_format, &common.log_level) {
        eprintln!("{name}: {e}");
        return std::process::ExitCode::from(2);
    }
    match run.await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("{name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Flags of `command` that lack a help text or an environment-variable fallback (the built-in
/// `--help` and `--version` excepted). Each binary's tests assert this is empty.
pub fn undocumented_flags(command: &clap::Command) -> Vec<String> {
    command
        .get_arguments()
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .filter(|a| a.get_help().is_none() || a.get_env().is_none())
        .map(|a| a.get_id().to_string())
        .collect()
}

const OID_CN: &str = "2.5.4.3";
const OID_O: &str = "2.5.4.10";

/// The user (CN) and groups (O) a PEM CSR asks for.
pub fn requested_identity(pem: &[u8]) -> Result<(String, Vec<String>), String> {
    let req = <x509_cert::request::CertReq as x509_cert::der::DecodePem>::from_pem(pem)
        .map_err(|e| format!("not a PEM CSR: {e}"))?;
    let mut user = String::new();
    let mut groups = Vec::new();
    for rdn in req.info.subject.0.iter() {
        for atv in rdn.0.iter() {
            let value = atv
                .value
                .decode_as::<x509_cert::der::asn1::Utf8StringRef>()
                .map(|s| s.as_str().to_owned())
                .or_else(|_| {
                    atv.value
                        .decode_as::<x509_cert::der::asn1::PrintableStringRef>()
                        .map(|s| s.as_str().to_owned())
                })
                .map_err(|e| format!("subject value: {e}"))?;
            match atv.oid.to_string().as_str() {
                OID_CN => user = value,
                OID_O => groups.push(value),
                _ => {}
            }
        }
    }
    Ok((user, groups))
}

/// Whether a CSR has been approved or denied already.
pub fn csr_decided(csr: &k8s_openapi::api::certificates::v1::CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Approved" || c.type_ == "Denied")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_supervisor_names_the_task_that_ended_and_how() {
        let forever = || async {
            std::future::pending::<()>().await;
            Ok::<(), String>(())
        };
        let cases: Vec<(&str, Supervisor)> = {
            let mut panicked = Supervisor::default();
            panicked.spawn("steady", forever());
            panicked.spawn("migration controller", async {
                if true {
                    panic!("a bug");
                }
                Ok::<(), String>(())
            });
            let mut failed = Supervisor::default();
            failed.spawn("steady", forever());
            failed.spawn("CSR approver", async { Err::<(), _>("watch closed") });
            let mut returned = Supervisor::default();
            returned.spawn("steady", forever());
            returned.spawn("addon controller", async { Ok::<(), String>(()) });
            vec![
                ("the migration controller panicked", panicked),
                ("the CSR approver failed: watch closed", failed),
                ("the addon controller ended", returned),
            ]
        };
        for (want, mut sup) in cases {
            let got = tokio::time::timeout(std::time::Duration::from_secs(5), sup.first_end())
                .await
                .unwrap_or_else(|_| panic!("no end reported; wanted {want}"));
            assert_eq!(got, want);
            sup.abort_all();
        }
    }

    #[tokio::test]
    async fn the_supervisor_waits_while_every_task_runs() {
        let mut sup = Supervisor::default();
        sup.spawn("steady", async {
            std::future::pending::<()>().await;
            Ok::<(), String>(())
        });
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(100), sup.first_end()).await;
        assert!(waited.is_err(), "{waited:?}");
        sup.shutdown(std::time::Duration::from_millis(10)).await;
    }

    #[test]
    fn only_an_expired_watch_is_routine() {
        use kube::runtime::watcher::Error as W;
        let status = |code: u16| {
            let mut s = kube::core::Status::failure("x", "y");
            s.code = code;
            s
        };
        let cases = [
            (W::WatchError(Box::new(status(410))), true),
            (
                W::WatchStartFailed(kube::Error::Api(Box::new(status(410)))),
                true,
            ),
            (
                W::InitialListFailed(kube::Error::Api(Box::new(status(410)))),
                true,
            ),
            (W::WatchError(Box::new(status(500))), false),
            (W::WatchError(Box::new(status(403))), false),
            (
                W::InitialListFailed(kube::Error::Api(Box::new(status(403)))),
                false,
            ),
            (
                W::WatchFailed(kube::Error::Api(Box::new(status(404)))),
                false,
            ),
            (W::NoResourceVersion, false),
        ];
        for (e, want) in cases {
            assert_eq!(watch_expired(&e), want, "{e}");
        }
    }

    /// What a logger wrote, shared with the test.
    #[derive(Clone, Default)]
    struct Written(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Written {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_watch_error_is_dropped_and_logged_at_debug_only_when_it_expired() {
        use futures::StreamExt;
        use kube::runtime::watcher::Error as W;
        let written = Written::default();
        let writer = written.clone();
        let logger = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let _logging = tracing::subscriber::set_default(logger);
        let status = |code: u16, message: &str| {
            let mut s = kube::core::Status::failure(message, "x");
            s.code = code;
            Box::new(s)
        };
        let events = futures::stream::iter(vec![
            Err(W::WatchError(status(410, "too old resource version"))),
            Ok(7_u32),
            Err(W::WatchError(status(500, "etcdserver: leader changed"))),
        ]);
        let passed: Vec<_> = errors_stay_in_the_watch(events).collect().await;
        assert_eq!(passed.len(), 1);
        assert!(matches!(passed[0], Ok(7)));
        let text = String::from_utf8(written.0.lock().unwrap().clone()).unwrap();
        let line = |needle: &str| {
            text.lines()
                .find(|l| l.contains(needle))
                .unwrap_or_else(|| panic!("no line of {needle:?} in:\n{text}"))
                .to_owned()
        };
        let expired = line("too old resource version");
        assert!(expired.contains("DEBUG"), "{expired}");
        let failed = line("leader changed");
        assert!(failed.contains("WARN"), "{failed}");
    }

    #[test]
    fn metrics_carry_build_info() {
        let h = Health::new("addon-manager", "1.2.3");
        let text = h.encode_metrics();
        assert!(
            text.contains(
                r#"cluster_migration_build_info{component="addon-manager",version="1.2.3"} 1"#
            ),
            "{text}"
        );
    }

    #[test]
    fn readiness_follows_the_flag() {
        let h = Health::new("x", "0");
        assert!(!h.is_ready());
        h.set_ready(true);
        assert!(h.is_ready());
    }

    #[test]
    fn bad_log_level_is_a_clear_error() {
        let err = init_tracing(LogFormat::Text, "info,=[").unwrap_err();
        assert!(err.to_string().contains("invalid log level"), "{err}");
    }
}
