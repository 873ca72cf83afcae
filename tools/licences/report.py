"""docs/licences.md's generated blocks: one table row per component and its licences.

The file's prose is written by hand; each generated block sits between
``<!-- begin generated: KIND -->`` and ``<!-- end generated: KIND -->`` and is rewritten by
``python -m tools.licences --write docs/licences.md``.  The lint tier's test compares each
block with what the check finds now (tests/licences/test_licences.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tools.licences.golang import GO_EXCEPTIONS
from tools.licences.model import Component
from tools.licences.python import PY_EXCEPTIONS
from tools.licences.spdx import ACCEPTED

__all__ = ["block", "exceptions_block", "go_block", "python_block", "replace_block"]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def go_block(components: Iterable[Component]) -> str:
    rows = sorted(components, key=lambda c: (c.name != "Go standard library", c.name))
    lines = [
        f"{len(rows)} components (modules deduplicated by path@version).",
        "",
        "| Module | Licence | Read from | Linked into |",
        "|---|---|---|---|",
    ]
    for c in rows:
        lic = ", ".join(c.licences) + (" (exception)" if c.exception else "")
        lines.append(
            f"| `{_cell(c.name)}` | {_cell(lic)} | {_cell(c.source)} | {', '.join(c.used_by)} |"
        )
    return "\n".join(lines)


def python_block(components: Iterable[Component]) -> str:
    rows = sorted(components, key=lambda c: c.name.lower())
    lines = [
        f"{len(rows)} distributions.",
        "",
        "| Distribution | Licence |",
        "|---|---|",
    ]
    for c in rows:
        lic = ", ".join(c.licences) + (" (exception)" if c.exception else "")
        lines.append(f"| {_cell(c.name)} | {_cell(lic)} |")
    return "\n".join(lines)


def exceptions_block() -> str:
    lines = ["| Component | Recorded as | Why |", "|---|---|---|"]
    for name, (lic, why) in sorted(GO_EXCEPTIONS.items()):
        lines.append(f"| `{name}` (Go) | {lic} | {_cell(why)} |")
    for name, (lic, why) in sorted(PY_EXCEPTIONS.items()):
        lines.append(f"| {name} (Python) | {lic} | {_cell(why)} |")
    for ident, why in sorted(ACCEPTED.items()):
        lines.append(f"| any component under {ident} | {ident} | {_cell(why)} |")
    return "\n".join(lines)


def _markers(kind: str) -> tuple[str, str]:
    return f"<!-- begin generated: {kind} -->", f"<!-- end generated: {kind} -->"


def block(document: str, kind: str) -> str | None:
    """The generated block ``kind`` of ``document`` (without its markers), if it has one."""
    begin, end = _markers(kind)
    m = re.search(re.escape(begin) + r"\n(.*?)\n?" + re.escape(end), document, re.DOTALL)
    return m.group(1).strip("\n") if m else None


def replace_block(document: str, kind: str, content: str) -> str:
    begin, end = _markers(kind)
    if block(document, kind) is None:
        raise ValueError(f"the document has no {begin} ... {end} block")
    pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.DOTALL)
    return pattern.sub(lambda _: f"{begin}\n{content}\n{end}", document, count=1)
