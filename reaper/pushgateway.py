"""Push a run's metrics to a Prometheus Pushgateway (a CronJob lives too briefly to be scraped)."""

from __future__ import annotations

import urllib.error

from prometheus_client import CollectorRegistry, pushadd_to_gateway

from reaper.adapter_errors import PushgatewayError

JOB = "gpu-reaper"


def push(url: str, registry: CollectorRegistry, timeout_seconds: float = 10.0) -> None:
    """POST (add) rather than PUT (replace): a failed run leaves the last success timestamp in place."""
    try:
        pushadd_to_gateway(url, job=JOB, registry=registry, timeout=timeout_seconds)
    except urllib.error.HTTPError as e:
        raise PushgatewayError(f"Pushgateway {url} answered {e.code}") from e
    except (urllib.error.URLError, OSError) as e:
        raise PushgatewayError(f"Pushgateway {url} unreachable: {e}") from e
