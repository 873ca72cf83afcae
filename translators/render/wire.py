"""What the agent and its render workers say to each other: JSON frames, never pickle.

A render worker runs templates, so a template that escapes the Jinja sandbox owns its worker
(docs/design/template-safety.md, "What a worker may say").  Whatever the worker sends must
then do nothing in the agent but be read as data — pickle, which the pipes carried before,
calls whatever the bytes name.  So every message, both ways, is one *frame*: a 4-byte
big-endian length, then that many bytes of one JSON object in UTF-8.  Before it builds
anything from a worker's frame the agent refuses (``WireError``):

* a frame longer than ``Bounds.frame`` (the header is read, the body is not);
* bytes that are not UTF-8, or not JSON;
* more than ``Bounds.values`` values (``count_values``: what the agent would hold);
* a message not of the kinds and field types ``read_reply`` knows.

The worker names no class: an error comes back as fields, and the agent makes the error
itself, of a type from ``ERRORS`` (the project's own) looked up by a name the worker sends.

**Values** travel as plain JSON when they read back equal (``json.dumps``, then ``json.loads``
and ``==``: all in C).  Otherwise — a tuple, a set, bytes, a date, a non-finite float, a
non-string key: what YAML output and the agent's contexts may hold — the value is sent
*tagged*: each such part becomes ``{"$": kind, "v": payload}`` (``TAGS``), and a real mapping
that has a ``"$"`` key is sent as a ``dict`` tag too, so data can never pass for a tag.
Shared references are sent once per reference (a tree arrives; YAML aliases are copied).

**Strings** arrive as the worker held them, code point for code point.  The JSON is escaped
to ASCII, unless that writes a ``\\udXXX`` escape (a character past U+FFFF, a surrogate code
point; U+D000-U+D7FF too, alike at a glance): a JSON reader joins ``\\ud83d\\ude00``
into one character, so a template's ``"\\ud83d" ~ "\\ude00"`` (two code points) would come
back as one.  Such a frame is written unescaped instead (JSON escapes only ``"``, ``\\`` and
U+0000-U+001F), a lone surrogate carried as its 3-byte encoding (``surrogatepass``), never
paired with its neighbour or replaced.  Whether a backend accepts such a string is the
backend's business, as it is when the agent renders in its own process.
"""

from __future__ import annotations

import base64
import datetime
import json
import math
import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from translators.base import TranslationError

__all__ = [
    "ERRORS",
    "HEADER",
    "TAGS",
    "Bounds",
    "Compiled",
    "Failed",
    "Need",
    "Ok",
    "WireError",
    "count_values",
    "decode",
    "encode",
    "error_frame",
    "frame",
    "read_reply",
    "value_frame",
]

#: The length of a frame's body, before it.
HEADER = struct.Struct("!I")
#: The error types a worker may name: the agent makes the error itself, from these alone.
ERRORS: Mapping[str, type[TranslationError]] = {"TranslationError": TranslationError}
#: The kinds of tagged values (``{"$": kind, "v": payload}``).
TAGS = frozenset({"dict", "tuple", "set", "frozenset", "bytes", "date", "datetime", "float"})
_TAG = "$"
#: A cycle is a RecursionError here (cheaper than tracking every container), then a WireError.
_ASCII = json.JSONEncoder(allow_nan=False, check_circular=False, separators=(",", ":")).encode
_UTF8 = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, check_circular=False, separators=(",", ":")
).encode


def _dumps(value: Any) -> str:
    """JSON text of ``value``: escaped to ASCII (CPython writes that faster), unless that
    would write a surrogate as ``\\udXXX``: a reader joins a high and a low one, so a string
    that holds them as two code points would not come back as it was."""
    text = _ASCII(value)
    return _UTF8(value) if "\\ud" in text else text


class WireError(Exception):
    """A frame or a value that is not what the protocol allows (the reason, short)."""


@dataclass(frozen=True, slots=True)
class Bounds:
    """What the agent accepts in one frame from a worker."""

    #: Bytes of a frame's body.
    frame: int
    #: Values (objects, arrays, scalars) in a frame: the JSON tokens that open a value.
    values: int

    @classmethod
    def of(cls, *, max_output: int, max_nodes: int) -> Bounds:
        """The bounds for renders under ``RenderLimits(max_output, max_nodes)``: room for the
        largest reply such a render can give — ``max_output`` characters, each of which JSON
        may write as 6 bytes (``\\u001f``), and ``max_nodes`` values, each of which a tag may
        make 5 — so a worker that obeys its limits never meets them."""
        return cls(frame=8 * max_output + 2**20, values=5 * max_nodes + 1024)


# --------------------------------------------------------------------------- values


def encode(value: Any, *, from_json: bool = False) -> tuple[str, bool]:
    """``value`` → (its JSON text, whether it is tagged); ``WireError`` for a value no
    tag describes (an object, a cycle, an integer past Python's 4300 digits).  ``from_json``:
    ``value`` is what ``json.loads`` made (or a string), so it holds no tuple and no
    non-string key, and the text need not be read back to know it stands for the value."""
    try:
        text = _dumps(value)
    except (TypeError, ValueError, RecursionError):
        pass
    else:
        if from_json:
            return text, False
        # json.dumps makes a tuple a list and a number key a string without a word: the text
        # stands for the value only if it reads back equal
        try:
            if json.loads(text) == value:
                return text, False
        except RecursionError:
            pass
    try:
        return _dumps(_tag(value)), True
    except (ValueError, RecursionError) as exc:
        raise WireError(f"cannot be sent as JSON: {exc}") from None


