"""``translators.render.textsize`` measures a value's text without building it: the sandbox's
refusal to expand a graph of shared references rests on these numbers being right (an upper
bound, close) and cheap (linear in the graph, not in its expansion)."""

from __future__ import annotations

import json
import time
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2.utils import Namespace

from translators.render.textsize import json_size, str_size

BIG = 10**12

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.lists(inner, max_size=5).map(tuple),
        st.dictionaries(st.text(max_size=8), inner, max_size=5),
    ),
    max_leaves=40,
)


def _shared(value: Any, fan: int, levels: int) -> Any:
    for _ in range(levels):
        value = [value] * fan
    return value


@settings(max_examples=300, derandomize=True)
@given(values, st.sampled_from([None, 0, 2, 5]))
def test_json_size_is_the_length_of_the_json_text(value: Any, indent: int | None) -> None:
    assert json_size(value, limit=BIG, indent=indent) == len(
        json.dumps(value, ensure_ascii=False, indent=indent)
    )


@settings(max_examples=300, derandomize=True)
@given(values)
def test_str_size_is_the_length_of_the_str_text(value: Any) -> None:
    assert str_size(value, limit=BIG) == len(str(value))


def test_namespaces_and_dict_views_are_measured_through() -> None:
    inner = ["x" * 100] * 10
    ns = Namespace(a=inner, b={"k": inner})
    assert str_size(ns, limit=BIG) == len(str(ns))
    d = {"k": inner, 1: inner}
    for view in (d.keys(), d.values(), d.items(), {}.items()):
        assert str_size(view, limit=BIG) == len(str(view))


def test_long_strings_are_measured_in_slices() -> None:
    s = '\x01"é' * 100_000
    assert json_size([s], limit=BIG) == len(json.dumps([s], ensure_ascii=False))
    assert len(str([s])) <= str_size([s], limit=BIG) <= len(str([s])) + 10


def test_a_graph_of_shared_references_is_measured_without_expanding_it() -> None:
    bomb = _shared(["x" * 1000], fan=4, levels=30)  # 4**30 copies: an exabyte of text
    started = time.monotonic()
    assert json_size(bomb, limit=BIG) > BIG
    assert str_size(bomb, limit=BIG) > BIG
    assert json_size(_shared("x", fan=4, levels=3), limit=BIG) == len(
        json.dumps(_shared("x", fan=4, levels=3))
    )
    assert time.monotonic() - started < 0.5


def test_the_walk_stops_at_the_limit() -> None:
    calls = 0

    class Counted(list[Any]):
        def __iter__(self) -> Any:
            nonlocal calls
            calls += 1
            return super().__iter__()

    value = Counted(Counted(["x" * 10]) for _ in range(10_000))
    assert json_size(value, limit=1000) == 1001
    assert calls < 100


def test_cycles_and_huge_ints_are_measured() -> None:
    a: list[Any] = [1]
    a.append(a)
    assert str_size(a, limit=BIG) == len(str(a))
    huge = 10**100_000  # str() refuses past 4300 digits; the measure does not
    assert 100_000 <= str_size([huge], limit=BIG) <= 100_010
