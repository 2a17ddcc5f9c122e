"""Bad cluster credentials: kubeconfig files that cannot work, and tokens the API server refuses.

A kubeconfig that cannot be used exits 2 with one line naming the file (contract
§7). A token that is *read* fine but refused (invalid, expired) is a runtime
condition: the sidecar logs the 401 once with the fix, never leads, stays live
(``/healthz`` 200, ``/leader`` 503), and recovers when the token file is
rotated. Already covered elsewhere: a missing file and three garbage files
(tests/sidecar/test_sidecar_cluster.py).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.kube.config import ConfigError, from_kubeconfig
from tests import accounts
from tests.cluster import ControlPlane
from tests.cluster.controlplane import SERVICE_ACCOUNT_ISSUER
from tests.sidecar.proc import BIN, SidecarProcess, wait_for

Spawn = Callable[..., SidecarProcess]


def doc(
    server: str = "https://127.0.0.1:1",
    cluster: dict[str, Any] | None = None,
    user: dict[str, Any] | None = None,
    **top: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [
            {"name": "k", "cluster": cluster if cluster is not None else {"server": server}}
        ],
        "users": [{"name": "u", "user": user if user is not None else {"token": "abc"}}],
    }
    out.update(top)
    return out


def exit_line(path: Path, code: int = 2) -> str:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GRELMICRO_SIDECAR_", "KUBERNETES_"))
    }
    out = subprocess.run(
        [
            str(BIN),
            "run",
            "--election=main",
            "--port=0",
            "--state-dir=/tmp/never",
            f"--kubeconfig={path}",
        ],
        capture_output=True,
        text=True,
        timeout=20,
        env=env,
    )
    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode == code, (out.returncode, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


B64_GARBAGE = base64.b64encode(b"not a certificate").decode()
UNUSABLE: dict[str, tuple[Any, str]] = {
    "empty": ("", "is not a kubeconfig"),
    "binary": (b"\x00\xff\xfe garbage \x00", "kubeconfig"),
    "scalar": ("42", "is not a kubeconfig"),
    "no-server": (doc(cluster={}), "has no https server URL"),
    "ftp-server": (doc(server="ftp://127.0.0.1"), "has no https server URL"),
    "skip-tls": (
        doc(cluster={"server": "https://x", "insecure-skip-tls-verify": True}),
        "insecure-skip-tls-verify",
    ),
    "ca-not-base64": (
        doc(cluster={"server": "https://x", "certificate-authority-data": "%%%"}),
        "not base64",
    ),
    "ca-garbage": (
        doc(cluster={"server": "https://x", "certificate-authority-data": B64_GARBAGE}),
        "CA certificate",
    ),
    "ca-missing-file": (
        doc(cluster={"server": "https://x", "certificate-authority": "/nonexistent/ca.crt"}),
        "CA certificate",
    ),
    "client-cert-garbage": (
        doc(user={"client-certificate-data": B64_GARBAGE, "client-key-data": B64_GARBAGE}),
        "client certificate/key",
    ),
    "exec-plugin": (doc(user={"exec": {"command": "aws"}}), "exec/auth-provider"),
    # Fields run's loader does not implement are refused, never ignored (it acted
    # as the real user under `as`, and connected directly under `proxy-url`).
    "impersonation": (doc(user={"token": "t", "as": "alice"}), "as is not supported"),
    "proxy-url": (
        doc(cluster={"server": "https://x", "proxy-url": "http://proxy:3128"}),
        "proxy-url is not supported",
    ),
    "tls-server-name": (
        doc(cluster={"server": "https://x", "tls-server-name": "api.internal"}),
        "tls-server-name is not supported",
    ),
    "basic-auth": (doc(user={"username": "u", "password": "p"}), "username, password is not"),
    "unknown-context": (doc(**{"current-context": "nope"}), "no context named 'nope'"),
    "no-current-context": (doc(**{"current-context": ""}), "has no current-context"),
}


_MARKS: dict[str, Any] = {}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=_MARKS.get(n, ())) for n in sorted(UNUSABLE)]
)
def test_unusable_kubeconfig_exits_2_naming_the_file(name: str, tmp_path: Path) -> None:
    content, expected = UNUSABLE[name]
    path = tmp_path / f"{name}.kubeconfig"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    line = exit_line(path)
    assert str(path) in line and expected in line, line
    if name == "ca-missing-file":
        assert "/nonexistent/ca.crt" in line, line


def test_kubeconfig_that_is_a_directory(tmp_path: Path) -> None:
    line = exit_line(tmp_path)
    assert f"cannot read kubeconfig {tmp_path}" in line


WRONG_TYPES: dict[str, dict[str, Any]] = {
    "users-is-a-number": doc(users=5),
    "clusters-is-a-number": doc(clusters=5),
    "tokenFile-is-a-number": doc(user={"tokenFile": 5}),
    "client-certificate-is-a-number": doc(user={"client-certificate": 5, "client-key": 6}),
}


@pytest.mark.parametrize("name", sorted(WRONG_TYPES))
def test_wrongly_typed_kubeconfig_field_exits_2(name: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.kubeconfig"
    path.write_text(json.dumps(WRONG_TYPES[name]))
    assert str(path) in exit_line(path)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
    max_leaves=5,
)
_FIELDS = [
    "current-context",
    "contexts",
    "clusters",
    "users",
    "ctx.cluster",
    "ctx.user",
    "ctx.namespace",
    "cluster.server",
    "cluster.certificate-authority",
    "cluster.certificate-authority-data",
    "cluster.insecure-skip-tls-verify",
    "user.token",
    "user.tokenFile",
    "user.client-certificate",
    "user.client-key",
    "user.client-certificate-data",
    "user.client-key-data",
    "user.exec",
]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(st.sampled_from(_FIELDS), _json, min_size=1, max_size=3))
def test_fuzzed_kubeconfig_only_ever_raises_config_error(changes: dict[str, Any]) -> None:
    data = doc(cluster={"server": "https://127.0.0.1:1"})
    for key, value in sorted(changes.items(), key=lambda kv: "." not in kv[0]):  # nested first
        section, _, field = key.partition(".")
        if not field:
            data[key] = value
        else:
            where = {
                "ctx": data["contexts"][0]["context"],
                "cluster": data["clusters"][0]["cluster"],
                "user": data["users"][0]["user"],
            }[section]
            where[field] = value
    with tempfile.NamedTemporaryFile("w", suffix=".kubeconfig", delete=False) as fh:
        json.dump(data, fh)
    try:
        from_kubeconfig(Path(fh.name))
    except ConfigError as err:
        assert fh.name in str(err) or "kubeconfig" in str(err) or "certificate" in str(err), err
    finally:
        os.unlink(fh.name)


# ---- tokens the API server refuses ------------------------------------------------


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
