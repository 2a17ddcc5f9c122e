"""README.md and the docs site say what the code does: their commands, paths, annotations, fields and metrics exist.

README.md is the front door (what it is, install, first use); the reference
moved to the docs site (docs/, tests/ship/test_docs.py builds it), so each
check reads the page its content lives on now.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

from sidecar.driver.metrics import Metrics
from sidecar.injector.annotations import KNOWN, PREFIX
from tests.ship.tools import ROOT
from tests.sidecar.proc import BIN

README = (ROOT / "README.md").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()
CONTRACT = (ROOT / "docs" / "contract.md").read_text()
PAGES = {p.name: p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))}
GITHUB_FILE = re.compile(
    r"https://github\.com/grelinfo/grelmicro-sidecar/(?:blob|tree)/main/([\w./-]+)"
)


def test_the_two_commands_for_a_fresh_machine() -> None:
    block = (
        README.split("## Two commands on a fresh machine", 1)[1]
        .split("```sh", 1)[1]
        .split("```", 1)[0]
    )
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["make demo", "make test"]
    assert "demo: binaries\n\t$(PY) -m tests.demo" in MAKEFILE
    assert "## Development" in README


# The install steps of issue 37, word for word: the end-to-end test of the released
# chart runs exactly these, so README may not drift from them.
INSTALL = """\
helm install grelmicro-sidecar oci://ghcr.io/grelinfo/charts/grelmicro-sidecar \\
  --version 0.1.0 --namespace grelmicro-system --create-namespace --wait
kubectl create rolebinding grelmicro-sidecar --namespace my-app \\
  --clusterrole=grelmicro-sidecar-leases --serviceaccount=my-app:default
kubectl patch deployment my-app --namespace my-app --patch \\
  '{"spec":{"template":{"metadata":{"annotations":{"leader-election.grelmicro.io/inject":"true"}}}}}'
