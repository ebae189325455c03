"""Many clusters through one query view: the reaper acts on its own cluster's findings only.

Clusters built from one GitOps repository share their names, so the tests give two clusters the same
namespace and Deployment and check that the one whose finding belongs to the other cluster is never
planned, written, or told about.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from common.errors import BadInputError
from common.model import Finding, FindingKind, FindingsReport, TimeWindow
from common.thresholds import Thresholds
from harness.findings import NOW, finding, report
from harness.gpu_workloads import gpu_spec
from reaper import analysis
from reaper.analysis import PrometheusConfig, metrics_source
from reaper.clusters import split_by_cluster
from reaper.history import FindingsSource
from reaper.kube_api import KubeApi
from reaper.plan_report import PlanView, render_plan_section
from reaper.planner import SkipReason
from reaper.policy import Policy, RunMode, explain
from reaper.runner import EXIT_OK, RunSettings, run
from simulation.fleet import Behaviour, Fleet, load_scenario, simulate
from simulation.fleet.scenario import Delivery
from simulation.fleet.truth import window_of
from simulation.in_memory_cluster import InMemoryCluster, fleet_objects, manifest
from simulation.in_memory_source import InMemorySource

LONG_AGO = NOW - timedelta(days=30)
POLICY: dict[str, Any] = {
    "safety": {"consecutiveRuns": 1},
    "rules": [{"name": "idle", "match": {"findings": ["idle_endpoint"]}, "action": "scale_to_zero"}],
}


def of(cluster: str | None, name: str, namespace: str = "serving") -> Finding:
    """An idle Deployment NAMESPACE/NAME, found in ``cluster`` (None: series without a cluster label)."""
    return finding(FindingKind.IDLE_ENDPOINT, name=name, namespace=namespace).model_copy(
        update={"cluster": cluster}
    )


def memory() -> InMemoryCluster:
    """Cluster a: serving/ranker (busy here, idle in cluster b, same name) and serving/api (idle here)."""
    return InMemoryCluster(
        [
            *(manifest("Namespace", n) for n in ("serving", "gpu-reaper")),
            *(
                manifest("Deployment", name, "serving", created=LONG_AGO, spec=gpu_spec(2))
                for name in ("ranker", "api")
            ),
        ]
    )


def settings(cluster: str | None, mode: RunMode = RunMode.APPLY, **policy: Any) -> RunSettings:
    return RunSettings(
        policy=Policy.model_validate({**POLICY, **policy}),
        mode=mode,
        namespace="gpu-reaper",
        end=NOW,
        cluster=cluster,
    )


def source(found: FindingsReport) -> FindingsSource:
    return lambda window, thresholds: found


def never() -> KubeApi:
    raise AssertionError("the run called the cluster")


# --- the split ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cluster", [None, "a"])
def test_findings_naming_no_cluster_are_all_the_reapers(cluster: str | None) -> None:
    found = report(of(None, "api"), of(None, "ranker"))
    split = split_by_cluster(found, cluster)
    assert split.own == found and split.others == 0 and split.refusal is None


def test_with_a_cluster_other_clusters_and_unplaceable_findings_are_set_aside() -> None:
    found = report(of("a", "api"), of("b", "ranker"), of("b", "api"), of(None, "ranker"))
    split = split_by_cluster(found, "a")
    assert [(f.cluster, f.workload.name) for f in split.own.findings] == [("a", "api")]
    assert split.others == 3  # b's two, and the one without a cluster next to findings that name one
    assert split.refusal is None
    assert split.describe_others() == "b (2 findings), 1 without a cluster"
    split.check()


@pytest.mark.parametrize(
    ("findings", "named"),
    [
        pytest.param(
            (of("b", "ranker"), of("a", "api"), of("a", "ranker")),
            "clusters a (2 findings), b (1 finding)",
            id="two-clusters",
        ),
        pytest.param((of("b", "ranker"),), "cluster b (1 finding)", id="one-named-cluster"),
        pytest.param(
            (of("b", "ranker"), of(None, "api")), "cluster b (1 finding), 1 without a cluster", id="with-null"
        ),
    ],
)
def test_without_a_cluster_findings_naming_clusters_are_refused(
    findings: tuple[Finding, ...], named: str
) -> None:
    split = split_by_cluster(report(*findings), None)
    assert split.own.findings == ()
    assert split.refusal is not None
    assert split.refusal.startswith(f"the findings are of {named}, and no cluster is configured")
    assert "--cluster NAME" in split.refusal and "cluster: in the policy" in split.refusal
    assert "\n" not in split.refusal
    with pytest.raises(BadInputError):
        split.check()


def test_a_cluster_with_none_of_the_findings_is_noticed() -> None:
    split = split_by_cluster(report(of("b", "ranker")), "prod-eu-1")
    assert split.none_own and split.own.findings == () and split.others == 1
    assert not split_by_cluster(report(), "prod-eu-1").none_own


# --- the run -----------------------------------------------------------------------------------------


def test_refused_before_any_call_to_the_cluster() -> None:
    found = report(of("a", "api"), of("b", "ranker"))
    with pytest.raises(BadInputError, match=r"clusters a \(1 finding\), b \(1 finding\)"):
        run(settings(None), source(found), never)


def test_other_clusters_findings_are_never_planned_nor_written_and_are_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = memory()
    found = report(of("b", "ranker"), of("a", "api"), of(None, "ranker"))
    with caplog.at_level("INFO"):
        result = run(settings("a"), source(found), lambda: cluster)
    assert result.exit_code == EXIT_OK
    assert result.summary_line() == (
        "gpu-reaper: mode=apply findings=1 other_clusters=2 planned=1 applied=1 skipped=0 failed=0"
    )
    assert result.plan is not None
    planned = [a.target.name for a in result.plan.actions] + [s.target.name for s in result.plan.skips]
    assert planned == ["api"]
    assert cluster.get("Deployment", "serving", "api")["spec"]["replicas"] == 0
    ranker = cluster.get("Deployment", "serving", "ranker")
    assert ranker["spec"]["replicas"] == 2 and not ranker["metadata"].get("annotations")
    assert result.metrics().findings == {"idle_endpoint": 1}
    assert "1 findings of cluster a; 2 set aside (b (1 finding), 1 without a cluster)" in caplog.text
    (event,) = cluster.objects("Event")
    assert event["involvedObject"]["name"] == "api"
    assert event["message"].startswith("[a] gpu-reaper: scale to zero")


def test_findings_without_a_cluster_are_the_configured_clusters_own() -> None:
    cluster = memory()
    result = run(settings("a"), source(report(of(None, "api"))), lambda: cluster)
    assert result.summary_line() == (
        "gpu-reaper: mode=apply findings=1 other_clusters=0 planned=1 applied=1 skipped=0 failed=0"
    )
    assert cluster.get("Deployment", "serving", "api")["spec"]["replicas"] == 0


def test_without_a_cluster_the_summary_line_is_unchanged() -> None:
    cluster = memory()
    result = run(settings(None), source(report(of(None, "api"))), lambda: cluster)
    assert result.summary_line() == "gpu-reaper: mode=apply findings=1 planned=1 applied=1 skipped=0 failed=0"
    (event,) = cluster.objects("Event")
    assert event["message"].startswith("gpu-reaper: ")


def test_a_mistyped_cluster_warns(caplog: pytest.LogCaptureFixture) -> None:
    result = run(settings("prod-eu-l"), source(report(of("prod-eu-1", "api"))), memory)
    assert result.summary_line().startswith("gpu-reaper: mode=apply findings=0 other_clusters=1 planned=0")
    assert "no finding is of cluster prod-eu-l, all are of others (prod-eu-1 (1 finding))" in caplog.text


def test_a_dry_runs_replayed_runs_see_only_the_clusters_own_findings() -> None:
    """Each earlier window is analysed again; b's colliding finding must confirm nothing in a."""
    windows: list[TimeWindow] = []

    def analysis(window: TimeWindow, thresholds: Thresholds) -> FindingsReport:
        windows.append(window)
        found = (of("a", "api"), of("b", "ranker"))
        return report(*(f.model_copy(update={"window": window}) for f in found), window=window)

    cluster = memory()
    dry = RunSettings(
        policy=Policy.model_validate({**POLICY, "safety": {"consecutiveRuns": 3}}),
        mode=RunMode.DRY_RUN,
        namespace="gpu-reaper",
        end=NOW,
        run_interval=timedelta(hours=1),
        cluster="a",
    )
    result = run(dry, analysis, lambda: cluster)
    assert len(windows) == 3  # this run and two replayed ones
    assert result.replay is not None
    assert {key for key in result.replay.state.entries if "ranker" in key} == set()
    assert result.plan is not None
    ((action, confirmations),) = [(a.target.name, a.confirmations) for a in result.plan.actions]
    assert (action, confirmations) == ("api", 3)
    assert all(s.reason is not SkipReason.AWAITING_CONFIRMATION for s in result.plan.skips)
    assert result.summary_line() == (
        "gpu-reaper: mode=dry-run findings=1 other_clusters=1 planned=1 applied=0 skipped=0 failed=0"
    )


