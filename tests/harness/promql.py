"""PromQL helpers for the deploy tests: run an instant query, list the metrics an expression reads."""

from __future__ import annotations

from typing import Any

import promql_parser
import requests


class QueryError(AssertionError):
    """Prometheus rejected a query; the message carries its error text."""


def instant(url: str, expr: str, at: float) -> list[dict[str, Any]]:
    """Evaluate ``expr`` at ``at`` (unix seconds); returns the result vector (or scalar as one item)."""
    r = requests.post(f"{url}/api/v1/query", data={"query": expr, "time": f"{at:.3f}"}, timeout=60)
    body = r.json()
    if body.get("status") != "success":
        raise QueryError(f"{body.get('errorType')}: {body.get('error')}")
    data = body["data"]
    if data["resultType"] in ("scalar", "string"):
        return [{"metric": {}, "value": data["result"]}]
    result: list[dict[str, Any]] = data["result"]
    return result


def metric_names(expr: str) -> set[str]:
    """Names of every metric an expression selects (parses it, so a syntax error raises)."""
    names: set[str] = set()

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def selectors(expr: str) -> list[promql_parser.VectorSelector]:
    """Every vector selector in an expression, in the order they appear."""
    found: list[promql_parser.VectorSelector] = []

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found
