//! kube-rs runtime against kube-sim: watcher (with a relist after 410), a Controller, the
//! finalizer helper, streaming lists and bookmarks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Widget, eventually, start, start_with, widget};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::Event as FinalizerEvent;
use kube::runtime::{Controller, WatchStreamExt, reflector, watcher};
use kube_sim::Options;
use serde_json::json;

#[tokio::test]
async fn watcher_relists_after_410() {
    let sim = start_with(Options {
        event_log_capacity: 16,
        bookmark_interval: Duration::from_secs(3600),
        ..Default::default()
    })
    .await;
    let client = sim.client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let inits = Arc::new(AtomicUsize::new(0));
    let (reader, writer) = reflector::store();
    let counter = inits.clone();
    let stream = watcher(api.clone(), watcher::Config::default())
        .inspect(move |e| {
            if matches!(e, Ok(watcher::Event::Init)) {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        })
        .default_backoff()
        .reflect(writer)
        .applied_objects();
    let handle = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while stream.next().await.is_some() {}
    });
    reader.wait_until_ready().await.unwrap();
    assert_eq!(inits.load(Ordering::SeqCst), 1);
    // Cut the watch and write more than the event log keeps before the watcher re-watches:
    // its resourceVersion is then too old, the server answers 410 and the watcher relists.
    sim.faults().set_outage(true);
    sim.faults().drop_watches();
    for i in 0..40 {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("c{i}")}})).unwrap();
        sim.sim()
            .create(
                &kube_sim::auth::UserInfo::system(),
                &sim.sim().find("", "v1", "configmaps").unwrap(),
                "default",
                serde_json::to_value(cm).unwrap(),
                &Default::default(),
            )
            .unwrap();
    }
    sim.faults().set_outage(false);
    eventually(
        Duration::from_secs(30),
        "the watcher to relist and see 40 objects",
        || {
            let reader = reader.clone();
            let inits = inits.clone();
            async move {
                (reader.state().len() == 40 && inits.load(Ordering::SeqCst) >= 2).then_some(())
            }
        },
    )
    .await;
    handle.abort();
}

#[tokio::test]
async fn streaming_list_and_bookmarks() {
    let sim = start_with(Options {
        bookmark_interval: Duration::from_millis(100),
        ..Default::default()
    })
    .await;
    let api: Api<Widget> = Api::namespaced(sim.client().await.unwrap(), "default");
    for i in 0..3 {
        api.create(&PostParams::default(), &widget(&format!("w{i}"), i))
            .await
            .unwrap();
    }
    let cfg = watcher::Config::default().streaming_lists();
    let mut stream = std::pin::pin!(watcher(api.clone(), cfg));
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            watcher::Event::InitApply(w) => seen.push(w.name_any()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(seen, ["w0", "w1", "w2"]);
    api.create(&PostParams::default(), &widget("w3", 3))
        .await
        .unwrap();
    loop {
        if let watcher::Event::Apply(w) =
            tokio::time::timeout(Duration::from_secs(10), stream.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap()
        {
            assert_eq!(w.name_any(), "w3");
            break;
        }
    }
    // Raw watch with bookmarks: a BOOKMARK arrives with a resourceVersion.
    let raw = api
        .watch(&kube::api::WatchParams::default().timeout(5), "0")
        .await
        .unwrap();
    let mut raw = std::pin::pin!(raw);
    let found = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(ev) = raw.next().await {
            if let kube::api::WatchEvent::Bookmark(b) = ev.unwrap() {
                return b.metadata.resource_version;
            }
        }
        String::new()
    })
    .await
    .unwrap();
    assert!(!found.is_empty());
}

