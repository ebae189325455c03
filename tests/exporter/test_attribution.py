"""Device ids → pods, and per-pod usage of shared GPUs: pure functions, table-style."""

from __future__ import annotations

import pytest

from exporter.attribution import (
    ClaimDevices,
    ContainerDevices,
    Holder,
    PodName,
    allocations,
    dra_device_names,
    holders_of,
    is_shared,
    parse_device_id,
    pod_usage,
    sole_holder,
)
from exporter.cgroups import pod_uid_from_cgroup
from exporter.readings import ProcessMemory, ProcessUtilization

UUID = "GPU-8b1c3a52-0d4e-4f7a-9c2b-1e5f6a7b8c9d"
MIG = "MIG-2f4e6a8c-1b3d-4e5f-8a9b-0c1d2e3f4a5b"
GIB = 1024**3


@pytest.mark.parametrize(
    ("device_id", "expected"),
    [
        pytest.param(UUID, (UUID, None), id="uuid-strategy"),
        pytest.param(f"{UUID}::3", (UUID, "3"), id="time-sliced-replica"),
        pytest.param(MIG, (MIG, None), id="mig-uuid"),
        pytest.param(f"{MIG}::1", (MIG, "1"), id="shared-mig-replica"),
        pytest.param("2", ("index:2", None), id="index-strategy"),
        pytest.param("nvidia2", ("index:2", None), id="gke-whole-gpu"),
        pytest.param("nvidia2/vgpu5", ("index:2", "5"), id="gke-shared-gpu"),
        pytest.param("nvidia0/gi3", ("index:0/gi:3", None), id="gke-mig-partition"),
        pytest.param("nvidia0/gi3/vgpu1", ("index:0/gi:3", "1"), id="gke-shared-mig-partition"),
        pytest.param("1:2", ("index:1/mig:2", None), id="index-strategy-mig-device"),
        pytest.param("0::1", ("index:0", "1"), id="index-strategy-time-sliced-replica"),
        pytest.param("0:2::0", ("index:0/mig:2", "0"), id="index-strategy-shared-mig-replica"),
    ],
)
def test_parse_device_id(device_id: str, expected: tuple[str, str | None]) -> None:
    assert parse_device_id(device_id) == expected


def test_allocations_keep_nvidia_resources_only() -> None:
    allocated = allocations(
        [
            ContainerDevices("ml", "train", "main", "nvidia.com/gpu", (UUID,)),
            ContainerDevices("ml", "train", "main", "example.com/fpga", ("fpga-0",)),
            ContainerDevices("ml", "serve", "model", "nvidia.com/mig-1g.10gb", (MIG,)),
        ]
    )
    assert allocated == {UUID: (Holder("ml", "train", "main"),), MIG: (Holder("ml", "serve", "model"),)}


def test_resource_names_beyond_nvidia_com_are_nvidia_gpus_when_named() -> None:
    """dcgm-exporter's NVIDIA_RESOURCE_NAMES: a device plugin registering NVIDIA GPUs under another
    domain. Other resources stay ignored."""
    assignments = [
        ContainerDevices("ml", "train", "main", "example.com/gpu", (UUID,)),
        ContainerDevices("ml", "train", "main", "example.com/fpga", ("fpga-0",)),
    ]
    assert allocations(assignments) == {}
    assert allocations(assignments, resource_names={"example.com/gpu"}) == {
        UUID: (Holder("ml", "train", "main"),)
    }


def test_holders_found_by_uuid_or_index() -> None:
    allocated = allocations([ContainerDevices("ml", "a", "c", "nvidia.com/gpu", ("1",))])
    assert holders_of(allocated, UUID, 1) == (Holder("ml", "a", "c"),)
    assert holders_of(allocated, UUID, 0) == ()


def test_replicas_named_by_index_find_their_gpu_and_mig_device() -> None:
    allocated = allocations(
        [
            ContainerDevices("ml", "a", "c", "nvidia.com/gpu.shared", ("0::1",)),
            ContainerDevices("ml", "b", "c", "nvidia.com/mig-1g.10gb.shared", ("1:2::0",)),
        ]
    )
    assert holders_of(allocated, UUID, 0) == (Holder("ml", "a", "c", "1"),)
    assert holders_of(allocated, MIG, 1, gpu_instance_id=13, mig_slot=2) == (Holder("ml", "b", "c", "0"),)


@pytest.mark.parametrize(
    ("holders", "shared"),
    [
        pytest.param((), False, id="unallocated"),
        pytest.param((Holder("ml", "a", "c"),), False, id="exclusive"),
        pytest.param((Holder("ml", "a", "c", "0"),), True, id="one-replica-of-a-shared-gpu"),
        pytest.param((Holder("ml", "a", "c", "0"), Holder("ml", "b", "c", "1")), True, id="two-replicas"),
        pytest.param((Holder("ml", "a", "c"), Holder("ml", "b", "c")), True, id="one-claim-two-pods"),
        pytest.param(
            (Holder("ml", "a", "main"), Holder("ml", "a", "sidecar")), False, id="one-claim-one-pod"
        ),
    ],
)
def test_is_shared(holders: tuple[Holder, ...], shared: bool) -> None:
    assert is_shared(holders) is shared


