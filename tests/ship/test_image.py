"""The Dockerfile, and what the sidecar role costs: hadolint, shape, context, imports, size.

There is no Docker engine here, so the image is never built by the tests: the
Dockerfile is linted (hadolint, from PyPI), its shape is checked line by line,
and the two claims it makes are checked on the installed package instead:
`run` never imports the injector's dependencies, and the sidecar's own
runtime dependency set stays tiny.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.cluster import ControlPlane, free_port, images
from tests.ship.tools import BIN, ROOT, wait_for

pytestmark = pytest.mark.timeout(120)
DOCKERFILE = ROOT / "Dockerfile"
#: Standard-library modules `run` was measured without (bench: each costs RSS in every pod):
#: hashlib 0.8 MB (OpenSSL's digests), email 1 MB (the Date header is parsed by
#: kube/skew.py), tempfile/shutil with bz2, lzma, zlib 0.9 MB (inline certificates only).
NOT_ON_RUNS_PATH = ("hashlib", "email", "tempfile", "shutil", "bz2", "lzma", "zlib")
INJECTOR_ONLY = (
    "kopf",
    "aiohttp",
    "cryptography",
    "multidict",
    "yarl",
    "frozenlist",
    "cffi",
    "sidecar.injector",
)
#: The official client: an optional loader of credential plugins, for status, cleanup and the
#: injector only (contract §7 "Kubeconfig").
OFFICIAL_CLIENT = ("kubernetes", "urllib3", "google.auth")


def _tool(name: str) -> str:
    path = BIN / name
    assert path.exists(), (
        f"{name} is missing from {BIN}: install the test extra (pip install -e '.[test]')"
    )
    return str(path)


def test_dockerfile_is_hadolint_clean() -> None:
    result = subprocess.run(
        [_tool("hadolint"), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_is_multi_stage_slim_non_root_and_runs_the_sidecar_by_default() -> None:
    steps = _instructions()
    froms = [rest for word, rest in steps if word == "FROM"]
    assert len(froms) == 2 and froms[0].endswith(" AS build"), froms
    assert all(re.match(r"python:3\.\d+-slim", f) for f in froms), froms
    final = steps[max(i for i, (w, _) in enumerate(steps) if w == "FROM") :]
    # The final stage copies only the virtualenv built in the first one, and the bytecode
    # of the standard-library modules the commands import (hack/bytecode.py).
    copies = [rest for word, rest in final if word == "COPY"]
    assert copies == ["--from=build /opt/venv /opt/venv", "--from=build /opt/stdlib-bytecode/ /"]
    assert not [w for w, _ in final if w == "RUN"], "the runtime stage runs nothing as root"
    [user] = [rest for word, rest in final if word == "USER"]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) > 0 and gid.isdigit(), (
        "USER must be numeric and non-root (runAsNonRoot)"
    )
    assert int(uid) == 65532  # what the chart, the injector's patch and the examples run as
    assert ("ENTRYPOINT", '["grelmicro-sidecar"]') in final
    assert ("CMD", '["run"]') in final
    env = " ".join(rest for word, rest in final if word == "ENV")
    # Read-only root filesystem: never try to write bytecode at run time ...
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    # ... because it was compiled at build time (test_the_image_starts_from_bytecode...).
    assert any("bytecode.py" in rest for word, rest in steps if word == "RUN")


def test_build_context_holds_only_what_the_image_needs() -> None:
    ignore = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ignore[0] == "*", "exclude everything, then list what goes in"
    included = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for word, rest in _instructions():
        if word == "COPY" and not rest.startswith("--from"):
            *sources, _dest = rest.split()
            for source in sources:
                assert source.rstrip("/") in included, f"COPY {source} is excluded by .dockerignore"
                assert (ROOT / source).exists()


def _closure(name: str, extras: tuple[str, ...] = ()) -> dict[str, md.Distribution]:
    seen: dict[str, md.Distribution] = {}
    todo = [(name, extras)]
    while todo:
        dist_name, dist_extras = todo.pop()
        key = re.sub(r"[-_.]+", "-", dist_name).lower()
        if key in seen:
            continue
        dist = md.distribution(dist_name)
        seen[key] = dist
        for raw in dist.requires or []:
            req = Requirement(raw)
            wanted = dist_extras or ("",)
            if req.marker is not None and not any(
                req.marker.evaluate({"extra": e}) for e in wanted
            ):
                continue
            todo.append((req.name, tuple(req.extras)))
    return seen


def _installed_bytes(dist: md.Distribution) -> int:
    total = 0
    for f in dist.files or []:
        path = Path(str(dist.locate_file(f)))
        if path.is_file():
            total += path.stat().st_size
    return total


def test_the_sidecar_role_installs_two_small_dependencies() -> None:
    run_deps = _closure("grelmicro-sidecar")
    assert sorted(run_deps) == ["grelmicro-sidecar", "h11", "pyyaml"], (
        "the sidecar runs in every pod of every workload: a new runtime dependency belongs "
        "to an extra unless `run` cannot work without it"
    )
    third_party = sum(_installed_bytes(d) for k, d in run_deps.items() if k != "grelmicro-sidecar")
    injector = _closure("grelmicro-sidecar", ("injector",))
    injector_only = sum(_installed_bytes(d) for k, d in injector.items() if k not in run_deps)
    print(
        f"\nsidecar runtime dependencies (h11, PyYAML): {third_party / 1e6:.1f} MB installed; "
        f"the injector extra adds {len(injector) - len(run_deps)} distributions, {injector_only / 1e6:.1f} MB"
    )
    assert third_party < 6e6
    # The injector makes its own certificate (certificates.py): cryptography is its alone.
    assert {"kopf", "aiohttp", "cryptography"} <= set(injector) - set(run_deps)


PROBE = textwrap.dedent(
    """
    import os, signal, socket, sys, threading, time
    from sidecar.commands.cli import main

    out, port = sys.argv[1], int(sys.argv[2])

    def leading():
        # A bare socket: urllib would load the very modules this probe looks for.
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"GET /leader HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n")
            return s.recv(64).startswith(b"HTTP/1.1 200")

    def report():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if leading():
                    break
            except OSError:
                pass
            time.sleep(0.1)
        rss = next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmRSS"))
        with open(out, "w") as fh:
            fh.write(json.dumps({"modules": sorted(sys.modules), "rss_kb": int(rss)}))
        os.kill(os.getpid(), signal.SIGTERM)

    import json
    threading.Thread(target=report, daemon=True).start()
    sys.exit(main(sys.argv[3:]))
    """
)


def test_run_never_imports_the_injector_dependencies(
    cluster: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """The real `run` path, leading an election against the API server, then shutting down."""
    out = tmp_path / "modules.json"
    port = free_port()
    argv = [
        sys.executable,
        "-c",
        PROBE,
        str(out),
        str(port),
        "run",
        "--election=imports",
        f"--namespace={namespace}",
        "--identity=probe",
        f"--kubeconfig={cluster.kubeconfig}",
        f"--state-dir={tmp_path / 'state'}",
        f"--port={port}",
    ]
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(wait_for(lambda: out.exists() and out.read_text(), 5, "the probe's report"))
    modules = report["modules"]
    assert "sidecar.driver.elector" in modules and "h11" in modules  # it did run the sidecar
    loaded = [m for m in modules if any(m == p or m.startswith(p + ".") for p in INJECTOR_ONLY)]
    assert loaded == [], f"`run` imported injector-only modules: {loaded}"
    client = [m for m in modules if any(m == p or m.startswith(p + ".") for p in OFFICIAL_CLIENT)]
    assert client == [], f"`run` loaded the official client: {client}"
    heavy = [m for m in modules if m.split(".")[0] in NOT_ON_RUNS_PATH]
    assert heavy == [], f"`run` loaded modules it was cut from (memory, issue 15): {heavy}"
    print(
        f"\n`run` while leading: {len(modules)} modules, RSS {report['rss_kb'] / 1024:.1f} MiB "
        f"({time.monotonic() - started:.1f}s including shutdown)"
    )


def _layers(archive: Path, into: Path) -> list[Path]:
    """The layer tarballs of a docker-archive, base first, unpacked from it into ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-xf", str(archive), "-C", str(into)], check=True)
    [manifest] = json.loads((into / "manifest.json").read_text())
    return [into / layer for layer in manifest["Layers"]]


