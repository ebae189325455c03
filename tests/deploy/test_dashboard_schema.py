"""The dashboards are well-formed Grafana JSON that any Prometheus data source can drive.

Grafana cannot run here, so these check what Grafana needs from the files: unique ids, panels that
fit the grid without overlapping, the data source chosen through a variable (never a hard-coded
uid), every selector scoped to the `$cluster` variable and every query to the dashboard's
`$namespace` and `$node` variables, and queries that parse as PromQL once the variables are filled in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import promql_parser
import pytest

from harness.grafana import (
    DASHBOARDS_DIR,
    PanelQuery,
    dashboard_files,
    load,
    panel_queries,
    panels,
    to_promql,
    variable_query,
    variables,
    with_placeholders,
)
from harness.promql import metric_names, selectors

DASHBOARDS = dashboard_files()
QUERIES = [q for path in DASHBOARDS for q in panel_queries(path)]
EXPECTED = {"fleet", "waste", "workload", "node", "starvation", "chargeback"}


def _datasource_refs(node: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every `datasource` value anywhere in the JSON, with where it was found."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                found.append((f"{path}.{key}", value))
            found.extend(_datasource_refs(value, f"{path}.{key}"))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            found.extend(_datasource_refs(item, f"{path}[{i}]"))
    return found


def test_the_six_dashboards_exist_with_unique_uids_and_titles() -> None:
    loaded = [load(p) for p in DASHBOARDS]
    assert {p.stem for p in DASHBOARDS} == EXPECTED
    assert len({d["uid"] for d in loaded}) == len(loaded)
    assert len({d["title"] for d in loaded}) == len(loaded)
    assert all(len(d["uid"]) <= 40 for d in loaded), "Grafana uids are at most 40 characters"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_panel_ids_are_unique(path: Path) -> None:
    ids = [p["id"] for p in panels(load(path))]
    assert len(ids) == len(set(ids)), sorted(ids)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_panels_fit_the_grid_without_overlapping(path: Path) -> None:
    boxes = [(p["title"], p["gridPos"]) for p in panels(load(path))]
    for title, g in boxes:
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, title
    for i, (a_title, a) in enumerate(boxes):
        for b_title, b in boxes[i + 1 :]:
            apart = (
                a["x"] + a["w"] <= b["x"]
                or b["x"] + b["w"] <= a["x"]
                or a["y"] + a["h"] <= b["y"]
                or b["y"] + b["h"] <= a["y"]
            )
            assert apart, f"{a_title!r} overlaps {b_title!r}"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_datasource_is_a_variable_never_a_hardcoded_uid(path: Path) -> None:
    dashboard = load(path)
    assert "__inputs" not in dashboard, "export for sharing externally off: inputs need a manual import"
    (ds,) = [v for v in variables(dashboard) if v["name"] == "datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    refs = _datasource_refs(dashboard)
    assert refs
    for where, ref in refs:
        assert ref == {"type": "prometheus", "uid": "${datasource}"}, where


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_cluster_is_a_variable_that_defaults_to_all(path: Path) -> None:
    (cluster,) = [v for v in variables(load(path)) if v["name"] == "cluster"]
    assert cluster["includeAll"] and cluster["allValue"] == ".*"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_panel_says_what_it_shows_and_queries_something(path: Path) -> None:
    for p in panels(load(path)):
        if p["type"] == "row":
            continue
        assert p.get("description"), p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q.id)
def test_query_parses_and_every_selector_is_scoped_to_the_cluster(query: PanelQuery) -> None:
    assert "$cluster" in query.expr
    expr = with_placeholders(query.expr)
    promql_parser.parse(expr)
    for selector in selectors(expr):
        scoped = [m for m in selector.matchers.matchers if m.name == "cluster"]
        assert scoped, f"{selector.name} is not filtered by $cluster in {query.id}"


#: Variable → the labels that carry it. The reaper's pushed series and the exporters' own (scrape
#: health, last collection) have neither a namespace nor a node: they are filtered by cluster only.
SCOPES = {"namespace": {"namespace"}, "pod": {"pod"}, "node": {"Hostname", "hostname"}}


#: The chargeback rollups' parts about the fleet's GPUs, not about any namespace's pods.
FLEET_PARTS = frozenset({"reported", "unallocated", "instances", "evaluations"})


def _cluster_wide(expr: str) -> bool:
    return all(
        n == "up" or n.startswith(("gpu_reaper_", "gpu_exporter_"))
        for n in metric_names(with_placeholders(expr))
    ) or all(
        any(m.name == "chargeback_part" and m.value in FLEET_PARTS for m in s.matchers.matchers)
        for s in selectors(with_placeholders(expr))
    )


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_query_is_filtered_by_the_dashboards_namespace_pod_and_node(path: Path) -> None:
    names = {v["name"] for v in variables(load(path))}
    for variable, labels in SCOPES.items():
        if variable not in names:
            continue
        for query in panel_queries(path):
            if _cluster_wide(query.expr):
                continue
            filtered = [
                m
                for s in selectors(with_placeholders(query.expr.replace(f"${variable}", "FILTERED")))
                for m in s.matchers.matchers
                if m.name in labels and "FILTERED" in m.value
            ]
            assert filtered, f"{query.id} ignores ${variable}"


def test_the_reapers_runs_have_panels() -> None:
    """What the reaper pushes after each run: its actions by outcome, its findings, GPU-hours freed."""
    read = {
        n
        for q in panel_queries(DASHBOARDS_DIR / "waste.json")
        for n in metric_names(with_placeholders(q.expr))
    }
    assert {"gpu_reaper_actions_total", "gpu_reaper_findings", "gpu_reaper_reclaimed_gpu_hours"} <= read


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_variable_queries_parse(path: Path) -> None:
    dashboard = load(path)
    for v in variables(dashboard):
        if v["type"] == "query":
            promql_parser.parse(with_placeholders(to_promql(variable_query(v))))
