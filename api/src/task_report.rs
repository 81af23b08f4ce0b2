//! The wire contract of a MigrationTask's report, spelled once: what an agent writes into its
//! task's status ([`MigrationTaskStatus`]), the ManifestWork status feedback rules that read it
//! back to the global hub ([`feedback_rule`], one JSONPath per [`Field`], scalars only, so
//! nothing depends on the work agent's `RawFeedbackJsonString` gate), and how the manager
//! decodes those values ([`TaskReport::from_feedback`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::migration::ClusterState;
use crate::ocm::work::{FeedbackValue, feedback_value};

/// How far an agent got with the stage its task names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StageState {
    /// Still acting, or waiting for something to happen.
    #[default]
    Running,
    /// Done with the stage.
    Succeeded,
    /// The stage cannot be done (validation found a problem).
    Failed,
}

impl StageState {
    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "Running",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
        }
    }

    /// `Succeeded` when the stage is done, else `Running`.
    pub fn done_if(done: bool) -> Self {
        if done { Self::Succeeded } else { Self::Running }
    }

    /// The state a name on the wire stands for.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Running, Self::Succeeded, Self::Failed]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

/// One value a task's report carries back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// The task revision the report is on (`observedRevision`).
    Revision,
    /// [`StageState`].
    State,
    /// What the agent says about the stage.
    Message,
    /// One [`ClusterState`] character per cluster.
    Clusters,
    /// How many clusters the task covers.
    Total,
    /// Source, at validation: the KlusterletConfig API the hub serves.
    Shape,
    /// Source, at validation: the carry-over records as one JSON string.
    Carry,
    /// Source, at validation: how many parts the carry-over is in, when it is not inline.
    CarryParts,
    /// Source, at validation: the digest of those parts.
    CarryDigest,
    /// Why the stage was refused as a whole (a reason name).
    Refusal,
    /// Target, while clusters register: which clusters it has recorded as released (the
    /// offsets of `releaseTimes`, one entry per cluster, empty for one not released).
    Released,
}

impl Field {
    /// Every field, in the order the feedback rule lists them.
    pub const ALL: [Field; 11] = [
        Field::Revision,
        Field::State,
        Field::Message,
        Field::Clusters,
        Field::Total,
        Field::Shape,
        Field::Carry,
        Field::CarryParts,
        Field::CarryDigest,
        Field::Refusal,
        Field::Released,
    ];

    /// The feedback value's name.
    pub fn name(self) -> &'static str {
        match self {
            Field::Revision => "revision",
            Field::State => "state",
            Field::Message => "message",
            Field::Clusters => "clusters",
            Field::Total => "total",
            Field::Shape => "shape",
            Field::Carry => "carry",
            Field::CarryParts => "carryParts",
            Field::CarryDigest => "carryDigest",
            Field::Refusal => "refusal",
            Field::Released => "released",
        }
    }

    /// Where the agent writes it in the MigrationTask (a JSONPath the work agent reads).
    pub fn path(self) -> &'static str {
        match self {
            Field::Revision => ".status.observedRevision",
            Field::State => ".status.stageState",
            Field::Message => ".status.message",
            Field::Clusters => ".status.clusterStates",
            Field::Total => ".status.clusters.total",
            Field::Shape => ".status.klusterletConfigShape",
            Field::Carry => ".status.carryOverJson",
            Field::CarryParts => ".status.carryOverParts.count",
            Field::CarryDigest => ".status.carryOverParts.digest",
            Field::Refusal => ".status.refusal",
            Field::Released => ".status.releaseTimes.offsets",
        }
    }
}

/// The ManifestWork feedback rule that reads a task's report back.
pub fn feedback_rule() -> Value {
    let paths: Vec<Value> = Field::ALL
        .iter()
        .map(|f| json!({"name": f.name(), "path": f.path()}))
        .collect();
    json!({"type": "JSONPaths", "jsonPaths": paths})
}

/// `text` cut to at most `max` bytes, at a character's boundary, marked with `…` where cut.
pub fn cut(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
    text
}

