//! What the reconcile decides, against caches filled by hand and a fake client ([`Recorder`]) that records every
//! request: one case per decision. (The end-to-end syncer tests run the same code against real API servers.)

use kube::api::DynamicObject;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::reconcile;
use crate::kinds::KindId;
use crate::names::{self, SUPER_CLUSTER_IP, TENANT_LABEL, TENANT_NAME, TENANT_NAMESPACE, TENANT_UID};
use crate::requests::fake::Recorder;
use crate::sync::Done;
use crate::tenants::Tenant;
use crate::{Options, Syncer};

const KEY: &str = "default-abcde-t";
const NAMESPACE: &str = "web";

struct Fixture {
    syncer: Syncer,
    tenant: Tenant,
    super_writers: Vec<Writer<DynamicObject>>,
    tenant_writers: Vec<Writer<DynamicObject>>,
    requests: Recorder,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture::with(Options::default())
    }

    /// Must run within a Tokio runtime (the clients are built, never used).
    fn with(options: Options) -> Fixture {
        let client = || {
            let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
            kube::Client::try_from(config).expect("a client")
        };
        let (syncer, super_writers) = Syncer::for_tests(client(), options);
        let (tenant, tenant_writers) = Tenant::for_tests(&syncer, KEY, client());
        for id in syncer.kind_ids() {
            syncer.super_cache(id).set_filled();
            tenant.cache(id).set_filled();
        }
        Fixture { syncer, tenant, super_writers, tenant_writers, requests: Recorder::default() }
    }

    fn id(&self, plural: &str) -> KindId {
        self.syncer.find_kind(plural).expect("a synced kind")
    }

    fn super_namespace(&self) -> String {
        names::super_namespace(KEY, NAMESPACE)
    }

    /// Puts `object` into the tenant's cache, compacted as the tenant's watches compact it.
    fn tenant_has(&mut self, plural: &str, object: Value) {
        let id = self.id(plural);
        let mut object: DynamicObject = serde_json::from_value(object).expect("an object");
        crate::compact(&mut object, self.syncer.kind(id).verbatim);
        self.tenant_writers[id.index()].apply_watcher_event(&watcher::Event::Apply(object));
    }

    /// Puts `object` into the super cluster's cache, pruned and compacted as the syncer's watches do.
    fn super_has(&mut self, plural: &str, object: Value) {
        let id = self.id(plural);
        let kind = self.syncer.kind(id);
        let mut object: DynamicObject = serde_json::from_value(object).expect("an object");
        if let Some(prune) = kind.prune {
            prune(&mut object);
        }
        crate::compact(&mut object, kind.verbatim);
        self.super_writers[id.index()].apply_watcher_event(&watcher::Event::Apply(object));
    }

    async fn reconcile(&self, plural: &str, name: &str) -> kube::Result<Done> {
        reconcile(&self.syncer, &self.tenant, &self.requests, self.id(plural), NAMESPACE, name).await
    }

    fn made(&self) -> Vec<String> {
        self.requests.made()
    }

    /// Forgets the requests made so far.
    fn clear(&self) {
        self.requests.requests.lock().expect("the fake's lock").clear();
    }

    /// Asserts that with `copy` in the super cluster's cache, tenant object `name` is in order: its reconcile asks
    /// nothing.
    async fn assert_in_order(&mut self, plural: &str, name: &str, copy: Value) {
        self.super_has(plural, copy);
        self.clear();
        assert_eq!(self.reconcile(plural, name).await.unwrap(), Done::default());
        assert_eq!(self.made(), Vec::<String>::new());
    }

    /// The object the last create request made, as the super cluster would hold it (with a UID of its own).
    fn created(&self) -> Value {
        let made = self.made();
        let line = made.iter().rev().find(|line| line.starts_with("super create ")).expect("a create request");
        let body = line.splitn(5, ' ').nth(4).expect("a body");
        let mut object: Value = serde_json::from_str(body).expect("JSON");
        object["metadata"]["uid"] = json!("super-uid");
        object
    }
}

fn config_map(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "settings", "namespace": NAMESPACE, "uid": "u1", "labels": {"app": "x"}},
           "data": data})
}

fn pod(spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": NAMESPACE, "uid": "u1"},
           "spec": spec})
}

