"""rbac.admissionPolicy: the reaper's updates of the kinds it may patch change only what its code writes.

RBAC grants ``patch`` on a kind or not; it cannot say which fields. The chart's optional
ValidatingAdmissionPolicy does, and this module checks its CEL without an API server, with Google's
CEL implementation (cel-expr-python), the way the API server evaluates a policy: match on the
operation and resource, then the match conditions, then the variables in order, then every
validation, an evaluation error counting as a denial (failurePolicy Fail).

What the policy must allow is not written down here: ``gpu-reaper`` runs for real against the
emulated API server, giving a notice on every one of them first (its annotations on the objects), then
stopping one workload under every root kind it knows (and one custom kind scaled through ``/scale``),
handing two to the KEDA HTTP add-on (``wake: keda-http``: one through the add-on's objects, one by
pausing the ScaledObject already on it), cordoning a node, then restoring everything, and each update it sends
becomes the admission request the API server would evaluate (the stored object before, the object
after its merge patch). Every one must be admitted; the fields they change, by resource, must be
exactly the fields the policy names; every kind the chart lets the reaper patch must be matched; and
the same requests changing anything else (a pod template, a label, an owner, another annotation,
the status) must be denied.
"""

from __future__ import annotations

import asyncio
import copy
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from cel_expr_python import cel

from cli.reaper import main
from common.model import FindingKind
from common.timeutil import rfc3339
from harness.chart import CHART_DIR, NAMESPACE, Manifest, only, render, values_file
from harness.controllers import CONTROLLERS, _replicas_from
from harness.findings import NOW, finding, report
from harness.kube_emulator import ApiServer, EmulatedCluster
from harness.kube_fixtures import _emulator_loop, emulated_cluster
from harness.rbac import STOP_AND_CORDON_POLICY, grants
from reaper import names, wake
from reaper.kinds import WORKLOAD_KINDS
from simulation import controllers
from simulation.in_memory_cluster import manifest

__all__ = ["_emulator_loop"]

LONG_AGO = NOW - timedelta(days=30)
NS = "research"
WOKEN = "woken"  # wake: keda-http: a Deployment behind a Service, and one a KEDA ScaledObject scales
# The stop-and-cordon policy, with a wake rule for WOKEN first; NOTICE gives a notice on each first.
POLICY = STOP_AND_CORDON_POLICY.replace(
    "rules:\n",
    "rules:\n  - name: wake-idle\n    match: {findings: [idle_endpoint], namespaces: [woken]}\n"
    "    action: scale_to_zero\n    wake: keda-http\n",
)
NOTICE = POLICY.replace("    action: cordon\n", "    action: cordon\n    notice: 1h\n").replace(
    "    action: scale_to_zero\n", "    action: scale_to_zero\n    notice: 1h\n"
)
CUSTOM_API = "serving.example.com/v1"
# Every optional part on, and a custom kind stopped through its scale subresource.
VALUES = values_file("all-enabled-values.yaml") | {
    "rbac": {
        **values_file("all-enabled-values.yaml")["rbac"],
        "scaleSubresources": [{"group": "serving.example.com", "resource": "modelservers"}],
    }
}
RENDERED = render(VALUES)
# The workload holding the GPUs under each root kind the reaper stops, by (kind, name).
HOLDERS = {
    ("StatefulSet", "alice"): lambda: controllers.notebook(NS, "alice", LONG_AGO),
    ("Deployment", "llm-predictor"): lambda: controllers.inference_service(NS, "llm", LONG_AGO),
    ("RayCluster", "ray"): lambda: controllers.ray_cluster(NS, "ray", LONG_AGO),
    ("StatefulSet", "vllm"): lambda: controllers.leader_worker_set(NS, "vllm", LONG_AGO),
    ("Rollout", "canary"): lambda: controllers.argo_rollout(NS, "canary", LONG_AGO),
    ("Job", "train-workers-0"): lambda: controllers.job_set(NS, "train", LONG_AGO),
    ("Job", "sweep"): lambda: controllers.kueue_job(NS, "sweep", LONG_AGO),
    ("Deployment", "ranker"): lambda: [controllers.deployment(NS, "ranker", LONG_AGO, replicas=2)],
    ("StatefulSet", "embeddings"): lambda: [_as("StatefulSet", "embeddings")],
    ("ReplicaSet", "bare"): lambda: [_as("ReplicaSet", "bare")],
    ("Deployment", "served-predictor"): lambda: _model_server(),
}


