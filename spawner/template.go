package spawner

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Template keys KubeSpawner's _expand_user_properties offers. Every
// templated trait (pod_name_template, extra_labels values, environment
// values, volumes, ...) may use them; any other key is an error.
var templateKeys = []string{
	"userid", "username", "unescaped_username", "servername", "unescaped_servername",
	"user_server", "hubnamespace",
	"safe_username", "safe_servername", "safe_user_server",
	"escaped_username", "escaped_servername", "escaped_user_server",
	"pod_name", "pvc_name", "namespace",
}

// templateSegment is one piece of a parsed str.format template: literal
// text, or a replacement field naming a key.
type templateSegment struct {
	literal string
	key     string
	isField bool
}

// parseFormat parses a template with Python str.format syntax: "{{" and
// "}}" are literal braces, "{key}" is a replacement field. Positional
// fields, attribute or index access, conversions and format specs are
// rejected: KubeSpawner templates only ever name keys.
func parseFormat(tmpl string) ([]templateSegment, error) {
	var segs []templateSegment
	var lit strings.Builder
	for i := 0; i < len(tmpl); i++ {
		c := tmpl[i]
		switch {
		case c == '{' && i+1 < len(tmpl) && tmpl[i+1] == '{':
			lit.WriteByte('{')
			i++
		case c == '}' && i+1 < len(tmpl) && tmpl[i+1] == '}':
			lit.WriteByte('}')
			i++
		case c == '}':
			return nil, fmt.Errorf("single '}' encountered in template %q", tmpl)
		case c == '{':
			end := strings.IndexByte(tmpl[i+1:], '}')
			if end < 0 {
				return nil, fmt.Errorf("expected '}' before end of template %q", tmpl)
			}
			key := tmpl[i+1 : i+1+end]
			if err := checkFieldName(key); err != nil {
				return nil, fmt.Errorf("template %q: %w", tmpl, err)
			}
			if lit.Len() > 0 {
				segs = append(segs, templateSegment{literal: lit.String()})
				lit.Reset()
			}
			segs = append(segs, templateSegment{key: key, isField: true})
			i += end + 1
		default:
			lit.WriteByte(c)
		}
	}
	if lit.Len() > 0 {
		segs = append(segs, templateSegment{literal: lit.String()})
	}
	return segs, nil
}

func checkFieldName(key string) error {
	if key == "" {
		return fmt.Errorf("empty replacement field {} (positional fields are not supported)")
	}
	if strings.ContainsAny(key, "{!:.[") {
		return fmt.Errorf("replacement field {%s}: only plain key names are supported", key)
	}
	if _, err := strconv.Atoi(key); err == nil {
		return fmt.Errorf("replacement field {%s}: positional fields are not supported", key)
	}
	return nil
}

// hasFields reports whether a template contains any replacement field.
func hasFields(tmpl string) bool {
	segs, err := parseFormat(tmpl)
	if err != nil {
		return true
	}
	for _, s := range segs {
		if s.isField {
			return true
		}
	}
	return false
}

