//! HTTPS, authentication (static, ServiceAccount and secret-bound tokens, client certificates
//! from approved CSRs), RBAC authorization and access reviews.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use base64::Engine;
use common::{eventually, start, start_with};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::authorization::v1::{SelfSubjectAccessReview, SubjectAccessReview};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube_sim::{Options, client_from_kubeconfig};
use serde_json::json;

fn code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn grant_configmap_reader(client: &kube::Client, subject: serde_json::Value) {
    let roles: Api<Role> = Api::namespaced(client.clone(), "default");
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), "default");
    let role = json!({"metadata": {"name": "cm-reader"}, "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]});
    roles
        .create(
            &PostParams::default(),
            &serde_json::from_value(role).unwrap(),
        )
        .await
        .unwrap();
    let binding = json!({"metadata": {"name": "cm-reader"}, "subjects": [subject],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"}});
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(binding).unwrap(),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn tokens_rbac_and_expiry() {
    let sim = start_with(Options {
        min_token_expiration_secs: 1,
        ..Default::default()
    })
    .await;
    let admin = sim.client().await.unwrap();
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "robot"}})).unwrap(),
    )
    .await
    .unwrap();
    let tr: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 2}})).unwrap();
    let token = sas
        .create_token_request("robot", &PostParams::default(), &tr)
        .await
        .unwrap();
    let token = token.status.unwrap().token;
    let robot = client_from_kubeconfig(&sim.kubeconfig_for_token(&token))
        .await
        .unwrap();
    let robot_cms: Api<ConfigMap> = Api::namespaced(robot.clone(), "default");
    // Authenticated but not authorized: 403.
    assert_eq!(
        code(robot_cms.list(&ListParams::default()).await.unwrap_err()),
        403
    );
    grant_configmap_reader(
        &admin,
        json!({"kind": "ServiceAccount", "name": "robot", "namespace": "default"}),
    )
    .await;
    robot_cms.list(&ListParams::default()).await.unwrap();
    // Other verbs, other namespaces stay forbidden.
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
    assert_eq!(
        code(
            robot_cms
                .create(&PostParams::default(), &cm)
                .await
                .unwrap_err()
        ),
        403
    );
    let other: Api<ConfigMap> = Api::namespaced(robot.clone(), "kube-system");
    assert_eq!(
        code(other.list(&ListParams::default()).await.unwrap_err()),
        403
    );
    // The token expires: 401.
    eventually(Duration::from_secs(10), "the token to expire", || {
        let robot_cms = robot_cms.clone();
        async move {
            match robot_cms.list(&ListParams::default()).await {
                Err(kube::Error::Api(s)) if s.code == 401 => Some(()),
                _ => None,
            }
        }
    })
    .await;
    // A garbage token: 401.
    let bogus = client_from_kubeconfig(&sim.kubeconfig_for_token("not-a-token"))
        .await
        .unwrap();
    let bogus_cms: Api<ConfigMap> = Api::namespaced(bogus, "default");
    assert_eq!(
        code(bogus_cms.list(&ListParams::default()).await.unwrap_err()),
        401
    );
}

#[tokio::test]
async fn revoking_the_service_account_revokes_its_tokens() {
    let sim = start().await;
    let admin = sim.client().await.unwrap();
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "robot"}})).unwrap(),
    )
    .await
    .unwrap();
    grant_configmap_reader(
        &admin,
        json!({"kind": "ServiceAccount", "name": "robot", "namespace": "default"}),
    )
    .await;
    // A secret-bound token, filled in by the token controller.
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "default");
    let s = json!({"metadata": {"name": "robot-token", "annotations": {"kubernetes.io/service-account.name": "robot"}},
                   "type": "kubernetes.io/service-account-token"});
    secrets
        .create(&PostParams::default(), &serde_json::from_value(s).unwrap())
        .await
        .unwrap();
    let secret = eventually(
        Duration::from_secs(10),
        "the token secret to be populated",
        || {
            let secrets = secrets.clone();
            async move {
                secrets
                    .get("robot-token")
                    .await
                    .ok()
                    .filter(|s| s.data.as_ref().is_some_and(|d| d.contains_key("token")))
            }
        },
    )
    .await;
    let data = secret.data.unwrap();
    let token = String::from_utf8(data["token"].0.clone()).unwrap();
    assert_eq!(
        String::from_utf8(data["ca.crt"].0.clone()).unwrap(),
        sim.ca_pem()
    );
    let robot = client_from_kubeconfig(&sim.kubeconfig_for_token(&token))
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(robot, "default");
    cms.list(&ListParams::default()).await.unwrap();
    sas.delete("robot", &DeleteParams::default()).await.unwrap();
    assert_eq!(
        code(cms.list(&ListParams::default()).await.unwrap_err()),
        401
    );
}