@pytest.mark.parametrize(
    ("holders", "owner"),
    [
        pytest.param((), None, id="unallocated"),
        pytest.param((Holder("ml", "a", "c"),), Holder("ml", "a", "c"), id="exclusive"),
        pytest.param(
            (Holder("ml", "a", "c", "0"),), Holder("ml", "a", "c", "0"), id="alone-on-a-time-sliced-gpu"
        ),
        pytest.param(
            (Holder("ml", "a", "c", "0"), Holder("ml", "a", "c", "3")),
            Holder("ml", "a", "c", "0,3"),
            id="one-pod-two-replicas",
        ),
        pytest.param(
            (Holder("ml", "a", "sidecar"), Holder("ml", "a", "main")),
            Holder("ml", "a", "main"),
            id="one-claim-two-containers",
        ),
        pytest.param((Holder("ml", "a", "c", "0"), Holder("ml", "b", "c", "1")), None, id="two-pods"),
    ],
)
def test_sole_holder_names_the_one_pod_holding_a_device(
    holders: tuple[Holder, ...], owner: Holder | None
) -> None:
    assert sole_holder(holders) == owner


def test_sole_holder_labels_match_the_pods_usage_series() -> None:
    # `DCGM_… or gpu_pod_…` must find one series for a pod alone on a time-sliced GPU, not two.
    holders = (Holder("ml", "a", "main", "3"), Holder("ml", "a", "main", "0"))
    (usage,) = pod_usage(holders, [ProcessMemory(101, GIB)], [], UIDS, NAMES)
    assert usage.holder == sole_holder(holders)


CLAIM_UID = "5f0c1e2d-3b4a-4c5d-8e9f-a0b1c2d3e4f5"


def _claim(driver: str = "", device: str = "", *cdi: str, pod: str = "a") -> ClaimDevices:
    return ClaimDevices("ml", pod, "main", "ml/gpu-claim", driver, device, cdi)


@pytest.mark.parametrize(
    ("claim", "names"),
    [
        pytest.param(_claim("gpu.nvidia.com", "gpu-1"), ("gpu-1",), id="device-name-kubernetes-1.31"),
        pytest.param(_claim("", "", "k8s.gpu.nvidia.com/device=gpu-1"), ("gpu-1",), id="cdi-device"),
        pytest.param(
            _claim("", "", f"k8s.gpu.nvidia.com/claim={CLAIM_UID}-gpu-1"),
            ("gpu-1",),
            id="cdi-claim-scoped-device",
        ),
        pytest.param(
            _claim(
                "gpu.nvidia.com",
                "gpu-1",
                "k8s.gpu.nvidia.com/device=gpu-1",
                f"k8s.gpu.nvidia.com/claim={CLAIM_UID}-gpu-1",
            ),
            ("gpu-1",),
            id="one-device-named-three-ways",
        ),
        pytest.param(
            _claim("gpu.nvidia.com", "gpu-0-mig-19-2-1", "k8s.gpu.nvidia.com/device=gpu-0-mig-19-2-1"),
            ("gpu-0-mig-19-2-1",),
            id="mig-device",
        ),
        pytest.param(
            _claim("", "", "k8s.gpu.nvidia.com/claim=common", f"k8s.gpu.nvidia.com/claim={CLAIM_UID}"),
            (),
            id="classic-dra-driver-names-no-device",
        ),
        pytest.param(_claim("compute-domain.nvidia.com", "channel-0"), (), id="another-nvidia-driver"),
        pytest.param(_claim("", "", "vendor.com/gpu=gpudevice1", "garbage"), (), id="unknown-cdi-names"),
    ],
)
def test_dra_device_names(claim: ClaimDevices, names: tuple[str, ...]) -> None:
    assert dra_device_names(claim) == names


OTHER = "GPU-0f1e2d3c-4b5a-4968-8776-655443322110"


def test_gpus_of_dra_claims_are_found_by_device_minor() -> None:
    # Minor numbers need not follow NVML's index: the driver directory says which GPU is which.
    minors = {0: OTHER, 1: UUID}
    allocated = allocations(
        [
            _claim("gpu.nvidia.com", "gpu-1", pod="a"),
            _claim("gpu.nvidia.com", "gpu-1", pod="a"),  # the kubelet listing a claim twice
            _claim("", "", "k8s.gpu.nvidia.com/device=gpu-0", pod="b"),
            _claim("gpu.nvidia.com", "gpu-7", pod="c"),  # a minor the driver does not list
            _claim("gpu.nvidia.com", "gpu-0-mig-19-2-1", pod="d"),  # MIG through DRA: not resolved
        ],
        minors,
    )
    assert allocated == {UUID: (Holder("ml", "a", "main"),), OTHER: (Holder("ml", "b", "main"),)}
    assert allocations([_claim("gpu.nvidia.com", "gpu-1")]) == {}  # no minors known: unattributed


