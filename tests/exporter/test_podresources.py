"""The PodResources client and the background refresher against a real gRPC server on a unix socket."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from exporter._proto import podresources_pb2 as pb
from exporter.attribution import ClaimDevices, ContainerDevices, Holder, PodName
from exporter.cgroups import PodUidResolver
from exporter.cycle import Cycle
from exporter.nvml import Nvml
from exporter.podresources import KubeletError, PodResourcesClient
from exporter.pods import PodViewRefresher, scan_gpu_minors, scan_pod_log_dir
from exporter.snapshot import Snapshot, SnapshotBuilder
from simulation.fake_nvml import FakeNvmlLibrary

UUID = "GPU-8b1c3a52-0d4e-4f7a-9c2b-1e5f6a7b8c9d"
FOUR_MIB = 4 * 1024 * 1024
CLAIM_UID = "5f0c1e2d-3b4a-4c5d-8e9f-a0b1c2d3e4f5"


def test_lists_device_assignments(kubelet) -> None:
    kubelet.assign(
        ("ml", "train-0", "main", "nvidia.com/gpu", [UUID]),
        ("ml", "train-0", "sidecar", "example.com/nic", ["eth1"]),
    )
    devices = PodResourcesClient(kubelet.socket_path).list_devices()
    assert devices == [
        ContainerDevices("ml", "train-0", "main", "nvidia.com/gpu", (UUID,)),
        ContainerDevices("ml", "train-0", "sidecar", "example.com/nic", ("eth1",)),
    ]


def _big_node(kubelet, pods: int = 3000) -> None:
    ids = [f"GPU-{i:08d}-0000-4000-8000-{j:012d}::{j}" for i in range(1) for j in range(40)]
    kubelet.assign(*[("batch", f"job-{n:05d}", "worker", "nvidia.com/gpu.shared", ids) for n in range(pods)])


def test_response_over_four_mib_is_received(kubelet) -> None:
    _big_node(kubelet)
    assert kubelet.response.ByteSize() > FOUR_MIB
    devices = PodResourcesClient(kubelet.socket_path).list_devices()
    assert len(devices) == 3000


def test_gRPC_default_limit_would_have_refused_it(kubelet) -> None:
    _big_node(kubelet)
    with pytest.raises(KubeletError, match="RESOURCE_EXHAUSTED"):
        PodResourcesClient(kubelet.socket_path, max_receive_bytes=FOUR_MIB).list_devices()


def test_hanging_kubelet_times_out(kubelet) -> None:
    kubelet.hanging = True
    started = time.monotonic()
    with pytest.raises(KubeletError, match="DEADLINE_EXCEEDED"):
        PodResourcesClient(kubelet.socket_path, timeout_s=0.3).list_devices()
    # Our deadline ended the call, not the kubelet, which hangs for 30 s (a bound a busy machine keeps).
    assert time.monotonic() - started < 15.0


def test_missing_socket(tmp_path: Path) -> None:
    with pytest.raises(KubeletError, match="does not exist"):
        PodResourcesClient(tmp_path / "kubelet.sock").list_devices()


def test_refresher_builds_the_view(kubelet, tmp_path: Path) -> None:
    kubelet.assign(("ml", "train-0", "main", "nvidia.com/gpu", [UUID]))
    (tmp_path / "ml_train-0_8f1c2d3e-4b5a-4c6d-9e8f-0a1b2c3d4e5f" / "main").mkdir(parents=True)
    (tmp_path / "not-a-pod-dir").mkdir()
    refresher = PodViewRefresher(PodResourcesClient(kubelet.socket_path), pod_log_dir=tmp_path)
    assert refresher.refresh()
    view = refresher.view()
    assert view.allocated == {UUID: (Holder("ml", "train-0", "main"),)}
    assert view.uid_names == {"8f1c2d3e-4b5a-4c6d-9e8f-0a1b2c3d4e5f": PodName("ml", "train-0")}
    assert refresher.errors == 0


def test_refresher_counts_failures_and_drops_a_stale_view(kubelet, tmp_path: Path) -> None:
    now = [100.0]
    kubelet.assign(("ml", "train-0", "main", "nvidia.com/gpu", [UUID]))
    # Room for the first, answered call on a busy machine; the hanging kubelet outlasts it anyway.
    client = PodResourcesClient(kubelet.socket_path, timeout_s=2.0)
    refresher = PodViewRefresher(client, pod_log_dir=None, max_age_s=60, monotonic=lambda: now[0])
    assert refresher.refresh()
    kubelet.hanging = True
    assert not refresher.refresh()
    assert refresher.errors == 1
    now[0] += 30
    assert refresher.view().allocated  # the last good view, still young enough
    now[0] += 31
    assert refresher.view().allocated == {}  # too old: no pod labels rather than stale ones


def test_refresher_without_pod_log_dir_still_attributes(kubelet, tmp_path: Path) -> None:
    kubelet.assign(("ml", "train-0", "main", "nvidia.com/gpu", [UUID]))
    refresher = PodViewRefresher(PodResourcesClient(kubelet.socket_path), pod_log_dir=tmp_path / "missing")
    assert refresher.refresh()
    assert refresher.view().allocated
    assert refresher.view().uid_names == {}


def test_pod_log_dir_scan(tmp_path: Path) -> None:
    for name in ("kube-system_coredns-5d78c9869d-abcde_0f0e0d0c-0b0a-4909-8807-060504030201", "x_y", "a__b"):
        (tmp_path / name).mkdir()
    assert scan_pod_log_dir(tmp_path) == {
        "0f0e0d0c-0b0a-4909-8807-060504030201": PodName("kube-system", "coredns-5d78c9869d-abcde")
    }


def test_pid_resolver_reads_proc_and_forgets_exited_pids(tmp_path: Path) -> None:
    uid = "8f1c2d3e-4b5a-4c6d-9e8f-0a1b2c3d4e5f"
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(f"0::/kubepods/pod{uid}/abc\n")
    (tmp_path / "43").mkdir()
    (tmp_path / "43" / "cgroup").write_text("0::/system.slice/sshd.service\n")
    resolver = PodUidResolver(tmp_path)
    assert resolver.resolve({42, 43, 44}) == {42: uid}
    (tmp_path / "42" / "cgroup").write_text("0::/kubepods/podffffffff-ffff-4fff-bfff-ffffffffffff/abc\n")
    assert resolver.resolve({42}) == {42: uid}  # still the same process: answered from the cache
    resolver.resolve(set())  # PID 42 exited
    assert resolver.resolve({42}) == {42: "ffffffff-ffff-4fff-bfff-ffffffffffff"}  # reused PID, read again


# --- Dynamic Resource Allocation -------------------------------------------------------------------


def _claim(claim: str, *resources: pb.ClaimResource) -> pb.DynamicResource:
    return pb.DynamicResource(claim_name=claim, claim_namespace="ml", claim_resources=list(resources))


def _claim_pod(name: str, *containers: tuple[str, list[pb.DynamicResource]]) -> pb.PodResources:
    return pb.PodResources(
        name=name,
        namespace="ml",
        containers=[pb.ContainerResources(name=c, dynamic_resources=d) for c, d in containers],
    )


def _gpu(device: str) -> pb.ClaimResource:
    """A GPU as NVIDIA's DRA driver reports it on Kubernetes 1.31+: driver, pool and device name, and
    the CDI devices it prepared."""
    return pb.ClaimResource(
        driver_name="gpu.nvidia.com",
        pool_name="node-a",
        device_name=device,
        cdi_devices=[pb.CDIDevice(name=f"k8s.gpu.nvidia.com/device={device}")],
    )


def _driver_dir(root: Path, gpus: dict[str, tuple[int, str]]) -> Path:
    """The NVIDIA driver's per-GPU information files: PCI bus id → (device minor, UUID)."""
    for bus, (minor, uuid) in gpus.items():
        (root / bus).mkdir(parents=True)
        (root / bus / "information").write_text(
            f"Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nGPU UUID: \t\t {uuid}\n"
            f"Bus Location: \t\t {bus}\nDevice Minor: \t\t {minor}\nGPU Excluded:\t\t No\n"
        )
    return root


