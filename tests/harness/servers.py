"""Start and stop real TSDB servers on free loopback ports.

Both classes are context managers; readiness is awaited on start, and the process is always
reaped on exit so a failed test never leaves a server behind.
"""

from __future__ import annotations

import abc
import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Self

import requests

from harness.binaries import require_binary
from simulation.fleet import Series, byte_chunks, prometheus_text_chunks, write_openmetrics


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server(abc.ABC):
    ready_path = "/"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = workdir / "server.log"

    @abc.abstractmethod
    def _command(self) -> list[str]:
        """The server's command line."""

    def __enter__(self) -> Self:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self._log.open("wb") as log:
            self._proc = subprocess.Popen(self._command(), stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"{self._command()[0]} exited early:\n{self.log_tail()}")
            try:
                if requests.get(self.url + self.ready_path, timeout=2).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self._command()[0]} not ready after {timeout}s:\n{self.log_tail()}")

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (for reading its memory from /proc)."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def backfill_blocks(series: Iterable[Series], workdir: Path) -> Path:
    """Write OpenMetrics and let promtool turn it into TSDB blocks; returns the blocks directory."""
    promtool = require_binary("promtool")
    workdir.mkdir(parents=True, exist_ok=True)
    source, blocks = workdir / "fleet.om", workdir / "blocks"
    with source.open("w", encoding="utf-8") as fh:
        write_openmetrics(series, fh)
    result = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(blocks)],
        capture_output=True,
        text=True,
        check=False,
    )
    source.unlink()
    if result.returncode != 0:
        raise RuntimeError(f"promtool backfill failed:\n{result.stdout}\n{result.stderr}")
    return blocks


def backfill_rules(url: str, rules: Path, start: datetime, end: datetime, workdir: Path) -> Path:
    """Let promtool evaluate recording rules over ``url``'s history into TSDB blocks, as a user who
    adds the rules to an existing Prometheus would; returns the blocks directory."""
    blocks = workdir / "rule-blocks"
    result = subprocess.run(
        [
            require_binary("promtool"),
            "tsdb",
            "create-blocks-from",
            "rules",
            f"--start={start.isoformat()}",
            f"--end={end.isoformat()}",
            f"--url={url}",
            f"--output-dir={blocks}",
            str(rules),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"promtool rules backfill failed:\n{result.stdout}\n{result.stderr}")
    return blocks


def merged_blocks(workdir: Path, *sources: Path) -> Path:
    """One TSDB directory holding the blocks of every source (Prometheus reads overlapping blocks)."""
    merged = workdir / "merged"
    for source in sources:
        for block in source.iterdir():
            if block.is_dir():
                shutil.copytree(block, merged / block.name)
    return merged


class PrometheusServer(_Server):
    """Debian's Prometheus over a private copy of backfilled blocks (the original stays pristine)."""

    ready_path = "/-/ready"

    def __init__(self, workdir: Path, blocks: Path | None = None, config: str = "global: {}\n") -> None:
        super().__init__(workdir)
        self.binary = require_binary("prometheus")
        self.data = workdir / "data"
        if blocks is not None:
            shutil.copytree(blocks, self.data)
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(config, encoding="utf-8")

    def _command(self) -> list[str]:
        return [
            self.binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.data}",
            "--storage.tsdb.retention.time=100y",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",
            "--log.level=warn",
        ]


