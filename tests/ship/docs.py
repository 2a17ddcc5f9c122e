"""Builds the docs site and checks its links offline: ``python -m tests.ship.docs`` (``make docs``).

The site is ``mkdocs.yml`` over ``docs/``, built with ``--strict``. MkDocs'
own validation (``validation:`` in mkdocs.yml), made fatal by ``--strict``,
covers the links between pages and their anchors, the nav, and the snippets
taken from README.md. What it cannot see is checked here, on the built site
and on README.md:

- a link to a file of the repository, written
  ``https://github.com/grelinfo/grelmicro-sidecar/(blob|tree|edit|raw)/main/<path>``,
  names a path of the tree (tracked by git, or new and not ignored); with a
  fragment on a Markdown file, a heading that GitHub gives that anchor. The
  "Edit this page" links are checked the same way.
- README.md's links: a relative one names a path of the tree; one into the
  docs site (``https://grelinfo.github.io/grelmicro-sidecar/...``) names a
  page the build made and, with a fragment, an id on that page; one to the
  repository as above. README is read on GitHub and on PyPI, so it links by
  full address; a relative link works on GitHub only.

Not checked, because this runs offline and only the network knows them:
links anywhere else (PyPI, the HTML standard, ghcr.io), and addresses of the
repository that are not files of ``main`` (issues, releases). A link to a
file of another branch or tag is refused: link ``main`` so it can be checked.

``tests/ship/test_docs.py`` runs the same build and checks (``make test``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import unicodedata
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPO_URL = "https://github.com/grelinfo/grelmicro-sidecar"
SITE_URL = "https://grelinfo.github.io/grelmicro-sidecar/"
_FILE_LINK = re.compile(
    re.escape(REPO_URL) + r"/(blob|tree|edit|raw)/([^/#?]+)/([^#?]*)(?:#(.*))?$"
)


def build(site: Path, root: Path = ROOT) -> float:
    """``mkdocs build --strict`` of ``root``'s mkdocs.yml into ``site``; the seconds it
    took. A failed build raises with MkDocs' own output, which names each page and
    link at fault."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner, not a finding
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=root,  # mkdocs.yml's snippets are found from the repository root
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"mkdocs build --strict failed:\n{done.stdout}{done.stderr}")
    return time.monotonic() - started


