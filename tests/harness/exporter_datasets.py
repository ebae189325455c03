"""Three fleets the dashboards must read, as the series a Prometheus holds after two hours of scrapes.

* :func:`dcgm_exporter_fleet`: NVIDIA's dcgm-exporter 4.x, labelled the way it labels its series
  (``internal/pkg/collector/gpu_collector.go`` ``toMetric`` and ``transformation/kubernetes.go``):
  ``gpu, UUID, pci_bus_id, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION``; ``GPU_I_ID`` and
  ``GPU_I_PROFILE`` on MIG instances; ``container, namespace, pod`` on every series of a device a pod
  holds, one copy per pod (with ``vgpu``) on a time-sliced GPU; ``err_code`` and ``err_msg`` on
  ``DCGM_FI_DEV_XID_ERRORS``.
* :func:`gpu_exporter_fleet`: gpu-exporter's own exposition, produced by its production collection
  path (NVML faked at the binding, the kubelet's PodResources served for real over gRPC, pod processes
  found through a /proc tree) on a scripted clock, one collection a minute.
* :func:`two_clusters`: both behind one query endpoint, labelled ``cluster="a"`` and ``cluster="b"``
  the way Thanos, Mimir or VictoriaMetrics see them; cluster b runs the same dcgm-exporter nodes
  (same node names, same GPU UUIDs) at half the load, plus the gpu-exporter node.

Each also holds kube-state-metrics' and cAdvisor's series for its pods, the reaper's Pushgateway
series and the exporters' scrape health.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import grpc
import numpy as np

from exporter._proto import podresources_pb2 as pb
from exporter._proto import podresources_pb2_grpc as pb_grpc
from exporter.cgroups import PodUidResolver
from exporter.cycle import Cycle
from exporter.exposition import Exposition
from exporter.nvml import Nvml
from exporter.podresources import PodResourcesClient
from exporter.pods import PodViewRefresher
from exporter.snapshot import Snapshot, SnapshotBuilder
from exporter.xid import XidCounter, XidWatcher
from harness.exposition import stored_samples
from harness.extra_fleet import END_S, STEP_S, TIMES, reaper_series
from simulation.fake_nvml import (
    GIB,
    REASON_HW_THERMAL,
    REASON_SW_THERMAL,
    FakeGpu,
    FakeMig,
    FakeNvmlLibrary,
    FakeProcess,
    FakeThrottle,
)
from simulation.fleet import Series, gpu_uuid
from simulation.gpu_profiles import constant, sawtooth

H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"
DRIVER = "550.54.15"
#: dcgm-exporter 4.x's text for the XIDs used here (``collector/xid_errors.go``).
XID_TEXT = {0: "No Error", 13: "Graphics Engine Exception", 79: "GPU has fallen off the bus"}
DCGM_NODE, MIG_NODE, OUR_NODE = "dgx-1", "mig-1", "gpu-ours-1"


@dataclass(frozen=True)
class Pod:
    """A pod holding GPUs, as kube-state-metrics and cAdvisor describe it."""

    namespace: str
    name: str
    owner_kind: str  # kube_pod_owner's: ReplicaSet, Job, <none>
    owner_name: str
    deployment: str | None = None  # the ReplicaSet's owner
    cpu_limit: float = 4.0
    cpu_used: float = 1.0  # cores
    throttled: float = 0.0  # share of CFS periods


CHAT = Pod("serving", "chat-api-7d9f8b6c5d-x2k4p", "ReplicaSet", "chat-api-7d9f8b6c5d", "chat-api")
ALICE = Pod("research", "notebook-alice", "<none>", "<none>")
BOB = Pod("research", "notebook-bob", "<none>", "<none>")
CAROL = Pod("research", "notebook-carol", "<none>", "<none>")
BENCH = Pod(
    "research", "tokenizer-bench-8x2zq", "Job", "tokenizer-bench", cpu_limit=6, cpu_used=5.9, throttled=0.4
)
MIG_IDLE = Pod("serving", "mig-idle-6c8d7f9b4-r7t2w", "ReplicaSet", "mig-idle-6c8d7f9b4", "mig-idle")
DCGM_PODS = (CHAT, ALICE, BOB, BENCH, MIG_IDLE)
OUR_PODS = (CHAT, ALICE, BOB, CAROL, BENCH, MIG_IDLE)


def _series(name: str, labels: dict[str, str], values: np.ndarray | float) -> Series:
    full = np.broadcast_to(np.asarray(values, dtype=float), TIMES.shape).copy()
    return Series(name, tuple(sorted(labels.items())), TIMES.copy(), full)


def _counter(per_second: float) -> np.ndarray:
    return (TIMES - TIMES[0]) * per_second


# -- kube-state-metrics, cAdvisor, scrape health, reaper ------------------------------------------


def kube_series(pods: Iterable[Pod]) -> list[Series]:
    ksm = {"job": "kube-state-metrics", "instance": "kube-state-metrics:8080"}
    cadvisor = {"job": "kubelet", "instance": "10.0.0.1:10250", "metrics_path": "/metrics/cadvisor"}
    out = []
    for p in pods:
        pod = {"namespace": p.namespace, "pod": p.name}
        out.append(
            _series(
                "kube_pod_owner",
                ksm
                | pod
                | {"owner_kind": p.owner_kind, "owner_name": p.owner_name, "owner_is_controller": "true"},
                1.0,
            )
        )
        if p.deployment is not None:
            replicaset = {"namespace": p.namespace, "replicaset": p.owner_name}
            out.append(
                _series(
                    "kube_replicaset_owner",
                    ksm | replicaset | {"owner_kind": "Deployment", "owner_name": p.deployment},
                    1.0,
                )
            )
        container = pod | {"container": "main"}
        limit = ksm | container | {"resource": "cpu", "unit": "core"}
        out.append(_series("kube_pod_container_resource_limits", limit, p.cpu_limit))
        periods = _counter(10.0)  # the default 100 ms CFS period
        out += [
            _series("container_cpu_usage_seconds_total", cadvisor | container, _counter(p.cpu_used)),
            _series("container_cpu_cfs_periods_total", cadvisor | container, periods),
            _series("container_cpu_cfs_throttled_periods_total", cadvisor | container, periods * p.throttled),
        ]
    return out


def common_series(job: str, instances: Iterable[str]) -> list[Series]:
    """Scrape health of the exporter targets and what the reaper pushed."""
    return [_series("up", {"job": job, "instance": i}, 1.0) for i in instances] + reaper_series()


# -- dcgm-exporter 4.x -----------------------------------------------------------------------------


def _dcgm_gpu(node: str, index: int, model: str) -> dict[str, str]:
    return {
        "gpu": str(index),
        "UUID": gpu_uuid(node, index),
        "pci_bus_id": f"00000000:{0x18 + 0x10 * index:02X}:00.0",
        "device": f"nvidia{index}",
        "modelName": model,
        "Hostname": node,
        "DCGM_FI_DRIVER_VERSION": DRIVER,
        "job": "dcgm-exporter",
        "instance": f"{node}:9400",
    }


def _holders(pods: tuple[Pod, ...]) -> list[dict[str, str]]:
    """Label sets dcgm-exporter adds to a device's series: none when free, one copy per sharing pod."""
    if not pods:
        return [{}]
    if len(pods) == 1:
        return [{"namespace": pods[0].namespace, "pod": pods[0].name, "container": "main"}]
    return [
        {"namespace": p.namespace, "pod": p.name, "container": "main", "vgpu": str(r)}
        for r, p in enumerate(pods)
    ]


