"""Benchmark: a fleet of N GPUs in K clusters behind one query view, against the same GPUs as one.

For each fleet size, ``bench_fleet.ClusterSplit`` builds the fleet twice from one simulation, each
into a VictoriaMetrics of its own (both running through the measured runs):

* ``K clusters`` — the nodes split evenly between clusters ``c0``…``c{K-1}``, every series labelled
  ``cluster="cK"``; every cluster's nodes, namespaces and workloads named as every other's (a GitOps
  fleet: ``gpu-0000`` and ``serving/chat-0001`` in each), GPU UUIDs and pod UIDs unique;
* ``one cluster`` — the same series and samples with no cluster label. One cluster cannot hold two
  ``serving/chat-0001``, so each cluster's namespaces and node names carry a ``cK-`` prefix: only
  label values change. (Names of its own, as the main benchmark's fleet has, would change the
  samples too: the simulator draws each pod's samples from its namespace and name.)

Then, over each window, after one warm-up run each, ``--runs`` runs of ``analyzer.pipeline.analyze``
with ``PrometheusSource`` (it finds the clusters itself and analyses each apart, keeping only each
finished cluster's findings), the two fleets taking turns, every run in its own process
(``analyzer_bench.py``'s ``ours``, without its replays); ``--in-detail`` runs ``analyze_in_detail``
instead, which ``gpu-analyzer analyze`` runs (it keeps every cluster's whole analysis, for plots).

Each row reports wall time and peak RSS (``VmHWM``) as p50 and p99 by nearest rank (with fewer than
100 runs the p99 is the worst run), queries and bytes; then the ratios K clusters ÷ one cluster,
whether each cluster's findings equal the same workloads' findings in the one-cluster run (every
field but the window, names mapped: ``cK``'s ``serving`` is ``cK-serving``, its node ``gpu-0000``
``cK-gpu-0000``, in the recommendation's text too), and each run's precision and recall against the
ground truth. Usage::

    python benchmarks/clusters_bench.py [--sizes 1000,10000] [--clusters 10] [--windows 6h]
        [--runs 5] [--step 15s[,10000=60s]] [--in-detail] [--vm-flag=-FLAG[=VALUE]]
        [--json results.json]

``--windows`` and ``--step`` read as in ``analyzer_bench.py``. Needs the Debian
``victoria-metrics`` binary.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# As in analyzer_bench.py: the repository root, the test harness, this directory.
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from analyzer_bench import (  # noqa: E402
    Rows,
    _case,
    _range,
    add_options,
    child,
    fleet_figures,
    import_into,
    peak_rss_mb,
    prepare_arguments,
    prepare_table,
    run_fleets,
    summarize,
    tsdb_footprint,
    wall_cells,
    window_truth,
)
from bench_fleet import merged_name, merged_ref  # noqa: E402

from common.model import FindingKind, WorkloadRef  # noqa: E402
from simulation.fleet import Expected, score  # noqa: E402

VARIANTS = ("split", "one")  # labelled with K clusters; one cluster


def variant_name(variant: str, count: int) -> str:
    return f"{count} clusters" if variant == "split" else "one cluster"


def merged_finding(finding: dict[str, Any]) -> dict[str, Any]:
    """A finding of the K-cluster run (its JSON) as the one-cluster run names it: no cluster, the
    workload's namespace (or unallocated node) and the nodes prefixed with the cluster. Its
    recommendation is left as it is (see ``unprefixed``)."""
    cluster = finding["cluster"]
    ref = merged_ref(cluster, WorkloadRef.model_validate(finding["workload"]))
    return finding | {
        "cluster": None,
        "workload": ref.model_dump(mode="json"),
        "nodes": [merged_name(cluster, n) for n in finding["nodes"]],
    }


def unprefixed(text: str, cluster: str) -> str:
    """A one-cluster finding's recommendation as the cluster's own would word it: the names in it
    without the cluster's prefix (a prefix starts a name; inside one, such as a pod's random
    suffix, it is left alone)."""
    return re.sub(rf"(?<![\w-]){re.escape(merged_name(cluster, ''))}", "", text)


def _key(finding: dict[str, Any]) -> str:
    w = finding["workload"]
    return f"{finding['kind']} {w['namespace']}/{w['kind']}/{w['name']}"


def agreement(split: list[dict[str, Any]], one: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether each cluster's findings equal the one-cluster run's for the same workloads.

    Per cluster: how many of its findings have an equal finding in the one-cluster run; then the
    one-cluster run's findings no cluster gave, and a few of the differences.
    """
    theirs = {_key(f): f for f in one}
    per: dict[str, list[int]] = {}
    differ: list[str] = []
    seen: set[str] = set()
    for f in split:
        mapped = merged_finding(f)
        key = _key(mapped)
        seen.add(key)
        counts = per.setdefault(f["cluster"], [0, 0])
        counts[1] += 1
        other = theirs.get(key)
        if other is not None:
            other = other | {"recommendation": unprefixed(other["recommendation"], f["cluster"])}
        if other == mapped:
            counts[0] += 1
        elif len(differ) < 5:
            fields = "missing" if other is None else ", ".join(k for k in mapped if mapped[k] != other.get(k))
            differ.append(f"{f['cluster']}: {key}: {fields}")
    extra = sorted(set(theirs) - seen)
    equal = sum(c[0] for c in per.values())
    return {
        "equal": equal,
        "findings": len(split),
        "one_findings": len(one),
        "only_in_one": len(extra),
        "per_cluster": {c: per[c] for c in sorted(per, key=lambda c: int(c[1:]))},
        "differences": differ + [f"only in one cluster: {k}" for k in extra[:5]],
        "agree": equal == len(split) == len(one) and not extra,
    }


