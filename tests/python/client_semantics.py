"""The official Python client (kubernetes==33.1.0, from PyPI) against a running nest apiserver.

Usage: python client_semantics.py KUBECONFIG
Exits non-zero, with the failing assertion, when nest does not behave as the client expects.
"""
import sys
import threading
import time

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

# The client sends a dict patch as a strategic merge patch, which nest does not serve yet, and a list as a JSON Patch.


def main(kubeconfig):
    config.load_kube_config(config_file=kubeconfig)
    core = client.CoreV1Api()
    apps = client.AppsV1Api()

    assert client.VersionApi().get_code().minor == "33"

    # CRUD
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="py")))
    ns = core.read_namespace("py")
    assert ns.status.phase == "Active", ns.status
    assert "kubernetes" in ns.spec.finalizers
    for i in range(12):
        core.create_namespaced_config_map(
            "py",
            client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"cm-{i:02d}", labels={"n": str(i % 3)}), data={"i": str(i)}),
        )
    cm = core.read_namespaced_config_map("cm-03", "py")
    assert cm.data == {"i": "3"}, cm.data
    assert cm.metadata.uid and cm.metadata.creation_timestamp is not None

    # Paginated list: every page from one snapshot.
    names, token, snapshot = [], None, None
    while True:
        page = core.list_namespaced_config_map("py", limit=5, _continue=token)
        snapshot = snapshot or page.metadata.resource_version
        assert page.metadata.resource_version == snapshot
        names += [item.metadata.name for item in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert names == [f"cm-{i:02d}" for i in range(12)], names
    selected = core.list_namespaced_config_map("py", label_selector="n=1")
    assert [i.metadata.name for i in selected.items] == ["cm-01", "cm-04", "cm-07", "cm-10"]

    # A stale update is a 409 Conflict.
    stale = core.read_namespaced_config_map("cm-00", "py")
    fresh = core.read_namespaced_config_map("cm-00", "py")
    fresh.data["i"] = "changed"
    core.replace_namespaced_config_map("cm-00", "py", fresh)
    stale.data["i"] = "lost update"
    try:
        core.replace_namespaced_config_map("cm-00", "py", stale)
        raise AssertionError("a stale update was accepted")
    except ApiException as e:
        assert e.status == 409, e

    # Watch resumed from a resourceVersion sees the changes after it, in order.
    start = core.list_namespaced_config_map("py").metadata.resource_version
    def writer():
        time.sleep(0.3)
        core.patch_namespaced_config_map("cm-01", "py", [{"op": "replace", "path": "/data/i", "value": "patched"}])
        core.delete_namespaced_config_map("cm-02", "py")
    threading.Thread(target=writer).start()
    seen = []
    w = watch.Watch()
    for event in w.stream(core.list_namespaced_config_map, "py", resource_version=start, timeout_seconds=10):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 2:
            w.stop()
    assert seen == [("MODIFIED", "cm-01"), ("DELETED", "cm-02")], seen

    # Typed objects of another group round-trip.
    deployment = client.V1Deployment(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1DeploymentSpec(
            replicas=2,
            selector=client.V1LabelSelector(match_labels={"app": "web"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": "web"}),
                spec=client.V1PodSpec(containers=[client.V1Container(name="web", image="nginx")]),
            ),
        ),
    )
    apps.create_namespaced_deployment("py", deployment)
    scale = apps.read_namespaced_deployment_scale("web", "py")
    assert scale.spec.replicas == 2
    apps.patch_namespaced_deployment_scale("web", "py", [{"op": "replace", "path": "/spec/replicas", "value": 4}])
    assert apps.read_namespaced_deployment("web", "py").spec.replicas == 4

    # Metadata-only answers, as client-go's metadata client (and so garbage collectors) asks for them.
    api = client.ApiClient()
    accept = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
    listed = api.call_api("/api/v1/namespaces/py/configmaps", "GET", header_params={"Accept": accept},
                          response_type="object", auth_settings=["BearerToken"], _return_http_data_only=True)
    assert listed["kind"] == "PartialObjectMetadataList", listed["kind"]
    assert all(set(item) == {"kind", "apiVersion", "metadata"} for item in listed["items"])
    assert listed["items"][0]["metadata"]["name"] == "cm-00"

    # A CRD, then its objects through the custom objects API.
    ext = client.ApiextensionsV1Api()
    ext.create_custom_resource_definition({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.org"},
        "spec": {"group": "example.org", "scope": "Namespaced",
                 "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                 "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
    })
    crd = ext.read_custom_resource_definition("gadgets.example.org")
    assert any(c.type == "Established" and c.status == "True" for c in crd.status.conditions), crd.status
    custom = client.CustomObjectsApi()
    custom.create_namespaced_custom_object("example.org", "v1alpha1", "py", "gadgets",
                                           {"apiVersion": "example.org/v1alpha1", "kind": "Gadget",
                                            "metadata": {"name": "g1"}, "spec": {"level": 7}})
    gadgets = custom.list_namespaced_custom_object("example.org", "v1alpha1", "py", "gadgets")
    assert [g["spec"]["level"] for g in gadgets["items"]] == [7], gadgets
    try:
        custom.replace_namespaced_custom_object("example.org", "v1alpha1", "py", "gadgets", "g1",
                                                {"apiVersion": "example.org/v1alpha1", "kind": "Gadget",
                                                 "metadata": {"name": "g1"}, "spec": {"level": 8}})
        raise AssertionError("a custom resource PUT without resourceVersion was accepted")
    except ApiException as e:
        assert e.status == 422, e

    # Not found is a 404, with kube-apiserver's exact body: Status fields in Go's order, no empty "group" for the
    # core group, and the newline Go's encoder ends it with.
    try:
        core.read_namespaced_config_map("missing", "py")
        raise AssertionError("read of a missing object succeeded")
    except ApiException as e:
        assert e.status == 404, e
        upstream = ('{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
                    '"message":"configmaps \\"missing\\" not found","reason":"NotFound",'
                    '"details":{"name":"missing","kind":"configmaps"},"code":404}\n')
        body = e.body.decode() if isinstance(e.body, bytes) else e.body
        assert body == upstream, repr(body)
    print("python client: all checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
