{{/* The name prefix of every object. */}}
{{- define "mooring.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "mooring.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mooring
{{- end -}}

{{/* Selector labels; call with (list $ "controller"|"agent"). */}}
{{- define "mooring.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ default $.Chart.Name $.Values.nameOverride }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "mooring.serviceAccountName" -}}
{{- $ := index . 0 -}}
{{- $sa := (index $.Values (index . 1)).serviceAccount -}}
{{- if $sa.create -}}
{{- default (printf "%s-%s" (include "mooring.fullname" $) (index . 1)) $sa.name -}}
{{- else -}}
{{- default "default" $sa.name -}}
{{- end -}}
{{- end -}}

{{- define "mooring.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* A flag value as the binary wants it: whole numbers without exponent. */}}
{{- define "mooring.flagValue" -}}
{{- if and (kindIs "float64" .) (eq . (floor .)) -}}
{{- printf "%d" (int64 .) -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/*
The command-line flags of a component: one --kebab-case=value per entry of
its flags map (an empty string or list leaves the flag out; a list is
joined with commas). Call with
(dict "flags" map "override" map) where override wins over flags.
*/}}
{{- define "mooring.flags" -}}
{{- $flags := merge (dict) .override .flags -}}
{{- range $k, $v := $flags }}
{{- if kindIs "slice" $v }}
{{- if $v }}
- {{ printf "--%s=%s" (kebabcase $k) (join "," $v) | quote }}
{{- end }}
{{- else if not (or (kindIs "invalid" $v) (and (kindIs "string" $v) (eq $v ""))) }}
- {{ printf "--%s=%s" (kebabcase $k) (include "mooring.flagValue" $v) | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The port of a host:port listen address; "" when disabled ("", "0"). */}}
{{- define "mooring.port" -}}
{{- if and . (ne . "0") -}}
{{- regexReplaceAll "^.*:" . "" -}}
{{- end -}}
{{- end -}}

{{- define "mooring.gossipKeySecret" -}}
{{- if .Values.agent.gossipKey.existingSecret -}}
{{- .Values.agent.gossipKey.existingSecret -}}
{{- else -}}
{{- printf "%s-gossip-key" (include "mooring.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* Fails rendering when the agent would gossip without a key by accident. */}}
{{- define "mooring.checkGossipKey" -}}
{{- $k := .Values.agent.gossipKey -}}
{{- if and .Values.agent.enabled (not $k.insecureNoKey) (not $k.value) (not $k.existingSecret) -}}
{{- fail "agent.gossipKey: the agents' gossip needs a key. Set agent.gossipKey.value=$(head -c 32 /dev/urandom | base64) (the chart creates a Secret) or agent.gossipKey.existingSecret=<Secret name>, or agent.gossipKey.insecureNoKey=true to run gossip unauthenticated" -}}
{{- end -}}
{{- if and $k.value $k.existingSecret -}}
{{- fail "agent.gossipKey: set value or existingSecret, not both" -}}
{{- end -}}
{{- end -}}
