//! The object store: one global resourceVersion counter, objects by storage, and an event log
//! that watches replay from and subscribe to.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

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
    tx: broadcast::Sender<Arc<Event>>,
    /// Owner UID -> objects naming it in their ownerReferences (storage, namespace, name).
    dependents: HashMap<String, HashSet<(String, String, String)>>,
    /// ClusterRoleBinding names by subject: authorization looks the requester's bindings up
    /// here instead of reading every binding (a hub has one or more per managed cluster).
    binding_subjects: HashMap<Subject, BTreeSet<String>>,
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

fn binding_subjects(binding: &Value) -> Vec<Subject> {
    binding
        .get("subjects")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| {
            let field = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or_default();
            let name = match field("kind") {
                "User" | "Group" => field("name").to_owned(),
                "ServiceAccount" => format!("{}:{}", field("namespace"), field("name")),
                _ => return None,
            };
            Some(Subject {
                kind: field("kind").to_owned(),
                name,
            })
        })
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
    /// An empty store keeping the last `capacity` events for watch replay; a watcher that
    /// falls more than `watch_buffer` events behind gets a 410 and relists.
    pub fn new(capacity: usize, watch_buffer: usize, registry: Registry) -> Self {
        let (tx, _) = broadcast::channel(watch_buffer.max(16));
        Self {
            rv: 1,
            data: HashMap::new(),
            log: VecDeque::new(),
            capacity: capacity.max(16),
            registry,
            tx,
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
        });
        last
    }

    fn record(&mut self, event: Event) {
        let event = Arc::new(event);
        if self.log.len() >= self.capacity {
            self.log.pop_front();
        }
        self.log.push_back(event.clone());
        // No receiver is fine: nobody watches.
        let _ = self.tx.send(event);
    }

    /// Events after `rv`, or `Err(oldest)` when `rv` is older than what the log keeps.
    pub fn events_since(&self, rv: u64) -> Result<Vec<Arc<Event>>, u64> {
        let oldest = self.log.front().map(|e| e.rv).unwrap_or(self.rv + 1);
        // Every change after `rv` must still be in the log.
        if rv + 1 < oldest && rv < self.rv {
            return Err(oldest);
        }
        Ok(self.log.iter().filter(|e| e.rv > rv).cloned().collect())
    }

    /// Subscribes to every future change. Call under the same lock as [`Self::events_since`]
    /// so no change falls between the two.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
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
