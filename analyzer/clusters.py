"""Which clusters one analysis covers, where one query view holds many.

Large fleets are many clusters read through one Thanos Query, Mimir or VictoriaMetrics, told apart
by an external label (``cluster`` by convention, ``--cluster-label`` otherwise). The same GitOps
repository gives the same namespaces, Deployment names and node names in every cluster, so each
cluster is analysed apart, every query restricted to its series: its own query set, sent beside
the other clusters' (a few at a time, which bounds memory by the clusters in flight), never one
fleet-wide set whose answers would add two clusters' pods of one name together.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from common.errors import BadInputError

# Clusters analysed side by side: each sends its own queries through the one client's bounded pool,
# so more at once would only queue there, and each one in flight holds its snapshot in memory.
CLUSTERS_AT_ONCE = 4


def choose_clusters(found: Sequence[str], wanted: Collection[str], label: str) -> list[str]:
    """The clusters to analyse apart, of those ``found`` in the source; none: analyse it whole.

    Series naming no cluster give one analysis of everything, as before clusters existed. Asking for
    a cluster the source does not hold is bad input, said with the clusters it does hold.
    """
    if not wanted:
        return list(found)
    missing = sorted(set(wanted) - set(found))
    if missing:
        held = ", ".join(found) if found else f"none: no GPU series carries a {label!r} label"
        raise BadInputError(
            f"cluster(s) {', '.join(missing)} not found in the window (clusters by label {label!r}: {held})"
        )
    return [c for c in found if c in wanted]
