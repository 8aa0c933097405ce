//! The generic store's semantics, in process over the embedded storage backend: what kube-apiserver clients rely on
//! (KUBE-API-NOTES.md), without HTTP in between.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use nest_registry::{DeleteOptions, ListOptions, Registry, Resource, Subresource};
use nest_storage::Store;
use nest_storage::embedded::EmbeddedStore;
use serde_json::{Value, json};

struct Fixture {
    registry: Registry,
    store: Arc<dyn Store>,
    _dir: tempfile::TempDir,
}

impl Fixture {
    async fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path(), Default::default()).unwrap());
        let registry = Registry::open(store.clone()).await.unwrap();
        let f = Fixture { registry, store, _dir: dir };
        f.registry.create(&f.r("", "namespaces"), "", json!({"metadata": {"name": "ns"}}), false).await.unwrap();
        f.account("ns").await;
        f
    }

    /// The namespace's `default` ServiceAccount, which ServiceAccount admission wants before a pod (a
    /// controller-manager would make it).
    async fn account(&self, namespace: &str) {
        let account = json!({"metadata": {"name": "default"}});
        self.registry.create(&self.r("", "serviceaccounts"), namespace, account, false).await.unwrap();
    }

    fn r(&self, group: &str, plural: &str) -> Resource {
        self.registry.resource(group, "v1", plural).unwrap()
    }

    async fn cm(&self, name: &str, data: Value) -> Value {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data});
        self.registry.create(&self.r("", "configmaps"), "ns", body, false).await.unwrap()
    }
}

