use migration_api::migration::{CarriedCluster, TaskStage};
use migration_api::ocm::work::{FeedbackScrapeType, ManifestWork};

use super::*;

fn m() -> Migration {
    Migration {
        name: "move".into(),
        namespace: "default".into(),
        key: "move-0a1b2c3d".into(),
        token_validity: std::time::Duration::from_secs(1620),
        from: "hub1".into(),
        to: "hub2".into(),
        clusters: 2,
        identity_names: vec![
            "cluster-migration-bootstrap-7".into(),
            "cluster-migration-bootstrap-3".into(),
        ],
    }
}

fn kcs(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|t| (*t).to_owned()).collect()
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn parse(text: &str) -> kube::config::Kubeconfig {
    kube::config::Kubeconfig::from_yaml(text).unwrap()
}

#[test]
fn the_token_is_not_rotated_and_lives_as_the_spec_allows() {
    let msa = m().service_account("cluster-migration-bootstrap-3");
    assert_eq!(
        msa["spec"]["rotation"],
        json!({"enabled": false, "validity": "1620s"})
    );
    assert_eq!(msa["metadata"]["name"], "cluster-migration-bootstrap-3");
    // The pooled name says nothing of its holder: the key label does.
    assert_eq!(
        msa["metadata"]["labels"]["migration.open-cluster-management.io/key"],
        "move-0a1b2c3d"
    );
}

#[test]
fn the_connection_keeps_server_ca_and_proxy_but_no_credentials() {
    let proxy = ProxyConfig {
        https_proxy: Some("https://proxy:3128".into()),
        ..Default::default()
    };
    let full = bootstrap_kubeconfig(
        "https://hub2:6443",
        Some(&b64("-----BEGIN CERTIFICATE-----\nx\n")),
        "secret-token",
        Some(&proxy),
    )
    .unwrap();
    let conn = without_credentials(&full).unwrap();
    assert!(!conn.contains("secret-token"), "{conn}");
    let kc = kube::config::Kubeconfig::from_yaml(&conn).unwrap();
    let cluster = kc.clusters[0].cluster.as_ref().unwrap();
    assert_eq!(cluster.server.as_deref(), Some("https://hub2:6443"));
    assert_eq!(cluster.proxy_url.as_deref(), Some("https://proxy:3128"));
    assert!(cluster.certificate_authority_data.is_some());
    assert!(
        kc.auth_infos[0]
            .auth_info
            .as_ref()
            .is_none_or(|a| a.token.is_none())
    );
    assert!(without_credentials("not: [yaml").is_err());
}

fn grants() -> AgentGrants {
    AgentGrants {
        addon: "cluster-migration".into(),
        agent_namespace: "agent-ns".into(),
        clusters: vec!["c1".into(), "c2".into()],
        sets: vec!["east".into()],
        addons: vec!["search-collector".into()],
        klusterlet_configs: vec!["migration-move-0a1b2c3d-own".into()],
        release: vec!["c2".into()],
    }
}

fn rules_of(objs: &[Value]) -> Vec<Value> {
    objs[0]["rules"].as_array().unwrap().clone()
}