#[tokio::test]
async fn approved_csr_yields_a_working_client_certificate() {
    let sim = start().await;
    let admin = sim.client().await.unwrap();
    let groups = vec![
        "system:open-cluster-management:cluster1".to_owned(),
        "readers".to_owned(),
    ];
    let (csr_pem, key_pem) =
        kube_sim::pki::make_csr("system:open-cluster-management:cluster1:agent", &groups).unwrap();
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let b64 = base64::engine::general_purpose::STANDARD.encode(&csr_pem);
    let csr = json!({"metadata": {"name": "c1"}, "spec": {"request": b64, "signerName": "kubernetes.io/kube-apiserver-client",
        "usages": ["digital signature", "key encipherment", "client auth"], "expirationSeconds": 3600}});
    let created = csrs
        .create(
            &PostParams::default(),
            &serde_json::from_value(csr).unwrap(),
        )
        .await
        .unwrap();
    // The server records who asked.
    assert_eq!(created.spec.username.as_deref(), Some("kube-sim-admin"));
    // Approve through the approval subresource.
    let approval = json!({"status": {"conditions": [{"type": "Approved", "status": "True", "reason": "Test", "message": "ok"}]}});
    csrs.patch_approval("c1", &PatchParams::default(), &Patch::Merge(approval))
        .await
        .unwrap();
    let cert = eventually(Duration::from_secs(10), "the certificate", || {
        let csrs = csrs.clone();
        async move {
            csrs.get("c1")
                .await
                .ok()
                .and_then(|c| c.status.and_then(|s| s.certificate))
        }
    })
    .await;
    let cert_pem = String::from_utf8(cert.0).unwrap();
    grant_configmap_reader(&admin, json!({"kind": "Group", "name": "readers"})).await;
    let agent = client_from_kubeconfig(&sim.kubeconfig_for_cert(&cert_pem, &key_pem))
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(agent.clone(), "default");
    cms.list(&ListParams::default()).await.unwrap();
    // Who am I, per the server: the CSR's subject.
    let ssar: Api<SelfSubjectAccessReview> = Api::all(agent);
    let review = json!({"spec": {"resourceAttributes": {"verb": "list", "resource": "configmaps", "namespace": "default"}}});
    let answer = ssar
        .create(
            &PostParams::default(),
            &serde_json::from_value(review).unwrap(),
        )
        .await
        .unwrap();
    assert!(answer.status.unwrap().allowed);
}

#[tokio::test]
async fn subject_access_reviews_answer_from_rbac() {
    let sim = start().await;
    let admin = sim.client().await.unwrap();
    grant_configmap_reader(&admin, json!({"kind": "User", "name": "alice"})).await;
    let sar: Api<SubjectAccessReview> = Api::all(admin);
    let ask = |user: &str, verb: &str| {
        serde_json::from_value::<SubjectAccessReview>(json!({"spec": {"user": user,
            "resourceAttributes": {"verb": verb, "resource": "configmaps", "namespace": "default"}}}))
        .unwrap()
    };
    let yes = sar
        .create(&PostParams::default(), &ask("alice", "get"))
        .await
        .unwrap();
    assert!(yes.status.unwrap().allowed);
    let no = sar
        .create(&PostParams::default(), &ask("alice", "delete"))
        .await
        .unwrap();
    assert!(!no.status.unwrap().allowed);
    let no = sar
        .create(&PostParams::default(), &ask("bob", "get"))
        .await
        .unwrap();
    assert!(!no.status.unwrap().allowed);
}