/// A task's report as the manager reads it from the work's status feedback.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskReport {
    pub revision: Option<String>,
    pub state: Option<StageState>,
    pub message: Option<String>,
    /// One [`ClusterState`] character per cluster.
    pub clusters: Option<String>,
    pub total: Option<i64>,
    pub shape: Option<String>,
    /// The carry-over records as one JSON string (`decode_carry_over`).
    pub carry: Option<String>,
    /// Where the carry-over is when it is not inline.
    pub carry_parts: Option<crate::migration::CarryOverParts>,
    /// Why the stage was refused as a whole (a reason name), if it was.
    pub refusal: Option<String>,
    /// Target: the offsets of its `releaseTimes` ([`Field::Released`]).
    pub released: Option<String>,
    /// What the report holds out of range (a hub's agent never writes it): the manager
    /// refuses such a report rather than act on it.
    pub out_of_range: Option<String>,
}

/// The longest message of a report the manager keeps (a condition's message quotes it);
/// the rest is cut off.
pub const MAX_REPORT_MESSAGE: usize = 1024;

impl TaskReport {
    /// Decodes the feedback values of a MigrationTask manifest.
    ///
    /// Every value is bounded before anything acts on it: a number out of its range leaves
    /// its field unset and says so in [`TaskReport::out_of_range`], and the message is cut
    /// to [`MAX_REPORT_MESSAGE`] bytes.
    pub fn from_feedback(values: &[FeedbackValue]) -> Self {
        let text = |f: Field| feedback_value(values, f.name()).and_then(|v| v.string.clone());
        let integer = |f: Field| feedback_value(values, f.name()).and_then(|v| v.integer);
        let mut out_of_range = Vec::new();
        let mut bounded = |f: Field, max: i64| {
            let n = integer(f)?;
            if (0..=max).contains(&n) {
                return Some(n);
            }
            out_of_range.push(format!("{} {n} is not within 0..={max}", f.name()));
            None
        };
        let total = bounded(Field::Total, crate::migration::MAX_CLUSTERS as i64);
        let parts = bounded(
            Field::CarryParts,
            crate::migration::MAX_CARRY_OVER_PARTS as i64,
        );
        TaskReport {
            revision: text(Field::Revision),
            state: text(Field::State).as_deref().and_then(StageState::parse),
            message: text(Field::Message).map(|m| cut(m, MAX_REPORT_MESSAGE)),
            clusters: text(Field::Clusters),
            total,
            shape: text(Field::Shape),
            carry: text(Field::Carry),
            carry_parts: parts
                .and_then(|n| u32::try_from(n).ok())
                .zip(text(Field::CarryDigest))
                .map(|(count, digest)| crate::migration::CarryOverParts { count, digest }),
            refusal: text(Field::Refusal),
            released: text(Field::Released),
            out_of_range: (!out_of_range.is_empty()).then(|| out_of_range.join("; ")),
        }
    }

    /// The states of `n` clusters (`Pending` for any not reported).
    pub fn states(&self, n: usize) -> Vec<ClusterState> {
        ClusterState::decode(self.clusters.as_deref().unwrap_or(""), n)
    }

    /// Target: for each of `n` clusters, whether it has recorded when it learnt of the
    /// cluster's release ([`crate::migration::ReleaseTimes::offsets`]: an entry that does not
    /// parse is no record). All false when it reports none.
    pub fn recorded_releases(&self, n: usize) -> Vec<bool> {
        let offsets = self.released.as_deref().unwrap_or_default();
        crate::migration::ReleaseTimes::offsets(offsets, n)
            .iter()
            .map(Option::is_some)
            .collect()
    }

    pub fn succeeded(&self) -> bool {
        self.state == Some(StageState::Succeeded)
    }

