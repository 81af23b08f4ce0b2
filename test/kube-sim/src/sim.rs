//! The API semantics: create, update, patch, delete and the access reviews, with the metadata,
//! status-subresource, validation and field-ownership rules of the real server.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use crate::apply::{self, Scope};
use crate::auth::{self, Attributes, Tokens, UserInfo};
use crate::convert::present;
use crate::error::{ApiError, ApiResult, success_status};
use crate::faults::Faults;
use crate::meta::{self, meta_str};
use crate::metrics::Metrics;
use crate::pki::Pki;
use crate::resources::{Builtin, Registry, ResourceType, crd_types};
use crate::schema;
use crate::store::Store;
use crate::types::TypeOracle;

/// How unknown fields in a write are treated (`fieldValidation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldValidation {
    /// Dropped silently.
    Ignore,
    /// Dropped, with a warning (the server's default).
    #[default]
    Warn,
    /// Refused.
    Strict,
}

impl FieldValidation {
    /// Parses the query parameter.
    pub fn parse(s: &str) -> ApiResult<Self> {
        match s {
            "Ignore" => Ok(Self::Ignore),
            "Warn" | "" => Ok(Self::Warn),
            "Strict" => Ok(Self::Strict),
            other => Err(ApiError::bad_request(format!(
                "fieldValidation must be one of Ignore, Warn, Strict, got {other:?}"
            ))),
        }
    }
}

/// Options of a write.
#[derive(Clone, Debug, Default)]
pub struct WriteOpts {
    pub field_manager: Option<String>,
    pub dry_run: bool,
    pub field_validation: FieldValidation,
    pub user_agent: String,
    pub force: bool,
}

impl WriteOpts {
    /// The field manager: the one given, else derived from the user agent, as the server does.
    fn manager(&self) -> String {
        if let Some(m) = self.field_manager.as_deref().filter(|m| !m.is_empty()) {
            return m.to_owned();
        }
        let prefix = self.user_agent.split('/').next().unwrap_or_default();
        if prefix.is_empty() {
            "unknown".into()
        } else {
            prefix.chars().take(128).collect()
        }
    }
}

/// Result of a write.
#[derive(Clone, Debug)]
pub struct Written {
    pub object: Value,
    pub warnings: Vec<String>,
    pub created: bool,
}

/// Options of a delete.
#[derive(Clone, Debug, Default)]
pub struct DeleteOpts {
    /// `Foreground`, `Background` or `Orphan`.
    pub propagation: Option<String>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
}

/// Start-up options of a server instance.
#[derive(Clone, Debug)]
pub struct Options {
    /// Names the instance (CA name, kubeconfig cluster name).
    pub name: String,
    /// Plain HTTP with no authentication or authorization.
    pub insecure_http: bool,
    /// Directories of CRD YAML files loaded at start-up.
    pub crd_dirs: Vec<PathBuf>,
    /// How many changes watches can replay.
    pub event_log_capacity: usize,
    /// How many changes may wait for a watcher before the server closes it (its client then
    /// watches again from its last resourceVersion).
    pub watch_buffer: usize,
    /// How often a watch that allows bookmarks gets one.
    pub bookmark_interval: Duration,
    /// Shortest ServiceAccount token lifetime accepted (the real server: 600 s).
    pub min_token_expiration_secs: i64,
    /// Largest object stored, in bytes of its JSON: etcd refuses a request over its
    /// `--max-request-bytes` (1.5 MiB by default), and the API server answers 500
    /// `etcdserver: request is too large` (kubernetes/kubernetes#112152).
    pub max_object_bytes: usize,
    /// Validating admission of the server's webhooks, run on create and on update of an object
    /// (not of its status).
    pub validators: Vec<Validator>,
    /// Mutating admission of the server's webhooks, run before validation on create (no old
    /// object) and on update of an object (not of its status).
    pub mutators: Vec<Mutator>,
    /// Also accept connections from this process through memory ([`crate::in_process`]), so
    /// that a fleet of many servers and their clients in one process needs no open file per
    /// connection. Other processes connect over TCP as always.
    pub in_process_connections: bool,
}

/// A validating admission webhook of one kind: `check` returns why an object is refused, and
/// the request fails 403 `admission webhook "<name>" denied the request: <why>`.
#[derive(Clone)]
pub struct Validator {
    /// The webhook's name in the message.
    pub name: String,
    pub group: String,
    pub kind: String,
    pub check: Check,
}

/// What a [`Validator`] runs on an object: why it is refused, if it is.
pub type Check = Arc<dyn Fn(&Value) -> Result<(), String> + Send + Sync>;

/// A mutating admission webhook of one kind: `admit` sees the stored object (`None` on create)
/// and may change the new one, or refuses it: the request fails 400
/// `admission webhook "<name>" denied the request: <why>` (the webhook answers BadRequest,
/// as OCM's do).
#[derive(Clone)]
pub struct Mutator {
    /// The webhook's name in the message.
    pub name: String,
    pub group: String,
    pub kind: String,
    pub admit: Admit,
}

/// What a [`Mutator`] runs: the old object (none on create) and the new one, which it may change.
pub type Admit = Arc<dyn Fn(Option<&Value>, &mut Value) -> Result<(), String> + Send + Sync>;

impl std::fmt::Debug for Mutator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mutator")
            .field("name", &self.name)
            .field("group", &self.group)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Validator")
            .field("name", &self.name)
            .field("group", &self.group)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// etcd's default `--max-request-bytes`.
pub const DEFAULT_MAX_OBJECT_BYTES: usize = 1536 * 1024;

impl Default for Options {
    fn default() -> Self {
        Self {
            name: "kube-sim".into(),
            insecure_http: false,
            crd_dirs: Vec::new(),
            event_log_capacity: 100_000,
            watch_buffer: 4096,
            bookmark_interval: Duration::from_secs(5),
            min_token_expiration_secs: 600,
            max_object_bytes: DEFAULT_MAX_OBJECT_BYTES,
            validators: Vec::new(),
            mutators: Vec::new(),
            in_process_connections: false,
        }
    }
}