def _as(kind: str, name: str) -> dict[str, Any]:
    """A StatefulSet or ownerless ReplicaSet holding a GPU, shaped as the Deployment builder makes one."""
    return {**controllers.deployment(NS, name, LONG_AGO, replicas=1), "kind": kind}


def _model_server() -> list[dict[str, Any]]:
    root = {
        "apiVersion": CUSTOM_API,
        "kind": "ModelServer",
        "metadata": {
            "name": "served",
            "namespace": NS,
            "uid": "modelserver-served",
            "resourceVersion": "10",
            "creationTimestamp": rfc3339(LONG_AGO),
        },
        "spec": {"replicas": 2, "model": "llama"},
        "status": {"replicas": 2},
    }
    return [root, controllers.deployment(NS, "served-predictor", LONG_AGO, replicas=2, owner=root)]


# --- the policy, evaluated as the API server does ---------------------------------------------------


@dataclass(frozen=True)
class Update:
    """One UPDATE admission request: who, on which resource, the object before and after."""

    user: str
    group: str
    resource: str
    old: Mapping[str, Any]
    new: Mapping[str, Any]

    @property
    def key(self) -> str:
        return f"{self.group}/{self.resource}"

    def request(self) -> dict[str, Any]:
        return {
            "operation": "UPDATE",
            "userInfo": {"username": self.user},
            "resource": {"group": self.group, "resource": self.resource},
            "namespace": self.new["metadata"].get("namespace", ""),
            "name": self.new["metadata"]["name"],
        }


_ENV = cel.NewEnv(
    variables=dict.fromkeys(("object", "oldObject", "request", "variables", "params"), cel.Type.DYN)
)


