"""Evidence values in the units people read (%, GiB, h, req/s), for the HTML report and the table.

The JSON keeps raw numbers under keys that name their unit (``_percent``, ``_mib``, ``_hours``);
the reports spell them out, so nobody reads ``5.709e+04`` for 55.8 GiB.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from analyzer.detection.units import memory
from common.evidence import EvidenceValue
from common.timeutil import format_duration, to_the_second

# Keys holding a share (0-1) of something: shown as a percentage.
_SHARES = frozenset(
    {
        "coverage",
        "min_coverage",
        "idle_share",
        "stalled_share",
        "busy_share",
        "cpu_saturation",
        "cpu_throttled_ratio",
    }
)


def percent(value: float) -> str:
    return f"{value:.1f} %"


def share(value: float) -> str:
    return f"{value * 100:.1f} %"


def mebibytes(value: float) -> str:
    """Framebuffer sizes: GiB from 1 GiB up, MiB below (the recommendations' spelling too)."""
    return memory(value)


def hours(value: float) -> str:
    return f"{value:,.1f} h"


def seconds(value: float) -> str:
    if value >= 1:
        return format_duration(timedelta(seconds=round(value)))
    return f"{value:.2f} s"


def request_rate(value: float) -> str:
    return f"{value:,.3g} req/s"


def gpus(value: float) -> str:
    return f"{value:,.3g} GPU" + ("" if value == 1 else "s")


def evidence_value(key: str, value: EvidenceValue) -> str:
    """One evidence value as a person reads it; the key says the unit."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        if key.endswith("_from"):
            try:
                return to_the_second(datetime.fromisoformat(value.replace("Z", "+00:00")))
            except ValueError:
                return value
        return value
    if isinstance(value, dict):  # a nested object (right_size): its fields, briefly
        return "; ".join(f"{k.replace('_', ' ')} {evidence_value(k, v)}" for k, v in value.items())
    if isinstance(value, int) and not key.endswith(("_percent", "_mib", "_hours", "_seconds", "_rate")):
        return f"{value:,}"
    number = float(value)
    if key in _SHARES:
        return share(number)
    if key.endswith("_percent"):
        return percent(number)
    if key.endswith("_mib"):
        return mebibytes(number)
    if key.endswith("_hours"):
        return hours(number)
    if key.endswith("_seconds"):
        return seconds(number)
    if key == "request_rate":
        return request_rate(number)
    if key == "gpu_equivalents":
        return gpus(number)
    return f"{number:,.4g}"