def _xid_series(labels: dict[str, str], xid: int, since: float) -> list[Series]:
    """DCGM_FI_DEV_XID_ERRORS: 0 ("No Error") until ``since``, then ``xid``; the labels change with it."""
    out = []
    for code, keep in ((0, since > TIMES), (xid, since <= TIMES)):
        if keep.any():
            text = {"err_code": str(code), "err_msg": XID_TEXT[code]}
            out.append(
                Series(
                    "DCGM_FI_DEV_XID_ERRORS",
                    tuple(sorted((labels | text).items())),
                    TIMES[keep],
                    np.full(keep.sum(), float(code)),
                )
            )
    return out


def _whole_gpu(
    labels: dict[str, str], util: np.ndarray, *, xid: int = 0, power_capped: bool = False
) -> list[Series]:
    power = 90.0 + 6.0 * util
    out = [
        _series("DCGM_FI_DEV_POWER_USAGE", labels, power),
        _series("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", labels, 5e9 + np.cumsum(power * STEP_S * 1000.0)),
        _series("DCGM_FI_DEV_GPU_TEMP", labels, np.round(34.0 + 0.4 * util)),
        _series("DCGM_FI_DEV_SM_CLOCK", labels, np.where(util > 1.0, 1980.0, 345.0)),
        _series("DCGM_FI_DEV_MEM_CLOCK", labels, 2619.0),
        _series("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", labels, 0x4 if power_capped else 0.0),
        # Violation counters count nanoseconds: 1e8 a second is a tenth of the time.
        _series("DCGM_FI_DEV_POWER_VIOLATION", labels, _counter(1e8 if power_capped else 0.0)),
        _series("DCGM_FI_DEV_THERMAL_VIOLATION", labels, _counter(0.0)),
    ]
    return out + _xid_series(labels, xid, END_S - 600 if xid else math.inf)


