//! What the `kubectl-mcm` command line decides without a cluster: the migration a `move`
//! asks for (from its flags, checked as the manager checks a spec) and the progress line it
//! draws while following one. The fleet demo draws the same line.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::migration::{ManagedClusterMigration, ManagedClusterMigrationSpec, SpecError};

/// The flags of `kubectl mcm move` that make the spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "runtime", derive(clap::Args))]
pub struct MoveFlags {
    /// Source hub (its ManagedCluster name on the global hub).
    #[cfg_attr(feature = "runtime", arg(long))]
    pub from: String,
    /// Target hub.
    #[cfg_attr(feature = "runtime", arg(long, conflicts_with = "to_placement"))]
    pub to: Option<String>,
    /// A Placement on the global hub, in the migration's namespace, that chooses the target.
    #[cfg_attr(feature = "runtime", arg(long))]
    pub to_placement: Option<String>,
    /// The clusters to move, by name (comma-separated).
    #[cfg_attr(feature = "runtime", arg(long, value_delimiter = ','))]
    pub clusters: Vec<String>,
    /// The clusters to move, by labels on the source hub (`k=v,k2=v2`; equality only).
    #[cfg_attr(feature = "runtime", arg(long, short = 'l'))]
    pub selector: Option<String>,
    /// The clusters to move, as a Placement on the source hub decided them.
    #[cfg_attr(feature = "runtime", arg(long))]
    pub placement: Option<String>,
    /// Clusters switching at once (default: all).
    #[cfg_attr(feature = "runtime", arg(long))]
    pub max_concurrency: Option<i32>,
    /// Validate and write the plan only.
    #[cfg_attr(feature = "runtime", arg(long))]
    pub dry_run: bool,
}

/// Why a `move` cannot be asked for.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MoveError {
    #[error("--selector {0:?}: expected key=value pairs separated by commas")]
    Selector(String),
    #[error("{0}")]
    Spec(#[from] SpecError),
}

/// The spec `flags` ask for, checked as the manager will check it (so a bad flag is refused
/// here, before anything is created).
pub fn move_spec(flags: &MoveFlags) -> Result<ManagedClusterMigrationSpec, MoveError> {
    let selector = match &flags.selector {
        None => None,
        Some(text) => {
            let mut labels = std::collections::BTreeMap::new();
            for pair in text.split(',') {
                let (k, v) = pair
                    .split_once('=')
                    .filter(|(k, _)| !k.trim().is_empty())
                    .ok_or_else(|| MoveError::Selector(text.clone()))?;
                labels.insert(k.trim().to_owned(), v.trim().to_owned());
            }
            Some(LabelSelector {
                match_labels: Some(labels),
                ..Default::default()
            })
        }
    };
    let spec = ManagedClusterMigrationSpec {
        from: flags.from.clone(),
        to: flags.to.clone().unwrap_or_default(),
        to_placement: flags.to_placement.clone(),
        included_managed_clusters: (!flags.clusters.is_empty()).then(|| flags.clusters.clone()),
        included_managed_clusters_selector: selector,
        included_managed_clusters_placement_ref: flags.placement.clone(),
        max_concurrency: flags.max_concurrency,
        dry_run: flags.dry_run.then_some(true),
        ..Default::default()
    };
    spec.validate()?;
    Ok(spec)
}

