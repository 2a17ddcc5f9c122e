"""Build-time only (Dockerfile): bytecode for everything the image's commands import.

The runtime image cannot write bytecode (read-only root filesystem,
``PYTHONDONTWRITEBYTECODE``), so whatever has no valid ``.pyc`` there is
compiled again at every start, in every pod. Two ways that happens, both
closed here:

- the virtualenv's ``.pyc`` were checked against the sources' mtimes, and a
  ``COPY --from`` may not keep mtimes (buildah's did not): every one was stale.
  They are written as checked-hash ``.pyc`` (PEP 552): valid whatever a copy
  does to mtimes, still re-checked against the source's content;
- the official ``python:*-slim`` images ship the standard library without any
  ``.pyc``. The standard-library modules the commands import are compiled into
  a mirror tree (``<out>/usr/.../__pycache__/...``) that the runtime stage
  copies over ``/``; only those, not the whole library.

Usage: ``python bytecode.py <virtualenv> <out>``.
"""

from __future__ import annotations

import compileall
import importlib.util
import py_compile
import sys
import sysconfig
from pathlib import Path

#: What the image runs: ``run``/``lock`` and ``status``/``cleanup`` (``cli``), the injector
#: (``operator`` imports kopf), and what they import only when needed (lock's scratch state
#: directory and its guard, a kubeconfig file in YAML).
COMMAND_MODULES = (
    "sidecar.commands.cli",
    "sidecar.commands.run",
    "sidecar.injector.main",
    "sidecar.injector.operator",
    "shutil",
    "tempfile",
    "ctypes",
    "yaml",
)
CHECKED = py_compile.PycInvalidationMode.CHECKED_HASH


def main(venv: Path, out: Path) -> int:
    # force: pip wrote mtime-checked bytecode that is current here, and would be kept as it is.
    lib = venv / "lib"
    if not compileall.compile_dir(lib, quiet=1, force=True, workers=0, invalidation_mode=CHECKED):
        return 1
    for name in COMMAND_MODULES:
        __import__(name)
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    compiled = 0
    for module in list(sys.modules.values()):
        source = getattr(module, "__file__", None)
        if not source or not source.endswith(".py"):
            continue
        path = Path(source)  # as imported: a symlink's bytecode is looked up by its own name
        if stdlib not in path.resolve().parents and stdlib not in path.parents:
            continue
        if "site-packages" in path.parts:
            continue
        cache = Path(importlib.util.cache_from_source(str(path)))
        py_compile.compile(
            str(path),
            cfile=str(out / cache.relative_to("/")),
            doraise=True,
            invalidation_mode=CHECKED,
        )
        compiled += 1
    print(f"bytecode: the virtualenv and {compiled} standard-library modules", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
