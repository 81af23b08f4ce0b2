//! A user's requests on a migration (annotation [`names::annotations::REQUEST`]): `rollback`
//! and `retry`, each decided purely from the phase and the status ([`on_request`]); the one
//! effect a request has beyond the status, creating the retry, is [`create_retry`].

use super::*;

/// The answer to a user's request: the decision it makes, if any, the migration to create
/// (a retry), and what condition `RequestAccepted` says.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Answer {
    pub(super) outcome: Option<Outcome>,
    pub(super) create: Option<ManagedClusterMigration>,
    pub(super) said: Said,
    /// The migration stops waiting for its hubs (condition [`conditions::ABANDONED`]).
    pub(super) abandon: bool,
}

impl Answer {
    fn say(said: Said) -> Self {
        Answer {
            outcome: None,
            create: None,
            said,
            abandon: false,
        }
    }
}

fn abandoning(message: &str) -> Said {
    Said::yes(
        conditions::REQUEST_ACCEPTED,
        reasons::ABANDON_REQUESTED,
        message,
    )
}

fn not_applicable(message: String) -> Said {
    Said::no(
        conditions::REQUEST_ACCEPTED,
        reasons::REQUEST_NOT_APPLICABLE,
        message,
    )
}

/// Whether `request` was acted on already: `RequestAccepted` is True for it. A request is
/// acted on once; another request (a retry after a rollback) is answered in its turn.
pub(super) fn answered(request: &str, status: &ManagedClusterMigrationStatus) -> bool {
    let done = match request {
        "rollback" => reasons::ROLLBACK_REQUESTED,
        "retry" => reasons::RETRY_CREATED,
        "abandon" => reasons::ABANDON_REQUESTED,
        _ => return false,
    };
    status
        .conditions
        .as_deref()
        .and_then(|c| find_condition(c, conditions::REQUEST_ACCEPTED))
        .is_some_and(|c| c.status == TRUE && c.reason == done)
}

/// What a user's `request` does to `mcm` (its status as `status`), asked until it is
/// [`answered`].
///
/// - `rollback`: before any cluster was touched (Pending, Validating) the migration fails at
///   once; in flight it rolls back (the clusters that arrived stay, as in any rollback); from
///   then on there is nothing left to roll back.
/// - `retry`: once it ended, a new migration (`<name>-retry`, [`retry_of`]) for the clusters
///   that stayed.
/// - `abandon`: as `rollback` before any cluster was touched; after, the migration stops
///   waiting for its hubs: in flight it rolls back without waiting for a silent target, and
///   Cleaning reports what no hub confirmed (`Unconfirmed`) and ends Failed.
pub(super) fn on_request(
    mcm: &ManagedClusterMigration,
    status: &ManagedClusterMigrationStatus,
    request: &str,
) -> Answer {
    use MigrationPhase::*;
    let phase = status.phase.unwrap_or_default();
    let yes = |message: &str| {
        Said::yes(
            conditions::REQUEST_ACCEPTED,
            reasons::ROLLBACK_REQUESTED,
            message,
        )
    };
    match (request, phase) {
        ("rollback", Pending | Validating) => Answer {
            outcome: Some(Outcome::invalid(
                reasons::ROLLBACK_REQUESTED,
                "rollback requested before any cluster was touched",
            )),
            create: None,
            said: yes("rollback requested before any cluster was touched: nothing to undo"),
            abandon: false,
        },
        ("rollback", Initializing | Deploying | Registering) => Answer {
            outcome: Some(Outcome::Rollback(
                None,
                reasons::ROLLBACK_REQUESTED,
                "rollback requested; the clusters not registered on the target go back".into(),
            )),
            create: None,
            said: yes("rolling back the clusters not registered on the target"),
            abandon: false,
        },
        ("abandon", Pending | Validating) => Answer {
            outcome: Some(Outcome::invalid(
                reasons::ABANDON_REQUESTED,
                "abandoned before any cluster was touched",
            )),
            create: None,
            said: abandoning("abandoned before any cluster was touched: nothing to undo"),
            abandon: false,
        },
        ("abandon", Initializing | Deploying | Registering) => Answer {
            outcome: Some(Outcome::Rollback(
                None,
                reasons::ABANDON_REQUESTED,
                "abandoned; the clusters not registered on the target go back without waiting for the hubs".into(),
            )),
            create: None,
            said: abandoning(
                "rolling back without waiting for the hubs, then reporting what they did not confirm",
            ),
            abandon: true,
        },
        ("abandon", Rollbacking | Cleaning) => Answer {
            outcome: None,
            create: None,
            said: abandoning(
                "no longer waiting for the hubs: what they did not confirm is reported, and the migration ends",
            ),
            abandon: true,
        },
        ("abandon", _) => Answer::say(not_applicable(format!(
            "abandon requested in {phase:?}: the migration has ended"
        ))),
        ("rollback", _) => Answer::say(not_applicable(format!(
            "rollback requested in {phase:?}: nothing left to roll back (clusters that arrived stay; to move them back, migrate them back)"
        ))),
        ("retry", Completed | Failed) => match retry_of(mcm, status) {
            Ok(retry) => {
                let clusters = retry
                    .spec
                    .included_managed_clusters
                    .as_ref()
                    .map_or(0, Vec::len);
                let said = Said::yes(
                    conditions::REQUEST_ACCEPTED,
                    reasons::RETRY_CREATED,
                    format!(
                        "retried as {}/{} for the {clusters} clusters that stayed",
                        retry.namespace().unwrap_or_default(),
                        retry.name_any()
                    ),
                );
                Answer {
                    outcome: None,
                    create: Some(retry),
                    said,
                    abandon: false,
                }
            }
            Err(why) => Answer::say(not_applicable(why)),
        },
        ("retry", _) => Answer::say(not_applicable(format!(
            "retry requested in {phase:?}: a migration is retried once it has ended"
        ))),
        (other, _) => Answer::say(Said::no(
            conditions::REQUEST_ACCEPTED,
            reasons::UNKNOWN_REQUEST,
            format!(
                "unknown request {other:?}: the known ones are \"rollback\", \"retry\" and \"abandon\""
            ),
        )),
    }
}

