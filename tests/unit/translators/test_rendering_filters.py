"""Template helper filters, called the way templates call them."""

from __future__ import annotations

import json

import pytest

from translators.base import TranslationError
from translators.render.engine import Renderer
from translators.render.filters import cpu_mhz, dns_label, memory_mb, quantity, shquote, truncate_id


def render(source: str, **context: object) -> str:
    return Renderer(overlay={"f.j2": source}).render_text("f.j2", context)


@pytest.mark.parametrize(
    ("value", "per_core", "mhz"),
    [
        ("250m", 2400, 600),
        ("1", 1000, 1000),
        ("1.5", 2000, 3000),
        ("1m", 1000, 1),
        ("0", 1000, 0),
        (2, "2.5k", 5000),
        ("100m", 2399, 240),
    ],
)
def test_cpu_mhz(value: object, per_core: object, mhz: int) -> None:
    assert cpu_mhz(value, per_core) == mhz


@pytest.mark.parametrize(
    ("value", "mib"), [("1Gi", 1024), ("128Mi", 128), ("1G", 954), ("1", 1), ("1.5Mi", 2), (0, 0)]
)
def test_memory_mb_rounds_up(value: object, mib: int) -> None:
    assert memory_mb(value) == mib


@pytest.mark.parametrize(
    ("value", "unit", "rounding", "out"),
    [
        ("1.5Gi", "Mi", "none", 1536),
        ("250m", "", "none", 0.25),
        ("2", "m", "none", 2000),
        ("1500Mi", "Gi", "ceil", 2),
        ("1500Mi", "Gi", "floor", 1),
        ("1k", "", "none", 1000),
        ("3e3", "k", "none", 3),
    ],
)
def test_quantity_converts_units(value: str, unit: str, rounding: str, out: float) -> None:
    result = quantity(value, unit, rounding)
    assert result == out and type(result) is type(out)


def test_filters_in_templates() -> None:
    out = render(
        '{{ "500m"|cpu_mhz(2000) }} {{ "64Mi"|memory_mb }} {{ "2Gi"|quantity("Mi") }} '
        '{{ x|tojson }} {{ ["a b", "c"]|shquote }} {{ "it\'s"|shquote }} {{ "My_Pod.Name"|dns_label }} '
        '{{ "abc"|b64encode }}',
        x={"k": "ü", "n": [1, None]},
    )
    assert out == (
        '1000 64 2048 {"k": "ü", "n": [1, null]} \'a b\' c \'it\'"\'"\'s\' my-pod-name YWJj'
    )


def test_tojson_output_is_valid_json_for_hostile_strings() -> None:
    value = 'quote " backslash \\ newline \n </script> {{ x }}'
    out = render('{"v": {{ v|tojson }}}', v=value)
    assert json.loads(out) == {"v": value}


def test_dns_label_and_truncate_id_keep_long_names_unique() -> None:
    a = "x" * 70 + "a"
    b = "x" * 70 + "b"
    assert len(dns_label(a)) == 63 and dns_label(a) != dns_label(b)
    assert dns_label("--Hello__World--") == "hello-world"
    assert truncate_id("short", 10) == "short"
    cut = truncate_id("k8s-" + "n" * 100, 64)
    assert (
        len(cut) == 64 and cut.startswith("k8s-nnn") and cut == truncate_id("k8s-" + "n" * 100, 64)
    )
    with pytest.raises(ValueError, match="no letters"):
        dns_label("___")


def test_shquote_survives_a_shell_roundtrip() -> None:
    import shlex

    args = ["echo", "$(rm -rf /)", "a'b", 'c"d', "", "semi;colon"]
    assert shlex.split(shquote(args)) == args


@pytest.mark.parametrize(
    "source",
    [
        '{{ "abc"|cpu_mhz }}',
        '{{ ""|memory_mb }}',
        '{{ "1Gi"|quantity("XB") }}',
        "{{ none|cpu_mhz }}",
        '{{ "1"|cpu_mhz(0) }}',
    ],
)
def test_bad_input_is_a_translation_error_with_the_filter_name(source: str) -> None:
    with pytest.raises(TranslationError) as info:
        render(source)
    assert info.value.line == 1
    assert any(n in str(info.value) for n in ("cpu_mhz", "memory_mb", "quantity"))
