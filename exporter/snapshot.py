"""The immutable result of a collection cycle, and the builder that turns readings into labelled series.

The builder owns the only state that outlives a cycle: the cumulative utilization-sample histograms
(counters must only grow). A snapshot is never changed once built; ``/metrics`` renders whichever
snapshot is newest, so a scrape costs no NVML call and never waits for one.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, NamedTuple

from exporter import capabilities as cap
from exporter import fields as f
from exporter.attribution import (
    Holder,
    PodName,
    PodUsage,
    PodView,
    holders_of,
    is_shared,
    pods_holding,
    sole_holder,
    usage_of_pods,
)
from exporter.naming import LEGACY_NAMING, Naming
from exporter.readings import DeviceIdentity, DeviceReading, MigLabels, NodeReading
from exporter.xid_catalogue import describe

Labels = dict[str, str]
_Add = Callable[[str, Labels, float], None]


class Series(NamedTuple):
    """One sample of a gauge or counter family. ``labels`` is never mutated once built."""

    labels: Labels
    value: float


class HistogramSeries(NamedTuple):
    """One histogram: cumulative counts at each bound of :data:`exporter.fields.SAMPLE_BUCKETS` and +Inf."""

    labels: Labels
    cumulative: tuple[int, ...]
    total: float


@dataclass(frozen=True)
class Snapshot:
    """Everything ``/metrics`` serves, as of ``taken_at`` (Unix seconds)."""

    taken_at: float
    ok: bool
    duration_s: float
    series: Mapping[str, tuple[Series, ...]] = field(default_factory=dict)
    histograms: tuple[HistogramSeries, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class Counters:
    """Counters kept outside the builder, as read at the end of a cycle."""

    xids: Mapping[tuple[str, int], int] = field(default_factory=dict)
    last_xid: Mapping[str, int] = field(default_factory=dict)
    nvml_errors: Mapping[tuple[str, str], int] = field(default_factory=dict)
    kubelet_errors: int = 0


class _Histogram:
    __slots__ = ("_cumulative", "buckets", "total")

    def __init__(self) -> None:
        self.buckets = [0] * (len(f.SAMPLE_BUCKETS) + 1)
        self.total = 0.0
        self._cumulative: tuple[int, ...] | None = None

    def observe(self, values: tuple[int, ...]) -> None:
        if not values:  # between reads of the sample buffer: nothing new, the same counts
            return
        # A read brings up to the ring's 120 samples: sorted once (in C), each bound is one bisection,
        # not one per sample. A sample equal to a bound counts in it (``le``).
        ordered, buckets, counted = sorted(values), self.buckets, 0
        for slot, bound in enumerate(f.SAMPLE_BUCKETS):
            upto = bisect.bisect_right(ordered, bound)
            buckets[slot] += upto - counted
            counted = upto
        buckets[-1] += len(ordered) - counted
        self.total += sum(values)
        self._cumulative = None

    def cumulative(self) -> tuple[int, ...]:
        """The counts at each bound; the same tuple until new samples come, so an encoder that kept
        the last one's text finds it unchanged at the cost of an identity check."""
        if self._cumulative is None:
            self._cumulative = tuple(itertools.accumulate(self.buckets))
        return self._cumulative


def gpu_labels(
    gpu: DeviceIdentity, hostname: str, driver_version: str, naming: Naming = LEGACY_NAMING
) -> Labels:
    """dcgm-exporter's identifying labels for a physical GPU, the node's and the driver's named as
    ``naming`` says (the node's left out when it says none)."""
    labels = {
        "gpu": str(gpu.gpu_index),
        "UUID": gpu.uuid,
        "pci_bus_id": gpu.pci_bus_id,
        "device": f"nvidia{gpu.gpu_index}",
        "modelName": gpu.name,
    }
    if naming.node_label is not None:
        labels[naming.node_label] = hostname
    labels[naming.driver_label] = driver_version
    return labels


#: Pod → its UID, where the node's pod directory names exactly one (``--pod-uid``).
PodUids = Mapping[PodName, str]


