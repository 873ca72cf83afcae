"""How long a value's text would be, without building the text.

A template can build a small graph that stands for a huge text: ``{% set a = [a, a, a, a] %}``
ten times over one 1,000-character string is eleven small lists, but ``a|tojson`` (or
``{{ a }}``, ``a ~ ''``, ``'%s' % a``, ``a|string``…) expands the shared references into
4¹⁰ copies of the string: a gigabyte, allocated inside one C call that no deadline can
interrupt.  The sandbox (``translators.render.sandbox``) asks this module first and refuses when the
answer is over its bound.

Both measures walk the graph once per distinct object (memoised by identity, so shared
references cost nothing extra) and stop as soon as the running total passes ``limit`` —
the cost is linear in what the template actually built, never in the expansion.  Strings are
measured in slices of ``_CHUNK`` characters, so measuring never allocates more than a slice's
escaped text.  The JSON measure is exact (tests/unit/translators/test_textsize.py); the
``repr`` one is exact but for a long string's choice of quote character and the few objects
measured by their own short ``str()``.
"""

from __future__ import annotations

from collections.abc import Callable, ItemsView, Iterable, Iterator, KeysView, ValuesView
from json.encoder import encode_basestring as _encode
from typing import Any

from jinja2.utils import Namespace

__all__ = ["json_size", "str_size"]

_CHUNK = 65536
_VIEWS = (KeysView, ValuesView)
_ITEMS = ItemsView


class _Over(Exception):
    """The running total passed the limit: stop walking."""


def _chunks(s: str) -> Any:
    return (s[i : i + _CHUNK] for i in range(0, len(s), _CHUNK))


def _repr_len(s: str) -> int:
    if len(s) <= _CHUNK:
        return len(repr(s))
    return 2 + sum(len(repr(c)) - 2 for c in _chunks(s))


def _json_str_len(s: str) -> int:
    if len(s) <= _CHUNK:
        return len(_encode(s))
    return 2 + sum(len(_encode(c)) - 2 for c in _chunks(s))


def _int_len(n: int) -> int:
    bits = n.bit_length()
    if bits > 10_000:  # str() refuses past 4300 digits; this bounds the digits instead
        return bits * 30103 // 100_000 + 2
    return len(str(n))


def _namespace_attrs(ns: Namespace) -> dict[str, Any]:
    attrs: dict[str, Any] = object.__getattribute__(ns, "_Namespace__attrs")
    return attrs


#: A container's text: (characters when empty, (child, characters around it) per child,
#: characters to add once when it has children).  Returned by a measure's ``parts``.
_Parts = tuple[int, Iterator[tuple[Any, int]], int]


def str_size(value: Any, *, limit: int) -> int:
    """Characters of ``str(value)`` (``repr`` of the items inside containers), or a number
    above ``limit`` as soon as it is known to exceed it."""

    def leaf(node: Any, level: int) -> int | None:
        if isinstance(node, str):
            return len(node) if level == 0 else _repr_len(node)
        if isinstance(node, bool) or node is None:
            return len(repr(node))
        if isinstance(node, int):
            return _int_len(node)
        if isinstance(node, float):
            return len(repr(node))
        return None

    def parts(node: Any, level: int) -> _Parts | None:
        # ", " between items: 2 around each, 2 fewer once there is one
        if isinstance(node, list):
            return 2, ((v, 2) for v in node), -2
        if isinstance(node, tuple):
            return 2, ((v, 2) for v in node), -2 + (len(node) == 1)
        if isinstance(node, (set, frozenset)):
            name = len(type(node).__name__)
            return name + 2, ((v, 2) for v in node), -2 + (2 if type(node) is not set else -name)
        if isinstance(node, dict):
            return 2, _pairs(node.items(), 2, 2), -2
        if isinstance(node, _ITEMS):  # fresh (key, value) tuples: walked as pairs
            return 14, _pairs(node, 3, 3), -2
        if isinstance(node, _VIEWS):
            return 4 + len(type(node).__name__), ((v, 2) for v in node), -2
        if isinstance(node, Namespace):
            return 14, _pairs(_namespace_attrs(node).items(), 2, 2), -2
        return None

    # Anything else reachable from a template (a loop, a macro, a cycler, a range, a
    # generator) has a short fixed repr; an undefined value raises as str() would.
    return _measure(value, limit, leaf, parts, lambda node: len(str(node)), by_level=False)


