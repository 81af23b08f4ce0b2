//! The addon's status: finalizers, ManagedClusterAddOn conditions and the ClusterManagementAddOn's install progressions.

use super::*;

/// Replaces the finalizers, guarded by the resourceVersion read (a concurrent change makes this
/// fail and the reconcile retry with fresh data).
pub(super) async fn set_finalizers(
    c: &Client,
    mca: &ManagedClusterAddOn,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    let hub = mca.namespace().unwrap_or_default();
    let addon = mca.name_any();
    Api::<ManagedClusterAddOn>::namespaced(c.clone(), &hub)
        .patch(
            &addon,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"finalizers": finalizers, "resourceVersion": mca.resource_version()}})),
        )
        .await
        .ctx(|| format!("updating the finalizers of {hub}/{addon}"))?;
    Ok(())
}

/// Writes the manager's part of a ManagedClusterAddOn's status (server-side apply, so the lease
/// judge's Available and the agent's own condition stay theirs).
pub(super) async fn write_status(
    ctx: &Ctx,
    mca: &ManagedClusterAddOn,
    conds: Vec<Condition>,
    d: &Desired,
    applied_hash: Option<&str>,
) -> Result<(), Error> {
    let addon = mca.name_any();
    let hub = mca.namespace().unwrap_or_default();
    let namespace = render::install_namespace(d.spec.as_ref());
    let current_refs = mca
        .status
        .as_ref()
        .and_then(|s| s.config_references.clone())
        .unwrap_or_default();
    let config_references: Vec<Value> = d
        .config
        .iter()
        .map(|r| {
            let last = applied_hash.map(str::to_owned).or_else(|| {
                current_refs
                    .iter()
                    .find(|c| c.name == r.name && c.namespace.as_deref() == Some(&r.namespace))
                    .and_then(|c| c.last_applied_config.as_ref())
                    .and_then(|l| l.spec_hash.clone())
            });
            let mut v = json!({
                "group": ADC_GROUP, "resource": ADC_RESOURCE, "name": r.name, "namespace": r.namespace,
                "desiredConfig": {"name": r.name, "namespace": r.namespace, "specHash": d.hash},
            });
            if let Some(h) = last.filter(|h| !h.is_empty()) {
                v["lastAppliedConfig"] = json!({"name": r.name, "namespace": r.namespace, "specHash": h});
            }
            v
        })
        .collect();
    let status = json!({
        "conditions": conds,
        "namespace": namespace,
        "addOnMeta": {"displayName": render::ADDON_DISPLAY_NAME, "description": render::ADDON_DESCRIPTION},
        "supportedConfigs": [{"group": ADC_GROUP, "resource": ADC_RESOURCE}],
        "relatedObjects": [{"group": ADC_GROUP, "resource": "clustermanagementaddons", "name": addon}],
        "configReferences": config_references,
        "registrations": [{"signerName": KUBE_APISERVER_CLIENT_SIGNER, "subject": {
            "user": names::addon_agent_user(&hub, &addon, AGENT_IDENTITY),
            "groups": names::addon_agent_groups(&hub, &addon),
        }}],
        "healthCheck": {"mode": "Lease"},
    });
    // Skip the write when nothing of ours changed.
    let current = serde_json::to_value(&mca.status).unwrap_or(Value::Null);
    let same = status.as_object().is_some_and(|o| {
        o.iter().all(|(k, v)| {
            if k == "conditions" {
                let mine: Vec<&Value> = current[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|c| OWN_CONDITIONS.contains(&c["type"].as_str().unwrap_or_default()))
                    .collect();
                let want: Vec<&Value> = v.as_array().into_iter().flatten().collect();
                mine.len() == want.len() && want.iter().all(|w| mine.contains(w))
            } else {
                current[k] == *v
            }
        })
    });
    let body = json!({
        "apiVersion": MCA_API_VERSION, "kind": "ManagedClusterAddOn",
        "metadata": {"name": addon, "namespace": hub},
        "status": status,
    });
    let api = Api::<ManagedClusterAddOn>::namespaced(ctx.client.clone(), &hub);
    apply_status_if_changed(&api, FIELD_MANAGER, &addon, &body, !same)
        .await
        .ctx(|| format!("writing the status of {hub}/{addon}"))?;
    Ok(())
}

/// The conditions the manager owns on a ManagedClusterAddOn (Available is the lease judge's,
/// AgentRunning the agent's).
pub(super) const OWN_CONDITIONS: [&str; 5] = [
    MANIFEST_APPLIED,
    REGISTRATION_APPLIED,
    CONFIGURED,
    PROGRESSING,
    DEGRADED,
];

