"""The closer looks: aggregates over each holder's own span, and its first busy sample.

The snapshot judges every GPU over the whole window; a workload that held a GPU for part of it is
looked at again over that part alone. Holders of one span (and scrape job) go into terms
(``SpanTerm``: a selector naming their pods or GPUs, over their span), terms into queries whose
answers cannot mix their rows up, each aggregate tagged with its name (``span_queries.tagged``)
so one query answers many. A query stays under the server's length limit and a bound on the
rows it answers (its parsed answer is held whole). ``first_busy`` asks holders whose spans lie
close together in one query per scrape job over the union of their spans."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial
from math import ceil, inf, isfinite

from analyzer.sources import dcgm, promql
from analyzer.sources.aggregates import (
    CloserLook,
    DeviceKey,
    FleetSnapshot,
    Shares,
    SpanNumbers,
    UtilStats,
    histogram_shares,
    phases_from_counts,
    quantile_levels,
)
from analyzer.sources.dcgm import Capabilities
from analyzer.sources.prometheus.batch import (
    Batch,
    device_key,
    quantile_names,
)
from analyzer.sources.prometheus_api import PrometheusClient, VectorSample
from analyzer.sources.span_queries import (
    ADDITIVE,
    AGGREGATE,
    HOLDERS_PER_TERM,
    PODS_PER_TERM,
    RANKED,
    TERMS_PER_QUERY,
    RenamedTerm,
    SpanTerm,
    aggregate_names,
    joined,
    tagged,
)
from analyzer.sources.waits import WaitCounts, WaitRule, board_waits
from common.model import TimeWindow
from common.thresholds import Thresholds

# A holder and the span its numbers are over.
Window = tuple[DeviceKey, TimeWindow]
# Named aggregates of a term, each None where the term needs it not.
Family = Mapping[str, Callable[[SpanTerm], str | None]]
# What a (holder, span) needs: statistics, sample-histogram shares, shares from samples.
Need = tuple[bool, bool, bool]

# Pods one first-busy query names (their names repeat twice: a few hundred keep it under 15,000 characters).
PODS_PER_QUERY = 150
# Answer rows one closer-look query may return (about 4 MB parsed): the largest answers parsed at
# once set a run's peak memory, and MetricsQL's shorter text fits three times the holders.
MAX_ROWS_PER_QUERY = 4_000
# The labels a closer look's answer row carries beside its holder's: what it is an aggregate of.
_ROW_TAGS = (AGGREGATE, promql.ROLLUP, promql.PHI, dcgm.LE)


def span_numbers(
    client: PrometheusClient, snapshot: FleetSnapshot, looks: Sequence[CloserLook], t: Thresholds
) -> dict[Window, SpanNumbers]:
    """Per holder and span, the aggregates each look asks for, over that span alone."""
    q_low, q_high = quantile_levels(t.starvation_min_share)
    need = _needs(snapshot.capabilities, looks)
    wanted = sorted(need, key=lambda w: (w[0], w[1].start))
    levels = quantile_names(q_low, q_high, with_max=True)
    answers = _ask_terms(
        client, snapshot, _terms(snapshot, wanted), _families(snapshot, need, t, levels), levels
    )
    return {w: _numbers(snapshot, w, answers.get(w, {}), need[w], q_low) for w in wanted}


def first_busy(
    client: PrometheusClient,
    batch: Batch,
    snapshot: FleetSnapshot,
    wanted: Sequence[Window],
    idle_percent: float,
) -> dict[Window, float]:
    """Each holder's first busy sample in its span.

    Holders whose search spans lie close together go out as one query per scrape job (naming
    their pods, at most 150), over the union of those spans: a Job's pod has a name of its own,
    so its series start with its life, and a busy sample outside a holder's own span is
    ignored. Only a holder whose first one lies before its span (a pod recreated under its
    name) is asked again over its own span alone.
    """
    caps = snapshot.capabilities
    by_job: dict[tuple[str, str, float], list[Window]] = defaultdict(list)
    for key, span in wanted:
        if (d := snapshot.devices.get(key)) is not None and key.pod:
            # Under each name it was read under (its exporter renamed them): the earliest of all.
            for metric in d.info.metrics:
                by_job[(metric, d.info.job, d.interval_s or 15.0)].append((key, span))
    queries: list[tuple[str, datetime]] = []
    for (metric, job, step), holders in sorted(by_job.items()):
        for reach, pods in near_spans(holders):
            term = SpanTerm.pods_of_job(caps, metric, job, pods, reach, step, caps.to_percent(metric, job))
            queries.append((term.first_busy(idle_percent), reach.end))

    def firsts(answer: list[VectorSample]) -> list[tuple[DeviceKey, float]]:
        keyed = ((device_key(s.labels, caps), s.value) for s in answer)
        return [(key, value) for key, value in keyed if key is not None and isfinite(value)]

    earliest: dict[DeviceKey, float] = {}
    for answer in client.read_vectors(queries, firsts):
        for found, value in answer:
            earliest[found] = min(value, earliest.get(found, inf))
    out: dict[Window, float] = {}
    again = []
    for key, span in wanted:
        first = earliest.get(key)
        if first is None or first > span.end.timestamp():
            continue  # no busy sample in the span
        if first > span.start.timestamp():
            out[(key, span)] = first
        else:
            again.append((key, span))
    if again:
        families = [{"first": lambda t: t.first_busy(idle_percent)}]
        answers = _ask_terms(client, snapshot, _terms(snapshot, again), families)
        out |= {w: min(got["first"]) for w, got in answers.items() if got.get("first")}
    return out


def waiting_counts(
    client: PrometheusClient, snapshot: FleetSnapshot, wanted: Sequence[Window], rule: WaitRule
) -> dict[Window, WaitCounts]:
    """Per holder and span, its samples and those that wait (``waits``), counted by the TSDB: a
    subquery at the step of the data joins each busy sample with its board's power, limit and
    clock-event reasons at that step. Terms name GPUs (their boards' series are selected by
    ``UUID``), at most 15 each, fewer where a long span's pieces would pass the length limit."""
    caps = snapshot.capabilities
    counted = _waiting_text(caps, rule)
    groups: dict[tuple[tuple[str, ...], str, TimeWindow], dict[DeviceKey, None]] = defaultdict(dict)
    for key, span in wanted:
        if (dev := snapshot.devices.get(key)) is not None:
            groups[(dev.info.metrics, dev.info.job, span)][key] = None
    terms: list[SpanTerm] = []
    for (metrics, job, span), held in sorted(groups.items(), key=_by_span):
        step = snapshot.devices[next(iter(held))].interval_s or 15.0
        metric, *others = metrics
        scale = caps.to_percent(metric, job)
        renamed = tuple((name, caps.to_percent(name, job) / scale) for name in others)
        by_gpu: dict[str, list[DeviceKey]] = defaultdict(list)
        for key in held:
            by_gpu[key.uuid].append(key)
        term_of = partial(_gpu_term, caps, metric, renamed, by_gpu, span, step, scale)

        def text(uuids: Sequence[str], of: Callable[[Sequence[str]], SpanTerm] = term_of) -> str:
            return counted(of(uuids))

        terms += [term_of(run) for run in promql.fitting(sorted(by_gpu), text, HOLDERS_PER_TERM)]
    families: list[Family] = [{"n": lambda term: term.samples(), "waiting": counted}]
    answers = _ask_terms(client, snapshot, _batched(terms), families)
    return {
        w: WaitCounts(_first(got, "n") or 0.0, _first(got, "waiting") or 0.0)
        for w, got in answers.items()
        if _first(got, "n")
    }


