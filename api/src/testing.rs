//! Test helpers for the binaries (feature `test-util`): a stand-in API server that answers only
//! `/version` (enough for start-up), a kubeconfig pointing at it, and a minimal HTTP GET.
//! Tests that need real API behaviour use kube-sim.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Starts a plain-HTTP server on 127.0.0.1 answering `GET /version`, on a thread and runtime of
/// its own (so a test that blocks its own runtime cannot starve it); returns its address.
pub fn fake_version_api() -> std::io::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::spawn(move || {
        runtime.block_on(async move {
            let app = Router::new().route(
                "/version",
                get(|| async {
                    axum::Json(serde_json::json!({
                        "major": "1", "minor": "33", "gitVersion": "v1.33.0",
                        "gitCommit": "", "gitTreeState": "clean",
                        "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24",
                        "compiler": "gc", "platform": "linux/amd64"
                    }))
                }),
            );
            if let Ok(listener) = TcpListener::from_std(listener) {
                let _ = axum::serve(listener, app).await;
            }
        });
    });
    Ok(addr)
}

/// Writes a kubeconfig for `http://<addr>` (no credentials) to `path`.
pub fn write_kubeconfig(path: &Path, server: &str) -> std::io::Result<()> {
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n\
             users:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n\
             current-context: c\n"
        ),
    )
}

/// `GET path` over plain HTTP/1.1; returns the status code and body.
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {response:?}")))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// Polls `GET path` until it answers `want`, or fails after `deadline`.
pub async fn wait_for_status(
    addr: SocketAddr,
    path: &str,
    want: u16,
    deadline: Duration,
) -> Result<String, String> {
    let start = Instant::now();
    let mut last = String::from("no answer");
    while start.elapsed() < deadline {
        match http_get(addr, path).await {
            Ok((status, body)) if status == want => return Ok(body),
            Ok((status, _)) => last = format!("status {status}"),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!(
        "GET {path} on {addr} did not answer {want} within {deadline:?}: {last}"
    ))
}

/// A free 127.0.0.1 port (bound, then released), for a child process's listen address.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// What a child process showed between start and SIGTERM.
#[derive(Debug)]
pub struct Lifecycle {
    /// `/metrics` while it was ready.
    pub metrics: String,
    /// Its exit status after SIGTERM.
    pub status: std::process::ExitStatus,
    /// Everything it wrote to stderr (its logs).
    pub stderr: String,
}

/// Starts `command` with `--health-addr 127.0.0.1:<free port>` appended, waits until `/healthz`
/// and `/readyz` answer 200, reads `/metrics`, sends SIGTERM and waits for the exit.
pub async fn ready_then_terminate(mut command: std::process::Command) -> Result<Lifecycle, String> {
    let port = free_port().map_err(|e| e.to_string())?;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut child = command
        .arg("--health-addr")
        .arg(addr.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawning: {e}"))?;
    let probe = async {
        wait_for_status(addr, "/healthz", 200, Duration::from_secs(20)).await?;
        wait_for_status(addr, "/readyz", 200, Duration::from_secs(20)).await?;
        let (status, metrics) = http_get(addr, "/metrics")
            .await
            .map_err(|e| e.to_string())?;
        if status != 200 {
            return Err(format!("/metrics answered {status}"));
        }
        Ok(metrics)
    };
    let metrics = probe.await;
    terminate(child.id())?;
    let status = wait_exit(&mut child, Duration::from_secs(20))?;
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    let metrics = metrics.map_err(|e| format!("{e}\nstderr:\n{stderr}"))?;
    Ok(Lifecycle {
        metrics,
        status,
        stderr,
    })
}

/// Sends SIGTERM to a process.
pub fn terminate(pid: u32) -> Result<(), String> {
    let status = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .map_err(|e| format!("running kill: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill -TERM {pid} failed: {status}"))
    }
}

/// Waits for a child to exit, killing it and failing after `deadline`.
pub fn wait_exit(
    child: &mut std::process::Child,
    deadline: Duration,
) -> Result<std::process::ExitStatus, String> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if start.elapsed() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                return Err(format!("process did not exit within {deadline:?}"));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Runs a command to completion with a deadline; returns its status and stderr.
pub fn run_to_exit(
    mut command: std::process::Command,
    deadline: Duration,
) -> Result<(std::process::ExitStatus, String, String), String> {
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawning: {e}"))?;
    let status = wait_exit(&mut child, deadline)?;
    let read = |r: Option<&mut dyn std::io::Read>| {
        let mut s = String::new();
        if let Some(r) = r {
            let _ = r.read_to_string(&mut s);
        }
        s
    };
    let stdout = read(child.stdout.as_mut().map(|s| s as &mut dyn std::io::Read));
    let stderr = read(child.stderr.as_mut().map(|s| s as &mut dyn std::io::Read));
    Ok((status, stdout, stderr))
}

/// Polls `f` every 50 ms until it returns `Some`, failing the test after `deadline`.
pub async fn eventually<T, F, Fut>(deadline: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