class Policy:
    """A rendered ValidatingAdmissionPolicy, its expressions compiled once."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        spec = doc["spec"]
        assert spec["failurePolicy"] == "Fail"
        self.rules = spec["matchConstraints"]["resourceRules"]
        self.conditions = [_ENV.compile(c["expression"]) for c in spec.get("matchConditions", ())]
        self.variables = [(v["name"], _ENV.compile(v["expression"])) for v in spec.get("variables", ())]
        self.validations = [(_ENV.compile(v["expression"]), v["message"]) for v in spec["validations"]]

    def matches(self, update: Update) -> bool:
        return any(
            "UPDATE" in r["operations"]
            and update.group in r["apiGroups"]
            and update.resource in r["resources"]
            for r in self.rules
        )

    def _activation(self, update: Update) -> dict[str, Any]:
        return {
            "object": dict(update.new),
            "oldObject": dict(update.old),
            "request": update.request(),
            "params": None,
        }

    def applies(self, update: Update) -> bool:
        data = self._activation(update)
        return self.matches(update) and all(
            _true(c.eval(data=data), "a match condition") for c in self.conditions
        )

    def variable(self, update: Update, name: str) -> Any:
        return self._variables(update)[name]

    def _variables(self, update: Update) -> dict[str, Any]:
        computed: dict[str, Any] = {}
        for name, expression in self.variables:
            result = expression.eval(data={**self._activation(update), "variables": computed})
            assert result.type() != cel.Type.ERROR, f"variables.{name}: {result.value()}"
            computed[name] = result.plain_value()
        return computed

    def denials(self, update: Update) -> list[str]:
        """The messages of the validations that fail (an error fails too); [] when admitted."""
        data = {**self._activation(update), "variables": self._variables(update)}
        out = []
        for expression, message in self.validations:
            result = expression.eval(data=data)
            if result.type() == cel.Type.ERROR:
                out.append(f"{message} (error: {result.value()})")
            elif result.value() is not True:
                out.append(message)
        return out


def _true(result: Any, what: str) -> bool:
    assert result.type() == cel.Type.BOOL, f"{what} evaluated to {result.type()}: {result.value()}"
    return bool(result.value())


def _policy(manifests: list[Manifest]) -> Policy:
    return Policy(only(manifests, "ValidatingAdmissionPolicy"))


def _account(manifests: list[Manifest]) -> tuple[str, str]:
    pod = only(manifests, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return NAMESPACE, pod["serviceAccountName"]


REAPER = "system:serviceaccount:{}:{}".format(*_account(RENDERED))


# --- what the reaper really sends ------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, as the API server applies application/merge-patch+json."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


@dataclass(frozen=True)
class Sent:
    """A PATCH the emulator accepted: the resource path, and the stored object before it."""

    group: str
    resource: str
    subresource: str | None
    namespace: str | None
    before: dict[str, Any]
    body: dict[str, Any]


@pytest.fixture(scope="module")
def sent(_emulator_loop: asyncio.AbstractEventLoop, tmp_path_factory: pytest.TempPathFactory) -> list[Sent]:
    """Every PATCH of a stop and restore of each root kind, and of a cordon and uncordon."""
    tmp_path = tmp_path_factory.mktemp("admission")
    recorded: list[Sent] = []
    handle = ApiServer._handle

    async def recording(self: ApiServer, request: Any) -> Any:
        before = None
        if request.method.value == "PATCH" and request.resource is not None:
            key = (request.resource, request.namespace, request.name)
            # kmock's object store has no .get().
            stored = self.objects[key] if key in self.objects else None  # noqa: SIM401
            before = copy.deepcopy(stored.raw) if stored is not None and not stored.deleted else None
            body = copy.deepcopy(request.data)
        response = await handle(self, request)  # a refused request (409, 404) raises: not recorded
        if before is not None:
            resource = request.resource
            recorded.append(
                Sent(
                    str(resource.group or ""),
                    str(resource.plural),
                    request.subresource or None,
                    request.namespace,
                    before,
                    body,
                )
            )
        return response

    with pytest.MonkeyPatch.context() as patch, emulated_cluster(_emulator_loop, tmp_path) as cluster:
        patch.setattr(ApiServer, "_handle", recording)
        _run_everything(cluster, tmp_path)
    return recorded


def _woken() -> list[dict[str, Any]]:
    """Two Deployments to wake: one behind a Service, one whose KEDA ScaledObject is paused instead."""
    chat = controllers.deployment(WOKEN, "chat", LONG_AGO, replicas=2)
    service = manifest(
        "Service",
        "chat",
        WOKEN,
        spec={"selector": {"app": "chat"}, "ports": [{"name": "http", "port": 8000}]},
    )
    fed = controllers.deployment(WOKEN, "fed", LONG_AGO, replicas=2)
    scaled = manifest(
        "ScaledObject",
        "fed",
        WOKEN,
        spec={"scaleTargetRef": {"name": "fed"}, "triggers": [{"type": "cpu", "metadata": {"value": "50"}}]},
    )
    return [chat, service, fed, scaled]


def _run_everything(cluster: EmulatedCluster, tmp_path: Path) -> None:
    cluster.declare(*(k.name for k in WORKLOAD_KINDS), "ScaledObject", "KueueWorkload", "Service")
    cluster.install_crd("http.keda.sh/v1beta1", "InterceptorRoute", "interceptorroutes", scale=False)
    cluster.install_crd(CUSTOM_API, "ModelServer", "modelservers", scale=True)
    follow = _replicas_from("ModelServer", "Deployment", lambda root: int(root["spec"]["replicas"]))
    cluster.call(lambda: cluster.server.controllers.extend([*CONTROLLERS, follow]))
    cluster.seed(
        [
            *(manifest("Namespace", n) for n in (NS, NAMESPACE, WOKEN)),
            *(obj for build in HOLDERS.values() for obj in build()),
            *_woken(),
            manifest(
                "Node", "gpu-spare", created=LONG_AGO, spec={}, status={"capacity": {"nvidia.com/gpu": "8"}}
            ),
            manifest(
                "Node", "gpu-busy", created=LONG_AGO, spec={}, status={"capacity": {"nvidia.com/gpu": "8"}}
            ),
        ]
    )
    idle = [finding(FindingKind.IDLE_ENDPOINT, name=n, namespace=NS, workload_kind=k) for k, n in HOLDERS]
    idle += [finding(FindingKind.IDLE_ENDPOINT, name=n, namespace=WOKEN) for n in ("chat", "fed")]
    spare = finding(FindingKind.LOW_UTILIZATION, name="gpu-spare", workload_kind="Node")
    findings = tmp_path / "findings.json"
    findings.write_text(report(*idle, spare).to_json(), encoding="utf-8")
    policy, noticing = tmp_path / "policy.yaml", tmp_path / "notice.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    noticing.write_text(NOTICE, encoding="utf-8")
    kube = ["--kubeconfig", str(cluster.kubeconfig), "--reaper-namespace", NAMESPACE]
    run = ["run", "--findings", str(findings), "--end", rfc3339(NOW), "--apply", "--notice-annotations"]
    # Notices first (their annotations), then the actions, which use them up (and take them off).
    for argv in ([*run, "--policy", str(noticing)], [*run, "--policy", str(policy)], ["restore", "--all"]):
        out = io.StringIO()
        assert main([*argv, *kube], stdout=out) == 0, out.getvalue()
        assert " failed=0" in out.getvalue().strip().splitlines()[-1], out.getvalue()
    assert not [o for o in cluster.objects("Deployment") if names.NOTICED_AT in _annotations(o)]
    assert wake.PAUSED_BY_REAPER not in _annotations(cluster.obj("ScaledObject", WOKEN, "fed"))


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return obj["metadata"].get("annotations") or {}


def _own(s: Sent) -> bool:
    """The reaper's bookkeeping in its own namespace (Lease, state ConfigMap), which RBAC names."""
    return s.namespace == NAMESPACE and s.resource in ("leases", "configmaps")