/// The metadata of the syncer's copy of tenant object `name` (UID `uid`).
fn copy_metadata(super_namespace: &str, name: &str, uid: &str) -> Value {
    json!({"name": name, "namespace": super_namespace, "uid": "super-uid",
           "labels": {TENANT_LABEL: KEY},
           "annotations": {TENANT_NAMESPACE: NAMESPACE, TENANT_NAME: name, TENANT_UID: uid}})
}

#[tokio::test]
async fn a_missing_copy_is_made_in_its_namespace_and_then_found_in_order() {
    let mut fixture = Fixture::new();
    fixture.tenant_has("configmaps", config_map(json!({"a": "1"})));
    let done = fixture.reconcile("configmaps", "settings").await.unwrap();
    assert_eq!(done, Done { down: 1, ..Default::default() });
    let made = fixture.made();
    assert_eq!(made.len(), 2, "{made:?}");
    assert_eq!(made[0], "super ensure-namespace web");
    assert!(made[1].starts_with(&format!("super create configmaps {}/settings ", fixture.super_namespace())));
    let created = fixture.created();
    assert_eq!(created["data"], json!({"a": "1"}));
    assert_eq!(created["metadata"]["labels"], json!({"app": "x", TENANT_LABEL: KEY}));
    assert_eq!(created["metadata"]["annotations"][TENANT_UID], "u1");

    // What it made is what it wants: the next reconcile asks nothing.
    fixture.assert_in_order("configmaps", "settings", created).await;
}

#[tokio::test]
async fn a_drifted_copy_is_put_back_in_one_patch_and_labels_added_by_hand_go() {
    let mut fixture = Fixture::new();
    fixture.tenant_has("configmaps", config_map(json!({"a": "1"})));
    let mut metadata = copy_metadata(&fixture.super_namespace(), "settings", "u1");
    metadata["labels"]["app"] = json!("x");
    metadata["labels"]["added"] = json!("by-hand");
    let drifted = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"a": "2"}});
    fixture.super_has("configmaps", drifted);
    let done = fixture.reconcile("configmaps", "settings").await.unwrap();
    assert_eq!(done, Done { down: 1, ..Default::default() });
    let made = fixture.made();
    assert_eq!(made.len(), 1, "{made:?}");
    let patch: Value = serde_json::from_str(made[0].splitn(5, ' ').nth(4).unwrap()).unwrap();
    assert!(made[0].starts_with("super patch configmaps "), "{made:?}");
    assert_eq!(patch["data"], json!({"a": "1"}));
    assert_eq!(patch["metadata"]["labels"], json!({"app": "x", TENANT_LABEL: KEY, "added": null}));
}

#[tokio::test]
async fn a_copy_made_for_an_earlier_object_of_the_same_name_goes_and_one_not_ours_stays() {
    let mut fixture = Fixture::new();
    fixture.tenant_has("configmaps", config_map(json!({"a": "1"})));
    let earlier = copy_metadata(&fixture.super_namespace(), "settings", "an-earlier-uid");
    fixture.super_has("configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": earlier}));
    let done = fixture.reconcile("configmaps", "settings").await.unwrap();
    assert_eq!(done, Done { down: 1, ..Default::default() });
    assert_eq!(fixture.made(), [format!("super delete configmaps {}/settings null", fixture.super_namespace())]);

    // Someone else's object of that name is never touched.
    let mut fixture = Fixture::new();
    fixture.tenant_has("configmaps", config_map(json!({"a": "1"})));
    let mut foreign = copy_metadata(&fixture.super_namespace(), "settings", "another-uid");
    foreign["labels"][TENANT_LABEL] = json!("another-tenant");
    fixture.super_has("configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": foreign}));
    assert_eq!(fixture.reconcile("configmaps", "settings").await.unwrap(), Done::default());
    assert_eq!(fixture.made(), Vec::<String>::new());
}

#[tokio::test]
async fn a_reserved_name_is_refused_and_not_read() {
    let mut fixture = Fixture::new();
    let mut object = config_map(json!({}));
    object["metadata"]["name"] = json!(names::SUPER_ROOT_CA);
    fixture.tenant_has("configmaps", object);
    let Err(kube::Error::Api(status)) = fixture.reconcile("configmaps", names::SUPER_ROOT_CA).await else {
        panic!("not refused");
    };
    assert_eq!(status.code, 403);
    assert_eq!(fixture.made(), Vec::<String>::new());
}