def _device(
    labels: dict[str, str], util: np.ndarray, used_mib: float, total_mib: float, *, whole: bool
) -> list[Series]:
    engine = util / 100.0 * 0.97
    out = [
        _series("DCGM_FI_DEV_FB_USED", labels, used_mib),
        _series("DCGM_FI_DEV_FB_FREE", labels, total_mib - used_mib),
        _series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, engine),
        _series("DCGM_FI_PROF_SM_ACTIVE", labels, engine * 0.85),
        _series("DCGM_FI_PROF_DRAM_ACTIVE", labels, engine * 0.4),
    ]
    if whole:  # MIG instances have no utilization gauge of their own
        out += [
            _series("DCGM_FI_DEV_GPU_UTIL", labels, np.round(util)),
            _series("DCGM_FI_DEV_MEM_COPY_UTIL", labels, np.round(util * 0.4)),
        ]
    return out


def dcgm_exporter_fleet(load: float = 1.0) -> list[Series]:
    """An H100 node (a Deployment's GPU, a GPU time-sliced by two notebooks, a Job's GPU that reported
    XID 13, a free GPU) and an A100 in MIG mode (one 3g.40gb instance held by an idle Deployment)."""
    minutes = np.arange(TIMES.size)
    busy = (60.0 + 10.0 * np.sin(minutes / 7.0)) * load
    sliced = np.full(TIMES.size, 36.0 * load)
    bench = np.where(minutes % 2 == 0, 85.0, 15.0) * load  # the gauge of a starving input pipeline
    free = np.zeros(TIMES.size)
    out: list[Series] = []
    for index, util, used, pods, xid in (
        (0, busy, 52_000.0, (CHAT,), 0),
        (1, sliced, 30_000.0, (ALICE, BOB), 0),
        (2, bench, 41_000.0, (BENCH,), 13),
        (3, free, 0.0, (), 0),
    ):
        gpu = _dcgm_gpu(DCGM_NODE, index, H100)
        for holder in _holders(pods):
            labels = gpu | holder
            out += _whole_gpu(labels, util, xid=xid, power_capped=index == 0)
            out += _device(labels, util, used, 81_559.0, whole=True)
    mig = _dcgm_gpu(MIG_NODE, 0, A100)
    out += _whole_gpu(mig, free)
    for instance, pods in (("1", (MIG_IDLE,)), ("2", ())):
        labels = mig | {"GPU_I_ID": instance, "GPU_I_PROFILE": "3g.40gb"}
        for holder in _holders(pods):
            out += _device(labels | holder, free, 9_000.0 if pods else 0.0, 40_192.0, whole=False)
    return out


def dcgm_cluster(load: float = 1.0) -> list[Series]:
    instances = (f"{DCGM_NODE}:9400", f"{MIG_NODE}:9400")
    return [*dcgm_exporter_fleet(load), *kube_series(DCGM_PODS), *common_series("dcgm-exporter", instances)]


# -- gpu-exporter, through its own collection path ---------------------------------------------------