def _updates(sent: list[Sent]) -> list[Update]:
    """The reaper's object updates (its /scale writes and bookkeeping left out) as admission requests."""
    return [
        Update(REAPER, s.group, s.resource, s.before, merge_patch(s.before, s.body))
        for s in sent
        if s.subresource is None and not _own(s)
    ]


def _changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> set[str]:
    keys = set(old) | set(new)
    return {k for k in keys if k not in old or k not in new or old[k] != new[k]}


# --- the tests ------------------------------------------------------------------------------------


def test_every_update_the_reaper_sends_is_admitted(sent: list[Sent]) -> None:
    policy = _policy(RENDERED)
    updates = _updates(sent)
    assert {u.key for u in updates} >= {
        "kubeflow.org/notebooks",
        "/nodes",
        "serving.example.com/modelservers",
        "apps/deployments",
        "apps/statefulsets",
        "apps/replicasets",
        "keda.sh/scaledobjects",
    }
    refused = {
        f"{u.key} {u.new['metadata']['name']}: {d}"
        for u in updates
        if policy.applies(u)
        for d in policy.denials(u)
    }
    assert refused == set()


def test_every_write_outside_its_own_objects_goes_through_scale_or_the_policy(sent: list[Sent]) -> None:
    """A Deployment, StatefulSet or ReplicaSet is scaled through /scale only; any other object the
    reaper writes is of a kind the policy checks."""
    policy = _policy(RENDERED)
    unchecked = {u.key for u in _updates(sent) if not policy.applies(u)}
    assert unchecked == set()
    scaled = {s.resource for s in sent if s.subresource == "scale"}
    assert scaled == {"deployments", "statefulsets", "replicasets", "modelservers"}
    # The only patches of the kinds scaled through /scale: a notice's two annotations, on and off.
    for u in _updates(sent):
        if u.group == "apps":
            assert _changed(u.old.get("spec") or {}, u.new.get("spec") or {}) == set(), u.key
            assert _changed(_annotations(u.old), _annotations(u.new)) == {names.NOTICED_AT, names.ACT_AFTER}