def _scores(truth: dict[WorkloadRef, Expected], findings: list[dict[str, Any]]) -> dict[str, list[float]]:
    found = {
        WorkloadRef.model_validate(f["workload"]): FindingKind(f["kind"])
        for f in (merged_finding(f) if f.get("cluster") else f for f in findings)
    }
    return {k.value: list(v[:2]) for k, v in score(truth, found).items()}


def measure(
    urls: dict[str, str],
    gpus: int,
    count: int,
    window: timedelta,
    age: timedelta,
    step: timedelta,
    truth: dict[WorkloadRef, Expected],
    runs: int,
    in_detail: bool = False,
) -> dict[str, Any]:
    """Both fleets over one window: a warm-up run each, then ``runs`` runs each, taking turns."""
    shape = [str(int(x)) for x in (gpus, window.total_seconds(), age.total_seconds(), step.total_seconds())]
    detail = ["--in-detail"] if in_detail else []
    args = {v: ["--url", urls[v], "--shape", *shape, "--whole", *detail] for v in VARIANTS}
    warm = {v: child("ours", args[v]) for v in VARIANTS}
    done: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    for _ in range(runs):
        for v in VARIANTS:
            if "error" not in warm[v]:
                done[v].append(child("ours", args[v]))
    sides = {v: summarize(done[v], warm[v]) for v in VARIANTS}
    result: dict[str, Any] = {
        "gpus": gpus,
        "clusters": count,
        "window_s": window.total_seconds(),
        "age_s": age.total_seconds(),
        "step_s": step.total_seconds(),
        "expected": len(truth),
        "function": "analyze_in_detail" if in_detail else "analyze",
    }
    if all("findings" in s for s in sides.values()):
        result["agreement"] = agreement(sides["split"]["findings"], sides["one"]["findings"])
        result["scores"] = {v: _scores(truth, s["findings"]) for v, s in sides.items()}
    for side in sides.values():
        side.pop("findings", None)
        side.pop("verdicts", None)
    return result | sides


def bench(
    gpus: int,
    count: int,
    age: timedelta,
    step: timedelta,
    windows: list[timedelta],
    options: argparse.Namespace,
    workdir: Path,
) -> Rows:
    """The fleet as ``count`` clusters and as one, each prepared once into its own VictoriaMetrics,
    both analyzed over each of ``windows``. Returns both fleets' preparation and one result per window."""
    from harness.servers import VictoriaMetricsServer

    fleets: dict[str, dict[str, Any]] = {}
    truths: dict[str, Any] = {}
    results: list[dict[str, Any]] = []
    with ExitStack() as stack:
        servers = {
            v: stack.enter_context(VictoriaMetricsServer(workdir / v, extra_args=options.vm_flag))
            for v in VARIANTS
        }
        for v, server in servers.items():
            fleet = fleets[v] = fleet_figures(gpus, age, step, windows, options)
            fleet["variant"] = variant_name(v, count)
            args = [*prepare_arguments(gpus, age, step, windows, options), "--clusters", str(count)]
            prep = fleet["prepare"] = import_into(server, args + (["--merged"] if v == "one" else []))
            if "error" in prep:
                return list(fleets.values()), []
            prep |= tsdb_footprint(server)
            truths[v] = prep.pop("truth")
            print(
                f"prepared {gpus} GPUs, {fleet['variant']}: {json.dumps(prep)}", file=sys.stderr, flush=True
            )
        if truths["split"] != truths["one"]:
            raise RuntimeError("the two fleets' ground truths differ: they are not the same fleet")
        urls = {v: s.url for v, s in servers.items()}
        for window in windows:
            truth = window_truth(truths["one"], window)
            results.append(
                measure(urls, gpus, count, window, age, step, truth, options.runs, options.in_detail)
            )
            results[-1]["vm_flags"] = options.vm_flag
        for v, server in servers.items():
            fleets[v]["tsdb_peak_rss_mb"] = peak_rss_mb(server.pid) if server.pid else None
    shutil.rmtree(workdir, ignore_errors=True)
    return list(fleets.values()), results


