"""The month's bill: what a chargeback run returns, per group and for the fleet.

The JSON ``gpu-analyzer chargeback --format json`` writes is this model's dump, a stable contract
(fields are only ever added, never renamed): the Grafana board and the weekly digest read the same
names. Hours are GPU-hours (a MIG instance counts its share of its GPU, a time-sliced GPU its share
among the pods holding it); costs are in ``currency`` and ``None`` where no price applies.

Within a group ``held_gpu_hours`` is the whole; ``used_gpu_hours`` (held time weighted by activity),
``idle_gpu_hours`` (held time whose 5-minute span stayed at or below the idle threshold) and
``unknown_gpu_hours`` (held time without samples: never idle, never used) are parts of it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from common.model import FindingKind, TimeWindow, WorkloadRef
from common.timeutil import AwareDatetime

SCHEMA_VERSION: Literal[1] = 1
#: held + unallocated must equal the fleet's GPU-hours within this share.
TOTALS_TOLERANCE = 0.01
#: The group of namespaces without the ``--by label:`` label (its name says so).
UNLABELLED_PREFIX = "(no label "
#: The group of series without a cluster label under ``--by cluster``.
NO_CLUSTER = "(no cluster label)"


def unlabelled_group(label: str) -> str:
    """The name of the group of namespaces that carry no ``label``."""
    return f"{UNLABELLED_PREFIX}{label})"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Hours(_Frozen):
    """GPU-hours of one group (or the fleet) over one span of time."""

    held_gpu_hours: float = 0.0
    used_gpu_hours: float = 0.0
    idle_gpu_hours: float = 0.0
    unknown_gpu_hours: float = 0.0


class DailyHours(Hours):
    """One day of the window (the first may be shorter: the window need not be whole days)."""

    start: AwareDatetime
    end: AwareDatetime
    unallocated_gpu_hours: float = 0.0  # the fleet's, or the group's share with --share-unallocated


class ModelCharge(_Frozen):
    """A group's held hours on one GPU model, at that model's price."""

    model: str
    held_gpu_hours: float
    idle_gpu_hours: float
    price_per_gpu_hour: float | None
    cost: float | None
    idle_cost: float | None


class IdleWorkload(_Frozen):
    """A workload making up part of its group's idle cost."""

    workload: WorkloadRef
    idle_gpu_hours: float
    idle_cost: float | None
    held_gpu_hours: float
    # The analyzer's verdict on it, where a findings report was given and names it.
    finding_kind: FindingKind | None = None


class GroupCharge(Hours):
    """One group: a namespace, the namespaces sharing a label value, or a cluster."""

    group: str
    namespaces: list[str]
    cost: float | None
    idle_cost: float | None
    # Its share of the fleet's unallocated hours, in proportion to held hours (--share-unallocated);
    # 0 when unallocated hours are shown apart.
    unallocated_gpu_hours: float = 0.0
    unallocated_cost: float | None = None
    models: list[ModelCharge] = Field(default_factory=list)
    top_idle_workloads: list[IdleWorkload] = Field(default_factory=list)
    daily: list[DailyHours] = Field(default_factory=list)


class ModelUnallocated(_Frozen):
    """GPU-hours of one model nobody requested, and what they cost."""

    model: str
    unallocated_gpu_hours: float
    price_per_gpu_hour: float | None
    cost: float | None


class TotalsCheck(_Frozen):
    """The groups' held hours plus the unallocated hours against the fleet's GPU-hours, counted apart."""

    held_gpu_hours: float
    unallocated_gpu_hours: float
    fleet_gpu_hours: float
    difference_gpu_hours: float  # held + unallocated - fleet
    relative_difference: float  # of the fleet's hours; 0 for an empty fleet
    tolerance: float = TOTALS_TOLERANCE
    within_tolerance: bool


class FleetCharge(Hours):
    """The whole fleet in scope."""

    fleet_gpu_hours: float
    unallocated_gpu_hours: float
    unallocated_cost: float | None
    unallocated_by_model: list[ModelUnallocated] = Field(default_factory=list)
    cost: float | None = None  # held cost, every group's
    idle_cost: float | None = None
    daily: list[DailyHours] = Field(default_factory=list)


class Coverage(_Frozen):
    """How the window was read: which part from the recording rules' hourly rollups, which raw."""

    rollup_hours: float = 0.0
    raw_hours: float = 0.0
    reason: str = ""  # why rollups were not used (for all or part of the window), empty when they were


class ChargebackReport(_Frozen):
    """A chargeback over one window."""

    schema_version: Literal[1] = SCHEMA_VERSION
    generated_at: AwareDatetime
    source: str
    requested_window: TimeWindow
    window: TimeWindow  # what was computed over: shorter than requested when the TSDB holds less
    partial: bool = False
    partial_reason: str | None = None
    by: str  # namespace | label:<name> | cluster
    currency: str
    idle_percent: float
    share_unallocated: bool = False
    groups: list[GroupCharge]
    fleet: FleetCharge
    totals: TotalsCheck
    coverage: Coverage = Field(default_factory=Coverage)

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)


def day_bounds(window: TimeWindow, day_s: float = 86400.0) -> list[tuple[datetime, datetime]]:
    """The window's days counted back from its end: whole days, the first one shorter if need be."""
    from datetime import timedelta

    bounds: list[tuple[datetime, datetime]] = []
    end = window.end
    while end > window.start:
        start = max(window.start, end - timedelta(seconds=day_s))
        bounds.append((start, end))
        end = start
    return bounds[::-1]