#[tokio::test]
async fn plain_http_mode_needs_no_credentials() {
    let sim = kube_sim::KubeSim::start(Options {
        insecure_http: true,
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(sim.url().starts_with("http://"));
    let client = sim.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    cms.list(&ListParams::default()).await.unwrap();
}

/// kube-controller-manager's ClusterRole aggregation (`pkg/controller/clusterroleaggregation`)
/// and the bootstrap policy's aggregated `admin`: a ClusterRole labelled for an aggregated
/// role adds its rules there, and takes them away when the label goes.
#[tokio::test]
async fn cluster_roles_aggregate_by_label() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let sim = start().await;
    let admin = sim.client().await.unwrap();
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    // `admin` (built in) gathers edit and view: Secrets and Deployments in any namespace.
    eventually(Duration::from_secs(5), "admin aggregated", || async {
        let r = roles.get("admin").await.ok()?;
        let rules = serde_json::to_string(&r.rules?).ok()?;
        (rules.contains("secrets")
            && rules.contains("deployments")
            && rules.contains("rolebindings"))
        .then_some(())
    })
    .await;
    let apply = |v: serde_json::Value| {
        let roles = roles.clone();
        async move {
            let name = v["metadata"]["name"].as_str().unwrap().to_owned();
            roles
                .patch(
                    &name,
                    &PatchParams::apply("test").force(),
                    &Patch::Apply(&v),
                )
                .await
                .unwrap();
        }
    };
    apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "work-aggregate"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"example.io/aggregate-to-work": "true"}}]},
        "rules": []}))
    .await;
    apply(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "cm-reader", "labels": {"example.io/aggregate-to-work": "true"}},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]}),
    )
    .await;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &serde_json::from_value(json!({
            "metadata": {"name": "robot-work"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "work-aggregate"},
            "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": "default"}]})).unwrap())
        .await
        .unwrap();
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "robot"}})).unwrap(),
    )
    .await
    .unwrap();
    let tr: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .unwrap();
    let token = sas
        .create_token_request("robot", &PostParams::default(), &tr)
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let robot = client_from_kubeconfig(&sim.kubeconfig_for_token(&token))
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(robot, "kube-system");
    eventually(
        Duration::from_secs(5),
        "the aggregated rule allows",
        || async { cms.list(&ListParams::default()).await.ok().map(|_| ()) },
    )
    .await;
    // The label goes: so does the rule.
    apply(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "cm-reader", "labels": {}},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]}),
    )
    .await;
    eventually(Duration::from_secs(5), "the rule taken away", || async {
        match cms.list(&ListParams::default()).await {
            Err(kube::Error::Api(s)) if s.code == 403 => Some(()),
            _ => None,
        }
    })
    .await;
    let aggregated = roles.get("work-aggregate").await.unwrap();
    assert_eq!(aggregated.rules, Some(vec![]));
}

/// A server-side apply that creates its object is authorized for `create` on that name as well
/// as for `patch` (k8s.io/apiserver `pkg/endpoints/handlers/patch.go`,
/// `createAuthorizerAttributes`): `patch` alone may change an existing object but not create
/// one, and `create` limited by `resourceNames` allows creating exactly that name.
/// A client of the API server as ServiceAccount `default/name`, with a token an hour long.
async fn service_account_client(
    sim: &kube_sim::KubeSim,
    admin: &kube::Client,
    name: &str,
) -> kube::Client {
    let tr: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .unwrap();
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), "default")
        .create_token_request(name, &PostParams::default(), &tr)
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    client_from_kubeconfig(&sim.kubeconfig_for_token(&token))
        .await
        .unwrap()
}

