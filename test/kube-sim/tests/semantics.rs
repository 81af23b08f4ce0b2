//! More of the server's semantics: selector transitions in watches, 410 inside a watch
//! stream, delete preconditions, Events shared between API groups, CRD deletion.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Widget, eventually, start, start_with, widget};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, WatchEvent,
    WatchParams,
};
use kube_sim::Options;
use serde_json::json;

#[tokio::test]
async fn objects_entering_and_leaving_a_selector_arrive_as_added_and_deleted() {
    let sim = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().await.unwrap(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c", "labels": {"team": "a"}}}))
            .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let rv = cms
        .list_metadata(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let stream = cms
        .watch(&WatchParams::default().labels("team=b").timeout(30), &rv)
        .await
        .unwrap();
    let mut stream = std::pin::pin!(stream);
    let label = |t: &str| Patch::Merge(json!({"metadata": {"labels": {"team": t}}}));
    cms.patch("c", &PatchParams::default(), &label("b"))
        .await
        .unwrap();
    cms.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "1"}})),
    )
    .await
    .unwrap();
    cms.patch("c", &PatchParams::default(), &label("c"))
        .await
        .unwrap();
    let mut kinds = Vec::new();
    while kinds.len() < 3 {
        match tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            WatchEvent::Added(_) => kinds.push("ADDED"),
            WatchEvent::Modified(_) => kinds.push("MODIFIED"),
            WatchEvent::Deleted(_) => kinds.push("DELETED"),
            _ => {}
        }
    }
    assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"]);
}

#[tokio::test]
async fn an_expired_resource_version_is_a_410_inside_the_stream() {
    let sim = start_with(Options {
        event_log_capacity: 16,
        ..Default::default()
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().await.unwrap(), "default");
    for i in 0..40 {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("c{i}")}})).unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    let stream = cms
        .watch(&WatchParams::default().timeout(10), "2")
        .await
        .unwrap();
    let mut stream = std::pin::pin!(stream);
    match tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .unwrap()
    {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
}

#[tokio::test]
async fn delete_preconditions() {
    let sim = start().await;
    let widgets: Api<Widget> = Api::namespaced(sim.client().await.unwrap(), "default");
    let w = widgets
        .create(&PostParams::default(), &widget("w", 1))
        .await
        .unwrap();
    let wrong = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("not-the-uid".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match widgets.delete("w", &wrong).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 409),
        other => panic!("expected 409, got {other:?}"),
    }
    let right = DeleteParams {
        preconditions: Some(Preconditions {
            uid: w.metadata.uid.clone(),
            resource_version: w.metadata.resource_version.clone(),
        }),
        ..Default::default()
    };
    widgets.delete("w", &right).await.unwrap();
    assert!(widgets.get_opt("w").await.unwrap().is_none());
}

#[tokio::test]
async fn events_are_shared_between_core_and_events_k8s_io() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let new: Api<Event> = Api::namespaced(client.clone(), "default");
    let e = json!({"metadata": {"name": "e1"}, "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "test",
        "reportingInstance": "test-1", "action": "Reconcile", "reason": "Started", "type": "Normal", "note": "hello",
        "regarding": {"kind": "Widget", "name": "w", "namespace": "default"}});
    new.create(&PostParams::default(), &serde_json::from_value(e).unwrap())
        .await
        .unwrap();
    let core: Api<CoreEvent> = Api::namespaced(client, "default");
    let seen = core.get("e1").await.unwrap();
    assert_eq!(seen.message.as_deref(), Some("hello"));
    assert_eq!(seen.involved_object.name.as_deref(), Some("w"));
    let by_field = core
        .list(&ListParams::default().fields("involvedObject.name=w,reason=Started"))
        .await
        .unwrap();
    assert_eq!(by_field.items.len(), 1);
}

#[tokio::test]
async fn deleting_a_crd_removes_its_objects_and_its_api() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let widgets: Api<Widget> = Api::namespaced(client.clone(), "default");
    widgets
        .create(&PostParams::default(), &widget("w", 1))
        .await
        .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds.get("widgets.example.io").await.unwrap();
    let conditions = crd.status.unwrap().conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );
    crds.delete("widgets.example.io", &DeleteParams::default())
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "the CRD to go", || {
        let crds = crds.clone();
        async move {
            crds.get_opt("widgets.example.io")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        }
    })
    .await;
    match widgets.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 404),
        other => panic!("expected 404 once the CRD is gone, got {other:?}"),
    }
}
