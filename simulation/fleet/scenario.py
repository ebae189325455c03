"""Scenario descriptions for the fleet simulator: nodes, GPUs, workloads and the faults they meet.

Offsets (``start``, gap bounds, ...) are durations from the scenario's start, or negative durations
counted back from its end (``-20m`` means twenty minutes before the end), so a scenario reads the
way people describe incidents ("the exporter was down for an hour, three hours ago").
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from common.errors import BadInputError
from common.model import AwareDatetime
from common.timeutil import parse_duration, parse_time


class Behaviour(StrEnum):
    """How a workload uses its GPUs once warmed up."""

    TRAINING = "training"  # busy, ~90 %+
    SERVING = "serving"  # healthy endpoint with a daily traffic curve, 35-80 %
    IDLE = "idle"  # memory held, ~0 % utilization
    LOW_UTILIZATION = "low_utilization"  # steady 5-25 %, never idle, never busy
    STARVATION_SAWTOOTH = "starvation_sawtooth"  # busy / stalled phases of 1-3 min
    STARVATION_SUBSECOND = "starvation_subsecond"  # sub-second stalls: gauge flat ~50 %, samples bimodal
    STARVATION_CPU = "starvation_cpu"  # flat ~45 % while the pod's CPU is pinned at its limit
    # Data-parallel training, one rank per pod (the pods of one Job): every step ends in an NCCL
    # all-reduce, and ranks that arrive first spin in its kernel (NVML reads 100 %) at near-idle power.
    DDP_CHECKPOINT_OFTEN = "ddp_checkpoint_often"  # rank 0 saves synchronously every few steps
    DDP_CHECKPOINT_RARE = "ddp_checkpoint_rare"  # ... every few hundred steps: short waits, rarely
    DDP_STRAGGLER = "ddp_straggler"  # irregular waits on varying ranks (a slow node, uneven input)
    DDP_HUNG = "ddp_hung"  # the last rank dies at `stall_at`; the others spin until the window's end
    POWER_CAPPED_TRAINING = "power_capped_training"  # busy, held at a low power cap (clock-event reasons)
    SPIN_POLL = "spin_poll"  # a server busy-waiting with nothing to do: 100 % at idle power


def _offset(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("-"):
            return -parse_duration(text[1:])
        return parse_duration(text) if text not in ("0", "0s") else timedelta(0)
    if isinstance(value, int | float):
        return timedelta(seconds=value)
    return value


def _duration(value: Any) -> Any:
    return parse_duration(value) if isinstance(value, str) else value


def _time(value: Any) -> Any:
    return parse_time(value) if isinstance(value, str) else value


Offset = Annotated[timedelta, BeforeValidator(_offset)]
Duration = Annotated[timedelta, BeforeValidator(_duration)]


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Interval(_Spec):
    start: Offset
    end: Offset


class GpuLoss(_Spec):
    """GPU ``gpu`` (index on its node) falls off the bus at ``at`` and never returns."""

    gpu: int = Field(ge=0)
    at: Offset


# How a node's exporter names the DCGM series: dcgm-exporter up to 4.8, or DCGM 4.7's naming standard
# as dcgm-exporter 4.9 serves it (new names, base units, the ``hostname`` label).
MetricNames = Literal["legacy", "dcgm-4.7"]


class NamingUpgrade(_Spec):
    """The node's exporter is upgraded to DCGM 4.7's naming at ``at``: its DCGM series carry the
    legacy names up to ``at`` and the new ones after; for the first ``overlap`` scrapes after
    ``at`` (old and new exporter pods both scraped during the rollout) both are written."""

    at: Offset
    overlap: int = Field(default=0, ge=0, le=2)


class NodeSpec(_Spec):
    name: str = Field(min_length=1)
    gpus: int = Field(ge=1, le=16)
    model: str = "NVIDIA H100 80GB HBM3"
    memory_mib: int = Field(default=81559, gt=0)
    tdp_watts: float = Field(default=700.0, gt=0)
    # The exporter serves the board's enforced power limit (ours does; dcgm-exporter when configured).
    serves_power_limit: bool = False
    exporter: Literal["dcgm-exporter", "gpu-exporter"] = "dcgm-exporter"
    profiling: bool = False  # emits DCGM_FI_PROF_* ratios (dcgm-exporter with profiling, or ours on Hopper)
    mig_profile: str | None = None  # e.g. "3g.40gb": every GPU is split into instances of this profile
    mig_instances: int = Field(default=2, ge=1, le=7)
    gaps: tuple[Interval, ...] = ()  # the exporter on this node was down
    exporter_restarts: tuple[Offset, ...] = ()  # counters the exporter owns start again from zero
    # The exporter pod is rescheduled: from each offset on, its series carry a new `instance`.
    exporter_moves: tuple[Offset, ...] = ()
    gpu_losses: tuple[GpuLoss, ...] = ()
    metric_names: MetricNames = "legacy"
    # Legacy names until then, ``metric_names`` after (which must then be dcgm-4.7).
    upgrade: NamingUpgrade | None = None
    # Prometheus scrapes each target at its own offset within the interval, its timestamps
    # jittering by milliseconds: the GPU exporter's samples of step k lie this far into
    # (start + (k-1) × step, start + k × step] (0: at its end, as every other series), each
    # scrape up to scrape_jitter_ms earlier.
    scrape_offset_s: float = Field(default=0.0, ge=0)
    scrape_jitter_ms: float = Field(default=0.0, ge=0, le=100)

    @model_validator(mode="after")
    def _checks(self) -> NodeSpec:
        if self.upgrade is not None and self.metric_names != "dcgm-4.7":
            raise ValueError("upgrade: a node upgrades to metric_names: dcgm-4.7, not to the legacy naming")
        for loss in self.gpu_losses:
            if loss.gpu >= self.gpus:
                raise ValueError(f"gpu_losses: gpu {loss.gpu} does not exist on a node with {self.gpus} GPUs")
        if self.mig_profile is not None and self.profiling is False:
            raise ValueError("MIG nodes need profiling: true (DEV_GPU_UTIL is not reported per MIG instance)")
        return self

    @property
    def slots(self) -> int:
        """Allocatable GPU devices: whole GPUs, or MIG instances."""
        return self.gpus * (self.mig_instances if self.mig_profile else 1)


class WorkloadKind(StrEnum):
    DEPLOYMENT = "Deployment"
    STATEFULSET = "StatefulSet"
    JOB = "Job"
    POD = "Pod"
    RAYCLUSTER = "RayCluster"  # KubeRay: the pods' own controller, no set in between


class Controller(StrEnum):
    """A custom controller above the workload: the cluster objects, and the label it writes on the
    pods (exported as kube_pod_labels where ``pod_labels_allowed`` allows it)."""

    NOTEBOOK = "Notebook"  # Kubeflow: owns a StatefulSet of the same name
    INFERENCE_SERVICE = "InferenceService"  # KServe raw deployment: owns the NAME-predictor Deployment
    LEADER_WORKER_SET = "LeaderWorkerSet"  # owns its leader StatefulSet of the same name


_CONTROLLED_KIND = {
    Controller.NOTEBOOK: WorkloadKind.STATEFULSET,
    Controller.INFERENCE_SERVICE: WorkloadKind.DEPLOYMENT,
    Controller.LEADER_WORKER_SET: WorkloadKind.STATEFULSET,
}


class JobOwner(_Spec):
    """What created a Job (``kube_job_owner``): a CronJob, a JobSet, or another controller."""

    kind: str = Field(min_length=1)
    name: str = Field(min_length=1)


class WorkloadSpec(_Spec):
    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)
    kind: WorkloadKind = WorkloadKind.DEPLOYMENT
    behaviour: Behaviour
    replicas: int = Field(default=1, ge=1)
    gpus_per_pod: int = Field(default=1, ge=1)
    start: Offset = timedelta(0)
    end: Offset | None = None
    warmup: Duration = timedelta(minutes=10)  # model loading: memory climbs, GPU at 0 %
    node: str | None = None  # pin to a node; otherwise first fit in node order
    cpu_limit_cores: float = Field(default=4.0, gt=0)
    memory_fraction: float = Field(default=0.7, gt=0, le=1)  # framebuffer share held once loaded
    container_restarts: tuple[Offset, ...] = ()  # cAdvisor counters reset
    # Replicas the scheduler never places (no node has room): Pending, holding no GPU.
    pending_replicas: int = Field(default=0, ge=0)
    # Each replica's pod is deleted and recreated by its controller at these offsets (same GPUs).
    replaced_at: tuple[Offset, ...] = ()
    job_owner: JobOwner | None = None  # Jobs only: the CronJob / JobSet above it
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    controller: Controller | None = None
    controller_name: str | None = None  # default: the workload's name (InferenceService: without -predictor)
    stall_at: Offset | None = None  # ddp_hung: when the last rank dies

    @property
    def controller_root(self) -> str | None:
        """The name of the custom controller's object above the workload (None: no controller)."""
        if self.controller is None:
            return None
        if self.controller_name:
            return self.controller_name
        if self.controller is Controller.INFERENCE_SERVICE:
            return self.name.removesuffix("-predictor")  # KServe names it <isvc>-predictor
        return self.name

    @model_validator(mode="after")
    def _checks(self) -> WorkloadSpec:
        if self.kind is WorkloadKind.POD and self.replicas != 1:
            raise ValueError("a bare Pod has exactly one replica")
        if self.controller is not None and _CONTROLLED_KIND[self.controller] is not self.kind:
            raise ValueError(
                f"a {self.controller.value} controls a {_CONTROLLED_KIND[self.controller].value}"
            )
        if self.kind is WorkloadKind.POD and self.replaced_at:
            raise ValueError("a bare Pod has no controller to recreate it")
        if self.job_owner is not None and self.kind is not WorkloadKind.JOB:
            raise ValueError("job_owner is for Jobs only")
        return self


