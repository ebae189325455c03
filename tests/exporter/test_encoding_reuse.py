"""What the exporter keeps between encodings to encode less (label sets, each family's text, each
series' line) never changes what is served: every exposition equals a fresh encoding of its snapshot,
in both namings, scraped after every collection or only every third, while pods move, a MIG layout
changes, XIDs arrive and readings change."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from typing import Any

from exporter import fields as f
from exporter.attribution import ContainerDevices, PodView, allocations
from exporter.config import METRIC_NAMINGS
from exporter.cycle import Cycle
from exporter.exposition import Exposition, encode
from exporter.naming import Naming
from exporter.nvml import Nvml
from exporter.snapshot import Snapshot, SnapshotBuilder
from exporter.xid import XidCounter, XidWatcher
from simulation.fake_nvml import GIB, FakeGpu, FakeMig, FakeNvmlLibrary


class _Pods:
    """A kubelet view the test replaces, as a refresh after a pod moved would."""

    errors = 0

    def __init__(self) -> None:
        self.current = PodView()

    def hold(self, *assignments: ContainerDevices) -> None:
        self.current = PodView(allocations(assignments), {})

    def view(self) -> PodView:
        return self.current


def _labels_of(snapshot: Snapshot, family: str) -> list[dict[str, str]]:
    return [s.labels for s in snapshot.series[family]]


def test_every_exposition_equals_a_fresh_encoding_as_pods_move_and_mig_changes(
    fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any
) -> None:
    instances = (FakeMig(1, 0, GIB), FakeMig(2, 0, GIB), FakeMig(3, 0, GIB))
    library = fake_gpus(FakeGpu(0, mig=instances), FakeGpu(1), FakeGpu(2))
    whole = library.gpus[1].uuid
    pods = _Pods()
    nvml, xids = Nvml(library), XidCounter()
    watcher = XidWatcher(nvml, xids, wait_ms=10)
    cycle = Cycle(
        nvml,
        SnapshotBuilder("node-a", version="test"),
        pods=pods,
        xid_counter=xids,
        xid_watcher=watcher,
        wall_clock=clock,
        monotonic=clock,
    )
    latest: list[Snapshot | None] = [None]
    families = {scheme: Naming(scheme).families() for scheme in METRIC_NAMINGS}
    expositions = {scheme: Exposition(lambda: latest[0], fams) for scheme, fams in families.items()}
    # Scraped every third collection, as Prometheus at 15 s against 5 s collections: the snapshots in
    # between are never encoded, and what the encoder kept is two collections old.
    sparse = Exposition(lambda: latest[0], families["dcgm-4.7"])
    collections = [0]

    def collect() -> Snapshot:
        clock.advance(5)
        snapshot = latest[0] = cycle.run()
        watcher.poll_once()
        for scheme, exposition in expositions.items():
            plain = exposition.render("", "")[0]
            assert plain == encode(snapshot, families[scheme]), scheme
            assert gzip.decompress(exposition.render("", "gzip")[0]) == plain, scheme
        collections[0] += 1
        if collections[0] % 3 == 0:
            assert gzip.decompress(sparse.render("", "gzip")[0]) == encode(snapshot, families["dcgm-4.7"])
        return snapshot

    first = collect()
    second = collect()
    # The same label sets, the same objects: what lets the encoder render each once.
    assert _labels_of(second, f.XID_ERRORS) == _labels_of(first, f.XID_ERRORS)
    pairs = zip(_labels_of(first, f.XID_ERRORS), _labels_of(second, f.XID_ERRORS), strict=True)
    assert all(a is b for a, b in pairs)

    pods.hold(ContainerDevices("ml", "train-a", "main", "nvidia.com/gpu", (whole,)))
    held = collect()
    assert {"pod": "train-a"}.items() <= next(
        labels for labels in _labels_of(held, f.GPU_UTIL) if labels["UUID"] == whole
    ).items()

    pods.hold(ContainerDevices("ml", "train-b", "main", "nvidia.com/gpu", (whole,)))  # the pod moved
    moved = collect()
    text = expositions["legacy"].render("", "")[0].decode()
    assert 'pod="train-b"' in text and 'pod="train-a"' not in text
    xid_labels = next(labels for labels in _labels_of(moved, f.XID_ERRORS) if labels["UUID"] == whole)
    assert xid_labels["pod"] == "train-b"

    xids.record(whole, 79)
    xids.record(whole, 79)
    collect()
    assert 'err_code="79"' in expositions["dcgm-4.7"].render("", "")[0].decode()

    library.reconfigure_mig(0, instances[:1])
    for _ in range(3):
        after = collect()
    assert len({s.labels["GPU_I_ID"] for s in after.series[f.FB_USED] if "GPU_I_ID" in s.labels}) == 1

    pods.hold()  # the pod left
    gone = collect()
    assert all("pod" not in labels for labels in _labels_of(gone, f.GPU_UTIL))