# --- the in-process analysis -------------------------------------------------------------------------


def two_simulated_clusters() -> tuple[Fleet, InMemorySource]:
    """Cluster a and cluster b in one TSDB, same names: legacy-ranker idles in b only (it serves in
    a), chat-api idles in a only."""
    base = load_scenario("standard")
    swap = {"legacy-ranker": Behaviour.SERVING, "chat-api": Behaviour.IDLE}
    swapped = tuple(
        w.model_copy(update={"behaviour": swap[w.name]}) if w.name in swap else w for w in base.workloads
    )
    a = simulate(base.model_copy(update={"delivery": Delivery(cluster="a"), "workloads": swapped}))
    b = simulate(base.model_copy(update={"delivery": Delivery(cluster="b")}))
    return a, InMemorySource([*a.series, *b.series], "two clusters in one TSDB")


def test_the_analysis_reads_the_reapers_cluster_alone() -> None:
    fleet, tsdb = two_simulated_clusters()
    cluster = InMemoryCluster(fleet_objects(fleet))
    window = window_of(fleet)
    at = RunSettings(
        policy=Policy.model_validate(POLICY), mode=RunMode.APPLY, namespace="gpu-reaper", end=window.end
    )
    result = run(replace(at, cluster="a"), metrics_source(tsdb, cluster="a"), lambda: cluster)
    assert result.found is not None and result.plan is not None
    assert {f.cluster for f in result.found.findings} == {"a"}
    assert result.other_clusters == 0  # restricted at the source: nothing of b's was even read
    assert "chat-api" in [a.target.name for a in result.plan.actions]
    assert cluster.get("Deployment", "serving", "chat-api")["spec"]["replicas"] == 0
    assert "legacy-ranker" not in {a.target.name for a in result.plan.actions} | {
        s.target.name for s in result.plan.skips
    }
    assert cluster.get("Deployment", "serving", "legacy-ranker")["spec"]["replicas"] > 0
    # Unrestricted, the same query view is refused: the reaper would not know which cluster it is in.
    with pytest.raises(BadInputError, match=r"the findings are of clusters a .*, b "):
        run(at, metrics_source(tsdb), never)


