"""The series the analyzer reads: every name under both DCGM namings, its unit, and who serves it.

One table (``READ``), through which both metrics sources (the TSDB's and the in-memory one) decide
what discovery asks for, which names of a fleet are one reading, and the multiplier that brings each
name's values into the reading's unit: percent for utilization, MiB for framebuffer memory. A DCGM
field renamed by DCGM 4.7's naming standard (dcgm-exporter 4.9) is served under two names, one
field in ``common.metric_names.DCGM_4_7``: both are read, as one signal, each in its own unit. The
unit comes from the name (a ``_RATIO`` is 0-1, a ``_BYTES`` bytes); only the legacy
``DCGM_FI_DEV_GPU_UTIL``, which relabelling rules sometimes store as 0-1, has its unit decided from
its values per scrape job (``dcgm.dev_unit_to_percent``). Reading another name is one line here (and a test).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from common import metric_names as m


class Served(StrEnum):
    """Who serves a series."""

    DCGM = "dcgm-exporter or gpu-exporter"
    GPU_EXPORTER = "gpu-exporter"
    KUBE_STATE_METRICS = "kube-state-metrics"
    CADVISOR = "cAdvisor"


class Use(StrEnum):
    """What the analyzer reads a series for, and so the unit its multiplier brings it into."""

    UTILIZATION = "utilization"  # percent
    MEMORY_USED = "memory used"  # MiB
    MEMORY_FREE = "memory free"  # MiB: with used, the GPU's size (right-sizing)
    POD_MEMORY = "pod memory used"  # MiB
    SAMPLES = "sample histogram"  # counts (our exporter's sub-second samples)
    POWER = "board power"  # watts
    POWER_LIMIT = "power limit"  # watts: the limit the board enforces (or the one set, failing that)
    CLOCK_EVENTS = "clock-event reasons"  # NVML's bitmask, as served
    KUBERNETES = "kubernetes"  # as kube-state-metrics and cAdvisor serve them


# Multipliers into a reading's unit, named for what they convert.
PERCENT_TO_PERCENT: Final = 1.0
RATIO_TO_PERCENT: Final = 100.0  # a 0-1 ratio times this is percent
MIB_TO_MIB: Final = 1.0
BYTES_TO_MIB: Final = 1.0 / (1024.0 * 1024.0)
AS_SERVED: Final = 1.0  # counts, seconds, Kubernetes objects: read as they are
WATTS_TO_WATTS: Final = 1.0  # both namings serve power in watts


@dataclass(frozen=True)
class Read:
    """One series name the analyzer reads."""

    name: str
    use: Use
    served_by: Served
    #: Multiplies a value into the use's unit; None: decided from the values (see the module's note).
    to_unit: float | None = AS_SERVED


KUBE_POD_OWNER: Final = "kube_pod_owner"
KUBE_REPLICASET_OWNER: Final = "kube_replicaset_owner"
KUBE_POD_START_TIME: Final = "kube_pod_start_time"
KUBE_POD_REQUESTS: Final = "kube_pod_container_resource_requests"
KUBE_POD_LIMITS: Final = "kube_pod_container_resource_limits"
KUBE_POD_STATUS_PHASE: Final = "kube_pod_status_phase"
KUBE_POD_STATUS_SCHEDULED: Final = "kube_pod_status_scheduled"
KUBE_JOB_OWNER: Final = "kube_job_owner"
KUBE_POD_LABELS: Final = "kube_pod_labels"
CPU_USAGE: Final = "container_cpu_usage_seconds_total"
CPU_PERIODS: Final = "container_cpu_cfs_periods_total"
CPU_THROTTLED: Final = "container_cpu_cfs_throttled_periods_total"

_U, _D, _G = Use.UTILIZATION, Served.DCGM, Served.GPU_EXPORTER
_KSM, _CADVISOR = Served.KUBE_STATE_METRICS, Served.CADVISOR

#: Every series read. Utilization in preference order, by field: our exporter's per-pod share of a
#: time-sliced GPU first (a pod sharing a GPU has no other series of its own, and a pod alone on one
#: must be read as one of its holders), then DCGM's profiling ratio (engine activity over the whole
#: sample period; MIG instances have nothing else), then the device gauge (whether any kernel ran in
#: NVML's last period). Within a field, the legacy name first.
READ: Final[tuple[Read, ...]] = (
    Read(m.POD_SM_UTILIZATION, _U, _G, PERCENT_TO_PERCENT),
    Read(m.PROF_GR_ENGINE_ACTIVE, _U, _D, RATIO_TO_PERCENT),
    Read(m.PROF_GR_ENGINE_UTIL_RATIO, _U, _D, RATIO_TO_PERCENT),
    Read(m.GPU_UTIL, _U, _D, None),  # 0-100, or 0-1 where relabelled: told by its values
    Read(m.GPU_UTIL_RATIO, _U, _D, RATIO_TO_PERCENT),
    Read(m.FB_USED, Use.MEMORY_USED, _D, MIB_TO_MIB),
    Read(m.FB_USED_BYTES, Use.MEMORY_USED, _D, BYTES_TO_MIB),
    Read(m.FB_FREE, Use.MEMORY_FREE, _D, MIB_TO_MIB),
    Read(m.FB_FREE_BYTES, Use.MEMORY_FREE, _D, BYTES_TO_MIB),
    Read(m.POD_MEMORY_USED, Use.POD_MEMORY, _G, BYTES_TO_MIB),
    Read(m.UTILIZATION_SAMPLES_BUCKET, Use.SAMPLES, _G),
    # Read for a few GPUs only (the stalled-job candidates'), never discovered: see ``ON_DEMAND``.
    Read(m.POWER_USAGE, Use.POWER, _D, WATTS_TO_WATTS),
    Read(m.BOARD_POWER_WATTS, Use.POWER, _D, WATTS_TO_WATTS),
    # The enforced limit first (what caps the board now, our exporter serves it), the set one after.
    Read(m.ENFORCED_POWER_LIMIT, Use.POWER_LIMIT, _D, WATTS_TO_WATTS),
    Read(m.BOARD_POWER_LIMIT_ENFORCED_WATTS, Use.POWER_LIMIT, _D, WATTS_TO_WATTS),
    Read(m.POWER_MGMT_LIMIT, Use.POWER_LIMIT, _D, WATTS_TO_WATTS),
    Read(m.BOARD_POWER_LIMIT_REQUESTED_WATTS, Use.POWER_LIMIT, _D, WATTS_TO_WATTS),
    # DCGM field 112 under its older and newer name (not one of DCGM 4.7's renames: both are served).
    Read(m.CLOCK_THROTTLE_REASONS, Use.CLOCK_EVENTS, _D),
    Read(m.CLOCKS_EVENT_REASONS, Use.CLOCK_EVENTS, _D),
    Read(KUBE_POD_OWNER, Use.KUBERNETES, _KSM),
    Read(KUBE_REPLICASET_OWNER, Use.KUBERNETES, _KSM),
    Read(KUBE_POD_START_TIME, Use.KUBERNETES, _KSM),
    Read(KUBE_POD_REQUESTS, Use.KUBERNETES, _KSM),
    Read(KUBE_POD_LIMITS, Use.KUBERNETES, _KSM),
    Read(KUBE_POD_STATUS_PHASE, Use.KUBERNETES, _KSM),
    Read(KUBE_POD_STATUS_SCHEDULED, Use.KUBERNETES, _KSM),
    Read(KUBE_JOB_OWNER, Use.KUBERNETES, _KSM),
    Read(KUBE_POD_LABELS, Use.KUBERNETES, _KSM),
    Read(CPU_USAGE, Use.KUBERNETES, _CADVISOR),
    Read(CPU_PERIODS, Use.KUBERNETES, _CADVISOR),
    Read(CPU_THROTTLED, Use.KUBERNETES, _CADVISOR),
)
BY_NAME: Final = {r.name: r for r in READ}


def names(use: Use) -> tuple[str, ...]:
    """The names read for ``use``, in the table's order (utilization: preference order)."""
    return tuple(r.name for r in READ if r.use is use)


