"""Command line, configuration, and the assembled exporter (in-process and as a real process)."""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import socket
import ssl
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.exporter import build_exporter, from_args, main
from exporter.config import ConfigError, ExporterConfig, parse_listen
from harness.servers import free_port
from simulation.gpu_scenario_names import SCENARIOS

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
    ("argv", "env", "naming", "label"),
    [
        pytest.param([], {}, "legacy", "Hostname", id="default-legacy-Hostname"),
        pytest.param(["--metric-names", "dcgm-4.7"], {}, "dcgm-4.7", "hostname", id="4.7-hostname"),
        pytest.param([], {"GPU_METRIC_NAMES": "dcgm-4.7"}, "dcgm-4.7", "hostname", id="naming-from-env"),
        pytest.param(
            ["--metric-names", "legacy"],
            {"GPU_METRIC_NAMES": "dcgm-4.7"},
            "legacy",
            "Hostname",
            id="flag-wins",
        ),
        pytest.param(["--hostname-label", "hostname"], {}, "legacy", "hostname", id="legacy-as-4.8.3"),
        pytest.param([], {"GPU_HOSTNAME_LABEL": "Hostname"}, "legacy", "Hostname", id="label-from-env"),
        pytest.param(["-n", "--metric-names", "dcgm-4.7"], {}, "dcgm-4.7", None, id="no-hostname"),
        pytest.param(["--hostname-label", "none"], {}, "legacy", None, id="label-none"),
        pytest.param([], {"GPU_NO_HOSTNAME": "true"}, "legacy", None, id="no-hostname-from-env"),
        pytest.param(
            ["--hostname-label", "hostname"],
            {"GPU_NO_HOSTNAME": "true"},
            "legacy",
            "hostname",
            id="flag-beats-env",
        ),
    ],
)
def test_metric_names_and_node_label(
    argv: list[str], env: dict[str, str], naming: str, label: str | None
) -> None:
    config = from_args(argv, env=env)
    assert (config.metric_names, config.hostname_label) == (naming, label)


def test_pod_uid_and_resource_names_from_flags_or_dcgm_exporters_variables() -> None:
    config = from_args(
        [], env={"GPU_POD_UID": "true", "NVIDIA_RESOURCE_NAMES": "example.com/gpu, example.com/a100"}
    )
    assert (config.pod_uid, config.nvidia_resource_names) == (True, ("example.com/gpu", "example.com/a100"))
    config = from_args(
        ["--nvidia-resource-names", "example.com/h200"], env={"NVIDIA_RESOURCE_NAMES": "x.io/y"}
    )
    assert (config.pod_uid, config.nvidia_resource_names) == (False, ("example.com/h200",))


