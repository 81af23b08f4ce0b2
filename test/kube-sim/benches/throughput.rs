//! kube-sim throughput on this machine: sustained writes/s (one and eight writers, through
//! HTTPS and kube-rs) and watch fan-out (events delivered per second to many watchers).
//! Prints its figures; asserts nothing. Run: `cargo bench -p kube-sim --bench throughput`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube_sim::{KubeSim, Options};
use serde_json::json;

async fn writes(api: &Api<ConfigMap>, writers: usize, per_writer: usize) -> f64 {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            let name = format!("bench-{writers}-{w}");
            let cm: ConfigMap =
                serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
            api.create(&PostParams::default(), &cm).await.unwrap();
            for i in 1..per_writer {
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {"i": i.to_string()}})),
                )
                .await
                .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (writers * per_writer) as f64 / start.elapsed().as_secs_f64()
}

async fn fan_out(api: &Api<ConfigMap>, watchers: usize, events: usize) -> (f64, Duration) {
    let rv = api
        .list_metadata(&Default::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..watchers {
        let api = api.clone();
        let rv = rv.clone();
        let selector = format!("fan={watchers}");
        let stream = api
            .watch(&WatchParams::default().labels(&selector).timeout(290), &rv)
            .await
            .unwrap();
        tasks.push(tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let mut n = 0;
            while n < events {
                match stream.next().await {
                    Some(Ok(WatchEvent::Added(_) | WatchEvent::Modified(_))) => n += 1,
                    Some(Ok(_)) => {}
                    other => panic!("watch ended: {other:?}"),
                }
            }
        }));
    }
    let start = Instant::now();
    let name = format!("fan-{watchers}");
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"fan": watchers.to_string()}}}),
    )
    .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    for i in 1..events {
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"i": i.to_string()}})),
        )
        .await
        .unwrap();
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = start.elapsed();
    ((watchers * events) as f64 / elapsed.as_secs_f64(), elapsed)
}

#[tokio::main]
async fn main() {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client().await.unwrap(), "default");
    println!(
        "kube-sim throughput (HTTPS, kube-rs client, {} cores)",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
    for (writers, per) in [(1, 2000), (8, 500)] {
        let rate = writes(&api, writers, per).await;
        println!("  writes: {writers} writer(s) x {per}: {rate:.0} writes/s");
    }
    for (watchers, events) in [(10, 500), (100, 200), (500, 50)] {
        let (rate, elapsed) = fan_out(&api, watchers, events).await;
        println!(
            "  watch fan-out: {watchers} watchers x {events} events: {rate:.0} deliveries/s ({elapsed:.2?} total)"
        );
    }
    let total = sim.metrics().total(None, Some("configmaps"));
    println!("  requests served on configmaps: {total}");
}
