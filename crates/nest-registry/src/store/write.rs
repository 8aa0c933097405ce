//! CREATE, UPDATE (PUT, PATCH and subresources) and DELETE: the lifecycle of a write.

use nest_storage::{KeyValue, Revision};
use serde_json::{Value, json};

use crate::catalog::ResourceInfo;
use crate::chain::{self, Operation};
use crate::error::{ApiError, Cause, Result, StorageResult};
use crate::meta;

use super::{DeleteOptions, Registry, Resource, Subresource};

/// How many times a create with `generateName` tries a new name after a collision.
const GENERATE_NAME_ATTEMPTS: usize = 8;

/// What an update is going to do.
pub(super) enum Updated {
    /// A dry run: the object as it would be stored.
    DryRun(Value),
    /// The object to store.
    Store(Value),
    /// Nothing but the resourceVersion would change: the stored object, which is not written again.
    Unchanged(Value),
}

/// The object an update starts from.
struct From<'a> {
    old: &'a Value,
    /// Where it is stored, which the write compares.
    revision: Revision,
    /// Read from the watch cache, so perhaps stale.
    cached: bool,
}

/// Whether writing `obj` back removes it instead: it is being deleted, its finalizers are all gone, its kind holds
/// nothing back and no grace period is left.
fn removes(resource: &Resource, obj: &Value) -> bool {
    let grace_pending = obj["metadata"]["deletionGracePeriodSeconds"].as_i64().is_some_and(|g| g > 0);
    meta::is_deleting(obj)
        && meta::finalizers(obj).is_empty()
        && !resource.strategy.holds_removal(obj)
        && !grace_pending
}

/// Whether `new` is `old` with nothing changed but (at most) its resourceVersion. kube-apiserver then writes nothing
/// (no new revision, no watch event) and answers with the stored object (`GuaranteedUpdate` in
/// `k8s.io/apiserver/pkg/storage/etcd3/store.go`, 1.33): without that, every controller that writes an unchanged
/// status on each resync would wake every watcher of the kind.
pub(super) fn unchanged(new: &Value, old: &Value) -> bool {
    let (Value::Object(new), Value::Object(old)) = (new, old) else { return new == old };
    let same_metadata = |new: &Value, old: &Value| match (new, old) {
        (Value::Object(new), Value::Object(old)) => {
            let keys = |m: &'_ serde_json::Map<String, Value>| m.keys().filter(|k| *k != "resourceVersion").count();
            keys(new) == keys(old)
                && new.iter().filter(|(k, _)| *k != "resourceVersion").all(|(k, v)| old.get(k) == Some(v))
        }
        _ => new == old,
    };
    new.len() == old.len()
        && new.iter().all(|(key, value)| match old.get(key) {
            Some(before) if key == "metadata" => same_metadata(value, before),
            Some(before) => value == before,
            None => false,
        })
}

