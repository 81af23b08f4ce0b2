//! What the migration controller reads again and again, from its watches' caches rather than
//! from the API server: the migrations' ManifestWorks and ManagedServiceAccounts (the watches
//! that wake a migration), the hubs (ManagedClusters), their ManagedClusterAddOns and the
//! AddOnDeploymentConfigs; and the bootstrap tokens, read from their Secrets only when a
//! ManagedServiceAccount says its token changed (the manager may not watch Secrets: it may
//! `get` the pool's names only).
//!
//! Each cache is filled by the watch that wakes the controller, before the event is handed on,
//! so a reconcile woken by a work's new status reads that status. A cache may lag the
//! manager's own writes by a moment; where "gone" in the cache would let a migration drop its
//! finalizer or forget what it still has on a hub, the API server is asked (`remove_work`,
//! `remove_everything`).

use std::collections::HashMap;
use std::sync::Mutex;

use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use migration_api::runtime::cached_watch;

use super::*;

/// The caches ([`Observed::start`] wires them into the controller).
pub(super) struct Observed {
    works: Store<ManifestWork>,
    msas: Store<ManagedServiceAccount>,
    addons: Store<ManagedClusterAddOn>,
    hubs: Store<ManagedCluster>,
    configs: Store<AddOnDeploymentConfig>,
    /// Bootstrap tokens by `<namespace>/<name>` of their ManagedServiceAccount.
    tokens: Mutex<HashMap<String, Token>>,
}

/// A bootstrap token as read from its Secret, and which issue of it that was.
#[derive(Clone, PartialEq)]
pub(super) struct Token {
    /// The ManagedServiceAccount's uid and `status.tokenSecretRef.lastRefreshTimestamp`: the
    /// managed-serviceaccount agent sets the latter whenever it writes a new token
    /// (`pkg/addon/agent/controller/token.go`, `setManagedServiceAccountSuccessStatus`), and a
    /// re-created ManagedServiceAccount has another uid.
    issue: (String, String),
    pub(super) token: String,
    /// `ca.crt` of the Secret, base64.
    pub(super) ca: Option<String>,
}

// A token never reaches a log.
impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("issue", &self.issue)
            .finish_non_exhaustive()
    }
}

/// Wakes no migration.
fn none<K>(_: K) -> Vec<ObjectRef<ManagedClusterMigration>> {
    Vec::new()
}

impl Observed {
    /// Wires the caches' watches into `controller` (so they run, and stop, with it).
    pub(super) fn start(
        client: &Client,
        controller: Controller<ManagedClusterMigration>,
    ) -> (Self, Controller<ManagedClusterMigration>) {
        let owned = watcher::Config::default().labels(labels::MIGRATION);
        let every = watcher::Config::default;
        let (works, w) = cached_watch(Api::<ManifestWork>::all(client.clone()), owned.clone());
        let (msas, s) = cached_watch(Api::<ManagedServiceAccount>::all(client.clone()), owned);
        let (addons, a) = cached_watch(Api::<ManagedClusterAddOn>::all(client.clone()), every());
        let (hubs, h) = cached_watch(Api::<ManagedCluster>::all(client.clone()), every());
        let (configs, c) = cached_watch(Api::<AddOnDeploymentConfig>::all(client.clone()), every());
        // The works and ManagedServiceAccounts wake their migration; the hubs' objects are
        // read when a migration runs for another reason.
        let controller = controller
            .watches_stream(w, owner_of)
            .watches_stream(s, owner_of)
            .watches_stream(a, none)
            .watches_stream(h, none)
            .watches_stream(c, none);
        let observed = Observed {
            works,
            msas,
            addons,
            hubs,
            configs,
            tokens: Mutex::default(),
        };
        (observed, controller)
    }

    /// Waits until every cache holds what its first list returned.
    pub(super) async fn ready(&self) {
        // A writer dropped means the controller is stopping; nothing waits then.
        let _ = self.works.wait_until_ready().await;
        let _ = self.msas.wait_until_ready().await;
        let _ = self.addons.wait_until_ready().await;
        let _ = self.hubs.wait_until_ready().await;
        let _ = self.configs.wait_until_ready().await;
    }

