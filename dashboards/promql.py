"""The PromQL vocabulary every dashboard shares: selectors scoped to the template variables, and the
expressions that read dcgm-exporter's and gpu-exporter's series alike.

Conventions, kept by every helper here so that no dashboard has to remember them:

* every selector carries ``cluster=~"$cluster"``; the variable's "All" is ``.*``, which also matches
  series without a ``cluster`` label, so a single Prometheus needs no relabelling;
* a breakdown keeps ``cluster`` among its grouping labels (:data:`DEVICE`, ``by_cluster``), so with
  several clusters selected no two clusters are ever added together; only totals combine them;
* dcgm-exporter copies a shared (time-sliced) GPU's series onto every pod holding a replica, so device
  numbers take one value per device first (``max by`` :data:`DEVICE`);
* gpu-exporter serves a shared GPU's series once, without pod labels, and each pod's share as
  ``gpu_pod_*``: pod-level expressions read those next to the DCGM series;
* MIG instances have no ``DCGM_FI_DEV_GPU_UTIL`` of their own: their graphics-engine ratio stands in;
* the node label is ``Hostname`` as dcgm-exporter writes it, or ``hostname`` where a scrape config
  lowercased it: node expressions read both and answer with ``Hostname``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from common import metric_names as m

CLUSTER = 'cluster=~"$cluster"'
HELD = 'pod!=""'
MIG_ONLY = 'GPU_I_ID!=""'
#: One device: a whole GPU or a MIG instance (``GPU_I_ID`` is empty for whole GPUs).
DEVICE = "cluster, UUID, GPU_I_ID"
#: One physical GPU on one node, as the node dashboard draws it.
NODE_GPU = "cluster, Hostname, gpu, UUID"

#: A function that wraps a selector, e.g. in ``max_over_time(…[15m])``.
Wrap = Callable[[str], str]

MIB = 1048576


def same(selector: str) -> str:
    return selector


def over(function: str, window: str) -> Wrap:
    """``over("avg_over_time", "$__range")`` wraps a selector as ``avg_over_time(sel[$__range])``."""
    return lambda selector: f"{function}({selector}[{window}])"


def sel(metric: str, *matchers: str) -> str:
    """``metric{cluster=~"$cluster", matchers…}``."""
    return f"{metric}{{{', '.join((CLUSTER, *matchers))}}}"


def by(labels: str, aggregation: str, expr: str) -> str:
    return f"{aggregation} by ({labels}) ({expr})"


def device_util(*matchers: str, wrap: Wrap = same) -> str:
    """Utilization (%) of every device: whole GPUs' gauge, MIG instances' engine ratio."""
    gauge = wrap(sel(m.GPU_UTIL, *matchers))
    engine = wrap(sel(m.PROF_GR_ENGINE_ACTIVE, *matchers, MIG_ONLY))
    return f"({gauge} or 100 * {engine})"


def per_device_util(*matchers: str, wrap: Wrap = same) -> str:
    """One utilization (%) per device, whatever number of pods dcgm-exporter copied it onto."""
    return by(DEVICE, "max", device_util(*matchers, wrap=wrap))


def pod_util(*matchers: str, wrap: Wrap = same) -> str:
    """Utilization (%) per pod and device: the device's gauge where a pod holds the device, a pod's
    own share of a GPU that gpu-exporter saw shared."""
    gauge = wrap(sel(m.GPU_UTIL, HELD, *matchers))
    share = wrap(sel(m.POD_SM_UTILIZATION, HELD, *matchers))
    engine = wrap(sel(m.PROF_GR_ENGINE_ACTIVE, HELD, *matchers, MIG_ONLY))
    return f"({gauge} or {share} or 100 * {engine})"


def pod_memory_mib(*matchers: str, wrap: Wrap = same) -> str:
    """Framebuffer memory (MiB) per pod and device, gpu-exporter's per-pod bytes converted."""
    whole = wrap(sel(m.FB_USED, HELD, *matchers))
    share = wrap(sel(m.POD_MEMORY_USED, HELD, *matchers))
    return f"({whole} or {share} / {MIB})"


def gpu_pods(*matchers: str) -> str:
    """Every (pod, device) pair in use: one series each, whichever exporter attributed it."""
    return f"({sel(m.FB_USED, HELD, *matchers)} or {sel(m.POD_MEMORY_USED, HELD, *matchers)})"


