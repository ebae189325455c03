{{/*
The reaper's rules on namespaced kinds: in its ClusterRole for a cluster-wide install, in a Role
per namespace of rbac.namespaces otherwise.

Deployments, StatefulSets and ownerless ReplicaSets are stopped through their scale subresource
only, and the marks that say the reaper stopped them live in its state ConfigMap: no patch on the
objects themselves, whose pod templates (image, service account, volumes) a patch could rewrite.
Custom controllers are stopped the way their own controllers read (rbac.admissionPolicy limits
those patches to exactly the fields concerned): spec.replicas (LeaderWorkerSet, Argo Rollout),
spec.suspend (RayCluster, JobSet), spec.active on a Kueue-managed Job's Workload, or the
controller's own stop annotation (Kubeflow Notebook, KServe InferenceService). Custom kinds are
listed only where their API is served: a 404 means "not installed". A controller switched off in
rbac.controllers is not readable: its children are then left alone (skipped as
controller_managed), never scaled behind its back.
*/}}
{{- define "kgr.reaper.workloadRules" -}}
- apiGroups: ["apps"]
  resources: ["deployments", "statefulsets", "replicasets"]
  verbs: ["list", "get"]
- apiGroups: ["apps"]
  resources: ["deployments/scale", "statefulsets/scale", "replicasets/scale"]
  verbs: ["patch"]
{{- if .Values.rbac.noticeAnnotations }}
# A rule's notice annotates the object (gpu-reaper/noticed-at, gpu-reaper/act-after): the only patch
# of these kinds, which rbac.admissionPolicy narrows to exactly those two annotations.
- apiGroups: ["apps"]
  resources: ["deployments", "statefulsets", "replicasets"]
  verbs: ["patch"]
{{- end }}
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: {{ if .Values.rbac.controllers.kueueJobs }}["list", "get", "patch"]{{ else }}["list"]{{ end }}
{{- if .Values.rbac.controllers.kueueJobs }}
# A Kueue-managed Job is stopped through its Workload (spec.active: false), found by its
# ownerReference in the Job's namespace: Kueue owns the Job's spec.suspend.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["list", "patch"]
{{- end }}
{{- with .Values.rbac.controllers }}
{{- if .kubeflowNotebooks }}
- apiGroups: ["kubeflow.org"]
  resources: ["notebooks"]
  verbs: ["list", "get", "patch"]
{{- end }}
{{- if .kserve }}
- apiGroups: ["serving.kserve.io"]
  resources: ["inferenceservices"]
  verbs: ["list", "get", "patch"]
{{- end }}
{{- if .kuberay }}
- apiGroups: ["ray.io"]
  resources: ["rayclusters"]
  verbs: ["list", "get", "patch"]
# A RayService is read to find the root, never written: it is reported, not stopped.
- apiGroups: ["ray.io"]
  resources: ["rayservices"]
  verbs: ["list"]
{{- end }}
{{- if .leaderWorkerSets }}
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  verbs: ["list", "get", "patch"]
{{- end }}
{{- if .argoRollouts }}
- apiGroups: ["argoproj.io"]
  resources: ["rollouts"]
  verbs: ["list", "get", "patch"]
{{- end }}
{{- if .jobSets }}
- apiGroups: ["jobset.x-k8s.io"]
  resources: ["jobsets"]
  verbs: ["list", "get", "patch"]
{{- end }}
{{- if .knative }}
# Knative is read to find the root, never written: it scales to zero by itself.
- apiGroups: ["serving.knative.dev"]
  resources: ["services", "configurations", "revisions"]
  verbs: ["list"]
{{- end }}
{{- end }}
{{- range .Values.rbac.scaleSubresources }}
# A custom root kind whose CRD declares a scale subresource: the object is read (to find the
# root) and patched (the gpu-reaper/* annotations); its replicas go through /scale.
- apiGroups: [{{ .group | quote }}]
  resources: [{{ .resource | quote }}, {{ printf "%s/scale" .resource | quote }}]
  verbs: ["get", "patch"]
{{- end }}
# Workloads under an autoscaler are never scaled behind its back (KEDA may be absent: a 404 is fine).
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["list"]
{{- if .Values.rbac.wakeKedaHttp }}
# wake: keda-http (docs/wake.md): the Services in front of a workload are read; the KEDA HTTP
# add-on's objects are created, and deleted on restore (only those labelled as gpu-reaper's); a
# ScaledObject already there is paused (autoscaling.keda.sh/paused-replicas) and unpaused.
- apiGroups: [""]
  resources: ["services"]
  verbs: ["list"]
- apiGroups: ["http.keda.sh"]
  resources: ["interceptorroutes", "httpscaledobjects"]
  verbs: ["list", "create", "delete"]
- apiGroups: ["keda.sh"]
  resources: ["scaledobjects"]
  verbs: ["list", "get", "create", "patch", "delete"]
{{- else }}
- apiGroups: ["keda.sh"]
  resources: ["scaledobjects"]
  verbs: ["list"]
{{- end }}
{{- if .Values.rbac.readPendingPods }}
# when: demand (docs/reaper.md): the pods Pending as unschedulable that ask for GPUs, and the Kueue
# Workloads waiting for admission, are the demand a rule acts against. Listed only, never read one
# by one: a pod's spec is what the scheduler reads, its logs and Secrets stay out of reach.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
{{- if not .Values.rbac.controllers.kueueJobs }}
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["list"]
{{- end }}
{{- end }}
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end }}

{{/* The reaper's rules on cluster-scoped kinds (always in a ClusterRole); empty when
rbac.readNodes, rbac.readNamespaces and rbac.cordonNodes leave none. */}}
{{- define "kgr.reaper.clusterRules" -}}
{{- $rbac := .Values.rbac }}
{{- if or $rbac.readNodes $rbac.cordonNodes }}
# GPU capacity and cordon state; a cordon sets spec.unschedulable and gpu-reaper/cordoned-at.
- apiGroups: [""]
  resources: ["nodes"]
  verbs: {{ if $rbac.cordonNodes }}["list", "get", "patch"]{{ else }}["list", "get"]{{ end }}
{{- end }}
{{- if and $rbac.readNamespaces (not $rbac.namespaces) }}
# Opt-out and Slack-channel annotations.
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["list"]
{{- end }}
{{- end }}