def pod_uids(view: PodView) -> dict[PodName, str]:
    """Each pod's UID from the view's UID → name map. A name listed under two UIDs (a pod deleted and
    created again under the same name, the old one's directory not yet removed) gets none: which one
    holds the GPU cannot be told from names, and a wrong UID is worse than none."""
    found: dict[PodName, str] = {}
    ambiguous: set[PodName] = set()
    for uid, name in view.uid_names.items():
        if name in found:
            ambiguous.add(name)
        found[name] = uid
    for name in ambiguous:
        del found[name]
    return found


def _with_holder(labels: Labels, holder: Holder, uids: PodUids | None = None) -> Labels:
    out = {**labels, "pod": holder.pod, "namespace": holder.namespace, "container": holder.container}
    if uids is not None and (uid := uids.get(PodName(holder.namespace, holder.pod))) is not None:
        out["pod_uid"] = uid
    if holder.vgpu is not None:
        out["vgpu"] = holder.vgpu
    return out


@functools.lru_cache(maxsize=256)
def _xid_labels(xid: int) -> tuple[tuple[str, str], ...]:
    """dcgm-exporter's labels on DCGM_FI_DEV_XID_ERRORS: the XID as a decimal string and what it means."""
    return (("err_code", str(xid)), ("err_msg", describe(xid)))


#: The exporter's own series' label sets, built once: a label set that is the same object from one
#: snapshot to the next is rendered once by the encoder.
_NO_LABELS: Final[Labels] = {}


_Extra = tuple[tuple[str, str], ...]


class _LabelSets:
    """Label sets derived from others (a GPU's with its last XID, with an XID, a call's), kept while
    their base is current, so each cycle hands the encoder the same objects (see
    :class:`exporter.exposition.Encoder`). Keyed by the base's identity, the base held so the id stays
    its own; what a cycle did not ask for is dropped."""

    __slots__ = ("_asked", "_kept")

    def __init__(self) -> None:
        self._kept: dict[tuple[int, _Extra], tuple[Labels, Labels]] = {}
        self._asked: dict[tuple[int, _Extra], tuple[Labels, Labels]] = {}

    def get(self, base: Labels, extra: _Extra) -> Labels:
        """``base`` with the labels ``extra`` names added (after base's, in order)."""
        slot = (id(base), extra)
        kept = self._asked.get(slot) or self._kept.get(slot)
        if kept is None or kept[0] is not base:
            kept = (base, {**base, **dict(extra)})
        self._asked[slot] = kept
        return kept[1]

    def end_cycle(self) -> None:
        self._kept, self._asked = self._asked, {}


def _capability_series(labels: Mapping[str, Labels], capabilities: cap.Capabilities) -> tuple[Series, ...]:
    """``gpu_exporter_capability``: each capability known for the GPU, 1 offered, 0 not."""
    return tuple(
        Series(labels[name], float(known.available))
        for name in cap.NAMES
        if (known := capabilities.get(name)) is not None
    )


def device_holders(view: PodView, device: DeviceReading) -> tuple[Holder, ...]:
    gpu_instance = None if device.mig is None else device.mig.gpu_instance_id
    return holders_of(
        view.allocated,
        device.uuid,
        device.gpu.gpu_index,
        gpu_instance,
        None if device.mig is None else device.mig.slot,
    )


@dataclass(frozen=True, slots=True)
class _Attribution:
    """One device's labels under one pod view and driver: computed when those change, not every cycle
    (the kubelet's allocations change far less often than the exporter collects)."""

    labels: Labels  # identifying labels: the GPU's, and the MIG instance's
    device_labels: Labels  # with the pod holding the device alone, if one does
    shared: bool
    pods: Mapping[PodName, Holder]  # the pods holding a shared device, in name order
    pod_labels: Mapping[Holder, Labels]  # each such pod's labels on its per-pod series
    histogram_key: tuple[str, tuple[str, ...]]
    capability_labels: Mapping[str, Labels]  # physical GPUs: each capability's labels


