//! `kubectl mcm export` and `kubectl mcm import`: what a migration would carry for a set of
//! clusters, written to a directory from their hub and applied from it to another hub (the
//! pure parts are `migration_api::bundle`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use kube::{Client, ResourceExt};
use migration_api::bundle::{carry_kinds, exported_cluster, file_of, import_order};
use migration_api::carried::{self, CarryOverResource};
use migration_api::discovery::{served, served_each, typed};
use serde_json::Value;

/// The field manager of what `import` applies.
const FIELD_MANAGER: &str = "kubectl-mcm";

/// Why a command stopped: `Usage` for what it was asked (exit 2, nothing done), `Failed` for
/// what the hub answered (exit 1).
pub enum Stop {
    Usage(String),
    Failed(String),
}

/// `kubectl mcm export`.
pub async fn export(
    client: Client,
    clusters: &[String],
    selector: Option<&str>,
    carry: &[String],
    include_secrets: bool,
    dir: &Path,
) -> Result<String, Stop> {
    let kinds = carry_kinds(carry, include_secrets).map_err(Stop::Usage)?;
    if clusters.is_empty() == selector.is_none() {
        return Err(Stop::Usage(
            "name the clusters with --clusters or select them with -l, one of the two".into(),
        ));
    }
    if dir.exists() && std::fs::read_dir(dir).map_or(true, |mut d| d.next().is_some()) {
        return Err(Stop::Usage(format!(
            "{} exists and is not empty: export writes to a new directory",
            dir.display()
        )));
    }
    let resources = resolve(&client, &kinds).await?;
    let mcs = managed_clusters(&client, clusters, selector).await?;
    // Everything is read before anything is written.
    let mut files: Vec<(PathBuf, Value)> = Vec::new();
    for mc in &mcs {
        let name = mc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let cluster = exported_cluster(mc)
            .ok_or_else(|| Stop::Failed(format!("ManagedCluster {name} is malformed")))?;
        files.push((file_of(dir, &name, "managedclusters", &cluster), cluster));
        for (ar, optional) in &resources {
            for object in list_in(&client, &name, ar, *optional).await? {
                if let Some(copy) = carried::clean(&object) {
                    files.push((file_of(dir, &name, &ar.plural, &copy), copy));
                }
            }
        }
    }
    write_all(dir, &files)?;
    Ok(format!(
        "exported {} clusters ({} objects) to {}",
        mcs.len(),
        files.len(),
        dir.display()
    ))
}

/// The API resources of `kinds`, with what every export carries besides (each cluster's
/// addons, and its KlusterletAddonConfig where the hub is ACM's: `true`, may be absent).
async fn resolve(
    client: &Client,
    kinds: &[CarryOverResource],
) -> Result<Vec<(ApiResource, bool)>, Stop> {
    let discovered = |e: kube::Error| Stop::Failed(format!("discovering the hub's APIs: {e}"));
    let always = [
        ("addon.open-cluster-management.io", "managedclusteraddons"),
        ("agent.open-cluster-management.io", "klusterletaddonconfigs"),
    ]
    .map(|(group, resource)| CarryOverResource {
        group: group.into(),
        resource: resource.into(),
        label_selector: None,
    });
    let mut out: Vec<(ApiResource, bool)> = served_each(client, &always)
        .await
        .map_err(discovered)?
        .into_iter()
        .map(|(_, ar)| (ar, true))
        .collect();
    match served(client, kinds).await.map_err(discovered)? {
        Ok(found) => out.extend(found.into_iter().map(|ar| (ar, false))),
        Err(why) => {
            return Err(Stop::Failed(format!(
                "on this hub {why}; nothing was written"
            )));
        }
    }
    Ok(out)
}

/// The hub's ManagedClusters, read as JSON objects.
fn managed_clusters_api(client: &Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.open-cluster-management.io", "v1", "ManagedCluster"),
        "managedclusters",
    );
    Api::all_with(client.clone(), &ar)
}

