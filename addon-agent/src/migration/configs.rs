//! The KlusterletConfigs derived from the clusters' own, and the hub's KlusterletConfig shape.

use super::*;

/// The KlusterletConfigs derived from clusters' own this reconcile has ensured, by the
/// (bootstrap identity's base, own) they were derived from.
#[derive(Default)]
pub(super) struct DerivedConfigs(BTreeMap<(String, String), bool>);

/// Labels a derived KlusterletConfig with what it was derived from.
pub(super) const DERIVED_FROM: &str = "migration.open-cluster-management.io/derived-from";

impl DerivedConfigs {
    /// Ensures the KlusterletConfig derived from `own` and the migration's `base` exists;
    /// false while the base is not on this hub yet.
    pub(super) async fn ensure(
        &mut self,
        ctx: &Ctx,
        task: &MigrationTask,
        base: &str,
        own: &str,
    ) -> Result<bool, Error> {
        let key = (base.to_owned(), own.to_owned());
        if let Some(ready) = self.0.get(&key) {
            return Ok(*ready);
        }
        let api: Api<DynamicObject> =
            Api::all_with(ctx.client.clone(), &klusterlet_config_resource());
        let spec_of = |o: Option<DynamicObject>| o.and_then(|o| o.data.get("spec").cloned());
        let base_spec = spec_of(
            ignore_not_found(api.get(base).await)
                .map_err(ctx_err(format!("reading KlusterletConfig {base}")))?,
        );
        let Some(base_spec) = base_spec else {
            self.0.insert(key, false);
            return Ok(false);
        };
        // A KlusterletConfig the cluster names but the hub lacks counts as empty, as the
        // import controller reads it.
        let own_spec = spec_of(
            ignore_not_found(api.get(own).await)
                .map_err(ctx_err(format!("reading KlusterletConfig {own}")))?,
        )
        .unwrap_or_else(|| json!({}));
        let name = flight::derived_config_name(base, Some(own));
        let body = json!({
            "apiVersion": "config.open-cluster-management.io/v1alpha1", "kind": "KlusterletConfig",
            "metadata": {"name": name, "labels": {
                names::labels::MIGRATION: task.spec.key(),
                names::labels::MANAGED_BY: names::labels::MANAGED_BY_VALUE,
                DERIVED_FROM: own}},
            "spec": flight::derived_config_spec(&own_spec, &base_spec)
        });
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(ctx_err(format!("applying KlusterletConfig {name}")))?;
        self.0.insert(key, true);
        Ok(true)
    }
}

pub(super) fn klusterlet_config_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::erase::<migration_api::ocm::config::KlusterletConfig>(&())
}

/// Removes the KlusterletConfigs the migration derived from clusters' own.
pub(super) async fn remove_derived_configs(ctx: &Ctx, task: &MigrationTask) -> Result<(), Error> {
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &klusterlet_config_resource());
    let selector = format!(
        "{}={},{DERIVED_FROM}",
        names::labels::MIGRATION,
        task.spec.key()
    );
    let list = match api.list(&ListParams::default().labels(&selector)).await {
        Ok(l) => l.items,
        // A plain OCM hub has no KlusterletConfig API at all.
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => {
            return Err(Error::Kube(ApiError::new(
                "listing derived KlusterletConfigs",
                e,
            )));
        }
    };
    for kc in list {
        let name = kc.name_any();
        ignore_not_found(api.delete(&name, &DeleteParams::default()).await)
            .map_err(ctx_err(format!("deleting KlusterletConfig {name}")))?;
    }
    Ok(())
}

/// Whether a KlusterletConfig name is one this migration may have a cluster select.
pub(super) fn ours(task: &MigrationTask, name: &str) -> bool {
    task.spec
        .klusterlet_config_name
        .as_deref()
        .is_some_and(|base| name == base || name.starts_with(&format!("{base}-")))
}

/// How long a read of the hub's KlusterletConfig shape stands: the CRD changes only when ACM
/// is installed or upgraded on the hub, and reading it on every reconcile cost a request per
/// reconcile (the agent may only `get` that one CRD, not watch it).
const SHAPE_TTL: Duration = Duration::from_secs(30);

/// The hub's KlusterletConfig shape: `multipleHubsConfig` (current ACM),
/// `bootstrapKubeConfigs` (older ACM) or `None` (plain OCM), read at most every [`SHAPE_TTL`].
pub(super) async fn klusterlet_config_shape(ctx: &Ctx) -> Result<String, Error> {
    if let Ok(cached) = ctx.shape.lock()
        && let Some((at, shape)) = cached.as_ref()
        && at.elapsed() < SHAPE_TTL
    {
        return Ok(shape.clone());
    }
    klusterlet_config_shape_now(ctx).await
}

/// [`klusterlet_config_shape`] read now (validation decides the migration's shape from it).
pub(super) async fn klusterlet_config_shape_now(ctx: &Ctx) -> Result<String, Error> {
    let shape = read_klusterlet_config_shape(&ctx.client).await?;
    if let Ok(mut cached) = ctx.shape.lock() {
        *cached = Some((std::time::Instant::now(), shape.clone()));
    }
    Ok(shape)
}

async fn read_klusterlet_config_shape(client: &Client) -> Result<String, Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = ignore_not_found(crds.get(KLUSTERLET_CONFIG_CRD).await)
        .map_err(ctx_err("reading the KlusterletConfig CRD"))?;
    let Some(crd) = crd else {
        return Ok("None".into());
    };
    let spec_props = |v: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion| {
        v.schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|s| s.properties.as_ref())
            .and_then(|p| p.get("spec"))
            .and_then(|s| s.properties.clone())
            .unwrap_or_default()
    };
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .or_else(|| crd.spec.versions.first());
    let props = version.map(spec_props).unwrap_or_default();
    Ok(if props.contains_key("multipleHubsConfig") {
        "multipleHubsConfig"
    } else if props.contains_key("bootstrapKubeConfigs") {
        "bootstrapKubeConfigs"
    } else {
        "None"
    }
    .into())
}
