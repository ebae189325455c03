"""What one run learns about how a cluster exposes the series the analyzer reads.

dcgm-exporter and our exporter share DCGM's names (``vocabulary`` lists every name read, in both
DCGM namings, with its unit). What varies between clusters:

* which utilization signal exists — DCGM's graphics-engine profiling ratio is preferred where
  present; MIG instances have nothing else. The device gauge ``DCGM_FI_DEV_GPU_UTIL`` is 0-100,
  unless a recording rule or relabelling made it 0-1; its DCGM 4.7 name is a 0-1 ratio by name;
* which DCGM naming the exporters serve: legacy, DCGM 4.7's (dcgm-exporter 4.9), or both, on a fleet
  part-way through an upgrade; the two names of one field are one signal;
* the node label — ``Hostname`` from dcgm-exporter up to 4.8.2, ``hostname`` from 4.8.3 on (either
  or both), ``node`` or another after relabelling;
* the pod labels — ``pod``/``namespace``, or ``exported_pod``/``exported_namespace`` when the scrape
  config does not honour the exporter's labels;
* whether our exporter's sub-second sample histogram is there.

The decisions are pure functions of label names and numbers so they are tested without a server.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from math import isfinite
from statistics import median

from analyzer.sources import vocabulary
from analyzer.sources.promql import Matcher
from analyzer.sources.vocabulary import (
    CPU_PERIODS,
    CPU_THROTTLED,
    CPU_USAGE,
    KUBE_JOB_OWNER,
    KUBE_POD_LABELS,
    KUBE_POD_LIMITS,
    KUBE_POD_OWNER,
    KUBE_POD_REQUESTS,
    KUBE_POD_STATUS_PHASE,
    KUBE_POD_STATUS_SCHEDULED,
    KUBE_REPLICASET_OWNER,
    PERCENT_TO_PERCENT,
    RATIO_TO_PERCENT,
    Use,
)
from common import metric_names

# The legacy names of the fields read, which stand for the field under either naming.
PROF_GR_ENGINE_ACTIVE = metric_names.PROF_GR_ENGINE_ACTIVE
DEV_GPU_UTIL = metric_names.GPU_UTIL
DEV_FB_USED = metric_names.FB_USED
POD_SM_UTIL = metric_names.POD_SM_UTILIZATION  # our exporter's per-pod share of a time-sliced GPU
POD_MEMORY_USED = metric_names.POD_MEMORY_USED  # bytes held by a pod's processes on a shared GPU
# Every utilization name, both namings, in preference order (see ``vocabulary.READ``).
UTIL_METRICS = vocabulary.UTILIZATION
SAMPLE_HISTOGRAM_BUCKET = metric_names.UTILIZATION_SAMPLES_BUCKET
KUBE_POD_START_TIME = vocabulary.KUBE_POD_START_TIME  # the Kubernetes names read here, and this one

# The label that groups ownerless Jobs into one workload (a sweep's runs), as kube-state-metrics
# exports it when allowed (--metric-labels-allowlist=pods=[app.kubernetes.io/name]).
JOB_GROUP_LABEL = "label_app_kubernetes_io_name"
# Labels custom controllers put on the pods they make, as kube-state-metrics exports them when
# allowed (``label_`` and the key with every character outside [a-zA-Z0-9_] made ``_``): they name
# the controller a stop must act on (analyzer.detection.controllers).
KSERVE_LABEL = "label_serving_kserve_io_inferenceservice"  # serving.kserve.io/inferenceservice
NOTEBOOK_LABEL = "label_notebook_name"  # notebook-name (Kubeflow's notebook controller)
LWS_LABEL = "label_leaderworkerset_sigs_k8s_io_name"  # leaderworkerset.sigs.k8s.io/name
ROLLOUT_HASH_LABEL = "label_rollouts_pod_template_hash"  # rollouts-pod-template-hash (Argo Rollouts)
POD_LABELS_READ = (JOB_GROUP_LABEL, KSERVE_LABEL, NOTEBOOK_LABEL, LWS_LABEL, ROLLOUT_HASH_LABEL)

KNOWN_METRICS = vocabulary.ALL_NAMES

# The external label that tells clusters apart in one query view (Thanos, Mimir, VictoriaMetrics),
# by convention; ``--cluster-label`` names another.
CLUSTER_LABEL = "cluster"
UUID = "UUID"
GPU_INDEX = "gpu"
MODEL = "modelName"
MIG_INSTANCE = "GPU_I_ID"
MIG_PROFILE = "GPU_I_PROFILE"
JOB = "job"
LE = "le"
# The exporters' own node labels (dcgm-exporter's before and after 4.8.3), read together where both
# are found; failing those, a relabelled one, the first found of the rest.
EXPORTER_HOST_LABELS = (metric_names.HOSTNAME_LEGACY, metric_names.HOSTNAME)
HOST_LABELS = (*EXPORTER_HOST_LABELS, "node", "kubernetes_node", "instance")
# Extended resources that mean "GPU devices" in kube-state-metrics' resource label.
GPU_RESOURCE_REGEX = "nvidia_com_gpu|nvidia_com_mig_.+"


@dataclass(frozen=True)
class PodLabels:
    """The label names that carry the pod identity on one family of series."""

    pod: str = "pod"
    namespace: str = "namespace"

    @property
    def names(self) -> tuple[str, str]:
        return (self.namespace, self.pod)


@dataclass(frozen=True)
class Capabilities:
    """What this run found in the data source; decided once, used by every query."""

    # The utilization names found, in preference order (both names of a renamed field where both are).
    util_metrics: tuple[str, ...]
    # The node labels the GPU series carry: both of the exporters' own where both are found (a fleet
    # part-way through an upgrade), a device's node being the first it carries.
    host_labels: tuple[str, ...]
    gpu_pod: PodLabels
    mig: bool = False
    histogram_le: tuple[str, ...] = ()  # the bucket bounds' label values, as exported
    memory: bool = False
    pod_memory: bool = False  # our exporter's per-pod memory on shared GPUs
    # The framebuffer-used names found, in either naming (each in its own unit; free is read beside).
    memory_used: tuple[str, ...] = ()
    kube_state_metrics: bool = False
    replicaset_owner: bool = False
    ksm_pod: PodLabels = PodLabels()
    cpu_usage: bool = False
    cpu_limits: bool = False
    cpu_throttling: bool = False
    cpu_requests: bool = False
    pod_phase: bool = False
    pod_scheduled: bool = False
    job_owner: bool = False
    pod_labels: bool = False
    # Utilization metrics whose recording-rule rollups exist; after the snapshot's check, those it read.
    rollups: tuple[str, ...] = ()
    # The server runs Prometheus' own engine (its build info names a Go version: Prometheus, Thanos,
    # Mimir), which evaluates `timestamp()` step by step inside a subquery, ~10x slower than range
    # functions: the closer looks then tell a fresh sample by `count_over_time` instead. Both forms
    # count the same samples; the choice is about speed only.
    prometheus_engine: bool = False
    # The server evaluates MetricsQL's `count_le_over_time` and `count_gt_over_time`
    # (VictoriaMetrics): a starvation candidate's sample, stalled and busy counts then come from
    # its raw samples in one pass each, with no subquery; only the run counts still need one.
    metricsql: bool = False
    # The utilization series reporting at the window's end, where counted (with the MetricsQL
    # probe: only that engine's snapshot asks a fleet in parts, and their number follows from it,
    # see fleet_queries.fleet_parts). None: not counted.
    fleet_series: int | None = None
    # Matchers every selector of the run carries: one cluster's series where a query view holds
    # several (see analyzer.clusters); none otherwise.
    scope: tuple[Matcher, ...] = ()
    # Per scrape job: multiplier from the legacy DEV gauge's unit to percent (the one name whose unit
    # its values tell), and the sample interval (s).
    dev_to_percent: Mapping[str, float] = field(default_factory=dict)
    interval_s: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def discovered(
        cls,
        present: Collection[str],
        util_metrics: tuple[str, ...],
        gpu_labels: Collection[str],
        ksm_labels: Collection[str],
        histogram_le: tuple[str, ...],
        rollups: tuple[str, ...] = (),
        prometheus_engine: bool = False,
        metricsql: bool = False,
        fleet_series: int | None = None,
        scope: tuple[Matcher, ...] = (),
    ) -> Capabilities:
        """What a source holds, from the metric names present and the labels of the GPU and owner
        series: the one definition both metrics sources (TSDB and in-memory) decide by."""
        ksm = KUBE_POD_OWNER in present
        used = vocabulary.present(Use.MEMORY_USED, present)
        return cls(
            util_metrics=util_metrics,
            host_labels=choose_host_labels(gpu_labels),
            gpu_pod=choose_pod_labels(gpu_labels),
            mig=MIG_INSTANCE in gpu_labels,
            histogram_le=histogram_le,
            memory=bool(used) or POD_MEMORY_USED in present,
            pod_memory=POD_MEMORY_USED in present,
            memory_used=used,
            kube_state_metrics=ksm,
            replicaset_owner=KUBE_REPLICASET_OWNER in present,
            ksm_pod=choose_pod_labels(ksm_labels) if ksm and ksm_labels else PodLabels(),
            cpu_usage=CPU_USAGE in present,
            cpu_limits=KUBE_POD_LIMITS in present,
            cpu_throttling=CPU_THROTTLED in present and CPU_PERIODS in present,
            cpu_requests=ksm and KUBE_POD_REQUESTS in present,
            pod_phase=ksm and KUBE_POD_STATUS_PHASE in present,
            pod_scheduled=ksm and KUBE_POD_STATUS_SCHEDULED in present,
            job_owner=ksm and KUBE_JOB_OWNER in present,
            pod_labels=ksm and KUBE_POD_LABELS in present,
            rollups=rollups,
            prometheus_engine=prometheus_engine,
            metricsql=metricsql,
            fleet_series=fleet_series,
            scope=scope,
        )

    @property
    def histogram(self) -> bool:
        return bool(self.histogram_le)

    @property
    def host_label(self) -> str:
        """The node label most series carry (the first of ``host_labels``)."""
        return self.host_labels[0]

    def node_of(self, labels: Mapping[str, str]) -> str:
        """A device's node: the first node label its series carry."""
        for name in self.host_labels:
            if value := labels.get(name):
                return value
        return ""

    def signals(self) -> tuple[tuple[str, ...], ...]:
        """The utilization names found grouped by field, in preference order: a holder reads the
        first signal it has samples of, under every name of it."""
        return vocabulary.fields(self.util_metrics)

    def device_labels(self) -> tuple[str, ...]:
        """The labels that identify one device holder: GPU (and MIG instance) plus pod."""
        labels = [UUID]
        if self.mig:
            labels.append(MIG_INSTANCE)
        return (*labels, self.gpu_pod.namespace, self.gpu_pod.pod)

    def identity_labels(self) -> tuple[str, ...]:
        extra = [*self.host_labels, GPU_INDEX, MODEL, JOB]
        if self.mig:
            extra.append(MIG_PROFILE)
        return (*self.device_labels(), *extra)

    def to_percent(self, metric: str, job: str) -> float:
        """The multiplier to percent of a utilization name's values in a scrape job: by the name,
        but for the legacy device gauge, by its job's values."""
        fixed = vocabulary.to_unit(metric)
        return fixed if fixed is not None else self.dev_to_percent.get(job, PERCENT_TO_PERCENT)

    def describe(self) -> str:
        naming = vocabulary.naming(self.util_metrics)
        parts = [
            "utilization from " + " then ".join(" and ".join(names) for names in self.signals()),
            *([f"DCGM names {naming}"] if naming else []),
            f"node label {' and '.join(self.host_labels)}",
            f"pod label {self.gpu_pod.pod}",
        ]
        ratio_jobs = sorted(j or "(no job)" for j, s in self.dev_to_percent.items() if s == RATIO_TO_PERCENT)
        if ratio_jobs:
            parts.append(f"{DEV_GPU_UTIL} in 0-1 for {', '.join(ratio_jobs)}")
        if self.rollups:
            parts.append("5-minute recording-rule rollups for " + ", ".join(self.rollups))
        if self.histogram:
            parts.append("sample histogram")
        if self.mig:
            parts.append("MIG")
        if self.metricsql:
            parts.append("MetricsQL counting rollups")
        if not self.kube_state_metrics:
            parts.append("no kube-state-metrics")
        return "; ".join(parts)


