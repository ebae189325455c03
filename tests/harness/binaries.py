"""Find the real binaries tests need; in CI a missing one is a failure, never a silent skip."""

from __future__ import annotations

import os
import shutil

import pytest


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        message = f"{name!r} is not installed (Debian package); .ci/run installs it"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return path
