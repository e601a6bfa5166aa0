{{/*
The name of the ServiceAccount, the RBAC objects and the DaemonSet:
fullnameOverride, else the release name when it contains the chart's name,
else <release>-<chart>.
*/}}
{{- define "volume-agent.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
The ServiceAccount every binding names.
*/}}
{{- define "volume-agent.subject" -}}
- kind: ServiceAccount
  name: {{ include "volume-agent.fullname" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}

{{/*
The port of metricsAddr (host:port, [v6]:port).
*/}}
{{- define "volume-agent.metricsPort" -}}
{{- .Values.metricsAddr | splitList ":" | last -}}
{{- end -}}
