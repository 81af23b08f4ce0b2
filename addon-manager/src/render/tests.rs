use migration_api::ocm::addon::{CustomizedVariable, ProxyConfig, ResourceRequirements};

use super::*;
use migration_api::ocm::addon::ContainerResourceRequirements;

fn defaults() -> Defaults {
    Defaults::new("cluster-migration", crate::DEFAULT_AGENT_IMAGE, "0.1.0")
}

fn vars(pairs: &[(&str, &str)]) -> AddOnDeploymentConfigSpec {
    AddOnDeploymentConfigSpec {
        customized_variables: Some(
            pairs
                .iter()
                .map(|(n, v)| CustomizedVariable {
                    name: (*n).into(),
                    value: Some((*v).into()),
                })
                .collect(),
        ),
        ..Default::default()
    }
}

fn render(config: Option<&AddOnDeploymentConfigSpec>) -> Vec<Value> {
    let d = defaults();
    let v = AgentValues::new(&d, "hub1", config, &desired_version(&d, config)).unwrap();
    agent_manifests(&v).unwrap()
}

fn deployment(objs: &[Value]) -> &Value {
    objs.iter().find(|o| o["kind"] == "Deployment").unwrap()
}

fn container(objs: &[Value]) -> &Value {
    &deployment(objs)["spec"]["template"]["spec"]["containers"][0]
}

fn env(objs: &[Value], name: &str) -> Option<String> {
    container(objs)["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str().map(str::to_owned))
}

#[test]
fn default_install_has_every_object_in_apply_order() {
    let objs = render(None);
    let kinds: Vec<&str> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRole",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "CustomResourceDefinition",
            "Deployment"
        ]
    );
    assert_eq!(
        objs[0]["metadata"]["name"],
        names::DEFAULT_ADDON_INSTALL_NAMESPACE
    );
    // The hub's work agent reaches our custom resources only through a role labelled
    // for its aggregate role, holding just the kinds migrations deliver.
    let work = objs
        .iter()
        .find(|o| o["metadata"]["labels"][WORK_AGGREGATE_LABEL] == "true")
        .expect("the aggregate-to-work role");
    let resources: Vec<&str> = work["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap())
        })
        .collect();
    assert_eq!(resources, ["migrationtasks", "klusterletconfigs"]);
    assert_eq!(
        container(&objs)["image"],
        "quay.io/cluster-migration-addon/addon-agent:0.1.0"
    );
    assert_eq!(env(&objs, "AGENT_VERSION").as_deref(), Some("0.1.0"));
    assert!(container(&objs).get("resources").is_none());
    assert!(
        deployment(&objs)["spec"]["template"]["spec"]
            .get("nodeSelector")
            .is_none()
    );
}

#[test]
fn agent_version_sets_image_tag_and_env() {
    let c = vars(&[(AGENT_VERSION_VAR, "0.2.0")]);
    let objs = render(Some(&c));
    assert_eq!(
        container(&objs)["image"],
        "quay.io/cluster-migration-addon/addon-agent:0.2.0"
    );
    assert_eq!(env(&objs, "AGENT_VERSION").as_deref(), Some("0.2.0"));
}

#[test]
fn variables_set_log_level_lease_and_capacity() {
    let c = vars(&[
        (LOG_LEVEL_VAR, "debug"),
        (LEASE_DURATION_VAR, "5"),
        (CAPACITY_VAR, "40"),
    ]);
    let objs = render(Some(&c));
    let args = container(&objs)["args"].as_array().unwrap().clone();
    assert!(args.contains(&json!("--log-level=debug")), "{args:?}");
    assert_eq!(env(&objs, "LEASE_DURATION_SECONDS").as_deref(), Some("5"));
    assert_eq!(
        env(&objs, "MANAGED_CLUSTER_CAPACITY").as_deref(),
        Some("40")
    );
}

#[test]
fn a_bad_number_is_a_config_error() {
    let d = defaults();
    for bad in ["0", "-1", "ten"] {
        let c = vars(&[(LEASE_DURATION_VAR, bad)]);
        let err = AgentValues::new(&d, "hub1", Some(&c), "0.1.0").unwrap_err();
        assert!(err.to_string().contains("LEASE_DURATION_SECONDS"), "{err}");
    }
}

#[test]
fn install_namespace_from_config() {
    let c = AddOnDeploymentConfigSpec {
        agent_install_namespace: Some("migration-agent".into()),
        ..Default::default()
    };
    let objs = render(Some(&c));
    for o in &objs {
        let kind = o["kind"].as_str().unwrap();
        match kind {
            "Namespace" => assert_eq!(o["metadata"]["name"], "migration-agent"),
            "ClusterRole" | "CustomResourceDefinition" => {}
            "ClusterRoleBinding" => {
                assert_eq!(o["subjects"][0]["namespace"], "migration-agent")
            }
            _ => assert_eq!(o["metadata"]["namespace"], "migration-agent", "{kind}"),
        }
    }
}

