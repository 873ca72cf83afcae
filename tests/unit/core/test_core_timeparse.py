"""The one time parser (vkgate_core.timeparse, docs/design/timeparse.md): every form the
Kubernetes API and the backends send, naive values, bad input, and a round-trip property."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vkgate_core.timeparse import parse_rfc3339, parse_time

UTC = dt.UTC


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-01T10:00:00Z", dt.datetime(2026, 3, 1, 10, 0, 0, tzinfo=UTC)),
        ("2026-03-01T10:00:00z", dt.datetime(2026, 3, 1, 10, 0, 0, tzinfo=UTC)),
        ("2026-03-01T11:30:00+01:30", dt.datetime(2026, 3, 1, 10, 0, 0, tzinfo=UTC)),
        ("2026-03-01T05:00:00-05:00", dt.datetime(2026, 3, 1, 10, 0, 0, tzinfo=UTC)),
        # Nomad: nanoseconds, truncated (not rounded) to microseconds
        ("2026-11-22T09:13:19.000075999Z", dt.datetime(2026, 11, 22, 9, 13, 19, 75, tzinfo=UTC)),
        # Azure Batch: seven digits
        ("2026-03-01T10:00:00.1234567Z", dt.datetime(2026, 3, 1, 10, 0, 0, 123456, tzinfo=UTC)),
        ("2026-03-01T10:00:00.5Z", dt.datetime(2026, 3, 1, 10, 0, 0, 500000, tzinfo=UTC)),
        # Zun: a space separator, with and without a zone (its naive times are UTC)
        ("2018-01-12 09:37:25+00:00", dt.datetime(2018, 1, 12, 9, 37, 25, tzinfo=UTC)),
        ("2019-05-18 21:02:12", dt.datetime(2019, 5, 18, 21, 2, 12, tzinfo=UTC)),
        ("  2026-03-01T10:00:00Z\n", dt.datetime(2026, 3, 1, 10, 0, 0, tzinfo=UTC)),
    ],
)
def test_forms(text: str, expected: dt.datetime) -> None:
    got = parse_rfc3339(text)
    assert got == expected
    assert got.tzinfo is UTC  # always UTC, whatever offset came in


def test_naive_values_are_refused_when_asked() -> None:
    with pytest.raises(ValueError, match="no time zone"):
        parse_rfc3339("2026-03-01T10:00:00", naive="reject")
    assert parse_time("2026-03-01T10:00:00", naive="reject") is None
    assert parse_time(dt.datetime(2026, 3, 1), naive="reject") is None


@pytest.mark.parametrize("bad", ["yesterday", "", "Z", "2026-13-01T00:00:00Z", "10:00"])
def test_bad_values_raise_naming_the_value_or_give_none(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid time"):
        parse_rfc3339(bad)
    assert parse_time(bad) is None


def test_lenient_parser_takes_missing_values_and_datetimes() -> None:
    assert parse_time(None) is None and parse_time(0) is None and parse_time("   ") is None
    aware = dt.datetime(2026, 3, 1, 11, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert parse_time(aware) == dt.datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
    assert parse_time(dt.datetime(2026, 3, 1, 10, 0)) == dt.datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


@given(
    when=st.datetimes(
        min_value=dt.datetime(1970, 1, 1),
        max_value=dt.datetime(2200, 1, 1),
        timezones=st.just(UTC),
    ),
    offset_minutes=st.integers(min_value=-14 * 60, max_value=14 * 60),
    extra_digits=st.text(alphabet="0123456789", max_size=3),
    zulu=st.booleans(),
)
def test_round_trip(when: dt.datetime, offset_minutes: int, extra_digits: str, zulu: bool) -> None:
    """Any instant, written with any offset (or Z) and extra sub-microsecond digits, reads back
    as the same instant in UTC."""
    zone = dt.timezone(dt.timedelta(minutes=0 if zulu else offset_minutes))
    local = when.astimezone(zone)
    text = local.strftime("%Y-%m-%dT%H:%M:%S") + f".{local.microsecond:06d}{extra_digits}"
    text += "Z" if zulu else local.strftime("%z")[:3] + ":" + local.strftime("%z")[3:]
    assert parse_rfc3339(text) == when
    assert parse_time(text) == when