    pub fn failed(&self) -> bool {
        self.state == Some(StageState::Failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migration::{ClusterCounts, MigrationTaskStatus};
    use crate::ocm::work::FieldValue;

    /// What a work agent's JSONPath reads from `obj`: a scalar as a feedback value.
    fn read(obj: &Value, name: &str, path: &str) -> Option<FeedbackValue> {
        let mut at = obj;
        for key in path.trim_start_matches('.').split('.') {
            at = at.get(key)?;
        }
        let field_value = match at {
            Value::String(s) => FieldValue {
                type_: "String".into(),
                string: Some(s.clone()),
                ..Default::default()
            },
            Value::Number(n) => FieldValue {
                type_: "Integer".into(),
                integer: n.as_i64(),
                ..Default::default()
            },
            _ => return None,
        };
        Some(FeedbackValue {
            name: name.into(),
            field_value,
        })
    }

    #[test]
    fn what_the_agent_writes_the_rule_reads_and_the_manager_decodes() {
        let status = MigrationTaskStatus {
            observed_revision: Some("r7".into()),
            stage_state: Some(StageState::Failed),
            message: Some("one cluster is missing".into()),
            cluster_states: Some("vN".into()),
            clusters: Some(ClusterCounts {
                total: 2,
                failed: 1,
                ..Default::default()
            }),
            klusterlet_config_shape: Some("None".into()),
            carry_over_json: Some(r#"[{"name":"a"}]"#.into()),
            carry_over_parts: Some(crate::migration::CarryOverParts {
                count: 3,
                digest: "d1".into(),
            }),
            refusal: Some("PlacementNotFound".into()),
            release_times: Some(crate::migration::ReleaseTimes {
                since: "2026-01-01T00:00:00Z".into(),
                offsets: "3,".into(),
            }),
            ..Default::default()
        };
        let task = json!({"status": status});
        let rule = feedback_rule();
        let values: Vec<FeedbackValue> = rule["jsonPaths"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| read(&task, p["name"].as_str()?, p["path"].as_str()?))
            .collect();
        assert_eq!(values.len(), Field::ALL.len(), "every field is read");
        let report = TaskReport::from_feedback(&values);
        assert_eq!(
            report,
            TaskReport {
                revision: Some("r7".into()),
                state: Some(StageState::Failed),
                message: Some("one cluster is missing".into()),
                clusters: Some("vN".into()),
                total: Some(2),
                shape: Some("None".into()),
                carry: Some(r#"[{"name":"a"}]"#.into()),
                carry_parts: Some(crate::migration::CarryOverParts {
                    count: 3,
                    digest: "d1".into(),
                }),
                refusal: Some("PlacementNotFound".into()),
                released: Some("3,".into()),
                out_of_range: None,
            }
        );
        assert_eq!(report.recorded_releases(3), vec![true, false, false]);
        assert!(report.failed() && !report.succeeded());
        assert_eq!(
            report.states(3),
            vec![
                ClusterState::Valid,
                ClusterState::NotFound,
                ClusterState::Pending
            ]
        );
    }

    #[test]
    fn a_release_is_recorded_where_its_offset_parses() {
        let report = |released: Option<&str>| TaskReport {
            released: released.map(str::to_owned),
            ..Default::default()
        };
        // (the offsets reported, what they say of 3 clusters)
        let table = [
            (None, [false, false, false]),
            (Some("0,,12"), [true, false, true]),
            // Fewer entries than clusters, more, and one that does not parse.
            (Some("0"), [true, false, false]),
            (Some("0,1,2,3"), [true, true, true]),
            (Some("x,1,"), [false, true, false]),
        ];
        for (i, (released, recorded)) in table.into_iter().enumerate() {
            assert_eq!(report(released).recorded_releases(3), recorded, "row {i}");
        }
    }

    #[test]
    fn feedback_names_are_distinct_and_states_round_trip() {
        let mut names: Vec<&str> = Field::ALL.iter().map(|f| f.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Field::ALL.len());
        for s in [
            StageState::Running,
            StageState::Succeeded,
            StageState::Failed,
        ] {
            assert_eq!(StageState::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).ok(), Some(json!(s.as_str())));
        }
        assert_eq!(StageState::parse("Done"), None);
    }
}