#[test]
fn node_placement_sets_selector_and_tolerations() {
    let c: AddOnDeploymentConfigSpec = serde_json::from_value(json!({
        "nodePlacement": {"nodeSelector": {"node-role.kubernetes.io/infra": ""},
                          "tolerations": [{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}]}
    }))
    .unwrap();
    let objs = render(Some(&c));
    let pod = &deployment(&objs)["spec"]["template"]["spec"];
    assert_eq!(
        pod["nodeSelector"],
        json!({"node-role.kubernetes.io/infra": ""})
    );
    assert_eq!(
        pod["tolerations"],
        json!([{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}])
    );
}

#[test]
fn registries_mirror_the_image() {
    let with = |mirror: &str, source: Option<&str>| {
        let c: AddOnDeploymentConfigSpec =
            serde_json::from_value(json!({"registries": [{"mirror": mirror, "source": source}]}))
                .unwrap();
        render(Some(&c))
    };
    let objs = with(
        "registry.local/mirror/addon-agent",
        Some("quay.io/cluster-migration-addon/addon-agent"),
    );
    assert_eq!(
        container(&objs)["image"],
        "registry.local/mirror/addon-agent:0.1.0"
    );
    let objs = with("registry.local", None);
    assert_eq!(
        container(&objs)["image"],
        "registry.local/cluster-migration-addon/addon-agent:0.1.0"
    );
    let objs = with("registry.local/x", Some("docker.io/other"));
    assert_eq!(
        container(&objs)["image"],
        "quay.io/cluster-migration-addon/addon-agent:0.1.0"
    );
}