#[tokio::test]
async fn a_pod_waits_for_its_account_and_is_then_made_after_its_tokens() {
    let mut fixture = Fixture::new();
    fixture
        .tenant_has("pods", pod(json!({"serviceAccountName": "builder", "containers": [{"name": "c", "image": "i"}]})));
    let done = fixture.reconcile("pods", "p").await.unwrap();
    assert_eq!(done, Done { again: true, ..Default::default() });
    assert_eq!(fixture.made(), ["super ensure-namespace web"]);
    assert!(fixture.tenant.reserved.lock().unwrap().is_empty(), "a pod not made counts against nothing");

    let account = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": copy_metadata(&fixture.super_namespace(), "builder", "a1")});
    fixture.super_has("serviceaccounts", account);
    fixture.clear();
    let done = fixture.reconcile("pods", "p").await.unwrap();
    assert_eq!(done, Done { down: 1, ..Default::default() });
    let made = fixture.made();
    let super_namespace = fixture.super_namespace();
    assert_eq!(
        made[..2],
        ["super ensure-namespace web".to_string(), format!("super ensure-tokens {super_namespace}/p")]
    );
    assert!(made[2].starts_with(&format!("super create pods {super_namespace}/p ")), "{made:?}");
    assert_eq!(fixture.tenant.reserved.lock().unwrap().len(), 1, "it counts until the cache shows it");
}

#[tokio::test]
async fn a_running_pod_is_bound_and_its_status_and_labels_go_up_in_one_patch_each() {
    let mut fixture = Fixture::new();
    let spec = json!({"containers": [{"name": "c", "image": "i"}]});
    fixture.tenant_has("pods", pod(spec));
    fixture.reconcile("pods", "p").await.unwrap();
    let mut running = fixture.created();
    running["spec"]["nodeName"] = json!("node-1");
    running["metadata"]["labels"]["transparency.tenancy.nest.dev/zone"] = json!("a");
    running["metadata"]["annotations"]["transparency.tenancy.nest.dev/note"] = json!("b");
    running["status"] = json!({"phase": "Running", "podIP": "10.128.0.5", "nominatedNodeName": "node-2"});
    fixture.super_has("pods", running);
    fixture.clear();
    let done = fixture.reconcile("pods", "p").await.unwrap();
    assert_eq!(done, Done { up: 3, ..Default::default() });
    let made = fixture.made();
    assert_eq!(
        made,
        [
            format!("super ensure-tokens {}/p", fixture.super_namespace()),
            "tenant ensure-virtual-node node-1".to_string(),
            "tenant bind pods web/p node-1".to_string(),
            format!(
                "tenant patch pods web/p {}",
                json!({"metadata": {"labels": {"transparency.tenancy.nest.dev/zone": "a"},
                                    "annotations": {"transparency.tenancy.nest.dev/note": "b"}}})
            ),
            format!(
                "tenant patch-status pods web/p {}",
                json!({"status": {"phase": "Running", "podIP": "10.128.0.5"}})
            ),
        ]
    );
}

#[tokio::test]
async fn a_pod_bound_already_is_not_bound_again() {
    let mut fixture = Fixture::new();
    fixture.tenant_has("pods", pod(json!({"nodeName": "node-1", "containers": [{"name": "c", "image": "i"}]})));
    fixture.reconcile("pods", "p").await.unwrap();
    let mut running = fixture.created();
    running["spec"]["nodeName"] = json!("node-1");
    fixture.super_has("pods", running.clone());
    fixture.clear();
    fixture.reconcile("pods", "p").await.unwrap();
    assert!(!fixture.made().iter().any(|line| line.contains("bind")), "{:?}", fixture.made());

    // Bound since the cache saw it: the binding's 409 is no failure, and no change.
    let mut fixture = Fixture::new();
    fixture.tenant_has("pods", pod(json!({"containers": [{"name": "c", "image": "i"}]})));
    fixture.super_has("pods", running);
    fixture.requests.refuse.lock().unwrap().push(("tenant bind".into(), 409));
    let done = fixture.reconcile("pods", "p").await.unwrap();
    assert_eq!(done, Done::default());
    assert!(fixture.made().contains(&"tenant bind pods web/p node-1".to_string()), "{:?}", fixture.made());
}

