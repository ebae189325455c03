"""The DCGM series of a node under either naming: dcgm-exporter's legacy one, or DCGM 4.7's naming
standard as dcgm-exporter 4.9 serves it, and a node's switch from one to the other.

DCGM 4.7 renamed the fields the simulator writes and gave them base units: utilization in 0-1
ratios (percent before), framebuffer in bytes (MiB), clocks in hertz (MHz), energy in joules (mJ).
dcgm-exporter 4.8.3 renamed the node label ``Hostname`` to ``hostname``, and the driver-version
label became ``DCGM_FI_SYSTEM_DRIVER_VERSION``. Fleets upgrade node by node: one GPU's history is
in the old naming before its node's upgrade and in the new one after, with a scrape or two in both
while the old exporter pod and the new one are both scraped.

The names are typed out here, not taken from ``common.metric_names``, for the reason the simulator
gives: this is the oracle, and a shared typo would pass unnoticed (a test compares the two tables).
``with_naming`` turns any scenario into its DCGM 4.7, mixed or upgraded form.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Literal

import numpy as np

from simulation.fleet.scenario import NamingUpgrade, NodeSpec, Scenario
from simulation.fleet.series import Series

_PERCENT = 0.01  # percent to a 0-1 ratio
_MIB = 1024.0 * 1024.0  # MiB to bytes
_MHZ = 1e6  # MHz to hertz
_MJ = 1e-3  # millijoules to joules

#: Each DCGM series the simulator writes: its DCGM 4.7 name, and what turns a legacy value into the
#: new unit. Utilization percentages are given in the scenario's ``gpu_util_unit`` (see ``_multiplier``).
RENAMES: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("DCGM_FI_DEV_GPU_UTIL_RATIO", _PERCENT),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("DCGM_FI_DEV_MEMORY_COPY_UTIL_RATIO", _PERCENT),
    "DCGM_FI_DEV_FB_USED": ("DCGM_FI_DEV_FB_USED_BYTES", _MIB),
    "DCGM_FI_DEV_FB_FREE": ("DCGM_FI_DEV_FB_FREE_BYTES", _MIB),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("DCGM_FI_PROF_SM_UTIL_RATIO", 1.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("DCGM_FI_PROF_DRAM_UTIL_RATIO", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("DCGM_FI_DEV_BOARD_POWER_WATTS", 1.0),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": ("DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("DCGM_FI_DEV_GPU_TEMP_CELSIUS", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("DCGM_FI_DEV_SM_CLOCK_HERTZ", _MHZ),
    "DCGM_FI_DEV_MEM_CLOCK": ("DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", _MHZ),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", _MJ),
    "DCGM_FI_DEV_XID_ERRORS": ("DCGM_FI_DEV_XID_ERROR", 1.0),
}
#: Labels renamed with the naming (old → new).
LABEL_RENAMES: dict[str, str] = {
    "Hostname": "hostname",
    "DCGM_FI_DRIVER_VERSION": "DCGM_FI_SYSTEM_DRIVER_VERSION",
}
# Series served in a relabelled 0-1 form where the scenario says ``gpu_util_unit: ratio``.
_RELABELLED_PERCENT = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"}

Naming = Literal["legacy", "dcgm-4.7", "mixed", "upgrade"]


def with_naming(
    scenario: Scenario,
    naming: Naming,
    *,
    at: timedelta | None = None,
    overlap: int = 1,
    stagger: timedelta = timedelta(0),
) -> Scenario:
    """``scenario`` with its GPU exporters serving ``naming``:

    * ``legacy``: every node in the legacy naming (the scenario's own nodes' settings dropped);
    * ``dcgm-4.7``: every node in DCGM 4.7's naming over the whole scenario;
    * ``mixed``: every other node (the 2nd, 4th, ... in the scenario's order) in DCGM 4.7's naming,
      the others legacy;
    * ``upgrade``: every node upgraded from the legacy naming to DCGM 4.7's at ``at`` (an offset as
      scenarios write them, negative from the end; default: the middle of the analysis window),
      node ``i`` (in order) ``i * stagger`` later, with ``overlap`` scrapes (0-2) after it written
      in both namings.

    Names, labels and workloads stay as they are, so the verdicts on every form are the same.
    """
    if naming == "upgrade":
        first = at if at is not None else -scenario.analysis_window / 2
        nodes = tuple(
            node.model_copy(
                update={
                    "metric_names": "dcgm-4.7",
                    "upgrade": NamingUpgrade(at=first + stagger * i, overlap=overlap),
                }
            )
            for i, node in enumerate(scenario.nodes)
        )
    elif naming in ("legacy", "dcgm-4.7", "mixed"):
        nodes = tuple(
            node.model_copy(
                update={
                    "metric_names": "dcgm-4.7"
                    if naming == "dcgm-4.7" or (naming == "mixed" and i % 2)
                    else "legacy",
                    "upgrade": None,
                }
            )
            for i, node in enumerate(scenario.nodes)
        )
    else:
        raise ValueError(f"naming must be legacy, dcgm-4.7, mixed or upgrade, not {naming!r}")
    return scenario.model_copy(update={"nodes": nodes})


def node_series(scenario: Scenario, node: NodeSpec, series: Iterable[Series]) -> Iterator[Series]:
    """A node's series (written in the legacy naming) as its exporter serves them: renamed from the
    start, or from its upgrade on, with the overlap's scrapes in both namings."""
    if node.metric_names == "legacy":
        yield from series
        return
    switch = scenario.at(node.upgrade.at).timestamp() if node.upgrade is not None else -np.inf
    overlap = node.upgrade.overlap if node.upgrade is not None else 0
    step = scenario.step.total_seconds()
    # Both namings up to `switch + overlap * step`: the old pod's last scrapes.
    legacy_until = switch + overlap * step
    for s in series:
        if s.name in RENAMES:
            yield from _cut(s, renamed(s, scenario.gpu_util_unit), switch, legacy_until)
        elif any(k in LABEL_RENAMES for k, _ in s.labels):
            # Our exporter's own series (the sample histogram) keep their names and take the new
            # labels; a counter is written once for each scrape, not twice over the overlap.
            yield from _cut(s, renamed(s), switch, switch)
        else:
            yield s


def renamed(s: Series, gpu_util_unit: str = "percent") -> Series:
    """One legacy series in DCGM 4.7's naming: name, unit and labels."""
    name, multiplier = RENAMES.get(s.name, (s.name, 1.0))
    if s.name in _RELABELLED_PERCENT and gpu_util_unit == "ratio":
        multiplier = 1.0  # already 0-1
    labels = tuple(sorted((LABEL_RENAMES.get(k, k), v) for k, v in s.labels))
    return Series(name, labels, s.timestamps, s.values * multiplier if multiplier != 1.0 else s.values)


def _cut(old: Series, new: Series, switch: float, legacy_until: float) -> Iterator[Series]:
    """``old`` up to ``legacy_until``, ``new`` after ``switch`` (both in between)."""
    before = old.timestamps <= legacy_until
    after = new.timestamps > switch
    if before.any() and switch > -np.inf:
        yield replace(old, timestamps=old.timestamps[before], values=old.values[before])
    if after.any():
        yield replace(new, timestamps=new.timestamps[after], values=new.values[after])