// formatKeys renders tmpl with values; a key missing from values is an
// error naming the key (Python raises KeyError).
func formatKeys(tmpl string, values map[string]string) (string, error) {
	segs, err := parseFormat(tmpl)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, s := range segs {
		if !s.isField {
			b.WriteString(s.literal)
			continue
		}
		v, ok := values[s.key]
		if !ok {
			return "", fmt.Errorf("unknown template key {%s} in %q (known: %s)", s.key, tmpl, knownKeys(values))
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

func knownKeys(values map[string]string) string {
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

// checkTemplate verifies that tmpl parses and uses only the given keys.
func checkTemplate(tmpl string, keys []string) error {
	values := make(map[string]string, len(keys))
	for _, k := range keys {
		values[k] = ""
	}
	_, err := formatKeys(tmpl, values)
	return err
}

// formatValue is KubeSpawner's recursive_format for one string: "{value}"
// becomes value, any other field is kept as written, and "{{"/"}}" become
// single braces (str.format_map with a dict that returns missing keys as
// "{key}").
func formatValue(tmpl, value string) (string, error) {
	segs, err := parseFormat(tmpl)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, s := range segs {
		switch {
		case !s.isField:
			b.WriteString(s.literal)
		case s.key == "value":
			b.WriteString(value)
		default:
			b.WriteString("{" + s.key + "}")
		}
	}
	return b.String(), nil
}

// recursiveFormat applies formatValue to every string in v, dict keys
// included, as an unlisted choice's kubespawner_override is rendered.
func recursiveFormat(v any, value string) (any, error) {
	switch t := v.(type) {
	case string:
		return formatValue(t, value)
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			f, err := recursiveFormat(e, value)
			if err != nil {
				return nil, err
			}
			out[i] = f
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			fk, err := formatValue(k, value)
			if err != nil {
				return nil, err
			}
			f, err := recursiveFormat(e, value)
			if err != nil {
				return nil, err
			}
			out[fk] = f
		}
		return out, nil
	default:
		return v, nil
	}
}

// expandStrings replaces every string value (not map keys) in a generic
// JSON tree with expand(s), as KubeSpawner's _expand_all does.
func expandStrings(v any, expand func(string) (string, error)) (any, error) {
	switch t := v.(type) {
	case string:
		return expand(t)
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			x, err := expandStrings(e, expand)
			if err != nil {
				return nil, err
			}
			out[i] = x
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			x, err := expandStrings(e, expand)
			if err != nil {
				return nil, err
			}
			out[k] = x
		}
		return out, nil
	default:
		return v, nil
	}
}

// Names holds the template values for one (user, server) spawn and the
// object names derived from them.
type Names struct {
	values map[string]string
	// PodName is pod_name_template expanded; also the Service name.
	PodName string
	// PVCName is pvc_name_template expanded.
	PVCName string
	// Namespace is where the objects go: Settings.Namespace, or
	// user_namespace_template expanded with enable_user_namespaces.
	Namespace string
}

// NewNames computes the slugs and names for a spawn the way KubeSpawner's
// constructor does: the namespace first (pod_name and pvc_name then read
// "<key>_unavailable!"), then the pod name, then the PVC name. hubNamespace,
// if not empty, replaces s.HubNamespace.
func NewNames(s *Settings, user, server string, userID int, hubNamespace string) (*Names, error) {
	escapedUser, escapedServer := EscapeSlug(user), EscapeSlug(server)
	safeUser := mustSafeSlug(user, IsValidObjectName, slugMaxLength)
	safeServer := ""
	if server != "" {
		safeServer = mustSafeSlug(server, IsValidObjectName, slugMaxLength)
	}

	var safeUserServer string
	switch {
	// The +2 is counted even for the default server, so a long user name
	// on its default server gets the multi-slug form ("…--x---hash"), as
	// KubeSpawner does.
	case len(safeUser)+len(safeServer)+2 > slugMaxLength:
		var err error
		safeUserServer, err = MultiSlug([]string{user, server}, slugMaxLength)
		if err != nil {
			return nil, err
		}
	case server != "":
		safeUserServer = safeUser + "--" + safeServer
	default:
		safeUserServer = safeUser
	}

	// KubeSpawner's _expand_user_properties: the hub's own namespace (its
	// _namespace_default, not the namespace trait), "user" for "default".
	if hubNamespace == "" {
		hubNamespace = s.HubNamespace
	}
	if hubNamespace == "" || hubNamespace == DefaultNamespace {
		hubNamespace = "user"
	}

	v := map[string]string{
		"userid":               strconv.Itoa(userID),
		"unescaped_username":   user,
		"unescaped_servername": server,
		"hubnamespace":         hubNamespace,
		"safe_username":        safeUser,
		"safe_servername":      safeServer,
		"safe_user_server":     safeUserServer,
		"escaped_username":     escapedUser,
		"escaped_servername":   escapedServer,
		"escaped_user_server":  escapedUser + "--" + escapedServer,
		"pod_name":             "pod_name_unavailable!",
		"pvc_name":             "pvc_name_unavailable!",
		"namespace":            s.Namespace,
	}
	switch s.SlugScheme {
	case SlugSchemeEscape:
		v["username"], v["servername"] = escapedUser, escapedServer
		v["user_server"] = escapedUser
		if escapedServer != "" {
			v["user_server"] = escapedUser + "--" + escapedServer
		}
	default:
		v["username"], v["servername"], v["user_server"] = safeUser, safeServer, safeUserServer
	}

	n := &Names{values: v, Namespace: s.Namespace}
	var err error
	if s.EnableUserNamespaces {
		if n.Namespace, err = n.Expand(s.UserNamespaceTemplate); err != nil {
			return nil, fmt.Errorf("expanding user_namespace_template: %w", err)
		}
		v["namespace"] = n.Namespace
	}
	if n.PodName, err = n.Expand(s.PodNameTemplate); err != nil {
		return nil, fmt.Errorf("expanding pod_name_template: %w", err)
	}
	v["pod_name"] = n.PodName
	if n.PVCName, err = n.Expand(s.PVCNameTemplate); err != nil {
		return nil, fmt.Errorf("expanding pvc_name_template: %w", err)
	}
	v["pvc_name"] = n.PVCName
	return n, nil
}

// Value returns the value of one template key ("username", "user_server",
// ...), and whether the key exists.
func (n *Names) Value(key string) (string, bool) {
	v, ok := n.values[key]
	return v, ok
}

// Expand renders a template with the user's values. A trailing '-' left by
// an empty field is stripped unless the template itself ends in '-'
// (KubeSpawner #770), so "{username}--{servername}" works for the default
// server.
func (n *Names) Expand(tmpl string) (string, error) {
	out, err := formatKeys(tmpl, n.values)
	if err != nil {
		return "", err
	}
	if !strings.HasSuffix(tmpl, "-") {
		out = strings.TrimRight(out, "-")
	}
	return out, nil
}