#[test]
fn proxy_config_sets_env_and_mounts_the_ca() {
    let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let c = AddOnDeploymentConfigSpec {
        proxy_config: Some(ProxyConfig {
            http_proxy: Some("http://proxy:3128".into()),
            https_proxy: Some("https://proxy:3129".into()),
            no_proxy: Some(".svc,10.0.0.0/8".into()),
            ca_bundle: Some(base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                pem,
            )),
        }),
        ..Default::default()
    };
    let objs = render(Some(&c));
    assert_eq!(
        env(&objs, "HTTP_PROXY").as_deref(),
        Some("http://proxy:3128")
    );
    assert_eq!(
        env(&objs, "https_proxy").as_deref(),
        Some("https://proxy:3129")
    );
    assert_eq!(env(&objs, "NO_PROXY").as_deref(), Some(".svc,10.0.0.0/8"));
    let secret = objs.iter().find(|o| o["kind"] == "Secret").unwrap();
    assert_eq!(secret["stringData"]["ca.crt"], pem);
    let mounts = container(&objs)["volumeMounts"].as_array().unwrap();
    assert!(mounts.iter().any(|m| m["mountPath"] == PROXY_CA_MOUNT));
    let bad = AddOnDeploymentConfigSpec {
        proxy_config: Some(ProxyConfig {
            ca_bundle: Some("%%%".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert!(AgentValues::new(&defaults(), "hub1", Some(&bad), "0.1.0").is_err());
    let none = render(None);
    assert!(env(&none, "HTTP_PROXY").is_none());
    assert!(!none.iter().any(|o| o["kind"] == "Secret"));
}

#[test]
fn resource_requirements_most_specific_match_wins() {
    let req = |cpu: &str| ResourceRequirements {
        requests: Some(
            [(
                "cpu".to_owned(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(cpu.into()),
            )]
            .into(),
        ),
        limits: None,
    };
    let entry = |id: &str, cpu: &str| ContainerResourceRequirements {
        container_id: id.into(),
        resources: req(cpu),
    };
    let c = AddOnDeploymentConfigSpec {
        resource_requirements: Some(vec![
            entry("deployments:cluster-migration-agent:addon-agent", "300m"),
            entry("*:*:*", "100m"),
            entry("deployments:other:addon-agent", "900m"),
        ]),
        ..Default::default()
    };
    let objs = render(Some(&c));
    assert_eq!(
        container(&objs)["resources"],
        json!({"requests": {"cpu": "300m"}})
    );
    let only_wild = AddOnDeploymentConfigSpec {
        resource_requirements: Some(vec![entry("*:*:*", "100m")]),
        ..Default::default()
    };
    assert_eq!(
        container(&render(Some(&only_wild)))["resources"],
        json!({"requests": {"cpu": "100m"}})
    );
}

#[test]
fn values_cannot_inject_yaml() {
    let c = vars(&[(LOG_LEVEL_VAR, "info\n  hostNetwork: true\"")]);
    let objs = render(Some(&c));
    assert!(
        deployment(&objs)["spec"]["template"]["spec"]
            .get("hostNetwork")
            .is_none()
    );
    let args = container(&objs)["args"].as_array().unwrap();
    assert!(args.contains(&json!("--log-level=info\n  hostNetwork: true\"")));
}

#[test]
fn works_split_by_size_and_keep_order() {
    let ms: Vec<Value> = (0..10)
        .map(|i| json!({"kind": "ConfigMap", "i": i, "pad": "x".repeat(100)}))
        .collect();
    let groups = split_manifests(ms.clone(), 300);
    assert!(groups.len() > 1);
    for g in &groups {
        assert!(g.len() == 1 || serde_json::to_vec(g).unwrap().len() <= 300 + g.len() + 2);
    }
    let flat: Vec<Value> = groups.into_iter().flatten().collect();
    assert_eq!(flat, ms);
    assert_eq!(split_manifests(ms, WORK_SIZE_LIMIT).len(), 1);
}

#[test]
fn deploy_works_are_named_labelled_owned_and_hashed() {
    let owner = json!({"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn", "name": "cluster-migration", "uid": "u1"});
    let hashes = BTreeMap::from([(
        "addondeploymentconfigs.addon.open-cluster-management.io/ns/cfg".to_owned(),
        "abc".to_owned(),
    )]);
    let works = deploy_works(
        "cluster-migration",
        "hub1",
        render(None),
        &hashes,
        &owner,
        4096,
    );
    assert!(works.len() > 1, "the CRD alone is larger than 4 KiB");
    for (i, w) in works.iter().enumerate() {
        assert_eq!(
            w["metadata"]["name"],
            format!("addon-cluster-migration-deploy-{i}")
        );
        assert!(is_deploy_work(
            "cluster-migration",
            w["metadata"]["name"].as_str().unwrap()
        ));
        assert_eq!(w["metadata"]["namespace"], "hub1");
        assert_eq!(
            w["metadata"]["labels"][labels::ADDON_NAME],
            "cluster-migration"
        );
        assert_eq!(w["metadata"]["ownerReferences"][0]["uid"], "u1");
        let h: BTreeMap<String, String> = serde_json::from_str(
            w["metadata"]["annotations"][migration_api::names::annotations::CONFIG_SPEC_HASH]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(h, hashes);
    }
    let last = works.last().unwrap();
    assert_eq!(
        last["spec"]["manifestConfigs"][0]["resourceIdentifier"]["name"],
        AGENT_NAME
    );
}

#[test]
fn hub_rbac_is_confined_to_the_cluster_namespace_and_group() {
    let objs = hub_rbac("cluster-migration", "hub1").unwrap();
    assert_eq!(objs.len(), 2);
    for o in &objs {
        assert_eq!(o["metadata"]["namespace"], "hub1");
    }
    let role = &objs[0];
    for rule in role["rules"].as_array().unwrap() {
        assert!(!rule["verbs"].as_array().unwrap().contains(&json!("*")));
        assert!(!rule["resources"].as_array().unwrap().contains(&json!("*")));
    }
    assert_eq!(
        objs[1]["subjects"][0]["name"],
        "system:open-cluster-management:cluster:hub1:addon:cluster-migration"
    );
}

#[test]
fn pre_delete_job_runs_cleanup_with_the_agent_identity() {
    let d = defaults();
    let v = AgentValues::new(&d, "hub1", None, "0.1.0").unwrap();
    let objs = pre_delete_manifests(&v).unwrap();
    assert_eq!(objs.len(), 1);
    let job = &objs[0];
    assert_eq!(job["kind"], "Job");
    assert!(
        job["metadata"]["annotations"]
            .get(migration_api::names::annotations::ADDON_PRE_DELETE)
            .is_some()
    );
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["args"].as_array().unwrap().last().unwrap(), "cleanup");
    assert_eq!(
        c["image"],
        "quay.io/cluster-migration-addon/addon-agent:0.1.0"
    );
    assert_eq!(job["spec"]["backoffLimit"], CLEANUP_BACKOFF_LIMIT);
    assert!(!is_deploy_work(
        "cluster-migration",
        &names::addon_pre_delete_work("cluster-migration")
    ));
    assert!(!is_deploy_work(
        "cluster-migration",
        "addon-cluster-migration-deploy-x"
    ));
}

#[test]
fn spec_hash_is_stable_and_sensitive() {
    let a = vars(&[(AGENT_VERSION_VAR, "0.1.0")]);
    let b = vars(&[(AGENT_VERSION_VAR, "0.2.0")]);
    assert_eq!(spec_hash(&a), spec_hash(&a.clone()));
    assert_ne!(spec_hash(&a), spec_hash(&b));
    assert_eq!(spec_hash(&a).len(), 64);
}
