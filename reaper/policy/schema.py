"""The policy file's shape: pydantic models, one immutable object from the YAML.

Decision code (pure): no Kubernetes, HTTP or Slack imports. camelCase keys in the file, like the
Kubernetes objects the policy sits next to.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from enum import StrEnum
from functools import cached_property
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from common.durations import MIN_ANALYSIS_WINDOW, Duration, PositiveDuration, format_setting
from common.model import Finding, FindingKind, LowUtilizationEvidence
from common.thresholds import ModelPrices, Pricing, Thresholds
from reaper import names
from reaper.policy.fields import (
    Channel,
    ChannelGlob,
    ClusterName,
    Glob,
    LabelKey,
    LabelValue,
    NamespaceName,
    WorkloadGlob,
    glob_match,
    tenant_channel_problem,
)


class RunMode(StrEnum):
    """Whether a run changes the cluster: from the policy (or the command line) to the executor's one gate."""

    DRY_RUN = "dry-run"
    APPLY = "apply"

    @property
    def writes(self) -> bool:
        return self is RunMode.APPLY


class _Model(BaseModel):
    # camelCase keys in YAML, like the Kubernetes objects the policy sits next to.
    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True, use_enum_values=False
    )


# --- label selectors --------------------------------------------------------------------------------


class SelectorRequirement(_Model):
    key: LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[LabelValue, ...] = ()

    @model_validator(mode="after")
    def _values_fit_operator(self) -> SelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs a non-empty values list")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        match self.operator:
            case "In":
                return labels.get(self.key) in self.values
            case "NotIn":
                return labels.get(self.key) not in self.values
            case "Exists":
                return self.key in labels
            case _:
                return self.key not in labels


class LabelSelector(_Model):
    """The Kubernetes label selector: every matchLabels pair and every expression must hold."""

    match_labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    match_expressions: tuple[SelectorRequirement, ...] = ()

    @model_validator(mode="after")
    def _not_empty(self) -> LabelSelector:
        if not self.match_labels and not self.match_expressions:
            raise ValueError("an empty selector matches everything; give matchLabels or matchExpressions")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            e.matches(labels) for e in self.match_expressions
        )

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_labels.items()]
        for e in self.match_expressions:
            if e.operator in ("In", "NotIn"):
                parts.append(f"{e.key} {e.operator.lower()} ({', '.join(e.values)})")
            else:
                parts.append(e.key if e.operator == "Exists" else f"!{e.key}")
        return ",".join(parts)


# --- rules ------------------------------------------------------------------------------------------


class Action(StrEnum):
    NOTIFY = "notify"
    SCALE_TO_ZERO = "scale_to_zero"
    CORDON = "cordon"

    @property
    def destructive(self) -> bool:
        return self is not Action.NOTIFY


ActionableFinding = Literal["idle_endpoint", "low_utilization", "dataloader_starvation", "stalled_job"]
WorkloadKindName = Literal[
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
    "CronJob",
    "Pod",
    "Node",
    "Rollout",
    "RayCluster",
]

# The default kinds of scale_to_zero: the reaper scales these itself when nothing controls them.
SCALABLE_KINDS: tuple[str, ...] = ("Deployment", "StatefulSet")
# Every kind a finding can name whose root controller scale_to_zero can stop natively (docs/reaper.md):
# a Notebook's or LeaderWorkerSet's StatefulSet, an InferenceService's Deployment, an Argo Rollout, a
# RayCluster, a JobSet's or Kueue's Job.
STOPPABLE_KINDS: tuple[str, ...] = (*SCALABLE_KINDS, "ReplicaSet", "Rollout", "RayCluster", "Job")
_DEFAULT_KINDS: dict[Action, tuple[str, ...]] = {
    Action.SCALE_TO_ZERO: SCALABLE_KINDS,
    Action.CORDON: ("Node",),
}


class Match(_Model):
    """Which findings a rule applies to. Every condition given must hold."""

    findings: tuple[ActionableFinding, ...] = Field(min_length=1)
    namespaces: tuple[Glob, ...] = Field(default=("*",), min_length=1)
    kinds: tuple[WorkloadKindName, ...] | None = Field(default=None, min_length=1)
    label_selector: LabelSelector | None = None
    min_confidence: float = Field(default=0.0, ge=0.0, le=1.0)
    min_wasted_gpu_hours: float = Field(default=0.0, ge=0.0)
    min_gpus: int = Field(default=1, ge=1)
    # How long the finding must have held, counted across consecutive runs (Prometheus' `for:`).
    for_: Duration = Field(default=timedelta(0), alias="for")
    # ``right_size``: only findings that carry a smaller GPU share to move to (notify rules only).
    recommendation: Literal["right_size"] | None = None

    @model_validator(mode="after")
    def _recommendation_fits_findings(self) -> Match:
        if self.recommendation is not None and "low_utilization" not in self.findings:
            raise ValueError("recommendation right_size comes with low_utilization findings only")
        return self

    @cached_property  # asked once per rule and finding while planning
    def finding_kinds(self) -> frozenset[FindingKind]:
        return frozenset(FindingKind(f) for f in self.findings)

    def recommends(self, finding: Finding) -> bool:
        """Whether ``finding`` carries the recommendation this rule asks for (any, when it asks none)."""
        if self.recommendation is None:
            return True
        evidence = finding.evidence
        sized = evidence.right_size if isinstance(evidence, LowUtilizationEvidence) else None
        return sized is not None and sized.share is not None


