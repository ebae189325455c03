"""The PodResources client and the background refresher against a real gRPC server on a unix socket."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from exporter.attribution import ContainerDevices, Holder, PodName
from exporter.cgroups import PodUidResolver
from exporter.podresources import KubeletError, PodResourcesClient
from exporter.pods import PodViewRefresher, scan_pod_log_dir

UUID = "GPU-8b1c3a52-0d4e-4f7a-9c2b-1e5f6a7b8c9d"
FOUR_MIB = 4 * 1024 * 1024


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
