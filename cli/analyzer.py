"""``gpu-analyzer``: find GPU waste from Prometheus data, or write a simulated fleet to backfill one.

Exit codes: 0 done, 2 bad input, 3 data source unavailable (never an "all fine" report instead).
Credentials come from files or the environment, never from the command line.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.markup import escape

from analyzer.sources.metrics_source import MetricsSource
from common.errors import BadInputError, DataUnavailableError
from common.model import TimeWindow
from common.thresholds import Thresholds, load_thresholds
from common.timeutil import parse_duration, parse_time

EXIT_OK, EXIT_BAD_INPUT, EXIT_SOURCE = 0, 2, 3
# Names of environment variables, not secrets.
TOKEN_ENV = "GPU_ANALYZER_BEARER_TOKEN"  # noqa: S105
PASSWORD_ENV = "GPU_ANALYZER_BASIC_AUTH_PASSWORD"  # noqa: S105


def _duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _timeout(text: str) -> timedelta:
    """A duration with a unit (``90s``, ``2m``), or a bare number of seconds as ``gpu-reaper`` takes."""
    try:
        seconds = float(text)
    except ValueError:
        return _duration(text)
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"invalid timeout {text!r}: must be a positive number of seconds")
    return timedelta(seconds=seconds)


def _time(text: str) -> datetime:
    try:
        return parse_time(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-analyzer", description="Find idle, underused and starved GPUs from DCGM metrics."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log each step to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    a = sub.add_parser("analyze", help="analyze a window of metrics and report findings")
    where = a.add_mutually_exclusive_group(required=True)
    where.add_argument("--prometheus-url", metavar="URL", help="Prometheus, Thanos, Mimir or VictoriaMetrics")
    where.add_argument("--simulate", metavar="SCENARIO", help="analyze a simulated fleet instead (no TSDB)")
    a.add_argument("--window", type=_duration, default=timedelta(hours=6), help="length (default 6h)")
    a.add_argument("--end", type=_time, help="window end, RFC 3339 or unix seconds (default: now)")
    a.add_argument("--policy", type=Path, help="policy file; its detection: block sets the thresholds")
    a.add_argument("--format", choices=("table", "json", "html"), default="table")
    a.add_argument("--output", type=Path, help="write the report here instead of stdout")
    a.add_argument("--top", type=int, default=6, help="offenders plotted in the HTML report (default 6)")
    conn = a.add_argument_group("connection")
    conn.add_argument("--bearer-token-file", type=Path, help=f"file holding a bearer token (or ${TOKEN_ENV})")
    conn.add_argument("--basic-auth-user", help=f"basic auth user; password from ${PASSWORD_ENV} or a file")
    conn.add_argument("--basic-auth-password-file", type=Path)
    conn.add_argument("--ca-file", type=Path, help="CA bundle to verify the server's certificate")
    conn.add_argument("--insecure-skip-tls-verify", action="store_true", help="do not verify TLS (unsafe)")
    conn.add_argument(
        "--tenant", metavar="ID", help="Mimir/Cortex tenant, sent as the X-Scope-OrgID header (a|b federates)"
    )
    conn.add_argument(
        "--timeout",
        type=_timeout,
        default=timedelta(seconds=60),
        help="per request: seconds (30) or a duration (2m); default 60",
    )
    conn.add_argument("--retries", type=int, default=3, help="retries on 5xx and timeouts, with backoff")
    conn.add_argument(
        "--util-scale",
        choices=("auto", "percent", "ratio"),
        default="auto",
        help="unit of DCGM_FI_DEV_GPU_UTIL (default: detected per scrape job)",
    )

    s = sub.add_parser("simulate", help="write a simulated fleet's series (to backfill a trial TSDB)")
    s.add_argument("scenario", help="built-in scenario name or YAML file")
    s.add_argument(
        "--format",
        choices=("openmetrics", "prometheus"),
        default="openmetrics",
        help="openmetrics for `promtool tsdb create-blocks-from openmetrics`; prometheus text with "
        "millisecond timestamps for VictoriaMetrics' /api/v1/import/prometheus",
    )
    s.add_argument("--output", type=Path, help="file to write (default stdout)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits 2 on bad usage and 0 for --help
        return int(e.code) if isinstance(e.code, int) else EXIT_BAD_INPUT
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not args.verbose:
        # Retries are expected and bounded; the final error says what failed, once.
        logging.getLogger("urllib3").setLevel(logging.ERROR)
    err = Console(stderr=True, soft_wrap=True)  # messages stay one line each in logs
    try:
        if args.command == "simulate":
            return _simulate(args)
        return _analyze(args, err)
    except BadInputError as e:
        err.print(f"[red]gpu-analyzer: bad input:[/red] {escape(str(e))}", highlight=False)
        return EXIT_BAD_INPUT
    except DataUnavailableError as e:
        err.print(
            f"[red]gpu-analyzer: data source unavailable:[/red] {escape(str(e))}\nNo report was written: "
            "without trustworthy data nothing can be called idle or fine.",
            highlight=False,
        )
        return EXIT_SOURCE


def _read_secret(path: Path | None, env: str) -> str | None:
    if path is not None:
        try:
            return path.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise BadInputError(f"{path}: cannot read ({e.strerror or e})") from e
    value = os.environ.get(env)
    return value.strip() if value else None


def _source_and_window(args: argparse.Namespace) -> tuple[MetricsSource, TimeWindow, datetime]:
    if args.simulate is not None:
        from simulation.fleet import ScenarioError, load_scenario, simulate
        from simulation.metrics_source import SimulatedSource

        try:
            fleet = simulate(load_scenario(args.simulate))
        except ScenarioError as e:
            raise BadInputError(str(e)) from e
        # The simulated clock stops at the scenario's end: a later --end is in the future.
        end = args.end or fleet.scenario.end
        return SimulatedSource(fleet), _window(end, args.window), fleet.scenario.end

    from analyzer.sources.prometheus_api import PrometheusConfig
    from analyzer.sources.prometheus_source import PrometheusSource

    password = None
    if args.basic_auth_user is not None:
        password = _read_secret(args.basic_auth_password_file, PASSWORD_ENV)
        if password is None:
            raise BadInputError(f"--basic-auth-user needs --basic-auth-password-file or ${PASSWORD_ENV}")
    config = PrometheusConfig(
        url=args.prometheus_url,
        bearer_token=_read_secret(args.bearer_token_file, TOKEN_ENV),
        basic_auth=(args.basic_auth_user, password) if password is not None else None,
        verify_tls=not args.insecure_skip_tls_verify,
        ca_file=str(args.ca_file) if args.ca_file else None,
        timeout_s=args.timeout.total_seconds(),
        retries=args.retries,
        tenant=args.tenant,
    )
    now = datetime.now(UTC)
    end = args.end or now
    return PrometheusSource(config, util_scale=args.util_scale), _window(end, args.window), now


def _window(end: datetime, length: timedelta) -> TimeWindow:
    if length < timedelta(minutes=10):
        raise BadInputError(f"--window {length} is too short to judge anything (10m at least)")
    return TimeWindow.ending(end, length)


@contextmanager
def _progress(console: Console) -> Iterator[Callable[[str], None]]:
    """A spinner with the current step on stderr, only when a person is watching."""
    if not console.is_terminal:
        yield lambda message: None
        return
    with console.status("analyzing…") as status:
        yield lambda message: status.update(message)


def _analyze(args: argparse.Namespace, err: Console) -> int:
    from analyzer.pipeline import analyze_in_detail, offender_series

    thresholds = load_thresholds(args.policy) if args.policy is not None else Thresholds()
    if args.top < 0:
        raise BadInputError("--top cannot be negative")
    source, window, now = _source_and_window(args)
    with _progress(err) as progress:
        analysis = analyze_in_detail(source, window, thresholds, now=now, progress=progress)
        offenders = []
        if args.format == "html" and args.top:
            progress("pulling utilization of the top offenders for the plots")
            offenders = offender_series(source, analysis, top=args.top)
    report = analysis.report
    if args.format == "json":
        _write(args.output, lambda out: out.write(report.to_json() + "\n"))
    elif args.format == "html":
        from analyzer.report.html import render_html

        html = render_html(
            report, thresholds, offenders, capabilities=analysis.capabilities, gpu_count=analysis.gpu_count
        )
        _write(args.output, lambda out: out.write(html))
    else:
        from analyzer.report.table import render_table

        def table(out: TextIO) -> None:
            # Piped or written to a file, the table keeps a readable width rather than 80 columns.
            render_table(report, Console(file=out, width=None if out.isatty() else 150))

        _write(args.output, table)
    if args.output is not None:
        err.print(f"gpu-analyzer: wrote {args.format} report to {escape(str(args.output))}", highlight=False)
    return EXIT_OK


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
    from simulation.fleet import (
        ScenarioError,
        load_scenario,
        prometheus_text_chunks,
        simulate,
        write_openmetrics,
    )

    try:
        fleet = simulate(load_scenario(args.scenario))
    except ScenarioError as e:
        raise BadInputError(str(e)) from e

    def emit(out: TextIO) -> None:
        if args.format == "openmetrics":
            write_openmetrics(fleet.series, out)
        else:
            for chunk in prometheus_text_chunks(fleet.series):
                out.write(chunk.decode())

    _write(args.output, emit)
    if args.output is not None:
        count, series = fleet.sample_count, len(fleet.series)
        print(f"gpu-analyzer: wrote {count} samples of {series} series to {args.output}", file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
