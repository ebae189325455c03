"""The chart's RBAC is exactly what the reaper uses, derived from the reaper's own requests.

``gpu-reaper`` runs for real against the emulated API server through every path that talks to it: a
dry run; an applied run that creates the Lease and the state ConfigMap, scales a Deployment and a
StatefulSet, stops one workload under every root controller the reaper knows (Notebook,
InferenceService, RayCluster, LeaderWorkerSet, Rollout, JobSet, a Kueue Job, an ownerless
ReplicaSet; a Knative Service only reported), cordons a node, records Events and re-reads after a
409; a second applied run that takes over the existing Lease and patches the ConfigMap; and every
kind of restore. Before those, a run gives every candidate a notice (its annotations on the
objects); a ``when: demand`` rule lists the pods pending for GPUs; a ``wake: keda-http`` rule hands
one Deployment to the KEDA HTTP add-on and pauses the ScaledObject of another, in a cluster serving
the add-on's InterceptorRoute and, for its older HTTPScaledObject, in a second one. Each request in
the emulator's log becomes the attributes the API server's RBAC authorizer checks (harness.rbac),
and the Roles and ClusterRoles the chart renders for the reaper's ServiceAccount must grant every
one of them and nothing more. A new API call in reaper/kube.py or the executor's parts
(reaper/stop.py, restore.py, …) fails here until the chart grants it; a grant the reaper stops using
fails here until it is removed. A reaper scoped to namespaces (``--namespace`` for each of the
chart's ``rbac.namespaces``) must be granted all it does by their Roles.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cli.reaper import main
from common.model import FindingKind
from harness.chart import NAMESPACE, Manifest, only, render, values_file
from harness.controllers import CONTROLLERS
from harness.findings import NOW, finding, report
from harness.gpu_workloads import gpu_spec
from harness.kube_emulator import EmulatedCluster, Fault
from harness.kube_fixtures import emulated_cluster
from harness.rbac import (
    NAMED_VERBS,
    READ_VERBS,
    STOP_AND_CORDON_POLICY,
    Access,
    Grant,
    access_of,
    grants,
    is_discovery,
)
from reaper.kinds import WORKLOAD_KINDS
from simulation import controllers
from simulation.in_memory_cluster import manifest

LONG_AGO = NOW - timedelta(days=30)
# One workload under each root kind the reaper stops or reports, by the (kind, name) holding the GPUs.
CONTROLLED = {
    ("StatefulSet", "alice"): lambda: controllers.notebook("research", "alice", LONG_AGO),
    ("Deployment", "llm-predictor"): lambda: controllers.inference_service("research", "llm", LONG_AGO),
    ("RayCluster", "ray"): lambda: controllers.ray_cluster("research", "ray", LONG_AGO),
    ("StatefulSet", "vllm"): lambda: controllers.leader_worker_set("research", "vllm", LONG_AGO),
    ("Rollout", "canary"): lambda: controllers.argo_rollout("research", "canary", LONG_AGO),
    ("Job", "train-workers-0"): lambda: controllers.job_set("research", "train", LONG_AGO),
    ("Job", "sweep"): lambda: controllers.kueue_job("research", "sweep", LONG_AGO),
    ("ReplicaSet", "bare"): lambda: [
        manifest("ReplicaSet", "bare", "research", created=LONG_AGO, spec=gpu_spec(1))
    ],
    ("Deployment", "fn-00001-deployment"): lambda: controllers.knative_service("research", "fn", LONG_AGO),
}
GPU_NODE = {"capacity": {"nvidia.com/gpu": "8"}}
# What the reaper does with the API, whatever the chart says: no watch or PUT, no Secret, no pod
# but listed, and nothing deleted but the KEDA HTTP add-on objects a wake made.
ALLOWED_VERBS = frozenset({"get", "list", "create", "patch"})
WAKE_OBJECTS = frozenset({"interceptorroutes", "httpscaledobjects", "scaledobjects"})
NEVER_RESOURCES = frozenset({"secrets", "pods/exec", "pods/log", "serviceaccounts/token"})
# A wake rule for namespace woken and a when: demand rule for namespace queued, before the rest.
POLICY = STOP_AND_CORDON_POLICY.replace(
    "rules:\n",
    "rules:\n"
    "  - name: wake-idle\n    match: {findings: [idle_endpoint], namespaces: [woken]}\n"
    "    action: scale_to_zero\n    wake: keda-http\n"
    "  - name: on-demand\n    match: {findings: [idle_endpoint], namespaces: [queued]}\n"
    "    action: scale_to_zero\n    when: demand\n",
)
# The same, each rule giving a notice first.
NOTICE = POLICY.replace("    action: cordon\n", "    action: cordon\n    notice: 1h\n").replace(
    "    action: scale_to_zero\n", "    action: scale_to_zero\n    notice: 1h\n"
)

# The runs cordon a node: the chart allows it only with rbac.cordonNodes (off by default); they
# give notices, act on demand and wake: the opt-in grants of those rules.
OPT_IN = {"noticeAnnotations": True, "readPendingPods": True, "wakeKedaHttp": True}
CORDONING = {"rbac": {"cordonNodes": True, **OPT_IN}}
VALUE_SETS = {"cordoning": CORDONING, "all-enabled": values_file("all-enabled-values.yaml")}
RENDERED = {name: render(values) for name, values in VALUE_SETS.items()}


def _service_account(manifests: list[Manifest]) -> tuple[str, str]:
    cronjob = only(manifests, "CronJob")
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return cronjob["metadata"].get("namespace", NAMESPACE), pod["serviceAccountName"]


def _granted(manifests: list[Manifest]) -> set[Grant]:
    return grants((m.doc for m in manifests), _service_account(manifests))


def _seed(cluster: EmulatedCluster) -> None:
    def deployment(name: str, replicas: int = 2) -> dict[str, Any]:
        return manifest("Deployment", name, "serving", created=LONG_AGO, spec=gpu_spec(replicas))

    def autoscaler(kind: str, target: str) -> dict[str, Any]:
        spec = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target}}
        return manifest(kind, f"{target}-scaler", "serving", spec=spec)

    cluster.declare("ScaledObject")  # KEDA installed: its list answers rather than 404
    cluster.declare(*(k.name for k in WORKLOAD_KINDS))  # every controller the reaper knows is installed
    cluster.declare("KueueWorkload")  # and Kueue, which admits the Kueue Job
    cluster.declare("Service", "Pod")
    cluster.install_crd(*NEW_ADDON, scale=False)  # and the KEDA HTTP add-on (0.14 onwards)
    cluster.call(lambda: cluster.server.controllers.extend(CONTROLLERS))
    cluster.seed(
        [
            *(manifest("Namespace", n) for n in ("serving", "research", "woken", "queued", NAMESPACE)),
            *_woken(),
            manifest("Deployment", "batch", "queued", created=LONG_AGO, spec=gpu_spec(1)),
            _pending_pod("queued", "trainer"),
            *(obj for build in CONTROLLED.values() for obj in build()),
            deployment("ranker"),
            deployment("hpa-scaled"),
            deployment("keda-scaled"),
            manifest("StatefulSet", "embeddings", "serving", created=LONG_AGO, spec=gpu_spec(1)),
            autoscaler("HorizontalPodAutoscaler", "hpa-scaled"),
            autoscaler("ScaledObject", "keda-scaled"),
            *(
                manifest("Node", n, created=LONG_AGO, spec={}, status=GPU_NODE)
                for n in ("gpu-busy", "gpu-spare")
            ),
        ]
    )


NEW_ADDON = ("http.keda.sh/v1beta1", "InterceptorRoute", "interceptorroutes")
OLD_ADDON = ("http.keda.sh/v1alpha1", "HTTPScaledObject", "httpscaledobjects")


def _woken() -> list[dict[str, Any]]:
    """Deployment chat behind a Service (handed to the add-on), fed under a KEDA ScaledObject (paused)."""
    service = {"selector": {"app": "chat"}, "ports": [{"name": "http", "port": 8000}]}
    scaled = {"scaleTargetRef": {"name": "fed"}, "triggers": [{"type": "cpu", "metadata": {"value": "50"}}]}
    return [
        controllers.deployment("woken", "chat", LONG_AGO, replicas=2),
        manifest("Service", "chat", "woken", spec=service),
        controllers.deployment("woken", "fed", LONG_AGO, replicas=2),
        manifest("ScaledObject", "fed", "woken", spec=scaled),
    ]


def _pending_pod(namespace: str, name: str) -> dict[str, Any]:
    """A pod the scheduler could not place for want of a GPU: the demand a when: demand rule meets."""
    container = {
        "name": "main",
        "image": "registry.example/x:1",
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    status = {"phase": "Pending", "conditions": [unschedulable]}
    return manifest("Pod", name, namespace, created=NOW, spec={"containers": [container]}, status=status)


def _findings(tmp_path: Path) -> Path:
    idle = [
        finding(FindingKind.IDLE_ENDPOINT, name=name, workload_kind=kind)
        for kind, name in (
            ("Deployment", "ranker"),
            ("Deployment", "hpa-scaled"),
            ("Deployment", "keda-scaled"),
            ("StatefulSet", "embeddings"),
        )
    ]
    idle += [
        finding(FindingKind.IDLE_ENDPOINT, name=name, namespace="research", workload_kind=kind)
        for kind, name in CONTROLLED
    ]
    idle += [finding(FindingKind.IDLE_ENDPOINT, name=n, namespace="woken") for n in ("chat", "fed")]
    idle.append(finding(FindingKind.IDLE_ENDPOINT, name="batch", namespace="queued"))
    spare = finding(FindingKind.LOW_UTILIZATION, name="gpu-spare", workload_kind="Node")
    path = tmp_path / "findings.json"
    path.write_text(report(*idle, spare).to_json(), encoding="utf-8")
    return path


def _cli(*argv: str) -> str:
    out = io.StringIO()
    code = main(list(argv), stdout=out)
    assert code == 0, out.getvalue()
    return out.getvalue().strip().splitlines()[-1]


@pytest.fixture(scope="module")
def reaper_requests(
    _emulator_loop: asyncio.AbstractEventLoop, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, list[Access]]]:
    """The authorization attributes of every request of each step, by step: one run of every step,
    which each test of this module reads (none changes it)."""
    tmp_path = tmp_path_factory.mktemp("rbac")
    with emulated_cluster(_emulator_loop, tmp_path) as cluster:
        requests = _requests_of_every_step(cluster, tmp_path)
    old_addon = tmp_path_factory.mktemp("rbac-old-addon")
    with emulated_cluster(_emulator_loop, old_addon) as cluster:
        requests["wake (HTTPScaledObject)"] = _requests_of_a_wake(cluster, old_addon)
    yield requests


def _requests_of_every_step(cluster: EmulatedCluster, tmp_path: Path) -> dict[str, list[Access]]:
    _seed(cluster)
    policy, noticing = tmp_path / "policy.yaml", tmp_path / "notice.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    noticing.write_text(NOTICE, encoding="utf-8")
    kube = ["--kubeconfig", str(cluster.kubeconfig), "--reaper-namespace", NAMESPACE]
    findings = ["--findings", str(_findings(tmp_path)), "--end", "2026-01-05T00:00:00Z"]
    run = ["run", *findings, "--policy", str(policy), "--notice-annotations"]
    steps = {
        "dry-run": (
            [*run, "--dry-run", *kube],
            "gpu-reaper: mode=dry-run findings=17 planned=15 applied=0 skipped=2 failed=0 pending_gpus=1",
        ),
        # Every candidate noticed first: an Event and annotations on each; nothing stopped.
        "notice": (
            ["run", *findings, "--policy", str(noticing), "--notice-annotations", "--apply", *kube],
            None,
        ),
        "first apply": (
            [*run, "--apply", *kube],
            # The heads-up among them reaches nobody here (no Slack): not sent, not applied.
            "gpu-reaper: mode=apply findings=17 planned=15 applied=14 skipped=2 failed=0 not_sent=1 "
            "pending_gpus=1",
        ),
        "second apply": ([*run, "--apply", *kube], None),
        "restore dry-run": (
            ["restore", "serving/ranker", "--dry-run", *kube],
            "gpu-reaper: restore mode=dry-run would_restore=1 unchanged=0 failed=0",
        ),
        "restore one": (
            ["restore", "serving/embeddings", *kube],
            "gpu-reaper: restore mode=apply restored=1 unchanged=0 failed=0",
        ),
        "uncordon one": (
            ["restore", "--node", "gpu-spare", *kube],
            "gpu-reaper: restore mode=apply restored=1 unchanged=0 failed=0",
        ),
        "restore all": (
            ["restore", "--all", *kube],
            "gpu-reaper: restore mode=apply restored=12 unchanged=0 failed=0",
        ),
    }
    out: dict[str, list[Access]] = {}
    seen = 0
    for step, (argv, summary) in steps.items():
        if step == "first apply":
            _conflicts(cluster)
        line = _cli(*argv)
        if summary is not None:
            assert line == summary, step
        log = cluster.request_urls()
        out[step] = [access_of(method, url) for method, url in log[seen:] if not is_discovery(url)]
        seen = len(log)
    return out


def _conflicts(cluster: EmulatedCluster) -> None:
    """Stale resourceVersions on the first patches of the stops: the executor re-reads and tries again."""
    cluster.fail(Fault("PATCH", "Deployment", name="ranker", status=409))
    cluster.fail(Fault("PATCH", "Node", name="gpu-spare", status=409))
    roots = (
        "Notebook",
        "InferenceService",
        "RayCluster",
        "LeaderWorkerSet",
        "Rollout",
        "JobSet",
        "Job",
        "ReplicaSet",
    )
    for kind in roots:  # each actuator re-reads its root (get) after a conflict
        cluster.fail(Fault("PATCH", kind, status=409))


def _requests_of_a_wake(cluster: EmulatedCluster, tmp_path: Path) -> list[Access]:
    """A wake and its restore where the add-on serves only its older HTTPScaledObject."""
    cluster.declare("ScaledObject", "Service")
    cluster.install_crd(*OLD_ADDON, scale=False)
    cluster.seed([*(manifest("Namespace", n) for n in ("woken", NAMESPACE)), *_woken()[:2]])
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    found = finding(FindingKind.IDLE_ENDPOINT, name="chat", namespace="woken")
    findings = tmp_path / "findings.json"
    findings.write_text(report(found).to_json(), encoding="utf-8")
    kube = ["--kubeconfig", str(cluster.kubeconfig), "--reaper-namespace", NAMESPACE]
    run = ["run", "--findings", str(findings), "--policy", str(policy), "--end", "2026-01-05T00:00:00Z"]
    assert _cli(*run, "--apply", *kube).endswith("applied=1 skipped=0 failed=0 pending_gpus=0")
    assert cluster.objects("HTTPScaledObject")
    assert _cli("restore", "--all", *kube).endswith("restored=1 unchanged=0 failed=0")
    return [access_of(method, url) for method, url in cluster.request_urls() if not is_discovery(url)]


def _all(requests: dict[str, list[Access]]) -> set[Access]:
    return {a for step in requests.values() for a in step}


@pytest.mark.parametrize("values", RENDERED.keys())
def test_every_request_the_reaper_makes_is_granted_by_the_chart(
    reaper_requests: dict[str, list[Access]], values: str
) -> None:
    granted = _granted(RENDERED[values])
    denied = sorted(str(a) for a in _all(reaper_requests) if not any(g.allows(a) for g in granted))
    assert denied == [], "the chart's RBAC does not grant what the reaper does"


def _needed(grant: Grant, granted: set[Grant], used: set[Access]) -> bool:
    """Some request of the reaper is allowed by ``grant`` and by no other grant."""
    others = granted - {grant}
    return any(grant.allows(a) and not any(o.allows(a) for o in others) for a in used)


@pytest.mark.parametrize("values", RENDERED.keys())
def test_the_chart_grants_nothing_the_reaper_does_not_use(
    reaper_requests: dict[str, list[Access]], values: str
) -> None:
    granted, used = _granted(RENDERED[values]), _all(reaper_requests)
    assert not [str(g) for g in granted if "*" in (g.group, g.resource, g.verb)], "no wildcards"
    unneeded = sorted(str(g) for g in granted if not _needed(g, granted, used))
    assert unneeded == [], "the chart grants what the reaper never uses (or grants it twice)"
    # What the reaper does only in its own namespace belongs in the Role, not the ClusterRole.
    too_wide = sorted(
        str(g)
        for g in granted
        if g.namespace is None and not any(g.allows(a) and a.namespace != NAMESPACE for a in used)
    )
    assert too_wide == [], "granted cluster-wide but used only in the reaper's namespace"


def test_in_its_own_namespace_the_reaper_reads_and_patches_only_the_objects_it_owns(
    reaper_requests: dict[str, list[Access]],
) -> None:
    # Creating cannot be limited to a name; every other grant in the reaper's namespace is.
    local = [g for g in _granted(RENDERED["cordoning"]) if g.namespace is not None]
    assert local and all(g.namespace == NAMESPACE for g in local)
    named = {g for g in local if g.verb in NAMED_VERBS}
    assert named and all(g.name is not None for g in named)
    used = {
        (a.resource, a.verb, a.name)
        for a in _all(reaper_requests)
        if a.namespace == NAMESPACE and a.verb in NAMED_VERBS
    }
    assert {(g.resource, g.verb, g.name) for g in named} == used


def test_the_reaper_never_deletes_watches_replaces_or_reads_secrets(
    reaper_requests: dict[str, list[Access]],
) -> None:
    used = _all(reaper_requests)
    assert {a.verb for a in used} <= ALLOWED_VERBS | {"delete"}
    deleted = {a for a in used if a.verb == "delete"}
    assert deleted and {a.resource for a in deleted} <= WAKE_OBJECTS
    assert not {a.resource for a in used} & NEVER_RESOURCES
    assert {a.verb for a in used if a.resource == "pods"} == {"list"}
    assert all(a.verb in READ_VERBS for a in reaper_requests["dry-run"] + reaper_requests["restore dry-run"])


def test_by_default_only_node_patches_and_the_opt_in_rules_are_refused(
    reaper_requests: dict[str, list[Access]],
) -> None:
    granted = _granted(render({}))
    denied = {
        (a.verb, a.group, a.resource) for a in _all(reaper_requests) if not any(g.allows(a) for g in granted)
    }
    wake = {
        (v, "http.keda.sh", r)
        for v in ("list", "create", "delete")
        for r in ("interceptorroutes", "httpscaledobjects")
    }
    assert denied == {
        ("patch", "", "nodes"),  # rbac.cordonNodes
        ("patch", "apps", "deployments"),  # rbac.noticeAnnotations
        ("patch", "apps", "statefulsets"),
        ("patch", "apps", "replicasets"),
        ("list", "", "pods"),  # rbac.readPendingPods
        ("list", "", "services"),  # rbac.wakeKedaHttp
        *wake,
        *{(v, "keda.sh", "scaledobjects") for v in ("get", "create", "patch", "delete")},
    }


def test_pods_are_never_granted_by_default_and_only_listed_with_read_pending_pods() -> None:
    for values in ({}, {"rbac": {"namespaces": ["team-a"]}}):
        assert not [g for g in _granted(render(values)) if g.resource.startswith("pods")]
    for values in (
        {"rbac": {"readPendingPods": True}},
        {"rbac": {"readPendingPods": True, "namespaces": ["team-a"]}},
    ):
        pods = {(g.verb, g.namespace) for g in _granted(render(values)) if g.resource.startswith("pods")}
        assert pods == {("list", (values["rbac"].get("namespaces") or [None])[0])}
    # Without Kueue's Jobs switched on, the Workloads waiting for admission are listed all the same.
    alone = {"rbac": {"readPendingPods": True, "controllers": {"kueueJobs": False}}}
    assert {g.verb for g in _granted(render(alone)) if g.resource == "workloads"} == {"list"}


def test_only_the_reapers_service_account_is_bound() -> None:
    for manifests in RENDERED.values():
        account = _service_account(manifests)
        for m in manifests:
            if m.kind in ("RoleBinding", "ClusterRoleBinding"):
                subjects = {(s["kind"], s.get("namespace"), s["name"]) for s in m.doc["subjects"]}
                assert subjects == {("ServiceAccount", *account)}, m.id


@pytest.mark.parametrize(
    ("method", "url", "expected"),
    [
        ("GET", "/api/v1/nodes?limit=500", Access("list", "", "nodes", None, None)),
        ("GET", "/api/v1/nodes?watch=true", Access("watch", "", "nodes", None, None)),
        ("GET", "/api/v1/namespaces", Access("list", "", "namespaces", None, None)),
        ("GET", "/api/v1/namespaces/team-a", Access("get", "", "namespaces", "team-a", "team-a")),
        (
            "PUT",
            "/api/v1/namespaces/team-a/finalize",
            Access("update", "", "namespaces/finalize", "team-a", "team-a"),
        ),
        ("POST", "/api/v1/namespaces/default/events", Access("create", "", "events", "default", None)),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/ml/deployments/api",
            Access("patch", "apps", "deployments", "ml", "api"),
        ),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/ml/deployments/api/scale",
            Access("patch", "apps", "deployments/scale", "ml", "api"),
        ),
        ("DELETE", "/api/v1/namespaces/ml/pods", Access("deletecollection", "", "pods", "ml", None)),
        ("DELETE", "/api/v1/namespaces/ml/pods/p", Access("delete", "", "pods", "ml", "p")),
        (
            "GET",
            "/apis/keda.sh/v1alpha1/scaledobjects",
            Access("list", "keda.sh", "scaledobjects", None, None),
        ),
    ],
)
def test_requests_map_to_the_attributes_the_authorizer_checks(
    method: str, url: str, expected: Access
) -> None:
    assert access_of(method, url) == expected


@pytest.mark.parametrize("url", ["/version", "/apis", "/api/v1", "/apis/apps/v1", "/healthz"])
def test_discovery_and_non_resource_urls_are_not_taken_for_resource_requests(url: str) -> None:
    with pytest.raises(ValueError, match="not a resource request"):
        access_of("GET", url)


def test_grants_follow_rbac_scoping_and_resource_names() -> None:
    def role(kind: str, name: str, rule: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        meta = {"name": name} | ({"namespace": namespace} if namespace else {})
        return {"kind": kind, "metadata": meta, "rules": [rule]}

    def binding(
        kind: str, role_kind: str, role_name: str, account: str, namespace: str | None = None
    ) -> dict[str, Any]:
        meta = {"name": role_name} | ({"namespace": namespace} if namespace else {})
        subject = {"kind": "ServiceAccount", "namespace": "ops", "name": account}
        return {
            "kind": kind,
            "metadata": meta,
            "roleRef": {"kind": role_kind, "name": role_name},
            "subjects": [subject],
        }

    lease = {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get"],
        "resourceNames": ["mine"],
    }
    reader = {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]}
    docs = [
        role("Role", "own", lease, "ops"),
        binding("RoleBinding", "Role", "own", "reaper", "ops"),
        role("ClusterRole", "reader", reader),
        binding("RoleBinding", "ClusterRole", "reader", "reaper", "team-a"),  # a ClusterRole in one namespace
        role("ClusterRole", "everything", {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
        binding("ClusterRoleBinding", "ClusterRole", "everything", "someone-else"),
    ]
    granted = grants(docs, ("ops", "reaper"))
    assert {(g.role, g.namespace, g.verb, g.name) for g in granted} == {
        ("Role/own", "ops", "get", "mine"),
        ("ClusterRole/reader", "team-a", "list", None),
    }

    def allowed(access: Access) -> bool:
        return any(g.allows(access) for g in granted)

    assert allowed(Access("get", "coordination.k8s.io", "leases", "ops", "mine"))
    assert not allowed(Access("get", "coordination.k8s.io", "leases", "ops", "theirs"))
    assert not allowed(Access("get", "coordination.k8s.io", "leases", "team-a", "mine"))
    assert not allowed(Access("list", "coordination.k8s.io", "leases", "ops", None))
    assert allowed(Access("list", "apps", "deployments", "team-a", None))
    assert not allowed(
        Access("list", "apps", "deployments", None, None)
    )  # cluster-wide needs a ClusterRoleBinding
    assert not allowed(Access("list", "apps", "deployments/scale", "team-a", None))


@pytest.mark.parametrize(
    ("switch", "refused"),
    [
        pytest.param(
            "kubeflowNotebooks",
            {
                ("list", "kubeflow.org", "notebooks"),
                ("get", "kubeflow.org", "notebooks"),
                ("patch", "kubeflow.org", "notebooks"),
            },
            id="kubeflow",
        ),
        pytest.param(
            "knative",
            {("list", "serving.knative.dev", r) for r in ("services", "configurations", "revisions")},
            id="knative",
        ),
        pytest.param(
            "kueueJobs",
            # Its Workloads are still listed: waiting ones are GPU demand (rbac.readPendingPods).
            {("get", "batch", "jobs"), ("patch", "batch", "jobs"), ("patch", "kueue.x-k8s.io", "workloads")},
            id="kueue",
        ),
    ],
)
def test_a_controller_switched_off_refuses_only_its_own_requests(
    reaper_requests: dict[str, list[Access]], switch: str, refused: set[tuple[str, str, str]]
) -> None:
    granted = _granted(render({"rbac": {**CORDONING["rbac"], "controllers": {switch: False}}}))
    denied = {a for a in _all(reaper_requests) if not any(g.allows(a) for g in granted)}
    assert {(a.verb, a.group, a.resource) for a in denied} == refused


SCOPE = ("serving", "research")


@pytest.fixture(scope="module")
def scoped_requests(
    _emulator_loop: asyncio.AbstractEventLoop, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Access]]:
    """Every request of a reaper scoped to two namespaces (``--namespace`` for each): runs and restores."""
    tmp_path = tmp_path_factory.mktemp("rbac-scoped")
    with emulated_cluster(_emulator_loop, tmp_path) as cluster:
        _seed(cluster)
        policy = tmp_path / "policy.yaml"
        policy.write_text(POLICY, encoding="utf-8")
        kube = ["--kubeconfig", str(cluster.kubeconfig), "--reaper-namespace", NAMESPACE]
        scope = [arg for ns in SCOPE for arg in ("--namespace", ns)]
        run = [
            "run",
            "--findings",
            str(_findings(tmp_path)),
            "--policy",
            str(policy),
            "--end",
            "2026-01-05T00:00:00Z",
        ]
        cluster.fail(Fault("PATCH", "Deployment", name="ranker", status=409, subresource="scale"))
        _cli(*run, "--dry-run", *scope, *kube)
        assert _cli(*run, "--apply", *scope, *kube).startswith("gpu-reaper: mode=apply findings=13 ")
        _cli("restore", "serving/ranker", *kube)
        assert _cli("restore", "--all", *scope, *kube).endswith("failed=0")
        yield [access_of(method, url) for method, url in cluster.request_urls() if not is_discovery(url)]


def test_a_reaper_scoped_to_namespaces_is_granted_all_it_does_by_their_roles(
    scoped_requests: list[Access],
) -> None:
    granted = _granted(render({"rbac": {"namespaces": list(SCOPE), **OPT_IN}}))
    denied = sorted(str(a) for a in scoped_requests if not any(g.allows(a) for g in granted))
    assert denied == [], "the chart's rbac.namespaces Roles do not grant what a scoped reaper does"
    outside = {a for a in scoped_requests if a.namespace not in (*SCOPE, NAMESPACE)}
    assert {(a.verb, a.resource) for a in outside} <= {("list", "nodes")}, sorted(map(str, outside))
