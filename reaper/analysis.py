"""The reaper's one adapter to the analyzer: where a run's findings come from.

The analyzer over Prometheus, over any other metrics source (the demo's simulated fleet), or a
findings file. Each returns a ``FindingsSource`` for the runner; every data problem surfaces as a
``DataUnavailableError`` so the run does nothing and exits 3. No other reaper module imports the
analyzer (an import-linter contract in pyproject.toml).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from analyzer.pipeline import analyze
from analyzer.sources.metrics_source import MetricsSource
from common.errors import BadInputError, DataUnavailableError
from common.model import FindingsReport, TimeWindow
from common.thresholds import Thresholds
from reaper.runner import FindingsSource

TOKEN_ENV = "GPU_REAPER_PROMETHEUS_TOKEN"  # noqa: S105 - the name of a variable, not a secret
USER_ENV = "GPU_REAPER_PROMETHEUS_USER"
PASSWORD_ENV = "GPU_REAPER_PROMETHEUS_PASSWORD"  # noqa: S105 - the name of a variable, not a secret


@dataclass(frozen=True)
class PrometheusAccess:
    url: str
    bearer_token: str | None = field(default=None, repr=False)
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)
    verify_tls: bool = True
    ca_file: Path | None = None
    tenant: str | None = None  # Mimir's X-Scope-OrgID

    @classmethod
    def from_env(
        cls,
        url: str,
        token_file: Path | None = None,
        ca_file: Path | None = None,
        verify_tls: bool = True,
        env: dict[str, str] | None = None,
        tenant: str | None = None,
    ) -> PrometheusAccess:
        """Secrets from the environment or a mounted file, never from flags (they show in `ps`)."""
        env = dict(os.environ) if env is None else env
        token = env.get(TOKEN_ENV) or None
        if token_file is not None:
            try:
                token = token_file.read_text(encoding="utf-8").strip()
            except OSError as e:
                raise BadInputError(
                    f"cannot read the Prometheus token file {token_file}: {e.strerror}"
                ) from e
        basic = None
        if env.get(USER_ENV):
            basic = (env[USER_ENV], env.get(PASSWORD_ENV, ""))
        if not url.startswith(("http://", "https://")):
            raise BadInputError(f"--prometheus-url {url!r} must start with http:// or https://")
        return cls(
            url=url,
            bearer_token=token,
            basic_auth=basic,
            verify_tls=verify_tls,
            ca_file=ca_file,
            tenant=tenant,
        )


def prometheus_source(access: PrometheusAccess) -> FindingsSource:
    from analyzer.sources.prometheus_api import PrometheusConfig
    from analyzer.sources.prometheus_source import PrometheusSource

    config = PrometheusConfig(
        url=access.url,
        bearer_token=access.bearer_token,
        basic_auth=access.basic_auth,
        verify_tls=access.verify_tls,
        ca_file=str(access.ca_file) if access.ca_file else None,
        tenant=access.tenant,
    )

    def run(window: TimeWindow, thresholds: Thresholds) -> FindingsReport:
        return analyze(PrometheusSource(config), window, thresholds, now=window.end)

    return run


def metrics_source(source: MetricsSource) -> FindingsSource:
    """The analyzer over any metrics source: the demo hands its simulated fleet in here."""

    def run(window: TimeWindow, thresholds: Thresholds) -> FindingsReport:
        return analyze(source, window, thresholds, now=window.end)

    return run


def file_source(path: Path) -> FindingsSource:
    """Findings written earlier by ``gpu-analyzer analyze --format json``; staleness is the planner's call."""

    def run(window: TimeWindow, thresholds: Thresholds) -> FindingsReport:
        del window, thresholds  # the file was analysed already; the planner checks how old it is
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise BadInputError(f"cannot read findings file {path}: {e.strerror}") from e
        try:
            return FindingsReport.from_json(text)
        except ValueError as e:
            raise DataUnavailableError(f"{path}: not a findings document: {e}") from e

    return run


def write_html_report(
    source: MetricsSource, window: TimeWindow, thresholds: Thresholds, output: Path
) -> None:
    """The analyzer's HTML report (with its plots) for a metrics source: what the demo hands over."""
    from analyzer.pipeline import analyze_in_detail, offender_series
    from analyzer.report.html import render_html

    result = analyze_in_detail(source, window, thresholds, now=window.end)
    offenders = offender_series(source, result, top=6)
    html = render_html(
        result.report, thresholds, offenders, capabilities=result.capabilities, gpu_count=result.gpu_count
    )
    try:
        output.write_text(html, encoding="utf-8")
    except OSError as e:
        raise BadInputError(f"cannot write the HTML report to {output}: {e.strerror}") from e
