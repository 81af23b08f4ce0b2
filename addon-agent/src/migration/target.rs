//! The target role: pre-create, admit (CSR admission), roll back, clean up.

use super::*;

/// Whether a CSR is a klusterlet of `cluster` registering with the migration's bootstrap
/// identity: requested by that identity, labelled for the cluster, and asking for the
/// cluster's agent identity only.
/// `requested` is what its request asks for ([`csr_identities::CsrIdentities::of`]).
pub(super) fn expected_csr(
    csr: &CertificateSigningRequest,
    requested: Option<&(String, Vec<String>)>,
    bootstrap_user: &str,
    cluster: &str,
) -> bool {
    if csr.spec.username.as_deref() != Some(bootstrap_user)
        || csr.labels().get(CLUSTER_NAME).map(String::as_str) != Some(cluster)
        || csr.spec.signer_name != migration_api::names::KUBE_APISERVER_CLIENT_SIGNER
    {
        return false;
    }
    let Some((user, groups)) = requested else {
        return false;
    };
    user.starts_with(&format!("system:open-cluster-management:{cluster}:"))
        && groups.iter().all(|g| {
            g == &format!("system:open-cluster-management:{cluster}")
                || g == "system:open-cluster-management:managed-clusters"
        })
}

/// Where a CSR stands, for [`admission::approve`].
pub(super) fn csr_decision(csr: &CertificateSigningRequest) -> admission::Decision {
    let conditions = csr
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[]);
    let find = |t: &str| conditions.iter().find(|c| c.type_ == t && c.status == TRUE);
    if find("Denied").is_some() {
        admission::Decision::Denied
    } else if find("Failed").is_some() {
        admission::Decision::ApprovedFailed
    } else if let Some(a) = find("Approved") {
        // When it was approved (an approval without a time counts as just now).
        let at = a
            .last_update_time
            .as_ref()
            .or(a.last_transition_time.as_ref())
            .map_or_else(jiff::Timestamp::now, |t| t.0);
        admission::Decision::Approved(at)
    } else {
        admission::Decision::Pending
    }
}

/// Why the target approves a CSR of the migration's bootstrap identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Approval {
    /// The cluster is expected: it registers here.
    Expected,
    /// The cluster is being rolled back but its klusterlet already chose this hub: upstream's
    /// klusterlet waits for its bootstrap CSR for as long as it takes (a denied one included,
    /// `pkg/registration/register/csr/certificate.go`), so denying it would strand the
    /// cluster. Approved, it finishes bootstrapping, finds its ManagedCluster here refused, and
    /// its hub-timeout controller sends it back to its source.
    LetThrough,
}

pub(super) async fn approve_csr(ctx: &Ctx, csr: &str, why: Approval) -> Result<(), Error> {
    let message = match why {
        Approval::Expected => "the cluster is expected by a migration to this hub",
        Approval::LetThrough => {
            "the migration of this cluster is rolled back; it may finish bootstrapping, and then leaves for its source hub"
        }
    };
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let body = json!({"status": {"conditions": [{"type": "Approved", "status": TRUE, "reason": "ApprovedByClusterMigration", "message": message, "lastUpdateTime": now}]}});
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    ignore_not_found(
        api.patch_approval(csr, &PatchParams::default(), &Patch::Merge(&body))
            .await,
    )
    .map_err(ctx_err(format!("approving CSR {csr}")))?;
    if let Ok(mut a) = ctx.approved.lock() {
        // The record matters only until the cache shows the approval: an hour is plenty.
        let hour_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(3600);
        a.retain(|_, at| *at > hour_ago);
        a.insert(csr.to_owned(), jiff::Timestamp::now());
    }
    ctx.metrics.approved(
        csr,
        match why {
            Approval::Expected => "expected",
            Approval::LetThrough => "let_through",
        },
    );
    tracing::info!(%csr, ?why, "migration CSR approved");
    Ok(())
}

