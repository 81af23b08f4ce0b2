//! Finalizer edits as the upstream controllers make them: one finalizer added or removed with a
//! JSON patch whose `test` guards the list as it was read (sdk-go's `patcher.AddFinalizer` /
//! `RemoveFinalizer` patch against the object they read; a concurrent change fails the patch
//! and the controller retries), and the forced release of everything (`finalizers: []`, as
//! managedcluster-import-controller's `pkg/helpers/manifestwork.go` `ForceDeleteManifestWork`).

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

fn guarded(current: &[String], next: &[String]) -> Result<Patch<()>, kube::Error> {
    let current = if current.is_empty() {
        Value::Null
    } else {
        json!(current)
    };
    let ops = json!([
        {"op": "test", "path": "/metadata/finalizers", "value": current},
        {"op": "add", "path": "/metadata/finalizers", "value": next}
    ]);
    serde_json::from_value(ops)
        .map(Patch::Json)
        .map_err(kube::Error::SerdeError)
}

/// Adds `finalizer` to `obj` unless it has it; true when it was added.
pub async fn add<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let current = obj.finalizers();
    if current.iter().any(|f| f == finalizer) {
        return Ok(false);
    }
    let mut next = current.to_vec();
    next.push(finalizer.to_owned());
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &guarded(current, &next)?,
    )
    .await?;
    Ok(true)
}

/// Removes `finalizer` from the object named `name` if it has it (gone already is fine). Reads
/// the object first (a cached copy may be stale) and retries when it changed meanwhile.
pub async fn remove<K>(api: &Api<K>, name: &str, finalizer: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut attempts = 0;
    loop {
        let Some(obj) = api.get_opt(name).await? else {
            return Ok(());
        };
        let current = obj.finalizers();
        if !current.iter().any(|f| f == finalizer) {
            return Ok(());
        }
        let next: Vec<String> = current
            .iter()
            .filter(|f| *f != finalizer)
            .cloned()
            .collect();
        match api
            .patch(name, &PatchParams::default(), &guarded(current, &next)?)
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            // The list changed between the read and the patch (the `test` failed).
            Err(kube::Error::Api(s)) if s.code == 422 && attempts < 3 => attempts += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Deletes `name` and, if it is still there, clears its finalizers whoever set them: for
/// objects nothing will ever finalize.
pub async fn force_delete<K>(api: &Api<K>, name: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let Some(obj) = api.get_opt(name).await? else {
        return Ok(());
    };
    if obj.meta().deletion_timestamp.is_none() {
        ignore_not_found(api.delete(name, &DeleteParams::default()).await)?;
    }
    let Some(obj) = api.get_opt(name).await? else {
        return Ok(());
    };
    if obj.finalizers().is_empty() {
        return Ok(());
    }
    ignore_not_found(
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": []}})),
        )
        .await,
    )
}

/// Not found counts as done.
pub fn ignore_not_found<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}
