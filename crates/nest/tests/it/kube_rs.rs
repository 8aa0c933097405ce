//! kube-rs against a real `nest apiserver`: typed CRUD, a watcher-fed reflector that stays consistent, a
//! `CustomResource` derive installed and awaited until Established, a `Controller` using the `finalizer` helper and
//! writing status by server-side apply, and `Patch::Apply` of a Deployment's spec and status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::{Server, backends};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::{WatchStreamExt, conditions, reflector, wait::await_condition, watcher};
use kube::{Client, Config, CustomResource, CustomResourceExt, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

async fn client(server: &Server) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(&server.kubeconfig).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    Client::try_from(config).unwrap()
}

fn configmap(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
        data: Some(BTreeMap::from([("value".to_string(), value.to_string())])),
        ..Default::default()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn kube_rs_api_crud() {
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        runtime().block_on(async {
            let api: Api<ConfigMap> = Api::namespaced(client(&server).await, "default");
            let created = api.create(&PostParams::default(), &configmap("a", "1")).await.unwrap();
            assert!(created.metadata.uid.is_some(), "{backend}");
            let mut fetched = api.get("a").await.unwrap();
            fetched.data = Some(BTreeMap::from([("value".to_string(), "2".to_string())]));
            let replaced = api.replace("a", &PostParams::default(), &fetched).await.unwrap();
            assert_ne!(replaced.resource_version(), created.resource_version());
            // Replacing with the stale object is a conflict.
            let stale = api.replace("a", &PostParams::default(), &fetched).await.unwrap_err();
            assert!(matches!(stale, kube::Error::Api(ref s) if s.code == 409), "{backend}: {stale}");
            let patch = serde_json::json!({"metadata": {"labels": {"patched": "yes"}}});
            let patched = api.patch("a", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
            assert_eq!(patched.labels().get("patched").map(String::as_str), Some("yes"));
            let listed = api.list(&ListParams::default().labels("patched=yes")).await.unwrap();
            assert_eq!(listed.items.len(), 1, "{backend}");
            api.delete("a", &DeleteParams::default()).await.unwrap();
            let missing = api.get("a").await.unwrap_err();
            assert!(matches!(missing, kube::Error::Api(ref s) if s.code == 404), "{backend}");
        });
    }
}

#[test]
fn kube_rs_reflector_stays_consistent_through_updates_and_deletes() {
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        runtime().block_on(async {
            let api: Api<ConfigMap> = Api::namespaced(client(&server).await, "default");
            let (reader, writer) = reflector::store();
            let stream = reflector(writer, watcher(api.clone(), watcher::Config::default())).applied_objects();
            let task = tokio::spawn(async move {
                let mut stream = std::pin::pin!(stream);
                while stream.next().await.is_some() {}
            });
            reader.wait_until_ready().await.unwrap();
            for i in 0..5 {
                api.create(&PostParams::default(), &configmap(&format!("cm-{i}"), "v1")).await.unwrap();
            }
            for i in 0..2 {
                let patch = serde_json::json!({"data": {"value": "v2"}});
                api.patch(&format!("cm-{i}"), &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
            }
            api.delete("cm-4", &DeleteParams::default()).await.unwrap();
            let expected: BTreeMap<String, String> = [("cm-0", "v2"), ("cm-1", "v2"), ("cm-2", "v1"), ("cm-3", "v1")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            loop {
                let seen: BTreeMap<String, String> = reader
                    .state()
                    .iter()
                    .map(|cm| {
                        (cm.name_any(), cm.data.as_ref().and_then(|d| d.get("value").cloned()).unwrap_or_default())
                    })
                    .collect();
                if seen == expected {
                    break;
                }
                assert!(tokio::time::Instant::now() < deadline, "{backend}: the reflector shows {seen:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            task.abort();
        });
    }
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(group = "nest.test", version = "v1", kind = "Gizmo", namespaced, status = "GizmoStatus")]
struct GizmoSpec {
    size: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
struct GizmoStatus {
    seen: bool,
}

#[test]
fn kube_rs_custom_resource_and_a_controller_with_a_finalizer() {
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        runtime().block_on(async {
            let client = client(&server).await;
            let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
            crds.create(&PostParams::default(), &Gizmo::crd()).await.unwrap();
            let established = await_condition(crds, "gizmos.nest.test", conditions::is_crd_established());
            tokio::time::timeout(Duration::from_secs(20), established).await.unwrap().unwrap();

            let gizmos: Api<Gizmo> = Api::namespaced(client.clone(), "default");
            let cleaned = Arc::new(AtomicUsize::new(0));
            let controller = {
                let (gizmos, cleaned) = (gizmos.clone(), cleaned.clone());
                Controller::new(gizmos.clone(), watcher::Config::default()).run(
                    move |gizmo: Arc<Gizmo>, _ctx: Arc<()>| {
                        let (gizmos, cleaned) = (gizmos.clone(), cleaned.clone());
                        async move {
                            finalizer(&gizmos, "nest.test/cleanup", gizmo, |event| async {
                                match event {
                                    Finalizer::Apply(g) => {
                                        // The status by server-side apply, forcing, as controllers commonly write it.
                                        let status = serde_json::json!({
                                            "apiVersion": "nest.test/v1", "kind": "Gizmo",
                                            "status": {"seen": true},
                                        });
                                        gizmos
                                            .patch_status(
                                                &g.name_any(),
                                                &PatchParams::apply("gizmo-controller").force(),
                                                &Patch::Apply(&status),
                                            )
                                            .await?;
                                        Ok::<_, kube::Error>(Action::await_change())
                                    }
                                    Finalizer::Cleanup(_) => {
                                        cleaned.fetch_add(1, Ordering::SeqCst);
                                        Ok(Action::await_change())
                                    }
                                }
                            })
                            .await
                        }
                    },
                    |_gizmo, _error, _ctx| Action::requeue(Duration::from_millis(200)),
                    Arc::new(()),
                )
            };
            let runner = tokio::spawn(controller.for_each(|_| async {}));

            let gizmo = Gizmo::new("g1", GizmoSpec { size: 2 });
            gizmos.create(&PostParams::default(), &gizmo).await.unwrap();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            loop {
                let g = gizmos.get("g1").await.unwrap();
                if g.finalizers().iter().any(|f| f == "nest.test/cleanup") && g.status.as_ref().is_some_and(|s| s.seen)
                {
                    let entries = g.metadata.managed_fields.clone().unwrap_or_default();
                    let status = entries.iter().find(|e| e.manager.as_deref() == Some("gizmo-controller"));
                    let status = status.unwrap_or_else(|| panic!("{backend}: no entry of the controller: {entries:?}"));
                    assert_eq!(
                        (status.operation.as_deref(), status.subresource.as_deref()),
                        (Some("Apply"), Some("status"))
                    );
                    break;
                }
                assert!(tokio::time::Instant::now() < deadline, "{backend}: the controller never reconciled: {g:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            gizmos.delete("g1", &DeleteParams::default()).await.unwrap();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            while gizmos.get_opt("g1").await.unwrap().is_some() {
                assert!(tokio::time::Instant::now() < deadline, "{backend}: the finalizer was never removed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            // kube-rs may run a cleanup more than once (reconcilers are idempotent); it must have run.
            assert!(cleaned.load(Ordering::SeqCst) >= 1, "{backend}: cleanup ran");
            runner.abort();
        });
    }
}

/// kube-rs's `Patch::Apply`: a deployer that applies the same Deployment spec again and again (one Apply entry in
/// managedFields, nothing changing), then stops applying a field (it goes); a status controller applying the status
/// with `force`, recorded for the status subresource; and a second status applier that conflicts until it forces.
#[test]
fn kube_rs_server_side_apply_of_a_spec_and_a_status() {
    use k8s_openapi::api::apps::v1::Deployment;
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        runtime().block_on(async {
            let deployments: Api<Deployment> = Api::namespaced(client(&server).await, "default");
            let spec = |replicas: Option<i64>| {
                let mut d = serde_json::json!({
                    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                    "spec": {"selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                            "spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
                });
                if let Some(replicas) = replicas {
                    d["spec"]["replicas"] = serde_json::json!(replicas);
                }
                d
            };
            // An apply names its field manager (kube-rs always does; a bare request without one is refused), and
            // `force` is for apply only.
            let path = "/apis/apps/v1/namespaces/default/deployments/web";
            let bare = hyper::Request::patch(path)
                .header("content-type", "application/apply-patch+yaml")
                .body(serde_json::to_vec(&spec(Some(1))).unwrap())
                .unwrap();
            let refused = client(&server).await.request::<serde_json::Value>(bare).await.unwrap_err();
            assert!(
                matches!(refused, kube::Error::Api(ref s) if s.code == 422 && s.message.contains("fieldManager: Required value")),
                "{backend}: {refused}"
            );
            let forced_merge = hyper::Request::patch(format!("{path}?force=true"))
                .header("content-type", "application/merge-patch+json")
                .body(b"{}".to_vec())
                .unwrap();
            let refused = client(&server).await.request::<serde_json::Value>(forced_merge).await.unwrap_err();
            assert!(
                matches!(refused, kube::Error::Api(ref s) if s.code == 422 && s.message.contains("non-apply patch")),
                "{backend}: {refused}"
            );
            let deployer = PatchParams::apply("deployer");
            let first = deployments.patch("web", &deployer, &Patch::Apply(&spec(Some(3)))).await.unwrap();
            for _ in 0..3 {
                deployments.patch("web", &deployer, &Patch::Apply(&spec(Some(3)))).await.unwrap();
            }
            let web = deployments.get("web").await.unwrap();
            assert_eq!(web.metadata.generation, Some(1), "{backend}: the same apply again changes nothing");
            let entries = web.metadata.managed_fields.clone().unwrap_or_default();
            assert_eq!(entries.len(), 1, "{backend}: {entries:?}");
            let entry = &entries[0];
            assert_eq!((entry.manager.as_deref(), entry.operation.as_deref()), (Some("deployer"), Some("Apply")));
            assert_eq!(entry.fields_type.as_deref(), Some("FieldsV1"));
            assert_eq!(entry.time, first.metadata.managed_fields.unwrap()[0].time, "{backend}: kept its time");
            let fields = &entry.fields_v1.as_ref().unwrap().0;
            assert_eq!(fields["f:spec"]["f:replicas"], serde_json::json!({}));
            let container = &fields["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"];
            assert_eq!(container, &serde_json::json!({".": {}, "f:image": {}, "f:name": {}}), "{backend}");
            // No longer applying replicas: the field goes (and the default comes back).
            let web = deployments.patch("web", &deployer, &Patch::Apply(&spec(None))).await.unwrap();
            assert_eq!(web.spec.unwrap().replicas, Some(1), "{backend}");

            // A status controller applies the status, forcing.
            let status = |state: &str| {
                serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                    "status": {"conditions": [{"type": "Available", "status": state, "reason": "Checked"}]}})
            };
            let controller = PatchParams::apply("status-controller").force();
            let web = deployments.patch_status("web", &controller, &Patch::Apply(&status("True"))).await.unwrap();
            let conditions = web.status.unwrap().conditions.unwrap();
            assert_eq!((conditions[0].type_.as_str(), conditions[0].status.as_str()), ("Available", "True"));
            let entries = web.metadata.managed_fields.unwrap();
            let recorded = entries.iter().find(|e| e.manager.as_deref() == Some("status-controller")).unwrap();
            assert_eq!(recorded.subresource.as_deref(), Some("status"), "{backend}");
            let fields = &recorded.fields_v1.as_ref().unwrap().0;
            assert!(fields["f:status"]["f:conditions"].get("k:{\"type\":\"Available\"}").is_some(), "{fields}");
            assert!(entries.iter().any(|e| e.manager.as_deref() == Some("deployer")), "{backend}: the spec's stays");
            // Another applier of the same condition conflicts, then forces.
            let other = PatchParams::apply("other");
            let refused = deployments.patch_status("web", &other, &Patch::Apply(&status("False"))).await.unwrap_err();
            assert!(matches!(refused, kube::Error::Api(ref s) if s.code == 409), "{backend}: {refused}");
            let forced =
                deployments.patch_status("web", &other.force(), &Patch::Apply(&status("False"))).await.unwrap();
            assert_eq!(forced.status.unwrap().conditions.unwrap()[0].status, "False", "{backend}");
        });
    }
}

/// The longest grace period a client can ask for gives a deletion time kube-rs (and client-go) still read: the year
/// 9999 at most, not an overflow, and the pod list keeps decoding.
#[test]
fn the_longest_grace_period_leaves_pods_readable() {
    let server = Server::start(&backends().remove(0).1);
    server.apply_manifest(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: lingering}\nspec: {nodeName: somewhere, containers: [{name: c, image: nest}]}\n",
    );
    runtime().block_on(async {
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client(&server).await, "default");
        let longest = DeleteParams { grace_period_seconds: Some(u32::MAX), ..Default::default() };
        // kube-rs takes a u32; the query string itself may carry more, which the raw request below sends.
        pods.delete("lingering", &longest).await.unwrap();
        let listed = pods.list(&ListParams::default()).await.expect("the pod list decodes");
        let when = listed.items[0].metadata.deletion_timestamp.clone().expect("marked for deletion");
        assert!(when.0.to_string().as_str() <= "9999-12-31T23:59:59Z", "{}", when.0);
    });
    // i64::MAX seconds, as the issue sent it.
    let raw = server.kubectl(&[
        "delete",
        "--raw",
        "/api/v1/namespaces/default/pods/lingering?gracePeriodSeconds=9223372036854775807",
    ]);
    assert!(raw.status.success(), "{}", String::from_utf8_lossy(&raw.stderr));
    let pod = server.json(&["get", "pod", "lingering"]);
    let when = pod["metadata"]["deletionTimestamp"].as_str().unwrap_or_default().to_string();
    assert!(!when.is_empty() && when.as_str() <= "9999-12-31T23:59:59Z", "{pod}");
    runtime().block_on(async {
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client(&server).await, "default");
        pods.list(&ListParams::default()).await.expect("the pod list still decodes");
    });
}