/// Shared state of one server instance.
#[derive(Debug)]
pub struct Inner {
    pub store: Mutex<Store>,
    pub tokens: Mutex<Tokens>,
    pub pki: Pki,
    pub faults: Faults,
    pub metrics: Metrics,
    pub opts: Options,
}

/// A handle on one server instance's API semantics.
#[derive(Clone, Debug)]
pub struct Sim {
    pub inner: Arc<Inner>,
}

const CRD_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";
const SERVER_MANAGED: &[&str] = &[
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
    "managedFields",
];

fn set_meta(obj: &mut Value, key: &str, v: Value) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert(key.into(), v);
    }
}

fn remove_meta(obj: &mut Value, key: &str) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove(key);
    }
}

fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether two objects have the same spec: equal but for metadata, apiVersion, kind and
/// (where it is a subresource) status; a change of anything else bumps generation.
fn same_spec(a: &Value, b: &Value, has_status: bool) -> bool {
    let skip: &[&str] = if has_status {
        &["metadata", "apiVersion", "kind", "status"]
    } else {
        &["metadata", "apiVersion", "kind"]
    };
    eq_except(a, b, skip)
}

/// The same object but for resourceVersion: an update that changes nothing is not written.
fn same_content(a: &Value, b: &Value) -> bool {
    match (a.get("metadata"), b.get("metadata")) {
        (Some(ma), Some(mb)) => {
            eq_except(a, b, &["metadata"]) && eq_except(ma, mb, &["resourceVersion"])
        }
        _ => a == b,
    }
}

/// Whether two values are equal but for the keys `skip` of objects (compared without
/// copying either: this runs on every write).
fn eq_except(a: &Value, b: &Value, skip: &[&str]) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let kept = |k: &String| !skip.contains(&k.as_str());
    let mut n = 0;
    for (k, v) in a.iter().filter(|(k, _)| kept(k)) {
        n += 1;
        if b.get(k) != Some(v) {
            return false;
        }
    }
    n == b.keys().filter(|k| kept(k)).count()
}

impl Sim {
    /// A new instance with the built-in kinds and the bootstrap RBAC.
    pub fn new(opts: Options) -> Result<Self, crate::StartError> {
        let pki = Pki::new(&opts.name).map_err(|e| crate::StartError::Pki(e.to_string()))?;
        let store = Store::new(
            opts.event_log_capacity,
            opts.watch_buffer,
            Registry::with_builtins(),
        );
        let sim = Self {
            inner: Arc::new(Inner {
                store: Mutex::new(store),
                tokens: Mutex::new(Tokens::default()),
                pki,
                faults: Faults::default(),
                metrics: Metrics::default(),
                opts,
            }),
        };
        let system = UserInfo::system();
        let opts = WriteOpts {
            field_manager: Some("kube-sim".into()),
            ..Default::default()
        };
        for ns in ["default", "kube-system", "kube-public"] {
            let rt = sim
                .find("", "v1", "namespaces")
                .ok_or(crate::StartError::Internal("no namespaces".into()))?;
            sim.create(&system, &rt, "", json!({"metadata": {"name": ns}}), &opts)
                .map_err(|e| crate::StartError::Internal(e.to_string()))?;
        }
        for (storage, obj) in auth::bootstrap_rbac() {
            let (group, plural) = storage.split_once('/').unwrap_or(("", storage));
            let rt = sim
                .find(group, "v1", plural)
                .ok_or(crate::StartError::Internal(format!("no {storage}")))?;
            sim.create(&system, &rt, "", obj, &opts)
                .map_err(|e| crate::StartError::Internal(e.to_string()))?;
        }
        Ok(sim)
    }

