"""The Go side of the licence check: every module linked into a binary the project builds.

For each pinned build module (``devstack/gomod/<name>/``, components.py) and each of its
binaries, ``go list -deps`` (``-test`` for a test binary) with the module's build tags lists the
packages the binary links, and so the modules they come from, resolved by the committed go.mod
and go.sum under ``-mod=readonly`` in a scratch copy of the folder, with the builder's
environment (``CGO_ENABLED=0``, no toolchain download).  This is narrower than everything in
go.sum (test-only and unused modules are not shipped) and exactly what is built.  A module's
licence is read from the licence files at its root in the module cache.  The wrapper modules
themselves (``vkgate.local/build/...``) are this repository's code and are not listed; the Go
standard library, linked into every binary, is.  See docs/licences.md, "How the check works".
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from devstack.build import go_env
from devstack.components import NOMAD_FIRST_BUSL, Module, modules
from tools.licences import spdx
from tools.licences.model import Component, LicenceFile
from tools.licences.texts import classify_text

__all__ = [
    "GO_EXCEPTIONS",
    "GoError",
    "GoModule",
    "check_module",
    "check_modules",
    "go_modules",
    "licence_files",
    "nomad_refusal",
    "stdlib",
]

NOMAD = "github.com/hashicorp/nomad"

#: Reviewed exceptions: module@version -> (the licence it is recorded with, why).  Keyed by the
#: exact version, so a bump is reviewed again.
GO_EXCEPTIONS: dict[str, tuple[str, str]] = {
    "github.com/hashicorp/vic@v1.5.1-0.20190403131502-bbfe86ec9443": (
        "Apache-2.0",
        "vic's own code is Apache-2.0 (the first part of its LICENSE; the rest lists the licences "
        "of the vSphere Integrated Containers appliance's third-party parts); Nomad links only "
        "pkg/vsphere/tags (through go-discover), whose files all carry the Apache-2.0 header",
    ),
    "github.com/tj/go-spin@v1.1.0": (
        "MIT",
        "the module has no licence file; the License section of its Readme.md says MIT",
    ),
}

#: A licence file at a module's root: LICENSE, LICENCE, COPYING, UNLICENSE, with any suffix
#: (LICENSE.md, LICENSE-MIT, LICENSE_WINDOWS, LICENSE.libyaml).
_LICENCE_NAME = re.compile(r"^(?:licen[cs]e|copying|unlicen[cs]e)(?:[-._].*)?$", re.IGNORECASE)
_DOCS_SUFFIX = ".docs"
_PSEUDO = re.compile(r"(?:^-|[-.])(?:0\.)?\d{14}-[0-9a-f]{12}$")
_SEMVER = re.compile(r"^v(\d+)\.(\d+)\.(\d+)(.*)$")


class GoError(RuntimeError):
    """The go command failed; the message carries the command and its output."""


@dataclass
class GoModule:
    """One module as built: its path and version, what replaces it, where its source is."""

    path: str
    version: str
    replace: str  # "path@version" of a replacement, or ""
    dir: Path
    used_by: set[str] = field(default_factory=set)

    @property
    def name(self) -> str:
        own = f"{self.path}@{self.version}"
        return f"{own} => {self.replace}" if self.replace else own


def nomad_refusal(path: str, version: str) -> str | None:
    """Why ``path@version`` must not be built, when it is Nomad under the BUSL (by version).

    github.com/hashicorp/nomad is under the Business Source License from v1.7.0 on (pre-releases
    of 1.7.0 included); a pseudo-version cannot be placed before or after that release, so it
    is refused too.  Whatever the licence file of that version says.
    """
    if path != NOMAD:
        return None
    m = _SEMVER.match(version)
    if m is None:
        return f"{path}@{version}: not a semantic version; Nomad must be pinned to a release tag"
    release = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
    first = ".".join(map(str, NOMAD_FIRST_BUSL))
    if release >= NOMAD_FIRST_BUSL:
        return (
            f"{path}@{version}: Nomad is under the Business Source License (BUSL-1.1) from "
            f"v{first} on; pin a release before v{first}"
        )
    if _PSEUDO.search(m.group(4)):
        return (
            f"{path}@{version}: a pseudo-version of Nomad cannot be placed before v{first} "
            "(BUSL-1.1 from then on); pin a release tag"
        )
    return None


def licence_files(directory: Path) -> list[LicenceFile]:
    """The licence files at ``directory``'s root, each classified."""
    out = []
    for entry in sorted(directory.iterdir()):
        if entry.is_file() and _LICENCE_NAME.match(entry.name):
            result = classify_text(entry.read_text(errors="replace"))
            out.append(
                LicenceFile(
                    name=entry.name,
                    licences=result.licences,
                    forbidden=result.forbidden,
                    documentation=entry.name.lower().endswith(_DOCS_SUFFIX),
                )
            )
    return out


