"""Detection settings: the numbers the detectors compare against, with documented defaults.

They live in the policy file the reaper also reads, under the top-level ``detection:`` key, in the
same camelCase spelling as the rest of that file (``idlePercent: 2``); snake_case names are accepted
too. ``load_thresholds`` reads that key and the top-level price (``pricePerGpuHour``, ``currency``:
the one price both tools use) through the one policy-file loader (common.policy_file), so the
analyzer never depends on the rest of the reaper's part of the file and reports errors the same way.
"""

from __future__ import annotations

import string
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from common.durations import Duration
from common.errors import PolicyError

if TYPE_CHECKING:
    from common.policy_file import PolicyDocument

# Placeholders a request-rate query template may use (see docs/detectors.md).
REQUEST_RATE_PLACEHOLDERS = frozenset({"namespace", "kind", "workload", "pods", "window", "cluster"})


Percent = Annotated[float, Field(ge=0.0, le=100.0)]
#: The policy's ``prices``: GPU model name, as the series' ``modelName`` label reads it, to a price per
#: GPU-hour (``pricePerGpuHour`` prices every other model). Read by ``gpu-analyzer chargeback``.
ModelPrices = dict[Annotated[str, Field(min_length=1)], Annotated[float, Field(ge=0.0)]]
Ratio = Annotated[float, Field(ge=0.0, le=1.0)]


