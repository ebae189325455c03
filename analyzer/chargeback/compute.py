"""From the TSDB's per-day sums to the bill: pure arithmetic, no I/O.

Every row is a count of 5-minute spans (see ``analyzer.sources.chargeback_queries``); a span is
1/12 of an hour. A MIG instance's rows are weighted here by its share of its GPU (its profile's
compute slices, ``analyzer.detection.mig``); a time-sliced GPU's shares were weighted by the TSDB.

Unknown: a pod requested ``R`` device-spans while Running and reported ``S``; the ``R - S`` it did
not report are held but unknown, weighted by the share its reported devices had (or its MIG
resource's, or a whole GPU).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from analyzer.chargeback.model import (
    NO_CLUSTER,
    TOTALS_TOLERANCE,
    ChargebackReport,
    Coverage,
    DailyHours,
    FleetCharge,
    GroupCharge,
    IdleWorkload,
    ModelCharge,
    ModelUnallocated,
    TotalsCheck,
    unlabelled_group,
)
from analyzer.chargeback.prices import Prices
from analyzer.detection.mig import gpu_share
from analyzer.sources.aggregates import DeviceInfo
from common.model import FindingKind, TimeWindow, WorkloadRef

SPAN_HOURS = 300.0 / 3600.0
TOP_IDLE = 5
UNKNOWN_MODEL = ""
_MIG_RESOURCE = re.compile(r"^nvidia_com_mig_(?P<slices>\d+)g_(?P<memory>\d+)gb")

Labels = tuple[tuple[str, str], ...]
Rows = Mapping[tuple[str, Labels], float]


@dataclass(frozen=True)
class Span:
    """One chunk of the window (a day, or less) and its rows."""

    start: datetime
    end: datetime
    rows: Rows


@dataclass(frozen=True)
class Grouping:
    """How pods fall into groups: ``by`` and, for a label, each (cluster, namespace)'s value."""

    by: str
    cluster_label: str = "cluster"
    namespace_values: Mapping[tuple[str, str], str] = field(default_factory=dict)

    @property
    def label(self) -> str | None:
        return self.by.removeprefix("label:") if self.by.startswith("label:") else None

    def group_of(self, cluster: str, namespace: str) -> str:
        if self.by == "cluster":
            return cluster or NO_CLUSTER
        if self.label is not None:
            return self.namespace_values.get((cluster, namespace)) or unlabelled_group(self.label)
        return namespace


def mig_share(model: str, profile: str) -> float:
    if not profile:
        return 1.0
    return gpu_share(DeviceInfo(node="", metric="", model=model or None, mig_profile=profile))


def resource_share(resource: str) -> float:
    match = _MIG_RESOURCE.match(resource)
    if match is None:
        return 1.0
    return mig_share("", f"{match['slices']}g.{match['memory']}gb")


@dataclass
class _Acc:
    held: float = 0.0
    used: float = 0.0
    idle: float = 0.0
    unknown: float = 0.0
    unallocated: float = 0.0

    def add(self, other: _Acc) -> None:
        self.held += other.held
        self.used += other.used
        self.idle += other.idle
        self.unknown += other.unknown
        self.unallocated += other.unallocated

    def daily(self, span: Span, unallocated: float) -> DailyHours:
        """This day's hours as the report writes them."""
        return DailyHours(
            start=span.start,
            end=span.end,
            held_gpu_hours=self.held,
            used_gpu_hours=self.used,
            idle_gpu_hours=self.idle,
            unknown_gpu_hours=self.unknown,
            unallocated_gpu_hours=unallocated,
        )


@dataclass
class _PodDay:
    held: float = 0.0  # sampled, share-weighted
    used: float = 0.0
    idle: float = 0.0
    sampled: float = 0.0  # device-spans reported
    share_sum: float = 0.0
    requested: float = 0.0  # device-spans requested while Running
    request_share: float = 0.0
    models: dict[str, float] = field(default_factory=dict)  # model → held, for prices
    idle_models: dict[str, float] = field(default_factory=dict)