def check_module(
    name: str,
    directory: Path,
    *,
    refusal: str | None = None,
    used_by: Iterable[str] = (),
    exceptions: dict[str, tuple[str, str]] | None = None,
) -> Component:
    """The licences of the module whose source is ``directory``, and what is wrong with them."""
    exceptions = GO_EXCEPTIONS if exceptions is None else exceptions
    files = licence_files(directory)
    problems: list[str] = [refusal] if refusal else []
    licences: list[str] = []
    for f in files:
        for bad in f.forbidden:
            problems.append(f"{name}: {f.name} names a forbidden licence ({bad})")
        if not f.licences and not f.forbidden:
            problems.append(f"{name}: {f.name} is a licence text the classifier does not know")
        for lic in f.licences:
            ok = spdx.accepted(lic) or (f.documentation and lic in spdx.DOCUMENTATION)
            if not ok:
                problems.append(f"{name}: {f.name} is {lic}, which is not an accepted licence")
            shown = f"{lic} (documentation)" if f.documentation else lic
            if shown not in licences:
                licences.append(shown)
    source = ", ".join(f.name for f in files)
    exception = ""
    key = name.split(" => ", 1)[-1] if " => " in name else name
    if key in exceptions and not refusal and not any(f.forbidden for f in files):
        recorded, exception = exceptions[key]
        problems, licences = [], [recorded]
        source = f"{source} (exception)" if source else "exception"
    elif not files:
        problems.append(f"{name}: no licence file at the module root ({directory.name})")
    return Component(
        ecosystem="go",
        name=name,
        licences=tuple(sorted(licences)),
        source=source,
        problems=tuple(problems),
        exception=exception,
        used_by=tuple(sorted(used_by)),
    )


_FORMAT = (
    "{{with .Module}}{{.Path}}\t{{.Version}}\t{{.Main}}\t"
    "{{with .Replace}}{{.Path}}@{{.Version}}{{end}}\t{{.Dir}}{{end}}"
)


def _go(args: list[str], cwd: Path) -> str:
    env = go_env()
    proc = subprocess.run(
        ["go", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise GoError(
            f"`go {' '.join(args)}` failed in {cwd} (exit {proc.returncode}):\n"
            f"{proc.stderr[-4000:]}"
        )
    return proc.stdout


def list_command(module: Module, package: str, *, test: bool) -> list[str]:
    """The ``go list`` arguments that name the modules one binary links (pure)."""
    args = ["list", "-mod=readonly", "-deps"]
    if test:
        args.append("-test")
    if module.tags:
        args += ["-tags", ",".join(module.tags)]
    return [*args, "-f", _FORMAT, package]


def go_modules(selected: Iterable[Module] | None = None) -> list[GoModule]:
    """Every module linked into a binary of the pinned build modules, deduplicated."""
    found: dict[tuple[str, str, str], GoModule] = {}
    for module in selected if selected is not None else modules().values():
        with tempfile.TemporaryDirectory(prefix=f"licences-{module.folder}-") as tmp:
            work = Path(tmp) / module.folder
            shutil.copytree(module.path, work)
            for binary in module.binaries:
                out = _go(list_command(module, binary.package, test=binary.test), work)
                for line in out.splitlines():
                    if not line.strip():
                        continue
                    path, version, main, replace, directory = line.split("\t")
                    if main == "true":
                        continue
                    if not directory:
                        raise GoError(f"{path}@{version}: no source directory (not downloaded)")
                    key = (path, version, replace)
                    entry = found.setdefault(key, GoModule(path, version, replace, Path(directory)))
                    entry.used_by.add(binary.name)
            for name in ("go.mod", "go.sum"):
                if (work / name).read_bytes() != (module.path / name).read_bytes():
                    raise GoError(
                        f"go list changed {module.folder}/{name}: the pins are incomplete"
                    )
    return sorted(found.values(), key=lambda m: m.name)


def check_modules(mods: Iterable[GoModule]) -> list[Component]:
    out = []
    for m in mods:
        refusal = nomad_refusal(m.path, m.version)
        if m.replace:
            rpath, _, rversion = m.replace.partition("@")
            refusal = refusal or nomad_refusal(rpath, rversion)
        out.append(check_module(m.name, m.dir, refusal=refusal, used_by=m.used_by))
    return out


def stdlib(used_by: Iterable[str]) -> Component:
    """The Go standard library (linked into every binary), from ``$GOROOT``'s licence file."""
    goroot = Path(_go(["env", "GOROOT"], Path.cwd()).strip())
    return check_module("Go standard library", goroot, used_by=used_by)
