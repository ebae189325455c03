"""PromQL helpers for the deploy tests: run an instant query, list the metrics an expression reads."""

from __future__ import annotations

import re
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


_LITERAL_NAMES = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*(\|[A-Za-z_:][A-Za-z0-9_:]*)*$")


def metric_names(expr: str) -> set[str]:
    """Names of every metric an expression selects (parses it, so a syntax error raises).

    A ``{__name__=~"A|B"}`` selector of literal alternatives (one series under two exporters' names)
    contributes both names.
    """
    names: set[str] = set()

    def visit(node: object) -> bool:
        if not isinstance(node, promql_parser.VectorSelector):
            return True
        if node.name:
            names.add(node.name)
        for m in node.matchers.matchers:
            literal = m.op == promql_parser.MatchOp.Equal or (
                m.op == promql_parser.MatchOp.Re and _LITERAL_NAMES.match(m.value)
            )
            if m.name == "__name__" and literal:
                names.update(m.value.split("|"))
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
