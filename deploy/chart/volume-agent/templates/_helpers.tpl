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
{{- if or (include "volume-agent.provisioners" .) (eq .Values.identity "serviceAccount") .Values.csi.enabled -}}true{{- end -}}
{{- end -}}

{{/*
The provisioners the agent runs, joined by ",": the provisioners value
when set; unset (null), local with csi.enabled (the CSI driver serves the
local provisioner's volumes) and none without, so that an install that sets
csi.enabled: false renders what it did before the driver was on by
default. Refuses csi.enabled with provisioners that lack local: the agent
would refuse to start on every node ("give --provisioners local too").
*/}}
{{- define "volume-agent.provisioners" -}}
{{- $set := index .Values "provisioners" -}}
{{- if kindIs "invalid" $set -}}
{{- if .Values.csi.enabled -}}local{{- end -}}
{{- else -}}
{{- if and .Values.csi.enabled (not (has "local" $set)) -}}
{{- fail (printf "csi.enabled is true but provisioners %s lacks \"local\": the CSI driver local.volume-agent.io serves the local provisioner's volumes, and the agent refuses --csi-endpoint without --provisioners local. Add local to provisioners (for example provisioners: [local%s]), leave provisioners unset (null: local with the CSI driver), or set csi.enabled: false" (toJson $set) (ternary ", nfs-subdir" "" (has "nfs-subdir" $set))) -}}
{{- end -}}
{{- join "," $set -}}
{{- end -}}
{{- end -}}
