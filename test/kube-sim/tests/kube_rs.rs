//! Conformance through kube-rs: CRUD, errors, status subresource, generation, server-side
//! apply with two managers, selectors, pagination, finalizers and garbage collection.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Widget, WidgetStatus, eventually, start, widget};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn crud_and_status_codes() {
    let sim = start().await;
    let api: Api<Widget> = Api::namespaced(sim.client().await.unwrap(), "default");
    let created = api
        .create(&PostParams::default(), &widget("w1", 3))
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    assert_eq!(
        code(
            api.create(&PostParams::default(), &widget("w1", 3))
                .await
                .unwrap_err()
        ),
        409
    );
    assert_eq!(code(api.get("nope").await.unwrap_err()), 404);
    // Schema violation: 422, store unchanged.
    assert_eq!(
        code(
            api.create(&PostParams::default(), &widget("w2", 101))
                .await
                .unwrap_err()
        ),
        422
    );
    assert_eq!(code(api.get("w2").await.unwrap_err()), 404);
    // Stale resourceVersion: 409.
    let mut stale = created.clone();
    let mut fresh = created.clone();
    fresh.spec.size = 4;
    let updated = api
        .replace("w1", &PostParams::default(), &fresh)
        .await
        .unwrap();
    assert_eq!(updated.metadata.generation, Some(2));
    stale.spec.size = 5;
    assert_eq!(
        code(
            api.replace("w1", &PostParams::default(), &stale)
                .await
                .unwrap_err()
        ),
        409
    );
    // Namespace that does not exist: 404.
    let other: Api<Widget> = Api::namespaced(sim.client().await.unwrap(), "missing");
    assert_eq!(
        code(
            other
                .create(&PostParams::default(), &widget("x", 1))
                .await
                .unwrap_err()
        ),
        404
    );
    // generateName.
    let mut generated = widget("", 1);
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("auto-".into());
    let g = api
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    assert!(g.name_any().starts_with("auto-") && g.name_any().len() == 10);
}

#[tokio::test]
async fn status_subresource_and_generation() {
    let sim = start().await;
    let api: Api<Widget> = Api::namespaced(sim.client().await.unwrap(), "default");
    let mut w = widget("w", 1);
    w.status = Some(WidgetStatus {
        phase: Some("ignored-on-create".into()),
        ..Default::default()
    });
    let created = api.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(created.status, None, "status is reset on create");
    // A status write changes only status, and not generation.
    let patched = api
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 9}, "status": {"phase": "Ready"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.spec.size, 1);
    assert_eq!(patched.status.unwrap().phase.as_deref(), Some("Ready"));
    assert_eq!(patched.metadata.generation, Some(1));
    // A main-resource write ignores status.
    let patched = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}, "status": {"phase": "Other"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.spec.size, 2);
    assert_eq!(patched.status.unwrap().phase.as_deref(), Some("Ready"));
    assert_eq!(patched.metadata.generation, Some(2));
    // Metadata-only changes keep generation.
    let patched = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.generation, Some(2));
    // A no-op write does not bump resourceVersion.
    let again = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        patched.metadata.resource_version
    );
}

