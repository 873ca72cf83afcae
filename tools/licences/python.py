"""The Python side of the licence check: every distribution installed in this environment.

A distribution's licence is read, in this order, from the first of these it has:
``License-Expression`` (an SPDX expression, PEP 639), ``License ::`` trove classifiers, the
``License`` field (a name, an SPDX expression or a whole licence text) and the licence files in
its dist-info.  Whatever decides, the field and the licence files are also searched for the
forbidden licences (texts.FORBIDDEN).  docs/licences.md lists the distributions the tox
environments install: the requirement closure of vkgate with every extra a tox environment
names, and of the path dependencies in tox.ini.  See docs/licences.md, "How the check works".
"""

from __future__ import annotations

import configparser
import re
import tomllib
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tools.licences import spdx
from tools.licences.model import Component
from tools.licences.texts import classify_text

__all__ = [
    "PY_EXCEPTIONS",
    "check_distribution",
    "check_installed",
    "installed",
    "requirement_closure",
    "tox_extras",
    "tox_roots",
]

#: Reviewed exceptions: distribution -> (the licence metadata it must still declare, why).
#: Keyed by the declared licence, so a change of it is reviewed again.
PY_EXCEPTIONS: dict[str, tuple[str, str]] = {
    "numpy": (
        "BSD-3-Clause AND 0BSD AND MIT AND Zlib AND CC0-1.0",
        "CC0-1.0 (a public-domain dedication, not OSI-reviewed) covers one bundled file of "
        "Google Highway (hwy/contrib/random/random-inl.h); every other part is OSI-approved",
    ),
    "pillow": (
        "MIT-CMU",
        "the historical PIL permission notice (HPND family, OSI-approved as HPND); Pillow "
        "declared it as 'OSI Approved :: Historical Permission Notice and Disclaimer' before "
        "adopting the more exact SPDX identifier",
    ),
    "repoze-lru": (
        "LicenseRef-Repoze-BSD-derived",
        "the Repoze licence: the BSD-3-Clause conditions plus a notice-of-change clause "
        "(its LICENSE.txt)",
    ),
}

#: Classifiers that say nothing against an OSI-approved one beside them.
_NEUTRAL_CLASSIFIERS = {"License :: OSI Approved", "License :: DFSG approved"}
_OSI_PREFIX = "License :: OSI Approved :: "
#: Trove names -> SPDX identifier, where the classifier names one licence exactly.
_TROVE: dict[str, str] = {
    "MIT License": "MIT",
    "MIT No Attribution License (MIT-0)": "MIT-0",
    "ISC License (ISCL)": "ISC",
    "Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0",
    "Python Software Foundation License": "PSF-2.0",
    "GNU Lesser General Public License v3 (LGPLv3)": "LGPL-3.0",
    "GNU Lesser General Public License v2 (LGPLv2)": "LGPL-2.0",
    "GNU General Public License v2 (GPLv2)": "GPL-2.0",
    "GNU General Public License v3 (GPLv3)": "GPL-3.0",
    "The Unlicense (Unlicense)": "Unlicense",
    "Zero-Clause BSD (0BSD)": "0BSD",
}
#: Classifiers that name a family, not one licence: the field or the files may say which.
_FAMILIES: dict[str, str] = {"Apache Software License": "Apache-", "BSD License": "BSD-"}
_UNSET = {"", "unknown", "none", "n/a"}
_LICENCE_FILE = re.compile(r"licen[cs]e|copying", re.IGNORECASE)
_FIELD_SPLIT = re.compile(r"\s+(and|or)\s+", re.IGNORECASE)


def _header(meta: metadata.PackageMetadata, key: str) -> str:
    """One metadata field, "" when absent (no deprecated implicit None)."""
    values = meta.get_all(key) or [""]
    return str(values[0]).strip()


def _name(dist: metadata.Distribution) -> str:
    return _header(dist.metadata, "Name")


def installed() -> list[metadata.Distribution]:
    """Every distribution importlib finds, one per name (the first on sys.path wins)."""
    seen: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions():
        name = _header(dist.metadata, "Name")
        if name:
            seen.setdefault(canonicalize_name(name), dist)
    return [seen[k] for k in sorted(seen)]


