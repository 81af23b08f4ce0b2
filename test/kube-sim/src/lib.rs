//! kube-sim: a Kubernetes-API-compatible in-memory server for tests and the quickstart.
//!
//! It speaks the Kubernetes REST API over HTTPS (or plain HTTP for the simplest tests):
//! discovery and OpenAPI v3, built-in kinds and CRDs with structural-schema validation, list and
//! watch with resourceVersions, bookmarks and 410s, the status subresource, generation,
//! finalizers and garbage collection, JSON/merge/strategic/apply patches with managed fields,
//! tables for `kubectl get`, token and client-certificate authentication, RBAC, CSR signing,
//! fault injection and request counters. It knows nothing about OCM.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kube_sim::StartError> {
//! let sim = kube_sim::KubeSim::start(kube_sim::Options::default()).await?;
//! let client = sim.client().await?;
//! # let _ = client; Ok(()) }
//! ```

pub mod apply;
pub mod auth;
pub mod client;
mod controllers;
pub mod convert;
pub mod discovery;
pub mod error;
pub mod faults;
mod in_process;
pub mod jsonpath;
pub mod meta;
pub mod metrics;
pub mod patch;
pub mod pki;
pub mod protobuf;
pub mod resources;
pub mod schema;
pub mod server;
pub mod sim;
pub mod store;
pub mod table;
pub mod throttle;
pub mod types;
pub mod watch;

use std::net::SocketAddr;
use std::path::Path;

use base64::Engine;
use serde_json::Value;
use tokio::sync::watch as tokio_watch;

pub use faults::{ErrorRule, Faults};
pub use metrics::Metrics;
pub use sim::{DEFAULT_MAX_OBJECT_BYTES, Mutator, Options, Sim, Validator};

use crate::auth::UserInfo;

/// Why an instance could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("generating certificates: {0}")]
    Pki(String),
    #[error("configuring TLS: {0}")]
    Tls(String),
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("loading CRDs from {path}: {message}")]
    Crds { path: String, message: String },
    #[error("building a client: {0}")]
    Client(String),
    #[error("{0}")]
    Internal(String),
}

/// A running instance.
#[derive(Debug)]
pub struct KubeSim {
    sim: Sim,
    addr: SocketAddr,
    admin_token: String,
    shutdown: tokio_watch::Sender<bool>,
}