def _gpu_term(
    caps: Capabilities,
    metric: str,
    renamed: Sequence[tuple[str, float]],
    by_gpu: Mapping[str, Sequence[DeviceKey]],
    span: TimeWindow,
    step: float,
    scale: float,
    uuids: Sequence[str],
) -> SpanTerm:
    """A term naming GPUs (not pods): the holders of ``uuids`` over ``span``."""
    keys = [k for u in uuids for k in by_gpu[u]]
    holders = [promql.one_of(dcgm.UUID, sorted(uuids))]
    if renamed:
        return RenamedTerm(caps, metric, renamed, keys, span, step, scale, holders=holders)
    return SpanTerm(caps, metric, keys, span, step, scale, holders=holders)


def _waiting_text(caps: Capabilities, rule: WaitRule) -> Callable[[SpanTerm], str]:
    """A term's count of waiting samples."""
    return lambda term: term.waiting(rule.busy_percent, board_waits(caps.scope, sorted(term.uuids), rule))


def _needs(caps: Capabilities, looks: Sequence[CloserLook]) -> dict[Window, Need]:
    """What each (holder, span) needs, over every look at it."""
    need: dict[Window, Need] = {}
    for lk in looks:
        w = (lk.key, lk.span)
        had = need.get(w, (False, False, False))
        need[w] = (had[0] or lk.stats, had[1] or (lk.histogram and caps.histogram), had[2] or lk.shares)
    return need


