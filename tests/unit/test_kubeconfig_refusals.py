"""Kubeconfigs that cannot work: one line naming the file and the field, and ``run`` exits 2.

Moved in-process from tests/badinput (they ran ``run`` in a subprocess per
case): the loader's ``ConfigError`` is checked directly, and ``run``'s exit
code and its single stderr line through the command's own function.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.commands.cli import command
from sidecar.kube.config import ConfigError, load

from .kubeconfigs import doc, write


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("GRELMICRO_SIDECAR_", "KUBERNETES_")) or name == "KUBECONFIG":
            monkeypatch.delenv(name)


def refused(path: Path, capsys: pytest.CaptureFixture[str], **kw: Any) -> str:
    """The loader's message for ``path``; ``run`` exits 2 with that one line on stderr."""
    with pytest.raises(ConfigError) as err:
        load(str(path), **kw)
    message = str(err.value)
    assert "\n" not in message, message
    argv = ["run", "--election=main", "--port=0", "--state-dir=/tmp/never", f"--kubeconfig={path}"]
    assert command(argv, os.environ) == 2
    assert capsys.readouterr().err == f"grelmicro-sidecar: {message}\n"
    return message


B64_GARBAGE = base64.b64encode(b"not a certificate").decode()
NO_SUCH_USER = "no-such-user-28"


def on_cluster(fields: dict[str, Any]) -> dict[str, Any]:
    """A kubeconfig whose cluster has a server and ``fields``."""
    return doc(cluster={"server": "https://x", **fields})


UNUSABLE: dict[str, tuple[Any, str]] = {
    "empty": ("", "is empty; is it the right file?"),
    "binary": (b"\x00\xff\xfe garbage \x00", "is not UTF-8 text"),
    "scalar": ("42", "is not a kubeconfig (expected a mapping)"),
    "yaml-error": ("a: [b", "is not valid YAML at line"),
    "no-server": (doc(cluster={}), "cluster 'k' has no https server URL"),
    "ftp-server": (doc(server="ftp://127.0.0.1"), "has no https server URL"),
    # urllib raises ValueError for these: they were tracebacks, not one line
    "server-port-not-a-number": (doc(server="https://127.0.0.1:port"), "has no https server URL"),
    "server-port-out-of-range": (doc(server="https://127.0.0.1:99999"), "has no https server URL"),
    "server-unclosed-bracket": (doc(server="https://[::1"), "has no https server URL"),
    "skip-tls": (
        on_cluster({"insecure-skip-tls-verify": True}),
        "insecure-skip-tls-verify is set; this tool always verifies TLS",
    ),
    "ca-not-base64": (
        on_cluster({"certificate-authority-data": "%%%"}),
        "cluster.certificate-authority-data is not base64",
    ),
    "ca-garbage": (
        on_cluster({"certificate-authority-data": B64_GARBAGE}),
        "cannot load the cluster CA certificate from certificate-authority-data",
    ),
    "ca-not-ascii": (  # ssl raised TypeError: a traceback, not one line
        on_cluster({"certificate-authority-data": base64.b64encode(b"\xff\xfe").decode()}),
        "cannot load the cluster CA certificate from certificate-authority-data: not a PEM",
    ),
    "ca-missing-file": (
        on_cluster({"certificate-authority": "/nonexistent/ca.crt"}),
        "cannot load the cluster CA certificate from /nonexistent/ca.crt",
    ),
    "client-cert-garbage": (
        doc(user={"client-certificate-data": B64_GARBAGE, "client-key-data": B64_GARBAGE}),
        "cannot load the client certificate/key",
    ),
    # run and lock never run a credential plugin, installed client or not
    "exec-plugin": (
        doc(user={"exec": {"command": "aws"}}),
        "user 'u' uses a credential plugin (exec), which run and lock do not run",
    ),
    "auth-provider": (
        doc(user={"auth-provider": {"name": "oidc"}}),
        "user 'u' uses a credential plugin (auth-provider), which run and lock do not run",
    ),
    # What no path implements is refused, never ignored (it connected directly under
    # proxy-url, and acted as the real user under as before impersonation was sent).
    "proxy-url": (
        on_cluster({"proxy-url": "http://proxy:3128"}),
        "cluster 'k' sets proxy-url, which is not supported (the API server is dialled directly)",
    ),
    "tls-server-name": (
        on_cluster({"tls-server-name": "api.internal"}),
        "cluster 'k' sets tls-server-name, which is not supported",
    ),
    "basic-auth": (
        doc(user={"username": "u", "password": "p"}),
        "user 'u' sets username, which is not supported (basic authentication left",
    ),
    "unknown-context": (doc(**{"current-context": "nope"}), "no context named 'nope'"),
    "no-current-context": (doc(**{"current-context": ""}), "has no current-context"),
    "unknown-cluster": (
        doc(contexts=[{"name": "c", "context": {"cluster": "gone", "user": "u"}}]),
        "no cluster named 'gone'",
    ),
    # wrongly typed fields are named
    "users-is-a-number": (doc(users=5), "users must be a list, not int"),
    "clusters-is-a-number": (doc(clusters=5), "clusters must be a list, not int"),
    "tokenFile-is-a-number": (doc(user={"tokenFile": 5}), "user.tokenFile must be a string"),
    "client-certificate-is-a-number": (
        doc(user={"client-certificate": 5, "client-key": 6}),
        "user.client-certificate must be a string",
    ),
    "context-is-a-list": (
        doc(contexts=[{"name": "c", "context": ["k"]}]),
        "context 'c' must be a mapping",
    ),
    # pathlib raised RuntimeError for a home it cannot find: a traceback (the fuzz test's '~0')
    "tokenFile-in-an-unknown-home": (
        doc(user={"tokenFile": f"~{NO_SUCH_USER}/token"}),
        f"user.tokenFile '~{NO_SUCH_USER}/token' names a home directory this process does not have",
    ),
    "ca-in-an-unknown-home": (
        on_cluster({"certificate-authority": f"~{NO_SUCH_USER}/ca.crt"}),
        f"cluster.certificate-authority '~{NO_SUCH_USER}/ca.crt' names a home directory",
    ),
}


