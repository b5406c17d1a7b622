package spawner

import (
	"fmt"
	"regexp"
	"slices"
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

	// The variables JupyterHub's Spawner.get_env derives from
	// notebook_dir, default_url, debug and disable_user_config.
	EnvRootDir           = "JUPYTERHUB_ROOT_DIR"
	EnvDefaultURL        = "JUPYTERHUB_DEFAULT_URL"
	EnvDebug             = "JUPYTERHUB_DEBUG"
	EnvDisableUserConfig = "JUPYTERHUB_DISABLE_USER_CONFIG"
)

// spawnerFormatKeys are the keys of JupyterHub's Spawner.template_namespace,
// with which format_string renders notebook_dir and default_url.
var spawnerFormatKeys = []string{"username", "base_url"}

// spawnerEnv returns what JupyterHub 3.0's Spawner.get_env
// (jupyterhub/spawner.py) sets from the traits below, for each trait the
// settings give: the value, or nil where get_env would set nothing (a
// false or empty trait), so that the hub's own value is not sent either.
// KubeSpawner 7.1 does not override get_args, which since JupyterHub 2.0
// returns only Spawner.args, so these reach the server only as environment. Traits left unset (nil) are not in the map:
// the hub's get_env, sent with the start, already carries its own
// c.Spawner values.
func spawnerEnv(s *Settings, user, baseURL string) (map[string]*string, error) {
	ns := map[string]string{"username": user, "base_url": baseURL}
	out := map[string]*string{}
	for _, t := range []struct {
		name, env string
		tmpl      *string
	}{
		{"notebook_dir", EnvRootDir, s.NotebookDir},
		{"default_url", EnvDefaultURL, s.DefaultURL},
	} {
		switch {
		case t.tmpl == nil:
		case *t.tmpl == "":
			out[t.env] = nil
		default:
			// str.format, without KubeSpawner's trailing '-' rule.
			v, err := formatKeys(*t.tmpl, ns)
			if err != nil {
				return nil, fmt.Errorf("expanding %s: %w", t.name, err)
			}
			out[t.env] = &v
		}
	}
	for env, b := range map[string]*bool{EnvDebug: s.Debug, EnvDisableUserConfig: s.DisableUserConfig} {
		switch {
		case b == nil:
		case *b:
			out[env] = ptr("1")
		default:
			out[env] = nil
		}
	}
	return out, nil
}

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
// from the settings (service URL, resources, image, and derived, from
// spawnerEnv), then the environment trait (already expanded), in
// dependency-aware sorted order.
func buildEnv(s *Settings, environment EnvMap, hubEnv map[string]string, derived map[string]*string) []corev1.EnvVar {
	// Sized for the hub's variables and the dozen or so added below.
	n := len(hubEnv) + len(derived) + len(environment) + 8
	byKey := make(map[string]corev1.EnvVar, n)
	keys := make([]string, 0, n)
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
		if _, ok := derived[k]; ok {
			continue // the settings' value (or its absence) wins
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
	for _, k := range sortedKeys(derived) {
		if v := derived[k]; v != nil {
			value(k, *v)
		}
	}
	for _, k := range sortedKeys(environment) {
		set(k, environment[k])
	}

	// One entry per variable name; a later setting wins.
	byName := make(map[string]int, len(keys))
	entries := make([]envEntry, 0, len(keys))
	for _, k := range keys {
		ev := byKey[k]
		e := envEntry{key: k, env: ev}
		// Few values reference others: skip the regexp for the rest.
		if strings.Contains(ev.Value, "$(") {
			for _, m := range envRef.FindAllStringSubmatch(ev.Value, -1) {
				if m[1] != ev.Name {
					if e.deps == nil {
						e.deps = map[string]bool{}
					}
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
	placed := make(map[string]bool, len(entries))
	out := make([]corev1.EnvVar, 0, len(entries))
	remaining := entries
	byKey := func(es []envEntry) {
		slices.SortStableFunc(es, func(a, b envEntry) int { return strings.Compare(a.key, b.key) })
	}
	for len(remaining) > 0 {
		ready, rest := make([]envEntry, 0, len(remaining)), []envEntry(nil)
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
