"""The data sources the verdicts depend on, and what an analysis loses without each.

Discovery (``Capabilities``) says what the source holds; this module says what its absence costs
the verdicts and how to add it, once, so that every report header (table, JSON, HTML) and the
commands' warnings say the same. Missing data is never evidence: a verdict a source would have
changed is not drawn, or drawn from less, and the reader must know which.

Pure: capabilities in, :class:`~common.model.MissingSource` out.
"""

from __future__ import annotations

from analyzer.sources.dcgm import Capabilities
from common import metric_names
from common.model import MissingSource

__all__ = ["missing_sources"]

KUBE_STATE_METRICS = MissingSource(
    source="kube-state-metrics",
    lost=(
        "nothing names the pods' owners, so every workload is reported as a bare Pod (no Deployment, "
        "StatefulSet, Job or custom controller; rules matching those kinds do not match), pods that "
        "requested a GPU but never got one go unseen, and a pod's CPU use has no limit or request to "
        "be measured against, so CPU-bound dataloader starvation is found only where CFS throttling shows it"
    ),
    fix=(
        "deploy kube-state-metrics and have this Prometheus scrape it (kube_pod_owner, "
        "kube_replicaset_owner, kube_job_owner, kube_pod_container_resource_limits and _requests, "
        "kube_pod_labels)"
    ),
)
CADVISOR = MissingSource(
    source="cAdvisor",
    lost=(
        "no pod's CPU use or CFS throttling is known, so CPU-bound dataloader starvation (a GPU "
        "waiting on a pod at its CPU limit) cannot be found: it reads as low utilization, whose "
        "advice to give up GPUs would not help"
    ),
    fix=(
        "have this Prometheus scrape the kubelets' cAdvisor endpoint (container_cpu_usage_seconds_total, "
        "container_cpu_cfs_periods_total, container_cpu_cfs_throttled_periods_total)"
    ),
)
PROFILING = MissingSource(
    source="DCGM profiling metrics",
    lost=(
        f"utilization is only {metric_names.GPU_UTIL}, the share of time any kernel ran: a GPU kept "
        "busy by small kernels reads near 100 % and its low use of the GPU goes unseen"
    ),
    fix=(
        f"enable {metric_names.PROF_GR_ENGINE_ACTIVE} (DCGM 4.7: {metric_names.PROF_GR_ENGINE_UTIL_RATIO}) "
        "in dcgm-exporter's collectors file on GPUs that support profiling"
    ),
)
FRAMEBUFFER = MissingSource(
    source="GPU framebuffer memory",
    lost=(
        "no GPU's memory use is known: an idle endpoint cannot be told from a pod that never loaded "
        "anything, and no smaller GPU share can be sized for an underused workload"
    ),
    fix=(
        f"collect {metric_names.FB_USED} (DCGM 4.7: {metric_names.FB_USED_BYTES}), "
        "a default field of dcgm-exporter and of gpu-exporter"
    ),
)


def missing_sources(caps: Capabilities) -> tuple[MissingSource, ...]:
    """The sources the verdicts depend on that ``caps`` says the data source does not hold."""
    missing = []
    if not caps.kube_state_metrics:
        missing.append(KUBE_STATE_METRICS)
    if not caps.cpu_usage and not caps.cpu_throttling:
        missing.append(CADVISOR)
    profiling = {metric_names.legacy_name(m) for m in caps.util_metrics}
    if metric_names.PROF_GR_ENGINE_ACTIVE not in profiling:
        missing.append(PROFILING)
    if not caps.memory:
        missing.append(FRAMEBUFFER)
    return tuple(missing)