@pytest.mark.parametrize("name", sorted(UNUSABLE))
def test_unusable_kubeconfig_is_one_line_naming_the_file_and_run_exits_2(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    content, expected = UNUSABLE[name]
    path = write(tmp_path / f"{name}.kubeconfig", content)
    message = refused(path, capsys)
    assert str(path) in message and expected in message, message


def test_a_kubeconfig_flag_in_an_unknown_home_is_one_line_and_run_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = f"~{NO_SUCH_USER}/config"
    with pytest.raises(ConfigError) as err:
        load(path)
    assert str(err.value) == (
        f"kubeconfig '{path}' names a home directory this process does not have "
        "(an unknown user, or no $HOME); give the full path"
    )
    argv = ["run", "--election=main", "--port=0", "--state-dir=/tmp/never", f"--kubeconfig={path}"]
    assert command(argv, os.environ) == 2
    assert capsys.readouterr().err == f"grelmicro-sidecar: {err.value}\n"


def test_kubeconfig_that_is_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(tmp_path, capsys).startswith(f"cannot read kubeconfig {tmp_path}: ")


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
    "user.as",
    "user.as-groups",
    "user.as-uid",
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
        load(fh.name)
    except ConfigError as err:
        message = str(err)
        assert "\n" not in message, message
        assert fh.name in message or "kubeconfig" in message or "certificate" in message, err
    finally:
        os.unlink(fh.name)


def exit_code(name: str, *flags: str) -> int:
    """``status`` or ``cleanup`` with these flags, in this process."""
    return command([name, *flags], os.environ)


@pytest.mark.parametrize("command", ["status", "cleanup"])
def test_status_and_cleanup_take_context_from_a_merged_list_without_the_official_client(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Moved in-process from tests/sidecar/test_kubectl_config.py (it needed a cluster)."""
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # the image has no official client
    first = write(tmp_path / "first", doc(contexts=[], **{"current-context": "from-second"}))
    second = write(
        tmp_path / "second",
        {
            "contexts": [
                {"name": "from-second", "context": {"cluster": "k", "user": "u"}},
                {"name": "broken", "context": {"cluster": "nowhere", "user": "u"}},
            ],
            "clusters": [{"name": "nowhere", "cluster": {"server": "https://127.0.0.1:1"}}],
        },
    )
    monkeypatch.setenv("KUBECONFIG", f"{first}{os.pathsep}{second}")
    assert exit_code(command, "--context=nope") == 2
    err = capsys.readouterr().err
    assert err == f"grelmicro-sidecar: kubeconfig {first}:{second}: no context named 'nope'\n"
    # A context the loader accepts reaches the API server (here nobody listens): exit 1.
    assert exit_code(command, "--context=broken", "-n", "team") == 1
    assert "127.0.0.1:1" in capsys.readouterr().err
