"""docs/design/README.md indexes every design document (a new one is listed or this fails)."""

from __future__ import annotations

import re
from pathlib import Path

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design"


def test_every_design_document_is_indexed() -> None:
    index = (DESIGN / "README.md").read_text()
    linked = set(re.findall(r"\]\(([\w./-]+\.md)\)", index))
    documents = {p.name for p in DESIGN.glob("*.md") if p.name != "README.md"}
    assert documents, "no design documents found"
    assert documents - linked == set(), "not indexed in docs/design/README.md"
    for link in linked:
        assert (DESIGN / link).resolve().is_file(), f"docs/design/README.md links a missing {link}"