def _families(
    snapshot: FleetSnapshot, need: Mapping[Window, Need], t: Thresholds, levels: Mapping[str, float]
) -> list[Family]:
    """The aggregates a closer look asks, in two families (a query each per batch of terms): the
    statistics with the histogram, and the shares from samples."""
    spans = {
        kind: {span for (_, span), flags in need.items() if flags[i]}
        for i, kind in enumerate(("stats", "histogram", "shares"))
    }

    def when(kind: str, build: Callable[[SpanTerm], str]) -> Callable[[SpanTerm], str | None]:
        # A term asks for an aggregate only if one of its holders' spans needs it.
        return lambda term: build(term) if term.span in spans[kind] else None

    def merged(func: str) -> Callable[[SpanTerm], str | None]:
        # Only terms holding a holder of several series: the others' counts and sums are exact.
        def build(term: SpanTerm) -> str | None:
            if term.span not in spans["stats"] or not any(term.selects(k) for k in snapshot.merged):
                return None
            return term.merged_total(func)

        return build

    idle, busy = t.starvation_idle_percent, t.starvation_busy_percent
    by_name: dict[str, Callable[[SpanTerm], str | None]]
    if snapshot.capabilities.metricsql:
        # Each selector twice, not six times: a third of the text, so of the queries, and one
        # sort of the samples for every quantile.
        ranked = sorted(set(levels.values()))
        by_name = {
            ADDITIVE: when("stats", lambda term: term.additive()),
            RANKED: when("stats", lambda term: term.ranked(ranked)),
        }
    else:
        q_low, q_high = levels["q_low"], levels["q_high"]
        by_name = {
            "count": when("stats", lambda term: term.stats("count")),
            "sum": when("stats", lambda term: term.stats("sum")),
            "max": when("stats", lambda term: term.stats("max")),
            "q_low": when("stats", lambda term: term.stats("q", q_low)),
            "q_high": when("stats", lambda term: term.stats("q", q_high)),
            "median": when("stats", lambda term: term.stats("q", 0.5)),
        }
    if snapshot.merged:
        by_name |= {"merged_count": merged("count_over_time"), "merged_sum": merged("sum_over_time")}
    return [
        {**by_name, "histogram": when("histogram", lambda term: term.histogram())},
        {
            "n": when("shares", lambda term: term.samples()),
            "stalled": when("shares", lambda term: term.state_count(True, idle)),
            "stalled_runs": when("shares", lambda term: term.state_runs(True, idle)),
            "busy": when("shares", lambda term: term.state_count(False, busy)),
            "busy_runs": when("shares", lambda term: term.state_runs(False, busy)),
        },
    ]


