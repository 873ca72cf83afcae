"""The bomb corpus (tests/bombs/*.j2, loaded by tests/template_bombs.py) through the agent's
render path: every bomb fails in ≤ 3 s with its own error and the template line it names,
the agent's peak RSS grows by ≤ 50 MB, no thread of the agent stalls for more than 0.5 s, and
the agent renders again right after.  Measured in a separate process per mode so one bomb's
peak is not another's (docs/design/template-safety.md has the table)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.template_bombs import Bomb, corpus, run_measure

BOMBS = {b.file: b for b in corpus()}


@pytest.fixture(scope="module")
def through_workers() -> dict[str, dict[str, Any]]:
    return {r["file"]: r for r in run_measure("process")}


@pytest.fixture(scope="module")
def in_the_agent() -> dict[str, dict[str, Any]]:
    return {r["file"]: r for r in run_measure("thread")}


def _table(results: dict[str, dict[str, Any]]) -> str:
    rows = ["| bomb | time to fail | agent peak RSS growth | worker peak RSS | worst stall |"]
    for file, r in sorted(results.items()):
        rows.append(
            f"| `{file}` | {r['seconds']:.2f} s | {r['agent_mib']:.1f} MiB | "
            f"{r['worker_mib']:.0f} MiB | {r['stall'] * 1000:.0f} ms |"
        )
    return "\n".join(rows)


def _check(bomb: Bomb, r: dict[str, Any]) -> None:
    assert bomb.expect in r["error"], r
    assert r["template"] == bomb.name(), r
    assert r["line"] == bomb.line, r
    assert r["seconds"] <= 3.0, r
    assert r["stall"] <= 0.5, r
    assert r["still_renders"], r


def test_the_corpus_is_what_the_docs_say() -> None:
    assert len(BOMBS) >= 30
    assert {b.file for b in BOMBS.values() if b.needs_worker} == {
        "compare_lists.j2",
        "hash_tuples.j2",
        "sort_lists.j2",
        "split_items.j2",
    }


@pytest.mark.parametrize("file", sorted(BOMBS))
def test_every_bomb_fails_fast_and_named_and_the_agent_stays_small(
    file: str, through_workers: dict[str, dict[str, Any]]
) -> None:
    r = through_workers[file]
    _check(BOMBS[file], r)
    assert r["agent_mib"] <= 50, r
    if file == sorted(BOMBS)[-1]:
        print("\nthrough the render workers:\n" + _table(through_workers))


@pytest.mark.parametrize("file", sorted(f for f, b in BOMBS.items() if not b.needs_worker))
def test_the_sandbox_alone_stops_the_bombs_that_need_no_worker(
    file: str, in_the_agent: dict[str, dict[str, Any]]
) -> None:
    """``templates.render_workers = 0``: the same errors and lines, in the agent's process.
    Its memory is not bounded as tightly (the dense output is parsed before it is refused)."""
    r = in_the_agent[file]
    _check(BOMBS[file], r)
    assert r["agent_mib"] <= (80 if file == "dense_output.j2" else 50), r
    if file == "yaml_laughs.yaml.j2":
        print("\nin the agent (no workers):\n" + _table(in_the_agent))
