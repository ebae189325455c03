"""Controller-owned workloads as their controllers create them: the root object and the children under it.

Each builder returns plain manifests, root first: the custom resource a user applies (a Kubeflow
Notebook, a KServe InferenceService, a KubeRay RayCluster…) and the objects its controller makes
for it, with the ownerReferences a controller writes (apiVersion, kind, name, uid,
``controller: true``, ``blockOwnerDeletion: true``) and the status fields it reports. Pods are
left out: the reaper never reads them. The demo's in-memory cluster and the reaper's tests on the
Kubernetes emulator are seeded from these.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

from common.timeutil import rfc3339
from simulation.manifests import manifest

Manifest = dict[str, Any]
GPU = "nvidia.com/gpu"


def _hash(*parts: str, n: int = 10) -> str:
    # Controllers' name suffixes: lowercase consonants and digits, like the pod-template hash.
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    digest = hashlib.sha256("/".join(parts).encode()).digest()
    return "".join(alphabet[b % len(alphabet)] for b in digest[:n])


def _time(t: datetime) -> str:
    return rfc3339(t.replace(microsecond=0))


def pod_template(
    name: str, gpus: int, labels: dict[str, str] | None = None, *, resource: str = GPU
) -> dict[str, Any]:
    """A pod template of one container limited to ``gpus`` of ``resource`` (a GPU, or a MIG profile's)."""
    return {
        "metadata": {"labels": labels or {"app": name}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": f"registry.example/{name}:1",
                    "resources": {"limits": {resource: str(gpus)}},
                }
            ]
        },
    }


def replicated_status(
    replicas: int, generation: int = 1, progressed: datetime | None = None
) -> dict[str, Any]:
    """A settled Deployment/StatefulSet/LeaderWorkerSet status: every replica updated and available."""
    status: dict[str, Any] = {"observedGeneration": generation}
    if replicas:  # the API server omits zero counts
        status |= {
            "replicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
            "updatedReplicas": replicas,
        }
    if progressed is not None:
        status["conditions"] = [
            {
                "type": "Available",
                "status": "True",
                "reason": "MinimumReplicasAvailable",
                "lastUpdateTime": _time(progressed),
                "lastTransitionTime": _time(progressed),
            },
            {
                "type": "Progressing",
                "status": "True",
                "reason": "NewReplicaSetAvailable",
                "lastUpdateTime": _time(progressed),
                "lastTransitionTime": _time(progressed),
            },
        ]
    return status


