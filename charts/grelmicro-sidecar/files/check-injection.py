"""`helm test`: proves that the injector answers and injects the sidecar.

Sends three Pods to the API server as server-side dry runs (the admission chain
runs, webhooks included, and nothing is stored):

1. annotated `leader-election.grelmicro.io/inject: "true"`: must come back with
   the sidecar as a native sidecar (first init container, restartPolicy
   Always) with the image and resources the chart configured, the shared
   volume, and the state-file env in the app container;
2. without the annotation: must come back untouched;
3. with a bad annotation value: must be refused with a message naming it.

Standard library only; runs in the chart's own image. In a pod it uses the
mounted ServiceAccount; elsewhere set SERVICE_ACCOUNT_DIR (a folder with
`token` and `ca.crt`) and KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT.
Exit 0 when every check passes, 1 otherwise.
"""

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request

PREFIX = "leader-election.grelmicro.io/"
SIDECAR = "grelmicro-sidecar"
RETRY_FOR = float(os.environ.get("RETRY_SECONDS", "60"))
# Answers that mean "not ready yet", not "wrong": the namespace's default
# ServiceAccount is created moments after the namespace; an injector that has
# just been installed may not be serving yet.
TRANSIENT = (
    "serviceaccount",
    "service account",
    "failed calling webhook",
    "no endpoints available",
    "connection refused",
    "context deadline exceeded",
)


def _config() -> tuple[str, ssl.SSLContext, str]:
    sa_dir = os.environ.get("SERVICE_ACCOUNT_DIR", "/var/run/secrets/kubernetes.io/serviceaccount")
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:
        host = f"[{host}]"
    ctx = ssl.create_default_context(cafile=os.path.join(sa_dir, "ca.crt"))
    with open(os.path.join(sa_dir, "token")) as fh:
        token = fh.read().strip()
    return f"https://{host}:{port}", ctx, token


def dry_run(pod: dict, namespace: str) -> tuple[int, dict]:
    base, ctx, token = _config()
    url = f"{base}/api/v1/namespaces/{namespace}/pods?dryRun=All&fieldManager=helm-test"
    deadline = time.monotonic() + RETRY_FOR
    while True:
        request = urllib.request.Request(
            url,
            data=json.dumps(pod).encode(),
            method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, context=ctx, timeout=30) as resp:
                return resp.status, json.load(resp)
        except urllib.error.HTTPError as err:
            body = json.loads(err.read() or b"{}")
            message = str(body.get("message", "")).lower()
            if any(t in message for t in TRANSIENT) and time.monotonic() < deadline:
                print(f"  waiting: {body.get('message')}", flush=True)
                time.sleep(2)
                continue
            return err.code, body


def pod(annotations: dict, image: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "grelmicro-sidecar-test-",
            "labels": {"app.kubernetes.io/name": "grelmicro-sidecar-test"},
            "annotations": annotations,
        },
        "spec": {
            "automountServiceAccountToken": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "app",
                    "image": image,
                    "args": ["--version"],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def main() -> int:
    namespace = os.environ["TEST_NAMESPACE"]
    expected = json.loads(os.environ["EXPECTED_SIDECAR"])
    image = expected["image"]
    failures: list[str] = []

    def check(ok: bool, what: str) -> None:
        print(("ok:   " if ok else "FAIL: ") + what, flush=True)
        if not ok:
            failures.append(what)

    print(f"dry-run pods in namespace {namespace}", flush=True)

    status, body = dry_run(pod({PREFIX + "inject": "true", PREFIX + "name": "helm-test"}, image), namespace)
    check(status == 201, f"annotated pod accepted (HTTP {status}: {body.get('message', 'created')})")
    spec = body.get("spec", {}) if status == 201 else {}
    inits = spec.get("initContainers") or []
    sidecar = inits[0] if inits else {}
    check(sidecar.get("name") == SIDECAR, f"the first init container is {SIDECAR!r}")
    check(sidecar.get("restartPolicy") == "Always", "it is a native sidecar (restartPolicy: Always)")
    check(sidecar.get("image") == image, f"its image is {image}")
    check(
        sidecar.get("imagePullPolicy") == expected["pullPolicy"],
        f"its imagePullPolicy is {expected['pullPolicy']}",
    )
    check(sidecar.get("resources") == expected["resources"], f"its resources are {expected['resources']}")
    args = sidecar.get("args") or []
    check(args[:1] == ["run"] and "--election=helm-test" in args, "it runs `run --election=helm-test`")
    app = next((c for c in spec.get("containers") or [] if c.get("name") == "app"), {})
    env = {e.get("name") for e in app.get("env") or []}
    check("LEADER_ELECTION_STATE_FILE" in env, "the app container has LEADER_ELECTION_STATE_FILE")
    volumes = {v.get("name") for v in spec.get("volumes") or []}
    check("leader-election" in volumes, "the pod has the shared leader-election volume")

    status, body = dry_run(pod({}, image), namespace)
    inits = (body.get("spec") or {}).get("initContainers") or []
    check(status == 201 and not inits, f"a pod without the annotation is left alone (HTTP {status})")

    bad = {PREFIX + "inject": "true", PREFIX + "lease-duration": "soon"}
    status, body = dry_run(pod(bad, image), namespace)
    message = str(body.get("message", ""))
    check(
        status >= 400 and PREFIX + "lease-duration" in message,
        f"a bad annotation is refused, naming it (HTTP {status}: {message})",
    )

    if failures:
        print(f"{len(failures)} check(s) failed", flush=True)
        return 1
    print("the injector works", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
