"""The numbers behind a finding, one typed model per finding kind.

A finding's ``evidence`` is one of the classes below, picked by the finding's kind (see
``common.model.EVIDENCE_BY_KIND``). In JSON it stays the flat object docs/findings.md documents:
each field is a key of the same name, written only when the analyzer set it (a field set to None is
written as null), so a document read back writes exactly the same object. Two exceptions to the
one-field-one-key rule, both for the JSON's sake: the two utilization quantiles are written under
names that follow their level (``p10_util_percent``), and keys this version does not know (a newer
analyzer's, or a hand-written file's) are kept and written back after the known ones.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from common.timeutil import AwareDatetime, rfc3339

# A nested object (``right_size``) is written as a JSON object of its set fields.
EvidenceValue = float | int | str | bool | dict[str, Any] | None

_QUANTILE_KEY = re.compile(r"^p(?P<whole>\d+)(?:_(?P<frac>\d+))?_util_percent$")


class UtilQuantile(BaseModel):
    """One utilization quantile: its level (0-1) and value (percent)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    level: float = Field(ge=0.0, le=1.0)
    percent: float

    @property
    def key(self) -> str:
        """The JSON key: ``p5_util_percent`` for level 0.05, ``p7_5_util_percent`` for 0.075."""
        return f"p{round(self.level * 100, 1):g}".replace(".", "_") + "_util_percent"

    @staticmethod
    def level_of(key: str) -> float | None:
        match = _QUANTILE_KEY.match(key)
        if match is None:
            return None
        text = match["whole"] + (f".{match['frac']}" if match["frac"] else "")
        return float(text) / 100.0