#[tokio::test]
async fn a_watch_pinned_to_one_object_hears_only_of_it_and_its_bookmarks_keep_up() {
    let sim = start_with(Options {
        bookmark_interval: Duration::from_millis(100),
        ..Default::default()
    })
    .await;
    let api: Api<Widget> = Api::namespaced(sim.client().await.unwrap(), "default");
    let pinned = kube::api::WatchParams::default()
        .fields("metadata.name=w1")
        .timeout(10);
    let stream = api.watch(&pinned, "0").await.unwrap();
    let mut stream = std::pin::pin!(stream);
    api.create(&PostParams::default(), &widget("w0", 0))
        .await
        .unwrap();
    api.create(&PostParams::default(), &widget("w1", 1))
        .await
        .unwrap();
    let mut last = String::new();
    for size in 2..5 {
        last = api
            .create(&PostParams::default(), &widget(&format!("w{size}"), size))
            .await
            .unwrap()
            .resource_version()
            .unwrap();
    }
    let last: u64 = last.parse().unwrap();
    // Until a bookmark covers the last write, the watch hears of w1 alone.
    let mut heard = Vec::new();
    let bookmark = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(ev) = stream.next().await {
            match ev.unwrap() {
                kube::api::WatchEvent::Added(w) | kube::api::WatchEvent::Modified(w) => {
                    heard.push(w.name_any())
                }
                kube::api::WatchEvent::Bookmark(b) => {
                    let rv: u64 = b.metadata.resource_version.parse().unwrap();
                    if rv >= last {
                        return rv;
                    }
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        panic!("the watch ended without a bookmark past {last}")
    })
    .await
    .unwrap();
    assert_eq!(heard, ["w1"]);
    // Resumed from that bookmark, the watch replays nothing: the writes it skipped were not
    // its own, and are behind it.
    let resumed = api.watch(&pinned, &bookmark.to_string()).await.unwrap();
    let mut resumed = std::pin::pin!(resumed);
    api.patch(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 11}})),
    )
    .await
    .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match resumed.next().await.unwrap().unwrap() {
                kube::api::WatchEvent::Bookmark(_) => continue,
                other => return other,
            }
        }
    })
    .await
    .unwrap();
    match next {
        kube::api::WatchEvent::Modified(w) => assert_eq!(w.spec.size, 11),
        other => panic!("expected w1's change, got {other:?}"),
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct ReconcileError(String);

#[tokio::test]
async fn controller_with_finalizer_helper() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let widgets: Api<Widget> = Api::namespaced(client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    struct Ctx {
        widgets: Api<Widget>,
        cms: Api<ConfigMap>,
    }
    async fn reconcile(
        w: Arc<Widget>,
        ctx: Arc<Ctx>,
    ) -> Result<Action, finalizer::Error<ReconcileError>> {
        let cms = ctx.cms.clone();
        finalizer(&ctx.widgets, "example.io/cleanup", w, |ev| async move {
            match ev {
                FinalizerEvent::Apply(w) => {
                    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{}-out", w.name_any())},
                                    "data": {"size": w.spec.size.to_string()}});
                    cms.patch(&format!("{}-out", w.name_any()), &PatchParams::apply("widget-ctl"), &Patch::Apply(&cm))
                        .await
                        .map_err(|e| ReconcileError(e.to_string()))?;
                    Ok(Action::await_change())
                }
                FinalizerEvent::Cleanup(w) => {
                    cms.delete(&format!("{}-out", w.name_any()), &DeleteParams::default())
                        .await
                        .map_err(|e| ReconcileError(e.to_string()))?;
                    Ok(Action::await_change())
                }
            }
        })
        .await
    }
    use kube::runtime::finalizer;
    fn error_policy(_: Arc<Widget>, _: &finalizer::Error<ReconcileError>, _: Arc<Ctx>) -> Action {
        Action::requeue(Duration::from_millis(200))
    }
    let ctx = Arc::new(Ctx {
        widgets: widgets.clone(),
        cms: cms.clone(),
    });
    let ctl = tokio::spawn(
        Controller::new(widgets.clone(), watcher::Config::default())
            .run(reconcile, error_policy, ctx)
            .for_each(|_| async {}),
    );
    widgets
        .create(&PostParams::default(), &widget("a", 7))
        .await
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "the controller's ConfigMap",
        || {
            let cms = cms.clone();
            async move {
                cms.get_opt("a-out")
                    .await
                    .unwrap()
                    .filter(|c| c.data.as_ref().unwrap()["size"] == "7")
            }
        },
    )
    .await;
    let w = widgets.get("a").await.unwrap();
    assert_eq!(w.finalizers(), ["example.io/cleanup"]);
    widgets
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 8}})),
        )
        .await
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "the ConfigMap to follow the spec",
        || {
            let cms = cms.clone();
            async move {
                cms.get_opt("a-out")
                    .await
                    .unwrap()
                    .filter(|c| c.data.as_ref().unwrap()["size"] == "8")
            }
        },
    )
    .await;
    widgets.delete("a", &DeleteParams::default()).await.unwrap();
    eventually(Duration::from_secs(10), "cleanup to remove both", || {
        let (cms, widgets) = (cms.clone(), widgets.clone());
        async move {
            (cms.get_opt("a-out").await.unwrap().is_none()
                && widgets.get_opt("a").await.unwrap().is_none())
            .then_some(())
        }
    })
    .await;
    ctl.abort();
}

