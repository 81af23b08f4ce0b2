//! The dry run's plan.

use super::*;

/// The plan of a validated migration, as it would run now: the waves, and every object it
/// would create (secret data redacted), from what validation read ([`Checks`]).
pub(super) fn plan(
    checks: &Checks,
    mcm: &ManagedClusterMigration,
    m: &Migration,
    checked: &SourceChecked,
) -> Result<MigrationPlan, Error> {
    let (clusters, carry, shape) = (&checked.resolved, &checked.carry, checked.shape);
    let (source_ns, target_ns) = (&checks.source_ns, &checks.target_ns);
    // Validating resolved the clusters just now: the status may not list them yet; the names
    // of the target's pool of bootstrap identities are those it would take now.
    let identities = names::bootstrap_identities(clusters.len());
    let identity_names = claim(identities, &m.key, &[], &checks.held).unwrap_or_else(|_| {
        (0..identities)
            .map(names::pooled_bootstrap_identity)
            .collect()
    });
    let m = &Migration {
        clusters: clusters.len(),
        identity_names,
        ..m.clone()
    };
    let wave = mcm
        .spec
        .max_concurrency
        .map_or(clusters.len(), |c| c.max(1) as usize)
        .max(1);
    let waves = clusters.chunks(wave).map(<[String]>::to_vec).collect();
    let Some(hub) = &checks.to.cluster else {
        return Err(RenderError::Config(format!("target hub {} is gone", m.to)).into());
    };
    let url = hub
        .spec
        .managed_cluster_client_configs
        .iter()
        .flatten()
        .next()
        .map(|c| (c.url.clone(), c.ca_bundle.clone()));
    let (server, ca) = url.unwrap_or_default();
    let kubeconfig =
        mr::bootstrap_kubeconfig(&server, ca.as_deref(), mr::REDACTED, checks.proxy.as_ref())?;
    let msa_ns = &checks.msa_ns;
    let mut source = base_task(
        mcm,
        MigrationRole::Source,
        TaskStage::Registering,
        clusters.to_vec(),
    );
    source.set_subsets(clusters.to_vec(), vec![], vec![]);
    set_delivery(&mut source, shape);
    let mut target = base_task(
        mcm,
        MigrationRole::Target,
        TaskStage::Registering,
        clusters.to_vec(),
    );
    // As it would be delivered: inline, or (too large for the task's work) in parts, which
    // the plan names without their records.
    let parts = migration_api::migration::split_carry_over(carry)
        .map_err(|e| ApiError::new("encoding the carry-over", kube::Error::SerdeError(e)))?;
    // Objects carried over may be Secrets: never inline, where the plan would show them.
    if !migration_api::migration::carry_over_inline(carry, parts.len()) {
        target.carry_over_parts = Some(CarryOverParts {
            count: u32::try_from(parts.len()).unwrap_or(u32::MAX),
            digest: migration_api::migration::carry_over_digest(&parts),
        });
    } else {
        target.carry_over = Some(carry.to_vec());
    }
    target.bootstrap_users = Some(mr::bootstrap_users(m, msa_ns));
    target.set_subsets(clusters.to_vec(), vec![], vec![]);
    target.bootstrap_connection = Some(mr::without_credentials(&kubeconfig)?);
    set_delivery(&mut target, shape);
    let mut objects: Vec<PlannedObject> = m
        .identity_names
        .iter()
        .map(|name| planned(GLOBAL_HUB, &m.service_account(name)))
        .collect();
    let kubeconfigs = vec![kubeconfig.clone(); m.identities()];
    let bootstrap = mr::bootstrap_manifests(m, source_ns, &kubeconfigs, shape)?;
    for o in bootstrap
        .into_iter()
        .chain(mr::source_manifests(m, source_ns, source)?)
    {
        objects.push(planned(&m.from, &mr::redact(&o)));
    }
    for o in mr::target_manifests(m, target_ns, target, Some(msa_ns))? {
        objects.push(planned(&m.to, &mr::redact(&o)));
    }
    objects.extend(planned_clusters(m, carry));
    let mut plan = MigrationPlan {
        clusters: clusters.to_vec(),
        waves,
        objects,
    };
    // The tasks repeat the clusters (and the target's what they carry): past
    // [`PLAN_TASKS_LIMIT`] they are named without their bodies, so that a plan of thousands
    // of clusters leaves the migration well within an object's 1.5 MiB.
    if serde_json::to_vec(&plan).map_or(0, |b| b.len()) > PLAN_TASKS_LIMIT {
        for o in plan
            .objects
            .iter_mut()
            .filter(|o| o.kind == "MigrationTask")
        {
            o.object = None;
        }
    }
    Ok(plan)
}

/// The size of a plan past which its tasks are named without their bodies.
const PLAN_TASKS_LIMIT: usize = 256 * 1024;

/// The first [`PLAN_CLUSTER_OBJECTS`] clusters as the target would pre-create them, with
/// the objects they carry (secret data redacted).
fn planned_clusters(m: &Migration, carry: &[CarriedCluster]) -> Vec<PlannedObject> {
    let mut objects = Vec::new();
    for c in carry.iter().take(PLAN_CLUSTER_OBJECTS) {
        let mut labels = c.labels.clone();
        if let Some(set) = &c.cluster_set {
            labels.insert(labels::CLUSTER_SET.into(), set.clone());
        }
        objects.push(planned(
            &m.to,
            &json!({
                "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
                "metadata": {"name": c.name, "labels": labels},
                "spec": {"hubAcceptsClient": true}
            }),
        ));
        // Its objects as they would be created there (secret data redacted), their owners'
        // uids those they will have there.
        use migration_api::carried::{key_of, object_key};
        let uids: std::collections::BTreeMap<_, _> = std::iter::once(key_of(
            "cluster.open-cluster-management.io/v1",
            "ManagedCluster",
            &c.name,
        ))
        .chain(c.objects.iter().map(|o| object_key(&o.object)))
        .map(|k| (k, "(set when created)".to_owned()))
        .collect();
        for o in &c.objects {
            let copy = migration_api::carried::for_target(o, &c.name, &m.key, &uids);
            objects.push(planned(&m.to, &mr::redact(&copy)));
        }
    }
    objects
}

pub(super) fn planned(hub: &str, o: &Value) -> PlannedObject {
    PlannedObject {
        hub: hub.into(),
        api_version: o["apiVersion"].as_str().unwrap_or_default().into(),
        kind: o["kind"].as_str().unwrap_or_default().into(),
        namespace: o["metadata"]["namespace"].as_str().map(str::to_owned),
        name: o["metadata"]["name"].as_str().unwrap_or_default().into(),
        object: Some(o.clone()),
    }
}
