"""The PromQL the Prometheus-backed source sends: a fixed set of fleet-wide queries per run.

Every aggregate is evaluated by the TSDB once for the whole fleet, grouped by the few labels that
identify a device holder (``UUID``, ``GPU_I_ID``, namespace, pod) so answers carry no label the
analyzer does not use. Kubernetes-side queries are restricted to pods that hold or request GPUs,
so a cluster's thousands of CPU-only pods cost nothing. Text is built with ``analyzer.sources.promql``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from analyzer.sources import dcgm, promql, vocabulary
from analyzer.sources.aggregates import DeviceKey
from analyzer.sources.dcgm import Capabilities, PodLabels
from analyzer.sources.promql import Matcher, eq, ne, one_of

CANONICAL = PodLabels()  # namespace / pod, as cAdvisor names them
# The fleet's devices in four parts by their UUID's first hex digit (the last part takes any other
# form): an answer of four quantiles per device for a quarter of them holds as many rows as one
# quantile's for all, and the largest answer parsed sets a run's peak memory.
UUID_PARTS = (
    Matcher(dcgm.UUID, "=~", "(?i)GPU-[0-3].*"),
    Matcher(dcgm.UUID, "=~", "(?i)GPU-[4-7].*"),
    Matcher(dcgm.UUID, "=~", "(?i)GPU-[89ab].*"),
    Matcher(dcgm.UUID, "!~", "(?i)GPU-[0-9ab].*"),
)
WHOLE_FLEET = (Matcher(dcgm.UUID, "=~", ".*"),)  # one part: every device
# Up to this many utilization series, one part: its answers hold no more rows than a quarter of a
# 10,000-GPU fleet's, and each part more is a query (a round trip, a request's parsing) of its own.
ONE_PART_SERIES = 2_500


def fleet_parts(series: int | None) -> tuple[Matcher, ...]:
    """The parts the per-device aggregates are asked in, by the utilization series reporting at the
    window's end (None: unknown, so four parts, the safe side for memory)."""
    return WHOLE_FLEET if series is not None and series <= ONE_PART_SERIES else UUID_PARTS


_REAL_CONTAINERS = (ne("container", ""), ne("container", "POD"))
# What one cAdvisor counter series stands for: a container's cgroup (``id``, ``name`` where the
# scrape keeps them) and CPU; everything else (instance, job, a replica label) is how it arrived.
_CADVISOR_IDENTITY = (*CANONICAL.names, "container", "id", "name", "cpu")
_MIB = 1024 * 1024
# The rollups of ``device_sum_and_series``: the samples' sum, and 1 per series (summed: series per
# holder).
SUM, SERIES = "sum_over_time", "present_over_time"
# The other names of a field a holder was read under, each with the factor into its first name's unit.
Renamed = Sequence[tuple[str, float]]


def _times(expr: str, factor: float) -> str:
    """``expr`` in another unit (itself for a factor of 1)."""
    return expr if factor == 1.0 else f"({expr}) * {promql.number(factor)}"


def _tagged(expr: str, name: str) -> str:
    """``expr`` tagged with the name it reads: two names' rows of one holder carry the same labels
    where relabelling made them so, and ``or`` would keep one of them only."""
    return promql.labelled(expr, promql.NAME_TAG, name)


def once_each(identity: Sequence[str], expr: str) -> str:
    """One row per object ``identity`` names, however many series report it.

    A stack delivers the same object more than once: kube-state-metrics rescheduled (its series go
    on under a new ``instance`` and ``pod``) or rolled out, run with two replicas, an HA Prometheus
    pair written into one TSDB (a replica label), a second scrape job. Their values agree, so the
    largest stands for them all; a ``sum`` over the raw rows would count the object once per copy.
    """
    return promql.aggregate("max", identity, expr)


def copy_label(expr: str, target: str, source: str) -> str:
    if target == source:
        return expr
    target, source = promql.check_label_name(target), promql.check_label_name(source)
    return f'label_replace({expr}, "{target}", "$1", "{source}", "(.+)")'