def test_lists_dra_claims_of_every_kubernetes_version(kubelet) -> None:
    kubelet.response = pb.ListPodResourcesResponse(
        pod_resources=[
            _claim_pod("train-0", ("main", [_claim("train-gpu", _gpu("gpu-1"))])),
            # Before 1.31 a claim resource lists CDI devices only.
            _claim_pod(
                "infer-0",
                (
                    "model",
                    [
                        _claim(
                            "infer-gpu",
                            pb.ClaimResource(
                                cdi_devices=[pb.CDIDevice(name=f"k8s.gpu.nvidia.com/claim={CLAIM_UID}-gpu-0")]
                            ),
                        )
                    ],
                ),
            ),
        ]
    )
    assert PodResourcesClient(kubelet.socket_path).list_devices() == [
        ClaimDevices(
            "ml",
            "train-0",
            "main",
            "ml/train-gpu",
            "gpu.nvidia.com",
            "gpu-1",
            ("k8s.gpu.nvidia.com/device=gpu-1",),
        ),
        ClaimDevices(
            "ml", "infer-0", "model", "ml/infer-gpu", "", "", (f"k8s.gpu.nvidia.com/claim={CLAIM_UID}-gpu-0",)
        ),
    ]


def test_refresher_attributes_dra_gpus_by_device_minor(kubelet, tmp_path: Path) -> None:
    # NVML index 0 is minor 1 here: the driver's own numbering, which NVIDIA's DRA driver names GPUs by.
    other = "GPU-0f1e2d3c-4b5a-4968-8776-655443322110"
    gpus = _driver_dir(tmp_path / "gpus", {"0000:18:00.0": (1, UUID), "0000:3b:00.0": (0, other)})
    shared_claim = _claim("shared-gpu", _gpu("gpu-0"))
    kubelet.response = pb.ListPodResourcesResponse(
        pod_resources=[
            _claim_pod("train-0", ("main", [_claim("train-gpu", _gpu("gpu-1"))])),
            _claim_pod("infer-a", ("model", [shared_claim])),
            _claim_pod("infer-b", ("model", [shared_claim])),
            _claim_pod(
                "odd-0",
                (
                    "main",
                    [
                        _claim(
                            "nic",
                            pb.ClaimResource(
                                driver_name="sriovnetwork.k8snetworkplumbingwg.io",
                                device_name="0000-5e-00-1",
                                cdi_devices=[
                                    pb.CDIDevice(name="example.com/net=vf1"),
                                    pb.CDIDevice(name="nonsense"),
                                ],
                            ),
                        )
                    ],
                ),
            ),
        ]
    )
    refresher = PodViewRefresher(PodResourcesClient(kubelet.socket_path), pod_log_dir=None, gpu_info_dir=gpus)
    assert refresher.refresh()  # names it does not know are skipped, not failures
    assert refresher.view().allocated == {
        UUID: (Holder("ml", "train-0", "main"),),
        other: (Holder("ml", "infer-a", "model"), Holder("ml", "infer-b", "model")),
    }
    assert refresher.errors == 0


