"""``gpu-analyzer``: find GPU waste from Prometheus data, or write a simulated fleet to backfill one.

Exit codes: 0 done, 2 bad input, 3 data source unavailable (never an "all fine" report instead).
Options shared with the other commands (logging, Prometheus, ``--end``, ``--namespace``) come from
``cli.conventions``; credentials come from files or the environment, never from the command line.

Only what argument parsing needs is imported at the top; the analysis, its model and its outputs are
imported by the functions that run them, so ``--help`` and ``--version`` start quickly and each
``--format`` loads only its own renderer (docs/architecture.md, "Start-up time").
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from cli import conventions, prometheus_options
from common.errors import BadInputError, DataUnavailableError, ExitCode

if TYPE_CHECKING:
    from analyzer import MetricsSource
    from common.model import FindingsReport, TimeWindow

PROG = "gpu-analyzer"

log = logging.getLogger("cli.analyzer")


def _builtin_scenarios() -> str:
    """The built-in fleet scenarios' names, from their files: ``--help`` loads no scenario code."""
    import simulation  # its surface only: nothing of the fleet is imported

    found = sorted(p.stem for p in (Path(simulation.__file__).parent / "fleet" / "scenarios").glob("*.yaml"))
    return ", ".join(found) or "none"


def build_parser() -> argparse.ArgumentParser:
    parser = conventions.new_parser(
        PROG, "Find idle, underused and starved GPUs from DCGM metrics.", default_log_level="warning"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    a = conventions.add_command(sub, "analyze", "analyze a window of metrics and report findings")
    where = a.add_mutually_exclusive_group()
    prometheus_options.add_prometheus_url(where)
    where.add_argument("--simulate", metavar="SCENARIO", help="analyze a simulated fleet instead (no TSDB)")
    a.add_argument(
        "--window", type=conventions.duration_arg, default=timedelta(hours=6), help="length (default 6h)"
    )
    conventions.add_end_option(a, "end of the window")
    conventions.add_namespace_option(a, "analyze only the workloads in this namespace")
    a.add_argument(
        "--cluster",
        dest="clusters",
        action="append",
        type=conventions.cluster_arg,
        metavar="NAME",
        help="analyze only this cluster, by the value of --cluster-label (repeat for several)",
    )
    a.add_argument(
        "--policy",
        type=Path,
        help="policy file: its detection: block sets the thresholds, pricePerGpuHour and currency the costs",
    )
    a.add_argument("--format", choices=("table", "json", "html"), default="table")
    a.add_argument("--output", type=Path, help="write the report here instead of stdout")
    a.add_argument("--top", type=int, default=6, help="offenders plotted in the HTML report (default 6)")
    prometheus_options.add_prometheus_options(a)

    c = conventions.add_command(
        sub, "chargeback", "GPU-hours held, used and idle per team over a window, and what they cost"
    )
    prometheus_options.add_prometheus_url(c)
    c.add_argument(
        "--window", type=conventions.duration_arg, default=timedelta(days=30), help="length (default 30d)"
    )
    conventions.add_end_option(c, "end of the window")
    c.add_argument(
        "--by",
        default="namespace",
        metavar="namespace|label:NAME|cluster",
        help="group by namespace, by a namespace label (kube-state-metrics' kube_namespace_labels), "
        "or by cluster",
    )
    c.add_argument(
        "--share-unallocated",
        action="store_true",
        help="share the GPU-hours nobody requested among the groups, in proportion to held hours",
    )
    c.add_argument(
        "--policy",
        type=Path,
        help="policy file: prices (per GPU model), pricePerGpuHour, currency, detection.idlePercent",
    )
    c.add_argument(
        "--findings", type=Path, help="findings JSON (`analyze --format json`): kinds of idle workloads"
    )
    c.add_argument("--format", choices=("table", "json", "csv", "html"), default="table")
    c.add_argument("--output", type=Path, help="write the report here instead of stdout")
    prometheus_options.add_prometheus_options(c)

    s = conventions.add_command(
        sub, "simulate", "write a simulated fleet's series (to backfill a trial TSDB)"
    )
    s.add_argument("scenario", help=f"built-in scenario ({_builtin_scenarios()}) or a scenario YAML file")
    s.add_argument(
        "--end",
        type=conventions.past_time_arg,
        metavar="TIME",
        help="when the simulated series end: RFC 3339 or unix seconds, not in the future; default now "
        "(to the scenario's step), so a trial TSDB holds them within its retention and `analyze` reads "
        "them without --end; the command prints the --end to analyze them with",
    )
    s.add_argument(
        "--format",
        choices=("openmetrics", "prometheus"),
        default="openmetrics",
        help="openmetrics for `promtool tsdb create-blocks-from openmetrics`; prometheus text with "
        "millisecond timestamps for VictoriaMetrics' /api/v1/import/prometheus",
    )
    s.add_argument("--output", type=Path, help="file to write (default stdout)")
    return parser


def _check(args: argparse.Namespace) -> None:
    if args.command == "analyze":
        prometheus_options.require_one_source(args, "--simulate")
        if args.top < 0:
            raise BadInputError("--top cannot be negative")
    if args.command == "chargeback":
        prometheus_options.from_environment(args)
        if args.prometheus_url is None:
            raise BadInputError(f"--prometheus-url (or ${prometheus_options.URL_ENV}) is required")


def main(argv: Sequence[str] | None = None) -> int:
    args = conventions.parse(build_parser(), argv, _check)
    if isinstance(args, int):
        return args
    with conventions.logging_for(args):
        try:
            if args.output is not None:
                conventions.check_writable(args.output)
            if args.command == "simulate":
                return _simulate(args)
            if args.command == "chargeback":
                return _chargeback(args)
            return _analyze(args)
        except DataUnavailableError as e:
            code = conventions.fail(PROG, e)
            print(
                "No report was written: without trustworthy data nothing can be called idle or fine.",
                file=sys.stderr,
            )
            return code
        except BadInputError as e:
            return conventions.fail(PROG, e)


def _source_and_window(args: argparse.Namespace) -> tuple[MetricsSource, TimeWindow, datetime]:
    if args.simulate is not None:
        from simulation import ScenarioError, SimulatedSource, load_scenario, simulate

        try:
            fleet = simulate(load_scenario(args.simulate))
        except ScenarioError as e:
            raise BadInputError(str(e)) from e
        # The simulated clock stops at the scenario's end: a later --end is in the future.
        end = args.end or fleet.scenario.end
        return SimulatedSource(fleet), _window(end, args.window), fleet.scenario.end

    from analyzer import PrometheusSource

    config = prometheus_options.prometheus_config(args)
    now = datetime.now(UTC)
    end = args.end or now
    source = PrometheusSource(config, gpu_util_unit=args.gpu_util_unit, cluster_label=args.cluster_label)
    return source, _window(end, args.window), now


def _window(end: datetime, length: timedelta) -> TimeWindow:
    from common.durations import MIN_ANALYSIS_WINDOW
    from common.model import TimeWindow
    from common.timeutil import format_duration

    if length < MIN_ANALYSIS_WINDOW:
        raise BadInputError(
            f"--window {format_duration(length)} is too short to judge anything "
            f"({format_duration(MIN_ANALYSIS_WINDOW)} at least)"
        )
    return TimeWindow.ending(end, length)


@contextmanager
def _progress() -> Iterator[Callable[[str], None]]:
    """A spinner with the current step on stderr, only when a person is watching (rich is loaded
    for it then only: a CronJob's run does without its import)."""
    if not sys.stderr.isatty():
        yield lambda message: None
        return
    from rich.console import Console

    with Console(stderr=True).status("analyzing…") as status:
        yield lambda message: status.update(message)


def _analyze(args: argparse.Namespace) -> int:
    from analyzer import analyze, analyze_in_detail
    from common.thresholds import Pricing, Thresholds, load_pricing, load_thresholds

    thresholds = load_thresholds(args.policy) if args.policy is not None else Thresholds()
    currency = load_pricing(args.policy).currency if args.policy is not None else Pricing().currency
    source, window, now = _source_and_window(args)
    namespaces, clusters = args.namespaces or (), args.clusters or ()
    if args.format != "html":
        with _progress() as progress:
            # Findings alone: of many clusters, each one's analysis is dropped once its findings are in.
            report = analyze(
                source,
                window,
                thresholds,
                now=now,
                progress=progress,
                namespaces=namespaces,
                clusters=clusters,
            )
        _warn_missing(report)
        _write_findings(args, report, currency)
        return _wrote(args)
    from analyzer import offender_series  # the HTML report's plots only

    with _progress() as progress:
        analysis = analyze_in_detail(
            source, window, thresholds, now=now, progress=progress, namespaces=namespaces, clusters=clusters
        )
        offenders = []
        if args.top:
            progress("pulling utilization of the top offenders for the plots")
            offenders = offender_series(source, analysis, top=args.top, thresholds=thresholds)
    from analyzer import render_html

    _warn_missing(analysis.report)
    html = render_html(
        analysis.report,
        thresholds,
        offenders,
        capabilities=analysis.capabilities,
        gpu_count=analysis.gpu_count,
        currency=currency,
    )
    _write(args.output, lambda out: out.write(html))
    return _wrote(args)


def _chargeback(args: argparse.Namespace) -> int:
    from analyzer import run_chargeback
    from common.model import FindingsReport, TimeWindow
    from common.thresholds import Pricing, Thresholds, load_pricing, load_thresholds

    thresholds = load_thresholds(args.policy) if args.policy is not None else Thresholds()
    pricing = load_pricing(args.policy) if args.policy is not None else Pricing()
    findings = None
    if args.findings is not None:
        try:
            findings = FindingsReport.from_json(args.findings.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise BadInputError(f"{args.findings}: not a findings report ({e})") from e
    now = datetime.now(UTC)
    window = TimeWindow.ending(args.end or now, args.window)
    report = run_chargeback(
        prometheus_options.prometheus_config(args),
        window,
        args.by,
        pricing,
        thresholds.idle_percent,
        now,
        share_unallocated=args.share_unallocated,
        findings=findings,
        gpu_util_unit=args.gpu_util_unit,
        cluster_label=args.cluster_label,
    )
    if report.partial:
        log.warning("partial: %s", report.partial_reason)
    if not report.totals.within_tolerance:
        log.warning(
            "held + unallocated GPU-hours are %.1f%% away from the fleet's GPU-hours",
            100 * report.totals.relative_difference,
        )
    if args.format == "json":
        _write(args.output, lambda out: out.write(report.to_json() + "\n"))
    elif args.format == "csv":
        from analyzer import render_chargeback_csv

        _write(args.output, lambda out: render_chargeback_csv(report, out))
    elif args.format == "html":
        from analyzer import render_chargeback_html

        html = render_chargeback_html(report)
        _write(args.output, lambda out: out.write(html))
    else:
        from analyzer import render_chargeback_table

        _write(args.output, lambda out: render_chargeback_table(report, out))
    return _wrote(args)


def _warn_missing(report: FindingsReport) -> None:
    """Each source the verdicts lack, at the default level: the report's header says it too."""
    for m in report.missing_sources:
        log.warning("%s", m.sentence())


def _write_findings(args: argparse.Namespace, report: FindingsReport, currency: str) -> None:
    if args.format == "json":
        _write(args.output, lambda out: out.write(report.to_json() + "\n"))
        return
    from rich.console import Console

    from analyzer import render_table

    def table(out: TextIO) -> None:
        # Piped or written to a file, the table keeps a readable width rather than 80 columns.
        render_table(report, Console(file=out, width=None if out.isatty() else 150), currency=currency)

    _write(args.output, table)


def _wrote(args: argparse.Namespace) -> int:
    if args.output is not None:
        print(f"{PROG}: wrote {args.format} report to {args.output}", file=sys.stderr)
    return ExitCode.OK


def _write(path: Path | None, emit: Callable[[TextIO], object]) -> None:
    if path is None:
        emit(sys.stdout)
        return
    try:
        with path.open("w", encoding="utf-8") as out:
            emit(out)
    except OSError as e:
        raise BadInputError(f"{path}: cannot write report ({e.strerror or e})") from e


def _simulate(args: argparse.Namespace) -> int:
    from simulation import (
        ScenarioError,
        load_scenario,
        prometheus_text_chunks,
        simulate,
        write_openmetrics,
    )

    try:
        scenario = load_scenario(args.scenario)
        end = args.end or _on_step(datetime.now(UTC), scenario.step)
        # Every time in a scenario counts from its end or its start: moving the end moves it all.
        fleet = simulate(scenario.model_copy(update={"end": end}))
    except ScenarioError as e:
        raise BadInputError(str(e)) from e

    def emit(out: TextIO) -> None:
        if args.format == "openmetrics":
            write_openmetrics(fleet.series, out)
        else:
            for chunk in prometheus_text_chunks(fleet.series):
                out.write(chunk.decode())

    _write(args.output, emit)
    from common.timeutil import rfc3339

    count, series = fleet.sample_count, len(fleet.series)
    where = f" to {args.output}" if args.output is not None else ""
    print(
        f"{PROG}: wrote {count} samples of {series} series{where}, ending {rfc3339(end)}; "
        f"analyze them with --end {rfc3339(end)}",
        file=sys.stderr,
    )
    return ExitCode.OK


def _on_step(at: datetime, step: timedelta) -> datetime:
    """``at`` rounded down to a multiple of ``step`` since the epoch (to the minute, for 60 s)."""
    seconds = step.total_seconds()
    return datetime.fromtimestamp(at.timestamp() // seconds * seconds, tz=UTC)


if __name__ == "__main__":
    sys.exit(main())
