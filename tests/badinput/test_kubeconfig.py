"""Bad cluster credentials the API server refuses: tokens, and a CA that is not the cluster's.

A token that is *read* fine but refused (invalid, expired) is a runtime
condition: the sidecar logs the 401 once with the fix, never leads, stays live
(``/healthz`` 200, ``/leader`` 503), and recovers when the token file is
rotated. A kubeconfig that cannot be used at all exits 2 with one line naming
the file (contract §7): the loader's in-process tests
(tests/unit/test_kubeconfig_refusals.py); a missing file and three garbage
files through real processes in tests/sidecar/test_sidecar_cluster.py.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

from tests import accounts
from tests.cluster import ControlPlane
from tests.cluster.controlplane import SERVICE_ACCOUNT_ISSUER
from tests.sidecar.proc import SidecarProcess, wait_for
from tests.unit.kubeconfigs import doc

Spawn = Callable[..., SidecarProcess]


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def service_account_jwt(
    cluster: ControlPlane, namespace: str, name: str, uid: str, expires_in: float
) -> str:
    """A ServiceAccount token signed with the cluster's own key, expiring when we say."""
    now = int(time.time())
    claims = {
        "iss": SERVICE_ACCOUNT_ISSUER,
        "aud": [SERVICE_ACCOUNT_ISSUER],
        "sub": f"system:serviceaccount:{namespace}:{name}",
        "iat": now - 3600,
        "nbf": now - 3600,
        "exp": int(now + expires_in),
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
    }
    signing = f"{_b64url(json.dumps({'alg': 'RS256', 'typ': 'JWT'}).encode())}.{_b64url(json.dumps(claims).encode())}"
    key = serialization.load_pem_private_key((cluster.pki / "sa.key").read_bytes(), password=None)
    signature = key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())  # type: ignore[union-attr,call-arg]
    return f"{signing}.{_b64url(signature)}"


def elector(api: Any, namespace: str) -> str:
    """A ServiceAccount allowed to do everything the sidecar needs on Leases; its uid."""
    uid = accounts.service_account(api, namespace)
    accounts.grant_leases(api, namespace)
    return uid


def token_kubeconfig(
    cluster: ControlPlane, path: Path, namespace: str, user: dict[str, Any]
) -> Path:
    data = doc(
        cluster={"server": cluster.server, "certificate-authority": str(cluster.ca_file)}, user=user
    )
    data["contexts"][0]["context"]["namespace"] = namespace
    path.write_text(json.dumps(data))
    return path


def assert_refused_and_live(proc: SidecarProcess, seconds: float = 3.0) -> dict[str, Any]:
    wait_for(
        lambda: any("401" in str(r.get("msg")) for r in proc.logs()), 10, what="the 401 log line"
    )
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # retries happen meanwhile; none of them leads
        assert not proc.leads() and proc.http("/leader")[0] == 503
        time.sleep(0.1)
    assert proc.http("/healthz")[0] == 200 and proc.alive
    lines = [r for r in proc.logs() if "401" in str(r.get("msg"))]
    assert len(lines) == 1, lines  # once, not every retry
    assert "Traceback" not in proc.raw_log()
    return lines[0]


def test_invalid_token_logs_401_once_and_never_leads(
    spawn: Spawn, cluster: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    kc = token_kubeconfig(cluster, tmp_path / "bad.kubeconfig", namespace, {"token": "not-a-token"})
    line = assert_refused_and_live(spawn("pod-a", kubeconfig=kc))
    assert line["level"] == "error"
    assert "expired or invalid" in line["msg"] and "kubeconfig" in line["msg"]


def test_expired_token_is_refused_and_a_rotated_token_file_recovers(
    spawn: Spawn, cluster: ControlPlane, api: Any, namespace: str, tmp_path: Path
) -> None:
    uid = elector(api, namespace)
    expired = service_account_jwt(cluster, namespace, "elector", uid, expires_in=-60)
    fresh = service_account_jwt(cluster, namespace, "elector", uid, expires_in=3600)
    # The same token, only the expiry differs: that is what the API server refuses.
    assert accounts.lease_list_status(cluster, namespace, fresh) == 200
    assert accounts.lease_list_status(cluster, namespace, expired) == 401

    token_file = tmp_path / "token"
    token_file.write_text(expired)
    kc = token_kubeconfig(
        cluster, tmp_path / "sa.kubeconfig", namespace, {"tokenFile": str(token_file)}
    )
    a = spawn("pod-a", kubeconfig=kc)
    assert_refused_and_live(a)

    # The kubelet rotates the projected token: the sidecar re-reads the file and leads.
    tmp = tmp_path / "token.new"
    tmp.write_text(fresh)
    tmp.replace(token_file)
    wait_for(a.leads, 15, what="leadership after the token file was rotated")


def test_wrong_ca_is_a_clear_tls_error_and_no_leadership(
    spawn: Spawn, cluster: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    other_ca = Path("/etc/ssl/certs/ca-certificates.crt")
    if not other_ca.exists():
        pytest.skip("no system CA bundle to stand for a wrong CA")
    data = json.loads(Path(cluster.kubeconfig).read_text())
    data["clusters"][0]["cluster"] = {
        "server": cluster.server,
        "certificate-authority": str(other_ca),
    }
    kc = tmp_path / "wrong-ca.kubeconfig"
    kc.write_text(json.dumps(data))
    a = spawn("pod-a", kubeconfig=kc)
    wait_for(
        lambda: any("TLS verification" in str(r.get("error", "")) for r in a.logs()),
        10,
        what="a TLS verification log line",
    )
    time.sleep(1.5)
    assert not a.leads() and a.http("/leader")[0] == 503 and a.http("/healthz")[0] == 200
    assert "Traceback" not in a.raw_log()
