"""Golden-file helper, KWOK-style: ``input file → expected output file``, compared verbatim.

A golden test names a folder of inputs with the ``golden_files`` marker and takes the
``golden_case`` (one input path per generated test) and ``golden`` fixtures::

    @pytest.mark.golden_files("pods", "*.yaml")      # folder relative to the test module
    def test_pod_to_job(golden_case: Path, golden: Golden) -> None:
        spec = translate(golden_case.read_text())
        golden.check(spec, golden_case.with_suffix(".json"))

``golden.check(actual, path)`` serializes ``actual`` (dict/list → indented, key-sorted JSON; str
as is), compares it with ``path`` and fails with a unified diff.  With ``pytest --update-golden``
(registered in tests/conftest.py) it rewrites ``path`` instead and passes: review with
``git diff``.  A missing expected file fails with a hint to run ``--update-golden``.  Every test
under tests/golden gets the ``golden`` marker.  No ``__init__.py`` in tests/: give golden test
modules unique basenames.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import pytest


def golden_cases(folder: Path, pattern: str = "*") -> list[Path]:
    """Input files of a golden folder, sorted."""
    return sorted(p for p in Path(folder).glob(pattern) if p.is_file())


def serialize(actual: Any) -> str:
    if isinstance(actual, bytes):
        actual = actual.decode()
    if isinstance(actual, str):
        return actual if actual.endswith("\n") else actual + "\n"
    return json.dumps(actual, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n"


class Golden:
    """Compare with, or (``--update-golden``) rewrite, expected-output files."""

    def __init__(self, update: bool) -> None:
        self.update = update
        self.written: list[Path] = []

    def check(self, actual: Any, path: Path) -> None:
        text = serialize(actual)
        path = Path(path)
        if self.update:
            if not path.exists() or path.read_text() != text:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
                self.written.append(path)
            return
        if not path.exists():
            pytest.fail(
                f"golden file {path} is missing; run pytest --update-golden to create it",
                pytrace=False,
            )
        expected = path.read_text()
        if expected != text:
            diff = "".join(
                difflib.unified_diff(
                    expected.splitlines(keepends=True),
                    text.splitlines(keepends=True),
                    fromfile=f"{path} (expected)",
                    tofile="actual",
                )
            )
            pytest.fail(
                f"output differs from {path} (pytest --update-golden rewrites it):\n{diff}",
                pytrace=False,
            )


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Golden:
    return Golden(bool(request.config.getoption("--update-golden", default=False)))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "golden_files(folder, pattern='*'): parametrize golden_case over the files of folder",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "golden_case" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("golden_files")
    if marker is None:
        raise pytest.UsageError(f"{metafunc.function.__name__}: golden_case needs @golden_files")
    folder = Path(marker.args[0])
    if not folder.is_absolute():
        folder = Path(str(metafunc.definition.fspath)).parent / folder
    pattern = marker.args[1] if len(marker.args) > 1 else marker.kwargs.get("pattern", "*")
    cases = golden_cases(folder, pattern)
    metafunc.parametrize("golden_case", cases, ids=[str(c.relative_to(folder)) for c in cases])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.golden)
