{{/* spawnerd.name is the chart name, or nameOverride. */}}
{{- define "spawnerd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* spawnerd.fullname names the release's objects: the release name when it already contains the chart name. */}}
{{- define "spawnerd.fullname" -}}
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

{{/* spawnerd.clusterName names cluster-wide objects, which releases in different namespaces must not share. */}}
{{- define "spawnerd.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "spawnerd.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "spawnerd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "spawnerd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "spawnerd.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "spawnerd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "spawnerd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "spawnerd.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "spawnerd.secretName" -}}
{{- default (include "spawnerd.fullname" .) .Values.secret.existingSecret }}
{{- end }}

{{/*
spawnerd.spawnerConfig is spawnerConfig with the traits the chart owns:
the namespace (KubeSpawner's default is the hub's, i.e. the release's),
enable_user_namespaces, which must agree with the RBAC the chart grants, and
with user namespaces the label the pod write policy looks for, added to
user_namespace_labels.
*/}}
{{- define "spawnerd.spawnerConfig" -}}
{{- $cfg := deepCopy (.Values.spawnerConfig | default dict) }}
{{- $ks := get $cfg "kubespawner" | default dict }}
{{- if and (hasKey $ks "enable_user_namespaces") (ne (toString $ks.enable_user_namespaces) (toString .Values.userNamespaces.enabled)) }}
{{- fail "spawnerConfig.kubespawner.enable_user_namespaces disagrees with userNamespaces.enabled: set userNamespaces.enabled only" }}
{{- end }}
{{- if .Values.userNamespaces.enabled }}
{{- $_ := set $ks "enable_user_namespaces" true }}
{{- /* The label the pod write policy requires of a user namespace. */}}
{{- $nsLabels := deepCopy (get $ks "user_namespace_labels" | default dict) }}
{{- $_ := set $nsLabels .Values.userNamespaces.namespaceLabel (include "spawnerd.clusterName" .) }}
{{- $_ := set $ks "user_namespace_labels" $nsLabels }}
{{- end }}
{{- if not $ks.namespace }}
{{- $_ := set $ks "namespace" .Release.Namespace }}
{{- end }}
{{- $_ := set $cfg "kubespawner" $ks }}
{{- if .Values.reservation.enabled }}
{{- $_ := set $cfg "reservation" (.Values.reservation.config | default dict) }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/* spawnerd.notebookNamespace is where the namespaced Role goes: the spawner config's namespace. */}}
{{- define "spawnerd.notebookNamespace" -}}
{{- (include "spawnerd.spawnerConfig" . | fromYaml).kubespawner.namespace }}
{{- end }}

{{/*
spawnerd.secretValue is a value for one key of the chart's Secret: the
value given, else the one already in the cluster, else a new random one.
*/}}
{{- define "spawnerd.secretValue" -}}
{{- $root := index . 0 }}
{{- $key := index . 1 }}
{{- $given := index . 2 }}
{{- if $given }}
{{- $given }}
{{- else }}
{{- $existing := lookup "v1" "Secret" $root.Release.Namespace (include "spawnerd.fullname" $root) }}
{{- if and $existing (hasKey ($existing.data | default dict) $key) }}
{{- index $existing.data $key | b64dec }}
{{- else }}
{{- randAlphaNum 64 }}
{{- end }}
{{- end }}
{{- end }}

{{/* spawnerd.webhookCertSecret is the Secret spawnerd keeps the webhook certificate in ("" with an existing one). */}}
{{- define "spawnerd.webhookCertSecret" -}}
{{- if not .Values.webhook.existingCertSecret }}
{{- default (printf "%s-webhook-cert" (include "spawnerd.fullname" .)) .Values.webhook.certSecret }}
{{- end }}
{{- end }}