def test_the_policy_names_exactly_the_fields_the_reaper_writes(sent: list[Sent]) -> None:
    policy = _policy(RENDERED)
    updates = _updates(sent)
    by_resource: dict[str, dict[str, set[str]]] = {}
    # The reaper's marks written, by the marks the policy allows the kind (most kinds share them all;
    # the kinds scaled through /scale and a paused ScaledObject have their own few).
    marks: dict[frozenset[str], set[str]] = {}
    for u in updates:
        spec = _changed(u.old.get("spec") or {}, u.new.get("spec") or {})
        annotations = _changed(_annotations(u.old), _annotations(u.new))
        allowed = frozenset(policy.variable(u, "marks"))
        marks.setdefault(allowed, set()).update(a for a in annotations if a.startswith(names.PREFIX))
        seen = by_resource.setdefault(u.key, {"spec": set(), "annotations": set()})
        seen["spec"] |= spec
        seen["annotations"] |= {a for a in annotations if not a.startswith(names.PREFIX)}
    example = {u.key: u for u in updates}
    named = {
        key: {part: set(values) for part, values in policy.variable(u, "fields").items() if part != "marks"}
        for key, u in example.items()
    }
    assert named == by_resource
    assert {allowed: set(allowed) for allowed in marks} == marks
    assert frozenset({names.NOTICED_AT, names.ACT_AFTER}) in marks
    assert frozenset({wake.PAUSED_BY_REAPER}) in marks


def test_the_policy_matches_every_kind_the_chart_lets_the_reaper_patch() -> None:
    """Besides its own Lease and ConfigMap (named in its Role) and /scale, which changes replicas only."""
    patchable = {
        f"{g.group}/{g.resource}"
        for g in grants((m.doc for m in RENDERED), _account(RENDERED))
        if g.verb in ("patch", "update") and g.name is None and not g.resource.endswith("/scale")
    }
    rules = only(RENDERED, "ValidatingAdmissionPolicy")["spec"]["matchConstraints"]["resourceRules"]
    matched = {f"{group}/{r}" for rule in rules for group in rule["apiGroups"] for r in rule["resources"]}
    assert matched == patchable


def _tampered(update: Update) -> dict[str, dict[str, Any]]:
    """The reaper's own update, plus one change it never makes, by what is changed."""
    meta = update.new["metadata"]
    out = {
        "a label": {**update.new, "metadata": {**meta, "labels": {**(meta.get("labels") or {}), "x": "y"}}},
        "an owner": {
            **update.new,
            "metadata": {
                **meta,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u"}],
            },
        },
        "another annotation": {
            **update.new,
            "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}), "example.com/x": "1"}},
        },
        "the owner's opt-out": {
            **update.new,
            "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}), names.EXCLUDE: "false"}},
        },
        "another spec field": {**update.new, "spec": {**(update.new.get("spec") or {}), "paused": True}},
        "the status": {**update.new, "status": {"hijacked": True}},
    }
    template = (update.new.get("spec") or {}).get("template")
    if template is not None:  # a pod template: the image, as a stolen token would
        evil = merge_patch(template, {"spec": {"containers": [{"name": "main", "image": "evil:latest"}]}})
        out["the pod template"] = {**update.new, "spec": {**update.new["spec"], "template": evil}}
    return out


