"""Unmet GPU demand, and which ``when: demand`` actions would meet it.

Pure: plain Kubernetes JSON in (pods, Kueue Workloads), decisions out; the adapter (reaper.cluster)
lists the objects, the planner hands over what its actions would free (:class:`Offer`).

Demand is what the scheduler or Kueue is holding back for want of GPUs:

* a pod Pending whose ``PodScheduled`` condition is False with reason ``Unschedulable`` (not one
  waiting on a scheduling gate, an image pull or a volume), asking for a GPU resource;
* a Kueue Workload waiting for admission (neither ``QuotaReserved`` nor ``Admitted`` is True, and it
  is active: a Workload the reaper deactivated is not demand), for each pod of its ``podSets``.

Each pending pod is one :class:`Want`: its GPUs must be freed on one node (the scheduler places a
pod on one node), of the same resource, on a node whose ``nvidia.com/gpu.product`` the pod accepts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reaper import names

# NVIDIA's GPU feature discovery labels each GPU node with its product (NVIDIA-H100-80GB-HBM3…).
PRODUCT_LABEL = "nvidia.com/gpu.product"
# The phrase every skip of a ``when: demand`` action starts with (docs/reaper.md).
NO_DEMAND = "no unmet GPU demand this action would meet"
# A Workload's podSet count is tenant-written: more pods than this are not believed.
_MAX_PODS_PER_SET = 10_000


@dataclass(frozen=True, slots=True)
class Products:
    """The GPU products a pod accepts, from its ``nvidia.com/gpu.product`` node selector and
    required node affinity; ``Products()`` accepts any node."""

    selected: str | None = None  # spec.nodeSelector's value
    # The required affinity's terms (any one must hold), each its product expressions (all must):
    # (operator, values). Empty: the affinity says nothing of the product.
    terms: tuple[tuple[tuple[str, tuple[str, ...]], ...], ...] = ()

    @property
    def constrained(self) -> bool:
        return self.selected is not None or bool(self.terms)

    def accepts(self, product: str | None) -> bool:
        if self.selected is not None and product != self.selected:
            return False
        return not self.terms or any(all(_holds(op, values, product) for op, values in t) for t in self.terms)

    def describe(self) -> str:
        parts = [f"{PRODUCT_LABEL}={self.selected}"] if self.selected is not None else []
        for term in self.terms:
            parts.append(
                " and ".join(
                    f"{PRODUCT_LABEL} {op.lower()} ({', '.join(values)})"
                    if values
                    else f"{op} {PRODUCT_LABEL}"
                    for op, values in term
                )
            )
        return " or ".join(parts)


def _holds(operator: str, values: tuple[str, ...], product: str | None) -> bool:
    match operator:
        case "In":
            return product in values
        case "NotIn":
            return product not in values
        case "Exists":
            return product is not None
        case "DoesNotExist":
            return product is None
    return False  # Gt, Lt (numbers) or a typo: the scheduler would not match a product by it either


@dataclass(frozen=True, slots=True)
class Want:
    """One pending pod's GPUs: ``count`` of ``resource`` to be freed on one node it accepts."""

    source: str  # "Pod ml/train", "Kueue Workload ml/job-x-1a2b3 (podSet workers, pod 2 of 4)"
    resource: str
    count: int
    products: Products = Products()

    def describe(self) -> str:
        on = f" on {self.products.describe()}" if self.products.constrained else ""
        one_node = " on one node" if self.count > 1 else ""
        return f"{self.source} ({self.count} × {self.resource}{one_node}{on})"


