"""Recorded Prometheus HTTP API answers, replayed with ``responses`` in query-layer unit tests.

A fixture file is a JSON list of exchanges ``{"path", "params", "status", "body"}`` captured from
a real Prometheus (see ``record``), so unit tests run against real wire data without a server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import requests
import responses
from responses import matchers

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "prometheus"


def record(base_url: str, calls: Sequence[tuple[str, Mapping[str, str]]], path: Path) -> list[dict[str, Any]]:
    """Query a live server and save each exchange to ``path``."""
    exchanges = []
    with requests.Session() as http:
        for api_path, params in calls:
            r = http.get(base_url + api_path, params=dict(params), timeout=30)
            exchanges.append(
                {"path": api_path, "params": dict(params), "status": r.status_code, "body": r.json()}
            )
    path.write_text(json.dumps(exchanges, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return exchanges


def replay(mock: responses.RequestsMock, base_url: str, name: str) -> list[dict[str, Any]]:
    """Register every exchange of ``fixtures/prometheus/<name>.json`` on ``mock`` (GET and POST)."""
    exchanges: list[dict[str, Any]] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
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
