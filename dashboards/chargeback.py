"""GPU chargeback (uid ``kgr-chargeback``): who held the GPUs over the range, who used them, what idle cost.

Read from the chargeback recording rules' hourly rollups alone (``alerts/gpu-chargeback.recording.yaml``,
``gpu_chargeback:gpu_spans:rollup_1h``), so a month's range reads 720 points per pod and model, never
a raw sample: without those rules installed every panel is empty. Each rollup counts 5-minute spans
(twelve to the hour) per pod and GPU model, in either DCGM naming (the rule reads both); a MIG
instance counts its compute slices' share of its GPU, as ``gpu-analyzer chargeback`` counts it.

Where the board and ``gpu-analyzer chargeback --by namespace`` part ways: one price for every model
(the ``price`` variable; the command line prices each model from the policy), idle at the rules' own
threshold (``CHARGEBACK_IDLE_PERCENT``), and the hours a pod held without samples worked out over the
whole range rather than day by day.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as d

from common import metric_names as m
from dashboards import board
from dashboards.board import Options, Row
from dashboards.panels import Query, stat_panel, table_panel, timeseries_panel
from dashboards.promql import Wrap, by, over, sel

NAMESPACE = 'namespace=~"$namespace"'
POD = "cluster, namespace, pod"
SPANS_PER_HOUR = m.CHARGEBACK_ROLLUP_SECONDS // m.CHARGEBACK_SPAN_SECONDS
#: MIG profiles name their compute slices first (``3g.40gb``); GPUs split into 7, the A30 into 4.
_A30 = 'modelName=~".*A30.*"'
_NOT_A30 = 'modelName!~".*A30.*"'
_PROFILED = '"(MIG )?[1-7]g[.].*"'
TEAM = '"$team"'


def part(name: str, *matchers: str) -> str:
    return sel(m.CHARGEBACK_ROLLUP, f'{m.CHARGEBACK_PART}="{name}"', *matchers)


def weighted(name: str, wrap: Wrap, *matchers: str, label: str = "GPU_I_PROFILE") -> str:
    """``wrap`` of a part's series, each times its device's share of a GPU: a whole GPU 1, a MIG
    instance its compute slices over its GPU's (read from the profile in ``label``)."""
    terms = [wrap(part(name, *matchers, f"{label}!~{_PROFILED}"))]
    for total, model in ((7, _NOT_A30), (4, _A30)):
        for slices in range(1, total + 1):
            profile = f'{label}=~"(MIG )?{slices}g[.].*"'
            terms.append(f"{wrap(part(name, *matchers, profile, model))} * {slices / total:.6g}")
    return " or ".join(f"({t})" for t in terms)


def hours(name: str, keep: str, window: str = "$__range", *matchers: str) -> str:
    """GPU-hours of one part over ``window``, summed by ``keep``."""
    summed = weighted(name, over("sum_over_time", window), NAMESPACE, *matchers)
    return f"{by(keep, 'sum', summed)} / {SPANS_PER_HOUR}"


def unknown(keep: str, window: str = "$__range") -> str:
    """Device-spans a pod requested while Running and reported no sample for, weighted as its reported
    devices were (a whole GPU each where it reported none): held, neither idle nor used."""
    total = over("sum_over_time", window)
    requested = by(POD, "sum", total(part("requested", NAMESPACE)))
    sampled = by(POD, "sum", total(part("sampled", NAMESPACE)))
    held = by(POD, "sum", weighted("held", total, NAMESPACE))
    never = by(POD, "sum", total(part("requested", NAMESPACE))) + f" unless on ({POD}) {sampled}"
    partly = f"clamp_min({requested} - {sampled}, 0) * ({held}) / {sampled}"
    return f"{by(keep, 'sum', f'({partly}) or ({never})')} / {SPANS_PER_HOUR}"


def unallocated(keep: str, window: str = "$__range") -> str:
    """GPU-hours of devices reporting with no pod, and of MIG GPUs' slices no instance was made of."""
    total = over("sum_over_time", window)
    idle_devices = by(keep, "sum", weighted("unallocated", total))
    mig_gpus = by(keep, "sum", total(part("reported", 'mig="1"')))
    instances = by(keep, "sum", weighted("instances", total))
    slack = f"clamp_min({mig_gpus} - ({instances} or {mig_gpus} * 0), 0)"
    return f"(({idle_devices}) + ({slack} or {idle_devices} * 0) or {slack}) / {SPANS_PER_HOUR}"


def held(keep: str, window: str = "$__range") -> str:
    """GPU-hours held: with samples, and without (``unknown``): the whole the other parts are of."""
    sampled = hours("held", keep, window)
    return f"({sampled}) + (({unknown(keep, window)}) or ({sampled}) * 0)"


def team_of(expr: str, team_label: str) -> str:
    """``expr`` (by cluster and namespace) summed by the namespaces' team label, as kube-state-metrics
    exports it; namespaces without the label fall under an empty value."""
    latest = over("last_over_time", "$__range")(sel("kube_namespace_labels"))
    labels = f"max by (cluster, namespace, {team_label}) ({latest})"
    joined = f"({expr}) * on (cluster, namespace) group_left ({team_label}) ({labels})"
    return by(f"cluster, {team_label}", "sum", joined)


