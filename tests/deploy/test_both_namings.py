"""Every dashboard query, alert and recording rule answers the same whichever DCGM naming a fleet serves.

One fleet (:mod:`harness.naming_fleets`) in four forms, each its own cluster in one TSDB: dcgm-exporter's
legacy naming, DCGM 4.7's (dcgm-exporter 4.9: new names, base units, ``hostname``, the driver label
renamed), the two mixed node by node, and every node upgraded mid-window with a scrape in both. A real
Prometheus and a real VictoriaMetrics each hold all four, loaded once. On each of them:

* every dashboard query, its variables resolved the way Grafana would and ``$cluster`` set to one
  form, returns data, and on every form the same rows with the same numbers as on the legacy one;
* every alert expression holds in the same places, with the same values;
* the recording rules (promtool's evaluation on Prometheus, vmalert's on VictoriaMetrics) record, per
  device and span, the legacy form's rollups: under the 4.7 names, in their unit, where a device
  serves them; both parts of a span where its node upgraded, which add up to the legacy numbers plus
  the one scrape served twice.

"The same numbers" is exact up to float rounding and the ten significant digits the Prometheus
backfill writes (:data:`EXACT_REL`), except where the upgraded form's switch lies inside a query's
window (:data:`UPGRADE_REL`): a mean over the window weighs the scrape served in both namings twice,
and a counter whose series is replaced at the switch (gpu-exporter's own, relabelled) loses or gains
one scrape interval's increase there: Prometheus extrapolates the old series' end and the new one's
start by half an interval each, VictoriaMetrics does not extrapolate and misses the interval between
them.
"""

from __future__ import annotations

import math
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from common import metric_names as m
from dashboards import promql
from harness.binaries import require_binary
from harness.extra_fleet import END, END_S
from harness.grafana import (
    PanelQuery,
    dashboard_files,
    interpolate,
    load,
    panel_queries,
    raw_series_dashboard_files,
    resolve,
)
from harness.naming_fleets import FORMS, OVERLAP, form_series, naming_fleets
from harness.promql import instant
from harness.rules import ALERTS_DIR, AlertRule, load_rules
from harness.servers import PrometheusServer, VictoriaMetricsServer, backfill_blocks, backfill_rules
from simulation.fleet import Naming, Series

pytestmark = [pytest.mark.prometheus, pytest.mark.victoriametrics, pytest.mark.slow]

QUERIES = [q for path in raw_series_dashboard_files() for q in panel_queries(path)]
RULES = load_rules()
RULES_FILE = ALERTS_DIR / "gpu-analyzer.recording.yaml"
TSDBS = ("prometheus", "victoriametrics")
#: The workload drill-down's single-value variables: a Deployment resolved through its ReplicaSet.
CHOICES = {"namespace": "serving", "workload": "legacy-ranker"}
#: How far a number over a window spanning the upgrade may stray: a scrape interval's weight in a
#: 6-hour window (1/360), in a ratio of two such numbers that move apart by up to three times that.
UPGRADE_REL = 0.01
#: Float rounding, and the backfill's ten significant digits: a 2e7 J energy counter keeps its
#: hundredths, and its rate over 5 minutes (a few hundred kJ) moves by a few parts in 1e8.
EXACT_REL = 1e-6

Server = PrometheusServer | VictoriaMetricsServer
Answers = dict[tuple[tuple[str, str], ...], float]


@pytest.fixture(scope="module")
def namings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    series = naming_fleets()
    blocks = backfill_blocks(series, tmp_path_factory.mktemp("namings-backfill"))
    with (
        PrometheusServer(tmp_path_factory.mktemp("namings-prometheus"), blocks=blocks) as prometheus,
        VictoriaMetricsServer(tmp_path_factory.mktemp("namings-victoria")) as victoria,
    ):
        victoria.import_json_lines(series)
        yield {"prometheus": prometheus, "victoriametrics": victoria}


def _by_form(result: list[dict[str, Any]], form: str | None = None) -> dict[str, Answers]:
    """An instant query's answer per form (its ``cluster``; ``form`` for a total, which has none),
    each row keyed by its other labels."""
    out: dict[str, Answers] = {form: {} for form in FORMS}
    for item in result:
        labels = dict(item["metric"])
        where = labels.pop("cluster", form)
        assert where is not None, f"a row without its cluster: {item['metric']}"
        key = tuple(sorted(labels.items()))
        assert key not in out[where], f"two rows {key} in {where}"
        out[where][key] = float(item["value"][1])
    return out


