"""One fleet in every DCGM naming, the forms told apart by ``cluster``, for one TSDB to hold them all.

The fleet is the extras fleet's (:mod:`harness.extra_fleet`): its simulated nodes with dcgm-exporter's
own node label ``Hostname`` (as up to 4.8.2), its hot node with ``hostname`` (4.8.3 on), gpu-exporter's
own series and the reaper's. Each form is that fleet as its exporters would serve it:

* ``legacy``: dcgm-exporter up to 4.8's names and units;
* ``dcgm-4.7``: DCGM 4.7's names, base units, ``hostname`` and ``DCGM_FI_SYSTEM_DRIVER_VERSION``, as
  dcgm-exporter 4.9 serves them;
* ``mixed``: node gpu-h2 and the hot node in DCGM 4.7's naming, gpu-h1 legacy;
* ``upgrade``: every node legacy until its upgrade, 4.7 after, with one scrape in both: gpu-h1 at
  :data:`UPGRADE_AT`, gpu-h2 five minutes later, the hot node (whose XID comes after) at
  :data:`HOT_NODE_UPGRADE_AT`.

The workloads, their behaviour and the faults are the same in every form, so every dashboard
number, alert and rollup must be too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import timedelta

from harness.extra_fleet import (
    END_S,
    RELABELLED_SCENARIO,
    STEP_S,
    exporter_series,
    hot_node_series,
    reaper_series,
)
from simulation.fleet import Naming, Scenario, Series, simulate, with_naming
from simulation.fleet.naming import renamed

FORMS: tuple[Naming, ...] = ("legacy", "dcgm-4.7", "mixed", "upgrade")
UPGRADE_AT = timedelta(minutes=-20)
UPGRADE_STAGGER = timedelta(minutes=5)
HOT_NODE_UPGRADE_AT = timedelta(minutes=-12)
#: Scrapes an upgrading node serves in both namings.
OVERLAP = 1


def scenario() -> Scenario:
    """The extras fleet's simulated nodes with the node label dcgm-exporter wrote up to 4.8.2."""
    spec = {k: v for k, v in RELABELLED_SCENARIO.items() if k != "labels"}
    return Scenario.model_validate(spec)


def _upgraded(series: Iterable[Series], at: float) -> list[Series]:
    """``series`` in the legacy naming up to ``at`` (and :data:`OVERLAP` scrapes after), DCGM 4.7's
    naming after ``at``."""
    out = []
    for s in series:
        new = renamed(s)
        before = s.timestamps <= at + OVERLAP * STEP_S
        after = new.timestamps > at
        if before.any():
            out.append(replace(s, timestamps=s.timestamps[before], values=s.values[before]))
        if after.any():
            out.append(replace(new, timestamps=new.timestamps[after], values=new.values[after]))
    return out


def _hot_node(form: str) -> list[Series]:
    series = hot_node_series()
    if form == "legacy":
        return series
    if form == "upgrade":
        return _upgraded(series, END_S + HOT_NODE_UPGRADE_AT.total_seconds())
    return [renamed(s) for s in series]


def _in_cluster(series: Iterable[Series], cluster: str) -> list[Series]:
    return [replace(s, labels=tuple(sorted((*s.labels, ("cluster", cluster))))) for s in series]


def form_series(form: Naming) -> list[Series]:
    """The fleet as served in ``form`` (one of :data:`FORMS`), without a cluster label."""
    shaped = with_naming(scenario(), form, at=UPGRADE_AT, overlap=OVERLAP, stagger=UPGRADE_STAGGER)
    return [*simulate(shaped).series, *_hot_node(form), *exporter_series(), *reaper_series()]


def naming_fleets() -> list[Series]:
    """Every form of the fleet, each as the cluster of its name."""
    return [s for form in FORMS for s in _in_cluster(form_series(form), form)]
