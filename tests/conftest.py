"""Fixtures shared by the whole suite: simulated fleets and real TSDB servers holding them.

Servers are session-scoped and read-only for tests: a test that must write starts its own.
Backfilled blocks are built once per scenario and each server gets its own copy.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.servers import PrometheusServer, VictoriaMetricsServer, backfill_blocks
from simulation.fleet import Fleet, load_scenario, simulate


@pytest.fixture(scope="session")
def standard_fleet() -> Fleet:
    return simulate(load_scenario("standard"))


@pytest.fixture(scope="session")
def standard_blocks(standard_fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return backfill_blocks(standard_fleet.series, tmp_path_factory.mktemp("standard-backfill"))


@pytest.fixture(scope="session")
def prometheus_standard(
    standard_blocks: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusServer]:
    with PrometheusServer(tmp_path_factory.mktemp("prometheus-standard"), blocks=standard_blocks) as server:
        yield server


@pytest.fixture(scope="session")
def victoria_standard(
    standard_fleet: Fleet, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VictoriaMetricsServer]:
    with VictoriaMetricsServer(tmp_path_factory.mktemp("victoria-standard")) as server:
        server.import_series(standard_fleet.series)
        yield server


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (the exporter's TLS tests)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl not installed")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(
        [
            *(
                openssl,
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=127.0.0.1",
            ),
            *("-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key
