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
    assert set(fields.SPECS) <= _contract()


def test_the_analyzer_reads_names_the_exporter_serves() -> None:
    served = set(fields.SPECS) | {metric_names.UTILIZATION_SAMPLES_BUCKET}
    assert {dcgm.PROF_GR_ENGINE_ACTIVE, dcgm.DEV_GPU_UTIL, dcgm.DEV_FB_USED} <= served
    assert dcgm.SAMPLE_HISTOGRAM_BUCKET in served


def test_the_simulators_independent_copy_agrees_with_the_contract() -> None:
    assert simulator.UTIL_BUCKETS == metric_names.SAMPLE_BUCKETS
    written = set(re.findall(r'"((?:DCGM_FI_|gpu_)[A-Za-z_]+)"', inspect.getsource(simulator)))
    histogram = {metric_names.UTILIZATION_SAMPLES + s for s in ("_bucket", "_count", "_sum")}
    assert written, "the simulator writes DCGM and exporter series"
    unknown = written - _contract() - histogram - {"DCGM_FI_DRIVER_VERSION"}  # a label, not a family
    assert not unknown, f"simulator names missing from the contract: {sorted(unknown)}"


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
    assert [e.__name__ for e in found if not issubclass(e, GpuToolError)] == []
