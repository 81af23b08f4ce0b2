//! Every number and duration a user or a hub writes is read by a total function: any input
//! gives a value or a refusal, never a panic, and every value stays within its bounds.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use migration_api::carried::CarryOverResource;
use migration_api::migration::{
    MAX_CARRY_OVER_PARTS, MAX_CLUSTERS, MAX_TIMEOUT, ManagedClusterMigrationSpec, parse_duration,
};
use migration_api::ocm::work::{FeedbackValue, FieldValue};
use migration_api::task_report::{Field, MAX_REPORT_MESSAGE, TaskReport};
use proptest::prelude::*;

/// Text shaped like a Go duration: numbers of any size and precision, known units and not.
fn duration_like() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        any::<u128>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| f.abs().to_string()),
        "[0-9]{0,40}(\\.[0-9]{0,40})?",
    ];
    let unit = prop_oneof![
        Just("ns"),
        Just("us"),
        Just("µs"),
        Just("ms"),
        Just("s"),
        Just("m"),
        Just("h"),
        Just(""),
        Just("d"),
    ];
    prop::collection::vec((number, unit), 1..4).prop_map(|parts| {
        parts
            .into_iter()
            .map(|(n, u)| format!("{n}{u}"))
            .collect::<String>()
    })
}

/// The longest Go duration: `math.MaxInt64` nanoseconds.
const MAX_GO: Duration = Duration::from_nanos(i64::MAX as u64);

#[test]
fn durations_that_round_to_the_edge_of_u64_are_refused_not_a_panic() {
    // u64::MAX seconds is 2^64 as a float, where `Duration::from_secs_f64` panics.
    for text in [
        "18446744073709551615s",
        "18446744073709551616s",
        "9223372036854775807s1s",
        "5124095576030431h1h",
    ] {
        assert_eq!(parse_duration(text), None, "{text}");
    }
    // The longest Go duration still reads.
    assert_eq!(
        parse_duration("2562047h"),
        Some(Duration::from_secs(2562047 * 3600))
    );
}

proptest! {
    #[test]
    fn any_text_reads_as_a_duration_or_none(text in ".{0,64}") {
        if let Some(d) = parse_duration(&text) {
            prop_assert!(d <= MAX_GO, "{text} read as {d:?}");
        }
    }

    #[test]
    fn any_duration_shaped_text_reads_within_go_s_range_or_none(text in duration_like()) {
        if let Some(d) = parse_duration(&text) {
            prop_assert!(d <= MAX_GO, "{text} read as {d:?}");
        }
    }

    #[test]
    fn any_spec_is_judged_and_timed_within_bounds(
        stage in prop::option::of(duration_like()),
        registering in prop::option::of(duration_like()),
        max_concurrency in prop::option::of(any::<i32>()),
        max_failures in prop::option::of(any::<i32>()),
        clusters in 0usize..=usize::MAX,
        key in ".{0,12}",
        value in ".{0,12}",
    ) {
        let spec = ManagedClusterMigrationSpec {
            from: "hub1".into(),
            to: "hub2".into(),
            included_managed_clusters: Some(vec!["c1".into()]),
            stage_timeout: stage,
            registering_timeout: registering,
            max_concurrency,
            max_failures,
            carry_over: Some(vec![CarryOverResource {
                group: String::new(),
                resource: "configmaps".into(),
                label_selector: Some(LabelSelector {
                    match_labels: Some([(key.clone(), value.clone())].into()),
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key,
                        operator: "In".into(),
                        values: Some(vec![value]),
                    }]),
                }),
            }]),
            ..Default::default()
        };
        let _ = spec.validate();
        let t = spec.timeouts(clusters);
        prop_assert!(t.stage <= MAX_TIMEOUT && t.wave <= MAX_TIMEOUT && t.registering <= MAX_TIMEOUT);
        prop_assert!(spec.token_validity(clusters) <= MAX_TIMEOUT * 4);
    }

    #[test]
    fn any_numbers_a_hub_reports_are_bounded_or_refused(
        total in any::<i64>(),
        parts in any::<i64>(),
        message_len in 0usize..5000,
    ) {
        let integer = |name: &str, n: i64| FeedbackValue {
            name: name.into(),
            field_value: FieldValue { type_: "Integer".into(), integer: Some(n), ..Default::default() },
        };
        let text = |name: &str, s: String| FeedbackValue {
            name: name.into(),
            field_value: FieldValue { type_: "String".into(), string: Some(s), ..Default::default() },
        };
        let values = [
            integer(Field::Total.name(), total),
            integer(Field::CarryParts.name(), parts),
            text(Field::CarryDigest.name(), "d".into()),
            text(Field::Message.name(), "é".repeat(message_len)),
        ];
        let report = TaskReport::from_feedback(&values);
        let in_range = (0..=MAX_CLUSTERS as i64).contains(&total)
            && (0..=MAX_CARRY_OVER_PARTS as i64).contains(&parts);
        prop_assert_eq!(report.out_of_range.is_none(), in_range);
        if let Some(p) = &report.carry_parts {
            prop_assert!(p.bounded() <= MAX_CARRY_OVER_PARTS);
        }
        prop_assert!(report.total.is_none_or(|t| (0..=MAX_CLUSTERS as i64).contains(&t)));
        prop_assert!(report.message.as_deref().is_some_and(|m| m.len() <= MAX_REPORT_MESSAGE));
    }
}

#[test]
fn a_carry_over_selector_with_an_empty_label_key_is_refused() {
    let spec = ManagedClusterMigrationSpec {
        from: "hub1".into(),
        to: "hub2".into(),
        included_managed_clusters: Some(vec!["c1".into()]),
        carry_over: Some(vec![CarryOverResource {
            group: String::new(),
            resource: "configmaps".into(),
            label_selector: Some(LabelSelector {
                match_labels: Some([(String::new(), "x".to_owned())].into()),
                ..Default::default()
            }),
        }]),
        ..Default::default()
    };
    let refused = spec.validate().expect_err("an empty key is no label key");
    assert!(refused.to_string().contains("label key"), "{refused}");
}
