{{- define "vkgate.labels" -}}
app.kubernetes.io/name: vkgate
app.kubernetes.io/instance: {{ .Release.Name }}
vkgate.io/node: {{ .Values.nodeName }}
{{- end }}
{{- define "vkgate.templatesNamespace" -}}
{{ .Values.templates.configmapNamespace | default .Release.Namespace }}
{{- end }}