def test_without_the_driver_directory_dra_gpus_go_unattributed(kubelet, tmp_path: Path) -> None:
    kubelet.response = pb.ListPodResourcesResponse(
        pod_resources=[_claim_pod("train-0", ("main", [_claim("train-gpu", _gpu("gpu-1"))]))]
    )
    refresher = PodViewRefresher(
        PodResourcesClient(kubelet.socket_path), pod_log_dir=None, gpu_info_dir=tmp_path / "missing"
    )
    assert refresher.refresh()
    assert refresher.view().allocated == {}


def test_gpu_minor_scan_skips_files_without_a_minor_or_uuid(tmp_path: Path) -> None:
    _driver_dir(tmp_path, {"0000:18:00.0": (3, UUID)})
    (tmp_path / "0000:3b:00.0").mkdir()
    (tmp_path / "0000:3b:00.0" / "information").write_text("Model: \t\t NVIDIA H100\nDevice Minor: \t\t ?\n")
    (tmp_path / "0000:5e:00.0").mkdir()  # no information file
    assert scan_gpu_minors(tmp_path) == {3: UUID}


# --- from the kubelet's answer to the served series ------------------------------------------------

POD_UID = "0a0a0a0a-0000-4000-8000-000000000001"  # the shared scenario's PID 4101 runs in this pod


def _cycle(
    library: FakeNvmlLibrary,
    refresher: PodViewRefresher,
    clock: Any,
    tmp_path: Path,
    builder: SnapshotBuilder | None = None,
) -> Snapshot:
    proc = tmp_path / "proc"
    (proc / "4101").mkdir(parents=True)
    (proc / "4101" / "cgroup").write_text(f"0::/kubepods/burstable/pod{POD_UID}/{'0' * 64}\n")
    assert refresher.refresh()
    cycle = Cycle(
        Nvml(library),
        builder or SnapshotBuilder("node-a", version="test"),
        pods=refresher,
        pid_resolver=PodUidResolver(proc),
        wall_clock=clock,
    )
    return cycle.run()


def _series(snapshot: Snapshot, name: str, gpu: str) -> list[dict[str, str]]:
    return [s.labels for s in snapshot.series.get(name, ()) if s.labels["gpu"] == gpu]