#[tokio::test]
async fn data_the_cache_holds_as_a_digest_is_read_whole_only_to_write_a_copy() {
    let mut fixture = Fixture::new();
    let big = json!({"a": "x".repeat(4096)});
    fixture.tenant_has("configmaps", config_map(big.clone()));
    // Gone since the cache saw it: nothing is made.
    assert_eq!(fixture.reconcile("configmaps", "settings").await.unwrap(), Done::default());
    assert_eq!(fixture.made(), ["tenant get configmaps web/settings null"]);
    // There: the copy is made of the data read.
    let key = ("tenant".to_string(), NAMESPACE.to_string(), "settings".to_string());
    fixture.requests.objects.lock().unwrap().insert(key, config_map(big.clone()));
    fixture.clear();
    assert_eq!(fixture.reconcile("configmaps", "settings").await.unwrap(), Done { down: 1, ..Default::default() });
    let copy = fixture.created();
    assert_eq!(copy["data"], big);
    // A copy with the same data (equal digests): nothing is read, nothing is written.
    fixture.assert_in_order("configmaps", "settings", copy).await;
}

#[tokio::test]
async fn a_pods_changed_image_is_put_back_with_a_json_patch() {
    let mut fixture = Fixture::new();
    fixture.tenant_has("pods", pod(json!({"containers": [{"name": "c", "image": "new"}]})));
    fixture.reconcile("pods", "p").await.unwrap();
    let mut old = fixture.created();
    old["spec"]["containers"][0]["image"] = json!("old");
    fixture.super_has("pods", old);
    fixture.clear();
    let done = fixture.reconcile("pods", "p").await.unwrap();
    assert_eq!(done, Done { down: 1, ..Default::default() });
    let operations = json!([{"op": "replace", "path": "/spec/containers/0/image", "value": "new"}]);
    assert!(
        fixture.made().contains(&format!("super json-patch pods {}/p {operations}", fixture.super_namespace())),
        "{:?}",
        fixture.made()
    );
}

#[tokio::test]
async fn a_tenant_pod_being_deleted_goes_once_its_copy_and_token_secret_have() {
    let mut fixture = Fixture::new();
    let mut deleting = pod(json!({"containers": [{"name": "c", "image": "i"}]}));
    deleting["metadata"]["deletionTimestamp"] = json!("2026-12-05T00:00:00Z");
    deleting["metadata"]["deletionGracePeriodSeconds"] = json!(30);
    fixture.tenant_has("pods", deleting.clone());
    let mut copy = pod(json!({"terminationGracePeriodSeconds": 30, "containers": [{"name": "c", "image": "i"}]}));
    copy["metadata"] = copy_metadata(&fixture.super_namespace(), "p", "u1");
    fixture.super_has("pods", copy);
    let super_namespace = fixture.super_namespace();

    // First the copy, with the tenant's grace period.
    let done = fixture.reconcile("pods", "p").await.unwrap();
    assert_eq!(done, Done { down: 1, ..Default::default() });
    assert_eq!(fixture.made(), [format!("super delete pods {super_namespace}/p 30")]);

    // Once it is gone: the token Secret, and the tenant pod, at once.
    let mut fixture = Fixture::new();
    fixture.tenant_has("pods", deleting);
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
                        "metadata": copy_metadata(&super_namespace, &crate::tokens::secret_name("p"), "u1")});
    fixture.super_has("secrets", secret);
    let done = fixture.reconcile("pods", "p").await.unwrap();
    assert_eq!(done, Done { down: 1, up: 1, ..Default::default() });
    assert_eq!(
        fixture.made(),
        [format!("super remove-tokens {super_namespace}/p"), "tenant delete pods web/p 0".into()]
    );
}

