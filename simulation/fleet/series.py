"""One simulated series: a metric name, its labels and its samples."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Series:
    name: str
    labels: tuple[tuple[str, str], ...]
    timestamps: np.ndarray  # unix seconds, ascending
    values: np.ndarray

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)
