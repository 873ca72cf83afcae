"""Fuzzing the templates themselves (tests/unit/translators/test_fuzz.py fuzzes the pods):
Hypothesis writes small programs out of everything that can amplify — ``*``, ``+``, ``~``,
``%``, ``format``, ``join``, ``tojson``, ``string``, ``replace``, ``center``, ``indent``,
``split``, ``append``/``extend``, lists and tuples of shared references, loops — and renders
them under small limits.  A render may fail (``TranslationError`` only) or succeed, but never
*silently* past the limits: the memory it allocated (tracemalloc's peak) stays within what
the limits allow.  A producer the sandbox forgot to measure shows up as a peak orders of
magnitude over, because what it misses is exponential (docs/design/template-safety.md).
"""

from __future__ import annotations

import os
import tracemalloc

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from translators.base import TranslationError
from translators.render.engine import Renderer
from translators.render.sandbox import RenderLimits

LIMITS = RenderLimits(
    timeout=2.0, max_output=20_000, max_value=10_000, budget=100_000, max_range=100
)
#: What a render under LIMITS may allocate at its peak: every character/item of the budget
#: at ~64 bytes (a fresh object per item) plus Jinja's own compile and frames.  A missed
#: expansion is 4**depth times a value: far past it.
PEAK = 100_000 * 64 + 4 * 2**20

FUZZ = settings(
    max_examples=int(os.environ.get("VKGATE_FUZZ_TEMPLATES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)

VARS = ["a", "b", "ns.x"]  # set by each program
sizes = st.sampled_from([0, 1, 3, 100, 5000, 9999, 10_001, 10**6, 10**9])
atoms = st.one_of(
    st.builds(lambda n: f"('x' * {n})", sizes),
    st.builds(lambda n: f"('\\x01 ' * {n})", sizes),
    st.builds(str, st.integers(-5, 10**6)),
    st.builds(lambda n: f"range({n})", sizes),
    st.sampled_from(VARS),
)


def _combine(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    two = st.tuples(inner, inner)
    return st.one_of(
        st.builds(lambda x, k: f"[{', '.join([x] * k)}]", inner, st.integers(1, 5)),
        st.builds(lambda x, k: f"({', '.join([x] * k)},)", inner, st.integers(1, 5)),
        st.builds(lambda x: f"{{'k': {x}, 1: {x}}}", inner),
        st.builds(lambda p, n: f"({p[0]} * {n})", two, sizes),
        st.builds(lambda p: f"({p[0]} + {p[1]})", two),
        st.builds(lambda p: f"({p[0]} ~ {p[1]})", two),
        st.builds(lambda p: f"('%s%s' % ({p[0]}, {p[1]}))", two),
        st.builds(lambda p: f"('{{}}{{}}'.format({p[0]}, {p[1]}))", two),
        st.builds(lambda p: f"({p[0]}|join({p[1]}))", two),
        st.builds(lambda x, f: f"({x}|{f})", inner, st.sampled_from(FILTERS)),
        st.builds(lambda x, n: f"({x}|center({n}))", inner, sizes),
        st.builds(lambda x, n: f"({x}|indent({n}))", inner, sizes),
        st.builds(lambda x, n: f"({x}|tojson(indent={n % 1000}))", inner, sizes),
        st.builds(lambda x, n: f"({x}|batch({n})|list)", inner, sizes),
        st.builds(lambda p: f"({p[0]}|string).replace('x', {p[1]}|string)", two),
        st.builds(lambda x: f"({x}|string).split()", inner),
        st.builds(lambda x: f"({x}|list + [{x}])", inner),
    )


FILTERS = ["tojson", "string", "list", "length", "upper", "pprint", "sum(start='')", "unique|list",
           "map('string')|list", "format", "wordwrap", "shquote", "b64encode"]  # fmt: skip
expressions = st.recursive(atoms, _combine, max_leaves=12)


@st.composite
def programs(draw: st.DrawFn) -> str:
    """A seed, an operation applied to its own result ``n`` times, a use of the result.  Most
    combinations are type errors (a render that fails is fine); the rest build big things."""
    seed = draw(st.sampled_from(["'x'", "'x' * 1000", "[1]", "('\\x01',)", "range(100)"]))
    n = draw(st.sampled_from([0, 1, 3, 8, 16, 24]))
    step = draw(_combine(st.just("ns.x")))
    sink = draw(_combine(st.just("ns.x")))
    grow = draw(st.sampled_from(["append", "extend"]))
    extra = draw(expressions)
    return (
        f"{{% set ns = namespace(x={seed}) %}}{{% set a = 'a' %}}{{% set b = [1] %}}\n"
        f"{{% for i in range({n}) %}}{{% set ns.x = {step} %}}{{% endfor %}}\n"
        f"{{{{ {sink} }}}}\n"
        f"{{% for i in range(40) %}}{{{{ b.{grow}({extra}) or '' }}}}{{% endfor %}}{{{{ b }}}}\n"
    )


def _peak(source: str) -> int:
    renderer = Renderer(overlay={"t/f.j2": source}, limits=LIMITS, validate=False)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        try:
            text = renderer.render_text("t/f.j2", {})
        except TranslationError:
            pass
        else:
            assert len(text) <= LIMITS.max_output
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@FUZZ
@given(st.one_of(programs(), expressions.map(lambda e: f"{{{{ {e} }}}}")))
@example(  # the shared-reference bomb this suite was written for
    "{% set a = ['x' * 1000] %}"
    + "{% set a = [a, a, a, a] %}" * 10
    + "{{ a|tojson }}{{ a }}{{ a ~ '' }}{{ a|string }}{{ '%s' % (a,) }}"
)
@example("{% set b = [1] %}{% for i in range(40) %}{{ b.extend(b) or '' }}{% endfor %}")
def test_generated_templates_never_exceed_the_limits_silently(source: str) -> None:
    peak = _peak(source)
    assert peak <= PEAK, f"{peak / 2**20:.1f} MiB at the peak for:\n{source}"