#[tokio::test]
async fn a_services_address_goes_up_with_what_flows_up_in_one_patch() {
    let options = Options { service_external_ips: true, ..Options::default() };
    let mut fixture = Fixture::with(options);
    let service = json!({"apiVersion": "v1", "kind": "Service",
                         "metadata": {"name": "s", "namespace": NAMESPACE, "uid": "u1"},
                         "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}]}});
    fixture.tenant_has("services", service);
    fixture.reconcile("services", "s").await.unwrap();
    let mut copy = fixture.created();
    copy["spec"]["clusterIP"] = json!("10.96.0.7");
    copy["metadata"]["annotations"]["transparency.tenancy.nest.dev/lb"] = json!("x");
    fixture.super_has("services", copy);
    fixture.clear();
    let done = fixture.reconcile("services", "s").await.unwrap();
    assert_eq!(done, Done { up: 1, ..Default::default() });
    let patch = json!({"metadata": {"annotations": {"transparency.tenancy.nest.dev/lb": "x", SUPER_CLUSTER_IP: "10.96.0.7"}},
                       "spec": {"externalIPs": ["10.96.0.7"]}});
    assert_eq!(fixture.made(), [format!("tenant patch services web/s {patch}")]);
}

#[tokio::test]
async fn a_bound_claim_names_its_volume_and_its_status_goes_up() {
    let mut fixture = Fixture::new();
    let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "metadata": {"name": "data", "namespace": NAMESPACE, "uid": "u1"},
                       "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    fixture.tenant_has("persistentvolumeclaims", claim);
    fixture.reconcile("persistentvolumeclaims", "data").await.unwrap();
    let mut bound = fixture.created();
    bound["spec"]["volumeName"] = json!("pvc-1");
    bound["status"] = json!({"phase": "Bound"});
    fixture.super_has("persistentvolumeclaims", bound);
    fixture.clear();
    let done = fixture.reconcile("persistentvolumeclaims", "data").await.unwrap();
    assert_eq!(done, Done { up: 2, ..Default::default() });
    assert_eq!(
        fixture.made(),
        [
            format!("tenant patch persistentvolumeclaims web/data {}", json!({"spec": {"volumeName": "pvc-1"}})),
            format!("tenant patch-status persistentvolumeclaims web/data {}", json!({"status": {"phase": "Bound"}})),
        ]
    );
    assert_eq!(fixture.syncer.queue.depths().get(KEY), Some(&1), "the volume is copied up too");
}

#[tokio::test]
async fn endpoints_go_down_only_for_a_service_without_a_selector() {
    let mut fixture = Fixture::new();
    let endpoints = json!({"apiVersion": "v1", "kind": "Endpoints",
                           "metadata": {"name": "s", "namespace": NAMESPACE, "uid": "u1"}, "subsets": []});
    fixture.tenant_has("endpoints", endpoints);
    let service = |selector: Value| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": NAMESPACE, "uid": "u2"},
               "spec": {"selector": selector, "ports": [{"port": 80}]}})
    };
    // No Service: nothing goes down (nor is anything there to remove).
    assert_eq!(fixture.reconcile("endpoints", "s").await.unwrap(), Done::default());
    assert_eq!(fixture.made(), Vec::<String>::new());
    // A Service with a selector: the super cluster's endpoints controller's, and a copy made before goes.
    fixture.tenant_has("services", service(json!({"app": "x"})));
    let copy = json!({"apiVersion": "v1", "kind": "Endpoints",
                      "metadata": copy_metadata(&fixture.super_namespace(), "s", "u1")});
    fixture.super_has("endpoints", copy);
    assert_eq!(fixture.reconcile("endpoints", "s").await.unwrap(), Done { down: 1, ..Default::default() });
    assert_eq!(fixture.made(), [format!("super delete endpoints {}/s null", fixture.super_namespace())]);
    // Without a selector: the tenant's to sync.
    fixture.tenant_has("services", service(json!({})));
    fixture.clear();
    fixture.reconcile("endpoints", "s").await.unwrap();
    assert!(fixture.made().iter().all(|line| !line.contains("delete")), "{:?}", fixture.made());
}

#[tokio::test]
async fn nothing_is_decided_before_both_caches_are_filled() {
    let mut fixture = Fixture::new();
    let (syncer, writers) = Syncer::for_tests(fixture.syncer.super_client.clone(), Options::default());
    (fixture.syncer, fixture.super_writers) = (syncer, writers);
    fixture.tenant_has("configmaps", config_map(json!({"a": "1"})));
    assert_eq!(fixture.reconcile("configmaps", "settings").await.unwrap(), Done { again: true, ..Default::default() });
    assert_eq!(fixture.made(), Vec::<String>::new());
}

/// The body of the one request in `made` that starts with `start`.
fn body_of(made: &[String], start: &str) -> Value {
    let line = made.iter().find(|line| line.starts_with(start)).unwrap_or_else(|| panic!("{start} in {made:?}"));
    serde_json::from_str(line.splitn(5, ' ').nth(4).expect("a body")).expect("JSON")
}

/// A tenant pod with container `c` and the ephemeral containers named `ephemeral` (`kubectl debug`'s), each
/// setting the variable that points at the API server.
fn debugged_pod(ephemeral: &[&str]) -> Value {
    let debuggers: Vec<Value> = ephemeral
        .iter()
        .map(|name| {
            json!({"name": name, "image": "busybox", "targetContainerName": "c", "stdin": true, "tty": true,
                   "env": [{"name": "KUBERNETES_SERVICE_HOST", "value": "10.0.0.1"}]})
        })
        .collect();
    pod(json!({"containers": [{"name": "c", "image": "i"}], "ephemeralContainers": debuggers}))
}