fn rv(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn create_fills_metadata_and_generate_name_draws_a_suffix() {
    let f = Fixture::new().await;
    let body = json!({"metadata": {"generateName": "web-"}, "data": {}});
    let created = f.registry.create(&f.r("", "configmaps"), "ns", body, false).await.unwrap();
    let name = created["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("web-") && name.len() == 9, "{name}");
    assert!(name[4..].chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    // A ConfigMap has no generation: only the kinds whose upstream strategy sets one count changes.
    assert!(created["metadata"].get("generation").is_none(), "{created}");
    assert_eq!(created["metadata"]["namespace"], "ns");
    assert_eq!(created["metadata"]["uid"].as_str().unwrap().len(), 36);
    assert!(created["metadata"]["creationTimestamp"].as_str().unwrap().ends_with('Z'));
    assert_eq!((created["kind"].as_str(), created["apiVersion"].as_str()), (Some("ConfigMap"), Some("v1")));

    let again = f.registry.create(&f.r("", "configmaps"), "ns", json!({"metadata": {"name": name}}), false).await;
    assert_eq!(again.unwrap_err().reason, "AlreadyExists");
}

#[tokio::test]
async fn bad_objects_get_the_right_status() {
    let f = Fixture::new().await;
    let cms = f.r("", "configmaps");
    let cases = [
        (json!({"metadata": {}}), 422, "Invalid"),
        (json!({"metadata": {"name": "Bad_Name"}}), 422, "Invalid"),
        (json!({"kind": "Secret", "metadata": {"name": "x"}}), 400, "BadRequest"),
        (json!({"apiVersion": "apps/v1", "metadata": {"name": "x"}}), 400, "BadRequest"),
        (json!({"metadata": {"name": "x", "namespace": "other"}}), 400, "BadRequest"),
        (json!(["not", "an", "object"]), 400, "BadRequest"),
    ];
    for (body, code, reason) in cases {
        let error = f.registry.create(&cms, "ns", body.clone(), false).await.unwrap_err();
        assert_eq!((error.code, error.reason), (code, reason), "{body}");
    }
    let invalid = f.registry.create(&cms, "ns", json!({"metadata": {"name": "Bad_Name"}}), false).await.unwrap_err();
    assert_eq!(invalid.to_status()["details"]["causes"][0]["field"], "metadata.name");
    let missing_ns = f.registry.create(&cms, "nowhere", json!({"metadata": {"name": "x"}}), false).await.unwrap_err();
    assert_eq!((missing_ns.code, missing_ns.message.as_str()), (404, "namespaces \"nowhere\" not found"));
    let pod = f.registry.create(&f.r("", "pods"), "ns", json!({"metadata": {"name": "p"}, "spec": {}}), false).await;
    assert_eq!(pod.unwrap_err().to_status()["details"]["causes"][0]["field"], "spec.containers");
}

/// Issue 18: ConfigMap and Secret keys become file names in volumes, so they are refused as kube-apiserver refuses
/// them: a key that is a path, or climbs with `..`, is a 422 naming `data[<key>]` with upstream's message.
#[tokio::test]
async fn config_and_secret_keys_that_are_paths_are_invalid() {
    let f = Fixture::new().await;
    let regex = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or \
                 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";
    let cm = json!({"metadata": {"name": "paths"}, "data": {"/etc/passwd": "x", "ok.key": "y"}});
    let error = f.registry.create(&f.r("", "configmaps"), "ns", cm, false).await.unwrap_err();
    assert_eq!((error.code, error.reason), (422, "Invalid"));
    let cause = &error.to_status()["details"]["causes"][0];
    assert_eq!(cause["field"], "data[/etc/passwd]");
    assert_eq!(cause["message"], format!("Invalid value: \"/etc/passwd\": {regex}"));
    assert_eq!(error.to_status()["details"]["causes"].as_array().unwrap().len(), 1, "ok.key is fine");

    let secret = json!({"metadata": {"name": "climb"}, "stringData": {"../x": "s"}});
    let error = f.registry.create(&f.r("", "secrets"), "ns", secret, false).await.unwrap_err();
    let messages: Vec<String> = error.to_status()["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| format!("{}: {}", c["field"].as_str().unwrap(), c["message"].as_str().unwrap()))
        .collect();
    assert_eq!(
        messages,
        [
            format!("data[../x]: Invalid value: \"../x\": {regex}"),
            "data[../x]: Invalid value: \"../x\": must not start with '..'".to_string()
        ]
    );
    let both = json!({"metadata": {"name": "both"}, "data": {"k": "1"}, "binaryData": {"k": "MQ=="}});
    let error = f.registry.create(&f.r("", "configmaps"), "ns", both, false).await.unwrap_err();
    assert_eq!(
        error.to_status()["details"]["causes"][0]["message"],
        "Invalid value: \"k\": duplicate of key present in data"
    );
    f.cm("fine", json!({"key.name": "1", "KEY_NAME": "2", "key-name": "3"})).await;
}

#[tokio::test]
async fn stale_updates_conflict_and_dry_run_persists_nothing() {
    let f = Fixture::new().await;
    let cms = f.r("", "configmaps");
    let first = f.cm("a", json!({"k": "1"})).await;
    let mut change = first.clone();
    change["data"]["k"] = json!("2");
    let second = f.registry.update(&cms, "ns", "a", change.clone(), Subresource::Main, false).await.unwrap();
    assert!(rv(&second) > rv(&first));
    assert!(second["metadata"].get("generation").is_none(), "{second}");
    let stale = f.registry.update(&cms, "ns", "a", change, Subresource::Main, false).await.unwrap_err();
    assert_eq!((stale.code, stale.reason), (409, "Conflict"));
    assert!(stale.message.contains("the object has been modified; please apply your changes to the latest version"));

    let dry = json!({"metadata": {"name": "ghost"}});
    f.registry.create(&cms, "ns", dry, true).await.unwrap();
    assert_eq!(f.registry.get(&cms, "ns", "ghost").await.unwrap_err().code, 404);
    let before = f.store.current_revision().await.unwrap();
    f.registry.delete(&cms, "ns", "a", &DeleteOptions { dry_run: true, ..Default::default() }).await.unwrap();
    assert_eq!(f.store.current_revision().await.unwrap(), before);
    assert!(f.registry.get(&cms, "ns", "a").await.is_ok());
}

/// Updates start from the watch cache's copy, as kube-apiserver's do (its cacher hands GuaranteedUpdate the cached
/// object). The copy may be a write behind — the cache applies changes after they are acknowledged, and another API
/// server may write to the same storage — and that must never fail an update or lose one.
#[tokio::test]
async fn updates_hold_whatever_the_watch_cache_has_seen() {
    let f = Fixture::new().await;
    let cms = f.r("", "configmaps");
    let mut last = f.cm("counter", json!({"n": "0"})).await;
    // Each update names the version the one before returned, which a cache a write behind does not have yet.
    for n in 1..=50 {
        let mut next = last.clone();
        next["data"]["n"] = json!(n.to_string());
        last = f.registry.update(&cms, "ns", "counter", next, Subresource::Main, false).await.unwrap();
        assert_eq!(last["data"]["n"], n.to_string());
    }
    // Writes that go around this registry, straight to storage, each followed at once by one through it.
    let key = b"/registry/core/configmaps/ns/counter";
    for n in 0..20 {
        let mut around = last.clone();
        around["data"]["n"] = json!(format!("around-{n}"));
        around["metadata"].as_object_mut().unwrap().remove("resourceVersion");
        let written =
            f.store.update(key, serde_json::to_vec(&around).unwrap().into(), nest_storage::Revision(rv(&last)));
        let written = written.await.unwrap();
        // The body is what the registry last returned: the cache may still hold exactly that, so it looks unchanged
        // there, but storage holds the write that went around, and the update must replace it.
        let mut body = last.clone();
        body["metadata"].as_object_mut().unwrap().remove("resourceVersion");
        last = f.registry.update(&cms, "ns", "counter", body, Subresource::Main, false).await.unwrap();
        assert!(rv(&last) > written.mod_revision.0, "round {n}: {last}");
        let stored = f.registry.get(&cms, "ns", "counter").await.unwrap();
        assert_eq!(stored["data"], last["data"], "round {n}");
        assert_eq!(rv(&stored), rv(&last), "round {n}");
    }
    // A version that really is old still conflicts.
    let mut old = last.clone();
    old["metadata"]["resourceVersion"] = json!((rv(&last) - 1).to_string());
    let refused = f.registry.update(&cms, "ns", "counter", old, Subresource::Main, false).await.unwrap_err();
    assert_eq!(refused.code, 409);
}

/// `immutable: true` freezes a ConfigMap's data and a Secret's, and itself; a Secret's type never changes
/// (`ValidateConfigMapUpdate`, `ValidateSecretUpdate`, 1.33), with upstream's messages.
#[tokio::test]
async fn immutable_config_maps_and_secrets_keep_their_data() {
    let f = Fixture::new().await;
    let main = Subresource::Main;
    let cms = f.r("", "configmaps");
    let sealed = f.cm("sealed", json!({"a": "1"})).await;
    let mut frozen = sealed.clone();
    frozen["immutable"] = json!(true);
    let frozen = f.registry.update(&cms, "ns", "sealed", frozen, main, false).await.unwrap();
    let mut changed = frozen.clone();
    changed["data"]["a"] = json!("2");
    changed["immutable"] = json!(false);
    let refused = f.registry.update(&cms, "ns", "sealed", changed, main, false).await.unwrap_err();
    assert_eq!(refused.code, 422);
    assert_eq!(
        refused.message,
        "ConfigMap \"sealed\" is invalid: [immutable: Forbidden: field is immutable when `immutable` is set, \
         data: Forbidden: field is immutable when `immutable` is set]"
    );
    let mut labelled = frozen.clone();
    labelled["metadata"]["labels"] = json!({"still": "fine"});
    f.registry.update(&cms, "ns", "sealed", labelled, main, false).await.unwrap();

    let secrets = f.r("", "secrets");
    let secret = json!({"metadata": {"name": "s"}, "immutable": true, "data": {"k": "dg=="}});
    let secret = f.registry.create(&secrets, "ns", secret, false).await.unwrap();
    let mut retyped = secret.clone();
    retyped["type"] = json!("example.com/other");
    retyped["data"]["k"] = json!("dw==");
    let refused = f.registry.update(&secrets, "ns", "s", retyped, main, false).await.unwrap_err();
    assert_eq!(
        refused.message,
        "Secret \"s\" is invalid: [type: Invalid value: \"example.com/other\": field is immutable, \
         data: Forbidden: field is immutable when `immutable` is set]"
    );
}

/// kube-apiserver writes nothing for an update that changes nothing (its storage's GuaranteedUpdate): no new
/// resourceVersion, no watch event. Controllers that write an unchanged status on every resync rely on it to leave
/// the cluster at rest.
#[tokio::test]
async fn an_update_that_changes_nothing_writes_nothing() {
    let f = Fixture::new().await;
    let cms = f.r("", "configmaps");
    let first = f.cm("a", json!({"k": "1"})).await;
    let options = ListOptions { resource_version: Some(rv(&first).to_string()), ..Default::default() };
    let mut events = f.registry.watch(&cms, Some("ns"), &options, None).await.unwrap();
    let before = f.store.current_revision().await.unwrap();
    let same = f.registry.update(&cms, "ns", "a", first.clone(), Subresource::Main, false).await.unwrap();
    assert_eq!(same, first, "the stored object comes back");
    let mut unversioned = first.clone();
    unversioned["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    f.registry.update(&cms, "ns", "a", unversioned, Subresource::Main, false).await.unwrap();
    let patched = f.registry.update_with(&cms, "ns", "a", Subresource::Main, false, |old| Ok(old.clone())).await;
    assert_eq!(rv(&patched.unwrap()), rv(&first));
    assert_eq!(f.store.current_revision().await.unwrap(), before, "nothing was written");
    // The first change after them is the first event the watch sees.
    let mut change = first.clone();
    change["data"]["k"] = json!("2");
    let second = f.registry.update(&cms, "ns", "a", change, Subresource::Main, false).await.unwrap();
    let event = next(&mut events).await;
    assert_eq!((event["type"].as_str(), rv(&event["object"])), (Some("MODIFIED"), rv(&second)));
}

#[tokio::test]
async fn status_subresource_rules() {
    let f = Fixture::new().await;
    let deployments = f.r("apps", "deployments");
    let template = json!({"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let spec = json!({"replicas": 1, "selector": {"matchLabels": {"app": "d"}}, "template": template});
    let body = json!({"metadata": {"name": "d"}, "spec": spec, "status": {"replicas": 9}});
    let created = f.registry.create(&deployments, "ns", body, false).await.unwrap();
    // The main endpoint ignores status; /status changes only status and does not bump generation.
    let mut main = created.clone();
    main["status"] = json!({"replicas": 5});
    main["spec"]["replicas"] = json!(2);
    let updated = f.registry.update(&deployments, "ns", "d", main, Subresource::Main, false).await.unwrap();
    assert_eq!(updated["spec"]["replicas"], 2);
    assert_eq!(updated["status"]["replicas"], created["status"]["replicas"]);
    assert_eq!(updated["metadata"]["generation"], 2);
    let mut status = updated.clone();
    status["status"] = json!({"replicas": 2});
    status["spec"]["replicas"] = json!(7);
    let after = f.registry.update(&deployments, "ns", "d", status, Subresource::Status, false).await.unwrap();
    assert_eq!((after["spec"]["replicas"].as_i64(), after["status"]["replicas"].as_i64()), (Some(2), Some(2)));
    assert_eq!(after["metadata"]["generation"], 2);
}

#[tokio::test]
async fn workloads_are_validated_as_kube_apiserver_validates_them() {
    let f = Fixture::new().await;
    let sets = f.r("apps", "statefulsets");
    let template = json!({"metadata": {"labels": {"app": "s"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let good = json!({"metadata": {"name": "s"}, "spec": {
        "replicas": 2, "selector": {"matchLabels": {"app": "s"}}, "template": template}});
    f.registry.create(&sets, "ns", good.clone(), true).await.unwrap();
    let cases = [
        ("/spec/replicas", json!(-1), "spec.replicas"),
        ("/spec/selector", json!({"matchLabels": {"app": "other"}}), "spec.template.metadata.labels"),
        ("/spec/template/spec/containers", json!([{"name": "c"}]), "spec.template.spec.containers[0].image"),
    ];
    for (pointer, value, field) in cases {
        let mut bad = good.clone();
        *bad.pointer_mut(pointer).unwrap() = value;
        let error = f.registry.create(&sets, "ns", bad, true).await.unwrap_err();
        assert_eq!(error.code, 422, "{pointer}");
        assert!(error.details.causes.iter().any(|c| c.field == field), "{pointer}: {error:?}");
    }
    let mut bare = good.clone();
    bare["spec"].as_object_mut().unwrap().remove("selector");
    let error = f.registry.create(&sets, "ns", bare, true).await.unwrap_err();
    assert!(error.details.causes.iter().any(|c| c.field == "spec.selector"), "{error:?}");
}

#[tokio::test]
async fn secret_string_data_is_written_into_data() {
    let f = Fixture::new().await;
    let secrets = f.r("", "secrets");
    let body =
        json!({"metadata": {"name": "s"}, "data": {"a": "b2xk", "b": "b2xk"}, "stringData": {"b": "new", "c": "x"}});
    let created = f.registry.create(&secrets, "ns", body, false).await.unwrap();
    assert_eq!(created["data"], json!({"a": "b2xk", "b": "bmV3", "c": "eA=="}));
    assert!(created.get("stringData").is_none(), "stringData is not stored: {created}");
    assert_eq!(created["type"], "Opaque");
    let mut update = created.clone();
    update["stringData"] = json!({"a": "changed"});
    let updated = f.registry.update(&secrets, "ns", "s", update, Subresource::Main, false).await.unwrap();
    assert_eq!(updated["data"]["a"], "Y2hhbmdlZA==");
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let f = Fixture::new().await;
    let cms = f.r("", "configmaps");
    let body = json!({"metadata": {"name": "held", "finalizers": ["example.com/x"]}});
    f.registry.create(&cms, "ns", body, false).await.unwrap();
    let deleting = f.registry.delete(&cms, "ns", "held", &DeleteOptions::default()).await.unwrap();
    assert!(deleting["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(deleting["metadata"]["deletionGracePeriodSeconds"], 0);

    let mut more = deleting.clone();
    more["metadata"]["finalizers"] = json!(["example.com/x", "example.com/new"]);
    let refused = f.registry.update(&cms, "ns", "held", more, Subresource::Main, false).await.unwrap_err();
    assert_eq!(refused.code, 422);

    let mut done = deleting.clone();
    done["metadata"]["finalizers"] = json!([]);
    f.registry.update(&cms, "ns", "held", done, Subresource::Main, false).await.unwrap();
    assert_eq!(f.registry.get(&cms, "ns", "held").await.unwrap_err().code, 404);

    f.cm("fg", json!({})).await;
    let options = DeleteOptions { propagation_policy: Some("Foreground".into()), ..Default::default() };
    let fg = f.registry.delete(&cms, "ns", "fg", &options).await.unwrap();
    assert_eq!(fg["metadata"]["finalizers"], json!(["foregroundDeletion"]));
    let uid = DeleteOptions { precondition_uid: Some("wrong".into()), ..Default::default() };
    assert_eq!(f.registry.delete(&cms, "ns", "fg", &uid).await.unwrap_err().code, 409);
}

#[tokio::test]
async fn namespaces_terminate_then_finalize() {
    let f = Fixture::new().await;
    let namespaces = f.r("", "namespaces");
    let ns = f.registry.delete(&namespaces, "", "ns", &DeleteOptions::default()).await.unwrap();
    assert_eq!(ns["status"]["phase"], "Terminating");
    let refused = f.registry.create(&f.r("", "configmaps"), "ns", json!({"metadata": {"name": "x"}}), false).await;
    let refused = refused.unwrap_err();
    assert_eq!(refused.code, 403);
    assert!(refused.message.contains("because it is being terminated"));
    f.registry
        .update_subresource(&namespaces, "", "ns", "finalize", json!({"spec": {"finalizers": []}}), false)
        .await
        .unwrap();
    assert_eq!(f.registry.get(&namespaces, "", "ns").await.unwrap_err().code, 404);
}

#[tokio::test]
async fn pages_share_one_snapshot_and_expire_after_compaction() {
    let f = Fixture::new().await;
    let cms = f.r("", "configmaps");
    for i in 0..25 {
        f.cm(&format!("cm-{i:02}"), json!({"i": i.to_string()})).await;
    }
    let options = ListOptions { limit: Some(10), ..Default::default() };
    let first = f.registry.list(&cms, Some("ns"), &options).await.unwrap();
    assert_eq!(first["items"].as_array().unwrap().len(), 10);
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    // A write between pages does not show up in the later pages.
    f.cm("cm-99", json!({})).await;
    let mut names = Vec::new();
    let mut token = Some(token);
    while let Some(t) = token {
        let page = f
            .registry
            .list(&cms, Some("ns"), &ListOptions { limit: Some(10), continue_token: Some(t), ..Default::default() })
            .await
            .unwrap();
        assert_eq!(page["metadata"]["resourceVersion"], first["metadata"]["resourceVersion"]);
        names.extend(
            page["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()),
        );
        token = page["metadata"]["continue"].as_str().map(str::to_string);
    }
    assert_eq!(names.len(), 15);
    assert!(!names.contains(&"cm-99".to_string()));

    let second = f.registry.list(&cms, Some("ns"), &options).await.unwrap();
    let stale = second["metadata"]["continue"].as_str().unwrap().to_string();
    f.cm("cm-100", json!({})).await;
    f.store.compact(f.store.current_revision().await.unwrap()).await.unwrap();
    let expired = f
        .registry
        .list(&cms, Some("ns"), &ListOptions { limit: Some(10), continue_token: Some(stale), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!((expired.code, expired.reason), (410, "Expired"));

    let bad = ListOptions { resource_version_match: Some("Exact".into()), ..Default::default() };
    assert_eq!(f.registry.list(&cms, Some("ns"), &bad).await.unwrap_err().code, 400);
    let selector = ListOptions { field_selector: Some("spec.nope=1".into()), ..Default::default() };
    assert_eq!(f.registry.list(&cms, Some("ns"), &selector).await.unwrap_err().code, 400);
    let by_name = ListOptions { field_selector: Some("metadata.name=cm-03".into()), ..Default::default() };
    assert_eq!(f.registry.list(&cms, Some("ns"), &by_name).await.unwrap()["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_list_at_an_exact_revision_shows_the_past() {
    let f = Fixture::new().await;
    let cms = f.r("", "configmaps");
    let old = f.cm("a", json!({"v": "old"})).await;
    let mut change = old.clone();
    change["data"]["v"] = json!("new");
    f.registry.update(&cms, "ns", "a", change, Subresource::Main, false).await.unwrap();
    let exact = ListOptions {
        resource_version: Some(rv(&old).to_string()),
        resource_version_match: Some("Exact".into()),
        ..Default::default()
    };
    let past = f.registry.list(&cms, Some("ns"), &exact).await.unwrap();
    assert_eq!(past["items"][0]["data"]["v"], "old");
    assert_eq!(past["metadata"]["resourceVersion"], old["metadata"]["resourceVersion"]);
}

async fn next(stream: &mut futures_util::stream::BoxStream<'static, Value>) -> Value {
    tokio::time::timeout(Duration::from_secs(10), stream.next()).await.expect("an event in time").expect("an event")
}

#[tokio::test]
async fn watches_start_with_synthetic_adds_or_resume_after_a_resource_version() {
    let f = Fixture::new().await;
    let cms = f.r("", "configmaps");
    let a = f.cm("a", json!({})).await;
    f.cm("b", json!({})).await;

    let mut fresh = f.registry.watch(&cms, Some("ns"), &ListOptions::default(), None).await.unwrap();
    let first = next(&mut fresh).await;
    assert_eq!((first["type"].as_str(), first["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("a")));
    assert_eq!(next(&mut fresh).await["object"]["metadata"]["name"], "b");

    let resume = ListOptions { resource_version: Some(rv(&a).to_string()), ..Default::default() };
    let mut resumed = f.registry.watch(&cms, Some("ns"), &resume, None).await.unwrap();
    assert_eq!(next(&mut resumed).await["object"]["metadata"]["name"], "b");
    f.registry.delete(&cms, "ns", "a", &DeleteOptions::default()).await.unwrap();
    let deleted = next(&mut resumed).await;
    assert_eq!(
        (deleted["type"].as_str(), deleted["object"]["metadata"]["name"].as_str()),
        (Some("DELETED"), Some("a"))
    );
    assert!(rv(&deleted["object"]) > rv(&a), "a DELETED event carries the deletion revision");
    assert_eq!(next(&mut fresh).await["type"], "DELETED");

    let labelled = ListOptions { label_selector: Some("app=web".into()), ..Default::default() };
    let mut filtered = f.registry.watch(&cms, Some("ns"), &labelled, Some(Duration::from_millis(200))).await.unwrap();
    f.registry.create(&cms, "ns", json!({"metadata": {"name": "web", "labels": {"app": "web"}}}), false).await.unwrap();
    assert_eq!(next(&mut filtered).await["object"]["metadata"]["name"], "web");
    let bookmark = next(&mut filtered).await;
    assert_eq!(bookmark["type"], "BOOKMARK");

    // A start older than both the storage history and the watch cache's (which begins when the registry opens).
    f.store.compact(f.store.current_revision().await.unwrap()).await.unwrap();
    let reopened = Registry::open(f.store.clone()).await.unwrap();
    let old = ListOptions { resource_version: Some("1".into()), ..Default::default() };
    let mut expired = reopened.watch(&cms, Some("ns"), &old, None).await.unwrap();
    let error = next(&mut expired).await;
    assert_eq!((error["type"].as_str(), error["object"]["code"].as_i64()), (Some("ERROR"), Some(410)));
    assert_eq!(error["object"]["reason"], "Expired");
}

#[tokio::test]
async fn services_get_distinct_cluster_ips_that_are_freed_on_delete() {
    let f = Fixture::new().await;
    let registry = Registry::open(f.store.clone()).await.unwrap().with_service_cidr("10.0.0.0/28".parse().unwrap());
    let services = registry.resource("", "v1", "services").unwrap();
    let svc = |name: &str, ip: Option<&str>| {
        let mut body = json!({"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}});
        if let Some(ip) = ip {
            body["spec"]["clusterIP"] = json!(ip);
        }
        body
    };
    let mut seen = std::collections::HashSet::new();
    for i in 0..10 {
        let created = registry.create(&services, "ns", svc(&format!("s{i}"), None), false).await.unwrap();
        let ip: std::net::Ipv4Addr = created["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
        assert_eq!(ip.octets()[..3], [10, 0, 0], "{ip} is in the range");
        assert!(ip.octets()[3] >= 2 && ip.octets()[3] <= 14, "{ip}: not the network, reserved or broadcast address");
        assert!(seen.insert(ip), "{ip} was handed out twice");
        assert_eq!(created["spec"]["clusterIPs"], json!([ip.to_string()]));
        assert_eq!(created["spec"]["ports"][0]["targetPort"], 80);
    }
    let taken = seen.iter().next().unwrap().to_string();
    let refused = registry.create(&services, "ns", svc("dup", Some(&taken)), false).await.unwrap_err();
    assert!(refused.message.contains("already allocated"), "{}", refused.message);
    let mut owner = String::new();
    for i in 0..10 {
        let name = format!("s{i}");
        if registry.get(&services, "ns", &name).await.unwrap()["spec"]["clusterIP"] == taken.as_str() {
            owner = name;
        }
    }
    registry.delete(&services, "ns", &owner, &DeleteOptions::default()).await.unwrap();
    let reused = registry.create(&services, "ns", svc("dup", Some(&taken)), false).await.unwrap();
    assert_eq!(reused["spec"]["clusterIP"], taken.as_str());
    let headless = registry.create(&services, "ns", svc("headless", Some("None")), false).await.unwrap();
    assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
    let outside = registry.create(&services, "ns", svc("far", Some("192.168.0.1")), false).await.unwrap_err();
    assert!(outside.message.contains("not in the valid range"));
}

#[tokio::test]
async fn built_in_bodies_are_decoded_against_their_kind() {
    let f = Fixture::new().await;
    let deployments = f.r("apps", "deployments");
    let deployment = |replicas: Value, extra: Value| {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "creationTimestamp": null},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{
                        "name": "web", "image": "nginx", "bogus": extra,
                        "resources": {"limits": {"cpu": 0.5, "memory": "64Mi"}, "requests": {"cpu": 0.25}},
                        "ports": [{"containerPort": 80}],
                    }]},
                },
            },
        })
    };

    let wrong = f.registry.create(&deployments, "ns", deployment(json!("three"), json!(1)), false).await;
    let wrong = wrong.unwrap_err();
    assert_eq!((wrong.code, wrong.reason), (400, "BadRequest"));
    assert!(wrong.message.contains("spec.replicas"), "{}", wrong.message);
    assert!(wrong.message.starts_with("Deployment in version \"v1\" cannot be handled as a Deployment"));

    let port = deployment(json!(2), json!(1));
    let mut bad_port = port.clone();
    bad_port["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = json!("80");
    let wrong = f.registry.create(&deployments, "ns", bad_port, false).await.unwrap_err();
    assert_eq!(wrong.details.causes[0].field, "spec.template.spec.containers[0].ports[0].containerPort");

    // Quantities may be numbers, `null` is a zero value, and fields the kind does not have are dropped.
    let created = f.registry.create(&deployments, "ns", port, false).await.unwrap();
    let container = &created["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["resources"]["limits"]["cpu"], 0.5);
    assert!(container.get("bogus").is_none(), "unknown fields are not stored: {container}");
    assert_eq!(created["spec"]["replicas"], 2);

    let mut update = created.clone();
    update["spec"]["paused"] = json!("yes");
    let wrong = f.registry.update(&deployments, "ns", "web", update, Subresource::Main, false).await.unwrap_err();
    assert_eq!((wrong.code, wrong.details.causes[0].field.as_str()), (400, "spec.paused"));

    let secrets = f.r("", "secrets");
    let secret = json!({"metadata": {"name": "s"}, "data": {"key": "not base64!"}});
    let wrong = f.registry.create(&secrets, "ns", secret, false).await.unwrap_err();
    assert_eq!((wrong.code, wrong.details.causes[0].field.as_str()), (400, "data.key"));
    let labels = json!({"metadata": {"name": "s", "labels": {"a": 1}}});
    let wrong = f.registry.create(&secrets, "ns", labels, false).await.unwrap_err();
    assert_eq!((wrong.code, wrong.details.causes[0].field.as_str()), (400, "metadata.labels.a"));
}

#[tokio::test]
async fn events_k8s_io_serves_the_core_events_in_its_shape() {
    let f = Fixture::new().await;
    let (core, v1) = (f.r("", "events"), f.registry.resource("events.k8s.io", "v1", "events").unwrap());
    let mut watch = f.registry.watch(&v1, Some("ns"), &ListOptions::default(), None).await.unwrap();
    let body = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "pulled"},
        "eventTime": "2026-11-29T10:00:00.000000Z", "reportingController": "kubelet", "reportingInstance": "node-1",
        "action": "Pull", "reason": "Pulled", "type": "Normal", "note": "image pulled",
        "regarding": {"kind": "Pod", "name": "web", "namespace": "ns"},
    });
    let created = f.registry.create(&v1, "ns", body, false).await.unwrap();
    assert_eq!(
        (created["note"].as_str(), created["apiVersion"].as_str()),
        (Some("image pulled"), Some("events.k8s.io/v1"))
    );

    let seen = f.registry.get(&core, "ns", "pulled").await.unwrap();
    assert_eq!(seen["apiVersion"], "v1");
    assert_eq!(
        (seen["message"].as_str(), seen["involvedObject"]["name"].as_str()),
        (Some("image pulled"), Some("web"))
    );
    assert_eq!(seen["reportingComponent"], "kubelet");
    assert!(seen.get("regarding").is_none() && seen.get("note").is_none(), "{seen}");

    let by_object = ListOptions { field_selector: Some("involvedObject.name=web".into()), ..Default::default() };
    let listed = f.registry.list(&core, Some("ns"), &by_object).await.unwrap();
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);
    let by_regarding = ListOptions { field_selector: Some("regarding.name=web".into()), ..Default::default() };
    let listed = f.registry.list(&v1, Some("ns"), &by_regarding).await.unwrap();
    assert_eq!(listed["items"][0]["regarding"]["kind"], "Pod");

    let event = tokio::time::timeout(Duration::from_secs(10), watch.next()).await.unwrap().unwrap();
    assert_eq!((event["type"].as_str(), event["object"]["note"].as_str()), (Some("ADDED"), Some("image pulled")));
    assert_eq!(event["object"]["apiVersion"], "events.k8s.io/v1");
}

#[tokio::test]
async fn the_namespaces_every_cluster_needs_cannot_be_deleted() {
    let f = Fixture::new().await;
    f.registry.bootstrap("127.0.0.1:6443".parse().unwrap()).await.unwrap();
    let namespaces = f.r("", "namespaces");
    for name in ["default", "kube-system", "kube-public"] {
        let refused = f.registry.delete(&namespaces, "", name, &DeleteOptions::default()).await.unwrap_err();
        assert_eq!(
            (refused.code, refused.message.as_str()),
            (403, format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted").as_str())
        );
        assert_eq!(f.registry.get(&namespaces, "", name).await.unwrap()["status"]["phase"], "Active");
    }
    // Any other namespace goes.
    let deleted = f.registry.delete(&namespaces, "", "kube-node-lease", &DeleteOptions::default()).await.unwrap();
    assert_eq!(deleted["status"]["phase"], "Terminating");
}

/// A validating plugin that refuses ConfigMaps labelled `refuse` and warns about those labelled `warn`.
struct Picky;

impl nest_registry::chain::Validating for Picky {
    fn handles(&self, _: &nest_registry::chain::Request<'_>) -> bool {
        true
    }

    async fn validate(
        &self,
        _: nest_registry::strategy::Cluster<'_>,
        request: &nest_registry::chain::Request<'_>,
        object: &Value,
    ) -> nest_registry::Result<()> {
        let labels = &object["metadata"]["labels"];
        if labels.get("warn").is_some() {
            let warning = format!("{} {:?} by {:?} is odd", request.info.kind, request.name, request.user.name);
            request.warnings.push(warning);
        }
        if labels.get("refuse").is_some() {
            return Err(nest_registry::ApiError::forbidden(request.info, request.name, "refused"));
        }
        Ok(())
    }
}

#[tokio::test]
async fn admission_sees_every_write_just_before_storage() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path(), Default::default()).unwrap());
    let chain = nest_registry::admission::standard().validating("Picky", Picky);
    let registry = Registry::open(store).await.unwrap().with_admission(chain);
    let namespaces = registry.resource("", "v1", "namespaces").unwrap();
    registry.create(&namespaces, "", json!({"metadata": {"name": "ns"}}), false).await.unwrap();
    let mut cms = registry.resource("", "v1", "configmaps").unwrap();
    cms.user.name = "alice".into();

    let refused = json!({"metadata": {"name": "a", "labels": {"refuse": ""}}});
    assert_eq!(registry.create(&cms, "ns", refused, false).await.unwrap_err().code, 403);
    assert_eq!(registry.get(&cms, "ns", "a").await.unwrap_err().code, 404);

    registry.create(&cms, "ns", json!({"metadata": {"name": "a", "labels": {"warn": ""}}}), false).await.unwrap();
    assert_eq!(cms.warnings.take(), ["ConfigMap \"a\" by \"alice\" is odd"]);
    // An update is checked on the object it would store: a patch that adds the label is refused.
    let patched = registry
        .update_with(&cms, "ns", "a", Subresource::Main, false, |current| {
            let mut next = current.clone();
            next["metadata"]["labels"]["refuse"] = json!("");
            Ok(next)
        })
        .await;
    assert_eq!(patched.unwrap_err().code, 403);
    assert!(registry.get(&cms, "ns", "a").await.unwrap()["metadata"]["labels"].get("refuse").is_none());
    // The namespace lifecycle still runs first in the standard chain.
    let elsewhere = registry.create(&cms, "nowhere", json!({"metadata": {"name": "b"}}), false).await.unwrap_err();
    assert_eq!((elsewhere.code, elsewhere.message.as_str()), (404, "namespaces \"nowhere\" not found"));
}

#[tokio::test]
async fn pod_security_enforces_and_warns_by_namespace_labels() {
    let f = Fixture::new().await;
    let namespaces = f.r("", "namespaces");
    let labelled = json!({"metadata": {"name": "tenant", "labels": {
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/warn": "restricted",
    }}});
    f.registry.create(&namespaces, "", labelled, false).await.unwrap();
    f.account("tenant").await;
    let pods = f.r("", "pods");
    let escape = json!({"metadata": {"name": "escape"}, "spec": {"hostPID": true, "containers": [
        {"name": "c", "image": "nginx", "securityContext": {"privileged": true}},
    ]}});
    let refused = f.registry.create(&pods, "tenant", escape.clone(), false).await.unwrap_err();
    assert_eq!(
        (refused.code, refused.message.as_str()),
        (
            403,
            r#"pods "escape" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostPID=true), privileged (container "c" must not set securityContext.privileged=true)"#
        )
    );
    // The same pod where nothing is enforced, and a plain pod here, are created; the plain one with a warning.
    f.registry.create(&pods, "ns", escape, false).await.unwrap();
    let plain = json!({"metadata": {"name": "plain"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    f.registry.create(&pods, "tenant", plain, false).await.unwrap();
    let warnings = pods.warnings.take();
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].starts_with(r#"would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false"#)
    );

    // A workload's template is warned about, never refused.
    let deployments = f.registry.resource("apps", "v1", "deployments").unwrap();
    let deployment = json!({"metadata": {"name": "d"}, "spec": {
        "selector": {"matchLabels": {"app": "d"}},
        "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "nginx"}]}},
    }});
    f.registry.create(&deployments, "tenant", deployment, false).await.unwrap();
    let warnings = deployments.warnings.take();
    assert!(warnings.iter().any(|w| w.contains("host namespaces (hostNetwork=true)")), "{warnings:?}");

    // An update that changes no image is not checked again; one that does is.
    let existing = f.registry.get(&pods, "ns", "escape").await.unwrap();
    f.registry
        .update(
            &namespaces,
            "",
            "ns",
            {
                let mut ns = f.registry.get(&namespaces, "", "ns").await.unwrap();
                ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = json!("baseline");
                ns
            },
            Subresource::Main,
            false,
        )
        .await
        .unwrap();
    let mut relabelled = existing.clone();
    relabelled["metadata"]["labels"] = json!({"x": "y"});
    f.registry.update(&pods, "ns", "escape", relabelled, Subresource::Main, false).await.unwrap();
    let mut reimaged = f.registry.get(&pods, "ns", "escape").await.unwrap();
    reimaged["spec"]["containers"][0]["image"] = json!("nginx:2");
    assert_eq!(
        f.registry.update(&pods, "ns", "escape", reimaged, Subresource::Main, false).await.unwrap_err().code,
        403
    );

    // Labels that name no level are refused.
    let bad = json!({"metadata": {"name": "bad", "labels": {"pod-security.kubernetes.io/enforce": "strict"}}});
    let refused = f.registry.create(&namespaces, "", bad, false).await.unwrap_err();
    assert_eq!(
        (refused.code, refused.message.as_str()),
        (
            422,
            r#"Namespace "bad" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": must be one of privileged, baseline, restricted"#
        )
    );
}
