"""Command line, configuration, and the assembled exporter (in-process and as a real process)."""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.exporter import build_exporter, from_args, main
from exporter.config import ConfigError, ExporterConfig, parse_listen
from harness.servers import free_port
from simulation.gpu_scenarios import SCENARIOS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _restore_process_state() -> Iterator[None]:
    """main() and Exporter.start() set up a whole process (root logger, frozen GC); undo it for pytest."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    gc.unfreeze()


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        pytest.param(":9400", ("", 9400), id="all-interfaces-default"),
        pytest.param("127.0.0.1:0", ("127.0.0.1", 0), id="loopback-any-port"),
        pytest.param("[::]:9400", ("::", 9400), id="ipv6-all"),
        pytest.param("[fd00::1]:9400", ("fd00::1", 9400), id="ipv6-address"),
    ],
)
def test_parse_listen(listen: str, expected: tuple[str, int]) -> None:
    assert parse_listen(listen) == expected


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        pytest.param("5", 5.0, id="bare-seconds"),
        pytest.param("2.5", 2.5, id="fractional"),
        pytest.param("5s", 5.0, id="seconds-suffix-as-in-helm-values"),
        pytest.param("500ms", 0.5, id="milliseconds"),
        pytest.param("1m", 60.0, id="minutes"),
    ],
)
def test_interval_durations(value: str, seconds: float) -> None:
    assert from_args(["--interval", value]).interval_s == seconds


@pytest.mark.parametrize("listen", ["9400", "host:", ":http", ":70000"])
def test_parse_listen_rejects(listen: str) -> None:
    with pytest.raises(ConfigError, match="--listen"):
        parse_listen(listen)


def test_defaults_and_environment() -> None:
    config = from_args([], env={"NODE_NAME": "gpu-node-7"})
    assert config == ExporterConfig(
        listen_host="",
        listen_port=9400,
        interval_s=5.0,
        kubelet_socket=Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
        hostname="gpu-node-7",
        simulate=None,
        log_format="text",
        pod_log_dir=Path("/var/log/pods"),
        proc_root=Path("/proc"),
    )


def test_flags_override_environment() -> None:
    config = from_args(
        [
            "--hostname",
            "explicit",
            "--no-kubernetes",
            "--simulate",
            "mig",
            "--interval",
            "0.5",
            "--log-format",
            "json",
        ],
        env={"NODE_NAME": "from-env"},
    )
    assert (
        config.hostname,
        config.kubelet_socket,
        config.simulate,
        config.interval_s,
        config.log_format,
    ) == (
        "explicit",
        None,
        "mig",
        0.5,
        "json",
    )


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--interval", "0"], id="zero-interval"),
        pytest.param(["--interval", "5h"], id="interval-unit-unknown"),
        pytest.param(["--simulate", "on-fire"], id="unknown-scenario"),
        pytest.param(["--log-format", "xml"], id="unknown-log-format"),
        pytest.param(["--listen", "nope"], id="bad-listen"),
        pytest.param(["--frobnicate"], id="unknown-option"),
        pytest.param(["--log-level", "chatty"], id="unknown-log-level"),
    ],
)
def test_bad_usage_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err


def test_port_in_use_exits_1() -> None:
    config = from_args(["--listen", "127.0.0.1:0", "--no-kubernetes", "--simulate", "idle"])
    first = build_exporter(config)
    try:
        taken = from_args(
            ["--listen", f"127.0.0.1:{first.server.port}", "--no-kubernetes", "--simulate", "idle"]
        )
        with pytest.raises(OSError):
            build_exporter(taken)
        assert (
            main(["--listen", f"127.0.0.1:{first.server.port}", "--no-kubernetes", "--simulate", "idle"]) == 1
        )
    finally:
        first.server.stop()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback http URLs built here
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _wait_healthy(port: int, timeout: float = 90.0) -> None:
    """Polls until healthy: a process start on a busy machine can take many seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if _get(f"http://127.0.0.1:{port}/readyz")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"exporter on port {port} never became healthy")


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_scenario_runs_the_production_path(name: str, tmp_path: Path) -> None:
    # Kubernetes on, with no kubelet: attribution fails softly, which is part of the production path.
    argv = ["--listen", "127.0.0.1:0", "--simulate", name, "--interval", "0.1", "--hostname", "sim"]
    exporter = build_exporter(from_args([*argv, "--kubelet-socket", str(tmp_path / "absent.sock")]))
    exporter.start()
    try:
        _wait_healthy(exporter.server.port)
        status, body = _get(f"http://127.0.0.1:{exporter.server.port}/metrics")
    finally:
        exporter.stop()
    assert status == 200
    text = body.decode()
    assert 'gpu_up{DCGM_FI_DRIVER_VERSION="550.54.15",Hostname="sim"' in text
    assert "gpu_exporter_kubelet_errors_total" in text
    assert "NaN" not in text


def test_runs_as_a_process_and_stops_on_sigterm() -> None:
    port = free_port()
    command = [sys.executable, "-m", "exporter", "--simulate", "busy", "--listen", f"127.0.0.1:{port}"]
    command += ["--interval", "0.2", "--no-kubernetes", "--log-format", "json"]
    env = {**os.environ, "NODE_NAME": "node-from-env"}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        _wait_healthy(port)
        status, body = _get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert b'Hostname="node-from-env"' in body
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0
    records = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    assert records and all({"time", "level", "logger", "message"} <= record.keys() for record in records)
    assert any("stopping" in record["message"] for record in records)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("gpu-exporter ")


def test_log_level_applies_to_the_projects_loggers() -> None:
    port = free_port()
    command = [sys.executable, "-m", "exporter", "--simulate", "idle", "--listen", f"127.0.0.1:{port}"]
    command += ["--interval", "0.2", "--no-kubernetes", "--log-format", "json", "--log-level", "warning"]
    process = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        _wait_healthy(port)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=15)
    levels = {json.loads(line)["level"] for line in stderr.splitlines() if line.strip()}
    assert "info" not in levels  # "serving on port …" and "stopping" are info: not shown


def test_a_bad_collectors_file_exits_2_naming_file_and_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text("# DCGM FIELD, type, help\nDCGM_FI_DEV_GPU_UTIL, gauge, ok\nDCGM_FI_DEV_FB_USED\n")
    argv = ["--listen", "127.0.0.1:0", "--no-kubernetes", "--simulate", "idle", "-f", str(counters)]
    with caplog.at_level(logging.ERROR):
        assert main(argv) == 2
    assert f"{counters}:3" in caplog.text
