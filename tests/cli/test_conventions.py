"""What the three commands share: --version, logging options anywhere, one error format, the same
Prometheus options, ``python -m``, and the setup script's own usage errors."""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import pytest

from cli import analyzer, exporter, prometheus_options, reaper
from harness.findings import report
from harness.kube_emulator import EmulatedCluster

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "docs" / "policy.example.yaml"


def _reaper(argv: list[str]) -> int:
    return reaper.main(argv, stdout=io.StringIO())


MAINS: dict[str, Callable[[list[str]], int]] = {
    "gpu-exporter": exporter.main,
    "gpu-analyzer": analyzer.main,
    "gpu-reaper": reaper.main,
}


@pytest.mark.parametrize("prog", MAINS)
def test_version(prog: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert MAINS[prog](["--version"]) == 0
    assert capsys.readouterr().out == f"{prog} {version('kube-gpu-reaper')}\n"


@pytest.mark.parametrize(
    ("prog", "argv", "command"),
    [
        pytest.param("gpu-exporter", ["--frobnicate"], "gpu-exporter", id="exporter"),
        pytest.param(
            "gpu-analyzer",
            ["analyze", "--simulate", "standard", "--frobnicate"],
            "gpu-analyzer analyze",
            id="analyzer",
        ),
        pytest.param(
            "gpu-reaper",
            ["policy", "check", str(POLICY), "--frobnicate"],
            "gpu-reaper policy check",
            id="reaper",
        ),
        # Before any command: the flag is named, not reported as a missing command.
        pytest.param("gpu-reaper", ["--frobnicate"], "gpu-reaper", id="reaper-before-the-command"),
        # Before a command that is given: said with that command's usage, the deepest reached.
        pytest.param(
            "gpu-analyzer",
            ["--frobnicate", "analyze"],
            "gpu-analyzer analyze",
            id="analyzer-before-the-command",
        ),
        pytest.param("gpu-reaper", ["policy", "--frobnicate"], "gpu-reaper policy", id="reaper-policy"),
    ],
)
def test_usage_errors_name_the_flag_with_the_usage_of_their_command(
    prog: str, argv: list[str], command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert MAINS[prog](argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith(f"usage: {command} ")
    assert err[-1] == f"{command}: error: unrecognized arguments: --frobnicate"


@pytest.mark.parametrize(
    ("prog", "argv"),
    [
        pytest.param("gpu-reaper", [], id="reaper"),
        pytest.param("gpu-reaper", ["policy"], id="reaper-policy"),
        pytest.param("gpu-analyzer", ["-v"], id="analyzer"),
    ],
)
def test_a_missing_command_is_still_said(
    prog: str, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert MAINS[prog](argv) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .splitlines()[-1]
        .endswith("error: the following arguments are required: COMMAND")
    )


@pytest.mark.parametrize(
    ("prog", "argv"),
    [
        pytest.param("gpu-reaper", ["run", "--version"], id="reaper-run"),
        pytest.param("gpu-reaper", ["policy", "check", "--version"], id="reaper-policy-check"),
        pytest.param("gpu-analyzer", ["analyze", "--version"], id="analyzer"),
    ],
)
def test_version_after_the_command(prog: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """As the README says: --version before or after a command (which needs nothing else then)."""
    assert MAINS[prog](argv) == 0
    assert capsys.readouterr().out == f"{prog} {version('kube-gpu-reaper')}\n"


@pytest.mark.parametrize(
    ("prog", "argv"),
    [
        pytest.param(
            "gpu-analyzer", ["analyze", "--simulate", "standard", "--window", "soon"], id="analyzer"
        ),
        pytest.param(
            "gpu-reaper", ["run", "--findings", "f.json", "--policy", "p", "--end", "x"], id="reaper"
        ),
    ],
)
def test_bad_values_name_the_command_and_the_option(
    prog: str, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert MAINS[prog](argv) == 2
    command = argv[0]
    assert re.search(rf"^{prog} {command}: error: argument --\w+: invalid", capsys.readouterr().err, re.M)


def _json_records(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("before", [True, False], ids=["before-the-command", "after-the-command"])
def test_logging_options_before_or_after_the_command(
    before: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    logging_options = ["--log-format", "json", "-v"]
    command = ["analyze", "--simulate", "standard", "--format", "json"]
    argv = [*logging_options, *command] if before else [*command, *logging_options]
    assert analyzer.main(argv) == 0
    records = _json_records(capsys.readouterr().err)
    assert {r["level"] for r in records} == {"info"}  # -v: each step, at info
    assert any(r["message"] == "running detectors" for r in records)


@pytest.mark.parametrize("before", [True, False], ids=["before-the-command", "after-the-command"])
def test_reaper_log_options_before_or_after_the_command(
    before: bool, cluster: EmulatedCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    findings = tmp_path / "findings.json"
    findings.write_text(report().to_json(), encoding="utf-8")
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules: [{name: tell, match: {findings: [idle_endpoint]}, action: notify}]\n")
    command = ["run", "--findings", str(findings), "--policy", str(policy), "--end", "2026-01-05T00:00:00Z"]
    command += ["--kubeconfig", str(cluster.kubeconfig), "--reaper-namespace", "gpu-reaper"]
    for level, expected in (("info", {"info"}), ("warning", set())):
        logging_options = ["--log-format", "json", "--log-level", level]
        argv = [*logging_options, *command] if before else [*command, *logging_options]
        assert _reaper(argv) == 0
        records = _json_records(capsys.readouterr().err)
        assert {str(r["level"]) for r in records} == expected


def test_the_exporter_takes_a_log_level(capsys: pytest.CaptureFixture[str]) -> None:
    config = exporter.from_args(["--log-level", "debug", "--log-format", "json"])
    assert config.log_format == "json"


def _prometheus_flags(help_text: str) -> set[str]:
    section = help_text.split("Prometheus (secrets", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"^\s+(--[a-z-]+)", section, re.M))


def test_analyzer_and_reaper_take_the_same_prometheus_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert analyzer.main(["analyze", "--help"]) == 0
    analyze_help = capsys.readouterr().out
    assert _reaper(["run", "--help"]) == 0
    run_help = capsys.readouterr().out
    flags = _prometheus_flags(analyze_help)
    assert {
        "--prometheus-token-file",
        "--prometheus-tenant",
        "--prometheus-timeout",
        "--gpu-util-unit",
    } <= flags
    assert flags == _prometheus_flags(run_help)
    for text in (analyze_help, run_help):
        assert "--prometheus-url" in text and "--end" in text and "--namespace" in text


@pytest.mark.parametrize("package", ["exporter", "analyzer", "reaper"])
def test_python_dash_m_runs_each_command(package: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", package, "--version"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout) == (0, f"gpu-{package} {version('kube-gpu-reaper')}\n")


def test_setup_script_rejects_an_unknown_option() -> None:
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh"), "--tests"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "setup: unknown option '--tests'" in done.stderr
    assert "scripts/setup.sh --test" in done.stderr  # the usage, with the right spelling


def test_the_demo_report_is_ignored_by_git() -> None:
    git = shutil.which("git")
    inside = git and subprocess.run([git, "rev-parse"], cwd=ROOT, capture_output=True).returncode == 0
    if not inside:
        pytest.skip("not a git checkout")
    default = reaper._build_parser().parse_args(["demo"]).output
    done = subprocess.run([str(git), "check-ignore", "-q", str(default)], cwd=ROOT)
    assert done.returncode == 0


@pytest.mark.parametrize(
    ("env", "unit"),
    [
        pytest.param({}, "auto", id="default"),
        pytest.param({"GPU_UTIL_UNIT": "ratio"}, "ratio", id="current"),
        pytest.param({"GPU_UTIL_SCALE": "ratio"}, "ratio", id="earlier-name"),
        pytest.param({"GPU_UTIL_UNIT": "percent", "GPU_UTIL_SCALE": "ratio"}, "percent", id="current-wins"),
    ],
)
def test_the_unit_of_the_device_gauge_comes_from_either_variable(env: dict[str, str], unit: str) -> None:
    parser = argparse.ArgumentParser()
    prometheus_options.add_prometheus_url(parser)
    prometheus_options.add_prometheus_options(parser)
    args = parser.parse_args([])
    prometheus_options.from_environment(args, env)
    assert args.gpu_util_unit == unit
