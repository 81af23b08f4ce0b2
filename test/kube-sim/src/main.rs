//! `kube-sim serve`: runs one instance until SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "kube-sim",
    version,
    about = "A Kubernetes-API-compatible in-memory server for tests"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the API until SIGTERM.
    Serve {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:6443")]
        listen: SocketAddr,
        /// Where to write the admin kubeconfig once ready to serve.
        #[arg(long, value_name = "FILE")]
        kubeconfig_out: PathBuf,
        /// Directory of CRD YAML files to load at start-up (repeatable).
        #[arg(long = "crds", value_name = "DIR")]
        crds: Vec<PathBuf>,
        /// Plain HTTP without authentication or authorization.
        #[arg(long)]
        insecure_http: bool,
        /// Instance name (CA and kubeconfig names).
        #[arg(long, default_value = "kube-sim")]
        name: String,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let Command::Serve {
        listen,
        kubeconfig_out,
        crds,
        insecure_http,
        name,
    } = Cli::parse().command;
    let opts = kube_sim::Options {
        name,
        insecure_http,
        crd_dirs: crds,
        ..Default::default()
    };
    let sim = match kube_sim::KubeSim::start_on(listen, opts).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kube-sim: {e}");
            return ExitCode::FAILURE;
        }
    };
    let tmp = kubeconfig_out.with_extension("tmp");
    if let Err(e) =
        std::fs::write(&tmp, sim.kubeconfig()).and_then(|()| std::fs::rename(&tmp, &kubeconfig_out))
    {
        eprintln!("kube-sim: writing {}: {e}", kubeconfig_out.display());
        return ExitCode::FAILURE;
    }
    eprintln!(
        "kube-sim: serving {} (kubeconfig {})",
        sim.url(),
        kubeconfig_out.display()
    );
    if let Err(e) = kube_sim::until_terminated().await {
        eprintln!("kube-sim: waiting for SIGTERM: {e}");
        return ExitCode::FAILURE;
    }
    sim.shutdown();
    ExitCode::SUCCESS
}