def _assert_same(where: str, legacy: Answers, other: Answers, form: str, windowed: bool) -> None:
    assert other.keys() == legacy.keys(), f"{where}: rows on {form} differ from legacy's"
    rel = UPGRADE_REL if form == "upgrade" and windowed else EXACT_REL
    for key, value in legacy.items():
        if math.isnan(value):
            assert math.isnan(other[key]), f"{where} {key} on {form}"
            continue
        assert other[key] == pytest.approx(value, rel=rel, abs=1e-9), f"{where} {key} on {form}"


def _windowed(expr: str) -> bool:
    """Whether an expression reads over a window that reaches back past the upgrade (20 minutes)."""
    return any(w in expr for w in ("$__range", "[1h]", "[6h]", "[30m"))


@cache
def _variables(url: str, dashboard: str) -> dict[str, str]:
    path = next(p for p in dashboard_files() if p.stem == dashboard)
    return resolve(load(path), lambda expr: instant(url, expr, END_S), CHOICES)


def _ids(item: PanelQuery | AlertRule) -> str:
    return item.id if isinstance(item, PanelQuery) else item.alert


@pytest.mark.parametrize("query", QUERIES, ids=_ids)
@pytest.mark.parametrize("tsdb", TSDBS)
def test_dashboard_query_answers_the_same_in_every_naming(
    namings: dict[str, Server], tsdb: str, query: PanelQuery
) -> None:
    url = namings[tsdb].url
    answers = {}
    for form in FORMS:
        values = {**_variables(url, query.dashboard), "cluster": form}
        answers[form] = _by_form(instant(url, interpolate(query.expr, values), END_S), form)[form]
    assert answers["legacy"], f"{query.id}: no data on {tsdb}"
    for form in FORMS[1:]:
        _assert_same(f"{query.id} ({tsdb})", answers["legacy"], answers[form], form, _windowed(query.expr))


@pytest.mark.parametrize("rule", RULES, ids=_ids)
@pytest.mark.parametrize("tsdb", TSDBS)
def test_alert_answers_the_same_in_every_naming(
    namings: dict[str, Server], tsdb: str, rule: AlertRule
) -> None:
    answers = _by_form(instant(namings[tsdb].url, rule.expr, END_S))
    assert answers["legacy"], f"{rule.alert}: its condition holds nowhere on {tsdb}"
    for form in FORMS[1:]:
        _assert_same(f"{rule.alert} ({tsdb})", answers["legacy"], answers[form], form, _windowed(rule.expr))


@pytest.mark.parametrize("tsdb", TSDBS)
def test_a_maximum_over_a_window_reads_both_sides_of_the_upgrade(
    namings: dict[str, Server], tsdb: str
) -> None:
    """The panels' maxima over a window (idle devices, idle pods) read every naming's part of a device's
    history, not the part after its node's upgrade only: over the hour the upgrade splits, each device's
    maximum is the legacy form's, which on this fleet often lies before the switch."""
    url = namings[tsdb].url

    def maxima(window: str) -> dict[str, Answers]:
        expr = interpolate(promql.pod_util(window=promql.over("max_over_time", window)), {"cluster": ".*"})
        return _by_form(instant(url, expr, END_S))

    hour = maxima("1h")
    assert hour["legacy"]
    _assert_same("pod maxima over 1h", hour["legacy"], hour["upgrade"], "upgrade", windowed=False)
    since_the_upgrade = maxima("10m")["legacy"]
    assert any(hour["legacy"][key] > value for key, value in since_the_upgrade.items())


# --- the recording rules ------------------------------------------------------------------------------

RULES_SPAN = timedelta(hours=1)  # twelve evaluations: the upgrades at -20m and -15m fall inside
ROLLED_UP = (m.GPU_UTIL, m.PROF_GR_ENGINE_ACTIVE)
#: Labels the namings spell differently: the node's and the driver version's.
RENAMED_LABELS = {m.HOSTNAME_LEGACY: m.HOSTNAME, m.DRIVER_VERSION_LABEL: m.DRIVER_VERSION_LABEL_4_7}
Rollups = dict[tuple[str, str, tuple[tuple[str, str], ...], float], float]


def _recorded(url: str) -> list[Series]:
    """Every rollup series a TSDB holds over the rules' span."""
    out = []
    for legacy in ROLLED_UP:
        for name in m.both_names(legacy):
            answer = requests.post(
                f"{url}/api/v1/query",
                data={
                    "query": f"gpu_analyzer:{name}:rollup_5m[{int(RULES_SPAN.total_seconds()) + 60}s]",
                    "time": END_S,
                },
                timeout=30,
            ).json()["data"]["result"]
            for item in answer:
                labels = tuple(sorted((k, v) for k, v in item["metric"].items() if k != "__name__"))
                stamps = np.array([float(t) for t, _ in item["values"]])
                values = np.array([float(v) for _, v in item["values"]])
                out.append(Series(f"gpu_analyzer:{name}:rollup_5m", labels, stamps, values))
    return out


