"""README.md says what the code does: its commands, paths, annotations, fields and metrics exist."""

from __future__ import annotations

import re

from sidecar.injector.annotations import KNOWN, PREFIX
from sidecar.publish.metrics import Metrics
from tests.ship.tools import ROOT

README = (ROOT / "README.md").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()


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


def test_state_file_fields_and_metrics_are_the_real_ones() -> None:
    from sidecar.runner import Sidecar

    fields = set(re.findall(r'^  "(\w+)":', README, re.M))
    # The fields the sidecar writes, read from its snapshot's source.
    import inspect

    source = inspect.getsource(Sidecar.snapshot)
    assert fields == set(re.findall(r'"(\w+)":', source)), fields
    rendered = Metrics("leader-x").render()
    for name in re.findall(r"`((?:leader_election|grelmicro_sidecar)_\w+)", README):
        assert f"# TYPE {name} " in rendered, name
