//! Fault injection and request counters.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::start;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube_sim::ErrorRule;
use serde_json::json;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

type Events =
    std::pin::Pin<Box<dyn futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Send>>;

/// A watch of `cms` from the start, once it heard of ConfigMap `name`, created after it began.
async fn watch_hearing(cms: &Api<ConfigMap>, name: &str) -> Events {
    let mut stream = cms
        .watch(&WatchParams::default().timeout(60), "0")
        .await
        .unwrap()
        .boxed();
    cms.create(&PostParams::default(), &cm(name)).await.unwrap();
    match tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .unwrap()
    {
        Some(Ok(WatchEvent::Added(c))) => assert_eq!(c.metadata.name.as_deref(), Some(name)),
        other => panic!("expected ADDED, got {other:?}"),
    }
    stream
}

/// During an outage `cms` fails; once `sim`'s outage ends, it answers again.
async fn outage_ends(sim: &kube_sim::KubeSim, cms: &Api<ConfigMap>) {
    assert!(cms.list(&ListParams::default()).await.is_err());
    sim.faults().set_outage(false);
    common::eventually(Duration::from_secs(10), "the API to answer again", || {
        let cms = cms.clone();
        async move { cms.list(&ListParams::default()).await.ok().map(|_| ()) }
    })
    .await;
}

/// Asserts that `stream` ends (or fails) within 5 s.
async fn ends(stream: &mut Events) {
    let end = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .unwrap();
    assert!(
        end.is_none() || matches!(end, Some(Err(_))),
        "the watch should end: {end:?}"
    );
}

#[tokio::test]
async fn injected_errors_hit_only_their_verb_and_resource() {
    let sim = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().await.unwrap(), "default");
    // (500, not 503: kube-rs clients retry 429/503/504 with backoff, as they should.)
    sim.faults().add_error(ErrorRule {
        verb: Some("create".into()),
        resource: Some("configmaps".into()),
        rate: 1.0,
        code: 500,
        user: None,
    });
    match cms.create(&PostParams::default(), &cm("a")).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (500, "InternalError")),
        other => panic!("expected 500, got {other:?}"),
    }
    cms.list(&ListParams::default()).await.unwrap();
    sim.faults().clear();
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    // Half the requests fail at rate 0.5 (loosely: some fail, some pass).
    sim.faults().add_error(ErrorRule {
        verb: Some("get".into()),
        resource: None,
        rate: 0.5,
        code: 500,
        user: None,
    });
    let mut failed = 0;
    for _ in 0..100 {
        if cms.get("a").await.is_err() {
            failed += 1;
        }
    }
    assert!(
        (15..=85).contains(&failed),
        "{failed} of 100 failed at rate 0.5"
    );
}

#[tokio::test]
async fn latency_outage_and_dropped_watches() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    sim.faults().set_latency(Duration::from_millis(200));
    let t = Instant::now();
    cms.list(&ListParams::default()).await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(200));
    sim.faults().clear();

    // A watch is cut when watches are dropped.
    let mut stream = watch_hearing(&cms, "w").await;
    sim.faults().drop_watches();
    ends(&mut stream).await;

    // An outage refuses connections until it ends.
    sim.faults().set_outage(true);
    let addr = sim.addr();
    common::eventually(
        Duration::from_secs(5),
        "connections to be refused",
        || async move {
            tokio::net::TcpStream::connect(addr)
                .await
                .is_err()
                .then_some(())
        },
    )
    .await;
    outage_ends(&sim, &cms).await;
}

#[tokio::test]
async fn a_lagging_watch_hears_of_a_change_only_after_the_write_was_answered() {
    let sim = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().await.unwrap(), "default");
    let lag = Duration::from_millis(400);
    sim.faults().set_watch_lag(lag);
    let stream = cms
        .watch(&WatchParams::default().timeout(60), "0")
        .await
        .unwrap();
    let mut stream = std::pin::pin!(stream);
    // Two changes in a row: each arrives its own lag after it was made, in order.
    let t = Instant::now();
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    cms.create(&PostParams::default(), &cm("b")).await.unwrap();
    let written = t.elapsed();
    assert!(
        written < lag,
        "the writes were answered at once: {written:?}"
    );
    for name in ["a", "b"] {
        match tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .unwrap()
        {
            Some(Ok(WatchEvent::Added(c))) => assert_eq!(c.metadata.name.as_deref(), Some(name)),
            other => panic!("expected ADDED {name}, got {other:?}"),
        }
    }
    let heard = t.elapsed();
    assert!(
        heard >= lag && heard < lag + lag / 2,
        "the second change was heard after {heard:?} (lag {lag:?}, not one lag per event)"
    );
    // Cleared, a change is heard at once.
    sim.faults().clear();
    let t = Instant::now();
    cms.create(&PostParams::default(), &cm("c")).await.unwrap();
    let c = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .unwrap();
    assert!(matches!(c, Some(Ok(WatchEvent::Added(_)))), "{c:?}");
    assert!(t.elapsed() < lag, "heard after {:?}", t.elapsed());
}

