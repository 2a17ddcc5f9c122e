"""The e2e apps' leadership check catches what it must and nothing else (pure logic)."""

from __future__ import annotations

from tests.e2e.observer import Answer, handovers, leaderless, overlaps, parse


def _run(start: float, code: str, token: int | None, n: int, step: float = 0.25) -> list[Answer]:
    return [Answer(start + i * step, start + i * step + 0.01, code, token) for i in range(n)]


def test_parse_reads_the_apps_lines_and_skips_anything_else() -> None:
    log = "view 10.0 10.1 200 3\nstarting\nview 10.3 10.4 000 -\nview 1 2\n"
    assert parse(log) == [Answer(10.0, 10.1, "200", 3), Answer(10.3, 10.4, "000", None)]


def test_a_clean_handover_has_no_overlap_and_its_gap_is_measured() -> None:
    views = {
        "a": _run(0.0, "200", 1, 4) + _run(1.0, "503", None, 4),
        "b": _run(0.1, "503", None, 5) + _run(1.35, "200", 2, 4),
    }
    assert overlaps(views) == []
    [(old, new, gap)] = handovers(views)
    assert (old, new) == ("a", "b")
    assert 0.5 < gap < 0.7


def test_a_200_inside_another_pods_run_is_an_overlap() -> None:
    views = {"a": _run(0.0, "200", 1, 8), "b": [Answer(0.8, 0.82, "200", 2)]}
    [found] = overlaps(views)
    assert found.startswith("b was told it leads (token 2)")


def test_answers_far_apart_or_with_another_token_do_not_prove_a_run() -> None:
    # a was silent (frozen) for 10 s between two 200s: it may have lost and regained.
    far = [Answer(0.0, 0.01, "200", 1), Answer(10.0, 10.01, "200", 1)]
    assert overlaps({"a": far, "b": [Answer(5.0, 5.01, "200", 2)]}) == []
    changed = [Answer(0.0, 0.01, "200", 1), Answer(0.25, 0.26, "200", 2)]
    assert overlaps({"a": changed, "b": [Answer(0.1, 0.11, "200", 3)]}) == []


def test_leaderless_finds_every_silence_longest_first_a_handover_or_not() -> None:
    views = {
        # a leads, falls silent for 3 s (no change of pod: handovers cannot see it), leads again
        "a": _run(0.0, "200", 1, 4) + _run(4.0, "200", 1, 4),
        # ... then b after a 1.2 s handover
        "b": _run(6.0, "200", 2, 4),
    }
    assert handovers(views) == [("a", "b", handovers(views)[0][2])]
    gaps = leaderless(views)
    assert [round(to - start, 2) for start, to in gaps[:2]] == [3.24, 1.24]
    assert all(to - start < 0.25 for start, to in gaps[2:])  # the polling in between
