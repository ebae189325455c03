"""``gpu-reaper``: run (the CronJob), restore, policy check, status, digest, demo.

Exit codes: 0 ok, 1 some action failed, 2 bad input, 3 data source unavailable. Options shared with
the other commands (logging, Prometheus, ``--end``, ``--namespace``) come from ``cli.conventions``.

Only what argument parsing needs is imported at the top; each command imports what it uses of the
reaper (the Kubernetes and Slack clients, the policy models) when it runs, so ``--help`` and
``--version`` start quickly (docs/architecture.md, "Start-up time"). It reads the reaper and the
simulation through their packages' public surfaces, not their modules (docs/architecture.md,
"Public surfaces").
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TextIO

from cli import conventions, prometheus_options
from common.errors import BadInputError, DataUnavailableError, ExitCode, GpuToolError

if TYPE_CHECKING:
    from analyzer import MetricsSource
    from reaper import (
        Executor,
        KubeClient,
        KubeSettings,
        Policy,
        RunReport,
        RunSettings,
        SlackCredentials,
        Week,
    )

log = logging.getLogger("cli.reaper")

NAMESPACE_ENV = "POD_NAMESPACE"  # set from the downward API in the CronJob
CLUSTER_ENV = "GPU_CLUSTER"
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


PROG = "gpu-reaper"


def _zero_or_duration_arg(text: str) -> timedelta:
    return timedelta(0) if text.strip() in ("0", "0s") else conventions.duration_arg(text)


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


def _build_parser() -> argparse.ArgumentParser:
    parser = conventions.new_parser(
        PROG, "Reclaim idle GPUs on Kubernetes safely: plan, act, notify, restore.", default_log_level="info"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p_run = conventions.add_command(
        sub, "run", "analyse, plan and (with --apply) act; the CronJob entry point"
    )
    source = p_run.add_mutually_exclusive_group()
    prometheus_options.add_prometheus_url(source)
    source.add_argument(
        "--findings", type=Path, help="a findings JSON file from `gpu-analyzer analyze --format json`"
    )
    p_run.add_argument("--policy", type=Path, required=True, help="policy YAML (see docs/policy.md)")
    mode = p_run.add_mutually_exclusive_group()
    mode.add_argument(
        "--apply", action="store_true", help="make changes (otherwise the policy's mode decides)"
    )
    mode.add_argument("--dry-run", action="store_true", help="never make changes, whatever the policy says")
    conventions.add_end_option(p_run, "analyse and plan as of this time")
    conventions.add_namespace_option(
        p_run,
        "act only on workloads in this namespace, reading the cluster in it alone rather than "
        "cluster-wide (what a reaper granted Roles in these namespaces only may do; nodes are left alone)",
    )
    p_run.add_argument(
        "--cluster",
        type=conventions.cluster_arg,
        metavar="NAME",
        help="the cluster this reaper acts on, as the findings' cluster label (--cluster-label) names it, "
        "where one query view holds several clusters: other clusters' findings are set aside; findings "
        f"that name clusters are refused without it [${CLUSTER_ENV}; default: the policy's cluster]",
    )
    p_run.add_argument(
        "--window", type=conventions.duration_arg, help="analysis window (default: the policy's window)"
    )
    p_run.add_argument(
        "--run-interval",
        type=conventions.duration_arg,
        default=timedelta(hours=1),
        metavar="DURATION",
        help="how often the CronJob runs (default 1h, the chart's schedule): a dry-run replays the "
        "earlier runs at this interval to count confirmations as apply would",
    )
    p_run.add_argument(
        "--report",
        type=Path,
        metavar="FILE",
        help="also write an HTML report: the findings with their plots, and the plan (mode, each action "
        "or skip with its reason, its Slack channel, costs)",
    )
    p_run.add_argument(
        "--notice-annotations",
        action="store_true",
        help="a rule's notice also annotates Deployments, StatefulSets and ReplicaSets "
        "(gpu-reaper/noticed-at, gpu-reaper/act-after), which needs patch on them (the chart's "
        "rbac.noticeAnnotations); without it those get the notice's Event only",
    )
    p_run.add_argument("--pushgateway-url", help="push gpu_reaper_* metrics to this Pushgateway")
    p_run.add_argument(
        "--metrics-file",
        type=Path,
        metavar="FILE",
        help="write the run's gpu_reaper_* metrics to this file in the text exposition format (a "
        "node-exporter textfile collector reads it); -v also logs them",
    )
    prometheus_options.add_prometheus_options(p_run)
    _kube_flags(p_run)

    p_restore = conventions.add_command(sub, "restore", "bring back what the reaper scaled down or cordoned")
    target = p_restore.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "target",
        nargs="?",
        metavar="NAMESPACE/NAME",
        help="what the reaper stopped (a Deployment, a Notebook, a RayCluster…) or the child holding GPUs",
    )
    target.add_argument("--all", action="store_true", help="every reaped workload (and cordoned node)")
    target.add_argument("--node", help="uncordon one node the reaper cordoned")
    conventions.add_namespace_option(p_restore, "with --all: only this namespace (nodes are left alone)")
    p_restore.add_argument("--dry-run", action="store_true", help="show what would be restored")
    _kube_flags(p_restore)

    p_policy = conventions.add_command(sub, "policy", "policy files")
    psub = p_policy.add_subparsers(dest="policy_command", required=True, metavar="COMMAND")
    p_check = conventions.add_command(psub, "check", "validate a policy file and explain what it does")
    p_check.add_argument("file", type=Path)
    p_check.add_argument(
        "--run-interval",
        type=conventions.duration_arg,
        default=timedelta(hours=1),
        metavar="DURATION",
        help="how often the CronJob runs (default 1h, as run's): the window must cover it",
    )
    conventions.add_command(psub, "schema", "print the policy's JSON Schema")

    p_status = conventions.add_command(
        sub, "status", "what the reaper has noticed (and when it may act), stopped, snoozed and restored"
    )
    p_status.add_argument(
        "-o", "--output", choices=("table", "json"), default="table", help="a table (default) or JSON"
    )
    sk = p_status.add_argument_group("Kubernetes")
    sk.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    sk.add_argument("--context", help="kubeconfig context (default: the current context)")
    sk.add_argument("--reaper-namespace", help="namespace holding the reaper's state (as run's)")
    sk.add_argument("--api-timeout", type=float, default=15.0, metavar="SECONDS", help="per-request timeout")

    _digest_parser(sub)

    p_demo = conventions.add_command(
        sub, "demo", "the whole pipeline on a simulated fleet: no cluster, no Prometheus"
    )
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


def _check(args: argparse.Namespace) -> None:
    if args.command == "run":
        prometheus_options.require_one_source(args, "--findings")
    if args.command == "digest":
        prometheus_options.from_environment(args)
        if args.prometheus_url is None:
            raise BadInputError(f"--prometheus-url (or ${prometheus_options.URL_ENV}) is required")
    if args.command == "restore":
        if args.namespaces and not args.all:
            raise BadInputError("--namespace only goes with --all")
        target = args.target
        if target is not None and (target.count("/") != 1 or not all(target.split("/"))):
            raise BadInputError(f"restore target {target!r} must be NAMESPACE/NAME")


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    args = conventions.parse(_build_parser(), argv, _check)
    if isinstance(args, int):
        return args
    if (
        args.command == "demo"
        and getattr(args, "log_level", None) is None
        and not getattr(args, "verbose", 0)
    ):
        args.log_level = "warning"  # the demo speaks through its own output
    with conventions.logging_for(args):
        try:
            if args.command == "run":
                return _cmd_run(args, out)
            if args.command == "restore":
                return _cmd_restore(args, out)
            if args.command == "policy":
                return _cmd_policy(args, out)
            if args.command == "status":
                return _cmd_status(args, out)
            if args.command == "digest":
                return _cmd_digest(args, out)
            return _cmd_demo(args, out)
        except (BadInputError, DataUnavailableError) as e:
            # Plain text on stderr, once: whoever runs it (a person, or the CronJob's log) must read it.
            return conventions.fail(PROG, e)


# --- run -------------------------------------------------------------------------------------------


def _reaper_namespace(args: argparse.Namespace, policy: Policy | None) -> str:
    from reaper import DEFAULT_REAPER_NAMESPACE

    if args.reaper_namespace:
        return str(args.reaper_namespace)
    if os.environ.get(NAMESPACE_ENV):
        return os.environ[NAMESPACE_ENV]
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip()
    except OSError:
        return policy.reaper_namespace if policy else DEFAULT_REAPER_NAMESPACE


def _cluster(args: argparse.Namespace, policy: Policy) -> str | None:
    """The cluster the run acts on: ``--cluster``, else ``$GPU_CLUSTER``, else the policy's; logged
    with where it came from."""
    cluster, origin = args.cluster, "--cluster"
    if cluster is None and os.environ.get(CLUSTER_ENV):
        try:
            cluster, origin = conventions.cluster_arg(os.environ[CLUSTER_ENV]), f"${CLUSTER_ENV}"
        except argparse.ArgumentTypeError as e:
            raise BadInputError(f"${CLUSTER_ENV}: {e}") from e
    if cluster is None:
        cluster, origin = policy.cluster, "the policy's cluster:"
    if cluster is None:
        log.debug("no cluster configured: findings must name none (see --cluster)")
        return None
    if policy.cluster is not None and policy.cluster != cluster:
        log.warning(
            "acting on cluster %s (from %s), not on the policy's cluster: %s", cluster, origin, policy.cluster
        )
    else:
        log.info("acting on cluster %s (from %s)", cluster, origin)
    return str(cluster)


def _check_windows(args: argparse.Namespace, policy: Policy) -> None:
    """``--window`` is checked as the policy's window is; either must cover the time between runs
    where the run analyses (a findings file holds one window, whatever the runs' interval)."""
    from common.durations import MIN_ANALYSIS_WINDOW, format_setting

    if args.window and args.window < MIN_ANALYSIS_WINDOW:
        raise BadInputError(
            f"--window {format_setting(args.window)} is shorter than the analyzer judges "
            f"({format_setting(MIN_ANALYSIS_WINDOW)} at least)"
        )
    gap = policy.gap_between_runs(args.run_interval) if args.findings is None else None
    if gap:
        raise BadInputError(f"{'--window' if args.window else args.policy}: {gap} (--run-interval)")


class _RunInputs(NamedTuple):  # not a dataclass: see cli.prometheus_options._Option
    settings: RunSettings
    kube: KubeSettings


def _run_inputs(args: argparse.Namespace) -> _RunInputs:
    from reaper import KubeSettings, RunMode, RunSettings, load_policy

    policy = load_policy(args.policy)
    if args.window:
        policy = policy.model_copy(update={"window": args.window})  # checked by _check_windows
    mode = RunMode.APPLY if args.apply else RunMode.DRY_RUN if args.dry_run else policy.mode
    namespace = _reaper_namespace(args, policy)
    if namespace != policy.reaper_namespace:
        # Whatever namespace the reaper runs in is protected, not only the one the policy names.
        policy = policy.model_copy(update={"reaper_namespace": namespace})
    settings = RunSettings(
        policy=policy,
        mode=mode,
        namespace=namespace,
        end=args.end,
        lease_wait=args.lease_wait,
        # A findings file holds one window: there is no history to replay.
        run_interval=None if args.findings is not None else args.run_interval,
        cluster=_cluster(args, policy),
        namespaces=tuple(dict.fromkeys(args.namespaces or ())),
        notice_annotations=args.notice_annotations,
    )
    kube = KubeSettings(kubeconfig=args.kubeconfig, context=args.context, timeout_seconds=args.api_timeout)
    return _RunInputs(settings, kube)


# The summary line's word for a run stopped by an error before it could report on itself.
_STOPPED = {ExitCode.BAD_INPUT: "bad_input", ExitCode.DATA_UNAVAILABLE: "data_unavailable"}


def _cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    """One run; it ends with its summary line on stdout, whatever stopped it (docs/reaper.md)."""
    from reaper import RunMode

    mode = RunMode.APPLY if args.apply else RunMode.DRY_RUN if args.dry_run else None
    try:
        inputs = _run_inputs(args)  # policy errors end here: exit 2 before any API call
        mode = inputs.settings.mode
        return _run(args, inputs, out)
    except GpuToolError as e:
        code = conventions.fail(PROG, e)
        shown = f"mode={mode.value} " if mode is not None else ""  # no mode it never learned
        print(f"{PROG}: {shown}error={_STOPPED.get(e.exit_code, 'failed')}", file=out, flush=True)
        return code


def _run(args: argparse.Namespace, inputs: _RunInputs, out: TextIO) -> int:
    # The analyzer (numpy, requests, msgspec) loads only here, with the sources: for commands that analyse.
    from reaper import (
        KubeClient,
        SlackNotifier,
        file_source,
        load_credentials,
        prometheus_metrics,
        prometheus_source,
        run,
    )

    settings = inputs.settings
    _check_windows(args, settings.policy)
    namespaces = tuple(args.namespaces or ())
    for path, flag in ((args.report, "--report"), (args.metrics_file, "--metrics-file")):
        if path is not None:
            conventions.check_writable(path, flag)  # before the run, not after it
    metrics = None
    if args.findings is not None:
        source = file_source(args.findings, namespaces)
    else:
        config = prometheus_options.prometheus_config(args)
        source = prometheus_source(
            config,
            gpu_util_unit=args.gpu_util_unit,
            namespaces=namespaces,
            cluster=settings.cluster,
            cluster_label=args.cluster_label,
        )
        metrics = prometheus_metrics(
            config, gpu_util_unit=args.gpu_util_unit, cluster_label=args.cluster_label
        )
    credentials = load_credentials()
    notifier = SlackNotifier(credentials, api_url=settings.policy.slack.api_url) if credentials else None
    # The kubeconfig is read now, before an analysis that can take minutes: a typo fails at once.
    client = KubeClient.from_settings(inputs.kube)
    try:
        report = run(settings, source, lambda: client, notifier)
    finally:
        client.close()
    if args.report is not None:
        _write_report(args.report, report, settings, metrics, credentials)
    return _finish(report, args, out)


def _write_report(
    path: Path,
    report: RunReport,
    settings: RunSettings,
    metrics: MetricsSource | None,
    credentials: SlackCredentials | None,
) -> None:
    """The HTML report of the run; a run that never got its findings has nothing to show."""
    from reaper import run_section, write_html_report

    if report.found is None:
        log.warning("no HTML report: the run stopped before it had findings (%s)", report.failure)
        return
    slack = "off" if credentials is None else "webhook" if credentials.webhook_mode else "bot"
    sections = [run_section(report, settings, slack)]
    thresholds, currency = settings.policy.thresholds, settings.policy.currency
    try:
        try:
            write_html_report(
                path,
                report.found,
                thresholds,
                source=metrics,
                sections=sections,
                currency=currency,
                cluster=settings.cluster,
            )
        except DataUnavailableError as e:
            # The plots need Prometheus again; the plan must not be lost because they cannot be drawn.
            log.warning("the report's plots are left out: %s", e)
            write_html_report(path, report.found, thresholds, sections=sections, currency=currency)
    except BadInputError as e:
        # The run is done (and may have acted): its exit code says how it went, the log says this.
        log.error("%s", e)
        return
    log.info("wrote the HTML report to %s", path)


def _finish(report: RunReport, args: argparse.Namespace, out: TextIO) -> int:
    from reaper import EXIT_OK, Outcome, PushgatewayError, exposition, push, registry_for

    metrics = report.metrics()
    text = exposition(metrics)
    # Thirty lines every run buried the log's news: shown on request (-v, or debug), or kept in a file.
    shown = logging.INFO if getattr(args, "verbose", None) else logging.DEBUG
    log.log(shown, "run metrics:\n%s", text.rstrip())
    if args.metrics_file is not None:
        _write_metrics(args.metrics_file, text)
    if args.pushgateway_url:
        try:
            push(args.pushgateway_url, registry_for(metrics))
        except PushgatewayError as e:
            log.warning("%s", e)
    log.log(
        logging.INFO if report.exit_code == EXIT_OK else logging.ERROR,
        _how_it_ended(report),
        extra={
            "mode": report.mode,
            "cluster": report.cluster,
            "findings": report.findings,
            "other_clusters": report.other_clusters,
            "planned": report.planned,
            "applied": report.count(Outcome.APPLIED),
            "skipped": report.skipped,
            "failed": report.count(Outcome.FAILED),
            "exit_code": report.exit_code,
            "error": report.failure,
        },
    )
    print(report.summary_line(), file=out, flush=True)
    return report.exit_code


def _how_it_ended(report: RunReport) -> str:
    """The run's last log line: a run that stopped never reads as one that finished."""
    from reaper import Outcome

    if report.lease_held:
        return "run did nothing: another run holds the lease"
    if report.failure is not None:
        return f"run stopped ({report.failure}): nothing was done"
    failed = report.count(Outcome.FAILED)
    if failed:
        return f"run finished with {failed} failed action{'s' if failed != 1 else ''}"
    return "run finished"


def _write_metrics(path: Path, text: str) -> None:
    """The exposition, replaced whole (written aside, then renamed): a textfile collector reading
    it meanwhile sees the last run's metrics or this one's, never half of them."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)
    except OSError as e:
        # Like a Pushgateway outage: the run is done, its exit code says how it went.
        log.warning("cannot write --metrics-file %s: %s", path, e.strerror or e)


# --- restore ---------------------------------------------------------------------------------------


def _cmd_restore(args: argparse.Namespace, out: TextIO) -> int:
    """One restore; like a run, it ends with its summary line on stdout, whatever stopped it."""
    mode = "dry-run" if args.dry_run else "apply"
    try:
        return _restore(args, out)
    except GpuToolError as e:
        code = conventions.fail(PROG, e)
        print(
            f"{PROG}: restore mode={mode} error={_STOPPED.get(e.exit_code, 'failed')}", file=out, flush=True
        )
        return code


def _restore(args: argparse.Namespace, out: TextIO) -> int:
    from reaper import (
        EXIT_ACTION_FAILED,
        EXIT_OK,
        Executor,
        KubeClient,
        KubeError,
        KubeSettings,
        LeaseHeldError,
        Outcome,
        RunMode,
    )

    namespace = _reaper_namespace(args, None)
    kube_settings = KubeSettings(
        kubeconfig=args.kubeconfig, context=args.context, timeout_seconds=args.api_timeout
    )
    client = KubeClient.from_settings(kube_settings)
    mode = RunMode.DRY_RUN if args.dry_run else RunMode.APPLY
    executor = Executor(client, mode=mode, namespace=namespace)
    try:
        _check_restore_target(client, executor, args)
        with executor.lease(wait=args.lease_wait.total_seconds() or 30.0):
            if args.all:
                results = []
                for ns in args.namespaces or [None]:
                    results += executor.restore_all(ns)
            elif args.node:
                results = [executor.uncordon(args.node)]
            else:
                ns, name = args.target.split("/")
                results = [executor.restore_workload(ns, name)]
    except LeaseHeldError as e:
        log.error("%s; try again when it finishes", e)
        return EXIT_ACTION_FAILED
    except KubeError as e:
        raise DataUnavailableError(str(e)) from e
    finally:
        client.close()
    for r in results:
        print(f"{r.outcome.value:8} {r.target}: {r.detail}", file=out)
    failed = sum(1 for r in results if r.outcome is Outcome.FAILED)
    restored = sum(1 for r in results if r.outcome in (Outcome.APPLIED, Outcome.DRY_RUN))
    # A dry-run restored nothing: it says what it would restore.
    done = "restored" if mode.writes else "would_restore"
    print(
        f"{PROG}: restore mode={mode.value} {done}={restored} "
        f"unchanged={len(results) - restored - failed} failed={failed}",
        file=out,
    )
    return EXIT_ACTION_FAILED if failed else EXIT_OK


def _check_restore_target(client: KubeClient, executor: Executor, args: argparse.Namespace) -> None:
    """A namespace, workload or node that does not exist is bad input (exit 2) in all three forms,
    not an empty success or a failed action: the name was probably mistyped."""
    if args.all:
        # One by one: a reaper granted Roles in these namespaces only may read each, not list all.
        missing = [ns for ns in args.namespaces or () if not _namespace_exists(client, ns)]
        if missing:
            raise BadInputError(f"namespace {', '.join(sorted(missing))} does not exist")
    elif args.node:
        if client.get_optional("Node", None, args.node) is None:
            raise BadInputError(f"node {args.node} does not exist")
    else:
        ns, name = args.target.split("/")
        if not executor.objects_named(ns, name):
            raise BadInputError(f"{ns}/{name} does not exist (no kind gpu-reaper stops has that name)")


def _namespace_exists(client: KubeClient, name: str) -> bool:
    """Whether the namespace exists; one the reaper may not read is taken to (the restore finds
    nothing there to bring back if it does not)."""
    from reaper import ForbiddenError

    try:
        return client.get_optional("Namespace", None, name) is not None
    except ForbiddenError:
        return True


# --- policy ----------------------------------------------------------------------------------------


def _cmd_policy(args: argparse.Namespace, out: TextIO) -> int:
    import json

    from reaper import EXIT_OK, explain, json_schema, load_policy

    if args.policy_command == "schema":
        print(json.dumps(json_schema(), indent=2, sort_keys=True), file=out)
        return EXIT_OK
    policy = load_policy(args.file)
    gap = policy.gap_between_runs(args.run_interval)
    if gap:
        raise BadInputError(f"{args.file}: {gap} (--run-interval)")
    print(f"{args.file}: valid", file=out)
    print(explain(policy), file=out)
    return EXIT_OK


# --- status ----------------------------------------------------------------------------------------


def _cmd_status(args: argparse.Namespace, out: TextIO) -> int:
    from datetime import UTC, datetime

    from reaper import EXIT_OK, KubeClient, KubeError, KubeSettings, read_status, status_json, status_table

    kube = KubeSettings(kubeconfig=args.kubeconfig, context=args.context, timeout_seconds=args.api_timeout)
    client = KubeClient.from_settings(kube)
    now = datetime.now(UTC)
    try:
        rows = read_status(client, _reaper_namespace(args, None), now)
    except KubeError as e:
        raise DataUnavailableError(str(e)) from e
    finally:
        client.close()
    print(status_json(rows, now) if args.output == "json" else status_table(rows), file=out)
    return EXIT_OK


# --- digest --------------------------------------------------------------------------------------


def _digest_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = conventions.add_command(
        sub,
        "digest",
        "post each owner route its namespaces' GPU week: held, used, idle cost, the idlest workloads",
    )
    prometheus_options.add_prometheus_url(p)
    p.add_argument("--policy", type=Path, required=True, help="policy YAML: its Slack routes and prices")
    p.add_argument(
        "--window",
        type=conventions.duration_arg,
        default=timedelta(days=7),
        metavar="DURATION",
        help="how far back the digest looks (default 7d, the chart's weekly schedule)",
    )
    conventions.add_end_option(p, "end of the window")
    p.add_argument("--dry-run", action="store_true", help="print the messages instead of posting them")
    p.add_argument(
        "--cluster",
        type=conventions.cluster_arg,
        metavar="NAME",
        help=f"as run's [${CLUSTER_ENV}; default: the policy's cluster]; not supported yet: the digest "
        "covers every series its Prometheus view holds",
    )
    prometheus_options.add_prometheus_options(p)
    k = p.add_argument_group("Kubernetes (namespaces' gpu-reaper/slack-channel annotations)")
    k.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    k.add_argument("--context", help="kubeconfig context (default: the current context)")
    k.add_argument("--api-timeout", type=float, default=15.0, metavar="SECONDS", help="per-request timeout")


def _cmd_digest(args: argparse.Namespace, out: TextIO) -> int:
    """One digest; like a run, it ends with its summary line on stdout, whatever stopped it."""
    try:
        return _digest(args, out)
    except GpuToolError as e:
        code = conventions.fail(PROG, e)
        print(f"{PROG}: digest error={_STOPPED.get(e.exit_code, 'failed')}", file=out, flush=True)
        return code


def _digest(args: argparse.Namespace, out: TextIO) -> int:
    from datetime import UTC, datetime

    from common.model import TimeWindow
    from common.thresholds import Pricing
    from reaper import (
        KubeClient,
        KubeError,
        KubeSettings,
        SlackNotifier,
        load_credentials,
        load_policy,
        preview,
        prometheus_chargeback,
        run_digest,
    )

    policy = load_policy(args.policy)
    cluster = _cluster(args, policy)
    if cluster is not None:
        # A chargeback by namespace adds up every cluster's namespaces of the same name: posting
        # that to this cluster's owners would be a wrong bill, not a partial one.
        raise BadInputError(
            f"the digest cannot yet keep to cluster {cluster}: it would count every cluster's series "
            "its Prometheus view holds; point --prometheus-url (or --prometheus-tenant) at this "
            "cluster's series alone and configure no cluster"
        )
    credentials = load_credentials()
    if credentials is None and not args.dry_run:
        raise BadInputError(
            "Slack is not configured (GPU_REAPER_SLACK_TOKEN or GPU_REAPER_SLACK_WEBHOOK_URL, or their "
            "_FILE forms): nothing to post with; --dry-run prints the messages"
        )
    notifier = SlackNotifier(credentials, api_url=policy.slack.api_url) if credentials else None
    config = prometheus_options.prometheus_config(args)
    pricing = Pricing(price_per_gpu_hour=policy.price, currency=policy.currency, prices=policy.prices)
    now = datetime.now(UTC)
    window = TimeWindow.ending(args.end or now, args.window)

    def week(w: TimeWindow) -> Week:
        return prometheus_chargeback(
            config,
            w,
            pricing,
            policy.thresholds.idle_percent,
            now,
            gpu_util_unit=args.gpu_util_unit,
            cluster_label=args.cluster_label,
        )

    kube = KubeSettings(kubeconfig=args.kubeconfig, context=args.context, timeout_seconds=args.api_timeout)
    client = KubeClient.from_settings(kube)
    try:
        report = run_digest(policy, window, week, client, notifier, dry_run=args.dry_run)
    except KubeError as e:
        raise DataUnavailableError(str(e)) from e
    finally:
        client.close()
    if args.dry_run and report.messages:
        print(preview(report.messages), file=out)
    for s in report.skipped:
        print(f"skipped  {s.namespace}: {s.reason}", file=out)
    print(report.summary_line(), file=out, flush=True)
    return report.exit_code


# --- demo ------------------------------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    from simulation import run_demo

    conventions.check_writable(args.output)  # before the demo, not after it

    return run_demo(scenario=args.scenario, policy_path=args.policy, output=args.output, out=out)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