#[tokio::test]
async fn an_apply_that_creates_needs_create_on_the_name() {
    let sim = start().await;
    let admin = sim.client().await.unwrap();
    Api::<ServiceAccount>::namespaced(admin.clone(), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "applier"}})).unwrap(),
        )
        .await
        .unwrap();
    let rules = |extra: serde_json::Value| {
        let mut r = vec![
            json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch"]}),
        ];
        if !extra.is_null() {
            r.push(extra);
        }
        json!({"metadata": {"name": "applier"}, "rules": r})
    };
    let roles: Api<Role> = Api::namespaced(admin.clone(), "default");
    roles
        .create(
            &PostParams::default(),
            &serde_json::from_value(rules(serde_json::Value::Null)).unwrap(),
        )
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "applier"},
            "subjects": [{"kind": "ServiceAccount", "name": "applier", "namespace": "default"}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "applier"}})).unwrap())
        .await
        .unwrap();
    let applier = service_account_client(&sim, &admin, "applier").await;
    let cms: Api<ConfigMap> = Api::namespaced(applier, "default");
    let apply = |name: &str| {
        let cms = cms.clone();
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}});
        let name = name.to_owned();
        async move {
            cms.patch(&name, &PatchParams::apply("test"), &Patch::Apply(body))
                .await
        }
    };
    // patch alone: no create by apply.
    assert_eq!(code(apply("made").await.unwrap_err()), 403);
    // An existing object may be applied to.
    Api::<ConfigMap>::namespaced(admin.clone(), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "there"}})).unwrap(),
        )
        .await
        .unwrap();
    apply("there").await.unwrap();
    // create on one name: that name may be created by apply, no other.
    roles
        .replace(
            "applier",
            &PostParams::default(),
            &serde_json::from_value(rules(json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"], "resourceNames": ["made"]}))).unwrap(),
        )
        .await
        .unwrap();
    apply("made").await.unwrap();
    assert_eq!(code(apply("other").await.unwrap_err()), 403);
}

/// The CertificateApproval admission plugin: a user allowed to write a CSR's approval is still
/// refused unless it may `approve` the CSR's signer (by its name, or its domain's `/*`).
#[tokio::test]
async fn approving_a_csr_needs_approve_on_its_signer() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let sim = start().await;
    let admin = sim.client().await.unwrap();
    Api::<ServiceAccount>::namespaced(admin.clone(), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "approver"}})).unwrap(),
        )
        .await
        .unwrap();
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let role = |signer: Option<&str>| {
        let mut rules = vec![json!({"apiGroups": ["certificates.k8s.io"],
            "resources": ["certificatesigningrequests", "certificatesigningrequests/approval"],
            "verbs": ["get", "update", "patch"]})];
        if let Some(s) = signer {
            rules.push(
                json!({"apiGroups": ["certificates.k8s.io"], "resources": ["signers"],
                "resourceNames": [s], "verbs": ["approve"]}),
            );
        }
        serde_json::from_value::<ClusterRole>(
            json!({"metadata": {"name": "approver"}, "rules": rules}),
        )
        .unwrap()
    };
    roles
        .create(&PostParams::default(), &role(None))
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "approver"},
            "subjects": [{"kind": "ServiceAccount", "name": "approver", "namespace": "default"}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "approver"}})).unwrap())
        .await
        .unwrap();
    let approver = service_account_client(&sim, &admin, "approver").await;
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let mine: Api<CertificateSigningRequest> = Api::all(approver);
    let approval = json!({"status": {"conditions": [{"type": "Approved", "status": "True", "reason": "Test", "message": "ok"}]}});
    // (the signer the role may approve, whether the approval goes through)
    let table = [
        (None, false),
        (Some("example.com/other"), false),
        (Some("kubernetes.io/kube-apiserver-client"), true),
        (Some("kubernetes.io/*"), true),
    ];
    for (i, (signer, allowed)) in table.into_iter().enumerate() {
        let name = format!("c{i}");
        let (csr_pem, _) = kube_sim::pki::make_csr("someone", &["group".to_owned()]).unwrap();
        let b64 = base64::engine::general_purpose::STANDARD.encode(&csr_pem);
        let csr = json!({"metadata": {"name": name}, "spec": {"request": b64,
            "signerName": "kubernetes.io/kube-apiserver-client", "usages": ["client auth"]}});
        csrs.create(
            &PostParams::default(),
            &serde_json::from_value(csr).unwrap(),
        )
        .await
        .unwrap();
        let mut current = roles.get("approver").await.unwrap();
        current.rules = role(signer).rules;
        roles
            .replace("approver", &PostParams::default(), &current)
            .await
            .unwrap();
        let result = mine
            .patch_approval(&name, &PatchParams::default(), &Patch::Merge(&approval))
            .await;
        match (allowed, result) {
            (true, Ok(_)) => {}
            (false, Err(e)) => assert_eq!(code(e), 403, "row {i}"),
            (want, got) => panic!("row {i}: allowed {want}, got {got:?}"),
        }
    }
}
