"""Kubeconfig files as kubectl reads them: which files, and the one document they merge into.

Which files (client-go's loading rules): ``--kubeconfig`` alone, and it must
exist; else every file of ``$KUBECONFIG`` (a list separated by ``os.pathsep``;
missing files are skipped, a repeated one is read once); else
``~/.kube/config``. ``files`` lists the candidates; ``Kubeconfig.read``
merges those that exist.

The merge is kubectl's: for ``clusters``, ``users`` and ``contexts`` the first
file that names an entry wins, whole (nothing of a later file's entry of that
name is used); ``current-context`` comes from the first file that sets it. An
empty file adds nothing. Each entry keeps the file it came from: its relative
paths are resolved from that file's folder.

Guarantees: every problem is a ``ConfigError`` of one line naming the file and
the field; nothing here touches the network or imports the official client.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .apiconfig import ConfigError

SECTIONS = ("clusters", "users", "contexts")


def files(explicit: str | None) -> list[Path]:
    """The kubeconfig files to read, in precedence order (the first that sets a value wins)."""
    if explicit:
        return [Path(explicit).expanduser()]
    env = os.environ.get("KUBECONFIG")
    if env:
        paths = [Path(p).expanduser() for p in env.split(os.pathsep) if p]
        return list(dict.fromkeys(paths))
    home = os.path.expanduser("~")
    # A UID with no passwd entry and no $HOME (the image's 65532) has no home file.
    return [] if home.startswith("~") else [Path(home) / ".kube" / "config"]


def label(paths: list[Path]) -> str:
    """How messages name a list of files."""
    return os.pathsep.join(str(p) for p in paths)


@dataclass
class Entry:
    """One named cluster, user or context, as the file that defined it wrote it."""

    kind: str  # "cluster", "user", "context"
    name: str
    body: dict[str, Any]
    origin: Path

    def error(self, message: str) -> ConfigError:
        return ConfigError(f"kubeconfig {self.origin}: {message}")

    def text(self, key: str) -> str | None:
        value = self.body.get(key)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise self.error(f"{self.kind}.{key} must be a string, not {type(value).__name__}")
        return value

    def path(self, key: str) -> Path | None:
        """A file named by ``key``; a relative path is from the folder of the file that named it."""
        value = self.text(key)
        if value is None:
            return None
        path = Path(value).expanduser()
        return path if path.is_absolute() else self.origin.parent / path

    def pem(self, key: str) -> tuple[str | None, bytes | None]:
        """(path, data) of a ``<key>`` / ``<key>-data`` pair; the data wins, as in kubectl."""
        data = self.text(f"{key}-data")
        if data is not None:
            try:
                return None, base64.b64decode(data, validate=True)
            except ValueError:
                raise self.error(f"{self.kind}.{key}-data is not base64") from None
        path = self.path(key)
        return (str(path) if path is not None else None), None

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.body.get(key)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(f"{self.kind}.{key} must be a list of strings")
        return tuple(value)


class Kubeconfig:
    """Kubeconfig files merged as kubectl merges them."""

    def __init__(self, paths: list[Path]):
        self.paths = paths
        self.current_context: str | None = None
        self._entries: dict[str, dict[str, Entry]] = {s: {} for s in SECTIONS}

    @property
    def label(self) -> str:
        return label(self.paths)

    @classmethod
    def read(cls, paths: list[Path]) -> Kubeconfig:
        merged = cls(paths)
        documents = [(path, _document(path)) for path in paths]
        if all(data is None for _, data in documents):
            raise ConfigError(f"kubeconfig {merged.label} is empty; is it the right file?")
        for path, data in documents:
            if data is not None:
                merged._add(path, data)
        return merged

    def _add(self, path: Path, data: dict[str, Any]) -> None:
        current = data.get("current-context")
        if current is not None and not isinstance(current, str):
            raise ConfigError(f"kubeconfig {path}: current-context must be a string")
        if self.current_context is None and current:
            self.current_context = current
        for section in SECTIONS:
            items = data.get(section)
            if items is not None and not isinstance(items, list):
                raise ConfigError(
                    f"kubeconfig {path}: {section} must be a list, not {type(items).__name__}"
                )
            known = self._entries[section]
            for item in items or []:
                name = item.get("name") if isinstance(item, dict) else None
                if not isinstance(name, str) or name in known:
                    continue  # the first file to name it wins, whole
                kind = section[:-1]
                body = item.get(kind)
                if body is not None and not isinstance(body, dict):
                    raise ConfigError(f"kubeconfig {path}: {kind} {name!r} must be a mapping")
                known[name] = Entry(kind, name, body or {}, path)

    def entry(self, section: str, name: str) -> Entry:
        found = self._entries[section].get(name)
        if found is None:
            raise ConfigError(f"kubeconfig {self.label}: no {section[:-1]} named {name!r}")
        return found


def _document(path: Path) -> dict[str, Any] | None:
    """One file's mapping; None for an empty file (it adds nothing to a merge)."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read kubeconfig {path}: {err.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"kubeconfig {path} is not UTF-8 text; is it the right file?") from None
    if not text.strip():
        return None
    try:
        data: Any = json.loads(text)
    except ValueError:
        try:
            import yaml  # only development setups read YAML; pods never import it
        except ImportError:  # pragma: no cover - pyyaml is a dependency
            raise ConfigError(f"kubeconfig {path} is YAML but PyYAML is not installed") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"kubeconfig {path} is not valid YAML{where}") from None
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ConfigError(f"kubeconfig {path} is not a kubeconfig (expected a mapping)")
    return data