    pub(super) fn work(&self, hub: &str, name: &str) -> Option<Arc<ManifestWork>> {
        self.works.get(&ObjectRef::new(name).within(hub))
    }

    pub(super) fn addon(&self, hub: &str, name: &str) -> Option<Arc<ManagedClusterAddOn>> {
        self.addons.get(&ObjectRef::new(name).within(hub))
    }

    pub(super) fn hub(&self, name: &str) -> Option<Arc<ManagedCluster>> {
        self.hubs.get(&ObjectRef::new(name))
    }

    pub(super) fn config(&self, namespace: &str, name: &str) -> Option<Arc<AddOnDeploymentConfig>> {
        self.configs.get(&ObjectRef::new(name).within(namespace))
    }

    /// The ManagedServiceAccounts of migration `name` in `namespace`, in hub `hub`'s namespace.
    pub(super) fn service_accounts(
        &self,
        hub: &str,
        namespace: &str,
        name: &str,
    ) -> Vec<Arc<ManagedServiceAccount>> {
        self.msas
            .state()
            .into_iter()
            .filter(|msa| {
                msa.namespace().as_deref() == Some(hub)
                    && msa.labels().get(labels::MIGRATION).map(String::as_str) == Some(name)
                    && msa
                        .labels()
                        .get(labels::MIGRATION_NAMESPACE)
                        .map(String::as_str)
                        == Some(namespace)
            })
            .collect()
    }

    /// The token of ManagedServiceAccount `msa`: `None` while it reports none (no
    /// `tokenSecretRef`, or `TokenReported` False: the agent could not write it), else the
    /// one read before for the same issue, else read from its Secret now.
    pub(super) async fn token(
        &self,
        client: &Client,
        msa: &ManagedServiceAccount,
    ) -> Result<Option<Token>, Error> {
        let Some(status) = msa.status.as_ref() else {
            return Ok(None);
        };
        let Some(reference) = status.token_secret_ref.as_ref() else {
            return Ok(None);
        };
        let refused = status
            .conditions
            .as_deref()
            .and_then(|c| find_condition(c, "TokenReported"))
            .is_some_and(|c| c.status == FALSE);
        if refused {
            return Ok(None);
        }
        let ns = msa.namespace().unwrap_or_default();
        let key = format!("{ns}/{}", msa.name_any());
        let issue = (
            msa.uid().unwrap_or_default(),
            reference.last_refresh_timestamp.0.to_string(),
        );
        if let Ok(tokens) = self.tokens.lock()
            && let Some(t) = tokens.get(&key).filter(|t| t.issue == issue)
        {
            return Ok(Some(t.clone()));
        }
        // The token Secret bears the ManagedServiceAccount's name (managed-serviceaccount
        // `pkg/addon/agent/controller/token.go`): the only Secret names the manager may read
        // are the pool's.
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let Some(secret) = ignore_not_found(secrets.get(&msa.name_any()).await)
            .map_err(ctx_err("reading a bootstrap token's secret"))?
        else {
            return Ok(None);
        };
        let data = secret.data.unwrap_or_default();
        let Some(token) = data
            .get("token")
            .and_then(|t| String::from_utf8(t.0.clone()).ok())
        else {
            return Ok(None);
        };
        let ca = data
            .get("ca.crt")
            .map(|c| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &c.0));
        let read = Token { issue, token, ca };
        if let Ok(mut tokens) = self.tokens.lock() {
            tokens.insert(key, read.clone());
        }
        Ok(Some(read))
    }

    /// Forgets the tokens of a migration's ManagedServiceAccounts once they are revoked.
    pub(super) fn forget_tokens(&self, hub: &str, names: &[String]) {
        if let Ok(mut tokens) = self.tokens.lock() {
            for name in names {
                tokens.remove(&format!("{hub}/{name}"));
            }
        }
    }
}
