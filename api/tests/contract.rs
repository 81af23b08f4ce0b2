//! Contract test: every OCM type we declare matches the upstream CRD in
//! `../shared/reference/crds/` (or `$UPSTREAM_CRDS_DIR`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use migration_api::contract::{Report, compare_crd};
use migration_api::crds::{self, Origin};
use serde::Deserialize;

fn upstream_dir() -> PathBuf {
    match std::env::var_os("UPSTREAM_CRDS_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference/crds"),
    }
}

/// Every CRD under `dir`, keyed by (group, kind).
fn load_upstream(dir: &Path) -> BTreeMap<(String, String), (PathBuf, CustomResourceDefinition)> {
    let mut found = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                let text = std::fs::read_to_string(&path).unwrap();
                for doc in serde_yaml::Deserializer::from_str(&text) {
                    let value = serde_yaml::Value::deserialize(doc).unwrap();
                    if value.get("kind").and_then(|k| k.as_str())
                        != Some("CustomResourceDefinition")
                    {
                        continue;
                    }
                    let crd: CustomResourceDefinition = serde_yaml::from_value(value)
                        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    let key = (crd.spec.group.clone(), crd.spec.names.kind.clone());
                    found.insert(key, (path.clone(), crd));
                }
            }
        }
    }
    found
}

#[test]
fn ocm_types_match_upstream_crds() {
    let dir = upstream_dir();
    if !dir.is_dir() {
        println!(
            "contract test skipped: no upstream CRDs at {} (a clone outside the workspace has no \
             ../shared; set UPSTREAM_CRDS_DIR to point at a copy)",
            dir.display()
        );
        return;
    }
    let upstream = load_upstream(&dir);
    let mut total = Report::default();
    let mut types = 0;
    for entry in crds::all()
        .into_iter()
        .filter(|e| e.origin == Origin::Upstream)
    {
        let key = (
            entry.crd.spec.group.clone(),
            entry.crd.spec.names.kind.clone(),
        );
        let Some((path, up)) = upstream.get(&key) else {
            total
                .problems
                .push(format!("{}/{}: no upstream CRD found", key.0, key.1));
            continue;
        };
        let report = compare_crd(&entry.crd, up);
        println!(
            "{:<28} {:>4} properties vs {}",
            key.1,
            report.properties,
            path.strip_prefix(&dir).unwrap_or(path).display()
        );
        types += 1;
        total.properties += report.properties;
        total.problems.extend(report.problems);
    }
    println!(
        "contract: compared {types} upstream types, {} properties, {} problems",
        total.properties,
        total.problems.len()
    );
    assert!(
        total.problems.is_empty(),
        "our types differ from upstream:\n{}",
        total.problems.join("\n")
    );
    assert!(types >= 17, "only {types} upstream types compared");
}

#[test]
fn identity_differences_are_reported() {
    let entry = crds::all()
        .into_iter()
        .find(|e| e.crd.spec.names.kind == "ManagedCluster")
        .unwrap();
    let mut other = entry.crd.clone();
    other.spec.scope = "Namespaced".into();
    other.spec.names.plural = "clusters".into();
    other.spec.group = "example.io".into();
    let report = compare_crd(&entry.crd, &other);
    assert_eq!(report.problems.len(), 3, "{:?}", report.problems);
    assert!(report.problems.iter().any(|p| p.contains("scope")));
    assert!(report.problems.iter().any(|p| p.contains("plural")));
    assert!(report.problems.iter().any(|p| p.contains("group")));
}
