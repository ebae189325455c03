"""Push a run's metrics to a Prometheus Pushgateway (a CronJob lives too briefly to be scraped).

A URL with a user and password (``https://user:password@gateway``) authenticates with them (HTTP
basic auth) and is shown, in errors and logs, without them.
"""

from __future__ import annotations

import urllib.error
from collections.abc import Callable
from functools import partial
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from prometheus_client import CollectorRegistry, pushadd_to_gateway
from prometheus_client.exposition import basic_auth_handler, default_handler

from common.redaction import redact
from reaper.adapter_errors import PushgatewayError

JOB = "gpu-reaper"


def _split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """The URL without its user information, and the user and password it carried."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None, None
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    bare = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return bare, user, password


def push(url: str, registry: CollectorRegistry, timeout_seconds: float = 10.0) -> None:
    """POST (add) rather than PUT (replace): a failed run leaves the last success timestamp in place."""
    shown = redact(url)
    try:
        gateway, user, password = _split_credentials(url)
    except ValueError as e:  # a port that is no number
        raise PushgatewayError(f"Pushgateway {shown} is not a usable URL: {redact(str(e))}") from e
    handler: Callable[..., Any] = default_handler
    if user is not None or password is not None:
        handler = partial(basic_auth_handler, username=user, password=password)
    try:
        pushadd_to_gateway(gateway, job=JOB, registry=registry, timeout=timeout_seconds, handler=handler)
    except urllib.error.HTTPError as e:
        raise PushgatewayError(f"Pushgateway {shown} answered {e.code}") from e
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise PushgatewayError(f"Pushgateway {shown} unreachable: {redact(str(e))}") from e
