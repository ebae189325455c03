"""The PromQL of a chargeback: every figure counted in 5-minute spans, summed by the TSDB.

One expression, ``spans``, says for one 5-minute span ``(s - 5m, s]`` what each part of the bill
holds there (``CHARGEBACK_PARTS`` in ``common.metric_names``), each row tagged with its part:

* per pod (``namespace``, ``pod``, ``modelName``, ``GPU_I_PROFILE``, cluster): ``sampled``, its
  devices with samples in the span; ``held``, the same weighted by a time-sliced GPU's share (one
  over the pods reporting on it in the span); ``used``, weighted by the span's mean activity (0-1;
  a pod's time-sliced share of SM time capped at its share); ``idle``, weighted by whether the
  span's highest activity stayed at or below the idle threshold;
* per pod and resource: ``requested``, the GPU devices kube-state-metrics says it requested while
  its phase was Running;
* per model: ``reported``, GPUs with any utilization sample (``mig="1"`` for MIG-partitioned
  ones); per model and MIG profile: ``unallocated``, devices reporting with no pod (a time-sliced
  GPU whose pods report their shares is not), ``instances``, MIG instances reporting.

A utilization field is read under each of its names, legacy and DCGM 4.7, in preference order: ``or``
keeps one name per holder and span, so the span an exporter upgraded in counts once. Values are
brought to 0-1 by each name's unit (``vocabulary``). The window's total is ``sum_over_time`` of the
expression at 5-minute steps (``window_sum``), or of the hourly rollups alerts/gpu-chargeback.recording.yaml
records from the very same expression (``rollup_sum``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from analyzer.sources import promql, vocabulary
from analyzer.sources.dcgm import (
    GPU_RESOURCE_REGEX,
    MIG_INSTANCE,
    MIG_PROFILE,
    MODEL,
    POD_SM_UTIL,
    UUID,
    PodLabels,
)
from analyzer.sources.fleet_queries import canonical
from analyzer.sources.promql import Matcher, eq, ne
from analyzer.sources.vocabulary import KUBE_POD_REQUESTS, KUBE_POD_STATUS_PHASE
from common import metric_names as m

SPAN = timedelta(seconds=m.CHARGEBACK_SPAN_SECONDS)
ROLLUP_STEP = timedelta(seconds=m.CHARGEBACK_ROLLUP_SECONDS)
# A span's range, one millisecond short of 5 minutes: a sample on the span's left edge belongs to the
# span before it whether the engine's ranges include their left end (Prometheus 2) or not.
_SPAN_RANGE = SPAN - timedelta(milliseconds=1)
PART = m.CHARGEBACK_PART
MIG_FLAG = "mig"
NAMESPACE, POD, RESOURCE = "namespace", "pod", "resource"


@dataclass(frozen=True)
class SpanQueries:
    """What the spans expression depends on: the names present, the labels, the threshold."""

    # Utilization names present, in preference order (vocabulary.UTILIZATION's order).
    util_metrics: tuple[str, ...]
    idle_percent: float
    cluster_label: str = "cluster"
    gpu_pod: PodLabels = field(default_factory=PodLabels)
    ksm_pod: PodLabels = field(default_factory=PodLabels)
    # Multiplier into percent of the legacy DCGM_FI_DEV_GPU_UTIL per scrape job (its unit varies);
    # a job absent reads as percent.
    dev_to_percent: Mapping[str, float] = field(default_factory=dict)
    scope: tuple[Matcher, ...] = ()
    running_phase: bool = True  # kube_pod_status_phase is collected: hold only while Running

    # --- labels ---------------------------------------------------------------------------------

    @property
    def pod_key(self) -> tuple[str, ...]:
        return (self.cluster_label, NAMESPACE, POD, MODEL, MIG_PROFILE)

    @property
    def _pod_device(self) -> tuple[str, ...]:
        return (self.cluster_label, UUID, NAMESPACE, POD, MODEL)

    @property
    def _device(self) -> tuple[str, ...]:
        return (self.cluster_label, UUID, MIG_INSTANCE, MODEL, MIG_PROFILE)

    # --- building blocks --------------------------------------------------------------------------

    def _sel(self, name: str, matchers: Sequence[Matcher] = ()) -> str:
        return promql.selector(name, [*self.scope, *matchers])

    def _over(self, func: str, name: str, matchers: Sequence[Matcher] = ()) -> str:
        return f"{func}({promql.ranged(self._sel(name, matchers), _SPAN_RANGE)})"

    def _ratio_parts(self, name: str) -> list[tuple[tuple[Matcher, ...], float]]:
        """(job matchers, multiplier into 0-1) for a name: one part, or one per unit of the legacy
        gauge's jobs."""
        fixed = vocabulary.to_unit(name)
        if fixed is not None:
            return [((), fixed / 100.0)]
        ratio_jobs = sorted(j for j, f in self.dev_to_percent.items() if f == vocabulary.RATIO_TO_PERCENT)
        if not ratio_jobs:
            return [((), 0.01)]
        return [
            ((promql.one_of("job", ratio_jobs),), 1.0),
            ((promql.none_of("job", ratio_jobs),), 0.01),
        ]

    def _per_name(self, name: str, build: str, extra: Sequence[Matcher] = ()) -> str:
        """``build`` (a format with ``{sel}`` for a selector's matchers and ``{factor}``) per unit part,
        joined by ``or``."""
        parts = []
        for matchers, factor in self._ratio_parts(name):
            parts.append(build.format(matchers=(*matchers, *extra), factor=promql.number(factor), name=name))
        return " or ".join(f"({p})" for p in parts) if len(parts) > 1 else parts[0]

    def _chain(self, exprs: Sequence[str]) -> str:
        """One row per label set from the first expression holding it: the preferred name."""
        return " or ".join(f"({e})" for e in exprs)

    @property
    def _dcgm_names(self) -> tuple[str, ...]:
        return tuple(n for n in self.util_metrics if n != POD_SM_UTIL)

    @property
    def _shared(self) -> bool:
        return POD_SM_UTIL in self.util_metrics

    @property
    def _held_device(self) -> tuple[str, ...]:
        return (*self.pod_key, UUID, MIG_INSTANCE)

    def _holder(self, name: str, func: str, matchers: Sequence[Matcher]) -> str:
        """``func`` over the span per device and pod, pod labels made canonical (series of one
        holder delivered twice agree: the largest stands for them)."""
        inner = canonical(self._over(func, name, matchers), self.gpu_pod)
        return promql.aggregate("max" if func != "count_over_time" else "count", self._held_device, inner)

    # --- the parts ------------------------------------------------------------------------------

    def _dcgm_holder_parts(self) -> dict[str, list[str]]:
        held = [ne(self.gpu_pod.pod, "")]
        thr = promql.number(self.idle_percent / 100.0)
        sampled, used, idle = [], [], []
        for name in self._dcgm_names:
            for matchers, factor in self._ratio_parts(name):
                f = promql.number(factor)
                sel = (*matchers, *held)
                sampled.append(f"clamp_max({self._holder(name, 'count_over_time', sel)}, 1)")
                used.append(f"clamp({self._holder(name, 'avg_over_time', sel)} * {f}, 0, 1)")
                idle.append(f"({self._holder(name, 'max_over_time', sel)} * {f} <= bool {thr})")
        return {"sampled": sampled, "held": list(sampled), "used": used, "idle": idle}

    def _pod_sm_present(self) -> str:
        """Per pod and time-sliced GPU: 1 where the pod reported its share in the span."""
        inner = canonical(
            self._over("count_over_time", POD_SM_UTIL, [ne(self.gpu_pod.pod, "")]), self.gpu_pod
        )
        return f"clamp_max({promql.aggregate('count', self._pod_device, inner)}, 1)"

    def _shared_holder_parts(self) -> dict[str, str]:
        present = self._pod_sm_present()
        on = promql.by((self.cluster_label, UUID)).replace("by", "on", 1)
        share = f"({present} / {on} group_left () count {promql.by((self.cluster_label, UUID))} ({present}))"
        thr = promql.number(self.idle_percent)
        pod_sel = [ne(self.gpu_pod.pod, "")]
        mean = promql.aggregate(
            "max",
            self._pod_device,
            canonical(self._over("avg_over_time", POD_SM_UTIL, pod_sel), self.gpu_pod),
        )
        top = promql.aggregate(
            "max",
            self._pod_device,
            canonical(self._over("max_over_time", POD_SM_UTIL, pod_sel), self.gpu_pod),
        )
        # Used: the pod's share of the GPU's SM time (percent of the whole GPU), at most its share.
        used = f"((({mean}) / 100 <= {share}) or {share})"
        idle = f"(({top} <= bool {thr}) * {share})"
        return {"sampled": present, "held": share, "used": used, "idle": idle}

    def holder_parts(self) -> dict[str, str]:
        """Per device and pod, the first name holding it in the span (``or``), then summed per pod."""
        dcgm_parts = self._dcgm_holder_parts()
        shared = self._shared_holder_parts() if self._shared else {}
        return {
            part: promql.aggregate(
                "sum", self.pod_key, self._chain([*([shared[part]] if shared else []), *dcgm_parts[part]])
            )
            for part in ("sampled", "held", "used", "idle")
            if dcgm_parts[part] or shared
        }

    def requested(self) -> str:
        """GPU devices each pod requested in the span, while Running (where phases are collected)."""
        ksm = (self.cluster_label, NAMESPACE, POD)
        gpu = [promql.Matcher(RESOURCE, "=~", GPU_RESOURCE_REGEX)]
        rows = canonical(self._over("max_over_time", KUBE_POD_REQUESTS, gpu), self.ksm_pod)
        # kube-state-metrics delivered twice (replicas, an HA pair) reports one container once.
        once = promql.aggregate("max", (*ksm, "container", RESOURCE), rows)
        requests = promql.aggregate("sum", (*ksm, RESOURCE), once)
        if not self.running_phase:
            return requests
        phase = canonical(
            self._over("max_over_time", KUBE_POD_STATUS_PHASE, [eq("phase", "Running")]), self.ksm_pod
        )
        running = f"{promql.aggregate('max', ksm, phase)} == 1"
        on = promql.by(ksm).replace("by", "on", 1)
        return f"{requests} * {on} group_left () ({running})"

    def _device_present(
        self, matchers: Sequence[Matcher], labels: Sequence[str], mig_flag: bool = False
    ) -> str:
        exprs = []
        for name in self.util_metrics:
            inner = self._over("count_over_time", name, matchers)
            if mig_flag:
                inner = f'label_replace({inner}, "{MIG_FLAG}", "1", "{MIG_PROFILE}", ".+")'
            exprs.append(f"clamp_max({promql.aggregate('count', labels, inner)}, 1)")
        return self._chain(exprs)

    def device_parts(self) -> dict[str, str]:
        reported = self._device_present((), (self.cluster_label, UUID, MODEL, MIG_FLAG), mig_flag=True)
        unallocated = self._device_present([eq(self.gpu_pod.pod, "")], self._device)
        if self._shared:
            on = promql.by((self.cluster_label, UUID)).replace("by", "on", 1)
            unallocated = f"({unallocated}) unless {on} ({self._pod_sm_present()})"
        instances = self._device_present([ne(MIG_PROFILE, "")], self._device)
        per_profile = (self.cluster_label, MODEL, MIG_PROFILE)
        return {
            "reported": promql.aggregate("sum", (self.cluster_label, MODEL, MIG_FLAG), reported),
            "unallocated": promql.aggregate("sum", per_profile, unallocated),
            "instances": promql.aggregate("sum", per_profile, instances),
        }

    def parts(self, evaluations: bool = False) -> dict[str, str]:
        out = {**self.holder_parts(), "requested": self.requested(), **self.device_parts()}
        if evaluations:
            out["evaluations"] = f"clamp(count {promql.by((self.cluster_label,))} ({out['reported']}), 1, 1)"
        return out

    def spans(self, evaluations: bool = False) -> str:
        """Every part for the span ending at the evaluation time, each row tagged with its part."""
        return " or ".join(
            promql.labelled(expr, PART, part) for part, expr in self.parts(evaluations).items()
        )

    # --- over a window ----------------------------------------------------------------------------

    def window_sum(self, length: timedelta) -> str:
        """Each part summed over the spans ending in ``(t - length, t]``, ``t`` the evaluation time
        (a multiple of 5 minutes: the subquery's steps fall on the spans' ends)."""
        reach = promql.duration(length - timedelta(milliseconds=1))
        return f"sum_over_time(({self.spans()})[{reach}:{promql.duration(SPAN)}])"

    def rollup_sum(self, length: timedelta, part: str | None = None) -> str:
        """The hourly rollups stamped in ``(t - length, t]``, summed: of ``part``, or of every part but
        the evaluations."""
        which = eq(PART, part) if part is not None else ne(PART, "evaluations")
        sel = promql.selector(m.CHARGEBACK_ROLLUP, [*self.scope, which])
        return f"sum_over_time({promql.ranged(sel, length)})"

    def evaluations(self) -> str:
        """The rollups' evaluations: one sample per hourly evaluation (per cluster)."""
        return promql.selector(m.CHARGEBACK_ROLLUP, [*self.scope, eq(PART, "evaluations")])

    def namespace_labels(self, label: str) -> str:
        """Each namespace's value of ``label`` (kube-state-metrics' ``label_<name>``), last in the window."""
        exported = promql.check_label_name(f"label_{label}")
        return promql.aggregate(
            "max",
            (self.cluster_label, NAMESPACE, exported),
            promql.selector("kube_namespace_labels", self.scope),
        )


def rule_expression(idle_percent: float = m.CHARGEBACK_IDLE_PERCENT) -> str:
    """The recording rule's expression: every part, summed over the hour's 12 spans, 5 minutes late
    (a span's last samples are stored by then), with the per-cluster evaluation count."""
    q = SpanQueries(util_metrics=vocabulary.UTILIZATION, idle_percent=idle_percent)
    hour = promql.duration(ROLLUP_STEP - timedelta(milliseconds=1))
    span = promql.duration(SPAN)
    return f"sum_over_time(({q.spans(evaluations=True)})[{hour}:{span}] offset {span})"