/// Starts `n` reflectors on ConfigMaps of namespaces ns0..n through `client`, writes one
/// ConfigMap into each namespace through `admin`, and waits until every reflector has seen
/// its own.
async fn watch_in_namespaces(client: kube::Client, admin: kube::Client, n: usize) {
    for i in 0..n {
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": format!("ns{i}")}})).unwrap();
        Api::<Namespace>::all(admin.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }
    let mut readers = Vec::new();
    let mut handles = Vec::new();
    for i in 0..n {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &format!("ns{i}"));
        let (reader, writer) = reflector::store();
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .applied_objects();
        handles.push(tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while stream.next().await.is_some() {}
        }));
        reader.wait_until_ready().await.unwrap();
        readers.push(reader);
    }
    for i in 0..n {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("c{i}")}})).unwrap();
        Api::<ConfigMap>::namespaced(admin.clone(), &format!("ns{i}"))
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
    }
    eventually(
        Duration::from_secs(30),
        "every watch to see the ConfigMap of its namespace",
        || {
            let readers = readers.clone();
            async move { readers.iter().all(|r| r.state().len() == 1).then_some(()) }
        },
    )
    .await;
    for h in handles {
        h.abort();
    }
}

fn h2_connections(sim: &kube_sim::KubeSim) -> u64 {
    sim.metrics().connections().get("h2").copied().unwrap_or(0)
}

#[tokio::test]
async fn clients_of_one_identity_in_one_process_carry_all_their_watches_on_one_connection() {
    let sim = start().await;
    let before = sim.metrics().connections();
    let process = kube_sim::client::Transports::default();
    let watching = process.client(&sim.kubeconfig()).await.unwrap();
    let writing = process.client(&sim.kubeconfig()).await.unwrap();
    watch_in_namespaces(watching.clone(), writing, 5).await;
    // Five watches, their lists and the writes: one new HTTP/2 connection, as client-go
    // shares a transport per identity in a process.
    let after = sim.metrics().connections();
    assert_eq!(after.len(), before.len().max(1), "{before:?} -> {after:?}");
    assert_eq!(
        h2_connections(&sim),
        before.get("h2").copied().unwrap_or(0) + 1
    );
    // Another process with the same kubeconfig has a connection of its own.
    let other = kube_sim::client_from_kubeconfig(&sim.kubeconfig())
        .await
        .unwrap();
    Api::<ConfigMap>::namespaced(other, "ns0")
        .get("c0")
        .await
        .unwrap();
    assert_eq!(
        h2_connections(&sim),
        before.get("h2").copied().unwrap_or(0) + 2
    );
    drop(watching);
}

#[tokio::test]
async fn kube_rs_default_client_still_speaks_http1_with_a_connection_per_watch() {
    let sim = start().await;
    let kc = kube::config::Kubeconfig::from_yaml(&sim.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let admin = sim.client().await.unwrap();
    sim.metrics().reset();
    watch_in_namespaces(client, admin, 5).await;
    let conns = sim.metrics().connections();
    // kube-rs offers no ALPN protocol and speaks HTTP/1.1: a connection per open watch.
    assert!(
        conns.get("none").copied().unwrap_or(0) >= 5,
        "one connection per open watch at least: {conns:?}"
    );
}
