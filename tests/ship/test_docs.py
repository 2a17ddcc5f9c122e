"""The docs site builds with ``--strict`` and no link of it or of README.md is dead.

The build and the checks are tests/ship/docs.py (``make docs``); this runs them on
the real tree, then shows that each check fails on what it is there to catch: a
check that cannot fail is no check.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from tests.ship import docs
from tests.ship.tools import MANIFESTS, ROOT

BLOB = f"{docs.REPO_URL}/blob/main/"
TREE = f"{docs.REPO_URL}/tree/main/"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = tmp_path_factory.mktemp("site")
    docs.build(built)
    return built


def test_the_site_builds_strict_and_no_link_is_dead(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert docs.problems(site) == []


def test_every_page_is_in_the_nav_and_the_nav_is_every_page() -> None:
    """What leaves README has a page, and no page is left unlisted (mkdocs --strict
    warns of the second; this names the pages the site promises)."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def pages(nav: list[object]) -> list[str]:
        found: list[str] = []
        for entry in nav:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            found += pages(value) if isinstance(value, list) else [str(value)]
        return found

    listed = [p for p in pages(config["nav"]) if not p.startswith("https://")]
    assert sorted(listed) == sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    for kept in ("contract.md", "reliability.md"):  # cited as "contract §N" by path
        assert kept in listed
    assert f"{BLOB}CHANGELOG.md" in pages(config["nav"])


def test_the_alerts_page_lists_exactly_the_shipped_rules() -> None:
    page = (ROOT / "docs" / "monitoring.md").read_text().split("## Alerts", 1)[1]
    listed = re.findall(r"^\| `(\w+)` \((critical|warning)\)", page, re.M)
    rules = yaml.safe_load((MANIFESTS / "prometheus-rules.yaml").read_text())
    shipped = [
        (rule["alert"], rule["labels"]["severity"])
        for group in rules["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]
    assert listed == shipped


def _project(tmp_path: Path) -> Path:
    """A copy of what the build reads, to break on purpose."""
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", root)
    shutil.copy(ROOT / "README.md", root)
    shutil.copytree(ROOT / "docs", root / "docs")
    return root


@pytest.mark.parametrize(
    ("page", "appended", "said"),
    [
        ("tuning.md", "[x](install.md#no-such-anchor)", "does not contain an anchor"),
        ("tuning.md", "[x](no-such-page.md)", "not found among documentation files"),
        ("tuning.md", "[x](../README.md)", "not found among documentation files"),
        ("unlisted.md", "# Not in the nav", 'not included in the "nav"'),
    ],
)
def test_a_strict_build_fails_on_a_dead_page_link(
    tmp_path: Path, page: str, appended: str, said: str
) -> None:
    root = _project(tmp_path)
    path = root / "docs" / page
    path.write_text((path.read_text() if path.exists() else "") + f"\n{appended}\n")
    with pytest.raises(RuntimeError, match=re.escape(said)):
        docs.build(tmp_path / "site", root)


def test_a_strict_build_fails_when_readme_loses_a_section_the_install_page_shows(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path)
    readme = root / "README.md"
    readme.write_text(readme.read_text().replace("[start:uninstall]", "[start:gone]"))
    with pytest.raises(RuntimeError, match="uninstall"):
        docs.build(tmp_path / "site", root)


def test_github_anchors_are_githubs() -> None:
    text = (
        "# Benchmark results\n## 4. Footprint\n```\n## not a heading\n```\n"
        "## The `lock` command: [run](x.md) it\n## Footprint\n## Footprint\n"
    )
    assert docs.github_anchors(text) == {
        "benchmark-results",
        "4-footprint",
        "the-lock-command-run-it",
        "footprint",
        "footprint-1",
    }


def test_file_links_name_what_the_tree_has() -> None:
    paths = docs.tree_paths()
    assert "bench/RESULTS.md" in paths and "bench" in paths
    assert ".venv" not in paths  # ignored: not on GitHub
    good = [
        f"{BLOB}bench/RESULTS.md",
        f"{BLOB}bench/RESULTS.md#4-footprint",
        f"{TREE}manifests/examples",
        f"{docs.REPO_URL}/edit/main/docs/install.md",
        docs.REPO_URL,
        f"{docs.REPO_URL}/issues/37",  # not a file: only GitHub knows
    ]
    for url in good:
        assert docs.check_file_link(url, paths) is None, url
    bad = {
        f"{BLOB}bench/NO-SUCH.md": "not a file or folder",
        f"{BLOB}bench/RESULTS.md#no-such-heading": "no heading with the anchor",
        f"{BLOB}manifests/examples": "is a folder",
        f"{TREE}manifests/rbac.yaml": "is a file",
        f"{BLOB}Makefile#L3": "not Markdown",
        f"{docs.REPO_URL}/blob/v0.1.0/README.md": "not main",
    }
    for url, said in bad.items():
        assert said in str(docs.check_file_link(url, paths)), url


def test_readme_links_into_the_site_and_the_tree_are_checked(site: Path) -> None:
    paths = docs.tree_paths()
    readme = f"""
[ok]({docs.SITE_URL}install/#lease-rbac) and {docs.SITE_URL} and [file]({BLOB}Makefile).
[a page]({docs.SITE_URL}no-such-page/) [an anchor]({docs.SITE_URL}install/#no-such-anchor)
[relative](manifests/rbac.yaml) [gone](manifests/gone.yaml) [here](#no-such-heading)
[file]({BLOB}gone.md) [elsewhere](https://pypi.org/project/grelmicro-sidecar/)
`{docs.SITE_URL}in-code-is-no-link/`

```sh
curl {docs.SITE_URL}in-a-block-is-no-link/
```
"""
    found = docs.readme_problems(readme, site, paths)
    assert len(found) == 5, found
    for said in ("no-such-page", "#no-such-anchor", "gone.yaml", "#no-such-heading", "gone.md"):
        assert any(said in line for line in found), said


def test_site_links_into_the_repository_are_checked(site: Path, tmp_path: Path) -> None:
    broken = tmp_path / "site"
    shutil.copytree(site, broken)
    page = broken / "tuning" / "index.html"
    page.write_text(
        page.read_text().replace("</article>", f'<a href="{BLOB}no/such/file.py">x</a></article>')
    )
    paths = docs.tree_paths()
    found = set(docs.site_problems(broken, paths)) - set(docs.site_problems(site, paths))
    assert len(found) == 1, found
    (line,) = found
    assert "no/such/file.py" in line and "tuning/index.html" in line, line