def allocated(*matchers: str) -> str:
    """The devices pods hold, one series each (value 1), for ``and on (DEVICE)``."""
    return by(DEVICE, "group", gpu_pods(*matchers))


def allocated_only(expr: str, *matchers: str) -> str:
    """A per-device expression kept to the devices held by pods (of the pods ``matchers`` select)."""
    return f"({expr}) and on ({DEVICE}) {allocated(*matchers)}"


def idle(expr: str, threshold: str) -> str:
    """1 where ``expr`` is at or below the threshold, else 0."""
    return f"{expr} <= bool {threshold}"


#: Appended to a count of 5-minute samples (:func:`samples`, :func:`hours`) to make it hours.
PER_HOUR = " * 5 / 60"


def samples(expr: str) -> str:
    """How many 5-minute steps of the dashboard's range ``expr`` has a value at (× :data:`PER_HOUR`)."""
    return f"count_over_time(({expr})[$__range:5m])"


def hours(expr: str) -> str:
    """The sum of ``expr`` over 5-minute steps of the dashboard's range (× :data:`PER_HOUR`): for a
    0/1 or 0–1 expression, the hours it held."""
    return f"sum_over_time(({expr})[$__range:5m])"


def node_series(build: Callable[[Sequence[str]], str]) -> str:
    """``build(node matchers)`` for either spelling of the node label, answered as ``Hostname``."""
    upper = build(('Hostname!=""', 'Hostname=~"$node"'))
    lower = build(('hostname!=""', 'hostname=~"$node"'))
    return f'({upper} or label_replace({lower}, "Hostname", "$1", "hostname", "(.+)"))'


def on_node(metric: str, *matchers: str, wrap: Wrap = same) -> str:
    """A metric of the selected nodes' GPUs, ``wrap``-ped."""
    return node_series(lambda node: wrap(sel(metric, *node, *matchers)))


def per_gpu(expr: str, labels: str = NODE_GPU) -> str:
    """One value per GPU of a node expression: dcgm-exporter's per-pod copies collapse into one."""
    return by(labels, "max", expr)


def workload_of_pods(namespace: str, wrap: Wrap = same) -> str:
    """``(cluster, namespace, pod) → workload`` from kube-state-metrics, resolved as the analyzer does:
    pod → ReplicaSet → Deployment, else the pod's own controller (Job, StatefulSet…), else the bare pod."""
    rs_owner = wrap(sel("kube_pod_owner", namespace, 'owner_kind="ReplicaSet"'))
    deployment = wrap(sel("kube_replicaset_owner", namespace, 'owner_kind="Deployment"'))
    controller = wrap(sel("kube_pod_owner", namespace, 'owner_kind!~"ReplicaSet|<none>"'))
    bare = wrap(sel("kube_pod_owner", namespace, 'owner_kind="<none>"'))
    deployment_of_rs = (
        f'label_replace(label_replace({deployment}, "workload", "$1", "owner_name", "(.+)"), '
        f'"owner_name", "$1", "replicaset", "(.+)")'
    )
    return (
        "(\n"
        "  max by (cluster, namespace, pod, workload) (\n"
        f"    {rs_owner}\n"
        "    * on (cluster, namespace, owner_name) group_left (workload)\n"
        f"    max by (cluster, namespace, owner_name, workload) (\n      {deployment_of_rs}\n    )\n"
        "  )\n"
        "  or max by (cluster, namespace, pod, workload) "
        f'(label_replace({controller}, "workload", "$1", "owner_name", "(.+)"))\n'
        "  or max by (cluster, namespace, pod, workload) "
        f'(label_replace({bare}, "workload", "$1", "pod", "(.+)"))\n'
        ")"
    )


def by_workload(expr: str, namespace: str) -> str:
    """``expr`` (per pod) with each pod's ``workload`` label joined on."""
    return (
        f"{expr} * on (cluster, namespace, pod) group_left (workload) "
        f"{workload_of_pods(namespace, over('max_over_time', '$__range'))}"
    )


def cpu_share(numerator: str, denominator: str, pods: str) -> str:
    """A per-pod CPU ratio, kept to the pods that hold a GPU."""
    keys = "cluster, namespace, pod"
    return (
        f"({by(keys, 'sum', numerator)} / {by(keys, 'sum', denominator)}) "
        f"and on ({keys}) {by(keys, 'group', pods)}"
    )
