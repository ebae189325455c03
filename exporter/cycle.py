"""One collection cycle: NVML readings + the cached pod view → a new snapshot."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from contextlib import nullcontext
from dataclasses import replace
from types import MappingProxyType

from exporter import fields as f
from exporter.attribution import EMPTY_VIEW, PodView, holders_of, is_shared
from exporter.cadence import DEFAULT_CADENCES, Cadences
from exporter.cgroups import PodUidResolver
from exporter.node_reader import GpuReader
from exporter.nvml import Nvml
from exporter.pods import PodViewSource
from exporter.readings import DeviceIdentity, MigLabels, NodeReading
from exporter.snapshot import Counters, Series, Snapshot, SnapshotBuilder
from exporter.xid import XidCounter, XidWatcher


class Cycle:
    """Runs one collection; the collection loop calls :meth:`run` every interval.

    ``interval_s`` is that interval: the costly readings' cadences count in it (``cadences``), on the
    ``monotonic`` clock. ``served``: the families ``/metrics`` serves (``None``: all); nothing else is
    read."""

    def __init__(
        self,
        nvml: Nvml,
        builder: SnapshotBuilder,
        *,
        pods: PodViewSource | None = None,
        pid_resolver: PodUidResolver | None = None,
        xid_counter: XidCounter | None = None,
        xid_watcher: XidWatcher | None = None,
        wall_clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        timer: Callable[[], float] = time.perf_counter,
        interval_s: float = 5.0,
        cadences: Cadences = DEFAULT_CADENCES,
        served: Collection[str] | None = None,
    ) -> None:
        self._nvml = nvml
        self._reader = GpuReader(
            nvml,
            wall_clock=wall_clock,
            monotonic=monotonic,
            interval_s=interval_s,
            cadences=cadences,
            served=served,
        )
        self._builder = builder
        self._pods = pods
        self._pid_resolver = pid_resolver
        self._xids = xid_counter or XidCounter()
        self._watcher = xid_watcher
        self._wall_clock = wall_clock
        self._timer = timer
        # Each NVML function's label set, the same object every cycle (the encoder renders it once).
        self._call_labels: dict[str, dict[str, str]] = {}

    def run(self) -> Snapshot:
        started = self._timer()
        view = EMPTY_VIEW if self._pods is None else self._pods.view()
        reading = self._read(view)
        if self._watcher is not None:
            if self._nvml.needs_init:
                self._watcher.request_pause()  # parked by the next cycle, which re-initialises NVML
            elif reading.ok:
                self._watcher.watch(self._nvml.generation, self._reader.handles)
        pid_uids: dict[int, str] = {}
        if self._pid_resolver is not None:
            pids = {p.pid for d in reading.devices for p in d.processes or ()}
            pids.update(s.pid for d in reading.devices for s in d.process_utilization or ())
            pid_uids = self._pid_resolver.resolve(pids)
        counters = Counters(
            xids=self._xids.counts(),
            last_xid=self._xids.last(),
            nvml_errors=self._nvml.error_counts(),
            kubelet_errors=0 if self._pods is None else self._pods.errors,
        )
        snapshot = self._builder.build(
            reading,
            view,
            pid_uids,
            counters,
            taken_at=self._wall_clock(),
            duration_s=self._timer() - started,
        )
        return self._with_driver_time(snapshot)

    def _with_driver_time(self, snapshot: Snapshot) -> Snapshot:
        """``gpu_exporter_nvml_seconds_total{call}``: the seconds spent in NVML so far, by function, so
        operators see the driver time the exporter costs the node (docs/exporter.md, "Driver time")."""
        seconds = self._nvml.call_seconds()
        if not seconds:
            return snapshot
        labels = self._call_labels
        series = tuple(
            Series(labels.get(call) or labels.setdefault(call, {"call": call}), spent)
            for call, spent in sorted(seconds.items())
        )
        return replace(snapshot, series=MappingProxyType({**snapshot.series, f.NVML_SECONDS: series}))

    def _read(self, view: PodView) -> NodeReading:
        def shared(gpu: DeviceIdentity, mig: MigLabels | None) -> bool:
            if mig is None:
                return is_shared(holders_of(view.allocated, gpu.uuid, gpu.gpu_index))
            return is_shared(
                holders_of(view.allocated, mig.uuid, gpu.gpu_index, mig.gpu_instance_id, mig.slot)
            )

        # (Re-)initialising NVML while the XID thread waits on an event set is not allowed. The decision
        # is taken once: the XID thread may ask for a re-init after the pause was (not) taken.
        watcher = self._watcher
        reinit = self._nvml.needs_init
        with watcher.paused() if watcher is not None and reinit else nullcontext():
            return self._reader.read(shared if view.allocated and self._pid_resolver else None, reinit=reinit)

    def shutdown(self) -> None:
        self._nvml.shutdown()