def _attribution(
    view: PodView, device: DeviceReading, labels: Labels, node_label: str | None, uids: PodUids | None
) -> _Attribution:
    if device.mig is not None:
        mig = device.mig
        labels = {**labels, "GPU_I_PROFILE": mig.profile, "GPU_I_ID": str(mig.gpu_instance_id)}
    holders = device_holders(view, device)
    shared = is_shared(holders)
    # One pod holding the device, alone on a time-sliced GPU too, is named on its series.
    owner = sole_holder(holders)
    device_labels = labels if owner is None else _with_holder(labels, owner, uids)
    pods = pods_holding(holders) if shared else {}
    capability_labels: dict[str, Labels] = {}
    if device.mig is None:
        # Only identifying labels that are snake_case or DCGM's upper case: the exporter's own
        # families stay lint-clean (modelName is on gpu_up, to join on).
        gpu = {key: labels[key] for key in ("gpu", "UUID", node_label) if key is not None}
        capability_labels = {name: {**gpu, "capability": name} for name in cap.NAMES}
    return _Attribution(
        labels=labels,
        device_labels=device_labels,
        shared=shared,
        pods=pods,
        pod_labels={holder: _with_holder(labels, holder, uids) for holder in pods.values()},
        histogram_key=(
            device.uuid,
            tuple(device_labels.get(k, "") for k in ("namespace", "pod", "container")),
        ),
        capability_labels=capability_labels,
    )


#: ``Series(labels, value)`` from a ``(labels, value)`` pair without the generated ``__new__``'s Python
#: frame: the builder makes one for every reading of every device, every cycle.
_new_series: Final[Callable[[tuple[Labels, float]], Series]] = functools.partial(tuple.__new__, Series)


class _Appenders(dict[str, Callable[[Series], None]]):
    """Each family's ``list.append`` for one snapshot's series, its list made on the first sample."""

    def __init__(self, series: dict[str, list[Series]]) -> None:
        super().__init__()
        self._series = series

    def __missing__(self, name: str) -> Callable[[Series], None]:
        append = self[name] = self._series.setdefault(name, []).append
        return append

    def extend(self, name: str, items: tuple[Series, ...]) -> None:
        self._series.setdefault(name, []).extend(items)


