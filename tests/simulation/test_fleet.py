"""The fleet simulator: deterministic, and every behaviour visible in the series it claims."""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from common.model import FindingKind, WorkloadRef
from simulation.fleet import (
    Fleet,
    Scenario,
    ScenarioError,
    Series,
    builtin_scenarios,
    expected_findings,
    load_scenario,
    prometheus_text_chunks,
    simulate,
    write_openmetrics,
)
from simulation.fleet.scenario import LabelStyle


def _pods(fleet: Fleet, name: str) -> set[str]:
    return {p.name for p in fleet.pods if p.workload.name == name}


def _gpu_values(fleet: Fleet, metric: str, workload: str, after: timedelta = timedelta(0)) -> np.ndarray:
    """Samples of ``metric`` on the workload's GPUs, from ``after`` past its pods' start."""
    pods = {p.name: p for p in fleet.pods if p.workload.name == workload}
    out = []
    for s in fleet.series_named(metric):
        pod = pods.get(s.label("pod") or s.label("exported_pod") or "")
        if pod is not None:
            out.append(s.values[s.timestamps > pod.start + after.total_seconds()])
    assert out, f"no {metric} series for {workload}"
    return np.concatenate(out)


def _pod_series(fleet: Fleet, metric: str, workload: str) -> list[Series]:
    names = _pods(fleet, workload)
    return [s for s in fleet.series_named(metric) if s.label("pod") in names]


def _node_gpu_series(fleet: Fleet, metric: str, node: str, gpu: str | None = None) -> list[Series]:
    return [
        s
        for s in fleet.series_named(metric)
        if s.label("Hostname") == node and (gpu is None or s.label("gpu") == gpu)
    ]


WARM = timedelta(minutes=15)


def test_same_seed_gives_identical_series(standard_fleet: Fleet) -> None:
    again = simulate(load_scenario("standard"))
    assert len(again.series) == len(standard_fleet.series)
    for a, b in zip(standard_fleet.series, again.series, strict=True):
        assert (a.name, a.labels) == (b.name, b.labels)
        np.testing.assert_array_equal(a.values, b.values)


def test_another_seed_changes_the_noise_not_the_shape(standard_fleet: Fleet) -> None:
    other = simulate(load_scenario("standard").model_copy(update={"seed": 8}))
    assert [(s.name, s.labels) for s in other.series] == [(s.name, s.labels) for s in standard_fleet.series]
    a = _gpu_values(standard_fleet, "DCGM_FI_DEV_GPU_UTIL", "chat-api")
    b = _gpu_values(other, "DCGM_FI_DEV_GPU_UTIL", "chat-api")
    assert not np.array_equal(a, b)


@pytest.mark.parametrize(
    ("workload", "low", "high"),
    [
        pytest.param("llm-pretrain", 75, 100, id="training-is-busy"),
        pytest.param("chat-api", 35, 85, id="serving-follows-traffic-never-idle"),
        pytest.param("legacy-ranker", 0, 2, id="idle-endpoint-at-most-2-percent"),
        pytest.param("notebook-alice", 5, 25, id="low-utilization-steady-low"),
        pytest.param("audio-train", 35, 60, id="cpu-starved-job-is-middling-and-flat"),
        pytest.param("tokenizer-bench", 30, 70, id="subsecond-stalls-average-out-in-the-gauge"),
    ],
)
def test_gauge_range_per_behaviour(standard_fleet: Fleet, workload: str, low: float, high: float) -> None:
    metric = (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
        if workload in ("llm-pretrain", "tokenizer-bench")
        else "DCGM_FI_DEV_GPU_UTIL"
    )
    values = _gpu_values(standard_fleet, metric, workload, after=WARM)
    if metric.startswith("DCGM_FI_PROF"):
        values = values * 100 / 0.97
    assert values.min() >= low - 1e-9
    assert values.max() <= high + 1e-9


