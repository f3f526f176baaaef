{{/* Names and labels shared by the templates. */}}
{{- define "kimi.name" -}}{{ .Release.Name }}-kimi{{- end }}
{{- define "kimi.labels" -}}
app.kubernetes.io/name: kimi-vl-chat
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- define "kimi.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .key }}
{{- end }}