class SnapshotBuilder:
    """Builds :class:`Snapshot` objects; keeps cumulative histogram state between cycles.

    ``naming`` names the node and driver labels (values and family names are the encoder's);
    ``pod_uid`` adds ``pod_uid`` wherever a pod is named, as dcgm-exporter's
    ``--kubernetes-enable-pod-uid`` does."""

    def __init__(
        self, hostname: str, *, version: str, naming: Naming = LEGACY_NAMING, pod_uid: bool = False
    ) -> None:
        self._hostname = hostname
        self._version = version
        self._naming = naming
        self._pod_uid = pod_uid
        self._uids: PodUids | None = None
        self._histograms: dict[tuple[str, tuple[str, ...]], _Histogram] = {}
        self._last_success_at: float | None = None
        # Labels and attribution per device, valid for one pod view and driver version.
        self._view: PodView | None = None
        self._driver: str | None = None
        self._gpu_labels: dict[DeviceIdentity, Labels] = {}
        self._attributions: dict[tuple[DeviceIdentity, MigLabels | None], _Attribution] = {}
        self._derived = _LabelSets()
        self._version_labels: Labels = {"version": version}
        # Each shared device's per-pod usage, kept with what it was computed from (NVML's answers, the
        # PIDs' pods): recomputed only when those changed.
        self._usage: dict[str, tuple[object, list[PodUsage]]] = {}
        # Each GPU's capability series, kept with the capabilities and label sets they were built from
        # (both the same objects until what the GPU offers, or the pod view, changes).
        self._capability_series: dict[str, tuple[object, object, tuple[Series, ...]]] = {}

    def _labels_for(self, view: PodView, driver: str) -> None:
        """Start the label caches afresh when the pod view or the driver version changed (a new view
        object with the same allocations, as each kubelet refresh brings, keeps them)."""
        if driver != self._driver or (view is not self._view and view != self._view):
            self._gpu_labels = {}
            self._attributions = {}
            self._driver = driver
            self._uids = pod_uids(view) if self._pod_uid else None
        self._view = view

    def _gpu_labels_of(self, gpu: DeviceIdentity) -> Labels:
        labels = self._gpu_labels.get(gpu)
        if labels is None:
            labels = self._gpu_labels[gpu] = gpu_labels(gpu, self._hostname, self._driver or "", self._naming)
        return labels

    def build(
        self,
        reading: NodeReading,
        view: PodView,
        pid_uids: Mapping[int, str],
        counters: Counters,
        *,
        taken_at: float,
        duration_s: float,
    ) -> Snapshot:
        series: dict[str, list[Series]] = {}
        appenders = _Appenders(series)
        histograms: list[HistogramSeries] = []
        driver = reading.driver_version

        def add(name: str, labels: Labels, value: float) -> None:
            appenders[name](_new_series((labels, value)))

        self._labels_for(view, driver)
        base_labels: dict[str, Labels] = {}
        for gpu, up in reading.gpus:
            base_labels[gpu.uuid] = labels = self._gpu_labels_of(gpu)
            add(f.GPU_UP, labels, 1.0 if up else 0.0)

        kept_histograms: dict[tuple[str, tuple[str, ...]], _Histogram] = {}
        usage: dict[str, tuple[object, list[PodUsage]]] = {}
        capability_series: dict[str, tuple[object, object, tuple[Series, ...]]] = {}
        whole_gpu_labels: dict[str, Labels] = {}  # each GPU read this cycle, with the pod holding it
        # Kept for the devices read this cycle only: MIG instances a reconfiguration removed go.
        attributions: dict[tuple[DeviceIdentity, MigLabels | None], _Attribution] = {}
        for device in reading.devices:
            attribution = self._attributions.get((device.gpu, device.mig))
            if attribution is None:
                labels = base_labels.get(device.gpu.uuid) or self._gpu_labels_of(device.gpu)
                attribution = _attribution(view, device, labels, self._naming.node_label, self._uids)
            attributions[(device.gpu, device.mig)] = attribution
            device_labels = attribution.device_labels

            for name, value in device.values.items():  # some 30 a GPU: the builder's inner loop
                appenders[name](_new_series((device_labels, value)))
            if device.capabilities is not None:
                known = self._capability_series.get(device.uuid)
                if (
                    known is None
                    or known[0] is not device.capabilities
                    or known[1] is not attribution.capability_labels
                ):
                    built = _capability_series(attribution.capability_labels, device.capabilities)
                    known = (device.capabilities, attribution.capability_labels, built)
                capability_series[device.uuid] = known
                appenders.extend(f.CAPABILITY, known[2])
            if device.mig is None:
                whole_gpu_labels[device.uuid] = device_labels
            if attribution.shared:
                self._add_pod_usage(add, attribution, device, pid_uids, view.uid_names, usage)
            if device.samples is not None:
                key = attribution.histogram_key
                histogram = self._histograms.get(key) or _Histogram()
                histogram.observe(device.samples)
                kept_histograms[key] = histogram
                histograms.append(HistogramSeries(device_labels, histogram.cumulative(), histogram.total))

        self._attributions = attributions
        self._usage = usage
        self._capability_series = capability_series

        # A GPU that is down, or whose sample buffer could not be read this cycle, keeps its histogram for
        # when it is read again (a counter must not restart); other stale keys (a pod that left) go.
        unread = {gpu.uuid for gpu, up in reading.gpus if not up}
        unread.update(device.uuid for device in reading.devices if device.samples is None)
        for key, histogram in self._histograms.items():
            if key[0] in unread and key not in kept_histograms:
                kept_histograms[key] = histogram
        self._histograms = kept_histograms

        # The last XID of every GPU ever seen, down ones included: a GPU that fell off the bus reports
        # XID 79 and then nothing else, and an alert on the gauge must still see it.
        for gpu, _ in reading.gpus:
            read = whole_gpu_labels.get(gpu.uuid)
            if read is None:  # not read this cycle; who holds it is still known
                owner = sole_holder(holders_of(view.allocated, gpu.uuid, gpu.gpu_index))
                base = base_labels[gpu.uuid]
                read = base if owner is None else _with_holder(base, owner, self._uids)
            xid = counters.last_xid.get(gpu.uuid, 0)
            add(
                f.XID_ERRORS,
                self._derived.get(read, _xid_labels(xid)),
                float(xid),
            )

        self._add_xid_counts(add, base_labels, counters.xids, self._derived)

        if reading.ok:
            self._last_success_at = taken_at
        self._add_self_metrics(add, counters, duration_s)
        self._derived.end_cycle()
        return Snapshot(
            taken_at=taken_at,
            ok=reading.ok,
            duration_s=duration_s,
            series=MappingProxyType({name: tuple(items) for name, items in series.items()}),
            histograms=tuple(histograms),
            error=reading.error,
        )

    @staticmethod
    def _add_xid_counts(
        add: _Add, base_labels: Mapping[str, Labels], xids: Mapping[tuple[str, int], int], derived: _LabelSets
    ) -> None:
        """Each GPU's XIDs, all of them (no ``xid`` label) and by XID. The GPU's total is served from
        its first collection on, at 0 until an XID comes, so ``increase()`` counts the first one: a
        series by XID only begins at its first event, and ``increase()`` sees no rise in a series'
        first sample."""
        totals = dict.fromkeys(base_labels, 0)
        for (uuid, _), count in xids.items():
            if uuid in totals:
                totals[uuid] += count
        for uuid, total in totals.items():
            add(f.XID_TOTAL, base_labels[uuid], float(total))
        for (uuid, xid), count in sorted(xids.items()):
            labels = base_labels.get(uuid)
            if labels is not None:
                add(
                    f.XID_TOTAL,
                    derived.get(labels, (("xid", str(xid)),)),
                    float(count),
                )

    def _add_pod_usage(
        self,
        add: _Add,
        attribution: _Attribution,
        device: DeviceReading,
        pid_uids: Mapping[int, str],
        uid_names: Mapping[str, PodName],
        kept: dict[str, tuple[object, list[PodUsage]]],
    ) -> None:
        pods, processes, utilization = attribution.pods, device.processes, device.process_utilization
        # What the usage is a function of: the same answers and PIDs' pods give the same usage (the
        # process list is read every cycle, its utilization on a cadence, the pods change seldom).
        pids = {p.pid for p in processes or ()}
        pids.update(u.pid for u in utilization or ())
        source = (pods, processes, utilization, uid_names, tuple(pid_uids.get(pid) for pid in sorted(pids)))
        last = self._usage.get(device.uuid)
        if last is not None and last[0] == source:
            usages = last[1]
        else:
            usages = usage_of_pods(pods, processes, utilization, pid_uids, uid_names)
        kept[device.uuid] = (source, usages)
        for usage in usages:
            pod_labels = attribution.pod_labels[usage.holder]
            # Own names, not DCGM's: the GPU's series already carry the whole device, so a per-pod
            # DCGM_FI_DEV_GPU_UTIL would make `sum by (gpu)` count the GPU twice.
            if usage.sm_percent is not None:
                add(f.POD_SM_UTILIZATION, pod_labels, usage.sm_percent)
            if usage.memory_bytes is not None:
                add(f.POD_MEMORY_USED, pod_labels, float(usage.memory_bytes))

    def _add_self_metrics(self, add: _Add, counters: Counters, duration_s: float) -> None:
        add(f.COLLECT_DURATION, _NO_LABELS, duration_s)
        if self._last_success_at is not None:
            add(f.LAST_COLLECT, _NO_LABELS, self._last_success_at)
        for (call, code), count in sorted(counters.nvml_errors.items()):
            labels = self._derived.get(_NO_LABELS, (("call", call), ("code", code)))
            add(f.NVML_ERRORS, labels, float(count))
        add(f.KUBELET_ERRORS, _NO_LABELS, float(counters.kubelet_errors))
        add(f.BUILD_INFO, self._version_labels, 1.0)
