"""What an XID number means: the ``err_msg`` label of ``DCGM_FI_DEV_XID_ERRORS`` (``_XID_ERROR``).

dcgm-exporter (3.3.6 and later) labels that series with ``err_code``, the XID as a decimal string, and
``err_msg``, a description from its table of NVIDIA's XID catalogue (``internal/pkg/collector/
xid_errors.go``, worded after NVIDIA's "XID errors" document for driver 580); a number outside the
table (below 0, above 172) gets ``Unknown Error``. The texts below are those label values, word for
word, so a switch between the two exporters keeps every series, panel and alert that names one.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

#: ``err_msg`` for an XID this table does not describe (dcgm-exporter's text for the same case).
UNKNOWN: Final = "Unknown Error"

_PUSH_BUFFER = "Invalid or corrupted push buffer stream"
_UNUSED = "Unused"
_STOPPED = "GPU stopped processing"
_DISPLAY = "Display Engine error"
_VIDEO = "Video processor exception"
_MICROCONTROLLER = "Internal micro-controller error"
_FIRMWARE = "Driver firmware error"
_MICROCONTROLLER_HALT = "Internal micro-controller halt"
_ILLEGAL_ACCESS = "Illegal access by driver"
_RESERVED = "Reserved"


def _numbered(first_xid: int, text: str, first_unit: int, count: int) -> dict[int, str]:
    """XIDs numbered in a row for units of one kind: ``_numbered(83, "NVDEC{} Error", 1, 2)`` is XID 83
    for NVDEC1 and XID 84 for NVDEC2."""
    return {first_xid + k: text.format(first_unit + k) for k in range(count)}


_DESCRIPTIONS: dict[int, str] = {
    0: "No Error",
    **dict.fromkeys((1, 2, 3, 4, 6, 11, 32), _PUSH_BUFFER),
    **dict.fromkeys((5, 10, 14, 15, 17, 23, 39, 40, 41, 49, 50, 51, 52, 53, 55), _UNUSED),
    7: "Invalid or corrupted push buffer address",
    **dict.fromkeys((8, 43, 46), _STOPPED),
    9: "Driver error programming GPU",
    12: "Driver error handling GPU exception",
    13: "Graphics Engine Exception",
    16: "Display engine hung",
    18: "Bus mastering disabled in PCI Config Space",
    **dict.fromkeys((19, 56), _DISPLAY),
    20: "Invalid or corrupted Mpeg push buffer",
    21: "Invalid or corrupted Motion Estimation push buffer",
    22: "Invalid or corrupted Video Processor push buffer",
    24: "GPU semaphore timeout",
    25: "Invalid or illegal push buffer stream",
    26: "Framebuffer timeout",
    **dict.fromkeys((27, 28, 29, 34, 35, 36, 42, 47, 60, 65), _VIDEO),
    30: "GPU semaphore access error",
    31: "GPU memory page fault",
    **dict.fromkeys((33, 59), _MICROCONTROLLER),
    **dict.fromkeys((37, 38), _FIRMWARE),
    44: "Graphics Engine fault during context switch",
    45: "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda",
    48: "Double Bit ECC Error",
    54: "Auxiliary power is not connected to the GPU board",
    57: "Error programming video memory interface",
    58: "Unstable video memory interface detected",
    61: "Internal micro-controller breakpoint/warning",
    **dict.fromkeys((62, 169), _MICROCONTROLLER_HALT),
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    **dict.fromkeys((66, 67), _ILLEGAL_ACCESS),
    68: "NVDEC0 Exception",
    69: "Graphics Engine class error",
    **_numbered(70, "CE{}: Unknown Error", 3, 3),
    73: "NVENC2 Error",
    74: "NVLINK Error",
    **_numbered(75, "CE{}: Unknown Error", 6, 3),
    78: "vGPU Start Error",
    79: "GPU has fallen off the bus",
    80: "Corrupted data sent to GPU",
    81: "VGA Subsystem Error",
    82: "NVJPG0 Error",
    **_numbered(83, "NVDEC{} Error", 1, 2),
    85: "CE9: Unknown Error",
    86: "OFA Exception",
    **dict.fromkeys((87, 90, 91, 108), _RESERVED),
    **_numbered(88, "NVDEC{} Error", 3, 2),
    92: "High single-bit ECC error rate",
    93: "Non-fatal violation of provisioned InfoROM wear limit",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    **_numbered(96, "NVDEC{} Error", 5, 3),
    **_numbered(99, "NVJPG{} Error", 1, 7),
    106: "SMBPBI Test Message",
    107: "SMBPBI Test Message Silent",
    109: "Context Switch Timeout Error",
    110: "Security Fault Error",
    111: "Display Bundle Error Event",
    112: "Display Supervisor Error",
    113: "DP Link Training Error",
    114: "Display Pipeline Underflow Error",
    115: "Display Core Channel Error",
    116: "Display Window Channel Error",
    117: "Display Cursor Channel Error",
    118: "Display Pixel Pipeline Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    121: "C2C Link Error",
    122: "SPI PMU RPC Read Failure",
    123: "SPI PMU RPC Write Failure",
    124: "SPI PMU RPC Erase Failure",
    125: "Inforom FS Failure",
    **_numbered(126, "Robust Channel CE{} Error", 10, 10),
    136: "ALI Training Fail",
    137: "NVLink Privilege Error",
    138: "Robust Channel DLA Error",
    139: "Robust Channel OFA1 Error",
    140: "Unrecovered ECC Error",
    141: "Robust Channel Fast Path Error",
    142: "Robust Channel NVENVC3 Error",
    143: "GPU Initialization Failure",
    144: "NVLINK: Saw Error",
    145: "NVLINK: RLW Error",
    146: "NVLINK: TLW Error",
    147: "NVLINK: TREX Error",
    148: "NVLINK: NVLPW_CTRL Error",
    149: "NVLINK: NETIR Error",
    150: "NVLINK: MSE Error",
    151: "Robust Channel Key rotation Error",
    152: "Robust Channel DLA SMMU Error",
    153: "Robust Channel DLA timeout Error",
    154: "GPU Recovery Action Changed",
    155: "NVLINK: SW Defined Error",
    156: "Resource Retirement Event",
    157: "Resource Retirement Failure",
    158: "GPU Fatal Timeout",
    159: "Robust Channel CHI Non-Data Error",
    160: "Channel Retirement Event",
    161: "Channel Retirement Failure",
    162: "Power Smoothing HW Circuitry Reengaged",
    163: "Power Smoothing HW Circuitry Disengaged",
    164: "Power Smoothing HW Circuitry Low Lifetime",
    165: "Power Smoothing HW Circuitry Lifetime Exhausted",
    166: "NVLINK Secure Crypto Error",
    167: "PCIE Fatal Timeout",
    168: "Reduced GPU Memory Capacity (Errors found in write protection region)",
    170: "NVLINK: Interrupt seen in CC mode",
    171: "Uncorrectable DRAM Error",
    172: "Uncorrectable SRAM Error",
}

#: XID → description, for every number from 0 to 172.
DESCRIPTIONS: Final = MappingProxyType(_DESCRIPTIONS)


def describe(xid: int) -> str:
    """The ``err_msg`` of ``xid``: its description, or :data:`UNKNOWN` past the table."""
    return DESCRIPTIONS.get(xid, UNKNOWN)