class LabelStyle(_Spec):
    """How the scrape path named the labels: dcgm-exporter's own, or relabelled by Prometheus."""

    hostname: Literal["Hostname", "hostname"] = "Hostname"
    pod_prefix: Literal["", "exported_"] = ""


class KubeStateMetricsDelivery(_Spec):
    """How kube-state-metrics' series reach the TSDB (see simulation.fleet.delivery)."""

    moves: tuple[Offset, ...] = ()  # rescheduled: from each offset on, a new pod (instance, pod labels)
    rollout_overlap: Duration = timedelta(0)  # after a move, the old pod still reports this long
    replicas: int = Field(default=1, ge=1, le=4)  # every object exported by each replica
    shards: int = Field(default=1, ge=1, le=8)  # --total-shards: each object exported by one shard


class ReplicaGap(_Spec):
    """HA replica ``replica`` holds no sample between ``start`` and ``end`` (the other one does)."""

    replica: int = Field(ge=0)
    start: Offset
    end: Offset


class Delivery(_Spec):
    """How the monitoring stack delivers the series: duplicated, and from which cluster."""

    kube_state_metrics: KubeStateMetricsDelivery | None = None
    gpu_scrapes: int = Field(default=1, ge=1, le=3)  # GPU exporters scraped by this many jobs
    ha_replicas: int = Field(default=1, ge=1, le=3)  # an HA pair remote-writing without deduplication
    replica_label: str = Field(default="prometheus_replica", pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")
    replica_gaps: tuple[ReplicaGap, ...] = ()
    cluster: str | None = Field(default=None, min_length=1)  # the external label's value
    cluster_label: str = Field(default="cluster", pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")

    @model_validator(mode="after")
    def _checks(self) -> Delivery:
        for gap in self.replica_gaps:
            if gap.replica >= self.ha_replicas:
                raise ValueError(
                    f"replica_gaps: replica {gap.replica} does not exist ({self.ha_replicas} replicas)"
                )
        return self


# The pod labels kube-state-metrics exports by default in the simulated clusters, as docs/analyzer.md
# tells operators to allow them (--metric-labels-allowlist=pods=[...]).
DEFAULT_POD_LABELS_ALLOWED = (
    "app.kubernetes.io/name",
    "serving.kserve.io/inferenceservice",
    "notebook-name",
    "leaderworkerset.sigs.k8s.io/name",
    "rollouts-pod-template-hash",
)


class Scenario(_Spec):
    name: str
    seed: int = 0
    end: Annotated[AwareDatetime, BeforeValidator(_time)]
    duration: Duration = timedelta(hours=24)
    step: Duration = timedelta(seconds=60)
    analysis_window: Duration = timedelta(hours=6)
    metrics: Literal["minimal", "standard"] = "standard"
    # The unit DCGM_FI_DEV_GPU_UTIL (and MEM_COPY_UTIL) is served in: ratio, 0-1, as some
    # relabelling rules store it. Earlier scenario files call it util_scale (read as this).
    gpu_util_unit: Literal["percent", "ratio"] = "percent"
    labels: LabelStyle = LabelStyle()
    nvml_sample_hz: float = Field(default=6.0, gt=0)
    driver_version: str = "550.54.15"
    nodes: tuple[NodeSpec, ...] = Field(min_length=1)
    workloads: tuple[WorkloadSpec, ...] = ()
    delivery: Delivery = Delivery()
    # Pod label keys kube-state-metrics exports as kube_pod_labels{label_<key>} (its allowlist).
    pod_labels_allowed: tuple[str, ...] = DEFAULT_POD_LABELS_ALLOWED

    @model_validator(mode="before")
    @classmethod
    def _earlier_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and "util_scale" in data:
            if "gpu_util_unit" in data:
                raise ValueError("util_scale is the earlier name of gpu_util_unit: give one of them")
            data = {("gpu_util_unit" if k == "util_scale" else k): v for k, v in data.items()}
        return data

    @model_validator(mode="after")
    def _checks(self) -> Scenario:
        if self.step.total_seconds() < 1 or self.duration < self.step * 2:
            raise ValueError("step must be ≥ 1s and duration at least two steps")
        if self.analysis_window > self.duration:
            raise ValueError("analysis_window cannot be longer than duration")
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        keys = [(w.namespace, w.name) for w in self.workloads]
        if len(set(keys)) != len(keys):
            raise ValueError("workload namespace/name pairs must be unique")
        for n in self.nodes:
            if n.scrape_offset_s >= self.step.total_seconds():
                raise ValueError(f"node {n.name}: scrape_offset_s must be shorter than the step")
        for w in self.workloads:
            if w.node is not None and w.node not in names:
                raise ValueError(f"workload {w.namespace}/{w.name} is pinned to unknown node {w.node!r}")
            pinned = next((n for n in self.nodes if n.name == w.node), None)
            if w.behaviour is Behaviour.STARVATION_SUBSECOND and (
                pinned is None or pinned.exporter != "gpu-exporter"
            ):
                raise ValueError(
                    f"workload {w.namespace}/{w.name}: starvation_subsecond is only visible in "
                    "gpu-exporter's sample histogram; pin it to a gpu-exporter node"
                )
        return self

    @property
    def start(self) -> datetime:
        return self.end - self.duration

    def at(self, offset: timedelta) -> datetime:
        """Absolute time of an offset (negative offsets count back from the end)."""
        return (self.end if offset < timedelta(0) else self.start) + offset


class ScenarioError(BadInputError, ValueError):
    """A scenario file that cannot be used; the message names the file and the field. Bad input (exit
    2) under the project's one error root; still a ValueError for callers that catch that."""


BUILTIN_DIR = Path(__file__).with_name("scenarios")


def builtin_scenarios() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load a built-in scenario by name (``standard``) or a YAML file by path."""
    path, raw = _read(name_or_path)
    try:
        return Scenario.model_validate(raw)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}" for err in e.errors()
        )
        raise ScenarioError(f"{path}: {problems}") from e


def _read(name_or_path: str | Path, seen: tuple[Path, ...] = ()) -> tuple[Path, dict[str, Any]]:
    """The scenario's YAML as a mapping; ``extends: NAME`` puts that scenario's nodes and workloads first."""
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        path = BUILTIN_DIR / f"{name_or_path}.yaml"
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        known = ", ".join(builtin_scenarios())
        raise ScenarioError(
            f"{path}: cannot read scenario ({e.strerror}); built-in scenarios: {known}"
        ) from e
    except yaml.YAMLError as e:
        raise ScenarioError(f"{path}: not valid YAML: {e}") from e
    if not isinstance(raw, dict):
        raise ScenarioError(f"{path}: a scenario is a YAML mapping, got {type(raw).__name__}")
    base = raw.pop("extends", None)
    if base is None:
        return path, raw
    if path in seen:
        raise ScenarioError(f"{path}: extends itself (through {base})")
    _, parent = _read(str(base), (*seen, path))
    merged = {**parent, **raw}
    for key in ("nodes", "workloads"):
        merged[key] = [*parent.get(key, []), *raw.get(key, [])]
    return path, merged