def _numbers(
    snapshot: FleetSnapshot, w: Window, got: Mapping[str, list[float]], need: Need, q_low: float
) -> SpanNumbers:
    """One (holder, span)'s numbers from the values its aggregates answered."""
    caps = snapshot.capabilities
    dev = snapshot.devices[w[0]]
    one = partial(_first, got)
    with_stats, with_histogram, with_shares = need
    scale = caps.to_percent(dev.info.metric, dev.info.job)
    stats = _stats(one, w[0] in snapshot.merged, scale, q_low) if with_stats else None
    histogram = None
    if with_histogram:
        inc = {le: v for le in caps.histogram_le if (v := one(_histogram_name(le))) is not None}
        if len(inc) == len(caps.histogram_le):
            idle_le, busy_le, total_le = caps.histogram_le
            histogram = histogram_shares(inc[idle_le], inc[busy_le], inc[total_le])
    shares = phases = None
    n = one("n")
    if with_shares and n:
        stalled, busy_n = one("stalled") or 0.0, one("busy") or 0.0
        shares = Shares(stalled=stalled / n, busy=busy_n / n, weight=n, source="samples")
        phases = phases_from_counts(
            stalled, one("stalled_runs") or 0.0, busy_n, one("busy_runs") or 0.0, dev.interval_s
        )
    return SpanNumbers(stats=stats, histogram=histogram, shares=shares, phases=phases)


def _stats(one: Callable[[str], float | None], merged: bool, scale: float, q_low: float) -> UtilStats | None:
    """The utilization statistics over the span (None: an aggregate answered nothing)."""
    count = one("count")
    sum_name = "sum"
    if merged and one("merged_count") is not None:
        # Series side by side would count each sample once per series.
        count, sum_name = one("merged_count"), "merged_sum"
    if not count:
        return None
    values = [one(n) for n in (sum_name, "max", "q_low", "q_high", "median")]
    if not all(v is not None for v in values[:4]):
        return None
    total, top, low, high, median = values
    return UtilStats(
        samples=round(count),
        mean=float(total or 0.0) / count * scale,
        max=float(top or 0.0) * scale,
        q_low=float(low or 0.0) * scale,
        q_high=float(high or 0.0) * scale,
        q_level=q_low,
        median=None if median is None else median * scale,
    )


def _terms(snapshot: FleetSnapshot, wanted: Sequence[Window]) -> list[list[SpanTerm]]:
    """Holders grouped into per-span terms, the terms into queries none of whose terms clash."""
    caps = snapshot.capabilities
    # Holders per (names, job, span), in order and once each.
    groups: dict[tuple[tuple[str, ...], str, TimeWindow], dict[DeviceKey, None]] = defaultdict(dict)
    for key, span in wanted:
        dev = snapshot.devices.get(key)
        if dev is not None:
            groups[(dev.info.metrics, dev.info.job, span)][key] = None
    terms: list[SpanTerm] = []
    for (metrics, job, span), held in sorted(groups.items(), key=_by_span):
        step = snapshot.devices[next(iter(held))].interval_s or 15.0
        metric, *others = metrics
        scale = caps.to_percent(metric, job)
        renamed = tuple((name, caps.to_percent(name, job) / scale) for name in others)
        for keys in _term_keys(list(held)):
            terms += _fitting(caps, metric, keys, span, step, scale, renamed)
    return _batched(terms)


def _batched(terms: Sequence[SpanTerm]) -> list[list[SpanTerm]]:
    """Terms into queries none of whose terms clash."""
    batches: list[list[SpanTerm]] = []
    batch_names: list[set[str]] = []
    for term in terms:
        names = term.uuids | term.pods
        for batch, seen in zip(batches, batch_names, strict=True):
            if len(batch) >= TERMS_PER_QUERY:
                continue
            # No term may select another's holder: the joined answer would carry it twice (only
            # terms sharing a GPU or a pod name can).
            clash = not names.isdisjoint(seen) and (
                any(other.selects(k) for other in batch for k in term.keys)
                or any(term.selects(k) for other in batch for k in other.keys)
            )
            if not clash:
                batch.append(term)
                seen.update(names)
                break
        else:
            batches.append([term])
            batch_names.append(set(names))
    return batches