/// The record of what cluster `name` carries: found by binary search in a target's records,
/// which its reconcile sorts by name (`carry::target_records`), by a scan elsewhere.
pub(super) fn carried<'a>(task: &'a MigrationTask, name: &str) -> Option<&'a CarriedCluster> {
    migration_api::migration::find_carried(
        task.spec.carry_over.as_deref().unwrap_or_default(),
        name,
    )
}

/// Pre-creates the ManagedCluster `name`; returns its resourceVersion if this call created it
/// (`None`: it exists already).
pub(super) async fn precreate(
    ctx: &Ctx,
    task: &MigrationTask,
    name: &str,
) -> Result<Option<String>, Error> {
    let record = carried(task, name).cloned().unwrap_or(CarriedCluster {
        name: name.to_owned(),
        ..Default::default()
    });
    let mut labels = record.labels.clone();
    if let Some(set) = &record.cluster_set {
        labels.insert(CLUSTER_SET.into(), set.clone());
    }
    // What the target's import needs to render this cluster's klusterlet as its source did.
    let mut annotations = carried_annotations(&record.annotations);
    annotations.insert(PRE_CREATED.into(), task.spec.key().to_owned());
    annotations.insert(MIGRATING.into(), task.spec.key().to_owned());
    // Tainted until it registers here: placements choose it only once it has arrived.
    let taints = flight::taints(&[], task.spec.key(), true).unwrap_or_default();
    let mut spec = json!({"hubAcceptsClient": true, "leaseDurationSeconds": 60, "taints": taints});
    // The klusterlet reports its URLs only when it creates its ManagedCluster (or where its
    // bootstrap identity may update it): they come from the source instead.
    if !record.client_configs.is_empty() {
        spec["managedClusterClientConfigs"] = json!(record.client_configs);
    }
    let mc = json!({
        "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": spec
    });
    let mc: ManagedCluster = serde_json::from_value(mc).map_err(|e| {
        Error::Kube(ApiError::new(
            format!("building ManagedCluster {name}"),
            kube::Error::SerdeError(e),
        ))
    })?;
    let api: Api<ManagedCluster> = Api::all(ctx.client.clone());
    match api
        .create(
            &PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            },
            &mc,
        )
        .await
    {
        Ok(created) => {
            tracing::info!(cluster = %name, "pre-created ManagedCluster");
            Ok(created.resource_version())
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
        Err(e) => Err(Error::Kube(ApiError::new(
            format!("pre-creating ManagedCluster {name}"),
            e,
        ))),
    }
}

/// Carried-over addons and KlusterletAddonConfig, once the hub has made the cluster's namespace;
/// whether they are all in place (`false`: the namespace is not there yet).
pub(super) async fn carry_addons(
    ctx: &Ctx,
    task: &MigrationTask,
    name: &str,
) -> Result<bool, Error> {
    let Some(record) = carried(task, name) else {
        return Ok(true);
    };
    let pp = PatchParams::apply(FIELD_MANAGER);
    let addons: Api<ManagedClusterAddOn> = Api::namespaced(ctx.client.clone(), name);
    for a in &record.addons {
        let mut spec = json!({});
        if let Some(ns) = &a.install_namespace {
            spec["installNamespace"] = json!(ns);
        }
        if !a.configs.is_empty() {
            spec["configs"] = json!(a.configs);
        }
        let body = json!({"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
                          "metadata": {"name": a.name, "namespace": name}, "spec": spec});
        match addons.patch(&a.name, &pp, &Patch::Apply(&body)).await {
            Ok(_) => {}
            // The namespace is not there yet: the next event (the cluster joining) retries.
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
            Err(e) => {
                return Err(Error::Kube(ApiError::new(
                    format!("carrying addon {} of {name}", a.name),
                    e,
                )));
            }
        }
    }
    if let Some(spec) = &record.klusterlet_addon_config {
        let kacs: Api<KlusterletAddonConfig> = Api::namespaced(ctx.client.clone(), name);
        let body = json!({"apiVersion": "agent.open-cluster-management.io/v1", "kind": "KlusterletAddonConfig",
                          "metadata": {"name": name, "namespace": name}, "spec": spec});
        match kacs.patch(name, &pp, &Patch::Apply(&body)).await {
            Ok(_) => {}
            // A hub that does not serve KlusterletAddonConfigs (plain OCM) has none to carry;
            // one with no addon carried before it may not have made the namespace yet.
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(!record.addons.is_empty()),
            Err(e) => {
                return Err(Error::Kube(ApiError::new(
                    format!("carrying the KlusterletAddonConfig of {name}"),
                    e,
                )));
            }
        }
    }
    Ok(true)
}

