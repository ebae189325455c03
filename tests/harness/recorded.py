"""Recorded Prometheus HTTP API answers, replayed with ``responses`` in query-layer unit tests.

A fixture file is a JSON list of exchanges ``{"path", "params", "status", "body"}`` captured from
a real Prometheus (see ``record``), so unit tests run against real wire data without a server. The
exchanges are stored sorted by request, and the series of each answer by their labels, so that a
re-record changes only the answers that changed; replay looks each request up by its path and
parameters, so order means nothing to it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

import requests
import responses
from responses import matchers

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "prometheus"
RERECORD = "python tests/analyzer/record_prometheus_fixtures.py"


def _key(path: str, params: Mapping[str, Any]) -> str:
    return json.dumps([path, {k: str(v) for k, v in params.items()}], sort_keys=True)


def _stable(body: Any) -> Any:
    """An answer with its series in label order (the server's order is its own, and may change)."""
    data = body.get("data") if isinstance(body, dict) else None
    items = data.get("result") if isinstance(data, dict) else data
    if isinstance(items, list):
        items.sort(key=lambda item: json.dumps(item.get("metric", item) if isinstance(item, dict) else item))
    return body


def record(base_url: str, calls: Sequence[tuple[str, Mapping[str, str]]], path: Path) -> list[dict[str, Any]]:
    """Query a live server and save each distinct exchange to ``path``, in a stable order."""
    exchanges: dict[str, dict[str, Any]] = {}
    with requests.Session() as http:
        for api_path, params in calls:
            key = _key(api_path, params)
            if key in exchanges:  # the same request twice: one answer (replay answers both)
                continue
            r = http.get(base_url + api_path, params=dict(params), timeout=30)
            exchanges[key] = {
                "path": api_path,
                "params": dict(params),
                "status": r.status_code,
                "body": _stable(r.json()),
            }
    ordered = [exchanges[key] for key in sorted(exchanges)]
    path.write_text(json.dumps(ordered, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return ordered


def replay(mock: responses.RequestsMock, base_url: str, name: str) -> list[dict[str, Any]]:
    """Register every exchange of ``fixtures/prometheus/<name>.json`` on ``mock`` (GET and POST)."""
    exchanges: list[dict[str, Any]] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    keys = [_key(ex["path"], ex["params"]) for ex in exchanges]
    # Two answers to one request would be served in file order: the order would matter.
    assert len(set(keys)) == len(keys), (
        f"fixtures/prometheus/{name}.json repeats a request: re-record ({RERECORD})"
    )
    for ex in exchanges:
        params = {k: str(v) for k, v in ex["params"].items()}
        mock.get(
            base_url + ex["path"],
            json=ex["body"],
            status=ex["status"],
            match=[matchers.query_param_matcher(params)],
        )
        mock.post(
            base_url + ex["path"],
            json=ex["body"],
            status=ex["status"],
            match=[matchers.urlencoded_params_matcher(params)],
        )
    return exchanges


@contextmanager
def explained(mock: responses.RequestsMock, name: str) -> Iterator[None]:
    """Fail, saying what to do, where the code sent a request ``fixtures/prometheus/<name>.json``
    does not hold (a query's text changed): the code under test may have turned the refusal into
    an error or an unknown finding, either of which would hide the cause."""
    try:
        yield
    finally:
        unknown = [c.request for c in mock.calls if isinstance(c.response, requests.ConnectionError)]
        if unknown:
            first = unknown[0]
            sent = f"{first.method} {unquote_plus(first.url or '')} {unquote_plus(str(first.body or ''))}"
            raise AssertionError(
                f"{len(unknown)} request(s) not recorded in tests/fixtures/prometheus/{name}.json, first "
                f"{sent}: a query the Prometheus source sends changed, so its recorded answer is stale. "
                f"Re-record with `{RERECORD}` (it backfills a real Prometheus) and commit the JSON with "
                "the query change."
            ) from None  # the refused request's ConnectionError would only bury this
