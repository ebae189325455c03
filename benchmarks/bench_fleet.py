"""The benchmark's fleets: built, simulated and imported a slice of nodes at a time.

A 10,000-GPU fleet over 7 days at 15 s is about 1.7 billion samples once trimmed (utilization and
framebuffer every 15 s, kube-state-metrics and cAdvisor every 60 s): far too many to simulate in
memory at once. Every workload of a benchmark fleet is pinned to one node, and the simulator draws
each pod's trace from a generator seeded by the pod alone, so a fleet simulated one slice of nodes
at a time has the same series as the whole fleet, with one exception: the 2 % driver blips
(utilization 1 %) of *unallocated* GPUs come from one stream per simulation, so they fall on other
samples. They never cross a detector's threshold, and the ground truth, computed per slice from the
same scenario, does not depend on them.

Memory is bounded by the slice (about ``SLICE_SAMPLES`` raw samples); the JSON lines are encoded
here while a few threads post the previous chunks, so the simulator, the encoder and the TSDB's
ingestion overlap.

A fleet can also be split into clusters (``ClusterSplit``): the same GPUs either as many clusters
behind one query view, or as one cluster, with the same samples either way.
"""

from __future__ import annotations

import hashlib
import json
import queue
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import requests

from common.model import TimeWindow, WorkloadRef
from simulation.fleet import Expected, Scenario, Series, byte_chunks, expected_findings, simulate

END = datetime(2026, 1, 5, tzinfo=UTC)
SEED = 11
GPUS_PER_NODE = 8
# Raw samples one slice may simulate at once (about 15 bytes each while the slice lives).
SLICE_SAMPLES = 8_000_000
# Raw samples per node and scrape step in these layouts (GPU series plus the pods' kube-state and
# cAdvisor series before trimming), measured: sizes the slices.
SAMPLES_PER_NODE_STEP = 110
KUBE_STEP_S = 60

# Eight-GPU node layouts, cycled through the fleet: (namespace, name, kind, behaviour, replicas, gpus/pod)
LAYOUTS: list[list[tuple[str, str, str, str, int, int]]] = [
    [("research", "pretrain", "Job", "training", 1, 8)],
    [
        ("serving", "chat", "Deployment", "serving", 4, 1),
        ("serving", "ranker", "Deployment", "idle", 2, 1),
        ("team", "notebook", "Deployment", "low_utilization", 1, 1),
        ("team", "shell", "Pod", "idle", 1, 1),
    ],
    [
        ("research", "vision", "Job", "starvation_sawtooth", 1, 4),
        ("research", "audio", "Job", "starvation_cpu", 1, 2),
        ("serving", "embed", "StatefulSet", "idle", 1, 1),
        ("team", "scorer", "Deployment", "low_utilization", 1, 1),
    ],
    [("research", "finetune", "Job", "training", 2, 4)],
    [("serving", "translate", "Deployment", "serving", 8, 1)],
]

# With ``power``, on one node in fifty (a training node's place): eight single-GPU ranks of one Job,
# rank 0 checkpointing synchronously every few minutes while the others spin in the all-reduce.
STALLED_LAYOUT = [("research", "ckpt", "Job", "ddp_checkpoint_often", 8, 1)]
# The whole-GPU series ``power`` adds that the analyzer reads; the others of the simulator's
# standard set (temperature, clocks, energy, XIDs, copy utilization) are dropped as FB_FREE is.
POWER_SERIES = frozenset(
    {"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"}
)
_STANDARD_EXTRAS = frozenset(
    {
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_XID_ERRORS",
    }
)