@dataclass(frozen=True)
class PendingDemand:
    """What a run read of the demand: the wants, and what it could not read."""

    wants: tuple[Want, ...] = ()
    # Why demand could not be read (no right to list pods, say): nothing is then acted on for it.
    unreadable: str | None = None
    kueue: str = ""  # what was read of Kueue: "Kueue not installed: no Kueue demand", say

    @property
    def gpus(self) -> int:
        return sum(w.count for w in self.wants)

    def describe(self) -> str:
        if self.unreadable is not None:
            return f"GPU demand unknown ({self.unreadable})"
        pods = len(self.wants)
        what = (
            f"{self.gpus} GPUs pending in {pods} pod{'s' if pods != 1 else ''}" if pods else "no GPU pending"
        )
        return f"{what}; {self.kueue}" if self.kueue else what


# --- reading the demand from plain objects ---------------------------------------------------------------


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def is_gpu_resource(name: str, extra: Sequence[str] = ()) -> bool:
    return name.startswith(names.GPU_RESOURCE_PREFIXES) or name in extra


def _quantity(value: Any) -> int:
    """A GPU count: extended resources are whole numbers; anything else asks for nothing readable."""
    text = str(value).strip()
    return int(text) if text.isdigit() and len(text) <= 6 else 0


def pod_gpus(pod_spec: Mapping[str, Any], extra: Sequence[str] = ()) -> dict[str, int]:
    """The GPUs one pod needs, by resource, as the scheduler counts them: the containers' sum, or
    the largest init container's where that is more. An extended resource's limit is its request."""
    need: dict[str, int] = {}

    def asked(container: Any) -> dict[str, int]:
        resources = _mapping(_mapping(container).get("resources"))
        requests, limits = _mapping(resources.get("requests")), _mapping(resources.get("limits"))
        return {
            str(name): _quantity(requests.get(name, limits.get(name)))
            for name in {*requests, *limits}
            if is_gpu_resource(str(name), extra)
        }

    for container in _list(pod_spec.get("containers")):
        for name, n in asked(container).items():
            need[name] = need.get(name, 0) + n
    for container in _list(pod_spec.get("initContainers")):
        for name, n in asked(container).items():
            need[name] = max(need.get(name, 0), n)
    return {name: n for name, n in need.items() if n > 0}


def products_of(pod_spec: Mapping[str, Any]) -> Products:
    selected = _mapping(pod_spec.get("nodeSelector")).get(PRODUCT_LABEL)
    affinity = _mapping(_mapping(_mapping(pod_spec.get("affinity")).get("nodeAffinity")))
    required = _mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = []
    for term in _list(required.get("nodeSelectorTerms")):
        exprs = tuple(
            (str(e.get("operator") or ""), tuple(str(v) for v in _list(e.get("values"))))
            for e in _list(_mapping(term).get("matchExpressions"))
            if isinstance(e, Mapping) and e.get("key") == PRODUCT_LABEL
        )
        if not exprs:
            return Products(str(selected) if selected is not None else None)  # this term takes any product
        terms.append(exprs)
    return Products(str(selected) if selected is not None else None, tuple(terms))


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next(
        (c for c in _list(status.get("conditions")) if isinstance(c, Mapping) and c.get("type") == kind), None
    )


def _name(obj: Mapping[str, Any]) -> str:
    meta = _mapping(obj.get("metadata"))
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def unschedulable(pod: Mapping[str, Any]) -> bool:
    """Pending because the scheduler found no node for it (not gated, not pulling an image)."""
    status = _mapping(pod.get("status"))
    if status.get("phase") != "Pending" or _mapping(pod.get("spec")).get("nodeName"):
        return False
    scheduled = _condition(status, "PodScheduled")
    return (
        scheduled is not None
        and scheduled.get("status") == "False"
        and scheduled.get("reason") == "Unschedulable"
    )


def pending_pods(pods: Iterable[Mapping[str, Any]], extra: Sequence[str] = ()) -> list[Want]:
    """One want per GPU resource of each unschedulable pod asking for GPUs."""
    wants = []
    for pod in pods:
        if not unschedulable(pod):
            continue
        spec = _mapping(pod.get("spec"))
        products = products_of(spec)
        for resource, count in sorted(pod_gpus(spec, extra).items()):
            wants.append(Want(f"Pod {_name(pod)}", resource, count, products))
    return wants