#[test]
fn a_source_agent_may_write_only_the_migrations_clusters_and_klusterlet_work() {
    let objs = agent_grants(&m(), MigrationRole::Source, &grants()).unwrap();
    let kinds: Vec<&str> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ClusterRole", "ClusterRoleBinding", "RoleBinding"]);
    assert_eq!(
        objs[0]["metadata"]["name"],
        "open-cluster-management:cluster-migration:agent:move-0a1b2c3d:source"
    );
    for r in rules_of(&objs) {
        // Every write is limited to names (none may be empty: that would be every name).
        let names = r["resourceNames"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"));
        assert!(!names.is_empty(), "{r}");
        assert!(!r["verbs"].as_array().unwrap().contains(&json!("*")), "{r}");
    }
    let resources: Vec<Value> = rules_of(&objs)
        .iter()
        .map(|r| r["resources"].clone())
        .collect();
    assert!(!resources.contains(&json!(["managedclustersets/join"])));
    assert!(!resources.contains(&json!(["managedclusteraddons"])));
    assert!(!resources.contains(&json!(["klusterletaddonconfigs"])));
    let works = rules_of(&objs)
        .into_iter()
        .find(|r| r["resources"] == json!(["manifestworks"]))
        .unwrap();
    assert_eq!(
        works["resourceNames"],
        json!(["migration-move-0a1b2c3d-klusterlet"])
    );
    // The KlusterletConfigs it derives, by name (never `global`, never the clusters' own).
    let configs = rules_of(&objs)
        .into_iter()
        .find(|r| r["resources"] == json!(["klusterletconfigs"]))
        .unwrap();
    assert_eq!(
        configs["resourceNames"],
        json!(["migration-move-0a1b2c3d-own"])
    );
    assert_eq!(
        objs[1]["subjects"],
        json!([{"kind": "ServiceAccount", "name": "cluster-migration-agent", "namespace": "agent-ns"}])
    );
    // The works of a cluster the hub lets go of: released in its namespace only.
    assert_eq!(objs[2]["metadata"]["namespace"], "c2");
    assert_eq!(
        objs[2]["roleRef"]["name"],
        "open-cluster-management:cluster-migration:release-works"
    );
}

#[test]
fn a_target_agent_may_also_create_clusters_and_carry_what_they_carry() {
    let objs = agent_grants(&m(), MigrationRole::Target, &grants()).unwrap();
    let rules = rules_of(&objs);
    let unnamed: Vec<&Value> = rules
        .iter()
        .filter(|r| r.get("resourceNames").is_none())
        .collect();
    // A POST cannot be limited by name, nor a CSR's approval (its name is generated): creating
    // ManagedClusters and approving CSRs are the unnamed rights, the approval bounded by the
    // signer it names and by the agent's admission rule.
    assert_eq!(
        unnamed,
        [
            &json!({"apiGroups": ["cluster.open-cluster-management.io"], "resources": ["managedclusters"], "verbs": ["create"]}),
            &json!({"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/approval"], "verbs": ["update", "patch"]})
        ]
    );
    let named = |resource: &str| {
        rules
            .iter()
            .find(|r| r["resources"] == json!([resource]))
            .map(|r| (r["resourceNames"].clone(), r["verbs"].clone()))
    };
    assert_eq!(
        named("signers"),
        Some((
            json!(["kubernetes.io/kube-apiserver-client"]),
            json!(["approve"])
        ))
    );
    assert_eq!(
        named("serviceaccounts/token"),
        Some((
            json!(["agent-registration-bootstrap", "cluster-bootstrap"]),
            json!(["create"])
        ))
    );
    // The source's grant holds neither.
    let source = rules_of(&agent_grants(&m(), MigrationRole::Source, &grants()).unwrap());
    for resource in [
        "signers",
        "certificatesigningrequests/approval",
        "serviceaccounts/token",
    ] {
        assert!(
            !source.iter().any(|r| r["resources"] == json!([resource])),
            "{resource}"
        );
    }
    let by = |res: &str| {
        rules
            .iter()
            .find(|r| r["resources"] == json!([res]))
            .map(|r| r["resourceNames"].clone())
    };
    assert_eq!(by("managedclustersets/join"), Some(json!(["east"])));
    assert_eq!(
        by("managedclusteraddons"),
        Some(json!(["search-collector"]))
    );
    assert_eq!(by("klusterletaddonconfigs"), Some(json!(["c1", "c2"])));
    // Nothing carried: no rule for it (an empty resourceNames would allow every name).
    let bare = AgentGrants {
        sets: vec![],
        addons: vec![],
        release: vec![],
        ..grants()
    };
    let objs = agent_grants(&m(), MigrationRole::Target, &bare).unwrap();
    assert_eq!(objs.len(), 2);
    assert!(
        rules_of(&objs)
            .iter()
            .all(|r| r["resources"] != json!(["managedclustersets/join"])
                && r["resources"] != json!(["managedclusteraddons"]))
    );
    // No clusters, no grants at all.
    let none = AgentGrants {
        clusters: vec![],
        ..grants()
    };
    assert!(
        agent_grants(&m(), MigrationRole::Target, &none)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn kubeconfig_from_client_config_without_proxy() {
    let text = bootstrap_kubeconfig(
        "https://hub2:6443",
        Some(&b64(
            "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n",
        )),
        "tok",
        None,
    )
    .unwrap();
    let kc = parse(&text);
    let cluster = kc.clusters[0].cluster.as_ref().unwrap();
    assert_eq!(cluster.server.as_deref(), Some("https://hub2:6443"));
    assert!(cluster.proxy_url.is_none());
    let ca = base64::engine::general_purpose::STANDARD
        .decode(cluster.certificate_authority_data.as_ref().unwrap())
        .unwrap();
    assert_eq!(
        String::from_utf8(ca).unwrap(),
        "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n"
    );
    let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
    assert!(user.token.is_some());
}

#[test]
fn kubeconfig_behind_an_https_proxy_carries_its_url_and_ca() {
    let proxy = ProxyConfig {
        http_proxy: Some("http://plain:3128".into()),
        https_proxy: Some("https://proxy:3129".into()),
        ca_bundle: Some(b64("PROXY-CA\n")),
        no_proxy: None,
    };
    let text =
        bootstrap_kubeconfig("https://hub2", Some(&b64("HUB-CA")), "t", Some(&proxy)).unwrap();
    let kc = parse(&text);
    let cluster = kc.clusters[0].cluster.as_ref().unwrap();
    assert_eq!(cluster.proxy_url.as_deref(), Some("https://proxy:3129"));
    let ca = base64::engine::general_purpose::STANDARD
        .decode(cluster.certificate_authority_data.as_ref().unwrap())
        .unwrap();
    assert_eq!(String::from_utf8(ca).unwrap(), "HUB-CA\nPROXY-CA\n");
    // An HTTP proxy has no CA to append.
    let plain = ProxyConfig {
        https_proxy: None,
        ..proxy
    };
    let text =
        bootstrap_kubeconfig("https://hub2", Some(&b64("HUB-CA")), "t", Some(&plain)).unwrap();
    let cluster = parse(&text).clusters[0].cluster.clone().unwrap();
    assert_eq!(cluster.proxy_url.as_deref(), Some("http://plain:3128"));
    let ca = base64::engine::general_purpose::STANDARD
        .decode(cluster.certificate_authority_data.unwrap())
        .unwrap();
    assert_eq!(ca, b"HUB-CA");
}

#[test]
fn bad_ca_bundle_is_a_clear_error() {
    let err = bootstrap_kubeconfig("https://hub2", Some("%%%"), "t", None).unwrap_err();
    assert!(err.to_string().contains("caBundle is not base64"), "{err}");
}

#[test]
fn plain_ocm_hubs_get_the_bootstrap_secrets_next_to_the_task_and_no_klusterlet_config() {
    assert_eq!(Shape::from_report("None"), Some(Shape::ManifestWork));
    assert_eq!(Shape::from_report("something else"), None);
    for shape in [
        Shape::ManifestWork,
        Shape::MultipleHubsConfig,
        Shape::BootstrapKubeConfigs,
    ] {
        assert_eq!(Shape::from_delivery(shape.delivery()), shape);
    }
    let objs =
        bootstrap_manifests(&m(), "agent-ns", &kcs(&["kc0", "kc1"]), Shape::ManifestWork).unwrap();
    let kinds: Vec<&str> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["Secret", "Secret"]);
    assert_eq!(objs[0]["metadata"]["namespace"], "agent-ns");
    // One per bootstrap identity.
    assert_eq!(objs[1]["metadata"]["name"], "bootstrap-move-0a1b2c3d-1");
    assert_eq!(objs[1]["data"]["kubeconfig"], b64("kc1"));
    // The token never goes to the target (it gets the connection without credentials).
    let target = target_manifests(&m(), "t-ns", MigrationTaskSpec::default(), Some("msa")).unwrap();
    assert!(target.iter().all(|o| o["kind"] != "Secret"));
}

#[test]
fn klusterlet_config_in_both_shapes() {
    for (shape, path) in [
        (
            Shape::MultipleHubsConfig,
            "/spec/multipleHubsConfig/bootstrapKubeConfigs",
        ),
        (Shape::BootstrapKubeConfigs, "/spec/bootstrapKubeConfigs"),
    ] {
        let objs = bootstrap_manifests(&m(), "ns", &kcs(&["kc0", "kc"]), shape).unwrap();
        assert_eq!(objs.len(), 4);
        // Identity 1's secret and KlusterletConfig (identity 0's come first).
        let objs = &objs[2..];
        assert_eq!(objs[0]["kind"], "Secret");
        assert_eq!(objs[0]["metadata"]["name"], "bootstrap-move-0a1b2c3d-1");
        assert_eq!(
            objs[0]["metadata"]["namespace"],
            BOOTSTRAP_SECRETS_NAMESPACE
        );
        assert_eq!(objs[0]["data"]["kubeconfig"], b64("kc"));
        let kc = &objs[1];
        assert_eq!(kc["kind"], "KlusterletConfig");
        assert_eq!(kc["metadata"]["name"], "migration-move-0a1b2c3d-1");
        let boot = kc
            .pointer(path)
            .unwrap_or_else(|| panic!("{shape:?}: {kc}"));
        assert_eq!(boot["type"], "LocalSecrets");
        assert_eq!(
            boot["localSecretsConfig"]["kubeConfigSecrets"],
            json!([{"name": "bootstrap-move-0a1b2c3d-1"}])
        );
    }
    let shapes = |o: &Value| {
        (
            o.pointer("/spec/multipleHubsConfig").is_some(),
            o.pointer("/spec/bootstrapKubeConfigs").is_some(),
        )
    };
    let new = bootstrap_manifests(&m(), "ns", &kcs(&["kc"]), Shape::MultipleHubsConfig).unwrap();
    assert_eq!(shapes(&new[1]), (true, false));
    assert_eq!(
        new[1]["spec"]["multipleHubsConfig"]["genBootstrapKubeConfigStrategy"],
        "IncludeCurrentHub"
    );
}

#[test]
fn validating_source_carries_only_the_task_with_its_revision() {
    let spec = MigrationTaskSpec {
        migration: "move".into(),
        clusters: vec!["c1".into()],
        stage: TaskStage::Validating,
        ..Default::default()
    };
    let objs = source_manifests(&m(), "agent-ns", spec.clone()).unwrap();
    assert_eq!(objs.len(), 1);
    assert_eq!(objs[0]["metadata"]["namespace"], "agent-ns");
    assert_eq!(objs[0]["spec"]["revision"], revision(&spec));
    let mut other = spec.clone();
    other.stage = TaskStage::Deploying;
    assert_ne!(revision(&spec), revision(&other));
}

#[test]
fn target_rbac_binds_only_the_migration_service_accounts() {
    let objs = target_manifests(&m(), "ns", MigrationTaskSpec::default(), Some("msa-ns")).unwrap();
    assert_eq!(objs[0]["kind"], "ClusterRole");
    let verbs: Vec<&str> = objs[0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
        })
        .collect();
    assert!(
        !verbs.contains(&"delete") && !verbs.contains(&"*"),
        "{verbs:?}"
    );
    // ManagedClusters: get and create only (no list, no update), as ACM's bootstrap role.
    let clusters = objs[0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resources"] == json!(["managedclusters"]))
        .unwrap();
    assert_eq!(clusters["verbs"], json!(["get", "create"]));
    assert_eq!(
        objs[1]["subjects"],
        json!([
            {"kind": "ServiceAccount", "name": "cluster-migration-bootstrap-7", "namespace": "msa-ns"},
            {"kind": "ServiceAccount", "name": "cluster-migration-bootstrap-3", "namespace": "msa-ns"},
        ])
    );
    assert_eq!(
        bootstrap_users(&m(), "msa-ns"),
        [
            "system:serviceaccount:msa-ns:cluster-migration-bootstrap-7",
            "system:serviceaccount:msa-ns:cluster-migration-bootstrap-3"
        ]
    );
    let without = target_manifests(&m(), "ns", MigrationTaskSpec::default(), None).unwrap();
    assert_eq!(without.len(), 1);
}

#[test]
fn works_and_feedback() {
    let w = work(
        &m(),
        MigrationRole::Target,
        vec![],
        task_config(&m(), "ns", true),
    );
    assert_eq!(w["metadata"]["name"], "migration-move-0a1b2c3d-target");
    assert_eq!(w["metadata"]["namespace"], "hub2");
    let paths = &w["spec"]["manifestConfigs"][0]["feedbackRules"][0]["jsonPaths"];
    assert_eq!(paths.as_array().unwrap().len(), 11);
    assert_eq!(paths[6]["path"], ".status.carryOverJson");
    assert_eq!(paths[7]["path"], ".status.carryOverParts.count");
    assert_eq!(paths[10]["path"], ".status.releaseTimes.offsets");
    // Each status write of the task comes back when it happens, not at the next poll.
    assert_eq!(
        w["spec"]["manifestConfigs"][0]["feedbackScrapeType"],
        "Watch"
    );
    let typed: migration_api::ocm::work::ManifestWork = serde_json::from_value(w.clone()).unwrap();
    assert_eq!(
        typed.spec.manifest_configs.unwrap()[0].feedback_scrape_type,
        Some(migration_api::ocm::work::FeedbackScrapeType::Watch)
    );
    // Applied server-side under the manager's name, so the hub agent's status writes never
    // make the apply conflict.
    assert_eq!(
        w["spec"]["manifestConfigs"][0]["updateStrategy"],
        json!({"type": "ServerSideApply", "serverSideApply": {"fieldManager": "cluster-migration-addon-manager", "force": true}})
    );
    let updated = work(
        &m(),
        MigrationRole::Target,
        vec![],
        task_config(&m(), "ns", false),
    );
    assert_eq!(
        updated["spec"]["manifestConfigs"][0].get("updateStrategy"),
        None
    );
    let carried = CarriedCluster {
        name: "c1".into(),
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_value(&carried).unwrap(),
        json!({"name": "c1"})
    );
}

#[test]
fn plans_never_show_secret_data() {
    let objs =
        bootstrap_manifests(&m(), "ns", &kcs(&["token: abc"]), Shape::MultipleHubsConfig).unwrap();
    let shown = redact(&objs[0]);
    assert_eq!(shown["data"]["kubeconfig"], REDACTED);
    assert!(!shown.to_string().contains(&b64("token: abc")));
    assert_eq!(redact(&objs[1]), objs[1]);
}

#[test]
fn the_bootstrap_objects_travel_in_a_work_of_their_own() {
    let objs = bootstrap_manifests(&m(), "ns", &kcs(&["kc"]), Shape::MultipleHubsConfig).unwrap();
    let w = bootstrap_work(&m(), objs.clone());
    assert_eq!(w["metadata"]["name"], "migration-move-0a1b2c3d-bootstrap");
    assert_eq!(w["metadata"]["namespace"], "hub1");
    assert_eq!(w["spec"]["workload"]["manifests"], json!(objs));
    // The task's work carries the task alone.
    let task = source_manifests(&m(), "ns", MigrationTaskSpec::default()).unwrap();
    assert_eq!(task.len(), 1);
    assert_eq!(task[0]["kind"], "MigrationTask");
}

#[test]
fn carry_over_parts_are_read_back_read_only_and_delivered_as_secrets() {
    // The source's part: never written by the work agent, its records and digest fed back.
    let read = carry_read_work(&m(), "agent-ns", 2);
    assert_eq!(
        read["metadata"]["name"],
        "migration-move-0a1b2c3d-source-carry-2"
    );
    assert_eq!(read["metadata"]["namespace"], "hub1");
    assert_eq!(read["metadata"]["labels"], json!(m().labels()));
    let cfg = &read["spec"]["manifestConfigs"][0];
    assert_eq!(cfg["updateStrategy"]["type"], "ReadOnly");
    assert_eq!(
        cfg["resourceIdentifier"],
        json!({"group": "", "resource": "secrets", "name": "migration-move-0a1b2c3d-source-carry-2", "namespace": "agent-ns"})
    );
    assert_eq!(
        cfg["feedbackRules"][0]["jsonPaths"],
        json!([{"name": "records", "path": ".data.records"}, {"name": "digest", "path": ".data.digest"}])
    );
    let manifest = &read["spec"]["workload"]["manifests"][0];
    assert_eq!(manifest["metadata"]["namespace"], "agent-ns");
    assert!(manifest.get("data").is_none());
    assert_eq!(manifest["kind"], "Secret");
    // The target's part: a Secret with the records and the digest of the whole, base64 as
    // Secret data is.
    let put = carry_work(&m(), "agent-ns", 0, "[{\"name\":\"c1\"}]", "d");
    assert_eq!(
        put["metadata"]["name"],
        "migration-move-0a1b2c3d-target-carry-0"
    );
    assert_eq!(put["metadata"]["namespace"], "hub2");
    let cm = &put["spec"]["workload"]["manifests"][0];
    assert_eq!(cm["kind"], "Secret");
    assert_eq!(
        cm["data"],
        json!({"records": "W3sibmFtZSI6ImMxIn1d", "digest": "ZA=="})
    );
    assert_eq!(
        cm["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "cluster-migration-addon"
    );
}

#[test]
fn carried_kinds_are_read_everywhere_only_while_validating_then_in_the_clusters_namespaces() {
    use migration_api::carried::CarryOverResource;
    let kinds = vec![
        CarryOverResource {
            group: "".into(),
            resource: "secrets".into(),
            label_selector: None,
        },
        CarryOverResource {
            group: "hive.openshift.io".into(),
            resource: "clusterdeployments".into(),
            label_selector: None,
        },
    ];
    let rules = |objs: &[Value]| objs[0]["rules"].clone();
    // Validating: the source reads, cluster-wide.
    let v = carry_grants(
        &m(),
        MigrationRole::Source,
        &kinds,
        CarryScope::Validating,
        "agent-ns",
    )
    .unwrap();
    assert_eq!(v.len(), 2, "{v:?}");
    assert_eq!(
        rules(&v),
        json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]},
               {"apiGroups": ["hive.openshift.io"], "resources": ["clusterdeployments"], "verbs": ["get", "list"]}])
    );
    assert_eq!(v[1]["kind"], "ClusterRoleBinding");
    assert_eq!(v[1]["subjects"][0]["namespace"], "agent-ns");
    // Then: in each cluster's namespace only.
    let clusters = vec!["c1".to_owned(), "c2".to_owned()];
    let s = carry_grants(
        &m(),
        MigrationRole::Source,
        &kinds,
        CarryScope::Clusters(&clusters),
        "agent-ns",
    )
    .unwrap();
    assert_eq!(
        s.iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["ClusterRole", "RoleBinding", "RoleBinding"]
    );
    assert_eq!(s[1]["metadata"]["namespace"], "c1");
    assert_eq!(s[2]["metadata"]["namespace"], "c2");
    assert_eq!(s[1]["roleRef"]["name"], s[0]["metadata"]["name"]);
    assert_eq!(rules(&s)[0]["verbs"], json!(["get", "list", "patch"]));
    let t = carry_grants(
        &m(),
        MigrationRole::Target,
        &kinds,
        CarryScope::Clusters(&clusters),
        "agent-ns",
    )
    .unwrap();
    assert_eq!(
        rules(&t)[1]["verbs"],
        json!(["get", "list", "create", "patch", "delete"])
    );
    assert!(t.iter().all(|o| o["kind"] != "ClusterRoleBinding"));
    assert_ne!(t[0]["metadata"]["name"], s[0]["metadata"]["name"]);
    // Nothing to grant: no kinds, a target validating, or no clusters (never cluster-wide
    // past validation).
    let none = |role, kinds: &[CarryOverResource], scope| {
        carry_grants(&m(), role, kinds, scope, "a")
            .unwrap()
            .is_empty()
    };
    assert!(none(
        MigrationRole::Source,
        &[],
        CarryScope::Clusters(&clusters)
    ));
    assert!(none(MigrationRole::Target, &kinds, CarryScope::Validating));
    assert!(none(
        MigrationRole::Source,
        &kinds,
        CarryScope::Clusters(&[])
    ));
    assert!(none(
        MigrationRole::Target,
        &kinds,
        CarryScope::Clusters(&[])
    ));
}

