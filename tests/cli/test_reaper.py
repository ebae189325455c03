"""``gpu-reaper`` end to end in-process: exit codes, the summary line, logs, metrics, bad input."""

from __future__ import annotations

import io
import json
import re
import socket
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pytest_httpserver import HTTPServer

from cli.analyzer import main as analyzer_main
from cli.reaper import main
from common.model import FindingKind, TimeWindow
from harness.findings import NOW, finding, report
from harness.gpu_workloads import gpu_spec
from harness.kube_emulator import EmulatedCluster, write_kubeconfig
from harness.servers import VictoriaMetricsServer
from simulation.fleet import Scenario, simulate
from simulation.in_memory_cluster import manifest

LONG_AGO = NOW - timedelta(days=30)
GOOD_POLICY = """\
safety: {consecutiveRuns: 1}
rules:
  - name: idle
    match: {findings: [idle_endpoint]}
    action: scale_to_zero
"""


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), stdout=out)
    return code, out.getvalue()


@pytest.fixture
def seeded(cluster: EmulatedCluster) -> EmulatedCluster:
    cluster.seed(
        [
            *(manifest("Namespace", n) for n in ("serving", "gpu-reaper")),
            manifest("Deployment", "ranker", "serving", created=LONG_AGO, spec=gpu_spec(2)),
        ]
    )
    return cluster


@pytest.fixture
def findings_file(tmp_path: Path) -> Path:
    path = tmp_path / "findings.json"
    path.write_text(report(finding(FindingKind.IDLE_ENDPOINT, name="ranker")).to_json(), encoding="utf-8")
    return path


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def run_args(kubeconfig: Path, policy: Path, findings: Path, *extra: str) -> list[str]:
    return [
        "run",
        "--findings",
        str(findings),
        "--policy",
        str(policy),
        "--end",
        "2026-01-05T00:00:00Z",
        "--kubeconfig",
        str(kubeconfig),
        "--reaper-namespace",
        "gpu-reaper",
        *extra,
    ]


