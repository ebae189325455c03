"""Read an exporter's text exposition back as Prometheus stores it."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


def stored_samples(body: str) -> list[Sample]:
    """The samples of a text exposition under the names Prometheus stores them.

    prometheus_client's text parser appends ``_total`` to the samples of a counter declared without
    it; DCGM's counters are (``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``), and Prometheus stores them
    under the name written, so that name is put back here.
    """
    out = []
    for family in text_string_to_metric_families(body):
        declared = family.type == "counter" and f"# TYPE {family.name} counter\n" in body
        for sample in family.samples:
            if declared and sample.name == f"{family.name}_total":
                sample = sample._replace(name=family.name)
            out.append(sample)
    return out
