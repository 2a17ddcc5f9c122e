"""``ControlPlane.audit_events``: the reader the audit-log assertions of the cluster tests rely on.

CI failed ``test_no_permission_on_events`` with ``JSONDecodeError: Expecting
value: line 1 column 1`` on a log this reader had split with ``str.splitlines``:
an event quoting fuzzed input (the injector's denial of a hypothesis-made
annotation) held U+0085, which Go's JSON encoder writes raw and ``splitlines``
breaks on.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.cluster.controlplane import ControlPlane


def test_events_are_split_on_newlines_only_and_torn_lines_are_left_out(tmp_path: Path) -> None:
    plane = ControlPlane(tmp_path / "plane")
    plane.logs.mkdir(parents=True)
    nel = {"stage": "ResponseComplete", "responseStatus": {"message": "value 'a\u0085b\u2028c'"}}
    lines = [
        json.dumps({"stage": "ResponseComplete", "verb": "create"}),
        json.dumps(nel, ensure_ascii=False),  # as Go writes it: the characters raw
        '{"stage": "ResponseComplete", "verb": "upd',  # an API server killed mid-write
        json.dumps({"stage": "ResponseComplete", "verb": "delete"}),
    ]
    plane.audit_log.write_text("\n".join(lines) + "\n" + '{"stage": "Resp', encoding="utf-8")
    events = plane.audit_events()
    assert [e.get("verb") for e in events] == ["create", None, "delete"]
    assert events[1] == nel