# The kinds ``wake: keda-http`` can hand to the KEDA HTTP add-on: workloads whose replicas a
# ScaledObject scales and that serve through a Service (docs/policy.md).
WAKEABLE_KINDS: tuple[str, ...] = ("Deployment", "StatefulSet")


class Rule(_Model):
    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9\-]{0,61}[a-z0-9])?$")
    match: Match
    action: Action
    channel: Channel | None = None  # Slack channel for this rule's items, unless the namespace names one
    # Post a notice first and act only once it has stood this long (None: act on the first run).
    notice: PositiveDuration | None = None
    # ``demand``: act only while pending GPU work would use what the action frees (None: always).
    when: Literal["demand"] | None = None
    # ``keda-http``: stop by handing the workload to the KEDA HTTP add-on, so a request wakes it.
    wake: Literal["keda-http"] | None = None

    @model_validator(mode="after")
    def _reclaim_keys_fit_action(self) -> Rule:
        if self.notice is not None and self.action is Action.NOTIFY:
            raise ValueError(
                "notice applies to rules that act (scale_to_zero, cordon); a notify rule only tells"
            )
        if self.when is not None and self.action is not Action.SCALE_TO_ZERO:
            raise ValueError(
                f"when: demand applies to action scale_to_zero only, not {self.action.value}: "
                "cordoning a node frees no GPU for a pending pod"
            )
        if self.wake is not None:
            if self.action is not Action.SCALE_TO_ZERO:
                raise ValueError(f"wake applies to action scale_to_zero only, not {self.action.value}")
            kinds = set(self.kinds or ())
            if not kinds or not kinds <= set(WAKEABLE_KINDS):
                other = ", ".join(sorted(kinds - set(WAKEABLE_KINDS))) or "any kind"
                raise ValueError(
                    f"wake: {self.wake} wakes {' and '.join(WAKEABLE_KINDS)} only (served through a "
                    f"Service), not {other}; give match.kinds"
                )
        return self

    @model_validator(mode="after")
    def _action_fits_kinds(self) -> Rule:
        if self.match.recommendation is not None and self.action is not Action.NOTIFY:
            raise ValueError(
                f"a rule matching recommendation {self.match.recommendation} must use action notify: "
                "the reaper never resizes a workload, it tells its owners"
            )
        if self.match.kinds is None:
            return self
        kinds = set(self.match.kinds)
        if self.action is Action.SCALE_TO_ZERO and not kinds <= set(STOPPABLE_KINDS):
            other = ", ".join(sorted(kinds - set(STOPPABLE_KINDS)))
            allowed = ", ".join(STOPPABLE_KINDS[:-1]) + f" and {STOPPABLE_KINDS[-1]}"
            raise ValueError(
                f"action scale_to_zero applies to {allowed} only, not {other}; "
                "use a separate notify rule for those kinds"
            )
        if self.action is Action.CORDON and kinds != {"Node"}:
            raise ValueError("action cordon applies to kind Node only")
        if self.action is not Action.CORDON and "Node" in kinds and len(kinds) > 1:
            raise ValueError("a rule matching Node must match only Node (nodes have no namespace or owner)")
        return self

    @property
    def kinds(self) -> tuple[str, ...] | None:
        """The kinds this rule matches; None means any kind."""
        return self.match.kinds if self.match.kinds is not None else _DEFAULT_KINDS.get(self.action)


# --- the rest of the policy -------------------------------------------------------------------------


class Exclusions(_Model):
    namespaces: tuple[Glob, ...] = ()
    workloads: tuple[WorkloadGlob, ...] = ()
    nodes: tuple[Glob, ...] = ()
    label_selector: LabelSelector | None = None


class Grace(_Model):
    after_creation: Duration = timedelta(hours=1)
    after_restore: Duration = timedelta(hours=24)


class Safety(_Model):
    max_actions_per_run: int = Field(default=10, ge=0)
    max_cordon_share: float = Field(default=0.1, ge=0.0, le=1.0)
    consecutive_runs: int = Field(default=2, ge=1, le=100)
    confirmation_max_gap: PositiveDuration = timedelta(hours=3)
    max_data_age: PositiveDuration = timedelta(minutes=30)
    gitops: Literal["flag", "skip"] = "flag"


# An extended resource's name, as a pod's resources spell it: a DNS domain, a slash, a name.
_RESOURCE_NAME = re.compile(
    r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)


def _check_resource_name(value: str) -> str:
    if not _RESOURCE_NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an extended resource name (a domain, '/', a name: example.com/gpu)"
        )
    return value


class SlackRoute(_Model):
    namespaces: tuple[Glob, ...] = Field(min_length=1)
    channel: Channel