#[tokio::test]
async fn a_pods_ephemeral_containers_go_down_after_it_through_their_subresource() {
    let mut fixture = Fixture::new();
    let super_namespace = fixture.super_namespace();
    fixture.tenant_has("pods", debugged_pod(&["debugger-1"]));
    fixture.reconcile("pods", "p").await.unwrap();
    // Created without them: the super API server refuses a pod created with ephemeral containers.
    let mut copy = fixture.created();
    assert!(copy["spec"].get("ephemeralContainers").is_none(), "{copy}");

    // Then added through pods/ephemeralcontainers, translated as the pod's containers are.
    copy["spec"]["nodeName"] = json!("node-1");
    fixture.super_has("pods", copy.clone());
    fixture.clear();
    let done = fixture.reconcile("pods", "p").await.unwrap();
    assert_eq!(done.down, 1, "{:?}", fixture.made());
    let patch = body_of(&fixture.made(), &format!("super patch-ephemeralcontainers pods {super_namespace}/p "));
    let added = patch["spec"]["ephemeralContainers"].as_array().expect("a list");
    assert_eq!(added.len(), 1, "{patch}");
    assert_eq!((added[0]["name"].as_str(), added[0]["image"].as_str()), (Some("debugger-1"), Some("busybox")));
    assert_eq!(added[0]["targetContainerName"], "c");
    assert_eq!(added[0]["env"], copy["spec"]["containers"][0]["env"], "the tenant's API server, not its own word");

    // There, with their status: nothing goes down again, and the status goes up with the pod's.
    copy["spec"]["ephemeralContainers"] = json!([added[0]]);
    let statuses = json!([{"name": "debugger-1", "state": {"running": {"startedAt": "2026-12-07T00:00:00Z"}}}]);
    copy["status"] = json!({"phase": "Running", "ephemeralContainerStatuses": statuses});
    fixture.super_has("pods", copy.clone());
    fixture.clear();
    fixture.reconcile("pods", "p").await.unwrap();
    assert!(!fixture.made().iter().any(|l| l.contains("patch-ephemeralcontainers")), "{:?}", fixture.made());
    let status = body_of(&fixture.made(), "tenant patch-status pods web/p ");
    assert_eq!(status["status"]["ephemeralContainerStatuses"], statuses);

    // A second debugger: only it is sent (entries are never changed or removed).
    fixture.tenant_has("pods", debugged_pod(&["debugger-1", "debugger-2"]));
    fixture.clear();
    fixture.reconcile("pods", "p").await.unwrap();
    let patch = body_of(&fixture.made(), &format!("super patch-ephemeralcontainers pods {super_namespace}/p "));
    let names: Vec<&str> =
        patch["spec"]["ephemeralContainers"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["debugger-2"]);
}

#[tokio::test]
async fn a_refused_ephemeral_container_is_the_tenants_refusal_and_the_status_still_goes_up() {
    let mut fixture = Fixture::new();
    fixture.tenant_has("pods", debugged_pod(&["evil", "next"]));
    fixture.reconcile("pods", "p").await.unwrap();
    let mut copy = fixture.created();
    copy["spec"]["nodeName"] = json!("node-1");
    copy["status"] = json!({"phase": "Running"});
    fixture.super_has("pods", copy);
    fixture.requests.refuse.lock().unwrap().push(("super patch-ephemeralcontainers".into(), 403));
    fixture.clear();
    // A 403: the worker tells it to the tenant as a SyncFailed Event and does not retry it.
    let Err(kube::Error::Api(status)) = fixture.reconcile("pods", "p").await else { panic!("not refused") };
    assert_eq!(status.code, 403);
    let made = fixture.made();
    // Each is tried on its own: one refused holds back no other.
    let tried = made.iter().filter(|l| l.starts_with("super patch-ephemeralcontainers")).count();
    assert_eq!(tried, 2, "{made:?}");
    assert!(made.contains(&"tenant bind pods web/p node-1".to_string()), "{made:?}");
    assert_eq!(body_of(&made, "tenant patch-status pods web/p "), json!({"status": {"phase": "Running"}}));
}
