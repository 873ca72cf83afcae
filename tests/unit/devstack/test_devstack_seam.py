"""The one seam between the agent and the dev stack (docs/design/devstack.md): `vkgate dev`
loads ``devstack.dev`` by name; from an install without a checkout it says so and exits 2."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway import cli


def test_from_a_checkout_vkgate_dev_loads_the_dev_stack() -> None:
    import devstack.dev

    assert cli._load_devstack_main() is devstack.dev.main


def test_the_checkout_beside_an_editable_install_is_found(monkeypatch: Any) -> None:
    # As from `.venv/bin/vkgate`: the checkout is not on sys.path, only the agent's packages.
    checkout = str(Path(cli.__file__).resolve().parents[1])
    for name in [m for m in sys.modules if m == "devstack" or m.startswith("devstack.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", checkout)])
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "devstack" else real(name, *a),
    )
    main = cli._load_devstack_main()
    assert main is not None and main.__module__ == "devstack.dev"
    assert checkout in sys.path


def test_without_a_checkout_vkgate_dev_exits_2_and_says_why(
    monkeypatch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    installed = tmp_path / "site-packages" / "gateway"
    installed.mkdir(parents=True)
    monkeypatch.setattr(cli, "__file__", str(installed / "cli.py"))
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "devstack" else real(name, *a),
    )
    assert cli._load_devstack_main() is None
    assert cli.main(["dev", "--no-wait"]) == 2
    err = capsys.readouterr().err
    assert "source checkout" in err and "devstack/" in err
