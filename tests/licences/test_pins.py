"""constraints.txt pins every Python distribution the project installs (docs/licences.md,
"Pinned Python distributions"): this tier's environment, which installs every extra, must hold
exactly the versions the file names, and the file must name each once.

A distribution added to pyproject.toml without a pin fails here, in the lint tier, instead of
resolving to whatever the index serves on the day of the next fresh run."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from tools.licences import python

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints.txt"
#: The project's own distributions (built from the checkout, never from the index).
OWN = {"vkgate", "vkgate-acme"}


def pins() -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in CONSTRAINTS.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        assert m, f"constraints.txt: not an exact pin: {line!r}"
        name = canonicalize_name(m.group(1))
        assert name not in out, f"constraints.txt names {name} twice"
        out[name] = m.group(2)
    return out


def test_every_line_is_one_exact_pin() -> None:
    assert len(pins()) > 100


def test_every_installed_distribution_is_pinned_at_its_version() -> None:
    if "PIP_CONSTRAINT" not in os.environ:  # tox sets it (tox.ini); CI runs this in tox
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("CI runs the pin check in a tox env, where PIP_CONSTRAINT is set")
        pytest.skip("only in a tox env, which installs with the pins")
    wanted = pins()
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in python.installed()}
    unpinned = sorted(n for n in installed if n not in wanted and n not in OWN)
    assert not unpinned, f"installed but not in constraints.txt: {unpinned}"
    other = {n: (v, wanted[n]) for n, v in installed.items() if n in wanted and wanted[n] != v}
    assert not other, f"installed (version, pin) that differ: {other}"


@pytest.mark.parametrize(
    "pyproject", [ROOT / "pyproject.toml", ROOT / "tests/plugins/vkgate-acme/pyproject.toml"]
)
def test_the_build_requires_are_the_pinned_versions(pyproject: Path) -> None:
    wanted = pins()
    requires = tomllib.loads(pyproject.read_text())["build-system"]["requires"]
    for req in requires:
        name, _, version = req.partition("==")
        assert version, f"{pyproject.name}: build requirement {req!r} is not an exact pin"
        assert wanted[canonicalize_name(name)] == version, (req, wanted.get(name))
