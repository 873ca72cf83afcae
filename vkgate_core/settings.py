"""One way to read a settings table: one coercer, one error type, one report of where values came from.

Every settings table — the gateway's own sections and each backend's ``[backend.<kind>]`` — is
read with ``coerce`` (one value to the type a setting declares) and fails with ``SettingsError``,
whose ``key`` is the full dotted path (``backend.nomad.adress``) and whose text is the one line
``vkgate config check`` and ``vkgate run`` print.  Unknown keys are errors that list the known
ones (``unknown_keys``), so a typo never passes silently.

``Setting`` is one line of ``vkgate config check``'s report: the effective value of a key and
where it came from — ``default``, ``file`` (the TOML table or a ``VKGATE_*`` override) or the
environment variable a backend reads by convention (``env NOMAD_ADDR``, ``env OS_AUTH_URL``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "Kind",
    "Setting",
    "SettingsError",
    "coerce",
    "merge_tables",
    "parse_duration",
    "report",
    "unknown_keys",
]


class SettingsError(ValueError):
    """A setting is missing or invalid; ``key`` is its dotted path (``backend.nomad.address``)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


Kind = Literal["bool", "int", "float", "str", "duration", "strings", "floats", "durations"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any, *, key: str) -> float:
    """Seconds from a number or ``"500ms"``/``"30s"``/``"5m"``/``"1h"``."""
    if isinstance(value, bool):
        raise SettingsError(key, f"expected a duration, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        m = _DURATION.match(str(value))
        if not m:
            raise SettingsError(key, f"expected a duration (e.g. 30s, 5m), got {value!r}")
        seconds = float(m.group(1)) * _UNIT[m.group(2)]
    if not math.isfinite(seconds) or seconds < 0:
        raise SettingsError(key, f"expected a non-negative duration, got {value!r}")
    return seconds


def _items(key: str, value: Any) -> list[Any]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list | tuple):
        return list(value)
    raise SettingsError(key, f"expected a list, got {value!r}")


def coerce(
    key: str,
    kind: Kind,
    value: Any,
    *,
    lo: float | None = None,
    hi: float | None = None,
    choices: Sequence[str] = (),
) -> Any:
    """``value`` (from TOML, or a string from the environment) as ``kind``; else ``SettingsError``.

    ``lo``/``hi`` bound numbers (inclusive); ``choices`` restricts strings.
    """
    out: Any
    if kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if isinstance(value, str) and text in _TRUE | _FALSE:
            return text in _TRUE
        raise SettingsError(key, f"expected true or false, got {value!r}")
    if kind == "int":
        if isinstance(value, bool) or not re.fullmatch(r"\s*-?\d+\s*", str(value)):
            raise SettingsError(key, f"expected an integer, got {value!r}")
        out = int(value)
    elif kind == "float":
        if isinstance(value, bool):
            raise SettingsError(key, f"expected a number, got {value!r}")
        try:
            out = float(value)
        except (TypeError, ValueError):
            raise SettingsError(key, f"expected a number, got {value!r}") from None
        if not math.isfinite(out):
            raise SettingsError(key, f"expected a finite number, got {value!r}")
    elif kind == "duration":
        out = parse_duration(value, key=key)
    elif kind == "str":
        if not isinstance(value, str):
            raise SettingsError(key, f"expected a string, got {value!r}")
        if choices and value not in choices:
            raise SettingsError(key, f"must be one of {', '.join(choices)}, got {value!r}")
        return value
    elif kind == "strings":
        items = _items(key, value)
        if not all(isinstance(v, str) for v in items):
            raise SettingsError(key, f"expected a list of strings, got {value!r}")
        return tuple(v for v in items if v)
    elif kind in ("floats", "durations"):
        one: Kind = "float" if kind == "floats" else "duration"
        return tuple(coerce(key, one, v, lo=lo, hi=hi) for v in _items(key, value))
    else:  # pragma: no cover - Kind is a closed Literal
        raise AssertionError(kind)
    if (lo is not None and out < lo) or (hi is not None and out > hi):
        lo_s = "" if lo is None else f"{lo:g}"
        hi_s = "" if hi is None else f"{hi:g}"
        raise SettingsError(key, f"must be in {lo_s}..{hi_s}, got {value!r}")
    return out


def unknown_keys(prefix: str, table: Mapping[str, Any], known: Iterable[str]) -> None:
    """``SettingsError`` for the first key of ``table`` that is not ``known`` (sorted order)."""
    names = set(known)
    for key in sorted(table):
        if key not in names:
            raise SettingsError(
                f"{prefix}.{key}", f"unknown setting (known: {', '.join(sorted(names))})"
            )


@dataclass(frozen=True, slots=True)
class Setting:
    """One effective setting: its dotted key, value and where the value came from."""

    key: str
    value: Any
    #: "default", "file" or "env <VARIABLE>".
    source: str


def report(
    prefix: str,
    values: Mapping[str, Any],
    *,
    table: Mapping[str, Any],
    environ_keys: Mapping[str, str] = {},
    environ: Mapping[str, str] = {},
) -> list[Setting]:
    """``Setting`` lines for ``values`` (the parsed, effective settings, in their order).

    A key present in ``table`` came from the file; else one whose conventional variable
    (``environ_keys[key]``) is set in ``environ`` came from there; else it is the default.
    """
    out = []
    for key, value in values.items():
        var = environ_keys.get(key, "")
        if key in table:
            source = "file"
        elif var and environ.get(var):
            source = f"env {var}"
        else:
            source = "default"
        out.append(Setting(f"{prefix}.{key}", value, source))
    return out


def merge_tables(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``extra`` over ``base``, recursing into tables (settings file < environment < flags)."""
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge_tables(out[k], v)
        else:
            out[k] = v
    return out