pub(super) async fn write_progressions(
    ctx: &Ctx,
    cma: &ClusterManagementAddOn,
    progressions: &[(&InstallPlacement, &str, &str, String)],
) -> Result<(), Error> {
    let current = cma
        .status
        .as_ref()
        .and_then(|s| s.install_progressions.clone())
        .unwrap_or_default();
    let mut out = Vec::new();
    for (p, status, reason, message) in progressions {
        let (ns, name) = p.key.split_once('/').unwrap_or(("", &p.key));
        let mut conds = current
            .iter()
            .find(|i| i.namespace == ns && i.name == name)
            .and_then(|i| i.conditions.clone())
            .unwrap_or_default();
        set_condition(&mut conds, PROGRESSING, status, reason, message, None);
        let refs: Vec<Value> = p
            .config
            .iter()
            .map(|r| {
                json!({
                    "group": ADC_GROUP, "resource": ADC_RESOURCE,
                    "desiredConfig": {"name": r.name, "namespace": r.namespace},
                })
            })
            .collect();
        out.push(
            json!({"namespace": ns, "name": name, "conditions": conds, "configReferences": refs}),
        );
    }
    let now = serde_json::to_value(&current).unwrap_or(Value::Null);
    let want = Value::Array(out.clone());
    let strip = |v: &Value| -> Value {
        let mut v = v.clone();
        for p in v.as_array_mut().into_iter().flatten() {
            for c in p["conditions"].as_array_mut().into_iter().flatten() {
                c.as_object_mut().map(|o| o.remove("lastTransitionTime"));
            }
        }
        v
    };
    let name = cma.name_any();
    let body = json!({
        "apiVersion": MCA_API_VERSION, "kind": "ClusterManagementAddOn",
        "metadata": {"name": name},
        "status": {"installProgressions": out},
    });
    let api = Api::<ClusterManagementAddOn>::all(ctx.client.clone());
    apply_status_if_changed(
        &api,
        FIELD_MANAGER,
        &name,
        &body,
        strip(&now) != strip(&want),
    )
    .await
    .ctx(|| format!("writing the status of ClusterManagementAddOn {name}"))?;
    Ok(())
}

/// The conditions of a ManagedClusterAddOn this controller writes, as they stand.
pub(super) fn own_conditions(mca: &ManagedClusterAddOn) -> Vec<Condition> {
    let mut conds: Vec<Condition> = mca
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    conds.retain(|c| OWN_CONDITIONS.contains(&c.type_.as_str()));
    conds
}

/// How a hub's agent stands, for the metrics: `rolled_back` (a version failed and the hub runs
/// the last good one again), `degraded`, `upgrading` (a version rolling out), or `available`.
pub(crate) fn hub_state(mca: &ManagedClusterAddOn) -> &'static str {
    let version = annotation(mca, ann::AGENT_VERSION);
    let last_good = annotation(mca, ann::AGENT_LAST_GOOD_VERSION);
    let degraded = mca
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .is_some_and(|c| condition_is_true(c, DEGRADED));
    if annotation(mca, ann::AGENT_FAILED_VERSION).is_some() && version == last_good {
        "rolled_back"
    } else if degraded {
        "degraded"
    } else if version != last_good {
        "upgrading"
    } else {
        "available"
    }
}

#[cfg(test)]
mod hub_state_tests {
    use super::*;

    fn mca(annotations: &[(&str, &str)], degraded: bool) -> ManagedClusterAddOn {
        serde_json::from_value(json!({
            "metadata": {"name": "cluster-migration", "namespace": "hub1",
                         "annotations": annotations.iter().cloned().collect::<BTreeMap<_, _>>()},
            "spec": {},
            "status": {"conditions": [{"type": DEGRADED, "status": if degraded { TRUE } else { FALSE },
                "reason": "r", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap()
    }

    #[test]
    fn a_hubs_state_follows_its_rollout_annotations() {
        let v = ann::AGENT_VERSION;
        let good = ann::AGENT_LAST_GOOD_VERSION;
        let failed = ann::AGENT_FAILED_VERSION;
        assert_eq!(
            hub_state(&mca(&[(v, "1"), (good, "1")], false)),
            "available"
        );
        assert_eq!(
            hub_state(&mca(&[(v, "2"), (good, "1")], false)),
            "upgrading"
        );
        assert_eq!(hub_state(&mca(&[(v, "2"), (good, "1")], true)), "degraded");
        assert_eq!(
            hub_state(&mca(&[(v, "1"), (good, "1"), (failed, "2")], true)),
            "rolled_back"
        );
        // Never installed yet: upgrading toward its first version.
        assert_eq!(hub_state(&mca(&[(v, "1")], false)), "upgrading");
    }
}
