//! List and watch.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::convert::present;
use crate::error::{ApiError, ApiResult};
use crate::meta::{FieldSelector, LabelSelector, labels, meta_str};
use crate::resources::ResourceType;
use crate::sim::Sim;
use crate::store::{Event, EventType, Next, Scope, Store};
use crate::table::{Shape, partial_metadata, table};

/// What a list or watch selects.
#[derive(Clone, Debug)]
pub struct Selection {
    pub rt: Arc<ResourceType>,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selection {
    /// The scope the store dispatches this selection's changes by.
    fn scope(&self) -> Scope {
        Scope {
            namespace: self.namespace.clone().unwrap_or_default(),
            name: self.fields.name().unwrap_or_default().to_owned(),
        }
    }

    /// Whether an object (as stored) is selected; returns it presented when so.
    pub fn select(&self, stored: &Value) -> Option<Value> {
        self.matches(stored).then(|| present(&self.rt, stored))
    }

    /// Whether an object (as stored) is selected. Only field selectors other than a name
    /// read the object as presented (an Event's fields differ between its two versions).
    fn matches(&self, stored: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && meta_str(stored, "namespace").unwrap_or_default() != ns
        {
            return false;
        }
        if !self.labels.is_empty() && !self.labels.matches(&labels(stored)) {
            return false;
        }
        // A watch pinned to one object by name (what kube-runtime's await_condition opens)
        // skips every other object before it is presented.
        if let Some(name) = self.fields.name()
            && meta_str(stored, "name").unwrap_or_default() != name
        {
            return false;
        }
        self.fields.0.is_empty() || self.fields.matches(&present(&self.rt, stored))
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Continue {
    rv: u64,
    ns: String,
    name: String,
}

/// Answers a list.
pub fn list(
    sim: &Sim,
    sel: &Selection,
    limit: Option<usize>,
    cont: Option<&str>,
    shape: Shape,
) -> ApiResult<Value> {
    let store = sim.store();
    let start = match cont.filter(|c| !c.is_empty()) {
        None => None,
        Some(token) => {
            let c: Continue = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(token)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .ok_or_else(|| ApiError::bad_request("continue key is not valid"))?;
            if store.events_since(c.rv).is_err() {
                return Err(ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                ));
            }
            Some(((c.ns, c.name), c.rv))
        }
    };
    let rv = start
        .as_ref()
        .map(|(_, rv)| *rv)
        .unwrap_or_else(|| store.current_rv());
    let after = start.as_ref().map(|(k, _)| k);
    let ns_filter = sel.namespace.as_deref();
    let mut items = Vec::new();
    let mut next = None;
    let mut remaining = 0usize;
    for (key, obj) in store.list(&sel.rt.storage, ns_filter, after) {
        let Some(o) = sel.select(obj) else { continue };
        if limit.is_some_and(|l| items.len() >= l) {
            if next.is_none() {
                let last: &Value = items.last().unwrap_or(&Value::Null);
                let (ns, name) = (
                    meta_str(last, "namespace").unwrap_or_default(),
                    meta_str(last, "name").unwrap_or_default(),
                );
                let _ = key;
                next = Some(Continue {
                    rv,
                    ns: ns.to_owned(),
                    name: name.to_owned(),
                });
            }
            remaining += 1;
            continue;
        }
        items.push(o);
    }
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = next {
        let token = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(serde_json::to_vec(&c).unwrap_or_default());
        meta["continue"] = json!(token);
        meta["remainingItemCount"] = json!(remaining);
    }
    drop(store);
    match shape {
        Shape::Table(include) => return Ok(table(&sel.rt, &items, include, meta)),
        Shape::Metadata => {
            let items: Vec<Value> = items.iter().map(partial_metadata).collect();
            return Ok(json!({
                "kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": meta,
                "items": items,
            }));
        }
        Shape::Full => {}
    }
    Ok(json!({
        "kind": sel.rt.list_kind,
        "apiVersion": sel.rt.api_version(),
        "metadata": meta,
        "items": items,
    }))
}

/// Parameters of a watch.
#[derive(Clone, Debug, Default)]
pub struct WatchParams {
    pub resource_version: Option<String>,
    pub bookmarks: bool,
    pub timeout: Option<Duration>,
    pub send_initial_events: bool,
    /// How its objects are presented.
    pub shape: Shape,
}

fn line(v: &Value) -> Bytes {
    let mut s = v.to_string();
    s.push('\n');
    Bytes::from(s)
}

fn event_json(kind: &str, obj: Value, sel: &Selection, shape: Shape) -> Value {
    let object = match shape {
        Shape::Table(include) if kind != "BOOKMARK" && kind != "ERROR" => {
            table(&sel.rt, &[obj], include, json!({}))
        }
        // A bookmark too: the apiserver transforms every object it sends.
        Shape::Metadata if kind != "ERROR" => partial_metadata(&obj),
        _ => obj,
    };
    json!({"type": kind, "object": object})
}

fn bookmark(sel: &Selection, rv: u64, initial_end: bool, shape: Shape) -> Value {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let object = json!({"kind": sel.rt.kind, "apiVersion": sel.rt.api_version(), "metadata": meta});
    event_json("BOOKMARK", object, sel, shape)
}

fn gone(message: String) -> Value {
    json!({"type": "ERROR", "object": ApiError::expired(message).status()})
}

/// What a store event is to this watch (its object is the event's, presented): the
/// type it is sent as, or nothing.
fn translate(sel: &Selection, ev: &Event) -> Option<&'static str> {
    if ev.storage != sel.rt.storage {
        return None;
    }
    let now = sel.matches(&ev.object);
    let before = || ev.prev.as_ref().is_some_and(|p| sel.matches(p));
    match ev.type_ {
        EventType::Added => now.then_some("ADDED"),
        EventType::Deleted => before().then_some("DELETED"),
        EventType::Modified => match (before(), now) {
            (true, true) => Some("MODIFIED"),
            (false, true) => Some("ADDED"),
            (true, false) => Some("DELETED"),
            (false, false) => None,
        },
    }
}

/// An event's line for this watch. Whole objects (no table, no metadata alone): the object's encoding is made once
/// per version and shared by every watcher (as the apiserver's watch cache does); the
/// line is what `event_json` gives, written around it.
fn event_line(kind: &str, ev: &Event, sel: &Selection, shape: Shape) -> Bytes {
    if shape != Shape::Full {
        return line(&event_json(kind, present(&sel.rt, &ev.object), sel, shape));
    }
    let rt = &sel.rt;
    let object = ev
        .encoded
        .get_or_encode((&rt.group, &rt.version, &rt.kind), || {
            Bytes::from(crate::convert::encode_presented(rt, &ev.object))
        });
    let mut out = Vec::with_capacity(object.len() + 32);
    out.extend_from_slice(b"{\"object\":");
    out.extend_from_slice(&object);
    out.extend_from_slice(b",\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\"}\n");
    Bytes::from(out)
}

/// What a watch starts with: changes replayed from its resourceVersion, or the objects
/// listed.
enum Initial {
    Replayed(&'static str, Arc<Event>),
    Listed(Value),
}

/// Starts a watch; events arrive on the returned channel, one JSON line each.
pub fn watch(sim: &Sim, sel: Selection, params: WatchParams) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    let sim = sim.clone();
    // What the watch starts with, encoded once the store is unlocked.
    let mut initial: Vec<Initial> = Vec::new();
    let mut initial_end: Option<u64> = None;
    let (mut sub, start_rv) = {
        let store: std::sync::MutexGuard<'_, Store> = sim.store();
        let requested = params
            .resource_version
            .as_deref()
            .filter(|r| !r.is_empty() && *r != "0")
            .map(|r| r.parse::<u64>());
        match requested {
            Some(Err(_)) => {
                let _ = tx.try_send(line(&json!({"type": "ERROR", "object": ApiError::bad_request("invalid resourceVersion").status()})));
                return rx;
            }
            Some(Ok(rv)) if !params.send_initial_events => match store.events_since(rv) {
                Ok(events) => {
                    for ev in events {
                        if let Some(kind) = translate(&sel, &ev) {
                            initial.push(Initial::Replayed(kind, ev));
                        }
                    }
                    (
                        store.subscribe(&sel.rt.storage, sel.scope()),
                        store.current_rv(),
                    )
                }
                Err(oldest) => {
                    let _ = tx.try_send(line(&gone(format!(
                        "too old resource version: {rv} ({})",
                        oldest.saturating_sub(1)
                    ))));
                    return rx;
                }
            },
            _ => {
                // No resourceVersion, "0", or a streaming list: start with the current state.
                for (_, obj) in store.list(&sel.rt.storage, sel.namespace.as_deref(), None) {
                    if let Some(o) = sel.select(obj) {
                        initial.push(Initial::Listed(event_json("ADDED", o, &sel, params.shape)));
                    }
                }
                if params.send_initial_events {
                    initial_end = Some(store.current_rv());
                }
                (
                    store.subscribe(&sel.rt.storage, sel.scope()),
                    store.current_rv(),
                )
            }
        }
    };
    let interval = sim.inner.opts.bookmark_interval;
    let mut drops = sim.inner.faults.watch_drops();
    tokio::spawn(async move {
        for ev in initial {
            let sent = match ev {
                Initial::Replayed(kind, ev) => event_line(kind, &ev, &sel, params.shape),
                Initial::Listed(event) => line(&event),
            };
            if tx.send(sent).await.is_err() {
                return;
            }
        }
        if let Some(rv) = initial_end
            && tx
                .send(line(&bookmark(&sel, rv, true, params.shape)))
                .await
                .is_err()
        {
            return;
        }
        let mut last_rv = start_rv;
        let deadline = tokio::time::sleep(params.timeout.unwrap_or(Duration::from_secs(1800)));
        tokio::pin!(deadline);
        let mut ticker = tokio::time::interval(interval);
        ticker.tick().await;
        drops.borrow_and_update();
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                _ = drops.changed() => return,
                _ = tx.closed() => return,
                _ = ticker.tick(), if params.bookmarks => {
                    // A watcher only hears of changes in its scope; its bookmark carries the
                    // store's resourceVersion once it has taken every change queued for it, so
                    // a watch resumed from it does not replay (or outlive) the rest.
                    {
                        let store = sim.store();
                        if sub.is_drained() {
                            last_rv = last_rv.max(store.current_rv());
                        }
                    }
                    if tx.send(line(&bookmark(&sel, last_rv, false, params.shape))).await.is_err() {
                        return;
                    }
                }
                ev = sub.recv() => match ev {
                    Next::Event(ev) => {
                        if ev.rv <= last_rv {
                            continue;
                        }
                        last_rv = ev.rv;
                        // A lagging server: each change reaches the watcher that long after it
                        // was made (the next waits only for what is left of its own lag).
                        let lag = sim.inner.faults.watch_lag();
                        if !lag.is_zero() {
                            tokio::time::sleep_until((ev.at + lag).into()).await;
                        }
                        if let Some(kind) = translate(&sel, &ev)
                            && tx.send(event_line(kind, &ev, &sel, params.shape)).await.is_err() {
                                return;
                            }
                    }
                    // The watcher fell behind: closed, as the real server closes a watcher that
                    // cannot keep up; the client watches again from its last resourceVersion.
                    Next::FellBehind | Next::Closed => return,
                },
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Registry;
    use crate::store::Store;

    fn selection(registry: &Registry, group: &str, version: &str, plural: &str) -> Selection {
        Selection {
            rt: registry
                .find(group, version, plural)
                .expect("built-in type"),
            namespace: None,
            labels: LabelSelector::default(),
            fields: FieldSelector::default(),
        }
    }

    /// The line as built before encodings were shared: the event's object presented for
    /// this watch and the whole event serialized.
    fn unshared_line(kind: &str, ev: &Event, sel: &Selection) -> Bytes {
        line(&event_json(
            kind,
            present(&sel.rt, &ev.object),
            sel,
            Shape::Full,
        ))
    }

    #[test]
    fn watchers_of_one_version_share_an_events_encoding_and_get_the_same_lines() {
        let registry = Registry::with_builtins();
        let mut store = Store::new(64, 64, Registry::default());
        let core = selection(&registry, "", "v1", "events");
        let events_api = selection(&registry, "events.k8s.io", "v1", "events");
        let mut in_a = selection(&registry, "", "v1", "configmaps");
        in_a.labels = LabelSelector::parse("team=a").expect("selector");
        let rv = store.next_rv();
        let first = rv;
        store.put(
            &core.rt.storage,
            "ns",
            "e1",
            rv,
            json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1", "namespace": "ns"},
                   "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "Started", "message": "hi"}),
        );
        for labels in [
            json!({"team": "a"}),
            json!({"team": "a", "x": "1"}),
            json!({"team": "b"}),
        ] {
            let rv = store.next_rv();
            store.put(
                &in_a.rt.storage,
                "ns",
                "cm",
                rv,
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns", "labels": labels}}),
            );
        }
        let events = store.events_since(first - 1).expect("log");
        let [event, added, modified, left] = &events[..] else {
            panic!("four changes: {events:?}")
        };
        // Two watchers of core Events, one of events.k8s.io Events: two encodings, one per
        // version, and each watcher's line is the one it had before.
        for sel in [&core, &core, &events_api] {
            let kind = translate(sel, event).expect("every event watcher sees it");
            assert_eq!(kind, "ADDED");
            assert_eq!(
                event_line(kind, event, sel, Shape::Full),
                unshared_line(kind, event, sel)
            );
        }
        assert_eq!(event.encoded.len(), 2, "one encoding per version watched");
        let as_events_api: Value =
            serde_json::from_slice(&event_line("ADDED", event, &events_api, Shape::Full))
                .expect("json");
        assert_eq!(as_events_api["object"]["apiVersion"], "events.k8s.io/v1");
        assert_eq!(as_events_api["object"]["note"], "hi");
        // A label selector still turns changes into what they are to the watch.
        let seen: Vec<Option<&str>> = [added, modified, left]
            .into_iter()
            .map(|ev| translate(&in_a, ev))
            .collect();
        assert_eq!(seen, [Some("ADDED"), Some("MODIFIED"), Some("DELETED")]);
        for ev in [added, modified, left] {
            let kind = translate(&in_a, ev).expect("selected before or after");
            assert_eq!(
                event_line(kind, ev, &in_a, Shape::Full),
                unshared_line(kind, ev, &in_a)
            );
        }
    }
}
