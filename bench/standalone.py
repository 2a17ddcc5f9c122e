"""One scenario on a control plane of its own: ``python -m bench.crowd``, ``bench.thousand``.

What ``python -m bench`` does around its scenarios, for one run alone: the
source measured (taken before the run), the client-go peer built, the
sidecar compiled to bytecode as the image's build does, a throwaway control
plane with each implementation's namespace, every candidate killed on exit,
and the result written as JSON beside the machine and the load. The work
directory goes unless ``BENCH_KEEP_WORKDIR`` is set (the audit log and every
candidate's log).
"""

from __future__ import annotations

import compileall
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import peers
from .harness import IMPLS, AuditLog, Credentials, cleanup_on_exit, loadavg
from .provenance import machine, source

#: ``scenario(plane, workdir, creds, audit)``: the measured result.
Scenario = Callable[[Any, Path, Credentials, AuditLog], Any]


def json_default(obj: Any) -> Any:
    """Tuples and sets as lists: what ``json.dumps`` refuses in the results."""
    if isinstance(obj, tuple | set):
        return list(obj)
    raise TypeError(type(obj))


def run_alone(name: str, key: str, scenario: Scenario, out: Path) -> Any:
    """Run ``scenario`` on its own control plane; write ``{..., key: result}`` to ``out``."""
    import sidecar
    from tests.cluster import ControlPlane

    measured = source()
    peers.ensure_clientgo()
    compileall.compile_dir(str(Path(sidecar.__file__).parent), quiet=1)
    load_start = loadavg()
    workdir = Path(tempfile.mkdtemp(prefix=f"grelmicro-{name}-"))
    plane = ControlPlane(workdir / "controlplane")
    plane.start()
    try:
        for impl in IMPLS.values():
            plane.kubectl("create", "namespace", impl.namespace)
        creds = Credentials(plane, workdir / "creds")
        with cleanup_on_exit():
            result = scenario(plane, workdir, creds, AuditLog(plane.audit_log))
    finally:
        plane.stop()
        if os.environ.get("BENCH_KEEP_WORKDIR"):
            print(f"[bench] {time.strftime('%H:%M:%S')} kept {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    data = {
        "source": measured,
        "machine": machine(),
        "loadavg_start": load_start,
        "loadavg_end": loadavg(),
        key: result,
    }
    out.write_text(json.dumps(data, indent=1, default=json_default) + "\n")
    return result
