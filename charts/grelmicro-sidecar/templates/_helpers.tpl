{{/* Names -------------------------------------------------------------- */}}

{{- define "grelmicro-sidecar.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name; "grelmicro-sidecar" for a release of that name. */}}
{{- define "grelmicro-sidecar.fullname" -}}
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

{{- define "grelmicro-sidecar.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "grelmicro-sidecar.selectorLabels" -}}
app.kubernetes.io/name: {{ include "grelmicro-sidecar.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: injector
{{- end }}

{{/* Every object's labels, without app.kubernetes.io/component (see "labels"). */}}
{{- define "grelmicro-sidecar.commonLabels" -}}
helm.sh/chart: {{ include "grelmicro-sidecar.chart" . }}
app.kubernetes.io/name: {{ include "grelmicro-sidecar.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: grelmicro-sidecar
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "grelmicro-sidecar.labels" -}}
{{ include "grelmicro-sidecar.commonLabels" . }}
app.kubernetes.io/component: injector
{{- end }}

{{- define "grelmicro-sidecar.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "grelmicro-sidecar.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "grelmicro-sidecar.webhookConfigName" -}}
{{- printf "%s-injector" (include "grelmicro-sidecar.fullname" .) | trunc 253 }}
{{- end }}

{{/* The ClusterRole of the sidecar's Lease permissions, bound in each workload namespace. */}}
{{- define "grelmicro-sidecar.leaseClusterRole" -}}
{{- printf "%s-leases" (include "grelmicro-sidecar.fullname" .) | trunc 253 }}
{{- end }}

{{/* The sidecar's permissions in its namespace (contract §8). */}}
{{- define "grelmicro-sidecar.leaseRules" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
# Events on the Lease (who became leader, who stopped), for kubectl describe lease.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
# Whether this pod is being deleted, at shutdown: its app stopped first, so the
# release need not wait for the last valid_until (contract §5).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get"]
{{- end }}

{{- define "grelmicro-sidecar.tlsSecretName" -}}
{{- printf "%s-tls" (include "grelmicro-sidecar.fullname" .) }}
{{- end }}

{{/* The Service's DNS names, which the serving certificate must carry. */}}
{{- define "grelmicro-sidecar.serviceDNSNames" -}}
{{- $svc := include "grelmicro-sidecar.fullname" . }}
{{- list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) | toJson }}
{{- end }}

{{/* Where `helm test` dry-runs its pods: test.namespace, or one it creates. */}}
{{- define "grelmicro-sidecar.testNamespace" -}}
{{- default (printf "%s-test" (include "grelmicro-sidecar.fullname" .) | trunc 63 | trimSuffix "-") .Values.test.namespace }}
{{- end }}

{{/* Images ------------------------------------------------------------- */}}

{{/*
An image reference from (value's name, repository, tag, digest): repository:tag, then
@digest when given. A repository with no registry host and no "/" ("grelmicro-sidecar")
is an official Docker Hub name that no one publishes this image under: nodes could never
pull it, so the render fails and says which value to set.
*/}}
{{- define "grelmicro-sidecar.imageRef" -}}
{{- $value := index . 0 }}
{{- $repo := index . 1 }}
{{- $tag := index . 2 }}
{{- $digest := index . 3 }}
{{- if not (contains "/" $repo) }}
{{- fail (printf "%s %q names no registry, so nodes would look for docker.io/library/%s, which does not exist; set %s to the image's path in a registry your nodes pull from, such as ghcr.io/grelinfo/grelmicro-sidecar (where releases are published) or <your-registry>/grelmicro-sidecar" $value $repo $repo $value) }}
{{- end }}
{{- printf "%s:%s" $repo $tag }}
{{- if and $digest (not (contains "@" $tag)) }}@{{ $digest }}{{ end }}
{{- end }}

{{- define "grelmicro-sidecar.image" -}}
{{- include "grelmicro-sidecar.imageRef" (list "image.repository" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) .Values.image.digest) }}
{{- end }}

{{/* The injected sidecar's image: the injector's unless sidecar.image says otherwise (a digest
only goes with the repository and tag it was given with). */}}
{{- define "grelmicro-sidecar.sidecarImage" -}}
{{- $s := .Values.sidecar.image }}
{{- if or $s.repository $s.tag }}
{{- $repo := default .Values.image.repository $s.repository }}
{{- $tag := default (default .Chart.AppVersion .Values.image.tag) $s.tag }}
{{- include "grelmicro-sidecar.imageRef" (list (ternary "sidecar.image.repository" "image.repository" (ne $s.repository "")) $repo $tag "") }}
{{- else }}
{{- include "grelmicro-sidecar.image" . }}
{{- end }}
{{- end }}

{{/* Namespaces the webhook never sees: kube-system, the release's, and the extra ones; sorted, unique (as sidecar.injector.webhookconfig builds them). */}}
{{- define "grelmicro-sidecar.excludedNamespaces" -}}
{{- concat (list "kube-system" .Release.Namespace) .Values.webhook.excludedNamespaces | uniq | sortAlpha | toJson }}
{{- end }}

{{/* Timings ------------------------------------------------------------ */}}

{{/* Milliseconds in a Go-style duration ("15s", "1500ms", "1m30s"); the schema has checked its form. */}}
{{- define "grelmicro-sidecar.millis" -}}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ms|s|m|h)" . -1 }}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" . | float64 }}
{{- $unit := regexReplaceAll "^[0-9]+(\\.[0-9]+)?" . "" }}
{{- $scale := get (dict "ms" 1.0 "s" 1000.0 "m" 60000.0 "h" 3600000.0) $unit }}
{{- $total = addf $total (mulf $number $scale) }}
{{- end }}
{{- $total }}
{{- end }}

{{/* contract §3, checked before anything reaches the cluster (the injector checks them again at start-up). */}}
{{- define "grelmicro-sidecar.validate" -}}
{{- /*
Kubernetes 1.30 or newer (native sidecars, webhook matchConditions). Checked
only when the chart talks to a real cluster (lookup finds kube-system):
`helm template` and `helm lint` render with helm's built-in version, which is
older, and must still produce manifests for offline and GitOps use.
*/ -}}
{{- if and (lookup "v1" "Namespace" "" "kube-system") (semverCompare "<1.30.0-0" .Capabilities.KubeVersion.Version) }}
{{- fail (printf "grelmicro-sidecar needs Kubernetes 1.30 or newer (native sidecar containers, webhook matchConditions); this cluster runs %s" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- $s := .Values.sidecar }}
{{- $lease := include "grelmicro-sidecar.millis" $s.leaseDuration | float64 }}
{{- $renew := include "grelmicro-sidecar.millis" $s.renewDeadline | float64 }}
{{- $retry := include "grelmicro-sidecar.millis" $s.retryPeriod | float64 }}
{{- if not (gt $retry 0.0) }}
{{- fail (printf "sidecar.retryPeriod (%s) must be greater than 0" $s.retryPeriod) }}
{{- end }}
{{- if not (gt $renew (mulf 1.2 $retry)) }}
{{- fail (printf "sidecar.renewDeadline (%s) must be greater than 1.2 × sidecar.retryPeriod (%s)" $s.renewDeadline $s.retryPeriod) }}
{{- end }}
{{- if not (gt $lease $renew) }}
{{- fail (printf "sidecar.leaseDuration (%s) must be greater than sidecar.renewDeadline (%s)" $s.leaseDuration $s.renewDeadline) }}
{{- end }}
{{- if or (lt $lease 1000.0) (ne (mod (int64 $lease) 1000) 0) (ne $lease (float64 (int64 $lease))) }}
{{- fail (printf "sidecar.leaseDuration (%s) must be a whole number of seconds, such as 15s or 1m (a Lease's leaseDurationSeconds is an integer)" $s.leaseDuration) }}
{{- end }}
{{- if has (include "grelmicro-sidecar.testNamespace" .) (include "grelmicro-sidecar.excludedNamespaces" . | fromJsonArray) }}
{{- fail (printf "test.namespace (%s) is excluded from injection (kube-system, the release's namespace and webhook.excludedNamespaces); pick a namespace the webhook sees" (include "grelmicro-sidecar.testNamespace" .)) }}
{{- end }}
{{- /*
The leader-label policy is cluster-scoped and has one name: a second release
would collide with the first one's. Say so before helm's ownership error.
*/ -}}
{{- if .Values.leaderLabel.policy }}
{{- $policy := lookup "admissionregistration.k8s.io/v1" "ValidatingAdmissionPolicy" "" "grelmicro-sidecar-leader-label" }}
{{- if $policy }}
{{- $owner := index ($policy.metadata.annotations | default dict) "meta.helm.sh/release-name" | default "" }}
{{- $ownerNs := index ($policy.metadata.annotations | default dict) "meta.helm.sh/release-namespace" | default "" }}
{{- if or (ne $owner .Release.Name) (ne $ownerNs .Release.Namespace) }}
{{- fail (printf "leaderLabel.policy: the ValidatingAdmissionPolicy grelmicro-sidecar-leader-label already exists (release %q in namespace %q, or applied by hand); one copy serves the whole cluster: install this release with --set leaderLabel.policy=false" $owner $ownerNs) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.webhook.caBundle (not (and .Values.webhook.url .Values.tls.certManager.enabled)) }}
{{- fail "webhook.caBundle is only used with webhook.url and tls.certManager.enabled (otherwise the injector sets the CA bundle itself); remove it" }}
{{- end }}
{{- if and .Values.webhook.url .Values.tls.certManager.enabled (not .Values.webhook.caBundle) }}
{{- fail "webhook.url with tls.certManager.enabled needs webhook.caBundle: cert-manager only injects the CA of the in-cluster Service's certificate" }}
{{- end }}
{{- end }}

{{/* TLS ---------------------------------------------------------------- */}}

{{/* The names the serving certificate must carry: the Service's, and webhook.url's host. */}}
{{- define "grelmicro-sidecar.certHosts" -}}
{{- $hosts := include "grelmicro-sidecar.serviceDNSNames" . | fromJsonArray }}
{{- with .Values.webhook.url }}
{{- $hosts = append $hosts (regexReplaceAll ":[0-9]+$" (urlParse .).host "" | trimPrefix "[" | trimSuffix "]") }}
{{- end }}
{{- $hosts | uniq | join "," }}
{{- end }}

{{/* Security context of every container the chart runs (Pod Security "restricted"). */}}
{{- define "grelmicro-sidecar.containerSecurityContext" -}}
runAsNonRoot: true
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The injector's and the test pod's: injector.podSecurityContext, whose IDs may be unset. */}}
{{- define "grelmicro-sidecar.podSecurityContext" -}}
{{- toYaml .Values.injector.podSecurityContext }}
{{- end }}
