{{/* The chart's name, or nameOverride. */}}
{{- define "gatehouse.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name, at most 63 characters (a DNS label). */}}
{{- define "gatehouse.fullname" -}}
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

{{- define "gatehouse.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gatehouse.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gatehouse.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gatehouse.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "gatehouse.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gatehouse.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* gatehouse.toml. */}}
{{- define "gatehouse.config" -}}
{{- $c := .Values.config -}}
# Rendered by the gatehouse Helm chart from its values.
listen = "0.0.0.0:{{ $c.httpPort }}"
admin_listen = "0.0.0.0:{{ $c.adminPort }}"
admin_max_connections = {{ int $c.adminMaxConnections }}
{{- if .Values.adminToken.secretName }}
admin_token_file = "/etc/gatehouse/admin/token"
{{- end }}
runtime = {{ $c.runtime | quote }}
workers = {{ int $c.workers }}
log_level = {{ $c.logLevel | quote }}
{{ $c.extra }}
[timeouts]
drain = "{{ int $c.drainSeconds }}s"

[metrics]
enabled = {{ $c.metrics }}
{{- if or .Values.tls.enabled .Values.acme.enabled }}

[tls]
listen = "0.0.0.0:{{ .Values.tls.httpsPort }}"
http2 = {{ .Values.tls.http2 }}
http3 = {{ .Values.tls.http3 }}
redirect_http = {{ .Values.tls.redirectHttp }}
{{- with .Values.tls.hsts }}
hsts = {{ . | quote }}
{{- end }}
{{- if .Values.tls.enabled }}

[[tls.certs]]
cert = "/etc/gatehouse/tls/tls.crt"
key = "/etc/gatehouse/tls/tls.key"
{{- end }}
{{- end }}
{{- if .Values.acme.enabled }}

[acme]
directory = {{ .Values.acme.directory | quote }}
contact = [{{ range $i, $m := .Values.acme.contact }}{{ if $i }}, {{ end }}{{ $m | quote }}{{ end }}]
state_dir = "/var/lib/gatehouse/acme"
challenge = {{ .Values.acme.challenge | quote }}

[[acme.certificates]]
domains = [{{ range $i, $d := .Values.acme.domains }}{{ if $i }}, {{ end }}{{ $d | quote }}{{ end }}]
{{- end }}

{{ $c.routes }}
{{- end }}
