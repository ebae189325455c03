"""The one table of what the analyzer reads: both DCGM namings, units from the names, one signal a field.

A name added to ``vocabulary.READ`` is read by discovery, by both sources and in its unit; these
checks hold every line of the table to the rename table and to the naming standard's units.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from analyzer.sources import dcgm, vocabulary
from analyzer.sources.dcgm import Capabilities
from analyzer.sources.fleet_queries import FleetQueries
from analyzer.sources.vocabulary import BYTES_TO_MIB, PERCENT_TO_PERCENT, RATIO_TO_PERCENT, Use
from common import metric_names as m

LEGACY_FLEET = {m.GPU_UTIL, m.PROF_GR_ENGINE_ACTIVE, m.FB_USED, m.FB_FREE, dcgm.KUBE_POD_OWNER}
CURRENT_FLEET = {m.GPU_UTIL_RATIO, m.PROF_GR_ENGINE_UTIL_RATIO, m.FB_USED_BYTES, m.FB_FREE_BYTES}


def test_the_unit_comes_from_the_name() -> None:
    for read in vocabulary.READ:
        if read.name.endswith("_RATIO"):
            assert read.to_unit == RATIO_TO_PERCENT, read.name
        if read.name.endswith("_BYTES") or read.name.endswith("_bytes"):
            assert read.to_unit == BYTES_TO_MIB, read.name
        if read.name.endswith("_percent"):
            assert read.to_unit == PERCENT_TO_PERCENT, read.name
    # Only the legacy device gauge has its unit told by its values (relabelling may have made it 0-1).
    assert [r.name for r in vocabulary.READ if vocabulary.by_values(r.name)] == [m.GPU_UTIL]


def test_both_names_of_a_field_are_read_for_the_same_use_in_agreeing_units() -> None:
    """Every rename among the names read: both names read, and a legacy value times the rename's
    factor, in the new unit, reads as the same percent or MiB."""
    read = vocabulary.BY_NAME
    renamed = [r for r in m.DCGM_4_7 if r.legacy in read or r.current in read]
    assert {r.legacy for r in renamed} == {
        m.GPU_UTIL,
        m.PROF_GR_ENGINE_ACTIVE,
        m.FB_USED,
        m.FB_FREE,
        m.POWER_USAGE,
        m.ENFORCED_POWER_LIMIT,
        m.POWER_MGMT_LIMIT,
    }
    for r in renamed:
        assert r.legacy in read and r.current in read, r
        assert read[r.legacy].use is read[r.current].use
        assert read[r.legacy].served_by is read[r.current].served_by
        legacy_unit = read[r.legacy].to_unit or PERCENT_TO_PERCENT  # the legacy gauge is percent as served
        assert legacy_unit == pytest.approx(r.to_current * (read[r.current].to_unit or 0.0)), r
        assert vocabulary.field_of(r.current) == vocabulary.field_of(r.legacy) == r.legacy


def test_power_limits_and_reasons_are_read_on_demand_never_discovered() -> None:
    """Power, its limit and the clock-event reasons are read for stalled-job candidates only, by
    name: discovery (and so every query of a fleet without stalled jobs) is as before."""
    on_demand = {*vocabulary.POWER, *vocabulary.POWER_LIMIT, *vocabulary.CLOCK_EVENTS}
    assert on_demand.isdisjoint(vocabulary.ALL_NAMES)
    assert vocabulary.POWER == (m.POWER_USAGE, m.BOARD_POWER_WATTS)
    assert vocabulary.POWER_LIMIT[:2] == (m.ENFORCED_POWER_LIMIT, m.BOARD_POWER_LIMIT_ENFORCED_WATTS)
    assert vocabulary.CLOCK_EVENTS == (m.CLOCK_THROTTLE_REASONS, m.CLOCKS_EVENT_REASONS)


def test_preference_is_by_field_and_a_field_is_one_signal() -> None:
    found = (m.GPU_UTIL, m.PROF_GR_ENGINE_UTIL_RATIO, m.GPU_UTIL_RATIO, m.PROF_GR_ENGINE_ACTIVE)
    util = vocabulary.present(Use.UTILIZATION, found)
    assert util == (m.PROF_GR_ENGINE_ACTIVE, m.PROF_GR_ENGINE_UTIL_RATIO, m.GPU_UTIL, m.GPU_UTIL_RATIO)
    assert vocabulary.fields(util) == (
        (m.PROF_GR_ENGINE_ACTIVE, m.PROF_GR_ENGINE_UTIL_RATIO),
        (m.GPU_UTIL, m.GPU_UTIL_RATIO),
    )
    assert dcgm.UTIL_METRICS[0] == m.POD_SM_UTILIZATION  # a shared GPU's pods first, whatever the naming


@pytest.mark.parametrize(
    ("present", "naming", "util", "memory"),
    [
        pytest.param(
            LEGACY_FLEET, "legacy", (m.PROF_GR_ENGINE_ACTIVE, m.GPU_UTIL), (m.FB_USED,), id="legacy"
        ),
        pytest.param(
            CURRENT_FLEET,
            "DCGM 4.7",
            (m.PROF_GR_ENGINE_UTIL_RATIO, m.GPU_UTIL_RATIO),
            (m.FB_USED_BYTES,),
            id="dcgm-4.7",
        ),
        pytest.param(
            LEGACY_FLEET | CURRENT_FLEET,
            "legacy and DCGM 4.7",
            (m.PROF_GR_ENGINE_ACTIVE, m.PROF_GR_ENGINE_UTIL_RATIO, m.GPU_UTIL, m.GPU_UTIL_RATIO),
            (m.FB_USED, m.FB_USED_BYTES),
            id="both",
        ),
    ],
)
def test_discovery_finds_the_naming_and_says_so(
    present: set[str], naming: str, util: tuple[str, ...], memory: tuple[str, ...]
) -> None:
    found = vocabulary.present(Use.UTILIZATION, present)
    caps = Capabilities.discovered(present, found, {"UUID", "Hostname", "hostname"}, set(), ())
    assert caps.util_metrics == util
    assert caps.memory_used == memory and caps.memory
    assert f"DCGM names {naming};" in caps.describe()
    assert "node label Hostname and hostname;" in caps.describe()
    for name in util:
        want = RATIO_TO_PERCENT if name != m.GPU_UTIL else PERCENT_TO_PERCENT
        assert caps.to_percent(name, "dcgm-exporter") == want


def test_the_legacy_gauge_alone_keeps_its_unit_per_job() -> None:
    caps = Capabilities(
        util_metrics=(m.GPU_UTIL, m.GPU_UTIL_RATIO),
        host_labels=("Hostname",),
        gpu_pod=dcgm.PodLabels(),
        dev_to_percent={"relabelled": RATIO_TO_PERCENT},
    )
    assert caps.to_percent(m.GPU_UTIL, "relabelled") == RATIO_TO_PERCENT
    assert caps.to_percent(m.GPU_UTIL, "dcgm-exporter") == PERCENT_TO_PERCENT
    # A name whose unit is in it never takes a job's guess.
    assert caps.to_percent(m.GPU_UTIL_RATIO, "relabelled") == RATIO_TO_PERCENT
    assert caps.signals() == ((m.GPU_UTIL, m.GPU_UTIL_RATIO),)


def test_a_legacy_fleet_asks_the_memory_queries_it_asked_before() -> None:
    """Absent names cost nothing: one naming, the legacy text; both, each name in MiB."""
    legacy = Capabilities(util_metrics=(m.GPU_UTIL,), host_labels=("Hostname",), gpu_pod=dcgm.PodLabels())
    q = FleetQueries(legacy, timedelta(hours=6))
    assert q.memory(["GPU-1"]) == (
        'max by (UUID, namespace, pod) (avg_over_time(DCGM_FI_DEV_FB_USED{UUID=~"GPU-1"}[21600s]))'
    )
    assert q.memory_capacity(["GPU-1"]) == (
        'max by (UUID, namespace, pod) (last_over_time(DCGM_FI_DEV_FB_USED{UUID=~"GPU-1"}[21600s])'
        ' + last_over_time(DCGM_FI_DEV_FB_FREE{UUID=~"GPU-1"}[21600s]))'
    )
    both = FleetQueries(
        Capabilities(
            util_metrics=(m.GPU_UTIL, m.GPU_UTIL_RATIO),
            host_labels=("Hostname", "hostname"),
            gpu_pod=dcgm.PodLabels(),
            memory_used=(m.FB_USED, m.FB_USED_BYTES),
        ),
        timedelta(hours=6),
    )
    capacity = both.memory_capacity(["GPU-1"])
    assert "(last_over_time(DCGM_FI_DEV_FB_USED_BYTES" in capacity
    assert "+ last_over_time(DCGM_FI_DEV_FB_FREE_BYTES" in capacity and ") / 1048576.0" in capacity
    assert "DCGM_FI_DEV_FB_USED_BYTES" in both.memory(["GPU-1"], timedelta(minutes=1))