def _ask_terms(
    client: PrometheusClient,
    snapshot: FleetSnapshot,
    batches: list[list[SpanTerm]],
    families: Sequence[Family],
    levels: Mapping[str, float] | None = None,
) -> dict[Window, dict[str, list[float]]]:
    """Per batch, one query per family of named aggregates, side by side; per (holder, span), the
    values each aggregate answered (a bucket's under ``_histogram_name``).

    ``levels`` names the quantile levels a ``ranked`` aggregate asks for (see ``aggregate_names``).
    """
    caps, at = snapshot.capabilities, snapshot.window.end
    # Rows an aggregate answers per holder: one, but a row per rollup, level or bucket bound.
    per_holder = {ADDITIVE: 2, RANKED: len(set((levels or {}).values())) or 1}
    per_holder["histogram"] = len(caps.histogram_le) or 1
    groups: list[tuple[dict[DeviceKey, TimeWindow], list[tuple[str, int]]]] = []
    for batch in batches:
        owner = {k: term.span for term in batch for k in term.keys}
        for family in families:
            built = ((name, term, build(term)) for term in batch for name, build in family.items())
            parts = [
                (tagged(name, text), per_holder.get(name, 1) * max(1, len(term.keys)))
                for name, term, text in built
                if text
            ]
            groups.append((owner, parts))
    plan = _plan(groups, client.limit.ceiling)
    read = partial(_read_numbers, caps, _NameMemo(levels or {}))
    return _by_window(plan, client.read_vectors([(query, at) for _, query in plan], read))


