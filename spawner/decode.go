package spawner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
)

// Trait decoding works on the generic JSON tree of the kubespawner section
// (map[string]any, numbers as json.Number). Each trait is decoded on its
// own so that every problem is reported with its full path, and so that a
// profile's kubespawner_override can be checked key by key with the same
// code. The Settings struct is the single table of traits: its json tag is
// the trait name and its trait tag says how to read the value:
//
//	listdict  a list, or a dict whose values are taken sorted by key
//	k8s       Kubernetes objects whose top-level keys may be snake_case
//	          (KubeSpawner's get_k8s_model); nested keys are camelCase
//	camel     a Kubernetes object whose keys must be camelCase
//	tmpl      strings are expanded with the user's template keys
type traitOpts struct {
	listDict, k8s, camel, tmpl bool
}

type traitInfo struct {
	name  string
	index []int
	opts  traitOpts
}

// traitDecoder is implemented by trait types that need more than a strict
// JSON decode (byte sizes, commands, environment, ...).
type traitDecoder interface {
	decodeTrait(v any, p *field.Path) field.ErrorList
}

// traits maps trait names to Settings fields. It is computed once from
// struct tags and never modified.
var traits = buildTraitTable()

func buildTraitTable() map[string]traitInfo {
	t := reflect.TypeOf(Settings{})
	table := make(map[string]traitInfo, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		info := traitInfo{name: name, index: f.Index}
		for _, o := range strings.Split(f.Tag.Get("trait"), ",") {
			switch o {
			case "listdict":
				info.opts.listDict = true
			case "k8s":
				info.opts.k8s = true
			case "camel":
				info.opts.camel = true
			case "tmpl":
				info.opts.tmpl = true
			}
		}
		table[name] = info
	}
	return table
}

