"""Lists at scale: the emulator pages like an API server, and the reaper reads only what a run needs.

The emulator's side is checked with the official client's generated API (what any Kubernetes client
sees); the reaper's side with its own adapter, counting the requests the emulator served.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from common.model import FindingKind, FindingsReport, WorkloadRef
from harness.findings import NOW, finding, report
from harness.gpu_workloads import gpu_spec
from harness.kube_emulator import EmulatedCluster, Fault
from reaper import adapter_errors as errors
from reaper import names
from reaper.cluster import read_snapshot
from reaper.executor import Executor
from reaper.kube import KubeClient, KubeSettings
from reaper.outcomes import Outcome
from reaper.planner import plan
from reaper.policy import Policy, RunMode
from simulation.in_memory_cluster import manifest

POLICY: dict[str, Any] = {
    "safety": {"consecutiveRuns": 1},
    "rules": [{"name": "idle", "match": {"findings": ["idle_endpoint"]}, "action": "scale_to_zero"}],
}
RANKER = WorkloadRef(kind="Deployment", name="ranker", namespace="serving")
GPU = {"capacity": {"nvidia.com/gpu": "8"}}
GFD = {"nvidia.com/gpu.present": "true"}


def nodes(count: int, labels: dict[str, str] | None = None, prefix: str = "gpu") -> list[dict[str, Any]]:
    return [manifest("Node", f"{prefix}-{i:02d}", labels=labels, spec={}, status=GPU) for i in range(count)]


def seed(cluster: EmulatedCluster, *objects: dict[str, Any]) -> None:
    cluster.seed([*(manifest("Namespace", n) for n in ("serving", "gpu-reaper")), *objects])


def idle(name: str) -> FindingsReport:
    return report(finding(FindingKind.IDLE_ENDPOINT, name=name))


def core(cluster: EmulatedCluster) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(cluster.client()._api)


def lists(cluster: EmulatedCluster, path: str) -> list[dict[str, list[str]]]:
    """The query of every list request on ``path``, in order."""
    return [
        parse_qs(urlsplit(url).query)
        for m, url in cluster.request_urls()
        if m == "GET" and url.split("?")[0] == path
    ]


# --- the emulator pages like an API server ---------------------------------------------------------


def test_limit_pages_with_an_opaque_token_and_a_remaining_count(cluster: EmulatedCluster) -> None:
    cluster.seed(nodes(5)[::-1])
    api = core(cluster)
    first = api.list_node(limit=2)
    assert [n.metadata.name for n in first.items] == ["gpu-00", "gpu-01"]
    assert first.metadata.remaining_item_count == 3 and first.metadata._continue
    second = api.list_node(limit=2, _continue=first.metadata._continue)
    last = api.list_node(limit=2, _continue=second.metadata._continue)
    assert [n.metadata.name for n in second.items + last.items] == ["gpu-02", "gpu-03", "gpu-04"]
    assert last.metadata._continue is None and last.metadata.remaining_item_count is None
    # Every page reports the resourceVersion the list started at.
    assert (
        first.metadata.resource_version == second.metadata.resource_version == last.metadata.resource_version
    )


def test_pages_are_cut_from_the_list_as_it_was_at_the_first_page(cluster: EmulatedCluster) -> None:
    cluster.seed(nodes(4))
    api = core(cluster)
    first = api.list_node(limit=2)
    cluster.client().patch("Node", None, "gpu-03", {"spec": {"unschedulable": True}})
    rest = api.list_node(limit=2, _continue=first.metadata._continue)
    assert [n.spec.unschedulable for n in rest.items] == [None, None]


def test_a_label_selector_filters_and_leaves_the_remainder_uncounted(cluster: EmulatedCluster) -> None:
    cluster.seed([*nodes(3, GFD), *nodes(2, prefix="cpu")])
    api = core(cluster)
    page = api.list_node(label_selector="nvidia.com/gpu.present=true", limit=2)
    assert [n.metadata.name for n in page.items] == ["gpu-00", "gpu-01"]
    assert page.metadata._continue and page.metadata.remaining_item_count is None
    assert [n.metadata.name for n in api.list_node(label_selector="!nvidia.com/gpu.present").items] == [
        "cpu-00",
        "cpu-01",
    ]
    with pytest.raises(ApiException) as caught:
        api.list_node(label_selector="a in b")
    assert caught.value.status == 400


def test_an_expired_or_foreign_continue_token_is_gone(cluster: EmulatedCluster) -> None:
    cluster.seed([*nodes(3), *(manifest("Namespace", f"team-{i}") for i in range(3))])
    api = core(cluster)
    token = api.list_node(limit=1).metadata._continue
    with pytest.raises(ApiException) as foreign:
        api.list_namespace(limit=1, _continue=token)
    cluster.call(cluster.server.compact)
    with pytest.raises(ApiException) as expired:
        api.list_node(limit=1, _continue=token)
    for caught in (foreign, expired):
        assert caught.value.status == 410 and '"reason":"Expired"' in caught.value.body.replace(" ", "")
    with pytest.raises(ApiException) as garbled:
        api.list_node(limit=1, _continue="not-a-token")
    assert garbled.value.status == 400


@pytest.mark.parametrize(("cache_pages", "first_page"), [(False, 5), (True, 2)], ids=["older", "newer"])
def test_resource_version_0_is_served_from_the_watch_cache(
    cluster: EmulatedCluster, cache_pages: bool, first_page: int
) -> None:
    # Older servers ignore limit when the watch cache serves resourceVersion=0; newer ones page it.
    cluster.seed(nodes(5))
    cluster.call(lambda: setattr(cluster.server, "cache_pages", cache_pages))
    page = core(cluster).list_node(limit=2, resource_version="0")
    assert len(page.items) == first_page
    assert bool(page.metadata._continue) is cache_pages


# --- the reaper's lists ----------------------------------------------------------------------------


def paged_client(cluster: EmulatedCluster, page_size: int) -> KubeClient:
    return KubeClient.from_settings(KubeSettings(kubeconfig=str(cluster.kubeconfig), page_size=page_size))


@pytest.mark.parametrize("cache_pages", [False, True], ids=["older", "newer"])
def test_the_reaper_pages_and_asks_the_cache_only_on_the_first_page(
    cluster: EmulatedCluster, cache_pages: bool
) -> None:
    cluster.seed(nodes(7))
    cluster.call(lambda: setattr(cluster.server, "cache_pages", cache_pages))
    client = paged_client(cluster, 3)
    assert [n["metadata"]["name"] for n in client.list_objects("Node", cached=True)] == [
        f"gpu-{i:02d}" for i in range(7)
    ]
    assert [n["metadata"]["name"] for n in client.list_objects("Node")] == [f"gpu-{i:02d}" for i in range(7)]
    queries = lists(cluster, "/api/v1/nodes")
    cached = queries[:3] if cache_pages else queries[:1]
    assert cached[0]["resourceVersion"] == ["0"] and all("resourceVersion" not in q for q in cached[1:])
    quorum = queries[len(cached) :]
    assert len(quorum) == 3 and all("resourceVersion" not in q for q in quorum)
    assert all(q["limit"] == ["3"] for q in queries)


def test_an_expired_continue_token_restarts_the_list_in_one_request(cluster: EmulatedCluster) -> None:
    cluster.seed(nodes(7))
    cluster.fail(Fault("GET", "Node", status=410, query="continue"))
    client = paged_client(cluster, 3)
    assert len(client.list_objects("Node")) == 7
    queries = lists(cluster, "/api/v1/nodes")
    assert [("continue" in q, "limit" in q) for q in queries] == [(False, True), (True, True), (False, False)]


def test_an_expired_first_page_is_an_error_not_a_loop(cluster: EmulatedCluster) -> None:
    cluster.seed(nodes(2))
    cluster.fail(Fault("GET", "Node", status=410))
    with pytest.raises(errors.ExpiredError):
        paged_client(cluster, 3).list_objects("Node")


def test_gpu_nodes_are_listed_by_the_gpu_feature_discovery_label(cluster: EmulatedCluster) -> None:
    seed(cluster, *nodes(3, GFD), *nodes(4, prefix="cpu"))
    snapshot = read_snapshot(cluster.client(), "gpu-reaper")
    assert sorted(snapshot.nodes) == ["gpu-00", "gpu-01", "gpu-02"]
    (query,) = lists(cluster, "/api/v1/nodes")
    assert query["labelSelector"] == ["nvidia.com/gpu.present=true"] and query["resourceVersion"] == ["0"]


def test_without_the_label_gpu_nodes_are_told_apart_by_their_capacity(cluster: EmulatedCluster) -> None:
    cpu = [manifest("Node", f"cpu-{i}", spec={}, status={"capacity": {"cpu": "64"}}) for i in range(3)]
    seed(cluster, *nodes(2), *cpu)
    snapshot = read_snapshot(cluster.client(), "gpu-reaper")
    assert sorted(snapshot.nodes) == ["gpu-00", "gpu-01"] and snapshot.gpu_node_count == 2
    assert [q.get("labelSelector") for q in lists(cluster, "/api/v1/nodes")] == [
        ["nvidia.com/gpu.present=true"],
        None,
    ]


def test_a_policy_names_its_own_gpu_node_selector(cluster: EmulatedCluster) -> None:
    amd = {"amd.com/gpu.present": "yes"}
    seed(cluster, *nodes(2, amd, prefix="mi300"), *nodes(2, GFD))
    policy = Policy.model_validate({**POLICY, "gpuNodeSelector": {"matchLabels": amd}})
    snapshot = read_snapshot(cluster.client(), "gpu-reaper", policy.gpu_node_selector)
    assert sorted(snapshot.nodes) == ["mi300-00", "mi300-01"]


def test_a_stale_watch_cache_never_leads_to_a_write_on_stale_data(cluster: EmulatedCluster) -> None:
    # The cache lags: it still shows ranker without the opt-out its owner has just added.
    long_ago = NOW - timedelta(days=30)
    seed(cluster, manifest("Deployment", "ranker", "serving", created=long_ago, spec=gpu_spec(3)))
    cluster.call(cluster.server.freeze_cache)
    client = cluster.client()
    client.patch("Deployment", "serving", "ranker", {"metadata": {"annotations": {names.EXCLUDE: "true"}}})
    snapshot = read_snapshot(client, "gpu-reaper")
    assert names.EXCLUDE not in snapshot.workload(RANKER).annotations  # type: ignore[union-attr]
    the_plan = plan(idle("ranker"), snapshot, Policy.model_validate(POLICY), NOW)
    assert len(the_plan.actions) == 1
    executor = Executor(
        client, mode=RunMode.APPLY, namespace="gpu-reaper", clock=lambda: NOW, sleep=lambda s: None
    )
    (result,) = executor.execute(the_plan)
    # The patch carried the cached resourceVersion: 409, then a quorum read saw the opt-out.
    assert result.outcome is Outcome.SKIPPED
    assert cluster.obj("Deployment", "serving", "ranker")["spec"]["replicas"] == 3
    gets = [q for m, q in cluster.request_urls() if m == "GET" and q.endswith("/deployments/ranker")]
    assert gets, "the object about to be written is re-read, without resourceVersion (from etcd)"


def test_a_policy_without_a_gpu_node_selector_lists_every_node(cluster: EmulatedCluster) -> None:
    seed(cluster, *nodes(2, GFD), *nodes(1, prefix="unlabelled"))
    policy = Policy.model_validate({**POLICY, "gpuNodeSelector": None})
    snapshot = read_snapshot(cluster.client(), "gpu-reaper", policy.gpu_node_selector)
    assert sorted(snapshot.nodes) == ["gpu-00", "gpu-01", "unlabelled-00"]
    assert [q.get("labelSelector") for q in lists(cluster, "/api/v1/nodes")] == [None]


def test_restore_all_finds_what_a_run_stopped_even_when_the_cache_lags(cluster: EmulatedCluster) -> None:
    long_ago = NOW - timedelta(days=30)
    seed(cluster, manifest("Deployment", "ranker", "serving", created=long_ago, spec=gpu_spec(3)))
    client = cluster.client()
    executor = Executor(
        client, mode=RunMode.APPLY, namespace="gpu-reaper", clock=lambda: NOW, sleep=lambda s: None
    )
    the_plan = plan(idle("ranker"), read_snapshot(client, "gpu-reaper"), Policy.model_validate(POLICY), NOW)
    cluster.call(cluster.server.freeze_cache)  # the cache will not have seen the stop
    assert [r.outcome for r in executor.execute(the_plan)] == [Outcome.APPLIED]
    assert cluster.obj("Deployment", "serving", "ranker")["spec"]["replicas"] == 0
    (restored,) = executor.restore_all()
    assert restored.outcome is Outcome.APPLIED
    assert cluster.obj("Deployment", "serving", "ranker")["spec"]["replicas"] == 3