def _plan(
    groups: Sequence[tuple[dict[DeviceKey, TimeWindow], list[tuple[str, int]]]], ceiling: int
) -> list[tuple[dict[DeviceKey, TimeWindow], str]]:
    """Each group's tagged parts joined into queries, with the holders they answer for."""
    # VictoriaMetrics refuses queries over 16 KiB by default: split well below that, and into
    # as many queries as go out at once, so that a small round still runs side by side (but
    # none much under a quarter of the limit: a query costs a round trip of its own). An
    # answer parsed is held whole meanwhile: at most MAX_ROWS_PER_QUERY rows each.
    total = sum(len(part) + 4 for _, parts in groups for part, _ in parts)
    spread = ceil(total / ceiling)
    budget = min(promql.MAX_QUERY_CHARS, max(spread, promql.MAX_QUERY_CHARS // 4))
    plan: list[tuple[dict[DeviceKey, TimeWindow], str]] = []
    for owner, parts in groups:
        chunk: list[str] = []
        size = rows = 0
        for part, part_rows in parts:
            if chunk and (size + len(part) > budget or rows + part_rows > MAX_ROWS_PER_QUERY):
                plan.append((owner, joined(chunk)))
                chunk, size, rows = [], 0, 0
            chunk.append(part)
            size += len(part) + 4
            rows += part_rows
        if chunk:
            plan.append((owner, joined(chunk)))
    return plan


def _read_numbers(
    caps: Capabilities, names: _NameMemo, answer: list[VectorSample]
) -> list[tuple[DeviceKey, tuple[str, ...], float]]:
    """Only what the caller reads of an answer: each row's holder, the aggregates its tags name,
    its value."""
    out = []
    for labels, value in answer:
        key, of = device_key(labels, caps), names[tuple(labels.get(tag, "") for tag in _ROW_TAGS)]
        if key is not None and of and isfinite(value):
            out.append((key, of, value))
    return out


def _by_window(
    plan: Sequence[tuple[dict[DeviceKey, TimeWindow], str]],
    answers: Sequence[list[tuple[DeviceKey, tuple[str, ...], float]]],
) -> dict[Window, dict[str, list[float]]]:
    """The values each (holder, span) got, by aggregate, over every query of the plan."""
    out: dict[Window, dict[str, list[float]]] = {}
    for (owner, _), read in zip(plan, answers, strict=True):
        # Grouped by holder first: a holder's span (a pydantic model) is hashed once, not per row.
        by_key: dict[DeviceKey, dict[str, list[float]]] = {}
        for key, held_names, value in read:
            if key in owner:
                got = by_key.get(key)
                if got is None:
                    got = by_key[key] = {}
                for name in held_names:
                    got.setdefault(name, []).append(value)
        for key, got in by_key.items():
            have = out.setdefault((key, owner[key]), got)
            if have is not got:
                for name, values in got.items():
                    have.setdefault(name, []).extend(values)
    return out


def _fitting(
    caps: Capabilities,
    metric: str,
    keys: list[DeviceKey],
    span: TimeWindow,
    step: float,
    scale: float,
    renamed: Sequence[tuple[str, float]] = (),
) -> list[SpanTerm]:
    """Terms for ``keys`` whose longest aggregate (a run count, repeated once per piece of a long
    span) stays under the query length limit: halved until it does. Holders read under several
    names (``renamed``: the others, with their factors into ``metric``'s unit) get a
    ``RenamedTerm``."""
    term = (
        RenamedTerm(caps, metric, renamed, keys, span, step, scale)
        if renamed
        else SpanTerm(caps, metric, keys, span, step, scale)
    )
    if len(keys) == 1 or len(term.state_runs(True, 0.0)) <= promql.MAX_QUERY_CHARS - 500:
        return [term]
    half = len(keys) // 2
    return _fitting(caps, metric, keys[:half], span, step, scale, renamed) + _fitting(
        caps, metric, keys[half:], span, step, scale, renamed
    )


def _term_keys(keys: list[DeviceKey]) -> Iterator[list[DeviceKey]]:
    """One span's holders in terms: at most 40 pods each, a pod's GPUs never split between two
    (a term naming a pod selects all of its GPUs); holders without a pod 15 GPUs at a time."""
    podless = sorted(k for k in keys if not k.pod)
    for i in range(0, len(podless), HOLDERS_PER_TERM):
        yield podless[i : i + HOLDERS_PER_TERM]
    by_pod: dict[str, list[DeviceKey]] = defaultdict(list)
    for key in sorted(k for k in keys if k.pod):
        by_pod[key.pod].append(key)
    pods = sorted(by_pod)
    for i in range(0, len(pods), PODS_PER_TERM):
        yield [k for pod in pods[i : i + PODS_PER_TERM] for k in by_pod[pod]]


def near_spans(holders: Sequence[Window]) -> Iterator[tuple[TimeWindow, list[str]]]:
    """Holders' spans gathered while their union stays within twice the longest of them (and 150
    pods): the union, and the pods."""
    start = end = None
    longest = timedelta(0)
    pods: set[str] = set()
    # A pod's GPUs side by side: pods that started in the same second (a Job's parallel pods, a
    # fleet brought up at once) would otherwise be named again in every query holding one of them.
    for key, span in sorted(holders, key=lambda h: (h[1].start, h[0].namespace, h[0].pod)):
        if start is not None and end is not None:
            wider = max(longest, span.duration)
            full = key.pod not in pods and len(pods) >= PODS_PER_QUERY
            if max(end, span.end) - start > 2 * wider or full:
                yield TimeWindow(start=start, end=end), sorted(pods)
                start = None
        if start is None or end is None:
            start, end, longest, pods = span.start, span.end, timedelta(0), set()
        end, longest = max(end, span.end), max(longest, span.duration)
        pods.add(key.pod)
    if start is not None and end is not None:
        yield TimeWindow(start=start, end=end), sorted(pods)


def _by_span(group: tuple[tuple[tuple[str, ...], str, TimeWindow], object]) -> tuple[datetime, datetime, str]:
    (names, job, span), _ = group
    return (span.end, span.start, "+".join(names) + "/" + job)


def _first(values: Mapping[str, list[float]], name: str) -> float | None:
    """The first value an aggregate answered (None: it answered nothing)."""
    found = values.get(name)
    return found[0] if found else None


def _histogram_name(le: str) -> str:
    """The name a sample-histogram bucket's increase is read under, by its bound."""
    return f"histogram le={le}"


class _NameMemo(dict[tuple[str, ...], tuple[str, ...]]):
    """The aggregates an answer row holds, by its ``_ROW_TAGS`` values (a handful per round).

    Only the histogram's rows carry ``le`` (every other aggregate is grouped by the device labels
    alone), each bucket a name of its own; one holder has one row per name (its own ``by``)."""

    def __init__(self, levels: Mapping[str, float]) -> None:
        super().__init__()
        self.levels = levels

    def __missing__(self, tags: tuple[str, ...]) -> tuple[str, ...]:
        le = tags[-1]
        held = aggregate_names(dict(zip(_ROW_TAGS, tags, strict=True)), self.levels)
        if le:
            held = tuple(_histogram_name(le) for name in held if name == "histogram")
        self[tags] = held
        return held
