"""``DCGM_FI_DEV_XID_ERRORS``'s ``err_code`` / ``err_msg`` labels, as dcgm-exporter writes them."""

from __future__ import annotations

import pytest

from exporter import fields as f
from exporter.attribution import EMPTY_VIEW
from exporter.readings import DeviceIdentity, NodeReading
from exporter.snapshot import Counters, SnapshotBuilder
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


@pytest.mark.parametrize("xid", [173, 1000, -1])
def test_a_number_past_the_table_is_unknown_as_in_dcgm_exporter(xid: int) -> None:
    assert describe(xid) == "Unknown Error"


def _xid_series(last_xid: dict[str, int], up: bool) -> list[tuple[dict[str, str], float]]:
    gpu = DeviceIdentity(0, "GPU-a", "NVIDIA H100 80GB HBM3", "00000000:18:00.0")
    reading = NodeReading(True, "550.54.15", ((gpu, up),), ())
    snapshot = SnapshotBuilder("node-a", version="test").build(
        reading, EMPTY_VIEW, {}, Counters(last_xid=last_xid), taken_at=0.0, duration_s=0.0
    )
    return [(s.labels, s.value) for s in snapshot.series[f.XID_ERRORS]]


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