/// The ManagedClusters named (each must exist) or selected, as JSON.
async fn managed_clusters(
    client: &Client,
    names: &[String],
    selector: Option<&str>,
) -> Result<Vec<Value>, Stop> {
    let api = managed_clusters_api(client);
    let found: Vec<DynamicObject> = if let Some(selector) = selector {
        api.list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| Stop::Failed(format!("listing ManagedClusters ({selector}): {e}")))?
            .items
    } else {
        let mut found = Vec::new();
        for name in names {
            match api.get_opt(name).await {
                Ok(Some(mc)) => found.push(mc),
                Ok(None) => {
                    return Err(Stop::Failed(format!(
                        "ManagedCluster {name} does not exist on this hub; nothing was written"
                    )));
                }
                Err(e) => return Err(Stop::Failed(format!("reading ManagedCluster {name}: {e}"))),
            }
        }
        found
    };
    if found.is_empty() {
        return Err(Stop::Failed(
            "no ManagedCluster matches; nothing was written".into(),
        ));
    }
    found
        .iter()
        .map(|o| serde_json::to_value(o).map_err(|e| Stop::Failed(e.to_string())))
        .collect()
}

/// The objects of `ar` in namespace `ns` (none where the API is `optional` and not served).
async fn list_in(
    client: &Client,
    ns: &str,
    ar: &ApiResource,
    optional: bool,
) -> Result<Vec<Value>, Stop> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items.iter().filter_map(|o| typed(o, ar)).collect()),
        Err(kube::Error::Api(s)) if optional && s.code == 404 => Ok(Vec::new()),
        Err(e) => Err(Stop::Failed(format!("listing {} in {ns}: {e}", ar.plural))),
    }
}

/// Writes each file, readable by its owner alone (a Secret's data is in the clear).
fn write_all(dir: &Path, files: &[(PathBuf, Value)]) -> Result<(), Stop> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let failed =
        |p: &Path, e: &dyn std::fmt::Display| Stop::Failed(format!("{}: {e}", p.display()));
    for (path, object) in files {
        let parent = path.parent().unwrap_or(dir);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| failed(parent, &e))?;
        let text = serde_yaml::to_string(object).map_err(|e| failed(path, &e))?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| failed(path, &e))?;
        std::io::Write::write_all(&mut file, text.as_bytes()).map_err(|e| failed(path, &e))?;
    }
    Ok(())
}

/// One cluster's folder, read.
struct Folder {
    cluster: String,
    objects: Vec<(PathBuf, Value)>,
}

/// Reads every folder of `dir` (each file must parse: nothing is applied otherwise).
fn read_dir(dir: &Path) -> Result<Vec<Folder>, Stop> {
    let usage = |p: &Path, e: &dyn std::fmt::Display| Stop::Usage(format!("{}: {e}", p.display()));
    let mut folders = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| usage(dir, &e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    entries.sort();
    for folder in entries {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&folder)
            .map_err(|e| usage(&folder, &e))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        let mut objects = Vec::new();
        for path in files {
            let text = std::fs::read_to_string(&path).map_err(|e| usage(&path, &e))?;
            let object: Value = serde_yaml::from_str(&text).map_err(|e| usage(&path, &e))?;
            if object["kind"].as_str().is_none() || object["metadata"]["name"].as_str().is_none() {
                return Err(usage(&path, &"not a Kubernetes object (no kind or name)"));
            }
            objects.push((path, object));
        }
        let cluster = folder
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        folders.push(Folder { cluster, objects });
    }
    if folders.is_empty() {
        return Err(Stop::Usage(format!(
            "{} holds no cluster folder",
            dir.display()
        )));
    }
    Ok(folders)
}