/// The clusters' states as the task's status last recorded them (the agent's own reports,
/// durable across its restarts), when they cover `n` clusters; none otherwise.
pub(super) fn reported_states(task: &MigrationTask, n: usize) -> Vec<ClusterState> {
    task.status
        .as_ref()
        .and_then(|s| s.cluster_states.as_deref())
        .filter(|text| text.chars().count() == n)
        .map(|text| ClusterState::decode(text, n))
        .unwrap_or_default()
}

pub(super) fn target_state(mc: Option<&ManagedCluster>) -> ClusterState {
    match mc {
        None => ClusterState::Pending,
        Some(mc) if !mc.spec.hub_accepts_client => ClusterState::Refused,
        Some(mc) if available(mc) && condition_is_true(mc.conditions(), JOINED) => {
            ClusterState::Available
        }
        Some(mc) if condition_is_true(mc.conditions(), JOINED) => ClusterState::Joined,
        Some(_) => ClusterState::Created,
    }
}

pub(super) async fn target_register(
    ctx: &Ctx,
    task: &MigrationTask,
    names: &[String],
) -> Result<Report, Error> {
    let registering = task.spec.stage == TaskStage::Registering;
    let released = task.spec.released_names();
    let acm_target = klusterlet_config_shape(ctx).await? != "None";
    let settles = plain(task) || !acm_target;
    if registering {
        count_refused(ctx, task, names);
    }
    let csrs = csrs_by_cluster(ctx);
    let reported = reported_states(task, names.len());
    let now = jiff::Timestamp::now();
    // When each cluster was seen released: the status's record, this agent's own since, and
    // now for those released since.
    let recorded = task
        .status
        .as_ref()
        .and_then(|s| s.release_times.as_ref())
        .map(|r| r.decode(names.len()))
        .unwrap_or_default();
    let times = {
        // A reconcile that panicked holding it left nothing half-written that matters here:
        // the times are re-read from the task's status at every reconcile.
        let mut remembered = ctx
            .released
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let flags: Vec<bool> = names
            .iter()
            .map(|n| registering && released.contains(n.as_str()))
            .collect();
        let times = release_times(
            &recorded,
            remembered
                .get(&task.name_any())
                .map_or(&[][..], Vec::as_slice),
            &flags,
            now,
        );
        remembered.insert(task.name_any(), times.clone());
        times
    };
    // The clusters (by name, with their uid) whose addons this agent carried.
    let addons_carried = ctx
        .addons_carried
        .lock()
        .ok()
        .and_then(|c| c.get(&task.name_any()).cloned())
        .unwrap_or_default();
    let mut states = Vec::with_capacity(names.len());
    let mut planned = Vec::with_capacity(names.len());
    for (index, name) in names.iter().enumerate() {
        let mc = get(&ctx.caches.clusters, None, name);
        // Only the cluster's own bootstrap identity may ask for its certificate.
        let csrs = if registering {
            own_csrs(ctx, &csrs, task, index, name)
        } else {
            Vec::new()
        };
        let requests: Vec<admission::Request> = csrs
            .iter()
            .map(|(n, created, decision)| admission::Request {
                name: n,
                created: *created,
                decision: *decision,
            })
            .collect();
        let seen = Arriving {
            mc: mc.as_deref(),
            registering,
            released: released.contains(name.as_str()),
            released_at: times.get(index).copied().flatten(),
            settles,
            settled: settles && klusterlet_done(ctx, task, name, false),
            acm_target,
            import_took_over: acm_target && import_took_over(&ctx.caches.import_works, name),
            requests: &requests,
            now,
            carries_objects: carried(task, name).is_some_and(|r| !r.objects.is_empty()),
            addons_carried: mc
                .as_ref()
                .and_then(|m| m.uid())
                .is_some_and(|uid| addons_carried.get(name) == Some(&uid)),
            reported_arrived: reported
                .get(index)
                .is_some_and(|s| *s == ClusterState::Available),
        };
        let (state, effects) = arrive(task, &seen);
        planned.push(Planned::new(name, mc.as_deref(), effects));
        states.push(state);
    }
    // Deploying ends once every cluster's objects are here.
    let carrying = planned
        .iter()
        .filter(|p| p.effects.contains(&Effect::CarryObjects))
        .count();
    apply_all(ctx, task, planned).await?;
    let registered = states
        .iter()
        .filter(|s| **s == ClusterState::Available)
        .count();
    let refused = states
        .iter()
        .filter(|s| **s == ClusterState::Refused)
        .count();
    Ok(Report {
        message: if !registering && carrying > 0 {
            format!("carrying over the objects of {carrying} clusters")
        } else {
            format!(
                "{registered} of {} clusters registered, {refused} refused",
                names.len()
            )
        },
        state: StageState::done_if(!registering && carrying == 0),
        states,
        release_times: migration_api::migration::ReleaseTimes::encode(&times),
        ..Default::default()
    })
}