def bench_scenario(
    gpus: int,
    window: timedelta,
    age: timedelta,
    step: timedelta,
    nodes: range | None = None,
    seed: int = SEED,
    cluster: str | None = None,
    power: bool = False,
) -> Scenario:
    """A fleet of ``gpus`` GPUs: every behaviour, a spare node in ten, an exporter outage in twenty.

    ``nodes`` picks a slice of the fleet's nodes (all by default); node ``n`` and its workloads are
    the same whichever slice holds them. ``cluster``: every series carries ``cluster="<cluster>"``.
    ``power``: every GPU also serves its board power and enforced limit (as our exporter does), and
    one eight-GPU training node in fifty runs a data-parallel Job that waits on a checkpointing
    rank (``STALLED_LAYOUT``): what the stalled-job round reads.
    """
    node_specs: list[dict[str, Any]] = []
    workloads: list[dict[str, Any]] = []
    for n in nodes if nodes is not None else range(gpus // GPUS_PER_NODE):
        name = f"gpu-{n:04d}"
        node: dict[str, Any] = {"name": name, "gpus": GPUS_PER_NODE}
        if power:
            node["serves_power_limit"] = True
        if n % 20 == 19:
            node["gaps"] = [{"start": "-3h", "end": "-2h"}]
        node_specs.append(node)
        if n % 10 == 9:
            continue  # spare: nothing scheduled
        layout = LAYOUTS[n % len(LAYOUTS)]
        if power and n % 50 == 0:
            layout = STALLED_LAYOUT
        for ns, base, kind, behaviour, replicas, per_pod in layout:
            spec: dict[str, Any] = {
                "namespace": ns,
                "name": f"{base}-{n:04d}",
                "kind": kind,
                "behaviour": behaviour,
                "replicas": replicas,
                "gpus_per_pod": per_pod,
                "node": name,
            }
            if behaviour == "starvation_cpu":
                spec["cpu_limit_cores"] = 6
            workloads.append(spec)
    return Scenario.model_validate(
        {
            "name": f"bench-{gpus}",
            "seed": seed,
            "end": END.isoformat(),
            "duration": f"{int(age.total_seconds())}s",
            "step": f"{int(step.total_seconds())}s",
            "analysis_window": f"{int(window.total_seconds())}s",
            "metrics": "standard" if power else "minimal",
            "nodes": node_specs,
            "workloads": workloads,
            "delivery": {} if cluster is None else {"cluster_label": CLUSTER_LABEL, "cluster": cluster},
        }
    )


def node_slices(
    gpus: int, age: timedelta, step: timedelta, slice_samples: int = SLICE_SAMPLES
) -> list[range]:
    """The fleet's nodes cut into slices of about ``slice_samples`` raw samples each."""
    count = gpus // GPUS_PER_NODE
    steps = age.total_seconds() / step.total_seconds()
    per_slice = max(1, min(count, int(slice_samples / (SAMPLES_PER_NODE_STEP * steps))))
    return [range(a, min(a + per_slice, count)) for a in range(0, count, per_slice)]


def trimmed(series: Iterable[Series]) -> Iterator[Series]:
    """The fleet as a cluster would typically scrape it: GPUs every step, Kubernetes every 60 s.

    ``DCGM_FI_DEV_FB_FREE`` is dropped: nothing reads it, and it would add a third to the import.
    """
    for s in series:
        if s.name == "DCGM_FI_DEV_FB_FREE" or s.name in _STANDARD_EXTRAS:
            continue
        if s.name.startswith(("kube_", "container_")):
            keep = np.round(s.timestamps) % KUBE_STEP_S == 0
            yield replace(s, timestamps=s.timestamps[keep], values=s.values[keep])
        else:
            yield s


CLUSTER_LABEL = "cluster"
# Labels whose value is a node's name (``instance``: ``NODE`` or ``NODE:PORT`` for the node's
# exporters and kubelet; kube-state-metrics' own instance is not a node's).
NODE_LABELS = ("Hostname", "node", "instance")
# Where a cluster's GPU UUIDs and pod UIDs are drawn from (any fixed namespace UUID would do).
_IDS = uuid.UUID("3b0e6f4a-8c1d-4f7e-9a52-6d2c1e0b7f93")


@dataclass(frozen=True)
class ClusterSplit:
    """A fleet's nodes split evenly between ``count`` clusters built from one GitOps repository.

    Every cluster is a fleet of its own (``bench_scenario`` over its nodes, numbered from 0), so
    each cluster has the same node names (``gpu-0000``…), namespaces and workload names
    (``serving/chat-0001``…) as the others; each has its own seed (its own samples), and its GPUs and
    pods their own UUIDs, unique across the clusters, as real ones are.

    ``labelled``: every series carries ``cluster="cK"`` — many clusters behind one query view, the
    names colliding between clusters. Otherwise no series names a cluster and all of them are one
    cluster's; there namespaces and node names must be unique, so each cluster's are prefixed with
    ``cK-`` (``merged_ref``). The two are the same simulation labelled two ways: the same series
    with the same samples, the same workloads, the same ground truth.
    """

    count: int
    labelled: bool

    @staticmethod
    def name(k: int) -> str:
        return f"c{k}"

    def nodes(self, gpus: int) -> list[int]:
        """Each cluster's node count: as even as whole nodes allow."""
        total = gpus // GPUS_PER_NODE
        if total < self.count:
            raise ValueError(f"{gpus} GPUs are fewer nodes than {self.count} clusters")
        return [(k + 1) * total // self.count - k * total // self.count for k in range(self.count)]


def merged_name(cluster: str, name: str) -> str:
    """A cluster's namespace or node name in the one-cluster fleet."""
    return f"{cluster}-{name}"


def merged_ref(cluster: str, ref: WorkloadRef) -> WorkloadRef:
    """A cluster's workload (or unallocated node) as the one-cluster fleet names it."""
    if ref.kind == "Node":
        return ref.model_copy(update={"name": merged_name(cluster, ref.name)})
    return ref.model_copy(update={"namespace": merged_name(cluster, ref.namespace)})


def _cluster_series(
    series: Iterable[Series], cluster: str, merged_nodes: set[str] | None
) -> Iterator[Series]:
    """A cluster's series with its own GPU UUIDs and pod UIDs (the simulator derives them from the
    node and pod names, which every cluster shares); ``merged_nodes`` (the cluster's node names):
    its namespaces and those nodes' names prefixed, for the one-cluster fleet."""
    ids: dict[str, str] = {}

    def own(value: str) -> str:
        hit = ids.get(value)
        if hit is None:
            hit = ids[value] = ("GPU-" if value.startswith("GPU-") else "") + str(
                uuid.uuid5(_IDS, f"{cluster}/{value}")
            )
        return hit

    for s in series:
        labels = dict(s.labels)
        for key in ("UUID", "uid"):
            if key in labels:
                labels[key] = own(labels[key])
        if merged_nodes is not None:
            if "namespace" in labels:
                labels["namespace"] = merged_name(cluster, labels["namespace"])
            for key in NODE_LABELS:
                if key in labels and labels[key].split(":")[0] in merged_nodes:
                    labels[key] = merged_name(cluster, labels[key])
        yield replace(s, labels=tuple(sorted(labels.items())))


@dataclass
class SliceStats:
    """What preparing a fleet cost: samples, series, and where the time went."""

    samples: int = 0
    series: int = 0
    slices: int = 0
    json_bytes: int = 0
    simulate_s: float = 0.0
    encode_s: float = 0.0
    # The ground truth per analysis window (its seconds): one fleet serves every window up to its age.
    truth: dict[float, dict[WorkloadRef, Expected]] = field(default_factory=dict)


def sliced_fleet(
    gpus: int,
    windows: Iterable[timedelta],
    age: timedelta,
    step: timedelta,
    stats: SliceStats,
    slice_samples: int = SLICE_SAMPLES,
    split: ClusterSplit | None = None,
    power: bool = False,
) -> Iterator[Series]:
    """Every trimmed series of the fleet, a slice of nodes at a time (a cluster's nodes at a time
    when ``split``).

    Fills ``stats.truth`` for each of ``windows`` (ending at the fleet's end) as it goes; a split
    fleet's workloads named as the one-cluster fleet names them (``merged_ref``) whether labelled or
    not.
    """
    spans = {w.total_seconds(): TimeWindow.ending(END, w) for w in windows}
    for cluster, scenario in _slice_scenarios(gpus, age, step, slice_samples, split, power):
        t0 = time.perf_counter()
        fleet = simulate(scenario)
        for seconds, span in spans.items():
            truth = expected_findings(fleet, span)
            if cluster is not None:
                truth = {(ref := merged_ref(cluster, r)): replace(e, workload=ref) for r, e in truth.items()}
            stats.truth.setdefault(seconds, {}).update(truth)
        stats.slices += 1
        stats.simulate_s += time.perf_counter() - t0
        series = trimmed(fleet.series)
        if split is not None and cluster is not None:
            merged = None if split.labelled else {n.name for n in scenario.nodes}
            series = _cluster_series(series, cluster, merged)
        for s in series:
            stats.samples += s.values.size
            stats.series += 1
            yield s
        del fleet


def _slice_scenarios(
    gpus: int,
    age: timedelta,
    step: timedelta,
    slice_samples: int,
    split: ClusterSplit | None,
    power: bool = False,
) -> Iterator[tuple[str | None, Scenario]]:
    """Each slice's scenario, and the cluster it belongs to (None: the fleet is not split)."""
    if split is None:
        # Power adds about a third to a node's samples: slices a third smaller.
        per_slice = slice_samples * 3 // 4 if power else slice_samples
        for nodes in node_slices(gpus, age, step, per_slice):
            yield None, bench_scenario(gpus, age, age, step, nodes, power=power)
        return
    for k, count in enumerate(split.nodes(gpus)):
        cluster, size = split.name(k), count * GPUS_PER_NODE
        for nodes in node_slices(size, age, step, slice_samples):
            label = cluster if split.labelled else None
            yield cluster, bench_scenario(size, age, age, step, nodes, seed=SEED + k, cluster=label)


class _Stamps:
    """JSON text of timestamp arrays, cached: most series of a slice share a handful of them."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self.cache: dict[bytes, str] = {}

    def text(self, timestamps: np.ndarray) -> str:
        raw = timestamps.tobytes()
        key = hashlib.blake2b(raw, digest_size=16).digest()
        hit = self.cache.get(key)
        if hit is None:
            millis = np.round(timestamps * 1000).astype(np.int64)
            hit = ",".join(map(str, millis.tolist()))
            if len(self.cache) >= self.size:
                self.cache.pop(next(iter(self.cache)))
            self.cache[key] = hit
        return hit


def _values_text(values: np.ndarray) -> str:
    """The values exactly as simulated, in the shortest JSON spelling that parses back to them."""
    if values.size == 0:
        return ""
    if not np.isfinite(values).all():
        # JSON has no NaN; a gap is a missing sample, never a value.
        raise ValueError("a series holds a non-finite value")
    first = values[0]
    if (values == first).all():
        return ",".join([json.dumps(float(first))] * values.size)
    if (values == np.floor(values)).all() and np.abs(values).max() < 2**53:
        return ",".join(map(str, values.astype(np.int64).tolist()))
    return json.dumps(values.tolist())[1:-1]


def json_line_chunks(series: Iterable[Series], max_bytes: int = 8 << 20) -> Iterator[bytes]:
    """VictoriaMetrics' JSON line import (``/api/v1/import``): one line per series, labels once.

    The same lines as ``harness.servers.VictoriaMetricsServer.import_json_lines`` writes, about
    three times faster: timestamp arrays are encoded once per distinct array, and constant and
    integral value arrays without Python's float formatting.
    """
    stamps = _Stamps()
    lines = (
        f'{{"metric":{json.dumps({"__name__": s.name, **dict(s.labels)})},'
        f'"values":[{_values_text(s.values)}],"timestamps":[{stamps.text(s.timestamps)}]}}\n'
        for s in series
    )
    return byte_chunks(lines, max_bytes)


@dataclass
class ImportStats:
    posts: int = 0
    wait_s: float = 0.0  # the encoder blocked on a full queue: the TSDB was the bottleneck
    flush_s: float = 0.0


def import_json_lines(
    url: str, chunks: Iterable[bytes], stats: ImportStats, posters: int = 2, backlog: int = 4
) -> None:
    """Post chunks to VictoriaMetrics from ``posters`` threads while the caller's thread encodes more.

    At most ``backlog`` encoded chunks wait in memory. The first failed post stops the import and is
    raised here.
    """
    todo: queue.Queue[bytes | None] = queue.Queue(maxsize=backlog)
    errors: list[BaseException] = []

    def post() -> None:
        with requests.Session() as http:
            while (chunk := todo.get()) is not None:
                if errors:
                    continue  # drain: the caller stops at the next put
                try:
                    http.post(f"{url}/api/v1/import", data=chunk, timeout=600).raise_for_status()
                except BaseException as e:  # handed to the caller's thread
                    errors.append(e)

    threads = [threading.Thread(target=post, daemon=True) for _ in range(posters)]
    for t in threads:
        t.start()
    try:
        for chunk in chunks:
            if errors:
                break
            t0 = time.perf_counter()
            todo.put(chunk)
            stats.wait_s += time.perf_counter() - t0
            stats.posts += 1
    finally:
        for _ in threads:
            todo.put(None)
        for t in threads:
            t.join()
    if errors:
        raise RuntimeError(f"import into {url} failed: {errors[0]}") from errors[0]
    t0 = time.perf_counter()
    # Make the imported samples searchable now rather than after the next periodic flush.
    requests.get(f"{url}/internal/force_flush", timeout=600).raise_for_status()
    stats.flush_s = time.perf_counter() - t0


def wait_for_merges(url: str, timeout_s: float = 1800.0, quiet_s: float = 3.0) -> float:
    """Wait until VictoriaMetrics has no merge running for ``quiet_s``; returns the seconds waited.

    A big import leaves background merges behind; they would compete with the measured queries.
    """
    start = time.perf_counter()
    calm_since: float | None = None
    while time.perf_counter() - start < timeout_s:
        text = requests.get(f"{url}/metrics", timeout=30).text
        active = sum(
            float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vm_active_merges")
        )
        now = time.perf_counter()
        if active == 0:
            calm_since = calm_since if calm_since is not None else now
            if now - calm_since >= quiet_s:
                break
        else:
            calm_since = None
        time.sleep(0.5)
    return time.perf_counter() - start
