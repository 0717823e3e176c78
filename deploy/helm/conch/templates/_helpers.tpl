{{/* Labels of every object (selectors keep app.kubernetes.io/name only). */}}
{{- define "conch.labels" -}}
app.kubernetes.io/part-of: conch
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* (list . "conch-executor"): one of conch's images, at image.tag or the appVersion. */}}
{{- define "conch.image" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $tag := $root.Values.image.tag | default $root.Chart.AppVersion -}}
{{- with $root.Values.image.registry }}{{ trimSuffix "/" . }}/{{ end }}{{ $name }}:{{ $tag }}
{{- end }}

{{/* (list . "etcd:v3.7.3"): a third-party image, under image.registry when set. */}}
{{- define "conch.thirdPartyImage" -}}
{{- $root := index . 0 -}}
{{- with $root.Values.image.registry }}{{ trimSuffix "/" . }}/{{ end }}{{ index . 1 }}
{{- end }}

{{/* The etcd members the services dial. */}}
{{- define "conch.etcdEndpoints" -}}
{{- if .Values.etcd.bundled -}}
https://etcd-0.etcd:2379,https://etcd-1.etcd:2379,https://etcd-2.etcd:2379
{{- else -}}
{{- required "etcd.endpoints is required when etcd.bundled is false" .Values.etcd.endpoints | join "," -}}
{{- end -}}
{{- end }}

{{/* The S3 endpoint of workspaces, the audit trail and stored responses. */}}
{{- define "conch.s3Endpoint" -}}
{{- if .Values.minio.bundled -}}
minio:9000
{{- else -}}
{{- required "minio.endpoint is required when minio.bundled is false" .Values.minio.endpoint -}}
{{- end -}}
{{- end }}

{{/* NetworkPolicy egress rule to etcd. */}}
{{- define "conch.etcdEgress" -}}
{{- if .Values.etcd.bundled -}}
- to:
    - podSelector:
        matchLabels:
          app.kubernetes.io/name: etcd
  ports:
    - protocol: TCP
      port: 2379
{{- else -}}
- ports:
    - protocol: TCP
      port: {{ .Values.etcd.port }}
  {{- with .Values.etcd.networkPolicyPeers }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
{{- end }}

{{/* NetworkPolicy egress rule to MinIO or the external S3 store. */}}
{{- define "conch.minioEgress" -}}
{{- if .Values.minio.bundled -}}
- to:
    - podSelector:
        matchLabels:
          app.kubernetes.io/name: minio
  ports:
    - protocol: TCP
      port: 9000
{{- else -}}
- ports:
    - protocol: TCP
      port: {{ .Values.minio.port }}
  {{- with .Values.minio.networkPolicyPeers }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
{{- end }}

{{/* What tenants' outbound connections never reach besides the internal
ranges (the object store, the operator's list), and what the operator
allows them: the router's and the approval service's flags. */}}
{{- define "conch.outboundArgs" -}}
- --outbound-deny={{ include "conch.s3Endpoint" . }}{{ range .Values.outbound.deny }},{{ . }}{{ end }}
{{- with .Values.outbound.allow }}
- --outbound-allow={{ join "," . }}
{{- end }}
{{- end }}

{{/* The Secret of etcd's CA and certificates: the operator's, or the chart's. */}}
{{- define "conch.etcdTLSSecret" -}}
{{- if .Values.etcd.tls.existingSecret -}}
{{ .Values.etcd.tls.existingSecret }}
{{- else if .Values.etcd.bundled -}}
conch-etcd-tls
{{- else -}}
{{ fail "etcd.tls.existingSecret is required when etcd.bundled is false: the external etcd's CA and the services' certificates" }}
{{- end -}}
{{- end }}
