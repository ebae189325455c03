"""What an XID number means, for the ``err_msg`` label of ``DCGM_FI_DEV_XID_ERRORS``.

dcgm-exporter (3.3.6 and later) labels that series with ``err_code``, the XID as a decimal string, and
``err_msg``, a description from its own table of NVIDIA's XID catalogue; a value outside its table
(above 172) gets ``Unknown Error``. This table covers the same numbers, 0 to 172, from the facts of
NVIDIA's public XID catalogue (which engine or unit reported, and what happened) in this project's
own words, so ``err_msg`` texts differ from dcgm-exporter's: queries and alerts should match
``err_code`` (or the value), never ``err_msg``. Numbers past the table get ``Unknown Error``, as there.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

#: ``err_msg`` for an XID this table does not describe (dcgm-exporter's text for the same case).
UNKNOWN: Final = "Unknown Error"

_UNUSED = "Unused XID number"
_RESERVED = "Reserved XID number"
_VIDEO = "Video processor exception"
_PUSH_BUFFER = "Push buffer stream invalid or corrupted"
_FIRMWARE = "Driver firmware error"
_MICROCONTROLLER = "Internal micro-controller error"
_DISPLAY = "Display engine error"
_ILLEGAL_ACCESS = "Driver made an illegal access"


def _engines(first_xid: int, engine: str, first_index: int, count: int, what: str) -> dict[int, str]:
    """XIDs numbered in a row for one kind of engine: NVDEC 5, 6, 7 as XIDs 96, 97, 98, and so on."""
    return {first_xid + k: f"{engine}{first_index + k} {what}" for k in range(count)}


_DESCRIPTIONS: dict[int, str] = {
    0: "No XID reported",
    **dict.fromkeys((1, 2, 3, 4, 6, 11), _PUSH_BUFFER),
    **dict.fromkeys((5, 10, 14, 15, 17, 23, 39, 40, 41, 49, 50, 51, 52, 53, 55), _UNUSED),
    7: "Push buffer address invalid or corrupted",
    8: "GPU stopped making progress",
    9: "Driver failed while programming the GPU",
    12: "Driver failed while handling a GPU exception",
    13: "Graphics engine exception: usually the application (bad address, illegal instruction)",
    16: "Display engine hung",
    18: "Bus mastering turned off in the GPU's PCI configuration space",
    **dict.fromkeys((19, 56), _DISPLAY),
    20: "MPEG push buffer invalid or corrupted",
    21: "Motion estimation push buffer invalid or corrupted",
    22: "Video processor push buffer invalid or corrupted",
    24: "GPU semaphore timed out",
    25: "Push buffer stream invalid or illegal",
    26: "Frame buffer timed out",
    **dict.fromkeys((27, 28, 29, 34, 35, 36, 42, 47, 60, 65), _VIDEO),
    30: "GPU semaphore access failed",
    31: "GPU memory page fault: usually the application touched an invalid address",
    32: "Push buffer stream corrupted, often with PCIe errors around it",
    **dict.fromkeys((33, 59), _MICROCONTROLLER),
    **dict.fromkeys((37, 38), _FIRMWARE),
    43: "GPU stopped the application's channel after a fault in it",
    44: "Graphics engine fault during a context switch",
    45: "Channel cleaned up after an earlier error or a killed process",
    46: "GPU stopped making progress",
    48: "Uncorrectable double-bit ECC error",
    54: "Auxiliary power not connected to the board",
    57: "Programming the video memory interface failed",
    58: "Video memory interface found unstable",
    61: "Internal micro-controller hit a breakpoint or warning",
    62: "Internal micro-controller halted",
    63: "ECC page retirement or row remapping recorded",
    64: "Recording an ECC page retirement or row remapping failed",
    **dict.fromkeys((66, 67), _ILLEGAL_ACCESS),
    68: "NVDEC0 exception",
    69: "Graphics engine class error",
    **_engines(70, "Copy engine ", 3, 3, "error"),
    73: "NVENC2 error",
    74: "NVLink error",
    **_engines(75, "Copy engine ", 6, 3, "error"),
    78: "vGPU failed to start",
    79: "GPU fell off the bus: no longer reachable over PCIe",
    80: "Corrupted data sent to the GPU",
    81: "VGA subsystem error",
    82: "NVJPG0 error",
    **_engines(83, "NVDEC", 1, 2, "error"),
    85: "Copy engine 9 error",
    86: "Optical flow accelerator exception",
    **dict.fromkeys((87, 90, 91, 108), _RESERVED),
    **_engines(88, "NVDEC", 3, 2, "error"),
    92: "High rate of single-bit ECC errors",
    93: "InfoROM wear limit exceeded (not fatal)",
    94: "Contained uncorrectable ECC error: only the applications using that memory are stopped",
    95: "Uncontained uncorrectable ECC error: the GPU needs a reset",
    **_engines(96, "NVDEC", 5, 3, "error"),
    **_engines(99, "NVJPG", 1, 7, "error"),
    106: "SMBPBI test message",
    107: "SMBPBI test message, silent",
    109: "Context switch timed out",
    110: "Security fault",
    111: "Display bundle error event",
    112: "Display supervisor error",
    113: "DisplayPort link training failed",
    114: "Display pipeline underflow",
    115: "Display core channel error",
    116: "Display window channel error",
    117: "Display cursor channel error",
    118: "Display pixel pipeline error",
    119: "GSP firmware call (RPC) timed out",
    120: "GSP firmware error",
    121: "C2C link error",
    122: "SPI read through the PMU failed",
    123: "SPI write through the PMU failed",
    124: "SPI erase through the PMU failed",
    125: "InfoROM file system failure",
    **_engines(126, "Copy engine ", 10, 10, "error"),
    136: "NVLink ALI training failed",
    137: "NVLink privilege error",
    138: "Deep learning accelerator (DLA) error",
    139: "Optical flow accelerator 1 error",
    140: "ECC error the driver could not recover from",
    141: "Fast path error",
    142: "NVENC3 error",
    143: "GPU initialization failed",
    144: "NVLink SAW error",
    145: "NVLink RLW error",
    146: "NVLink TLW error",
    147: "NVLink TREX error",
    148: "NVLink NVLPW_CTRL error",
    149: "NVLink NETIR error",
    150: "NVLink MSE error",
    151: "Key rotation error",
    152: "Deep learning accelerator (DLA) SMMU error",
    153: "Deep learning accelerator (DLA) timed out",
    154: "GPU recovery action changed",
    155: "NVLink software-defined error",
    156: "Resource retirement event",
    157: "Resource retirement failed",
    158: "GPU fatal timeout",
    159: "CHI non-data error",
    160: "Channel retirement event",
    161: "Channel retirement failed",
    162: "Power smoothing circuitry engaged again",
    163: "Power smoothing circuitry disengaged",
    164: "Power smoothing circuitry near the end of its life",
    165: "Power smoothing circuitry at the end of its life",
    166: "NVLink secure crypto error",
    167: "PCIe fatal timeout",
    168: "GPU memory capacity reduced: errors in the write-protected region",
    169: "Internal micro-controller halted",
    170: "NVLink interrupt in confidential computing mode",
    171: "Uncorrectable DRAM error",
    172: "Uncorrectable SRAM error",
}

#: XID → description, for every number from 0 to 172.
DESCRIPTIONS: Final = MappingProxyType(_DESCRIPTIONS)


def describe(xid: int) -> str:
    """The ``err_msg`` of ``xid``: its description, or :data:`UNKNOWN` past the table."""
    return DESCRIPTIONS.get(xid, UNKNOWN)
