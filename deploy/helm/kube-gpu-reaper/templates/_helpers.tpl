{{/* Chart name, truncated to the 63 characters Kubernetes names allow. */}}
{{- define "kgr.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified name; the release name alone when it already contains the chart name. */}}
{{- define "kgr.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Names of the two components' objects. */}}
{{- define "kgr.exporter.fullname" -}}
{{- printf "%s-gpu-exporter" (include "kgr.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "kgr.reaper.fullname" -}}
{{- printf "%s-gpu-reaper" (include "kgr.fullname" .) | trunc 52 | trimSuffix "-" }}
{{- end }}

{{- define "kgr.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kgr.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kgr.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kgr.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of one component: call with (dict "root" $ "component" "gpu-exporter"). */}}
{{- define "kgr.componentLabels" -}}
{{ include "kgr.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- define "kgr.componentSelectorLabels" -}}
{{ include "kgr.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* The image reference: a digest wins over a tag; the tag defaults to the chart's appVersion. */}}
{{- define "kgr.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "kgr.exporter.serviceAccountName" -}}
{{- if .Values.exporter.serviceAccount.create }}
{{- default (include "kgr.exporter.fullname" .) .Values.exporter.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.exporter.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kgr.reaper.serviceAccountName" -}}
{{- if .Values.reaper.serviceAccount.create }}
{{- default (include "kgr.reaper.fullname" .) .Values.reaper.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.reaper.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Where the policy is mounted; the CronJob's --policy points here. */}}
{{- define "kgr.reaper.policyDir" -}}/etc/gpu-reaper{{- end }}

{{/*
How often the CronJob runs, as `gpu-reaper run --run-interval` takes it: a dry-run replays the
runs apply would have made at this interval. reaper.runInterval when set; otherwise read from the
simple schedules, which run at even intervals: once an hour, every N minutes or every N hours
(N dividing an hour or a day), once a day, @hourly, @daily. Any other needs reaper.runInterval.
(No cron step syntax here: it would end this comment.)
*/}}
{{- define "kgr.reaper.runInterval" -}}
{{- $r := .Values.reaper }}
{{- $cron := regexReplaceAll "\\s+" (trim $r.schedule) " " }}
{{- $n := int (regexFind "[0-9]+" (regexFind "/[0-9]+" $cron)) }}
{{- if $r.runInterval }}
{{- $r.runInterval }}
{{- else if or (eq $cron "@hourly") (regexMatch "^[0-9]+ \\* \\* \\* \\*$" $cron) }}1h
{{- else if or (has $cron (list "@daily" "@midnight")) (regexMatch "^[0-9]+ [0-9]+ \\* \\* \\*$" $cron) }}24h
{{- else if and (regexMatch "^\\*/[0-9]+ \\* \\* \\* \\*$" $cron) (gt $n 0) (eq (mod 60 $n) 0) }}
{{- if eq $n 60 }}1h{{ else }}{{ $n }}m{{ end }}
{{- else if and (regexMatch "^[0-9]+ \\*/[0-9]+ \\* \\* \\*$" $cron) (gt $n 0) (eq (mod 24 $n) 0) }}{{ $n }}h
{{- else }}
{{- fail (printf "reaper.schedule %q: the interval between runs cannot be read from it; set reaper.runInterval (e.g. 30m, 2h)" $r.schedule) }}
{{- end }}
{{- end }}

{{/* Namespace of the exporter's objects: exporter.namespace, else the release's. */}}
{{- define "kgr.exporter.namespace" -}}
{{- default .Release.Namespace .Values.exporter.namespace }}
{{- end }}

{{/* Names of the inline policy's cordon rules, comma-separated; empty when there are none, or when
the policy comes from reaper.existingPolicyConfigMap, which the chart cannot read. */}}
{{- define "kgr.reaper.cordonRules" -}}
{{- if not .Values.reaper.existingPolicyConfigMap }}
{{- $names := list }}
{{- range ((.Values.reaper.policy | default dict).rules | default list) }}
{{- if eq (toString .action) "cordon" }}{{ $names = append $names (toString .name) }}{{ end }}
{{- end }}
{{- join ", " $names }}
{{- end }}
{{- end }}