class Evidence(BaseModel):
    """Shared behaviour of every kind's evidence: the JSON object and reads by JSON key."""

    model_config = ConfigDict(frozen=True, extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _quantiles_from_keys(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or "quantiles" not in cls.model_fields:
            return data
        found = [
            (level, key)
            for key in data
            if isinstance(key, str) and (level := UtilQuantile.level_of(key)) is not None
        ]
        if not found:
            return data
        rest = {k: v for k, v in data.items() if k not in {key for _, key in found}}
        rest["quantiles"] = tuple({"level": level, "percent": data[key]} for level, key in found)
        return rest

    def to_json(self) -> dict[str, EvidenceValue]:
        """The flat JSON object: set fields in declaration order, then unknown keys as read."""
        out: dict[str, EvidenceValue] = {}
        for name in type(self).model_fields:
            if name not in self.model_fields_set:
                continue
            value = getattr(self, name)
            if name == "quantiles":
                out |= {q.key: q.percent for q in value}
            elif isinstance(value, datetime):
                out[name] = rfc3339(value)
            elif isinstance(value, BaseModel):
                out[name] = value.model_dump(mode="json", exclude_unset=True)
            else:
                out[name] = value
        out |= dict(self.model_extra or {})
        return out

    def get(self, key: str, default: EvidenceValue = None) -> EvidenceValue:
        """The value written under a JSON key (for generic readers such as the HTML's evidence list)."""
        return self.to_json().get(key, default)


class UtilizationEvidence(Evidence):
    """The utilization numbers every verdict but ``unknown`` rests on."""

    util_metric: str | None = None  # the signal(s), comma-separated
    mean_util_percent: float | None = None
    max_util_percent: float | None = None
    quantiles: tuple[UtilQuantile, ...] = ()  # lowest and highest per-GPU quantile
    coverage: float | None = None
    samples: int | None = None
    judged_from: AwareDatetime | None = None
    judged_hours: float | None = None
    memory_used_mib: float | None = None
    gpu_equivalents: float | None = None  # whole GPUs the MIG slices add up to; unset: whole GPUs

    @property
    def low_quantile(self) -> UtilQuantile | None:
        return min(self.quantiles, key=lambda q: q.level, default=None)

    @property
    def high_quantile(self) -> UtilQuantile | None:
        return max(self.quantiles, key=lambda q: q.level, default=None)


class IdleEndpointEvidence(UtilizationEvidence):
    idle_threshold_percent: float | None = None
    idle_share: float | None = None
    idle_min_memory_mib: float | None = None
    min_memory_used_mib: float | None = None
    request_rate: float | None = None  # set (maybe to null: no data) when a query is configured
    request_rate_query: str | None = None


class DataloaderStarvationEvidence(UtilizationEvidence):
    pattern: Literal["bimodal", "cpu_bound"] | None = None
    bimodal: bool | None = None
    cpu_bound: bool | None = None
    stalled_share: float | None = None
    busy_share: float | None = None
    shares_from: Literal["histogram", "samples"] | None = None
    # The sample interval of the scraped readings the mean, max and quantiles come from, seconds
    # (the shares come from them too where shares_from is "samples", else from sub-second samples).
    util_interval_seconds: float | None = None
    cpu_saturation: float | None = None
    cpu_throttled_ratio: float | None = None
    cpu_saturation_of: Literal["limit", "request"] | None = None  # what cpu_saturation divides by
    stall_seconds: float | None = None  # mean length of a stalled stretch (scraped samples)
    busy_seconds: float | None = None  # mean length of a busy stretch (scraped samples)
    request_rate: float | None = None
    request_rate_query: str | None = None


class RightSizing(BaseModel):
    """The smallest GPU share that would carry a long-running workload (analyzer.detection.right_size),
    or, with ``share`` None, why there is none. The reaper never acts on it; it is advice."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    share: Literal["mig", "time_slice"] | None  # None: no smaller share holds it (see ``reason``)
    profile: str | None = None  # MIG profile (``1g.10gb``), or ``1/4`` of a time-sliced GPU
    resource: str | None = None  # what the pod should request instead: ``nvidia.com/mig-1g.10gb``
    replaces: str | None = None  # what it requests today: ``nvidia.com/gpu``
    gpu_model: str | None = None
    gpu_memory_mib: float | None = None
    memory_peak_mib: float | None = None  # the highest per-GPU framebuffer quantile of the window
    memory_quantile: float
    memory_headroom: float  # added to the peak: the share must hold peak × (1 + headroom)
    compute_percent: float | None = None  # the activity quantile it was sized from, % of a whole GPU
    compute_quantile: float | None = None
    share_of_gpu: float | None = None  # the recommended share, as a fraction of one GPU
    gpu_equivalents_saved: float = 0.0
    saved_gpu_hours: float = 0.0
    saved_cost: float | None = None
    reason: str = ""

    @property
    def change(self) -> str | None:
        """The manifest change, per GPU a pod requests (``nvidia.com/gpu: 1 → nvidia.com/mig-1g.10gb: 1``)."""
        if self.share is None or self.resource is None:
            return None
        return f"{self.replaces or 'nvidia.com/gpu'}: 1 → {self.resource}: 1"

    def line(self, currency: str | None = None) -> str:
        """The recommendation in one sentence, the same in the terminal, the HTML report and Slack."""
        if self.share is None:
            return f"No smaller GPU share: {self.reason}."
        what = f"MIG {self.profile}" if self.share == "mig" else f"{self.profile} of a time-sliced GPU"
        saving = f"{self.gpu_equivalents_saved:.2g} GPU-equivalents, {self.saved_gpu_hours:,.1f} GPU-hours"
        if self.saved_cost is not None and currency:
            saving += f" ({self.saved_cost:,.2f} {currency})"
        return f"Right-size to {what}: {self.change} in its pods' resources — frees {saving} over the window."


class LowUtilizationEvidence(UtilizationEvidence):
    low_utilization_threshold_percent: float | None = None
    min_memory_used_mib: float | None = None
    unallocated: bool | None = None  # a node none of whose GPUs any pod held
    near_miss: bool | None = None  # the mean lies just above the line: reported with lower confidence
    cpu_saturation: float | None = None
    cpu_throttled_ratio: float | None = None
    cpu_saturation_of: Literal["limit", "request"] | None = None
    cpu_pressed: bool | None = None  # a pod at its CPU bound: the recommendation starts with CPU
    request_rate: float | None = None
    request_rate_query: str | None = None
    right_size: RightSizing | None = None  # long-running workloads only, when the policy asks for it


class StalledJobEvidence(UtilizationEvidence):
    """A job whose GPUs read busy while they wait on one rank (analyzer.detection.stalled_job)."""

    # one_rank: waits on the same GPU each time (synchronous checkpointing); varying_ranks: on
    # different GPUs (a straggler, an input problem); hung: one wait to the window's end; spin_poll:
    # a single GPU pegged at near-idle power (a server busy-waiting with nothing to do).
    pattern: Literal["one_rank", "varying_ranks", "hung", "spin_poll"] | None = None
    hung: bool | None = None
    severity: Literal["warning", "critical"] | None = None  # critical: hung, the job never finishes
    waiting_share: float | None = None  # of the job's judged GPU time spent waiting
    waiting_gpu_hours: float | None = None
    episodes: int | None = None
    episode_mean_minutes: float | None = None
    episode_max_minutes: float | None = None
    last_episode_minutes: float | None = None  # the wait still going on at the window's end (hung)
    odd_one_out: str | None = None  # the GPU the others waited on most often (device id)
    odd_one_out_pod: str | None = None
    odd_one_out_share: float | None = None  # of the episodes it was the laggard in
    gpu_waiting_shares: dict[str, float] | None = None  # per GPU: share of its judged time waiting
    power_waiting_watts: float | None = None  # mean board power of the waiting samples
    power_working_watts: float | None = None  # mean board power of the busy samples that were not waiting
    power_limit_watts: float | None = None
    power_limit_from: Literal["exporter", "datasheet"] | None = None
    power_metric: str | None = None
    stalled_busy_percent: float | None = None
    stalled_power_ratio: float | None = None
    signals: str | None = None  # what the verdict rests on, comma-separated
    request_rate: float | None = None
    request_rate_query: str | None = None


class UnknownEvidence(Evidence):
    """Why no verdict was drawn."""

    coverage: float | None = None
    min_coverage: float | None = None
    gpus_missing: int | None = None
    gpus_low_coverage: str | None = None  # comma-separated device ids
    judged_from: AwareDatetime | None = None
    judged_hours: float | None = None
    unallocated: bool | None = None
    reason: str | None = None  # too_young, low_coverage or ambiguous
    ambiguity: str | None = None  # ambiguous: what in the series' labels cannot be one workload
    request_rate: float | None = None
    request_rate_query: str | None = None

    @property
    def why(self) -> str:
        """Why there was too little data, in a few words: the one wording of every report and message."""
        if self.reason == "too_young":
            return f"too young: {self.judged_hours or 0:,.1f} h judged"
        if self.reason == "ambiguous":
            return f"ambiguous series: {self.ambiguity}" if self.ambiguity else "ambiguous series"
        if self.coverage is not None:
            needed = f" of {self.min_coverage * 100:.0f} % needed" if self.min_coverage is not None else ""
            return f"low coverage: {self.coverage * 100:.1f} % of samples{needed}"
        return "too little data"


AnyEvidence = (
    IdleEndpointEvidence
    | DataloaderStarvationEvidence
    | LowUtilizationEvidence
    | StalledJobEvidence
    | UnknownEvidence
)
