package spawner

import (
	"regexp"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Environment variable names the pod builder sets itself.
const (
	EnvServiceURL    = "JUPYTERHUB_SERVICE_URL"
	EnvServicePrefix = "JUPYTERHUB_SERVICE_PREFIX"
	EnvMemLimit      = "MEM_LIMIT"
	EnvMemGuarantee  = "MEM_GUARANTEE"
	EnvCPULimit      = "CPU_LIMIT"
	EnvCPUGuarantee  = "CPU_GUARANTEE"
	EnvImage         = "JUPYTER_IMAGE"
	EnvImageSpec     = "JUPYTER_IMAGE_SPEC"
)

// envRef matches Kubernetes' $(VAR) references.
var envRef = regexp.MustCompile(`\$\(([^)]+)\)`)

// envEntry is one variable with the key it was configured under, which
// orders it (KubeSpawner sorts by key, not by the EnvVar's name).
type envEntry struct {
	key  string
	env  corev1.EnvVar
	deps map[string]bool
}

// buildEnv assembles the notebook's environment as KubeSpawner's get_env
// and make_pod do: the hub's variables unchanged, then the ones derived
// from the settings (service URL, resources, image), then the environment
// trait (already expanded), in dependency-aware sorted order.
func buildEnv(s *Settings, environment EnvMap, hubEnv map[string]string) []corev1.EnvVar {
	byKey := map[string]corev1.EnvVar{}
	var keys []string
	set := func(k string, v corev1.EnvVar) {
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = v
	}
	value := func(k, v string) { set(k, corev1.EnvVar{Name: k, Value: v}) }

	for _, k := range sortedKeys(hubEnv) {
		switch k {
		case EnvMemLimit, EnvMemGuarantee, EnvCPULimit, EnvCPUGuarantee:
			// The hub's Spawner does not know the profile; the values
			// below, from the effective settings, replace its own.
			continue
		}
		value(k, hubEnv[k])
	}

	prefix := hubEnv[EnvServicePrefix]
	if prefix == "" {
		prefix = "/"
	}
	value(EnvServiceURL, "http://"+hostForURL(s.IP)+":"+strconv.Itoa(s.Port)+prefix)
	if s.MemLimit > 0 {
		value(EnvMemLimit, strconv.FormatInt(int64(s.MemLimit), 10))
	}
	if s.MemGuarantee > 0 {
		value(EnvMemGuarantee, strconv.FormatInt(int64(s.MemGuarantee), 10))
	}
	if s.CPULimit != nil && *s.CPULimit != 0 {
		value(EnvCPULimit, cpuString(*s.CPULimit))
	}
	if s.CPUGuarantee != nil && *s.CPUGuarantee != 0 {
		value(EnvCPUGuarantee, cpuString(*s.CPUGuarantee))
	}
	value(EnvImageSpec, s.Image)
	value(EnvImage, s.Image)
	for _, k := range sortedKeys(environment) {
		set(k, environment[k])
	}

	// One entry per variable name; a later setting wins.
	byName := map[string]int{}
	var entries []envEntry
	for _, k := range keys {
		ev := byKey[k]
		e := envEntry{key: k, env: ev, deps: map[string]bool{}}
		if ev.Value != "" {
			for _, m := range envRef.FindAllStringSubmatch(ev.Value, -1) {
				if m[1] != ev.Name {
					e.deps[m[1]] = true
				}
			}
		}
		if i, ok := byName[ev.Name]; ok {
			entries[i] = e
			continue
		}
		byName[ev.Name] = len(entries)
		entries = append(entries, e)
	}
	return sortEnv(entries)
}

// sortEnv orders variables so that each comes after the variables its
// $(VAR) references name, as far as possible: repeatedly take every entry
// whose dependencies are all placed, sorted by key; when none can be taken
// (a cycle or a reference to an unknown name), append the rest sorted by
// key. This is KubeSpawner's make_pod algorithm.
func sortEnv(entries []envEntry) []corev1.EnvVar {
	placed := map[string]bool{}
	out := make([]corev1.EnvVar, 0, len(entries))
	remaining := entries
	byKey := func(es []envEntry) {
		sort.SliceStable(es, func(i, j int) bool { return es[i].key < es[j].key })
	}
	for len(remaining) > 0 {
		var ready, rest []envEntry
		for _, e := range remaining {
			ok := true
			for d := range e.deps {
				if !placed[d] {
					ok = false
					break
				}
			}
			if ok {
				ready = append(ready, e)
			} else {
				rest = append(rest, e)
			}
		}
		if len(ready) == 0 {
			ready, rest = rest, nil
		}
		byKey(ready)
		for _, e := range ready {
			out = append(out, e.env)
			placed[e.env.Name] = true
		}
		remaining = rest
	}
	return out
}

// hostForURL brackets an IPv6 address for use in a URL.
func hostForURL(ip string) string {
	if strings.Contains(ip, ":") {
		return "[" + ip + "]"
	}
	return ip
}