def test_idle_endpoint_holds_memory(standard_fleet: Fleet) -> None:
    used = _gpu_values(standard_fleet, "DCGM_FI_DEV_FB_USED", "legacy-ranker", after=WARM)
    assert used.min() > 0.5 * 81559


def test_sawtooth_shows_both_states_in_scraped_samples(standard_fleet: Fleet) -> None:
    values = _gpu_values(standard_fleet, "DCGM_FI_DEV_GPU_UTIL", "vision-finetune", after=WARM)
    assert (values <= 10).mean() > 0.3
    assert (values >= 80).mean() > 0.3


def test_subsecond_stalls_only_visible_in_the_sample_histogram(standard_fleet: Fleet) -> None:
    def increase(metric: str, le: str | None) -> float:
        total = 0.0
        for s in _pod_series(standard_fleet, metric, "tokenizer-bench"):
            if le is None or s.label("le") == le:
                # Sum positive steps only: the exporter restarted (counter reset) during the run.
                total += float(np.clip(np.diff(s.values), 0, None).sum())
        return total

    count = increase("gpu_utilization_samples_percent_count", None)
    near_idle = increase("gpu_utilization_samples_percent_bucket", "10") / count
    busy = 1 - increase("gpu_utilization_samples_percent_bucket", "75") / count
    assert near_idle > 0.3
    assert busy > 0.3


def test_cpu_starved_pod_runs_at_its_cpu_limit_and_is_throttled(standard_fleet: Fleet) -> None:
    (usage,) = _pod_series(standard_fleet, "container_cpu_usage_seconds_total", "audio-train")
    (throttled,) = _pod_series(standard_fleet, "container_cpu_cfs_throttled_periods_total", "audio-train")
    (periods,) = _pod_series(standard_fleet, "container_cpu_cfs_periods_total", "audio-train")
    step = standard_fleet.scenario.step.total_seconds()
    rates = np.diff(usage.values) / step
    rates = rates[rates >= 0]  # the reset step is not a rate
    assert np.median(rates) >= 0.9 * 6
    assert (
        np.clip(np.diff(throttled.values), 0, None).sum() / np.clip(np.diff(periods.values), 0, None).sum()
        > 0.5
    )


def test_warmup_loads_memory_at_zero_utilization(standard_fleet: Fleet) -> None:
    (pod,) = [p for p in standard_fleet.pods if p.workload.name == "fresh-api"]
    (util,) = _pod_series(standard_fleet, "DCGM_FI_DEV_GPU_UTIL", "fresh-api")
    (used,) = _pod_series(standard_fleet, "DCGM_FI_DEV_FB_USED", "fresh-api")
    warming = util.timestamps < pod.start + 15 * 60
    assert warming.sum() >= 10
    assert (util.values[warming] == 0).all()
    assert (np.diff(used.values[warming]) > 0).all()
    assert util.values[~warming].min() >= 35


def test_exporter_gap_leaves_a_hole_only_in_gpu_series(standard_fleet: Fleet) -> None:
    sc = standard_fleet.scenario
    a, b = sc.at(-timedelta(hours=5)).timestamp(), sc.at(-timedelta(hours=2)).timestamp()
    for s in _node_gpu_series(standard_fleet, "DCGM_FI_DEV_GPU_UTIL", "gpu-d"):
        assert not ((s.timestamps > a) & (s.timestamps <= b)).any()
    (ksm,) = [
        s
        for s in standard_fleet.series_named("kube_pod_start_time")
        if s.label("pod") in _pods(standard_fleet, "translate")
    ]
    assert ((ksm.timestamps > a) & (ksm.timestamps <= b)).sum() == 180


