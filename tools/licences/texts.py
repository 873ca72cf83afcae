"""Classify a licence text: which licences it holds, and whether it names a forbidden one.

A small fingerprint classifier, not a general one: the text is normalised (lower case, words
only) and each licence is recognised by phrases only its own text carries.  A file that holds
several licences (an Apache-2.0 text followed by an MIT one) yields all of them; a file none of
whose phrases match yields nothing, and the caller reports it as unknown.  Forbidden licences
(BUSL, SSPL, the Elastic License, the Commons Clause, anything calling itself "source
available") are found by name wherever they appear, whatever else the text holds.
See docs/licences.md, "How the check works".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["FORBIDDEN", "TextResult", "classify_text", "normalise"]

_WORDS = re.compile(r"[a-z0-9]+")


def normalise(text: str) -> str:
    """Lower case, every run of non-alphanumerics one space (``and/or`` -> ``and or``)."""
    return " ".join(_WORDS.findall(text.lower()))


def _n(*phrases: str) -> tuple[str, ...]:
    return tuple(normalise(p) for p in phrases)


@dataclass(frozen=True)
class _Rule:
    """A licence is in the text when any ``any_of`` phrase is, every ``all_of`` phrase is, and
    no ``none_of`` phrase is (within the segment the rule is applied to)."""

    licence: str
    any_of: tuple[str, ...]
    all_of: tuple[str, ...] = ()
    none_of: tuple[str, ...] = ()

    def matches(self, text: str) -> bool:
        return (
            any(p in text for p in self.any_of)
            and all(p in text for p in self.all_of)
            and not any(p in text for p in self.none_of)
        )


#: Whole-text rules: each phrase occurs in that licence's own text and in no other's.
_RULES: tuple[_Rule, ...] = (
    _Rule(
        "Apache-2.0",
        _n(
            "Apache License Version 2.0, January 2004",
            "Licensed under the Apache License, Version 2.0",
            "Apache License, Version 2.0 (the License)",
        ),
    ),
    _Rule("Apache-1.1", _n("The Apache Software License, Version 1.1")),
    _Rule(
        "MIT",
        _n("Permission is hereby granted, free of charge, to any person obtaining a copy"),
        all_of=_n("The above copyright notice and this permission notice shall be included"),
    ),
    _Rule(
        "MIT-0",
        _n("Permission is hereby granted, free of charge, to any person obtaining a copy"),
        none_of=_n("shall be included in all copies"),
    ),
    _Rule(
        "ISC",
        _n(
            "Permission to use, copy, modify, and/or distribute this software for any purpose "
            "with or without fee is hereby granted, provided that the above copyright notice and "
            "this permission notice appear in all copies",
            "Permission to use, copy, modify, and distribute this software for any purpose "
            "with or without fee is hereby granted, provided that the above copyright notice and "
            "this permission notice appear in all copies",
        ),
    ),
    _Rule(
        "0BSD",
        _n(
            "Permission to use, copy, modify, and/or distribute this software for any purpose "
            "with or without fee is hereby granted. THE SOFTWARE IS PROVIDED",
        ),
    ),
    _Rule("MPL-2.0", _n("Mozilla Public License Version 2.0", "Mozilla Public License, v. 2.0")),
    _Rule("MPL-1.1", _n("Mozilla Public License Version 1.1")),
    _Rule(
        "Unlicense", _n("This is free and unencumbered software released into the public domain")
    ),
    _Rule("CC0-1.0", _n("CC0 1.0 Universal", "Creative Commons Legal Code CC0")),
    _Rule("EPL-1.0", _n("Eclipse Public License - v 1.0")),
    _Rule("EPL-2.0", _n("Eclipse Public License - v 2.0")),
    _Rule("GPL-2.0", _n("GNU GENERAL PUBLIC LICENSE Version 2, June 1991")),
    _Rule("GPL-3.0", _n("GNU GENERAL PUBLIC LICENSE Version 3, 29 June 2007")),
    _Rule("LGPL-2.0", _n("GNU LIBRARY GENERAL PUBLIC LICENSE Version 2, June 1991")),
    _Rule("LGPL-2.1", _n("GNU LESSER GENERAL PUBLIC LICENSE Version 2.1, February 1999")),
    _Rule("LGPL-3.0", _n("GNU LESSER GENERAL PUBLIC LICENSE Version 3, 29 June 2007")),
    _Rule("AGPL-3.0", _n("GNU AFFERO GENERAL PUBLIC LICENSE Version 3, 19 November 2007")),
    _Rule(
        "Zlib",
        _n(
            "This software is provided 'as-is', without any express or implied warranty. In no "
            "event will the authors be held liable for any damages arising from the use of this "
            "software"
        ),
        all_of=_n("Altered source versions must be plainly marked as such"),
    ),
    _Rule(
        "Python-2.0",
        _n("BEOPEN.COM LICENSE AGREEMENT FOR PYTHON 2.0"),
        all_of=_n("CNRI LICENSE AGREEMENT FOR PYTHON"),
    ),
    _Rule(
        "PSF-2.0",
        _n("PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2"),
        none_of=_n("BEOPEN.COM LICENSE AGREEMENT FOR PYTHON 2.0"),
    ),
    _Rule("BlueOak-1.0.0", _n("Blue Oak Model License")),
    _Rule("BSL-1.0", _n("Boost Software License - Version 1.0")),
    _Rule("CC-BY-4.0", _n("Attribution 4.0 International"), none_of=_n("ShareAlike")),
    _Rule("CC-BY-SA-4.0", _n("Attribution-ShareAlike 4.0 International")),
)

#: The BSD family shares one opening; each occurrence starts a segment classified on its own
#: (a file may hold a 3-clause text for one part and a 2-clause text for another); a few
#: words may name the software ("binary forms of libcap/psx, with or without").
_BSD_OPENING = re.compile(
    r"redistribution and use in source and binary forms(?: [a-z0-9]+){0,4} with or without "
    r"modification are permitted provided that"
)
_BSD_ADVERTISING = normalise(
    "All advertising materials mentioning features or use of this software"
)
_BSD_ENDORSE = normalise("be used to endorse or promote products derived from")
_BSD_BINARY = normalise("Redistributions in binary form must reproduce")
_BSD_VIEWS = normalise("The views and conclusions contained in the software and documentation")

#: Licences that are not open source, found by name: a text naming one is refused whatever
#: else it holds (docs/licences.md, "What fails").
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "BUSL-1.1": _n("Business Source License", "BUSL-1.1", "BUSL 1.1"),
    "SSPL-1.0": _n("Server Side Public License"),
    "Elastic-2.0": _n("Elastic License"),
    "Commons-Clause": _n("Commons Clause"),
    "source-available": _n("source available", "source-available"),
}


@dataclass(frozen=True)
class TextResult:
    """What a text holds: recognised licences and forbidden ones (both sorted, maybe empty)."""

    licences: tuple[str, ...]
    forbidden: tuple[str, ...]

    @property
    def unknown(self) -> bool:
        return not self.licences and not self.forbidden


def _bsd(text: str) -> set[str]:
    found: set[str] = set()
    starts = [m.start() for m in _BSD_OPENING.finditer(text)]
    for i, start in enumerate(starts):
        segment = text[start : starts[i + 1] if i + 1 < len(starts) else len(text)]
        if _BSD_ADVERTISING in segment:
            found.add("BSD-4-Clause")
        elif _BSD_ENDORSE in segment:
            found.add("BSD-3-Clause")
        elif _BSD_VIEWS in segment:
            found.add("BSD-2-Clause-Views")
        elif _BSD_BINARY in segment:
            found.add("BSD-2-Clause")
        else:
            found.add("BSD-1-Clause")
    return found


def classify_text(text: str) -> TextResult:
    """The licences ``text`` holds (SPDX identifiers) and the forbidden licences it names."""
    norm = f" {normalise(text)} "
    forbidden = sorted(
        name for name, phrases in FORBIDDEN.items() if any(f" {p} " in norm for p in phrases)
    )
    found = {rule.licence for rule in _RULES if rule.matches(norm)}
    found |= _bsd(norm)
    return TextResult(licences=tuple(sorted(found)), forbidden=tuple(forbidden))
