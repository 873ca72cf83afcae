"""Quantities are a Kubernetes helper of the neutral core; translators see a bad one as a
translation error, so every backend reports a bad pod the same way (translators/base.py)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from translators import base
from translators.base import PodQuantityError, TranslationError, TranslatorError
from vkgate_core import quantity
from vkgate_core.quantity import QuantityError


def test_the_core_raises_a_plain_value_error() -> None:
    with pytest.raises(QuantityError) as info:
        quantity.parse_quantity("12 apples")
    assert isinstance(info.value, ValueError)
    assert not isinstance(info.value, TranslatorError)


def test_translators_see_a_translation_error_with_the_same_message() -> None:
    with pytest.raises(PodQuantityError) as info:
        base.parse_quantity("12 apples")
    err = info.value
    assert isinstance(err, TranslationError) and isinstance(err, QuantityError)
    assert str(err) == "invalid quantity '12 apples' (expected e.g. 500m, 2, 1.5Gi, 128Mi)"
    with pytest.raises(PodQuantityError):
        base.cpu_millis("x")


def test_good_values_are_the_cores() -> None:
    assert base.parse_quantity("1.5Gi") == quantity.parse_quantity("1.5Gi") == Fraction(3 * 2**29)
    assert base.cpu_millis("0.1") == quantity.cpu_millis("0.1") == 100
