"""``python -m dashboards``: write (or, with ``--check``, compare) the dashboards' JSON files."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from dashboards import BUILDERS, DIRECTORY, Options, render


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dashboards", description="Generate the Grafana dashboards' JSON from their code."
    )
    parser.add_argument(
        "--out", type=Path, default=DIRECTORY, help=f"directory to write (default {DIRECTORY})"
    )
    parser.add_argument(
        "--hide-cluster",
        action="store_true",
        help="hide the cluster picker (single-cluster Grafanas); the queries stay the same",
    )
    parser.add_argument(
        "--team-label",
        default="label_team",
        help="the namespace label the chargeback board groups teams by, as kube-state-metrics exports it "
        "(label_<key>; default label_team)",
    )
    parser.add_argument("--check", action="store_true", help="write nothing; fail if a file differs")
    args = parser.parse_args(argv)
    options = Options(show_cluster=not args.hide_cluster, team_label=args.team_label)
    stale = []
    for name in BUILDERS:
        path = args.out / f"{name}.json"
        text = render(name, options)
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(str(path))
        else:
            args.out.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        print(f"out of date (run python -m dashboards): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