def _pods(rows: Rows, cluster_label: str) -> dict[tuple[str, str, str], _PodDay]:
    pods: dict[tuple[str, str, str], _PodDay] = defaultdict(_PodDay)
    for (part, labels), value in rows.items():
        lab = dict(labels)
        if part in ("sampled", "held", "used", "idle"):
            pid = (lab.get(cluster_label, ""), lab.get("namespace", ""), lab.get("pod", ""))
            model = lab.get("modelName", UNKNOWN_MODEL)
            share = mig_share(model, lab.get("GPU_I_PROFILE", ""))
            pod = pods[pid]
            if part == "sampled":
                pod.sampled += value
            elif part == "held":
                pod.held += value * share
                pod.share_sum += value * share
                pod.models[model] = pod.models.get(model, 0.0) + value * share
            elif part == "used":
                pod.used += value * share
            else:
                pod.idle += value * share
                pod.idle_models[model] = pod.idle_models.get(model, 0.0) + value * share
        elif part == "requested":
            pid = (lab.get(cluster_label, ""), lab.get("namespace", ""), lab.get("pod", ""))
            pods[pid].requested += value
            pods[pid].request_share += value * resource_share(lab.get("resource", ""))
    return pods


def _unknown(pod: _PodDay) -> float:
    """Device-spans requested and not reported, each weighted as the pod's reported devices were."""
    missing = pod.requested - pod.sampled
    if missing <= 0:
        return 0.0
    if pod.sampled > 0:
        return missing * pod.share_sum / pod.sampled
    return missing * (pod.request_share / pod.requested if pod.requested else 1.0)


@dataclass(frozen=True)
class _FleetDay:
    reported: float
    unallocated_by_model: dict[str, float]


def _fleet(rows: Rows) -> _FleetDay:
    reported = 0.0
    unallocated: dict[str, float] = defaultdict(float)
    mig_gpus: dict[str, float] = defaultdict(float)
    instances: dict[str, float] = defaultdict(float)
    for (part, labels), value in rows.items():
        lab = dict(labels)
        model = lab.get("modelName", UNKNOWN_MODEL)
        if part == "reported":
            reported += value
            if lab.get("mig") == "1":
                mig_gpus[model] += value
        elif part == "unallocated":
            unallocated[model] += value * mig_share(model, lab.get("GPU_I_PROFILE", ""))
        elif part == "instances":
            instances[model] += value * mig_share(model, lab.get("GPU_I_PROFILE", ""))
    for model, gpus in mig_gpus.items():
        # Slices no instance was made of: capacity nobody could request.
        unallocated[model] += max(0.0, gpus - instances.get(model, 0.0))
    return _FleetDay(reported, dict(unallocated))


def _price(prices: Prices, hours_by_model: Mapping[str, float]) -> float | None:
    total = 0.0
    for model, hours in hours_by_model.items():
        price = prices.for_model(model)
        if price is None:
            if hours > 0:
                return None
            continue
        total += hours * price
    return total


