package localnode

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// hostEnvKeep are the host variables a process inherits: what a container
// image would define for itself (an executable search path, a locale).
var hostEnvKeep = []string{"PATH", "LANG", "LC_ALL", "PYTHONPATH", "NODE_PATH"}

// env builds a container's environment as the kubelet does: envFrom first,
// then env in order with $(VAR) references expanded, downward-API fields
// resolved, configmap and secret keys read from the API server.
func (r *podRun) env(spec corev1.Container) ([]string, error) {
	ctx := context.Background()
	vals := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	for _, k := range hostEnvKeep {
		if v, ok := os.LookupEnv(k); ok {
			set(k, v)
		}
	}
	set("HOME", r.dir+"/home")
	set("HOSTNAME", r.pod.Name)
	for _, from := range spec.EnvFrom {
		data, err := r.envSource(ctx, from)
		if err != nil {
			return nil, err
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			set(from.Prefix+k, data[k])
		}
	}
	lookup := func(k string) (string, bool) { v, ok := vals[k]; return v, ok }
	for _, e := range spec.Env {
		if e.ValueFrom == nil {
			set(e.Name, r.bindAddress(expandVarsWith(e.Value, lookup)))
			continue
		}
		v, err := r.valueFrom(ctx, spec, e.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		set(e.Name, v)
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vals[k])
	}
	return out, nil
}

func (r *podRun) envSource(ctx context.Context, from corev1.EnvFromSource) (map[string]string, error) {
	switch {
	case from.ConfigMapRef != nil:
		cm, err := r.a.client.CoreV1().ConfigMaps(r.pod.Namespace).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
		if err != nil {
			if from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional {
				return nil, nil
			}
			return nil, fmt.Errorf("envFrom configmap %s: %w", from.ConfigMapRef.Name, err)
		}
		return cm.Data, nil
	case from.SecretRef != nil:
		s, err := r.a.client.CoreV1().Secrets(r.pod.Namespace).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
		if err != nil {
			if from.SecretRef.Optional != nil && *from.SecretRef.Optional {
				return nil, nil
			}
			return nil, fmt.Errorf("envFrom secret %s: %w", from.SecretRef.Name, err)
		}
		out := map[string]string{}
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out, nil
	}
	return nil, nil
}

func (r *podRun) valueFrom(ctx context.Context, spec corev1.Container, src *corev1.EnvVarSource) (string, error) {
	switch {
	case src.FieldRef != nil:
		return r.fieldRef(src.FieldRef.FieldPath)
	case src.ResourceFieldRef != nil:
		res := src.ResourceFieldRef.Resource
		list := spec.Resources.Limits
		if strings.HasPrefix(res, "requests.") {
			list = spec.Resources.Requests
		}
		q, ok := list[corev1.ResourceName(res[strings.Index(res, ".")+1:])]
		if !ok {
			return "", nil
		}
		return q.String(), nil
	case src.ConfigMapKeyRef != nil:
		cm, err := r.a.client.CoreV1().ConfigMaps(r.pod.Namespace).Get(ctx, src.ConfigMapKeyRef.Name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("configmap %s: %w", src.ConfigMapKeyRef.Name, err)
		}
		return cm.Data[src.ConfigMapKeyRef.Key], nil
	case src.SecretKeyRef != nil:
		s, err := r.a.client.CoreV1().Secrets(r.pod.Namespace).Get(ctx, src.SecretKeyRef.Name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("secret %s: %w", src.SecretKeyRef.Name, err)
		}
		return string(s.Data[src.SecretKeyRef.Key]), nil
	}
	return "", nil
}

// fieldRef resolves the downward-API fields a container may read.
func (r *podRun) fieldRef(path string) (string, error) {
	p := r.pod
	switch path {
	case "metadata.name":
		return p.Name, nil
	case "metadata.namespace":
		return p.Namespace, nil
	case "metadata.uid":
		return string(p.UID), nil
	case "spec.nodeName":
		return r.a.opts.NodeName, nil
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return r.ip, nil
	case "status.hostIP", "status.hostIPs":
		return "127.0.0.1", nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": p.Labels, "metadata.annotations": p.Annotations} {
		if strings.HasPrefix(path, prefix+"['") && strings.HasSuffix(path, "']") {
			return m[path[len(prefix)+2:len(path)-2]], nil
		}
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

func envLookup(env []string) func(string) string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return func(k string) string { return m[k] }
}

// expandVars expands $(VAR) references in a command or argument.
func expandVars(s string, lookup func(string) string) string {
	return expandVarsWith(s, func(k string) (string, bool) { v := lookup(k); return v, v != "" })
}

// expandVarsWith implements Kubernetes' $(VAR) syntax: $$ escapes, unknown
// references stay as written.
func expandVarsWith(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}
