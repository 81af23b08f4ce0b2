//! `kubectl mcm`: a kubectl plugin for ManagedClusterMigrations on the global hub (install it
//! on the PATH as `kubectl-mcm`).
//!
//! `kubectl mcm move --from hub1 --to hub2 --clusters c1,c2 [--watch]` creates a migration and,
//! with `--watch`, follows it with a progress line until it ends: exit 0 when it completed, 1
//! when it failed (its conditions say why), 2 for flags that cannot make a migration (nothing
//! is created then).
//!
//! `kubectl mcm export --clusters c1,c2 --to-directory DIR [--carry KINDS] [--include-secrets]`
//! (against a managed hub) writes what a migration would carry for those clusters to a new
//! directory, and `kubectl mcm import --from-directory DIR` (against another hub) applies it:
//! `clusterctl move --to-directory/--from-directory` for OCM hubs.

mod bundle;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use futures::StreamExt;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use migration_api::cli::{MoveFlags, move_spec, progress_line};
use migration_api::migration::{ManagedClusterMigration, MigrationPhase};

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-mcm",
    about = "ManagedClusterMigrations on the global hub"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create a migration of clusters from one hub to another (and follow it with --watch).
    Move {
        #[command(flatten)]
        flags: MoveFlags,
        /// Follow the migration until it ends.
        #[arg(long, short = 'w')]
        watch: bool,
        /// The migration's name (default: generated, `move-<from>-xxxxx`).
        #[arg(long)]
        name: Option<String>,
        #[arg(long, short = 'n', default_value = "default")]
        namespace: String,
        /// The global hub's kubeconfig (default: $KUBECONFIG, then ~/.kube/config).
        #[arg(long, env = "KUBECONFIG")]
        kubeconfig: Option<PathBuf>,
        /// With --watch: give up following after this many seconds (the migration goes on).
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
    },
    /// Write what a migration would carry for some clusters to a new directory, read from
    /// their hub (a managed hub, not the global hub).
    Export {
        /// The clusters, by name (comma-separated).
        #[arg(long, value_delimiter = ',')]
        clusters: Vec<String>,
        /// Or: the clusters with these labels (a kubectl label selector).
        #[arg(long, short = 'l')]
        selector: Option<String>,
        /// The directory to write (new, or empty).
        #[arg(long)]
        to_directory: PathBuf,
        /// Kinds in each cluster's namespace to carry besides its addons and
        /// KlusterletAddonConfig, as kubectl names them (`configmaps`,
        /// `clusterdeployments.hive.openshift.io`).
        #[arg(long, value_delimiter = ',')]
        carry: Vec<String>,
        /// Let `--carry` name Secrets (their data is written in the clear, files mode 0600).
        #[arg(long)]
        include_secrets: bool,
        /// The hub's kubeconfig (default: $KUBECONFIG, then ~/.kube/config).
        #[arg(long, env = "KUBECONFIG")]
        kubeconfig: Option<PathBuf>,
    },
    /// Apply a directory written by `export` to a hub: each cluster's ManagedCluster, then its
    /// objects, owners first; nothing already there is overwritten, and a failure removes what
    /// this import applied.
    Import {
        #[arg(long)]
        from_directory: PathBuf,
        /// Check the directory and the hub only.
        #[arg(long)]
        dry_run: bool,
        /// The hub's kubeconfig (default: $KUBECONFIG, then ~/.kube/config).
        #[arg(long, env = "KUBECONFIG")]
        kubeconfig: Option<PathBuf>,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Move {
            flags,
            watch,
            name,
            namespace,
            kubeconfig,
            timeout,
        } => run_move(flags, watch, name, namespace, kubeconfig, timeout).await,
        Command::Export {
            clusters,
            selector,
            to_directory,
            carry,
            include_secrets,
            kubeconfig,
        } => {
            let verb = "kubectl mcm export";
            match client(kubeconfig).await {
                Err(e) => finish(verb, Err(bundle::Stop::Failed(e))),
                Ok(c) => {
                    let done = bundle::export(
                        c,
                        &clusters,
                        selector.as_deref(),
                        &carry,
                        include_secrets,
                        &to_directory,
                    );
                    finish(verb, done.await)
                }
            }
        }
        Command::Import {
            from_directory,
            dry_run,
            kubeconfig,
        } => {
            let verb = "kubectl mcm import";
            match client(kubeconfig).await {
                Err(e) => finish(verb, Err(bundle::Stop::Failed(e))),
                Ok(c) => finish(verb, bundle::import(c, &from_directory, dry_run).await),
            }
        }
    }
}