#[tokio::test]
async fn server_side_apply_with_two_managers() {
    let sim = start().await;
    let api: Api<Widget> = Api::namespaced(sim.client().await.unwrap(), "default");
    let apply = |m: &str| PatchParams::apply(m);
    let a = json!({"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1, "color": "red"}});
    let created = api
        .patch("w", &apply("alice"), &Patch::Apply(&a))
        .await
        .unwrap();
    assert_eq!(created.spec.color.as_deref(), Some("red"));
    let b = json!({"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1, "owner": "bob"}});
    let both = api
        .patch("w", &apply("bob"), &Patch::Apply(&b))
        .await
        .unwrap();
    assert_eq!(
        (both.spec.color.as_deref(), both.spec.owner.as_deref()),
        (Some("red"), Some("bob"))
    );
    let managers: Vec<String> = both
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers.contains(&"alice".into()) && managers.contains(&"bob".into()),
        "{managers:?}"
    );
    // Conflict: bob sets alice's color to another value.
    let conflict = json!({"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1, "owner": "bob", "color": "blue"}});
    let err = api
        .patch("w", &apply("bob"), &Patch::Apply(&conflict))
        .await
        .unwrap_err();
    assert_eq!(code(err), 409);
    let forced = api
        .patch("w", &apply("bob").force(), &Patch::Apply(&conflict))
        .await
        .unwrap();
    assert_eq!(forced.spec.color.as_deref(), Some("blue"));
    // alice stops applying color (she no longer owns it) and bob drops owner: owner goes.
    let b2 = json!({"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1, "color": "blue"}});
    let dropped = api
        .patch("w", &apply("bob"), &Patch::Apply(&b2))
        .await
        .unwrap();
    assert_eq!(dropped.spec.owner, None);
    assert_eq!(dropped.spec.color.as_deref(), Some("blue"));
    // Apply to status merges conditions per type between managers.
    let s1 = json!({"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let s2 = json!({"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w"}, "status": {"conditions": [{"type": "Healthy", "status": "False"}]}});
    api.patch_status("w", &apply("ready-writer"), &Patch::Apply(&s1))
        .await
        .unwrap();
    let st = api
        .patch_status("w", &apply("health-writer"), &Patch::Apply(&s2))
        .await
        .unwrap();
    let conds = st.status.unwrap().conditions;
    assert_eq!(
        conds.len(),
        2,
        "conditions are a list-map keyed by type: {conds:?}"
    );
    // Changing the other manager's condition conflicts.
    let s3 = json!({"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w"}, "status": {"conditions": [{"type": "Ready", "status": "False"}]}});
    assert_eq!(
        code(
            api.patch_status("w", &apply("health-writer"), &Patch::Apply(&s3))
                .await
                .unwrap_err()
        ),
        409
    );
    // A second apply with the same content changes nothing.
    let again = api
        .patch("w", &apply("bob"), &Patch::Apply(&b2))
        .await
        .unwrap();
    let before = api.get("w").await.unwrap();
    assert_eq!(again.resource_version(), before.resource_version());
}

#[tokio::test]
async fn selectors_and_pagination() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..7 {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("cm{i}"),
            "labels": {"tier": if i % 2 == 0 { "web" } else { "db" }, "idx": i.to_string()}}}))
        .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let names = |l: kube::api::ObjectList<ConfigMap>| {
        l.items.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("tier=web"))
                .await
                .unwrap()
        ),
        ["cm0", "cm2", "cm4", "cm6"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("tier!=web,idx in (1,3)"))
                .await
                .unwrap()
        ),
        ["cm1", "cm3"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("idx notin (0,1,2,3,4,5),!missing"))
                .await
                .unwrap()
        ),
        ["cm6"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().fields("metadata.name=cm5"))
                .await
                .unwrap()
        ),
        ["cm5"]
    );
    // Pages of 3.
    let mut seen = Vec::new();
    let mut lp = ListParams::default().limit(3);
    loop {
        let page = api.list(&lp).await.unwrap();
        let token = page.metadata.continue_.clone();
        seen.extend(names(page));
        match token {
            Some(t) if !t.is_empty() => lp = lp.continue_token(&t),
            _ => break,
        }
    }
    assert_eq!(seen.len(), 7);
    // Cluster-wide list of a namespaced kind.
    let all: Api<ConfigMap> = Api::all(client.clone());
    assert_eq!(
        all.list(&ListParams::default().labels("tier"))
            .await
            .unwrap()
            .items
            .len(),
        7
    );
    // An unsupported field label is a 400.
    assert_eq!(
        code(
            api.list(&ListParams::default().fields("data.x=1"))
                .await
                .unwrap_err()
        ),
        400
    );
}

