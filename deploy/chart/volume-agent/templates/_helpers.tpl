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

{{/*
The CSI driver's directory in the kubelet's plugin directory: the agent
makes its socket there, and the sidecars reach it at /csi.
*/}}
{{- define "volume-agent.csiPluginDir" -}}
{{- printf "%s/plugins/local.volume-agent.io" .Values.csi.kubeletDir -}}
{{- end -}}

{{/*
The kubelet's plugin registration directory, where the agent serves
local.volume-agent.io-reg.sock.
*/}}
{{- define "volume-agent.kubeletRegistrationDir" -}}
{{- printf "%s/plugins_registry" .Values.csi.kubeletDir -}}
{{- end -}}

{{/*
Whether the pod mounts its ServiceAccount's token: the provisioners, the
service-account mode and the CSI sidecars use it.
*/}}
{{- define "volume-agent.usesToken" -}}
{{- if or .Values.provisioners (eq .Values.identity "serviceAccount") .Values.csi.enabled -}}true{{- end -}}
{{- end -}}
