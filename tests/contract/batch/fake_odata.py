"""The OData ``$filter`` subset the fake Batch service evaluates: ``prop op literal`` terms
(``eq ne gt ge lt le``) over string, integer and ``datetime'…'`` literals, combined with
``and``/``or``/``not`` and parentheses; only properties the reference lists as filterable."""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable
from typing import Any

JSON = dict[str, Any]
Pred = Callable[[JSON], bool]


class ODataError(ValueError):
    """The filter cannot be parsed or uses a property that is not filterable."""


def _both(a: Pred, b: Pred) -> Pred:
    return lambda t: a(t) and b(t)


def _either(a: Pred, b: Pred) -> Pred:
    return lambda t: a(t) or b(t)


_TOKEN = re.compile(
    r"\s*(?:(?P<lp>\()|(?P<rp>\))|(?P<dt>datetime'[^']*')|(?P<str>'(?:[^']|'')*')"
    r"|(?P<num>-?\d+)|(?P<word>[A-Za-z_][A-Za-z0-9_/]*))",
    re.IGNORECASE,
)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ODataError(f"Cannot parse $filter near {text[pos:]!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def parse_filter(text: str, allowed: set[str]) -> Callable[[JSON], bool]:
    """``prop op literal`` terms with and/or/not and parentheses (OData subset Batch accepts)."""
    toks = _tokens(text)
    pos = 0

    def peek() -> tuple[str, str]:
        return toks[pos] if pos < len(toks) else ("", "")

    def take() -> tuple[str, str]:
        nonlocal pos
        tok = peek()
        pos += 1
        return tok

    def literal(kind: str, value: str) -> Any:
        if kind == "dt":
            raw = value[len("datetime'") : -1]
            return _dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
        if kind == "str":
            return value[1:-1].replace("''", "'")
        if kind == "num":
            return int(value)
        raise ODataError(f"Expected a literal, got {value!r}")

    def term() -> Callable[[JSON], bool]:
        kind, value = take()
        if kind == "lp":
            inner = expr()
            if take()[0] != "rp":
                raise ODataError("Unbalanced parentheses in $filter")
            return inner
        if kind == "word" and value.lower() == "not":
            inner = term()
            return lambda t: not inner(t)
        if kind != "word" or value.lower() not in allowed:
            raise ODataError(f"Property {value!r} cannot be used in $filter")
        prop = value
        op = take()[1].lower()
        if op not in ("eq", "ne", "gt", "ge", "lt", "le"):
            raise ODataError(f"Unknown operator {op!r}")
        lk, lv = take()
        lit = literal(lk, lv)

        def test(t: JSON) -> bool:
            cur: Any = t
            for part in prop.split("/"):
                cur = next((v for k, v in (cur or {}).items() if k.lower() == part.lower()), None)
            if isinstance(lit, _dt.datetime):
                if not isinstance(cur, str):
                    return False
                cur = _dt.datetime.fromisoformat(cur.replace("Z", "+00:00"))
            elif isinstance(lit, str) and isinstance(cur, str):
                cur, other = cur.lower(), lit.lower()
                return _compare(op, cur, other)
            if cur is None:
                return op == "ne"
            return _compare(op, cur, lit)

        return test

    def conj() -> Callable[[JSON], bool]:
        left = term()
        while peek()[0] == "word" and peek()[1].lower() == "and":
            take()
            right = term()
            left = _both(left, right)
        return left

    def expr() -> Callable[[JSON], bool]:
        left = conj()
        while peek()[0] == "word" and peek()[1].lower() == "or":
            take()
            right = conj()
            left = _either(left, right)
        return left

    pred = expr()
    if pos != len(toks):
        raise ODataError(f"Unexpected {toks[pos][1]!r} in $filter")
    return pred


def _compare(op: str, a: Any, b: Any) -> bool:
    try:
        return {
            "eq": a == b,
            "ne": a != b,
            "gt": a > b,
            "ge": a >= b,
            "lt": a < b,
            "le": a <= b,
        }[op]
    except TypeError:
        return False