def waiting_for_admission(workload: Mapping[str, Any]) -> bool:
    """A Kueue Workload queued for quota: active, not finished, neither reserved nor admitted."""
    if _mapping(workload.get("spec")).get("active") is False:
        return False  # deactivated (by the reaper, say): nobody is waiting on it
    status = _mapping(workload.get("status"))
    return not any(
        (c := _condition(status, kind)) is not None and c.get("status") == "True"
        for kind in ("QuotaReserved", "Admitted", "Finished")
    )


def queued_workloads(workloads: Iterable[Mapping[str, Any]], extra: Sequence[str] = ()) -> list[Want]:
    """One want per pod (and GPU resource) of each Kueue Workload waiting for admission."""
    wants = []
    for workload in workloads:
        if not waiting_for_admission(workload):
            continue
        for pod_set in _list(_mapping(workload.get("spec")).get("podSets")):
            pod_set = _mapping(pod_set)
            spec = _mapping(_mapping(pod_set.get("template")).get("spec"))
            count = pod_set.get("count", 1)
            pods = count if isinstance(count, int) and not isinstance(count, bool) else 0
            pods = min(max(pods, 0), _MAX_PODS_PER_SET)
            products = products_of(spec)
            for resource, n in sorted(pod_gpus(spec, extra).items()):
                for i in range(pods):
                    where = f"podSet {pod_set.get('name') or '?'}" + (
                        f", pod {i + 1} of {pods}" if pods > 1 else ""
                    )
                    wants.append(Want(f"Kueue Workload {_name(workload)} ({where})", resource, n, products))
    return wants


# --- meeting it ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Offer:
    """What one planned action would free: its devices, split over the nodes they are on."""

    key: str  # the planned action's identity (its target's key)
    wasted: float  # wasted GPU-hours: the most wasteful are chosen first
    gpus: int
    resources: frozenset[str]  # the GPU resources the stopped workload requests
    nodes: tuple[tuple[str, str | None], ...]  # (node, its GPU product), in the finding's order

    @property
    def resource(self) -> str | None:
        """The one resource it frees; None where it requests several (what each gets is unknown)."""
        return next(iter(self.resources)) if len(self.resources) == 1 else None

    def units(self) -> dict[str, int]:
        """GPUs freed per node: its devices over its nodes, evenly (replicas of one template ask alike)."""
        if not self.nodes or self.gpus <= 0:
            return {}
        base, more = divmod(self.gpus, len(self.nodes))
        out: dict[str, int] = {}
        for i, (node, _) in enumerate(self.nodes):
            out[node] = out.get(node, 0) + base + (1 if i < more else 0)
        return {n: u for n, u in out.items() if u > 0}

    def describe(self) -> str:
        where = ", ".join(f"{n} ({p})" if p else n for n, p in self.nodes) or "no known node"
        what = " and ".join(sorted(self.resources)) or "no GPU resource"
        return f"{self.gpus} × {what} on {where}"


@dataclass(frozen=True)
class Selection:
    """The offers chosen, with the wants each helps meet; the wants nothing chosen meets."""

    served: Mapping[str, tuple[Want, ...]] = field(default_factory=dict)
    unmet: tuple[Want, ...] = ()

    def pending_gpus(self, key: str) -> int:
        return sum(w.count for w in self.served.get(key, ()))

    def serves(self, key: str) -> str:
        wants = self.served.get(key, ())
        return "; ".join(w.describe() for w in wants)


