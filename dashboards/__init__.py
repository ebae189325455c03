"""The Grafana dashboards, written as code with Grafana's grafana-foundation-sdk.

Each module builds one dashboard from the shared panel factories (:mod:`dashboards.panels`) and
PromQL vocabulary (:mod:`dashboards.promql`). ``python -m dashboards`` writes them as the JSON files
beside this package, which the Helm chart ships; a test fails when those files differ from what this
code generates.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard as d
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from dashboards import chargeback, fleet, node, starvation, waste, workload
from dashboards.board import Options

DIRECTORY = Path(__file__).resolve().parent

#: File stem → builder. The stems are the file names the chart ships and the docs link.
BUILDERS: Mapping[str, Callable[[Options], d.Dashboard]] = {
    "fleet": fleet.build,
    "waste": waste.build,
    "workload": workload.build,
    "node": node.build,
    "starvation": starvation.build,
    "chargeback": chargeback.build,
}


def render(name: str, options: Options | None = None) -> str:
    """The JSON of dashboard ``name``, as written to ``<name>.json``."""
    built = BUILDERS[name](options or Options()).build()
    return json.dumps(built, cls=JSONEncoder, indent=2, ensure_ascii=False) + "\n"


__all__ = ["BUILDERS", "DIRECTORY", "Options", "render"]