    /// The store, locked.
    pub fn store(&self) -> MutexGuard<'_, Store> {
        match self.inner.store.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The token tables, locked.
    pub fn tokens(&self) -> MutexGuard<'_, Tokens> {
        match self.inner.tokens.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// A served type by URL parts.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.store().registry.find(group, version, plural)
    }

    /// Whether RBAC allows the request.
    pub fn authorize(&self, user: &UserInfo, a: &Attributes) -> bool {
        auth::authorize(&self.store(), user, a)
    }

    // ---- reads ----

    /// One object, as `rt` presents it.
    pub fn get(&self, rt: &ResourceType, ns: &str, name: &str) -> ApiResult<Value> {
        self.get_stored(rt, ns, name).map(|o| present(rt, &o))
    }

    /// An object as stored (to be presented for `rt` by the caller).
    pub fn get_stored(&self, rt: &ResourceType, ns: &str, name: &str) -> ApiResult<Arc<Value>> {
        let store = self.store();
        store
            .get(&rt.storage, ns, name)
            .ok_or_else(|| ApiError::not_found(&rt.plural, &rt.group, name))
    }

    // ---- writes ----

    fn check_body(
        &self,
        rt: &ResourceType,
        body: &mut Value,
        ns: &str,
        name: Option<&str>,
    ) -> ApiResult<()> {
        let Some(map) = body.as_object_mut() else {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON or YAML object",
            ));
        };
        let want_api = rt.api_version();
        match map.get("apiVersion").and_then(Value::as_str) {
            None | Some("") => {
                map.insert("apiVersion".into(), json!(want_api));
            }
            Some(a) if a == want_api => {}
            Some(a) => {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({a}) does not match the expected API version ({want_api})"
                )));
            }
        }
        match map.get("kind").and_then(Value::as_str) {
            None | Some("") => {
                map.insert("kind".into(), json!(rt.kind));
            }
            Some(k) if k == rt.kind => {}
            Some(k) => {
                return Err(ApiError::bad_request(format!(
                    "the kind in the data ({k}) does not match the expected kind ({})",
                    rt.kind
                )));
            }
        }
        let meta = map.entry("metadata").or_insert_with(|| json!({}));
        let Some(meta) = meta.as_object_mut() else {
            return Err(ApiError::bad_request("metadata must be an object"));
        };
        if rt.namespaced {
            match meta.get("namespace").and_then(Value::as_str) {
                None | Some("") => {
                    meta.insert("namespace".into(), json!(ns));
                }
                Some(n) if n == ns => {}
                Some(_) => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
            }
        } else {
            meta.remove("namespace");
        }
        if let Some(url_name) = name {
            match meta.get("name").and_then(Value::as_str) {
                None | Some("") => {
                    meta.insert("name".into(), json!(url_name));
                }
                Some(n) if n == url_name => {}
                Some(n) => {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({n}) does not match the name on the URL ({url_name})"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Prunes unknown fields (returning their paths) and collects schema violations.
    fn normalize(
        &self,
        rt: &ResourceType,
        obj: &mut Value,
    ) -> (Vec<String>, Vec<(String, String)>) {
        let mut unknown = Vec::new();
        let mut errors: Vec<(String, String)> = Vec::new();
        if let Some(schema) = &rt.schema {
            let out = schema::process_object(schema, obj);
            unknown = out.unknown;
            errors = out.errors;
        } else if let Some(allowed) = rt.builtin_fields() {
            if let Some(map) = obj.as_object_mut() {
                let extra: Vec<String> = map
                    .keys()
                    .filter(|k| {
                        !matches!(k.as_str(), "apiVersion" | "kind" | "metadata")
                            && !allowed.contains(&k.as_str())
                    })
                    .cloned()
                    .collect();
                for k in extra {
                    map.remove(&k);
                    unknown.push(k);
                }
            }
            if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
                let extra: Vec<String> = meta
                    .keys()
                    .filter(|k| !schema::OBJECT_META_FIELDS.contains(&k.as_str()))
                    .cloned()
                    .collect();
                for k in extra {
                    meta.remove(&k);
                    unknown.push(format!("metadata.{k}"));
                }
            }
            errors.extend(builtin_validation(rt, obj));
        }
        (unknown, errors)
    }

    /// Turns unknown fields into an error or warnings, per `fieldValidation`.
    fn unknown_fields_verdict(unknown: &[String], fv: FieldValidation) -> ApiResult<Vec<String>> {
        match fv {
            FieldValidation::Strict if !unknown.is_empty() => {
                let list: Vec<String> = unknown
                    .iter()
                    .map(|u| format!("unknown field \"{u}\""))
                    .collect();
                Err(ApiError::bad_request(format!(
                    "strict decoding error: {}",
                    list.join(", ")
                )))
            }
            FieldValidation::Warn => Ok(unknown
                .iter()
                .map(|u| format!("unknown field \"{u}\""))
                .collect()),
            _ => Ok(Vec::new()),
        }
    }

    /// Normalises and validates the content of a write; returns warnings.
    fn validate(
        &self,
        rt: &ResourceType,
        obj: &mut Value,
        fv: FieldValidation,
    ) -> ApiResult<Vec<String>> {
        let name = meta_str(obj, "name").unwrap_or_default().to_owned();
        let (unknown, mut errors) = self.normalize(rt, obj);
        if let Err(msg) = meta::validate_name(&name, rt.name_rule) {
            errors.push((
                "metadata.name".into(),
                format!("Invalid value: {name:?}: {msg}"),
            ));
        }
        validate_metadata(obj, &mut errors);
        if !errors.is_empty() {
            return Err(ApiError::invalid(&rt.kind, &rt.group, &name, &errors));
        }
        Self::unknown_fields_verdict(&unknown, fv)
    }

    /// Creates an object.
    /// The validating webhooks of `rt`'s kind.
    fn webhooks(&self, rt: &ResourceType, obj: &Value) -> ApiResult<()> {
        for v in &self.inner.opts.validators {
            if v.group == rt.group && v.kind == rt.kind {
                (v.check)(obj).map_err(|why| {
                    ApiError::forbidden(format!(
                        "admission webhook \"{}\" denied the request: {why}",
                        v.name
                    ))
                })?;
            }
        }
        Ok(())
    }

    /// The mutating webhooks of `rt`'s kind, in order.
    fn mutate(&self, rt: &ResourceType, old: Option<&Value>, obj: &mut Value) -> ApiResult<()> {
        for m in &self.inner.opts.mutators {
            if m.group == rt.group && m.kind == rt.kind {
                (m.admit)(old, obj).map_err(|why| {
                    ApiError::bad_request(format!(
                        "admission webhook \"{}\" denied the request: {why}",
                        m.name
                    ))
                })?;
            }
        }
        Ok(())
    }

    /// Whether etcd would store `obj` ([`Options::max_object_bytes`]).
    fn fits(&self, obj: &Value) -> ApiResult<()> {
        let size = serde_json::to_vec(obj).map_or(0, |b| b.len());
        if size > self.inner.opts.max_object_bytes {
            return Err(ApiError::internal("etcdserver: request is too large"));
        }
        Ok(())
    }

    pub fn create(
        &self,
        user: &UserInfo,
        rt: &Arc<ResourceType>,
        ns: &str,
        body: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Written> {
        let mut store = self.store();
        self.create_locked(&mut store, user, rt, ns, body, opts, None)
    }

    #[allow(clippy::too_many_arguments)]
    fn create_locked(
        &self,
        store: &mut Store,
        user: &UserInfo,
        rt: &Arc<ResourceType>,
        ns: &str,
        mut obj: Value,
        opts: &WriteOpts,
        applied: Option<&Value>,
    ) -> ApiResult<Written> {
        if rt.virtual_kind {
            return Err(ApiError::method_not_allowed(
                "access reviews are answered, not stored",
            ));
        }
        self.check_body(rt, &mut obj, ns, None)?;
        let mut name = meta_str(&obj, "name").unwrap_or_default().to_owned();
        if name.is_empty() {
            let prefix = meta_str(&obj, "generateName")
                .unwrap_or_default()
                .to_owned();
            if prefix.is_empty() {
                return Err(ApiError::invalid(
                    &rt.kind,
                    &rt.group,
                    "",
                    &[(
                        "metadata.name".into(),
                        "Required value: name or generateName is required".into(),
                    )],
                ));
            }
            name = meta::generate_name(&prefix);
            set_meta(&mut obj, "name", json!(name));
        }
        if rt.namespaced {
            match store.get("namespaces", "", ns) {
                None => return Err(ApiError::not_found("namespaces", "", ns)),
                Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => {
                    return Err(ApiError::forbidden(format!(
                        "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                        crate::error::qualified(&rt.plural, &rt.group)
                    )));
                }
                _ => {}
            }
        }
        if store.get(&rt.storage, ns, &name).is_some() {
            return Err(ApiError::already_exists(&rt.plural, &rt.group, &name));
        }
        for k in SERVER_MANAGED {
            if *k != "managedFields" || applied.is_none() {
                remove_meta(&mut obj, k);
            }
        }
        if rt.has_status()
            && rt.builtin.is_none()
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        admit_create(user, rt, &mut obj)?;
        self.mutate(rt, None, &mut obj)?;
        let warnings = self.validate(rt, &mut obj, opts.field_validation)?;
        self.webhooks(rt, &obj)?;
        let now = meta::now();
        set_meta(&mut obj, "uid", json!(meta::uid()));
        set_meta(&mut obj, "creationTimestamp", json!(now));
        if rt.tracks_generation {
            set_meta(&mut obj, "generation", json!(1));
        }
        if applied.is_none() {
            let oracle = TypeOracle::for_type(rt);
            apply::track_update(
                None,
                &mut obj,
                &oracle,
                Scope::All,
                &opts.manager(),
                "",
                &rt.api_version(),
                &now,
            );
        }
        if opts.dry_run {
            return Ok(Written {
                object: obj,
                warnings,
                created: true,
            });
        }
        self.fits(&obj)?;
        let rv = store.next_rv();
        set_meta(&mut obj, "resourceVersion", json!(rv.to_string()));
        if rt.builtin == Some(Builtin::CustomResourceDefinition) {
            register_crd(store, &mut obj)?;
        }
        let stored = store.put(&rt.storage, ns, &name, rv, obj);
        Ok(Written {
            object: present(rt, &stored),
            warnings,
            created: true,
        })
    }

    /// Replaces an object (PUT), on the main resource or a subresource.
    pub fn update(
        &self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        sub: &str,
        mut body: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Written> {
        self.check_body(rt, &mut body, ns, Some(name))?;
        let mut store = self.store();
        let old = store
            .get(&rt.storage, ns, name)
            .ok_or_else(|| ApiError::not_found(&rt.plural, &rt.group, name))?;
        let old = present(rt, &old);
        check_resource_version(rt, name, &body, &old)?;
        self.commit_update(&mut store, rt, ns, name, sub, &old, body, opts, false)
    }

    /// Patches an object (JSON, merge, strategic merge or apply).
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &self,
        user: &UserInfo,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        sub: &str,
        content_type: &str,
        body: &[u8],
        opts: &WriteOpts,
    ) -> ApiResult<Written> {
        let mut store = self.store();
        let old = store.get(&rt.storage, ns, name).map(|o| present(rt, &o));
        let oracle = TypeOracle::for_type(rt);
        let kind = content_type.split(';').next().unwrap_or_default().trim();
        if kind == "application/apply-patch+yaml" || kind == "application/apply-patch+cbor" {
            let manager = opts
                .field_manager
                .clone()
                .filter(|m| !m.is_empty())
                .ok_or_else(|| ApiError::bad_request("PATCH, application/apply-patch+yaml: fieldManager is required for apply requests"))?;
            let mut config: Value = serde_yaml::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
            self.check_body(rt, &mut config, ns, Some(name))?;
            // Unknown fields are judged on the configuration; validity on the merged object.
            let (unknown, _) = self.normalize(rt, &mut config);
            let warnings = Self::unknown_fields_verdict(&unknown, opts.field_validation)?;
            let scope = match sub {
                "status" => Scope::StatusOnly,
                _ if rt.has_status() => Scope::NoStatus,
                _ => Scope::All,
            };
            if scope == Scope::NoStatus
                && let Some(m) = config.as_object_mut()
            {
                m.remove("status");
            }
            let now = meta::now();
            let live = old.clone().unwrap_or_else(|| json!({}));
            let mut merged = apply::apply(
                &live,
                &config,
                &oracle,
                scope,
                &manager,
                sub,
                opts.force,
                &rt.api_version(),
                &now,
            )
            .map_err(|c| ApiError::conflict_message(c.message()))?;
            let mut result = match old {
                None => {
                    if !sub.is_empty() {
                        return Err(ApiError::not_found(&rt.plural, &rt.group, name));
                    }
                    self.create_locked(&mut store, user, rt, ns, merged, opts, Some(&config))?
                }
                Some(old) => {
                    check_resource_version(rt, name, &config, &old)?;
                    set_meta(
                        &mut merged,
                        "resourceVersion",
                        json!(meta_str(&old, "resourceVersion")),
                    );
                    self.commit_update(&mut store, rt, ns, name, sub, &old, merged, opts, true)?
                }
            };
            result.warnings.extend(warnings);
            return Ok(result);
        }
        let old = old.ok_or_else(|| ApiError::not_found(&rt.plural, &rt.group, name))?;
        let patched = match kind {
            "application/json-patch+json" => crate::patch::json_patch(&old, body)?,
            "application/merge-patch+json" => crate::patch::merge_patch(&old, body)?,
            "application/strategic-merge-patch+json" => {
                if rt.builtin.is_none() {
                    return Err(ApiError::unsupported_media_type("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".to_string()));
                }
                crate::patch::strategic_merge_patch(&old, body, &oracle)?
            }
            other => {
                return Err(ApiError::unsupported_media_type(format!(
                    "the body of the request was in an unknown format ({other}) - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json"
                )));
            }
        };
        let mut patched = patched;
        self.check_body(rt, &mut patched, ns, Some(name))?;
        check_resource_version(rt, name, &patched, &old)?;
        self.commit_update(&mut store, rt, ns, name, sub, &old, patched, opts, false)
    }

    /// The common tail of update and patch: subresource rules, immutable metadata, admission,
    /// validation, generation, ownership, no-op detection, and finalization.
    #[allow(clippy::too_many_arguments)]
    fn commit_update(
        &self,
        store: &mut Store,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        sub: &str,
        old: &Value,
        new: Value,
        opts: &WriteOpts,
        applied: bool,
    ) -> ApiResult<Written> {
        let mut new = match sub {
            "" => {
                let mut n = new;
                if rt.has_status()
                    && let Some(m) = n.as_object_mut()
                {
                    match old.get("status") {
                        Some(s) => m.insert("status".into(), s.clone()),
                        None => m.remove("status"),
                    };
                }
                n
            }
            "status" if rt.has_status() => {
                let mut n = old.clone();
                if let Some(m) = n.as_object_mut() {
                    match new.get("status") {
                        Some(s) => m.insert("status".into(), s.clone()),
                        None => m.remove("status"),
                    };
                }
                if applied && let Some(mf) = new.pointer("/metadata/managedFields") {
                    set_meta(&mut n, "managedFields", mf.clone());
                }
                n
            }
            "approval" if rt.builtin == Some(Builtin::CertificateSigningRequest) => {
                let mut n = old.clone();
                let conditions = new
                    .pointer("/status/conditions")
                    .cloned()
                    .unwrap_or(json!([]));
                let status = n
                    .as_object_mut()
                    .map(|m| m.entry("status").or_insert_with(|| json!({})));
                if let Some(Value::Object(s)) = status {
                    s.insert("conditions".into(), conditions);
                }
                n
            }
            "finalize" if rt.builtin == Some(Builtin::Namespace) => {
                let mut n = old.clone();
                n["spec"]["finalizers"] = new
                    .pointer("/spec/finalizers")
                    .cloned()
                    .unwrap_or(json!([]));
                n
            }
            other => return Err(ApiError::no_route(&format!("{}/{other}", rt.plural))),
        };
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "name",
            "namespace",
            "resourceVersion",
        ] {
            match old.pointer(&format!("/metadata/{k}")) {
                Some(v) => set_meta(&mut new, k, v.clone()),
                None => remove_meta(&mut new, k),
            }
        }
        if !applied {
            match old.pointer("/metadata/managedFields") {
                Some(v) => set_meta(&mut new, "managedFields", v.clone()),
                None => remove_meta(&mut new, "managedFields"),
            }
        }
        let deleting = old.pointer("/metadata/deletionTimestamp").is_some();
        if deleting {
            let before = finalizers(old);
            if let Some(added) = finalizers(&new).into_iter().find(|f| !before.contains(f)) {
                return Err(ApiError::invalid(
                    &rt.kind,
                    &rt.group,
                    name,
                    &[(
                        "metadata.finalizers".into(),
                        format!(
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{\"{added}\"}}"
                        ),
                    )],
                ));
            }
        }
        admit_update(rt, old, &mut new)?;
        if sub.is_empty() {
            self.mutate(rt, Some(old), &mut new)?;
        }
        let warnings = self.validate(rt, &mut new, opts.field_validation)?;
        if sub.is_empty() {
            self.webhooks(rt, &new)?;
        }
        if rt.tracks_generation && !same_spec(&new, old, rt.has_status()) {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            set_meta(&mut new, "generation", json!(g + 1));
        }
        let now = meta::now();
        if !applied {
            let oracle = TypeOracle::for_type(rt);
            let scope = match sub {
                "status" => Scope::StatusOnly,
                _ if rt.has_status() => Scope::NoStatus,
                _ => Scope::All,
            };
            apply::track_update(
                Some(old),
                &mut new,
                &oracle,
                scope,
                &opts.manager(),
                sub,
                &rt.api_version(),
                &now,
            );
        }
        if same_content(&new, old) {
            return Ok(Written {
                object: old.clone(),
                warnings,
                created: false,
            });
        }
        if opts.dry_run {
            return Ok(Written {
                object: new,
                warnings,
                created: false,
            });
        }
        self.fits(&new)?;
        let rv = store.next_rv();
        set_meta(&mut new, "resourceVersion", json!(rv.to_string()));
        if deleting && finalizers(&new).is_empty() && !namespace_held(rt, &new) {
            let last = store.remove(&rt.storage, ns, name, rv, new);
            if rt.builtin == Some(Builtin::CustomResourceDefinition) {
                store.registry.set_crd(name, Vec::new());
            }
            return Ok(Written {
                object: present(rt, &last),
                warnings,
                created: false,
            });
        }
        if rt.builtin == Some(Builtin::CustomResourceDefinition) && !deleting {
            register_crd(store, &mut new)?;
        }
        let stored = store.put(&rt.storage, ns, name, rv, new);
        Ok(Written {
            object: present(rt, &stored),
            warnings,
            created: false,
        })
    }

    /// Deletes an object; returns the response body and whether the object is gone.
    pub fn delete(
        &self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> ApiResult<(Value, bool)> {
        let mut store = self.store();
        self.delete_locked(&mut store, rt, ns, name, opts)
    }

    /// Deletes under an already held lock (controllers and deletecollection).
    pub fn delete_locked(
        &self,
        store: &mut Store,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> ApiResult<(Value, bool)> {
        let stored = store
            .get(&rt.storage, ns, name)
            .ok_or_else(|| ApiError::not_found(&rt.plural, &rt.group, name))?;
        let old = present(rt, &stored);
        let uid = meta_str(&old, "uid").unwrap_or_default().to_owned();
        if let Some(want) = &opts.precondition_uid
            && *want != uid
        {
            return Err(ApiError::conflict(
                &rt.plural,
                &rt.group,
                name,
                format!(
                    "Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"
                ),
            ));
        }
        if let Some(want) = &opts.precondition_rv {
            let have = meta_str(&old, "resourceVersion").unwrap_or_default();
            if want != have {
                return Err(ApiError::conflict(
                    &rt.plural,
                    &rt.group,
                    name,
                    format!(
                        "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {have}"
                    ),
                ));
            }
        }
        let mut fins = finalizers(&old);
        match opts.propagation.as_deref() {
            Some("Foreground") if !fins.iter().any(|f| f == "foregroundDeletion") => {
                fins.push("foregroundDeletion".into())
            }
            Some("Orphan") if !fins.iter().any(|f| f == "orphan") => fins.push("orphan".into()),
            Some("Foreground" | "Orphan" | "Background") | None => {}
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "propagationPolicy {other:?} is not one of Foreground, Background, Orphan"
                )));
            }
        }
        let held = rt.builtin == Some(Builtin::Namespace) || !fins.is_empty();
        if opts.dry_run {
            return Ok((old, !held));
        }
        let rv = store.next_rv();
        let mut new = old.clone();
        set_meta(&mut new, "resourceVersion", json!(rv.to_string()));
        if held {
            if old.pointer("/metadata/deletionTimestamp").is_none() {
                set_meta(&mut new, "deletionTimestamp", json!(meta::now()));
                set_meta(&mut new, "deletionGracePeriodSeconds", json!(0));
            }
            if !fins.is_empty() {
                set_meta(&mut new, "finalizers", json!(fins));
            }
            if rt.builtin == Some(Builtin::Namespace) {
                new["status"] = json!({"phase": "Terminating"});
            }
            if same_content(&new, &old) {
                return Ok((old, false));
            }
            let stored = store.put(&rt.storage, ns, name, rv, new);
            return Ok((present(rt, &stored), false));
        }
        store.remove(&rt.storage, ns, name, rv, new);
        Ok((success_status(name, &rt.group, &rt.plural, &uid), true))
    }

    // ---- access reviews ----

    /// Answers a SelfSubjectAccessReview or SubjectAccessReview.
    pub fn review(&self, user: &UserInfo, rt: &ResourceType, mut body: Value) -> ApiResult<Value> {
        let spec = body.get("spec").cloned().unwrap_or(json!({}));
        let subject = if rt.builtin == Some(Builtin::SelfSubjectAccessReview) {
            user.clone()
        } else {
            let name = spec.get("user").and_then(Value::as_str).unwrap_or_default();
            let groups: Vec<String> = spec
                .get("groups")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|g| g.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            if name.is_empty() && groups.is_empty() {
                return Err(ApiError::invalid(
                    &rt.kind,
                    &rt.group,
                    "",
                    &[(
                        "spec.user".into(),
                        "Invalid value: \"\": at least one of user or group must be specified"
                            .into(),
                    )],
                ));
            }
            UserInfo {
                name: name.into(),
                groups,
                uid: String::new(),
            }
        };
        let attrs = if let Some(r) = spec.get("resourceAttributes") {
            let s = |k: &str| {
                r.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            Attributes {
                verb: s("verb"),
                api_group: s("group"),
                resource: s("resource"),
                subresource: s("subresource"),
                name: s("name"),
                namespace: s("namespace"),
                path: None,
            }
        } else if let Some(n) = spec.get("nonResourceAttributes") {
            let s = |k: &str| {
                n.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            Attributes {
                verb: s("verb"),
                path: Some(s("path")),
                ..Default::default()
            }
        } else {
            return Err(ApiError::invalid(&rt.kind, &rt.group, "", &[(
                "spec.resourceAttributes".into(),
                "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified".into(),
            )]));
        };
        let allowed = self.authorize(&subject, &attrs);
        let reason = if allowed { "RBAC: allowed" } else { "" };
        if let Some(m) = body.as_object_mut() {
            m.insert("apiVersion".into(), json!(rt.api_version()));
            m.insert("kind".into(), json!(rt.kind));
            m.entry("metadata").or_insert_with(|| json!({}));
            m.insert(
                "status".into(),
                json!({"allowed": allowed, "reason": reason}),
            );
        }
        Ok(body)
    }

    /// Mints a ServiceAccount token (the `token` subresource).
    pub fn token_request(&self, ns: &str, sa_name: &str, body: &Value) -> ApiResult<Value> {
        let sa = {
            let store = self.store();
            store
                .get("serviceaccounts", ns, sa_name)
                .ok_or_else(|| ApiError::not_found("serviceaccounts", "", sa_name))?
        };
        let sa_uid = meta_str(&sa, "uid").unwrap_or_default().to_owned();
        let seconds = body
            .pointer("/spec/expirationSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(3600);
        let min = self.inner.opts.min_token_expiration_secs;
        if seconds < min {
            return Err(ApiError::invalid(
                "TokenRequest",
                "authentication.k8s.io",
                sa_name,
                &[(
                    "spec.expirationSeconds".into(),
                    format!(
                        "Invalid value: {seconds}: may not specify a duration less than {min} seconds"
                    ),
                )],
            ));
        }
        let expires = jiff::Timestamp::now().as_second() + seconds;
        let token = mint_token(ns, sa_name, expires);
        self.tokens().issued.insert(
            token.clone(),
            auth::IssuedToken {
                namespace: ns.into(),
                service_account: sa_name.into(),
                service_account_uid: sa_uid,
                expires: Some(expires),
                bound_secret: None,
            },
        );
        let mut out = body.clone();
        if let Some(m) = out.as_object_mut() {
            m.insert("apiVersion".into(), json!("authentication.k8s.io/v1"));
            m.insert("kind".into(), json!("TokenRequest"));
            m.entry("metadata")
                .or_insert_with(|| json!({"name": sa_name, "namespace": ns}));
            m.insert(
                "status".into(),
                json!({"token": token, "expirationTimestamp": meta::seconds_from_now(seconds)}),
            );
        }
        Ok(out)
    }
}

/// Optimistic concurrency: a write naming a resourceVersion must name the current one.
fn check_resource_version(
    rt: &ResourceType,
    name: &str,
    new: &Value,
    old: &Value,
) -> ApiResult<()> {
    let want = meta_str(new, "resourceVersion").unwrap_or_default();
    if !want.is_empty() && Some(want) != meta_str(old, "resourceVersion") {
        return Err(ApiError::conflict(
            &rt.plural,
            &rt.group,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        ));
    }
    Ok(())
}

/// A JWT-shaped opaque token (the server looks it up; the payload is informational).
pub fn mint_token(ns: &str, sa: &str, expires: i64) -> String {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = b64.encode(br#"{"alg":"none","typ":"JWT"}"#);
    let payload = b64.encode(
        json!({"sub": format!("system:serviceaccount:{ns}:{sa}"), "exp": expires, "jti": meta::uid()}).to_string(),
    );
    let sig: [u8; 32] = rand::random();
    format!("{header}.{payload}.{}", b64.encode(sig))
}

fn namespace_held(rt: &ResourceType, obj: &Value) -> bool {
    rt.builtin == Some(Builtin::Namespace)
        && obj
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty())
}

fn validate_metadata(obj: &Value, errors: &mut Vec<(String, String)>) {
    for field in ["labels", "annotations"] {
        if let Some(map) = obj
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object)
        {
            for (k, v) in map {
                if !v.is_string() {
                    errors.push((
                        format!("metadata.{field}"),
                        format!("Invalid value: {v}: {field} values must be strings"),
                    ));
                }
                let (prefix, name) = k.rsplit_once('/').map_or(("", k.as_str()), |(p, n)| (p, n));
                let name_ok = !name.is_empty()
                    && name.len() <= 63
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                    && name.starts_with(|c: char| c.is_ascii_alphanumeric())
                    && name.ends_with(|c: char| c.is_ascii_alphanumeric());
                let prefix_ok = prefix.is_empty()
                    || meta::validate_name(prefix, meta::NameRule::Subdomain).is_ok();
                if !name_ok || !prefix_ok {
                    errors.push((format!("metadata.{field}"), format!("Invalid value: {k:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character")));
                }
                if field == "labels" {
                    let value = v.as_str().unwrap_or_default();
                    let value_ok = value.is_empty()
                        || (value.len() <= 63
                            && value.chars().all(|c| {
                                c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
                            })
                            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
                            && value.ends_with(|c: char| c.is_ascii_alphanumeric()));
                    if !value_ok {
                        errors.push(("metadata.labels".to_string(), format!("Invalid value: {value:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character")));
                    }
                }
            }
        }
    }
}

/// Per-kind validation of built-in kinds (the fields our components rely on).
fn builtin_validation(rt: &ResourceType, obj: &Value) -> Vec<(String, String)> {
    let mut errors = Vec::new();
    let missing = |errors: &mut Vec<(String, String)>, path: &str| {
        let ptr = format!("/{}", path.replace('.', "/"));
        if obj
            .pointer(&ptr)
            .is_none_or(|v| v.is_null() || v.as_str() == Some(""))
        {
            errors.push((path.to_owned(), "Required value".into()));
        }
    };
    match rt.builtin {
        Some(Builtin::ClusterRoleBinding | Builtin::RoleBinding) => {
            missing(&mut errors, "roleRef.kind");
            missing(&mut errors, "roleRef.name");
        }
        Some(Builtin::CertificateSigningRequest) => {
            missing(&mut errors, "spec.request");
            missing(&mut errors, "spec.signerName");
        }
        Some(Builtin::Deployment | Builtin::Job) => {
            missing(&mut errors, "spec.template");
        }
        _ => {}
    }
    if let Some(data) = obj
        .get("data")
        .and_then(Value::as_object)
        .filter(|_| rt.builtin == Some(Builtin::Secret))
    {
        for (k, v) in data {
            let ok = v
                .as_str()
                .is_some_and(|s| base64::engine::general_purpose::STANDARD.decode(s).is_ok());
            if !ok {
                errors.push((
                    format!("data[{k}]"),
                    "Invalid value: must be base64-encoded bytes".into(),
                ));
            }
        }
    }
    errors
}

/// Built-in behaviour on create.
fn admit_create(user: &UserInfo, rt: &ResourceType, obj: &mut Value) -> ApiResult<()> {
    match rt.builtin {
        Some(Builtin::Namespace) => {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
            obj["status"] = json!({"phase": "Active"});
        }
        Some(Builtin::Secret) => {
            fold_string_data(obj);
            if obj
                .get("type")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                obj["type"] = json!("Opaque");
            }
        }
        Some(Builtin::CertificateSigningRequest) => {
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
            obj["spec"]["username"] = json!(user.name);
            obj["spec"]["groups"] = json!(user.groups);
            obj["spec"]["uid"] = json!(user.uid);
            if let Some(req) = obj.pointer("/spec/request").and_then(Value::as_str) {
                let pem = base64::engine::general_purpose::STANDARD
                    .decode(req)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .unwrap_or_default();
                if let Err(e) = crate::pki::parse_csr(&pem) {
                    let name = meta_str(obj, "name").unwrap_or_default().to_owned();
                    return Err(ApiError::invalid(
                        &rt.kind,
                        &rt.group,
                        &name,
                        &[(
                            "spec.request".into(),
                            format!("Invalid value: []byte{{...}}: {e}"),
                        )],
                    ));
                }
            }
        }
        Some(Builtin::Job) => {
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
            if obj.pointer("/spec/backoffLimit").is_none()
                && obj.get("spec").is_some_and(Value::is_object)
            {
                obj["spec"]["backoffLimit"] = json!(6);
            }
        }
        Some(Builtin::Deployment) => {
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
            if obj.pointer("/spec/replicas").is_none()
                && obj.get("spec").is_some_and(Value::is_object)
            {
                obj["spec"]["replicas"] = json!(1);
            }
        }
        Some(Builtin::CustomResourceDefinition) => {
            let mut fins = finalizers(obj);
            if !fins.iter().any(|f| f == CRD_FINALIZER) {
                fins.push(CRD_FINALIZER.into());
            }
            set_meta(obj, "finalizers", json!(fins));
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
        }
        _ => {}
    }
    Ok(())
}

/// Built-in behaviour on update.
fn admit_update(rt: &ResourceType, old: &Value, new: &mut Value) -> ApiResult<()> {
    match rt.builtin {
        Some(Builtin::Secret) => fold_string_data(new),
        Some(Builtin::CertificateSigningRequest) => {
            // The spec of a CSR is immutable; only status (and its subresources) change.
            if let Some(spec) = old.get("spec") {
                new["spec"] = spec.clone();
            }
        }
        Some(Builtin::Namespace) => {
            if let Some(spec) = old.get("spec")
                && new.get("spec").is_none()
            {
                new["spec"] = spec.clone();
            }
        }
        _ => {}
    }
    Ok(())
}

/// `stringData` folds into base64 `data`, as the server does for Secrets.
fn fold_string_data(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let Some(Value::Object(sd)) = map.remove("stringData") else {
        return;
    };
    let data = map.entry("data").or_insert_with(|| json!({}));
    if let Some(d) = data.as_object_mut() {
        for (k, v) in sd {
            let s = v.as_str().unwrap_or_default();
            d.insert(
                k,
                json!(base64::engine::general_purpose::STANDARD.encode(s)),
            );
        }
    }
}

/// Registers (or re-registers) the types a CRD defines and writes its status.
fn register_crd(store: &mut Store, crd: &mut Value) -> ApiResult<()> {
    let name = meta_str(crd, "name").unwrap_or_default().to_owned();
    let types = crd_types(crd).map_err(|errors| {
        ApiError::invalid(
            "CustomResourceDefinition",
            "apiextensions.k8s.io",
            &name,
            &errors,
        )
    })?;
    for t in &types {
        if let Some(clash) = store
            .registry
            .find(&t.group, &t.version, &t.plural)
            .filter(|existing| existing.crd.as_deref() != Some(name.as_str()))
        {
            return Err(ApiError::invalid(
                "CustomResourceDefinition",
                "apiextensions.k8s.io",
                &name,
                &[(
                    "spec.names.plural".into(),
                    format!(
                        "Invalid value: {:?}: already served by {}",
                        clash.plural,
                        clash
                            .crd
                            .clone()
                            .unwrap_or_else(|| "a built-in kind".into())
                    ),
                )],
            ));
        }
    }
    let now = meta::now();
    let spec = crd.get("spec").cloned().unwrap_or_default();
    let stored_versions: Vec<String> = spec
        .get("versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let condition = |t: &str, reason: &str, message: &str| json!({"type": t, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now});
    crd["status"] = json!({
        "acceptedNames": spec.get("names").cloned().unwrap_or_default(),
        "storedVersions": stored_versions,
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
    });
    store.registry.set_crd(&name, types);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_compared_as_the_copies_that_strip_fields_compared_them() {
        let base = json!({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "a", "resourceVersion": "1", "labels": {"x": "1"}},
                          "data": {"k": "v"}, "status": {"s": 1}});
        let with = |path: &str, v: Value| {
            let mut o = base.clone();
            *o.pointer_mut(path).expect("path") = v;
            o
        };
        let other_rv = with("/metadata/resourceVersion", json!("2"));
        let other_label = with("/metadata/labels", json!({"x": "2"}));
        let other_data = with("/data", json!({"k": "w"}));
        let other_status = with("/status", json!({"s": 2}));
        let mut extra = base.clone();
        extra["spec"] = json!({});
        let mut no_rv = base.clone();
        remove_meta(&mut no_rv, "resourceVersion");
        let mut no_meta = base.clone();
        no_meta.as_object_mut().expect("object").remove("metadata");
        // (a, b, same content but for resourceVersion, same spec with a status subresource,
        // same spec without one)
        let table = [
            (&base, &base, true, true, true),
            (&base, &other_rv, true, true, true),
            (&base, &no_rv, true, true, true),
            (&base, &other_label, false, true, true),
            (&base, &other_data, false, false, false),
            (&base, &other_status, false, true, false),
            (&base, &extra, false, false, false),
            (&extra, &base, false, false, false),
            (&base, &no_meta, false, true, true),
            (&json!(1), &json!(1), true, true, true),
            (&json!(1), &json!("1"), false, false, false),
        ];
        for (i, (a, b, content, spec_status, spec_plain)) in table.into_iter().enumerate() {
            assert_eq!(same_content(a, b), content, "row {i}: content");
            assert_eq!(
                same_spec(a, b, true),
                spec_status,
                "row {i}: spec, status apart"
            );
            assert_eq!(same_spec(a, b, false), spec_plain, "row {i}: spec");
        }
    }
}
