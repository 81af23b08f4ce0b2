//! The klusterlet works of a plain OCM migration (probe, switch, restore, settle) and the works the hub releases; a moved cluster's own bootstrap kubeconfig on a plain target.

use super::*;

/// Whether the cluster's klusterlet work on this hub carries a manifest of `kind` (named `name`
/// when given) and has been applied at its latest generation.
fn work_applied_with(
    works: &Store<ManifestWork>,
    cluster: &str,
    kind: &str,
    name: Option<&str>,
) -> bool {
    get(works, Some(cluster), &names::import_work(cluster))
        .is_some_and(|work| work.applied_with(kind, name))
}

/// Whether the cluster's klusterlet work on this hub carries the bootstrap secret and has been
/// applied at its latest generation.
pub(super) fn bootstrap_delivered(
    works: &Store<ManifestWork>,
    cluster: &str,
    secret: &str,
) -> bool {
    work_applied_with(works, cluster, "Secret", Some(secret))
}

/// Whether this hub's import controller has taken over a cluster's klusterlet: its
/// `<cluster>-klusterlet` work, which carries the Klusterlet with this hub's settings, is
/// applied on the cluster at its latest generation. The Klusterlet, not
/// `bootstrap-hub-kubeconfig`: a hub whose KlusterletConfig lists bootstrap kubeconfigs
/// (MultipleHubs) renders those instead of `bootstrap-hub-kubeconfig` (ocm
/// `deploy/klusterlet/chart/klusterlet/templates/bootstrap_kubeconfig_secret.yaml`, rendered
/// by stolostron/managedcluster-import-controller `pkg/bootstrap/render.go`), and every
/// import work carries the Klusterlet. Of any name: a KlusterletConfig's `installMode`
/// `noOperator` names it `klusterlet-<postfix>` (`getKlusterletNamespaceName`, same file).
pub(super) fn import_took_over(works: &Store<ManifestWork>, cluster: &str) -> bool {
    work_applied_with(works, cluster, "Klusterlet", None)
}

/// The data of bootstrap secret `name` the manager delivered next to the task (plain OCM), as
/// the watch on the agent's namespace holds it.
pub(super) fn bootstrap_secret_data(ctx: &Ctx, task: &MigrationTask, name: &str) -> Option<Value> {
    let ns = task.namespace().unwrap_or_default();
    get(&ctx.caches.secrets, Some(&ns), name)
        .and_then(|s| s.data.clone())
        .and_then(|d| serde_json::to_value(d).ok())
}

/// What a cluster that arrived is settled with (secret data holding a kubeconfig): on a plain
/// OCM hub (`own_bootstrap`), a bootstrap kubeconfig of this hub's own bootstrap identity,
/// made from the task's connection (the target's URL, CA and proxy) and a token of the
/// hub's bootstrap ServiceAccount, as `clusteradm get token` issues one; on a hub whose import
/// controller gives the cluster its bootstrap kubeconfig, the connection alone (it only
/// replaces the migration's secret on the cluster until the work takes it away). Never the
/// migration's token. `None` until the manager has sent the connection.
pub(super) async fn settle_data(
    ctx: &Ctx,
    task: &MigrationTask,
    own_bootstrap: bool,
) -> Result<Option<Value>, Error> {
    let Some(connection) = task.spec.bootstrap_connection.as_deref() else {
        return Ok(None);
    };
    let text = if own_bootstrap {
        let token = hub_bootstrap_token(&ctx.client).await?;
        kw::with_token(connection, &token).map_err(Error::Config)?
    } else {
        connection.to_owned()
    };
    Ok(Some(kw::kubeconfig_data(&text)))
}

/// A token of the first of [`names::HUB_BOOTSTRAP_SERVICE_ACCOUNTS`] this hub has, valid
/// [`names::HUB_BOOTSTRAP_TOKEN_SECONDS`].
pub(super) async fn hub_bootstrap_token(client: &Client) -> Result<String, Error> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(names::HUB_BOOTSTRAP_TOKEN_SECONDS),
            ..Default::default()
        },
        ..Default::default()
    };
    for (ns, name) in names::HUB_BOOTSTRAP_SERVICE_ACCOUNTS {
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        match api
            .create_token_request(name, &PostParams::default(), &request)
            .await
        {
            Ok(tr) => {
                if let Some(status) = tr.status.filter(|s| !s.token.is_empty()) {
                    return Ok(status.token);
                }
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(Error::Kube(ApiError::new(
                    format!("issuing a bootstrap token of ServiceAccount {ns}/{name}"),
                    e,
                )));
            }
        }
    }
    Err(Error::Config(format!(
        "this hub has none of the ServiceAccounts its clusters bootstrap with ({}; `clusteradm init` creates the first): a cluster that arrived cannot be given a bootstrap kubeconfig of this hub",
        hub_bootstrap_names()
    )))
}

