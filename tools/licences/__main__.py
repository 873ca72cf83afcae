"""``python -m tools.licences``: check every licence, print what fails, exit non-zero if any.

python -m tools.licences                          check Go modules and Python distributions
python -m tools.licences --no-go                  the Python part only
python -m tools.licences --write docs/licences.md rewrite the document's generated tables
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from devstack.components import binaries
from tools.licences import golang, python, report
from tools.licences.model import Component

ROOT = Path(__file__).resolve().parents[2]


def go_components() -> list[Component]:
    """The standard library and every module linked into a binary, checked."""
    mods = golang.go_modules()
    return [golang.stdlib(binaries()), *golang.check_modules(mods)]


def documented_python() -> tuple[list[Component], list[str]]:
    """The distributions the tox environments install (checked), and required ones missing."""
    dists, missing = python.requirement_closure(python.tox_roots(ROOT))
    return [python.check_distribution(d) for d in dists], missing


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-go", action="store_true", help="skip the Go modules")
    parser.add_argument("--write", type=Path, help="rewrite the generated tables of this file")
    args = parser.parse_args(argv)

    started = time.monotonic()
    comps: list[Component] = []
    if not args.no_go:
        if shutil.which("go") is None:
            print("go is not on PATH: cannot list the Go modules (use --no-go)", file=sys.stderr)
            return 2
        go = go_components()
        comps += go
    installed = python.check_installed()
    comps += installed
    failures = [p for c in comps for p in c.problems]
    for line in failures:
        print(f"FAIL {line}")
    print(
        f"{len(comps)} components checked in {time.monotonic() - started:.1f} s, "
        f"{len(failures)} failure(s)"
    )
    if args.write:
        text = args.write.read_text()
        documented, missing = documented_python()
        if missing:
            print(f"not installed here: {', '.join(missing)} (run in the lint env)")
            return 1
        if not args.no_go:
            text = report.replace_block(text, "go", report.go_block(go))
        text = report.replace_block(text, "python", report.python_block(documented))
        text = report.replace_block(text, "exceptions", report.exceptions_block())
        args.write.write_text(text)
        print(f"wrote {args.write}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
