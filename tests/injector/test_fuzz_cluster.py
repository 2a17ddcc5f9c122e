"""Random annotations through the real API server: a clear denial, or a pod it accepts.

Dry-run creates (the webhook declares ``sideEffects: None``, so the API server
calls it for dry runs too): nothing is stored, and every injected pod passes
the API server's own validation, which the pure fuzzing cannot check.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.rest import ApiException

from sidecar.injector.annotations import KNOWN, PREFIX
from sidecar.injector.webhookconfig import WEBHOOK_NAME

from .conftest import Registration, annotated_pod

values = st.one_of(
    st.sampled_from(
        [
            "true",
            "false",
            "15s",
            "20s",
            "12s",
            "3s",
            "1m",
            "1500ms",
            "0s",
            "4040",
            "1",
            "65535",
            "/var/run/x",
            "/run/a.b/c_d",
            "/",
            "a/b",
            "main",
            "My App",
            "---",
            "1h",
            "25h",
            "/x//y/",
        ]
    ),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20),
)
keys = st.sampled_from([k for k in KNOWN if k != PREFIX + "inject"] + [PREFIX + "lease-durations"])


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.dictionaries(keys, values, max_size=5))
def test_random_annotations_give_a_denial_or_an_accepted_pod(
    api: Any, namespace: str, webhook: Registration, notes: dict[str, str]
) -> None:
    core = client.CoreV1Api(api)
    try:
        pod = core.create_namespaced_pod(namespace, annotated_pod("fuzz", notes), dry_run="All")
    except ApiException as err:
        message = json.loads(err.body)["message"]
        assert err.status == 400, message  # a denial, never a 500 or a validation error
        assert f'admission webhook "{WEBHOOK_NAME}" denied the request' in message
        assert PREFIX in message, message
        return
    names = [c.name for c in (pod.spec.init_containers or []) + pod.spec.containers]
    assert names.count("grelmicro-sidecar") == 1