def _pairs(items: Iterable[tuple[Any, Any]], key: int, value: int) -> Iterator[tuple[Any, int]]:
    for k, v in items:
        yield k, key
        yield v, value


def json_size(value: Any, *, limit: int, indent: int | None = None) -> int:
    """Characters of ``json.dumps(value, ensure_ascii=False, indent=indent)`` as the ``tojson``
    filter writes it (tuples and sets as lists), or a number above ``limit`` as soon as it is
    known to exceed it.

    Written out rather than through ``_measure``: ``tojson`` runs a few dozen times per pod,
    so this walk is on every render's path (bench/render_isolation.py)."""
    step = None if indent is None else max(indent, 0)
    memo: dict[Any, int] = {}
    active: set[int] = set()

    def walk(node: Any, level: int) -> int:
        kind = type(node)
        if kind is str:
            return _json_str_len(node)
        if kind is int:
            return _int_len(node)
        if kind is bool or node is None:
            return 4 + (node is False)
        if kind is float:
            return len(repr(node))
        if kind is dict or kind is list or kind is tuple:
            pass
        elif isinstance(node, (str, int, float, bytes)):
            return _json_scalar_len(node)
        elif not isinstance(node, (list, tuple, set, frozenset, dict)):
            return 0  # not JSON: tojson raises (or, for an undefined value, names it)
        key: Any = id(node) if step is None else (id(node), level)
        found = memo.get(key)
        if found is not None:
            return found
        if id(node) in active:  # json refuses a cycle
            return 5
        active.add(id(node))
        if step is None:  # ", " between items, none after the last
            around, once = 2, -2
        else:  # ",", a newline and the indentation before each item and the closing bracket
            around, once = 2 + step * (level + 1), step * level
        size = 2
        if isinstance(node, dict):
            for k, v in node.items():
                size += walk(v, level + 1) + _json_key_len(k) + 2 + around
                if size > limit:
                    raise _Over
        else:
            for child in node:
                size += walk(child, level + 1) + around
                if size > limit:
                    raise _Over
        if len(node):
            size += once
        active.discard(id(node))
        memo[key] = size
        return size

    try:
        return walk(value, 0)
    except (_Over, RecursionError):
        return limit + 1


def _json_scalar_len(node: Any) -> int:
    """A subclass of str/int/float (``Markup``, an ``IntEnum``), or bytes (tojson decodes)."""
    if isinstance(node, str):
        return _json_str_len(node)
    if isinstance(node, bool):
        return 4 + (node is False)
    if isinstance(node, int):
        return _int_len(node)
    if isinstance(node, float):
        return len(repr(node))
    return 2 + 6 * len(node)


def _json_key_len(k: Any) -> int:
    if type(k) is str:
        return _json_str_len(k)
    if isinstance(k, bool) or k is None:
        return 6 + (k is False)
    if isinstance(k, int):
        return 2 + _int_len(k)
    return 2 + len(repr(k))


def _measure(
    value: Any,
    limit: int,
    leaf: Callable[[Any, int], int | None],
    parts: Callable[[Any, int], _Parts | None],
    other: Callable[[Any], int],
    *,
    by_level: bool,
) -> int:
    """Walk ``value`` once per distinct container (per container and level when the size
    depends on the level), adding up what ``leaf`` and ``parts`` say; stop past ``limit``."""
    memo: dict[Any, int] = {}
    active: set[int] = set()

    def walk(node: Any, level: int) -> int:
        size = leaf(node, level)
        if size is not None:
            return size
        key: Any = (id(node), level) if by_level else id(node)
        if key in memo:
            return memo[key]
        if id(node) in active:  # a cycle: repr writes "[...]", json refuses
            return 5
        found = parts(node, level)
        if found is None:
            size = other(node)
        else:
            active.add(id(node))
            size, children, once = found
            empty = True
            for child, around in children:
                size += walk(child, level + 1) + around
                empty = False
                if size > limit:
                    raise _Over
            size += 0 if empty else once
            active.discard(id(node))
        memo[key] = size
        return size

    try:
        return walk(value, 0)
    except (_Over, RecursionError):
        return limit + 1