/// Prints how an export or import ended and gives its exit code.
fn finish(verb: &str, done: Result<String, bundle::Stop>) -> ExitCode {
    match done {
        Ok(said) => {
            println!("{said}");
            ExitCode::SUCCESS
        }
        Err(bundle::Stop::Usage(e)) => {
            eprintln!("{verb}: {e}");
            ExitCode::from(2)
        }
        Err(bundle::Stop::Failed(e)) => {
            eprintln!("{verb}: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run_move(
    flags: MoveFlags,
    watch: bool,
    name: Option<String>,
    namespace: String,
    kubeconfig: Option<PathBuf>,
    timeout: u64,
) -> ExitCode {
    let spec = match move_spec(&flags) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kubectl mcm move: {e}; nothing was created");
            return ExitCode::from(2);
        }
    };
    let client = match client(kubeconfig).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kubectl mcm move: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut mcm = ManagedClusterMigration::new(name.as_deref().unwrap_or_default(), spec);
    if name.is_none() {
        // No name at all (not an empty one): the API server generates it.
        mcm.metadata.name = None;
        mcm.metadata.generate_name = Some(format!("move-{}-", flags.from));
    }
    mcm.metadata.namespace = Some(namespace.clone());
    let api: Api<ManagedClusterMigration> = Api::namespaced(client, &namespace);
    let created = match api.create(&PostParams::default(), &mcm).await {
        Ok(m) => m,
        Err(kube::Error::Api(s)) => {
            eprintln!(
                "kubectl mcm move: the global hub refused the migration: {}",
                s.message
            );
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("kubectl mcm move: creating the migration: {e}");
            return ExitCode::FAILURE;
        }
    };
    let name = created.name_any();
    println!("managedclustermigration {namespace}/{name} created");
    if !watch {
        return ExitCode::SUCCESS;
    }
    follow(&api, &name, Duration::from_secs(timeout)).await
}

/// A client for the global hub: the kubeconfig named, else the usual search.
async fn client(kubeconfig: Option<PathBuf>) -> Result<Client, String> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(&path)
                .map_err(|e| format!("reading {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| format!("no kubeconfig: {e}"))?,
    };
    Client::try_from(config).map_err(|e| e.to_string())
}

/// Follows migration `name` (a watch: each change redraws the line) until it ends or `limit`
/// passes.
async fn follow(api: &Api<ManagedClusterMigration>, name: &str, limit: Duration) -> ExitCode {
    let started = Instant::now();
    let changes = watcher(
        api.clone(),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff()
    .applied_objects();
    let mut changes = std::pin::pin!(changes);
    let mut out = std::io::stdout();
    let m = loop {
        let next = tokio::time::timeout(limit.saturating_sub(started.elapsed()), changes.next());
        match next.await {
            Err(_) => {
                println!(
                    "\nstill running after {}s; follow it with kubectl get mcm {name} -w",
                    limit.as_secs()
                );
                return ExitCode::FAILURE;
            }
            Ok(None) => return ExitCode::FAILURE,
            Ok(Some(Err(e))) => {
                eprintln!("\nkubectl mcm move: watching {name}: {e}");
                continue;
            }
            Ok(Some(Ok(m))) => {
                let _ = write!(out, "{}", progress_line(Some(&m), 0, started.elapsed()));
                let _ = out.flush();
                let phase = m.status.as_ref().and_then(|s| s.phase);
                if phase.is_some_and(MigrationPhase::is_terminal) {
                    break m;
                }
            }
        }
    };
    println!();
    let status = m.status.clone().unwrap_or_default();
    if let Some(target) = &status.target {
        println!("{} -> {target}", m.spec.from);
    }
    for c in status.conditions.iter().flatten() {
        println!(
            "  {:<22} {:<6} {:<22} {}",
            c.type_, c.status, c.reason, c.message
        );
    }
    if let Some(plan) = &status.plan {
        println!(
            "plan: {} clusters in {} waves, {} objects",
            plan.clusters.len(),
            plan.waves.len(),
            plan.objects.len()
        );
    }
    if status.phase == Some(MigrationPhase::Completed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
