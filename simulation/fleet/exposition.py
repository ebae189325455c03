"""Write simulated series in the text formats TSDBs ingest.

* OpenMetrics (timestamps in seconds, ``# EOF``) for ``promtool tsdb create-blocks-from openmetrics``;
* Prometheus text (timestamps in milliseconds) for VictoriaMetrics' ``/api/v1/import/prometheus``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TextIO

import numpy as np

from simulation.fleet.simulator import Series


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _selector(series: Series) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in series.labels)
    return f"{series.name}{{{inner}}}"


def _values(values: np.ndarray) -> list[str]:
    # %.10g keeps counters in the 1e10 range exact to the unit and gauges short.
    return [f"{v:.10g}" for v in values.tolist()]


def series_lines(series: Series, millis: bool) -> Iterator[str]:
    head = _selector(series)
    stamps = (
        [str(round(t * 1000)) for t in series.timestamps.tolist()]
        if millis
        else [f"{t:.10g}" for t in series.timestamps.tolist()]
    )
    for v, t in zip(_values(series.values), stamps, strict=True):
        yield f"{head} {v} {t}\n"


def write_openmetrics(series: Iterable[Series], out: TextIO) -> int:
    """Write every sample; returns the number of samples written."""
    count = 0
    for s in series:
        out.writelines(series_lines(s, millis=False))
        count += s.values.size
    out.write("# EOF\n")
    return count


def prometheus_text_chunks(series: Iterable[Series], max_bytes: int = 4 << 20) -> Iterator[bytes]:
    """Prometheus text with millisecond timestamps, cut into bounded chunks for HTTP import."""
    return byte_chunks((line for s in series for line in series_lines(s, millis=True)), max_bytes)


def byte_chunks(lines: Iterable[str], max_bytes: int) -> Iterator[bytes]:
    """Whole lines gathered into request bodies of about ``max_bytes`` (one line may pass it)."""
    buf: list[str] = []
    size = 0
    for line in lines:
        buf.append(line)
        size += len(line)
        if size >= max_bytes:
            yield "".join(buf).encode()
            buf, size = [], 0
    if buf:
        yield "".join(buf).encode()
