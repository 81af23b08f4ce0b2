{{/* Name of the release's objects. */}}
{{- define "cma.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "cma.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: addon-manager
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Labels selecting the manager's pods. */}}
{{- define "cma.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: addon-manager
{{- end -}}

{{/* The manager's ServiceAccount. */}}
{{- define "cma.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "cma.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Agent versions, comma-separated (the appVersion when none are set). */}}
{{- define "cma.agentVersions" -}}
{{- if .Values.agent.versions -}}
{{- join "," .Values.agent.versions -}}
{{- else -}}
{{- .Chart.AppVersion -}}
{{- end -}}
{{- end -}}

{{/* A duration of whole seconds, minutes or hours (30s, 10m, 1h) in seconds. */}}
{{- define "cma.seconds" -}}
{{- $d := toString . -}}
{{- if hasSuffix "h" $d -}}{{ mul (trimSuffix "h" $d | int) 3600 }}
{{- else if hasSuffix "m" $d -}}{{ mul (trimSuffix "m" $d | int) 60 }}
{{- else -}}{{ trimSuffix "s" $d | int }}
{{- end -}}
{{- end -}}