impl KubeSim {
    /// Starts an instance on 127.0.0.1 with an ephemeral port.
    pub async fn start(opts: Options) -> Result<Self, StartError> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), opts).await
    }

    /// Starts an instance on the given address.
    pub async fn start_on(addr: SocketAddr, opts: Options) -> Result<Self, StartError> {
        let insecure = opts.insecure_http;
        let crd_dirs = opts.crd_dirs.clone();
        let sim = Sim::new(opts)?;
        let admin_token = sim::mint_token("kube-system", "admin", i64::MAX);
        sim.tokens().static_tokens.insert(
            admin_token.clone(),
            UserInfo::authenticated("kube-sim-admin", vec!["system:masters".into()]),
        );
        let (shutdown, rx) = tokio_watch::channel(false);
        tokio::spawn(controllers::run(sim.clone()));
        for dir in &crd_dirs {
            load_crds(&sim, dir)?;
        }
        let listener = server::bind(addr).map_err(|source| StartError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| StartError::Bind { addr, source })?;
        let tls = if insecure {
            None
        } else {
            Some(server::tls_config(&sim)?)
        };
        tokio::spawn(server::serve(sim.clone(), listener, tls, rx));
        Ok(Self {
            sim,
            addr,
            admin_token,
            shutdown,
        })
    }

    /// The API semantics, for direct use in tests.
    pub fn sim(&self) -> &Sim {
        &self.sim
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:<port>` (or `http://` when insecure).
    pub fn url(&self) -> String {
        let scheme = if self.sim.inner.opts.insecure_http {
            "http"
        } else {
            "https"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// The CA certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        self.sim.inner.pki.ca_pem()
    }

    /// The admin bearer token (group `system:masters`).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// Fault switches.
    pub fn faults(&self) -> &Faults {
        &self.sim.inner.faults
    }

    /// Request counters.
    pub fn metrics(&self) -> &Metrics {
        &self.sim.inner.metrics
    }

    /// How many watchers this instance has closed for falling behind.
    pub fn watchers_fell_behind(&self) -> u64 {
        self.sim.store().fell_behind()
    }

    /// Open watches by storage (resource plural, `group/plural` outside the core group).
    pub fn watcher_counts(&self) -> std::collections::BTreeMap<String, usize> {
        self.sim.store().watcher_counts()
    }

    /// Adds a static bearer token for a user.
    pub fn add_token(&self, token: &str, user: &str, groups: &[&str]) {
        self.sim.tokens().static_tokens.insert(
            token.to_owned(),
            UserInfo::authenticated(user, groups.iter().map(|g| (*g).to_owned()).collect()),
        );
    }

    /// A client certificate for a user (cert PEM, key PEM), signed by the server's CA.
    pub fn client_cert(&self, user: &str, groups: &[&str]) -> Result<(String, String), StartError> {
        let groups: Vec<String> = groups.iter().map(|g| (*g).to_owned()).collect();
        self.sim
            .inner
            .pki
            .client_cert(user, &groups, 365 * 86400)
            .map_err(|e| StartError::Pki(e.to_string()))
    }

    fn kubeconfig_with(&self, name: &str, user: String) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let cluster = if self.sim.inner.opts.insecure_http {
            format!("    server: {}\n", self.url())
        } else {
            format!(
                "    server: {}\n    certificate-authority-data: {}\n",
                self.url(),
                b64(self.ca_pem())
            )
        };
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n{cluster}users:\n- name: {name}\n  user:\n{user}contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\ncurrent-context: {name}\n"
        )
    }

    /// A kubeconfig for the admin identity.
    pub fn kubeconfig(&self) -> String {
        self.kubeconfig_for_token(&self.admin_token)
    }

    /// A kubeconfig authenticating with a bearer token.
    pub fn kubeconfig_for_token(&self, token: &str) -> String {
        let name = self.sim.inner.opts.name.clone();
        self.kubeconfig_with(&name, format!("    token: {token}\n"))
    }

    /// A kubeconfig authenticating with a client certificate.
    pub fn kubeconfig_for_cert(&self, cert_pem: &str, key_pem: &str) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let name = self.sim.inner.opts.name.clone();
        self.kubeconfig_with(
            &name,
            format!(
                "    client-certificate-data: {}\n    client-key-data: {}\n",
                b64(cert_pem),
                b64(key_pem)
            ),
        )
    }

    /// A kube-rs client for the admin identity.
    pub async fn client(&self) -> Result<kube::Client, StartError> {
        client_from_kubeconfig(&self.kubeconfig()).await
    }

    /// Loads every CRD in a directory of YAML files.
    pub fn load_crds(&self, dir: &Path) -> Result<usize, StartError> {
        load_crds(&self.sim, dir)
    }

    /// Stops serving (open connections are cut).
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }
}

impl Drop for KubeSim {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
    }
}

/// Waits for SIGTERM or Ctrl-C (what the `kube-sim` and `fleet` binaries run until).
pub async fn until_terminated() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r?,
    }
    Ok(())
}

/// A kube-rs client from kubeconfig text, speaking HTTP/2 on a connection of its own (see
/// [`client::Transports`] for clients that share one).
pub async fn client_from_kubeconfig(text: &str) -> Result<kube::Client, StartError> {
    client::Transports::default().client(text).await
}

/// Creates (or updates) every CustomResourceDefinition found in the YAML files of `dir`.
pub fn load_crds(sim: &Sim, dir: &Path) -> Result<usize, StartError> {
    let err = |message: String| StartError::Crds {
        path: dir.display().to_string(),
        message,
    };
    let rt = sim
        .find("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .ok_or_else(|| err("no CRD type".into()))?;
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| err(e.to_string()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    entries.sort();
    let mut count = 0;
    let opts = sim::WriteOpts {
        field_manager: Some("kube-sim".into()),
        ..Default::default()
    };
    for path in entries {
        let text =
            std::fs::read_to_string(&path).map_err(|e| err(format!("{}: {e}", path.display())))?;
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(doc)
                .map_err(|e| err(format!("{}: {e}", path.display())))?;
            if v.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
                continue;
            }
            let name = meta::meta_str(&v, "name").unwrap_or_default().to_owned();
            let result = match sim.get(&rt, "", &name) {
                Ok(existing) => {
                    let mut v = v;
                    v["metadata"]["resourceVersion"] =
                        existing["metadata"]["resourceVersion"].clone();
                    sim.update(&rt, "", &name, "", v, &opts)
                }
                Err(_) => sim.create(&UserInfo::system(), &rt, "", v, &opts),
            };
            result.map_err(|e| err(format!("{}: {e}", path.display())))?;
            count += 1;
        }
    }
    Ok(count)
}