pub(super) fn klusterlet_work(
    ctx: &Ctx,
    task: &MigrationTask,
    cluster: &str,
) -> Option<Arc<ManifestWork>> {
    get(
        &ctx.caches.own_works,
        Some(cluster),
        &names::migration_klusterlet_work(task.spec.key()),
    )
}

/// Whether a cluster's klusterlet work carries its last step, applied (what
/// [`klusterlet_switch`] and [`klusterlet_settle`] report done): `switch` the MultipleHubs
/// settings (source), else this hub's own settings (target).
pub(super) fn klusterlet_done(
    ctx: &Ctx,
    task: &MigrationTask,
    cluster: &str,
    switch: bool,
) -> bool {
    klusterlet_work(ctx, task, cluster).is_some_and(|w| {
        w.metadata.deletion_timestamp.is_none()
            && w.applied()
            && match kw::step_of(&w) {
                Some(Step::Switch(_)) => switch,
                Some(Step::Settle(_)) => !switch,
                _ => false,
            }
    })
}

/// Puts a cluster's klusterlet work at `step` unless it is there already.
pub(super) async fn put_klusterlet_work(
    ctx: &Ctx,
    task: &MigrationTask,
    cluster: &str,
    step: &Step,
) -> Result<(), Error> {
    let current = klusterlet_work(ctx, task, cluster);
    if current.as_deref().and_then(kw::step_of).as_ref() == Some(step) {
        return Ok(());
    }
    // The cluster's own bootstrap identity's secret.
    let secret = task.spec.bootstrap_secret_for(cluster).unwrap_or_default();
    let own_bootstrap =
        task.spec.role == MigrationRole::Target && klusterlet_config_shape(ctx).await? == "None";
    let secret_data = match step {
        Step::Settle(_) => settle_data(ctx, task, own_bootstrap).await?,
        _ => bootstrap_secret_data(ctx, task, &secret),
    };
    let wctx = kw::WorkContext {
        migration: task.spec.key(),
        cluster,
        secret_name: &secret,
        secret_data: secret_data.as_ref(),
        own_bootstrap,
    };
    let Some(body) = kw::work(&wctx, step) else {
        tracing::info!(%cluster, "the bootstrap secret is not on this hub; the klusterlet work waits for it");
        return Ok(());
    };
    let name = names::migration_klusterlet_work(task.spec.key());
    let works: Api<ManifestWork> = Api::namespaced(ctx.client.clone(), cluster);
    works
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(ctx_err(format!("applying ManifestWork {cluster}/{name}")))?;
    tracing::info!(%cluster, step = ?step, "klusterlet work updated");
    Ok(())
}

/// Deletes a cluster's klusterlet work. `abandon`: the cluster's work agent serves another hub
/// now, so nothing here will ever finish the deletion: the finalizer goes too (what it applied
/// stays with the cluster, where the target's own work has taken it over).
pub(super) async fn delete_klusterlet_work(
    ctx: &Ctx,
    task: &MigrationTask,
    cluster: &str,
    abandon: bool,
) -> Result<(), Error> {
    let Some(work) = klusterlet_work(ctx, task, cluster) else {
        return Ok(());
    };
    if abandon {
        return force_delete_work(ctx, &work.metadata).await;
    }
    if work.metadata.deletion_timestamp.is_none() {
        let name = work.name_any();
        ignore_not_found(
            Api::<ManifestWork>::namespaced(ctx.client.clone(), cluster)
                .delete(&name, &DeleteParams::default())
                .await,
        )
        .map_err(ctx_err(format!("deleting ManifestWork {cluster}/{name}")))?;
    }
    Ok(())
}

