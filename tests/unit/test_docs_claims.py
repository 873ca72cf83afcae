"""Claims the docs make about the code, checked against the code."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

from gateway.config import KubeletSettings

ROOT = Path(__file__).resolve().parents[2]


def _tox() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ROOT / "tox.ini")
    return parser


def _descriptions(tox: configparser.ConfigParser) -> dict[str, str]:
    """Environment → description, from the factor-conditional base text and the sections."""
    out = {}
    for line in tox["testenv"]["description"].splitlines():
        factor, sep, text = line.partition(":")
        if sep and text.strip():
            out[factor.strip()] = text.strip()
    for section in tox.sections():
        if section.startswith("testenv:"):
            out[section.split(":", 1)[1]] = tox[section]["description"].strip()
    return out


def test_tox_lists_every_tier_with_its_own_description() -> None:
    tox = _tox()
    default = [e.strip() for e in tox["tox"]["env_list"].split(",")]
    # `tox -l` shows env_list only: every backend's tier must be in it.
    for env in ("lint", "unit", "nomad", "zun", "batch", "e2e"):
        assert env in default, env
    described = _descriptions(tox)
    for env in default:
        assert env in described, f"{env} has no description of its own"
    texts = [described[e] for e in default]
    assert len(set(texts)) == len(texts), "two tiers share one description"
    assert not any(t == "run a pytest tier" for t in described.values())


def test_each_test_directory_runs_in_exactly_one_default_tier() -> None:
    """The default `tox` run covers every backend's tests once (no tier hidden, none doubled)."""
    text = (ROOT / "tox.ini").read_text()
    for backend in ("nomad", "zun", "batch"):
        unit = f"tests/unit/translators/{backend}"
        assert f"--ignore={unit}" in text
        assert re.search(rf"pytest -q {unit} tests/golden/{backend} tests/contract/{backend}", text)


def test_the_one_contract_suite_runs_each_backend_in_exactly_one_default_tier() -> None:
    """tests/contract/common is parametrised by backend: each backend's tier runs its own part
    (``-k <kind>``), the unit tier the rest (the in-memory backends)."""
    text = (ROOT / "tox.ini").read_text()
    backends = ("nomad", "zun", "batch")
    for backend in backends:
        assert f"\n    pytest -q tests/contract/common -k {backend} {{posargs}}\n" in text
    rest = " and ".join(f"not {b}" for b in backends)
    assert f'unit: pytest -q tests/contract/common -k "{rest}" {{posargs}}' in text


def test_kubelet_address_default_is_what_docs_say() -> None:
    assert KubeletSettings().address == "0.0.0.0"
    row = next(
        line for line in (ROOT / "docs/kubelet.md").read_text().splitlines() if "`address`" in line
    )
    assert "`0.0.0.0`" in row


def test_templates_readme_names_files_that_exist() -> None:
    readme = (ROOT / "templates/README.md").read_text()
    table = readme.split("| backend |", 1)[1].split("\n\n", 1)[0]
    names = re.findall(r"`([\w/]+\.j2)`", table)
    assert len(names) >= 5
    for name in names:
        assert (ROOT / "templates" / name).is_file(), name
