//! Pins the deploy ManifestWork rendered for the default configuration. A change to the
//! templates shows up here as a diff; after reviewing it, regenerate with
//! `UPDATE_SNAPSHOTS=1 cargo test -p addon-manager --test render_snapshot`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use addon_manager::render::{self, AgentValues, Defaults};
use serde_json::json;

#[test]
fn default_deploy_work_matches_the_snapshot() {
    let defaults = Defaults::new(
        "cluster-migration",
        addon_manager::DEFAULT_AGENT_IMAGE,
        "0.1.0",
    );
    let values = AgentValues::new(&defaults, "hub1", None, "0.1.0").unwrap();
    let owner = json!({"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
        "name": "cluster-migration", "uid": "00000000-0000-0000-0000-000000000001", "controller": true, "blockOwnerDeletion": true});
    let works = render::deploy_works(
        "cluster-migration",
        "hub1",
        render::agent_manifests(&values).unwrap(),
        &BTreeMap::new(),
        &owner,
        render::WORK_SIZE_LIMIT,
    );
    assert_eq!(works.len(), 1, "the default install fits one work");
    let got = serde_json::to_string_pretty(&works[0]).unwrap() + "\n";
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/default-deploy-work.json");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &got).unwrap();
    }
    let want =
        std::fs::read_to_string(&path).expect("snapshot missing: run with UPDATE_SNAPSHOTS=1");
    assert!(
        got == want,
        "rendered work differs from {}:\n{got}",
        path.display()
    );
}
