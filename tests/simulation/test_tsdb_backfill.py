"""A simulated 24 h fleet in real Prometheus and real VictoriaMetrics reads back the same.

Window semantics differ by one sample: Prometheus 2.x selects ``[t-6h, t]`` (both ends closed)
while VictoriaMetrics selects ``(t-6h, t]``. With samples every 60 s on a grid that lands on
``t-6h``, Prometheus averages 361 samples and VictoriaMetrics 360, so the two per-GPU averages
may differ by at most ``(max - min) / 361`` — under 0.3 percentage points for 0-100 % data.
Each server is also checked exactly against the simulator's own samples under its semantics.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
import requests

from harness.servers import PrometheusServer, VictoriaMetricsServer
from simulation.fleet import Fleet

pytestmark = [pytest.mark.prometheus, pytest.mark.victoriametrics, pytest.mark.slow]

WINDOW = timedelta(hours=6)
QUERY = "avg_over_time(DCGM_FI_DEV_GPU_UTIL[6h])"


def _instant(url: str, query: str, at: float) -> dict[tuple[str, str], float]:
    r = requests.get(f"{url}/api/v1/query", params={"query": query, "time": f"{at:.3f}"}, timeout=60)
    r.raise_for_status()
    body = r.json()
    assert body["status"] == "success", body
    out = {}
    for item in body["data"]["result"]:
        metric = item["metric"]
        key = (metric.get("UUID", ""), metric.get("pod", ""))
        assert key not in out, f"duplicate series for {key}"
        out[key] = float(item["value"][1])
    return out


def _expected(fleet: Fleet, closed_left: bool) -> dict[tuple[str, str], float]:
    end = fleet.scenario.end.timestamp()
    start = end - WINDOW.total_seconds()
    out = {}
    for s in fleet.series_named("DCGM_FI_DEV_GPU_UTIL"):
        lower = s.timestamps >= start if closed_left else s.timestamps > start
        mask = lower & (s.timestamps <= end)
        if mask.any():
            out[(s.label("UUID") or "", s.label("pod") or "")] = float(s.values[mask].mean())
    return out


def test_per_gpu_averages_agree_between_prometheus_and_victoriametrics(
    standard_fleet: Fleet, prometheus_standard: PrometheusServer, victoria_standard: VictoriaMetricsServer
) -> None:
    at = standard_fleet.scenario.end.timestamp()
    prom = _instant(prometheus_standard.url, QUERY, at)
    vm = _instant(victoria_standard.url, QUERY, at)

    assert len(prom) >= 30
    assert prom.keys() == vm.keys()
    worst = max(abs(prom[k] - vm[k]) for k in prom)
    assert worst <= 100 / 361 + 1e-9

    for name, got, closed in (("prometheus", prom, True), ("victoriametrics", vm, False)):
        want = _expected(standard_fleet, closed_left=closed)
        assert got.keys() == want.keys(), name
        np.testing.assert_allclose([got[k] for k in want], list(want.values()), atol=1e-6, err_msg=name)


def test_coverage_counts_show_the_exporter_gap(
    standard_fleet: Fleet, prometheus_standard: PrometheusServer, victoria_standard: VictoriaMetricsServer
) -> None:
    """count_over_time is how the analyzer measures coverage: both TSDBs must see the 3 h hole."""
    at = standard_fleet.scenario.end.timestamp()
    query = 'count_over_time(DCGM_FI_DEV_GPU_UTIL{Hostname="gpu-d"}[6h])'
    for url, full in ((prometheus_standard.url, 361), (victoria_standard.url, 360)):
        counts = _instant(url, query, at)
        assert len(counts) == 4
        # 3 of 6 hours missing; Prometheus's closed window adds the sample at t-6h.
        assert set(counts.values()) == {full - 180}, url
