"""The one kubeconfig loader, in-process: kubectl's precedence, its merge, --context, impersonation.

contract §7 "Kubeconfig": ``--kubeconfig``; else ``$KUBECONFIG`` merged; else
``~/.kube/config``; the pod's service account only when none of those files
exists. Every case here runs without a cluster and without a subprocess.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.kube.api import KubeApi
from sidecar.kube.config import ConfigError, load
from tests.cluster.pki import CertificateAuthority

from .kubeconfigs import Place, doc, write


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.create()


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Place:
    return Place(tmp_path, monkeypatch)


def named(place: Place, name: str, token: str) -> Path:
    """A kubeconfig whose only user has the token ``token``."""
    return write(place.root / f"{name}.kubeconfig", doc(user={"token": token}))


# (--kubeconfig, $KUBECONFIG, ~/.kube/config exists, in a pod) -> whose token is used
PRECEDENCE = [
    ("flag", "env", True, True, "flag"),
    ("flag", None, False, False, "flag"),
    (None, "env", True, True, "env"),  # a pod with $KUBECONFIG set uses it, as kubectl does
    (None, "env", False, False, "env"),
    (None, "missing", True, True, "sa-token"),  # $KUBECONFIG set: the home file is not read
    (None, None, True, True, "home"),
    (None, None, True, False, "home"),
    (None, None, False, True, "sa-token"),  # a pod with no kubeconfig file: its service account
]


@pytest.mark.parametrize(("flag", "env", "home", "pod", "used"), PRECEDENCE)
def test_precedence_is_kubectls(
    place: Place,
    ca: CertificateAuthority,
    flag: str | None,
    env: str | None,
    home: bool,
    pod: bool,
    used: str,
) -> None:
    if env == "missing":
        place.kubeconfig_env(place.root / "nowhere", place.root / "nowhere-either")
    elif env:
        place.kubeconfig_env(named(place, "env", "env"))
    if home:
        place.home_file(doc(user={"token": "home"}))
    if pod:
        place.pod(ca.cert_pem)
    config = load(str(named(place, "flag", "flag")) if flag else None)
    assert config.authorization() == f"Bearer {used}"
    assert config.in_cluster == (used == "sa-token")
    if config.in_cluster:
        assert (config.server, config.namespace) == ("https://10.96.0.1:443", "apps")


def test_nothing_to_read_outside_a_pod_is_one_line_saying_what_to_pass(place: Place) -> None:
    with pytest.raises(ConfigError) as err:
        load()
    message = str(err.value)
    assert message.startswith("no cluster credentials: not in a pod and no kubeconfig at ")
    assert str(place.home / ".kube" / "config") in message and message.endswith("--kubeconfig")


def test_a_missing_explicit_kubeconfig_is_an_error_even_in_a_pod(
    place: Place, ca: CertificateAuthority
) -> None:
    place.pod(ca.cert_pem)
    missing = place.root / "missing.kubeconfig"
    with pytest.raises(ConfigError, match=f"^cannot read kubeconfig {missing}: no such file$"):
        load(str(missing))


def test_a_kubeconfig_list_is_merged_as_kubectl_merges_it(
    place: Place, ca: CertificateAuthority
) -> None:
    first_dir, second_dir = place.root / "one", place.root / "two"
    write(first_dir / "token", "from-first-folder")
    write(second_dir / "ca.pem", ca.cert_pem)
    first = write(
        first_dir / "config",
        {
            # current-context names a context that only the second file defines
            "current-context": "from-second",
            "users": [{"name": "u", "user": {"tokenFile": "token"}}],  # relative: its folder
            "clusters": [{"name": "k", "cluster": {"server": "https://first:1"}}],
        },
    )
    second = write(
        second_dir / "config",
        {
            "current-context": "ignored",  # the first file to set it wins
            "contexts": [
                {
                    "name": "from-second",
                    "context": {"cluster": "k2", "user": "u", "namespace": "n2"},
                },
                {"name": "other", "context": {"cluster": "k", "user": "u"}},
            ],
            # a user of the same name: the first file's wins, whole (its "as" is not used)
            "users": [{"name": "u", "user": {"token": "second", "as": "someone"}}],
            "clusters": [
                {"name": "k", "cluster": {"server": "https://second:1"}},
                {
                    "name": "k2",
                    "cluster": {"server": "https://k2:6443", "certificate-authority": "ca.pem"},
                },
            ],
        },
    )
    place.kubeconfig_env(
        first, place.root / "absent", second, first
    )  # missing skipped, repeat read once
    config = load()
    assert config.authorization() == "Bearer from-first-folder"
    assert (config.server, config.namespace, config.impersonation) == ("https://k2:6443", "n2", ())
    assert config.tls_files.ca_path == str(second_dir / "ca.pem")
    assert config.source == f"kubeconfig {first}:{second} (context from-second)"
    # --context picks another context of the merged files; its cluster too is the first file's
    assert load(context="other").server == "https://first:1"


def test_context_flag_with_the_built_in_loader(place: Place) -> None:
    path = write(
        place.root / "kc",
        doc(
            contexts=[
                {"name": "c", "context": {"cluster": "k", "user": "u"}},
                {"name": "team", "context": {"cluster": "k", "user": "u", "namespace": "team"}},
            ]
        ),
    )
    assert load(str(path)).namespace is None
    assert load(str(path), "team").namespace == "team"
    with pytest.raises(ConfigError) as err:
        load(str(path), "nope")
    assert str(err.value) == f"kubeconfig {path}: no context named 'nope'"


def test_context_flag_without_any_kubeconfig_is_refused_not_ignored(
    place: Place, ca: CertificateAuthority
) -> None:
    place.pod(ca.cert_pem)
    with pytest.raises(ConfigError, match=r"^--context='team' names a kubeconfig context, but"):
        load(context="team")


def test_empty_files_add_nothing_to_a_merge(place: Place) -> None:
    empty = write(place.root / "empty", "")
    place.kubeconfig_env(empty, named(place, "real", "real"))
    assert load().authorization() == "Bearer real"
    place.kubeconfig_env(empty)
    with pytest.raises(
        ConfigError, match=f"^kubeconfig {empty} is empty; is it the right file\\?$"
    ):
        load()


# ---- impersonation: Impersonate-* headers on the project's own call path ----------


def headers(config: object) -> list[tuple[str, str]]:
    api = KubeApi(config)  # type: ignore[arg-type]
    try:
        return [h for h in api._headers() if h[0].startswith("Impersonate-")]
    finally:
        api.close()


def test_the_users_as_fields_are_sent_and_the_flags_win(place: Place) -> None:
    user = {"token": "t", "as": "alice", "as-groups": ["dev", "ops"], "as-uid": "42"}
    path = write(place.root / "kc", doc(user=user))
    assert headers(load(str(path))) == [
        ("Impersonate-User", "alice"),
        ("Impersonate-Group", "dev"),
        ("Impersonate-Group", "ops"),
        ("Impersonate-Uid", "42"),
    ]
    flagged = load(str(path), as_user="bob", as_groups=("a", "b"))
    assert headers(flagged) == [
        ("Impersonate-User", "bob"),
        ("Impersonate-Group", "a"),
        ("Impersonate-Group", "b"),
        ("Impersonate-Uid", "42"),
    ]
    assert headers(load(str(write(place.root / "plain", doc())))) == []


def test_impersonation_applies_to_the_service_account_too(
    place: Place, ca: CertificateAuthority
) -> None:
    place.pod(ca.cert_pem)
    assert headers(load(as_user="bob")) == [("Impersonate-User", "bob")]


@pytest.mark.parametrize(
    ("user", "flags", "message"),
    [
        ({"token": "t"}, {"as_groups": ("g",)}, "^--as-group needs --as$"),
        ({"token": "t", "as-groups": ["g"]}, {}, "user 'u' sets as-groups or as-uid without as$"),
        ({"token": "t", "as": 5}, {}, "user.as must be a string, not int$"),
        (
            {"token": "t", "as": "a", "as-groups": "g"},
            {},
            "user.as-groups must be a list of strings$",
        ),
        (
            {"token": "t", "as": "a", "as-user-extra": {"k": ["v"]}},
            {},
            "user 'u' sets as-user-extra, which is not supported",
        ),
    ],
)
def test_impersonation_problems_are_one_line(
    place: Place, user: dict[str, object], flags: dict[str, object], message: str
) -> None:
    path = write(place.root / "kc", doc(user=user))
    with pytest.raises(ConfigError, match=message) as err:
        load(str(path), **flags)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)


def test_a_problem_in_a_merged_list_names_the_file_that_wrote_the_part(place: Place) -> None:
    garbage = "bm90IGEgY2VydGlmaWNhdGU="  # base64 of "not a certificate"
    users = write(
        place.root / "users",
        {
            "users": [
                {
                    "name": "u",
                    "user": {"client-certificate-data": garbage, "client-key-data": garbage},
                }
            ]
        },
    )
    rest = write(place.root / "rest", doc(users=[]))
    place.kubeconfig_env(users, rest)
    with pytest.raises(
        ConfigError, match=f"^kubeconfig {users}: cannot load the client certificate/key"
    ):
        load()
    bad_ca = write(
        place.root / "bad-ca",
        doc(cluster={"server": "https://x", "certificate-authority": "missing.pem"}, users=[]),
    )
    place.kubeconfig_env(users, bad_ca)
    with pytest.raises(ConfigError) as err:
        load()
    assert str(err.value).startswith(
        f"kubeconfig {bad_ca}: cannot load the cluster CA certificate from {place.root / 'missing.pem'}"
    )