def test_a_claim_several_pods_use_makes_the_gpu_shared() -> None:
    allocated = allocations([_claim("gpu.nvidia.com", "gpu-1", pod=p) for p in ("a", "b")], {1: UUID})
    holders = holders_of(allocated, UUID, 5)
    assert holders == (Holder("ml", "a", "main"), Holder("ml", "b", "main"))
    assert is_shared(holders)
    assert sole_holder(holders) is None


HOLDERS = (Holder("ml", "a", "main", "0"), Holder("ml", "b", "main", "1"), Holder("ml", "idle", "main", "2"))
UIDS = {101: "uid-a", 102: "uid-a", 201: "uid-b", 999: "uid-elsewhere"}
NAMES = {"uid-a": PodName("ml", "a"), "uid-b": PodName("ml", "b"), "uid-idle": PodName("ml", "idle")}


def test_pod_usage_sums_processes_per_pod_and_shows_idle_holders() -> None:
    processes = [ProcessMemory(101, 2 * GIB), ProcessMemory(102, 1 * GIB), ProcessMemory(201, 4 * GIB)]
    samples = [
        ProcessUtilization(101, 1, 30, 0),
        ProcessUtilization(101, 2, 50, 0),  # mean 40
        ProcessUtilization(102, 2, 10, 0),
        ProcessUtilization(201, 2, 25, 0),
        ProcessUtilization(999, 2, 90, 0),  # a process of a pod that holds no replica: ignored
    ]
    usage = {u.holder.pod: u for u in pod_usage(HOLDERS, processes, samples, UIDS, NAMES)}
    assert usage["a"].sm_percent == pytest.approx(50.0)
    assert usage["a"].memory_bytes == 3 * GIB
    assert usage["a"].holder.vgpu == "0"
    assert usage["b"].sm_percent == pytest.approx(25.0)
    assert (usage["idle"].sm_percent, usage["idle"].memory_bytes) == (0.0, 0)


@pytest.mark.parametrize(
    ("processes", "names"),
    [
        pytest.param(None, NAMES, id="no-process-list-from-nvml"),
        pytest.param([ProcessMemory(101, GIB)], {}, id="no-pod-names-known"),
    ],
)
def test_pod_usage_unknown_rather_than_zero(processes: list[ProcessMemory] | None, names: dict) -> None:
    assert pod_usage(HOLDERS, processes, [], UIDS, names) == []


def test_pod_usage_without_process_utilization_reports_memory_only() -> None:
    usage = pod_usage(HOLDERS, [ProcessMemory(201, GIB)], None, UIDS, NAMES)
    assert [(u.holder.pod, u.sm_percent, u.memory_bytes) for u in usage] == [
        ("a", None, 0),
        ("b", None, GIB),
        ("idle", None, 0),
    ]


POD_UID = "8f1c2d3e-4b5a-4c6d-9e8f-0a1b2c3d4e5f"
POD_UID_SYSTEMD = POD_UID.replace("-", "_")
CONTAINER = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("cgroup", "uid"),
    [
        pytest.param(f"0::/kubepods/burstable/pod{POD_UID}/{CONTAINER}\n", POD_UID, id="v2-cgroupfs"),
        pytest.param(
            f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD_UID_SYSTEMD}.slice/"
            f"cri-containerd-{CONTAINER}.scope\n",
            POD_UID,
            id="v2-systemd",
        ),
        pytest.param(
            f"0::/../../kubepods-burstable-pod{POD_UID_SYSTEMD}.slice/cri-containerd-{CONTAINER}.scope\n",
            POD_UID,
            id="v2-seen-from-another-cgroup-namespace",
        ),
        pytest.param(
            "12:pids:/\n"
            f"11:memory:/kubepods/pod{POD_UID}/{CONTAINER}\n"
            f"1:name=systemd:/kubepods/pod{POD_UID}/{CONTAINER}\n",
            POD_UID,
            id="v1-cgroupfs-guaranteed",
        ),
        pytest.param(
            f"5:cpu,cpuacct:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_UID_SYSTEMD}"
            f".slice/docker-{CONTAINER}.scope\n",
            POD_UID,
            id="v1-systemd-docker",
        ),
        pytest.param(
            f"0::/kubepods/burstable/pod6d1b5e2a9c3f4e7d8a0b1c2d3e4f5a6b/{CONTAINER}\n",
            "6d1b5e2a9c3f4e7d8a0b1c2d3e4f5a6b",
            id="static-pod-hash-uid",
        ),
        pytest.param("0::/user.slice/user-1000.slice/session-3.scope\n", None, id="not-in-a-pod"),
        pytest.param("0::/system.slice/podman-1234.scope\n", None, id="pod-in-a-name-is-not-a-uid"),
    ],
)
def test_pod_uid_from_cgroup(cgroup: str, uid: str | None) -> None:
    assert pod_uid_from_cgroup(cgroup) == uid
