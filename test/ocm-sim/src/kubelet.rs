//! A kubelet for one cluster, reduced to what the addon needs: for each Deployment whose
//! container image is the addon agent's, it runs the real `addon-agent` binary as a child
//! process with the container's args and env, the Deployment's ServiceAccount identity (a
//! kubeconfig from a token request) and its secret volumes written to files (container paths in
//! args and env are mapped to those files). Deployment status follows the process: Available
//! once the agent's `/readyz` answers, unavailable while it is not. The image tag is the version:
//! a tag the kubelet does not know never starts (an image pull failure). A Deployment gets
//! `replicas` processes (pod directories `<ns>-<name>`, `<ns>-<name>-1`, ...). A changed pod
//! template restarts them (new pods), and so does a process exiting (restartPolicy Always:
//! at once the first time, then after the kubelet's CrashLoopBackOff, 10 s doubling to 5 min,
//! as `doBackOff` in kubernetes `pkg/kubelet/kuberuntime/kuberuntime_manager.go` keeps it);
//! each pid is in its pod directory's `pid` file. A deleted Deployment stops them. Jobs with
//! the agent's image (the addon's pre-delete hook) run the binary to completion and report
//! succeeded or failed.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::backoff::CrashLoop;

/// Settings of a kubelet.
#[derive(Clone, Debug)]
pub struct KubeletOptions {
    /// The `addon-agent` executable.
    pub agent_binary: PathBuf,
    /// Image repository of the addon agent (`<repository>:<tag>`).
    pub image_repository: String,
    /// Tags that exist (any other tag fails to pull).
    pub known_tags: Vec<String>,
    /// More images this kubelet can run: (repository, executable), e.g. the addon-manager's
    /// on the global hub. Same tags as the agent's.
    pub other_images: Vec<(String, PathBuf)>,
    /// Where pod files and logs go.
    pub work_dir: PathBuf,
    /// URL and CA of this cluster's API (for the pods' kubeconfig).
    pub api_url: String,
    pub api_ca_pem: String,
}

struct Pod {
    child: tokio::process::Child,
    template_hash: u64,
    health_port: u16,
    /// The pod's `terminationGracePeriodSeconds` (Kubernetes' default: 30 s).
    grace: Duration,
    /// Its container's restart back-off, and when the kubelet saw it exit.
    crash: CrashLoop,
    exited: Option<std::time::Instant>,
}

/// Stops a container as the kubelet does (kubernetes `pkg/kubelet/kuberuntime/
/// kuberuntime_container.go`, `killContainer`): SIGTERM, then SIGKILL once the pod's
/// termination grace period has passed. In the background: the kubelet goes on meanwhile,
/// and a replacement may start while the old process is still stopping.
fn terminate(mut pod: Pod) {
    tokio::spawn(async move {
        if let Some(pid) = pod.child.id() {
            let _ = tokio::process::Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status()
                .await;
        }
        if tokio::time::timeout(pod.grace, pod.child.wait())
            .await
            .is_err()
        {
            let _ = pod.child.kill().await;
        }
    });
}

struct Ctx {
    client: Client,
    opts: KubeletOptions,
    /// The pods of each Deployment, by replica index.
    pods: Mutex<HashMap<(String, String), Vec<Pod>>>,
    /// Jobs with a run in progress (by uid).
    jobs: Mutex<std::collections::HashSet<String>>,
}

/// The executable and tag for an image this kubelet runs, if it is one of its images.
fn executable<'a>(opts: &'a KubeletOptions, image: &'a str) -> Option<(&'a Path, &'a str)> {
    std::iter::once((opts.image_repository.as_str(), opts.agent_binary.as_path()))
        .chain(
            opts.other_images
                .iter()
                .map(|(r, b)| (r.as_str(), b.as_path())),
        )
        .find_map(|(repo, bin)| {
            image
                .strip_prefix(repo)
                .and_then(|rest| rest.strip_prefix(':'))
                .map(|tag| (bin, tag))
        })
}

/// Runs until aborted; child processes are killed when the kubelet stops.
pub async fn run(client: Client, opts: KubeletOptions) {
    let deployments: Api<Deployment> = Api::all(client.clone());
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        opts,
        pods: Mutex::new(HashMap::new()),
        jobs: Mutex::new(Default::default()),
    });
    // Each watch has its own back-off and keeps its errors (`migration_api::runtime::controller`,
    // `watch_events`), as every informer's reflector does upstream (kube-controller-manager's job
    // and deployment controllers): client-go `tools/cache/reflector.go` (vendored in ocm) gives
    // each reflector `NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0)`, so one watch's
    // error never pauses another's.
    let jobs =
        migration_api::runtime::controller(Api::<Job>::all(client), watcher::Config::default())
            .run(
                reconcile_job,
                |_, e: &kube::Error, _| {
                    tracing::debug!(error = %e, "kubelet job reconcile failed");
                    Action::requeue(Duration::from_millis(500))
                },
                ctx.clone(),
            )
            .for_each(|_| async {});
    let deployments = migration_api::runtime::controller(deployments, watcher::Config::default())
        .run(
            reconcile,
            |_, e: &kube::Error, _| {
                tracing::debug!(error = %e, "kubelet reconcile failed");
                Action::requeue(Duration::from_millis(500))
            },
            ctx,
        )
        .for_each(|_| async {});
    futures::join!(jobs, deployments);
}