def test_lost_gpu_stops_reporting_while_its_neighbours_continue(standard_fleet: Fleet) -> None:
    lost_at = standard_fleet.scenario.at(-timedelta(hours=2)).timestamp()
    lost = _node_gpu_series(standard_fleet, "DCGM_FI_DEV_GPU_UTIL", "gpu-e", gpu="0")
    assert max(s.timestamps.max() for s in lost) <= lost_at
    neighbour = _node_gpu_series(standard_fleet, "DCGM_FI_DEV_GPU_UTIL", "gpu-e", gpu="1")
    assert max(s.timestamps.max() for s in neighbour) == standard_fleet.scenario.end.timestamp()


@pytest.mark.parametrize(
    ("metric", "workload", "reset_offset"),
    [
        pytest.param(
            "container_cpu_usage_seconds_total",
            "audio-train",
            timedelta(hours=3),
            id="cadvisor-container-restart",
        ),
        pytest.param(
            "gpu_utilization_samples_percent_count", "llm-pretrain", timedelta(hours=9), id="exporter-restart"
        ),
    ],
)
def test_counters_reset_exactly_once_at_the_restart(
    standard_fleet: Fleet, metric: str, workload: str, reset_offset: timedelta
) -> None:
    at = standard_fleet.scenario.at(-reset_offset).timestamp()
    for s in _pod_series(standard_fleet, metric, workload):
        drops = np.nonzero(np.diff(s.values) < 0)[0]
        assert len(drops) == 1
        assert s.timestamps[drops[0]] <= at < s.timestamps[drops[0] + 1]