def _columns(team_label: str | None = None) -> tuple[Query, ...]:
    def of(expr: str) -> str:
        return team_of(expr, team_label) if team_label else expr

    ns = "cluster, namespace"
    return (
        Query(of(held(ns)), column="held GPU-hours"),
        Query(of(hours("used", ns)), column="used GPU-hours"),
        Query(of(hours("idle", ns)), column="idle GPU-hours"),
        Query(of(unknown(ns)), column="unknown GPU-hours"),
        Query(f"({of(held(ns))}) * $price", column="cost", unit="none"),
        Query(f"({of(hours('idle', ns))}) * $price", column="idle cost", unit="none"),
    )


def build(options: Options) -> d.Dashboard:
    team_label = options.team_label
    namespaces = f"group by (namespace) ({sel('kube_namespace_labels', f'{team_label}=~{TEAM}')})"
    daily = "1d"
    return board.dashboard(
        "kgr-chargeback",
        "GPU chargeback",
        "GPU-hours held, used, idle and without data per namespace and team over the range, what they cost "
        "at one price per GPU-hour, and the GPUs nobody requested. Needs the chargeback recording rules "
        "(alerts/gpu-chargeback.recording.yaml) and, for teams, kube-state-metrics' kube_namespace_labels.",
        options,
        [
            board.query_variable(
                "team", "Team", f"label_values({sel('kube_namespace_labels')}, {team_label})"
            ),
            board.label_variable("namespace", "Namespace", namespaces),
            board.price_variable(),
        ],
        [
            Row("Over the range (hourly rollups)"),
            stat_panel(
                "Fleet GPU-hours",
                "Every GPU reporting, whoever held it, over the range (a MIG GPU counts once).",
                "short",
                f"sum({over('sum_over_time', '$__range')(part('reported'))}) / {SPANS_PER_HOUR}",
                size=(6, 4),
                decimals=0,
            ),
            stat_panel(
                "Held GPU-hours",
                "GPU time allocated to the selected namespaces' pods (a MIG instance its share of the GPU, a "
                "time-sliced GPU its share among the pods holding it).",
                "short",
                f"sum({held('cluster, namespace')})",
                size=(6, 4),
                decimals=0,
            ),
            stat_panel(
                "Idle cost",
                "Held time the GPU stayed at or below the rules' idle threshold, times the price variable "
                "(one price for every model; set it in the Price per GPU-hour box).",
                "none",
                f"sum({hours('idle', 'cluster, namespace')}) * $price",
                size=(6, 4),
                decimals=0,
            ),
            stat_panel(
                "Unallocated GPU-hours",
                "GPU time nobody requested: devices reporting with no pod, and MIG slices no instance was "
                "made of.",
                "short",
                f"sum({unallocated('cluster, modelName')})",
                size=(6, 4),
                decimals=0,
            ),
            table_panel(
                "Per namespace",
                "Held, used (held time weighted by activity), idle and unknown (held without samples: never "
                "idle, never used) GPU-hours over the range, and their cost at the price variable.",
                "short",
                *_columns(),
                size=(24, 9),
            ),
            table_panel(
                "Per team",
                f"The namespaces' figures summed by their {options.team_label} (kube_namespace_labels; "
                "`python -m dashboards --team-label` picks another); namespaces without it appear under an "
                "empty team.",
                "short",
                *_columns(options.team_label),
                size=(24, 7),
            ),
            table_panel(
                "Unallocated per GPU model",
                "GPU-hours nobody requested per model over the range, and their cost at the price variable.",
                "short",
                Query(unallocated("cluster, modelName"), column="unallocated GPU-hours"),
                Query(f"({unallocated('cluster, modelName')}) * $price", column="cost", unit="none"),
                size=(24, 6),
            ),
            Row("Per day"),
            timeseries_panel(
                "Held, used, idle and unknown GPU-hours per day",
                "Each point sums the day before it (the panel's interval is one day).",
                "short",
                Query(f"sum({held('cluster, namespace', daily)})", "held"),
                Query(f"sum({hours('used', 'cluster, namespace', daily)})", "used"),
                Query(f"sum({hours('idle', 'cluster, namespace', daily)})", "idle"),
                Query(f"sum({unknown('cluster, namespace', daily)})", "unknown"),
                size=(12, 8),
            ).interval(daily),
            timeseries_panel(
                "Idle GPU-hours per day per namespace",
                "Each point sums the day before it.",
                "short",
                Query(hours("idle", "cluster, namespace", daily), "{{namespace}} {{cluster}}"),
                size=(12, 8),
            ).interval(daily),
            timeseries_panel(
                "Unallocated GPU-hours per day per model",
                "Each point sums the day before it.",
                "short",
                Query(unallocated("cluster, modelName", daily), "{{modelName}} {{cluster}}"),
                size=(24, 7),
            ).interval(daily),
        ],
    )