#[test]
fn bootstrap_objects_are_spread_over_works_the_agent_applies_side_by_side() {
    // (identities, shape) -> the number of manifests in each work, in order.
    let cases: [(usize, Shape, &[usize]); 5] = [
        (1, Shape::MultipleHubsConfig, &[2]),
        (3, Shape::MultipleHubsConfig, &[2, 2, 2]),
        (60, Shape::MultipleHubsConfig, &[12; 10]),
        (25, Shape::ManifestWork, &[3, 3, 3, 3, 3, 3, 3, 3, 1]),
        (
            95,
            Shape::BootstrapKubeConfigs,
            &[20, 20, 20, 20, 20, 20, 20, 20, 20, 10],
        ),
    ];
    for (identities, shape, sizes) in cases {
        let texts: Vec<String> = (0..identities).map(|i| format!("kc{i}")).collect();
        let objs = bootstrap_manifests(&m(), "ns", &texts, shape).unwrap();
        let works = bootstrap_works(&m(), objs.clone(), identities);
        let got: Vec<usize> = works
            .iter()
            .map(|w| w["spec"]["workload"]["manifests"].as_array().unwrap().len())
            .collect();
        assert_eq!(got, sizes, "{identities} identities, {shape:?}");
        assert!(works.len() <= WORKS_AT_ONCE, "{identities}");
        // Every object once, in order; each identity's Secret beside its KlusterletConfig.
        let all: Vec<&Value> = works
            .iter()
            .flat_map(|w| w["spec"]["workload"]["manifests"].as_array().unwrap())
            .collect();
        assert_eq!(all, objs.iter().collect::<Vec<_>>());
        for w in &works {
            let kinds: Vec<&str> = w["spec"]["workload"]["manifests"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["kind"].as_str().unwrap())
                .collect();
            if shape != Shape::ManifestWork {
                assert!(
                    kinds.chunks(2).all(|p| p == ["Secret", "KlusterletConfig"]),
                    "{kinds:?}"
                );
            }
            // Its KlusterletConfigs, and nothing else, are watched rather than polled.
            let configs: Vec<Value> = w["spec"]["workload"]["manifests"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|o| o["kind"] == "KlusterletConfig")
                .map(|o| json!({
                    "resourceIdentifier": {"group": "config.open-cluster-management.io", "resource": "klusterletconfigs", "name": o["metadata"]["name"]},
                    "feedbackScrapeType": "Watch"
                }))
                .collect();
            if configs.is_empty() {
                assert!(w["spec"].get("manifestConfigs").is_none(), "{shape:?}");
            } else {
                assert_eq!(w["spec"]["manifestConfigs"], json!(configs), "{shape:?}");
                let typed: ManifestWork = serde_json::from_value(w.clone()).unwrap();
                assert!(typed.spec.manifest_configs.unwrap().iter().all(|c| {
                    c.feedback_scrape_type == Some(FeedbackScrapeType::Watch)
                        && c.feedback_rules.is_none()
                }));
            }
        }
        // The first keeps the work's own name, the rest are its numbered parts.
        let names: Vec<&str> = works
            .iter()
            .map(|w| w["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names[0], names::migration_bootstrap_work(&m().key));
        for (i, n) in names.iter().enumerate().skip(1) {
            assert_eq!(*n, names::migration_bootstrap_part(&m().key, i));
        }
    }
}

/// A task is applied server-side when its work is new or already does so; a work made by a
/// manager from before (upstream's `Update`) keeps that until it goes, since a server-side apply
/// would not remove the fields that update owns.
#[test]
fn a_task_is_applied_server_side_unless_its_work_already_updates_it() {
    let made_with = |ssa: bool| -> ManifestWork {
        serde_json::from_value(work(
            &m(),
            MigrationRole::Source,
            vec![],
            task_config(&m(), "ns", ssa),
        ))
        .unwrap()
    };
    let mut create_only = made_with(true);
    create_only.spec.manifest_configs.as_mut().unwrap()[0]
        .update_strategy
        .as_mut()
        .unwrap()
        .type_ = migration_api::ocm::work::UpdateStrategyType::CreateOnly;
    let no_configs: ManifestWork = serde_json::from_value(json!({
        "metadata": {"name": "migration-move-0a1b2c3d-source", "namespace": "hub1"},
        "spec": {"workload": {"manifests": []}}
    }))
    .unwrap();
    let rows: [(&str, Option<&ManifestWork>, bool); 5] = [
        ("no work yet", None, true),
        (
            "a work applying it server-side",
            Some(&made_with(true)),
            true,
        ),
        (
            "a work of the Update strategy",
            Some(&made_with(false)),
            false,
        ),
        ("a work of another strategy", Some(&create_only), false),
        ("a work without manifest configs", Some(&no_configs), false),
    ];
    for (what, existing, expected) in rows {
        assert_eq!(task_server_side_apply(existing), expected, "{what}");
    }
}