// decodeSettings decodes a complete (defaulted) trait map.
func decodeSettings(raw map[string]any, p *field.Path) (*Settings, field.ErrorList) {
	s := &Settings{}
	rv := reflect.ValueOf(s).Elem()
	var errs field.ErrorList
	for _, key := range sortedKeys(raw) {
		if refused, err := checkRefused(key, raw[key], p.Child(key)); refused {
			if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		t, ok := traits[key]
		if !ok {
			errs = append(errs, unknownKey(p.Child(key)))
			continue
		}
		errs = append(errs, decodeTrait(raw[key], rv.FieldByIndex(t.index), t.opts, p.Child(key))...)
	}
	return s, errs
}

// checkTraitValue decodes one trait value into a scratch Settings, for
// validating overrides before they are applied.
func checkTraitValue(key string, v any, p *field.Path) field.ErrorList {
	if refused, err := checkRefused(key, v, p); refused {
		if err != nil {
			return field.ErrorList{err}
		}
		return nil
	}
	t, ok := traits[key]
	if !ok {
		return field.ErrorList{unknownKey(p)}
	}
	s := &Settings{}
	errs := decodeTrait(v, reflect.ValueOf(s).Elem().FieldByIndex(t.index), t.opts, p)
	if t.opts.tmpl && len(errs) == 0 {
		errs = append(errs, checkTemplates(v, p)...)
	}
	return errs
}

func unknownKey(p *field.Path) *field.Error {
	return field.Invalid(p, field.OmitValueType{}, "unknown key (not a supported KubeSpawner trait)")
}

func decodeTrait(v any, dst reflect.Value, o traitOpts, p *field.Path) field.ErrorList {
	if d, ok := dst.Addr().Interface().(traitDecoder); ok {
		return d.decodeTrait(v, p)
	}
	if !o.listDict {
		return decodeObject(v, dst, o, p)
	}
	if v == nil {
		dst.SetZero()
		return nil
	}
	var (
		elems []any
		paths []*field.Path
	)
	switch t := v.(type) {
	case []any:
		for i, e := range t {
			elems = append(elems, e)
			paths = append(paths, p.Index(i))
		}
	case map[string]any:
		// KubeSpawner takes a dict's values sorted by key, so layered
		// config files can add entries by name.
		for _, k := range sortedKeys(t) {
			elems = append(elems, t[k])
			paths = append(paths, p.Key(k))
		}
	default:
		return field.ErrorList{invalid(p, v, "must be a list or a dict")}
	}
	out := reflect.MakeSlice(dst.Type(), 0, len(elems))
	var errs field.ErrorList
	for i, e := range elems {
		ev := reflect.New(dst.Type().Elem()).Elem()
		errs = append(errs, decodeObject(e, ev, o, paths[i])...)
		out = reflect.Append(out, ev)
	}
	dst.Set(out)
	return errs
}

// decodeObject decodes one value strictly into dst, after mapping a k8s
// object's snake_case keys to camelCase.
func decodeObject(v any, dst reflect.Value, o traitOpts, p *field.Path) field.ErrorList {
	if m, ok := v.(map[string]any); ok {
		switch {
		case o.k8s:
			v = camelKeys(m, dst.Type())
		case o.camel:
			for _, k := range sortedKeys(m) {
				if strings.Contains(k, "_") {
					return field.ErrorList{field.Invalid(p.Child(k), field.OmitValueType{},
						"keys must be Kubernetes camelCase names")}
				}
			}
		}
	}
	return strictDecode(v, dst.Addr().Interface(), p)
}

// strictDecode decodes a generic value into out, case-sensitively and
// rejecting unknown and duplicate fields, and reports problems under p.
func strictDecode(v any, out any, p *field.Path) field.ErrorList {
	b, err := json.Marshal(v)
	if err != nil {
		return field.ErrorList{field.InternalError(p, fmt.Errorf("encoding value: %w", err))}
	}
	strict, err := sigsjson.UnmarshalStrict(b, out)
	if err != nil {
		return field.ErrorList{invalid(p, v, strings.TrimPrefix(err.Error(), "json: "))}
	}
	var errs field.ErrorList
	for _, e := range strict {
		fe, ok := e.(sigsjson.FieldError)
		if !ok {
			errs = append(errs, invalid(p, v, e.Error()))
			continue
		}
		detail := e.Error()
		for _, kind := range []string{"unknown field", "duplicate field"} {
			if strings.HasPrefix(detail, kind) {
				detail = kind
			}
		}
		errs = append(errs, &field.Error{
			Type:     field.ErrorTypeInvalid,
			Field:    joinPath(p, fe.FieldPath()),
			BadValue: field.OmitValueType{},
			Detail:   detail,
		})
	}
	return errs
}

func joinPath(p *field.Path, rel string) string {
	if strings.HasPrefix(rel, "[") {
		return p.String() + rel
	}
	return p.String() + "." + rel
}

// invalid reports a bad value, printing it only when it is a scalar.
func invalid(p *field.Path, v any, detail string) *field.Error {
	switch v.(type) {
	case string, json.Number, bool, nil:
		return field.Invalid(p, v, detail)
	default:
		return field.Invalid(p, field.OmitValueType{}, detail)
	}
}

// camelKeys maps the top-level keys of m that name a field of t in
// snake_case to the field's JSON (camelCase) name, as KubeSpawner's
// get_k8s_model accepts both spellings. Other keys are kept, so a strict
// decode reports them.
func camelKeys(m map[string]any, t reflect.Type) map[string]any {
	names := snakeToJSON(t)
	out := make(map[string]any, len(m))
	for k, v := range m {
		if c, ok := names[k]; ok {
			if _, dup := m[c]; !dup {
				k = c
			}
		}
		out[k] = v
	}
	return out
}

// snakeToJSON returns snake_case → JSON name for the fields of struct type t
// (or what it points to), following the names the Kubernetes OpenAPI Python
// client uses ("hostIPC" → "host_ipc").
func snakeToJSON(t reflect.Type) map[string]string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	out := map[string]string{}
	if t.Kind() != reflect.Struct {
		return out
	}
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		if s := camelToSnake(name); s != name {
			out[s] = name
		}
	}
	return out
}

func camelToSnake(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 {
			prev := r[i-1]
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// decodeGeneric parses JSON into a generic tree, keeping numbers exact.
func decodeGeneric(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// deepCopy copies a generic JSON tree.
func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = deepCopy(e)
		}
		return out
	default:
		return v
	}
}

// recursiveUpdate merges src into dst as KubeSpawner's recursive_update:
// dicts merge key by key, a nil value deletes its key, anything else
// replaces.
func recursiveUpdate(dst, src map[string]any) {
	for k, v := range src {
		switch t := v.(type) {
		case map[string]any:
			sub, ok := dst[k].(map[string]any)
			if !ok {
				sub = map[string]any{}
			}
			recursiveUpdate(sub, t)
			dst[k] = sub
		case nil:
			delete(dst, k)
		default:
			dst[k] = deepCopy(v)
		}
	}
}

// walkStrings calls fn for every string value in a generic tree, with its
// path.
func walkStrings(v any, p *field.Path, fn func(p *field.Path, s string)) {
	switch t := v.(type) {
	case string:
		fn(p, t)
	case []any:
		for i, e := range t {
			walkStrings(e, p.Index(i), fn)
		}
	case map[string]any:
		for _, k := range sortedKeys(t) {
			walkStrings(t[k], p.Child(k), fn)
		}
	}
}

// checkTemplates verifies every string in a templated trait value.
func checkTemplates(v any, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	walkStrings(v, p, func(p *field.Path, s string) {
		if err := checkTemplate(s, templateKeys); err != nil {
			errs = append(errs, field.Invalid(p, s, err.Error()))
		}
	})
	return errs
}