def test_mig_instances_report_profiling_but_no_device_utilization(standard_fleet: Fleet) -> None:
    assert not _node_gpu_series(standard_fleet, "DCGM_FI_DEV_GPU_UTIL", "gpu-mig")
    prof = _node_gpu_series(standard_fleet, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gpu-mig")
    assert {(s.label("gpu"), s.label("GPU_I_ID"), s.label("GPU_I_PROFILE")) for s in prof} == {
        (g, i, "3g.40gb") for g in ("0", "1") for i in ("0", "1")
    }
    idle = [s for s in prof if s.label("pod") in _pods(standard_fleet, "mig-idle")]
    assert idle
    assert all(s.values.max() <= 0.02 for s in idle)


def test_kube_state_metrics_resolve_pods_to_their_controllers(standard_fleet: Fleet) -> None:
    owners = {
        s.label("pod"): (s.label("owner_kind"), s.label("owner_name"))
        for s in standard_fleet.series_named("kube_pod_owner")
    }
    rs_owner = {
        s.label("replicaset"): (s.label("owner_kind"), s.label("owner_name"))
        for s in standard_fleet.series_named("kube_replicaset_owner")
    }
    (chat_pod, _) = sorted(_pods(standard_fleet, "chat-api"))
    kind, rs = owners[chat_pod]
    assert kind == "ReplicaSet"
    assert rs_owner[rs] == ("Deployment", "chat-api")
    assert owners["embeddings-0"] == ("StatefulSet", "embeddings")
    assert owners["debug-shell"] == ("<none>", "<none>")
    (sweep_pod,) = _pods(standard_fleet, "sweep-17")
    assert owners[sweep_pod] == ("Job", "sweep-17")
    gpu_requests = {
        s.label("pod"): s.values[0]
        for s in standard_fleet.series_named("kube_pod_container_resource_requests")
        if s.label("resource") == "nvidia_com_gpu"
    }
    (pretrain_pod,) = _pods(standard_fleet, "llm-pretrain")
    assert gpu_requests[pretrain_pod] == 4


def test_finished_job_leaves_no_series_after_it_ended(standard_fleet: Fleet) -> None:
    end = standard_fleet.scenario.at(-timedelta(hours=12)).timestamp()
    series = _pod_series(standard_fleet, "DCGM_FI_DEV_GPU_UTIL", "finished-eval")
    assert series
    assert all(s.timestamps.max() <= end for s in series)


def test_relabelled_scrape_and_ratio_units() -> None:
    sc = load_scenario("standard").model_copy(
        update={"labels": LabelStyle(hostname="hostname", pod_prefix="exported_"), "gpu_util_unit": "ratio"}
    )
    fleet = simulate(sc)
    util = list(fleet.series_named("DCGM_FI_DEV_GPU_UTIL"))
    assert all("Hostname" not in dict(s.labels) and "hostname" in dict(s.labels) for s in util)
    assert any(s.label("exported_pod") for s in util)
    assert not any(s.label("pod") for s in util)
    assert max(s.values.max() for s in util) <= 1.0


def test_ground_truth_of_the_standard_scenario(standard_fleet: Fleet) -> None:
    truth = {ref.key(): e.kind for ref, e in expected_findings(standard_fleet).items()}
    assert truth == {
        "serving/Deployment/chat-api": None,
        "serving/Deployment/legacy-ranker": FindingKind.IDLE_ENDPOINT,
        "serving/StatefulSet/embeddings": FindingKind.IDLE_ENDPOINT,  # 10-minute gap: coverage 97 %
        "team-b/Deployment/mig-idle": FindingKind.IDLE_ENDPOINT,
        "research/Job/vision-finetune": FindingKind.DATALOADER_STARVATION,
        "research/Job/audio-train": FindingKind.DATALOADER_STARVATION,
        "research/Job/tokenizer-bench": FindingKind.DATALOADER_STARVATION,
        "research/Deployment/notebook-alice": FindingKind.LOW_UTILIZATION,
        "team-a/Deployment/batch-scorer": FindingKind.LOW_UTILIZATION,
        "team-b/Pod/debug-shell": FindingKind.LOW_UTILIZATION,  # idle, but not a long-running kind
        "/Node/gpu-spare": FindingKind.LOW_UTILIZATION,
        "research/Job/llm-pretrain": None,
        "team-a/Deployment/new-model": FindingKind.UNKNOWN,  # inside its warm-up grace: too young
        "team-a/Deployment/fresh-api": FindingKind.UNKNOWN,  # 1.5 h judged of 6 h: too young
        "team-b/Deployment/mig-serving": None,
        "ml-platform/Deployment/gap-service": FindingKind.UNKNOWN,  # three hours without data
        "ml-platform/Deployment/translate": FindingKind.UNKNOWN,
        "research/Job/sweep-17": FindingKind.UNKNOWN,  # its GPU fell off the bus
    }


def test_ground_truth_follows_the_window(standard_fleet: Fleet) -> None:
    """Before the gap started, the gap-service was plainly idle."""
    from common.model import TimeWindow

    end = standard_fleet.scenario.at(-timedelta(hours=5))
    truth = expected_findings(standard_fleet, TimeWindow.ending(end, timedelta(hours=6)))
    assert (
        truth[WorkloadRef(kind="Deployment", name="gap-service", namespace="ml-platform")].kind
        is FindingKind.IDLE_ENDPOINT
    )


def test_openmetrics_and_prometheus_text_carry_the_same_samples() -> None:
    sc = Scenario.model_validate(
        {
            "name": "tiny",
            "end": "2026-01-01T00:00:00Z",
            "duration": "1h",
            "analysis_window": "30m",
            "nodes": [{"name": "a", "gpus": 2, "exporter": "gpu-exporter"}],
            "workloads": [{"namespace": "n", "name": "w", "behaviour": "serving"}],
        }
    )
    fleet = simulate(sc)
    om = io.StringIO()
    written = write_openmetrics(fleet.series, om)
    lines = om.getvalue().splitlines()
    assert lines[-1] == "# EOF"
    assert written == fleet.sample_count == len(lines) - 1
    text = b"".join(prometheus_text_chunks(fleet.series, max_bytes=1 << 16)).decode().splitlines()
    assert len(text) == written
    om_ts = float(lines[0].rsplit(" ", 1)[1])
    text_ts = int(text[0].rsplit(" ", 1)[1])
    assert text_ts == int(om_ts * 1000)


def test_builtin_scenarios_load() -> None:
    assert "standard" in builtin_scenarios()
    for name in builtin_scenarios():
        assert simulate(load_scenario(name)).sample_count > 0


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        pytest.param(
            "name: x\nend: 2026-01-01T00:00:00Z\nnodes: [{name: a, gpus: 1, colour: red}]\n",
            "nodes.0.colour",
            id="unknown-field",
        ),
        pytest.param(
            "name: x\nend: 2026-01-01T00:00:00Z\nnodes: [{name: a, gpus: 0}]\n", "nodes.0.gpus", id="no-gpus"
        ),
        pytest.param(
            "name: x\nend: 2026-01-01T00:00:00Z\nstep: soon\nnodes: [{name: a, gpus: 1}]\n",
            "invalid duration",
            id="bad-duration",
        ),
        pytest.param(
            "name: x\nend: 2026-01-01T00:00:00\nnodes: [{name: a, gpus: 1}]\n", "timezone", id="naive-time"
        ),
        pytest.param(
            "name: x\nend: 2026-01-01T00:00:00Z\nnodes: [{name: a, gpus: 1}]\n"
            "workloads: [{namespace: n, name: w, behaviour: idle, node: b}]\n",
            "unknown node 'b'",
            id="pinned-to-missing-node",
        ),
        pytest.param(
            "name: x\nend: 2026-01-01T00:00:00Z\nnodes: [{name: a, gpus: 1}]\n"
            "workloads: [{namespace: n, name: w, behaviour: starvation_subsecond, node: a}]\n",
            "gpu-exporter",
            id="subsecond-needs-our-exporter",
        ),
        pytest.param(
            "name: x\nend: 2026-01-01T00:00:00Z\nnodes: [{name: a, gpus: 1}]\n"
            "gpu_util_unit: ratio\nutil_scale: ratio\n",
            "util_scale is the earlier name of gpu_util_unit",
            id="both-unit-keys",
        ),
        pytest.param("- just\n- a list\n", "YAML mapping", id="not-a-mapping"),
        pytest.param("name: [unclosed\n", "not valid YAML", id="not-yaml"),
    ],
)
def test_bad_scenarios_name_file_and_field(tmp_path: Path, yaml_text: str, message: str) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(path) in str(err.value)
    assert message in str(err.value)