def _licence_texts(dist: metadata.Distribution) -> list[tuple[str, str]]:
    """(name, text) of the licence files in the distribution's metadata directory."""
    out = []
    for path in dist.files or ():
        in_metadata = bool(path.parts) and path.parts[0].endswith((".dist-info", ".egg-info"))
        if in_metadata and _LICENCE_FILE.search(path.name):
            try:
                text = Path(str(path.locate())).read_text(errors="replace")
            except OSError:
                continue
            out.append(("/".join(path.parts[1:]), text))
    return out


def _field_expression(field: str) -> spdx.Expression | None:
    """The ``License`` field as an expression of known licences, if it is one."""
    ident = spdx.alias(field)
    if ident:
        return spdx.Expression("LEAF", licence=ident)
    try:
        return spdx.parse(field)
    except spdx.ExpressionError:
        pass
    parts = _FIELD_SPLIT.split(field)
    names, ops = parts[::2], {p.upper() for p in parts[1::2]}
    idents = [spdx.alias(n) for n in names]
    if len(ops) == 1 and all(idents):
        leaves = tuple(spdx.Expression("LEAF", licence=i) for i in idents if i)
        return spdx.Expression(ops.pop(), args=leaves)
    return None


def _from_expression(name: str, expr_text: str) -> tuple[tuple[str, ...], list[str]]:
    try:
        expr = spdx.parse(expr_text)
    except spdx.ExpressionError as exc:
        return (expr_text,), [f"{name}: License-Expression {exc}"]
    if not expr.holds(spdx.accepted):
        return (expr_text,), [f"{name}: License-Expression {expr_text!r} is not open source"]
    return (expr_text,), []


def _specific(trove: str, hints: set[str]) -> str:
    """A family classifier (``Apache Software License``, ``BSD License``) named exactly by the
    one licence of that family the License field or the licence files hold, if there is one."""
    family = _FAMILIES.get(trove)
    if family is None:
        return _TROVE.get(trove, trove)
    matches = sorted(h for h in hints if h.startswith(family) and spdx.accepted(h))
    return matches[0] if len(matches) == 1 else trove


def _from_classifiers(
    name: str, classifiers: list[str], hints: set[str]
) -> tuple[tuple[str, ...], list[str]]:
    labels: list[str] = []
    problems: list[str] = []
    for c in classifiers:
        if c.startswith(_OSI_PREFIX):
            labels.append(_specific(c.removeprefix(_OSI_PREFIX), hints))
        elif c not in _NEUTRAL_CLASSIFIERS:
            problems.append(f"{name}: classifier {c!r} is not an OSI-approved licence")
    if not labels and not problems:
        problems.append(f"{name}: 'License :: OSI Approved' names no licence")
    return tuple(labels), problems


def _from_field(name: str, field: str) -> tuple[tuple[str, ...], list[str]] | None:
    expr = _field_expression(field)
    if expr is not None:
        ok = expr.holds(spdx.accepted)
        return (field,) if len(expr.licences()) > 1 else expr.licences(), (
            [] if ok else [f"{name}: License {field!r} is not open source"]
        )
    result = classify_text(field)
    if result.licences:
        bad = [x for x in result.licences if not spdx.accepted(x)]
        return result.licences, [f"{name}: License field text is {x}, not accepted" for x in bad]
    return None


def _from_files(name: str, texts: list[tuple[str, str]]) -> tuple[tuple[str, ...], list[str]]:
    licences: list[str] = []
    problems: list[str] = []
    for fname, text in texts:
        result = classify_text(text)
        if result.unknown:
            problems.append(f"{name}: {fname} is a licence text the classifier does not know")
        for lic in result.licences:
            if not spdx.accepted(lic):
                problems.append(f"{name}: {fname} is {lic}, which is not an accepted licence")
            if lic not in licences:
                licences.append(lic)
    return tuple(sorted(licences)), problems


