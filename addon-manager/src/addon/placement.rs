//! Install placements: the hubs each placement of the ClusterManagementAddOn decides, the
//! ManagedClusterAddOns they enable, and each placement's rollout across its hubs.

use super::*;

/// An install placement of the ClusterManagementAddOn and the hubs it decided.
pub(super) struct InstallPlacement {
    pub(super) key: String,
    /// Its rolloutStrategy, parsed (an error says what is wrong with it).
    pub(super) params: Result<rollout::Params, String>,
    pub(super) config: Option<ConfigRef>,
    /// Decided hubs with their decision group index.
    pub(super) hubs: BTreeMap<String, i32>,
}

/// One install placement's rollout, decided across its hubs.
pub(super) struct PlacementRollout {
    /// Each of its hubs, and whether it may start on the desired version.
    pub(super) allowed: Vec<(String, bool)>,
    /// The placement's install progression: status, reason, message.
    pub(super) status: &'static str,
    pub(super) reason: &'static str,
    pub(super) message: String,
    /// When a recent success stops holding the next hubs back.
    pub(super) requeue: Option<Duration>,
}

/// The rollout of placement `i` over the hubs it selects (`mcas` with what each is asked to
/// run): which hubs may start, and what the placement's progression says.
pub(super) fn placement_rollout(
    i: usize,
    p: &InstallPlacement,
    mcas: &[ManagedClusterAddOn],
    desired: &HashMap<String, Desired>,
) -> PlacementRollout {
    let mut requeue = None;
    let mut allowed = Vec::new();
    let params = &p.params;
    let hubs: Vec<HubRollout> = mcas
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter_map(|m| {
            let hub = m.namespace()?;
            let d = desired.get(&hub)?;
            if d.placement != Some(i) || d.problem.is_some() {
                return None;
            }
            Some(HubRollout {
                group: p.hubs.get(&hub).copied().unwrap_or(0),
                phase: phase_of(m, &d.version),
                name: hub,
            })
        })
        .collect();
    let (plan, message) = match params {
        Ok(params) => {
            let plan = rollout::plan(params, &hubs);
            // Look again when a recent success stops holding the next hubs back.
            for h in &hubs {
                if let HubPhase::Succeeded(ago) = h.phase
                    && let Some(left) = params
                        .min_success_time
                        .checked_sub(ago)
                        .filter(|l| !l.is_zero())
                {
                    sooner(&mut requeue, left);
                }
            }
            let msg = format!(
                "{} succeeded, {} in progress, {} failed, {} waiting{}",
                plan.succeeded,
                plan.in_progress,
                plan.failed,
                plan.waiting,
                plan.halted
                    .as_ref()
                    .map(|h| format!("; {h}"))
                    .unwrap_or_default()
            );
            (plan, msg)
        }
        Err(e) => (
            rollout::Plan {
                halted: Some(e.clone()),
                ..Default::default()
            },
            format!("invalid rolloutStrategy: {e}"),
        ),
    };
    for h in &hubs {
        allowed.push((h.name.clone(), plan.start.contains(&h.name)));
    }
    let (status, reason) = if plan.halted.is_some() {
        (FALSE, FAILED)
    } else if plan.in_progress + plan.waiting > 0 {
        (TRUE, migration_api::names::reasons::PROGRESSING)
    } else {
        (FALSE, COMPLETED)
    };
    PlacementRollout {
        allowed,
        status,
        reason,
        message,
        requeue,
    }
}

pub(super) async fn install_placements(
    c: &Client,
    cma: &ClusterManagementAddOn,
) -> Result<Vec<InstallPlacement>, Error> {
    let Some(strategy) = cma.spec.install_strategy.as_ref() else {
        return Ok(vec![]);
    };
    if strategy.type_.as_deref() != Some("Placements") {
        return Ok(vec![]);
    }
    let mut out = Vec::new();
    for p in strategy.placements.iter().flatten() {
        let api: Api<PlacementDecision> = Api::namespaced(c.clone(), &p.namespace);
        let decisions = api
            .list(&ListParams::default().labels(&format!("{}={}", labels::PLACEMENT, p.name)))
            .await
            .ctx(|| format!("listing decisions of Placement {}/{}", p.namespace, p.name))?;
        let mut hubs = BTreeMap::new();
        for d in decisions.items {
            let group = d
                .labels()
                .get(labels::DECISION_GROUP_INDEX)
                .and_then(|g| g.parse().ok())
                .unwrap_or(0);
            for c in d.status.map(|s| s.decisions).unwrap_or_default() {
                hubs.insert(c.cluster_name, group);
            }
        }
        out.push(InstallPlacement {
            key: format!("{}/{}", p.namespace, p.name),
            params: rollout::Params::parse(p.rollout_strategy.as_ref()),
            config: adc_ref(p.configs.as_ref()),
            hubs,
        });
    }
    Ok(out)
}

/// Creates ManagedClusterAddOns on hubs the install placements decided, and deletes those this
/// manager created on hubs no placement decides any more (never ones a user created).
pub(super) async fn sync_placement_addons(
    c: &Client,
    addon: &str,
    placements: &[InstallPlacement],
    existing: &[ManagedClusterAddOn],
) -> Result<(), Error> {
    let have: BTreeMap<String, &ManagedClusterAddOn> = existing
        .iter()
        .filter_map(|m| Some((m.namespace()?, m)))
        .collect();
    for p in placements {
        for hub in p.hubs.keys() {
            if have.contains_key(hub) {
                continue;
            }
            let mca: ManagedClusterAddOn = serde_json::from_value(json!({
                "metadata": {"name": addon, "namespace": hub,
                    "labels": {labels::MANAGED_BY: labels::MANAGED_BY_VALUE},
                    "annotations": {ann::INSTALL_PLACEMENT: p.key}},
                "spec": {}
            }))
            .map_err(|e| {
                ApiError::new("building a ManagedClusterAddOn", kube::Error::SerdeError(e))
            })?;
            match Api::<ManagedClusterAddOn>::namespaced(c.clone(), hub)
                .create(&PostParams::default(), &mca)
                .await
            {
                Ok(_) => {
                    tracing::info!(hub = %hub, placement = %p.key, "addon enabled by placement")
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => {
                    return Err(ApiError::new(
                        format!("creating ManagedClusterAddOn {hub}/{addon}"),
                        e,
                    )
                    .into());
                }
            }
        }
    }
    for (hub, m) in &have {
        let ours = m.labels().get(labels::MANAGED_BY).map(String::as_str)
            == Some(labels::MANAGED_BY_VALUE)
            && annotation(m, ann::INSTALL_PLACEMENT).is_some();
        if ours
            && m.metadata.deletion_timestamp.is_none()
            && !placements.iter().any(|p| p.hubs.contains_key(hub))
        {
            tracing::info!(hub = %hub, "hub left the install placements; removing the addon");
            Api::<ManagedClusterAddOn>::namespaced(c.clone(), hub)
                .delete(addon, &DeleteParams::default())
                .await
                .ctx(|| format!("deleting ManagedClusterAddOn {hub}/{addon}"))?;
        }
    }
    Ok(())
}