class RightSizeSettings(BaseModel):
    """How the analyzer sizes a smaller GPU share for long-running workloads of low utilization
    (docs/detectors.md, "Right-sizing")."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    enabled: bool = True
    # The framebuffer peak a share must hold: this quantile of each GPU's memory over the window ...
    memory_quantile: Annotated[float, Field(gt=0.5, le=1.0)] = 0.99
    # ... plus this much on top (0.2: the share must hold 1.2 × the peak).
    memory_headroom: Annotated[float, Field(ge=0.0, le=4.0)] = 0.2
    # The activity the share must carry, scaled to it, may reach at most this (percent of the share):
    # on a 1/7 MIG slice a workload at 5 % of the whole GPU would run at 35 %.
    compute_ceiling_percent: Annotated[float, Field(gt=0.0, le=100.0)] = 80.0
    # Time-sliced shares offered: at most this many pods per GPU (the device plugin's replicas).
    max_time_slice_replicas: Annotated[int, Field(ge=2, le=64)] = 8


class Thresholds(BaseModel):
    """Every setting the detectors use. Utilization is in percent (0-100) whatever the exporter's unit."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    # A GPU at or below this is idle. NVML's gauge reads 0-1 % on a GPU that only answers health checks.
    idle_percent: Percent = 2.0
    # Mean utilization below this over the window is low utilization.
    low_utilization_percent: Percent = 30.0
    # Share of the expected samples a GPU must have delivered before any verdict is given.
    min_coverage: Ratio = 0.9
    # An idle endpoint holds its model in GPU memory: mean framebuffer used (MiB) over the window, per
    # GPU that reports it, must reach this. Below it nothing is loaded (low utilization, not an endpoint);
    # GPUs without memory data do not block the verdict.
    idle_min_memory_mib: float = Field(default=256.0, ge=0.0)
    # Model loading keeps a fresh pod's GPU at 0 %: its first minutes are never judged.
    warmup_grace: Duration = timedelta(minutes=30)

    # Starvation, bimodal pattern: at least `starvation_min_share` of the samples at or below
    # `starvation_idle_percent` and as many above `starvation_busy_percent`.
    starvation_idle_percent: Percent = 10.0
    starvation_busy_percent: Percent = 75.0
    starvation_min_share: Annotated[float, Field(gt=0.0, le=0.5)] = 0.2
    # Starvation, CPU-bound pattern: mean inside [min, max], flat (the central 80 % of samples within
    # `starvation_flat_spread_percent` points) while the pod uses ≥ `cpu_saturation_ratio` of its CPU
    # limit or is throttled in ≥ `cpu_throttling_ratio` of its CFS periods.
    starvation_middling_min_percent: Percent = 20.0
    starvation_middling_max_percent: Percent = 75.0
    starvation_flat_spread_percent: Percent = 25.0
    cpu_saturation_ratio: Ratio = 0.9
    cpu_throttling_ratio: Ratio = 0.25

    # Stalled jobs (docs/detectors.md, "Stalled jobs"): a GPU waits in a collective when it reads at
    # least `stalled_busy_percent` (a spinning NCCL kernel is resident) while drawing at most
    # `stalled_power_ratio` of its board's power limit (near idle with a context). A job is reported
    # when its GPUs waited at least `stalled_min_share` of their judged time, and as hung when every
    # GPU has been waiting, without a break, for `stalled_hung_after` up to the end of the window.
    stalled_busy_percent: Percent = 80.0
    stalled_power_ratio: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.35
    stalled_min_share: Annotated[float, Field(gt=0.0, le=1.0)] = 0.15
    stalled_hung_after: Duration = timedelta(minutes=30)

    # Turns wasted GPU-hours into money in findings and reports; no cost is shown without it. Set at
    # the policy's top level (``pricePerGpuHour``, ``currency``), where the reaper reads it too.
    price_per_gpu_hour: float | None = Field(default=None, ge=0.0)
    # Optional PromQL template that must evaluate to 0 before a workload is called an idle endpoint.
    request_rate_query: str | None = None
    # Sample interval of the GPU series; detected from the data when not given.
    scrape_interval: Duration | None = None
    # The smaller GPU share a long-running workload of low utilization would fit (``enabled: false``
    # turns the recommendations off).
    right_size: RightSizeSettings = Field(default_factory=RightSizeSettings)

    @field_validator("request_rate_query")
    @classmethod
    def _known_placeholders(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not value.strip():
            raise ValueError("empty query; leave the key out to skip the request-rate check")
        template = string.Template(value)
        if not template.is_valid():
            raise ValueError("a '$' that starts no placeholder; write $$ for a literal dollar sign")
        names = set(template.get_identifiers())
        unknown = names - REQUEST_RATE_PLACEHOLDERS
        if unknown:
            known = ", ".join(f"${n}" for n in sorted(REQUEST_RATE_PLACEHOLDERS))
            raise ValueError(f"unknown placeholder(s) {', '.join(sorted(unknown))}; known: {known}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Thresholds:
        if self.starvation_idle_percent >= self.starvation_busy_percent:
            raise ValueError("starvationIdlePercent must be below starvationBusyPercent")
        if self.starvation_middling_min_percent >= self.starvation_middling_max_percent:
            raise ValueError("starvationMiddlingMinPercent must be below starvationMiddlingMaxPercent")
        if self.idle_percent >= self.low_utilization_percent:
            raise ValueError("idlePercent must be below lowUtilizationPercent")
        if self.stalled_busy_percent <= self.low_utilization_percent:
            raise ValueError("stalledBusyPercent must be above lowUtilizationPercent")
        if self.stalled_hung_after <= timedelta(0):
            raise ValueError("stalledHungAfter must be positive")
        if self.scrape_interval is not None and self.scrape_interval <= timedelta(0):
            raise ValueError("scrapeInterval must be positive")
        return self


class Pricing(BaseModel):
    """The policy's top-level price: the one both tools read (the rest of the top level is the reaper's)."""

    model_config = ConfigDict(frozen=True, extra="ignore", alias_generator=to_camel, populate_by_name=True)

    price_per_gpu_hour: float | None = Field(default=None, ge=0.0)
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$")
    prices: ModelPrices = Field(default_factory=dict)

    def price_of(self, model: str) -> float | None:
        """The price per GPU-hour of a GPU model: its own, else the default (None: no price)."""
        return self.prices.get(model, self.price_per_gpu_hour)

    def disagreement(self, detection: Thresholds) -> str | None:
        other = detection.price_per_gpu_hour
        if other is not None and self.price_per_gpu_hour is not None and other != self.price_per_gpu_hour:
            return (
                f"pricePerGpuHour ({self.price_per_gpu_hour:g}) and detection.pricePerGpuHour ({other:g}) "
                "disagree; set the price once, at the top level"
            )
        return None

    def applied_to(self, detection: Thresholds) -> Thresholds:
        """``detection`` with this price and currency (a price set only under ``detection:`` is kept)."""
        price = (
            self.price_per_gpu_hour if self.price_per_gpu_hour is not None else detection.price_per_gpu_hour
        )
        return detection.model_copy(update={"price_per_gpu_hour": price, "currency": self.currency})


def load_thresholds(path: str | Path) -> Thresholds:
    """The ``detection:`` block of a policy file, with the top-level price filled in; PolicyError at
    file:line:field.

    The rest of the file is the reaper's: only its YAML must be sound here, not its content.
    """
    from common.policy_file import load_policy_document  # the YAML parser, only when a file is read

    document = load_policy_document(path)
    detection = document.validate(Thresholds, section="detection")
    return _pricing(document, path, detection).applied_to(detection)


def load_pricing(path: str | Path) -> Pricing:
    """The policy's top-level price and currency (what reports print next to costs)."""
    from common.policy_file import load_policy_document

    document = load_policy_document(path)
    return _pricing(document, path, document.validate(Thresholds, section="detection"))


def _pricing(document: PolicyDocument, path: str | Path, detection: Thresholds) -> Pricing:
    pricing = document.validate(Pricing)
    problem = pricing.disagreement(detection)
    if problem:
        raise PolicyError(str(path), [problem])
    return pricing
