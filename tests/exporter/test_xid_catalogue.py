"""``DCGM_FI_DEV_XID_ERRORS``'s ``err_code`` / ``err_msg`` labels, as dcgm-exporter writes them, and
``gpu_xid_errors_total``: each GPU's XIDs from its first collection on."""

from __future__ import annotations

import pytest

from exporter import fields as f
from exporter.attribution import EMPTY_VIEW
from exporter.readings import DeviceIdentity, NodeReading
from exporter.snapshot import Counters, Snapshot, SnapshotBuilder
from exporter.xid_catalogue import DESCRIPTIONS, UNKNOWN, describe

#: XIDs a fleet sees most, from applications and from hardware: each must say what happened.
COMMON = (13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120, 140)


def test_every_xid_up_to_dcgm_exporters_last_is_described() -> None:
    assert set(DESCRIPTIONS) == set(range(173))
    assert all(text and text != UNKNOWN for text in DESCRIPTIONS.values())


@pytest.mark.parametrize("xid", COMMON)
def test_common_xids_say_what_happened(xid: int) -> None:
    text = describe(xid)
    assert text == DESCRIPTIONS[xid]
    assert not text.startswith(("Unused", "Reserved")), f"XID {xid}: {text!r}"


#: Label values dcgm-exporter serves (internal/pkg/collector/xid_errors.go, worded after NVIDIA's XID
#: catalogue for driver 580): a switch between the exporters must keep every series that names one.
DCGM_EXPORTER_TEXTS = {
    0: "No Error",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    45: "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda",
    48: "Double Bit ECC Error",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    70: "CE3: Unknown Error",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    98: "NVDEC7 Error",
    105: "NVJPG7 Error",
    119: "GSP RPC Timeout",
    126: "Robust Channel CE10 Error",
    135: "Robust Channel CE19 Error",
    142: "Robust Channel NVENVC3 Error",
    144: "NVLINK: Saw Error",
    168: "Reduced GPU Memory Capacity (Errors found in write protection region)",
    172: "Uncorrectable SRAM Error",
}


@pytest.mark.parametrize(("xid", "text"), DCGM_EXPORTER_TEXTS.items())
def test_err_msg_is_dcgm_exporters_text_word_for_word(xid: int, text: str) -> None:
    assert describe(xid) == text


@pytest.mark.parametrize("xid", [173, 1000, -1])
def test_a_number_past_the_table_is_unknown_as_in_dcgm_exporter(xid: int) -> None:
    assert describe(xid) == "Unknown Error"


GPU_A = DeviceIdentity(0, "GPU-a", "NVIDIA H100 80GB HBM3", "00000000:18:00.0")
GPU_B = DeviceIdentity(1, "GPU-b", "NVIDIA H100 80GB HBM3", "00000000:3b:00.0")


def _snapshot(counters: Counters, up: bool = True) -> Snapshot:
    reading = NodeReading(True, "550.54.15", ((GPU_A, up), (GPU_B, True)), ())
    return SnapshotBuilder("node-a", version="test").build(
        reading, EMPTY_VIEW, {}, counters, taken_at=0.0, duration_s=0.0
    )


def _xid_series(last_xid: dict[str, int], up: bool) -> list[tuple[dict[str, str], float]]:
    snapshot = _snapshot(Counters(last_xid=last_xid), up)
    return [(s.labels, s.value) for s in snapshot.series[f.XID_ERRORS] if s.labels["UUID"] == "GPU-a"]


@pytest.mark.parametrize(
    ("last", "code", "message"),
    [({}, "0", describe(0)), ({"GPU-a": 79}, "79", describe(79)), ({"GPU-a": 200}, "200", "Unknown Error")],
)
def test_the_gauge_carries_the_code_and_its_meaning_even_for_a_lost_gpu(
    last: dict[str, int], code: str, message: str
) -> None:
    [(labels, value)] = _xid_series(last, up=False)
    assert (labels["err_code"], labels["err_msg"], value) == (code, message, float(code))
    assert labels["UUID"] == "GPU-a" and labels["gpu"] == "0"


def _xid_totals(counters: Counters, up: bool = True) -> dict[tuple[str, str], float]:
    """(UUID, xid label or "" for the GPU's total) → value of gpu_xid_errors_total."""
    return {
        (s.labels["UUID"], s.labels.get("xid", "")): s.value
        for s in _snapshot(counters, up).series[f.XID_TOTAL]
    }


def test_each_gpu_has_its_xid_total_at_0_before_any_xid() -> None:
    """The series a GPU's first XID increments exists, at 0, from the GPU's first collection: an XID
    series born at its first event would give ``increase()`` nothing to count (its first sample is
    its starting point), and with it the first XID of each number on each GPU would go unseen."""
    assert _xid_totals(Counters()) == {("GPU-a", ""): 0, ("GPU-b", ""): 0}


def test_the_total_counts_every_xid_of_the_gpu_and_each_xid_has_its_own_series() -> None:
    counters = Counters(xids={("GPU-a", 79): 1, ("GPU-a", 13): 2}, last_xid={"GPU-a": 79})
    assert _xid_totals(counters, up=False) == {  # a GPU fallen off the bus keeps its counts
        ("GPU-a", ""): 3,
        ("GPU-a", "13"): 2,
        ("GPU-a", "79"): 1,
        ("GPU-b", ""): 0,
    }
    # The total carries the GPU's identifying labels, as gpu_up does; the ones by XID add `xid`.
    snapshot = _snapshot(counters)
    (up,) = [s.labels for s in snapshot.series[f.GPU_UP] if s.labels["UUID"] == "GPU-a"]
    totals = [s.labels for s in snapshot.series[f.XID_TOTAL] if s.labels["UUID"] == "GPU-a"]
    assert totals == [up, {**up, "xid": "13"}, {**up, "xid": "79"}]