def choose_host_labels(label_names: Collection[str]) -> tuple[str, ...]:
    """The node labels of the GPU series: the exporters' own (``Hostname``, ``hostname``: either,
    or both on a fleet part-way through an upgrade), else the first relabelled spelling found."""
    own = tuple(name for name in EXPORTER_HOST_LABELS if name in label_names)
    if own:
        return own
    return (next((name for name in HOST_LABELS if name in label_names), "instance"),)


def choose_pod_labels(label_names: Collection[str]) -> PodLabels:
    """``exported_pod`` wins when present: there ``pod`` names the exporter's own pod."""
    if "exported_pod" in label_names:
        namespace = "exported_namespace" if "exported_namespace" in label_names else "namespace"
        return PodLabels(pod="exported_pod", namespace=namespace)
    return PodLabels()


# A job whose values are only exactly 0 or 1, with at least this share of them at 1, is a 0-1 gauge:
# NVML reads an idle GPU at 0 with rare 1 % blips (a health check now and then), not at exactly 1 %
# in one sample of five.
RATIO_ONES_SHARE = 0.2


def dev_unit_to_percent(max_value: float, has_fraction_below_one: bool, ones_share: float = 0.0) -> float:
    """The multiplier into percent of a ``DCGM_FI_DEV_GPU_UTIL`` job's values, from their unit as told
    by the largest value, whether any value lies in (0, 1) and, for a job whose values are only
    exactly 0 or 1, the share of them at 1.

    Above 1 can only be percent. At or below 1, fractional values mean a 0-1 ratio. A job of only
    0s and 1s is a ratio when at least ``RATIO_ONES_SHARE`` of its samples read 1 — a GPU fully busy
    in those samples, which read as percent would look idle — and percent otherwise: an idle GPU
    blipping to 1 % now and then. ``--gpu-util-unit`` settles what lies in between.
    """
    if max_value > 1.0:
        return PERCENT_TO_PERCENT
    if has_fraction_below_one:
        return RATIO_TO_PERCENT
    return RATIO_TO_PERCENT if max_value == 1.0 and ones_share >= RATIO_ONES_SHARE else PERCENT_TO_PERCENT