/// When each cluster (of those `released` now) was seen released: as the status recorded it
/// (`recorded`) or this agent remembered it since (`remembered`, the earlier of the two), or
/// `now` for one seen released the first time. One no longer released keeps its time (the
/// manager never takes a release back; kept, a CSR it lets through stays bounded by it).
pub(super) fn release_times(
    recorded: &[Option<jiff::Timestamp>],
    remembered: &[Option<jiff::Timestamp>],
    released: &[bool],
    now: jiff::Timestamp,
) -> Vec<Option<jiff::Timestamp>> {
    released
        .iter()
        .enumerate()
        .map(|(i, released)| {
            let known = [recorded.get(i), remembered.get(i)]
                .into_iter()
                .flatten()
                .flatten()
                .min()
                .copied();
            known.or(released.then_some(now))
        })
        .collect()
}

/// Counts (once each, in the metrics) the undecided CSRs filed with one of the task's
/// bootstrap identities that no cluster's own expectation admits ([`expected_csr`]): one
/// cluster's token used for another, or a request for another identity. They are never
/// approved.
fn count_refused(ctx: &Ctx, task: &MigrationTask, names: &[String]) {
    let index: BTreeMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let users: BTreeSet<String> = (0..names.len())
        .filter_map(|i| task.spec.bootstrap_user_at(i))
        .collect();
    for csr in ctx.caches.csrs.state() {
        let by_identity = csr
            .spec
            .username
            .as_deref()
            .is_some_and(|u| users.contains(u));
        if !by_identity || csr_decision(&csr) != admission::Decision::Pending {
            continue;
        }
        let admitted = csr.labels().get(CLUSTER_NAME).is_some_and(|cluster| {
            index
                .get(cluster.as_str())
                .and_then(|i| task.spec.bootstrap_user_at(*i))
                .is_some_and(|user| {
                    expected_csr(&csr, ctx.csr_identities.of(&csr).as_deref(), &user, cluster)
                })
        });
        if !admitted {
            ctx.metrics.refused(&csr.name_any());
        }
    }
}

/// The CSRs of the cache by the cluster they are labelled for, read once per reconcile.
pub(super) type CsrsByCluster = BTreeMap<String, Vec<Arc<CertificateSigningRequest>>>;

