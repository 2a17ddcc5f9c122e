"""Kubeconfig files as kubectl reads them: which files, and the entries they merge into.

Guarantees: client-go's loading rules and merge (contract §7 "Kubeconfig"); an
entry keeps the file that wrote it, for its relative paths and its messages;
every problem is a ``ConfigError`` of one line naming the file and the field.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .apiconfig import ConfigError

#: Why a path with a leading ``~`` or ``~user`` cannot be read.
NO_HOME = (
    "names a home directory this process does not have (an unknown user, or no $HOME); "
    "give the full path"
)


def _home_expanded(value: str) -> str | None:
    """``value`` with a leading ``~`` or ``~user`` expanded, as a shell would; None when this
    process has no such home (pathlib's ``expanduser`` raises RuntimeError there instead)."""
    expanded = os.path.expanduser(value)
    return None if expanded.startswith("~") else expanded


def _kubeconfig_path(value: str) -> Path:
    if (expanded := _home_expanded(value)) is None:
        raise ConfigError(f"kubeconfig {value!r} {NO_HOME}")
    return Path(expanded)


def files(explicit: str | None) -> list[Path]:
    """The kubeconfig files to read, in precedence order (the first that sets a value wins)."""
    if explicit:
        return [_kubeconfig_path(explicit)]
    if env := os.environ.get("KUBECONFIG"):  # the caller skips missing files; a repeat is read once
        return list(dict.fromkeys(_kubeconfig_path(p) for p in env.split(os.pathsep) if p))
    # A UID with no passwd entry and no $HOME (the image's 65532) has no home file.
    home = _home_expanded("~")
    return [] if home is None else [Path(home) / ".kube" / "config"]


def label(paths: list[Path]) -> str:
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
        if value is not None and not isinstance(value, str):
            raise self.error(f"{self.kind}.{key} must be a string, not {type(value).__name__}")
        return value or None

    def path(self, key: str) -> str | None:
        """A file named by ``key``; a relative path is from the folder of the file that named it."""
        value = self.text(key)
        if value is None:
            return None
        if (expanded := _home_expanded(value)) is None:
            raise self.error(f"{self.kind}.{key} {value!r} {NO_HOME}")
        return str(self.origin.parent / expanded)

    def pem(self, key: str) -> tuple[str | None, bytes | None]:
        """(path, data) of a ``<key>`` / ``<key>-data`` pair; the data wins, as in kubectl."""
        data = self.text(f"{key}-data")
        if data is None:
            return self.path(key), None
        try:
            return None, base64.b64decode(data, validate=True)
        except ValueError:
            raise self.error(f"{self.kind}.{key}-data is not base64") from None

    def strings(self, key: str) -> tuple[str, ...]:
        value = [] if self.body.get(key) is None else self.body[key]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(f"{self.kind}.{key} must be a list of strings")
        return tuple(value)


def read(paths: list[Path]) -> tuple[str | None, dict[tuple[str, str], Entry]]:
    """(current-context, entries by kind and name): the first file to set either wins."""
    documents = [(path, _document(path)) for path in paths]
    if all(data is None for _, data in documents):
        raise ConfigError(f"kubeconfig {label(paths)} is empty; is it the right file?")
    current: str | None = None
    entries: dict[tuple[str, str], Entry] = {}
    for path, data in ((p, d or {}) for p, d in documents):
        at = f"kubeconfig {path}:"
        now = data.get("current-context")
        if now is not None and not isinstance(now, str):
            raise ConfigError(f"{at} current-context must be a string")
        current = current or now or None
        for kind in ("cluster", "user", "context"):
            items = data.get(f"{kind}s")
            if items is not None and not isinstance(items, list):
                raise ConfigError(f"{at} {kind}s must be a list, not {type(items).__name__}")
            for item in items or []:
                name = item.get("name") if isinstance(item, dict) else None
                if not isinstance(name, str) or (kind, name) in entries:
                    continue  # a later file's entry of that name is not used, not even in part
                body = item.get(kind)
                if body is not None and not isinstance(body, dict):
                    raise ConfigError(f"{at} {kind} {name!r} must be a mapping")
                entries[kind, name] = Entry(kind, name, body or {}, path)
    return current, entries


def _document(path: Path) -> dict[str, Any] | None:
    """One file's mapping; None for an empty file (it adds nothing to a merge)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read kubeconfig {path}: {err.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"kubeconfig {path} is not UTF-8 text; is it the right file?") from None
    if not text.strip():
        return None
    try:
        data: Any = json.loads(text)
    except ValueError:
        import yaml  # only for a file that is not JSON: a pod reads no kubeconfig

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"kubeconfig {path} is not valid YAML{where}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"kubeconfig {path} is not a kubeconfig (expected a mapping)")
    return data
