"""Maintainer command: regenerate a component's pinned build module (go.mod + go.sum).

    python -m devstack.pins [module ...]     # default: every module

It writes the seed go.mod (exact requirements and the replaces upstream needs) into a scratch
folder, runs ``go get`` with **exact** versions only (never ``@latest``/``@upgrade``), and copies
the resulting go.mod and go.sum into ``devstack/gomod/<module>/``.  The diff is then
reviewed and committed like any other change; the builder never resolves anything itself
(docs/design/control-plane.md, "Pinned builds").
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from devstack.build import go_env
from devstack.components import Module, modules


def regenerate(module: Module) -> None:
    with tempfile.TemporaryDirectory(prefix=f"vkgate-pins-{module.folder}-") as tmp:
        work = Path(tmp)
        (work / "go.mod").write_text(module.seed_go_mod())
        for extra in module.path.glob("*.go"):
            shutil.copy2(extra, work / extra.name)
        env = go_env()
        for arg in module.get:
            subprocess.run(["go", "get", arg], cwd=work, env=env, check=True)
        if any(work.glob("*.go")):  # our own sources (a test file, a main): tidy adds their imports
            subprocess.run(["go", "mod", "tidy"], cwd=work, env=env, check=True)
        module.path.mkdir(parents=True, exist_ok=True)
        for name in ("go.mod", "go.sum"):
            shutil.copy2(work / name, module.path / name)
    print(f"{module.folder}: wrote {module.path}/go.mod and go.sum; review and commit them")


def main(argv: Sequence[str] | None = None) -> int:
    mods = modules()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help=f"any of {', '.join(mods)} (default: all)")
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in mods]
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}; choose from {', '.join(mods)}")
    for name in args.modules or list(mods):
        try:
            regenerate(mods[name])
        except subprocess.CalledProcessError as exc:
            print(f"{name}: `{' '.join(exc.cmd)}` failed (exit {exc.returncode})", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
