"""Board power limits by GPU model: what a board may draw when nothing caps it lower.

Read only where the exporter serves no limit of its own (``DCGM_FI_DEV_ENFORCED_POWER_LIMIT``,
``DCGM_FI_DEV_POWER_MGMT_LIMIT`` or their DCGM 4.7 names), so an operator's lower cap is unknown
here: a board capped below its datasheet figure reads as drawing less of its limit than it does.
The stalled-job rule then also asks the clock-event reasons (a capped board says so).

Figures are NVIDIA's datasheets' maximum thermal design power (TDP/TBP) for each form factor:
H100 and H200 datasheets (SXM 700 W, PCIe 350 W, NVL 400 W; H200 NVL 600 W), A100 datasheet
(SXM4 400 W, PCIe 80GB 300 W, PCIe 40GB 250 W), A10 150 W, A30 165 W, L4 72 W, L40 300 W,
L40S 350 W, T4 70 W, V100 SXM2 300 W / PCIe 250 W, B200 1000 W. Boards whose datasheet gives
no single board figure (GH200's module shares its budget with the CPU; AWS's A10G is not NVIDIA's
A10) are listed as unknown: their limit must come from the exporter. Matched on dcgm-exporter's
``modelName`` label (NVML's device name), most specific pattern first.
"""

from __future__ import annotations

from typing import Final

# (substring of the upper-cased model name, watts), first match wins: forms before the family.
_LIMITS: Final[tuple[tuple[str, float | None], ...]] = (
    ("GH200", None),
    ("H200 NVL", 600.0),
    ("H200", 700.0),
    ("H100 NVL", 400.0),
    ("H100 PCIE", 350.0),
    ("H100 80GB HBM3", 700.0),  # the SXM5 board's NVML name
    ("H100 SXM", 700.0),
    ("B200", 1000.0),
    ("A100-SXM", 400.0),
    ("A100 SXM", 400.0),
    ("A100-PCIE-40GB", 250.0),
    ("A100-PCIE", 300.0),
    ("A100 80GB PCIE", 300.0),
    ("A100 PCIE", 250.0),
    ("A30", 165.0),
    ("A10G", None),
    ("A10", 150.0),
    ("L40S", 350.0),
    ("L40", 300.0),
    ("L4", 72.0),
    ("T4", 70.0),
    ("V100-SXM2", 300.0),
    ("V100-PCIE", 250.0),
)


def datasheet_limit(model: str | None) -> float | None:
    """The board's datasheet power limit in watts (None: a model not in the table, or no model)."""
    if not model:
        return None
    name = model.upper()
    return next((watts for pattern, watts in _LIMITS if pattern in name), None)