/// `kubectl mcm import`.
pub async fn import(client: Client, dir: &Path, dry_run: bool) -> Result<String, Stop> {
    let folders = read_dir(dir)?;
    // Every kind resolved and every cluster new here, before anything is applied.
    let mut resolved: BTreeMap<(String, String), (ApiResource, ApiCapabilities)> = BTreeMap::new();
    for (path, object) in folders.iter().flat_map(|f| &f.objects) {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default();
        let key = (api_version.to_owned(), kind.to_owned());
        if resolved.contains_key(&key) {
            continue;
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let found = kube::discovery::pinned_kind(&client, &gvk)
            .await
            .map_err(|e| {
                Stop::Failed(format!(
                    "{}: this hub does not serve {kind} ({api_version}): {e}; nothing was applied",
                    path.display()
                ))
            })?;
        resolved.insert(key, found);
    }
    let mc_api = managed_clusters_api(&client);
    for f in &folders {
        match mc_api.get_opt(&f.cluster).await {
            Ok(None) => {}
            Ok(Some(_)) => {
                return Err(Stop::Failed(format!(
                    "ManagedCluster {} already exists on this hub; nothing was applied",
                    f.cluster
                )));
            }
            Err(e) => {
                return Err(Stop::Failed(format!(
                    "reading ManagedCluster {}: {e}",
                    f.cluster
                )));
            }
        }
    }
    let count: usize = folders.iter().map(|f| f.objects.len()).sum();
    if dry_run {
        return Ok(format!(
            "would import {} clusters ({count} objects); nothing was applied (dry run)",
            folders.len()
        ));
    }
    let mut created: Vec<(ApiResource, Option<String>, String)> = Vec::new();
    for f in &folders {
        if let Err(e) = import_folder(&client, f, &resolved, &mut created).await {
            let undone = undo(&client, &created).await;
            return Err(Stop::Failed(format!("{e}; {undone}")));
        }
    }
    Ok(format!(
        "imported {} clusters ({count} objects)",
        folders.len()
    ))
}

/// Applies one folder: its ManagedCluster, the cluster's namespace, then each object, owners
/// first ([`import_order`]), its owner references pointing at what this hub now has.
async fn import_folder(
    client: &Client,
    f: &Folder,
    resolved: &BTreeMap<(String, String), (ApiResource, ApiCapabilities)>,
    created: &mut Vec<(ApiResource, Option<String>, String)>,
) -> Result<(), String> {
    let objects: Vec<Value> = f.objects.iter().map(|(_, o)| o.clone()).collect();
    let mut uids: BTreeMap<carried::ObjectKey, String> = BTreeMap::new();
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let mut namespace_ready = false;
    for i in import_order(&objects) {
        let mut object = objects[i].clone();
        let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let Some((ar, caps)) = resolved.get(&(api_version.clone(), kind.clone())) else {
            continue;
        };
        let api: Api<DynamicObject> = if caps.scope == Scope::Cluster {
            Api::all_with(client.clone(), ar)
        } else {
            if !namespace_ready {
                ensure_namespace(client, &f.cluster, created).await?;
                namespace_ready = true;
            }
            object["metadata"]["namespace"] = f.cluster.clone().into();
            Api::namespaced_with(client.clone(), &f.cluster, ar)
        };
        // Never over what is there: an import adds, and a failed one removes only its own.
        if api
            .get_opt(&name)
            .await
            .map_err(|e| format!("reading {kind} {}/{name}: {e}", f.cluster))?
            .is_some()
        {
            return Err(format!(
                "{kind} {name} already exists in {} on this hub; not overwritten",
                f.cluster
            ));
        }
        let owners = object["metadata"]["ownerReferences"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let owners = carried::rewrite_owners(&owners, &uids);
        match object["metadata"].as_object_mut() {
            Some(meta) if owners.is_empty() => {
                meta.remove("ownerReferences");
            }
            Some(meta) => {
                meta.insert("ownerReferences".into(), owners.into());
            }
            None => {}
        }
        let applied = api
            .patch(&name, &pp, &Patch::Apply(&object))
            .await
            .map_err(|e| format!("applying {kind} {}/{name}: {e}", f.cluster))?;
        let ns = (caps.scope == Scope::Namespaced).then(|| f.cluster.clone());
        created.push((ar.clone(), ns, name.clone()));
        if let Some(uid) = applied.uid() {
            uids.insert(carried::object_key(&object), uid);
        }
    }
    Ok(())
}

/// The cluster's namespace, made unless there (the hub's registration controller makes it for
/// an accepted cluster too; whichever comes first).
async fn ensure_namespace(
    client: &Client,
    name: &str,
    created: &mut Vec<(ApiResource, Option<String>, String)>,
) -> Result<(), String> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("", "v1", "Namespace"),
        "namespaces",
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    if api
        .get_opt(name)
        .await
        .map_err(|e| format!("reading namespace {name}: {e}"))?
        .is_some()
    {
        return Ok(());
    }
    let ns =
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    api.patch(name, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(&ns))
        .await
        .map_err(|e| format!("creating namespace {name}: {e}"))?;
    created.push((ar, None, name.to_owned()));
    Ok(())
}

/// Deletes what this import applied, last first, so a failed import leaves nothing half-done.
async fn undo(client: &Client, created: &[(ApiResource, Option<String>, String)]) -> String {
    let mut left = Vec::new();
    for (ar, ns, name) in created.iter().rev() {
        let api: Api<DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
            None => Api::all_with(client.clone(), ar),
        };
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => left.push(format!("{} {name} ({e})", ar.kind)),
        }
    }
    if left.is_empty() {
        format!("the {} objects applied before were removed", created.len())
    } else {
        format!("could not remove: {}", left.join(", "))
    }
}
