//! The target role: pre-create, admit (CSR admission), roll back, clean up.

use super::*;

/// Whether a CSR is a klusterlet of `cluster` registering with the migration's bootstrap
/// identity: requested by that identity, labelled for the cluster, and asking for the
/// cluster's agent identity only.
pub(super) fn expected_csr(
    csr: &CertificateSigningRequest,
    bootstrap_user: &str,
    cluster: &str,
) -> bool {
    if csr.spec.username.as_deref() != Some(bootstrap_user)
        || csr.labels().get(CLUSTER_NAME).map(String::as_str) != Some(cluster)
        || csr.spec.signer_name != migration_api::names::KUBE_APISERVER_CLIENT_SIGNER
    {
        return false;
    }
    let Ok((user, groups)) = requested_identity(&csr.spec.request.0) else {
        return false;
    };
    user.starts_with(&format!("system:open-cluster-management:{cluster}:"))
        && groups.iter().all(|g| {
            g == &format!("system:open-cluster-management:{cluster}")
                || g == "system:open-cluster-management:managed-clusters"
        })
}

/// When this hub learnt that `cluster` was released, recorded on its pre-created
/// ManagedCluster the first time (durable across restarts); `None` for a ManagedCluster this
/// migration did not create.
pub(super) async fn released_at(
    ctx: &Ctx,
    task: &MigrationTask,
    cluster: &str,
    mc: Option<&ManagedCluster>,
) -> Result<Option<jiff::Timestamp>, Error> {
    let Some(mc) = mc.filter(|m| marked(m, PRE_CREATED, task)) else {
        return Ok(None);
    };
    if let Some(at) = mc
        .annotations()
        .get(RELEASED_AT)
        .and_then(|v| v.parse::<jiff::Timestamp>().ok())
    {
        return Ok(Some(at));
    }
    let now = jiff::Timestamp::now();
    patch_cluster(
        ctx,
        cluster,
        json!({"metadata": {"annotations": {RELEASED_AT: now.to_string()}}}),
    )
    .await?;
    Ok(Some(now))
}

/// Where a CSR stands, for [`admission::approve`].
pub(super) fn csr_decision(csr: &CertificateSigningRequest) -> admission::Decision {
    let conditions = csr
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[]);
    let find = |t: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == t && c.status == "True")
    };
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

pub(super) async fn approve_csr(
    ctx: &Ctx,
    csr: &CertificateSigningRequest,
    why: Approval,
) -> Result<(), Error> {
    let message = match why {
        Approval::Expected => "the cluster is expected by a migration to this hub",
        Approval::LetThrough => {
            "the migration of this cluster is rolled back; it may finish bootstrapping, and then leaves for its source hub"
        }
    };
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let body = json!({"status": {"conditions": [{"type": "Approved", "status": "True", "reason": "ApprovedByClusterMigration", "message": message, "lastUpdateTime": now}]}});
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    ignore_not_found(
        api.patch_approval(
            &csr.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&body),
        )
        .await,
    )
    .map_err(ctx_err(format!("approving CSR {}", csr.name_any())))?;
    tracing::info!(csr = %csr.name_any(), ?why, "migration CSR approved");
    Ok(())
}

pub(super) fn carried<'a>(task: &'a MigrationTask, name: &str) -> Option<&'a CarriedCluster> {
    task.spec
        .carry_over
        .iter()
        .flatten()
        .find(|c| c.name == name)
}

pub(super) async fn precreate(ctx: &Ctx, task: &MigrationTask, name: &str) -> Result<(), Error> {
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
    let mut spec = json!({"hubAcceptsClient": true, "leaseDurationSeconds": 60});
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
        Ok(_) => tracing::info!(cluster = %name, "pre-created ManagedCluster"),
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => {
            return Err(Error::Kube(ApiError::new(
                format!("pre-creating ManagedCluster {name}"),
                e,
            )));
        }
    }
    Ok(())
}

