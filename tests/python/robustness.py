"""Throws malformed and hostile requests at a running nest apiserver: every answer must be a Kubernetes Status with
a 4xx code (never a 5xx, never a dropped connection), and the server must keep serving.

Usage: python robustness.py KUBECONFIG SEED      (random hostile requests)
       python robustness.py KUBECONFIG attacks   (the named attacks of issue 18, each with upstream's answer)
"""
import base64
import http.client
import json
import os
import random
import ssl
import sys
import tempfile

import yaml


def connection_factory(kubeconfig):
    with open(kubeconfig) as f:
        cfg = yaml.safe_load(f)
    cluster = cfg["clusters"][0]["cluster"]
    user = cfg["users"][0]["user"]
    tmp = tempfile.mkdtemp()
    paths = {}
    for name, key in [("ca", "certificate-authority-data"), ("crt", "client-certificate-data"), ("key", "client-key-data")]:
        paths[name] = os.path.join(tmp, name)
        src = cluster if name == "ca" else user
        with open(paths[name], "wb") as out:
            out.write(base64.b64decode(src[key]))
    context = ssl.create_default_context(cafile=paths["ca"])
    context.load_cert_chain(paths["crt"], paths["key"])
    host, port = cluster["server"].removeprefix("https://").rsplit(":", 1)
    return lambda: http.client.HTTPSConnection(host, int(port), context=context, timeout=10)


PATHS = [
    "/api/v1/namespaces", "/api/v1/namespaces/fuzz/configmaps", "/api/v1/namespaces/fuzz/configmaps/cm",
    "/api/v1/namespaces/fuzz/pods", "/apis/apps/v1/namespaces/fuzz/deployments/d/scale",
    "/api/v1/namespaces/fuzz/configmaps/cm/status", "/api/v1/namespaces/fuzz/finalize", "/api/v1/nodes/n/status",
    "/apis/apps/v1/deployments", "/apis/nope/v1/things", "/api/v2/pods", "/api/v1/namespaces/fuzz/unknowns/x",
    "/api/v1/namespaces/%zz/configmaps", "/api/v1/namespaces/fuzz/configmaps/a%2Fb", "/api/v1/pods/x",
    "/apis/apps/v1/namespaces/fuzz/deployments/d/unknown/extra/segments",
]
QUERIES = [
    "", "?watch=true&timeoutSeconds=1", "?labelSelector=a%20in%20(", "?labelSelector=!!", "?fieldSelector=x.y=1",
    "?limit=-1", "?limit=abc", "?continue=not-base64!", "?continue=eyJydiI6fQ==", "?resourceVersion=abc",
    "?resourceVersion=99999999999&resourceVersionMatch=Exact", "?resourceVersionMatch=Bogus&resourceVersion=1",
    "?dryRun=Maybe", "?timeoutSeconds=x&watch=1", "?propagationPolicy=Sideways", "?%",
]
CONTENT_TYPES = [
    "application/json", "application/merge-patch+json", "application/json-patch+json",
    "application/strategic-merge-patch+json", "application/apply-patch+yaml", "text/plain",
    "application/vnd.kubernetes.protobuf", "application/yaml", "",
]


def bodies(rng):
    choices = [
        b"", b"{", b"null", b"[]", b"42", b'"string"', b"{}", b'{"metadata": 5}', b'{"metadata": {"name": 7}}',
        b'{"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "x"}}',
        b'{"metadata": {"name": "' + b"x" * 300 + b'"}}', b'{"metadata": {"name": "cm", "labels": {"": ""}}}',
        b'[{"op": "move", "from": "/metadata", "path": "/metadata/name"}]', b'[{"op": "remove", "path": "/"}]',
        b'[{"op": "bogus"}]', b'{"spec": {"replicas": "three"}}', b'{"spec": {"replicas": -5}}',
        b'{"metadata": {"name": "cm", "resourceVersion": "abc"}}', bytes(rng.getrandbits(8) for _ in range(64)),
        b'{"a":' * 2000, json.dumps({"metadata": {"name": "cm"}, "data": {"k": "v" * 1000}}).encode(),
    ]
    return rng.choice(choices)


