"""The alternatives a user would pick instead of the sidecar, as pods on the real node.

``bench.pods`` runs one 3-replica Deployment per way of electing a leader and
measures each through the same rollouts and pod deletions:

- ``sidecar``: the product, injected by the chart's webhook (readiness not gated),
  next to an app that acts only while the state file says so
  (``bench/apppause.py``: how long the leader's app pauses within a term);
- ``sidecar-label``: the same with the leader label (``label-leader``);
- ``clientgo``: client-go's ``tools/leaderelection`` with ``ReleaseOnCancel``
  as a native sidecar (``bench/peers/clientgo``, the benchmark's Go peer), in
  an image holding only its static binary;
- ``grelmicro``: grelmicro's ``LeaderElection`` inside the app's own Python
  process (``bench/peers/pypeer.py``), in an image built from the Dockerfile
  below on the product's Python base.

Every one uses the Lease ``leader-worker`` of its own namespace, names the pod
as its identity, releases on SIGTERM and has an app that exits at once on
SIGTERM, so the differences measured are the elections'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.apppause import app_container
from bench.peers import GRELMICRO_VERSION, PYPEER, clientgo_version, ensure_clientgo
from tests.cluster import images
from tests.cluster.nodeimages import BUSYBOX_IMAGE, ImageArchive, busybox
from tests.cluster.oci import ImageConfig, ImageFile, write_archive
from tests.e2e.test_election import deployment

CLIENTGO_IMAGE = f"localhost/grelmicro-bench/clientgo-peer:{clientgo_version()}"
GRELMICRO_IMAGE = f"localhost/grelmicro-bench/grelmicro-peer:{GRELMICRO_VERSION}"
LEASE = "leader-worker"
STATE_DIR = "/var/run/leader-election"
#: An app that does nothing and exits at once on SIGTERM (as PID 1, sh ignores it otherwise).
IDLE_APP = 'trap "exit 0" TERM; while :; do sleep 1 & wait $!; done'

GRELMICRO_DOCKERFILE = f"""\
FROM {images.dockerfile_from()}
RUN python -m venv /opt/venv \\
    && /opt/venv/bin/pip install --no-cache-dir --quiet "grelmicro[kubernetes]=={GRELMICRO_VERSION}" \\
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib
COPY pypeer.py /opt/pypeer.py
USER 65532:65532
ENTRYPOINT ["/opt/venv/bin/python", "/opt/pypeer.py"]
"""


@dataclass(frozen=True)
class Workload:
    """One way of electing a leader, deployed in its own namespace."""

    key: str
    label: str
    namespace: str
    manifest: dict[str, Any]


def clientgo_image() -> ImageArchive:
    """The client-go peer's static binary, alone in an image."""
    binary = ensure_clientgo()
    target = images._images_dir() / f"clientgo-peer-{binary.parent.name}.tar"

    def build(staging: Any) -> None:
        write_archive(
            staging / target.name,
            CLIENTGO_IMAGE,
            [ImageFile("clientgo-peer", binary)],
            ImageConfig(entrypoint=("/clientgo-peer",), user="65532:65532"),
        )

    directory = target.with_suffix(".d")
    images.binaries.build_once(directory, lambda d: (d / target.name).exists(), build)
    return ImageArchive(CLIENTGO_IMAGE, directory / target.name)


def grelmicro_image() -> ImageArchive:
    return images.dockerfile_image(
        GRELMICRO_IMAGE, "grelmicro-peer", {"pypeer.py": PYPEER}, GRELMICRO_DOCKERFILE
    )


def peer_images() -> list[ImageArchive]:
    return [clientgo_image(), grelmicro_image(), busybox()]


def _downward_env() -> list[dict[str, Any]]:
    return [
        {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
        for name, path in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"))
    ]


def _restricted(container: dict[str, Any]) -> dict[str, Any]:
    container["imagePullPolicy"] = "IfNotPresent"
    container["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    return container


def _plain(name: str, containers: list[dict[str, Any]], sidecars: list[dict[str, Any]]) -> Any:
    """The Deployment of ``tests/e2e`` without injection, with these containers instead."""
    manifest = deployment(name)
    template = manifest["spec"]["template"]
    template["metadata"]["annotations"] = {}
    spec = template["spec"]
    spec["containers"] = [_restricted(c) for c in containers]
    spec["initContainers"] = [_restricted(c) for c in sidecars]
    spec["volumes"] = [{"name": "leader-election", "emptyDir": {}}]
    return manifest


def with_user_app(manifest: dict[str, Any], cpu_request: str | None = None) -> dict[str, Any]:
    """The e2e Deployment with the app a user would write on the state file (in the product
    image, which has Python) in place of the curl observer; ``cpu_request``: the app's, if any
    (none, as in the e2e tests, leaves the pod the sidecar's 10m of CPU weight)."""
    app = app_container(images.product_image_name())
    if cpu_request:
        app["resources"] = {"requests": {"cpu": cpu_request}}
    manifest["spec"]["template"]["spec"]["containers"] = [app]
    return manifest


def workloads(prefix: str, app_cpu_request: str | None = None) -> list[Workload]:
    state = [{"name": "leader-election", "mountPath": STATE_DIR}]
    peer_args = [
        "--namespace=$(POD_NAMESPACE)",
        "--identity=$(POD_NAME)",
        f"--state-dir={STATE_DIR}",
    ]
    idle = {"name": "app", "image": BUSYBOX_IMAGE, "command": ["sh", "-c", IDLE_APP]}
    clientgo = _plain(
        "worker",
        [dict(idle, volumeMounts=state)],
        [
            {
                "name": "leader-election",
                "image": CLIENTGO_IMAGE,
                "restartPolicy": "Always",  # a native sidecar, like the injected one
                "args": [*peer_args, f"--lease={LEASE}"],
                "env": _downward_env(),
                "volumeMounts": state,
            }
        ],
    )
    grelmicro = _plain(
        "worker",
        [
            {
                "name": "app",
                "image": GRELMICRO_IMAGE,
                "args": ["grelmicro", *peer_args, "--election=worker"],
                "env": _downward_env(),
                "volumeMounts": state,
            }
        ],
        [],
    )
    labelled = with_user_app(
        deployment("worker", annotations={"leader-election.grelmicro.io/label-leader": "true"}),
        app_cpu_request,
    )
    # As docs/application.md says: the account manifests/leader-label.yaml grants the label
    # (on the default one every put is a 403, and every stop waited out the settle budget).
    labelled["spec"]["template"]["spec"]["serviceAccountName"] = "grelmicro-sidecar"
    plain = with_user_app(deployment("worker"), app_cpu_request)
    return [
        Workload("sidecar", "grelmicro-sidecar", f"{prefix}-sidecar", plain),
        Workload("sidecar-label", "grelmicro-sidecar, leader label", f"{prefix}-label", labelled),
        Workload("clientgo", "client-go ReleaseOnCancel (sidecar)", f"{prefix}-clientgo", clientgo),
        Workload(
            "grelmicro", "grelmicro LeaderElection (in the app)", f"{prefix}-grelmicro", grelmicro
        ),
    ]
