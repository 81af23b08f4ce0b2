//! kube-rs clients that talk to kube-sim (or any API server) the way client-go talks to
//! kube-apiserver: HTTP/2 only, all requests and watches of a client on one connection.
//!
//! kube-rs's own client stack speaks HTTP/1.1, which holds a connection for every open watch;
//! a fleet of thousands of simulated agents in one process would run out of file descriptors
//! with it. Within one process client-go also shares a transport (so one connection) between
//! clients of the same TLS identity and server: OCM's klusterlet agent in its singleton mode
//! runs the registration and work agents in one process that way, both on the hub kubeconfig
//! the registration agent writes. [`Transports`] stands for such a process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::legacy::{Client as HttpClient, Error as HttpError, ResponseFuture};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use kube::client::{Body, ConfigExt};
use sha2::{Digest, Sha256};
use tower::{BoxError, ServiceBuilder};

type Transport = HttpClient<hyper_rustls::HttpsConnector<Connector>, Body>;

/// client-go's HTTP/2 health check: a ping after this long, failed after [`HTTP2_PING_TIMEOUT`].
const HTTP2_PING_INTERVAL: Duration = Duration::from_secs(30);
const HTTP2_PING_TIMEOUT: Duration = Duration::from_secs(15);

/// How long an unused connection stays open (client-go's idle connection timeout).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The transports of one simulated process: clients made through it from the same kubeconfig
/// text share one connection while any of them lives. Separate processes (separate values)
/// never share, as separate pods would not.
#[derive(Clone, Default)]
pub struct Transports(Arc<Mutex<Live>>);

#[derive(Default)]
struct Live {
    by_kubeconfig: HashMap<[u8; 32], Weak<Transport>>,
    /// Forgotten transports are swept when the map reaches this size.
    sweep_at: usize,
}

impl std::fmt::Debug for Transports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transports").finish_non_exhaustive()
    }
}

impl Transports {
    /// A kube-rs client from kubeconfig text, speaking HTTP/2 only, on this process's
    /// transport for that kubeconfig.
    pub async fn client(&self, kubeconfig_text: &str) -> Result<kube::Client, crate::StartError> {
        let err = |e: &dyn std::fmt::Display| crate::StartError::Client(e.to_string());
        let kc = kube::config::Kubeconfig::from_yaml(kubeconfig_text).map_err(|e| err(&e))?;
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| err(&e))?;
        let key: [u8; 32] = Sha256::digest(kubeconfig_text.as_bytes()).into();
        let transport = self.get_or_make(key, &config).map_err(|e| err(&e))?;
        let service = ServiceBuilder::new()
            .layer(config.base_uri_layer())
            .option_layer(config.auth_layer().map_err(|e| err(&e))?)
            .map_err(BoxError::from)
            .service(Shared(transport));
        Ok(kube::Client::new(service, config.default_namespace))
    }

    fn get_or_make(
        &self,
        key: [u8; 32],
        config: &kube::Config,
    ) -> Result<Arc<Transport>, kube::Error> {
        let mut live = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(t) = live.by_kubeconfig.get(&key).and_then(Weak::upgrade) {
            return Ok(t);
        }
        let t = Arc::new(transport(config)?);
        live.by_kubeconfig.insert(key, Arc::downgrade(&t));
        if live.by_kubeconfig.len() >= live.sweep_at {
            live.by_kubeconfig.retain(|_, w| w.strong_count() > 0);
            live.sweep_at = (live.by_kubeconfig.len() * 2).max(16);
        }
        Ok(t)
    }
}

fn transport(config: &kube::Config) -> Result<Transport, kube::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    // HTTP/2 sends many small frames (settings, window updates): without this, Nagle's
    // algorithm and delayed acknowledgements hold them back.
    http.set_nodelay(true);
    // The connector offers `h2` alone in ALPN (HTTP/2 enabled, HTTP/1.1 not).
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http()
        .enable_http2()
        .wrap_connector(Connector { tcp: http });
    Ok(HttpClient::builder(TokioExecutor::new())
        .http2_only(true)
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(IDLE_TIMEOUT)
        // client-go's HTTP/2 health check (`transport.HTTP2ReadIdleTimeout` 30 s, ping timeout
        // 15 s): a connection that stops answering fails its requests instead of holding them.
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(Some(HTTP2_PING_INTERVAL))
        .http2_keep_alive_timeout(HTTP2_PING_TIMEOUT)
        .build(connector))
}

/// How long a request may wait for its response to start (connecting and the headers; a
/// watch's body streams on without limit). client-go bounds the same steps (dial 30 s, TLS
/// handshake 10 s); without a bound, a request queued for an HTTP/2 connection whose dial
/// failed (the server was down) could wait forever.
const RESPONSE_START_TIMEOUT: Duration = Duration::from_secs(30);

/// A shared transport as a tower service.
#[derive(Clone)]
struct Shared(Arc<Transport>);

impl tower::Service<Request<Body>> for Shared {
    type Response = Response<Incoming>;
    type Error = BoxError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, BoxError>> + Send>,
    >;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let response: ResponseFuture = self.0.request(req);
        Box::pin(async move {
            match tokio::time::timeout(RESPONSE_START_TIMEOUT, response).await {
                Ok(r) => r.map_err(|e: HttpError| BoxError::from(e)),
                Err(_) => Err(BoxError::from(format!(
                    "no response within {RESPONSE_START_TIMEOUT:?}"
                ))),
            }
        })
    }
}

/// Connects to a server of this process through memory where it accepts that
/// ([`crate::in_process`]), else over TCP.
#[derive(Clone)]
struct Connector {
    tcp: HttpConnector,
}

/// The address a URI names, where its host is an IP address or `localhost`.
fn address_of(uri: &http::Uri) -> Option<std::net::SocketAddr> {
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    let ip: std::net::IpAddr = if host == "localhost" {
        std::net::Ipv4Addr::LOCALHOST.into()
    } else {
        host.parse().ok()?
    };
    let port = uri.port_u16().or(match uri.scheme_str() {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    })?;
    Some((ip, port).into())
}

impl tower::Service<http::Uri> for Connector {
    type Response = Stream;
    type Error = BoxError;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.tcp.poll_ready(cx).map_err(BoxError::from)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        if let Some(memory) = address_of(&uri).and_then(crate::in_process::connect) {
            return Box::pin(std::future::ready(Ok(Stream::Memory(TokioIo::new(memory)))));
        }
        let tcp = self.tcp.call(uri);
        Box::pin(async move { Ok(Stream::Tcp(tcp.await?)) })
    }
}

/// A connection over TCP or through memory.
enum Stream {
    Tcp(TokioIo<tokio::net::TcpStream>),
    Memory(TokioIo<tokio::io::DuplexStream>),
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        match self {
            Self::Tcp(s) => s.connected(),
            Self::Memory(_) => Connected::new(),
        }
    }
}

impl hyper::rt::Read for Stream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            Self::Memory(s) => std::pin::Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl hyper::rt::Write for Stream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            Self::Memory(s) => std::pin::Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => std::pin::Pin::new(s).poll_flush(cx),
            Self::Memory(s) => std::pin::Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            Self::Memory(s) => std::pin::Pin::new(s).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Tcp(s) => s.is_write_vectored(),
            Self::Memory(s) => s.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => std::pin::Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Memory(s) => std::pin::Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }
}