class VictoriaMetricsServer(_Server):
    """Debian's VictoriaMetrics single-node, fed through its Prometheus text import endpoint."""

    ready_path = "/health"

    def __init__(self, workdir: Path, extra_args: Sequence[str] = ()) -> None:
        """``extra_args``: more command-line flags (``-search.maxQueryDuration=2m``), after ours."""
        super().__init__(workdir)
        self.binary = require_binary("victoria-metrics")
        self.extra_args = tuple(extra_args)

    def _command(self) -> list[str]:
        return [
            self.binary,
            f"-storageDataPath={self.workdir / 'data'}",
            f"-httpListenAddr=127.0.0.1:{self.port}",
            "-retentionPeriod=100y",
            "-search.latencyOffset=0s",
            "-loggerLevel=ERROR",
            *self.extra_args,
        ]

    def import_series(self, series: Iterable[Series]) -> None:
        tally = _Tally()
        with requests.Session() as http:
            for chunk in prometheus_text_chunks(tally.counted(series)):
                r = http.post(f"{self.url}/api/v1/import/prometheus", data=chunk, timeout=120)
                r.raise_for_status()
            # Make the imported samples searchable now rather than after the next periodic flush.
            http.get(f"{self.url}/internal/force_flush", timeout=60).raise_for_status()
            self._wait_until_visible(http, tally)

    def import_json_lines(self, series: Iterable[Series], max_bytes: int = 8 << 20) -> None:
        """The same series through VictoriaMetrics' JSON line import (``/api/v1/import``).

        One line per series with its labels written once, rather than once per sample as in the
        text format: about three times faster for fleets of a few hundred GPUs. Values go exactly
        as simulated (shortest round-trip decimal), timestamps in milliseconds.
        """
        tally = _Tally()
        with requests.Session() as http:
            for chunk in _json_line_chunks(tally.counted(series), max_bytes):
                r = http.post(f"{self.url}/api/v1/import", data=chunk, timeout=120)
                r.raise_for_status()
            http.get(f"{self.url}/internal/force_flush", timeout=60).raise_for_status()
            self._wait_until_visible(http, tally)

    def _wait_until_visible(self, http: requests.Session, tally: _Tally, timeout_s: float = 120.0) -> None:
        """Until a query counts every sample imported: a flush makes the last rows searchable only
        eventually on a busy machine, and a test must judge the whole data, never a half-visible
        import (one sample short turns an exact count into a flaky failure)."""
        if not tally.samples:
            return
        span_s = int(tally.last - tally.first) + 2
        query = f'sum(count_over_time({{__name__=~".+"}}[{span_s}s]))'
        deadline = time.monotonic() + timeout_s
        while True:
            r = http.post(
                f"{self.url}/api/v1/query",
                data={"query": query, "time": f"{tally.last + 1:.3f}", "nocache": "1"},
                timeout=60,
            )
            r.raise_for_status()
            result = r.json()["data"]["result"]
            seen = int(float(result[0]["value"][1])) if result else 0
            if seen >= tally.samples:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"VictoriaMetrics shows {seen} of {tally.samples} imported samples")
            time.sleep(0.2)


class _Tally:
    """The samples of the series that went through ``counted``, and their time range."""

    def __init__(self) -> None:
        self.samples = 0
        self.first = float("inf")
        self.last = float("-inf")

    def counted(self, series: Iterable[Series]) -> Iterator[Series]:
        for s in series:
            if len(s.timestamps):
                self.samples += len(s.timestamps)
                self.first = min(self.first, float(s.timestamps.min()))
                self.last = max(self.last, float(s.timestamps.max()))
            yield s


def _json_line_chunks(series: Iterable[Series], max_bytes: int) -> Iterator[bytes]:
    lines = (
        json.dumps(
            {
                "metric": {"__name__": s.name, **dict(s.labels)},
                "values": s.values.tolist(),
                "timestamps": [round(t * 1000) for t in s.timestamps.tolist()],
            },
            allow_nan=False,  # JSON has no NaN; a gap is a missing sample, never a value
        )
        + "\n"
        for s in series
    )
    return byte_chunks(lines, max_bytes)


@contextmanager
def serving(
    tsdb: str, series: Sequence[Series], workdir: Path
) -> Iterator[PrometheusServer | VictoriaMetricsServer]:
    """``series`` served by a Prometheus (``tsdb="prometheus"``, backfilled before it starts) or a
    VictoriaMetrics (imported once it is up), stopped on leaving."""
    if tsdb == "prometheus":
        server: PrometheusServer | VictoriaMetricsServer = PrometheusServer(
            workdir / "tsdb", blocks=backfill_blocks(series, workdir / "backfill")
        )
    else:
        server = VictoriaMetricsServer(workdir / "tsdb")
    with server:
        if isinstance(server, VictoriaMetricsServer):
            server.import_series(series)
        yield server
