"""Starting a command loads what it runs, and no more: ``--help`` and ``--version`` only argument parsing,
an analysis only its output format's renderer (docs/architecture.md, "Start-up time").

Checked by what a fresh interpreter imports (``python -X importtime`` lists every module on stderr), not
by timing, so a loaded CI machine cannot make it flaky.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.servers import PrometheusServer

ROOT = Path(__file__).resolve().parents[2]

# No --help or --version needs these: the engines behind the commands and the libraries they use.
ENGINES = (
    "pydantic",
    "grpc",
    "google.protobuf",
    "pynvml",
    "numpy",
    "matplotlib",
    "jinja2",
    "rich",
    "msgspec",
    "yaml",
    "requests",
    "urllib3",
    "prometheus_api_client",
    "kubernetes",
    "slack_sdk",
    "prometheus_client",
    "bcrypt",
    "common.model",
    "common.thresholds",
    "analyzer.pipeline",
    "analyzer.sources.metrics_source",
    "analyzer.sources.prometheus_config",
    "reaper.policy",
    "reaper.runner",
    "reaper.kube",
    "reaper.executor",
    "simulation.fleet",
    "exporter.app",
    "exporter.http",
)

PARSING_ONLY = [
    ("analyzer", ["--version"]),
    ("analyzer", ["--help"]),
    ("analyzer", ["analyze", "--help"]),
    ("analyzer", ["analyze", "--version"]),
    ("analyzer", ["simulate", "--help"]),
    ("reaper", ["--version"]),
    ("reaper", ["--help"]),
    ("reaper", ["run", "--help"]),
    ("reaper", ["restore", "--help"]),
    ("reaper", ["policy", "--help"]),
    ("reaper", ["policy", "check", "--help"]),
    ("reaper", ["policy", "schema", "--help"]),
    ("reaper", ["demo", "--help"]),
    ("exporter", ["--version"]),
    ("exporter", ["--help"]),
]


def _imports(package: str, argv: list[str]) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """``python -m <package> <argv>`` (the console script's ``main``) in a fresh interpreter, and the
    modules it imported."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", package, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # "import time: <self us> | <cumulative us> | <indented module name>"
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }
    assert modules, done.stderr  # the listing was read: a probe that sees nothing proves nothing
    return done, modules


@pytest.mark.parametrize(
    ("package", "argv"), [pytest.param(p, a, id=f"{p} {' '.join(a)}") for p, a in PARSING_ONLY]
)
def test_help_and_version_load_no_engine(package: str, argv: list[str]) -> None:
    done, modules = _imports(package, argv)
    assert done.returncode == 0, done.stderr
    assert done.stdout  # the help or the version was printed
    assert sorted(modules.intersection(ENGINES)) == []


@pytest.mark.parametrize("package", ["analyzer", "reaper", "exporter"])
def test_no_command_reads_package_metadata(package: str) -> None:
    """importlib.metadata costs as much as the rest of parsing: --version reads common.version,
    the constant the package's metadata is built from (test_conventions checks they agree)."""
    assert "importlib.metadata" not in _imports(package, ["--help"])[1]
    assert "importlib.metadata" not in _imports(package, ["--version"])[1]


@pytest.mark.parametrize(
    ("output_format", "renderer"),
    [("json", None), ("table", "analyzer.report.table")],
)
def test_an_analysis_loads_only_its_output_formats_renderer(output_format: str, renderer: str | None) -> None:
    argv = ["analyze", "--simulate", "standard", "--format", output_format]
    done, modules = _imports("analyzer", argv)
    assert done.returncode == 0, done.stderr
    assert "analyzer.pipeline" in modules  # the analysis did run
    renderers = {
        "analyzer.report.table",
        "analyzer.report.html",
        "analyzer.report.plots",
        "analyzer.report.offenders",
    }
    assert modules.intersection(renderers) == ({renderer} if renderer else set())
    assert sorted(modules.intersection({"matplotlib", "jinja2"})) == []


def test_an_analysis_of_a_tsdb_loads_no_numpy_rich_or_yaml(prometheus_standard: PrometheusServer) -> None:
    """numpy is the raw-sample engine (the simulated source, the HTML report's plots), rich the
    terminal's, yaml the policy file's: an hourly CronJob writing JSON from a TSDB needs none."""
    argv = ["analyze", "--prometheus-url", prometheus_standard.url, "--end", "2026-01-05T00:00:00Z"]
    done, modules = _imports("analyzer", [*argv, "--format", "json"])
    assert done.returncode == 0, done.stderr
    assert '"findings": [' in done.stdout  # the analysis did run and report
    assert sorted(modules.intersection({"numpy", "rich", "yaml"})) == []
