"""The chart as Argo CD and Flux use it (issue 37, item 3), in real pods.

GitOps tools render the chart with ``helm template`` and apply what they
rendered, again at every sync. The render must be the same each time, and a
sync after the injector has made its certificate must change nothing: no diff
to show, no rollout of the injector, the webhook still trusted.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from tests.e2e.conftest import CHART, Cluster, probe_pod, wait_for

NAMESPACE = "grelmicro-gitops"
RELEASE = "gitops"


def _render(e2e: Cluster) -> str:
    return e2e.helm(
        "template", RELEASE, str(CHART), f"--namespace={NAMESPACE}", "--skip-tests",
        "--set=injector.replicas=1", "--set=leaderLabel.policy=false",
    ).stdout  # fmt: skip


def test_a_sync_of_the_same_render_changes_nothing_once_the_injector_made_its_certificate(
    e2e: Cluster, release: str, workload_namespace: str, tmp_path: Path
) -> None:
    rendered = _render(e2e)
    assert rendered == _render(e2e)  # two renders, byte for byte
    manifest = tmp_path / "rendered.yaml"
    manifest.write_text(rendered)
    e2e.kubectl("create", "namespace", NAMESPACE)
    try:
        e2e.kubectl("apply", "-f", str(manifest))  # Argo CD's default: client-side apply
        deployment = f"deployment/{RELEASE}-grelmicro-sidecar"
        e2e.kubectl("rollout", "status", "-n", NAMESPACE, deployment, "--timeout=120s")
        webhook = f"{RELEASE}-grelmicro-sidecar-injector"
        wait_for(
            lambda: all(
                w["clientConfig"].get("caBundle")
                for w in e2e.json("get", "mutatingwebhookconfiguration", webhook)["webhooks"]
            ),
            60,
            "the injector to set the webhook's CA bundle",
        )
        before = e2e.json("get", "-n", NAMESPACE, deployment)
        secret = e2e.json("get", "secret", "-n", NAMESPACE, f"{RELEASE}-grelmicro-sidecar-tls")
        assert set(secret["data"]) >= {"ca.crt", "tls.crt", "tls.key"}

        def unchanged(since: dict[str, object]) -> None:
            now = e2e.json("get", "-n", NAMESPACE, deployment)
            assert now["metadata"]["generation"] == since["metadata"]["generation"]  # no rollout
            assert (
                e2e.json("get", "secret", "-n", NAMESPACE, secret["metadata"]["name"])["data"]
                == secret["data"]
            )
            assert all(
                w["clientConfig"].get("caBundle")
                for w in e2e.json("get", "mutatingwebhookconfiguration", webhook)["webhooks"]
            )

        # The next sync, as Argo CD makes it: the same render applied again; nothing to show.
        e2e.kubectl("apply", "-f", str(manifest))
        diff = e2e.kubectl("diff", "-f", str(manifest), check=False)
        assert diff.returncode == 0, f"a sync would change:\n{diff.stdout}"
        unchanged(before)
        # As Flux makes it, server-side: a first apply takes the fields over from the
        # client-side apply above (a change once, as when moving a release from one tool
        # to the other); the syncs after it change nothing.
        flux = ("--server-side", "--field-manager=flux", "--force-conflicts")
        e2e.kubectl("apply", *flux, "-f", str(manifest))
        e2e.kubectl("rollout", "status", "-n", NAMESPACE, deployment, "--timeout=120s")
        taken = e2e.json("get", "-n", NAMESPACE, deployment)
        e2e.kubectl("apply", *flux, "-f", str(manifest))
        diff = e2e.kubectl("diff", *flux[:2], "-f", str(manifest), check=False)
        assert diff.returncode == 0, f"a server-side sync would change:\n{diff.stdout}"
        unchanged(taken)

        # ... and the webhook still answers, trusted (a dry run, nothing is kept).
        pod = probe_pod(f"p-{uuid.uuid4().hex[:6]}")
        made = e2e.kubectl(
            "create", "-n", workload_namespace, "--dry-run=server", "-o", "json", "-f", "-",
            input=json.dumps(pod),
        )  # fmt: skip
        inits = json.loads(made.stdout)["spec"].get("initContainers") or []
        assert [c["name"] for c in inits] == ["grelmicro-sidecar"]
    finally:
        e2e.kubectl("delete", "-f", str(manifest), "--wait=false", check=False)
        e2e.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
