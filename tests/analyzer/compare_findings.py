"""Save every simulated fleet's findings from each source, or compare them with a saved set.

Run before and after a change that must not change any verdict (a query pushed down into the
TSDB, a refactoring of a detector)::

    python tests/analyzer/compare_findings.py save BEFORE_DIR
    python tests/analyzer/compare_findings.py compare BEFORE_DIR

Each scenario (legacy names, and DCGM 4.7's for the stalled fleet) is analysed in memory, from a
real Prometheus (backfilled blocks) and from a real VictoriaMetrics (imported series); the
findings JSON, less the run's own timestamps, is saved per scenario and source, and ``compare``
prints each that differs and exits 1.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

# The repository root first (tests/analyzer must not shadow the package), then tests/ for `harness`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.analyses import report_on
from simulation.fleet import load_scenario, simulate, with_naming

RUNS = (
    ("standard", "legacy"),
    ("lifecycle", "legacy"),
    ("demo", "legacy"),
    ("stalled", "legacy"),
    ("stalled", "dcgm-4.7"),
)
SOURCES = ("in-memory", "prometheus", "victoriametrics")
# The run's own: its time, and the address of the throw-away server it read.
_VOLATILE = ("generated_at", "source")


def _stable(report_json: str) -> Any:
    data = json.loads(report_json)
    for key in _VOLATILE:
        data.pop(key, None)
    return data


def findings(out: Path) -> None:
    for scenario, naming in RUNS:
        fleet = simulate(with_naming(load_scenario(scenario), naming))
        for source in SOURCES:
            with tempfile.TemporaryDirectory() as tmp:
                report = report_on(fleet, source, Path(tmp))
            path = out / f"{scenario}-{naming}-{source}.json"
            path.write_text(json.dumps(_stable(report.to_json()), indent=1, sort_keys=True))
            print(f"{path.name}: {len(report.findings)} finding(s)", flush=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("save", "compare"):
        print(__doc__, file=sys.stderr)
        return 2
    target = Path(argv[1])
    if argv[0] == "save":
        target.mkdir(parents=True, exist_ok=True)
        findings(target)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        now = Path(tmp)
        findings(now)
        differ = [
            p.name
            for p in sorted(now.iterdir())
            if not (target / p.name).is_file() or (target / p.name).read_text() != p.read_text()
        ]
    for name in differ:
        print(f"differs: {name}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
