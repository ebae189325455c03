"""Which metric families each GPU can have, said where an operator looks.

A family NVML does not offer on a GPU is left out, never NaN — so an A100's profiling panels are
simply empty. To tell "not offered here" from "broken", the exporter serves
``gpu_exporter_capability{capability}`` (1 available, 0 not) per GPU and logs, at start and whenever
it changes, one line per GPU model naming the families it lacks and why.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Final, NamedTuple

GPM: Final = "gpm"
MIG: Final = "mig"
PROCESS_UTILIZATION: Final = "process_utilization"
SAMPLES: Final = "samples"
NVLINK: Final = "nvlink"
ECC: Final = "ecc"

#: Each capability: what it brings, and what its absence usually means (docs/exporter.md, "Metrics").
MEANING: Final[dict[str, tuple[str, str]]] = {
    GPM: (
        "DCGM_FI_PROF_* from NVML GPM",
        "GPM needs Hopper or newer (nvmlGpmQueryDeviceSupport); on A100/V100 run dcgm-exporter for the"
        " DCGM_FI_PROF_* family beside this exporter (docs/install.md)",
    ),
    MIG: ("per-MIG-instance series", "MIG mode is off or not offered: whole-GPU series only"),
    PROCESS_UTILIZATION: (
        "per-pod shares of a shared GPU (gpu_pod_sm_utilization_percent)",
        "nvmlDeviceGetProcessUtilization is not offered (never in MIG mode)",
    ),
    SAMPLES: (
        "the sub-second histogram gpu_utilization_samples_percent",
        "nvmlDeviceGetSamples is not offered (never in MIG mode)",
    ),
    NVLINK: ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "no NVLink on this GPU"),
    ECC: ("DCGM_FI_DEV_ECC_* counters", "ECC is off or absent on this GPU"),
}
NAMES: Final = tuple(MEANING)


class Capability(NamedTuple):
    """Whether NVML offers a family on a GPU; ``code`` is NVML's answer when it does not (e.g.
    ``NOT_SUPPORTED``, ``NO_PERMISSION``), empty when there was no error to name."""

    available: bool
    code: str = ""


Capabilities = Mapping[str, Capability]


def _indices(indices: Iterable[int]) -> str:
    """``0-3, 6`` for GPUs 0, 1, 2, 3 and 6."""
    runs: list[list[int]] = []
    for index in sorted(indices):
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def _missing(capabilities: Capabilities) -> tuple[tuple[str, str], ...]:
    """The families a GPU lacks, as (capability, NVML code). MIG mode off is no loss (the whole GPU's
    series stand in), so it is not listed; the line says when MIG mode is on instead."""
    found = (capabilities.get(name) for name in NAMES)
    return tuple(
        (name, c.code) for name, c in zip(NAMES, found, strict=True) if c and not c.available and name != MIG
    )


def summary(gpus: Iterable[tuple[int, str, Capabilities]]) -> list[str]:
    """One line per GPU model and set of missing families, from (index, model, capabilities)."""
    groups: dict[tuple[str, bool, tuple[tuple[str, str], ...]], list[int]] = {}
    for index, model, capabilities in gpus:
        mig = capabilities.get(MIG, Capability(False)).available
        groups.setdefault((model, mig, _missing(capabilities)), []).append(index)
    lines = []
    for (model, mig, missing), indices in sorted(groups.items(), key=lambda item: min(item[1])):
        plural = "s" if len(indices) > 1 else ""
        mode = ", MIG mode" if mig else ""
        where = f"GPU{plural} {_indices(indices)} ({model or 'unknown model'}{mode})"
        if not missing:
            lines.append(f"{where}: every metric family available")
            continue
        parts = []
        for name, code in missing:
            answer = f"NVML: {code}; " if code else ""
            parts.append(f"{name} [{MEANING[name][0]}] ({answer}{MEANING[name][1]})")
        lines.append(f"{where}: unavailable: " + "; ".join(parts))
    return lines


class CapabilityLog:
    """Logs :func:`summary` at start and again only when it changes (a GPU lost, MIG turned on)."""

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger
        self._last: list[str] | None = None

    def update(self, gpus: Iterable[tuple[int, str, Capabilities]]) -> None:
        lines = summary(gpus)
        if lines and lines != self._last:
            for line in lines:
                self._log.info("%s", line)
            self._last = lines
