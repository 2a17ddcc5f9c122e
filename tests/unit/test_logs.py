"""Log lines: one JSON object each, the same for our records and for libraries' (pure)."""

from __future__ import annotations

import io
import json
import logging

from sidecar.kit.logs import Logger


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_fields_context_level_and_once() -> None:
    out = io.StringIO()
    log = Logger("info", stream=out, component="injector")
    log.debug("hidden")
    log.info("started", port=4040)
    for _ in range(3):
        log.once("403", "error", "forbidden", fix="grant it")
    log.forget("403")
    log.once("403", "error", "forbidden again")
    lines = _lines(out)
    assert [(r["level"], r["msg"]) for r in lines] == [
        ("info", "started"),
        ("error", "forbidden"),
        ("error", "forbidden again"),
    ]
    assert lines[0]["component"] == "injector" and lines[0]["port"] == 4040
    assert str(lines[0]["ts"]).endswith("Z") and "logger" not in lines[0]


def test_library_records_come_out_the_same_way_and_a_bad_one_is_kept() -> None:
    out = io.StringIO()
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        Logger("info", stream=out, component="injector").capture_libraries("warning")
        logging.getLogger("kopf.activities").warning("peering %s", "off")
        logging.getLogger("kopf.objects").info("below the level")
        logging.getLogger("aiohttp").error("%d items", "not a number")  # bad format string
        logging.getLogger("x").critical("boom")
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
    lines = _lines(out)
    assert [(r["logger"], r["level"], r["msg"]) for r in lines] == [
        ("kopf.activities", "warning", "peering off"),
        ("aiohttp", "error", "%d items"),
        ("x", "error", "boom"),
    ]
    assert all(r["component"] == "injector" for r in lines)


def test_a_closed_stream_never_raises() -> None:
    out = io.StringIO()
    out.close()
    Logger("info", stream=out).error("nobody reads this")
