"""Every dashboard query, on what each exporter really serves, in one cluster and in two.

Four real Prometheus servers, one per fleet: those of :mod:`harness.exporter_datasets` —
dcgm-exporter 4.x's series as it labels them, gpu-exporter's exposition from its own collection path,
and two clusters (``cluster="a"``/``"b"``, colliding node names and GPU UUIDs) as a Thanos, Mimir or
VictoriaMetrics user queries them — and dcgm-exporter 4.9's: the same nodes in DCGM 4.7's naming
(ratios, bytes, hertz, joules, ``hostname``), where every panel must still show its own unit. The
dashboards' variables are resolved the way Grafana would, once with "All" wherever a variable offers
it and once with one value each; every query must then

* answer without error (no ``many-to-many`` or other matching errors),
* return data, except where it reads only what gpu-exporter serves (its sample histogram, XID counter,
  ``gpu_up`` and self-metrics): on dcgm-exporter those panels stay empty, as their descriptions say,
* in the unit its panel (or table column) claims: percentages within 0–100, ratios within 0–1, MiB
  not bytes, and so on;

and with both clusters selected, a breakdown never adds two clusters together: each row keeps its
``cluster`` label and its value on one cluster alone; only totals combine the selected clusters.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import ExitStack
from functools import cache

import promql_parser
import pytest

from harness.exporter_datasets import BENCH, CAROL, DATASETS, DCGM_NODE, MIG_IDLE, OUR_NODE, dcgm_cluster
from harness.extra_fleet import END_S
from harness.grafana import (
    PanelQuery,
    dashboard_files,
    interpolate,
    load,
    panel_queries,
    raw_series_dashboard_files,
    resolve,
    with_placeholders,
)
from harness.promql import instant, metric_names
from harness.servers import PrometheusServer, backfill_blocks
from simulation.fleet import Series
from simulation.fleet.naming import renamed

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]


def dcgm_exporter_4_9() -> list[Series]:
    """dcgm-exporter 4.9's series of the dcgm-exporter fleet: DCGM 4.7's names, units and labels."""
    return [renamed(s) for s in dcgm_cluster()]


FLEETS = {**DATASETS, "dcgm-exporter-4.9": dcgm_exporter_4_9}
#: The fleets served by dcgm-exporter alone, in either naming.
DCGM_EXPORTER = ("dcgm-exporter", "dcgm-exporter-4.9")
QUERIES = [q for path in raw_series_dashboard_files() for q in panel_queries(path)]
#: One value per variable where "All" is not wanted: a Job's pod on an exclusive GPU has every series
#: of both exporters (a pod on a shared GPU has, from gpu-exporter, only its share); cluster b and its
#: gpu-exporter node run both exporters. A choice that is not offered falls back to the first option.
CHOICES = {
    "namespace": BENCH.namespace,
    "workload": BENCH.owner_name,
    "pod": BENCH.name,
    "cluster": "b",
    "node": OUR_NODE,
}
#: What only gpu-exporter serves.
GPU_EXPORTER_ONLY = frozenset(
    {
        "gpu_up",
        "gpu_xid_errors_total",
        "gpu_utilization_samples_percent_bucket",
        "gpu_utilization_samples_percent_count",
        "gpu_utilization_samples_percent_sum",
        "gpu_exporter_last_collect_timestamp_seconds",
    }
)
#: Bounds of the values a unit allows. MiB are bounded so that bytes (≥ 1e9 for any GPU) fail.
BOUNDS = {
    "percent": (0.0, 100.0),
    "percentunit": (0.0, 1.0),
    "celsius": (0.0, 125.0),
    "rotmhz": (0.0, 5000.0),
    "mbytes": (0.0, 1e7),
    "watt": (0.0, 1e5),
    "kwatth": (0.0, 1e5),
    "h": (0.0, math.inf),
    "s": (0.0, math.inf),
    "currencyUSD": (0.0, math.inf),
    "short": (-math.inf, math.inf),
}


@pytest.fixture(scope="module")
def fleets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, PrometheusServer]]:
    with ExitStack() as stack:
        servers = {}
        for name, build in FLEETS.items():
            blocks = backfill_blocks(build(), tmp_path_factory.mktemp(f"{name}-blocks"))
            servers[name] = stack.enter_context(
                PrometheusServer(tmp_path_factory.mktemp(name), blocks=blocks)
            )
        yield servers


@cache
def _variables(url: str, dashboard: str, every_value: bool, cluster: str | None = None) -> dict[str, str]:
    path = next(p for p in dashboard_files() if p.stem == dashboard)
    values = resolve(load(path), lambda e: instant(url, e, END_S), CHOICES, every_value=every_value)
    if cluster is not None:  # one cluster: the other variables keep what they offered for all of them
        values["cluster"] = cluster
    return values


def _run(
    server: PrometheusServer, query: PanelQuery, every_value: bool, cluster: str | None = None
) -> list[dict]:
    expr = interpolate(query.expr, _variables(server.url, query.dashboard, every_value, cluster))
    return instant(server.url, expr, END_S)


def _gpu_exporter_only(expr: str) -> bool:
    gpu = {
        n
        for n in metric_names(with_placeholders(expr))
        if n.startswith(("DCGM_", "gpu_")) and not n.startswith("gpu_reaper_")
    }
    return bool(gpu) and gpu <= GPU_EXPORTER_ONLY


def _in_unit(query: PanelQuery, result: list[dict]) -> None:
    low, high = BOUNDS[query.unit]
    for item in result:
        value = float(item["value"][1])
        assert math.isfinite(value) and low <= value <= high, (
            f"{query.id}: {value} is not {query.unit} (allowed {low}..{high}) at {item['metric']}"
        )


def _ids(query: PanelQuery) -> str:
    return query.id


@pytest.mark.parametrize("dataset", list(FLEETS))
@pytest.mark.parametrize("query", QUERIES, ids=_ids)
def test_query_returns_data_in_its_unit(
    fleets: dict[str, PrometheusServer], dataset: str, query: PanelQuery
) -> None:
    for every_value in (True, False):
        result = _run(fleets[dataset], query, every_value)  # raises on a Prometheus error
        where = f"{query.id} on {dataset} ({'All' if every_value else 'one value each'})"
        if dataset in DCGM_EXPORTER and _gpu_exporter_only(query.expr):
            assert result == [], f"{where} reads only gpu-exporter's series, yet answered"
            continue
        assert result, f"{where}: no data\n{query.expr}"
        _in_unit(query, result)


def test_some_panels_need_gpu_exporter_and_most_do_not() -> None:
    """Guards the exemption above: it covers the few queries documented as gpu-exporter's only."""
    assert sorted(q.id for q in QUERIES if _gpu_exporter_only(q.expr)) == [
        "node/Exporter targets/B",  # the age of its last collection
        "node/GPU readable (gpu-exporter)/A",
        "node/XIDs in range (gpu-exporter)/A",
        "starvation/Bimodal pods over the range/A",
        "starvation/Bimodal pods over the range/B",
        "starvation/Sample mean vs scrape gauge/A",  # the samples' mean; the gauge is DCGM's
        "starvation/Stalled and busy shares/A",
        "starvation/Stalled and busy shares/B",
        "starvation/Utilization samples over time/A",
        "workload/Utilization samples (gpu-exporter)/A",
    ]


