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

{{/* spawnerd.historyDir is where the SQLite history volume is mounted. */}}
{{- define "spawnerd.historyDir" -}}
/var/lib/spawnerd
{{- end }}

{{/* spawnerd.historyClaim is the SQLite history's PersistentVolumeClaim: the one given, else the chart's. */}}
{{- define "spawnerd.historyClaim" -}}
{{- default (printf "%s-history" (include "spawnerd.fullname" .)) .Values.history.sqlite.persistence.existingClaim }}
{{- end }}

{{/*
spawnerd.historyDSNRef is the secretKeyRef of the PostgreSQL DSN: a Secret
of the operator's (history.postgres.existingSecret), else the key history-dsn
of the chart's Secret or of the one that replaces it (secret.existingSecret).
*/}}
{{- define "spawnerd.historyDSNRef" -}}
{{- with .Values.history.postgres.existingSecret }}
name: {{ . }}
key: {{ required "history.postgres.dsnKey names the DSN's key in history.postgres.existingSecret" $.Values.history.postgres.dsnKey }}
{{- else }}
name: {{ include "spawnerd.secretName" . }}
key: history-dsn
{{- end }}
{{- end }}

{{/*
spawnerd.validate refuses, at render time, settings that cannot work, each
with the values to change.
*/}}
{{- define "spawnerd.validate" -}}
{{- $h := .Values.history }}
{{- if not (has $h.store (list "sqlite" "postgres")) }}
{{- fail (printf "history.store is %q: want sqlite (one replica) or postgres" (toString $h.store)) }}
{{- end }}
{{- if eq $h.store "sqlite" }}
{{- /* SQLite is a file one process writes; on a shared volume it is not a replicated store. */}}
{{- if gt (int .Values.replicaCount) 1 }}
{{- fail (printf "history.store=sqlite keeps the session history in a file for ONE replica, but replicaCount is %d: set history.store=postgres with history.postgres.dsn (or history.postgres.existingSecret) for replicas, or replicaCount=1" (int .Values.replicaCount)) }}
{{- end }}
{{- if or $h.postgres.dsn $h.postgres.existingSecret }}
{{- fail "history.postgres is set but history.store is sqlite: set history.store=postgres to use the database, or leave history.postgres empty" }}
{{- end }}
{{- else }}
{{- if and $h.postgres.dsn $h.postgres.existingSecret }}
{{- fail "history.postgres: set dsn or existingSecret, not both" }}
{{- end }}
{{- if not $h.postgres.existingSecret }}
{{- if .Values.secret.existingSecret }}
{{- if $h.postgres.dsn }}
{{- fail (printf "history.postgres.dsn goes into the chart's Secret, which secret.existingSecret replaces: put the DSN into Secret %q under the key history-dsn (and leave history.postgres.dsn empty), or name a Secret with history.postgres.existingSecret" .Values.secret.existingSecret) }}
{{- end }}
{{- else if not $h.postgres.dsn }}
{{- fail "history.store=postgres needs the database: set history.postgres.dsn, or history.postgres.existingSecret (and dsnKey)" }}
{{- end }}
{{- end }}
{{- end }}
{{- $c := .Values.console }}
{{- if $c.enabled }}
{{- if not .Values.hub.apiURL }}
{{- fail "console.enabled needs hub.apiURL: the console logs users in through the hub's OAuth. Set hub.apiURL, or console.enabled=false" }}
{{- end }}
{{- /* The hub serves its services under its own base_url. */}}
{{- range $key, $prefix := dict "console.prefix" $c.prefix "console.hubPublicPrefix" $c.hubPublicPrefix }}
{{- if not (and (hasPrefix $.Values.hub.baseURL (toString $prefix)) (hasSuffix "/" (toString $prefix))) }}
{{- fail (printf "%s is %q: it must start with hub.baseURL %q and end with /" $key (toString $prefix) $.Values.hub.baseURL) }}
{{- end }}
{{- end }}
{{- if not (and $c.scope $c.oauthClientID) }}
{{- fail "console.scope and console.oauthClientID must be set with console.enabled" }}
{{- end }}
{{- end }}
{{- end }}