/// One line of progress: a bar of the clusters registered on the target, the phase, the
/// counts and the time since the start (`\r` first: each line overwrites the last).
pub fn progress_line(
    m: Option<&ManagedClusterMigration>,
    total: usize,
    elapsed: Duration,
) -> String {
    let status = m.and_then(|m| m.status.clone()).unwrap_or_default();
    let phase = status.phase.unwrap_or_default();
    let c = status.clusters.unwrap_or_default();
    let total = if total == 0 {
        usize::try_from(c.total.max(0)).unwrap_or(0)
    } else {
        total
    };
    let width = 30;
    let done = (usize::try_from(c.registered.max(0)).unwrap_or(0) * width)
        .checked_div(total)
        .unwrap_or(0)
        .min(width);
    format!(
        "\r[{}{}] {:<12} {:>4}/{total} registered  {:>3} switching  {:>3} failed  {:>5.1}s ",
        "#".repeat(done),
        ".".repeat(width - done),
        format!("{phase:?}"),
        c.registered,
        c.switching,
        c.failed,
        elapsed.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migration::{ClusterCounts, ManagedClusterMigrationStatus, MigrationPhase};

    fn flags() -> MoveFlags {
        MoveFlags {
            from: "hub1".into(),
            to: Some("hub2".into()),
            clusters: vec!["c1".into(), "c2".into()],
            ..Default::default()
        }
    }

    #[test]
    fn a_move_asks_for_the_spec_its_flags_name_or_says_what_is_wrong() {
        let spec = move_spec(&flags()).unwrap_or_default();
        assert_eq!((spec.from.as_str(), spec.to.as_str()), ("hub1", "hub2"));
        assert_eq!(
            spec.included_managed_clusters,
            Some(vec!["c1".into(), "c2".into()])
        );
        assert_eq!(spec.dry_run, None);
        let by_label = MoveFlags {
            clusters: vec![],
            selector: Some("tier=edge, zone=a".into()),
            to: None,
            to_placement: Some("most-room".into()),
            dry_run: true,
            ..flags()
        };
        let spec = move_spec(&by_label).unwrap_or_default();
        let labels = spec
            .included_managed_clusters_selector
            .and_then(|s| s.match_labels)
            .unwrap_or_default();
        assert_eq!(labels.get("zone").map(String::as_str), Some("a"));
        assert_eq!(
            (spec.to.as_str(), spec.to_placement.as_deref()),
            ("", Some("most-room"))
        );
        assert_eq!(spec.dry_run, Some(true));
        // Refused before anything is created, each by name.
        let bad_selector = MoveFlags {
            clusters: vec![],
            selector: Some("tier".into()),
            ..flags()
        };
        assert_eq!(
            move_spec(&bad_selector),
            Err(MoveError::Selector("tier".into()))
        );
        let same = MoveFlags {
            to: Some("hub1".into()),
            ..flags()
        };
        assert!(matches!(
            move_spec(&same),
            Err(MoveError::Spec(SpecError::SameHub(_)))
        ));
        let two_ways = MoveFlags {
            placement: Some("edge".into()),
            ..flags()
        };
        assert!(matches!(
            move_spec(&two_ways),
            Err(MoveError::Spec(SpecError::Selector(_)))
        ));
        let upper = MoveFlags {
            clusters: vec!["Cluster1".into()],
            ..flags()
        };
        assert!(move_spec(&upper).is_err());
        let nowhere = MoveFlags {
            to: None,
            ..flags()
        };
        assert!(matches!(
            move_spec(&nowhere),
            Err(MoveError::Spec(SpecError::Target(_)))
        ));
    }

    #[test]
    fn the_progress_line_fills_with_the_clusters_registered() {
        let mut m = ManagedClusterMigration::new("m", ManagedClusterMigrationSpec::default());
        m.status = Some(ManagedClusterMigrationStatus {
            phase: Some(MigrationPhase::Registering),
            clusters: Some(ClusterCounts {
                total: 4,
                registered: 2,
                switching: 1,
                ..Default::default()
            }),
            ..Default::default()
        });
        let line = progress_line(Some(&m), 0, Duration::from_millis(1500));
        assert!(
            line.starts_with(&format!("\r[{}{}]", "#".repeat(15), ".".repeat(15))),
            "{line}"
        );
        assert!(
            line.contains("Registering") && line.contains("2/4 registered"),
            "{line}"
        );
        assert!(line.contains("1.5s"), "{line}");
        // Nothing known yet: an empty bar, no division by zero.
        let empty = progress_line(None, 0, Duration::ZERO);
        assert!(
            empty.contains(&".".repeat(30)) && empty.contains("Pending"),
            "{empty}"
        );
    }
}