def decode(value: Any, *, tagged: bool) -> Any:
    """A value as ``json.loads`` read it → the value ``encode`` was given."""
    if not tagged:
        return value
    try:
        return _untag(value)
    except RecursionError:
        raise WireError("tagged value nests too deep") from None


def _tag(v: Any) -> Any:
    t = type(v)
    if t is str or t is int or t is bool or v is None:
        return v
    if t is float:
        return v if math.isfinite(v) else {_TAG: "float", "v": repr(v)}
    if t is list:
        return [_tag(x) for x in v]
    if t is dict:
        if _TAG not in v and all(type(k) is str for k in v):
            return {k: _tag(x) for k, x in v.items()}
        return {_TAG: "dict", "v": [[_tag(k), _tag(x)] for k, x in v.items()]}
    if t is tuple:
        return {_TAG: "tuple", "v": [_tag(x) for x in v]}
    if t is set or t is frozenset:
        return {_TAG: t.__name__, "v": [_tag(x) for x in v]}
    if t is bytes:
        return {_TAG: "bytes", "v": base64.b64encode(v).decode("ascii")}
    if t is datetime.datetime:
        return {_TAG: "datetime", "v": v.isoformat()}
    if t is datetime.date:
        return {_TAG: "date", "v": v.isoformat()}
    # subclasses as their base (an enum member, an OrderedDict), as plain JSON sends them
    for base, plain in _BASES:
        if isinstance(v, base):
            return _tag(plain(v))
    raise WireError(
        f"cannot carry a value of type {t.__name__!r} (JSON data, tuples, sets, bytes and "
        "dates only)"
    )


_BASES: tuple[tuple[type, Callable[[Any], Any]], ...] = (
    (int, int),
    (float, float),
    (str, str.__str__),  # a str enum's value, not its name
    (list, list),
    (dict, dict),
    (tuple, tuple),
    (bytes, bytes),
)


def _untag(v: Any) -> Any:
    if isinstance(v, list):
        return [_untag(x) for x in v]
    if not isinstance(v, dict):
        return v
    if _TAG not in v:
        return {k: _untag(x) for k, x in v.items()}
    kind, payload = v[_TAG], v.get("v")
    if len(v) != 2 or kind not in TAGS:
        raise WireError(f"unknown tag {str(kind)[:40]!r}")
    try:
        return _UNTAG[kind](payload)
    except WireError:
        raise
    except (TypeError, ValueError) as exc:  # unhashable key, bad base64 or date, …
        raise WireError(f"bad {kind} tag: {str(exc)[:80]}") from None


def _items(payload: Any) -> list[Any]:
    if not isinstance(payload, list):
        raise TypeError("payload is not a list")
    return [_untag(x) for x in payload]


def _text(payload: Any) -> str:
    if not isinstance(payload, str):
        raise TypeError("payload is not a string")
    return payload


def _pairs(payload: Any) -> dict[Any, Any]:
    pairs = _items(payload)
    if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
        raise TypeError("payload is not a list of pairs")
    return {k: x for k, x in pairs}


def _float(payload: Any) -> float:
    if payload not in ("nan", "inf", "-inf"):
        raise ValueError("not nan, inf or -inf")
    return float(payload)


_UNTAG: dict[str, Callable[[Any], Any]] = {
    "dict": _pairs,
    "tuple": lambda p: tuple(_items(p)),
    "set": lambda p: set(_items(p)),
    "frozenset": lambda p: frozenset(_items(p)),
    "bytes": lambda p: base64.b64decode(_text(p), validate=True),
    "date": lambda p: datetime.date.fromisoformat(_text(p)),
    "datetime": lambda p: datetime.datetime.fromisoformat(_text(p)),
    "float": _float,
}

# --------------------------------------------------------------------------- frames

#: A JSON string, unrolled (no backtracking per character): what ``count_values`` skips.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def count_values(body: bytes, *, limit: int) -> int:
    """How many values JSON text ``body`` holds, at most: the ``[``, ``{`` and ``,`` outside
    strings (each value after the first follows one), plus one.  Counted in C; the strings
    are skipped only when the count with them is over ``limit``."""
    count = body.count(b"[") + body.count(b"{") + body.count(b",") + 1
    if count <= limit:
        return count
    bare = _STRING.sub(b"", body)
    return bare.count(b"[") + bare.count(b"{") + bare.count(b",") + 1


def frame(message: Mapping[str, Any], **values: str) -> bytes:
    """One frame: ``message`` (plain JSON fields) with each of ``values`` (JSON text from
    ``encode``) as a field of that name."""
    text = _dumps(message)
    if values:
        text = text[:-1] + "".join(f',"{k}":{v}' for k, v in values.items()) + "}"
    body = text.encode("utf-8", "surrogatepass")
    return HEADER.pack(len(body)) + body