/// The retry of an ended migration: `<name>-retry` in its namespace, labelled with its uid
/// ([`labels::RETRY_OF`]), with the spec it ran with (`status.acceptedSpec`) for the clusters
/// it resolved that did not arrive, named one by one (a selector would select anew). A
/// cluster the source no longer has is left out: a retry with it would fail validation.
pub(super) fn retry_of(
    mcm: &ManagedClusterMigration,
    status: &ManagedClusterMigrationStatus,
) -> Result<ManagedClusterMigration, String> {
    let names = status.resolved_clusters.clone().unwrap_or_default();
    let states = ClusterState::decode(status.cluster_states.as_deref().unwrap_or(""), names.len());
    let stayed: Vec<String> = names
        .into_iter()
        .zip(states)
        .filter(|(_, s)| !s.arrived() && *s != ClusterState::NotFound)
        .map(|(n, _)| n)
        .collect();
    if stayed.is_empty() {
        return Err("retry requested, but no cluster that stayed is left to move".into());
    }
    let mut spec = status
        .accepted_spec
        .clone()
        .unwrap_or_else(|| mcm.spec.clone());
    if spec.dry_run == Some(true) {
        return Err("retry requested of a dry run: create the migration without dryRun".into());
    }
    spec.included_managed_clusters = Some(stayed);
    spec.included_managed_clusters_selector = None;
    spec.included_managed_clusters_placement_ref = None;
    // The retry goes where the clusters were going, not wherever the Placement points now.
    if let Some(target) = status.target.clone().filter(|t| !t.is_empty()) {
        spec.to = target;
        spec.to_placement = None;
    }
    let mut retry = ManagedClusterMigration::new(&format!("{}-retry", mcm.name_any()), spec);
    retry.metadata.namespace = mcm.namespace();
    retry.metadata.labels =
        Some([(labels::RETRY_OF.to_owned(), mcm.uid().unwrap_or_default())].into());
    Ok(retry)
}