def test_one_pod_alone_on_a_time_sliced_gpu_is_named_on_its_dcgm_series(
    kubelet, tmp_path: Path, scenario: Callable[..., FakeNvmlLibrary], clock: Any
) -> None:
    library = scenario("shared", gpus=1)
    # Index strategy: replica 0 of GPU 0, the only replica anyone holds.
    kubelet.assign(("team-a", "worker-0", "main", "nvidia.com/gpu.shared", ["0::0"]))
    logs = tmp_path / "pods"
    (logs / f"team-a_worker-0_{POD_UID}").mkdir(parents=True)
    snapshot = _cycle(
        library, PodViewRefresher(PodResourcesClient(kubelet.socket_path), pod_log_dir=logs), clock, tmp_path
    )

    held = {"pod": "worker-0", "namespace": "team-a", "container": "main", "vgpu": "0"}
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"):
        (labels,) = _series(snapshot, name, "0")  # one series: `sum by (gpu)` counts the GPU once
        assert labels.items() >= held.items(), name
    # Its share is still served, under the very same labels, so `DCGM_… or gpu_pod_…` keeps one.
    (util,) = _series(snapshot, "DCGM_FI_DEV_GPU_UTIL", "0")
    assert _series(snapshot, "gpu_pod_sm_utilization_percent", "0") == [util]
    assert _series(snapshot, "gpu_pod_memory_used_bytes", "0") == [util]


def test_gpu_of_a_dra_claim_is_named_on_its_dcgm_series(
    kubelet, tmp_path: Path, scenario: Callable[..., FakeNvmlLibrary], clock: Any
) -> None:
    library = scenario("busy", gpus=2)
    gpus = _driver_dir(
        tmp_path / "gpus",
        {"0000:18:00.0": (1, library.gpus[0].uuid), "0000:3b:00.0": (0, library.gpus[1].uuid)},
    )
    kubelet.response = pb.ListPodResourcesResponse(
        pod_resources=[_claim_pod("train-0", ("main", [_claim("train-gpu", _gpu("gpu-1"))]))]
    )
    refresher = PodViewRefresher(PodResourcesClient(kubelet.socket_path), pod_log_dir=None, gpu_info_dir=gpus)
    snapshot = _cycle(library, refresher, clock, tmp_path)
    (held,) = _series(snapshot, "DCGM_FI_DEV_GPU_UTIL", "0")
    assert (held["pod"], held["namespace"], held["container"]) == ("train-0", "ml", "main")
    (free,) = _series(snapshot, "DCGM_FI_DEV_GPU_UTIL", "1")
    assert "pod" not in free


@pytest.mark.parametrize("recreated", [False, True], ids=["one-uid", "name-under-two-uids"])
def test_pod_uid_names_the_pod_on_its_series_when_asked(
    kubelet, tmp_path: Path, scenario: Callable[..., FakeNvmlLibrary], clock: Any, recreated: bool
) -> None:
    """``--pod-uid`` (dcgm-exporter's ``--kubernetes-enable-pod-uid``): the pod's UID beside its name,
    from the kubelet's pod log directory. A name under two UIDs (the pod deleted and created again,
    the old directory not yet gone) gets none: which one holds the GPU cannot be told."""
    library = scenario("shared", gpus=1)
    # A device plugin registering the GPU under its own domain: named in NVIDIA_RESOURCE_NAMES.
    kubelet.assign(("team-a", "worker-0", "main", "example.com/gpu", ["0::0"]))
    logs = tmp_path / "pods"
    (logs / f"team-a_worker-0_{POD_UID}").mkdir(parents=True)
    if recreated:
        (logs / "team-a_worker-0_0a0a0a0a-0000-4000-8000-000000000002").mkdir()
    refresher = PodViewRefresher(
        PodResourcesClient(kubelet.socket_path), pod_log_dir=logs, resource_names={"example.com/gpu"}
    )
    builder = SnapshotBuilder("node-a", version="test", pod_uid=True)
    snapshot = _cycle(library, refresher, clock, tmp_path, builder)
    (util,) = _series(snapshot, "DCGM_FI_DEV_GPU_UTIL", "0")
    assert (util["pod"], util["namespace"], util["container"]) == ("worker-0", "team-a", "main")
    assert util.get("pod_uid") == (None if recreated else POD_UID)
    # The pod's own share carries the same labels, so `DCGM_… or gpu_pod_…` still keeps one series.
    assert _series(snapshot, "gpu_pod_sm_utilization_percent", "0") == [util]
