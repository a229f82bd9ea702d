{{/* The objects' name: the release name, with "tidemark" unless the release name holds it. */}}
{{- define "tidemark.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tidemark.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tidemark.labels" -}}
{{ include "tidemark.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* "collector" with a clickhouse block, else "lag-exporter". */}}
{{- define "tidemark.mode" -}}
{{- if .Values.config.clickhouse -}}collector{{- else -}}lag-exporter{{- end -}}
{{- end -}}

{{/*
The config file: .Values.config with http.listen on the container port. With several replicas the lag exporter
election must be on (else every replica would export, and store, the same lag) and the probe instance id must be
left to each pod's name.
*/}}
{{- define "tidemark.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $listen := printf ":%d" (int .Values.service.port) -}}
{{- $http := dict -}}
{{- if hasKey $cfg "http" -}}{{- $http = get $cfg "http" -}}{{- end -}}
{{- if and (hasKey $http "listen") (ne (toString (get $http "listen")) $listen) -}}
{{- fail (printf "config.http.listen %q: the chart listens on service.port (%s); set service.port instead" (toString (get $http "listen")) $listen) -}}
{{- end -}}
{{- $_ := set $http "listen" $listen -}}
{{- $_ := set $cfg "http" $http -}}
{{- if gt (int .Values.replicaCount) 1 -}}
{{- $lagOn := true -}}
{{- if hasKey $cfg "lag_enabled" -}}{{- $lagOn = get $cfg "lag_enabled" -}}{{- end -}}
{{- $election := false -}}
{{- if hasKey $cfg "lag" -}}{{- $election = dig "election" "enabled" false (get $cfg "lag") -}}{{- end -}}
{{- if and $lagOn (not $election) -}}
{{- fail (printf "replicaCount %d: set config.lag.election.enabled: true (one active lag exporter per cluster)" (int .Values.replicaCount)) -}}
{{- end -}}
{{- if hasKey $cfg "collector" -}}
{{- if dig "probe" "instance_id" "" (get $cfg "collector") -}}
{{- fail "config.collector.probe.instance_id is set: every replica would share it; leave it unset (each pod's name is its id)" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{- define "tidemark.resources" -}}
{{- if .Values.resources -}}
{{- toYaml .Values.resources -}}
{{- else if eq (include "tidemark.mode" .) "collector" -}}
{{- toYaml .Values.resourceDefaults.collector -}}
{{- else -}}
{{- toYaml .Values.resourceDefaults.lagExporter -}}
{{- end -}}
{{- end -}}
