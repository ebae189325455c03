"""``gpu-reaper demo``: the real pipeline on a simulated fleet, with no cluster and no Prometheus.

The same detectors, planner, executor (dry-run) and Slack formatting as a CronJob run; the
cluster is built in memory from the same scenario the metrics come from.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

from common.errors import BadInputError
from common.model import FindingsReport, LowUtilizationEvidence, WorkloadRef
from common.timeutil import rfc3339
from reaper import names
from reaper.analysis import metrics_source, write_html_report
from reaper.demand import PRODUCT_LABEL
from reaper.messages import preview
from reaper.plan_report import run_section
from reaper.policy import Policy, RunMode, load_policy, parse_policy
from reaper.runner import RunReport, RunSettings, run
from reaper.wording import outcome_verb
from simulation import controllers
from simulation.fleet import Fleet, load_scenario, simulate
from simulation.fleet.scenario import ScenarioError, WorkloadKind
from simulation.in_memory_cluster import InMemoryCluster, fleet_objects
from simulation.in_memory_source import SimulatedSource
from simulation.manifests import manifest

DEMO_NAMESPACE_ANNOTATIONS = {"team-b": {names.SLACK_CHANNEL: "#team-b"}}
HOURLY = timedelta(hours=1)
DEMO_POLICY = "demo-policy.yaml"  # package data


def demo_policy() -> Policy:
    text = resources.files("simulation").joinpath(DEMO_POLICY).read_text(encoding="utf-8")
    return parse_policy(text, DEMO_POLICY)


def _table(rows: Sequence[tuple[str, ...]], out: TextIO, indent: str = "  ") -> None:
    if not rows:
        print(f"{indent}(none)", file=out)
        return
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r[:-1], widths, strict=False)]
        print(indent + "  ".join([*cells, r[-1]]).rstrip(), file=out)


def _print_findings(report: FindingsReport, out: TextIO, currency: str) -> None:
    w = report.window
    print(f"\nFindings over {rfc3339(w.start)} → {rfc3339(w.end)}: {len(report.findings)}", file=out)
    rows: list[tuple[str, ...]] = [("KIND", "WORKLOAD", "GPUS", "WASTED GPU-h", "CONFIDENCE")]
    for f in sorted(report.findings, key=lambda f: (f.kind.value, -f.wasted_gpu_hours)):
        rows.append(
            (
                f.kind.value,
                f.workload.key().lstrip("/"),
                str(f.gpu_count) if f.gpu_count else "–",
                f"{f.wasted_gpu_hours:.1f}",
                f"{f.confidence:.2f}",
            )
        )
    _table(rows, out)
    _print_right_sizing(report, out, currency)


def _print_right_sizing(report: FindingsReport, out: TextIO, currency: str) -> None:
    """The smaller GPU share each long-running workload of low utilization would fit, or why none."""
    rows: list[tuple[str, ...]] = []
    for f in report.findings:
        sized = f.evidence.right_size if isinstance(f.evidence, LowUtilizationEvidence) else None
        if sized is not None:
            rows.append((f.workload.key().lstrip("/"), sized.line(currency)))
    if rows:
        print("\nRight-sizing (long-running workloads of low utilization)", file=out)
        _table(sorted(rows, key=lambda r: r[1].startswith("No ")), out)


def _print_plan(report: RunReport, out: TextIO) -> None:
    p = report.plan
    assert p is not None
    print("\nPlan (dry-run: nothing is changed)", file=out)
    rows: list[tuple[str, ...]] = []
    for r in report.results:
        a = r.action
        flags = f"  [{'; '.join(a.flags)}]" if a.flags else ""
        via = f"  [GPUs held by {_object(a.target)}]" if a.root else ""
        # The write --apply would send, formed by the same code that sends it; a notice writes nothing.
        rows.append((outcome_verb(a, r.outcome), r.write or _object(a.written), a.reason + via + flags))
        if a.pending_gpus is not None:  # when: demand: the pending work it makes room for
            rows.append(("", "", f"for pending GPU work (pending_gpus={a.pending_gpus}): {a.demand}"))
        if r.wake is not None:  # wake: keda-http: what is handed over, and what a request does
            rows.append(("", "", f"wake on request: {r.wake.sentence()}"))
    _table(rows, out)
    print("\nSkipped, with reasons", file=out)
    _table([(s.reason.value, _object(s.root or s.target), s.detail) for s in p.skips], out)


def _object(ref: WorkloadRef) -> str:
    """``Deployment serving/x``, ``Node gpu-a``: as the plan's writes name them."""
    return f"{ref.kind} {ref.namespace}/{ref.name}" if ref.namespace else f"{ref.kind} {ref.name}"


