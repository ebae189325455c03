"""Annotation keys and object names the reaper reads and writes: the reaper's public contract on objects."""

from __future__ import annotations

PREFIX = "gpu-reaper/"

# Set by owners.
EXCLUDE = PREFIX + "exclude"  # "true": never touch this workload (or any workload of this namespace)
EXCLUDE_UNTIL = PREFIX + "exclude-until"  # RFC 3339: excluded until then, eligible again afterwards
SLACK_CHANNEL = PREFIX + "slack-channel"  # on a Namespace: where its owners hear about their workloads

# Written by the reaper.
ORIGINAL_REPLICAS = PREFIX + "original-replicas"
REAPED_AT = PREFIX + "reaped-at"
REASON = PREFIX + "reason"
RESTORED_AT = PREFIX + "restored-at"  # also resets the idle clock: grace after restore
CORDONED_AT = PREFIX + "cordoned-at"  # only nodes carrying it are ever uncordoned
# A rule's ``notice:`` (reaper.notice_marks): when the notice was given, and when the reaper may act.
NOTICED_AT = PREFIX + "noticed-at"
ACT_AFTER = PREFIX + "act-after"

# Set by others, read by the reaper.
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"  # `kubectl rollout restart`, on the pod template
KUBEFLOW_STOPPED = "kubeflow-resource-stopped"  # Kubeflow Notebook: RFC 3339 time; the pods go away
KSERVE_STOP = "serving.kserve.io/stop"  # KServe InferenceService: "true" tears down its workloads
KNATIVE_MIN_SCALE = ("autoscaling.knative.dev/min-scale", "autoscaling.knative.dev/minScale")
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"  # on a LeaderWorkerSet's StatefulSets and pods

# Objects the reaper owns in its own namespace.
LEASE_NAME = "gpu-reaper"
STATE_CONFIGMAP = "gpu-reaper-state"
STATE_KEY = "confirmations.json"
STOPPED_KEY = "stopped.json"  # same ConfigMap: every object a run stopped, for `restore --all`

FIELD_MANAGER = "gpu-reaper"
COMPONENT = "gpu-reaper"

ALWAYS_PROTECTED_NAMESPACES = ("kube-system",)
DEFAULT_REAPER_NAMESPACE = "gpu-reaper"

# GitOps controllers whose next sync would undo a scale-down.
ARGO_CD_TRACKING_ANNOTATION = "argocd.argoproj.io/tracking-id"
ARGO_CD_INSTANCE_LABEL = "argocd.argoproj.io/instance"
FLUX_KUSTOMIZE_LABEL = "kustomize.toolkit.fluxcd.io/name"
FLUX_HELM_LABEL = "helm.toolkit.fluxcd.io/name"

# Node resources that make a node a GPU node (MIG partitions included).
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-", "amd.com/gpu")

TRUE_VALUES = frozenset({"true", "yes", "1", "on"})
