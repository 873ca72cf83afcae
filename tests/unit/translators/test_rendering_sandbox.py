"""The sandbox holds: escapes fail with TranslationError, costs are bounded, nothing hangs."""

from __future__ import annotations

import os
import time

import pytest

from translators.base import TranslationError
from translators.rendering import Renderer
from translators.sandbox import RenderLimits


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
