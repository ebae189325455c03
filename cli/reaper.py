"""``gpu-reaper``: run (the CronJob), restore, policy check, demo.

Exit codes: 0 ok, 1 some action failed, 2 bad input, 3 data source unavailable.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TextIO

from common import logs
from common.errors import BadInputError, DataUnavailableError
from common.timeutil import parse_duration, parse_time
from reaper import names
from reaper.errors import KubeError, LeaseHeldError, PushgatewayError
from reaper.executor import Executor, Outcome
from reaper.kube import KubeClient, KubeSettings
from reaper.metrics import exposition, registry_for
from reaper.policy import Policy, RunMode, explain, json_schema, load_policy
from reaper.pushgateway import push
from reaper.runner import (
    EXIT_ACTION_FAILED,
    EXIT_BAD_INPUT,
    EXIT_DATA_UNAVAILABLE,
    EXIT_OK,
    RunReport,
    RunSettings,
    run,
)
from reaper.slack import SlackNotifier, load_credentials

log = logging.getLogger("cli.reaper")

NAMESPACE_ENV = "POD_NAMESPACE"  # set from the downward API in the CronJob
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so ``main`` returns the exit code."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise BadInputError(f"{self.prog}: {message}")


def _duration_arg(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _zero_or_duration_arg(text: str) -> timedelta:
    return timedelta(0) if text.strip() in ("0", "0s") else _duration_arg(text)


def _time_arg(text: str) -> datetime:
    try:
        return parse_time(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _kube_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Kubernetes (in-cluster configuration when running in a pod, else kubeconfig)")
    g.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    g.add_argument("--context", help="kubeconfig context (default: the current context)")
    g.add_argument(
        "--reaper-namespace",
        help=f"namespace holding the reaper's Lease and state (default: ${NAMESPACE_ENV}, the pod's "
        "namespace, or the policy's reaperNamespace)",
    )
    g.add_argument("--api-timeout", type=float, default=15.0, metavar="SECONDS", help="per-request timeout")
    g.add_argument(
        "--lease-wait",
        type=_zero_or_duration_arg,
        default=timedelta(0),
        metavar="DURATION",
        help="how long to wait for another run's lease (default 0: give up at once)",
    )


def _build_parser() -> _Parser:
    parser = _Parser(
        prog="gpu-reaper",
        description="Reclaim idle GPUs on Kubernetes safely: plan, act, notify, restore.",
    )
    parser.add_argument("--log-format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), help="default: info (demo: warning)"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p_run = sub.add_parser("run", help="analyse, plan and (with --apply) act; the CronJob entry point")
    source = p_run.add_mutually_exclusive_group(required=True)
    source.add_argument("--prometheus-url", help="Prometheus-compatible API (Prometheus, Thanos, Mimir, VM)")
    source.add_argument(
        "--findings", type=Path, help="a findings JSON file from `gpu-analyzer analyze --format json`"
    )
    p_run.add_argument("--policy", type=Path, required=True, help="policy YAML (see docs/policy.md)")
    mode = p_run.add_mutually_exclusive_group()
    mode.add_argument(
        "--apply", action="store_true", help="make changes (otherwise the policy's mode decides)"
    )
    mode.add_argument("--dry-run", action="store_true", help="never make changes, whatever the policy says")
    p_run.add_argument(
        "--end", type=_time_arg, help="analyse and plan as of this time (RFC 3339; default now)"
    )
    p_run.add_argument("--window", type=_duration_arg, help="analysis window (default: the policy's window)")
    p_run.add_argument("--pushgateway-url", help="push gpu_reaper_* metrics to this Pushgateway")
    g = p_run.add_argument_group("Prometheus access (secrets from env or files, never from flags)")
    g.add_argument(
        "--prometheus-token-file", type=Path, help="bearer token file (or env GPU_REAPER_PROMETHEUS_TOKEN)"
    )
    g.add_argument("--prometheus-ca-file", type=Path, help="CA bundle for the Prometheus TLS certificate")
    g.add_argument("--prometheus-insecure-skip-verify", action="store_true", help="do not verify TLS")
    g.add_argument(
        "--tenant",
        "--prometheus-tenant",
        dest="tenant",
        metavar="ID",
        help="Mimir/Cortex tenant, sent as the X-Scope-OrgID header",
    )
    _kube_flags(p_run)

    p_restore = sub.add_parser("restore", help="bring back what the reaper scaled down or cordoned")
    target = p_restore.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "target",
        nargs="?",
        metavar="NAMESPACE/NAME",
        help="what the reaper stopped (a Deployment, a Notebook, a RayCluster…) or the child holding GPUs",
    )
    target.add_argument("--all", action="store_true", help="every reaped workload (and cordoned node)")
    target.add_argument("--node", help="uncordon one node the reaper cordoned")
    p_restore.add_argument("--namespace", help="with --all: only this namespace (nodes are left alone)")
    p_restore.add_argument("--dry-run", action="store_true", help="show what would be restored")
    _kube_flags(p_restore)

    p_policy = sub.add_parser("policy", help="policy files")
    psub = p_policy.add_subparsers(dest="policy_command", required=True, parser_class=_Parser)
    p_check = psub.add_parser("check", help="validate a policy file and explain what it does")
    p_check.add_argument("file", type=Path)
    psub.add_parser("schema", help="print the policy's JSON Schema")

    p_demo = sub.add_parser("demo", help="the whole pipeline on a simulated fleet: no cluster, no Prometheus")
    p_demo.add_argument(
        "--output", type=Path, default=Path("gpu-reaper-report.html"), help="HTML report path"
    )
    p_demo.add_argument("--policy", type=Path, help="policy YAML (default: the built-in demo policy)")
    p_demo.add_argument(
        "--scenario",
        default="demo",
        help="built-in scenario name or YAML path (default: demo, the standard fleet plus a Notebook, an "
        "InferenceService and a RayCluster)",
    )
    return parser


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    try:
        args = _build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except BadInputError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    level = args.log_level or ("warning" if args.command == "demo" else "info")
    handler = logs.configure(args.log_format, getattr(logging, level.upper()))
    try:
        if args.command == "run":
            return _cmd_run(args, out)
        if args.command == "restore":
            return _cmd_restore(args, out)
        if args.command == "policy":
            return _cmd_policy(args, out)
        return _cmd_demo(args, out)
    except BadInputError as e:
        # Plain text on stderr, once: whoever runs it (a person, or the CronJob's log) must read it.
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except DataUnavailableError as e:
        log.error("%s", e)
        return EXIT_DATA_UNAVAILABLE
    finally:
        logs.unconfigure(handler)


# --- run -------------------------------------------------------------------------------------------


def _reaper_namespace(args: argparse.Namespace, policy: Policy | None) -> str:
    if args.reaper_namespace:
        return str(args.reaper_namespace)
    if os.environ.get(NAMESPACE_ENV):
        return os.environ[NAMESPACE_ENV]
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip()
    except OSError:
        return policy.reaper_namespace if policy else names.DEFAULT_REAPER_NAMESPACE


@dataclass(frozen=True)
class _RunInputs:
    settings: RunSettings
    kube: KubeSettings
    pushgateway_url: str | None


def _run_inputs(args: argparse.Namespace) -> _RunInputs:
    policy = load_policy(args.policy)
    if args.window:
        policy = policy.model_copy(update={"window": args.window})
    mode = RunMode.APPLY if args.apply else RunMode.DRY_RUN if args.dry_run else policy.mode
    namespace = _reaper_namespace(args, policy)
    if namespace != policy.reaper_namespace:
        # Whatever namespace the reaper runs in is protected, not only the one the policy names.
        policy = policy.model_copy(update={"reaper_namespace": namespace})
    settings = RunSettings(
        policy=policy, mode=mode, namespace=namespace, end=args.end, lease_wait=args.lease_wait
    )
    kube = KubeSettings(kubeconfig=args.kubeconfig, context=args.context, timeout_seconds=args.api_timeout)
    return _RunInputs(settings, kube, args.pushgateway_url)


def _cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    from reaper import analysis  # the analyzer (pandas, numpy) loads only for commands that analyse

    inputs = _run_inputs(args)  # policy errors end here: exit 2 before any API call
    settings = inputs.settings
    if args.findings is not None:
        source = analysis.file_source(args.findings)
    else:
        source = analysis.prometheus_source(
            analysis.PrometheusAccess.from_env(
                url=args.prometheus_url,
                token_file=args.prometheus_token_file,
                ca_file=args.prometheus_ca_file,
                verify_tls=not args.prometheus_insecure_skip_verify,
                tenant=args.tenant,
            )
        )
    credentials = load_credentials()
    notifier = SlackNotifier(credentials, api_url=settings.policy.slack.api_url) if credentials else None
    clients: list[KubeClient] = []

    def cluster() -> KubeClient:
        client = KubeClient.from_settings(inputs.kube)
        clients.append(client)
        return client

    try:
        report = run(settings, source, cluster, notifier)
    finally:
        for c in clients:
            c.close()
    return _finish(report, inputs.pushgateway_url, out)


def _finish(report: RunReport, pushgateway_url: str | None, out: TextIO) -> int:
    metrics = report.metrics()
    log.info("run metrics:\n%s", exposition(metrics).rstrip())
    if pushgateway_url:
        try:
            push(pushgateway_url, registry_for(metrics))
        except PushgatewayError as e:
            log.warning("%s", e)
    log.info(
        "run finished",
        extra={
            "mode": report.mode,
            "findings": report.findings,
            "planned": report.planned,
            "applied": report.count(Outcome.APPLIED),
            "skipped": report.skipped,
            "failed": report.count(Outcome.FAILED),
            "exit_code": report.exit_code,
        },
    )
    print(report.summary_line(), file=out, flush=True)
    return report.exit_code


# --- restore ---------------------------------------------------------------------------------------


def _cmd_restore(args: argparse.Namespace, out: TextIO) -> int:
    if args.namespace and not args.all:
        raise BadInputError("--namespace only goes with --all")
    target = args.target
    if target is not None and (target.count("/") != 1 or not all(target.split("/"))):
        raise BadInputError(f"restore target {target!r} must be NAMESPACE/NAME")
    namespace = _reaper_namespace(args, None)
    kube_settings = KubeSettings(
        kubeconfig=args.kubeconfig, context=args.context, timeout_seconds=args.api_timeout
    )
    client = KubeClient.from_settings(kube_settings)
    mode = RunMode.DRY_RUN if args.dry_run else RunMode.APPLY
    executor = Executor(client, mode=mode, namespace=namespace)
    try:
        with executor.lease(wait=args.lease_wait.total_seconds() or 30.0):
            if args.all:
                results = executor.restore_all(args.namespace)
            elif args.node:
                results = [executor.uncordon(args.node)]
            else:
                ns, name = target.split("/")
                results = [executor.restore_workload(ns, name)]
    except LeaseHeldError as e:
        log.error("%s; try again when it finishes", e)
        return EXIT_ACTION_FAILED
    except KubeError as e:
        log.error("%s", e)
        return EXIT_DATA_UNAVAILABLE
    finally:
        client.close()
    for r in results:
        print(f"{r.outcome.value:8} {r.target}: {r.detail}", file=out)
    failed = sum(1 for r in results if r.outcome is Outcome.FAILED)
    restored = sum(1 for r in results if r.outcome in (Outcome.APPLIED, Outcome.DRY_RUN))
    print(
        f"gpu-reaper: restore mode={mode.value} restored={restored} "
        f"unchanged={len(results) - restored - failed} failed={failed}",
        file=out,
    )
    return EXIT_ACTION_FAILED if failed else EXIT_OK


# --- policy ----------------------------------------------------------------------------------------


def _cmd_policy(args: argparse.Namespace, out: TextIO) -> int:
    import json

    if args.policy_command == "schema":
        print(json.dumps(json_schema(), indent=2, sort_keys=True), file=out)
        return EXIT_OK
    policy = load_policy(args.file)
    print(f"{args.file}: valid", file=out)
    print(explain(policy), file=out)
    return EXIT_OK


# --- demo ------------------------------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    from simulation import demo

    return demo.run_demo(scenario=args.scenario, policy_path=args.policy, output=args.output, out=out)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