def canonical(expr: str, style: PodLabels) -> str:
    """Copy a family's pod labels onto ``namespace``/``pod`` so families can be joined."""
    return copy_label(copy_label(expr, "pod", style.pod), "namespace", style.namespace)


@dataclass(frozen=True)
class FleetQueries:
    caps: Capabilities
    window: timedelta
    # Whether the GPU-pod filter also names pods by the GPU series (see ``gpu_pods``).
    held: bool = False
    # The parts of the fleet the per-device sums and quantiles are asked in (see ``fleet_parts``).
    parts: tuple[Matcher, ...] = UUID_PARTS

    # --- discovery ------------------------------------------------------------------------------

    @staticmethod
    def names_match(extra: Sequence[str] = (), scope: Sequence[Matcher] = ()) -> str:
        """The metric names discovery asks about: those the analyzer reads, and ``extra`` (rollups)."""
        return promql.selector("", [one_of("__name__", (*dcgm.KNOWN_METRICS, *extra)), *scope])

    @staticmethod
    def util_match(scope: Sequence[Matcher] = ()) -> str:
        return promql.selector("", [one_of("__name__", dcgm.UTIL_METRICS), *scope])

    @staticmethod
    def util_series(scope: Sequence[Matcher] = ()) -> str:
        """The utilization series reporting at the evaluation time: a fleet's size, from the index
        and each series' last samples within the lookback, not from the window's samples."""
        return f"count({FleetQueries.util_match(scope)})"

    def _sel(self, metric: str, matchers: Sequence[Matcher] = ()) -> str:
        """``metric{matchers}`` within this run's scope (one cluster's series, where there are several)."""
        return promql.selector(metric, [*self.caps.scope, *matchers])

    # --- per device -----------------------------------------------------------------------------

    def _over(
        self, func: str, metric: str, matchers: Sequence[Matcher] = (), param: float | None = None
    ) -> str:
        return promql.over_time(func, promql.ranged(self._sel(metric, matchers), self.window), param)

    def device_count(self, metric: str) -> str:
        """Samples per device holder, with the labels that describe the device (one query)."""
        return promql.aggregate("sum", self.caps.identity_labels(), self._over("count_over_time", metric))

    def device_sum(self, metric: str) -> str:
        return promql.aggregate("sum", self.caps.device_labels(), self._over("sum_over_time", metric))

    def device_sum_and_series(self, metric: str, part: Matcher) -> str | None:
        """MetricsQL: ``device_sum`` and the series per holder (``device_series_count`` unfiltered)
        from one pass over the samples, where each reads them all (at 10,000 GPUs, 0.3 s of the
        TSDB's time each when nothing is cached): one row per rollup (``promql.ROLLUP`` label),
        for the devices ``part`` selects (one of ``parts``); None without MetricsQL.
        ``device_count`` stays apart: its rows carry the labels that describe the device, which two
        more rows per holder would repeat."""
        if not self.caps.metricsql:
            return None
        ranged = promql.ranged(self._sel(metric, [part]), self.window)
        rolled = promql.aggr_over_time((SUM, SERIES), ranged)
        return promql.aggregate("sum", (*self.caps.device_labels(), promql.ROLLUP), rolled)

    def device_max(self, metric: str) -> str:
        return promql.aggregate("max", self.caps.device_labels(), self._over("max_over_time", metric))

    def device_quantile(self, metric: str, q: float) -> str:
        return promql.aggregate(
            "max", self.caps.device_labels(), self._over("quantile_over_time", metric, param=q)
        )

    def device_quantiles(self, metric: str, levels: Sequence[float], part: Matcher) -> str | None:
        """MetricsQL: the quantiles at ``levels`` (1 is the maximum) from one sort of each series'
        samples, one row per level (``promql.PHI`` label), for the devices ``part`` selects (one of
        ``parts``); None without MetricsQL."""
        if not self.caps.metricsql:
            return None
        ranged = promql.ranged(self._sel(metric, [part]), self.window)
        return promql.aggregate(
            "max", (*self.caps.device_labels(), promql.PHI), promql.quantiles_over_time(levels, ranged)
        )

    def max_from_samples(self, metric: str) -> bool:
        """Whether ``device_max`` reads the raw samples (not a rollup): then the maximum may come
        with the quantiles, from the same sort."""
        del metric
        return True

    def device_series_count(self, metric: str) -> str:
        """Series per device holder, for the holders with more than one (its exporter pod moved: a new
        ``instance``). Filtered in the TSDB: the others, nearly all, need not cross the wire."""
        counted = promql.aggregate("count", self.caps.device_labels(), self._over("count_over_time", metric))
        return f"{counted} > 1"

    def device_quantile_union(
        self, metric: str, q: float, uuids: Sequence[str], step: timedelta, others: Renamed = ()
    ) -> str:
        """Quantile over the union of a device's series, for the few devices split over several.

        Per-series quantiles cannot be combined into the union's; merging the series first (``max``
        at each step of a subquery as fine as the scrape interval) can. With ``others`` (the other
        names of ``metric``'s field, each with the factor into ``metric``'s unit: an exporter
        renamed its series in the window), each step takes the sample of the first name holding a
        fresh one (see ``renamed_step``).
        """
        labels = self.caps.device_labels()
        holders = [one_of(dcgm.UUID, uuids)]
        if others:
            merged = self.renamed_step(metric, others, holders, step)
        else:
            merged = promql.aggregate("max", labels, self._sel(metric, holders))
        sub = f"({merged})[{promql.duration(self.window)}:{promql.duration(step)}]"
        return promql.aggregate("max", labels, f"quantile_over_time({promql.number(q)}, {sub})")

    def device_union_total(
        self, func: str, metric: str, uuids: Sequence[str], step: timedelta, others: Renamed = ()
    ) -> str:
        """Samples (``count_over_time``) or their sum (``sum_over_time``) of the union of a device's
        series, for the devices split over several.

        Series of one holder follow each other (its exporter moved: a new ``instance``; renamed:
        ``others``, the other names of ``metric``'s field with their factors into its unit) or run
        side by side (two scrape jobs, an HA pair's replicas, each with gaps of its own; both names
        for a scrape or two while an upgrade rolls out). Adding their counts is right for the first
        and counts the second twice, hiding a gap both share; ``promql.merged_step`` is right for
        both, its steps of each name joined by ``or``: a step holding both counts once.
        """
        labels = self.caps.device_labels()
        holders = [one_of(dcgm.UUID, uuids)]
        steps = [
            _times(promql.merged_step(func, self._sel(name, holders), labels, step), factor)
            for name, factor in ((metric, 1.0), *(others if func == SUM else ((n, 1.0) for n, _ in others)))
        ]
        per_step = " or ".join(steps) if others else steps[0]
        sub = f"({per_step})[{promql.duration(self.window)}:{promql.duration(step)}]"
        return promql.aggregate("sum", labels, f"sum_over_time({sub})")

    def renamed_step(self, metric: str, others: Renamed, holders: Sequence[Matcher], step: timedelta) -> str:
        """Each holder's latest sample in each ``step``, in ``metric``'s unit, from the first of its
        names holding one there: ``metric``, then ``others`` (see ``promql.freshest_step``)."""
        selectors = [(self._sel(name, holders), factor) for name, factor in ((metric, 1.0), *others)]
        return promql.freshest_step(selectors, self.caps.device_labels(), step)

    def histogram_increase(self) -> str:
        labels = (*self.caps.device_labels(), dcgm.LE)
        matchers = [one_of(dcgm.LE, self.caps.histogram_le)]
        return promql.aggregate("sum", labels, self._over("increase", dcgm.SAMPLE_HISTOGRAM_BUCKET, matchers))

    def device_raw(self, metric: str, uuids: Sequence[str], window: timedelta) -> str:
        """Raw samples of a few GPUs (filtered to the exact holders afterwards)."""
        return promql.ranged(self._sel(metric, [one_of(dcgm.UUID, uuids)]), window)

    def bucket_raw(self, uuids: Sequence[str], window: timedelta) -> str:
        matchers = [one_of(dcgm.UUID, uuids), one_of(dcgm.LE, self.caps.histogram_le)]
        return promql.ranged(self._sel(dcgm.SAMPLE_HISTOGRAM_BUCKET, matchers), window)

    def one_device_raw(self, metric: str, key: DeviceKey, job: str, reach: timedelta | None = None) -> str:
        """The samples of one device holder over the window's last ``reach`` (all of it by default):
        how the scrape interval is measured."""
        matchers = [eq(dcgm.UUID, key.uuid), eq(self.caps.gpu_pod.pod, key.pod), eq(dcgm.JOB, job)]
        if self.caps.mig:
            matchers.append(eq(dcgm.MIG_INSTANCE, key.mig_instance))
        window = self.window if reach is None else min(self.window, reach)
        return promql.ranged(self._sel(metric, matchers), window)

    def _in_mib(self, expr: str, metric: str) -> str:
        """A framebuffer name's values in MiB (the legacy names' unit; DCGM 4.7's are bytes)."""
        factor = vocabulary.to_unit(metric)
        if factor == vocabulary.MIB_TO_MIB:
            return expr
        if factor == vocabulary.BYTES_TO_MIB:
            return f"{expr} / {promql.number(_MIB)}"
        return _times(expr, factor or 1.0)

    def _memory_used(self) -> tuple[str, ...]:
        """The framebuffer names to read: those found (the legacy one where none is: its absence
        answers nothing, as a name found would)."""
        return self.caps.memory_used or (dcgm.DEV_FB_USED,)

    def _pod_memory(self, func: str, these: Sequence[Matcher], param: float | None = None) -> list[str]:
        if not self.caps.pod_memory:
            return []
        return [self._in_mib(self._over(func, dcgm.POD_MEMORY_USED, these, param), dcgm.POD_MEMORY_USED)]

    def memory(self, uuids: Sequence[str], renamed: timedelta | None = None) -> str:
        """Mean framebuffer held per holder (MiB): the GPU's own, and on shared GPUs each pod's
        (our exporter's per-pod series, in bytes). With ``renamed`` (a step, the scrape interval or
        coarser), for holders read under both DCGM namings: their samples of each step from the
        first name holding some there, so a scrape served under both counts once."""
        these = [one_of(dcgm.UUID, uuids)]
        if renamed is None:
            held = [self._in_mib(self._over("avg_over_time", n, these), n) for n in self._memory_used()]
        else:
            sums, counts = (self._renamed_memory(func, these, renamed) for func in (SUM, "count_over_time"))
            held = [f"{sums} / {counts}"]
        held += self._pod_memory("avg_over_time", these)
        return promql.aggregate("max", self.caps.device_labels(), " or ".join(held))

    def memory_peak(self, uuids: Sequence[str], quantile: float, renamed: timedelta | None = None) -> str:
        """A high quantile of the framebuffer held per holder over the window (MiB), as ``memory``
        reads it: the GPU's own, and on shared GPUs each pod's; with ``renamed``, over each step's
        latest sample of the first name holding one (see ``renamed_step``)."""
        these = [one_of(dcgm.UUID, uuids)]
        if renamed is None:
            held = [
                self._in_mib(self._over("quantile_over_time", n, these, quantile), n)
                for n in self._memory_used()
            ]
        else:
            names = self._memory_used()
            selectors = [(self._sel(n, these), vocabulary.to_unit(n) or 1.0) for n in names]
            steps = promql.freshest_step(selectors, self.caps.device_labels(), renamed)
            sub = f"({steps})[{promql.duration(self.window)}:{promql.duration(renamed)}]"
            held = [f"quantile_over_time({promql.number(quantile)}, {sub})"]
        held += self._pod_memory("quantile_over_time", these, quantile)
        return promql.aggregate("max", self.caps.device_labels(), " or ".join(held))

    def _renamed_memory(self, func: str, these: Sequence[Matcher], step: timedelta) -> str:
        """``func`` (count or sum, in MiB) of each holder's framebuffer samples over the window,
        each step's from the first name holding samples there (see ``device_union_total``)."""
        labels = self.caps.device_labels()
        per_step = " or ".join(
            self._in_mib(promql.merged_step(func, self._sel(n, these), labels, step), n)
            if func == SUM
            else promql.merged_step(func, self._sel(n, these), labels, step)
            for n in self._memory_used()
        )
        return f"sum_over_time(({per_step})[{promql.duration(self.window)}:{promql.duration(step)}])"

    def memory_capacity(self, uuids: Sequence[str]) -> str:
        """What each GPU holds (MiB): used + free at their last samples, which share a scrape (the
        reserved part, a few hundred MiB, is left out: the figure errs small), in whichever naming
        serves both."""
        these = [one_of(dcgm.UUID, uuids)]
        names = self._memory_used()
        pairs = []
        for used in names:
            free = vocabulary.FREE_BESIDE[used]
            last = [self._over("last_over_time", name, these) for name in (used, free)]
            total = " + ".join(last)
            # Bracketed but where nothing follows (the legacy names alone: the text of old).
            alone = len(names) == 1 and vocabulary.to_unit(used) == vocabulary.MIB_TO_MIB
            pairs.append(self._in_mib(total if alone else f"({total})", used))
        return promql.aggregate("max", self.caps.device_labels(), " or ".join(pairs))

    # --- pods -----------------------------------------------------------------------------------
    # Every pod the window saw, not only those alive at its end: a pod replaced two hours before the
    # end held its GPUs for the rest of the window. kube-state-metrics series are few (one per pod),
    # so reading them over the window costs little next to the GPU series.

    def _gpu_requests(self) -> str:
        return self._sel(dcgm.KUBE_POD_REQUESTS, [Matcher("resource", "=~", dcgm.GPU_RESOURCE_REGEX)])

    def _last(self, selector_text: str) -> str:
        return promql.over_time("last_over_time", promql.ranged(selector_text, self.window))

    def gpu_pods(self) -> str:
        """(namespace, pod) of every pod that requested GPUs in the window (with ``held``, or
        without kube-state-metrics, also every pod holding one at the window's end).

        dcgm-exporter names a GPU's pod from the kubelet's device assignments, which only a pod
        requesting the device plugin's resource gets: where kube-state-metrics reports requests,
        they name every GPU pod. The held part reads the last sample of every GPU series, which a
        TSDB answering from disk decodes a block for (0.3 s at 10,000 GPUs on VictoriaMetrics,
        once per Kubernetes-side query), so it is asked only where requests are missing.
        """
        ksm = self.caps.ksm_pod
        parts = []
        if self.caps.kube_state_metrics:
            # Compared once aggregated: a comparison inside the aggregation would make
            # VictoriaMetrics keep every request series before grouping them (see ``_gpu_only``).
            requested = promql.over_time("max_over_time", promql.ranged(self._gpu_requests(), self.window))
            parts.append(f"{promql.aggregate('max', CANONICAL.names, canonical(requested, ksm))} > 0")
        if self.held or not self.caps.kube_state_metrics:
            held = [ne(self.caps.gpu_pod.pod, "")]
            parts += [
                promql.aggregate(
                    "group", CANONICAL.names, canonical(self._sel(metric, held), self.caps.gpu_pod)
                )
                for metric in self.caps.util_metrics
            ]
        return " or ".join(f"({p})" for p in parts)

    def _gpu_only(self, aggregated: str) -> str:
        """An answer aggregated by labels that include namespace and pod, kept for GPU pods only.

        The join comes after the aggregation, which is equivalent as the pod labels are kept:
        VictoriaMetrics then folds each series into the aggregate as it reads it, where a join
        inside would make it hold every series first (at 10,000 GPUs, 40 % of each query's time),
        and the join matches one series per pod.
        """
        return f"({aggregated}) and on (namespace, pod) ({self.gpu_pods()})"

    def _ksm(self, op: str, labels: Sequence[str], expr: str) -> str:
        """``op by (labels)`` of a kube-state-metrics expression, for GPU pods only."""
        return self._gpu_only(promql.aggregate(op, labels, canonical(expr, self.caps.ksm_pod)))

    def pod_owners(self) -> str:
        labels = (*CANONICAL.names, "owner_kind", "owner_name", "owner_is_controller")
        return self._ksm("max", labels, self._last(dcgm.KUBE_POD_OWNER))

    def pod_start_times(self) -> str:
        """Start time per pod incarnation (``uid``): a pod recreated under its old name started again."""
        return self._ksm("max", (*CANONICAL.names, "uid"), self._last(dcgm.KUBE_POD_START_TIME))

    def pod_last_seen(self) -> str:
        """When each pod incarnation (``uid``) was last reported running in the window (unix seconds).

        A subquery at a one-minute step (MetricsQL: the raw samples' own times, see below): a pod
        gone or finished before the window's end is judged over its own life, and its GPUs'
        coverage is counted against that life, not the whole window. A Job's finished pod stays in
        the API (phase ``Succeeded``) until it is deleted, so the last ``Running`` report counts,
        not the last report; without phase series, the last report.
        """
        by = (*CANONICAL.names, "uid")  # two incarnations of one name alive at once are not one pod
        if self.caps.metricsql:
            return self._ksm("max", by, self._last_seen_metricsql())
        if self.caps.pod_phase:
            running = self._sel(dcgm.KUBE_POD_STATUS_PHASE, [eq("phase", "Running")])
            # timestamp() of the plain selector is the sample's own time (a filtered expression's is
            # the evaluation time, which a series without staleness markers stretches by the lookback).
            stamp = f"(timestamp({running}) and ({running} == 1))"
        else:
            stamp = f"timestamp({self._sel(dcgm.KUBE_POD_OWNER)})"
        seen = f"max_over_time({stamp}[{promql.duration(self.window)}:1m])"
        return self._ksm("max", by, seen)

    def _last_seen_metricsql(self) -> str:
        """The same moment from the raw samples, without a subquery: ``tmax_over_time`` is the time
        of the last sample holding the maximum, which, for a 0/1 series whose maximum is 1, is the
        last ``Running`` report; ``tlast_over_time``, the last report."""
        if not self.caps.pod_phase:
            return f"tlast_over_time({promql.ranged(self._sel(dcgm.KUBE_POD_OWNER), self.window)})"
        running = promql.ranged(self._sel(dcgm.KUBE_POD_STATUS_PHASE, [eq("phase", "Running")]), self.window)
        return f"(tmax_over_time({running}) and (max_over_time({running}) == 1))"

    def pod_scheduled(self) -> str:
        """1 for pods whose PodScheduled condition was true at some time in the window, else 0."""
        scheduled = self._sel(dcgm.KUBE_POD_STATUS_SCHEDULED, [eq("condition", "true")])
        ranged = promql.over_time("max_over_time", promql.ranged(scheduled, self.window))
        return self._ksm("max", CANONICAL.names, ranged)

    def pod_pending(self) -> str:
        """1 for pods whose phase was Pending at their last report in the window."""
        pending = self._sel(dcgm.KUBE_POD_STATUS_PHASE, [eq("phase", "Pending")])
        return self._ksm("max", CANONICAL.names, self._last(pending))

    def pod_gpu_requests(self) -> str:
        """GPUs each pod incarnation requested, per node label (empty until it is scheduled)."""
        requested = canonical(self._last(self._gpu_requests()), self.caps.ksm_pod)
        per_container = once_each((*CANONICAL.names, "uid", "node", "container", "resource"), requested)
        return promql.aggregate("sum", (*CANONICAL.names, "uid", "node"), per_container)

    def replicaset_owners(self) -> str:
        ns = self.caps.ksm_pod.namespace
        owners = self._last(self._sel(dcgm.KUBE_POD_OWNER, [eq("owner_kind", "ReplicaSet")]))
        gpu_owners = self._ksm("group", (*CANONICAL.names, "owner_name"), owners)
        gpu_replicasets = f'label_replace({gpu_owners}, "replicaset", "$1", "owner_name", "(.+)")'
        rs = copy_label(self._last(self._sel(dcgm.KUBE_REPLICASET_OWNER)), "namespace", ns)
        labels = ("namespace", "replicaset", "owner_kind", "owner_name", "owner_is_controller")
        return f"({promql.aggregate('max', labels, rs)}) and on (namespace, replicaset) ({gpu_replicasets})"

    def job_owners(self) -> str:
        """What created each GPU pod's Job (CronJob, JobSet, ...): ``kube_job_owner``."""
        ns = self.caps.ksm_pod.namespace
        owners = self._last(self._sel(dcgm.KUBE_POD_OWNER, [eq("owner_kind", "Job")]))
        gpu_owners = self._ksm("group", (*CANONICAL.names, "owner_name"), owners)
        gpu_jobs = f'label_replace({gpu_owners}, "job_name", "$1", "owner_name", "(.+)")'
        above = copy_label(
            self._last(self._sel(dcgm.KUBE_JOB_OWNER, [ne("owner_kind", "<none>")])), "namespace", ns
        )
        labels = ("namespace", "job_name", "owner_kind", "owner_name", "owner_is_controller")
        return f"({promql.aggregate('max', labels, above)}) and on (namespace, job_name) ({gpu_jobs})"

    def pod_groups(self) -> str:
        """The pod labels the analyzer reads (``app.kubernetes.io/name`` and the labels custom
        controllers write, ``dcgm.POD_LABELS_READ``) of GPU pods, where kube-state-metrics exports
        them: one row per GPU pod, its labels empty where not exported. A selector cannot ask for
        any of several labels, and one row per GPU pod is what ``pod_owners`` returns anyway."""
        labels = (*CANONICAL.names, *dcgm.POD_LABELS_READ)
        return self._ksm("max", labels, self._last(self._sel(dcgm.KUBE_POD_LABELS)))

    def cpu_usage(self) -> str:
        return self._gpu_only(self._per_pod_cadvisor("rate", dcgm.CPU_USAGE))

    def _per_pod_cadvisor(self, func: str, metric: str) -> str:
        """``func`` of a cAdvisor counter summed over a pod's containers, each container (one cgroup,
        ``id``; a restarted one is another) counted once however many scrapes delivered it."""
        per_series = self._over(func, metric, _REAL_CONTAINERS)
        return promql.aggregate("sum", CANONICAL.names, once_each(_CADVISOR_IDENTITY, per_series))

    def cpu_limits(self) -> str:
        return self._cpu_per_pod(dcgm.KUBE_POD_LIMITS)

    def cpu_requests(self) -> str:
        return self._cpu_per_pod(dcgm.KUBE_POD_REQUESTS)

    def _cpu_per_pod(self, metric: str) -> str:
        """A pod's CPU limit or request: its containers' summed, each container counted once
        whatever reported it (and at its largest over the window, whichever incarnation)."""
        per_series = canonical(
            self._over("max_over_time", metric, [eq("resource", "cpu")]), self.caps.ksm_pod
        )
        return self._gpu_only(
            promql.aggregate("sum", CANONICAL.names, once_each((*CANONICAL.names, "container"), per_series))
        )

    def cpu_throttled_ratio(self) -> str:
        throttled = self._per_pod_cadvisor("increase", dcgm.CPU_THROTTLED)
        periods = self._per_pod_cadvisor("increase", dcgm.CPU_PERIODS)
        return self._gpu_only(f"{throttled} / {periods}")
