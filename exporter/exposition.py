"""A snapshot encoded for ``/metrics``: on the first scrape that asks for it, once per variant.

A snapshot never changes, so neither does its exposition. It is written in the Prometheus text format
0.0.4 only, plain or gzip; each variant is built the first time a scrape asks for it and kept with the
snapshot, so every later scrape of the same snapshot only writes bytes. Nothing is encoded for a
scrape that never comes: the collection loop collects every 5 s by default and Prometheus scrapes
every 15-60 s, so most snapshots are never served, and encoding each of them cost the node more CPU
than collecting it. The price is paid by the first scrape of a snapshot, which waits for its encoding
(docs/exporter.md, "The exporter's own work").

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
import zlib
from collections.abc import Callable, Sequence
from typing import Final, NamedTuple

from prometheus_client.utils import floatToGoString

from exporter import fields as f
from exporter.naming import LEGACY_NAMING, Family
from exporter.snapshot import HistogramSeries, Labels, Series, Snapshot

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


def _number(value: float) -> str:
    """``floatToGoString``, its common case inline: a repr without a Go exponent, inf or NaN."""
    text = repr(float(value))
    if text.find(".") > 6 or "n" in text:
        return floatToGoString(value)
    return text


_HISTOGRAM: Final = "histogram"
#: zlib's window bits for a gzip member (16 + the largest window).
_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS


class _Chunk(NamedTuple):
    """One family as last encoded: what it was encoded from, and its text."""

    source: object
    text: bytes


class Encoder:
    """Encodes snapshots for one list of families, reusing what did not change since the last one.

    Between two collections most of a node's exposition is the same (ECC and row-remapping counters,
    capacities, capabilities, XIDs, readings served as last read between their cadences), and so are
    the label sets, which change only when a pod moves or a MIG layout changes. So each family's text
    is kept with the series it was written from and reused while they are equal, and within a family
    that changed each series' line is kept with its label set and value and rewritten only where the
    value changed. Equality, never age, decides a reuse: whatever order snapshots are encoded in, the
    bytes are those a fresh encoding writes, however many snapshots no scrape asked for came in
    between. Thread-safe (scrapes of different snapshots may encode at once). (gzip is not kept per
    family: deflating each on its own costs more CPU than deflating the whole once and triples the
    compressed size, each piece losing the label text the others share.)"""

    def __init__(self, families: Sequence[Family] | None = None) -> None:
        self._families = _LEGACY_FAMILIES if families is None else tuple(families)
        self._lock = threading.Lock()
        self._chunks: dict[str, _Chunk] = {}
        # Per family: id of a label set → (the label set, line prefix, value, line). The label set is
        # held, so its id is not reused while the entry lives. A family's lines are rebuilt only when
        # the family changed (its lines a snapshot did not use go then); an unchanged family keeps them.
        self._lines: dict[str, dict[int, _Line]] = {}
        self._histogram_lines: dict[int, _HistogramLines] = {}

    def chunks(self, snapshot: Snapshot) -> list[_Chunk]:
        """Each served family of ``snapshot`` that has samples, encoded, in catalogue order."""
        with self._lock:
            out: list[_Chunk] = []
            chunks: dict[str, _Chunk] = {}
            lines: dict[str, dict[int, _Line]] = {}
            known_lines, histogram_lines = self._lines, self._histogram_lines
            for family in self._families:
                key = family.key
                histogram = family.type == _HISTOGRAM
                source: object = snapshot.histograms if histogram else snapshot.series.get(key)
                if not source:
                    continue
                chunk = self._chunks.get(key)
                if chunk is None or (chunk.source is not source and chunk.source != source):
                    if histogram:
                        histogram_lines = {}
                        text = self._histograms(family.name, snapshot.histograms, histogram_lines)
                    else:
                        kept = lines[key] = {}
                        text = self._series(family, snapshot.series[key], known_lines.get(key, {}), kept)
                    name = family.name
                    head = f"# HELP {name} {_escape_help(family.help)}\n# TYPE {name} {family.type}\n"
                    chunk = _Chunk(source, (head + text).encode())
                elif not histogram:
                    lines[key] = known_lines.get(key, {})
                chunks[key] = chunk
                out.append(chunk)
            self._chunks, self._lines, self._histogram_lines = chunks, lines, histogram_lines
            return out

    @staticmethod
    def _series(
        family: Family, series: Sequence[Series], known: dict[int, _Line], kept: dict[int, _Line]
    ) -> str:
        """The family's lines, each reused where its label set and value are those it was written for."""
        name = family.name
        converts, multiply, divide = family.converts, family.multiply, family.divide
        out: list[str] = []
        for labels, value in series:
            key = id(labels)
            line = kept.get(key) or known.get(key)
            if line is None or line[0] is not labels:
                prefix = f"{name}{_labels(labels)} "
            elif line[2] == value and (value or str(value) == str(line[2])):  # 0.0 is not -0.0
                kept[key] = line
                out.append(line[3])
                continue
            else:
                prefix = line[1]
            served = value * multiply / divide if converts else value
            line = kept[key] = (labels, prefix, value, f"{prefix}{_number(served)}\n")
            out.append(line[3])
        return "".join(out)

    def _histograms(
        self, name: str, histograms: Sequence[HistogramSeries], kept: dict[int, _HistogramLines]
    ) -> str:
        known = self._histogram_lines
        out: list[str] = []
        for histogram in histograms:
            labels = histogram.labels
            key = id(labels)
            prefixes = kept.get(key) or known.get(key)
            if prefixes is None or prefixes[0] is not labels:
                buckets = tuple(f"{name}_bucket{_labels(labels, le)} " for le in _LE_LABELS)
                plain = _labels(labels)
                prefixes = (labels, buckets, f"{name}_count{plain} ", f"{name}_sum{plain} ")
            kept[key] = prefixes
            cumulative = histogram.cumulative
            out.extend(f"{prefix}{count}\n" for prefix, count in zip(prefixes[1], cumulative, strict=True))
            out.append(f"{prefixes[2]}{cumulative[-1]}\n{prefixes[3]}{floatToGoString(histogram.total)}\n")
        return "".join(out)

    def plain(self, snapshot: Snapshot) -> bytes:
        return b"".join(chunk.text for chunk in self.chunks(snapshot))