/// Runs a Job's pod (our image only) to completion; a failed run counts towards backoffLimit
/// and the next status event starts the next attempt.
async fn reconcile_job(job: Arc<Job>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let uid = job.uid().unwrap_or_default();
    let Some(pod_spec) = job.spec.as_ref().and_then(|s| s.template.spec.clone()) else {
        return Ok(Action::await_change());
    };
    let Some(container) = pod_spec.containers.first().cloned() else {
        return Ok(Action::await_change());
    };
    let image = container.image.clone().unwrap_or_default();
    let Some((_, tag)) = executable(&ctx.opts, &image) else {
        return Ok(Action::await_change());
    };
    let status = job.status.clone().unwrap_or_default();
    let failed = status.failed.unwrap_or(0);
    let backoff = job.spec.as_ref().and_then(|s| s.backoff_limit).unwrap_or(6);
    if job.metadata.deletion_timestamp.is_some()
        || status.succeeded.unwrap_or(0) >= 1
        || failed > backoff
        || !ctx.opts.known_tags.iter().any(|t| t == tag)
    {
        return Ok(Action::await_change());
    }
    if !ctx.jobs.lock().await.insert(uid.clone()) {
        return Ok(Action::await_change());
    }
    let ctx2 = ctx.clone();
    tokio::spawn(async move {
        let ok = match start(&ctx2, &ns, &format!("{name}-job"), &pod_spec, &container).await {
            Ok((mut child, _)) => child.wait().await.map(|s| s.success()).unwrap_or(false),
            Err(e) => {
                tracing::debug!(job = %name, error = %e, "job pod could not start");
                false
            }
        };
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let patch = if ok {
            json!({"status": {"succeeded": 1, "completionTime": now, "conditions": [
                {"type": "Complete", "status": "True", "lastProbeTime": now, "lastTransitionTime": now}]}})
        } else if failed + 1 > backoff {
            json!({"status": {"failed": failed + 1, "conditions": [
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": "Job has reached the specified backoff limit", "lastProbeTime": now, "lastTransitionTime": now}]}})
        } else {
            json!({"status": {"failed": failed + 1}})
        };
        let api: Api<Job> = Api::namespaced(ctx2.client.clone(), &ns);
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            tracing::debug!(job = %name, error = %e, "job status");
        }
        ctx2.jobs.lock().await.remove(&uid);
    });
    Ok(Action::await_change())
}

fn template_hash(d: &Deployment) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(&d.spec.as_ref().map(|s| &s.template))
        .unwrap_or_default()
        .hash(&mut h);
    h.finish()
}

async fn set_status(
    api: &Api<Deployment>,
    d: &Deployment,
    ready: i32,
    reason: &str,
    message: &str,
) -> Result<(), kube::Error> {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let want = replicas(d);
    let n = ready;
    // Available once the minimum (all but maxUnavailable, here: at least one) is ready.
    let ready = n >= want.min(1);
    let status = json!({"status": {
        "observedGeneration": d.metadata.generation,
        "replicas": want, "updatedReplicas": want, "readyReplicas": n, "availableReplicas": n, "unavailableReplicas": (want - n).max(0),
        "conditions": [
            {"type": "Available", "status": if ready { "True" } else { "False" },
             "reason": if ready { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
             "message": message, "lastUpdateTime": now, "lastTransitionTime": now},
            {"type": "Progressing", "status": "True", "reason": reason, "message": message, "lastUpdateTime": now, "lastTransitionTime": now}
        ]
    }});
    let current = d
        .status
        .as_ref()
        .map(|s| (s.available_replicas, s.observed_generation));
    if current == Some((Some(n), d.metadata.generation))
        && d.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.reason.as_deref() == Some(reason)))
    {
        return Ok(());
    }
    api.patch_status(
        &d.name_any(),
        &PatchParams::default(),
        &Patch::Merge(status),
    )
    .await?;
    Ok(())
}

/// The Deployment's desired replicas (1 when unset, as the API defaults it).
fn replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1).max(0)
}