def _in_legacy_terms(recorded: list[Series]) -> dict[str, Rollups]:
    """Per form: (legacy metric, rollup kind, labels as legacy spells them, stamp) → value in the legacy
    unit, a device's rollups under both names in one span combined (counts and sums added, maxima
    maximised)."""
    out: dict[str, Rollups] = defaultdict(dict)
    for s in recorded:
        name = s.name.split(":")[1]
        renamed = m.BY_CURRENT.get(name)
        legacy, scale = (renamed.legacy, 1 / renamed.to_current) if renamed else (name, 1.0)
        labels = dict(s.labels)
        form, kind = labels.pop("cluster"), labels["rollup"]
        key_labels = tuple(sorted((RENAMED_LABELS.get(k, k), v) for k, v in labels.items()))
        for stamp, value in zip(s.timestamps, s.values, strict=True):
            key = (legacy, kind, key_labels, round(float(stamp), 3))
            value = float(value) * (scale if kind in ("sum", "max") else 1.0)
            held = out[form].get(key)
            out[form][key] = value if held is None else (max if kind == "max" else float.__add__)(held, value)
    return out


def _served_twice(form: Naming, stamps: set[float]) -> Rollups:
    """What the scrapes an upgrading node served in both namings add to the legacy rollups stamped
    ``stamps``: a sample to the count (of its device and of the fleet), its value to the sum."""
    extra: Rollups = defaultdict(float)
    legacy_series = [s for s in form_series("legacy") if s.name in ROLLED_UP]
    current = {(s.name, s.labels): s for s in form_series(form) if s.name in ROLLED_UP}
    for s in legacy_series:
        upgraded = current.get((s.name, s.labels))
        if upgraded is None or upgraded.timestamps.size == s.timestamps.size:
            continue  # never upgraded, or its whole history is in the legacy name (cut before the span)
        for t in upgraded.timestamps[-OVERLAP:]:  # the old name's last scrapes are the new one's first
            # The rollup whose span (stamp - 6m, stamp - 1m] holds t.
            stamp = next(e for e in stamps if e - 360 < t <= e - 60)
            value = float(s.values[s.timestamps == t][0])
            labels = [(RENAMED_LABELS.get(k, k), v) for k, v in s.labels]
            extra[(s.name, "count", tuple(sorted([*labels, ("rollup", "count")])), stamp)] += 1
            extra[(s.name, "sum", tuple(sorted([*labels, ("rollup", "sum")])), stamp)] += value
    return extra


def _record_rules(tsdb: str, server: Server, workdir: Path) -> list[Series]:
    """The rules evaluated over the span as each TSDB's own ruler does it, their rollups read back."""
    start, end = END - RULES_SPAN, END
    if isinstance(server, PrometheusServer):
        blocks = backfill_rules(server.url, RULES_FILE, start, end, workdir)
        with PrometheusServer(workdir / "rollups", blocks=blocks) as rollups:
            return _recorded(rollups.url)
    result = subprocess.run(
        [
            require_binary("vmalert"),
            f"-rule={RULES_FILE}",
            f"-datasource.url={server.url}",
            f"-remoteWrite.url={server.url}",
            f"-replay.timeFrom={start.strftime('%Y-%m-%dT%H:%M:%SZ')}",
            f"-replay.timeTo={end.strftime('%Y-%m-%dT%H:%M:%SZ')}",
            "-replay.disableProgressBar",
            "-replay.rulesDelay=0s",
            "-loggerLevel=ERROR",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    requests.get(f"{server.url}/internal/force_flush", timeout=60).raise_for_status()
    return _recorded(server.url)


@pytest.mark.parametrize("tsdb", TSDBS)
def test_recording_rules_roll_up_the_same_in_every_naming(
    namings: dict[str, Server], tsdb: str, tmp_path: Path
) -> None:
    rollups = _in_legacy_terms(_record_rules(tsdb, namings[tsdb], tmp_path))
    legacy = rollups["legacy"]
    assert {kind for _, kind, _, _ in legacy} == {"count", "sum", "max", "fleet_count"}
    assert {metric for metric, _, _, _ in legacy} == set(ROLLED_UP)
    for form in FORMS[1:]:
        expected = dict(legacy)
        if form == "upgrade":
            for key, extra in _served_twice(form, {stamp for _, _, _, stamp in legacy}).items():
                expected[key] += extra
                fleet = (key[0], "fleet_count", (("rollup", "fleet_count"),), key[3])
                if key[1] == "count":
                    expected[fleet] += extra
        got = rollups[form]
        assert got.keys() == expected.keys(), f"{form} on {tsdb}: other rollups than legacy's"
        for key, value in expected.items():
            assert got[key] == pytest.approx(value, rel=EXACT_REL, abs=1e-9), f"{key} on {form} ({tsdb})"
