//! The work agent's watch-based status feedback (`feedbackScrapeType: Watch`), as upstream's
//! object reader keeps it (ocm `pkg/work/spoke/objectreader/reader.go`, v1.2+):
//!
//! - a manifest whose config asks for `Watch` and whose object was read is registered for its
//!   work; the first registration for a resource and namespace starts one watch of that
//!   resource in that namespace (an informer), the last one leaving stops it;
//! - at most [`MAX_FEEDBACK_WATCH`] watches per agent (`--max-feedback-watch`, 50): past
//!   that a manifest is not registered and its feedback is polled, as every other one is;
//! - each added or changed object wakes, at once, the status sync of every work registered
//!   for it (upstream queues the works its index finds for the object);
//! - the watch is made with the work agent's own identity: where that may not list and watch
//!   the resource, it never syncs and upstream falls back to a GET at each status sync, which
//!   the simulated agent does anyway (it polls every work at its status sync interval);
//! - a status sync reads a manifest whose resource and namespace have a watch that has synced
//!   from that watch's cache, not from the API server, whichever work registered it
//!   (`objectReader.getObject`: the informer's lister once `HasSynced`, else a GET).
//!
//! A manifest whose config no longer asks for `Watch` is unregistered; a work being deleted
//! unregisters all of its manifests (`UnRegisterInformerFromAppliedManifestWork`).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use futures::channel::mpsc;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use migration_api::ocm::work::ManifestWork;

/// Upstream's default `--max-feedback-watch`.
pub const MAX_FEEDBACK_WATCH: usize = 50;

/// One watch: a resource in one namespace (`""`: cluster-scoped or every namespace).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    group: String,
    version: String,
    resource: String,
    namespace: String,
}

/// Which works are registered for which object of a watch: (object name, work name).
type Registrations = BTreeSet<(String, String)>;

struct Watch {
    registrations: Arc<Mutex<Registrations>>,
    /// What the watch has seen (upstream's informer cache).
    store: Store<DynamicObject>,
    task: tokio::task::JoinHandle<()>,
}

/// The watches of one work agent (for the hub it serves now); dropping it stops them.
pub struct FeedbackWatches {
    managed: Client,
    /// The cluster namespace on the hub, where the works are.
    cluster: String,
    max: usize,
    watches: Mutex<HashMap<Key, Watch>>,
    wake: mpsc::UnboundedSender<ObjectRef<ManifestWork>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FeedbackWatches {
    /// The watches, and the stream of works they wake (for the work controller's
    /// `reconcile_on`).
    pub fn new(
        managed: Client,
        cluster: &str,
        max: usize,
    ) -> (Self, mpsc::UnboundedReceiver<ObjectRef<ManifestWork>>) {
        let (wake, woken) = mpsc::unbounded();
        let watches = Self {
            managed,
            cluster: cluster.to_owned(),
            max,
            watches: Mutex::default(),
            wake,
        };
        (watches, woken)
    }

    fn key(ar: &ApiResource, namespace: Option<&str>) -> Key {
        Key {
            group: ar.group.clone(),
            version: ar.version.clone(),
            resource: ar.plural.clone(),
            namespace: namespace.unwrap_or_default().to_owned(),
        }
    }

    /// Registers `work`'s manifest `name` (of `ar` in `namespace`), unless the agent already
    /// runs as many watches as it may and this one would need another (it is then polled).
    pub fn register(&self, work: &str, ar: &ApiResource, namespace: Option<&str>, name: &str) {
        let key = Self::key(ar, namespace);
        let mut watches = lock(&self.watches);
        if let Some(w) = watches.get(&key) {
            lock(&w.registrations).insert((name.to_owned(), work.to_owned()));
            return;
        }
        if watches.len() >= self.max {
            tracing::debug!(cluster = %self.cluster, resource = %ar.plural, "the most feedback watches run already; polled");
            return;
        }
        let registrations = Arc::new(Mutex::new(BTreeSet::from([(
            name.to_owned(),
            work.to_owned(),
        )])));
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.managed.clone(), ns, ar),
            None => Api::all_with(self.managed.clone(), ar),
        };
        let writer = reflector::store::Writer::new(ar.clone());
        let store = writer.as_reader();
        let task = tokio::spawn(watch(
            api,
            writer,
            registrations.clone(),
            self.cluster.clone(),
            self.wake.clone(),
        ));
        watches.insert(
            key,
            Watch {
                registrations,
                store,
                task,
            },
        );
    }

    /// Object `name` of `ar` in `namespace` as the watch of that resource and namespace holds it
    /// (`Some(None)`: the watch has synced and has no such object), or `None` where no such
    /// watch runs or it has not synced yet: the caller reads the API server.
    pub fn cached(
        &self,
        ar: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Option<Arc<DynamicObject>>> {
        let watches = lock(&self.watches);
        let w = watches.get(&Self::key(ar, namespace))?;
        futures::FutureExt::now_or_never(w.store.wait_until_ready())?.ok()?;
        let mut at = ObjectRef::new_with(name, ar.clone());
        at.namespace = namespace.map(str::to_owned);
        Some(w.store.get(&at))
    }

    /// Unregisters `work`'s manifest `name`; the watch stops with its last registration.
    pub fn unregister(&self, work: &str, ar: &ApiResource, namespace: Option<&str>, name: &str) {
        let key = Self::key(ar, namespace);
        let mut watches = lock(&self.watches);
        let Some(w) = watches.get(&key) else {
            return;
        };
        let empty = {
            let mut r = lock(&w.registrations);
            r.remove(&(name.to_owned(), work.to_owned()));
            r.is_empty()
        };
        if empty && let Some(w) = watches.remove(&key) {
            w.task.abort();
        }
    }

    /// Unregisters every manifest of `work` (it is being deleted).
    pub fn unregister_work(&self, work: &str) {
        let mut watches = lock(&self.watches);
        watches.retain(|_, w| {
            let empty = {
                let mut r = lock(&w.registrations);
                r.retain(|(_, registered)| registered != work);
                r.is_empty()
            };
            if empty {
                w.task.abort();
            }
            !empty
        });
    }
}

impl std::fmt::Debug for FeedbackWatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedbackWatches")
            .field("cluster", &self.cluster)
            .field("running", &lock(&self.watches).len())
            .finish_non_exhaustive()
    }
}

impl Drop for FeedbackWatches {
    fn drop(&mut self) {
        for w in lock(&self.watches).values() {
            w.task.abort();
        }
    }
}

/// Watches `api` into `writer`'s store and wakes the works registered for each object added
/// or changed.
async fn watch(
    api: Api<DynamicObject>,
    writer: reflector::store::Writer<DynamicObject>,
    registrations: Arc<Mutex<Registrations>>,
    cluster: String,
    wake: mpsc::UnboundedSender<ObjectRef<ManifestWork>>,
) {
    let events = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects();
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        let obj = match event {
            Ok(obj) => obj,
            Err(e) => {
                // Forbidden, say: never synced; the status sync's poll reads the object.
                tracing::debug!(%cluster, error = %e, "feedback watch");
                continue;
            }
        };
        let name = obj.name_any();
        let works: Vec<String> = lock(&registrations)
            .range((name.clone(), String::new())..)
            .take_while(|(n, _)| *n == name)
            .map(|(_, w)| w.clone())
            .collect();
        for work in works {
            if wake
                .unbounded_send(ObjectRef::new(&work).within(&cluster))
                .is_err()
            {
                return;
            }
        }
    }
}