def test_run_apply_prints_the_summary_line_and_exits_0(
    seeded: EmulatedCluster, findings_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = cli(
        *run_args(seeded.kubeconfig, write(tmp_path, "p.yaml", GOOD_POLICY), findings_file, "--apply")
    )
    assert code == 0
    assert out.strip().splitlines()[-1] == (
        "gpu-reaper: mode=apply findings=1 planned=1 applied=1 skipped=0 failed=0"
    )
    assert seeded.obj("Deployment", "serving", "ranker")["spec"]["replicas"] == 0
    logged = capsys.readouterr().err
    assert logged.strip().splitlines()[-1].endswith("INFO    cli.reaper: run finished")
    assert "gpu_reaper_" not in logged  # the self-metrics only on request: see the next test


def test_the_run_metrics_are_logged_with_v_and_written_with_metrics_file(
    seeded: EmulatedCluster, findings_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = write(tmp_path, "p.yaml", GOOD_POLICY)
    code, _ = cli("-v", *run_args(seeded.kubeconfig, policy, findings_file, "--apply"))
    assert code == 0
    logged = capsys.readouterr().err
    assert 'gpu_reaper_actions_total{action="scale_to_zero",outcome="applied"} 1.0' in logged
    assert "gpu_reaper_last_success_timestamp_seconds" in logged

    metrics = tmp_path / "textfile" / "gpu_reaper.prom"
    metrics.parent.mkdir()
    code, _ = cli(*run_args(seeded.kubeconfig, policy, findings_file, "--metrics-file", str(metrics)))
    assert code == 0
    assert "gpu_reaper_" not in capsys.readouterr().err
    families = {f.name: f for f in text_string_to_metric_families(metrics.read_text(encoding="utf-8"))}
    (found,) = [x for x in families["gpu_reaper_findings"].samples if x.labels["kind"] == "idle_endpoint"]
    assert found.value == 1
    assert "gpu_reaper_actions" in families and "gpu_reaper_run_duration_seconds" in families
    assert list(metrics.parent.iterdir()) == [metrics]  # replaced whole: nothing left aside


def test_policy_mode_apply_applies_unless_dry_run_flag(
    seeded: EmulatedCluster, findings_file: Path, tmp_path: Path
) -> None:
    policy = write(tmp_path, "p.yaml", GOOD_POLICY + "mode: apply\n")
    code, out = cli(*run_args(seeded.kubeconfig, policy, findings_file, "--dry-run"))
    assert code == 0 and "mode=dry-run" in out and seeded.mutations() == []
    code, out = cli(*run_args(seeded.kubeconfig, policy, findings_file))
    assert code == 0 and "mode=apply" in out and "applied=1" in out


def test_json_logs(
    seeded: EmulatedCluster, findings_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = cli(
        "--log-format",
        "json",
        *run_args(seeded.kubeconfig, write(tmp_path, "p.yaml", GOOD_POLICY), findings_file),
    )
    assert code == 0
    records = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert records and all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    assert any(r["message"].startswith("DRY-RUN: would scale Deployment serving/ranker") for r in records)


def test_pushgateway_gets_the_run_metrics(
    seeded: EmulatedCluster, findings_file: Path, tmp_path: Path, httpserver: HTTPServer
) -> None:
    httpserver.expect_request("/metrics/job/gpu-reaper", method="POST").respond_with_data("", status=200)
    code, _ = cli(
        *run_args(seeded.kubeconfig, write(tmp_path, "p.yaml", GOOD_POLICY), findings_file),
        "--pushgateway-url",
        httpserver.url_for("/"),
    )
    assert code == 0
    ((req, _),) = httpserver.log
    body = req.get_data().decode()
    for name in (
        "gpu_reaper_actions_total",
        "gpu_reaper_findings",
        "gpu_reaper_reclaimed_gpu_hours",
        "gpu_reaper_run_duration_seconds",
        "gpu_reaper_last_success_timestamp_seconds",
        "gpu_reaper_slack_failures_total",
    ):
        assert f"\n{name}" in body or body.startswith(name)
    assert 'gpu_reaper_actions_total{action="scale_to_zero",outcome="dry_run"} 1.0' in body


def test_pushgateway_outage_is_only_a_warning(
    seeded: EmulatedCluster, findings_file: Path, tmp_path: Path
) -> None:
    code, _ = cli(
        *run_args(seeded.kubeconfig, write(tmp_path, "p.yaml", GOOD_POLICY), findings_file),
        "--pushgateway-url",
        f"http://127.0.0.1:{closed_port()}",
    )
    assert code == 0


def test_a_pushgateway_url_with_credentials_authenticates_and_is_never_logged_with_them(
    seeded: EmulatedCluster,
    findings_file: Path,
    tmp_path: Path,
    httpserver: HTTPServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    httpserver.expect_request("/metrics/job/gpu-reaper", method="POST").respond_with_data("", status=500)
    url = httpserver.url_for("/").replace("http://", "http://pusher:pu5h-s3cret@")
    code, _ = cli(
        "-v",
        *run_args(seeded.kubeconfig, write(tmp_path, "p.yaml", GOOD_POLICY), findings_file),
        "--pushgateway-url",
        url,
    )
    assert code == 0
    ((req, _),) = httpserver.log
    assert req.authorization is not None and (req.authorization.username, req.authorization.password) == (
        "pusher",
        "pu5h-s3cret",
    )
    logged = capsys.readouterr().err
    assert "answered 500" in logged and "[redacted]@" in logged
    assert "pu5h-s3cret" not in logged


BROKEN_POLICIES = [
    pytest.param("", "the file is empty", id="empty-file"),
    pytest.param("rules: [unclosed\n", "not valid YAML", id="not-yaml"),
    pytest.param(
        GOOD_POLICY.replace("consecutiveRuns: 1", "maxActionsPerRun: lots"),
        "line 1: safety.maxActionsPerRun: Input should be a valid integer",
        id="wrong-type",
    ),
    pytest.param(
        GOOD_POLICY + "slak: {}\n", "slak: unknown field; did you mean 'slack'?", id="unknown-field"
    ),
    pytest.param(
        GOOD_POLICY + "exclude: {namespaces: ['[oops']}\n",
        "exclude.namespaces[0]: glob '[oops' has an unclosed '['",
        id="bad-glob",
    ),
    pytest.param(
        GOOD_POLICY + "grace: {afterCreation: -30m}\n",
        "grace.afterCreation: duration '-30m' is negative",
        id="negative-duration",
    ),
]


@pytest.mark.parametrize(("text", "message"), BROKEN_POLICIES)
def test_broken_policy_exits_2_naming_the_field_with_zero_api_calls(
    seeded: EmulatedCluster,
    findings_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    message: str,
) -> None:
    policy = write(tmp_path, "broken.yaml", text)
    before = seeded.requests()
    code, out = cli(*run_args(seeded.kubeconfig, policy, findings_file, "--apply"))
    err = capsys.readouterr().err
    assert code == 2
    assert f"{policy}: " in err and message in err
    assert out == "gpu-reaper: mode=apply error=bad_input\n"  # every run ends with its summary line
    assert seeded.requests() == before == []
    code, _ = cli("policy", "check", str(policy))
    assert code == 2


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["run", "--findings", "f.json"], id="missing-policy"),
        pytest.param(["run", "--policy", "p.yaml"], id="missing-source"),
        pytest.param(
            ["run", "--findings", "f", "--prometheus-url", "http://x", "--policy", "p"], id="two-sources"
        ),
        pytest.param(["run", "--findings", "f", "--policy", "p", "--end", "yesterday"], id="bad-end"),
        pytest.param(
            ["run", "--findings", "f", "--policy", "p", "--apply", "--dry-run"], id="apply-and-dry-run"
        ),
        pytest.param(
            ["run", "--findings", "f", "--policy", "p", "--end", "2099-01-01T00:00:00Z"],
            id="end-in-the-future",
        ),
        pytest.param(
            ["run", "--prometheus-url", "http://x", "--policy", "p", "--end", "2099-01-01T00:00:00Z"],
            id="end-in-the-future-from-prometheus",
        ),
        pytest.param(["run", "--findings", "f", "--policy", "p", "--namespace", "a/b"], id="bad-namespace"),
        pytest.param(["run", "--findings", "f", "--policy", "p", "--cluster", " "], id="empty-cluster"),
        pytest.param(["restore", "just-a-name"], id="restore-target-without-namespace"),
        pytest.param(["restore", "serving/x", "--namespace", "serving"], id="restore-namespace-without-all"),
        pytest.param(["frobnicate"], id="unknown-command"),
    ],
)
def test_bad_flags_exit_2(argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli(*argv)[0] == 2


def test_bad_kubeconfig_exits_2(
    findings_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = write(tmp_path, "p.yaml", GOOD_POLICY)
    code, out = cli(*run_args(tmp_path / "missing-kubeconfig", policy, findings_file))
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"gpu-reaper: error: --kubeconfig {tmp_path / 'missing-kubeconfig'}: the file does not exist"
    )
    assert out == "gpu-reaper: mode=dry-run error=bad_input\n"
    code, _ = cli(*run_args(tmp_path, policy, findings_file))
    assert code == 2
    assert capsys.readouterr().err.strip().endswith(f"--kubeconfig {tmp_path}: not a file")


def test_a_policy_that_does_not_load_ends_with_a_summary_line_without_a_mode(
    findings_file: Path, tmp_path: Path
) -> None:
    """The mode comes from the policy when no flag gives it: a run that never read one names none."""
    code, out = cli(*run_args(tmp_path / "kubeconfig", tmp_path / "no-policy.yaml", findings_file))
    assert code == 2
    assert out == "gpu-reaper: error=bad_input\n"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def apply_from_prometheus(url: str, policy: Path, kubeconfig: Path) -> list[str]:
    # No retries: what these runs meet (a closed port, an empty tenant) does not change with time,
    # and each retry's back-off would only lengthen the suite.
    source = ["--prometheus-url", url, "--policy", str(policy), "--prometheus-retries", "0"]
    return ["run", *source, "--apply", "--end", "2026-01-05T00:00:00Z", "--kubeconfig", str(kubeconfig)]


def test_prometheus_down_exits_3_says_so_and_touches_nothing(
    seeded: EmulatedCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = write(tmp_path, "p.yaml", GOOD_POLICY)
    code, out = cli(*apply_from_prometheus(f"http://127.0.0.1:{closed_port()}", policy, seeded.kubeconfig))
    assert code == 3
    # No "findings=0 planned=0": that would read as a clean bill of health.
    assert out.strip().splitlines()[-1] == "gpu-reaper: mode=apply error=metrics_unavailable"
    err = capsys.readouterr().err
    assert "Connection refused" in err
    assert seeded.requests() == []
    # The log ends saying the run stopped, not as a run that finished; no metrics dump without -v.
    last = err.strip().splitlines()[-1]
    assert "ERROR   cli.reaper: run stopped (metrics_unavailable): nothing was done" in last
    assert "run finished" not in err and "gpu_reaper_" not in err


def test_kubeconfig_is_checked_before_the_analysis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped kubeconfig fails at once (exit 2), not after the analysis (exit 3 here)."""
    policy = write(tmp_path, "p.yaml", GOOD_POLICY)
    argv = apply_from_prometheus(f"http://127.0.0.1:{closed_port()}", policy, tmp_path / "no-kubeconfig")
    code, out = cli(*argv)
    assert code == 2
    assert "gpu-reaper: error: --kubeconfig " in capsys.readouterr().err
    assert out == "gpu-reaper: mode=apply error=bad_input\n"


def stale_findings(tmp_path: Path) -> Path:
    old = TimeWindow.ending(NOW - timedelta(hours=3), timedelta(hours=6))
    return write(
        tmp_path,
        "old.json",
        report(finding(FindingKind.IDLE_ENDPOINT, name="ranker", window=old), window=old).to_json(),
    )


def test_stale_findings_exit_3_before_any_api_call_and_log_their_own_window(
    seeded: EmulatedCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = stale_findings(tmp_path)
    code, out = cli(*run_args(seeded.kubeconfig, write(tmp_path, "p.yaml", GOOD_POLICY), stale, "--apply"))
    assert code == 3
    assert out.strip().splitlines()[-1] == "gpu-reaper: mode=apply error=stale_findings findings=1"
    assert seeded.requests() == []
    err = capsys.readouterr().err
    # The file's window (ending 3 h before --end), not the policy's window ending at --end.
    assert "findings of 2026-01-04T15:00:00Z → 2026-01-04T21:00:00Z" in err
    assert "2026-01-04T18:00:00Z" not in err
    assert "the findings end at 2026-01-04T21:00:00Z, 3h before 2026-01-05T00:00:00Z" in err
    last = err.strip().splitlines()[-1]
    assert "run stopped (stale_findings): nothing was done" in last and "run finished" not in last


def test_stale_findings_are_called_stale_even_with_the_cluster_down(tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{closed_port()}")
    policy = write(tmp_path, "p.yaml", GOOD_POLICY)
    code, out = cli(*run_args(kubeconfig, policy, stale_findings(tmp_path), "--api-timeout", "2"))
    assert code == 3
    assert out.strip().splitlines()[-1] == "gpu-reaper: mode=dry-run error=stale_findings findings=1"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("<html>", id="not-json"),
        pytest.param('{"schema_version": 1, "findings": "none"}', id="wrong-shape"),
        pytest.param('{"schema_version": 99, "findings": []}', id="unknown-version"),
    ],
)
def test_malformed_findings_file_is_bad_input(
    seeded: EmulatedCluster, tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    findings = write(tmp_path, "f.json", text)
    code, out = cli(*run_args(seeded.kubeconfig, write(tmp_path, "p.yaml", GOOD_POLICY), findings))
    assert code == 2
    assert f"gpu-reaper: error: {findings}: not a findings document" in capsys.readouterr().err
    assert out == "gpu-reaper: mode=dry-run error=bad_input\n"
    assert seeded.requests() == []


@pytest.mark.parametrize(
    ("index", "change", "problem"),
    [
        pytest.param(
            1,
            {"kind": "bogus"},
            "findings[1].kind: 'bogus' is not one of 'idle_endpoint', 'low_utilization', "
            "'dataloader_starvation', 'stalled_job' or 'unknown'",
            id="unknown-kind",
        ),
        pytest.param(
            0,
            {"workload": {"kind": "Deployment"}},
            "findings[0].workload.name: required field is missing",
            id="no-name",
        ),
        pytest.param(
            1, {"workload": None}, "findings[1].workload: must be a JSON object", id="workload-null"
        ),
        pytest.param(
            1,
            {"confidence": "high"},
            "findings[1].confidence: Input should be a valid number",
            id="wrong-type",
        ),
        pytest.param(
            0, {"gpu_count": 7}, "findings[0]: gpu_count 7 disagrees with 1 listed gpus", id="inconsistent"
        ),
        pytest.param(
            0,
            {"gpu_count": "two"},
            "findings[0]: gpu_count must be a whole number, not 'two'",
            id="gpu-count-text",
        ),
    ],
)
def test_a_bad_finding_is_one_line_naming_its_index_and_field(
    seeded: EmulatedCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    index: int,
    change: dict[str, object],
    problem: str,
) -> None:
    doc = json.loads(
        report(finding(FindingKind.IDLE_ENDPOINT, name="a"), finding(FindingKind.IDLE_ENDPOINT)).to_json()
    )
    doc["findings"][index].update(change)
    findings = write(tmp_path, "f.json", json.dumps(doc))
    code, _ = cli(
        "--log-level",
        "warning",
        *run_args(seeded.kubeconfig, write(tmp_path, "p.yaml", GOOD_POLICY), findings),
    )
    assert code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"gpu-reaper: error: {findings}: {problem}")
    assert "pydantic" not in line and "http" not in line and "validation error" not in line
    assert seeded.requests() == []


def test_namespace_scopes_the_run(seeded: EmulatedCluster, tmp_path: Path) -> None:
    seeded.seed(
        [
            manifest("Namespace", "research"),
            manifest("Deployment", "notebook", "research", created=LONG_AGO, spec=gpu_spec(1)),
        ]
    )
    both = write(
        tmp_path,
        "both.json",
        report(
            finding(FindingKind.IDLE_ENDPOINT, name="ranker"),
            finding(FindingKind.IDLE_ENDPOINT, namespace="research", name="notebook"),
        ).to_json(),
    )
    policy = write(tmp_path, "p.yaml", GOOD_POLICY)
    code, out = cli(*run_args(seeded.kubeconfig, policy, both, "--apply", "--namespace", "research"))
    assert code == 0
    assert (
        out.strip().splitlines()[-1]
        == "gpu-reaper: mode=apply findings=1 planned=1 applied=1 skipped=0 failed=0"
    )
    assert seeded.obj("Deployment", "research", "notebook")["spec"]["replicas"] == 0
    assert seeded.obj("Deployment", "serving", "ranker")["spec"]["replicas"] == 2


def test_kubernetes_down_exits_3(findings_file: Path, tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{closed_port()}")
    policy = write(tmp_path, "p.yaml", GOOD_POLICY)
    code, out = cli(*run_args(kubeconfig, policy, findings_file, "--api-timeout", "2"))
    assert code == 3
    assert out.strip().splitlines()[-1] == "gpu-reaper: mode=dry-run error=cluster_unavailable findings=1"


def test_restore_commands(seeded: EmulatedCluster, findings_file: Path, tmp_path: Path) -> None:
    cli(*run_args(seeded.kubeconfig, write(tmp_path, "p.yaml", GOOD_POLICY), findings_file, "--apply"))
    kube = ["--kubeconfig", str(seeded.kubeconfig), "--reaper-namespace", "gpu-reaper"]

    code, out = cli("restore", "serving/ranker", "--dry-run", *kube)
    assert (
        code == 0
        and "dry_run" in out
        and seeded.obj("Deployment", "serving", "ranker")["spec"]["replicas"] == 0
    )

    code, out = cli("restore", "serving/ranker", *kube)
    assert code == 0
    assert out.splitlines()[-1] == "gpu-reaper: restore mode=apply restored=1 unchanged=0 failed=0"
    assert seeded.obj("Deployment", "serving", "ranker")["spec"]["replicas"] == 2

    code, out = cli("restore", "--all", *kube)
    assert code == 0 and "restored=0" in out


@pytest.mark.parametrize(
    ("target", "message"),
    [
        pytest.param(["serving/ghost"], "serving/ghost does not exist", id="object"),
        pytest.param(["--node", "ghost"], "node ghost does not exist", id="node"),
        pytest.param(["--all", "--namespace", "ghost"], "namespace ghost does not exist", id="namespace"),
    ],
)
def test_restore_of_something_that_does_not_exist_is_bad_input(
    seeded: EmulatedCluster, target: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    kube = ["--kubeconfig", str(seeded.kubeconfig), "--reaper-namespace", "gpu-reaper"]
    code, out = cli("restore", *target, *kube)
    assert code == 2
    assert f"gpu-reaper: error: {message}" in capsys.readouterr().err
    assert out == "gpu-reaper: restore mode=apply error=bad_input\n"  # like a run, it ends with a summary
    assert seeded.mutations() == []


def test_restore_all_in_namespaces_that_exist(
    seeded: EmulatedCluster, findings_file: Path, tmp_path: Path
) -> None:
    cli(*run_args(seeded.kubeconfig, write(tmp_path, "p.yaml", GOOD_POLICY), findings_file, "--apply"))
    kube = ["--kubeconfig", str(seeded.kubeconfig), "--reaper-namespace", "gpu-reaper"]
    code, out = cli("restore", "--all", "--namespace", "gpu-reaper", "--namespace", "serving", *kube)
    assert code == 0
    assert out.splitlines()[-1] == "gpu-reaper: restore mode=apply restored=1 unchanged=0 failed=0"
    assert seeded.obj("Deployment", "serving", "ranker")["spec"]["replicas"] == 2


def test_policy_check_explains_a_good_policy(tmp_path: Path) -> None:
    code, out = cli("policy", "check", str(write(tmp_path, "p.yaml", GOOD_POLICY)))
    assert code == 0
    assert out.startswith(f"{tmp_path / 'p.yaml'}: valid\nmode: dry-run")
    assert (
        "1. idle: idle_endpoint on Deployment, StatefulSet in namespaces * "
        "→ scale_to_zero after 1 consecutive runs" in out
    )


def test_policy_schema_is_json() -> None:
    code, out = cli("policy", "schema")
    assert code == 0 and json.loads(out)["title"] == "gpu-reaper policy"


@pytest.mark.parametrize("command", ["run", "restore", "demo"])
def test_secrets_never_go_through_flags(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--help"]) == 0
    flags = set(re.findall(r"--[a-z][a-z-]*", capsys.readouterr().out))
    assert "--policy" in flags or "--all" in flags  # the help text was read
    secret_flags = {f for f in flags if any(word in f for word in ("token", "password", "webhook", "secret"))}
    # Paths to mounted files, never the secrets themselves.
    assert secret_flags <= {"--prometheus-token-file", "--prometheus-password-file"}


@pytest.mark.parametrize("token_env", ["GPU_PROMETHEUS_TOKEN", "GPU_REAPER_PROMETHEUS_TOKEN"])
def test_prometheus_token_is_sent_and_never_logged(
    token_env: str,
    seeded: EmulatedCluster,
    tmp_path: Path,
    httpserver: HTTPServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A Prometheus with no GPU series at all: nothing can be concluded from silence (exit 3).
    empty = {"status": "success", "data": {"resultType": "vector", "result": []}}
    httpserver.expect_request("/api/v1/query").respond_with_json(empty)
    httpserver.expect_request("/api/v1/query_range").respond_with_json(
        {"status": "success", "data": {"resultType": "matrix", "result": []}}
    )
    httpserver.expect_request("/api/v1/series").respond_with_json({"status": "success", "data": []})
    httpserver.expect_request("/api/v1/labels").respond_with_json({"status": "success", "data": []})
    monkeypatch.setenv(token_env, "s3cret-token")
    policy = write(tmp_path, "p.yaml", GOOD_POLICY)
    url = httpserver.url_for("/").rstrip("/")
    code, out = cli("--log-level", "debug", *apply_from_prometheus(url, policy, seeded.kubeconfig))
    assert code == 3
    assert httpserver.log and all(
        req.headers.get("Authorization") == "Bearer s3cret-token" for req, _ in httpserver.log
    )
    assert "s3cret" not in out + capsys.readouterr().err
    assert seeded.mutations() == []


def test_prometheus_tenant_reaches_the_server(
    seeded: EmulatedCluster, tmp_path: Path, httpserver: HTTPServer
) -> None:
    """Mimir serves a tenant's series only to requests naming it in X-Scope-OrgID."""
    httpserver.expect_request("/api/v1/label/__name__/values").respond_with_json(
        {"status": "success", "data": []}
    )
    policy = write(tmp_path, "p.yaml", GOOD_POLICY)
    url = httpserver.url_for("/").rstrip("/")
    code, _ = cli(*apply_from_prometheus(url, policy, seeded.kubeconfig), "--prometheus-tenant", "team-gpu")
    assert code == 3  # an empty tenant: nothing can be concluded from silence
    assert httpserver.log
    assert all(req.headers.get("X-Scope-OrgID") == "team-gpu" for req, _ in httpserver.log)
    assert seeded.mutations() == []


def test_a_tenant_with_spaces_is_bad_input(seeded: EmulatedCluster, tmp_path: Path) -> None:
    policy = write(tmp_path, "p.yaml", GOOD_POLICY)
    url = f"http://127.0.0.1:{closed_port()}"
    code, _ = cli(*apply_from_prometheus(url, policy, seeded.kubeconfig), "--prometheus-tenant", "team a")
    assert code == 2
    assert seeded.requests() == []


def test_demo_checks_its_output_before_running(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "missing-dir" / "report.html"
    code, out = cli("demo", "--output", str(output))
    assert code == 2
    assert f"gpu-reaper: error: --output {output}: directory" in capsys.readouterr().err
    assert out == ""  # the demo never started


def test_a_dry_run_from_a_findings_file_replays_nothing_and_says_so_in_its_report(
    seeded: EmulatedCluster, findings_file: Path, tmp_path: Path
) -> None:
    """A file holds one window: replaying it as earlier runs would confirm what no earlier run saw."""
    policy = write(tmp_path, "p.yaml", GOOD_POLICY.replace("consecutiveRuns: 1", "consecutiveRuns: 2"))
    page = tmp_path / "plan.html"
    code, out = cli(*run_args(seeded.kubeconfig, policy, findings_file, "--dry-run", "--report", str(page)))
    assert code == 0, out
    assert seeded.mutations() == []
    html = page.read_text(encoding="utf-8")
    assert "<code>awaiting_confirmation</code>" in html and "seen on 1 of 2 consecutive runs" in html
    assert "no earlier runs replayed (a findings file has one window)" in html


def test_an_unwritable_report_is_refused_before_the_run(
    seeded: EmulatedCluster, findings_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = write(tmp_path, "p.yaml", GOOD_POLICY)
    missing = tmp_path / "no-such-dir" / "plan.html"
    code, _ = cli(*run_args(seeded.kubeconfig, policy, findings_file, "--apply", "--report", str(missing)))
    assert code == 2
    assert "--report" in capsys.readouterr().err
    assert seeded.mutations() == []


# --- many clusters through one query view ------------------------------------------------------------


@pytest.fixture
def two_clusters(seeded: EmulatedCluster, tmp_path: Path) -> Path:
    """Cluster b's serving/ranker is idle; this cluster (a) has a serving/ranker too, busy: only its
    serving/api is idle. One findings document from the query view over both."""
    seeded.seed([manifest("Deployment", "api", "serving", created=LONG_AGO, spec=gpu_spec(1))])
    found = report(
        finding(FindingKind.IDLE_ENDPOINT, name="ranker").model_copy(update={"cluster": "b"}),
        finding(FindingKind.IDLE_ENDPOINT, name="api").model_copy(update={"cluster": "a"}),
    )
    return write(tmp_path, "fleet.json", found.to_json())


def untouched_ranker(cluster: EmulatedCluster) -> None:
    ranker = cluster.obj("Deployment", "serving", "ranker")
    assert ranker["spec"]["replicas"] == 2
    assert not any(k.startswith("gpu-reaper/") for k in ranker["metadata"].get("annotations") or {})
    # Not even read one by one, let alone written: only listed with every Deployment.
    assert not [u for u in cluster.request_urls() if "ranker" in u[1]]
    assert not [e for e in cluster.objects("Event") if e["involvedObject"]["name"] == "ranker"]


def test_a_reaper_for_cluster_a_never_touches_what_cluster_b_found(
    seeded: EmulatedCluster, two_clusters: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = write(tmp_path, "p.yaml", GOOD_POLICY)
    code, out = cli(*run_args(seeded.kubeconfig, policy, two_clusters, "--apply", "--cluster", "a"))
    assert code == 0, out
    assert out.strip().splitlines()[-1] == (
        "gpu-reaper: mode=apply findings=1 other_clusters=1 planned=1 applied=1 skipped=0 failed=0"
    )
    untouched_ranker(seeded)
    assert seeded.obj("Deployment", "serving", "api")["spec"]["replicas"] == 0
    (event,) = seeded.objects("Event")
    assert event["involvedObject"]["name"] == "api"
    assert event["message"].startswith("[a] gpu-reaper: scale to zero")
    assert "acting on cluster a (from --cluster)" in capsys.readouterr().err


def test_the_cluster_comes_from_the_environment_or_the_policy_and_the_flag_wins(
    seeded: EmulatedCluster,
    two_clusters: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    policy_a = write(tmp_path, "a.yaml", GOOD_POLICY + "cluster: a\n")
    code, out = cli(*run_args(seeded.kubeconfig, policy_a, two_clusters))
    assert code == 0 and "findings=1 other_clusters=1 planned=1" in out
    assert "acting on cluster a (from the policy's cluster:)" in capsys.readouterr().err

    monkeypatch.setenv("GPU_CLUSTER", "a")
    code, out = cli(*run_args(seeded.kubeconfig, write(tmp_path, "p.yaml", GOOD_POLICY), two_clusters))
    assert code == 0 and "findings=1 other_clusters=1 planned=1" in out
    assert "acting on cluster a (from $GPU_CLUSTER)" in capsys.readouterr().err

    # The flag wins over the variable and the policy, and the log says so.
    code, out = cli(*run_args(seeded.kubeconfig, policy_a, two_clusters, "--apply", "--cluster", "b"))
    assert code == 0 and "findings=1 other_clusters=1 planned=1 applied=1" in out
    assert "acting on cluster b (from --cluster), not on the policy's cluster: a" in capsys.readouterr().err
    assert seeded.obj("Deployment", "serving", "ranker")["spec"]["replicas"] == 0
    assert seeded.obj("Deployment", "serving", "api")["spec"]["replicas"] == 1


@pytest.mark.parametrize("clusters", [("a", "b"), ("b",)], ids=["two-clusters", "one-named-cluster"])
def test_findings_naming_clusters_without_a_cluster_exit_2_before_any_api_call(
    seeded: EmulatedCluster, tmp_path: Path, clusters: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    found = report(
        *(
            finding(FindingKind.IDLE_ENDPOINT, name=name).model_copy(update={"cluster": cluster})
            for cluster, name in zip(clusters, ("ranker", "api"), strict=False)
        )
    )
    findings = write(tmp_path, "fleet.json", found.to_json())
    code, out = cli(*run_args(seeded.kubeconfig, write(tmp_path, "p.yaml", GOOD_POLICY), findings, "--apply"))
    assert code == 2
    assert out == "gpu-reaper: mode=apply error=bad_input\n"
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("gpu-reaper: error:")]
    named = "clusters a (1 finding), b (1 finding)" if len(clusters) == 2 else "cluster b (1 finding)"
    assert line.startswith(f"gpu-reaper: error: the findings are of {named}, and no cluster is configured")
    assert "pass --cluster NAME" in line and "cluster: in the policy" in line
    assert seeded.requests() == []
    assert seeded.obj("Deployment", "serving", "ranker")["spec"]["replicas"] == 2


def test_a_blank_cluster_in_the_environment_is_bad_input(
    seeded: EmulatedCluster, two_clusters: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPU_CLUSTER", "  ")
    code, _ = cli(*run_args(seeded.kubeconfig, write(tmp_path, "p.yaml", GOOD_POLICY), two_clusters))
    assert code == 2
    assert seeded.requests() == []


def test_debug_logs_each_api_request(
    seeded: EmulatedCluster, findings_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = write(tmp_path, "p.yaml", GOOD_POLICY)
    code, _ = cli(*run_args(seeded.kubeconfig, policy, findings_file, "--apply", "-vv"))
    assert code == 0
    logged = re.findall(
        r"DEBUG +reaper\.kube: ([A-Z]+) (/[^?:\s]*)\S*: (\d{3}), \d+ bytes in \d+\.\d{3}s$",
        capsys.readouterr().err,
        re.MULTILINE,
    )
    served = seeded.requests()
    assert ("PATCH", "/apis/apps/v1/namespaces/serving/deployments/ranker/scale") in served
    assert sorted((method, path) for method, path, _ in logged) == sorted(served)


def test_findings_no_rule_matches_are_counted_as_action_none(
    seeded: EmulatedCluster, tmp_path: Path, httpserver: HTTPServer
) -> None:
    """`action="none"` is always there (zero included), and counts the findings held back before
    an action was chosen."""
    httpserver.expect_request("/metrics/job/gpu-reaper", method="POST").respond_with_data("", status=200)
    pushed = []
    for kinds in ([FindingKind.IDLE_ENDPOINT], [FindingKind.IDLE_ENDPOINT, FindingKind.LOW_UTILIZATION]):
        found = report(*(finding(kind, name=f"w{i}") for i, kind in enumerate(kinds)))
        findings = write(tmp_path, "f.json", found.to_json())
        argv = run_args(seeded.kubeconfig, write(tmp_path, "p.yaml", GOOD_POLICY), findings)
        assert cli(*argv, "--pushgateway-url", httpserver.url_for("/"))[0] == 0
        body = httpserver.log[-1][0].get_data().decode()
        pushed.append({f.name: f for f in text_string_to_metric_families(body)}["gpu_reaper_actions"])
    none = [[s.value for s in f.samples if s.labels["action"] == "none"] for f in pushed]
    assert none == [[0.0], [1.0]]  # outcome skipped only: the no_rule skip of the low_utilization finding
    assert {s.labels["outcome"] for f in pushed for s in f.samples if s.labels["action"] == "none"} == {
        "skipped"
    }


def test_every_environment_variable_the_reaper_doc_names_is_read() -> None:
    """docs/reaper.md promises no variable the code does not read (nor a family of them by a `*`)."""
    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "reaper.md").read_text(encoding="utf-8")
    named = set(re.findall(r"\$(GPU_[A-Z0-9_]*\*?)", doc)) | set(
        re.findall(r"`(GPU_REAPER_[A-Z0-9_]*\*?)`", doc)
    )
    assert "GPU_REAPER_PROMETHEUS_TOKEN" in named
    code = "\n".join(
        path.read_text(encoding="utf-8")
        for package in ("cli", "reaper", "analyzer", "common")
        for path in (root / package).rglob("*.py")
    )
    unread = sorted(name for name in named if name.endswith("*") or f'"{name}"' not in code)
    assert unread == []


# --- issue 41: never "all fine" on a question that was not answered ----------------------------------

# One node of four GPUs, an idle Deployment on one: small enough to load into a TSDB in a test.
SMALL_FLEET = {
    "name": "small",
    "seed": 5,
    "end": "2026-01-05T00:00:00Z",
    "duration": "7h",
    "step": "60s",
    "analysis_window": "6h",
    "nodes": [{"name": "gpu-s1", "gpus": 4}],
    "workloads": [{"namespace": "serving", "name": "ranker", "behaviour": "idle", "node": "gpu-s1"}],
}


@pytest.fixture(scope="module")
def small_tsdb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A VictoriaMetrics holding SMALL_FLEET's series, which name no cluster; its URL."""
    fleet = simulate(Scenario.model_validate(SMALL_FLEET))
    with VictoriaMetricsServer(tmp_path_factory.mktemp("small-vm")) as vm:
        vm.import_series(fleet.series)
        yield vm.url


def from_tsdb(url: str, policy: Path, kubeconfig: Path, *extra: str) -> list[str]:
    return [
        "run",
        "--prometheus-url",
        url,
        "--policy",
        str(policy),
        "--end",
        "2026-01-05T00:00:00Z",
        "--kubeconfig",
        str(kubeconfig),
        "--reaper-namespace",
        "gpu-reaper",
        "--prometheus-retries",
        "0",
        *extra,
    ]


@pytest.mark.victoriametrics
def test_a_run_says_how_many_gpus_it_judged(seeded: EmulatedCluster, small_tsdb: str, tmp_path: Path) -> None:
    code, out = cli(*from_tsdb(small_tsdb, write(tmp_path, "p.yaml", GOOD_POLICY), seeded.kubeconfig))
    assert code == 0, out
    assert out.strip().splitlines()[-1].startswith("gpu-reaper: mode=dry-run gpus=4 findings=")


@pytest.mark.victoriametrics
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        pytest.param(
            ["--namespace", "nosuchns"],
            "no pod in namespace nosuchns held a GPU in the window (namespaces holding GPUs: serving)",
            id="namespace",
        ),
        pytest.param(
            ["--cluster", "nope"],
            "cluster(s) nope not found in the window (clusters by label 'cluster': none: no GPU series "
            "carries a 'cluster' label)",
            id="cluster",
        ),
    ],
)
def test_a_scope_that_matches_nothing_is_bad_input_as_in_the_analyzer(
    seeded: EmulatedCluster,
    small_tsdb: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    """Never `findings=0 … failed=0, exit 0`, never a plan for a mistyped cluster: exit 2, naming what
    the data does hold, as gpu-analyzer does; nothing asked of the cluster."""
    policy = write(tmp_path, "p.yaml", GOOD_POLICY)
    code, out = cli(*from_tsdb(small_tsdb, policy, seeded.kubeconfig, "--apply", *extra))
    assert code == 2
    assert out.strip().splitlines()[-1] == "gpu-reaper: mode=apply error=bad_input"
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"gpu-reaper: error: {message}"
    assert seeded.requests() == []
    analyzer = ["analyze", "--prometheus-url", small_tsdb, "--end", "2026-01-05T00:00:00Z", *extra]
    assert analyzer_main(analyzer) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"gpu-analyzer: error: {message}"


@pytest.mark.parametrize(
    ("how", "message"),
    [
        pytest.param("flag", "--kubeconfig {path}: not valid YAML (line 2, column 1: ", id="run-flag"),
        pytest.param("env", "$KUBECONFIG {path}: not valid YAML (line 2, column 1: ", id="run-environment"),
        pytest.param("restore", "$KUBECONFIG {path}: not valid YAML (line 2, column 1: ", id="restore-all"),
        pytest.param(
            "list",
            "--kubeconfig {path}: not a kubeconfig (a mapping of clusters, contexts and users)",
            id="a-list",
        ),
    ],
)
def test_a_malformed_kubeconfig_is_one_line_naming_the_file_then_the_summary_line(
    findings_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    how: str,
    message: str,
) -> None:
    kubeconfig = write(tmp_path, "kubeconfig", "- a\n" if how == "list" else "garbage: [\n")
    policy = write(tmp_path, "p.yaml", GOOD_POLICY)
    if how in ("env", "restore"):
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    if how == "restore":
        code, out = cli("restore", "--all")
        summary = "gpu-reaper: restore mode=apply error=bad_input"
    else:
        argv = run_args(kubeconfig, policy, findings_file)
        if how == "env":
            argv = argv[: argv.index("--kubeconfig")] + argv[argv.index("--kubeconfig") + 2 :]
        code, out = cli(*argv)
        summary = "gpu-reaper: mode=dry-run error=bad_input"
    assert code == 2
    assert out.strip().splitlines()[-1] == summary
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("gpu-reaper: error: " + message.format(path=kubeconfig)), line
    assert "Traceback" not in line


def test_a_missing_kubeconfig_named_by_the_environment_is_named(
    findings_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    argv = run_args(tmp_path / "x", write(tmp_path, "p.yaml", GOOD_POLICY), findings_file)
    argv = argv[: argv.index("--kubeconfig")] + argv[argv.index("--kubeconfig") + 2 :]
    assert cli(*argv) == (2, "gpu-reaper: mode=dry-run error=bad_input\n")
    assert (
        capsys.readouterr().err.strip()
        == f"gpu-reaper: error: $KUBECONFIG {missing}: the file does not exist"
    )


NOTIFY_POLICY = """\
safety: {consecutiveRuns: 1}
slack: {channel: "#gpu-waste"}
rules:
  - name: tell
    match: {findings: [low_utilization]}
    action: notify
"""


def test_apply_without_slack_counts_notices_as_not_sent(
    seeded: EmulatedCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Nothing was sent, so nothing is `applied`: one warning, and the notices counted as not sent."""
    for name in ("GPU_REAPER_SLACK_TOKEN", "SLACK_BOT_TOKEN", "GPU_REAPER_SLACK_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    for name in ("GPU_REAPER_SLACK_WEBHOOK_URL", "GPU_REAPER_SLACK_WEBHOOK_URL_FILE"):
        monkeypatch.delenv(name, raising=False)
    found = report(finding(FindingKind.LOW_UTILIZATION, name="ranker"), finding(FindingKind.LOW_UTILIZATION))
    findings = write(tmp_path, "f.json", found.to_json())
    metrics = tmp_path / "gpu_reaper.prom"
    argv = run_args(seeded.kubeconfig, write(tmp_path, "p.yaml", NOTIFY_POLICY), findings, "--apply")
    code, out = cli(*argv, "--metrics-file", str(metrics))
    assert code == 0
    assert out.strip().splitlines()[-1] == (
        "gpu-reaper: mode=apply findings=2 planned=2 applied=0 skipped=0 failed=0 not_sent=2"
    )
    warnings = [line for line in capsys.readouterr().err.splitlines() if "WARNING" in line]
    assert (
        len(warnings) == 1
        and "Slack is not configured" in warnings[0]
        and "2 notices were not sent" in warnings[0]
    )
    families = {f.name: f for f in text_string_to_metric_families(metrics.read_text(encoding="utf-8"))}
    notify = {
        s.labels["outcome"]: s.value
        for s in families["gpu_reaper_actions"].samples
        if s.labels["action"] == "notify"
    }
    assert notify["applied"] == 0 and notify["not_sent"] == 2


def test_an_unknown_flag_is_named_before_a_missing_required_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli("run", "--bogus")[0] == 2
    assert (
        capsys.readouterr().err.strip().splitlines()[-1]
        == "gpu-reaper run: error: unrecognized arguments: --bogus"
    )
    assert cli("run")[0] == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "gpu-reaper run: error: the following arguments are required: --policy"
    )


def test_restore_all_dry_run_says_what_it_would_restore(
    seeded: EmulatedCluster, findings_file: Path, tmp_path: Path
) -> None:
    cli(*run_args(seeded.kubeconfig, write(tmp_path, "p.yaml", GOOD_POLICY), findings_file, "--apply"))
    kube = ["--kubeconfig", str(seeded.kubeconfig), "--reaper-namespace", "gpu-reaper"]
    code, out = cli("restore", "--all", "--dry-run", *kube)
    assert code == 0
    assert out.splitlines()[-1] == "gpu-reaper: restore mode=dry-run would_restore=1 unchanged=0 failed=0"
    assert seeded.obj("Deployment", "serving", "ranker")["spec"]["replicas"] == 0


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        pytest.param({"colour": "red"}, "unknown key 'colour' at the document's top level", id="unknown-key"),
        pytest.param(
            {"gpus_judged": "two"}, "gpus_judged: Input should be a valid integer", id="gpus-judged-text"
        ),
    ],
)
def test_a_bad_findings_document_header_is_refused_naming_the_key(
    seeded: EmulatedCluster,
    findings_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: dict[str, object],
    problem: str,
) -> None:
    """As a key inside a finding is: a typo is never silently dropped."""
    doc = json.loads(findings_file.read_text(encoding="utf-8")) | change
    findings = write(tmp_path, "f.json", json.dumps(doc))
    code, _ = cli(*run_args(seeded.kubeconfig, write(tmp_path, "p.yaml", GOOD_POLICY), findings))
    assert code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"gpu-reaper: error: {findings}: {problem}"), line
    assert seeded.requests() == []


SHORT_WINDOW = GOOD_POLICY + "window: WINDOW\n"


@pytest.mark.parametrize(
    ("window", "interval", "message"),
    [
        pytest.param("5m", None, "window: 5m is shorter than the analyzer judges (10m at least)", id="5m"),
        pytest.param("1m", None, "window: 1m is shorter than the analyzer judges (10m at least)", id="1m"),
        pytest.param(
            "30m",
            "1h",
            "window 30m is shorter than the run interval 1h: 30m between runs would be judged by none",
            id="under-the-run-interval",
        ),
    ],
)
def test_a_window_the_analyzer_refuses_or_that_leaves_gaps_between_runs_is_a_policy_error(
    seeded: EmulatedCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    window: str,
    interval: str | None,
    message: str,
) -> None:
    policy = write(tmp_path, "p.yaml", SHORT_WINDOW.replace("WINDOW", window))
    code, _ = cli("policy", "check", str(policy))
    assert code == 2
    assert message in capsys.readouterr().err
    url = f"http://127.0.0.1:{closed_port()}"
    code, out = cli(
        *from_tsdb(url, policy, seeded.kubeconfig, *(("--run-interval", interval) if interval else ()))
    )
    assert code == 2
    # A policy that does not load names no mode; one that does, its own.
    loaded = "mode=dry-run " if interval else ""
    assert out.strip().splitlines()[-1] == f"gpu-reaper: {loaded}error=bad_input"
    assert message in capsys.readouterr().err
    assert seeded.requests() == []
    # Runs every 15 minutes are covered by a 30-minute window.
    if interval:
        assert cli("policy", "check", str(policy), "--run-interval", "15m")[0] == 0


def test_a_window_flag_is_held_to_the_policys_bounds(
    seeded: EmulatedCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = write(tmp_path, "p.yaml", GOOD_POLICY)
    url = f"http://127.0.0.1:{closed_port()}"
    for window, message in (
        ("5m", "--window 5m is shorter than the analyzer judges (10m at least)"),
        ("30m", "--window: window 30m is shorter than the run interval 1h"),
    ):
        code, out = cli(*from_tsdb(url, policy, seeded.kubeconfig, "--window", window))
        assert code == 2
        assert out.strip().splitlines()[-1] == "gpu-reaper: mode=dry-run error=bad_input"
        assert message in capsys.readouterr().err
    assert seeded.requests() == []
