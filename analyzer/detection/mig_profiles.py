"""MIG profiles of the GPUs that offer them: compute slices and memory, per NVIDIA's MIG user guide.

Source: NVIDIA Multi-Instance GPU User Guide, "Supported GPUs" and "Supported MIG Profiles"
(docs.nvidia.com/datacenter/tesla/mig-user-guide). Each GPU splits into ``slices`` compute slices
(7, or 4 on the A30 and the RTX PRO 6000 Blackwell); a profile ``<k>g.<n>gb`` has ``k`` of them and
about ``n`` GB of memory. Only the profiles a pod can be given whole are listed (no ``+me`` media
variants, no compute instances inside a GPU instance).

A profile's memory is taken as its name's GB in decimal units (``10gb``: 9,537 MiB), never more
than its fraction of the whole GPU: a floor of what ``nvidia-smi mig -lgip`` reports, so a
recommendation never counts on memory the instance lacks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_MIB_PER_GB = 1e9 / 2**20


@dataclass(frozen=True)
class MigProfile:
    name: str  # ``1g.10gb``
    slices: int  # compute slices
    memory_eighths: int  # of the GPU's memory, in eighths (the guide's "fraction of memory")
    memory_mib: float  # what the instance holds, at most (see the module's docstring)

    @property
    def resource(self) -> str:
        """The extended resource the NVIDIA device plugin advertises for it (``mixed`` strategy)."""
        return f"nvidia.com/mig-{self.name}"


@dataclass(frozen=True)
class MigGpu:
    family: str  # what this table calls it: ``H100 80GB``
    memory_mib: float  # the whole GPU's memory as nvidia-smi reports it
    slices: int
    profiles: tuple[MigProfile, ...]  # smallest first

    def share(self, profile: MigProfile) -> float:
        """The fraction of this GPU a profile is (its compute slices over the GPU's)."""
        return profile.slices / self.slices


def _gpu(family: str, memory_mib: float, slices: int, *profiles: tuple[str, int]) -> MigGpu:
    built = []
    for name, eighths in profiles:
        nominal = float(name.split(".")[1].removesuffix("gb")) * _MIB_PER_GB
        built.append(
            MigProfile(name, int(name.split("g.")[0]), eighths, min(nominal, memory_mib * eighths / 8))
        )
    return MigGpu(family, memory_mib, slices, tuple(built))


# Memory sizes of whole GPUs: nvidia-smi's "FB Memory Usage / Total" for each product.
MIG_GPUS: tuple[MigGpu, ...] = (
    _gpu("A30", 24576, 4, ("1g.6gb", 2), ("2g.12gb", 4), ("4g.24gb", 8)),
    _gpu(
        "A100 40GB",
        40960,
        7,
        ("1g.5gb", 1),
        ("1g.10gb", 2),
        ("2g.10gb", 2),
        ("3g.20gb", 4),
        ("4g.20gb", 4),
        ("7g.40gb", 8),
    ),
    _gpu(
        "A100 80GB",
        81920,
        7,
        ("1g.10gb", 1),
        ("1g.20gb", 2),
        ("2g.20gb", 2),
        ("3g.40gb", 4),
        ("4g.40gb", 4),
        ("7g.80gb", 8),
    ),
    _gpu(
        "H100 80GB",
        81559,
        7,
        ("1g.10gb", 1),
        ("1g.20gb", 2),
        ("2g.20gb", 2),
        ("3g.40gb", 4),
        ("4g.40gb", 4),
        ("7g.80gb", 8),
    ),
    _gpu(
        "H100 94GB",
        95830,
        7,
        ("1g.12gb", 1),
        ("1g.24gb", 2),
        ("2g.24gb", 2),
        ("3g.47gb", 4),
        ("4g.47gb", 4),
        ("7g.94gb", 8),
    ),
    _gpu(
        "H100 96GB",
        97871,
        7,
        ("1g.12gb", 1),
        ("1g.24gb", 2),
        ("2g.24gb", 2),
        ("3g.48gb", 4),
        ("4g.48gb", 4),
        ("7g.96gb", 8),
    ),
    _gpu(
        "H200 141GB",
        143771,
        7,
        ("1g.18gb", 1),
        ("1g.35gb", 2),
        ("2g.35gb", 2),
        ("3g.71gb", 4),
        ("4g.71gb", 4),
        ("7g.141gb", 8),
    ),
    _gpu(
        "B200 180GB",
        183359,
        7,
        ("1g.23gb", 1),
        ("1g.45gb", 2),
        ("2g.45gb", 2),
        ("3g.90gb", 4),
        ("4g.90gb", 4),
        ("7g.180gb", 8),
    ),
    _gpu("RTX PRO 6000 Blackwell 96GB", 97887, 4, ("1g.24gb", 2), ("2g.48gb", 4), ("4g.96gb", 8)),
)
_BY_FAMILY = {g.family: g for g in MIG_GPUS}

# The model names NVML reports (dcgm-exporter's modelName label), to this table's families. Where a
# name does not say its memory (``NVIDIA H100 PCIe``), the GPU's memory decides.
_FAMILIES: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = (
    (re.compile(r"\bA30\b", re.I), ("A30",)),
    (re.compile(r"\bA100\b", re.I), ("A100 40GB", "A100 80GB")),
    (re.compile(r"\bH100\b.*\bNVL\b", re.I), ("H100 94GB",)),
    (re.compile(r"\bGH200\b.*\b14[14]G", re.I), ("H200 141GB",)),
    (re.compile(r"\b(GH200|H20)\b", re.I), ("H100 96GB",)),
    (re.compile(r"\bH100\b", re.I), ("H100 80GB", "H100 94GB")),
    (re.compile(r"\bH200\b", re.I), ("H200 141GB",)),
    (re.compile(r"\bB200\b", re.I), ("B200 180GB",)),
    (re.compile(r"\bRTX PRO 6000\b.*\bBlackwell\b", re.I), ("RTX PRO 6000 Blackwell 96GB",)),
)
_NAMED_MEMORY = re.compile(r"(\d+)\s*GB", re.I)


def mig_gpu(model: str | None, memory_mib: float | None = None) -> MigGpu | None:
    """The MIG table of a GPU model, or None: not MIG-capable, or a model this table does not know.

    Of several sizes of one model, the one the name states (``A100-SXM4-40GB``), else the one closest
    to ``memory_mib``; with neither, the smallest (its profiles hold the least: a safe guess)."""
    if not model:
        return None
    for pattern, families in _FAMILIES:
        if not pattern.search(model):
            continue
        candidates = [_BY_FAMILY[f] for f in families]
        if len(candidates) == 1:
            return candidates[0]
        named = _NAMED_MEMORY.search(model)
        if named is not None:
            for gpu in candidates:
                if gpu.family.endswith(f"{named.group(1)}GB"):
                    return gpu
        if memory_mib is not None:
            return min(candidates, key=lambda g: abs(g.memory_mib - memory_mib))
        return candidates[0]
    return None


def named_memory_mib(model: str | None) -> float | None:
    """The memory a model's name states (``Tesla V100-SXM2-32GB``: 32 GB in decimal units, in MiB, a
    little under what the card reports), or None."""
    match = _NAMED_MEMORY.search(model or "")
    return None if match is None else float(match.group(1)) * _MIB_PER_GB


def profile_named(gpu: MigGpu, name: str | None) -> MigProfile | None:
    """The profile a MIG instance's ``GPU_I_PROFILE`` label names (``1g.10gb``, ``MIG 1g.10gb``)."""
    if not name:
        return None
    wanted = name.strip().removeprefix("MIG ").split("+")[0]
    return next((p for p in gpu.profiles if p.name == wanted), None)