def _key(metric: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(metric.items()))


def _additive(node: object) -> bool:
    """Whether an expression is a sum or count (times constants): its total over two clusters is the
    sum of its totals over each."""
    if isinstance(node, promql_parser.ParenExpr):
        return _additive(node.expr)
    if isinstance(node, promql_parser.AggregateExpr):
        return str(node.op) in ("sum", "count")
    multiplied = isinstance(node, promql_parser.BinaryExpr) and str(node.op) in ("*", "/")
    return multiplied and isinstance(node.rhs, promql_parser.NumberLiteral) and _additive(node.lhs)


@pytest.mark.parametrize("query", QUERIES, ids=_ids)
def test_breakdowns_keep_the_clusters_apart(fleets: dict[str, PrometheusServer], query: PanelQuery) -> None:
    server = fleets["two-clusters"]
    both = _run(server, query, every_value=True)
    each = {c: _run(server, query, every_value=True, cluster=c) for c in ("a", "b")}
    totals = all(set(item["metric"]) <= {"le"} for item in both)  # heatmaps total by bucket
    if totals:
        values = interpolate(query.expr, _variables(server.url, query.dashboard, True))
        if _additive(promql_parser.parse(values)):
            summed: dict[tuple[tuple[str, str], ...], float] = {}
            for c in ("a", "b"):
                for item in each[c]:
                    summed[_key(item["metric"])] = summed.get(_key(item["metric"]), 0.0) + float(
                        item["value"][1]
                    )
            got = {_key(item["metric"]): float(item["value"][1]) for item in both}
            assert got == pytest.approx(summed), f"{query.id}: the total is not the clusters' totals added up"
        return
    for item in both:
        assert "cluster" in item["metric"], f"{query.id} adds clusters together: {item['metric']}"
    for c, alone in each.items():
        mine = {_key(i["metric"]): float(i["value"][1]) for i in both if i["metric"]["cluster"] == c}
        theirs = {_key(i["metric"]): float(i["value"][1]) for i in alone}
        assert mine == pytest.approx(theirs, nan_ok=True), (
            f"{query.id}: cluster {c} differs when both are selected"
        )


