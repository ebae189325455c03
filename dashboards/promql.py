"""The PromQL vocabulary every dashboard shares: selectors scoped to the template variables, and the
expressions that read dcgm-exporter's and gpu-exporter's series alike, in either DCGM naming.

Conventions, kept by every helper here so that no dashboard has to remember them:

* every selector carries ``cluster=~"$cluster"``; the variable's "All" is ``.*``, which also matches
  series without a ``cluster`` label, so a single Prometheus needs no relabelling;
* a breakdown keeps ``cluster`` among its grouping labels (:data:`DEVICE`, ``by_cluster``), so with
  several clusters selected no two clusters are ever added together; only totals combine them;
* a DCGM field is read through :func:`field`, under its legacy name and its DCGM 4.7 one
  (``common.metric_names.DCGM_4_7``), answered in the legacy unit (percent, MiB, MHz, mJ) whichever
  the series carry, so that a threshold means the same on both namings. It answers one value per
  group of the labels it is asked to keep (a device, a pod's device, a GPU of a node): dcgm-exporter's
  per-pod copies of a shared GPU collapse into one, and a device seen under both names for a scrape
  or two (its node upgrading) counts once. At one instant the 4.7 name wins; over a window both
  parts of a device's history count (a maximum over both, a mean over all their samples);
* gpu-exporter serves a shared GPU's series once, without pod labels, and each pod's share as
  ``gpu_pod_*``: pod-level expressions read those next to the DCGM series;
* MIG instances have no ``DCGM_FI_DEV_GPU_UTIL`` of their own: their graphics-engine ratio stands in;
* the node label is ``hostname`` as dcgm-exporter writes it since 4.8.3, or ``Hostname`` as it did
  before (and as gpu-exporter may): expressions read both and answer with ``hostname``; the driver
  version label is answered as DCGM 4.7's ``DCGM_FI_SYSTEM_DRIVER_VERSION``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from common import metric_names as m

CLUSTER = 'cluster=~"$cluster"'
HELD = 'pod!=""'
MIG_ONLY = 'GPU_I_ID!=""'
#: One device: a whole GPU or a MIG instance (``GPU_I_ID`` is empty for whole GPUs).
DEVICE = "cluster, UUID, GPU_I_ID"
#: One device held by one pod, with what a legend names it by.
POD_DEVICE = f"cluster, namespace, pod, {m.HOSTNAME}, gpu, UUID, GPU_I_ID"
#: One physical GPU on one node, as the node dashboard draws it.
NODE_GPU = f"cluster, {m.HOSTNAME}, gpu, UUID"
#: Tells apart the namings (and node-label spellings) of one device's series while they are added up.
BRANCH_LABEL = "dcgm_naming"

#: A function that wraps a selector, e.g. in ``max_over_time(…[15m])``.
Wrap = Callable[[str], str]

MIB = 1048576


def same(selector: str) -> str:
    return selector


@dataclass(frozen=True)
class Over:
    """A range function over a window: ``Over("avg_over_time", "$__range")(sel)`` is
    ``avg_over_time(sel[$__range])``. :func:`field` also reads ``function`` to know how a device's
    readings under two names combine."""

    function: str
    window: str

    def __call__(self, selector: str) -> str:
        return f"{self.function}({selector}[{self.window}])"


def over(function: str, window: str) -> Over:
    """``over("avg_over_time", "$__range")`` wraps a selector as ``avg_over_time(sel[$__range])``."""
    return Over(function, window)


def sel(metric: str, *matchers: str) -> str:
    """``metric{cluster=~"$cluster", matchers…}``."""
    return f"{metric}{{{', '.join((CLUSTER, *matchers))}}}"


def by(labels: str, aggregation: str, expr: str) -> str:
    return f"{aggregation} by ({labels}) ({expr})"


# -- one field under either naming -------------------------------------------------------------------


def _to_legacy_unit(to_current: float) -> str:
    """The arithmetic that turns a 4.7 value back into the legacy unit (`` * 100`` for a ratio)."""
    if to_current == 1.0:
        return ""
    return f" * {round(1 / to_current)}" if to_current < 1.0 else f" / {round(to_current)}"


def _names(name: str) -> list[tuple[str, str]]:
    """The names ``name`` (a legacy one) is served under, the 4.7 one first, each with the arithmetic
    that brings it to the legacy unit."""
    renamed = m.BY_LEGACY.get(name)
    if renamed is None:
        return [(name, "")]
    return [(renamed.current, _to_legacy_unit(renamed.to_current)), (name, "")]


#: ``node=True``: a selector per spelling of the node label, each filtered by the ``$node`` variable.
_NODE_MATCHERS = tuple((f'{label}!=""', f'{label}=~"$node"') for label in (m.HOSTNAME, m.HOSTNAME_LEGACY))


def _relabel(expr: str, keep: str) -> str:
    """``expr`` with the node and driver labels under the names the answers use, where ``keep`` has them."""
    kept = {label.strip() for label in keep.split(",")}
    if m.HOSTNAME in kept:
        expr = f'label_replace({expr}, "{m.HOSTNAME}", "$1", "{m.HOSTNAME_LEGACY}", "(.+)")'
    if m.DRIVER_VERSION_LABEL_4_7 in kept:
        expr = (
            f'label_replace({expr}, "{m.DRIVER_VERSION_LABEL_4_7}", "$1", "{m.DRIVER_VERSION_LABEL}", "(.+)")'
        )
    return expr


def _tag(expr: str, branch: int) -> str:
    """Marks one naming's part so that ``or`` keeps it next to the others' (the first stays as it is)."""
    return expr if branch == 0 else f'label_replace({expr}, "{BRANCH_LABEL}", "{branch}", "", "")'


def _union(parts: Sequence[str]) -> str:
    return " or ".join(_tag(part, i) for i, part in enumerate(parts))


def alternatives(
    names: Sequence[tuple[str, str]],
    *matchers: str,
    keep: str,
    window: Over | None = None,
    node: bool = False,
) -> str:
    """One value per ``keep`` group of a reading served under any of ``names`` (each with the
    arithmetic that brings it to one unit), ``window``-ed.

    At an instant, the first name a group has wins. Over a window, every name's samples count: the
    maximum (or minimum) of all of them, the mean of all of them, the sum of each name's increase or
    rate (of one copy of each name's series)."""
    spellings = _NODE_MATCHERS if node else ((),)
    selectors = [(sel(name, *spelling, *matchers), unit) for name, unit in names for spelling in spellings]
    if window is None:
        return "(" + " or ".join(f"{by(keep, 'max', _relabel(s, keep))}{unit}" for s, unit in selectors) + ")"
    function = window.function
    if function in ("max_over_time", "min_over_time"):
        parts = [f"{_relabel(window(s), keep)}{unit}" for s, unit in selectors]
        return by(keep, function.removesuffix("_over_time"), _union(parts))
    if function == "avg_over_time":
        sums = [f"{_relabel(over('sum_over_time', window.window)(s), keep)}{unit}" for s, unit in selectors]
        counts = [_relabel(over("count_over_time", window.window)(s), keep) for s, _ in selectors]
        return f"({by(keep, 'sum', _union(sums))} / {by(keep, 'sum', _union(counts))})"
    if function in ("rate", "increase"):
        parts = [f"{by(keep, 'max', _relabel(window(s), keep))}{unit}" for s, unit in selectors]
        return by(keep, "sum", _union(parts))
    raise ValueError(f"no rule to combine {function} across namings")


def field(name: str, *matchers: str, keep: str, window: Over | None = None, node: bool = False) -> str:
    """DCGM field ``name`` (its legacy name), in the legacy unit, one value per ``keep`` group,
    from whichever naming each device serves (:func:`alternatives`). ``node``: the selected nodes
    only. Series that kept their name across the namings (gpu-exporter's own) are read the same way,
    for their node label."""
    return alternatives(_names(name), *matchers, keep=keep, window=window, node=node)


def present(name: str, *matchers: str, keep: str) -> str:
    """The ``keep`` groups that serve DCGM field ``name`` under either naming (value 1)."""
    return by(keep, "group", " or ".join(sel(n, *matchers) for n, _ in _names(name)))


# -- utilization, memory and allocation ----------------------------------------------------------------


def device_util(*matchers: str, window: Over | None = None, keep: str = DEVICE) -> str:
    """Utilization (%) of every device: whole GPUs' gauge, MIG instances' engine ratio."""
    gauge = field(m.GPU_UTIL, *matchers, keep=keep, window=window)
    engine = field(m.PROF_GR_ENGINE_ACTIVE, *matchers, MIG_ONLY, keep=keep, window=window)
    return f"({gauge} or 100 * {engine})"


def per_device_util(*matchers: str, window: Over | None = None) -> str:
    """One utilization (%) per device, whatever number of pods dcgm-exporter copied it onto."""
    return device_util(*matchers, window=window)


def pod_util(*matchers: str, window: Over | None = None) -> str:
    """Utilization (%) per pod and device (:data:`POD_DEVICE`): the device's gauge where a pod holds
    the device, a pod's own share of a GPU that gpu-exporter saw shared."""
    gauge = field(m.GPU_UTIL, HELD, *matchers, keep=POD_DEVICE, window=window)
    share = field(m.POD_SM_UTILIZATION, HELD, *matchers, keep=POD_DEVICE, window=window)
    engine = field(m.PROF_GR_ENGINE_ACTIVE, HELD, *matchers, MIG_ONLY, keep=POD_DEVICE, window=window)
    return f"({gauge} or {share} or 100 * {engine})"


def pod_memory_mib(*matchers: str, window: Over | None = None, keep: str = POD_DEVICE) -> str:
    """Framebuffer memory (MiB) per pod and device, gpu-exporter's per-pod bytes converted."""
    whole = field(m.FB_USED, HELD, *matchers, keep=keep, window=window)
    share = field(m.POD_MEMORY_USED, HELD, *matchers, keep=keep, window=window)
    return f"({whole} or {share} / {MIB})"


#: One pod's hold on one device.
POD_HOLD = "cluster, namespace, pod, UUID, GPU_I_ID"


def gpu_pods(*matchers: str) -> str:
    """Every (pod, device) pair in use: one series each, whichever exporter (and naming) attributed it."""
    names = [n for n, _ in _names(m.FB_USED)] + [m.POD_MEMORY_USED]
    return by(POD_HOLD, "group", " or ".join(sel(n, HELD, *matchers) for n in names))


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


def on_node(name: str, *matchers: str, keep: str = NODE_GPU, window: Over | None = None) -> str:
    """DCGM field (or gpu-exporter series) ``name`` of the selected nodes' GPUs, one value per ``keep``."""
    return field(name, *matchers, keep=keep, window=window, node=True)


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