/// Carried-over addons and KlusterletAddonConfig, once the hub has made the cluster's namespace.
pub(super) async fn carry_addons(ctx: &Ctx, task: &MigrationTask, name: &str) -> Result<(), Error> {
    let Some(record) = carried(task, name) else {
        return Ok(());
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
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
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
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(Error::Kube(ApiError::new(
                    format!("carrying the KlusterletAddonConfig of {name}"),
                    e,
                )));
            }
        }
    }
    Ok(())
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
    let released: BTreeSet<&String> = task.spec.released.iter().flatten().collect();
    let acm_target = klusterlet_config_shape(&ctx.client).await? != "None";
    let mut states = Vec::with_capacity(names.len());
    for (index, name) in names.iter().enumerate() {
        // Only the cluster's own bootstrap identity may ask for its certificate.
        let user = task.spec.bootstrap_user_at(index).unwrap_or_default();
        let mut mc = get(&ctx.clusters, None, name);
        if mc.is_none() {
            precreate(ctx, task, name).await?;
            mc = get(&ctx.clusters, None, name);
        }
        let state = match &mc {
            Some(m) if !marked(m, PRE_CREATED, task) && !marked(m, MIGRATING, task) => {
                ClusterState::Refused
            }
            Some(m) => target_state(Some(m)),
            None => ClusterState::Created,
        };
        // A cluster counts as registered only once nothing ties it to the migration's
        // bootstrap identity any more (its token is revoked in cleanup): on an ACM hub, once
        // this hub's import has taken over its klusterlet (its own bootstrap kubeconfig on the
        // cluster); on a plain OCM hub, once its Klusterlet is settled here.
        let state = if state != ClusterState::Available {
            state
        } else if (plain(task) || !acm_target) && !klusterlet_settle(ctx, task, name).await? {
            // The Klusterlet's own settings back (what the source changed) and, on a plain
            // OCM hub, this hub's own bootstrap kubeconfig.
            ClusterState::Joined
        } else if acm_target && !import_took_over(&ctx.works, name) {
            ClusterState::Joined
        } else {
            state
        };
        if registering && !user.is_empty() {
            let csrs: Vec<Arc<CertificateSigningRequest>> = ctx
                .csrs
                .state()
                .into_iter()
                .filter(|c| expected_csr(c, &user, name))
                .collect();
            let seen: Vec<(String, jiff::Timestamp, admission::Decision)> = csrs
                .iter()
                .map(|c| {
                    let created = c
                        .metadata
                        .creation_timestamp
                        .as_ref()
                        .map_or(jiff::Timestamp::UNIX_EPOCH, |t| t.0);
                    (c.name_any(), created, csr_decision(c))
                })
                .collect();
            let requests: Vec<admission::Request> = seen
                .iter()
                .map(|(n, created, decision)| admission::Request {
                    name: n,
                    created: *created,
                    decision: *decision,
                })
                .collect();
            let released_at = if released.contains(name) {
                released_at(ctx, task, name, mc.as_deref()).await?
            } else {
                None
            };
            let pick = admission::approve(
                released_at,
                target_state(mc.as_deref()),
                &requests,
                jiff::Timestamp::now(),
            );
            if let Some(csr) = pick.and_then(|p| csrs.iter().find(|c| c.name_any() == p)) {
                approve_csr(ctx, csr, Approval::Expected).await?;
            }
        }
        if registering
            && matches!(
                state,
                ClusterState::Joined | ClusterState::Available | ClusterState::Created
            )
        {
            carry_addons(ctx, task, name).await?;
        }
        states.push(state);
    }
    let registered = states
        .iter()
        .filter(|s| **s == ClusterState::Available)
        .count();
    let refused = states
        .iter()
        .filter(|s| **s == ClusterState::Refused)
        .count();
    Ok(Report {
        message: format!(
            "{registered} of {} clusters registered, {refused} refused",
            names.len()
        ),
        state: StageState::done_if(!registering),
        states,
        ..Default::default()
    })
}