def deployment(
    namespace: str,
    name: str,
    created: datetime,
    *,
    replicas: int = 1,
    gpus: int = 1,
    owner: Manifest | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Manifest:
    """A Deployment whose rollout finished a minute after creation."""
    labels = labels or {"app": name}
    return manifest(
        "Deployment",
        name,
        namespace,
        labels=labels,
        annotations=annotations,
        created=created,
        spec={
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": pod_template(name, gpus, labels),
        },
        status=replicated_status(replicas, progressed=created + timedelta(minutes=1)),
        owner=owner,
    )


def notebook(namespace: str, name: str, created: datetime, gpus: int = 1) -> list[Manifest]:
    """Kubeflow: a Notebook and the one-replica StatefulSet of the same name its controller runs."""
    root = manifest(
        "Notebook",
        name,
        namespace,
        labels={"app": name},
        created=created,
        spec={"template": pod_template(name, gpus)},
        status={
            "readyReplicas": 1,
            "containerState": {"running": {"startedAt": _time(created + timedelta(minutes=2))}},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    )
    sts = manifest(
        "StatefulSet",
        name,
        namespace,
        labels={"notebook-name": name},
        created=created,
        spec={
            "replicas": 1,
            "serviceName": "",
            "selector": {"matchLabels": {"statefulset": name}},
            "template": pod_template(name, gpus, {"statefulset": name, "notebook-name": name}),
        },
        status=replicated_status(1) | {"currentRevision": f"{name}-{_hash(name)}"},
        owner=root,
    )
    return [root, sts]


def inference_service(namespace: str, name: str, created: datetime, gpus: int = 1) -> list[Manifest]:
    """KServe raw deployment mode: an InferenceService and its ``NAME-predictor`` Deployment."""
    root = manifest(
        "InferenceService",
        name,
        namespace,
        annotations={"serving.kserve.io/deploymentMode": "RawDeployment"},
        created=created,
        spec={
            "predictor": {
                "model": {"modelFormat": {"name": "huggingface"}, "resources": {"limits": {GPU: str(gpus)}}}
            }
        },
        status={
            "observedGeneration": 1,
            "url": f"http://{name}-{namespace}.example.com",
            "conditions": [
                {"type": "PredictorReady", "status": "True"},
                {"type": "Ready", "status": "True"},
            ],
        },
    )
    labels = {"serving.kserve.io/inferenceservice": name, "app": f"isvc.{name}-predictor"}
    child = deployment(namespace, f"{name}-predictor", created, gpus=gpus, owner=root, labels=labels)
    return [root, child]


def inference_service_serverless(
    namespace: str, name: str, created: datetime, gpus: int = 1
) -> list[Manifest]:
    """KServe serverless mode: InferenceService → Knative Service → Configuration → Revision → Deployment."""
    root, _ = inference_service(namespace, name, created, gpus)
    root["metadata"]["annotations"] = {"serving.kserve.io/deploymentMode": "Serverless"}
    ksvc_name = f"{name}-predictor"
    return [root, *knative_service(namespace, ksvc_name, created, gpus, owner=root)]


def knative_service(
    namespace: str,
    name: str,
    created: datetime,
    gpus: int = 1,
    *,
    owner: Manifest | None = None,
    min_scale: int | None = None,
) -> list[Manifest]:
    """Knative Serving: Service → Configuration → Revision ``NAME-00001`` → Deployment ``…-deployment``."""
    template_annotations = (
        {"autoscaling.knative.dev/min-scale": str(min_scale)} if min_scale is not None else {}
    )
    template = {"metadata": {"annotations": template_annotations}, "spec": pod_template(name, gpus)["spec"]}
    ready = {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]}
    ksvc = manifest(
        "KnativeService",
        name,
        namespace,
        created=created,
        spec={"template": template},
        status=ready,
        owner=owner,
    )
    config = manifest(
        "KnativeConfiguration",
        name,
        namespace,
        created=created,
        spec={"template": template},
        status=ready,
        owner=ksvc,
    )
    revision_name = f"{name}-00001"
    revision = manifest(
        "KnativeRevision",
        revision_name,
        namespace,
        annotations=template_annotations or None,
        created=created,
        spec=template["spec"],
        status=ready | {"actualReplicas": 1},
        owner=config,
    )
    labels = {"serving.knative.dev/revision": revision_name, "serving.knative.dev/service": name}
    child = deployment(
        namespace, f"{revision_name}-deployment", created, gpus=gpus, owner=revision, labels=labels
    )
    return [ksvc, config, revision, child]


def ray_cluster(
    namespace: str,
    name: str,
    created: datetime,
    workers: int = 2,
    gpus: int = 1,
    owner: Manifest | None = None,
) -> list[Manifest]:
    """KubeRay: a RayCluster; its head and worker pods are its own children (no set in between)."""
    root = manifest(
        "RayCluster",
        name,
        namespace,
        created=created,
        spec={
            "rayVersion": "2.9.0",
            "headGroupSpec": {"rayStartParams": {}, "template": pod_template(f"{name}-head", 0)},
            "workerGroupSpecs": [
                {
                    "groupName": "gpu-group",
                    "replicas": workers,
                    "minReplicas": 0,
                    "maxReplicas": workers,
                    "rayStartParams": {},
                    "template": pod_template(f"{name}-worker", gpus),
                }
            ],
        },
        status={
            "state": "ready",
            "readyWorkerReplicas": workers,
            "availableWorkerReplicas": workers,
            "desiredWorkerReplicas": workers,
            "observedGeneration": 1,
        },
        owner=owner,
    )
    return [root]


def ray_service(namespace: str, name: str, created: datetime, gpus: int = 1) -> list[Manifest]:
    """KubeRay: a RayService and the RayCluster ``NAME-raycluster-xxxxx`` it runs."""
    root = manifest(
        "RayService",
        name,
        namespace,
        created=created,
        spec={"serveConfigV2": "applications: []"},
        status={"serviceStatus": "Running", "observedGeneration": 1},
    )
    cluster_name = f"{name}-raycluster-{_hash(namespace, name, n=5)}"
    return [root, *ray_cluster(namespace, cluster_name, created, gpus=gpus, owner=root)]


def leader_worker_set(namespace: str, name: str, created: datetime, replicas: int = 1) -> list[Manifest]:
    """LeaderWorkerSet: the LWS, its leader StatefulSet NAME (one leader pod per group), and per group
    a worker StatefulSet NAME-i owned by that group's leader pod NAME-i (the LWS only by label)."""
    label = {"leaderworkerset.sigs.k8s.io/name": name}
    root = manifest(
        "LeaderWorkerSet",
        name,
        namespace,
        created=created,
        spec={
            "replicas": replicas,
            "leaderWorkerTemplate": {"size": 2, "workerTemplate": pod_template(name, 1)},
        },
        # LeaderWorkerSet's status has no observedGeneration nor availableReplicas.
        status={
            "replicas": replicas,
            "readyReplicas": replicas,
            "updatedReplicas": replicas,
            "hpaPodSelector": f"leaderworkerset.sigs.k8s.io/name={name}",
            "conditions": [{"type": "Available", "status": "True", "reason": "AllGroupsReady"}],
        },
    )
    leader = manifest(
        "StatefulSet",
        name,
        namespace,
        labels=label,
        created=created,
        spec={"replicas": replicas, "serviceName": name, "template": pod_template(name, 1, label)},
        status=replicated_status(replicas),
        owner=root,
    )
    workers = []
    for i in range(replicas):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{name}-{i}", "uid": f"pod-{_hash(namespace, name, str(i))}"},
        }
        workers.append(
            manifest(
                "StatefulSet",
                f"{name}-{i}",
                namespace,
                labels=label | {"leaderworkerset.sigs.k8s.io/group-index": str(i)},
                created=created,
                spec={"replicas": 1, "serviceName": name, "template": pod_template(name, 1, label)},
                status=replicated_status(1),
                owner=pod,
            )
        )
    return [root, leader, *workers]


