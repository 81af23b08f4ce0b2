//! Writes one YAML file per CRD into `manifests/crds/`; with `--check`, compares instead and
//! exits non-zero naming each file that differs from what the types generate.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use migration_api::crds;

const USAGE: &str = "usage: crdgen [--check] [--dir DIR]

Writes one YAML file per CRD into DIR (default: manifests/crds at the workspace root).
  --check    do not write; exit 1 and name each file that is missing, stale or unexpected
  --dir DIR  the directory to write or check";

fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/crds")
}

fn main() -> ExitCode {
    let mut check = false;
    let mut dir = default_dir();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--check" => check = true,
            "--dir" => match args.next() {
                Some(d) => dir = PathBuf::from(d),
                None => return usage_error("--dir needs a value"),
            },
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => return usage_error(&format!("unknown argument {other:?}")),
        }
    }
    match run(&dir, check) {
        Ok(problems) if problems.is_empty() => ExitCode::SUCCESS,
        Ok(problems) => {
            for p in &problems {
                eprintln!("{p}");
            }
            eprintln!(
                "{} CRD file(s) differ from the types; run `cargo run -p migration-api --bin crdgen` and commit",
                problems.len()
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("crdgen: {e}");
            ExitCode::from(2)
        }
    }
}

fn usage_error(msg: &str) -> ExitCode {
    eprintln!("crdgen: {msg}\n{USAGE}");
    ExitCode::from(2)
}

/// Writes (or checks) every CRD; returns the problems found by `--check`.
fn run(dir: &Path, check: bool) -> Result<Vec<String>, String> {
    let entries = crds::all();
    if !check {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let mut problems = Vec::new();
    let mut expected = std::collections::BTreeSet::new();
    for entry in &entries {
        let name = entry.file_name();
        let path = dir.join(&name);
        let yaml = entry
            .to_yaml()
            .map_err(|e| format!("rendering {name}: {e}"))?;
        expected.insert(name.clone());
        if check {
            match std::fs::read_to_string(&path) {
                Ok(existing) if existing == yaml => {}
                Ok(_) => problems.push(format!("stale: {}", path.display())),
                Err(_) => problems.push(format!("missing: {}", path.display())),
            }
        } else {
            std::fs::write(&path, yaml).map_err(|e| format!("writing {}: {e}", path.display()))?;
            println!("wrote {}", path.display());
        }
    }
    // Files in the directory that no type generates any more.
    if let Ok(read) = std::fs::read_dir(dir) {
        for f in read.flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if name.ends_with(".yaml") && !expected.contains(&name) {
                if check {
                    problems.push(format!("unexpected: {}", f.path().display()));
                } else {
                    std::fs::remove_file(f.path())
                        .map_err(|e| format!("removing {}: {e}", f.path().display()))?;
                    println!("removed {}", f.path().display());
                }
            }
        }
    }
    Ok(problems)
}
