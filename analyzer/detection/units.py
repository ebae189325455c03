"""Framebuffer sizes as people read them, the same in every sentence the analyzer writes.

Recommendations and right-size reasons are written here, the reports' evidence in
``analyzer.report.units``, which uses this one spelling: GiB from 1 GiB up, MiB below, so one report
never says 55.8 GiB in one place and 57,091 MiB in another. The JSON keeps MiB numbers (``_mib`` keys).
"""

from __future__ import annotations


def memory(mib: float) -> str:
    """``55.8 GiB``, ``256 MiB``."""
    return f"{mib / 1024:,.1f} GiB" if abs(mib) >= 1024 else f"{mib:,.0f} MiB"
