package spawner

import (
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ByteSize is a number of bytes written as JupyterHub's ByteSpecification:
// an integer (bytes) or a number with a 1024-based suffix K, M, G or T, so
// "2G" is 2*1024^3 and "1.5M" is 1572864. Zero means unset.
type ByteSize int64

var byteUnits = map[byte]float64{
	'K': 1 << 10,
	'M': 1 << 20,
	'G': 1 << 30,
	'T': 1 << 40,
}

// ParseByteSize parses a ByteSpecification string. A string of digits is
// taken as bytes too (JupyterHub only accepts that unquoted).
func ParseByteSize(s string) (ByteSize, bool) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
		return ByteSize(n), true
	}
	if len(s) < 2 {
		return 0, false
	}
	unit, ok := byteUnits[s[len(s)-1]]
	if !ok {
		return 0, false
	}
	num, err := strconv.ParseFloat(s[:len(s)-1], 64)
	if err != nil || num < 0 || math.IsInf(num, 0) || math.IsNaN(num) || num*unit > math.MaxInt64 {
		return 0, false
	}
	return ByteSize(num * unit), true
}

const byteSizeHelp = "not a valid memory specification: must be an int or a string with suffix K, M, G, T"

func (b *ByteSize) decodeTrait(v any, p *field.Path) field.ErrorList {
	*b = 0
	switch t := v.(type) {
	case nil:
		return nil
	case json.Number:
		f, err := t.Float64()
		if err != nil || f < 0 || f > math.MaxInt64 {
			return field.ErrorList{field.Invalid(p, v, byteSizeHelp)}
		}
		if n, err := t.Int64(); err == nil {
			*b = ByteSize(n)
		} else {
			*b = ByteSize(f) // int(float) as JupyterHub does
		}
		return nil
	case string:
		n, ok := ParseByteSize(t)
		if !ok {
			return field.ErrorList{field.Invalid(p, v, byteSizeHelp)}
		}
		*b = n
		return nil
	default:
		return field.ErrorList{invalid(p, v, byteSizeHelp)}
	}
}

// ResourceMap maps resource names to quantities ({"nvidia.com/gpu": "1"}).
// A number is taken as written (nvidia.com/gpu: 1), as KubeSpawner passes
// it on.
type ResourceMap map[string]string

func (r *ResourceMap) decodeTrait(v any, p *field.Path) field.ErrorList {
	*r = nil
	if v == nil {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return field.ErrorList{invalid(p, v, "must be a dict of resource names to quantities")}
	}
	*r = make(ResourceMap, len(m))
	var errs field.ErrorList
	for _, k := range sortedKeys(m) {
		switch t := m[k].(type) {
		case string:
			(*r)[k] = t
		case json.Number:
			(*r)[k] = t.String()
		default:
			errs = append(errs, invalid(p.Key(k), m[k], "must be a quantity"))
		}
	}
	return errs
}

// Command is a command line: a list of strings, or one string meaning a
// one-element list (JupyterHub's Command trait). Nil means the image's CMD.
type Command []string

func (c *Command) decodeTrait(v any, p *field.Path) field.ErrorList {
	*c = nil
	switch t := v.(type) {
	case nil:
		return nil
	case string:
		*c = Command{t}
		return nil
	case []any:
		if len(t) == 0 {
			return field.ErrorList{field.Invalid(p, field.OmitValueType{}, "must not be empty; use null for the image's CMD")}
		}
		var errs field.ErrorList
		for i, e := range t {
			s, ok := e.(string)
			if !ok {
				errs = append(errs, invalid(p.Index(i), e, "must be a string"))
			}
			*c = append(*c, s)
		}
		return errs
	default:
		return field.ErrorList{invalid(p, v, "must be a string or a list of strings")}
	}
}

// PullSecrets is image_pull_secrets: a list of secret names or {name: ...}
// objects; a single string is KubeSpawner's deprecated one-secret form.
type PullSecrets []corev1.LocalObjectReference