@pytest.mark.parametrize(
    ("held", "restricted"),
    # Where no series names a cluster, the configured one is asked for all the same: the analyzer
    # refuses a name the data does not carry, as `gpu-analyzer analyze --cluster` does.
    [(["b", "prod-eu-1"], ("prod-eu-1",)), ([], ("prod-eu-1",))],
    ids=["query view of many clusters", "the cluster's own unlabelled Prometheus"],
)
def test_prometheus_source_restricts_the_analysis_to_the_cluster(
    monkeypatch: pytest.MonkeyPatch, held: list[str], restricted: tuple[str, ...]
) -> None:
    from analyzer.sources.prometheus.source import PrometheusSource

    seen: list[dict[str, Any]] = []

    def spy(source: Any, window: TimeWindow, thresholds: Thresholds, **options: Any) -> FindingsReport:
        seen.append({**options, "label": source.cluster_label})
        return report(window=window)

    monkeypatch.setattr(analysis, "analyze", spy)
    monkeypatch.setattr(PrometheusSource, "clusters", lambda self, window, thresholds: held)
    config = PrometheusConfig.from_options("http://127.0.0.1:9", env={})
    window = TimeWindow.ending(NOW, timedelta(hours=6))
    analysis.prometheus_source(config, cluster="prod-eu-1", cluster_label="k8s_cluster")(window, Thresholds())
    analysis.prometheus_source(config)(window, Thresholds())
    assert [(s["clusters"], s["label"]) for s in seen] == [(restricted, "k8s_cluster"), ((), "cluster")]


# --- the policy and the report -----------------------------------------------------------------------


def test_the_policy_names_its_cluster_and_explains_it() -> None:
    policy = Policy.model_validate({**POLICY, "cluster": "prod-eu-1"})
    assert policy.cluster == "prod-eu-1"
    assert "cluster: prod-eu-1 (acts only on its findings; --cluster overrides)" in explain(policy)
    assert "cluster: none configured" in explain(Policy.model_validate(POLICY))


def test_the_plan_in_the_html_report_names_the_cluster_and_what_was_set_aside() -> None:
    cluster = memory()
    result = run(settings("a"), source(report(of("a", "api"), of("b", "ranker"))), lambda: cluster)
    view = PlanView(
        mode=result.mode,
        policy=Policy.model_validate(POLICY),
        plan=result.plan,
        results=result.results,
        cluster=result.cluster,
        other_clusters=result.other_clusters,
    )
    section = str(render_plan_section(view))
    assert "cluster a (1 finding of other clusters set aside)" in section
    assert "ranker" not in section
