"""A snapshot encoded for ``/metrics``: once per snapshot and variant, then served as bytes.

A snapshot never changes, so neither does its exposition. Each of the four variants — Prometheus text
0.0.4 or OpenMetrics 1.0.0, plain or gzip — is built the first time a scrape asks for it and kept
with the snapshot; every later scrape of the same snapshot only writes bytes.

Text 0.0.4 types DCGM's counters ``counter`` under their exact names, as dcgm-exporter does.
OpenMetrics requires counter samples to end in ``_total``; DCGM's names do not, so there they are
typed ``unknown`` and keep their names (what Prometheus stores is the same under both formats).
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Collection, Iterable
from typing import Final

from prometheus_client.utils import floatToGoString

from exporter import fields as f
from exporter.snapshot import HistogramSeries, Labels, Snapshot

TEXT_CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE: Final = "application/openmetrics-text; version=1.0.0; charset=utf-8"
_LE_LABELS: Final = tuple(f'le="{le}"' for le in (*map(floatToGoString, f.SAMPLE_BUCKETS), "+Inf"))
#: gzip level 1: the 130 KB exposition of an 8-GPU shared node shrinks to about 5 KB, at a fraction
#: of level 6's CPU time.
_GZIP_LEVEL: Final = 1


def _quality(params: list[str]) -> float:
    for param in params:
        key, _, value = param.partition("=")
        if key.strip() == "q":
            try:
                return float(value)
            except ValueError:
                return 0.0
    return 1.0


def _entries(header: str) -> list[tuple[str, dict[str, str], float]]:
    """(media or coding, parameters, quality) of each comma-separated entry of a request header."""
    out = []
    for entry in header.split(","):
        name, *params = (part.strip() for part in entry.split(";"))
        options = {k.strip(): v.strip() for k, _, v in (p.partition("=") for p in params)}
        out.append((name.lower(), options, _quality(params)))
    return out


def wants_openmetrics(accept: str) -> bool:
    """True when the ``Accept`` header lists OpenMetrics 1.0.0 (or 0.0.1) with a non-zero quality, as
    Prometheus sends it (``application/openmetrics-text;version=1.0.0,...;q=0.5,...``)."""
    return any(
        media == "application/openmetrics-text"
        and options.get("version", "1.0.0") in ("1.0.0", "0.0.1")
        and q > 0
        for media, options, q in _entries(accept)
    )


def wants_gzip(accept_encoding: str) -> bool:
    return any(coding == "gzip" and q > 0 for coding, _, q in _entries(accept_encoding))


def _escape_label(value: str) -> str:
    if "\\" not in value and "\n" not in value and '"' not in value:
        return value  # the common case, at a third of the cost
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n")


def _labels(labels: Labels, extra: str = "") -> str:
    inner = ",".join(f'{key}="{_escape_label(value)}"' for key, value in sorted(labels.items()))
    if extra:
        inner = f"{inner},{extra}" if inner else extra
    return "{" + inner + "}" if inner else ""


class _LabelCache:
    """Rendered label sets for one encoding. The builder shares one labels dict among all the families
    of a device, so each set is rendered once; keyed by identity, valid while the snapshot lives."""

    __slots__ = ("_rendered",)

    def __init__(self) -> None:
        self._rendered: dict[int, str] = {}

    def __call__(self, labels: Labels) -> str:
        key = id(labels)
        text = self._rendered.get(key)
        if text is None:
            text = self._rendered[key] = _labels(labels)
        return text


def _histogram_lines(name: str, histograms: Iterable[HistogramSeries], out: list[str]) -> None:
    for histogram in histograms:
        for le, count in zip(_LE_LABELS, histogram.cumulative, strict=True):
            out.append(f"{name}_bucket{_labels(histogram.labels, le)} {count}\n")
        plain = _labels(histogram.labels)
        out.append(f"{name}_count{plain} {histogram.cumulative[-1]}\n")
        out.append(f"{name}_sum{plain} {floatToGoString(histogram.total)}\n")


def encode(snapshot: Snapshot, *, openmetrics: bool, served: Collection[str] | None = None) -> bytes:
    """The exposition of ``snapshot``; families without samples, or not in ``served``, are left out."""
    out: list[str] = []
    labels = _LabelCache()
    for name, spec in f.SPECS.items():
        if served is not None and name not in served:
            continue
        if spec.type == "histogram":
            if not snapshot.histograms:
                continue
            family, kind, sample_name = name, "histogram", name
        else:
            series = snapshot.series.get(name)
            if not series:
                continue
            family, kind, sample_name = name, spec.type, name
            if spec.type == "counter" and openmetrics:
                if name.endswith("_total"):
                    family = name.removesuffix("_total")
                else:
                    kind = "unknown"
        out.append(f"# HELP {family} {_escape_help(spec.help)}\n")
        out.append(f"# TYPE {family} {kind}\n")
        if spec.type == "histogram":
            _histogram_lines(sample_name, snapshot.histograms, out)
        else:
            for s in snapshot.series[name]:
                out.append(f"{sample_name}{labels(s.labels)} {floatToGoString(s.value)}\n")
    if openmetrics:
        out.append("# EOF\n")
    return "".join(out).encode()


class EncodedSnapshot:
    """The exposition variants of one snapshot, each built on first request and then reused."""

    __slots__ = ("_lock", "_served", "_variants", "snapshot")

    def __init__(self, snapshot: Snapshot, served: Collection[str] | None = None) -> None:
        self.snapshot = snapshot
        self._served = served
        self._variants: dict[tuple[bool, bool], bytes] = {}
        self._lock = threading.RLock()  # a gzip variant builds its plain variant under the same lock

    def body(self, *, openmetrics: bool, compressed: bool) -> bytes:
        key = (openmetrics, compressed)
        body = self._variants.get(key)
        if body is None:
            with self._lock:  # two scrapes racing for a new snapshot encode it once
                body = self._variants.get(key)
                if body is None:
                    if compressed:
                        plain = self.body(openmetrics=openmetrics, compressed=False)
                        body = gzip.compress(plain, compresslevel=_GZIP_LEVEL, mtime=0)
                    else:
                        body = encode(self.snapshot, openmetrics=openmetrics, served=self._served)
                    self._variants[key] = body
        return body


class Exposition:
    """``/metrics`` content for whatever snapshot is newest; encodes each snapshot at most once per
    variant. ``served`` limits the families (a ``--collectors`` file); ``None`` serves all."""

    def __init__(self, latest: Callable[[], Snapshot | None], served: Collection[str] | None = None) -> None:
        self._latest = latest
        self._served = None if served is None else frozenset(served)
        self._current: EncodedSnapshot | None = None
        self._asked: set[tuple[bool, bool]] = set()

    def current(self) -> EncodedSnapshot | None:
        snapshot = self._latest()
        if snapshot is None:
            return None
        current = self._current
        if current is None or current.snapshot is not snapshot:
            current = EncodedSnapshot(snapshot, self._served)
            self._current = current  # a racing scrape may wrap the same snapshot too; both are right
        return current

    def render(self, accept: str = "", accept_encoding: str = "") -> tuple[bytes, str, str | None]:
        """(body, content type, content encoding) for a request with these headers."""
        openmetrics = wants_openmetrics(accept)
        compressed = wants_gzip(accept_encoding)
        content_type = OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE
        current = self.current()
        encoding = "gzip" if compressed else None
        if current is None:  # before the first collection: an empty exposition
            body = b"# EOF\n" if openmetrics else b""
            return (gzip.compress(body, _GZIP_LEVEL, mtime=0) if compressed else body), content_type, encoding
        self._asked.add((openmetrics, compressed))
        return current.body(openmetrics=openmetrics, compressed=compressed), content_type, encoding

    def prepare(self) -> None:
        """Encode the newest snapshot in the variants scrapes have asked for, so the next scrape only
        writes bytes. The collection loop calls this after each cycle, off the scrape path."""
        current = self.current()
        if current is not None:
            for openmetrics, compressed in tuple(self._asked):
                current.body(openmetrics=openmetrics, compressed=compressed)