#[tokio::test]
async fn requests_are_counted_by_verb_resource_and_code() {
    let sim = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().await.unwrap(), "default");
    sim.metrics().reset();
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    let _ = cms.create(&PostParams::default(), &cm("a")).await;
    cms.get("a").await.unwrap();
    let snap = sim.metrics().snapshot();
    assert_eq!(
        snap.get(&("create".into(), "configmaps".into(), 201)),
        Some(&1)
    );
    assert_eq!(
        snap.get(&("create".into(), "configmaps".into(), 409)),
        Some(&1)
    );
    assert_eq!(
        snap.get(&("get".into(), "configmaps".into(), 200)),
        Some(&1)
    );
    assert_eq!(sim.metrics().total(None, Some("configmaps")), 3);
    // The same, by the user who asked.
    let mine = sim.metrics().answers_to("kube-sim-admin");
    assert_eq!(
        mine.get(&("create".into(), "configmaps".into(), 409)),
        Some(&1),
        "{mine:?}"
    );
    assert_eq!(mine.values().sum::<u64>(), 3, "{mine:?}");
    assert!(sim.metrics().answers_to("someone-else").is_empty());
}

#[tokio::test]
async fn an_object_over_etcds_request_limit_is_refused_as_the_real_server_does() {
    let sim = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().await.unwrap(), "default");
    let with = |name: &str, bytes: usize| -> ConfigMap {
        serde_json::from_value(
            json!({"metadata": {"name": name}, "data": {"k": "x".repeat(bytes)}}),
        )
        .unwrap()
    };
    // Just under 1.5 MiB is stored; over it, the server answers as it does when etcd refuses
    // (500 `etcdserver: request is too large`), on create and on update alike.
    let limit = kube_sim::DEFAULT_MAX_OBJECT_BYTES;
    cms.create(&PostParams::default(), &with("fits", limit - 1024))
        .await
        .unwrap();
    match cms
        .create(&PostParams::default(), &with("big", limit))
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(
            (s.code, s.message.as_str()),
            (500, "etcdserver: request is too large")
        ),
        other => panic!("expected 500, got {other:?}"),
    }
    let mut grown = cms.get("fits").await.unwrap();
    grown.data = with("fits", limit).data;
    assert!(
        cms.replace("fits", &PostParams::default(), &grown)
            .await
            .is_err()
    );
    assert!(cms.get_opt("big").await.unwrap().is_none());
}

#[tokio::test]
async fn a_validating_webhook_refuses_its_kind_on_create_and_update() {
    let sim = kube_sim::KubeSim::start(kube_sim::Options {
        validators: vec![kube_sim::Validator {
            name: "no-bad.example.io".into(),
            group: String::new(),
            kind: "ConfigMap".into(),
            check: std::sync::Arc::new(|o: &serde_json::Value| match o.pointer("/data/bad") {
                Some(_) => Err("bad is not allowed".into()),
                None => Ok(()),
            }),
        }],
        ..Default::default()
    })
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().await.unwrap(), "default");
    let bad: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "a"}, "data": {"bad": "1"}})).unwrap();
    match cms.create(&PostParams::default(), &bad).await {
        Err(kube::Error::Api(s)) => assert_eq!(
            (s.code, s.message.as_str()),
            (
                403,
                "admission webhook \"no-bad.example.io\" denied the request: bad is not allowed"
            )
        ),
        other => panic!("expected 403, got {other:?}"),
    }
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    let mut edited = cms.get("a").await.unwrap();
    edited.data = bad.data;
    assert!(
        cms.replace("a", &PostParams::default(), &edited)
            .await
            .is_err()
    );
}

#[tokio::test]
async fn clients_of_the_servers_process_connect_through_memory_and_faults_hold_there_too() {
    let sim = common::start_with(kube_sim::Options {
        in_process_connections: true,
        ..Default::default()
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().await.unwrap(), "default");
    let mut stream = watch_hearing(&cms, "m").await;
    // HTTP/2 connections through memory (this client's, and the set-up's), none over TCP.
    let in_memory = || {
        let connections = sim.metrics().connections();
        assert_eq!(
            connections.keys().collect::<Vec<_>>(),
            ["h2 in process"],
            "{connections:?}"
        );
        connections["h2 in process"]
    };
    let before = in_memory();
    // Other processes still reach the TCP port.
    let addr = sim.addr();
    assert!(tokio::net::TcpStream::connect(addr).await.is_ok());

    // An outage cuts the connection and refuses new ones, in memory as over TCP.
    sim.faults().set_outage(true);
    ends(&mut stream).await;
    outage_ends(&sim, &cms).await;
    assert_eq!(in_memory(), before + 1, "connected again, through memory");

    // A stopped server takes no connection from its process either.
    sim.shutdown();
    common::eventually(Duration::from_secs(5), "requests to fail", || {
        let cms = cms.clone();
        async move {
            cms.list(&ListParams::default())
                .await
                .is_err()
                .then_some(())
        }
    })
    .await;
}
