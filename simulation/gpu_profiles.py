"""Utilization profiles for fake GPUs: ``percent(t)`` with ``t`` in seconds since NVML was initialised."""

from __future__ import annotations

from collections.abc import Callable

Profile = Callable[[float], float]


def jitter(seed: int, k: int, spread: float) -> float:
    """Deterministic noise in [-spread/2, spread/2) for sample ``k`` of device ``seed``."""
    return (((k * 2654435761 + seed * 40503) % 1000) / 1000 - 0.5) * spread


def constant(percent: float) -> Profile:
    return lambda _t: percent


def sawtooth(period_s: float, idle_fraction: float, idle: float, busy: float) -> Profile:
    """Near-idle for ``idle_fraction`` of every period, busy for the rest.

    The idle phase straddles each period boundary (it starts two thirds of its length before it), so a
    reading taken a little before or after the boundary, at the sample grid's granularity, is idle.
    """
    lead = idle_fraction * period_s * 2 / 3

    def profile(t: float) -> float:
        return idle if (t + lead) % period_s < idle_fraction * period_s else busy

    return profile
