"""Which naming ``/metrics`` speaks: dcgm-exporter's legacy one, or DCGM 4.7's (dcgm-exporter 4.9).

Readings and snapshots are keyed by the legacy names in the legacy units (percent, MiB, MHz, mJ,
NVLink's MB/s) whatever is served: the naming is applied once, where a snapshot is encoded. There
each family gets its served name, help and type, and its values the unit factor of the one rename
table (``common.metric_names.DCGM_4_7``). The labels that changed name (the node's, the driver
version's) are chosen here too and written by the snapshot builder. Our own ``gpu_*`` families keep
their names and units in both namings.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Final, NamedTuple

from common.metric_names import BY_LEGACY, DRIVER_VERSION_LABEL, DRIVER_VERSION_LABEL_4_7, HOSTNAME_LEGACY
from exporter import fields as f
from exporter.config import DCGM_4_7_NAMES, LEGACY_NAMES, METRIC_NAMINGS

#: Families served by default in one naming only: dcgm-exporter 4.9 collects the frame-buffer
#: capacity by default, earlier versions do not.
_DEFAULT_IN_4_7_ONLY: Final = frozenset({f.FB_TOTAL})
_DEFAULT_IN_LEGACY_ONLY: Final = frozenset({f.CLOCK_THROTTLE_REASONS})


class Family(NamedTuple):
    """One family as served: ``key`` names it in snapshots, ``name`` on the wire. A value is served
    as ``value * multiply / divide`` (one of the two is 1): a division by 100 or 1000 gives the
    float nearest the exact ratio, where multiplying by 0.01 would not (57 * 0.01 = 0.5700000000000001)."""

    key: str
    name: str
    help: str
    type: str
    multiply: float = 1.0
    divide: float = 1.0

    @property
    def converts(self) -> bool:
        return self.multiply != 1.0 or self.divide != 1.0


def _factors(to_current: float) -> tuple[float, float]:
    if to_current >= 1.0:
        return to_current, 1.0
    divide = round(1.0 / to_current)
    if divide * to_current != 1.0:  # a factor that is not 1/n: multiply, accepting the rounding
        return to_current, 1.0
    return 1.0, float(divide)


@dataclass(frozen=True)
class Naming:
    """A naming and the node label: ``node_label`` ``None`` serves none (``--no-hostname``)."""

    scheme: str = LEGACY_NAMES
    node_label: str | None = HOSTNAME_LEGACY

    def __post_init__(self) -> None:
        if self.scheme not in METRIC_NAMINGS:
            raise ValueError(f"metric naming {self.scheme!r}: expected one of {', '.join(METRIC_NAMINGS)}")

    @property
    def current(self) -> bool:
        """DCGM 4.7's naming (dcgm-exporter 4.9)."""
        return self.scheme == DCGM_4_7_NAMES

    @property
    def driver_label(self) -> str:
        return DRIVER_VERSION_LABEL_4_7 if self.current else DRIVER_VERSION_LABEL

    def default_served(self) -> frozenset[str]:
        """The families served without a counters file: every one this exporter reads, but the frame-
        buffer capacity only in DCGM 4.7's naming, as dcgm-exporter serves it by default from 4.9, and
        the clock-event reasons under their pre-3.3 name (``CLOCK_THROTTLE_REASONS``, a deprecated
        alias of field 112) only in the legacy one."""
        left_out = _DEFAULT_IN_LEGACY_ONLY if self.current else _DEFAULT_IN_4_7_ONLY
        return frozenset(name for name in f.SPECS if name not in left_out)

    def families(self, served: Collection[str] | None = None) -> tuple[Family, ...]:
        """The families to encode, in catalogue order: ``served`` (snapshot keys, as a counters file
        selects them) or :meth:`default_served`."""
        chosen = self.default_served() if served is None else frozenset(served)
        out = []
        for key, spec in f.SPECS.items():
            if key not in chosen:
                continue
            current = f.SPECS_4_7.get(key) if self.current else None
            if current is None:
                out.append(Family(key, spec.name, spec.help, spec.type))
            else:
                multiply, divide = _factors(BY_LEGACY[key].to_current)
                out.append(Family(key, current.name, current.help, current.type, multiply, divide))
        return tuple(out)


LEGACY_NAMING: Final = Naming()