class _Kubelet(pb_grpc.PodResourcesListerServicer):
    """The kubelet's PodResourcesLister, answering a fixed assignment."""

    def __init__(self, response: pb.ListPodResourcesResponse) -> None:
        self.response = response

    def List(
        self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pb.ListPodResourcesResponse:
        return self.response


@contextmanager
def _kubelet(assignments: Iterable[tuple[Pod, str, list[str]]]) -> Iterator[Path]:
    """A real PodResources gRPC server on a unix socket; yields the socket path."""
    pods: dict[tuple[str, str], pb.PodResources] = {}
    for pod, resource, device_ids in assignments:
        entry = pods.setdefault(
            (pod.namespace, pod.name), pb.PodResources(name=pod.name, namespace=pod.namespace)
        )
        entry.containers.append(
            pb.ContainerResources(
                name="main", devices=[pb.ContainerDevices(resource_name=resource, device_ids=device_ids)]
            )
        )
    # Unix socket paths are limited to ~108 bytes: a short directory of its own.
    directory = Path(tempfile.mkdtemp(prefix="kubelet-"))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_PodResourcesListerServicer_to_server(
        _Kubelet(pb.ListPodResourcesResponse(pod_resources=list(pods.values()))), server
    )
    socket = directory / "kubelet.sock"
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        yield socket
    finally:
        server.stop(grace=None).wait()
        shutil.rmtree(directory, ignore_errors=True)


def _node_files(root: Path, processes: dict[int, tuple[Pod, str]]) -> tuple[Path, Path]:
    """A host /proc with each process in its pod's cgroup, and the kubelet's pod log directory."""
    proc, logs = root / "proc", root / "pods"
    logs.mkdir(parents=True)
    for pid, (pod, uid) in processes.items():
        (proc / str(pid)).mkdir(parents=True)
        slice_ = f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"
        (proc / str(pid) / "cgroup").write_text(
            f"0::/kubepods.slice/{slice_}/cri-containerd-{pid:064x}.scope\n"
        )
        (logs / f"{pod.namespace}_{pod.name}_{uid}" / "main").mkdir(parents=True)
    return proc, logs


def _our_gpus() -> tuple[FakeGpu, ...]:
    """GPU 0 time-sliced by three notebooks (one holds memory and computes nothing); 1 a Deployment's;
    2 a Job's whose input pipeline starves it; 3 in MIG mode; 4 falls off the bus with XID 79 for eight
    minutes; 5 free and thermally throttled."""
    shared = (
        FakeProcess(4101, 20 * GIB, 0.6),
        FakeProcess(4102, 10 * GIB, 0.4),
        FakeProcess(4103, 2 * GIB, 0.0),
    )
    instances = (
        FakeMig(gpu_instance_id=1, profile_index=2, memory_used_bytes=30 * GIB, activity=0.8),
        FakeMig(gpu_instance_id=5, profile_index=1, memory_used_bytes=2 * GIB, activity=0.0),
    )
    hot = FakeThrottle(
        reasons=REASON_SW_THERMAL | REASON_HW_THERMAL, thermal_share=0.3, extra_celsius=14, sm_clock_mhz=1410
    )
    return (
        FakeGpu(0, utilization=constant(80.0), memory_used_bytes=32 * GIB, processes=shared, noise=3.0),
        FakeGpu(1, utilization=constant(97.0), memory_used_bytes=74 * GIB, noise=3.0),
        FakeGpu(
            2,
            utilization=sawtooth(STEP_S, idle_fraction=0.4, idle=3.0, busy=96.0),
            memory_used_bytes=41 * GIB,
        ),
        FakeGpu(3, mig=instances),
        FakeGpu(4, utilization=constant(90.0), lost_between=(600.0, 1080.0), xids=((600.0, 79),)),
        FakeGpu(5, utilization=constant(97.0), memory_used_bytes=70 * GIB, throttle=hot),
    )


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@cache
def gpu_exporter_fleet() -> tuple[Series, ...]:
    """Two hours of gpu-exporter's exposition on one node, collected once a minute."""
    with tempfile.TemporaryDirectory(prefix="node-") as workdir:
        return tuple(_collect(Path(workdir)))


def _collect(workdir: Path) -> Iterator[Series]:
    clock = _Clock(float(TIMES[0]))
    library = FakeNvmlLibrary(_our_gpus(), clock=clock, sleep=clock.sleep)
    gpus = library.gpus
    uids = {pid: f"0c0c0c0c-0000-4000-8000-{pid:012d}" for pid in (4101, 4102, 4103)}
    proc, logs = _node_files(
        workdir, {4101: (ALICE, uids[4101]), 4102: (BOB, uids[4102]), 4103: (CAROL, uids[4103])}
    )
    assignments = [
        *[
            (pod, "nvidia.com/gpu.shared", [f"{gpus[0].uuid}::{r}"])
            for r, pod in enumerate((ALICE, BOB, CAROL))
        ],
        (CHAT, "nvidia.com/gpu", [gpus[1].uuid]),
        (BENCH, "nvidia.com/gpu", [gpus[2].uuid]),
        (MIG_IDLE, "nvidia.com/mig-1g.10gb", [gpus[3].mig_uuid(1)]),
    ]
    collected: defaultdict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = defaultdict(
        list
    )
    with _kubelet(assignments) as socket:
        pods = PodViewRefresher(PodResourcesClient(socket), pod_log_dir=logs, max_age_s=3600.0)
        assert pods.refresh(), "the kubelet's PodResources answered"
        nvml = Nvml(library)
        xids = XidCounter()
        watcher = XidWatcher(nvml, xids, wait_ms=1)
        cycle = Cycle(
            nvml,
            SnapshotBuilder(OUR_NODE, version="test"),
            pods=pods,
            pid_resolver=PodUidResolver(proc),
            xid_counter=xids,
            xid_watcher=watcher,
            wall_clock=clock,
            monotonic=clock,
        )
        target = {"job": "gpu-exporter", "instance": f"{OUR_NODE}:9400"}
        for t in TIMES:
            clock.now = float(t)
            snapshot = cycle.run()
            watcher.poll_once()
            for name, labels, value in _scraped(snapshot):
                collected[(name, tuple(sorted((labels | target).items())))].append((float(t), value))
    for (name, labels), points in collected.items():
        yield Series(name, labels, np.array([t for t, _ in points]), np.array([v for _, v in points]))


def _scraped(snapshot: Snapshot) -> Iterator[tuple[str, dict[str, str], float]]:
    """What Prometheus stores from a scrape of the exporter serving ``snapshot``."""
    for sample in stored_samples(Exposition(lambda: snapshot).render()[0].decode()):
        if math.isfinite(sample.value):
            yield sample.name, dict(sample.labels), sample.value


def gpu_exporter_cluster() -> list[Series]:
    return [
        *gpu_exporter_fleet(),
        *kube_series(OUR_PODS),
        *common_series("gpu-exporter", [f"{OUR_NODE}:9400"]),
    ]


# -- two clusters behind one endpoint ----------------------------------------------------------------


def with_cluster(series: Iterable[Series], cluster: str) -> list[Series]:
    return [
        Series(s.name, tuple(sorted((*s.labels, ("cluster", cluster)))), s.timestamps, s.values)
        for s in series
    ]


def two_clusters() -> list[Series]:
    """Cluster a: the dcgm-exporter nodes. Cluster b: the same nodes (names and UUIDs collide) at half
    the load, and the gpu-exporter node."""
    b = [*dcgm_exporter_fleet(load=0.5), *gpu_exporter_fleet(), *kube_series(OUR_PODS)]
    b += common_series("dcgm-exporter", [f"{DCGM_NODE}:9400", f"{MIG_NODE}:9400"])
    b += [_series("up", {"job": "gpu-exporter", "instance": f"{OUR_NODE}:9400"}, 1.0)]
    return [*with_cluster(dcgm_cluster(), "a"), *with_cluster(b, "b")]


#: Dataset name → its series.
DATASETS: dict[str, Callable[[], list[Series]]] = {
    "dcgm-exporter": dcgm_cluster,
    "gpu-exporter": gpu_exporter_cluster,
    "two-clusters": two_clusters,
}