impl Registry {
    /// Checks what every object must satisfy: its type, its name, its namespace.
    pub(super) fn check_identity(resource: &Resource, namespace: &str, obj: &Value) -> Result<()> {
        let info = &resource.info;
        if !obj.is_object() {
            return Err(ApiError::bad_request("the object must be a JSON object"));
        }
        if let Some(kind) = obj.get("kind").and_then(Value::as_str).filter(|k| !k.is_empty())
            && kind != info.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind {kind:?} in the body does not match the resource {:?} (kind {:?})",
                info.qualified(),
                info.kind
            )));
        }
        if let Some(api_version) = obj.get("apiVersion").and_then(Value::as_str).filter(|v| !v.is_empty())
            && api_version != info.api_version()
        {
            return Err(ApiError::bad_request(format!(
                "the apiVersion {api_version:?} in the body does not match the URL ({:?})",
                info.api_version()
            )));
        }
        let body_ns = meta::namespace(obj);
        if info.namespaced && !body_ns.is_empty() && body_ns != namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        Ok(())
    }

    pub(super) fn check_name(resource: &Resource, name: &str) -> Result<()> {
        if let Err(message) = resource.strategy.validate_name(name) {
            return Err(ApiError::invalid(
                &resource.info,
                name,
                vec![Cause::invalid("metadata.name", format!("Invalid value: {name:?}: {message}"))],
            ));
        }
        Ok(())
    }

    /// POST: creates an object.
    pub async fn create(&self, resource: &Resource, namespace: &str, body: Value, dry_run: bool) -> Result<Value> {
        let info = &resource.info;
        Self::check_identity(resource, namespace, &body)?;
        let mut obj = body;
        resource.decode(&mut obj)?;
        obj["apiVersion"] = json!(info.api_version());
        obj["kind"] = json!(info.kind);
        let generate = meta::meta_str(&obj, "generateName").to_string();
        let given = meta::name(&obj).to_string();
        if given.is_empty() && generate.is_empty() {
            return Err(ApiError::invalid(
                info,
                "",
                vec![Cause {
                    reason: "FieldValueRequired",
                    message: "name or generateName is required".into(),
                    field: "metadata.name".into(),
                }],
            ));
        }
        {
            let metadata = meta::metadata_mut(&mut obj);
            if info.namespaced {
                metadata.insert("namespace".into(), json!(namespace));
            } else {
                metadata.remove("namespace");
            }
            for cleared in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"] {
                metadata.remove(cleared);
            }
            metadata.insert("uid".into(), json!(meta::new_uid()));
            metadata.insert("creationTimestamp".into(), json!(nest_core::clock::rfc3339_now()));
            if info.generation {
                metadata.insert("generation".into(), json!(1));
            }
        }
        let request =
            admission_request(resource, Operation::Create, Subresource::Main, namespace, &given, None, dry_run);
        self.admission.admit(self.cluster(), &request, &mut obj).await?;
        if let Some(created) = info.created_status
            && obj.get("status").is_none_or(Value::is_null)
        {
            obj["status"] = serde_json::from_str(created).unwrap_or_default();
        }
        resource.strategy.prepare_for_create(&mut obj);
        meta::drop_empty_collections(&mut obj);
        let check_name = if given.is_empty() { meta::generate_name(&generate) } else { given.clone() };
        Self::check_name(resource, &check_name)?;
        let mut causes = resource.strategy.validate(&obj);
        causes.extend(resource.strategy.validate_in(&self.cluster(), &obj));
        if !causes.is_empty() {
            return Err(ApiError::invalid(info, &check_name, causes));
        }
        let request =
            admission_request(resource, Operation::Create, Subresource::Main, namespace, &check_name, None, dry_run);
        self.admission.validate(self.cluster(), &request, &obj).await?;
        if let Some(manager) = &resource.manager {
            crate::apply::track_update(
                resource,
                None,
                &mut obj,
                manager,
                Subresource::Main,
                &nest_core::clock::rfc3339_now(),
            );
        }
        if !dry_run {
            resource.strategy.reserve(self.cluster(), info, &mut obj).await?;
        }
        let created = self.create_named(resource, namespace, &mut obj, &given, &generate, &check_name, dry_run).await;
        if created.is_err() && !dry_run {
            resource.strategy.release(self.cluster(), &obj).await;
        }
        created
    }

    /// The stored item at `key` (the object `name` of `info`), or a 404.
    async fn stored_item(&self, info: &ResourceInfo, key: &str, name: &str) -> Result<KeyValue> {
        self.store.get(key.as_bytes()).await.about(info, name)?.ok_or_else(|| ApiError::not_found(info, name))
    }

    /// Stores a prepared object under its name, or under generated names until one is free.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn create_named(
        &self,
        resource: &Resource,
        namespace: &str,
        obj: &mut Value,
        given: &str,
        generate: &str,
        check_name: &str,
        dry_run: bool,
    ) -> Result<Value> {
        let info = &resource.info;
        let attempts = if given.is_empty() { GENERATE_NAME_ATTEMPTS } else { 1 };
        for attempt in 0..attempts {
            let name = if !given.is_empty() {
                given.to_string()
            } else if attempt == 0 {
                check_name.to_string()
            } else {
                meta::generate_name(generate)
            };
            meta::metadata_mut(obj).insert("name".into(), json!(name));
            let key = Self::key(info, namespace, &name);
            if dry_run {
                if self.store.get(key.as_bytes()).await.about(info, &name)?.is_some() {
                    if given.is_empty() {
                        continue;
                    }
                    return Err(ApiError::already_exists(info, &name));
                }
                return Ok(obj.clone());
            }
            match self.store.create(key.as_bytes(), Self::encode(info, obj)?).await {
                Ok(item) => {
                    self.after_write(resource).await;
                    return Ok(Self::stored(std::mem::take(obj), item.mod_revision));
                }
                Err(nest_storage::Error::AlreadyExists { .. }) if given.is_empty() => continue,
                Err(e) => return Err(ApiError::interpret(e, info, &name)),
            }
        }
        Err(ApiError::already_exists(info, meta::name(obj)).with_message(format!(
            "{} could not find a free name for generateName {generate:?} after {attempts} attempts",
            info.qualified()
        )))
    }

    /// PUT: replaces an object (or, for `/status`, its status). Fails with 409 when the body's resourceVersion is
    /// stale.
    pub async fn update(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        body: Value,
        subresource: Subresource,
        dry_run: bool,
    ) -> Result<Value> {
        let info = &resource.info;
        Self::check_identity(resource, namespace, &body)?;
        let body_name = meta::name(&body);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let key = Self::key(info, namespace, name);
        if info.custom && meta::meta_str(&body, "resourceVersion").is_empty() {
            return Err(ApiError::invalid(
                info,
                name,
                vec![Cause::invalid("metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update")],
            ));
        }
        // As kube-apiserver's cacher updates (GuaranteedUpdate given the watch cache's copy): from the cached object,
        // whose revision the write compares, so that an update costs storage one round trip. A copy that turns out
        // stale — a conflict, or nothing to change — sends the update back to start from storage.
        if !dry_run
            && let Some(Some(cached)) = self.cache.as_ref().and_then(|cache| cache.get(&key))
            && let Ok(revision) = meta::meta_str(&cached, "resourceVersion").parse().map(Revision)
        {
            let old = Self::served(info, Value::clone(&cached), revision);
            let from = From { old: &old, revision, cached: true };
            if let Some(updated) =
                self.update_from(resource, namespace, name, &key, from, body.clone(), subresource, false).await?
            {
                return Ok(updated);
            }
        }
        let current = self.stored_item(info, &key, name).await?;
        let old = Self::decode(info, &current)?;
        let from = From { old: &old, revision: current.mod_revision, cached: false };
        let updated = self.update_from(resource, namespace, name, &key, from, body, subresource, dry_run).await?;
        updated.ok_or_else(|| ApiError::internal("an update from storage came back undecided"))
    }

    /// An update of `from`: the result, or `None` when `from` came from the watch cache and proved stale, so that the
    /// update must start again from storage.
    ///
    /// From a cached copy, only a compare-and-swap write that succeeds proves the copy was current. Any other outcome
    /// — an error, nothing to change, or a removal (whose hooks act before its own revision check) — is an answer about
    /// the copy, given only once storage shows the copy's revision still current, as upstream's GuaranteedUpdate
    /// does with a cached object that is not `origStateIsCurrent`.
    #[allow(clippy::too_many_arguments)]
    async fn update_from(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        key: &str,
        from: From<'_>,
        body: Value,
        subresource: Subresource,
        dry_run: bool,
    ) -> Result<Option<Value>> {
        let next =
            self.next_version(resource, namespace, name, from.revision, from.old, body, subresource, dry_run).await;
        let proves_itself = matches!(&next, Ok(Updated::Store(obj)) if !removes(resource, obj));
        if from.cached && !proves_itself {
            let current = self.store.get(key.as_bytes()).await.about(&resource.info, name)?;
            if current.is_none_or(|item| item.mod_revision != from.revision) {
                return Ok(None);
            }
        }
        match next? {
            Updated::DryRun(obj) | Updated::Unchanged(obj) => Ok(Some(obj)),
            Updated::Store(obj) => match self.write_back(resource, key, name, obj, from.revision).await {
                Err(error) if from.cached && error.code == 409 => Ok(None),
                other => other.map(Some),
            },
        }
    }

    /// The object an update (PUT or PATCH) would store, from the stored one and the body: the checks both share.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn next_version(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        current: Revision,
        old: &Value,
        body: Value,
        subresource: Subresource,
        dry_run: bool,
    ) -> Result<Updated> {
        let info = &resource.info;
        // A body that carries resourceVersion asks for optimistic concurrency.
        let wanted_rv = meta::meta_str(&body, "resourceVersion");
        if !wanted_rv.is_empty() && wanted_rv != current.0.to_string() {
            return Err(ApiError::conflict(info, name));
        }
        let mut body = body;
        resource.decode(&mut body)?;
        let request = admission_request(resource, Operation::Update, subresource, namespace, name, Some(old), dry_run);
        self.admission.admit(self.cluster(), &request, &mut body).await?;
        let mut obj = self.merge_update(resource, old, body, subresource)?;
        let mut causes = resource.strategy.validate_update_of(subresource, &obj, old);
        causes.extend(resource.strategy.validate_in(&self.cluster(), &obj));
        if !causes.is_empty() {
            return Err(ApiError::invalid(info, name, causes));
        }
        self.admission.validate(self.cluster(), &request, &obj).await?;
        if let Some(manager) = &resource.manager {
            crate::apply::track_update(
                resource,
                Some(old),
                &mut obj,
                manager,
                subresource,
                &nest_core::clock::rfc3339_now(),
            );
        }
        if dry_run {
            meta::metadata_mut(&mut obj).insert("resourceVersion".into(), json!(current.0.to_string()));
            return Ok(Updated::DryRun(obj));
        }
        if unchanged(&obj, old) {
            return Ok(Updated::Unchanged(old.clone()));
        }
        Ok(Updated::Store(obj))
    }

    /// Stores an updated object with compare-and-swap; an object being deleted whose finalizers are all gone is
    /// removed instead.
    pub(super) async fn write_back(
        &self,
        resource: &Resource,
        key: &str,
        name: &str,
        obj: Value,
        expected: Revision,
    ) -> Result<Value> {
        let info = &resource.info;
        if removes(resource, &obj) {
            return self.remove(resource, key, name, obj, expected).await;
        }
        let item = self.store.update(key.as_bytes(), Self::encode(info, &obj)?, expected).await.about(info, name)?;
        self.after_write(resource).await;
        Ok(Self::stored(obj, item.mod_revision))
    }

    /// Removes an object from storage for good, if it is still at `expected`: its kind's hooks run before and after.
    pub(super) async fn remove(
        &self,
        resource: &Resource,
        key: &str,
        name: &str,
        obj: Value,
        expected: Revision,
    ) -> Result<Value> {
        resource.strategy.before_remove(self.cluster(), &obj).await?;
        let deleted = self.store.delete(key.as_bytes(), Some(expected)).await.about(&resource.info, name)?;
        resource.strategy.release(self.cluster(), &obj).await;
        self.after_write(resource).await;
        Ok(Self::stored(obj, deleted.revision))
    }

    /// Builds the object an update stores from the old one and the body, keeping what clients may not change.
    pub(super) fn merge_update(
        &self,
        resource: &Resource,
        old: &Value,
        body: Value,
        subresource: Subresource,
    ) -> Result<Value> {
        let info = &resource.info;
        let body_managed_fields = body["metadata"].get("managedFields").cloned();
        let mut obj = match subresource {
            Subresource::Status => {
                let mut obj = old.clone();
                obj["status"] = body.get("status").cloned().unwrap_or(Value::Null);
                obj
            }
            // The strategy made the body from the stored object.
            Subresource::Own(_) => body,
            Subresource::Main => {
                let mut obj = body;
                if info.status {
                    obj["status"] = old.get("status").cloned().unwrap_or(Value::Null);
                }
                obj
            }
        };
        if obj.get("status").is_some_and(Value::is_null) {
            obj.as_object_mut().expect("an object").remove("status");
        }
        // managedFields travel with every write, status included (server-side apply to `/status` sets them).
        if subresource != Subresource::Main
            && let Some(fields) = body_managed_fields
        {
            meta::metadata_mut(&mut obj).insert("managedFields".into(), fields);
        }
        obj["apiVersion"] = json!(info.api_version());
        obj["kind"] = json!(info.kind);
        let old_meta = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
        {
            let metadata = meta::metadata_mut(&mut obj);
            for kept in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match old_meta.get(kept) {
                    Some(value) => metadata.insert(kept.into(), value.clone()),
                    None => metadata.remove(kept),
                };
            }
            metadata.remove("resourceVersion");
        }
        if subresource == Subresource::Main {
            resource.strategy.prepare_for_update(&mut obj, old);
        }
        if meta::is_deleting(old) {
            let before = meta::finalizers(old);
            if meta::finalizers(&obj).iter().any(|f| !before.contains(f)) {
                return Err(ApiError::invalid(
                    info,
                    meta::name(old),
                    vec![Cause {
                        reason: "FieldValueForbidden",
                        message: "Forbidden: no new finalizers can be added if the object is being deleted".into(),
                        field: "metadata.finalizers".into(),
                    }],
                ));
            }
        }
        // generation counts changes of everything but metadata and (with a status subresource) status.
        let spec_changed = |a: &Value, b: &Value| {
            let strip = |v: &Value| {
                let mut v = v.clone();
                if let Some(map) = v.as_object_mut() {
                    map.remove("metadata");
                    if info.status {
                        map.remove("status");
                    }
                }
                v
            };
            strip(a) != strip(b)
        };
        if info.generation && spec_changed(&obj, old) {
            let generation = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(0) + 1;
            meta::metadata_mut(&mut obj).insert("generation".into(), json!(generation));
        }
        meta::drop_empty_collections(&mut obj);
        Ok(obj)
    }

    /// Read-modify-write with retries on conflict: the mechanism under PATCH. `change` gets the current object
    /// (with its resourceVersion) and returns the new one.
    pub async fn update_with(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        subresource: Subresource,
        dry_run: bool,
        mut change: impl FnMut(&Value) -> Result<Value> + Send,
    ) -> Result<Value> {
        let info = &resource.info;
        let key = Self::key(info, namespace, name);
        for _ in 0..16 {
            let current = self.stored_item(info, &key, name).await?;
            let old = Self::decode(info, &current)?;
            let body = change(&old)?;
            Self::check_identity(resource, namespace, &body)?;
            if meta::name(&body) != name {
                return Err(ApiError::bad_request("the patch must not change metadata.name"));
            }
            // `change` starts from the current object, resourceVersion included; only a patch that set another
            // one asks for optimistic concurrency. Otherwise a conflict with a concurrent write is retried.
            let wanted_rv = meta::meta_str(&body, "resourceVersion");
            let conditional = !wanted_rv.is_empty() && wanted_rv != meta::meta_str(&old, "resourceVersion");
            let next =
                self.next_version(resource, namespace, name, current.mod_revision, &old, body, subresource, dry_run);
            let obj = match next.await? {
                Updated::DryRun(obj) | Updated::Unchanged(obj) => return Ok(obj),
                Updated::Store(obj) => obj,
            };
            match self.write_back(resource, &key, name, obj, current.mod_revision).await {
                Err(e) if e.reason == "Conflict" && !conditional => continue,
                other => return other,
            }
        }
        Err(ApiError::conflict(info, name))
    }

    /// A write to one of the kind's own subresources (`pods/binding`, `namespaces/finalize`): its strategy makes the
    /// new object from the current one and `body`, with retries on conflict.
    pub async fn update_subresource(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        subresource: &str,
        body: Value,
        dry_run: bool,
    ) -> Result<Value> {
        self.patch_subresource(resource, namespace, name, subresource, dry_run, |_| Ok(body.clone())).await
    }

    /// [`Registry::update_subresource`] with a body made from the current object (a patch of the subresource's view
    /// of it, such as `pods/ephemeralcontainers`, which is the pod): `body` gets the current object.
    pub async fn patch_subresource(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        subresource: &str,
        dry_run: bool,
        mut body: impl FnMut(&Value) -> Result<Value> + Send,
    ) -> Result<Value> {
        let info = &resource.info;
        let Some(own) = info.subresources.iter().find(|s| s.name == subresource) else {
            return Err(ApiError::no_route());
        };
        self.update_with(resource, namespace, name, Subresource::Own(own.name), dry_run, |current| {
            resource.strategy.update_subresource(own.name, info, current, &body(current)?)
        })
        .await
    }

    /// DELETE. Objects with finalizers (after the propagation policy adds its own) are marked with a
    /// deletionTimestamp and kept; the rest are removed. Returns the object as it was last.
    pub async fn delete(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Value> {
        let info = &resource.info;
        let key = Self::key(info, namespace, name);
        for _ in 0..16 {
            let current = self.stored_item(info, &key, name).await?;
            let mut obj = Self::decode(info, &current)?;
            let request = admission_request(
                resource,
                Operation::Delete,
                Subresource::Main,
                namespace,
                name,
                Some(&obj),
                options.dry_run,
            );
            self.admission.validate(self.cluster(), &request, &obj).await?;
            if let Some(uid) = &options.precondition_uid
                && uid != meta::meta_str(&obj, "uid")
            {
                return Err(ApiError::conflict(info, name).with_message(format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta::meta_str(&obj, "uid")
                )));
            }
            if let Some(rv) = &options.precondition_resource_version
                && *rv != current.mod_revision.0.to_string()
            {
                return Err(ApiError::conflict(info, name).with_message(format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    current.mod_revision
                )));
            }
            let mut finalizers = meta::finalizers(&obj);
            if !meta::is_deleting(&obj) {
                match options.propagation_policy.as_deref().or(resource.strategy.default_propagation()) {
                    Some("Foreground") if !finalizers.iter().any(|f| f == "foregroundDeletion") => {
                        finalizers.push("foregroundDeletion".into())
                    }
                    Some("Orphan") if !finalizers.iter().any(|f| f == "orphan") => finalizers.push("orphan".into()),
                    Some("Foreground" | "Orphan" | "Background") | None => {}
                    Some(other) => {
                        return Err(ApiError::invalid(
                            info,
                            name,
                            vec![Cause {
                                reason: "FieldValueNotSupported",
                                message: format!(
                                    "Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
                                ),
                                field: "propagationPolicy".into(),
                            }],
                        ));
                    }
                }
            }
            // A graceful kind (a pod on a node) is deleted in two steps: marked with a deletionTimestamp at the end of
            // its grace period, then removed by whoever runs it (with a grace period of 0) once stopped.
            let grace = resource.strategy.grace_period(&obj, options.grace_period_seconds);
            let pending_grace = meta::is_deleting(&obj)
                .then(|| obj["metadata"]["deletionGracePeriodSeconds"].as_i64().unwrap_or(0))
                .filter(|pending| *pending > 0);
            let graceful = !finalizers.is_empty() || resource.strategy.holds_removal(&obj) || grace > 0;
            if !graceful {
                if options.dry_run {
                    return Ok(obj);
                }
                return match self.remove(resource, &key, name, obj, current.mod_revision).await {
                    Err(e) if e.reason == "Conflict" => continue,
                    other => other,
                };
            }
            // A second delete may only shorten a pod's grace period.
            let shorter = pending_grace.is_some_and(|pending| grace < pending);
            if meta::is_deleting(&obj) && finalizers == meta::finalizers(&obj) && !shorter {
                // Already being deleted; nothing changes.
                return Ok(obj);
            }
            {
                let metadata = meta::metadata_mut(&mut obj);
                metadata.insert("finalizers".into(), json!(finalizers));
                if !metadata.contains_key("deletionTimestamp") || shorter {
                    metadata.insert("deletionTimestamp".into(), json!(nest_core::clock::rfc3339_in(grace)));
                    metadata.insert("deletionGracePeriodSeconds".into(), json!(grace));
                }
            }
            resource.strategy.prepare_for_delete(&mut obj);
            if options.dry_run {
                return Ok(obj);
            }
            match self.store.update(key.as_bytes(), Self::encode(info, &obj)?, current.mod_revision).await {
                Ok(item) => return Ok(Self::stored(obj, item.mod_revision)),
                Err(nest_storage::Error::Conflict { .. }) => continue,
                Err(e) => return Err(ApiError::interpret(e, info, name)),
            }
        }
        Err(ApiError::conflict(info, name))
    }
}

/// The admission chain's view of a request.
fn admission_request<'a>(
    resource: &'a Resource,
    operation: Operation,
    subresource: Subresource,
    namespace: &'a str,
    name: &'a str,
    old: Option<&'a Value>,
    dry_run: bool,
) -> chain::Request<'a> {
    chain::Request {
        operation,
        info: &resource.info,
        subresource,
        namespace,
        name,
        old,
        user: &resource.user,
        dry_run,
        warnings: &resource.warnings,
    }
}