def compute(
    spans: Sequence[Span],
    grouping: Grouping,
    prices: Prices,
    idle_percent: float,
    requested_window: TimeWindow,
    window: TimeWindow,
    source: str,
    generated_at: datetime,
    share_unallocated: bool = False,
    partial_reason: str | None = None,
    owners: Mapping[tuple[str, str], WorkloadRef] | None = None,
    findings: Mapping[WorkloadRef, FindingKind] | None = None,
    coverage: Coverage | None = None,
) -> ChargebackReport:
    """The bill over ``window`` from its chunks' rows."""
    cl = grouping.cluster_label
    group_days: dict[str, list[tuple[Span, _Acc]]] = defaultdict(list)
    group_models: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    group_namespaces: dict[str, set[str]] = defaultdict(set)
    pod_idle: dict[tuple[str, str, str], list[float]] = defaultdict(
        lambda: [0.0, 0.0, 0.0]
    )  # idle h, cost, held h
    fleet_days: list[tuple[Span, _Acc, float, dict[str, float]]] = []
    unallocated_models: dict[str, float] = defaultdict(float)

    for span in spans:
        per_group: dict[str, _Acc] = defaultdict(_Acc)
        for pid, pod in _pods(span.rows, cl).items():
            group = grouping.group_of(pid[0], pid[1])
            group_namespaces[group].add(pid[1])
            unknown = _unknown(pod)
            acc = per_group[group]
            acc.held += (pod.held + unknown) * SPAN_HOURS
            acc.used += pod.used * SPAN_HOURS
            acc.idle += pod.idle * SPAN_HOURS
            acc.unknown += unknown * SPAN_HOURS
            models = dict(pod.models)
            if unknown:
                # Unknown hours at the price of the pod's own model (or the default price).
                main = max(models, key=lambda k: models[k]) if models else UNKNOWN_MODEL
                models[main] = models.get(main, 0.0) + unknown
            for model, spans_held in models.items():
                entry = group_models[group][model]
                entry[0] += spans_held * SPAN_HOURS
                entry[1] += pod.idle_models.get(model, 0.0) * SPAN_HOURS
            if pod.idle > 0:
                idle_cost = _price(prices, {k: v * SPAN_HOURS for k, v in pod.idle_models.items()})
                record = pod_idle[pid]
                record[0] += pod.idle * SPAN_HOURS
                record[1] += idle_cost or 0.0
                record[2] += (pod.held + unknown) * SPAN_HOURS
        fleet = _fleet(span.rows)
        for model, value in fleet.unallocated_by_model.items():
            unallocated_models[model] += value * SPAN_HOURS
        for group, acc in per_group.items():
            group_days[group].append((span, acc))
        total = _Acc()
        for acc in per_group.values():
            total.add(acc)
        total.unallocated = sum(fleet.unallocated_by_model.values()) * SPAN_HOURS
        fleet_days.append((span, total, fleet.reported * SPAN_HOURS, fleet.unallocated_by_model))

    held_total = sum(acc.held for _, acc, _, _ in fleet_days)
    unknown_total = sum(acc.unknown for _, acc, _, _ in fleet_days)
    unallocated_total = sum(unallocated_models.values())
    unallocated_cost = _price(prices, unallocated_models)
    fleet_hours = sum(reported for _, _, reported, _ in fleet_days) + unknown_total

    groups: list[GroupCharge] = []
    for group, days in group_days.items():
        totals = _Acc()
        for _, acc in days:
            totals.add(acc)
        per_model = group_models[group]
        held_cost = _price(prices, {k: v[0] for k, v in per_model.items()})
        idle_cost = _price(prices, {k: v[1] for k, v in per_model.items()})
        share = totals.held / held_total if share_unallocated and held_total > 0 else 0.0
        groups.append(
            GroupCharge(
                group=group,
                namespaces=sorted(group_namespaces[group]),
                held_gpu_hours=totals.held,
                used_gpu_hours=totals.used,
                idle_gpu_hours=totals.idle,
                unknown_gpu_hours=totals.unknown,
                cost=held_cost,
                idle_cost=idle_cost,
                unallocated_gpu_hours=unallocated_total * share,
                unallocated_cost=(unallocated_cost * share if unallocated_cost is not None else None)
                if share_unallocated
                else None,
                models=[
                    ModelCharge(
                        model=model,
                        held_gpu_hours=h,
                        idle_gpu_hours=i,
                        price_per_gpu_hour=prices.for_model(model),
                        cost=_price(prices, {model: h}),
                        idle_cost=_price(prices, {model: i}),
                    )
                    for model, (h, i) in sorted(per_model.items())
                ],
                top_idle_workloads=_top_idle(group, grouping, pod_idle, owners or {}, findings or {}),
                daily=[acc.daily(span, unallocated=0.0) for span, acc in days],
            )
        )
    groups.sort(key=lambda g: (-(g.idle_cost or 0.0), -g.held_gpu_hours, g.group))

    difference = held_total + unallocated_total - fleet_hours
    relative = abs(difference) / fleet_hours if fleet_hours > 0 else 0.0
    fleet_totals = _Acc()
    for _, acc, _, _ in fleet_days:
        fleet_totals.add(acc)
    costs = [g.cost for g in groups]
    idle_costs = [g.idle_cost for g in groups]
    return ChargebackReport(
        generated_at=generated_at,
        source=source,
        requested_window=requested_window,
        window=window,
        partial=partial_reason is not None,
        partial_reason=partial_reason,
        by=grouping.by,
        currency=prices.currency,
        idle_percent=idle_percent,
        share_unallocated=share_unallocated,
        groups=groups,
        fleet=FleetCharge(
            held_gpu_hours=fleet_totals.held,
            used_gpu_hours=fleet_totals.used,
            idle_gpu_hours=fleet_totals.idle,
            unknown_gpu_hours=fleet_totals.unknown,
            fleet_gpu_hours=fleet_hours,
            unallocated_gpu_hours=unallocated_total,
            unallocated_cost=unallocated_cost,
            unallocated_by_model=[
                ModelUnallocated(
                    model=model,
                    unallocated_gpu_hours=hours,
                    price_per_gpu_hour=prices.for_model(model),
                    cost=_price(prices, {model: hours}),
                )
                for model, hours in sorted(unallocated_models.items())
            ],
            cost=None if any(c is None for c in costs) else sum(c or 0.0 for c in costs),
            idle_cost=None if any(c is None for c in idle_costs) else sum(c or 0.0 for c in idle_costs),
            daily=[acc.daily(span, unallocated=acc.unallocated) for span, acc, _, _ in fleet_days],
        ),
        totals=TotalsCheck(
            held_gpu_hours=held_total,
            unallocated_gpu_hours=unallocated_total,
            fleet_gpu_hours=fleet_hours,
            difference_gpu_hours=difference,
            relative_difference=relative,
            within_tolerance=relative <= TOTALS_TOLERANCE,
        ),
        coverage=coverage or Coverage(),
    )