#[tokio::test]
async fn finalizers_hold_deletion() {
    let sim = start().await;
    let api: Api<Widget> = Api::namespaced(sim.client().await.unwrap(), "default");
    let mut w = widget("held", 1);
    w.metadata.finalizers = Some(vec!["example.io/hold".into()]);
    api.create(&PostParams::default(), &w).await.unwrap();
    let res = api.delete("held", &DeleteParams::default()).await.unwrap();
    assert!(res.is_left(), "still present: the object comes back");
    let held = api.get("held").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    // New finalizers cannot be added while deleting.
    let err = api
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.io/hold", "x/y"]}})),
        )
        .await
        .unwrap_err();
    assert_eq!(code(err), 422);
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(code(api.get("held").await.unwrap_err()), 404);
}

fn owned_cm(name: &str, owner: &Widget) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": [{
        "apiVersion": "example.io/v1", "kind": "Widget", "name": owner.name_any(),
        "uid": owner.uid().unwrap(), "blockOwnerDeletion": true}]}}))
    .unwrap()
}

#[tokio::test]
async fn garbage_collection_background_foreground_orphan() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let widgets: Api<Widget> = Api::namespaced(client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for (name, policy) in [
        ("bg", None),
        ("fg", Some("Foreground")),
        ("orphan", Some("Orphan")),
    ] {
        let owner = widgets
            .create(&PostParams::default(), &widget(name, 1))
            .await
            .unwrap();
        cms.create(
            &PostParams::default(),
            &owned_cm(&format!("{name}-child"), &owner),
        )
        .await
        .unwrap();
        let dp = match policy {
            Some("Foreground") => DeleteParams::foreground(),
            Some("Orphan") => DeleteParams::orphan(),
            _ => DeleteParams::background(),
        };
        widgets.delete(name, &dp).await.unwrap();
        let cms2 = cms.clone();
        let widgets2 = widgets.clone();
        let child = format!("{name}-child");
        eventually(Duration::from_secs(10), &format!("{name} deletion"), || {
            let (cms, widgets, child) = (cms2.clone(), widgets2.clone(), child.clone());
            async move {
                let owner_gone = widgets.get_opt(name).await.unwrap().is_none();
                let child_now = cms.get_opt(&child).await.unwrap();
                let ok = match policy {
                    Some("Orphan") => {
                        owner_gone
                            && child_now
                                .as_ref()
                                .is_some_and(|c| c.owner_references().is_empty())
                    }
                    _ => owner_gone && child_now.is_none(),
                };
                ok.then_some(())
            }
        })
        .await;
    }
}

#[tokio::test]
async fn namespace_deletion_removes_contents() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
    )
    .await
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "team");
    let s: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}}))
            .unwrap();
    let created = secrets.create(&PostParams::default(), &s).await.unwrap();
    assert_eq!(created.data.unwrap()["k"].0, b"v");
    nss.delete("team", &DeleteParams::default()).await.unwrap();
    // Terminating: no new content.
    let w: Api<Widget> = Api::namespaced(client.clone(), "team");
    let err = w.create(&PostParams::default(), &widget("late", 1)).await;
    if let Err(e) = err {
        assert!(matches!(code(e), 403 | 404));
    }
    eventually(Duration::from_secs(10), "namespace gone", || {
        let nss = nss.clone();
        async move { nss.get_opt("team").await.unwrap().is_none().then_some(()) }
    })
    .await;
    assert!(
        secrets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn conditions_list_map_merge_on_builtin_status_and_patches() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"a": "1"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    let p = api
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
            {"op": "test", "path": "/data/a", "value": "1"},
            {"op": "add", "path": "/data/b", "value": "2"}]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(p.data.unwrap().len(), 2);
    let failed = api
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
            {"op": "test", "path": "/data/a", "value": "nope"}]))
                .unwrap(),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(code(failed), 422);
    let s = api
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Strategic(json!({"data": {"c": "3"}})),
        )
        .await
        .unwrap();
    assert_eq!(s.data.unwrap().len(), 3);
    // Strategic merge on a custom resource is 415.
    let w: Api<Widget> = Api::namespaced(sim.client().await.unwrap(), "default");
    w.create(&PostParams::default(), &widget("w", 1))
        .await
        .unwrap();
    let err = w
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 2}})),
        )
        .await
        .unwrap_err();
    assert_eq!(code(err), 415);
}