def tree_paths(root: Path = ROOT) -> set[str]:
    """Every file git tracks or would track (new, not ignored), and every folder of one."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    paths: set[str] = set()
    for name in filter(None, listed.split("\0")):
        if not (root / name).exists():  # deleted in the work tree, not yet committed
            continue
        parts = name.split("/")
        paths.update("/".join(parts[:n]) for n in range(1, len(parts) + 1))
    return paths


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings: the heading's text,
    lower case, without punctuation, spaces as ``-``; a repeated one gets ``-1``, ``-2``."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not heading:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1)).lower()
        kept = "".join(
            c for c in text if c.isalnum() or c in " -_" or unicodedata.category(c).startswith("M")
        )
        slug = kept.replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def check_file_link(url: str, paths: set[str], root: Path = ROOT) -> str | None:
    """None when ``url`` (a link into the repository) names what exists, else why not."""
    found = _FILE_LINK.match(url)
    if not found:
        return None  # the repository itself, its issues or releases: only GitHub knows
    kind, ref, path, fragment = found.groups()
    path = path.rstrip("/")
    if ref != "main":
        return f"{url}: links {ref!r}, not main (only main's files can be checked here)"
    if path not in paths:
        return f"{url}: {path or '(empty path)'} is not a file or folder of the tree"
    if kind == "tree" and not (root / path).is_dir():
        return f"{url}: {path} is a file; link it with /blob/"
    if kind != "tree" and (root / path).is_dir():
        return f"{url}: {path} is a folder; link it with /tree/"
    if fragment:
        if not path.endswith(".md"):
            return f"{url}: a fragment on a file that is not Markdown cannot be checked"
        if fragment not in github_anchors((root / path).read_text()):
            return f"{url}: {path} has no heading with the anchor #{fragment}"
    return None


def check_site_link(url: str, site: Path) -> str | None:
    """None when ``url`` (a link into the docs site) names a built page and an id on it."""
    page, _, fragment = url.removeprefix(SITE_URL).partition("#")
    page = page.split("?", 1)[0]
    built = site / page / "index.html" if page == "" or page.endswith("/") else site / page
    if not built.is_file():
        return f"{url}: the site has no page {page or '/'} (built: {built.relative_to(site)})"
    if fragment and fragment not in _ids(built.read_text()):
        return f"{url}: page {page or '/'} has no anchor #{fragment}"
    return None


def _ids(html: str) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', html))


class _Hrefs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs.extend(v for k, v in attrs if k == "href" and v)


def site_links(site: Path) -> Iterator[tuple[str, str]]:
    """(page, href) of every ``<a href>`` of the built site."""
    for page in sorted(site.rglob("*.html")):
        parser = _Hrefs()
        parser.feed(page.read_text())
        for href in parser.hrefs:
            yield str(page.relative_to(site)), href


def markdown_links(markdown: str) -> list[str]:
    """The targets of a Markdown text's links: ``[text](target)`` and bare addresses,
    outside fenced code."""
    prose = re.sub(r"^(```|~~~).*?^\1", "", markdown, flags=re.M | re.S)
    prose = re.sub(r"(?<!\[)`[^`\n]*`(?!\])", "", prose)  # code spans, but not a link's text
    targets = [t.split()[0] for t in re.findall(r"\]\(([^)\s]+(?:\s+\"[^\"]*\")?)\)", prose)]
    bare = re.findall(r"(?<![(\[<\"])\bhttps?://[^\s)<>\]`\"]+", prose)
    return targets + [b.rstrip(".,;:") for b in bare]


def readme_problems(readme: str, site: Path, paths: set[str], root: Path = ROOT) -> list[str]:
    """What README's links name that does not exist."""
    found: list[str] = []
    for target in markdown_links(readme):
        if target.startswith(SITE_URL) or target.rstrip("/") == SITE_URL.rstrip("/"):
            problem = check_site_link(target if target.startswith(SITE_URL) else SITE_URL, site)
        elif target.startswith(REPO_URL):
            problem = check_file_link(target, paths, root)
        elif re.match(r"[a-z][a-z0-9+.-]*:", target):
            problem = None  # elsewhere: not checkable offline (module docstring)
        else:
            path, _, fragment = target.partition("#")
            path = path.removeprefix("./").rstrip("/")
            if path and path not in paths:
                problem = f"{target}: {path} is not a file or folder of the tree"
            elif fragment and fragment not in github_anchors(
                (root / path).read_text() if path else readme
            ):
                problem = f"{target}: no heading with the anchor #{fragment}"
            else:
                problem = None
        if problem:
            found.append(f"README.md: {problem}")
    return found


def site_problems(site: Path, paths: set[str], root: Path = ROOT) -> list[str]:
    """What the built site's links into the repository or the site name that does not
    exist, one line per problem with the pages that have it (the nav is on every page)."""
    found: dict[str, set[str]] = {}
    for page, href in site_links(site):
        if href.startswith(REPO_URL):
            problem = check_file_link(href, paths, root)
        elif href.startswith(SITE_URL):
            problem = check_site_link(href, site)
        else:
            problem = None
        if problem:
            found.setdefault(problem, set()).add(page)
    return [
        f"site: {problem} (on {', '.join(sorted(pages)[:3])}"
        + (f" and {len(pages) - 3} more)" if len(pages) > 3 else ")")
        for problem, pages in sorted(found.items())
    ]


def problems(site: Path) -> list[str]:
    """Every dead link of the built site and of README.md, one line each."""
    paths = tree_paths()
    readme = (ROOT / "README.md").read_text()
    return site_problems(site, paths) + readme_problems(readme, site, paths)


def main() -> int:
    site = ROOT / "site"
    try:
        seconds = build(site)
    except RuntimeError as failed:
        print(failed, file=sys.stderr)
        return 1
    dead = problems(site)
    for line in dead:
        print(line, file=sys.stderr, flush=True)
    pages = len(list(site.rglob("index.html")))
    ours = (REPO_URL, SITE_URL)
    checked = {h for _, h in site_links(site) if h.startswith(ours)}
    checked |= {t for t in markdown_links((ROOT / "README.md").read_text()) if t.startswith(ours)}
    print(
        f"docs: {pages} pages built in {seconds:.1f} s into {site.relative_to(ROOT)}/; "
        f"{len(checked)} distinct links into the site or the repository checked, "
        f"{len(dead)} dead"
    )
    return 1 if dead else 0


if __name__ == "__main__":
    sys.exit(main())