def _panel(dashboard: str, title: str, ref: str = "A") -> PanelQuery:
    (query,) = [q for q in QUERIES if (q.dashboard, q.panel, q.ref) == (dashboard, title, ref)]
    return query


@pytest.mark.parametrize("dataset", [*DCGM_EXPORTER, "gpu-exporter"])
def test_a_shared_gpu_counts_once_as_allocated_and_its_idle_pod_shows(
    fleets: dict[str, PrometheusServer], dataset: str
) -> None:
    """dcgm-exporter copies a time-sliced GPU onto each pod; gpu-exporter serves it without pods and
    each pod's share apart. Either way the fleet counts it once among the allocated devices (with a
    Deployment's GPU, a Job's and a MIG instance: four), and the pod that holds a replica but computes
    nothing is listed as idle (gpu-exporter alone can tell it apart from its busy neighbours)."""
    server = fleets[dataset]
    (allocated,) = _run(server, _panel("fleet", "Allocated to pods"), every_value=True)
    assert float(allocated["value"][1]) == 4
    idle = {item["metric"]["pod"] for item in _run(server, _panel("fleet", "Idle GPUs held by pods"), True)}
    expected = {MIG_IDLE.name} | ({CAROL.name} if dataset == "gpu-exporter" else set())
    assert idle == expected


#: The per-GPU panels of dcgm-exporter's own dashboard (grafana.com 12239), as the node dashboard has them.
DCGM_DASHBOARD_PANELS = (
    "GPU utilization",
    "Memory used",
    "Power draw",
    "Temperature",
    "SM clock",
    "Last XID per GPU",
)


@pytest.mark.parametrize("dataset", DCGM_EXPORTER)
@pytest.mark.parametrize("title", DCGM_DASHBOARD_PANELS)
def test_the_panels_of_dcgm_exporters_dashboard_show_each_gpu_once(
    fleets: dict[str, PrometheusServer], title: str, dataset: str
) -> None:
    """One series per GPU (per MIG instance for memory), however many pods dcgm-exporter copied it onto,
    under the node label ``hostname`` whichever spelling the exporter wrote."""
    result = _run(fleets[dataset], _panel("node", title), every_value=True)
    devices = [(i["metric"]["hostname"], i["metric"]["gpu"], i["metric"].get("GPU_I_ID", "")) for i in result]
    assert len(devices) == len(set(devices)), f"{title}: a GPU drawn twice"
    assert {gpu for node, gpu, _ in devices if node == DCGM_NODE} == {"0", "1", "2", "3"}