def select(offers: Sequence[Offer], wants: Sequence[Want]) -> Selection:
    """The offers to act on: for each want, biggest first, the node where the most wasteful offers
    free its count (what earlier choices freed there and left unused counts first), and no more.

    A want that no node can meet with what the offers free is left unmet; offers chosen for nothing
    are not acted on. Each want met uses at least one freed GPU, and a want no node can meet stays so
    for every later want of its shape (choices only use GPUs up), so the work is bounded by the GPUs
    offered, however many pods wait."""
    products = {n: p for o in offers for n, p in o.nodes}
    units = {o.key: o.units() for o in offers}
    resource = {o.key: o.resource for o in offers}
    on_node: dict[str, list[Offer]] = {}  # each node's offers, the most wasteful first
    for o in sorted(offers, key=lambda o: (-o.wasted, o.key)):
        for n in units[o.key]:
            on_node.setdefault(n, []).append(o)
    chosen: dict[str, None] = {}  # in the order chosen: GPUs freed earlier are used first
    left: dict[tuple[str, str], int] = {}  # (offer key, node) → GPUs freed there and not yet used
    pool: dict[tuple[str, str | None], int] = {}  # (node, resource) → the same, summed
    served: dict[str, list[Want]] = {}
    unmet: list[Want] = []
    hopeless: set[tuple[int, str, Products]] = set()
    for want in sorted(wants, key=lambda w: (-w.count, w.source, w.resource)):
        shape = (want.count, want.resource, want.products)
        best: tuple[tuple[bool, float, int, str], str, list[Offer]] | None = None
        for node in sorted(on_node) if shape not in hopeless else ():
            if not want.products.accepts(products.get(node)):
                continue
            have = pool.get((node, want.resource), 0)
            taken: list[Offer] = []
            for o in on_node[node]:
                if have >= want.count:
                    break
                if o.key not in chosen and o.resource == want.resource:
                    taken.append(o)
                    have += units[o.key][node]
            if have < want.count:
                continue
            # Reuse before adding; then the most waste reclaimed; then the fewest GPUs freed.
            score = (bool(taken), -sum(o.wasted for o in taken), sum(o.gpus for o in taken), node)
            if best is None or score < best[0]:
                best = (score, node, taken)
        if best is None:
            hopeless.add(shape)
            unmet.append(want)
            continue
        _, node, taken = best
        for o in taken:
            chosen[o.key] = None
            for n, u in units[o.key].items():
                left[(o.key, n)] = u
                pool[(n, o.resource)] = pool.get((n, o.resource), 0) + u
        need = want.count
        for key in chosen:
            u = left.get((key, node), 0)
            if need <= 0 or u <= 0 or resource[key] != want.resource:
                continue
            use = min(u, need)
            left[(key, node)] = u - use
            pool[(node, want.resource)] -= use
            need -= use
            served.setdefault(key, []).append(want)
    return Selection(served={k: tuple(v) for k, v in served.items()}, unmet=tuple(unmet))


def why_not(offer: Offer, demand: PendingDemand, selection: Selection) -> str:
    """Why an offer is not acted on: the one sentence every such skip starts with, and the detail."""
    if demand.unreadable is not None:
        return f"{NO_DEMAND} that the run could read: {demand.unreadable}; never acted on without it"
    if not demand.wants:
        kueue = f"; {demand.kueue}" if demand.kueue else ""
        return f"{NO_DEMAND}: no pod is pending unschedulable for a GPU{kueue}"
    if offer.resource is None:
        return (
            f"{NO_DEMAND}: it requests several GPU resources ({', '.join(sorted(offer.resources))}), "
            "so what it frees of each is not known"
        )
    usable = [
        w
        for w in demand.wants
        if w.resource == offer.resource and any(w.products.accepts(p) for _, p in offer.nodes)
    ]
    if not usable:
        asked = "; ".join(sorted({w.describe() for w in demand.wants})[:3])
        return f"{NO_DEMAND}: it frees {offer.describe()}, and the pending demand asks otherwise: {asked}"
    unmet = [w for w in selection.unmet if w in usable]
    if unmet:
        return f"{NO_DEMAND}: it frees {offer.describe()}, too few on one node for " + "; ".join(
            w.describe() for w in unmet[:3]
        )
    return f"{NO_DEMAND}: the pending demand it could serve is met by more wasteful candidates"