async fn reconcile(d: Arc<Deployment>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    let ns = d.namespace().unwrap_or_default();
    let name = d.name_any();
    let key = (ns.clone(), name.clone());
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(current) = api.get_opt(&name).await? else {
        stop(&ctx, &key).await;
        return Ok(Action::await_change());
    };
    let Some(container) = current
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.first())
        .cloned()
    else {
        return Ok(Action::await_change());
    };
    let image = container.image.clone().unwrap_or_default();
    let Some((_, tag)) = executable(&ctx.opts, &image) else {
        // Not ours: this kubelet only runs the addon's images.
        return Ok(Action::await_change());
    };
    if current.metadata.deletion_timestamp.is_some()
        || current.spec.as_ref().and_then(|s| s.replicas) == Some(0)
    {
        stop(&ctx, &key).await;
        return Ok(Action::await_change());
    }
    if !ctx.opts.known_tags.iter().any(|t| t == tag) {
        stop(&ctx, &key).await;
        set_status(
            &api,
            &current,
            0,
            "ImagePullBackOff",
            &format!("Back-off pulling image \"{image}\": tag {tag} not found"),
        )
        .await?;
        return Ok(Action::await_change());
    }
    let hash = template_hash(&current);
    let want = usize::try_from(replicas(&current)).unwrap_or(0);
    let mut all = ctx.pods.lock().await;
    let pods = all.entry(key.clone()).or_default();
    // Scaled down: the highest replicas go.
    while pods.len() > want {
        if let Some(p) = pods.pop() {
            terminate(p);
        }
    }
    let pod_spec = current
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.clone())
        .unwrap_or_default();
    for i in 0..want {
        // A container that exited starts again in its pod once its restart back-off allows
        // (seen at this kubelet's next look, every 500 ms); a new pod starts at once.
        let now = std::time::Instant::now();
        let mut crash = CrashLoop::default();
        if let Some(p) = pods.get_mut(i).filter(|p| p.template_hash == hash) {
            if p.child.try_wait().ok().flatten().is_none() {
                continue;
            }
            let exited = *p.exited.get_or_insert(now);
            if p.crash.ends(exited) > now {
                continue;
            }
            crash = p.crash;
            crash.restarted(exited, now);
        }
        // Replica 0 keeps the Deployment's name for its directory; others get a suffix.
        let pod = if i == 0 {
            name.clone()
        } else {
            format!("{name}-{i}")
        };
        match start(&ctx, &ns, &pod, &pod_spec, &container).await {
            Ok((child, port)) => {
                let p = Pod {
                    child,
                    template_hash: hash,
                    health_port: port,
                    grace: Duration::from_secs(
                        pod_spec
                            .termination_grace_period_seconds
                            .and_then(|s| u64::try_from(s).ok())
                            .unwrap_or(30),
                    ),
                    crash,
                    exited: None,
                };
                if i < pods.len() {
                    // The replaced container stops in the background.
                    terminate(std::mem::replace(&mut pods[i], p));
                } else {
                    pods.push(p);
                }
            }
            Err(e) => {
                drop(all);
                set_status(&api, &current, 0, "CreateContainerError", &e).await?;
                return Ok(Action::requeue(Duration::from_secs(2)));
            }
        }
    }
    let ports: Vec<u16> = pods.iter().map(|p| p.health_port).collect();
    drop(all);
    let mut ready = 0;
    for port in ports {
        if probe(port).await {
            ready += 1;
        }
    }
    let all_ready = ready == i32::try_from(want).unwrap_or(i32::MAX);
    set_status(
        &api,
        &current,
        ready,
        if all_ready {
            "NewReplicaSetAvailable"
        } else {
            "ReplicaSetUpdated"
        },
        if all_ready {
            "the agent is ready"
        } else {
            "waiting for the agent to be ready"
        },
    )
    .await?;
    // The kubelet keeps probing, as the real one does.
    Ok(Action::requeue(Duration::from_millis(500)))
}

async fn stop(ctx: &Ctx, key: &(String, String)) {
    if let Some(pods) = ctx.pods.lock().await.remove(key) {
        for p in pods {
            terminate(p);
        }
    }
}

async fn probe(port: u16) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    if s.write_all(b"GET /readyz HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n")
        .await
        .is_err()
    {
        return false;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf).await;
    buf.starts_with("HTTP/1.1 200")
}

fn map_path(value: &str, mounts: &[(String, PathBuf)]) -> String {
    let mut out = value.to_owned();
    for (mount, local) in mounts {
        if out.contains(mount.as_str()) {
            out = out.replace(mount.as_str(), &local.to_string_lossy());
        }
    }
    out
}