def check_distribution(
    dist: metadata.Distribution, *, exceptions: dict[str, tuple[str, str]] | None = None
) -> Component:
    """The licences of one installed distribution, and what is wrong with them."""
    exceptions = PY_EXCEPTIONS if exceptions is None else exceptions
    name = _name(dist)
    meta = dist.metadata
    expression = _header(meta, "License-Expression")
    classifiers = [c for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    field = _header(meta, "License")
    if field.lower() in _UNSET:
        field = ""
    texts = _licence_texts(dist)

    forbidden: list[str] = []
    for where, text in [("License-Expression", expression), ("License", field), *texts]:
        for bad in classify_text(text).forbidden:
            forbidden.append(f"{name}: {where} names a forbidden licence ({bad})")

    decided: tuple[tuple[str, ...], list[str]] | None = None
    if expression:
        source, decided = "License-Expression", _from_expression(name, expression)
    elif classifiers:
        hints = set(expr.licences()) if field and (expr := _field_expression(field)) else set()
        for _, text in texts:
            hints |= set(classify_text(text).licences)
        source, decided = "classifiers", _from_classifiers(name, classifiers, hints)
    elif field:
        source, decided = "License field", _from_field(name, field)
    if decided is None and texts:
        source = "files: " + ", ".join(f for f, _ in texts)
        decided = _from_files(name, texts)
    if decided is None:
        source = "nothing"
        decided = ((), [f"{name}: no licence (no License-Expression, classifier, field or file)"])
    licences, problems = decided

    exception = ""
    rule = exceptions.get(canonicalize_name(name))
    if rule is not None:
        declared, reason = rule
        if expression == declared:
            problems, exception = [], reason
        else:
            problems = [
                *problems,
                f"{name}: the reviewed exception expects License-Expression {declared!r}, "
                f"found {expression or '(none)'!r}; review it again",
            ]
    return Component(
        ecosystem="python",
        name=name,
        licences=licences,
        source=source,
        problems=tuple(forbidden + problems),
        exception=exception,
    )


def check_installed() -> list[Component]:
    return [check_distribution(d) for d in installed()]


def tox_extras(tox_ini: Path) -> dict[str, set[str]]:
    """Environment section -> the extras it installs (factor prefixes dropped, all factors)."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(tox_ini)
    out: dict[str, set[str]] = {}
    for section in parser.sections():
        if section == "testenv" or section.startswith("testenv:"):
            raw = parser[section].get("extras", "")
            items = set()
            for raw_line in raw.splitlines():
                line = raw_line.split("#", 1)[0].strip()
                value = line.split(":", 1)[1] if ":" in line else line
                items |= {v.strip() for v in value.split(",") if v.strip()}
            out[section] = items
    return out


def tox_roots(root: Path) -> dict[str, set[str]]:
    """Distribution -> extras: vkgate with every extra any tox environment installs, and each
    path dependency of tox.ini's ``deps`` (by its pyproject's name)."""
    extras = set().union(*tox_extras(root / "tox.ini").values())
    roots: dict[str, set[str]] = {"vkgate": extras}
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(root / "tox.ini")
    for section in parser.sections():
        for raw_line in parser[section].get("deps", "").splitlines():
            line = raw_line.split("#", 1)[0].strip()
            if line.startswith("{toxinidir}/"):
                project = root / line.removeprefix("{toxinidir}/") / "pyproject.toml"
                name = tomllib.loads(project.read_text())["project"]["name"]
                roots.setdefault(str(name), set())
            elif line:
                roots.setdefault(Requirement(line).name, set())
    return roots


def requirement_closure(
    roots: dict[str, set[str]],
) -> tuple[list[metadata.Distribution], list[str]]:
    """The installed distributions ``roots`` require (with their extras), transitively, and
    the names of required distributions that are not installed."""
    todo: list[tuple[str, frozenset[str]]] = [(n, frozenset(e)) for n, e in roots.items()]
    seen: set[tuple[str, frozenset[str]]] = set()
    found: dict[str, metadata.Distribution] = {}
    missing: set[str] = set()
    while todo:
        name, extras = todo.pop()
        key = (canonicalize_name(name), extras)
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.add(name)
            continue
        found[canonicalize_name(name)] = dist
        for raw in dist.requires or ():
            req = Requirement(raw)
            envs: Iterable[dict[str, str]] = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((req.name, frozenset(req.extras)))
    return [found[k] for k in sorted(found)], sorted(missing)