func (s *PullSecrets) decodeTrait(v any, p *field.Path) field.ErrorList {
	*s = nil
	switch t := v.(type) {
	case nil:
		return nil
	case string:
		*s = PullSecrets{{Name: t}}
		return nil
	case []any:
		var errs field.ErrorList
		for i, e := range t {
			var ref corev1.LocalObjectReference
			switch et := e.(type) {
			case string:
				ref.Name = et
			case map[string]any:
				errs = append(errs, strictDecode(et, &ref, p.Index(i))...)
			default:
				errs = append(errs, invalid(p.Index(i), e, "must be a secret name or {name: ...}"))
			}
			if ref.Name == "" {
				errs = append(errs, field.Required(p.Index(i).Child("name"), "secret name"))
			}
			*s = append(*s, ref)
		}
		return errs
	default:
		return field.ErrorList{invalid(p, v, "must be a list of secret names")}
	}
}

// EnvMap is the environment trait: each key maps to a string value or to a
// full EnvVar object (valueFrom etc.), whose name defaults to the key.
// Values are template-expanded when the pod is built.
type EnvMap map[string]corev1.EnvVar

func (e *EnvMap) decodeTrait(v any, p *field.Path) field.ErrorList {
	*e = nil
	if v == nil {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return field.ErrorList{invalid(p, v, "must be a dict of names to values")}
	}
	*e = make(EnvMap, len(m))
	var errs field.ErrorList
	for _, k := range sortedKeys(m) {
		switch t := m[k].(type) {
		case string:
			(*e)[k] = corev1.EnvVar{Name: k, Value: t}
		case map[string]any:
			obj := camelKeys(t, reflect.TypeOf(corev1.EnvVar{}))
			if _, ok := obj["name"]; !ok {
				obj["name"] = k
			}
			var ev corev1.EnvVar
			errs = append(errs, strictDecode(obj, &ev, p.Key(k))...)
			(*e)[k] = ev
		default:
			errs = append(errs, invalid(p.Key(k), m[k], "must be a string or an EnvVar object"))
		}
	}
	return errs
}

// PodSpecPatch is extra_pod_config: top-level PodSpec fields (camelCase,
// or snake_case as KubeSpawner accepts) that replace what the pod would
// otherwise get. Keys are stored camelCase.
type PodSpecPatch map[string]any

func (x *PodSpecPatch) decodeTrait(v any, p *field.Path) field.ErrorList {
	m, errs := decodePatch(v, reflect.TypeOf(corev1.PodSpec{}), p)
	*x = m
	return errs
}

// ContainerPatch is extra_container_config: top-level Container fields
// that replace the notebook container's. Keys are stored camelCase.
type ContainerPatch map[string]any

func (x *ContainerPatch) decodeTrait(v any, p *field.Path) field.ErrorList {
	m, errs := decodePatch(v, reflect.TypeOf(corev1.Container{}), p)
	*x = m
	return errs
}

func decodePatch(v any, t reflect.Type, p *field.Path) (map[string]any, field.ErrorList) {
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, field.ErrorList{invalid(p, v, "must be a dict of "+t.Name()+" fields")}
	}
	m = camelKeys(m, t)
	// Decoding into the real type catches unknown fields and bad values.
	target := reflect.New(t).Interface()
	return m, strictDecode(m, target, p)
}

// cpuString formats a CPU amount as Python's str(float) does, for the
// CPU_LIMIT and CPU_GUARANTEE variables ("2.0", "0.5").
func cpuString(f float64) string {
	abs := math.Abs(f)
	if abs != 0 && (abs < 1e-4 || abs >= 1e16) {
		s := strconv.FormatFloat(f, 'e', -1, 64)
		// Python writes at least two exponent digits: 1e-05.
		mant, exp, _ := strings.Cut(s, "e")
		sign := exp[:1]
		digits := exp[1:]
		if len(digits) < 2 {
			digits = "0" + digits
		}
		return mant + "e" + sign + digits
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}
