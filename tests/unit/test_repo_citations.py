"""The repository explains itself: every citation in code, templates and docs resolves inside it.

Rules (docs/design/README.md): comments and docs cite ``docs/...`` files that exist and, for
``docs/design/<file>.md, "<section>"``, a heading that exists in that file; nothing cites a file
outside the repository (``../shared``, ``reference/*.md``), a numbered section (``§``) of a
document that is not a public standard, or an issue number.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SELF = Path(__file__).resolve()

_TEXT_SUFFIXES = {".py", ".j2", ".md", ".toml", ".ini", ".cfg", ".txt", ".sh", ".importlinter"}
#: Pod fixtures and golden outputs are data (their bytes reach backends verbatim), not prose.
_DATA_DIRS = ("tests/golden/",)

_FORBIDDEN = {
    "a path outside the repository": re.compile(
        r"\.\./shared|/work/(?:shared|wt|main)\b|shared/reference|\breference/[\w-]+\.md"
    ),
    "an issue number": re.compile(r"(?i)\bissues?\s+#?\d+|(?<![\w&/'\"])#\d{1,5}\b"),
}
#: ``§`` is fine for public standards (RFC 9110 §10.2.3, the SPDY draft), nothing else.
_SECTION_SIGN = re.compile(r"§")
_STANDARD = re.compile(r"\b(?:RFC\s*\d+|draft\b)")
_DOCS_PATH = re.compile(r"(?<![\w/.])(docs/[\w./-]*\w)")
#: A cited test file or folder (``tests/unit/test_x.py``, ``tests/e2e``) exists too.
_TESTS_PATH = re.compile(r"(?<![\w/.])(tests/[\w./-]*\w)")
_DESIGN_CITE = re.compile(r"(docs/design/[\w-]+\.md)`?,?\s+\"([^\"]+)\"")


def _repo_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    files = []
    for name in out:
        path = ROOT / name
        if name.startswith(_DATA_DIRS) or path.resolve() == SELF or not path.is_file():
            continue
        if path.suffix in _TEXT_SUFFIXES or name in (".ci/run", ".importlinter"):
            files.append(path)
    return files


FILES = _repo_files()


def _headings(path: Path) -> set[str]:
    return {
        m.group(1).strip()
        for m in re.finditer(r"^#+\s+(.+)$", path.read_text(encoding="utf-8"), re.MULTILINE)
    }


def _flat(text: str) -> str:
    """Join wrapped comment/docstring lines so a citation split over lines reads as one."""
    return re.sub(r"[ \t]*\n[ \t]*(?:#:?|\{#-?)?[ \t]*", " ", text)


def problems(path: Path, text: str) -> list[str]:
    """Every bad citation in one file, as ``file:line: what``."""
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for what, pattern in _FORBIDDEN.items():
            m = pattern.search(line)
            if m:
                found.append(f"{rel}:{lineno}: cites {what}: {m.group(0)!r}")
        if _SECTION_SIGN.search(line) and not _STANDARD.search(line):
            found.append(f"{rel}:{lineno}: cites a numbered section (§) of an unnamed document")
        for m in (*_DOCS_PATH.finditer(line), *_TESTS_PATH.finditer(line)):
            target = m.group(1).rstrip(".")
            if not (ROOT / target).exists():
                found.append(f"{rel}:{lineno}: cites {target}, which does not exist")
    for m in _DESIGN_CITE.finditer(_flat(text)):
        doc, section = ROOT / m.group(1), " ".join(m.group(2).split())
        # A heading may carry a parenthetical the citation leaves out: "Title (detail)".
        heads = {h.split(" (", 1)[0] for h in _headings(doc)} if doc.exists() else set()
        if doc.exists() and section not in _headings(doc) | heads:
            found.append(f"{rel}: cites {m.group(1)}, {section!r}: no such heading")
    return found


def test_the_scan_sees_the_code_and_the_design_docs() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in FILES}
    assert "gateway/pods/resolve/env.py" in names
    assert "docs/design/kubelet-contract.md" in names
    assert len(names) > 100


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("# see ../shared/reference/nomad.md", "outside the repository"),
        ('"""Facts: /work/shared/reference/zun.md."""', "outside the repository"),
        ("# (reference/batch.md)", "outside the repository"),
        ("# issue 4 decides OnFailure", "issue number"),
        ("# fixed in #123", "issue number"),
        ("# rules (contract §6)", "§"),
        ("# nomad.md §7", "§"),
        ("# see docs/design/nope.md", "does not exist"),
        ("# (tests/unit/test_nope.py holds it)", "does not exist"),
        ("# tests/e2e/conftest.py", None),
        ('# (docs/design/zun.md, "No such section")', "no such heading"),
        ('# (docs/design/kubelet-contract.md, "Environment\n# resolution")', None),
        ("# RFC 9110 §10.2.3", None),
        ('color = "#fff"; x = "a#1"', None),
    ],
)
def test_the_rules_catch_what_they_should(text: str, needle: str | None) -> None:
    found = problems(ROOT / "x.py", text)
    if needle is None:
        assert found == []
    else:
        assert found and needle in found[0], found


def test_no_comment_cites_outside_the_repo_an_issue_or_a_missing_doc() -> None:
    found = [p for path in FILES for p in problems(path, path.read_text(encoding="utf-8"))]
    assert found == [], "\n".join(found)
