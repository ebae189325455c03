"""Fixtures of the deploy tests: a real Prometheus over the extras fleet (tests/deploy/extras.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.extra_fleet import extra_fleet
from harness.servers import PrometheusServer, backfill_blocks


@pytest.fixture(scope="session")
def prometheus_extras(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    """Real Prometheus over the relabelled fleet plus exporter, XID, throttling and reaper series."""
    blocks = backfill_blocks(extra_fleet(), tmp_path_factory.mktemp("extras-backfill"))
    with PrometheusServer(tmp_path_factory.mktemp("prometheus-extras"), blocks=blocks) as server:
        yield server
