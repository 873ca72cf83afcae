{{- define "vkgate.labels" -}}
app.kubernetes.io/name: vkgate
app.kubernetes.io/instance: {{ .Release.Name }}
vkgate.io/node: {{ .Values.nodeName }}
{{- end }}
{{- define "vkgate.templatesNamespace" -}}
{{ .Values.templates.configmapNamespace | default .Release.Namespace }}
{{- end }}
{{- /* The Secret with the Nomad token and TLS files (values.yaml, "nomad"). */}}
{{- define "vkgate.nomadSecret" -}}
{{ .Values.nomad.existingSecret | default (printf "%s-nomad" .Release.Name) }}
{{- end }}
{{- /* The kubelet port of [[nodes]] entry (list root index node): its own, else kubelet.port + index. */}}
{{- define "vkgate.nodePort" -}}
{{- $root := index . 0 }}{{- $i := index . 1 }}{{- $node := index . 2 -}}
{{ $node.kubeletPort | default (add (int $root.Values.kubelet.port) $i) }}
{{- end }}
{{- /* TOML "key" = value lines of a map of scalars and lists, keys quoted. */}}
{{- define "vkgate.tomlPairs" -}}
{{- range $k, $v := . }}
{{ $k | quote }} = {{ $v | toJson }}
{{- end }}
{{- end }}
