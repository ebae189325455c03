"""The times and durations users and tenants type: every wrong text is a ValueError naming it.

Annotations such as ``gpu-reaper/exclude-until`` are written by workload owners, and callers skip the
one object whose value raises ValueError; any other exception would end the whole run for everyone.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

import pytest

from common.timeutil import parse_duration, parse_time
from harness.hostile_values import HOSTILE_TIMES, fuzzed_times


@pytest.mark.parametrize("text", HOSTILE_TIMES)
def test_a_hostile_time_is_a_value_error_naming_it(text: str) -> None:
    try:
        parsed = parse_time(text)
    except ValueError as e:
        assert repr(text) in str(e)
    else:
        assert parsed.tzinfo is UTC


def test_random_texts_raise_nothing_but_value_error() -> None:
    for text in fuzzed_times(37, 5000):
        with contextlib.suppress(ValueError):
            assert parse_time(text).tzinfo is UTC


def test_the_extremes_that_fit_still_parse() -> None:
    assert parse_time("9999-12-31T23:59:59Z") == datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
    assert parse_time("0001-01-01T00:00:00Z") == datetime(1, 1, 1, tzinfo=UTC)
    assert parse_time("0") == datetime(1970, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("text", ["99999999999999999999d", "9" * 30 + "w", "1e9d", "0s", "-5m", "5 m", "h"])
def test_a_hostile_duration_is_a_value_error_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)