class Slack(_Model):
    channel: Channel | None = None  # default channel (bot token mode)
    routes: tuple[SlackRoute, ...] = ()
    # The channels a namespace's owners may name in gpu-reaper/slack-channel (globs over '#name', or
    # IDs). None: any channel; a user or a direct message never, whatever this says.
    allowed_channels: tuple[ChannelGlob, ...] | None = None
    api_url: str = Field(default="https://slack.com/api/", pattern=r"^https?://[^\s]+/$")
    max_items_per_message: int = Field(default=20, ge=1, le=40)
    notify_when_idle: bool = False  # post even when a run found nothing to report

    def owner_channel(self, value: str) -> tuple[str | None, str | None]:
        """A namespace's ``gpu-reaper/slack-channel``: the channel to post to, or why it is refused."""
        problem = tenant_channel_problem(value)
        if problem is None and self.allowed_channels is not None:
            allowed = glob_match(value, self.allowed_channels)
            if allowed is None:
                problem = f"not in slack.allowedChannels ({', '.join(self.allowed_channels)})"
        return (None, problem) if problem else (value, None)


class Demand(_Model):
    """What counts as unmet GPU demand for ``when: demand`` rules (reaper.demand)."""

    # Extended resources counted as GPU demand besides nvidia.com/gpu, nvidia.com/mig-* and
    # amd.com/gpu: a pending pod asking for one is met only by stopping a workload holding the same.
    resources: tuple[Annotated[str, AfterValidator(_check_resource_name)], ...] = ()


# NVIDIA's GPU feature discovery (and the GPU operator, which runs it) labels every node with a GPU so.
DEFAULT_GPU_NODE_SELECTOR = LabelSelector(match_labels={"nvidia.com/gpu.present": "true"})


class Policy(_Model):
    mode: RunMode = RunMode.DRY_RUN
    # The cluster this reaper acts on, as the findings' cluster label names it (reaper.clusters);
    # `--cluster` / $GPU_CLUSTER win. None: findings that name a cluster are refused.
    cluster: ClusterName | None = None
    # The nodes the reaper lists; when none carries it, every node with GPUs (status) instead.
    # null: always list every node and keep those with GPUs.
    gpu_node_selector: LabelSelector | None = DEFAULT_GPU_NODE_SELECTOR
    window: PositiveDuration = timedelta(hours=6)
    reaper_namespace: NamespaceName = names.DEFAULT_REAPER_NAMESPACE
    price_per_gpu_hour: float | None = Field(default=None, ge=0.0)
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$")
    prices: ModelPrices = Field(default_factory=dict)  # per GPU model (common.thresholds.Pricing)
    exclude: Exclusions = Exclusions()
    grace: Grace = Grace()
    safety: Safety = Safety()
    slack: Slack = Slack()
    demand: Demand = Demand()
    rules: tuple[Rule, ...] = Field(min_length=1)
    detection: Thresholds = Thresholds()

    @field_validator("window")
    @classmethod
    def _long_enough(cls, window: timedelta) -> timedelta:
        if window < MIN_ANALYSIS_WINDOW:
            raise ValueError(
                f"{format_setting(window)} is shorter than the analyzer judges "
                f"({format_setting(MIN_ANALYSIS_WINDOW)} at least): too few samples to call anything idle"
            )
        return window

    @field_validator("rules")
    @classmethod
    def _unique_rule_names(cls, rules: tuple[Rule, ...]) -> tuple[Rule, ...]:
        seen: set[str] = set()
        for rule in rules:
            if rule.name in seen:
                raise ValueError(f"rule name {rule.name!r} is used twice; names must be unique")
            seen.add(rule.name)
        return rules

    @property
    def _pricing(self) -> Pricing:
        return Pricing(price_per_gpu_hour=self.price_per_gpu_hour, currency=self.currency, prices=self.prices)

    @model_validator(mode="after")
    def _one_price(self) -> Policy:
        problem = self._pricing.disagreement(self.detection)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def price(self) -> float | None:
        """The price per GPU-hour, wherever the file sets it."""
        return (
            self.price_per_gpu_hour
            if self.price_per_gpu_hour is not None
            else self.detection.price_per_gpu_hour
        )

    @property
    def thresholds(self) -> Thresholds:
        """The detection settings handed to the analyzer, with the one price filled in (the same
        price ``gpu-analyzer --policy`` reads: common.thresholds.load_thresholds)."""
        return self._pricing.applied_to(self.detection)

    def gap_between_runs(self, run_interval: timedelta) -> str | None:
        """Why runs every ``run_interval`` would leave time that no run's window judges (None: they
        do not). A ``for:`` is counted only over judged time, so such gaps would only delay actions,
        but the waste in them would never be seen."""
        if self.window >= run_interval:
            return None
        return (
            f"window {format_setting(self.window)} is shorter than the run interval "
            f"{format_setting(run_interval)}: {format_setting(run_interval - self.window)} between runs "
            "would be judged by none of them; make the window at least the run interval"
        )

    @property
    def protected_namespaces(self) -> tuple[str, ...]:
        """Never touched, whatever the rules say."""
        return (*names.ALWAYS_PROTECTED_NAMESPACES, self.reaper_namespace)
