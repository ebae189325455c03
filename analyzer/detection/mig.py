"""How much of a GPU a MIG instance is: its compute slices over the slices its GPU splits into.

A MIG profile names its compute slices first (``1g.10gb``: one slice; ``3g.40gb``: three). The GPUs
that support MIG split into 7 compute slices (A100, H100, H200, B200, GH200), except the A30, which
splits into 4 (its profiles are ``1g.6gb``, ``2g.12gb``, ``4g.24gb``). A device without a profile,
or with one this rule cannot read, counts as a whole GPU: the old, larger figure rather than a guess.
"""

from __future__ import annotations

import re

from analyzer.sources.aggregates import DeviceInfo

_COMPUTE_SLICES = re.compile(r"^(?:MIG\s+)?(?P<slices>\d+)g\.(?P<memory>\d+)gb", re.IGNORECASE)
_FOUR_SLICE_MEMORY_PER_SLICE_GB = 6  # the A30's slice: 24 GB over 4 slices
SLICES_PER_GPU = 7
A30_SLICES = 4


def slices_of(model: str | None, memory_gb: int, slices: int) -> int:
    """The compute slices the instance's GPU splits into."""
    if model is not None and "A30" in model.upper():
        return A30_SLICES
    if model is None and memory_gb == slices * _FOUR_SLICE_MEMORY_PER_SLICE_GB:
        return A30_SLICES  # no model label: the A30's profiles are the only ones of 6 GB per slice
    return SLICES_PER_GPU


def gpu_share(info: DeviceInfo) -> float:
    """The share of a GPU one holder of this device holds: 1.0 for a whole GPU.

    A time-sliced GPU counts as one GPU over the pods that shared it in the window: pods that came
    and went count apart, so the share, and the waste a finding claims, errs small."""
    if info.sharers:
        return 1.0 / info.sharers
    if not info.mig_profile:
        return 1.0
    match = _COMPUTE_SLICES.match(info.mig_profile.strip())
    if match is None:
        return 1.0
    slices = int(match["slices"])
    total = slices_of(info.model, int(match["memory"]), slices)
    if not 0 < slices <= total:
        return 1.0
    return slices / total