/// [`CsrsByCluster`] of the cache now.
pub(super) fn csrs_by_cluster(ctx: &Ctx) -> CsrsByCluster {
    let mut by: CsrsByCluster = BTreeMap::new();
    let mut live = BTreeSet::new();
    for csr in ctx.caches.csrs.state() {
        live.extend(csr.uid());
        if let Some(cluster) = csr.labels().get(CLUSTER_NAME) {
            by.entry(cluster.clone()).or_default().push(csr);
        }
    }
    ctx.csr_identities.keep_only(&live);
    by
}

/// The bootstrap CSRs of the cluster at `index` filed by its own bootstrap identity: name,
/// creation time and where each stands. One this agent approved is approved, even while the
/// cache still shows it pending (the approval's event may not have come back yet; another
/// approval of it would be a request for nothing).
fn own_csrs(
    ctx: &Ctx,
    csrs: &CsrsByCluster,
    task: &MigrationTask,
    index: usize,
    cluster: &str,
) -> Vec<(String, jiff::Timestamp, admission::Decision)> {
    let Some(user) = task.spec.bootstrap_user_at(index) else {
        return Vec::new();
    };
    let approved = ctx.approved.lock().ok();
    csrs.get(cluster)
        .into_iter()
        .flatten()
        .filter(|c| expected_csr(c, ctx.csr_identities.of(c).as_deref(), &user, cluster))
        .map(|c| {
            let created = c
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(jiff::Timestamp::UNIX_EPOCH, |t| t.0);
            let name = c.name_any();
            let decision = match csr_decision(c) {
                admission::Decision::Pending => approved
                    .as_ref()
                    .and_then(|a| a.get(&name).copied())
                    .map_or(admission::Decision::Pending, admission::Decision::Approved),
                d => d,
            };
            (name, created, decision)
        })
        .collect()
}

/// Lets go of the clusters of the task's rollback list that did not arrive ([`let_back`]).
pub(super) async fn target_rollback(
    ctx: &Ctx,
    task: &MigrationTask,
    names: &[String],
) -> Result<Report, Error> {
    let rollback = task.spec.rollback_names();
    let csrs = csrs_by_cluster(ctx);
    let mut states = Vec::with_capacity(names.len());
    let mut planned = Vec::with_capacity(rollback.len());
    for (index, name) in names.iter().enumerate() {
        if !rollback.contains(name.as_str()) {
            states.push(target_state(
                get(&ctx.caches.clusters, None, name).as_deref(),
            ));
            continue;
        }
        let (state, one) = target_let_back(ctx, &csrs, task, index, name, false);
        states.push(state);
        planned.push(one);
    }
    apply_all(ctx, task, planned).await?;
    Ok(rollback_report(
        names,
        states,
        &rollback,
        "clusters rolled back on this hub",
    ))
}

/// Observes and decides ([`let_back`]) for one cluster the target lets go back.
fn target_let_back<'a>(
    ctx: &Ctx,
    csrs: &CsrsByCluster,
    task: &MigrationTask,
    index: usize,
    name: &'a str,
    remove: bool,
) -> (ClusterState, Planned<'a>) {
    let mc = get(&ctx.caches.clusters, None, name);
    let pending = own_csrs(ctx, csrs, task, index, name)
        .into_iter()
        .filter(|(_, _, d)| *d == admission::Decision::Pending)
        .map(|(n, _, _)| n)
        .collect();
    let seen = Leaving {
        mc: mc.as_deref(),
        pending,
        remove,
    };
    let (state, effects) = let_back(task, &seen);
    (state, Planned::new(name, mc.as_deref(), effects))
}

/// A rollback stage's report: done once every cluster to roll back is rolled back (or arrived,
/// or is gone).
pub(super) fn rollback_report(
    names: &[String],
    states: Vec<ClusterState>,
    rollback: &BTreeSet<&str>,
    what: &str,
) -> Report {
    let done = rollback_done(names, &states, rollback);
    let back = states
        .iter()
        .filter(|s| **s == ClusterState::RolledBack)
        .count();
    Report {
        message: format!("{back} {what}"),
        state: StageState::done_if(done),
        states,
        ..Default::default()
    }
}