_Line = tuple[Labels, str, float, str]
_HistogramLines = tuple[Labels, tuple[str, ...], str, str]


def _gzip(plain: bytes) -> bytes:
    """``gzip.compress(plain, _GZIP_LEVEL, mtime=0)``, the same bytes, zlib writing the gzip member."""
    return zlib.compress(plain, _GZIP_LEVEL, wbits=_GZIP_WBITS)


def encode(snapshot: Snapshot, families: Sequence[Family] | None = None) -> bytes:
    """The text exposition of ``snapshot``: each of ``families`` (default: every family, legacy
    naming) that has samples, under its served name and type, its values in its served unit."""
    return Encoder(families).plain(snapshot)


class EncodedSnapshot:
    """The exposition of one snapshot, plain and gzip, each built on first request and then reused."""

    __slots__ = ("_encoder", "_lock", "_variants", "snapshot")

    def __init__(
        self, snapshot: Snapshot, families: Sequence[Family] | None = None, encoder: Encoder | None = None
    ) -> None:
        self.snapshot = snapshot
        self._encoder = Encoder(families) if encoder is None else encoder
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
                        body = _gzip(self.body(compressed=False))
                    else:
                        body = self._encoder.plain(self.snapshot)
                    self._variants[compressed] = body
        return body


class Exposition:
    """``/metrics`` content for whatever snapshot is newest, encoded when a scrape first asks for it:
    each snapshot at most once per variant, however many scrapes race for it, through one
    :class:`Encoder`, so each encoding rewrites only what changed since the one before. ``families``
    are what is served and how (:meth:`exporter.naming.Naming.families`, from the naming and a
    ``--collectors`` file); ``None`` serves every family in the legacy naming. Thread-safe: the HTTP
    server answers each connection on its own thread."""

    def __init__(
        self, latest: Callable[[], Snapshot | None], families: Sequence[Family] | None = None
    ) -> None:
        self._latest = latest
        self._encoder = Encoder(families)
        self._lock = threading.Lock()
        # The snapshots scrapes asked for last, newest last: two, so a scrape that read the previous
        # snapshot just before a collection replaced it does not make the newest one be encoded again.
        self._recent: tuple[EncodedSnapshot, ...] = ()

    def current(self) -> EncodedSnapshot | None:
        """The newest snapshot with whatever of its exposition is built already."""
        snapshot = self._latest()
        if snapshot is None:
            return None
        for known in reversed(self._recent):
            if known.snapshot is snapshot:
                return known
        with self._lock:  # two scrapes of a new snapshot wrap it once, so they encode it once
            for known in self._recent:
                if known.snapshot is snapshot:
                    return known
            current = EncodedSnapshot(snapshot, encoder=self._encoder)
            self._recent = (*self._recent[-1:], current)
            return current

    def render(self, accept: str = "", accept_encoding: str = "") -> tuple[bytes, str, str | None]:
        """(body, content type, content encoding) for a request with these headers, the snapshot
        encoded now if no scrape asked for this variant of it before. The text format is served
        whatever ``accept`` prefers (see the module's docstring); only gzip is negotiated."""
        compressed = wants_gzip(accept_encoding)
        encoding = "gzip" if compressed else None
        current = self.current()
        if current is None:  # before the first collection: an empty exposition
            body = gzip.compress(b"", _GZIP_LEVEL, mtime=0) if compressed else b""
            return body, TEXT_CONTENT_TYPE, encoding
        return current.body(compressed=compressed), TEXT_CONTENT_TYPE, encoding