def main(kubeconfig, seed):
    rng = random.Random(seed)
    connect = connection_factory(kubeconfig)
    conn = connect()
    # Something for the requests to hit.
    for method, path, body in [
        ("POST", "/api/v1/namespaces", {"metadata": {"name": "fuzz"}}),
        ("POST", "/api/v1/namespaces/fuzz/configmaps", {"metadata": {"name": "cm"}}),
        ("POST", "/apis/apps/v1/namespaces/fuzz/deployments",
         {"metadata": {"name": "d"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}},
          "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
    ]:
        conn.request(method, path, json.dumps(body), {"Content-Type": "application/json"})
        assert conn.getresponse().read() is not None

    failures = []
    for i in range(400):
        method = rng.choice(["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"])
        path = rng.choice(PATHS) + rng.choice(QUERIES)
        body = bodies(rng)
        headers = {"Content-Type": rng.choice(CONTENT_TYPES)}
        try:
            conn.request(method, path, body, headers)
            response = conn.getresponse()
            data = response.read()
        except (http.client.HTTPException, OSError) as e:
            failures.append(f"{method} {path}: connection error {e!r}")
            conn = connect()
            continue
        # Like kube-apiserver, a resourceVersion the store has not reached is a 504 Timeout ("Too large resource
        # version"); every other 5xx is a bug.
        too_large = response.status == 504 and b"Too large resource version" in data
        if response.status >= 500 and not too_large:
            failures.append(f"{method} {path} {headers} {body[:80]!r}: {response.status} {data[:200]!r}")
        elif response.status >= 400 and method != "HEAD":
            status = json.loads(data)
            if status.get("kind") != "Status" or status.get("code") != response.status:
                failures.append(f"{method} {path}: {response.status} answered without a matching Status: {data[:200]!r}")
    conn.request("GET", "/api/v1/namespaces/fuzz/configmaps/cm")
    assert conn.getresponse().status in (200, 404), "the server stopped serving"
    if failures:
        print("\n".join(failures[:20]))
        sys.exit(1)
    print("robustness: 400 hostile requests, no 5xx")


def named_attacks(kubeconfig):
    """The inputs issue 18 names, each sent as an attacker would; each must get upstream's answer."""
    connect = connection_factory(kubeconfig)
    conn = connect()

    def send(method, path, body=None, content_type="application/json"):
        conn.request(method, path, body if body is None else json.dumps(body), {"Content-Type": content_type})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")

    status, _ = send("POST", "/api/v1/namespaces", {"metadata": {"name": "attacks"}})
    assert status in (201, 409), status
    cm = {"metadata": {"name": "bomb"}, "data": {"k": "x" * 1000}}
    status, _ = send("POST", "/api/v1/namespaces/attacks/configmaps", cm)
    assert status == 201, status
    patch = "application/json-patch+json"
    # Each copy of the whole object into itself doubles it: 30 of them would be a terabyte.
    bomb = [{"op": "add", "path": "/metadata/annotations", "value": {}}]
    bomb += [{"op": "copy", "from": "", "path": f"/metadata/annotations/k{i}"} for i in range(30)]
    status, body = send("PATCH", "/api/v1/namespaces/attacks/configmaps/bomb", bomb, patch)
    assert status == 422 and "the accumulated size increase of copy is" in body["message"], (status, body)
    too_many = [{"op": "test", "path": "/kind", "value": "ConfigMap"}] * 10001
    status, body = send("PATCH", "/api/v1/namespaces/attacks/configmaps/bomb", too_many, patch)
    assert status == 413 and body["message"] == "The allowed maximum operations in a JSON patch is 10000, got 10001", (
        status, body)
    # A watch asking to last longer than any clock can count is clamped, not a crashed handler: it answers 200 and
    # streams the object that exists.
    watch = connect()
    watch.request("GET", "/api/v1/namespaces/attacks/configmaps?watch=true&timeoutSeconds=18446744073709551615")
    response = watch.getresponse()
    assert response.status == 200, response.status
    first = json.loads(response.readline())
    assert first["type"] == "ADDED" and first["object"]["metadata"]["name"] == "bomb", first
    watch.close()
    status, body = send("GET", "/api/v1/namespaces/attacks/configmaps/bomb")
    assert status == 200 and len(json.dumps(body)) < 10_000, "the bomb changed nothing"
    print("robustness: the copy bomb, 10,001 operations and an endless watch get upstream's answers")


if __name__ == "__main__":
    if sys.argv[2] == "attacks":
        named_attacks(sys.argv[1])
    else:
        main(sys.argv[1], int(sys.argv[2]))
