"""The lint tier's licence check (docs/licences.md): every Go module linked into a binary the
project builds and every Python distribution installed here carries an accepted licence, and
docs/licences.md lists what the check finds.

The Go part needs ``go`` and the module sources (the module cache; CI builds every binary before
tox runs): with ``CI=true`` their absence fails, locally a missing ``go`` skips the Go tests.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from devstack.components import NOMAD_FIRST_BUSL, binaries, nomad
from tools.licences import golang, python, report
from tools.licences.__main__ import documented_python, go_components
from tools.licences.model import Component

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "licences.md"
REGENERATE = "regenerate with `python -m tools.licences --write docs/licences.md` (tox -e lint env)"


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.fixture(scope="module")
def go() -> list[Component]:
    if shutil.which("go") is None:
        if _ci():
            pytest.fail("CI=true: the licence check needs `go` on PATH to list the Go modules")
        pytest.skip("go not on PATH: the Go modules' licences are not checked here")
    try:
        return go_components()
    except golang.GoError as exc:  # missing module sources fail, locally too
        pytest.fail(f"cannot list the Go modules: {exc}")


def _failures(components: list[Component]) -> list[str]:
    return [p for c in components for p in c.problems]


def test_every_go_module_has_an_accepted_licence(go: list[Component]) -> None:
    assert len(go) > len(binaries()), "the Go module list is implausibly short"
    assert _failures(go) == []


def test_every_binary_is_covered(go: list[Component]) -> None:
    linked = {b for c in go for b in c.used_by}
    assert set(binaries()) <= linked
    std = next(c for c in go if c.name == "Go standard library")
    assert set(std.used_by) == set(binaries())


def test_nomad_is_built_from_a_release_before_the_busl(go: list[Component]) -> None:
    module = "github.com/hashicorp/nomad@"
    (c,) = [c for c in go if c.name.startswith(module)]
    assert c.name == f"{module}v{nomad().version}"
    assert tuple(map(int, nomad().version.split("."))) < NOMAD_FIRST_BUSL
    assert c.licences == ("MPL-2.0",)
    assert c.used_by == ("nomad",)


def test_every_installed_python_distribution_has_an_accepted_licence() -> None:
    installed = python.check_installed()
    assert len(installed) > 10
    assert _failures(installed) == []


def test_lint_env_installs_every_extra_of_the_other_envs() -> None:
    """The lint env's check covers what unit (bench), zun and e2e (zun-server) install."""
    extras = python.tox_extras(ROOT / "tox.ini")
    everything = set().union(*extras.values())
    assert {"all", "test", "lint", "bench", "zun-server"} <= everything
    assert extras["testenv:lint"] == everything


def test_every_distribution_the_tox_envs_install_is_installed_here() -> None:
    documented, missing = documented_python()
    assert missing == [], f"not installed in this environment: {missing} (run in tox -e lint)"
    names = {c.name.lower() for c in documented}
    assert {"vkgate", "vkgate-acme", "zun", "matplotlib", "pytest", "mypy"} <= names


def _committed(kind: str) -> str:
    text = report.block(DOC.read_text(), kind)
    assert text is not None, f"docs/licences.md has no generated {kind} block"
    return text


def test_docs_list_the_go_modules(go: list[Component]) -> None:
    assert _committed("go") == report.go_block(go), f"docs/licences.md is stale: {REGENERATE}"


def test_docs_list_the_python_distributions() -> None:
    documented, _ = documented_python()
    assert _committed("python") == report.python_block(documented), (
        f"docs/licences.md is stale: {REGENERATE}"
    )


def test_docs_list_the_exceptions() -> None:
    assert _committed("exceptions") == report.exceptions_block(), REGENERATE


def test_every_go_exception_is_still_needed(go: list[Component]) -> None:
    used = {c.name.split(" => ")[-1]: c for c in go if c.exception}
    assert golang.GO_EXCEPTIONS, "no exceptions left: this test has nothing to check, delete it"
    for key in golang.GO_EXCEPTIONS:
        assert key in used, f"GO_EXCEPTIONS[{key!r}] matches no module built now: remove it"


def test_every_python_exception_is_still_needed() -> None:
    documented, _ = documented_python()
    used = {canonicalize_name(c.name) for c in documented if c.exception}
    assert python.PY_EXCEPTIONS, "no exceptions left: this test has nothing to check, delete it"
    for key in python.PY_EXCEPTIONS:
        assert key in used, f"PY_EXCEPTIONS[{key!r}] matches no distribution installed: remove it"
