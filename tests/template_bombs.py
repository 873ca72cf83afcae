"""Hostile template outputs shared by the unit and e2e tests (docs/design/template-safety.md)."""

from __future__ import annotations

import itertools

#: 200000 opening brackets: past every parser's recursion limit.
DEEP = "[" * 200_000


def laughs(levels: int = 9, fan: int = 9) -> str:
    """A YAML "billion laughs": ``levels`` anchors, each a list of ``fan`` aliases of the one
    before — fan**levels strings once expanded (9**9 ≈ 387 million) from ~600 bytes of text."""
    names = [f"l{i}" for i in range(levels)]
    lines = [f"{names[0]}: &{names[0]} [{', '.join(['lol'] * fan)}]"]
    for prev, name in itertools.pairwise(names):
        lines.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * fan)}]")
    return "\n".join(lines) + "\n"