@pytest.mark.parametrize(
    ("argv", "env", "problem"),
    [
        pytest.param(
            [], {"GPU_METRIC_NAMES": "dcgm-4.9"}, "$GPU_METRIC_NAMES 'dcgm-4.9': expected one of", id="env"
        ),
        pytest.param(
            ["-n", "--hostname-label", "Hostname"], {}, "--no-hostname and --hostname-label", id="both"
        ),
        pytest.param([], {"GPU_NO_HOSTNAME": "maybe"}, "$GPU_NO_HOSTNAME: invalid boolean", id="bool"),
        pytest.param(
            [],
            {"NVIDIA_RESOURCE_NAMES": "example.com/gpu,gpu"},
            "$NVIDIA_RESOURCE_NAMES 'gpu'",
            id="resource",
        ),
        pytest.param(["--nvidia-resource-names", "a/b/c"], {}, "--nvidia-resource-names 'a/b/c'", id="flag"),
    ],
)
def test_bad_naming_options_name_the_option(argv: list[str], env: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        from_args(argv, env=env)
    assert str(raised.value).startswith(problem), raised.value


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--interval", "0"], id="zero-interval"),
        pytest.param(["--metric-names", "dcgm-4.9"], id="unknown-naming"),
        pytest.param(["-n", "--hostname-label", "hostname"], id="no-hostname-and-a-label"),
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


def _reset_mid_response(port: int, context: ssl.SSLContext) -> None:
    """Asks for /metrics over TLS, reads the first bytes of the answer, then resets the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: exporter\r\n\r\n")
        assert sock.recv(16)
        sock.close()


def test_client_failures_are_a_few_json_lines_not_tracebacks(
    tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    port = free_port()
    command = [sys.executable, "-m", "exporter", "--simulate", "busy", "--listen", f"127.0.0.1:{port}"]
    command += ["--no-kubernetes", "--log-format", "json", "--web.config.file", str(web)]
    process = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    trusting = ssl.create_default_context(cafile=str(cert))
    try:
        deadline = time.monotonic() + 90
        while True:  # ready once a trusting client gets an answer
            try:
                url = f"https://127.0.0.1:{port}/healthz"
                with urllib.request.urlopen(url, context=trusting, timeout=5):
                    break
            except OSError:
                assert time.monotonic() < deadline, "exporter never answered"
                time.sleep(0.05)
        for _ in range(30):
            _reset_mid_response(port, trusting)
        for _ in range(5):  # a scraper that does not trust the certificate: the handshake fails
            with (
                pytest.raises(ssl.SSLError),
                socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            ):
                ssl.create_default_context().wrap_socket(raw, server_hostname="127.0.0.1")
        for _ in range(5):  # a scraper speaking plain HTTP to the TLS port
            with socket.create_connection(("127.0.0.1", port), timeout=10) as plain:
                plain.sendall(b"GET /metrics HTTP/1.1\r\nHost: exporter\r\n\r\n")
                plain.recv(100)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0
    lines = stderr.splitlines()
    records = [json.loads(line) for line in lines]  # every line is JSON: no traceback on stderr
    assert len(records) <= 8, stderr  # start, stop, and one or two lines per kind of failure
    by_kind: dict[str, list[dict[str, object]]] = {}
    for record in records:
        by_kind.setdefault(str(record.get("kind")), []).append(record)
    handshakes = by_kind["tls"]
    assert handshakes[0]["level"] == "warning"
    assert 1 + sum(int(str(r.get("repeats", 0))) for r in handshakes) == 10, stderr  # all counted
    # Over TLS a reset often reads as a clean end of stream; what does show up is counted the same way.
    resets = by_kind.get("reset", [])
    assert len(resets) <= 2
    assert all(str(r["client"]).startswith("127.0.0.1:") for r in resets + handshakes)


@pytest.mark.parametrize(
    ("write", "problem"),
    [
        pytest.param(
            lambda d: (d / "web.yml").write_bytes(b"basic_auth_users:\n  caf\xe9: x\n"),
            "--web.config.file {web}: not UTF-8 text (byte 0xe9 at offset 23)",
            id="not-utf8",
        ),
        pytest.param(
            lambda d: (d / "web.yml").write_text("basic_auth_users:\n  prometheus: $2y$10$truncated\n"),
            "{web}: basic_auth_users.prometheus: expected a bcrypt hash",
            id="malformed-bcrypt-hash",
        ),
        pytest.param(
            lambda d: (d / "web.yml").write_text(
                "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"
            ),
            "{web}: tls_server_config.cert_file {dir}/tls.crt: No such file or directory",
            id="missing-certificate",
        ),
    ],
)
def test_a_bad_web_config_exits_2_with_one_line_naming_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, write: Any, problem: str
) -> None:
    write(tmp_path)
    web = tmp_path / "web.yml"
    argv = ["--listen", "127.0.0.1:0", "--no-kubernetes", "--simulate", "idle", "--web.config.file", str(web)]
    with caplog.at_level(logging.ERROR):
        assert main(argv) == 2
    (message,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert message.startswith(problem.format(web=web, dir=tmp_path)), message
    assert "\n" not in message
