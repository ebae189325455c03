"""Queries sent side by side ahead of the code that reads them, answers split by a tag label, and
the device key of each answer row.

A round asks everything it can at once through the client's bounded pool and reads each answer
when it needs it, so parsing the first overlaps the wait for the rest. The per-device answers name
the same devices with the same labels: one label set is kept for all of them, and each set's
``DeviceKey`` is made once (at 10,000 GPUs, a Python call per row costs more than the lookup)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from concurrent.futures import Future, wait
from datetime import datetime
from itertools import groupby, repeat
from operator import itemgetter, methodcaller
from typing import Any

from analyzer.sources import dcgm
from analyzer.sources.aggregates import DeviceKey
from analyzer.sources.dcgm import Capabilities
from analyzer.sources.prometheus_api import PrometheusClient, VectorSample, samples_of

# A query sent plain, or ``(query, label)``: its rows read by that label's value.
Query = str | tuple[str, str]

labels_of, value_of = itemgetter(0), itemgetter(1)
_values = methodcaller("values")


def device_key(labels: Mapping[str, str], caps: Capabilities) -> DeviceKey | None:
    """The GPU holder a row names (None: a row without a UUID)."""
    uuid = labels.get(dcgm.UUID)
    if not uuid:
        return None
    pod = labels.get(caps.gpu_pod.pod, "")
    return DeviceKey(
        uuid=uuid,
        mig_instance=labels.get(dcgm.MIG_INSTANCE, "") if caps.mig else "",
        namespace=labels.get(caps.gpu_pod.namespace, "") if pod else "",
        pod=pod,
    )


def keys_of(answer: Sequence[VectorSample], caps: Capabilities) -> list[DeviceKey | None]:
    """The holder each row of an answer names."""
    return [device_key(s.labels, caps) for s in answer]


def label_sets(
    names: dict[tuple[str, ...], tuple[str, ...]], labels: Sequence[Mapping[str, str]]
) -> Iterator[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Each label set as its names (one tuple per shape, kept in ``names``) and its values: two
    objects held per distinct set, where (name, value) pairs hold one per label; mapped in C."""
    shapes = list(map(tuple, labels))
    shapes = list(map(names.setdefault, shapes, shapes))
    return zip(shapes, map(tuple, map(_values, labels)), strict=True)


class Batch:
    """Answers asked for side by side, by (query, time), until read or dropped."""

    def __init__(self, client: PrometheusClient) -> None:
        self.client = client
        # Each read waits for its own answer only, so work on the first overlaps the rest.
        self.fetched: dict[tuple[str, datetime], Future[list[VectorSample]]] = {}
        # Answers whose rows one label tells apart (the level of `device_quantiles`, the rollup of
        # `device_sum_and_series`), by that label's value.
        self.tagged: dict[tuple[str, datetime], Future[dict[str, list[VectorSample]]]] = {}

    def vector(self, promql: str, at: datetime) -> list[VectorSample]:
        """The answer fetched ahead, or asked now."""
        fetched = self.fetched.pop((promql, at), None)
        return fetched.result() if fetched is not None else self.client.vector(promql, at)

    def fetch(self, queries: Sequence[Query], at: datetime) -> None:
        """Send independent queries through the client's bounded pool, in their order; ``vector``
        reads each answer when it is needed (waiting for that one only). A ``(query, label)`` is
        read by ``tagged_rows``: its rows by that label's value (the level of
        ``device_quantiles``, the rollup of ``device_sum_and_series``)."""
        shared: dict[tuple[tuple[str, ...], tuple[str, ...]], Mapping[str, str]] = {}
        names: dict[tuple[str, ...], tuple[str, ...]] = {}

        def shared_labels(answer: list[VectorSample]) -> list[VectorSample]:
            # The per-device aggregates name the same devices with the same labels: one label set
            # kept for all of them, not one per answer (at 10,000 GPUs, tens of MiB). Mapped in C,
            # without a Python call per sample.
            labels = list(map(labels_of, answer))
            kept = map(shared.setdefault, label_sets(names, labels), labels)
            return samples_of(kept, map(value_of, answer))

        def by_tag(label: str) -> Callable[[list[VectorSample]], dict[str, list[VectorSample]]]:
            def split(answer: list[VectorSample]) -> dict[str, list[VectorSample]]:
                # Each row's tag taken off its labels (parsed for this answer alone), which then
                # are the device's shared ones; mapped in C like `shared_labels`, while the parsed
                # answer is alive (answers parsed meanwhile add to the peak memory).
                labels = list(map(labels_of, answer))
                tags = list(map(dict.pop, labels, repeat(label), repeat("")))
                kept = map(shared.setdefault, label_sets(names, labels), labels)
                rows: dict[str, list[VectorSample]] = defaultdict(list)
                for tag, sample in zip(tags, samples_of(kept, map(value_of, answer)), strict=True):
                    rows[tag].append(sample)
                return dict(rows)

            return split

        sent: set[str] = set()
        for label, group in groupby(queries, key=_tag_of):
            texts = [text for text in dict.fromkeys(map(_text_of, group)) if text not in sent]
            sent.update(texts)
            asked = [(text, at) for text in texts]
            if label is None:
                for text, answer in zip(texts, self.client.submit_vectors(asked, shared_labels), strict=True):
                    self.fetched[(text, at)] = answer
            else:
                for text, rows in zip(texts, self.client.submit_vectors(asked, by_tag(label)), strict=True):
                    self.tagged[(text, at)] = rows

    def tagged_rows(self, queries: Sequence[str], at: datetime) -> dict[str, list[VectorSample]]:
        """The rows of tagged answers sent by ``fetch`` (the parts of one aggregate), every part
        together, by tag."""
        rows: dict[str, list[VectorSample]] = defaultdict(list)
        for query in queries:
            for tag, found in self.tagged.pop((query, at)).result().items():
                rows[tag] += found
        return rows

    def drop(self) -> None:
        """Forget answers nobody read, once the calls still out have ended (no request outlives the
        snapshot, and an error of an answer never read is not raised)."""
        pending: list[Future[Any]] = [*self.fetched.values(), *self.tagged.values()]
        self.fetched.clear()
        self.tagged.clear()
        wait(pending)


def added(
    keys: Sequence[DeviceKey | None], answer: Sequence[VectorSample], kept: Container[DeviceKey | None]
) -> dict[DeviceKey, float]:
    """The answer's values per holder in ``kept``, rows of the same holder added up."""
    out: dict[DeviceKey, float] = {}
    for key, s in zip(keys, answer, strict=True):
        if key is not None and key in kept:
            out[key] = out.get(key, 0.0) + s.value
    return out


def quantile_names(q_low: float, q_high: float, with_max: bool) -> dict[str, float]:
    """The statistics that are quantiles, by name, with the maximum as level 1 if asked (the
    level a ranked answer's rows are tagged with)."""
    levels = {"q_low": q_low, "q_high": q_high, "median": 0.5}
    return levels | {"max": 1.0} if with_max else levels


def _tag_of(item: Query) -> str | None:
    return item[1] if isinstance(item, tuple) else None


def _text_of(item: Query) -> str:
    return item[0] if isinstance(item, tuple) else item