def test_the_same_updates_changing_anything_else_are_denied(sent: list[Sent]) -> None:
    policy = _policy(RENDERED)
    admitted = []
    updates = {u.key: u for u in _updates(sent)}  # one per resource
    assert len(updates) >= 8
    for key, update in updates.items():
        for what, obj in _tampered(update).items():
            if not policy.denials(Update(update.user, update.group, update.resource, update.old, obj)):
                admitted.append(f"{key}: {what}")
    assert admitted == []


def test_a_spec_field_another_kind_may_change_is_denied_here(sent: list[Sent]) -> None:
    """spec.replicas is the reaper's to change on a Rollout, not on a Notebook or a RayCluster."""
    policy = _policy(RENDERED)
    updates = {u.key: u for u in _updates(sent)}
    for key in ("kubeflow.org/notebooks", "ray.io/rayclusters", "batch/jobs"):
        u = updates[key]
        changed = {**u.new, "spec": {**(u.new.get("spec") or {}), "replicas": 0}}
        assert policy.denials(Update(u.user, u.group, u.resource, u.old, changed)), key


def test_a_kind_with_marks_of_its_own_may_carry_no_other(sent: list[Sent]) -> None:
    """A Deployment takes a notice's two annotations from the reaper, never its stop marks (those
    live in its ConfigMap); a ScaledObject it pauses takes KEDA's paused-replicas, never KEDA's
    other pause, which would hold the workload at whatever count it has."""
    policy = _policy(RENDERED)
    updates = {u.key: u for u in _updates(sent)}
    for key, extra in (
        ("apps/deployments", names.ORIGINAL_REPLICAS),
        ("apps/statefulsets", names.REAPED_AT),
        ("keda.sh/scaledobjects", wake.KEDA_PAUSED),
        ("keda.sh/scaledobjects", names.NOTICED_AT),
    ):
        u = updates[key]
        assert not policy.denials(u), key
        meta = {**u.new["metadata"], "annotations": {**_annotations(u.new), extra: "0"}}
        assert policy.denials(Update(u.user, u.group, u.resource, u.old, {**u.new, "metadata": meta})), key


def test_the_policy_binds_only_the_reapers_own_requests(sent: list[Sent]) -> None:
    policy = _policy(RENDERED)
    update = next(u for u in _updates(sent) if u.key == "kubeflow.org/notebooks")
    assert policy.applies(update)
    for user in ("system:serviceaccount:research:default", "alice@example.com", REAPER + "-2"):
        assert not policy.applies(Update(user, update.group, update.resource, update.old, update.new))
    binding = only(RENDERED, "ValidatingAdmissionPolicyBinding")["spec"]
    assert binding["policyName"] == only(RENDERED, "ValidatingAdmissionPolicy")["metadata"]["name"]
    assert binding["validationActions"] == ["Deny"]


def test_kinds_switched_off_are_neither_patchable_nor_matched() -> None:
    values = json.loads(json.dumps(VALUES))
    defaults = yaml.safe_load((CHART_DIR / "values.yaml").read_text(encoding="utf-8"))
    values["rbac"]["controllers"] = dict.fromkeys(defaults["rbac"]["controllers"], False)
    values["rbac"]["cordonNodes"] = False
    values["rbac"]["noticeAnnotations"] = values["rbac"]["wakeKedaHttp"] = False
    manifests = render(values)
    rules = only(manifests, "ValidatingAdmissionPolicy")["spec"]["matchConstraints"]["resourceRules"]
    assert [(r["apiGroups"], r["resources"]) for r in rules] == [(["serving.example.com"], ["modelservers"])]
    values["rbac"]["scaleSubresources"] = []
    assert not [m for m in render(values) if m.kind.startswith("ValidatingAdmissionPolicy")]


def test_the_policy_is_off_by_default() -> None:
    assert not [m for m in render() if m.kind.startswith("ValidatingAdmissionPolicy")]
