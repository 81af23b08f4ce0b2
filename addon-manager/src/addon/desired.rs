//! What each hub is asked to run, before rollout gating: the AddOnDeploymentConfig it points at
//! (its own, else its install placement's, else the addon's default), read once per reconcile,
//! and the version that config asks for, or why it cannot be used.
//!
//! Each config is read once and every hub's decision is taken from that one read. They were
//! read once per hub: a config changed between two of those reads made hubs of one placement
//! see different versions in one reconcile, and the rollout counted the hub that still saw the
//! old version as done, so the next hub started before it (a Progressive rollout with
//! maxConcurrency 1 ran two hubs at once, seen as a flaky e2e test).

use super::*;

/// What a hub is asked to run, before rollout gating.
pub(super) struct Desired {
    pub(super) config: Option<ConfigRef>,
    pub(super) spec: Option<AddOnDeploymentConfigSpec>,
    /// Hash of the config's spec (empty when there is no config).
    pub(super) hash: String,
    pub(super) version: String,
    /// Why the config cannot be used (the hub keeps what it runs).
    pub(super) problem: Option<(&'static str, String)>,
    pub(super) placement: Option<usize>,
}

/// Each hub's config reference and the install placement that decided it (`None`: none).
pub(super) type HubConfigs = BTreeMap<String, (Option<ConfigRef>, Option<usize>)>;

/// Which config each hub points at: its own, else its install placement's, else the addon's
/// default.
pub(super) fn config_refs(
    cma: &ClusterManagementAddOn,
    placements: &[InstallPlacement],
    mcas: &[ManagedClusterAddOn],
) -> HubConfigs {
    let default_config = cma
        .spec
        .supported_configs
        .iter()
        .flatten()
        .find(|s| s.resource == ADC_RESOURCE)
        .and_then(|s| s.default_config.as_ref())
        .map(|d| ConfigRef {
            namespace: d.namespace.clone().unwrap_or_default(),
            name: d.name.clone(),
        });
    mcas.iter()
        .map(|mca| {
            let hub = mca.namespace().unwrap_or_default();
            let placement = placements.iter().position(|p| p.hubs.contains_key(&hub));
            let config = adc_ref(mca.spec.configs.as_ref())
                .or_else(|| placement.and_then(|i| placements[i].config.clone()))
                .or_else(|| default_config.clone());
            (hub, (config, placement))
        })
        .collect()
}

/// The configs read in one reconcile (`None`: not found).
pub(super) type ReadConfigs = BTreeMap<ConfigRef, Option<AddOnDeploymentConfigSpec>>;

/// Reads each config in `refs` once.
pub(super) async fn read_configs<'a>(
    ctx: &Ctx,
    refs: impl Iterator<Item = &'a ConfigRef>,
) -> Result<ReadConfigs, Error> {
    let mut out = ReadConfigs::new();
    for r in refs {
        if out.contains_key(r) {
            continue;
        }
        let api: Api<AddOnDeploymentConfig> = Api::namespaced(ctx.client.clone(), &r.namespace);
        let adc = api
            .get_opt(&r.name)
            .await
            .ctx(|| format!("reading AddOnDeploymentConfig {}/{}", r.namespace, r.name))?;
        out.insert(r.clone(), adc.map(|a| a.spec));
    }
    Ok(out)
}

/// What every hub is asked to run, from one read of the configs.
pub(super) fn desired_of_hubs(
    refs: &HubConfigs,
    configs: &ReadConfigs,
    cfg: &Config,
) -> HashMap<String, Desired> {
    refs.iter()
        .map(|(hub, (config, placement))| {
            let d = desired_of(
                &cfg.defaults,
                &cfg.supported_versions,
                config.clone(),
                configs,
                *placement,
            );
            (hub.clone(), d)
        })
        .collect()
}

