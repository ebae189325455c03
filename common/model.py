"""The plain, immutable data that flows from the analyzer to the reaper.

The analyzer owns findings; the reaper consumes them (from memory or from the JSON the
``gpu-analyzer analyze --format json`` command writes). The JSON shape is a stable contract:
fields are only ever added, never renamed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, model_validator

from common.evidence import (
    AnyEvidence,
    DataloaderStarvationEvidence,
    Evidence,
    EvidenceValue,
    IdleEndpointEvidence,
    LowUtilizationEvidence,
    StalledJobEvidence,
    UnknownEvidence,
    UtilizationEvidence,
    UtilQuantile,
)
from common.timeutil import AwareDatetime, rfc3339
from common.validation import one_line

__all__ = [
    "SCHEMA_VERSION",
    "AnyEvidence",
    "AwareDatetime",
    "DataloaderStarvationEvidence",
    "Evidence",
    "EvidenceValue",
    "Finding",
    "FindingKind",
    "FindingsReport",
    "GpuRef",
    "IdleEndpointEvidence",
    "LowUtilizationEvidence",
    "MissingSource",
    "StalledJobEvidence",
    "TimeWindow",
    "UnknownEvidence",
    "UtilQuantile",
    "UtilizationEvidence",
    "WorkloadRef",
    "workload_keys",
]

# 2: the ``stalled_job`` kind. Documents of version 1 (which cannot hold it) are still read.
SCHEMA_VERSION = 2
READABLE_VERSIONS = frozenset({1, SCHEMA_VERSION})


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FindingKind(StrEnum):
    """What a detector concluded about a workload's GPUs."""

    IDLE_ENDPOINT = "idle_endpoint"
    LOW_UTILIZATION = "low_utilization"
    DATALOADER_STARVATION = "dataloader_starvation"
    STALLED_JOB = "stalled_job"
    UNKNOWN = "unknown"

    @property
    def actionable(self) -> bool:
        """Only verdicts backed by enough data may ever lead to an action."""
        return self is not FindingKind.UNKNOWN


class GpuRef(_Frozen):
    """One physical GPU, or one MIG instance of it (``mig_instance`` set)."""

    uuid: str = Field(min_length=1)
    node: str
    index: int | None = None
    model: str | None = None
    mig_instance: int | None = None
    mig_profile: str | None = None


