"""The clusters benchmark's fleets: K clusters of colliding names, and the same series as one cluster.

Its ratio (K clusters ÷ one cluster) is only worth something if both fleets hold the same samples
and workloads, labelled as intended; and its agreement check only if it tells equal findings from
different ones.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from benchmarks.bench_fleet import ClusterSplit, SliceStats, sliced_fleet
from benchmarks.clusters_bench import agreement
from simulation.fleet import Series

WINDOW, AGE, STEP = timedelta(hours=6), timedelta(hours=12), timedelta(seconds=60)
GPUS, CLUSTERS = 56, 3  # 7 nodes: 2, 2 and 3 per cluster


def _fleet(labelled: bool) -> tuple[list[Series], SliceStats]:
    stats = SliceStats()
    split = ClusterSplit(CLUSTERS, labelled)
    return list(sliced_fleet(GPUS, [WINDOW], AGE, STEP, stats, 100_000, split)), stats


def _by_cluster(series: list[Series], label: str) -> dict[str | None, set[str]]:
    out: dict[str | None, set[str]] = defaultdict(set)
    for s in series:
        value = s.label(label)
        if value is not None:
            out[s.label("cluster")].add(value)
    return out


def test_nodes_are_split_evenly_between_clusters() -> None:
    assert ClusterSplit(10, True).nodes(1000) == [12, 13, 12, 13, 12, 13, 12, 13, 12, 13]
    assert ClusterSplit(10, True).nodes(10_000) == [125] * 10
    with pytest.raises(ValueError, match="fewer nodes"):
        ClusterSplit(3, True).nodes(16)


def test_labelled_clusters_share_their_names_but_not_their_ids() -> None:
    series, stats = _fleet(labelled=True)
    assert stats.slices == GPUS // 8  # one node per slice here: clusters are cut into slices too
    assert {s.label("cluster") for s in series} == {"c0", "c1", "c2"}
    nodes = _by_cluster(series, "Hostname")
    assert nodes == {
        "c0": {"gpu-0000", "gpu-0001"},
        "c1": {"gpu-0000", "gpu-0001"},
        "c2": {"gpu-0000", "gpu-0001", "gpu-0002"},
    }
    owners = _by_cluster([s for s in series if s.name == "kube_pod_owner"], "owner_name")
    assert owners["c0"] == owners["c1"] and owners["c0"] < owners["c2"]
    pods = _by_cluster(series, "pod")
    assert pods["c0"] == pods["c1"], "the same workloads' pods have the same names in every cluster"
    # GPU UUIDs and pod UIDs are each cluster's own.
    for label in ("UUID", "uid"):
        ids = _by_cluster(series, label)
        assert not ids["c0"] & ids["c1"] and not ids["c1"] & ids["c2"] and not ids["c0"] & ids["c2"]
    assert sum(len(v) for v in _by_cluster(series, "UUID").values()) == GPUS
    assert len({(s.name, s.labels) for s in series}) == len(series)


def _merged_labels(s: Series) -> tuple[tuple[str, str], ...]:
    """What the one-cluster fleet should call a labelled series."""
    labels = dict(s.labels)
    cluster = labels.pop("cluster")
    if "namespace" in labels:
        labels["namespace"] = f"{cluster}-{labels['namespace']}"
    for key in ("Hostname", "node", "instance"):
        if labels.get(key, "").startswith("gpu-"):
            labels[key] = f"{cluster}-{labels[key]}"
    return tuple(sorted(labels.items()))


def test_the_one_cluster_fleet_is_the_same_series_with_unique_names_and_no_cluster() -> None:
    labelled, labelled_stats = _fleet(labelled=True)
    merged, merged_stats = _fleet(labelled=False)
    assert all(s.label("cluster") is None for s in merged)
    by_key = {(s.name, s.labels): s for s in merged}
    assert len(by_key) == len(merged), "names must be unique in one cluster"
    assert {s.label("Hostname") for s in merged} - {None} == {
        f"c{k}-gpu-000{n}" for k, count in enumerate([2, 2, 3]) for n in range(count)
    }
    for s in labelled:
        twin = by_key.pop((s.name, _merged_labels(s)))
        np.testing.assert_array_equal(twin.timestamps, s.timestamps)
        np.testing.assert_array_equal(twin.values, s.values)
    assert not by_key
    # One ground truth for both, in the one cluster's names.
    truth = merged_stats.truth[WINDOW.total_seconds()]
    assert labelled_stats.truth == merged_stats.truth
    assert {ref.namespace.split("-")[0] or ref.name.split("-")[0] for ref in truth} == {"c0", "c1", "c2"}


def _finding(cluster: str | None, namespace: str, node: str, **more: Any) -> dict[str, Any]:
    return {
        "kind": "idle_endpoint",
        "cluster": cluster,
        "workload": {"kind": "Deployment", "name": "chat-0001", "namespace": namespace},
        "pods": ["chat-0001-abc-c0-xyz"],
        "nodes": [node],
        "gpus": [f"GPU-{cluster or namespace}"],
        "evidence": {"mean_util_percent": 0.5},
        "recommendation": f"Scale Deployment {namespace}/chat-0001 to zero (on {node}).",
        **more,
    }


def test_the_agreement_check_maps_names_and_catches_a_difference() -> None:
    split = [_finding("c0", "serving", "gpu-0000"), _finding("c1", "serving", "gpu-0000")]
    one = [
        _finding(None, "c0-serving", "c0-gpu-0000") | {"gpus": ["GPU-c0"]},
        _finding(None, "c1-serving", "c1-gpu-0000") | {"gpus": ["GPU-c1"]},
    ]
    result = agreement(split, one)
    assert result["agree"] and result["per_cluster"] == {"c0": [1, 1], "c1": [1, 1]}
    one[1]["evidence"] = {"mean_util_percent": 0.6}
    result = agreement(split, one)
    assert not result["agree"] and result["per_cluster"]["c1"] == [0, 1]
    assert result["differences"] == ["c1: idle_endpoint c1-serving/Deployment/chat-0001: evidence"]
    result = agreement(split[:1], [*one[:1], _finding(None, "c2-serving", "c2-gpu-0000")])
    assert not result["agree"] and result["only_in_one"] == 1
