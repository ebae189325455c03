"""The chargeback board's numbers are ``gpu-analyzer chargeback``'s, read from the recording rules' rollups.

The standard fleet in mixed DCGM naming (every other node in DCGM 4.7's names), with kube-state-metrics'
namespace labels, in a real Prometheus (rules evaluated by promtool) and a real VictoriaMetrics
(rules replayed by vmalert). The board's queries run as Grafana sends them over a 20-hour range; the
command line bills the same 20 hours. The rollups are stamped hourly and each sums the hour ending five
minutes before its stamp, so the board's range is the command line's shifted by five minutes: the
tolerance is :data:`REL` of a figure plus :data:`ABS` GPU-hours.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from cli.analyzer import main as analyzer_main
from harness.binaries import require_binary
from harness.grafana import dashboard_files, interpolate, load, panel_queries, panels, resolve
from harness.promql import instant
from harness.servers import (
    PrometheusServer,
    VictoriaMetricsServer,
    backfill_blocks,
    backfill_rules,
    merged_blocks,
)
from simulation.fleet import Series, load_scenario, simulate, with_naming

pytestmark = [pytest.mark.prometheus, pytest.mark.victoriametrics, pytest.mark.slow]

RULES = Path(__file__).resolve().parents[2] / "alerts" / "gpu-chargeback.recording.yaml"
BOARD = next(p for p in dashboard_files() if p.stem == "chargeback")
RANGE = "20h"
PRICE = 2.5  # the board's price variable's default; the policy below sets the same
REL, ABS = 0.03, 0.3
TEAMS = {"serving": "web", "research": "ml", "team-a": "ml", "team-b": "ml"}  # ml-platform: none


def _namespace_labels(end: float) -> list[Series]:
    t = np.arange(end - 24 * 3600 + 60, end + 1, 60.0)
    out = []
    for ns in (*TEAMS, "ml-platform"):
        labels = {"job": "kube-state-metrics", "namespace": ns} | (
            {"label_team": TEAMS[ns]} if ns in TEAMS else {}
        )
        out.append(Series("kube_namespace_labels", tuple(sorted(labels.items())), t, np.ones_like(t)))
    return out


@pytest.fixture(scope="module")
def fleet_end() -> float:
    return load_scenario("standard").end.timestamp()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, fleet_end: float) -> Iterator[dict[str, str]]:
    scenario = with_naming(load_scenario("standard"), "mixed")
    series = [*simulate(scenario).series, *_namespace_labels(fleet_end)]
    work = tmp_path_factory.mktemp("chargeback-board")
    end = scenario.end
    raw_blocks = backfill_blocks(series, work / "raw")
    with PrometheusServer(work / "prometheus-raw", blocks=raw_blocks) as raw:
        rules = backfill_rules(raw.url, RULES, end - timedelta(hours=23), end, work / "rules")
    with (
        PrometheusServer(work / "prometheus", blocks=merged_blocks(work, raw_blocks, rules)) as prometheus,
        VictoriaMetricsServer(work / "victoria") as victoria,
    ):
        victoria.import_json_lines(series)
        result = subprocess.run(
            [
                require_binary("vmalert"),
                f"-rule={RULES}",
                f"-datasource.url={victoria.url}",
                f"-remoteWrite.url={victoria.url}",
                f"-replay.timeFrom={(end - timedelta(hours=23)).strftime('%Y-%m-%dT%H:%M:%SZ')}",
                f"-replay.timeTo={end.strftime('%Y-%m-%dT%H:%M:%SZ')}",
                "-replay.disableProgressBar",
                "-replay.rulesDelay=0s",
                # Replay steps its range queries by this (default 5m), not by the group's 60m interval.
                "-datasource.queryStep=1h",
                "-loggerLevel=ERROR",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        requests.get(f"{victoria.url}/internal/force_flush", timeout=60).raise_for_status()
        yield {"prometheus": prometheus.url, "victoriametrics": victoria.url}


def _bill(url: str, end: float, by: str, tmp_path: Path) -> dict[str, Any]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"pricePerGpuHour: {PRICE}\n", encoding="utf-8")
    out = tmp_path / f"bill-{by.replace(':', '-')}.json"
    end_arg = str(int(end))
    argv = ["chargeback", "--prometheus-url", url, "--window", RANGE, "--end", end_arg, "--by", by]
    assert analyzer_main([*argv, "--policy", str(policy), "--format", "json", "--output", str(out)]) == 0
    return json.loads(out.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _table(url: str, end: float, title: str, key: str) -> dict[str, dict[str, float]]:
    """A table panel's rows, keyed by ``key``'s label value: column name → value."""
    board = load(BOARD)
    values = {**resolve(board, lambda e: instant(url, e, end)), "__range": RANGE}
    (panel,) = [p for p in panels(board) if p.get("title") == title]
    rename = next(t for t in panel["transformations"] if t["id"] == "organize")["options"]["renameByName"]
    rows: dict[str, dict[str, float]] = {}
    for target in panel["targets"]:
        column = rename[f"Value #{target['refId']}"]
        for item in instant(url, interpolate(target["expr"], values), end):
            rows.setdefault(item["metric"].get(key, ""), {})[column] = float(item["value"][1])
    return rows


def _close(got: float, want: float, where: str) -> None:
    assert got == pytest.approx(want, rel=REL, abs=ABS), where


# Known disagreement (issue 40, open): a Prometheus ruler stamps its hourly evaluations off the hour
# (promtool's backfill at a phase that varies from run to run, e.g. :42:52). The command line reads the
# spans after the last rollup from raw samples, the board reads rollups only, so at such a phase the
# board misses up to an hour of the newest spans (team-a idle 0.17 against the command line's 0.50
# GPU-hours, all of it in the last 20 minutes); the seam between rollups and raw trail may also leave a
# span uncounted. At other phases they agree, so the mark is not strict.
KNOWN_UNALIGNED_STAMPS = pytest.mark.xfail(
    reason="command line's rollup/raw split with a ruler's unaligned evaluation stamps", strict=False
)


@pytest.mark.parametrize(
    "tsdb", [pytest.param("prometheus", marks=KNOWN_UNALIGNED_STAMPS), "victoriametrics"]
)
def test_per_namespace_and_per_team_figures_are_the_command_lines(
    servers: dict[str, str], tsdb: str, fleet_end: float, tmp_path: Path
) -> None:
    url = servers[tsdb]
    bill = _bill(url, fleet_end, "namespace", tmp_path)
    rows = _table(url, fleet_end, "Per namespace", "namespace")
    groups = {g["group"]: g for g in bill["groups"] if g["held_gpu_hours"] > 0}
    assert set(rows) == set(groups)
    # Costs in GPU-hours at the one price, so that one tolerance holds for both.
    apart = [
        f"{ns} {part}: board {rows[ns].get(column, 0.0):.2f}, command line {want:.2f}"
        for ns, g in groups.items()
        for part, column, want, price in (
            *((p, f"{p} GPU-hours", g[f"{p}_gpu_hours"], 1.0) for p in ("held", "used", "idle", "unknown")),
            ("idle cost", "idle cost", g["idle_cost"], PRICE),
            ("cost", "cost", g["cost"], PRICE),
        )
        if rows[ns].get(column, 0.0) / price != pytest.approx(want / price, rel=REL, abs=ABS)
    ]
    assert apart == [], f"on {tsdb}:\n" + "\n".join(apart)
    # The exporter gap of ml-platform's node: unknown, not idle, on the board too.
    assert rows["ml-platform"]["unknown GPU-hours"] > 1.0

    teams = _table(url, fleet_end, "Per team", "label_team")
    by_team = {g["group"]: g for g in _bill(url, fleet_end, "label:team", tmp_path)["groups"]}
    for team in ("web", "ml"):
        _close(teams[team]["held GPU-hours"], by_team[team]["held_gpu_hours"], f"team {team} on {tsdb}")
    _close(teams[""]["held GPU-hours"], by_team["(no label team)"]["held_gpu_hours"], f"no team on {tsdb}")

    models = _table(url, fleet_end, "Unallocated per GPU model", "modelName")
    for m in bill["fleet"]["unallocated_by_model"]:
        got = models.get(m["model"], {}).get("unallocated GPU-hours", 0.0)
        _close(got, m["unallocated_gpu_hours"], f"unallocated {m['model']} on {tsdb}")


def test_every_panel_reads_the_rollups_only() -> None:
    for q in panel_queries(BOARD):
        assert "DCGM_FI" not in q.expr and "gpu_pod_" not in q.expr, q.id
        assert "gpu_chargeback:gpu_spans:rollup_1h" in q.expr, q.id
