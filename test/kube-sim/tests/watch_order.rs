//! No watch event is lost or reordered across 10 000 writes from 8 concurrent writers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube_sim::{KubeSim, Options};
use serde_json::json;

const WRITERS: usize = 8;
const WRITES_PER_WRITER: usize = 1250;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_write_arrives_once_and_in_order() {
    // A buffer that covers every write: this test is about loss and order, not about a slow
    // reader being cut off (which the server does with a 410, tested elsewhere).
    let sim = KubeSim::start(Options {
        insecure_http: true,
        watch_buffer: 65_536,
        ..Default::default()
    })
    .await
    .unwrap();
    let client = sim.client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let start_rv = api
        .list_metadata(&Default::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let stream = api
        .watch(&WatchParams::default().timeout(290), &start_rv)
        .await
        .unwrap();
    let total = WRITERS * WRITES_PER_WRITER;
    let reader = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut events = Vec::with_capacity(total);
        while events.len() < total {
            match tokio::time::timeout(Duration::from_secs(60), stream.next()).await {
                Ok(Some(Ok(WatchEvent::Added(c) | WatchEvent::Modified(c)))) => events.push(c),
                Ok(Some(Ok(WatchEvent::Bookmark(_)))) => {}
                other => panic!("watch ended early after {} events: {other:?}", events.len()),
            }
        }
        events
    });
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let api = api.clone();
        writers.push(tokio::spawn(async move {
            let name = format!("writer-{w}");
            let cm: ConfigMap =
                serde_json::from_value(json!({"metadata": {"name": name}, "data": {"seq": "0"}}))
                    .unwrap();
            api.create(&PostParams::default(), &cm).await.unwrap();
            for seq in 1..WRITES_PER_WRITER {
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {"seq": seq.to_string()}})),
                )
                .await
                .unwrap();
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    let events = reader.await.unwrap();
    assert_eq!(events.len(), total);
    // resourceVersions strictly increase; each writer's sequence arrives complete and in order.
    let mut last_rv = 0u64;
    let mut next_seq: HashMap<String, usize> = HashMap::new();
    for e in &events {
        let rv: u64 = e
            .metadata
            .resource_version
            .as_deref()
            .unwrap()
            .parse()
            .unwrap();
        assert!(rv > last_rv, "resourceVersion went from {last_rv} to {rv}");
        last_rv = rv;
        let name = e.metadata.name.clone().unwrap();
        let seq: usize = e.data.as_ref().unwrap()["seq"].parse().unwrap();
        let want = next_seq.entry(name.clone()).or_insert(0);
        assert_eq!(seq, *want, "{name}: expected seq {want}, got {seq}");
        *want += 1;
    }
    assert!(next_seq.values().all(|n| *n == WRITES_PER_WRITER));
}