/// Prepares the pod's files and identity and spawns the agent; returns the child and its port.
async fn start(
    ctx: &Ctx,
    ns: &str,
    name: &str,
    pod_spec: &k8s_openapi::api::core::v1::PodSpec,
    container: &k8s_openapi::api::core::v1::Container,
) -> Result<(tokio::process::Child, u16), String> {
    let ns = ns.to_owned();
    let dir = ctx.opts.work_dir.join(format!("{ns}-{name}"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Secret volumes, written where their mounts point.
    let mut mounts: Vec<(String, PathBuf)> = Vec::new();
    let volumes: BTreeMap<String, Value> = pod_spec
        .volumes
        .iter()
        .flatten()
        .map(|v| {
            (
                v.name.clone(),
                serde_json::to_value(v).unwrap_or(Value::Null),
            )
        })
        .collect();
    for m in container.volume_mounts.iter().flatten() {
        let Some(secret_name) = volumes
            .get(&m.name)
            .and_then(|v| v.pointer("/secret/secretName"))
            .and_then(Value::as_str)
        else {
            continue;
        };
        let local = dir.join(&m.name);
        std::fs::create_dir_all(&local).map_err(|e| format!("{}: {e}", local.display()))?;
        let secret = Api::<Secret>::namespaced(ctx.client.clone(), &ns)
            .get_opt(secret_name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("secret \"{secret_name}\" not found"))?;
        for (k, v) in secret.data.unwrap_or_default() {
            std::fs::write(local.join(&k), &v.0).map_err(|e| format!("{k}: {e}"))?;
        }
        mounts.push((m.mount_path.clone(), local));
    }
    // The pod's identity: its ServiceAccount's token, as a kubeconfig.
    let sa = pod_spec
        .service_account_name
        .clone()
        .unwrap_or_else(|| "default".into());
    let sas: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &ns);
    let tr = serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 86400}}))
        .map_err(|e| e.to_string())?;
    let token = sas
        .create_token_request(&sa, &PostParams::default(), &tr)
        .await
        .map_err(|e| format!("serviceaccount \"{sa}\": {e}"))?
        .status
        .map(|s| s.token)
        .unwrap_or_default();
    let b64 = |s: &str| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, s);
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: pod\n  user:\n    token: {token}\ncontexts:\n- name: local\n  context:\n    cluster: local\n    user: pod\n    namespace: {ns}\ncurrent-context: local\n",
        ctx.opts.api_url,
        b64(&ctx.opts.api_ca_pem)
    );
    let kubeconfig_path = dir.join("in-cluster.kubeconfig");
    std::fs::write(&kubeconfig_path, kubeconfig).map_err(|e| e.to_string())?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    // The previous container's log stays readable (`kubectl logs --previous`); a container
    // still stopping goes on writing there.
    let log_path = dir.join("agent.log");
    if log_path.exists() {
        let _ = std::fs::rename(&log_path, dir.join("agent.previous.log"));
    }
    let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    let image = container.image.clone().unwrap_or_default();
    let binary = executable(&ctx.opts, &image)
        .map(|(b, _)| b.to_path_buf())
        .ok_or_else(|| format!("image {image} is not one this kubelet runs"))?;
    let mut cmd = tokio::process::Command::new(&binary);
    for a in container.args.iter().flatten() {
        cmd.arg(map_path(a, &mounts));
    }
    cmd.env_clear();
    if let Ok(path) = std::env::var("PATH") {
        cmd.env("PATH", path);
    }
    for e in container.env.iter().flatten() {
        if let Some(v) = &e.value {
            cmd.env(&e.name, map_path(v, &mounts));
        }
        // The downward API fields the addon's pods use.
        let field = e
            .value_from
            .as_ref()
            .and_then(|f| f.field_ref.as_ref())
            .map(|f| f.field_path.as_str());
        match field {
            Some("metadata.namespace") => {
                cmd.env(&e.name, &ns);
            }
            Some("metadata.name") => {
                cmd.env(
                    &e.name,
                    format!("{name}-{:05x}", rand::random::<u32>() & 0xfffff),
                );
            }
            Some("spec.serviceAccountName") => {
                cmd.env(&e.name, &sa);
            }
            _ => {}
        }
    }
    cmd.env("KUBECONFIG", &kubeconfig_path)
        .env("HEALTH_ADDR", format!("127.0.0.1:{port}"))
        .env("POD_NAMESPACE", &ns)
        .stdout(log)
        .stderr(log2)
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .map_err(|e| format!("starting {}: {e}", binary.display()))?;
    // The container's process id, for tests that kill it (the kubelet then restarts it).
    if let Some(pid) = child.id() {
        std::fs::write(dir.join("pid"), pid.to_string()).map_err(|e| e.to_string())?;
    }
    Ok((child, port))
}

/// Where the workspace's `addon-agent` binary is, next to the running test or program
/// (`target/<profile>/addon-agent`).
pub fn find_agent_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let mut dir: &Path = exe.parent()?;
    for _ in 0..3 {
        let candidate = dir.join("addon-agent");
        if candidate.is_file() {
            return Some(candidate);
        }
        dir = dir.parent()?;
    }
    None
}
