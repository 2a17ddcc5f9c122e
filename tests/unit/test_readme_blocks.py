"""tests/e2e/readme.py's block(): the commands under a README heading, exactly as written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.readme import MissingBlock, block

README = """\
# Project

## Install on your cluster

Some words.

```yaml
not: this
```

```sh
helm install x oci://ghcr.io/a/b \\
  --version 1.0.0
kubectl get leases
```

```sh
not the first block
```

## Upgrade

Words, no block.

### A sub-heading

```sh
helm upgrade x
```

## Uninstall
"""


def test_the_first_sh_block_under_the_heading_verbatim(tmp_path: Path) -> None:
    path = tmp_path / "README.md"
    path.write_text(README)
    assert block("## Install on your cluster", path) == (
        "helm install x oci://ghcr.io/a/b \\\n  --version 1.0.0\nkubectl get leases\n"
    )
    # A sub-heading is part of its section; the next heading of the same level ends it.
    assert block("## Upgrade", path) == "helm upgrade x\n"


def test_a_missing_heading_or_block_is_named_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "README.md"
    path.write_text(README)
    with pytest.raises(MissingBlock, match=r"^README.md has no heading '## Install'$"):
        block("## Install", path)
    with pytest.raises(MissingBlock, match=r"^README.md has no ```sh block under '## Uninstall'$"):
        block("## Uninstall", path)
