"""Texts a tenant (or a typo) can put where a time belongs: out of range for a date, not numbers, not
times at all. Each has ended a run, or could have, before parsing refused them one by one."""

from __future__ import annotations

import random
import string

HOSTILE_TIMES = (
    "inf",
    "-inf",
    "nan",
    "1e20",
    "-1e20",
    "1e308",
    "9" * 400,
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59-01:00",
    "9999-12-31T23:59:59Z",  # valid, and as far ahead as a date goes: plus a duration overflows
    "0001-01-01T00:00:00Z",
    "0000-01-01T00:00:00Z",
    "10000-01-01T00:00:00Z",
    "2026-02-30T00:00:00Z",
    "2026-01-01T00:00:00",
    "2026-01-01T25:00:00Z",
    "2026-01-01T00:00:00+24:00",
    "",
    " ",
    "Z",
    "now",
    "\x00",
    "１２３",  # full-width digits: float() accepts them
    "-0",
)


def fuzzed_times(seed: int, count: int, longest: int = 30) -> list[str]:
    """``count`` random texts over the characters times and numbers are made of (and a few that are
    not), reproducible from ``seed``."""
    rng = random.Random(seed)
    alphabet = string.digits + "+-.:eETZinfa " + "０９\u202e"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, longest))) for _ in range(count)]