kubectl rollout status deployment/my-app --namespace my-app
kubectl wait lease/leader-my-app --namespace my-app --for=create --timeout=1m
kubectl get leases --namespace my-app
"""


def _section(heading: str) -> str:
    assert f"\n{heading}\n" in README, heading
    return README.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def test_readme_is_a_front_door_under_400_lines() -> None:
    """The reference lives on the docs site; README says what it is, how to install it
    and what the app sees, and the first screen is the first of those."""
    lines = README.splitlines()
    assert len(lines) < 400, len(lines)
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[:4] == [
        "## Install on your cluster",
        "## What your app sees",
        "## Upgrade",
        "## Uninstall",
    ], headings
    assert lines.index("## Install on your cluster") < 50  # the second screen


def test_install_block_is_the_one_the_release_e2e_runs() -> None:
    section = _section("## Install on your cluster")
    assert section.split("```sh\n", 1)[1].split("```", 1)[0] == INSTALL
    before = section.split("```sh", 1)[0]
    for needed in ("Kubernetes 1.30", "helm 3.8", "Deployment"):
        assert needed in before, needed
    after = section.split("```sh", 1)[1].split("```", 1)[1]
    assert "kubectl label namespace my-app leader-election.grelmicro.io/inject=enabled" in after
    assert 'leader-election.grelmicro.io/inject: "false"' in after


def test_upgrade_and_uninstall_each_have_one_sh_block() -> None:
    for heading, first in (
        (
            "## Upgrade",
            "helm upgrade grelmicro-sidecar oci://ghcr.io/grelinfo/charts/grelmicro-sidecar",
        ),
        ("## Uninstall", "helm uninstall grelmicro-sidecar --namespace grelmicro-system"),
    ):
        section = _section(heading)
        assert section.count("```sh\n") == 1, heading
        block = section.split("```sh\n", 1)[1].split("```", 1)[0]
        assert block.startswith(first), (heading, block)


def test_every_make_target_it_names_exists() -> None:
    targets = set(re.findall(r"^([a-z][a-z-]*):", MAKEFILE, re.M))
    for line in re.findall(r"make ([a-z][a-z -]*)", README + "".join(PAGES.values())):
        for word in line.split():
            if word in (
                "demo",
                "test",
                "setup",
                "test-fast",
                "lint",
                "typecheck",
                "manifests",
                "bench",
                "kind-e2e",
                "docs",
            ):
                assert word in targets, word


def test_every_repository_path_it_names_exists() -> None:
    """README's and the pages' paths: relative links in README, links to the repository
    on GitHub, and paths in code spans (tests/ship/docs.py checks every link too)."""
    paths = set(re.findall(r"\]\((?!https?:)([^)#]+)\)", README))  # README's relative links
    for text in [README, *PAGES.values()]:
        paths |= set(GITHUB_FILE.findall(text))
        paths |= set(
            re.findall(r"`((?:manifests|charts|hack|tests|sidecar|bench|docs)/[\w./-]*)`", text)
        )
    assert len(paths) > 20, paths
    for path in paths:
        assert (ROOT / path).exists(), path


def test_annotation_reference_lists_exactly_the_known_annotations() -> None:
    section = PAGES["annotations.md"].split("# Annotations", 1)[1].split("\n## ", 1)[0]
    keys = re.findall(r"^\| `([a-z-]+)` \|", section, re.M)
    assert [PREFIX + k for k in keys] == list(KNOWN)


def _state_written_by_a_real_sidecar(tmp_path: Path, *flags: str) -> dict[str, object]:
    """state.json as ``grelmicro-sidecar run [flags]`` writes it at start-up (the API server
    it is pointed at is down, which it rides out; the file comes first anyway)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    state = tmp_path / "state" / "state.json"
    proc = subprocess.Popen(
        [
            str(BIN),
            "run",
            "--election=readme",
            "--namespace=default",
            f"--kubeconfig={kubeconfig}",
            f"--state-dir={state.parent}",
            "--port=0",
            *flags,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not state.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "no state.json written"
            time.sleep(0.05)
        written: dict[str, object] = json.loads(state.read_text())
        return written
    finally:
        proc.terminate()
        proc.wait(10)


def _documented_fields(text: str, heading: str = "### State file") -> set[str]:
    """The state file's fields as a document's field table lists them."""
    level = heading.split(" ", 1)[0]
    section = text.split(heading + "\n", 1)[1].split(f"\n{level} ", 1)[0]
    return {
        f
        for cell in re.findall(r"^\| (`[^|]+`) \|", section, re.M)
        for f in re.findall(r"`(\w+)`", cell)
    }


def test_state_file_fields_and_metrics_are_the_real_ones(tmp_path: Path) -> None:
    written = set(_state_written_by_a_real_sidecar(tmp_path))
    # A sharded election's file has one more field, its shards (contract §4): the contract
    # documents both; the application page's example and README's are a plain election's.
    sharded = set(_state_written_by_a_real_sidecar(tmp_path / "sharded", "--shards=2"))
    assert sharded - written == {"shards"}, sharded ^ written
    application = PAGES["application.md"]
    assert set(re.findall(r'^  "(\w+)":', application, re.M)) == written  # the example file
    assert _documented_fields(CONTRACT) == sharded  # the contract's field table
    assert _documented_fields(application, "## The state file") == written
    # README's short version names fields in code spans: each one is written.
    front = README.split("## What your app sees", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([a-z]+(?:_[a-z]+)+)`", front))
    assert named and named <= written, named - written
    rendered = Metrics("leader-x").render()
    text = README + "".join(PAGES.values())
    for name in re.findall(r"`((?:leader_election|grelmicro_sidecar)_\w+)", text):
        assert f"# TYPE {name} " in rendered, name


def test_the_metrics_page_lists_every_metric_a_sidecar_serves() -> None:
    section = PAGES["monitoring.md"].split("## Metrics", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `(\w+)` \| (\w+) \|", section, re.M)
    served = re.findall(r"^# TYPE (\w+) (\w+)$", Metrics("leader-x").render(), re.M)
    assert listed == served


def test_every_contract_reference_names_a_section_that_exists() -> None:
    sections = set(re.findall(r"^## (\d+)\. ", CONTRACT, re.M))
    cited: dict[str, str] = {}
    for path in ROOT.glob("**/*"):
        if path.suffix not in (".py", ".md", ".yaml", ".tpl", ".sh") or ".venv" in path.parts:
            continue
        for match in re.finditer(r"contract\s+§(\d+)", path.read_text()):
            cited[match.group(1)] = str(path.relative_to(ROOT))
    assert cited, "nothing cites the contract"
    assert set(cited) <= sections, {n: p for n, p in cited.items() if n not in sections}
    old = "SPEC" + " §"  # the brief outside the repository, no longer cited
    assert old not in "".join(p.read_text() for p in ROOT.glob("**/*.py") if ".venv" not in p.parts)
