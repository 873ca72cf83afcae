"""Kubernetes resource quantities (``250m``, ``1.5Gi``, ``2e3``) as exact numbers.

A Kubernetes helper shared by the gateway (capacity overrides, resourceFieldRef) and by
translators (CPU MHz, memory MiB), so it lives in the neutral core.  Exact ``Fraction``
arithmetic avoids float rounding in ``ceil`` conversions (``0.1`` cores must be 100 m, not 101).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction


class QuantityError(ValueError):
    """An invalid quantity.  A ``ValueError`` for callers that name the field themselves; the
    pod sync treats one that escapes a translator as a translation error (``gateway.pods.act``),
    so the pod gets a reason instead of a crashed sync (the API server validates pod
    quantities; fakes and tests may not)."""


#: Suffix → multiplier (decimal SI and binary), shared with the template ``quantity`` filter.
UNITS = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_RE = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$"
)


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a quantity into an exact number of base units; ``ValueError`` names the input."""
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    m = _RE.match(value.strip())
    if not m:
        raise QuantityError(f"invalid quantity {value!r} (expected e.g. 500m, 2, 1.5Gi, 128Mi)")
    number, exp, suffix = m.groups()
    base = Fraction(number)
    if exp:
        return base * Fraction(10) ** int(exp[1:])
    return base * UNITS[suffix or ""]


def cpu_millis(value: str | int | float) -> int:
    """CPU quantity → millicores, rounded up (Kubernetes rounds sub-milli CPU up)."""
    return math.ceil(parse_quantity(value) * 1000)


def format_cpu(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def format_bytes(n: int) -> str:
    for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n and n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)
