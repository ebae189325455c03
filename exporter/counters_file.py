"""``-f/--collectors``: a counters file in dcgm-exporter's CSV format chooses the DCGM series served.

Each line is ``DCGM_FIELD, prometheus type, help``; ``#`` starts a comment; blank lines are skipped.
dcgm-exporter's own files (``default-counters.csv``, ``dcp-metrics-included.csv``) work unchanged:
fields this exporter does not read are reported and skipped, not refused. A field may be named in
either naming, legacy (``DCGM_FI_DEV_GPU_UTIL``) or DCGM 4.7's (``DCGM_FI_DEV_GPU_UTIL_RATIO``), and
one file may mix them: both select the same family, which ``--metric-names`` then names. The driver
version, a ``label`` line in dcgm-exporter's files, is a label on every series here whatever the file
says. The exporter's own series (``gpu_up``, the sample histogram, ``gpu_exporter_*``) are always
served. Types and help texts come from this exporter's catalogue, which follows dcgm-exporter's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from common.metric_names import DRIVER_VERSION_LABEL, DRIVER_VERSION_LABEL_4_7, legacy_name
from exporter import fields as f
from exporter.config import ConfigError

_TYPES: Final = frozenset({"gauge", "counter", "histogram", "label"})
#: Served as a label on every series, whether a file lists it or not.
_ALWAYS_LABELS: Final = frozenset({DRIVER_VERSION_LABEL, DRIVER_VERSION_LABEL_4_7})


@dataclass(frozen=True)
class Collectors:
    served: frozenset[str]  # every family to serve, by its legacy name (the snapshots' keys)
    skipped: tuple[str, ...]  # DCGM fields listed in the file that this exporter does not read


def parse_collectors(text: str, source: str) -> Collectors:
    """The families a counters file selects; raises :class:`ConfigError` naming file and line."""
    chosen: set[str] = set()
    skipped: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [part.strip() for part in line.split(",", 2)]
        where = f"{source}:{number}"
        if len(parts) < 2 or not parts[0]:
            raise ConfigError(f"{where}: expected 'DCGM_FIELD, type, help', got {line!r}")
        name, kind = parts[0], parts[1].lower()
        if not name.startswith("DCGM_"):
            raise ConfigError(f"{where}: {name!r} is not a DCGM field name")
        if kind not in _TYPES:
            raise ConfigError(f"{where}: type {parts[1]!r}, expected one of {', '.join(sorted(_TYPES))}")
        family = legacy_name(name)
        if family in f.DCGM_FIELDS:
            chosen.add(family)
        elif name not in skipped and name not in _ALWAYS_LABELS:
            skipped.append(name)
    if not chosen:
        raise ConfigError(f"{source}: selects none of the DCGM fields this exporter serves")
    own = {name for name in f.SPECS if name not in f.DCGM_FIELDS}
    return Collectors(frozenset(chosen | own), tuple(skipped))


def load_collectors(path: Path) -> Collectors:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"--collectors {path}: {exc.strerror or exc}") from None
    return parse_collectors(text, str(path))
