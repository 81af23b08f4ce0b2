//! The object store: one global resourceVersion counter, objects by storage, and an event log
//! that watches replay from and subscribe to.
//!
//! Changes reach watchers the way kube-apiserver's watch cache dispatches them: per resource,
//! and within a resource only to the watchers whose scope (the namespace a watch is limited
//! to, the name its field selector pins) covers the changed object. A watcher that falls
//! `watch_buffer` changes behind is closed, as the real cacher closes an unresponsive
//! watcher; its client watches again from the last resourceVersion it saw.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use serde_json::Value;
use tokio::sync::mpsc;

use crate::resources::Registry;

/// Kind of change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    /// The watch event type.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change in the store.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub storage: String,
    pub namespace: String,
    pub name: String,
    pub type_: EventType,
    /// The object after the change (for a deletion: its last state, with the deletion's rv).
    pub object: Arc<Value>,
    /// The object before the change (for selector transitions).
    pub prev: Option<Arc<Value>>,
    /// When the change was made (a lagging watch delivers it later: [`crate::faults`]).
    pub at: std::time::Instant,
    /// The object as sent to watchers, encoded once per version watched (as the real
    /// apiserver's watch cache shares one serialization among its watchers:
    /// `k8s.io/apiserver/pkg/storage/cacher/caching_object.go`).
    pub encoded: Encoded,
}

/// Encodings of an event's object, by the (group, version, kind) it is presented as.
#[derive(Debug, Default)]
pub struct Encoded(Mutex<Vec<(Gvk, bytes::Bytes)>>);

/// Group, version and kind.
type Gvk = (String, String, String);

impl Encoded {
    /// The encoding for `gvk`, made by `encode` the first time it is asked for.
    pub fn get_or_encode(
        &self,
        gvk: (&str, &str, &str),
        encode: impl FnOnce() -> bytes::Bytes,
    ) -> bytes::Bytes {
        let mut cache = lock(&self.0);
        if let Some((_, b)) = cache
            .iter()
            .find(|((g, v, k), _)| (g.as_str(), v.as_str(), k.as_str()) == gvk)
        {
            return b.clone();
        }
        let b = encode();
        cache.push((
            (gvk.0.to_owned(), gvk.1.to_owned(), gvk.2.to_owned()),
            b.clone(),
        ));
        b
    }

