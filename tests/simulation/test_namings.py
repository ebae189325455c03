"""The simulator writes DCGM 4.7's naming, and a node-by-node upgrade to it, as dcgm-exporter 4.9 would."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from common import metric_names
from simulation.fleet import Fleet, ScenarioError, load_scenario, simulate, with_naming
from simulation.fleet.naming import LABEL_RENAMES, RENAMES
from simulation.fleet.scenario import NamingUpgrade, NodeSpec


def _values(fleet: Fleet, name: str, uuid: str) -> tuple[np.ndarray, np.ndarray]:
    parts = [s for s in fleet.series if s.name == name and s.label("UUID") == uuid]
    t = np.concatenate([s.timestamps for s in parts]) if parts else np.empty(0)
    v = np.concatenate([s.values for s in parts]) if parts else np.empty(0)
    order = np.argsort(t)
    return t[order], v[order]


def test_the_simulators_own_renames_agree_with_the_contract() -> None:
    """The oracle keeps its own copy of the names: it must say what common.metric_names says."""
    for legacy, (current, multiplier) in RENAMES.items():
        assert metric_names.BY_LEGACY[legacy].current == current
        assert metric_names.BY_LEGACY[legacy].to_current == pytest.approx(multiplier)
    assert LABEL_RENAMES == {
        metric_names.HOSTNAME_LEGACY: metric_names.HOSTNAME,
        metric_names.DRIVER_VERSION_LABEL: metric_names.DRIVER_VERSION_LABEL_4_7,
    }


def test_dcgm_4_7_names_units_and_labels() -> None:
    standard = load_scenario("standard")
    legacy, current = simulate(standard), simulate(with_naming(standard, "dcgm-4.7"))
    names = {s.name for s in current.series}
    assert not names & set(RENAMES), "no legacy name left"
    uuid = next(s.label("UUID") for s in legacy.series if s.name == "DCGM_FI_DEV_GPU_UTIL" and s.label("pod"))
    for old, (new, multiplier) in RENAMES.items():
        t_old, v_old = _values(legacy, old, uuid)
        t_new, v_new = _values(current, new, uuid)
        if t_old.size:  # percent → ratio, MiB → bytes, MHz → Hz, mJ → J
            assert np.array_equal(t_old, t_new), old
            assert np.allclose(v_new, v_old * multiplier), old
    series = next(s for s in current.series if s.name == "DCGM_FI_DEV_GPU_UTIL_RATIO")
    labels = dict(series.labels)
    assert "Hostname" not in labels and labels["hostname"].startswith("gpu-")
    assert labels["DCGM_FI_SYSTEM_DRIVER_VERSION"] == standard.driver_version
    assert "DCGM_FI_DRIVER_VERSION" not in labels
    # Kubernetes' and our exporter's own series keep their names and counts.
    for ours in ("kube_pod_owner", "gpu_utilization_samples_percent_bucket"):
        assert sum(s.values.size for s in current.series if s.name == ours) == sum(
            s.values.size for s in legacy.series if s.name == ours
        )


def test_a_relabelled_0_1_gauge_becomes_the_same_ratio() -> None:
    """A legacy fleet whose scrape made GPU_UTIL 0-1 upgrades to the ratio, not a hundredth of it."""
    scenario = load_scenario("standard").model_copy(update={"gpu_util_unit": "ratio"})
    a, b = (
        simulate(with_naming(scenario, "dcgm-4.7")),
        simulate(with_naming(load_scenario("standard"), "dcgm-4.7")),
    )
    name = metric_names.GPU_UTIL_RATIO
    assert sum(s.values.sum() for s in a.series if s.name == name) == pytest.approx(
        sum(s.values.sum() for s in b.series if s.name == name)
    )


@pytest.mark.parametrize("overlap", [0, 1, 2])
def test_an_upgrade_switches_names_at_its_time_with_its_overlap(overlap: int) -> None:
    standard = load_scenario("standard")
    upgraded = simulate(with_naming(standard, "upgrade", at=timedelta(hours=-3), overlap=overlap))
    legacy = simulate(standard)
    switch = standard.at(timedelta(hours=-3)).timestamp()
    step = standard.step.total_seconds()
    uuid = next(s.label("UUID") for s in legacy.series if s.name == "DCGM_FI_DEV_GPU_UTIL")
    t_all, v_all = _values(legacy, "DCGM_FI_DEV_GPU_UTIL", uuid)
    t_old, v_old = _values(upgraded, "DCGM_FI_DEV_GPU_UTIL", uuid)
    t_new, v_new = _values(upgraded, "DCGM_FI_DEV_GPU_UTIL_RATIO", uuid)
    assert t_old.max() == switch + overlap * step
    assert t_new.min() == switch + step
    assert np.intersect1d(t_old, t_new).size == overlap
    # One history: every sample once in one naming or the other, the same reading in either unit.
    assert np.array_equal(np.union1d(t_old, t_new), t_all)
    assert np.allclose(v_new * 100.0, v_all[t_all > switch])
    assert np.array_equal(v_old, v_all[t_all <= switch + overlap * step])


def test_mixed_and_staggered_forms() -> None:
    standard = load_scenario("standard")
    mixed = with_naming(standard, "mixed")
    assert [n.metric_names for n in mixed.nodes] == ["legacy", "dcgm-4.7"] * (len(standard.nodes) // 2) + [
        "legacy"
    ] * (len(standard.nodes) % 2)
    staggered = with_naming(standard, "upgrade", at=timedelta(hours=-4), stagger=timedelta(minutes=5))
    ats = [n.upgrade.at for n in staggered.nodes if n.upgrade is not None]
    assert ats == [timedelta(hours=-4) + timedelta(minutes=5) * i for i in range(len(standard.nodes))]
    middle = with_naming(standard, "upgrade").nodes[0].upgrade
    assert middle is not None and middle.at == -standard.analysis_window / 2
    back = with_naming(staggered, "legacy")
    assert all(n.metric_names == "legacy" and n.upgrade is None for n in back.nodes)


def test_an_upgrade_to_the_legacy_naming_is_refused() -> None:
    with pytest.raises(ValueError, match=r"upgrades to metric_names: dcgm-4\.7"):
        NodeSpec(name="gpu-a", gpus=1, upgrade=NamingUpgrade(at=timedelta(hours=-1)))
    with pytest.raises(ValueError, match="naming must be"):
        with_naming(load_scenario("standard"), "dcgm-5")  # type: ignore[arg-type]
    assert issubclass(ScenarioError, ValueError)
