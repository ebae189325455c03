"""Headless Chromium for the HTML reports: a screenshot as pixels, and a count of pixels of one colour."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
from matplotlib.image import imread

from harness.binaries import require_binary


def _rgb(hex_colour: str) -> np.ndarray:
    return np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)], dtype=float) / 255.0


def pixels_near(image: np.ndarray, hex_colour: str, tolerance: float = 0.03) -> int:
    rgb = image[..., :3]
    return int((np.abs(rgb - _rgb(hex_colour)).max(axis=-1) < tolerance).sum())


def screenshot(html_file: Path, png: Path, profile: Path) -> np.ndarray:
    chromium = require_binary("chromium")
    result = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            f"--screenshot={png}",
            "--window-size=1280,2000",
            html_file.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert png.exists(), f"chromium wrote no screenshot (exit {result.returncode}):\n{result.stderr[-2000:]}"
    return imread(str(png))
