"""Render the Helm chart in-process (Helm's own Go engine through helm-python-sdk; no helm binary)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python
import yaml

CHART_DIR = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "kube-gpu-reaper"
RELEASE = "kgr"
NAMESPACE = "gpu-reaper"


@dataclass(frozen=True)
class Manifest:
    template: str  # e.g. templates/reaper-cronjob.yaml
    doc: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.doc["kind"])

    @property
    def name(self) -> str:
        return str(self.doc["metadata"]["name"])

    @property
    def id(self) -> str:
        return f"{self.kind}/{self.name}"


def values_file(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART_DIR / "ci" / name).read_text(encoding="utf-8"))
    return loaded


def render(values: dict[str, Any] | None = None) -> list[Manifest]:
    """Every object the chart renders with ``values`` (NOTES.txt left out)."""
    with helm_python.Chart.load(CHART_DIR) as chart:
        rendered = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    out = []
    for path, text in sorted(rendered.items()):
        if not path.endswith(".yaml"):
            continue
        template = path.split("/", 1)[1]
        out.extend(Manifest(template, doc) for doc in yaml.safe_load_all(text) if doc)
    return out


def only(manifests: list[Manifest], kind: str) -> dict[str, Any]:
    """The one object of ``kind``."""
    (found,) = [m.doc for m in manifests if m.kind == kind]
    return found


def lint(values: dict[str, Any] | None, kube_version: str) -> dict[str, Any]:
    return helm_python.lint(CHART_DIR, values or {}, strict=True, kube_version=kube_version)