def test_a_scenario_file_of_an_earlier_release_keeps_its_util_scale(tmp_path: Path) -> None:
    path = tmp_path / "earlier.yaml"
    path.write_text("name: x\nend: 2026-01-01T00:00:00Z\nnodes: [{name: a, gpus: 1}]\nutil_scale: ratio\n")
    assert load_scenario(path).gpu_util_unit == "ratio"


def test_overbooked_node_is_refused() -> None:
    sc = Scenario.model_validate(
        {
            "name": "x",
            "end": "2026-01-01T00:00:00Z",
            "nodes": [{"name": "a", "gpus": 2}],
            "workloads": [{"namespace": "n", "name": "w", "behaviour": "training", "gpus_per_pod": 3}],
        }
    )
    with pytest.raises(ScenarioError, match="no node has 3 free GPU"):
        simulate(sc)


def test_unknown_builtin_lists_the_available_ones() -> None:
    with pytest.raises(ScenarioError, match="standard"):
        load_scenario("no-such-scenario")


def test_synthetic_fleets_are_deterministic_and_cover_every_verdict() -> None:
    from simulation.fleet import synthetic_scenario

    a, b = synthetic_scenario(400, seed=3), synthetic_scenario(400, seed=3)
    assert a == b
    assert sum(n.gpus for n in a.nodes) == 400
    fleet = simulate(a)
    kinds = {e.kind for e in expected_findings(fleet).values()}
    assert kinds >= {
        FindingKind.IDLE_ENDPOINT,
        FindingKind.LOW_UTILIZATION,
        FindingKind.DATALOADER_STARVATION,
        FindingKind.UNKNOWN,
        None,
    }
    assert synthetic_scenario(400, seed=4) != a