# The KEDA HTTP add-on (0.14 onwards) and KEDA are installed in the demo's cluster: wake: keda-http
# rules hand their workloads over rather than being refused for want of the add-on.
DEMO_SERVED = ("InterceptorRoute", "ScaledObject")


def _demo_objects(fleet: Fleet) -> list[dict[str, Any]]:
    """What the fleet's metrics cannot show and the demo policy's rules read: a Service in front of
    each ``tier: inference`` Deployment (a wake rule routes requests through it), and a pod the
    scheduler left Pending for want of a GPU on the idle StatefulSets' node (a ``when: demand``
    rule's demand)."""
    sc = fleet.scenario
    objects: list[dict[str, Any]] = []
    for w in sc.workloads:
        if w.kind is WorkloadKind.DEPLOYMENT and w.labels.get("tier") == "inference":
            selector = {"app.kubernetes.io/name": w.labels.get("app", w.name)}
            spec = {"selector": selector, "ports": [{"name": "http", "port": 8000, "targetPort": 8000}]}
            objects.append(manifest("Service", w.name, w.namespace, created=sc.start, spec=spec))
    held = next(
        (w for w in sc.workloads if w.kind is WorkloadKind.STATEFULSET and w.namespace == "serving"), None
    )
    node = next((n for n in sc.nodes if held is not None and n.name == held.node), None)
    if node is not None:
        container = {
            "name": "train",
            "image": "registry.example/finetune:1",
            "resources": {"limits": {controllers.GPU: "1"}},
        }
        spec = {"containers": [container], "nodeSelector": {PRODUCT_LABEL: node.model.replace(" ", "-")}}
        unschedulable = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": f"0/{len(sc.nodes)} nodes are available: insufficient {controllers.GPU}",
        }
        status = {"phase": "Pending", "conditions": [unschedulable]}
        created = sc.end - timedelta(minutes=20)
        objects.append(manifest("Pod", "finetune-0", "research", created=created, spec=spec, status=status))
    return objects


def run_demo(scenario: str, policy_path: Path | None, output: Path, out: TextIO) -> int:
    try:
        fleet = simulate(load_scenario(scenario))
    except ScenarioError as e:
        raise BadInputError(str(e)) from e
    policy = load_policy(policy_path) if policy_path else demo_policy()
    policy = policy.model_copy(update={"mode": RunMode.DRY_RUN})
    sc = fleet.scenario
    end = sc.end
    namespace = policy.reaper_namespace
    objects = fleet_objects(
        fleet, namespace_annotations=DEMO_NAMESPACE_ANNOTATIONS, reaper_namespace=namespace
    )
    cluster = InMemoryCluster([*objects, *_demo_objects(fleet)], served=DEMO_SERVED)
    source = metrics_source(SimulatedSource(fleet))
    print(
        f'gpu-reaper demo: scenario "{sc.name}", {len(sc.nodes)} nodes, '
        f"{sum(n.slots for n in sc.nodes)} GPU devices, {len(sc.workloads)} workloads, up to {rfc3339(end)}",
        file=out,
    )

    # A dry-run counts confirmations from the hourly runs an apply CronJob would have made before.
    settings = RunSettings(
        policy=policy, mode=RunMode.DRY_RUN, namespace=namespace, end=end, run_interval=HOURLY
    )
    report = run(settings, source, lambda: cluster)
    if report.replay is not None and report.replay.times:
        print(
            f"(confirmations from {len(report.replay.times)} replayed hourly run(s), the first at "
            f"{rfc3339(report.replay.times[0])}: safety.consecutiveRuns={policy.safety.consecutive_runs})",
            file=out,
        )
    if report.found is None or report.plan is None:
        print(f"nothing planned: {report.error}", file=out)
        return report.exit_code
    _print_findings(report.found, out, policy.currency)
    _print_plan(report, out)
    print("\nSlack messages (preview)", file=out)
    print(preview(report.messages) or "  (none)", file=out)
    write_html_report(
        output,
        report.found,
        policy.thresholds,
        source=SimulatedSource(fleet),
        sections=[run_section(report, settings)],
        currency=policy.currency,
    )
    print(f"\nHTML report: {output}", file=out)
    print(report.summary_line(), file=out)
    return report.exit_code
