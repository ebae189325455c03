"""An object's metadata as the reaper reads it, and whether the reaper's stop mark is on it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reaper.actuators import actuator_of


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def meta(obj: Mapping[str, Any], key: str) -> str:
    return str((obj.get("metadata") or {}).get(key) or "")


def marked(kind: str, obj: Mapping[str, Any]) -> bool:
    """The reaper stopped this object (its actuator's mark is on it)."""
    actuator = actuator_of(kind)
    return actuator is not None and actuator.marker in annotations_of(obj)
