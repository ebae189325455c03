"""Which findings are this reaper's: a fleet of clusters is often read through one query view.

Thanos, Mimir or VictoriaMetrics in front of many clusters tell them apart by an external label
(``cluster`` by convention), and the analyzer copies it into ``Finding.cluster``. The clusters are
usually built from one GitOps repository, so namespaces, Deployments and nodes carry the same names
in every one of them: a finding about ``serving/ranker`` in cluster b, acted on by cluster a's
reaper, would stop a busy workload. The reaper acts on one cluster only (``--cluster``,
``$GPU_CLUSTER`` or the policy's ``cluster:``) and sets every other finding aside:

* no finding names a cluster (series without a cluster label: a cluster's own Prometheus) — every
  finding is the reaper's, whether or not a cluster is configured;
* a cluster is configured — its findings are the reaper's; the others are set aside and counted
  (``other_clusters=N``), and so is a finding without a cluster next to findings that name one:
  with colliding names nothing says which cluster it came from;
* no cluster is configured but findings name one or more — nothing says which of them the reaper
  is in: the run is refused (bad input, exit 2) before any call to the cluster.

Decision code: pure, no I/O.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from common.errors import BadInputError
from common.model import FindingsReport

__all__ = ["ClusterSplit", "split_by_cluster"]


def _describe(counts: Counter[str | None]) -> str:
    named = sorted((c, n) for c, n in counts.items() if c is not None)
    parts = [f"{c} ({n} finding{'s' if n != 1 else ''})" for c, n in named]
    unnamed = counts.get(None, 0)
    if unnamed:
        parts.append(f"{unnamed} without a cluster")
    return ", ".join(parts)


@dataclass(frozen=True)
class ClusterSplit:
    """A findings report split into the reaper's own findings and those it must not act on."""

    own: FindingsReport
    others: int  # findings of other clusters, and findings without a cluster next to named ones
    cluster: str | None  # the cluster the reaper acts on, when one is configured
    counts: Counter[str | None]  # findings per cluster named (None: without a cluster label)

    @property
    def refusal(self) -> str | None:
        """Why the run must not go on: findings name clusters, and the reaper does not know its own."""
        if self.cluster is not None or not any(c is not None for c in self.counts):
            return None
        named = sorted(c for c in self.counts if c is not None)
        which = "clusters" if len(named) > 1 else "cluster"
        return (
            f"the findings are of {which} {_describe(self.counts)}, and no cluster is configured for "
            "this reaper: pass --cluster NAME (or set $GPU_CLUSTER) or set cluster: in the policy to "
            "the cluster it acts on"
        )

    def check(self) -> None:
        """Raise :class:`BadInputError` when the run must not go on (see :attr:`refusal`)."""
        if self.refusal is not None:
            raise BadInputError(self.refusal)

    @property
    def none_own(self) -> bool:
        """Findings there are, none of them of the configured cluster (a mistyped name reads so)."""
        return self.cluster is not None and self.others > 0 and not self.own.findings

    def describe_others(self) -> str:
        """The findings set aside, by cluster, for the log."""
        return _describe(Counter({c: n for c, n in self.counts.items() if c != self.cluster}))


def split_by_cluster(report: FindingsReport, cluster: str | None) -> ClusterSplit:
    """The findings of ``report`` that are ``cluster``'s (see the module's docstring).

    Never raises: without a configured cluster, findings that name one are none of the reaper's
    (``own`` is empty) and :meth:`ClusterSplit.check` refuses the run.
    """
    counts: Counter[str | None] = Counter(f.cluster for f in report.findings)
    if not any(c is not None for c in counts):
        return ClusterSplit(own=report, others=0, cluster=cluster, counts=counts)
    kept = tuple(f for f in report.findings if cluster is not None and f.cluster == cluster)
    return ClusterSplit(
        own=report.model_copy(update={"findings": kept}),
        others=len(report.findings) - len(kept),
        cluster=cluster,
        counts=counts,
    )