def dev_to_percent_by_job(
    device_max: Mapping[str, Collection[float]], ones_share: Mapping[str, float] | None = None
) -> dict[str, float]:
    """``dev_unit_to_percent`` per scrape job, from the maximum of each of its devices' series and the
    job's mean value (which, for a job of only 0s and 1s, is the share of 1s).

    A device whose maximum lies strictly between 0 and 1 can only be a 0-1 gauge (NVML's percent
    readings are whole numbers), so one such device settles its job.
    """
    out = {}
    for job, maxima in device_max.items():
        top = max(maxima, default=0.0)
        fraction = any(0.0 < m < 1.0 for m in maxima)
        out[job] = dev_unit_to_percent(top, fraction, (ones_share or {}).get(job, 0.0))
    return out


def median_interval(series: Iterable[Sequence[float]]) -> float | None:
    """The scrape interval of one device: the median gap between samples, which holes in the data
    do not move.

    Given several series (one device's, from two scrape jobs or an HA pair's replicas, or before and
    after its exporter moved), the gaps are taken within each: their samples interleaved would show
    the distance between two scrapers' phases, not either one's interval. A few hundred numbers:
    plain Python, so that reading a TSDB never loads numpy.
    """
    gaps: list[float] = []
    samples = 0
    for stamps in series:
        ordered = sorted(stamps)
        samples += len(ordered)
        gaps += [b - a for a, b in pairwise(ordered) if b > a]
    if samples < 3 or not gaps:
        return None
    return float(median(gaps))