def value_frame(value: Any, *, retire: bool, bounds: Bounds, from_json: bool = False) -> bytes:
    """The worker's ``ok`` answer (``from_json`` as for ``encode``); ``WireError`` when it is
    over the agent's ``bounds`` (a worker that obeys its limits meets them only with YAML
    aliases copied many times over)."""
    text, tagged = encode(value, from_json=from_json)
    data = frame({"kind": "ok", "tagged": tagged, "retire": retire}, value=text)
    if len(data) - HEADER.size > bounds.frame:
        raise WireError(f"output is {len(data)} bytes as JSON (max {bounds.frame})")
    values = count_values(data[HEADER.size :], limit=bounds.values)
    if values > bounds.values:
        raise WireError(f"output has {values} values once YAML aliases are copied")
    return data


#: Characters of an error's text a worker sends (well inside any frame bound).
_DETAIL = 65536


def error_frame(exc: TranslationError, *, retire: bool, peak_kib: int) -> bytes:
    """The worker's ``error`` answer: the error as fields, its type by name."""
    name = type(exc).__name__ if type(exc).__name__ in ERRORS else "TranslationError"
    return frame(
        {
            "kind": "error",
            "error": name,
            "detail": exc.detail[:_DETAIL],
            "template": exc.template,
            "line": exc.line,
            "field": exc.field,
            "retire": retire,
            "peak_kib": peak_kib,
        }
    )


def parse(body: bytes, *, bounds: Bounds | None = None) -> dict[str, Any]:
    """A frame's body → its message object (``WireError`` for anything else)."""
    if bounds is not None:
        if len(body) > bounds.frame:
            raise WireError(f"a frame of {len(body)} bytes (max {bounds.frame})")
        values = count_values(body, limit=bounds.values)
        if values > bounds.values:
            raise WireError(f"a frame of {values} values (max {bounds.values})")
    try:
        message = json.loads(body.decode("utf-8", "surrogatepass"))
    except UnicodeDecodeError:
        raise WireError("a frame that is not UTF-8") from None
    except RecursionError:
        raise WireError("a frame that nests too deep") from None
    except ValueError as exc:  # JSONDecodeError, an integer of too many digits
        raise WireError(f"a frame that is not JSON ({str(exc)[:80]})") from None
    if not isinstance(message, dict) or not isinstance(message.get("kind"), str):
        raise WireError("a frame that is not a message")
    return message


# --------------------------------------------------------------------------- replies


@dataclass(frozen=True, slots=True)
class Need:
    """The worker does not hold environment ``key``: send it, then the request again."""

    key: str


@dataclass(frozen=True, slots=True)
class Compiled:
    """The worker compiled ``template``; ``debug_info`` maps its code lines to template lines."""

    template: str
    debug_info: str


@dataclass(frozen=True, slots=True)
class Ok:
    value: Any
    retire: bool


@dataclass(frozen=True, slots=True)
class Failed:
    error: TranslationError
    retire: bool
    peak_kib: int


Reply = Need | Compiled | Ok | Failed

_DEBUG_INFO = re.compile(r"(?:\d{1,9}=\d{1,9}(?:&\d{1,9}=\d{1,9})*)?")
#: What each op may answer (``translators.render.worker``): text, parsed output, nothing.
_RESULTS: dict[str, Callable[[Any], bool]] = {
    "text": lambda v: isinstance(v, str),
    "render": lambda v: True,
    "check": lambda v: v is None,
}


def _field(message: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = message.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        what = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise WireError(f"a message of kind {message['kind']!r} whose {name} is not a {what}")
    return value


def read_reply(body: bytes, *, op: str, bounds: Bounds) -> Reply:
    """A worker's frame body → what it says, checked field by field."""
    message = parse(body, bounds=bounds)
    kind = message["kind"]
    if kind == "need":
        return Need(_field(message, "key", str))
    if kind == "compiled":
        info = _field(message, "debug_info", str)
        if not _DEBUG_INFO.fullmatch(info):
            raise WireError("a compiled message whose debug_info is not a line map")
        return Compiled(_field(message, "template", str), info)
    if kind == "ok":
        value = decode(message.get("value"), tagged=_field(message, "tagged", bool))
        if op not in _RESULTS or not _RESULTS[op](value):
            raise WireError(f"an answer of type {type(value).__name__} to {op!r}")
        return Ok(value, _field(message, "retire", bool))
    if kind == "error":
        name = _field(message, "error", str)
        if name not in ERRORS:
            raise WireError(f"an error of type {name[:40]!r}, not one a worker may raise")
        line = message.get("line")
        if line is not None and (type(line) is not int or line < 0):
            raise WireError("an error message whose line is not a line number")
        error = ERRORS[name](
            _field(message, "detail", str),
            template=_field(message, "template", str),
            line=line,
            field=_field(message, "field", str),
        )
        peak = _field(message, "peak_kib", int)
        return Failed(error, _field(message, "retire", bool), max(peak, 0))
    raise WireError(f"a message of kind {kind[:40]!r}")
