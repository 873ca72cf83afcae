"""The ``backend`` fixture of the one contract suite: one harness per backend.

A backend joins the suite with one line in ``contract_backends.HARNESSES`` (its kind → the
module and factory of its harness) and one harness module; the checks are ``translators.contract.CHECKS``.  Harness
modules are imported when their backend's tests run, so a tier that lacks another backend's
optional dependencies still collects.  The backends' own fakes live with their contract tests
(``tests/contract/<backend>/``), which are put on the import path here as their own conftests
do for them.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from contract_backends import HARNESSES

CONTRACT = Path(__file__).resolve().parents[1]
for backend_dir in ("nomad", "zun", "batch"):
    if str(CONTRACT / backend_dir) not in sys.path:
        sys.path.append(str(CONTRACT / backend_dir))


@pytest.fixture(params=sorted(HARNESSES))
async def backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[object]:
    module, _, name = HARNESSES[request.param].partition(":")
    factory = getattr(importlib.import_module(module), name)
    async with factory(tmp_path, monkeypatch) as harness:
        assert harness.kind == request.param
        yield harness
