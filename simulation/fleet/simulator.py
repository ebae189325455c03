"""Turn a scenario into the series a real cluster's Prometheus would hold.

Series carry the names and labels of dcgm-exporter (``DCGM_FI_*``), of our exporter (its sample
histogram), of kube-state-metrics (``kube_pod_*``) and of cAdvisor (``container_cpu_*``), so the
analyzer cannot tell the simulator from a cluster.

The names and histogram buckets are typed out here on purpose, not taken from
``common.metric_names``: the simulator is the oracle the analyzer is tested against, and a typo in a
shared constant would pass unnoticed on both sides (a test checks that the two copies agree).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from common.model import WorkloadRef
from simulation.fleet import behaviours, naming
from simulation.fleet.delivery import deliver
from simulation.fleet.scenario import (
    Controller,
    NodeSpec,
    Scenario,
    ScenarioError,
    WorkloadKind,
    WorkloadSpec,
)
from simulation.fleet.series import Series as Series  # re-exported: where the simulator's users find it

UTIL_BUCKETS = (5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0)
_K8S_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_CFS_PERIODS_PER_SECOND = 10.0  # the default 100 ms CFS period
_NAMESPACE_UUID = uuid.UUID("6f1c2f8e-1d1e-4c55-9a0c-5b0f3f0a9d11")


@dataclass(frozen=True)
class Slot:
    """One allocatable GPU device: a whole GPU, or a MIG instance of one."""

    node: str
    gpu: int
    uuid: str
    mig_instance: int | None = None


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    uid: str
    node: str
    workload: WorkloadRef
    owner_kind: str  # what kube_pod_owner says: ReplicaSet, StatefulSet, Job or <none>
    owner_name: str
    start: float
    end: float  # unix seconds; the scenario end for pods still running
    slots: tuple[Slot, ...]
    spec: WorkloadSpec
    pending: bool = False  # never scheduled: no node, no GPU, no start time


@dataclass
class Fleet:
    scenario: Scenario
    times: np.ndarray
    pods: list[Pod]
    series: list[Series] = field(default_factory=list)

    @property
    def sample_count(self) -> int:
        return sum(s.values.size for s in self.series)

    def series_named(self, name: str) -> Iterator[Series]:
        return (s for s in self.series if s.name == name)


def _stable_id(*parts: str) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE_UUID, "/".join(parts))


def _k8s_suffix(length: int, *parts: str) -> str:
    digest = hashlib.sha256("/".join(parts).encode()).digest()
    return "".join(_K8S_ALPHABET[b % len(_K8S_ALPHABET)] for b in digest[:length])


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{_stable_id('gpu', node, str(index))}"


def replicaset_name(w: WorkloadSpec) -> str:
    return f"{w.name}-{_k8s_suffix(10, w.namespace, w.name, 'rs')}"


def _pod_names(w: WorkloadSpec, replicas: int, generation: int = 0) -> list[tuple[str, str, str]]:
    """(pod name, owner kind, owner name) per replica, named the way controllers name them.

    ``generation`` counts recreations: a recreated pod gets a new name (a StatefulSet's keeps it).
    """
    salt = "" if generation == 0 else f"/{generation}"
    match w.kind:
        case WorkloadKind.DEPLOYMENT:
            rs = replicaset_name(w)
            return [
                (f"{rs}-{_k8s_suffix(5, w.namespace, w.name, str(i) + salt)}", "ReplicaSet", rs)
                for i in range(replicas)
            ]
        case WorkloadKind.STATEFULSET:
            return [(f"{w.name}-{i}", "StatefulSet", w.name) for i in range(replicas)]
        case WorkloadKind.JOB:
            return [
                (f"{w.name}-{_k8s_suffix(5, w.namespace, w.name, str(i) + salt)}", "Job", w.name)
                for i in range(replicas)
            ]
        case WorkloadKind.POD:
            return [(w.name, "<none>", "<none>")]
        case WorkloadKind.RAYCLUSTER:
            return [
                (
                    f"{w.name}-gpu-group-worker-{_k8s_suffix(5, w.namespace, w.name, str(i))}",
                    "RayCluster",
                    w.name,
                )
                for i in range(w.replicas)
            ]


GROUP_LABEL = "app.kubernetes.io/name"
# The label each custom controller writes on the pods it makes, named by its object's name.
_CONTROLLER_POD_LABEL = {
    Controller.INFERENCE_SERVICE: "serving.kserve.io/inferenceservice",
    Controller.NOTEBOOK: "notebook-name",
    Controller.LEADER_WORKER_SET: "leaderworkerset.sigs.k8s.io/name",
}


def pod_labels(w: WorkloadSpec) -> dict[str, str]:
    """The labels of the workload's pods: the scenario's, and its custom controller's."""
    root = w.controller_root
    if w.controller is None or root is None:
        return dict(w.labels)
    return w.labels | {_CONTROLLER_POD_LABEL[w.controller]: root}


def exported_label(key: str) -> str:
    """kube-state-metrics' name for a pod label: ``label_`` and the key, [^a-zA-Z0-9_] made ``_``."""
    return "label_" + "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in key)


def workload_ref(w: WorkloadSpec) -> WorkloadRef:
    """What a correct analyzer names the workload: the owner above a Job when it has one, else
    for a Job whose pods carry ``app.kubernetes.io/name``, the group of Jobs sharing it."""
    if w.job_owner is not None:
        return WorkloadRef(kind=w.job_owner.kind, name=w.job_owner.name, namespace=w.namespace)
    if w.kind is WorkloadKind.JOB and GROUP_LABEL in w.labels:
        return WorkloadRef(kind="JobGroup", name=w.labels[GROUP_LABEL], namespace=w.namespace)
    return WorkloadRef(kind=w.kind.value, name=w.name, namespace=w.namespace)


def _slots(node: NodeSpec) -> list[Slot]:
    out: list[Slot] = []
    for i in range(node.gpus):
        instances = range(node.mig_instances) if node.mig_profile else [None]
        out.extend(Slot(node.name, i, gpu_uuid(node.name, i), m) for m in instances)
    return out


def place(scenario: Scenario) -> list[Pod]:
    """First-fit placement of every replica, each pod's GPUs on one node, no slot shared in time."""
    taken: dict[Slot, list[tuple[float, float]]] = {}
    slots_by_node = {n.name: _slots(n) for n in scenario.nodes}
    end_ts = scenario.end.timestamp()
    pods = []
    for w in scenario.workloads:
        start = scenario.at(w.start).timestamp()
        stop = scenario.at(w.end).timestamp() if w.end is not None else end_ts
        if stop <= start:
            raise ScenarioError(f"workload {w.namespace}/{w.name}: end is not after start")
        ref = workload_ref(w)
        candidates = [w.node] if w.node else [n.name for n in scenario.nodes]
        cuts = sorted(t for r in w.replaced_at if start < (t := scenario.at(r).timestamp()) < stop)
        lives = list(zip([start, *cuts], [*cuts, stop], strict=True))
        for generation, (born, died) in enumerate(lives):
            for pod_name, owner_kind, owner_name in _pod_names(w, w.replicas, generation):
                chosen = None
                for node_name in candidates:
                    free = [
                        s
                        for s in slots_by_node[node_name]
                        if all(died <= a or born >= b for a, b in taken.get(s, []))
                    ]
                    if len(free) >= w.gpus_per_pod:
                        chosen = free[: w.gpus_per_pod]
                        break
                if chosen is None:
                    raise ScenarioError(
                        f"workload {w.namespace}/{w.name}: no node has {w.gpus_per_pod} free GPU(s) "
                        f"for {pod_name}"
                    )
                for s in chosen:
                    taken.setdefault(s, []).append((born, died))
                pods.append(
                    Pod(
                        namespace=w.namespace,
                        name=pod_name,
                        uid=str(
                            _stable_id(
                                "pod", w.namespace, pod_name, *([str(generation)] if generation else [])
                            )
                        ),
                        node=chosen[0].node,
                        workload=ref,
                        owner_kind=owner_kind,
                        owner_name=owner_name,
                        start=born,
                        end=died,
                        slots=tuple(chosen),
                        spec=w,
                    )
                )
        names = _pod_names(w, w.replicas + w.pending_replicas)[w.replicas :]
        for pod_name, owner_kind, owner_name in names:
            pods.append(
                Pod(
                    namespace=w.namespace,
                    name=pod_name,
                    uid=str(_stable_id("pod", w.namespace, pod_name, "pending")),
                    node="",
                    workload=ref,
                    owner_kind=owner_kind,
                    owner_name=owner_name,
                    start=start,  # created then; never started, so no kube_pod_start_time
                    end=stop,
                    slots=(),
                    spec=w,
                    pending=True,
                )
            )
    return pods


def simulate(scenario: Scenario) -> Fleet:
    """Generate every series of the scenario. Deterministic for a given scenario (seed included)."""
    step = scenario.step.total_seconds()
    count = int(scenario.duration.total_seconds() // step)
    times = scenario.start.timestamp() + step * np.arange(1, count + 1, dtype=float)
    pods = place(scenario)
    fleet = Fleet(scenario=scenario, times=times, pods=pods)
    rng = np.random.default_rng(scenario.seed)
    ranks = _ranks(scenario, pods)
    traces = {p.uid: _pod_trace(scenario, p, times, rng, ranks.get(p.uid)) for p in pods}
    for node in scenario.nodes:
        series = naming.node_series(scenario, node, _gpu_series(scenario, node, times, pods, traces, rng))
        moves = sorted(scenario.at(m).timestamp() for m in node.exporter_moves)
        series = _relocated(series, moves) if moves else series
        fleet.series.extend(
            _scraped(scenario, node, times, series)
            if node.scrape_offset_s or node.scrape_jitter_ms
            else series
        )
    fleet.series.extend(_kube_state_series(scenario, times, pods))
    fleet.series.extend(_cadvisor_series(scenario, times, pods, traces))
    fleet.series = deliver(scenario, fleet.series)
    return fleet


def _alive(times: np.ndarray, pod: Pod) -> np.ndarray:
    return (times > pod.start) & (times <= pod.end)


def _ranks(scenario: Scenario, pods: list[Pod]) -> dict[str, behaviours.Rank]:
    """Each scheduled pod's rank in its workload (its replicas in order), for data-parallel jobs."""
    out: dict[str, behaviours.Rank] = {}
    for w in scenario.workloads:
        mine = [p for p in pods if p.spec is w and not p.pending]
        seed = int.from_bytes(hashlib.sha256(f"{scenario.seed}/{w.namespace}/{w.name}".encode()).digest()[:4])
        stall = scenario.at(w.stall_at).timestamp() if w.stall_at is not None else None
        for i, p in enumerate(mine):
            out[p.uid] = behaviours.Rank(rank=i, world=len(mine), seed=seed, stall_at=stall)
    return out


def _pod_trace(
    scenario: Scenario,
    pod: Pod,
    times: np.ndarray,
    rng: np.random.Generator,
    rank: behaviours.Rank | None = None,
) -> behaviours.Trace:
    pod_rng = np.random.default_rng([scenario.seed, *pod.uid.encode()])
    del rng  # each pod has its own stream so adding a workload does not reshuffle the others
    return behaviours.trace(
        pod.spec.behaviour,
        pod_rng,
        times,
        scenario.step.total_seconds(),
        pod.start,
        pod.spec.warmup.total_seconds(),
        rank,
    )


def present_mask(scenario: Scenario, node: NodeSpec, gpu: int, times: np.ndarray) -> np.ndarray:
    """Samples the node's exporter actually delivered for one GPU."""
    mask = np.ones(times.size, dtype=bool)
    for gap in node.gaps:
        a, b = scenario.at(gap.start).timestamp(), scenario.at(gap.end).timestamp()
        mask &= ~((times > a) & (times <= b))
    for loss in node.gpu_losses:
        if loss.gpu == gpu:
            mask &= times <= scenario.at(loss.at).timestamp()
    return mask


def _restart_counter(increments: np.ndarray, times: np.ndarray, resets: list[float]) -> np.ndarray:
    """Cumulative sum that starts again from zero after each reset time."""
    total = np.cumsum(increments, axis=0)
    for r in sorted(resets):
        after = times > r
        if after.any():
            first = int(np.argmax(after))
            base = total[first - 1] if first > 0 else 0.0
            total[after] = total[after] - base
    return total


def _gpu_series(
    scenario: Scenario,
    node: NodeSpec,
    times: np.ndarray,
    pods: list[Pod],
    traces: dict[str, behaviours.Trace],
    rng: np.random.Generator,
) -> Iterator[Series]:
    style = scenario.labels
    util_to_unit = 0.01 if scenario.gpu_util_unit == "ratio" else 1.0
    step = scenario.step.total_seconds()
    n = times.size
    standard = scenario.metrics == "standard"
    restarts = [scenario.at(r).timestamp() for r in node.exporter_restarts]
    instances = node.mig_instances if node.mig_profile else 1
    slot_mem = node.memory_mib / instances

    for gpu in range(node.gpus):
        uuid_ = gpu_uuid(node.name, gpu)
        present = present_mask(scenario, node, gpu, times)
        base = {
            "gpu": str(gpu),
            "UUID": uuid_,
            "pci_bus_id": f"00000000:{0x18 + 0x10 * gpu:02X}:00.0",
            "device": f"nvidia{gpu}",
            "modelName": node.model,
            style.hostname: node.name,
            "DCGM_FI_DRIVER_VERSION": scenario.driver_version,
            "instance": f"{node.name}:9400",
            "job": node.exporter,
        }
        gpu_util = np.zeros(n)
        # Board power (share of the limit) and clock-event reasons where a holder's trace sets them.
        power_frac = np.full(n, np.nan)
        events = np.full(n, np.nan)
        for inst in range(instances):
            # Per device (GPU or MIG instance): who holds it when, and what it does.
            owner = np.full(n, -1)
            util = np.where(rng.random(n) < 0.02, 1.0, 0.0)  # unallocated: idle but for driver blips
            frac, hi, lo = np.ones(n), util.copy(), np.zeros(n)
            sd = 0.4
            fb = np.zeros(n)
            for idx, pod in enumerate(pods):
                if not any(
                    s.node == node.name and s.gpu == gpu and (s.mig_instance or 0) == inst for s in pod.slots
                ):
                    continue
                alive = _alive(times, pod)
                tr = traces[pod.uid]
                owner[alive] = idx
                util[alive] = tr.gauge[alive]
                frac[alive], hi[alive], lo[alive] = tr.frac_hi[alive], tr.mean_hi[alive], tr.mean_lo[alive]
                sd = max(sd, tr.sd)
                fb[alive] = slot_mem * pod.spec.memory_fraction * tr.loaded[alive]
                if tr.power_frac is not None:
                    power_frac[alive] = tr.power_frac[alive]
                if tr.clock_events is not None:
                    events[alive] = tr.clock_events[alive]
            gpu_util += util / instances
            labels = dict(base)
            if node.mig_profile:
                labels |= {"GPU_I_ID": str(inst), "GPU_I_PROFILE": node.mig_profile}
            per_device: dict[str, np.ndarray] = {}
            if not node.mig_profile:
                per_device["DCGM_FI_DEV_GPU_UTIL"] = util * util_to_unit
            per_device["DCGM_FI_DEV_FB_USED"] = np.round(fb)
            per_device["DCGM_FI_DEV_FB_FREE"] = np.round(slot_mem - fb)
            if node.profiling:
                gr = np.clip(util / 100.0 * 0.97, 0.0, 1.0)
                per_device["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] = gr
                if standard:
                    per_device["DCGM_FI_PROF_SM_ACTIVE"] = gr * 0.85
                    per_device["DCGM_FI_PROF_DRAM_ACTIVE"] = gr * 0.4
            if standard and not node.mig_profile:
                per_device["DCGM_FI_DEV_MEM_COPY_UTIL"] = np.clip(util * 0.4, 0.0, 100.0) * util_to_unit
            if node.exporter == "gpu-exporter":
                counts, sums = behaviours.histogram_increments(
                    frac, hi, lo, sd, step * scenario.nvml_sample_hz, UTIL_BUCKETS
                )
                cum_counts = np.floor(_restart_counter(counts, times, restarts))
                cum_sums = _restart_counter(sums, times, restarts)
                for col, le in enumerate([*UTIL_BUCKETS, float("inf")]):
                    le_text = "+Inf" if le == float("inf") else f"{le:g}"
                    yield from _split_by_owner(
                        "gpu_utilization_samples_percent_bucket",
                        labels | {"le": le_text},
                        times,
                        cum_counts[:, col],
                        owner,
                        present,
                        pods,
                        style.pod_prefix,
                    )
                yield from _split_by_owner(
                    "gpu_utilization_samples_percent_count",
                    labels,
                    times,
                    cum_counts[:, -1],
                    owner,
                    present,
                    pods,
                    style.pod_prefix,
                )
                yield from _split_by_owner(
                    "gpu_utilization_samples_percent_sum",
                    labels,
                    times,
                    cum_sums,
                    owner,
                    present,
                    pods,
                    style.pod_prefix,
                )
            for name, values in per_device.items():
                yield from _split_by_owner(
                    name, labels, times, values, owner, present, pods, style.pod_prefix
                )

        if standard:
            # Whole-GPU physics, reported once per GPU without pod labels.
            power = node.tdp_watts * (0.1 + 0.85 * gpu_util / 100.0) + rng.normal(0.0, 3.0, n)
            set_by_trace = ~np.isnan(power_frac)
            if set_by_trace.any():
                power = np.where(set_by_trace, node.tdp_watts * np.nan_to_num(power_frac), power)
            whole = {
                "DCGM_FI_DEV_POWER_USAGE": np.round(power, 3),
                "DCGM_FI_DEV_GPU_TEMP": np.round(32.0 + 40.0 * gpu_util / 100.0 + rng.normal(0.0, 0.7, n)),
                "DCGM_FI_DEV_SM_CLOCK": np.where(gpu_util > 1.0, 1980.0, 345.0),
                "DCGM_FI_DEV_MEM_CLOCK": np.full(n, 2619.0),
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": np.round(np.cumsum(power * step * 1000.0)),
                "DCGM_FI_DEV_XID_ERRORS": np.zeros(n),
            }
            if node.serves_power_limit:
                whole["DCGM_FI_DEV_ENFORCED_POWER_LIMIT"] = np.full(n, node.tdp_watts)
            if not np.isnan(events).all():
                # Served where the node's exporter reads them: 0 while nothing lowers the clocks.
                whole["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] = np.nan_to_num(events)
            for name, values in whole.items():
                yield Series(name, _sorted(base), times[present], values[present])


def _scraped(
    scenario: Scenario, node: NodeSpec, times: np.ndarray, series: Iterable[Series]
) -> Iterator[Series]:
    """The node's exporter series at its own scrape times: ``scrape_offset_s`` into each step (the
    sample of step k ends it otherwise), each scrape up to ``scrape_jitter_ms`` earlier, the same
    for every series of one scrape (inside its step: none leaves the scenario's time)."""
    step = scenario.step.total_seconds()
    rng = np.random.default_rng([scenario.seed, *node.name.encode()])
    late = rng.uniform(0.0, node.scrape_jitter_ms / 1000.0, times.size)
    at = times - (step - node.scrape_offset_s if node.scrape_offset_s else 0.0) - late
    for s in series:
        yield Series(s.name, s.labels, at[np.searchsorted(times, s.timestamps)], s.values)


def _relocated(series: Iterable[Series], moves: list[float]) -> Iterator[Series]:
    """Each series cut at the exporter's moves, every piece with the new pod's `instance`."""
    bounds = [-np.inf, *moves, np.inf]
    for s in series:
        labels = dict(s.labels)
        for k in range(len(bounds) - 1):
            mask = (s.timestamps > bounds[k]) & (s.timestamps <= bounds[k + 1])
            if not mask.any():
                continue
            instance = labels.get("instance", "")
            moved = labels | ({"instance": instance.replace(":", f"-{k}:", 1)} if k else {})
            yield Series(s.name, _sorted(moved), s.timestamps[mask], s.values[mask])


def _split_by_owner(
    name: str,
    labels: dict[str, str],
    times: np.ndarray,
    values: np.ndarray,
    owner: np.ndarray,
    present: np.ndarray,
    pods: list[Pod],
    pod_prefix: str,
) -> Iterator[Series]:
    """One series per holder of the device: the labels change when the pod does."""
    for idx in np.unique(owner):
        mask = (owner == idx) & present
        if not mask.any():
            continue
        own = dict(labels)
        if idx >= 0:
            pod = pods[int(idx)]
            own |= {
                f"{pod_prefix}pod": pod.name,
                f"{pod_prefix}namespace": pod.namespace,
                f"{pod_prefix}container": "main",
            }
        yield Series(name, _sorted(own), times[mask], values[mask])


def _sorted(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _kube_state_series(scenario: Scenario, times: np.ndarray, pods: list[Pod]) -> Iterator[Series]:
    ksm = {"job": "kube-state-metrics", "instance": "kube-state-metrics:8080"}
    seen_rs = set()
    seen_jobs: set[tuple[str, str]] = set()
    for pod in pods:
        running = _alive(times, pod)
        alive = running
        if pod.owner_kind == "Job" and not pod.pending:
            # A Job's finished pod stays in the API, phase Succeeded, until something deletes it.
            alive = times > pod.start
        t = times[alive]
        if t.size == 0:
            continue
        ones = np.ones(t.size)
        common = ksm | {"namespace": pod.namespace, "pod": pod.name, "uid": pod.uid}
        yield Series(
            "kube_pod_owner",
            _sorted(
                common
                | {
                    "owner_kind": pod.owner_kind,
                    "owner_name": pod.owner_name,
                    "owner_is_controller": _is_controller(pod),
                }
            ),
            t,
            ones,
        )
        # kube-state-metrics exports a pod label only when allowed (--metric-labels-allowlist).
        allowed = {
            exported_label(k): v for k, v in pod_labels(pod.spec).items() if k in scenario.pod_labels_allowed
        }
        if allowed:
            yield Series("kube_pod_labels", _sorted(common | allowed), t, ones)
        if not pod.pending:  # status.startTime is set by the kubelet, so never for an unscheduled pod
            yield Series("kube_pod_start_time", _sorted(common), t, np.full(t.size, pod.start))
        is_running = running[alive]
        phases = {
            "Pending": np.full(t.size, 1.0 if pod.pending else 0.0),
            "Running": np.where(is_running & (not pod.pending), 1.0, 0.0),
            "Succeeded": np.where(~is_running, 1.0, 0.0),
            "Failed": np.zeros(t.size),
            "Unknown": np.zeros(t.size),
        }
        for name, values in phases.items():
            yield Series("kube_pod_status_phase", _sorted(common | {"phase": name}), t, values)
        for condition in ("true", "false", "unknown"):
            value = 1.0 if condition == ("false" if pod.pending else "true") else 0.0
            yield Series(
                "kube_pod_status_scheduled",
                _sorted(common | {"condition": condition}),
                t,
                np.full(t.size, value),
            )
        yield Series(
            "kube_pod_info",
            _sorted(
                common
                | {"node": pod.node, "created_by_kind": pod.owner_kind, "created_by_name": pod.owner_name}
            ),
            t,
            ones,
        )
        for metric, cpu in (
            ("kube_pod_container_resource_requests", pod.spec.cpu_limit_cores / 2),
            ("kube_pod_container_resource_limits", pod.spec.cpu_limit_cores),
        ):
            res = common | {"container": "main", "node": pod.node}
            yield Series(metric, _sorted(res | {"resource": "cpu", "unit": "core"}), t, np.full(t.size, cpu))
            yield Series(
                metric,
                _sorted(res | {"resource": "nvidia_com_gpu", "unit": "integer"}),
                t,
                np.full(t.size, float(pod.spec.gpus_per_pod)),
            )
        if pod.owner_kind == "Job" and (pod.namespace, pod.owner_name) not in seen_jobs:
            seen_jobs.add((pod.namespace, pod.owner_name))
            siblings = [p for p in pods if p.owner_name == pod.owner_name and p.namespace == pod.namespace]
            job_alive = np.logical_or.reduce([_alive(times, p) for p in siblings])
            above = pod.spec.job_owner
            yield Series(
                "kube_job_owner",
                _sorted(
                    ksm
                    | {
                        "namespace": pod.namespace,
                        "job_name": pod.owner_name,
                        "owner_kind": above.kind if above else "<none>",
                        "owner_name": above.name if above else "<none>",
                        "owner_is_controller": "true" if above else "<none>",
                    }
                ),
                times[job_alive],
                np.ones(int(job_alive.sum())),
            )
        if pod.owner_kind == "ReplicaSet" and (pod.namespace, pod.owner_name) not in seen_rs:
            seen_rs.add((pod.namespace, pod.owner_name))
            siblings = [p for p in pods if p.owner_name == pod.owner_name and p.namespace == pod.namespace]
            rs_alive = np.logical_or.reduce([_alive(times, p) for p in siblings])
            yield Series(
                "kube_replicaset_owner",
                _sorted(
                    ksm
                    | {
                        "namespace": pod.namespace,
                        "replicaset": pod.owner_name,
                        "owner_kind": "Deployment",
                        "owner_name": pod.workload.name,
                        "owner_is_controller": "true",
                    }
                ),
                times[rs_alive],
                np.ones(int(rs_alive.sum())),
            )


def _is_controller(pod: Pod) -> str:
    return "<none>" if pod.owner_kind == "<none>" else "true"


def _cadvisor_series(
    scenario: Scenario, times: np.ndarray, pods: list[Pod], traces: dict[str, behaviours.Trace]
) -> Iterator[Series]:
    step = scenario.step.total_seconds()
    for pod in pods:
        alive = _alive(times, pod)
        if not alive.any() or pod.pending:
            continue
        tr = traces[pod.uid]
        t = times[alive]
        resets = [scenario.at(r).timestamp() for r in pod.spec.container_restarts]
        limit = pod.spec.cpu_limit_cores
        usage = _restart_counter(tr.cpu_frac[alive] * limit * step, t, resets)
        periods_inc = np.full(t.size, _CFS_PERIODS_PER_SECOND * step)
        periods = _restart_counter(periods_inc, t, resets)
        throttled = _restart_counter(np.round(periods_inc * tr.throttle_frac[alive]), t, resets)
        labels = {
            "job": "kubelet",
            "metrics_path": "/metrics/cadvisor",
            "instance": pod.node,
            "node": pod.node,
            "namespace": pod.namespace,
            "pod": pod.name,
            "container": "main",
            "image": f"registry.example/{pod.workload.name}:latest",
        }
        yield Series(
            "container_cpu_usage_seconds_total", _sorted(labels | {"cpu": "total"}), t, np.round(usage, 4)
        )
        yield Series("container_cpu_cfs_periods_total", _sorted(labels), t, periods)
        yield Series("container_cpu_cfs_throttled_periods_total", _sorted(labels), t, throttled)