def pick_buckets(
    bounds: Mapping[str, float], idle_percent: float, busy_percent: float
) -> tuple[str, str, str]:
    """Label values of the buckets that split samples into stalled / busy, and ``+Inf``.

    The stalled bound is the largest bucket at or below ``idle_percent``; the busy bound the largest
    at or below ``busy_percent`` (samples above it are busy). Raises ValueError when the histogram
    lacks the buckets to make that split.
    """
    finite = {le: v for le, v in bounds.items() if isfinite(v)}
    total = [le for le, v in bounds.items() if v == float("inf")]
    idle = [le for le, v in finite.items() if v <= idle_percent]
    busy = [le for le, v in finite.items() if v <= busy_percent]
    if not total or not idle or not busy:
        raise ValueError("histogram lacks a +Inf bucket or bounds at the idle / busy thresholds")
    idle_le = max(idle, key=lambda le: finite[le])
    busy_le = max(busy, key=lambda le: finite[le])
    if finite[busy_le] <= finite[idle_le]:
        raise ValueError("histogram has no bucket between the idle and busy thresholds")
    return idle_le, busy_le, total[0]


def parse_le(value: str) -> float | None:
    try:
        return float(value)  # "+Inf" parses to inf; "10" and "10.0" to the same bound
    except ValueError:
        return None