/// client-go's client-side rate limit: past its burst a throttled client's requests go at its
/// rate (a lower bound only: nothing here can be slow enough to fail it), and answers come
/// back as they would unthrottled.
#[tokio::test]
async fn a_throttled_client_sends_past_its_burst_at_its_rate() {
    use kube_sim::throttle::{Clientsets, Limits, throttled};
    let sim = start().await;
    let limits = Limits {
        qps: 20.0,
        burst: 2,
        clientsets: Clientsets::Single,
    };
    let client = throttled(sim.client().await.unwrap(), limits);
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let started = std::time::Instant::now();
    for i in 0..8 {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("cm-{i}")}})).unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    // 2 at once, then 6 at 20 a second.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(290),
        "8 requests took {took:?}"
    );
    assert_eq!(code(cms.get("missing").await.unwrap_err()), 404);
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        8
    );
}

/// Metadata-only reads (kube-rs's `Api<PartialObjectMeta<K>>`, client-go's metadata informers):
/// lists, gets and watches carry each object's metadata and nothing else; a media type the
/// server cannot serve to the verb is passed over for the next, and 406 when none is left.
#[tokio::test]
async fn metadata_only_reads_carry_the_metadata_alone() {
    use futures::StreamExt;
    use kube::core::PartialObjectMeta;
    use kube::runtime::{WatchStreamExt, watcher};

    let sim = start().await;
    let client = sim.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "big", "labels": {"app": "x"}, "finalizers": ["example.com/keep"]},
        "data": {"payload": "x".repeat(10_000)}
    }))
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();

    let listed = cms.list_metadata(&ListParams::default()).await.unwrap();
    let item = listed.items.iter().find(|m| m.name_any() == "big").unwrap();
    assert_eq!(item.labels().get("app").map(String::as_str), Some("x"));
    assert_eq!(item.finalizers(), ["example.com/keep"]);
    let got = cms.get_metadata("big").await.unwrap();
    assert_eq!(got.metadata.uid, item.metadata.uid);

    // On the wire: metadata alone, of the kinds the apiserver names.
    let raw = |accept: &str| {
        http::Request::get("/api/v1/namespaces/default/configmaps")
            .header("Accept", accept)
            .body(Vec::new())
            .unwrap()
    };
    let text = client
        .request_text(raw(
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        ))
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["kind"], "PartialObjectMetadataList");
    assert_eq!(v["items"][0]["kind"], "PartialObjectMetadata");
    assert!(v["items"][0].get("data").is_none(), "{text}");
    assert!(
        !text.contains(&"x".repeat(100)),
        "no data on the wire: {text}"
    );
    // A list asked for as single objects' metadata is not served; with a fallback, the
    // fallback is.
    let refused = client
        .request_text(raw(
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        ))
        .await
        .unwrap_err();
    assert_eq!(code(refused), 406);
    let text = client
        .request_text(raw(
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json",
        ))
        .await
        .unwrap();
    assert!(text.contains(&"x".repeat(100)), "the whole list: {text}");

    // A watch of metadata: the object as it is, then its changes, without the data.
    let metas: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(client.clone(), "default");
    let stream = watcher(metas, watcher::Config::default()).applied_objects();
    let mut stream = std::pin::pin!(stream);
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.name_any(), "big");
    cms.patch(
        "big",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"changed": "yes"}}})),
    )
    .await
    .unwrap();
    let changed = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        changed.annotations().get("changed").map(String::as_str),
        Some("yes")
    );
}