#: Uses read only for the few GPUs a detector asks about, by name: discovery does not look for them
#: (a fleet without them is judged as before), and a GPU that serves none of them is said so.
ON_DEMAND: Final = frozenset({Use.POWER, Use.POWER_LIMIT, Use.CLOCK_EVENTS})
#: Every name discovery asks about.
ALL_NAMES: Final = tuple(r.name for r in READ if r.use not in ON_DEMAND)
POWER: Final = names(Use.POWER)
POWER_LIMIT: Final = names(Use.POWER_LIMIT)
CLOCK_EVENTS: Final = names(Use.CLOCK_EVENTS)
UTILIZATION: Final = names(Use.UTILIZATION)
MEMORY_USED: Final = names(Use.MEMORY_USED)
#: The free framebuffer served beside each used one, in the same naming (a GPU's size is their sum).
FREE_BESIDE: Final = {m.FB_USED: m.FB_FREE, m.FB_USED_BYTES: m.FB_FREE_BYTES}


def field_of(name: str) -> str:
    """The DCGM field a name serves, by its legacy name: the names of one field are one signal (a
    name that was never renamed serves itself)."""
    return m.legacy_name(name)


def to_unit(name: str) -> float | None:
    """The multiplier into the reading's unit of a name's values (None: decided from its values)."""
    return BY_NAME[name].to_unit


def by_values(name: str) -> bool:
    """Whether a name's unit is decided from its values (the legacy GPU_UTIL alone)."""
    return name in BY_NAME and BY_NAME[name].to_unit is None


def present(use: Use, found: Collection[str]) -> tuple[str, ...]:
    """The names of ``use`` among ``found``, in the table's order."""
    return tuple(n for n in names(use) if n in found)


def fields(found: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """``found`` names grouped by field, in their order: each group one signal."""
    groups: dict[str, list[str]] = {}
    for name in found:
        groups.setdefault(field_of(name), []).append(name)
    return tuple(tuple(g) for g in groups.values())


def naming(found: Collection[str]) -> str:
    """Which DCGM naming the names found are in: ``legacy``, ``DCGM 4.7`` or both (an upgrade or a
    mixed fleet); empty where no renamed field is among them."""
    old = any(n in m.BY_LEGACY for n in found)
    new = any(n in m.BY_CURRENT for n in found)
    return "legacy and DCGM 4.7" if old and new else "DCGM 4.7" if new else "legacy" if old else ""
