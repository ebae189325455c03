"""Contracts the exporter keeps with the rest: metric names the analyzer reads and the simulator agrees
with, and one error root."""

from __future__ import annotations

import inspect
import re

from analyzer.sources import dcgm
from common import metric_names
from exporter import fields
from simulation.fleet import simulator


def _contract() -> set[str]:
    return {v for k, v in vars(metric_names).items() if k.isupper() and isinstance(v, str)}


def test_every_served_family_is_in_the_contract() -> None:
    missing = sorted(set(fields.SPECS) - _contract())
    assert not missing, (
        f"exporter/fields.py serves {missing}, which common/metric_names.py does not name: add a constant "
        "there (the one spelling the analyzer, dashboards and alerts import), and, for a DCGM field "
        "renamed by DCGM 4.7, its entry in DCGM_4_7"
    )


def test_the_analyzer_reads_names_the_exporter_serves() -> None:
    served = set(fields.SPECS) | {metric_names.UTILIZATION_SAMPLES_BUCKET}
    read = {dcgm.PROF_GR_ENGINE_ACTIVE, dcgm.DEV_GPU_UTIL, dcgm.DEV_FB_USED, dcgm.SAMPLE_HISTOGRAM_BUCKET}
    assert read <= served, (
        f"the analyzer reads {sorted(read - served)}, which exporter/fields.py no longer serves: serve "
        "it again, or change what the analyzer reads (analyzer/sources/vocabulary.py) and its tests"
    )


def test_the_simulators_independent_copy_agrees_with_the_contract() -> None:
    assert simulator.UTIL_BUCKETS == metric_names.SAMPLE_BUCKETS, (
        "the histogram buckets of simulation/fleet/simulator.py (UTIL_BUCKETS) and "
        "common/metric_names.py (SAMPLE_BUCKETS, what the exporter serves) differ: change both together"
    )
    written = set(re.findall(r'"((?:DCGM_FI_|gpu_)[A-Za-z_]+)"', inspect.getsource(simulator)))
    histogram = {metric_names.UTILIZATION_SAMPLES + s for s in ("_bucket", "_count", "_sum")}
    assert written, "the simulator writes DCGM and exporter series"
    unknown = written - _contract() - histogram - {"DCGM_FI_DRIVER_VERSION"}  # a label, not a family
    assert not unknown, (
        f"simulation/fleet/simulator.py writes {sorted(unknown)}, which common/metric_names.py does not "
        "name: the simulator keeps its own copy of the names on purpose (to catch a typo in either), so "
        "a series it writes must be one the table names. Fix the simulator's spelling, or add the name "
        "to common/metric_names.py where a real exporter serves it"
    )


def test_every_exporter_error_derives_from_the_projects_one_root() -> None:
    import importlib
    import pkgutil

    import exporter
    from common.errors import GpuToolError

    found = []
    for module_info in pkgutil.iter_modules(exporter.__path__, "exporter."):
        if module_info.name.startswith("exporter._proto") or module_info.name == "exporter.__main__":
            continue
        module = importlib.import_module(module_info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, Exception)
                and value.__module__ == module.__name__
            ):
                found.append(value)
    assert found, "the exporter defines its own errors"
    stray = [e.__name__ for e in found if not issubclass(e, GpuToolError)]
    assert stray == [], (
        f"{stray}: derive them from common.errors.GpuToolError, the base of every error the project "
        "raises on purpose (it carries the exit code)"
    )