/// Deletes a work and clears its finalizers, as ACM's import controller force-deletes the
/// works of a cluster it no longer accepts (managedcluster-import-controller
/// `pkg/helpers/manifestwork.go`, `ForceDeleteManifestWork`): for a work whose cluster's work
/// agent serves another hub, the only one that would ever finish it.
pub(super) async fn force_delete_work(ctx: &Ctx, work: &ObjectMeta) -> Result<(), Error> {
    let name = work.name.clone().unwrap_or_default();
    let ns = work.namespace.clone().unwrap_or_default();
    let works: Api<ManifestWork> = Api::namespaced(ctx.client.clone(), &ns);
    if work.deletion_timestamp.is_none() {
        ignore_not_found(works.delete(&name, &DeleteParams::default()).await)
            .map_err(ctx_err(format!("deleting ManifestWork {ns}/{name}")))?;
    }
    if work.finalizers.as_ref().is_some_and(|f| !f.is_empty()) {
        ignore_not_found(
            works
                .patch(
                    &name,
                    &patch_params(),
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await,
        )
        .map_err(ctx_err(format!("releasing ManifestWork {ns}/{name}")))?;
    }
    Ok(())
}

/// A deleted cluster that this hub no longer accepts and whose klusterlet serves another hub
/// leaves only once no ManifestWork is left in its namespace (ocm
/// `pkg/registration/hub/gc/gc_resources.go` deletes them and waits;
/// `pkg/registration/hub/managedcluster/controller.go` keeps its finalizer while any is
/// left), and only a connected work agent removes a work's finalizer. ACM's import controller
/// force-deletes them (`pkg/controller/resourcecleanup/resourcecleanup_controller.go`); plain
/// OCM has nothing that would, so this does the same on every hub. What they applied stays on
/// the cluster (its work agent evicts it after its grace period unless works of the hub it
/// serves take it over).
pub(super) async fn release_works(ctx: &Ctx, cluster: &str) -> Result<(), Error> {
    for work in ctx
        .caches
        .work_metas
        .state()
        .iter()
        .filter(|w| w.namespace().as_deref() == Some(cluster))
    {
        force_delete_work(ctx, &work.metadata).await?;
    }
    Ok(())
}

/// What to do with a cluster's klusterlet work next.
pub(super) enum Next {
    /// Put it at this step.
    Put(Step),
    /// Delete it.
    Delete,
    /// Nothing to change; whether it is done.
    Done(bool),
}

/// Moves a cluster's klusterlet work on: `next` reads the work as it is (`None`: there is
/// none) and says what to do. Returns whether it is done; a work being deleted is waited for.
pub(super) async fn drive_klusterlet_work(
    ctx: &Ctx,
    task: &MigrationTask,
    cluster: &str,
    next: impl FnOnce(Option<&ManifestWork>) -> Next,
) -> Result<bool, Error> {
    let work = klusterlet_work(ctx, task, cluster);
    if work
        .as_ref()
        .is_some_and(|w| w.metadata.deletion_timestamp.is_some())
    {
        return Ok(false);
    }
    match next(work.as_deref()) {
        Next::Done(done) => return Ok(done),
        Next::Put(step) => put_klusterlet_work(ctx, task, cluster, &step).await?,
        Next::Delete => delete_klusterlet_work(ctx, task, cluster, false).await?,
    }
    Ok(false)
}

/// Source, plain OCM: probes the cluster's Klusterlet, then gives it the MultipleHubs
/// configuration; true once that is applied.
pub(super) async fn klusterlet_switch(
    ctx: &Ctx,
    task: &MigrationTask,
    cluster: &str,
) -> Result<bool, Error> {
    drive_klusterlet_work(ctx, task, cluster, |work| {
        match work.map(|w| (w, kw::step_of(w))) {
            Some((w, Some(Step::Switch(_)))) => Next::Done(w.applied()),
            Some((w, Some(Step::Probe))) => match kw::probed(w) {
                // A Klusterlet a migration changed before keeps the settings it had then.
                Some(Ok((now, recorded))) => Next::Put(Step::Switch(recorded.unwrap_or(now))),
                Some(Err(why)) => {
                    tracing::warn!(%cluster, "{why}; it is not switched");
                    Next::Done(false)
                }
                None => Next::Done(false),
            },
            Some((_, Some(Step::Restore(o) | Step::Settle(o)))) => Next::Put(Step::Switch(o)),
            _ => Next::Put(Step::Probe),
        }
    })
    .await
}

/// Source rollback, plain OCM: puts the Klusterlet's settings back, then removes the work;
/// true once it is gone.
pub(super) async fn klusterlet_restore(
    ctx: &Ctx,
    task: &MigrationTask,
    cluster: &str,
) -> Result<bool, Error> {
    drive_klusterlet_work(ctx, task, cluster, |work| {
        let Some(work) = work else {
            return Next::Done(true);
        };
        match kw::step_of(work) {
            Some(Step::Switch(o)) => Next::Put(Step::Restore(o)),
            Some(Step::Restore(_)) if !work.applied() => Next::Done(false),
            // Restored, or never changed (a probe): the work can go.
            _ => Next::Delete,
        }
    })
    .await
}

/// Target, plain OCM, for a cluster that arrived: reads what the Klusterlet had before the
/// migration and puts it back, with this hub's bootstrap kubeconfig as the cluster's own;
/// true once applied.
pub(super) async fn klusterlet_settle(
    ctx: &Ctx,
    task: &MigrationTask,
    cluster: &str,
) -> Result<bool, Error> {
    drive_klusterlet_work(ctx, task, cluster, |work| {
        match work.map(|w| (w, kw::step_of(w))) {
            Some((w, Some(Step::Settle(_)))) => Next::Done(w.applied()),
            Some((w, Some(Step::Probe))) => match kw::probed(w) {
                Some(Ok((_, Some(recorded)))) => Next::Put(Step::Settle(recorded)),
                // No record (an ACM source's import configured the Klusterlet, or it was
                // changed by hand since): the gates stay, the bootstrap list is turned off, so
                // this hub's bootstrap kubeconfig is the only one. Turned off explicitly
                // (`type: None`): the list belongs to another field manager (the source's
                // import work), whose fields an apply that leaves them out does not remove.
                Some(Ok((now, None))) => Next::Put(Step::Settle(Registration {
                    feature_gates: now.feature_gates,
                    bootstrap_kube_configs: Some(json!({"type": "None"})),
                })),
                Some(Err(why)) => {
                    tracing::warn!(%cluster, "{why}; it is not settled");
                    Next::Done(false)
                }
                None => Next::Done(false),
            },
            _ => Next::Put(Step::Probe),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher;

    /// A `<cluster>-klusterlet` work of `manifests` (kind, name), applied at its generation or not.
    fn work(cluster: &str, manifests: &[(&str, &str)], applied: bool) -> ManifestWork {
        migration_api::ocm::work::fixtures::klusterlet_work(
            cluster,
            manifests,
            applied.then_some(2),
        )
    }

    /// The import took over once its work, with the Klusterlet under whatever name the import
    /// gives it, is applied; `bootstrap-hub-kubeconfig` is not needed (a MultipleHubs list
    /// replaces it).
    #[test]
    fn the_import_took_over_once_its_klusterlet_is_applied_whatever_its_secrets() {
        let (store, mut writer) = reflector::store::<ManifestWork>();
        for w in [
            work(
                "listed",
                &[
                    ("Secret", "bootstrap-hub-kubeconfig-current-hub"),
                    ("Klusterlet", "klusterlet"),
                ],
                true,
            ),
            work(
                "no-operator",
                &[
                    ("Secret", "bootstrap-hub-kubeconfig"),
                    ("Klusterlet", "klusterlet-agent2"),
                ],
                true,
            ),
            work(
                "pending",
                &[
                    ("Secret", "bootstrap-hub-kubeconfig"),
                    ("Klusterlet", "klusterlet"),
                ],
                false,
            ),
            work(
                "secrets-only",
                &[("Secret", "bootstrap-hub-kubeconfig")],
                true,
            ),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(w));
        }
        for (cluster, took_over) in [
            ("listed", true),
            ("no-operator", true),
            ("pending", false),
            ("secrets-only", false),
            ("absent", false),
        ] {
            assert_eq!(import_took_over(&store, cluster), took_over, "{cluster}");
        }
        assert!(bootstrap_delivered(
            &store,
            "no-operator",
            names::BOOTSTRAP_HUB_KUBECONFIG
        ));
        assert!(!bootstrap_delivered(
            &store,
            "listed",
            names::BOOTSTRAP_HUB_KUBECONFIG
        ));
    }
}