    /// How many encodings were made.
    pub fn len(&self) -> usize {
        lock(&self.0).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Key of an object within its storage.
pub type ObjKey = (String, String);

/// The store. Guarded by one mutex in [`crate::server::Sim`].
#[derive(Debug)]
pub struct Store {
    rv: u64,
    data: HashMap<String, BTreeMap<ObjKey, Arc<Value>>>,
    log: VecDeque<Arc<Event>>,
    capacity: usize,
    /// The served types (CRDs change them, under the same lock).
    pub registry: Registry,
    watchers: Arc<Mutex<Watchers>>,
    watch_buffer: usize,
    /// Owner UID -> objects naming it in their ownerReferences (storage, namespace, name).
    dependents: HashMap<String, HashSet<(String, String, String)>>,
    /// ClusterRoleBinding names by subject: authorization looks the requester's bindings up
    /// here instead of reading every binding (a hub has one or more per managed cluster).
    binding_subjects: HashMap<Subject, BTreeSet<String>>,
}

/// What a watcher is indexed under: the namespace it is limited to and the name it is pinned
/// to (empty for any), as kube-apiserver's cacher indexes its watchers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Scope {
    pub namespace: String,
    pub name: String,
}

impl Scope {
    /// The scopes whose watchers see a change to `namespace/name`.
    fn covering(namespace: &str, name: &str) -> impl Iterator<Item = Scope> {
        let scope = |ns: &str, n: &str| Scope {
            namespace: ns.to_owned(),
            name: n.to_owned(),
        };
        let namespaced = (!namespace.is_empty())
            .then(|| [scope(namespace, name), scope(namespace, "")])
            .into_iter()
            .flatten();
        namespaced.chain([scope("", name), Scope::default()])
    }
}

/// One subscriber's end in the dispatcher.
#[derive(Debug)]
struct Slot {
    tx: mpsc::Sender<Arc<Event>>,
    /// Set when the dispatcher drops the subscriber for falling behind.
    fell_behind: Arc<AtomicBool>,
}

/// Subscribers: those that see every change, and watchers by storage and scope.
#[derive(Debug, Default)]
struct Watchers {
    next_id: u64,
    every: HashMap<u64, Slot>,
    scoped: HashMap<String, HashMap<Scope, HashMap<u64, Slot>>>,
    /// Subscribers dropped so far for falling behind.
    fell_behind: u64,
}

impl Watchers {
    fn send(slots: &mut HashMap<u64, Slot>, event: &Arc<Event>, fell_behind: &mut u64) {
        slots.retain(|_, slot| match slot.tx.try_send(event.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                slot.fell_behind.store(true, Ordering::Release);
                *fell_behind += 1;
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
    }

    fn dispatch(&mut self, event: &Arc<Event>) {
        let Self {
            every,
            scoped,
            fell_behind,
            ..
        } = self;
        Self::send(every, event, fell_behind);
        let Some(scopes) = scoped.get_mut(&event.storage) else {
            return;
        };
        let mut emptied = Vec::new();
        for scope in Scope::covering(&event.namespace, &event.name) {
            if let Some(slots) = scopes.get_mut(&scope) {
                Self::send(slots, event, fell_behind);
                if slots.is_empty() {
                    emptied.push(scope);
                }
            }
        }
        for scope in emptied {
            self.prune(&event.storage, &scope);
        }
    }

    fn remove(&mut self, id: u64, key: Option<&(String, Scope)>) {
        let Some((storage, scope)) = key else {
            self.every.remove(&id);
            return;
        };
        if let Some(slots) = self.scoped.get_mut(storage).and_then(|s| s.get_mut(scope)) {
            slots.remove(&id);
        }
        self.prune(storage, scope);
    }

    /// Forgets a scope once no watcher is left in it, and a storage once no scope is.
    fn prune(&mut self, storage: &str, scope: &Scope) {
        let Some(scopes) = self.scoped.get_mut(storage) else {
            return;
        };
        if scopes.get(scope).is_some_and(HashMap::is_empty) {
            scopes.remove(scope);
        }
        if scopes.is_empty() {
            self.scoped.remove(storage);
        }
    }
}

fn lock<T>(w: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    w.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a subscription yields next.
#[derive(Debug)]
pub enum Next {
    Event(Arc<Event>),
    /// The subscriber fell `watch_buffer` changes behind and was dropped (after the changes
    /// already queued for it).
    FellBehind,
    /// The store is gone.
    Closed,
}

/// A subscriber's stream of changes; unsubscribes when dropped.
#[derive(Debug)]
pub struct Subscription {
    rx: mpsc::Receiver<Arc<Event>>,
    id: u64,
    key: Option<(String, Scope)>,
    fell_behind: Arc<AtomicBool>,
    watchers: Weak<Mutex<Watchers>>,
}

impl Subscription {
    /// The next change.
    pub async fn recv(&mut self) -> Next {
        match self.rx.recv().await {
            Some(ev) => Next::Event(ev),
            None if self.fell_behind.load(Ordering::Acquire) => Next::FellBehind,
            None => Next::Closed,
        }
    }

    /// Whether no change is queued. Under the store's lock this means the subscriber has
    /// taken every change up to the store's current resourceVersion.
    pub fn is_drained(&self) -> bool {
        self.rx.is_empty()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(w) = self.watchers.upgrade() {
            lock(&w).remove(self.id, self.key.as_ref());
        }
    }
}

/// Where ClusterRoleBindings are stored.
pub const CLUSTER_ROLE_BINDINGS: &str = "rbac.authorization.k8s.io/clusterrolebindings";

/// A binding subject as authorization matches it: `User`, `Group` or `ServiceAccount`
/// (`namespace:name`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Subject {
    pub kind: String,
    pub name: String,
}

impl Subject {
    /// The subject one entry of a binding's `subjects` names (a ServiceAccount without a
    /// namespace is in the binding's namespace); `None` for kinds RBAC does not know.
    pub fn of_entry(entry: &Value, binding_namespace: &str) -> Option<Self> {
        let field = |k: &str| entry.get(k).and_then(Value::as_str).unwrap_or_default();
        let name = match field("kind") {
            "User" | "Group" => field("name").to_owned(),
            "ServiceAccount" => {
                let ns = Some(field("namespace"))
                    .filter(|n| !n.is_empty())
                    .unwrap_or(binding_namespace);
                format!("{ns}:{}", field("name"))
            }
            _ => return None,
        };
        Some(Self {
            kind: field("kind").to_owned(),
            name,
        })
    }
}

fn binding_subjects(binding: &Value) -> Vec<Subject> {
    binding
        .get("subjects")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| Subject::of_entry(s, ""))
        .collect()
}

fn owner_uids(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

impl Store {
    /// An empty store keeping the last `capacity` events for watch replay; a subscriber that
    /// falls more than `watch_buffer` events behind is dropped.
    pub fn new(capacity: usize, watch_buffer: usize, registry: Registry) -> Self {
        Self {
            rv: 1,
            data: HashMap::new(),
            log: VecDeque::new(),
            capacity: capacity.max(16),
            registry,
            watchers: Arc::default(),
            watch_buffer: watch_buffer.max(16),
            dependents: HashMap::new(),
            binding_subjects: HashMap::new(),
        }
    }

    fn index(
        &mut self,
        storage: &str,
        namespace: &str,
        name: &str,
        old: Option<&Value>,
        new: Option<&Value>,
    ) {
        let key = (storage.to_owned(), namespace.to_owned(), name.to_owned());
        for uid in old.map(owner_uids).unwrap_or_default() {
            if let Some(set) = self.dependents.get_mut(&uid) {
                set.remove(&key);
                if set.is_empty() {
                    self.dependents.remove(&uid);
                }
            }
        }
        for uid in new.map(owner_uids).unwrap_or_default() {
            self.dependents.entry(uid).or_default().insert(key.clone());
        }
        if storage == CLUSTER_ROLE_BINDINGS {
            for subject in old.map(binding_subjects).unwrap_or_default() {
                if let Some(set) = self.binding_subjects.get_mut(&subject) {
                    set.remove(name);
                    if set.is_empty() {
                        self.binding_subjects.remove(&subject);
                    }
                }
            }
            for subject in new.map(binding_subjects).unwrap_or_default() {
                self.binding_subjects
                    .entry(subject)
                    .or_default()
                    .insert(name.to_owned());
            }
        }
    }

    /// The ClusterRoleBindings naming any of `subjects`, in name order.
    pub fn cluster_role_bindings_of(&self, subjects: &[Subject]) -> Vec<Arc<Value>> {
        let names: BTreeSet<&String> = subjects
            .iter()
            .filter_map(|s| self.binding_subjects.get(s))
            .flatten()
            .collect();
        names
            .into_iter()
            .filter_map(|n| self.get(CLUSTER_ROLE_BINDINGS, "", n))
            .collect()
    }

    /// Objects whose ownerReferences name `uid`.
    pub fn dependents_of(&self, uid: &str) -> Vec<(String, String, String)> {
        self.dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The latest resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.rv
    }

    /// Reserves the next resourceVersion.
    pub fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// One object.
    pub fn get(&self, storage: &str, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.data
            .get(storage)?
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Objects of a storage, in key order, optionally in one namespace, starting after a key.
    pub fn list<'a>(
        &'a self,
        storage: &str,
        namespace: Option<&'a str>,
        after: Option<&'a ObjKey>,
    ) -> impl Iterator<Item = (&'a ObjKey, &'a Arc<Value>)> + 'a {
        let map = self.data.get(storage);
        map.into_iter().flat_map(move |m| {
            let range: Box<dyn Iterator<Item = (&ObjKey, &Arc<Value>)>> = match after {
                Some(k) => Box::new(m.range::<ObjKey, _>((
                    std::ops::Bound::Excluded(k),
                    std::ops::Bound::Unbounded,
                ))),
                None => Box::new(m.iter()),
            };
            range.filter(move |((ns, _), _)| namespace.is_none_or(|n| n == ns))
        })
    }

    /// How many objects a storage holds in a namespace (or everywhere).
    pub fn count(&self, storage: &str, namespace: Option<&str>) -> usize {
        self.list(storage, namespace, None).count()
    }

    /// Stores an object (whose resourceVersion the caller set to `rv`) and logs the change.
    pub fn put(
        &mut self,
        storage: &str,
        namespace: &str,
        name: &str,
        rv: u64,
        obj: Value,
    ) -> Arc<Value> {
        let obj = Arc::new(obj);
        let key = (namespace.to_owned(), name.to_owned());
        let prev = self
            .data
            .entry(storage.to_owned())
            .or_default()
            .insert(key, obj.clone());
        self.index(storage, namespace, name, prev.as_deref(), Some(&obj));
        let type_ = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.record(Event {
            rv,
            storage: storage.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            type_,
            object: obj.clone(),
            prev,
            at: std::time::Instant::now(),
            encoded: Encoded::default(),
        });
        obj
    }

    /// Removes an object; `last` is its final state carrying the deletion's `rv`.
    pub fn remove(
        &mut self,
        storage: &str,
        namespace: &str,
        name: &str,
        rv: u64,
        last: Value,
    ) -> Arc<Value> {
        let key = (namespace.to_owned(), name.to_owned());
        let prev = self.data.get_mut(storage).and_then(|m| m.remove(&key));
        self.index(storage, namespace, name, prev.as_deref(), None);
        let last = Arc::new(last);
        self.record(Event {
            rv,
            storage: storage.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            type_: EventType::Deleted,
            object: last.clone(),
            prev,
            at: std::time::Instant::now(),
            encoded: Encoded::default(),
        });
        last
    }

    fn record(&mut self, event: Event) {
        let event = Arc::new(event);
        if self.log.len() >= self.capacity {
            self.log.pop_front();
        }
        self.log.push_back(event.clone());
        lock(&self.watchers).dispatch(&event);
    }

    /// Events after `rv`, or `Err(oldest)` when `rv` is older than what the log keeps.
    pub fn events_since(&self, rv: u64) -> Result<Vec<Arc<Event>>, u64> {
        let oldest = self.log.front().map(|e| e.rv).unwrap_or(self.rv + 1);
        // Every change after `rv` must still be in the log.
        if rv + 1 < oldest && rv < self.rv {
            return Err(oldest);
        }
        // The log is in resourceVersion order.
        let first = self.log.partition_point(|e| e.rv <= rv);
        Ok(self.log.range(first..).cloned().collect())
    }

    fn subscription(&self, key: Option<(String, Scope)>) -> Subscription {
        let (tx, rx) = mpsc::channel(self.watch_buffer);
        let fell_behind = Arc::new(AtomicBool::new(false));
        let slot = Slot {
            tx,
            fell_behind: fell_behind.clone(),
        };
        let mut w = lock(&self.watchers);
        w.next_id += 1;
        let id = w.next_id;
        match &key {
            None => {
                w.every.insert(id, slot);
            }
            Some((storage, scope)) => {
                w.scoped
                    .entry(storage.clone())
                    .or_default()
                    .entry(scope.clone())
                    .or_default()
                    .insert(id, slot);
            }
        }
        Subscription {
            rx,
            id,
            key,
            fell_behind,
            watchers: Arc::downgrade(&self.watchers),
        }
    }

    /// Subscribes to every future change. Call under the same lock as [`Self::events_since`]
    /// so no change falls between the two.
    pub fn subscribe_all(&self) -> Subscription {
        self.subscription(None)
    }

    /// Subscribes to future changes of one storage within a scope (see [`Self::subscribe_all`]).
    pub fn subscribe(&self, storage: &str, scope: Scope) -> Subscription {
        self.subscription(Some((storage.to_owned(), scope)))
    }

    /// How many subscribers have been dropped for falling behind.
    pub fn fell_behind(&self) -> u64 {
        lock(&self.watchers).fell_behind
    }

    /// How many watchers are subscribed, by storage.
    pub fn watcher_counts(&self) -> BTreeMap<String, usize> {
        lock(&self.watchers)
            .scoped
            .iter()
            .map(|(storage, scopes)| (storage.clone(), scopes.values().map(HashMap::len).sum()))
            .collect()
    }

    /// Every storage key with objects.
    pub fn storages(&self) -> Vec<String> {
        self.data.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn log_replays_and_expires() {
        let mut s = Store::new(16, 64, Registry::default());
        for i in 0..40 {
            let rv = s.next_rv();
            s.put("cm", "ns", &format!("o{i}"), rv, json!({"i": i}));
        }
        let last = s.current_rv();
        assert_eq!(s.events_since(last - 3).unwrap().len(), 3);
        assert!(s.events_since(2).is_err(), "rv 2 was compacted away");
        assert_eq!(s.count("cm", Some("ns")), 40);
        let after = ("ns".to_owned(), "o5".to_owned());
        assert_eq!(s.list("cm", None, Some(&after)).next().unwrap().0.1, "o6");
    }

    fn scope(namespace: &str, name: &str) -> Scope {
        Scope {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn queued(sub: &mut Subscription) -> Vec<String> {
        let mut names = Vec::new();
        while let Ok(ev) = sub.rx.try_recv() {
            names.push(format!("{}/{}/{}", ev.storage, ev.namespace, ev.name));
        }
        names
    }

    #[test]
    fn changes_reach_only_the_watchers_whose_scope_covers_them() {
        let mut s = Store::new(64, 64, Registry::default());
        let mut all = s.subscribe_all();
        let mut cms = s.subscribe("cm", Scope::default());
        let mut in_a = s.subscribe("cm", scope("a", ""));
        let mut pinned = s.subscribe("cm", scope("a", "x"));
        let mut by_name = s.subscribe("cm", scope("", "x"));
        let mut cluster = s.subscribe("nodes", scope("", "x"));
        for (storage, ns, name) in [
            ("cm", "a", "x"),
            ("cm", "a", "y"),
            ("cm", "b", "x"),
            ("nodes", "", "x"),
            ("nodes", "", "y"),
        ] {
            let rv = s.next_rv();
            s.put(storage, ns, name, rv, json!({}));
        }
        assert_eq!(queued(&mut all).len(), 5);
        assert_eq!(queued(&mut cms), ["cm/a/x", "cm/a/y", "cm/b/x"]);
        assert_eq!(queued(&mut in_a), ["cm/a/x", "cm/a/y"]);
        assert_eq!(queued(&mut pinned), ["cm/a/x"]);
        assert_eq!(queued(&mut by_name), ["cm/a/x", "cm/b/x"]);
        assert_eq!(queued(&mut cluster), ["nodes//x"]);
        assert_eq!(s.watcher_counts()["cm"], 4);
        // Dropped subscriptions leave the index.
        drop((cms, in_a, pinned, by_name));
        assert!(!s.watcher_counts().contains_key("cm"));
        assert_eq!(s.watcher_counts()["nodes"], 1);
    }

    #[tokio::test]
    async fn a_watcher_that_falls_behind_gets_what_was_queued_then_is_dropped() {
        let mut s = Store::new(64, 16, Registry::default());
        let mut slow = s.subscribe("cm", Scope::default());
        let mut other = s.subscribe("cm", scope("b", ""));
        for i in 0..20 {
            let rv = s.next_rv();
            s.put("cm", "a", &format!("o{i}"), rv, json!({}));
        }
        assert_eq!(s.fell_behind(), 1);
        let mut got = 0;
        while let Next::Event(_) = slow.recv().await {
            got += 1;
        }
        assert_eq!(got, 16, "the buffer's worth of changes arrive first");
        assert!(matches!(slow.recv().await, Next::FellBehind));
        // A watcher of another namespace heard nothing and is still subscribed.
        assert!(queued(&mut other).is_empty());
        assert_eq!(s.watcher_counts()["cm"], 1);
        drop(s);
        assert!(matches!(other.recv().await, Next::Closed));
    }

    #[test]
    fn cluster_role_bindings_are_found_by_subject_across_changes() {
        let mut s = Store::new(16, 64, Registry::default());
        let subject = |kind: &str, name: &str| Subject {
            kind: kind.into(),
            name: name.into(),
        };
        let names = |s: &Store, subjects: &[Subject]| -> Vec<String> {
            s.cluster_role_bindings_of(subjects)
                .iter()
                .map(|b| b["metadata"]["name"].as_str().unwrap().to_owned())
                .collect()
        };
        let put = |s: &mut Store, name: &str, subjects: serde_json::Value| {
            let rv = s.next_rv();
            let binding = json!({"metadata": {"name": name}, "subjects": subjects});
            s.put(CLUSTER_ROLE_BINDINGS, "", name, rv, binding);
        };
        put(
            &mut s,
            "b1",
            json!([
            {"kind": "User", "name": "alice"},
            {"kind": "ServiceAccount", "namespace": "ns", "name": "sa"}]),
        );
        put(&mut s, "b2", json!([{"kind": "Group", "name": "devs"}]));
        assert_eq!(names(&s, &[subject("User", "alice")]), ["b1"]);
        assert_eq!(names(&s, &[subject("ServiceAccount", "ns:sa")]), ["b1"]);
        assert_eq!(
            names(
                &s,
                &[
                    subject("User", "bob"),
                    subject("Group", "devs"),
                    subject("User", "alice")
                ]
            ),
            ["b1", "b2"]
        );
        // A binding whose subjects change is found by its new subjects only.
        put(&mut s, "b1", json!([{"kind": "User", "name": "bob"}]));
        assert!(names(&s, &[subject("User", "alice")]).is_empty());
        assert_eq!(names(&s, &[subject("User", "bob")]), ["b1"]);
        let rv = s.next_rv();
        s.remove(CLUSTER_ROLE_BINDINGS, "", "b1", rv, json!({}));
        assert!(names(&s, &[subject("User", "bob")]).is_empty());
        // Other storages are not indexed.
        let rv = s.next_rv();
        s.put(
            "rbac.authorization.k8s.io/rolebindings",
            "ns",
            "r1",
            rv,
            json!({"metadata": {"name": "r1"}, "subjects": [{"kind": "User", "name": "carol"}]}),
        );
        assert!(names(&s, &[subject("User", "carol")]).is_empty());
    }
}