# --- output ----------------------------------------------------------------------------------------


def table(fleets: list[dict[str, Any]], results: list[dict[str, Any]], runs: int) -> str:
    flags = fleets[0]["vm_flags"]
    steps = sorted({f["step_s"] for f in fleets})
    functions = sorted({r["function"] for r in results}) or ["analyze"]
    lines = [
        f"{' and '.join(f'`{f}()`' for f in functions)} on victoriametrics, "
        f"{'flags ' + ' '.join(flags) if flags else 'default limits'}; GPU samples every "
        f"{' / '.join(f'{s:g}' for s in steps)} s, Kubernetes and cAdvisor every 60 s; "
        f"{runs} run{'s' if runs != 1 else ''} of each after a warm-up, taking turns; p50 and p99 by "
        "nearest rank.",
        "",
    ]
    if results:
        lines += [
            f"| GPUs | window (pod age) | fleet | wall p50 s | wall p99 (worst of {runs}) s "
            "| peak RSS p50 MiB | peak RSS p99 MiB | queries | wire bytes | decoded bytes |",
            "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in results:
            for v in VARIANTS:
                x = r[v]
                head = f"| {r['gpus']:,} | {_case(r)} | {variant_name(v, r['clusters'])} |"
                walls = wall_cells(x, 7)
                if "wall_p50_s" not in x:
                    lines.append(f"{head} {walls} |")
                    continue
                lines.append(
                    f"{head} {walls} | {x['peak_rss_p50_mb']:.0f} | {x['peak_rss_p99_mb']:.0f} "
                    f"| {_range(x['requests'])} | {_range(x['wire_bytes'])} "
                    f"| {_range(x['body_bytes'])} |"
                )
        lines += [
            "",
            "| GPUs | window (pod age) | clusters ÷ one: wall p50 | wall p99 | peak RSS p50 | peak RSS p99 "
            "| findings equal (per cluster) | precision/recall, K clusters · one cluster |",
            "| ---: | --- | ---: | ---: | ---: | ---: | --- | --- |",
        ]
        for r in results:
            lines.append(f"| {r['gpus']:,} | {_case(r)} | {ratios(r)} | {agreed(r)} | {precision(r)} |")
        lines.append("")
    return "\n".join([*lines, prepare_table(fleets)])


def ratios(r: dict[str, Any]) -> str:
    k, one = r["split"], r["one"]
    keys = ("wall_p50_s", "wall_p99_s", "peak_rss_p50_mb", "peak_rss_p99_mb")
    if not all(key in k and key in one for key in keys):
        return " | ".join(["failed"] * len(keys))
    return " | ".join(f"{k[key] / one[key]:.2f}" for key in keys)


def agreed(r: dict[str, Any]) -> str:
    a = r.get("agreement")
    if a is None:
        return ""
    clusters = ", ".join(f"{c} {e}/{n}" for c, (e, n) in a["per_cluster"].items())
    verdict = "all equal" if a["agree"] else "DIFFER: " + "; ".join(a["differences"])
    return f"{a['equal']:,}/{a['findings']:,} vs {a['one_findings']:,}, {verdict} ({clusters})"


def precision(r: dict[str, Any]) -> str:
    scores = r.get("scores")
    if scores is None:
        return ""
    kinds = sorted(scores["one"])
    return ", ".join(
        f"{kind} {scores['split'][kind][0]:.2f}/{scores['split'][kind][1]:.2f} · "
        f"{scores['one'][kind][0]:.2f}/{scores['one'][kind][1]:.2f}"
        for kind in kinds
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_options(parser, sizes="1000,10000", windows="6h")
    parser.add_argument("--clusters", type=int, default=10, help="clusters the fleet is split into")
    parser.add_argument(
        "--in-detail",
        action="store_true",
        help="run analyze_in_detail (what gpu-analyzer analyze runs: every cluster's analysis kept)",
    )
    args = parser.parse_args()
    args.tsdb = "victoriametrics"
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.clusters < 2:
        parser.error("--clusters must be at least 2")

    def one(gpus: int, age: timedelta, step: timedelta, windows: list[timedelta], workdir: Path) -> Rows:
        return bench(gpus, args.clusters, age, step, windows, args, workdir)

    fleets, results = run_fleets(args, "clusters-bench-", one, table)
    print(table(fleets, results, args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
