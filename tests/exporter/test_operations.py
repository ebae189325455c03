"""What operators configure: a dcgm-exporter counters file, TLS and basic auth through a web config,
and warnings that repeat every cycle logged once with a count."""

from __future__ import annotations

import base64
import gc
import http.client
import logging
import ssl
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from cli.exporter import build_exporter, from_args
from exporter.config import ConfigError
from exporter.counters_file import parse_collectors
from exporter.repeats import RepeatedWarnings
from exporter.webconfig import parse_web_config

DCGM_DEFAULT_COUNTERS = """\
# Format
# If line starts with a '#' it is considered a comment
# DCGM FIELD, Prometheus metric type, help message

# Clocks
DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).
DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).
DCGM_FI_DEV_POWER_USAGE,              gauge, Power draw (in W).
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).
DCGM_FI_DEV_PCIE_TX_THROUGHPUT,  counter, Total number of bytes transmitted through PCIe TX (in KB) via NVML.
DCGM_FI_DEV_GPU_UTIL,      gauge, GPU utilization (in %).
DCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).
# DCGM_FI_DEV_POWER_VIOLATION,       counter, Throttling duration due to power constraints (in us).
DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU License status
"""


@pytest.fixture(autouse=True)
def _unfreeze() -> Iterator[None]:
    yield
    gc.unfreeze()  # Exporter.start() freezes start-up objects


def test_a_dcgm_exporter_counters_file_selects_the_dcgm_series() -> None:
    chosen = parse_collectors(DCGM_DEFAULT_COUNTERS, "default-counters.csv")
    assert {
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    } <= chosen.served
    assert "DCGM_FI_DEV_POWER_VIOLATION" not in chosen.served  # commented out
    assert "DCGM_FI_DEV_FB_USED" not in chosen.served
    assert {"gpu_up", "gpu_utilization_samples_percent", "gpu_exporter_build_info"} <= chosen.served
    assert chosen.skipped == ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "DCGM_FI_DEV_VGPU_LICENSE_STATUS")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("DCGM_FI_DEV_GPU_UTIL\n", "counters.csv:1: expected", id="no-type"),
        pytest.param("DCGM_FI_DEV_GPU_UTIL, meter, x\n", "counters.csv:1: type 'meter'", id="bad-type"),
        pytest.param("# c\ngpu_up, gauge, x\n", "counters.csv:2: 'gpu_up' is not a DCGM", id="not-dcgm"),
        pytest.param("DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, x\n", "selects none", id="nothing-served"),
    ],
)
def test_a_bad_counters_file_names_file_and_line(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_collectors(text, "counters.csv")


def test_the_exporter_serves_only_what_the_counters_file_selects(tmp_path: Path) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text("DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n")
    config = from_args(
        ["--listen", "127.0.0.1:0", "--no-kubernetes", "--simulate", "busy", "-f", str(counters)]
    )
    exporter = build_exporter(config)
    exporter.loop.run_once()
    body = exporter.exposition.render()[0].decode()
    exporter.server.stop()
    assert "DCGM_FI_DEV_GPU_UTIL{" in body
    assert "gpu_up{" in body and "gpu_exporter_build_info{" in body
    assert "DCGM_FI_DEV_FB_USED" not in body and "DCGM_FI_DEV_POWER_USAGE" not in body


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("tls_server_config:\n  cert_file: a\n", "cert_file and key_file", id="no-key"),
        pytest.param(
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [x]\n",
            "cipher_suites not supported",
            id="unsupported-key",
        ),
        pytest.param(
            "basic_auth_users:\n  prometheus: secret\n", "prometheus: expected a bcrypt", id="plain"
        ),
        pytest.param(
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: SSL3\n",
            "min_version: 'SSL3'",
            id="bad-version",
        ),
        pytest.param("tsl_server_config: {}\n", "tsl_server_config not supported", id="typo"),
    ],
)
def test_a_bad_web_config_is_refused_naming_the_setting(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_web_config(text, "web.yml")


def test_tls_and_basic_auth_from_a_web_config_file(tmp_path: Path, certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    web = tmp_path / "web.yml"
    web.write_text(
        f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
        "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
    )
    argv = ["--listen", "127.0.0.1:0", "--no-kubernetes", "--simulate", "busy", "--web.config.file", str(web)]
    exporter = build_exporter(from_args(argv))
    exporter.start()
    context = ssl.create_default_context(cafile=str(cert))
    try:

        def get(path: str, password: str | None = None) -> tuple[int, dict[str, str]]:
            connection = http.client.HTTPSConnection("127.0.0.1", exporter.server.port, context=context)
            headers = {}
            if password is not None:
                headers["Authorization"] = (
                    "Basic " + base64.b64encode(f"prometheus:{password}".encode()).decode()
                )
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            response.read()
            connection.close()
            return response.status, dict(response.getheaders())

        status, headers = get("/metrics")
        assert status == 401
        assert headers["WWW-Authenticate"].startswith("Basic")
        assert get("/metrics", "wrong")[0] == 401
        status, headers = get("/metrics", "s3cret")
        assert status == 200
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert get("/metrics", "s3cret")[0] == 200  # the second time from the verified cache
        assert get("/healthz")[0] == 200  # the kubelet's probes carry no credentials
        assert get("/health")[0] == 200  # nor do probes written for dcgm-exporter's /health
        with pytest.raises(ssl.SSLError):  # a client that does not trust the certificate gets nothing
            untrusting = ssl.create_default_context()
            connection = http.client.HTTPSConnection("127.0.0.1", exporter.server.port, context=untrusting)
            connection.request("GET", "/metrics")
    finally:
        exporter.stop()


def test_a_repeated_warning_is_logged_once_then_counted(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    logger = logging.getLogger("exporter.test")
    warnings = RepeatedWarnings(logger, summary_s=600, monotonic=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="exporter.test"):
        for _ in range(121):  # ten minutes at a 5 s interval
            warnings.warn("kubelet", "kubelet pod resources unavailable")
            now[0] += 5
        warnings.clear("kubelet", "kubelet pod resources available again")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "kubelet pod resources unavailable",
        "kubelet pod resources unavailable (repeated 120 times in the last 600 s)",
        "kubelet pod resources available again (after 121 failures over 605 s)",
    ]
