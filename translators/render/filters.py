"""Helper filters every translation template gets (documented in templates/README.md).

They are plain functions of their arguments, deterministic and side-effect free, so a template
renders the same spec for the same pod every time (update detection and golden files rely on
that).  Bad input raises ``ValueError`` with the filter name; the renderer turns it into a
``TranslationError`` naming the template line.

=================  ====================================================================
``cpu_mhz``        CPU quantity → MHz, rounded up: ``"250m"|cpu_mhz(2400)`` → 600
``memory_mb``      memory quantity → MiB, rounded up: ``"1Gi"|memory_mb`` → 1024
``quantity``       any quantity → number in a unit: ``"1.5Gi"|quantity("Mi")`` → 1536
``tojson``         compact JSON, keys in insertion order, non-ASCII kept
``shquote``        POSIX-shell quoting of a string, or of each item of a list joined by spaces
``dns_label``      lowercase RFC 1123 label (``[a-z0-9-]``, ≤ 63, alphanumeric ends)
``truncate_id``    cut to a length, keeping uniqueness with a hash suffix when cut
``b64encode``      base64 of the UTF-8 text (or bytes)
=================  ====================================================================
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import shlex
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import jinja2

from translators.base import parse_quantity
from vkgate_core.quantity import UNITS as _UNITS

_ROUNDING: dict[str, Callable[[Fraction], int]] = {
    "ceil": math.ceil,
    "floor": math.floor,
    "round": round,
}


def _parse(name: str, value: Any) -> Fraction:
    if value is None or value == "":
        raise ValueError(f"{name}: empty quantity (use |default(...) for a fallback)")
    try:
        return parse_quantity(value)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{name}: {exc}") from None


def cpu_mhz(value: Any, mhz_per_core: Any = 1000) -> int:
    """CPU quantity (cores) → MHz at ``mhz_per_core``, rounded up; at least 1 for non-zero."""
    cores = _parse("cpu_mhz", value)
    per_core = _parse("cpu_mhz(mhz_per_core)", mhz_per_core)
    if per_core <= 0:
        raise ValueError(f"cpu_mhz: mhz_per_core must be positive, got {mhz_per_core!r}")
    mhz = math.ceil(cores * per_core)
    return max(mhz, 1) if cores > 0 else mhz


def memory_mb(value: Any) -> int:
    """Memory quantity (bytes) → MiB, rounded up."""
    return math.ceil(_parse("memory_mb", value) / 2**20)


def quantity(value: Any, unit: str = "", rounding: str = "none") -> int | float:
    """Any Kubernetes quantity → a number of ``unit`` (``""`` base units, ``m``, ``Mi``, ``G``…).

    ``rounding`` is ``none`` (exact; an int when whole, else a float), ``ceil``, ``floor`` or
    ``round``.
    """
    if unit not in _UNITS:
        raise ValueError(f"quantity: unknown unit {unit!r} (known: {', '.join(_UNITS)})")
    number = _parse("quantity", value) / _UNITS[unit]
    if rounding == "none":
        return int(number) if number.denominator == 1 else float(number)
    if rounding not in _ROUNDING:
        raise ValueError(f"quantity: rounding must be none, ceil, floor or round, got {rounding!r}")
    return _ROUNDING[rounding](number)


def tojson(value: Any, indent: int | None = None) -> str:
    """JSON for embedding in a JSON template (``"x": {{ v|tojson }}``)."""
    return json.dumps(value, ensure_ascii=False, indent=indent, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, jinja2.Undefined):
        str(value)  # StrictUndefined raises UndefinedError naming the missing variable
        return None
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    raise TypeError(f"tojson: {type(value).__name__} is not JSON serializable")


def shquote(value: Any) -> str:
    """Quote for a POSIX shell; a list becomes its quoted items joined by single spaces."""
    if isinstance(value, (list, tuple)):
        return " ".join(shlex.quote(str(v)) for v in value)
    return shlex.quote(str(value))


_NOT_LABEL = re.compile(r"[^a-z0-9-]+")


def dns_label(value: Any, max_length: int = 63) -> str:
    """A valid RFC 1123 label: lowercase, other characters → ``-``, trimmed to ``max_length``.

    Over-long values are cut with a hash suffix (see ``truncate_id``) so two long names that
    share a prefix stay distinct.
    """
    text = _NOT_LABEL.sub("-", str(value).lower()).strip("-")
    text = re.sub(r"-{2,}", "-", text)
    if not text:
        raise ValueError(f"dns_label: {value!r} has no letters or digits")
    return truncate_id(text, max_length, sep="-").strip("-")


def truncate_id(value: Any, max_length: int = 63, hash_length: int = 8, sep: str = "-") -> str:
    """``value`` if it fits, else a prefix + ``sep`` + the first ``hash_length`` hex digits of
    its SHA-256, exactly ``max_length`` long — deterministic and collision-resistant."""
    text = str(value)
    if max_length < hash_length + len(sep) + 1:
        raise ValueError(f"truncate_id: max_length {max_length} too small for the hash suffix")
    if len(text) <= max_length:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:hash_length]
    return text[: max_length - hash_length - len(sep)] + sep + digest


def b64encode(value: Any) -> str:
    data = value if isinstance(value, bytes) else str(value).encode()
    return base64.b64encode(data).decode()


FILTERS: dict[str, Callable[..., Any]] = {
    "cpu_mhz": cpu_mhz,
    "memory_mb": memory_mb,
    "quantity": quantity,
    "tojson": tojson,
    "shquote": shquote,
    "dns_label": dns_label,
    "truncate_id": truncate_id,
    "b64encode": b64encode,
}
