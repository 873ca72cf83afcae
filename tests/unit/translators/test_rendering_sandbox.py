"""The sandbox holds: escapes fail with TranslationError, costs are bounded, nothing hangs."""

from __future__ import annotations

import os
import time

import pytest

from translators.base import TranslationError
from translators.render.engine import Renderer
from translators.render.sandbox import RenderLimits


def render(source: str, context: dict | None = None, **limits: float) -> str:
    r = Renderer(overlay={"t/x.j2": source}, limits=RenderLimits(**limits))  # type: ignore[arg-type]
    return r.render_text("t/x.j2", context or {"pod": {"metadata": {"name": "p"}}, "s": "abc"})


def fails(
    source: str, match: str, context: dict | None = None, **limits: float
) -> TranslationError:
    with pytest.raises(TranslationError, match=match) as info:
        render(source, context, **limits)
    assert info.value.template == "t/x.j2"
    return info.value


@pytest.mark.parametrize(
    "source",
    [
        "{{ s.__class__ }}",
        "{{ s.__class__.__mro__[1].__subclasses__() }}",
        "{{ ''.__class__.__base__.__subclasses__() }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ namespace.__init__.__globals__['os'] }}",
        "{{ joiner.__init__.__globals__.__builtins__ }}",
        "{{ range.__self__ }}",
        "{{ s.upper.__globals__ }}",
        "{{ pod.__class__.__dict__ }}",
        "{{ self.__init__.__globals__ }}",
        "{{ (s|attr('__class__')) }}",
        "{{ s['__class__'] }}",
    ],
)
def test_attribute_escapes_are_blocked(source: str) -> None:
    err = fails(source, r"sandbox|undefined")
    assert err.line == 1


@pytest.mark.parametrize(
    "source",
    [
        "{{ open('/etc/passwd').read() }}",
        "{{ __import__('os').environ }}",
        "{{ os.environ }}",
        "{{ environ }}",
        "{{ import('socket') }}",
        "{% include '/etc/passwd' %}",
        "{% include '../../../etc/passwd' %}",
        "{% import 'os' as os %}",
        "{{ lipsum(10**9) }}",
        "{{ [1,2]|random }}",
    ],
)
def test_no_files_environment_network_or_randomness(source: str) -> None:
    with pytest.raises(TranslationError):
        render(source)


def test_no_environment_values_leak() -> None:
    os.environ["VKGATE_TEST_SECRET"] = "leaky"
    try:
        with pytest.raises(TranslationError):
            render("{{ environ['VKGATE_TEST_SECRET'] }}")
    finally:
        del os.environ["VKGATE_TEST_SECRET"]


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("{% for i in range(10**9) %}{% endfor %}", r"range\(\) of 1000000000 items"),
        ("{{ 'a' * 10**9 }}", r"'\*' would build 1000000000"),
        ("{{ [0] * 10**9 }}", r"'\*' would build"),
        ("{{ 10 ** 100000000 }}", r"integer of about"),
        ("{% set x = 10**1000 %}{{ x * x * x * x * x }}", r"integer of about"),
        ("{{ '%0999999999d' % 1 }}", r"formatting would build"),
        ("{{ '%*d' % (999999999, 1) }}", r"formatting would build"),
        ("{{ '{:>999999999}'.format(1) }}", r"str.format\(\) would build"),
        ("{{ '{:>{w}}'.format(1, w=999999999) }}", r"str.format\(\) would build"),
        ("{{ 'x'|center(999999999) }}", r"filter center"),
        ("{{ 'x'|indent(999999999) }}", r"filter indent"),
        ("{{ 'x'.ljust(999999999) }}", r"str.ljust"),
        ("{{ 'x'.zfill(999999999) }}", r"str.zfill"),
        ("{{ ('a' * 1000000).replace('', 'b' * 1000) }}", r"str.replace"),
        ("{{ ('a' * 1000000)|replace('', 'b' * 1000) }}", r"filter replace"),
        ("{{ ('b' * 100000).join(range(10000)) }}", r"str.join"),
        ("{{ range(10000)|join('b' * 100000) }}", r"filter join"),
        ("{{ [1]|batch(999999999, 0)|list }}", r"filter batch"),
        ("{{ '%s'|format('x') ~ ('x' * 4000000) ~ ('x' * 4000000) }}", r"'~' would build"),
        (
            "{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}"
            "{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
            r"'~' would build",
        ),
        (
            "{% set big = 'x' * 1000000 %}{% set s %}{% for i in range(5000) %}{{ big }}"
            "{% endfor %}{% endset %}{{ s|length }}",
            r"block capture would build",
        ),
        (
            "{% set big = 'x' * 1000000 %}{% macro m() %}{% for i in range(5000) %}{{ big }}"
            "{% endfor %}{% endmacro %}{{ m()|length }}",
            r"block capture would build",
        ),
    ],
)
def test_amplification_is_refused_before_the_work(source: str, match: str) -> None:
    started = time.monotonic()
    fails(source, match)
    assert time.monotonic() - started < 1.0


#: Eleven small lists that stand for 4**10 copies of a 1,000-character string (4 GB of text).
SHARED = "{% set a = ['x' * 1000] %}" + "{% set a = [a, a, a, a] %}" * 10