/// Creates the retry a request asked for; the condition to report. One of that name already
/// made for this migration (a reconcile cut short after creating it) counts as created;
/// another of that name is not touched.
pub(super) async fn create_retry(
    ctx: &Ctx,
    retry: &ManagedClusterMigration,
    of: &ManagedClusterMigration,
    said: Said,
) -> Result<Said, Error> {
    let ns = retry.namespace().unwrap_or_default();
    let api: Api<ManagedClusterMigration> = Api::namespaced(ctx.client.clone(), &ns);
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api.create(&params, retry).await {
        Ok(_) => Ok(said),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            // Read from the controller's cache (it watches every migration); one created by a
            // reconcile cut short may not be in it yet: the reconcile fails and comes back.
            let existing = ctx
                .migrations
                .get(&ObjectRef::new(&retry.name_any()).within(&ns))
                .ok_or_else(|| {
                    Error::Kube(ApiError::new(
                        format!("finding the migration's retry {ns}/{}", retry.name_any()),
                        kube::Error::Api(s),
                    ))
                })?;
            let ours =
                existing.labels().get(labels::RETRY_OF).map(String::as_str) == of.uid().as_deref();
            Ok(if ours {
                said
            } else {
                Said::no(
                    conditions::REQUEST_ACCEPTED,
                    reasons::RETRY_NAME_TAKEN,
                    format!(
                        "retry requested, but migration {ns}/{} exists and is not a retry of this one: delete or rename it, then ask again",
                        retry.name_any()
                    ),
                )
            })
        }
        Err(e) => Err(Error::Kube(ApiError::new(
            format!("creating the migration's retry {ns}/{}", retry.name_any()),
            e,
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::outcome_tests::goes;
    use super::*;
    use migration_api::common::set_condition;

    /// Migration default/m (uid u1) of c1..c4 from hub1 to hub2, in `phase`, each cluster in
    /// the state of its letter in `states`.
    fn migration_in(phase: MigrationPhase, states: &str) -> ManagedClusterMigration {
        let mut m = ManagedClusterMigration::new(
            "m",
            ManagedClusterMigrationSpec {
                from: "hub1".into(),
                to: "hub2".into(),
                included_managed_clusters_selector: Some(Default::default()),
                max_concurrency: Some(2),
                ..Default::default()
            },
        );
        m.metadata.namespace = Some("default".into());
        m.metadata.uid = Some("u1".into());
        let accepted = m.spec.clone();
        m.status = Some(ManagedClusterMigrationStatus {
            phase: Some(phase),
            accepted_spec: Some(accepted),
            resolved_clusters: Some((1..=4).map(|i| format!("c{i}")).collect()),
            cluster_states: Some(states.into()),
            ..Default::default()
        });
        m
    }

    fn ask(m: &ManagedClusterMigration, request: &str) -> Answer {
        on_request(m, m.status.as_ref().unwrap(), request)
    }

    #[test]
    fn abandon_fails_before_anything_was_touched_rolls_back_in_flight_and_stops_the_waits_after() {
        use MigrationPhase::*;
        // (phase, the decision, whether the migration stops waiting, accepted)
        let cases = [
            (Pending, Some("invalid AbandonRequested"), false, true),
            (Validating, Some("invalid AbandonRequested"), false, true),
            (Initializing, Some("rollback AbandonRequested"), true, true),
            (Deploying, Some("rollback AbandonRequested"), true, true),
            (Registering, Some("rollback AbandonRequested"), true, true),
            (Rollbacking, None, true, true),
            (Cleaning, None, true, true),
            (Completed, None, false, false),
            (Failed, None, false, false),
        ];
        for (phase, want, abandon, accepted) in cases {
            let m = migration_in(phase, "");
            let answer = ask(&m, "abandon");
            assert_eq!(
                answer.outcome.as_ref().map(goes).as_deref(),
                want,
                "{phase:?}"
            );
            assert_eq!(answer.abandon, abandon, "{phase:?}");
            assert_eq!(answer.said.ok, accepted, "{phase:?}");
            // Once accepted, it is not asked again.
            let mut status = m.status.clone().unwrap_or_default();
            let c = status.conditions.get_or_insert_with(Vec::new);
            set_condition(
                c,
                conditions::REQUEST_ACCEPTED,
                if answer.said.ok { TRUE } else { FALSE },
                &answer.said.reason,
                "",
                None,
            );
            assert_eq!(answered("abandon", &status), accepted, "{phase:?}");
        }
    }

    #[test]
    fn a_rollback_request_fails_before_anything_was_touched_rolls_back_in_flight_and_is_late_after()
    {
        use MigrationPhase::*;
        let cases = [
            (Pending, Some("invalid RollbackRequested"), true),
            (Validating, Some("invalid RollbackRequested"), true),
            (Initializing, Some("rollback RollbackRequested"), true),
            (Deploying, Some("rollback RollbackRequested"), true),
            (Registering, Some("rollback RollbackRequested"), true),
            (Rollbacking, None, false),
            (Cleaning, None, false),
            (Completed, None, false),
            (Failed, None, false),
        ];
        for (phase, want, accepted) in cases {
            let answer = ask(&migration_in(phase, ""), "rollback");
            assert_eq!(
                answer.outcome.as_ref().map(goes).as_deref(),
                want,
                "{phase:?}"
            );
            assert_eq!(answer.create, None);
            assert_eq!(answer.said.type_, "RequestAccepted");
            assert_eq!(answer.said.ok, accepted, "{phase:?}");
            let reason = if accepted {
                "RollbackRequested"
            } else {
                "RequestNotApplicable"
            };
            assert_eq!(answer.said.reason, reason, "{phase:?}");
        }
        // Anything else is refused by name, and changes nothing.
        let answer = ask(&migration_in(Registering, ""), "rolback");
        assert_eq!((answer.outcome, answer.create), (None, None));
        assert!(!answer.said.ok);
        assert_eq!(answer.said.reason, "UnknownRequest");
        assert!(
            answer.said.message.contains("\"rolback\""),
            "{:?}",
            answer.said
        );
    }

    #[test]
    fn a_retry_of_an_ended_migration_names_the_clusters_that_stayed() {
        use MigrationPhase::*;
        // c1 moved (M), c2 rolled back (B), c3 refused by the target, c4 gone from the source.
        let states = ClusterState::encode(&[
            ClusterState::Moved,
            ClusterState::RolledBack,
            ClusterState::Refused,
            ClusterState::NotFound,
        ]);
        for phase in [Failed, Completed] {
            let m = migration_in(phase, &states);
            let answer = ask(&m, "retry");
            assert_eq!(answer.outcome, None);
            assert!(answer.said.ok, "{:?}", answer.said);
            assert_eq!(answer.said.reason, "RetryCreated");
            assert_eq!(
                answer.said.message,
                "retried as default/m-retry for the 2 clusters that stayed"
            );
            let retry = answer.create.unwrap();
            assert_eq!(retry.name_any(), "m-retry");
            assert_eq!(retry.namespace().as_deref(), Some("default"));
            assert_eq!(retry.labels()[labels::RETRY_OF], "u1");
            // The clusters named one by one, the rest of the spec as the migration ran.
            assert_eq!(
                retry.spec.included_managed_clusters,
                Some(vec!["c2".to_owned(), "c3".to_owned()])
            );
            assert_eq!(retry.spec.included_managed_clusters_selector, None);
            assert_eq!(
                (retry.spec.from.as_str(), retry.spec.to.as_str()),
                ("hub1", "hub2")
            );
            assert_eq!(retry.spec.max_concurrency, Some(2));
            assert!(retry.status.is_none());
        }
        // A migration whose target a Placement chose: the retry goes to that hub by name.
        let mut placed = migration_in(Failed, &states);
        if let Some(st) = placed.status.as_mut() {
            let spec = st.accepted_spec.as_mut().unwrap();
            spec.to = String::new();
            spec.to_placement = Some("most-room".into());
            st.target = Some("hub3".into());
        }
        let retry = ask(&placed, "retry").create.unwrap();
        assert_eq!(
            (retry.spec.to.as_str(), retry.spec.to_placement.as_deref()),
            ("hub3", None)
        );
        assert_eq!(retry.spec.validate(), Ok(()));
        // Acted on once; a retry after a rollback is answered in its turn.
        let mut status = migration_in(Failed, &states).status.unwrap();
        assert!(!answered("rollback", &status));
        set_condition(
            status.conditions.get_or_insert_with(Vec::new),
            "RequestAccepted",
            "True",
            "RollbackRequested",
            "",
            None,
        );
        assert!(answered("rollback", &status));
        assert!(!answered("retry", &status));
        assert!(!answered("rolback", &status));
        // Nothing stayed, a dry run, or not ended: nothing created, and said why.
        let all_moved = ClusterState::encode(&[ClusterState::Moved; 4]);
        let mut dry = migration_in(Completed, &states);
        if let Some(spec) = dry.status.as_mut().and_then(|s| s.accepted_spec.as_mut()) {
            spec.dry_run = Some(true);
        }
        for (m, what) in [
            (
                migration_in(Completed, &all_moved),
                "no cluster that stayed",
            ),
            (dry, "dry run"),
            (migration_in(Registering, &states), "once it has ended"),
        ] {
            let answer = ask(&m, "retry");
            assert_eq!((answer.outcome, answer.create), (None, None), "{what}");
            assert_eq!(answer.said.reason, "RequestNotApplicable", "{what}");
            assert!(answer.said.message.contains(what), "{:?}", answer.said);
        }
    }
}