pub(super) fn rollback_done(
    names: &[String],
    states: &[ClusterState],
    rollback: &BTreeSet<&str>,
) -> bool {
    names
        .iter()
        .zip(states)
        .filter(|(n, _)| rollback.contains(n.as_str()))
        .all(|(_, s)| {
            matches!(
                s,
                ClusterState::RolledBack | ClusterState::Available | ClusterState::NotFound
            )
        })
}

pub(super) async fn target_clean(
    ctx: &Ctx,
    task: &MigrationTask,
    names: &[String],
) -> Result<Report, Error> {
    let rollback = task.spec.rollback_names();
    // No CSR is approved from here on: the release times are not needed any more.
    if let Ok(mut released) = ctx.released.lock() {
        released.remove(&task.name_any());
    }
    let settles = plain(task) || klusterlet_config_shape(ctx).await? == "None";
    let csrs = csrs_by_cluster(ctx);
    let mut states = Vec::with_capacity(names.len());
    let mut planned = Vec::with_capacity(names.len());
    let mut works_left = 0;
    // Done once no cluster that stays has a mark or the taint left, as the cache shows it:
    // a removal refused for a newer version is decided again, not taken as done.
    let mut unmarking = 0;
    for (index, name) in names.iter().enumerate() {
        let mc = get(&ctx.caches.clusters, None, name);
        if settles && !target_work_removed(ctx, task, name, mc.as_deref()).await? {
            works_left += 1;
        }
        // The rollback again: a hub that was unreachable while the migration rolled back
        // removes its pre-created copies now (a no-op where the rollback already ran here).
        let (state, one) = if rollback.contains(name.as_str()) {
            target_let_back(ctx, &csrs, task, index, name, true)
        } else {
            let effects = unmark(mc.as_deref(), task.spec.key());
            unmarking += usize::from(!effects.is_empty());
            (
                target_state(mc.as_deref()),
                Planned::new(name, mc.as_deref(), effects),
            )
        };
        states.push(state);
        planned.push(one);
    }
    apply_all(ctx, task, planned).await?;
    let done = rollback_done(names, &states, &rollback) && works_left == 0 && unmarking == 0;
    let back = states
        .iter()
        .filter(|s| **s == ClusterState::RolledBack)
        .count();
    Ok(Report {
        message: if done {
            "migration annotations removed".into()
        } else if unmarking > 0 {
            format!("removing the migration's marks from {unmarking} clusters")
        } else if works_left > 0 {
            format!("removing the klusterlet works of {works_left} clusters")
        } else {
            format!("{back} clusters rolled back on this hub")
        },
        state: StageState::done_if(done),
        states,
        ..Default::default()
    })
}

/// Target cleanup, plain OCM: a cluster's klusterlet work is removed once it has settled the
/// Klusterlet of a cluster that arrived (the migration's secret goes with it); true once gone.
pub(super) async fn target_work_removed(
    ctx: &Ctx,
    task: &MigrationTask,
    cluster: &str,
    mc: Option<&ManagedCluster>,
) -> Result<bool, Error> {
    let Some(work) = klusterlet_work(ctx, task, cluster) else {
        return Ok(true);
    };
    let settled = matches!(kw::step_of(&work), Some(Step::Settle(_))) && work.applied();
    let arrived = target_state(mc) == ClusterState::Available;
    if arrived && !settled && work.metadata.deletion_timestamp.is_none() {
        if task.spec.bootstrap_connection.is_some() {
            klusterlet_settle(ctx, task, cluster).await?;
            return Ok(false);
        }
        tracing::warn!(%cluster, "the task names no connection to settle the Klusterlet with; its MultipleHubs settings stay as the source left them");
    }
    delete_klusterlet_work(ctx, task, cluster, false).await?;
    Ok(false)
}