@pytest.mark.parametrize(
    ("source", "match"),
    [
        (SHARED + "{{ a|tojson }}", r"filter tojson would build more than"),
        (SHARED + "{{ a }}", r"printing a value would build more than"),
        (SHARED + "{{ a ~ '' }}", r"'~' would build more than"),
        (SHARED + "{{ [a, a]|join }}", r"filter join would build"),
        (SHARED + "{{ ''.join([a, a]) }}", r"str.join\(\) would build"),
        (SHARED + "{{ '%s' % (a,) }}", r"'%' formatting would build"),
        (SHARED + "{{ '{}'.format(a) }}", r"str.format\(\) would build"),
        (SHARED + "{{ '%s'|format(a) }}", r"filter format would build"),
        (SHARED + "{{ a|string|length }}", r"filter string would build"),
        (SHARED + "{{ a|pprint|length }}", r"filter pprint would build"),
        (SHARED + "{{ a|shquote|length }}", r"filter shquote would build"),
        (SHARED + "{{ [a]|map('upper')|list|length }}", r"filter upper would build"),
        (SHARED + "{{ {'k': a}.items() }}", r"printing a value would build"),
        (SHARED + "{{ {'k': a}|urlencode }}", r"filter urlencode would build"),
        (
            "{% set ns = namespace(a=['x' * 1000]) %}"
            + "{% set ns.a = [ns.a, ns.a, ns.a, ns.a] %}" * 10
            + "{{ ns }}",
            r"printing a value would build",
        ),
        ("{{ ('\x01' * 1000000)|tojson }}", r"filter tojson would build 6000002 "),
        ("{{ ['x']|tojson(indent=999999999) }}", r"filter tojson would build"),
        (
            "{% set a = ['x'] %}{% for i in range(40) %}{{ a.extend(a) or '' }}{% endfor %}",
            r"list.extend\(\) would build 8388608",
        ),
    ],
)
def test_expanding_shared_references_is_refused_before_the_work(source: str, match: str) -> None:
    """A graph of shared references is small; its text is not.  Every producer of text
    measures first (translators/render/textsize.py) and refuses past ``max_value``."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    fails(source, match)
    assert time.monotonic() - started < 1.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024  # KiB


def test_values_under_the_bound_print_as_before() -> None:
    out = render(
        "{% set a = ['x'] %}{% set a = [a, a] %}{{ a }} {{ a|tojson }} {{ a ~ '' }} "
        "{{ {'k': a}.items() }} {{ a|string|length }} {{ '%s' % (a,) }}"
    )
    assert out == (
        "[['x'], ['x']] [[\"x\"], [\"x\"]] [['x'], ['x']] "
        "dict_items([('k', [['x'], ['x']])]) 14 [['x'], ['x']]"
    )


def test_allocation_budget_bounds_a_loop_of_fresh_strings() -> None:
    source = (
        "{% set ns = namespace(l=[]) %}"
        "{% for i in range(10000) %}{% set ns.l = ns.l + [('x' * 100000) ~ i] %}{% endfor %}"
    )
    fails(source, r"allocation budget exceeded", budget=50_000_000, timeout=10.0)


def test_output_size_is_bounded() -> None:
    fails(
        "{% for i in range(10000) %}{{ 'x' * 1000 }}{% endfor %}",
        r"output exceeds 1000000",
        max_output=1_000_000,
    )


def test_pure_nested_loop_is_stopped_at_the_deadline_with_its_line() -> None:
    source = (
        "{% set r = range(10000)|list %}\n"
        "{% for i in r %}{% for j in r %}{% for k in r %}{% endfor %}{% endfor %}{% endfor %}"
    )
    started = time.monotonic()
    err = fails(source, r"render time limit exceeded \(0.3 s\)", timeout=0.3)
    assert time.monotonic() - started < 2.0
    assert err.line == 2


def test_include_loop_is_a_translation_error() -> None:
    r = Renderer(overlay={"t/loop.j2": "{% include 't/loop.j2' %}"})
    with pytest.raises(TranslationError, match="recursion too deep"):
        r.render_text("t/loop.j2", {})


def test_normal_templates_still_work_within_limits() -> None:
    out = render(
        "{% set ns = namespace(n=0) %}{% for i in range(100) %}{% set ns.n = ns.n + i %}{% endfor %}"
        "{{ ns.n }} {{ 'ab' * 3 }} {{ '%05d' % 42 }} {{ '{:>4}'.format('x') }} {{ 'a,b'|replace(',', ';') }}"
        " {{ [1, 2]|join('-') }} {{ 2 ** 10 }} {{ 'x'|center(5) }}|{{ s.upper() }}"
    )
    assert out == "4950 ababab 00042    x a;b 1-2 1024   x  |ABC"


def test_renderer_survives_and_keeps_rendering_after_an_attack() -> None:
    r = Renderer(
        overlay={
            "t/bad.j2": "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}",
            "t/ok.j2": "{{ 1 + 1 }}",
        },
        limits=RenderLimits(timeout=0.2),
    )
    with pytest.raises(TranslationError, match="time limit"):
        r.render_text("t/bad.j2", {})
    assert r.render_text("t/ok.j2", {}) == "2"