class WorkloadRef(_Frozen):
    """What holds GPUs: the pods' controller, ``Pod`` for bare pods, or ``Node`` for unallocated nodes."""

    kind: str = Field(min_length=1)
    name: str = Field(min_length=1)
    namespace: str = ""  # empty for cluster-scoped kinds (Node)

    def key(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"


class TimeWindow(_Frozen):
    """A closed time range in UTC."""

    start: AwareDatetime
    end: AwareDatetime

    @model_validator(mode="after")
    def _ordered(self) -> TimeWindow:
        if self.end <= self.start:
            raise ValueError(f"window end {self.end.isoformat()} is not after start {self.start.isoformat()}")
        return self

    @classmethod
    def ending(cls, end: datetime, duration: timedelta) -> TimeWindow:
        return cls(start=end - duration, end=end)

    @property
    def duration(self) -> timedelta:
        return self.end - self.start

    @property
    def hours(self) -> float:
        return self.duration.total_seconds() / 3600.0


class _WorkloadJSON(_Frozen):
    kind: str
    name: str


class Finding(_Frozen):
    """A verdict about one workload over one window, with the numbers behind it."""

    kind: FindingKind
    # The cluster the workload runs in: the value of the series' cluster label (``--cluster-label``)
    # where many clusters are read through one query view; None where the series carry none.
    cluster: str | None = Field(default=None, min_length=1)
    workload: WorkloadRef
    # The controller above `workload` that the metrics name (a KServe InferenceService, a Kubeflow
    # Notebook…): what a stop must act on, in the workload's namespace. None where they name none.
    owner: WorkloadRef | None = None
    pods: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    window: TimeWindow
    evidence: AnyEvidence = Field(default_factory=UnknownEvidence)  # the class follows `kind`
    confidence: float = Field(ge=0.0, le=1.0)
    wasted_gpu_hours: float = Field(ge=0.0, default=0.0)
    estimated_cost: float | None = None
    recommendation: str = ""

    @model_validator(mode="before")
    @classmethod
    def _evidence_for_kind(cls, data: Any) -> Any:
        # The JSON's evidence object carries no kind of its own: the finding's kind picks its class.
        if not isinstance(data, Mapping) or "kind" not in data:
            return data
        try:
            model = EVIDENCE_BY_KIND[FindingKind(data["kind"])]
        except ValueError:
            return data  # the kind field's own validation names the bad value
        evidence = data.get("evidence", {})
        if isinstance(evidence, Mapping):
            return {**data, "evidence": model.model_validate(evidence)}
        return data

    @model_validator(mode="after")
    def _evidence_matches_kind(self) -> Finding:
        expected = EVIDENCE_BY_KIND[self.kind]
        if type(self.evidence) is not expected:
            raise ValueError(
                f"{self.kind.value} findings carry {expected.__name__}, not {type(self.evidence).__name__}"
            )
        return self

    @model_validator(mode="after")
    def _owner_beside_workload(self) -> Finding:
        # Owner references never cross namespaces, and the JSON writes one namespace for both.
        if self.owner is not None and self.owner.namespace != self.workload.namespace:
            raise ValueError(
                f"owner {self.owner.key()} is not in the workload's namespace {self.workload.namespace!r}"
            )
        return self

    @property
    def namespace(self) -> str:
        return self.workload.namespace

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def gpu_equivalents(self) -> float:
        """Whole GPUs the finding's devices add up to: a MIG slice counts its share of its GPU."""
        share = getattr(self.evidence, "gpu_equivalents", None)
        return float(share) if share is not None else float(self.gpu_count)

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON shape (see docs/findings.md)."""
        # ``cluster`` only where a query view named one: single-cluster documents keep their shape.
        named = {"cluster": self.cluster} if self.cluster is not None else {}
        # ``owner`` only where the metrics name one, likewise.
        owner = {"owner": {"kind": self.owner.kind, "name": self.owner.name}} if self.owner else {}
        return {
            "kind": self.kind.value,
            **named,
            "namespace": self.workload.namespace,
            "workload": {"kind": self.workload.kind, "name": self.workload.name},
            **owner,
            "pods": list(self.pods),
            "nodes": list(self.nodes),
            "gpus": list(self.gpus),
            "gpu_count": self.gpu_count,
            "window": {"start": rfc3339(self.window.start), "end": rfc3339(self.window.end)},
            "evidence": self.evidence.to_json(),
            "confidence": self.confidence,
            "wasted_gpu_hours": self.wasted_gpu_hours,
            "estimated_cost": self.estimated_cost,
            "recommendation": self.recommendation,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        """Parse the stable JSON shape; raises ``pydantic.ValidationError`` naming the bad field."""
        payload = dict(data)
        workload = _WorkloadJSON.model_validate(payload.pop("workload", None))
        namespace = payload.pop("namespace", None)
        gpu_count = payload.pop("gpu_count", None)
        owner = payload.pop("owner", None)
        if owner is not None:
            above = _WorkloadJSON.model_validate(owner)
            payload["owner"] = {"kind": above.kind, "name": above.name, "namespace": namespace}
        finding = cls.model_validate(
            {**payload, "workload": {"kind": workload.kind, "name": workload.name, "namespace": namespace}}
        )
        if gpu_count is not None and (isinstance(gpu_count, bool) or not isinstance(gpu_count, int)):
            raise ValueError(f"gpu_count must be a whole number, not {gpu_count!r}")
        if gpu_count is not None and gpu_count != finding.gpu_count:
            raise ValueError(f"gpu_count {gpu_count} disagrees with {finding.gpu_count} listed gpus")
        return finding


class InvalidFindingsError(ValueError):
    """A findings document of the right version with a field that is wrong: the message is one
    line naming where (``findings[3].kind``) and what is wrong."""


def _finding_at(index: int, data: Any) -> Finding:
    at = f"findings[{index}]"
    if not isinstance(data, Mapping):
        raise InvalidFindingsError(f"{at}: must be a JSON object")
    # The workload (and owner) objects are read apart from the finding: checked here first, so
    # that their problems are placed below them.
    for part in ("workload", "owner"):
        if part == "workload" or data.get(part) is not None:
            try:
                _WorkloadJSON.model_validate(data.get(part))
            except ValidationError as e:
                raise InvalidFindingsError(one_line(e, f"{at}.{part}")) from e
    try:
        return Finding.from_dict(data)
    except ValidationError as e:
        raise InvalidFindingsError(one_line(e, at)) from e
    except ValueError as e:
        raise InvalidFindingsError(f"{at}: {e}") from e


EVIDENCE_BY_KIND: dict[FindingKind, type[AnyEvidence]] = {
    FindingKind.IDLE_ENDPOINT: IdleEndpointEvidence,
    FindingKind.LOW_UTILIZATION: LowUtilizationEvidence,
    FindingKind.DATALOADER_STARVATION: DataloaderStarvationEvidence,
    FindingKind.STALLED_JOB: StalledJobEvidence,
    FindingKind.UNKNOWN: UnknownEvidence,
}


class MissingSource(_Frozen):
    """A data source the verdicts depend on that the analysis did not find: what its absence costs
    the verdicts, and how to add it. ``clusters``: only these clusters lack it (empty: all of them)."""

    source: str = Field(min_length=1)
    lost: str
    fix: str
    clusters: tuple[str, ...] = ()

    @property
    def what(self) -> str:
        """``kube-state-metrics``, with the clusters lacking it where not all do."""
        return f"{self.source} (clusters {', '.join(self.clusters)})" if self.clusters else self.source

    def sentence(self) -> str:
        """The one wording of every log line and report header: what is missing, lost, and the fix."""
        return f"no {self.what}: {self.lost}. To fix: {self.fix}."

    def to_dict(self) -> dict[str, Any]:
        named = {"clusters": list(self.clusters)} if self.clusters else {}
        return {"source": self.source, "lost": self.lost, "fix": self.fix, **named}


# The document's keys: a key not among them is refused, as one inside a finding is (a typo, or a
# newer analyzer's field this reader does not know, is never silently dropped).
_DOCUMENT_KEYS = (
    "schema_version",
    "generated_at",
    "source",
    "window",
    "gpus_judged",
    "missing_sources",
    "findings",
)


class FindingsReport(_Frozen):
    """Everything one analysis produced: the JSON document ``--format json`` writes."""

    window: TimeWindow
    generated_at: AwareDatetime
    source: str = ""
    # GPUs and MIG instances the analysis judged (in its namespace scope); None: not said (a document
    # written before the field existed, or a findings file scoped afterwards).
    gpus_judged: StrictInt | None = Field(default=None, ge=0)
    missing_sources: tuple[MissingSource, ...] = ()
    findings: tuple[Finding, ...] = ()

    def to_json(self, indent: int | None = 2) -> str:
        doc: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "generated_at": rfc3339(self.generated_at),
            "source": self.source,
            "window": {"start": rfc3339(self.window.start), "end": rfc3339(self.window.end)},
        }
        # Both written only when known, so documents of earlier releases read back byte for byte.
        if self.gpus_judged is not None:
            doc["gpus_judged"] = self.gpus_judged
        if self.missing_sources:
            doc["missing_sources"] = [m.to_dict() for m in self.missing_sources]
        doc["findings"] = [f.to_dict() for f in self.findings]
        return json.dumps(doc, indent=indent, sort_keys=False)

    @classmethod
    def from_json(cls, text: str) -> FindingsReport:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("findings document must be a JSON object")
        version = doc.get("schema_version")
        if isinstance(version, bool) or version not in READABLE_VERSIONS:
            readable = " or ".join(str(v) for v in sorted(READABLE_VERSIONS))
            raise ValueError(f"unsupported findings schema_version {version!r} (expected {readable})")
        unknown = [key for key in doc if key not in _DOCUMENT_KEYS]
        if unknown:
            raise InvalidFindingsError(
                f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} at the "
                f"document's top level (known: {', '.join(_DOCUMENT_KEYS)})"
            )
        findings = doc.get("findings", [])
        if not isinstance(findings, list):
            raise ValueError("findings: must be a JSON array")
        try:
            return cls.model_validate(
                {
                    "window": doc.get("window"),
                    "generated_at": doc.get("generated_at"),
                    "source": doc.get("source", ""),
                    "gpus_judged": doc.get("gpus_judged"),
                    "missing_sources": doc.get("missing_sources", ()),
                    "findings": tuple(_finding_at(i, f) for i, f in enumerate(findings)),
                }
            )
        except ValidationError as e:
            raise InvalidFindingsError(one_line(e)) from e

    def by_kind(self, kind: FindingKind) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.kind is kind)


def workload_keys(findings: Iterable[Finding]) -> set[str]:
    return {f.workload.key() for f in findings}
