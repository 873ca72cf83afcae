"""SPDX identifiers: which are accepted, the names packages use for them, and expressions.

``OSI_APPROVED`` is the part of the SPDX licence list marked OSI-approved that this check can
meet (the identifiers the text classifier returns, and those Python metadata uses); an
identifier outside it is refused until someone reviews it and adds it here.  ``ACCEPTED`` adds
the few that are not on the OSI list but are accepted, each with its reason; ``DOCUMENTATION``
are accepted only for a module's documentation licence file (``LICENSE.docs``).
See docs/licences.md, "How the check works".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "ACCEPTED",
    "DOCUMENTATION",
    "OSI_APPROVED",
    "Expression",
    "ExpressionError",
    "accepted",
    "alias",
    "parse",
]

OSI_APPROVED: frozenset[str] = frozenset(
    {
        "0BSD",
        "AFL-3.0",
        "AGPL-3.0",
        "AGPL-3.0-only",
        "AGPL-3.0-or-later",
        "Apache-1.1",
        "Apache-2.0",
        "Artistic-2.0",
        # Approved by the OSI in 2024 (after its review on the license-review list).
        "BlueOak-1.0.0",
        "BSD-1-Clause",
        "BSD-2-Clause",
        "BSD-2-Clause-Patent",
        "BSD-3-Clause",
        "BSL-1.0",
        "CDDL-1.0",
        "ECL-2.0",
        "EPL-1.0",
        "EPL-2.0",
        "EUPL-1.1",
        "EUPL-1.2",
        "GPL-2.0",
        "GPL-2.0+",
        "GPL-2.0-only",
        "GPL-2.0-or-later",
        "GPL-3.0",
        "GPL-3.0+",
        "GPL-3.0-only",
        "GPL-3.0-or-later",
        "HPND",
        "ISC",
        "LGPL-2.0",
        "LGPL-2.0+",
        "LGPL-2.0-only",
        "LGPL-2.0-or-later",
        "LGPL-2.1",
        "LGPL-2.1+",
        "LGPL-2.1-only",
        "LGPL-2.1-or-later",
        "LGPL-3.0",
        "LGPL-3.0+",
        "LGPL-3.0-only",
        "LGPL-3.0-or-later",
        "MIT",
        "MIT-0",
        "MIT-Modern-Variant",
        "MPL-1.0",
        "MPL-1.1",
        "MPL-2.0",
        "MPL-2.0-no-copyleft-exception",
        "MS-PL",
        "MS-RL",
        "NCSA",
        "OFL-1.1",
        "PostgreSQL",
        "Python-2.0",
        "Unicode-DFS-2016",
        "Unlicense",
        "UPL-1.0",
        "W3C",
        "Zlib",
        "ZPL-2.0",
        "ZPL-2.1",
    }
)

#: Not marked OSI-approved in the SPDX list, accepted all the same (identifier -> reason).
ACCEPTED: dict[str, str] = {
    "PSF-2.0": (
        "the PSF License Agreement, the licence of CPython itself and the first part of the "
        "OSI-approved Python-2.0; its trove classifier is 'OSI Approved :: Python Software "
        "Foundation License'"
    ),
}

#: Accepted for a documentation licence file only (never for code).
DOCUMENTATION: frozenset[str] = frozenset({"CC-BY-4.0", "CC-BY-SA-4.0"})


def accepted(licence: str) -> bool:
    """Whether one SPDX identifier is acceptable for code."""
    return licence in OSI_APPROVED or licence in ACCEPTED


#: Names seen in the ``License`` field of Python metadata -> SPDX identifier (lower case keys).
_ALIASES: dict[str, str] = {
    "mit": "MIT",
    "mit license": "MIT",
    "the mit license": "MIT",
    "apache 2": "Apache-2.0",
    "apache 2.0": "Apache-2.0",
    "apache-2": "Apache-2.0",
    "apache license 2.0": "Apache-2.0",
    "apache license, version 2.0": "Apache-2.0",
    "apache license version 2.0": "Apache-2.0",
    "apache software license 2.0": "Apache-2.0",
    "asl 2.0": "Apache-2.0",
    "bsd-3": "BSD-3-Clause",
    "3-clause bsd": "BSD-3-Clause",
    "3-clause bsd license": "BSD-3-Clause",
    "bsd 3-clause": "BSD-3-Clause",
    "bsd 3-clause license": "BSD-3-Clause",
    "new bsd": "BSD-3-Clause",
    "new bsd license": "BSD-3-Clause",
    "modified bsd": "BSD-3-Clause",
    "bsd 2-clause": "BSD-2-Clause",
    "bsd 2-clause license": "BSD-2-Clause",
    "simplified bsd": "BSD-2-Clause",
    "isc license": "ISC",
    "mpl 2.0": "MPL-2.0",
    "mozilla public license 2.0": "MPL-2.0",
    "lgplv3": "LGPL-3.0",
    "lgplv3+": "LGPL-3.0-or-later",
    "lgplv2.1": "LGPL-2.1",
    "lgplv2+": "LGPL-2.0-or-later",
    "gplv2": "GPL-2.0",
    "gplv2+": "GPL-2.0-or-later",
    "gplv3": "GPL-3.0",
    "gplv3+": "GPL-3.0-or-later",
    "psf": "PSF-2.0",
    "psf license": "PSF-2.0",
    "python software foundation license": "PSF-2.0",
    "unlicense": "Unlicense",
    "the unlicense": "Unlicense",
}

_CANONICAL: dict[str, str] = {
    i.lower(): i for i in (*OSI_APPROVED, *ACCEPTED, *DOCUMENTATION, "CC0-1.0", "MIT-CMU")
}


def alias(name: str) -> str | None:
    """The SPDX identifier a licence name stands for, or None when it is not one we know."""
    key = " ".join(name.strip().lower().split())
    return _ALIASES.get(key) or _CANONICAL.get(key)


@dataclass(frozen=True)
class Expression:
    """A parsed SPDX expression: a leaf (``licence``) or an ``op`` over ``args``."""

    op: str  # "LEAF", "AND" or "OR"
    licence: str = ""
    args: tuple[Expression, ...] = ()

    def licences(self) -> tuple[str, ...]:
        if self.op == "LEAF":
            return (self.licence,)
        return tuple(dict.fromkeys(x for a in self.args for x in a.licences()))

    def holds(self, ok: Callable[[str], bool]) -> bool:
        """Whether the terms are acceptable: every part of an AND, one branch of an OR."""
        if self.op == "LEAF":
            return ok(self.licence)
        results = [a.holds(ok) for a in self.args]
        return all(results) if self.op == "AND" else any(results)


_TOKEN = re.compile(r"\(|\)|[^\s()]+")


class ExpressionError(ValueError):
    """Not an SPDX expression of known identifiers."""


def parse(text: str) -> Expression:
    """Parse an SPDX expression (``MIT OR Apache-2.0``, ``GPL-2.0-or-later WITH X``).

    Operators are matched case-insensitively (old metadata writes ``Apache-2.0 or BSD``);
    ``WITH <exception>`` keeps the licence it qualifies.  Raises ExpressionError for an unknown
    identifier or bad syntax.
    """
    tokens = _TOKEN.findall(text)
    pos = 0

    def peek() -> str:
        return tokens[pos].upper() if pos < len(tokens) else ""

    def leaf() -> Expression:
        nonlocal pos
        if pos >= len(tokens):
            raise ExpressionError(f"{text!r}: expression ends early")
        tok = tokens[pos]
        pos += 1
        if tok == "(":
            inner = disjunction()
            if peek() != ")":
                raise ExpressionError(f"{text!r}: unbalanced parenthesis")
            pos += 1
            return inner
        ident = _CANONICAL.get(tok.lower())
        if ident is None:
            raise ExpressionError(f"{text!r}: unknown licence identifier {tok!r}")
        if peek() == "WITH":
            pos += 2  # the exception qualifies the licence; the licence decides
        return Expression("LEAF", licence=ident)

    def conjunction() -> Expression:
        nonlocal pos
        args = [leaf()]
        while peek() == "AND":
            pos += 1
            args.append(leaf())
        return args[0] if len(args) == 1 else Expression("AND", args=tuple(args))

    def disjunction() -> Expression:
        nonlocal pos
        args = [conjunction()]
        while peek() == "OR":
            pos += 1
            args.append(conjunction())
        return args[0] if len(args) == 1 else Expression("OR", args=tuple(args))

    if not tokens:
        raise ExpressionError("empty expression")
    expr = disjunction()
    if pos != len(tokens):
        raise ExpressionError(f"{text!r}: unexpected {tokens[pos]!r}")
    return expr