/// What a hub pointing at `config` is asked to run.
fn desired_of(
    defaults: &Defaults,
    supported: &[String],
    config: Option<ConfigRef>,
    configs: &ReadConfigs,
    placement: Option<usize>,
) -> Desired {
    let mut d = Desired {
        config: config.clone(),
        spec: None,
        hash: String::new(),
        version: defaults.version.clone(),
        problem: None,
        placement,
    };
    if let Some(r) = &config {
        let Some(spec) = configs.get(r).cloned().flatten() else {
            d.problem = Some((
                "ConfigurationNotFound",
                format!("AddOnDeploymentConfig {}/{} not found", r.namespace, r.name),
            ));
            return d;
        };
        d.hash = render::spec_hash(&spec);
        d.version = render::desired_version(defaults, Some(&spec));
        d.spec = Some(spec);
    }
    if !supported.contains(&d.version) {
        d.problem = Some((
            "UnsupportedVersion",
            format!(
                "agent version {} is not supported by this manager (supported: {}); the running version is kept",
                d.version,
                supported.join(", ")
            ),
        ));
    } else if let Err(e) = AgentValues::new(defaults, "check", d.spec.as_ref(), &d.version) {
        d.problem = Some(("InvalidConfiguration", e.to_string()));
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str) -> ConfigRef {
        ConfigRef {
            namespace: "cfg".into(),
            name: name.into(),
        }
    }

    fn spec(version: &str) -> AddOnDeploymentConfigSpec {
        serde_json::from_value(
            json!({"customizedVariables": [{"name": "AGENT_VERSION", "value": version}]}),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn cfg() -> Config {
        Config {
            metrics: crate::metrics::Metrics::default(),
            defaults: Defaults::new("cluster-migration", "quay.io/x/agent", "0.1.0"),
            supported_versions: vec!["0.1.0".into(), "0.2.0".into()],
            progress_deadline: Duration::from_secs(60),
            work_size_limit: 1,
        }
    }

    fn mca(hub: &str, own: Option<&str>) -> ManagedClusterAddOn {
        let configs = own.map(|n| {
            json!([{"group": ADC_GROUP, "resource": ADC_RESOURCE, "namespace": "cfg", "name": n}])
        });
        serde_json::from_value(json!({
            "metadata": {"name": "cluster-migration", "namespace": hub},
            "spec": {"configs": configs}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_hubs_own_config_comes_before_its_placements_and_the_default() {
        let cma: ClusterManagementAddOn = serde_json::from_value(json!({
            "metadata": {"name": "cluster-migration"},
            "spec": {"supportedConfigs": [{"group": ADC_GROUP, "resource": ADC_RESOURCE,
                "defaultConfig": {"namespace": "cfg", "name": "default"}}]}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let placements = vec![InstallPlacement {
            key: "cfg/hubs".into(),
            params: Err("unused".into()),
            config: Some(r("fleet")),
            hubs: BTreeMap::from([("hub1".to_owned(), 0), ("hub2".to_owned(), 0)]),
        }];
        let mcas = [
            mca("hub1", Some("own")),
            mca("hub2", None),
            mca("hub3", None),
        ];
        let refs = config_refs(&cma, &placements, &mcas);
        assert_eq!(refs["hub1"], (Some(r("own")), Some(0)));
        assert_eq!(refs["hub2"], (Some(r("fleet")), Some(0)));
        assert_eq!(refs["hub3"], (Some(r("default")), None));
    }

    #[test]
    fn hubs_sharing_a_config_see_one_read_of_it() {
        let refs: HubConfigs = ["hub1", "hub2", "hub3"]
            .into_iter()
            .map(|h| (h.to_owned(), (Some(r("fleet")), Some(0))))
            .collect();
        let configs = ReadConfigs::from([(r("fleet"), Some(spec("0.2.0")))]);
        let desired = desired_of_hubs(&refs, &configs, &cfg());
        for hub in ["hub1", "hub2", "hub3"] {
            assert_eq!(desired[hub].version, "0.2.0", "{hub}");
            assert_eq!(desired[hub].problem, None, "{hub}");
            assert_eq!(desired[hub].hash, desired["hub1"].hash);
        }
    }

    #[test]
    fn a_config_that_is_missing_unsupported_or_invalid_is_refused_by_name() {
        let c = cfg();
        let configs = ReadConfigs::from([
            (r("new"), Some(spec("9.9.9"))),
            (r("gone"), None),
            (
                r("bad"),
                serde_json::from_value(json!({"customizedVariables": [{"name": "MANAGED_CLUSTER_CAPACITY", "value": "lots"}]}))
                    .unwrap_or_else(|e| panic!("{e}")),
            ),
        ]);
        let problem = |name: &str| {
            desired_of(
                &c.defaults,
                &c.supported_versions,
                Some(r(name)),
                &configs,
                None,
            )
            .problem
            .map(|(reason, _)| reason)
        };
        assert_eq!(problem("gone"), Some("ConfigurationNotFound"));
        assert_eq!(problem("never-read"), Some("ConfigurationNotFound"));
        assert_eq!(problem("new"), Some("UnsupportedVersion"));
        assert_eq!(problem("bad"), Some("InvalidConfiguration"));
        let none = desired_of(&c.defaults, &c.supported_versions, None, &configs, None);
        assert_eq!((none.version.as_str(), none.problem), ("0.1.0", None));
    }
}
