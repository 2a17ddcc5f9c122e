"""README.md says what the code does: its commands, paths, annotations, fields and metrics exist."""

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


def test_every_make_target_it_names_exists() -> None:
    targets = set(re.findall(r"^([a-z][a-z-]*):", MAKEFILE, re.M))
    for line in re.findall(r"make ([a-z][a-z -]*)", README):
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
            ):
                assert word in targets, word


def test_every_repository_path_it_names_exists() -> None:
    paths = set(re.findall(r"\]\((?!https?:)([^)]+)\)", README))  # markdown links
    paths |= set(re.findall(r"`((?:manifests|charts|hack|tests|sidecar|bench)/[\w./-]*)`", README))
    assert paths
    for path in paths:
        assert (ROOT / path).exists(), path


def test_annotation_reference_lists_exactly_the_known_annotations() -> None:
    section = README.split("## Annotations", 1)[1].split("\n## ", 1)[0]
    keys = re.findall(r"^\| `([a-z-]+)` \|", section, re.M)
    assert [PREFIX + k for k in keys] == list(KNOWN)


def _state_written_by_a_real_sidecar(tmp_path: Path) -> dict[str, object]:
    """state.json as ``grelmicro-sidecar run`` writes it at start-up (the API server it
    is pointed at is down, which it rides out; the file comes first anyway)."""
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


def _documented_fields(text: str) -> set[str]:
    """The state file's fields as a document's field table lists them."""
    section = text.split("### State file", 1)[1].split("\n### ", 1)[0]
    return {
        f
        for cell in re.findall(r"^\| (`[^|]+`) \|", section, re.M)
        for f in re.findall(r"`(\w+)`", cell)
    }


def test_state_file_fields_and_metrics_are_the_real_ones(tmp_path: Path) -> None:
    written = set(_state_written_by_a_real_sidecar(tmp_path))
    assert set(re.findall(r'^  "(\w+)":', README, re.M)) == written  # README's example file
    assert _documented_fields(CONTRACT) == written  # the contract's field table
    rendered = Metrics("leader-x").render()
    for name in re.findall(r"`((?:leader_election|grelmicro_sidecar)_\w+)", README + CONTRACT):
        assert f"# TYPE {name} " in rendered, name


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
