"""A snapshot encoded for ``/metrics``: once per snapshot and variant, then served as bytes.

A snapshot never changes, so neither does its exposition. It is written in the Prometheus text format
0.0.4 only, plain or gzip; each variant is built the first time a scrape asks for it and kept with the
snapshot, so every later scrape of the same snapshot only writes bytes.

Why text only: DCGM's counters are named without ``_total``. The text format types them ``counter``
under those exact names, as dcgm-exporter serves them (it writes this format and nothing else).
OpenMetrics requires a counter's samples to end in ``_total``, so there they could only be typed
``unknown`` — and Prometheus, which asks for OpenMetrics first, would record them as such. Nothing
OpenMetrics adds is served here (no exemplars, no ``_created`` series), so the ``Accept`` header
changes nothing and every Prometheus, whatever protocols it prefers, reads the same bytes.

Names and units are the naming's (:mod:`exporter.naming`): a snapshot holds the legacy names and
units, and each family is renamed, and its values converted, here, as the bytes are written.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from prometheus_client.utils import floatToGoString

from exporter import fields as f
from exporter.naming import LEGACY_NAMING, Family
from exporter.snapshot import HistogramSeries, Labels, Snapshot

TEXT_CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
_LE_LABELS: Final = tuple(f'le="{le}"' for le in (*map(floatToGoString, f.SAMPLE_BUCKETS), "+Inf"))
#: gzip level 1: the 130 KB exposition of an 8-GPU shared node shrinks to about 5 KB, at a fraction
#: of level 6's CPU time.
_GZIP_LEVEL: Final = 1
_LEGACY_FAMILIES: Final = LEGACY_NAMING.families()


def _quality(params: list[str]) -> float:
    for param in params:
        key, _, value = param.partition("=")
        if key.strip() == "q":
            try:
                return float(value)
            except ValueError:
                return 0.0
    return 1.0


def wants_gzip(accept_encoding: str) -> bool:
    """True when the ``Accept-Encoding`` header lists gzip with a non-zero quality."""
    for entry in accept_encoding.split(","):
        coding, *params = (part.strip() for part in entry.split(";"))
        if coding.lower() == "gzip" and _quality(params) > 0:
            return True
    return False


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


def encode(snapshot: Snapshot, families: Sequence[Family] | None = None) -> bytes:
    """The text exposition of ``snapshot``: each of ``families`` (default: every family, legacy
    naming) that has samples, under its served name and type, its values in its served unit."""
    out: list[str] = []
    labels = _LabelCache()
    for family in _LEGACY_FAMILIES if families is None else families:
        if family.type == "histogram":
            if not snapshot.histograms:
                continue
        elif not snapshot.series.get(family.key):
            continue
        name = family.name
        out.append(f"# HELP {name} {_escape_help(family.help)}\n")
        out.append(f"# TYPE {name} {family.type}\n")
        if family.type == "histogram":
            _histogram_lines(name, snapshot.histograms, out)
        elif family.converts:
            multiply, divide = family.multiply, family.divide
            for s in snapshot.series[family.key]:
                out.append(f"{name}{labels(s.labels)} {floatToGoString(s.value * multiply / divide)}\n")
        else:
            for s in snapshot.series[family.key]:
                out.append(f"{name}{labels(s.labels)} {floatToGoString(s.value)}\n")
    return "".join(out).encode()


class EncodedSnapshot:
    """The exposition of one snapshot, plain and gzip, each built on first request and then reused."""

    __slots__ = ("_families", "_lock", "_variants", "snapshot")

    def __init__(self, snapshot: Snapshot, families: Sequence[Family] | None = None) -> None:
        self.snapshot = snapshot
        self._families = families
        self._variants: dict[bool, bytes] = {}
        self._lock = threading.RLock()  # the gzip variant builds the plain one under the same lock

    def encoded(self, *, compressed: bool) -> bool:
        """Whether this variant is built already (a scrape of it only writes bytes)."""
        return compressed in self._variants

    def body(self, *, compressed: bool) -> bytes:
        body = self._variants.get(compressed)
        if body is None:
            with self._lock:  # two scrapes racing for a new snapshot encode it once
                body = self._variants.get(compressed)
                if body is None:
                    if compressed:
                        plain = self.body(compressed=False)
                        body = gzip.compress(plain, compresslevel=_GZIP_LEVEL, mtime=0)
                    else:
                        body = encode(self.snapshot, self._families)
                    self._variants[compressed] = body
        return body


class Exposition:
    """``/metrics`` content for whatever snapshot is newest; encodes each snapshot at most once per
    variant. ``families`` are what is served and how (:meth:`exporter.naming.Naming.families`, from
    the naming and a ``--collectors`` file); ``None`` serves every family in the legacy naming."""

    def __init__(
        self, latest: Callable[[], Snapshot | None], families: Sequence[Family] | None = None
    ) -> None:
        self._latest = latest
        self._families = _LEGACY_FAMILIES if families is None else tuple(families)
        self._current: EncodedSnapshot | None = None
        self._asked: set[bool] = set()

    def current(self) -> EncodedSnapshot | None:
        snapshot = self._latest()
        if snapshot is None:
            return None
        current = self._current
        if current is None or current.snapshot is not snapshot:
            current = EncodedSnapshot(snapshot, self._families)
            self._current = current  # a racing scrape may wrap the same snapshot too; both are right
        return current

    def render(self, accept: str = "", accept_encoding: str = "") -> tuple[bytes, str, str | None]:
        """(body, content type, content encoding) for a request with these headers. The text format
        is served whatever ``accept`` prefers (see the module's docstring); only gzip is negotiated."""
        compressed = wants_gzip(accept_encoding)
        encoding = "gzip" if compressed else None
        current = self.current()
        if current is None:  # before the first collection: an empty exposition
            body = gzip.compress(b"", _GZIP_LEVEL, mtime=0) if compressed else b""
            return body, TEXT_CONTENT_TYPE, encoding
        self._asked.add(compressed)
        return current.body(compressed=compressed), TEXT_CONTENT_TYPE, encoding

    def prepare(self) -> None:
        """Encode the newest snapshot in the variants scrapes have asked for, so the next scrape only
        writes bytes. The collection loop calls this after each cycle, off the scrape path."""
        current = self.current()
        if current is not None:
            for compressed in tuple(self._asked):
                current.body(compressed=compressed)
