//! The controllers' watches after an API server outage (kube-sim refusing connections): each
//! watch backs off on its own and keeps its errors, so no error of one holds up the others
//! and a controller hears of changes again soon after the server is back
//! (`migration_api::runtime::errors_stay_in_the_watch`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use migration_api::runtime;

/// A simulated API server and a client of it as the binaries make theirs.
async fn server() -> (kube_sim::KubeSim, kube::Client, tempfile::TempDir) {
    let sim = kube_sim::KubeSim::start(kube_sim::Options::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, sim.kubeconfig()).unwrap();
    let client = runtime::client(Some(&path), &Default::default())
        .await
        .unwrap();
    (sim, client, dir)
}

/// Creates a ConfigMap, again until the server takes it (it may still be taking its port
/// back after an outage).
async fn create(client: &kube::Client, namespace: &str, name: &str) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}
    }))
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match api.create(&PostParams::default(), &cm).await {
            Ok(_) => return,
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(error = %e, "create refused; again");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("creating {namespace}/{name}: {e}"),
        }
    }
}

/// A watch for a controller yields no error while the server is away (its own back-off
/// retries it; an error let through would back off every watch of the controller), and the
/// first object made after the server is back comes out.
#[tokio::test]
async fn a_watch_keeps_its_errors_and_resumes_after_an_outage() {
    let (sim, client, _dir) = server().await;
    let mut events = std::pin::pin!(runtime::watch_events(
        Api::<ConfigMap>::namespaced(client.clone(), "default"),
        watcher::Config::default(),
    ));
    create(&client, "default", "before").await;
    let first = tokio::time::timeout(Duration::from_secs(20), events.next())
        .await
        .expect("the first object within 20 s");
    assert!(matches!(first, Some(Ok(ref cm)) if cm.metadata.name.as_deref() == Some("before")));
    sim.faults().set_outage(true);
    // The watch fails and is retried (0.8 s, 1.6 s, ...) while the server is away: nothing
    // comes out, an error least of all.
    let during = tokio::time::timeout(Duration::from_secs(4), events.next()).await;
    assert!(
        during.is_err(),
        "nothing while the server is away: {during:?}"
    );
    sim.faults().set_outage(false);
    create(&client, "default", "after").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let next = tokio::time::timeout(left, events.next())
            .await
            .expect("the object made after the outage within 30 s");
        match next {
            Some(Ok(cm)) if cm.metadata.name.as_deref() == Some("after") => break,
            Some(Ok(_)) => continue,
            other => panic!("only objects come out of the watch: {other:?}"),
        }
    }
}

/// A controller with several watches (the migration controller has seven) hears of a change
/// soon after an outage of its API server. With one back-off for all its watches, each wake-up
/// after the outage brought out a request that had failed while nobody read it, and slept
/// again: the simulated import controller, with seven watches, heard nothing for three
/// minutes after a one-minute outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_with_several_watches_resumes_soon_after_an_outage() {
    let (sim, client, _dir) = server().await;
    let others = ["one", "two", "three", "four", "five", "six"];
    let main: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut controller = runtime::controller(main, watcher::Config::default());
    for ns in others {
        controller = controller.watches_stream(
            runtime::watch_events(
                Api::<ConfigMap>::namespaced(client.clone(), ns),
                watcher::Config::default(),
            ),
            |_| None::<ObjectRef<ConfigMap>>,
        );
    }
    let running = tokio::spawn(
        controller
            .run(
                |cm: std::sync::Arc<ConfigMap>, tx| async move {
                    let _ = tx.send(cm.metadata.name.clone().unwrap_or_default());
                    Ok::<_, kube::Error>(Action::await_change())
                },
                |_, _, _| Action::requeue(Duration::from_secs(1)),
                std::sync::Arc::new(seen_tx),
            )
            .for_each(|_| async {}),
    );
    create(&client, "default", "before").await;
    let first = tokio::time::timeout(Duration::from_secs(20), seen.recv()).await;
    assert_eq!(first.ok().flatten().as_deref(), Some("before"));
    // Long enough for the back-offs to reach several seconds.
    sim.faults().set_outage(true);
    tokio::time::sleep(Duration::from_secs(8)).await;
    sim.faults().set_outage(false);
    let back = Instant::now();
    create(&client, "default", "after").await;
    // Each watch retries within its own back-off (at most about 13 s after an 8 s outage:
    // 0.8 s doubling, jittered); a re-list follows.
    let limit = Duration::from_secs(25);
    loop {
        let left = limit.saturating_sub(back.elapsed());
        match tokio::time::timeout(left, seen.recv()).await {
            Ok(Some(name)) if name == "after" => break,
            Ok(Some(_)) => continue,
            other => panic!(
                "the controller did not hear of the change within {limit:?} after the outage: {other:?}"
            ),
        }
    }
    running.abort();
}