def idlest_pods(spans: Sequence[Span], cluster_label: str, per_group: int = 20) -> list[tuple[str, str]]:
    """The (namespace, pod) of the idlest pods, whose owners the top idle workloads are read from."""
    idle: dict[tuple[str, str], float] = defaultdict(float)
    for span in spans:
        for (cluster, ns, pod), day in _pods(span.rows, cluster_label).items():
            del cluster
            if day.idle > 0:
                idle[(ns, pod)] += day.idle
    by_ns: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for (ns, pod), value in idle.items():
        by_ns[ns].append((value, pod))
    out = []
    for ns, pods in by_ns.items():
        out += [(ns, pod) for _, pod in sorted(pods, reverse=True)[:per_group]]
    return out


def _top_idle(
    group: str,
    grouping: Grouping,
    pod_idle: Mapping[tuple[str, str, str], list[float]],
    owners: Mapping[tuple[str, str], WorkloadRef],
    findings: Mapping[WorkloadRef, FindingKind],
) -> list[IdleWorkload]:
    per_workload: dict[WorkloadRef, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for (cluster, ns, pod), (hours, cost, held) in pod_idle.items():
        if grouping.group_of(cluster, ns) != group:
            continue
        ref = owners.get((ns, pod)) or WorkloadRef(kind="Pod", name=pod, namespace=ns)
        entry = per_workload[ref]
        entry[0] += hours
        entry[1] += cost
        entry[2] += held
    ranked = sorted(per_workload.items(), key=lambda kv: (-kv[1][1], -kv[1][0], kv[0].key()))[:TOP_IDLE]
    return [
        IdleWorkload(
            workload=ref,
            idle_gpu_hours=hours,
            idle_cost=cost if cost > 0 else None,
            held_gpu_hours=held,
            finding_kind=findings.get(ref),
        )
        for ref, (hours, cost, held) in ranked
    ]