/// Lets go of the clusters of the task's rollback list that did not arrive: their
/// ManagedCluster here stops accepting them (a klusterlet connected here restarts and goes
/// back; none chooses this hub any more), and a klusterlet that already chose this hub and
/// waits for its bootstrap CSR gets it approved ([`Approval::LetThrough`]) instead of being
/// left waiting forever. The refused ManagedCluster stays (deleting it would make this hub a
/// valid choice again) until `remove` (Cleaning, when every such cluster is back on its
/// source), and the bootstrap identity keeps its rights until then, so a bootstrapping
/// klusterlet can still see its CSR approved.
pub(super) async fn target_rollback(
    ctx: &Ctx,
    task: &MigrationTask,
    names: &[String],
    remove: bool,
) -> Result<Report, Error> {
    let rollback: BTreeSet<&String> = task.spec.rollback.iter().flatten().collect();
    let api: Api<ManagedCluster> = Api::all(ctx.client.clone());
    let mut states = Vec::with_capacity(names.len());
    for (index, name) in names.iter().enumerate() {
        let user = task.spec.bootstrap_user_at(index).unwrap_or_default();
        let mc = get(&ctx.clusters, None, name);
        if !rollback.contains(name) {
            states.push(target_state(mc.as_deref()));
            continue;
        }
        let Some(m) = mc else {
            states.push(ClusterState::RolledBack);
            continue;
        };
        if target_state(Some(&m)) == ClusterState::Available {
            states.push(ClusterState::Available);
            continue;
        }
        // Only what this migration created (or a klusterlet made while switching, which never
        // got in) is touched.
        let ours = marked(&m, PRE_CREATED, task) || !m.spec.hub_accepts_client;
        if !ours {
            states.push(ClusterState::RolledBack);
            continue;
        }
        let pending: Vec<Arc<CertificateSigningRequest>> = ctx
            .csrs
            .state()
            .into_iter()
            .filter(|c| !csr_decided(c) && expected_csr(c, &user, name))
            .collect();
        for csr in &pending {
            approve_csr(ctx, csr, Approval::LetThrough).await?;
        }
        let accepted = m.spec.hub_accepts_client;
        if accepted {
            patch_cluster(ctx, name, json!({"spec": {"hubAcceptsClient": false}})).await?;
            tracing::info!(cluster = %name, "no longer accepted here (rollback)");
        }
        let gone = if remove && !accepted && pending.is_empty() {
            if m.metadata.deletion_timestamp.is_none() {
                ignore_not_found(api.delete(name, &DeleteParams::default()).await).map_err(
                    ctx_err(format!("removing pre-created ManagedCluster {name}")),
                )?;
                tracing::info!(cluster = %name, "removed pre-created ManagedCluster");
            }
            // The cluster went back: nothing here will finish the works of its namespace.
            release_works(ctx, name).await?;
            false
        } else {
            !remove
        };
        states.push(if gone && !accepted && pending.is_empty() {
            ClusterState::RolledBack
        } else {
            ClusterState::RollingBack
        });
    }
    Ok(rollback_report(
        names,
        states,
        &rollback,
        "clusters rolled back on this hub",
    ))
}

/// A rollback stage's report: done once every cluster to roll back is rolled back (or arrived,
/// or is gone).
pub(super) fn rollback_report(
    names: &[String],
    states: Vec<ClusterState>,
    rollback: &BTreeSet<&String>,
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
    rollback: &BTreeSet<&String>,
) -> bool {
    names
        .iter()
        .zip(states)
        .filter(|(n, _)| rollback.contains(n))
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
    let rollback: BTreeSet<&String> = task.spec.rollback.iter().flatten().collect();
    // The rollback again: a hub that was unreachable while the migration rolled back removes
    // its pre-created copies now (a no-op where the rollback already ran here).
    let rolled = target_rollback(ctx, task, names, true).await?;
    let settles = plain(task) || klusterlet_config_shape(&ctx.client).await? == "None";
    let mut states = Vec::with_capacity(names.len());
    let mut works_left = 0;
    for (name, rolled_state) in names.iter().zip(rolled.states) {
        let mc = get(&ctx.clusters, None, name);
        if settles && !target_work_removed(ctx, task, name, mc.as_deref()).await? {
            works_left += 1;
        }
        if rollback.contains(name) {
            states.push(rolled_state);
            continue;
        }
        if let Some(m) = &mc
            && (m.annotations().contains_key(PRE_CREATED)
                || m.annotations().contains_key(MIGRATING)
                || m.annotations().contains_key(RELEASED_AT))
        {
            patch_cluster(ctx, name, json!({"metadata": {"annotations": {PRE_CREATED: Value::Null, MIGRATING: Value::Null, RELEASED_AT: Value::Null}}})).await?;
        }
        states.push(target_state(mc.as_deref()));
    }
    let done = rollback_done(names, &states, &rollback) && works_left == 0;
    Ok(Report {
        message: if done {
            "migration annotations removed".into()
        } else if works_left > 0 {
            format!("removing the klusterlet works of {works_left} clusters")
        } else {
            rolled.message
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