def _members(layer: Path) -> set[str]:
    listing = subprocess.run(["tar", "-tf", str(layer)], check=True, capture_output=True, text=True)
    return {name.removeprefix("./") for name in listing.stdout.splitlines()}


def _pod_files(rootfs: Path) -> None:
    """A service account's files where a pod has them (``/var/run`` may be a link to ``/run``)."""
    var_run = rootfs / "var" / "run"
    run_dir = rootfs / os.readlink(var_run).lstrip("/") if var_run.is_symlink() else var_run
    account = run_dir / "secrets" / "kubernetes.io" / "serviceaccount"
    account.mkdir(parents=True)
    (account / "token").write_text("not-a-token")
    (account / "namespace").write_text("default")
    ca = Path("/etc/ssl/certs/ca-certificates.crt").read_text()
    (account / "ca.crt").write_text(ca[: ca.index("-----END CERTIFICATE-----") + 26])


@pytest.mark.timeout(1800)  # builds the image when the cache has none (e2e builds it first)
def test_the_image_starts_from_bytecode_it_carries_itself(tmp_path: Path) -> None:
    """Nothing the sidecar loads is compiled when it starts, in a pod's setting.

    Its root filesystem is read-only, so a module without valid bytecode is
    compiled at every start of every sidecar. And the bytecode it loads is the
    image's own, never the base's: the official slim images ship the standard
    library without any, and their stand-in here has it (Debian's).
    The image's ``run`` goes from start to a graceful stop, in-cluster (a pod's
    service account, an API server that refuses), under ``chroot``.
    """
    if os.geteuid() != 0:
        pytest.skip("chroot needs root; CI runs as root")
    images.ensure_host_packages()
    product, base = images.product(), images.python_base()
    base_layers = len(_layers(base.path, tmp_path / "base"))
    layers = _layers(product.path, tmp_path / "product")
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    for layer in layers:
        subprocess.run(["tar", "-xf", str(layer), "-C", str(rootfs)], check=True)
    own = set().union(*(_members(layer) for layer in layers[base_layers:]))
    _pod_files(rootfs)
    env = {
        "PATH": "/opt/venv/bin:/usr/bin:/bin",
        "PYTHONDONTWRITEBYTECODE": "1",  # as the image's ENV
        "PYTHONVERBOSE": "1",  # every module loaded, and from what
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": "1",
    }
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    argv = ["grelmicro-sidecar", "run", "--election=bytecode", "--state-dir=/tmp/s", "--port=0"]
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(
            [
                "chroot",
                str(rootfs),
                "/usr/bin/env",
                "-i",
                *(f"{k}={v}" for k, v in env.items()),
                *argv,
            ],
            stdout=stdout,
            stderr=stderr,
        )
        try:
            # Its log and the interpreter's (PYTHONVERBOSE) both go to stderr.
            wait_for(lambda: '"starting"' in err.read_text(), 30, "the sidecar's start")
            time.sleep(1)  # a first read refused, and its retry
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, err.read_text()[-2000:]
        finally:
            proc.kill()
    loaded = re.findall(r"^# code object from '?([^'\n]+?)'?$", err.read_text(), re.M)
    compiled = [path for path in loaded if path.endswith(".py")]
    assert compiled == [], f"compiled at every start (no valid bytecode in the image): {compiled}"
    cached = [path for path in loaded if path.endswith(".pyc")]
    assert len(cached) > 100, cached  # it did load the sidecar, asyncio and TLS
    foreign = [path for path in cached if path.lstrip("/") not in own]
    assert foreign == [], f"bytecode from the base image, which the official one lacks: {foreign}"