def argo_rollout(namespace: str, name: str, created: datetime, replicas: int = 2) -> list[Manifest]:
    """Argo Rollouts: a Rollout and its ReplicaSet ``NAME-<hash>``."""
    root = manifest(
        "Rollout",
        name,
        namespace,
        created=created,
        spec={"replicas": replicas, "strategy": {"canary": {}}, "template": pod_template(name, 1)},
        # Argo writes observedGeneration as a string.
        status=replicated_status(replicas, progressed=created + timedelta(minutes=1))
        | {"observedGeneration": "1", "phase": "Healthy", "stableRS": _hash(name)},
    )
    rs = manifest(
        "ReplicaSet",
        f"{name}-{_hash(name)}",
        namespace,
        labels={"rollouts-pod-template-hash": _hash(name)},
        created=created,
        spec={"replicas": replicas, "template": pod_template(name, 1)},
        status=replicated_status(replicas),
        owner=root,
    )
    return [root, rs]


def job_set(namespace: str, name: str, created: datetime, gpus: int = 1) -> list[Manifest]:
    """JobSet: a JobSet and its Job ``NAME-workers-0``."""
    root = manifest(
        "JobSet",
        name,
        namespace,
        created=created,
        spec={
            "suspend": False,
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {"spec": {"template": pod_template(name, gpus)}},
                }
            ],
        },
        status={"replicatedJobsStatus": [{"name": "workers", "active": 1, "ready": 1}]},
    )
    job = manifest(
        "Job",
        f"{name}-workers-0",
        namespace,
        labels={"jobset.sigs.k8s.io/jobset-name": name},
        created=created,
        spec={"suspend": False, "parallelism": 1, "completions": 1, "template": pod_template(name, gpus)},
        status={"active": 1, "ready": 1, "startTime": _time(created)},
        owner=root,
    )
    return [root, job]


def kueue_job(
    namespace: str, name: str, created: datetime, queue: str = "team-queue", gpus: int = 1
) -> list[Manifest]:
    """A batch Job submitted to Kueue (its queue-name label), and the Workload Kueue made for it.

    Kueue names the Workload ``job-<name>-<hash>``, labels it with the Job's uid and makes the Job
    its controller; the Workload is admitted, so Kueue unsuspended the Job.
    """
    job = manifest(
        "Job",
        name,
        namespace,
        labels={"kueue.x-k8s.io/queue-name": queue},
        created=created,
        spec={"suspend": False, "parallelism": 1, "completions": 1, "template": pod_template(name, gpus)},
        status={"active": 1, "ready": 1, "startTime": _time(created)},
    )
    admitted = [
        {"type": kind, "status": "True", "reason": kind, "lastTransitionTime": _time(created)}
        for kind in ("QuotaReserved", "Admitted")
    ]
    workload = manifest(
        "KueueWorkload",
        f"job-{name}-{_hash(namespace, name, n=5)}",
        namespace,
        labels={"kueue.x-k8s.io/job-uid": job["metadata"]["uid"]},
        created=created,
        spec={"active": True, "queueName": queue, "podSets": [{"name": "main", "count": 1}]},
        status={"admission": {"clusterQueue": "cluster-queue"}, "conditions": admitted},
        owner=job,
    )
    return [job, workload]


def owned_by_unknown_controller(namespace: str, name: str, created: datetime) -> list[Manifest]:
    """A Deployment under a controller the reaper has no actuator for (a Seldon deployment)."""
    root = {
        "apiVersion": "machinelearning.seldon.io/v1",
        "kind": "SeldonDeployment",
        "metadata": {"name": name, "namespace": namespace, "uid": f"seldon-{_hash(namespace, name)}"},
    }
    return [deployment(namespace, f"{name}-default-0-model", created, owner=root)]
