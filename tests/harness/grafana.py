"""Read the Grafana dashboards the way Grafana would: panels, queries and template variables.

Grafana cannot run in the test environment, so the variable machinery is reproduced here: query
variables are evaluated against a real Prometheus (``label_values`` and ``query_result``), custom
and textbox variables take their saved value, multi-value variables are set to "All", and Grafana's
built-in intervals get concrete durations (or, with ``every_value=False``, every variable takes one
value). The resolved values are then interpolated into every panel query, so each query runs as
Grafana would send it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARDS_DIR = Path(__file__).resolve().parents[2] / "dashboards"

#: Grafana's built-in variables, set to what a 6 h view over 60 s scrapes would send.
BUILTINS: Mapping[str, str] = {"__rate_interval": "5m", "__interval": "1m", "__range": "6h"}

_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")
_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\s*\)$", re.DOTALL)
_QUERY_RESULT = re.compile(r"^query_result\((?P<expr>.+)\)$", re.DOTALL)

Query = Callable[[str], list[dict[str, Any]]]


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str  # file stem
    panel: str  # panel title
    ref: str  # target refId
    expr: str  # as written in the dashboard, variables included
    unit: str = "short"  # the unit its values are shown in (a table column's own, if it has one)
    panel_type: str = "timeseries"

    @property
    def id(self) -> str:
        return f"{self.dashboard}/{self.panel}/{self.ref}"


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS_DIR.glob("*.json"))


#: Dashboards that read only recording rules' series: tests that run every query over raw fleets leave
#: them out, and tests/deploy/test_chargeback_board.py runs them with the rules evaluated.
ON_RECORDED_SERIES = frozenset({"chargeback"})


def raw_series_dashboard_files() -> list[Path]:
    """The dashboards whose queries read the exporters' and kube-state-metrics' own series."""
    return [p for p in dashboard_files() if p.stem not in ON_RECORDED_SERIES]


def load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows' nested panels included."""
    for p in dashboard.get("panels", []):
        yield p
        yield from p.get("panels", [])


def panel_queries(path: Path) -> list[PanelQuery]:
    dashboard = load(path)
    return [
        PanelQuery(path.stem, p["title"], t["refId"], t["expr"], target_unit(p, t["refId"]), p["type"])
        for p in panels(dashboard)
        for t in p.get("targets", [])
        if t.get("expr")
    ]


def target_unit(panel: Mapping[str, Any], ref: str) -> str:
    """The unit a target's values are shown in: the panel's, unless an override by field name gives
    the column it becomes (``Value`` / ``Value #<ref>``, after the organize transformation's rename) one."""
    config = panel.get("fieldConfig", {})
    unit = str(config.get("defaults", {}).get("unit", "short"))
    targets = panel.get("targets", [])
    field = "Value" if len(targets) == 1 else f"Value #{ref}"
    for transformation in panel.get("transformations", []):
        if transformation["id"] == "organize":
            field = transformation["options"].get("renameByName", {}).get(field, field)
    for override in config.get("overrides", []):
        if override["matcher"] == {"id": "byName", "options": field}:
            for prop in override["properties"]:
                if prop["id"] == "unit":
                    unit = str(prop["value"])
    return unit


def variables(dashboard: Mapping[str, Any]) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = dashboard.get("templating", {}).get("list", [])
    return listed


def interpolate(text: str, values: Mapping[str, str]) -> str:
    """Replace ``$name``, ``${name}`` and ``[[name]]`` for known names; anything else (``$1``) stays."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        return values.get(name, m.group(0))

    return _VARIABLE.sub(sub, text)


def with_placeholders(text: str) -> str:
    """Built-ins filled in and every other variable replaced by ``1``: enough to parse the query."""
    return _VARIABLE.sub(lambda m: BUILTINS.get(m.group(1) or m.group(2) or m.group(3) or "", "1"), text)


def regex_escape(value: str) -> str:
    """A value as Grafana writes it into a PromQL regex: metacharacters escaped, backslashes doubled."""
    return re.sub(r"[\\^$*+?.()|{}\[\]]", lambda m: "\\\\" + m.group(0), value)


def variable_query(variable: Mapping[str, Any]) -> str:
    query = variable.get("query", "")
    return str(query.get("query", "") if isinstance(query, dict) else query)


def to_promql(definition: str) -> str:
    """The PromQL behind a query variable's ``label_values(...)`` or ``query_result(...)``."""
    if m := _LABEL_VALUES.match(definition.strip()):
        return f"count by ({m['label']}) ({m['selector']})"
    if m := _QUERY_RESULT.match(definition.strip()):
        return m["expr"]
    raise ValueError(f"unsupported variable query: {definition!r}")


def options(definition: str, regex: str, query: Query) -> list[str]:
    """What a query variable offers: its query run, the regex applied, duplicates dropped, sorted."""
    result = query(to_promql(definition))
    if m := _LABEL_VALUES.match(definition.strip()):
        texts = [item["metric"].get(m["label"], "") for item in result]
    else:  # query_result: Grafana matches the regex against `{labels} value timestamp`
        texts = [
            "{"
            + ",".join(f'{k}="{v}"' for k, v in sorted(item["metric"].items()))
            + "} "
            + f"{item['value'][1]} {item['value'][0]}"
            for item in result
        ]
    pattern = re.compile(regex.strip("/")) if regex else None
    values: list[str] = []
    for text in texts:
        if pattern is not None:
            found = pattern.search(text)
            if found is None:
                continue
            text = found.group(1) if found.groups() else found.group(0)
        if text and text not in values:
            values.append(text)
    return sorted(values)


def resolve(
    dashboard: Mapping[str, Any],
    query: Query,
    prefer: Mapping[str, str] | None = None,
    *,
    every_value: bool = True,
) -> dict[str, str]:
    """Value of every template variable, in dashboard order (later variables may use earlier ones).

    Multi-value variables take "All" (with ``every_value=False``, one value: ``prefer[name]`` when it
    is an option, their first option otherwise, regex-escaped as Grafana writes it; "All" if they
    offer none); single-value ones take ``prefer[name]`` when it is an option, their first option
    otherwise. Raises ValueError for a query variable with no option and no ``allValue`` to fall back on.
    """
    prefer = prefer or {}
    values: dict[str, str] = dict(BUILTINS)
    for v in variables(dashboard):
        name, kind = v["name"], v["type"]
        if kind == "datasource":
            continue
        if kind in ("custom", "textbox", "constant"):
            current = v.get("current", {}).get("value")
            values[name] = str(current if current is not None else variable_query(v).split(",")[0])
            continue
        definition = interpolate(variable_query(v), values)
        offered = options(definition, v.get("regex", ""), query)
        picked = prefer[name] if prefer.get(name) in offered else (offered[0] if offered else None)
        if (v.get("multi") or v.get("includeAll")) and not every_value and picked is not None:
            values[name] = regex_escape(picked)
        elif v.get("multi") or v.get("includeAll"):
            if v.get("allValue"):
                values[name] = v["allValue"]
            elif offered:
                values[name] = "(" + "|".join(regex_escape(o) for o in offered) + ")"
            else:
                raise ValueError(f"variable {name!r} has no options")
        elif picked is not None:
            values[name] = picked
        else:
            raise ValueError(f"variable {name!r} has no options")
    return values
