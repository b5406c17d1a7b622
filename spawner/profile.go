package spawner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ProfileList is profile_list: the profiles offered on the spawn form (a
// list, or a dict whose values are taken sorted by key).
type ProfileList []Profile

// Profile is one entry of profile_list (KubeSpawner's profile schema).
type Profile struct {
	// DisplayName is shown on the form.
	DisplayName string `json:"display_name"`
	// Slug identifies the profile in user_options["profile"]; when not
	// configured it is derived from DisplayName.
	Slug string `json:"slug"`
	// Default marks the profile used when none is asked for; if no profile
	// is marked, the first one is.
	Default bool `json:"default"`
	// Description is shown on the form.
	Description string `json:"description"`
	// KubeSpawnerOverride sets traits when this profile is chosen. It is
	// not sent to the hub.
	KubeSpawnerOverride map[string]any `json:"-"`
	// ProfileOptions are the profile's further choices, in written order.
	ProfileOptions ProfileOptions `json:"profile_options"`
	// GPUClass is the GPU class a spawn with this profile (and its default
	// choices) gets, "" for none: the hub class gives only GPU spawns the
	// longer reservation deadline.
	GPUClass string `json:"gpu_class"`

	// src is the profile's key in profile_list (index or dict key) and
	// path its place in the file, for key order and error paths.
	src  string
	path *field.Path
}

// ProfileOptions are a profile's options in the order written; they are
// encoded as a JSON object keyed by option name, in that order.
type ProfileOptions []ProfileOption

// ProfileOption is one of a profile's options.
type ProfileOption struct {
	// Name is the option's key; it names the user_options entries
	// "<name>" and "<name>--unlisted-choice".
	Name string `json:"-"`
	// DisplayName is shown on the form.
	DisplayName string `json:"display_name"`
	// Choices are the listed values, in written order.
	Choices Choices `json:"choices"`
	// UnlistedChoice allows a free-text value.
	UnlistedChoice UnlistedChoice `json:"unlisted_choice"`
}

// Choices are an option's choices in the order written; they are encoded
// as a JSON object keyed by choice name, in that order.
type Choices []Choice

// Choice is one listed value of an option.
type Choice struct {
	// Name is the choice's key, the value of user_options["<option>"].
	Name string `json:"-"`
	// DisplayName is shown on the form.
	DisplayName string `json:"display_name"`
	// Default marks the choice used when none is given; if none is
	// marked, the first one is.
	Default bool `json:"default"`
	// KubeSpawnerOverride sets traits when this choice is made.
	KubeSpawnerOverride map[string]any `json:"-"`
	// GPUClass is the GPU class a spawn with this choice gets ("" for none).
	GPUClass string `json:"gpu_class"`
}

// UnlistedChoice is an option's free-text value.
type UnlistedChoice struct {
	// Enabled allows a free-text value.
	Enabled bool `json:"enabled"`
	// DisplayName labels the text field.
	DisplayName string `json:"display_name"`
	// DisplayNameInChoices is the entry for it among the choices; default
	// "Other..." when enabled.
	DisplayNameInChoices string `json:"display_name_in_choices"`
	// ValidationRegex must match at the start of the value (Python's
	// re.match), in Go's RE2 syntax.
	ValidationRegex string `json:"validation_regex"`
	// ValidationMessage is shown when the value does not match.
	ValidationMessage string `json:"validation_message"`
	// KubeSpawnerOverride sets traits; "{value}" in any string (and dict
	// key) is replaced by the value given.
	KubeSpawnerOverride map[string]any `json:"-"`

	re *regexp.Regexp
}

// MarshalJSON encodes the options as an object in written order.
func (o ProfileOptions) MarshalJSON() ([]byte, error) {
	return orderedObject(len(o), func(i int) (string, any) { return o[i].Name, o[i] })
}

// MarshalJSON encodes the choices as an object in written order.
func (c Choices) MarshalJSON() ([]byte, error) {
	return orderedObject(len(c), func(i int) (string, any) { return c[i].Name, c[i] })
}

func orderedObject(n int, item func(int) (string, any)) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		k, v := item(i)
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		vb, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// DefaultUnlistedChoiceName is display_name_in_choices when not set.
const DefaultUnlistedChoiceName = "Other..."

func (l *ProfileList) decodeTrait(v any, p *field.Path) field.ErrorList {
	*l = nil
	var (
		items []any
		srcs  []string
		paths []*field.Path
	)
	switch t := v.(type) {
	case nil:
		return nil
	case []any:
		for i, e := range t {
			items, srcs, paths = append(items, e), append(srcs, strconv.Itoa(i)), append(paths, p.Index(i))
		}
	case map[string]any:
		for _, k := range sortedKeys(t) {
			items, srcs, paths = append(items, t[k]), append(srcs, k), append(paths, p.Key(k))
		}
	default:
		return field.ErrorList{invalid(p, v, "must be a list or a dict of profiles")}
	}
	var errs field.ErrorList
	for i, item := range items {
		prof, perrs := decodeProfile(item, paths[i])
		prof.src, prof.path = srcs[i], paths[i]
		*l = append(*l, prof)
		errs = append(errs, perrs...)
	}
	return errs
}

// splitNested decodes the scalar keys of m into out, strictly, and returns
// the values of the nested keys, which the caller decodes itself.
func splitNested(v any, p *field.Path, out any, nested ...string) (map[string]any, field.ErrorList) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, field.ErrorList{invalid(p, v, "must be a dict")}
	}
	scalars := make(map[string]any, len(m))
	sub := map[string]any{}
	for k, e := range m {
		scalars[k] = e
	}
	for _, k := range nested {
		if e, ok := m[k]; ok {
			sub[k] = e
			delete(scalars, k)
		}
	}
	return sub, strictDecode(scalars, out, p)
}

func decodeOverride(v any, p *field.Path, unlisted bool) (map[string]any, field.ErrorList) {
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, field.ErrorList{invalid(p, v, "must be a dict of KubeSpawner traits")}
	}
	var errs field.ErrorList
	for _, k := range sortedKeys(m) {
		kp := p.Child(k)
		switch k {
		case "profile_list":
			errs = append(errs, field.Forbidden(kp, "a profile cannot override profile_list"))
			continue
		case "hub_namespace":
			errs = append(errs, field.Forbidden(kp, "the hub's namespace is the same for every profile"))
			continue
		}
		if !unlisted {
			// A null in a dict deletes that key when the override is
			// merged (KubeSpawner's recursive_update); the merged
			// settings are checked by validateProfiles.
			errs = append(errs, checkTraitValue(k, dropNulls(m[k]), kp)...)
			continue
		}
		if refused, err := checkRefused(k, m[k], kp); refused {
			if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		// An unlisted choice's values depend on what the user types, so
		// only the key and the template syntax can be checked here.
		t, known := traits[k]
		if !known {
			errs = append(errs, unknownKey(kp))
			continue
		}
		f, err := recursiveFormat(m[k], "x")
		if err != nil {
			errs = append(errs, invalid(kp, m[k], err.Error()))
			continue
		}
		if t.opts.tmpl {
			errs = append(errs, checkTemplates(f, kp)...)
		}
	}
	return m, errs
}

func decodeProfile(v any, p *field.Path) (Profile, field.ErrorList) {
	var prof Profile
	var head struct {
		DisplayName string  `json:"display_name"`
		Slug        *string `json:"slug"`
		Default     bool    `json:"default"`
		Description string  `json:"description"`
	}
	sub, errs := splitNested(v, p, &head, "kubespawner_override", "profile_options")
	prof.DisplayName, prof.Default, prof.Description = head.DisplayName, head.Default, head.Description
	if head.Slug != nil {
		prof.Slug = *head.Slug
		if prof.Slug == "" {
			errs = append(errs, field.Required(p.Child("slug"), "must not be empty"))
		}
	} else {
		if prof.DisplayName == "" {
			errs = append(errs, field.Required(p.Child("display_name"), "needed to derive the slug"))
		}
		prof.Slug = Slugify(prof.DisplayName)
		if prof.Slug == "" && prof.DisplayName != "" {
			errs = append(errs, field.Invalid(p.Child("display_name"), prof.DisplayName, "gives an empty slug; set slug"))
		}
	}
	var oerrs field.ErrorList
	prof.KubeSpawnerOverride, oerrs = decodeOverride(sub["kubespawner_override"], p.Child("kubespawner_override"), false)
	errs = append(errs, oerrs...)

	if po, ok := sub["profile_options"]; ok && po != nil {
		m, ok := po.(map[string]any)
		if !ok {
			return prof, append(errs, invalid(p.Child("profile_options"), po, "must be a dict of options"))
		}
		for _, name := range sortedKeys(m) {
			opt, e := decodeOption(name, m[name], p.Child("profile_options", name))
			prof.ProfileOptions = append(prof.ProfileOptions, opt)
			errs = append(errs, e...)
		}
	}
	return prof, errs
}

func decodeOption(name string, v any, p *field.Path) (ProfileOption, field.ErrorList) {
	opt := ProfileOption{Name: name}
	var head struct {
		DisplayName string `json:"display_name"`
	}
	sub, errs := splitNested(v, p, &head, "choices", "unlisted_choice")
	opt.DisplayName = head.DisplayName

	if cv, ok := sub["choices"]; ok && cv != nil {
		m, ok := cv.(map[string]any)
		if !ok {
			errs = append(errs, invalid(p.Child("choices"), cv, "must be a dict of choices"))
		}
		for _, cname := range sortedKeys(m) {
			cp := p.Child("choices", cname)
			var ch struct {
				DisplayName string `json:"display_name"`
				Default     bool   `json:"default"`
			}
			csub, cerrs := splitNested(m[cname], cp, &ch, "kubespawner_override")
			errs = append(errs, cerrs...)
			ov, oerrs := decodeOverride(csub["kubespawner_override"], cp.Child("kubespawner_override"), false)
			errs = append(errs, oerrs...)
			opt.Choices = append(opt.Choices, Choice{Name: cname, DisplayName: ch.DisplayName, Default: ch.Default, KubeSpawnerOverride: ov})
		}
	}

	if uv, ok := sub["unlisted_choice"]; ok && uv != nil {
		up := p.Child("unlisted_choice")
		var u struct {
			Enabled              bool   `json:"enabled"`
			DisplayName          string `json:"display_name"`
			DisplayNameInChoices string `json:"display_name_in_choices"`
			ValidationRegex      string `json:"validation_regex"`
			ValidationMessage    string `json:"validation_message"`
		}
		usub, uerrs := splitNested(uv, up, &u, "kubespawner_override")
		errs = append(errs, uerrs...)
		opt.UnlistedChoice = UnlistedChoice{
			Enabled: u.Enabled, DisplayName: u.DisplayName, DisplayNameInChoices: u.DisplayNameInChoices,
			ValidationRegex: u.ValidationRegex, ValidationMessage: u.ValidationMessage,
		}
		ov, oerrs := decodeOverride(usub["kubespawner_override"], up.Child("kubespawner_override"), true)
		errs = append(errs, oerrs...)
		opt.UnlistedChoice.KubeSpawnerOverride = ov
		if u.ValidationRegex != "" {
			// Python's re.match anchors at the start only.
			re, err := regexp.Compile(`^(?:` + u.ValidationRegex + `)`)
			if err != nil {
				errs = append(errs, field.Invalid(up.Child("validation_regex"), u.ValidationRegex, "not a valid (RE2) regular expression: "+err.Error()))
			}
			opt.UnlistedChoice.re = re
		}
	}
	if len(opt.Choices) == 0 && !opt.UnlistedChoice.Enabled {
		errs = append(errs, field.Required(p.Child("choices"), "an option needs choices or an enabled unlisted_choice"))
	}
	return opt, errs
}

// initProfiles puts options and choices in written order and fills in
// what KubeSpawner's _get_initialized_profile_list does: a default choice
// per option, display_name_in_choices, and a default profile.
func initProfiles(list ProfileList, order map[string][]string) ([]Profile, field.ErrorList) {
	var errs field.ErrorList
	out := make([]Profile, len(list))
	seen := map[string]string{}
	anyDefault := false
	for i, prof := range list {
		pp := prof.path
		if first, dup := seen[prof.Slug]; dup {
			errs = append(errs, field.Duplicate(pp.Child("slug"), prof.Slug).WithOrigin(first))
		}
		seen[prof.Slug] = pp.String()

		base := "/kubespawner/profile_list/" + prof.src + "/profile_options"
		prof.ProfileOptions = reorder(prof.ProfileOptions, order[base], func(o ProfileOption) string { return o.Name })
		for j := range prof.ProfileOptions {
			opt := &prof.ProfileOptions[j]
			opt.Choices = reorder(opt.Choices, order[base+"/"+opt.Name+"/choices"], func(c Choice) string { return c.Name })
			hasDefault := false
			for _, c := range opt.Choices {
				hasDefault = hasDefault || c.Default
			}
			if !hasDefault && len(opt.Choices) > 0 {
				opt.Choices[0].Default = true
			}
			if opt.UnlistedChoice.Enabled && opt.UnlistedChoice.DisplayNameInChoices == "" {
				opt.UnlistedChoice.DisplayNameInChoices = DefaultUnlistedChoiceName
			}
		}
		anyDefault = anyDefault || prof.Default
		out[i] = prof
	}
	if !anyDefault && len(out) > 0 {
		out[0].Default = true
	}
	return out, errs
}

// reorder returns a copy of items (sorted by name) in the written order
// of their names; names not written keep their sorted order, after them.
func reorder[T any](items []T, written []string, name func(T) string) []T {
	rank := make(map[string]int, len(written))
	for i, k := range written {
		if _, ok := rank[k]; !ok {
			rank[k] = i
		}
	}
	out := slices.Clone(items)
	sort.SliceStable(out, func(i, j int) bool {
		ri, iok := rank[name(out[i])]
		rj, jok := rank[name(out[j])]
		if iok != jok {
			return iok
		}
		return ri < rj
	})
	return out
}

// Profiles returns the profile list with slugs and defaults filled in, in
// the configured order, for the hub's options form. The result must not be
// modified.
func (c *Config) Profiles() []Profile {
	return append([]Profile(nil), c.profiles...)
}

// fillGPUClasses records on each profile and choice the GPU class a spawn
// with it gets, from the base settings and the overrides together, so that
// the hub can tell GPU spawns apart without reading overrides.
func (c *Config) fillGPUClasses() {
	for i := range c.profiles {
		p := &c.profiles[i]
		if s, err := c.Resolve(map[string]any{"profile": p.Slug}); err == nil {
			p.GPUClass = s.GPUClass
		}
		for j := range p.ProfileOptions {
			o := &p.ProfileOptions[j]
			for k := range o.Choices {
				if s, err := c.Resolve(map[string]any{"profile": p.Slug, o.Name: o.Choices[k].Name}); err == nil {
					o.Choices[k].GPUClass = s.GPUClass
				}
			}
		}
	}
}

// defaultProfile returns the first profile marked default.
func (c *Config) defaultProfile() *Profile {
	for i := range c.profiles {
		if c.profiles[i].Default {
			return &c.profiles[i]
		}
	}
	return nil
}

// ProfileSlug is the slug of the profile user_options select: the one
// named, else the default one; "" without profiles or for an unknown name.
func (c *Config) ProfileSlug(userOptions map[string]any) string {
	if slug, err := userOptionsView(userOptions).get("profile"); err == nil && slug != "" {
		if c.profile(slug) != nil {
			return slug
		}
		return ""
	}
	if p := c.defaultProfile(); p != nil {
		return p.Slug
	}
	return ""
}

// Resolve applies user_options (profile + options) to the base settings and
// returns the effective settings. Overrides apply in KubeSpawner's order:
// the profile's kubespawner_override, then each option's choice. Bad input
// yields a *FieldError naming the user_options key.
//
// The settings of each distinct user_options are computed once per Config
// and shared: callers must not modify them (copy the struct to change a
// field). A Config never changes, so the cache needs no invalidation; a
// changed configuration file is a new Config.
func (c *Config) Resolve(userOptions map[string]any) (*Settings, error) {
	key, cacheable := resolveKey(userOptions)
	if cacheable {
		if s, ok := c.resolved.get(key); ok {
			return s, nil
		}
	}
	s, err := c.resolve(userOptions)
	if err == nil && cacheable {
		c.resolved.put(key, s)
	}
	return s, err
}

func (c *Config) resolve(userOptions map[string]any) (*Settings, error) {
	opts := userOptionsView(userOptions)
	raw := deepCopy(c.base).(map[string]any)
	// userKeys maps traits set from a user's free text to the user_options
	// key it came in, so problems it causes are reported as bad input.
	userKeys := map[string]string{}
	if len(c.profiles) > 0 {
		slug, err := opts.get("profile")
		if err != nil {
			return nil, err
		}
		prof := c.defaultProfile()
		if slug != "" {
			if prof = c.profile(slug); prof == nil {
				return nil, &FieldError{Field: "user_options.profile", Message: fmt.Sprintf("no such profile: %q (options: %s)", slug, strings.Join(c.slugs(), ", "))}
			}
		}
		overrides := []map[string]any{prof.KubeSpawnerOverride}
		for _, opt := range prof.ProfileOptions {
			ov, key, err := opt.override(opts)
			if err != nil {
				return nil, err
			}
			for trait := range ov {
				if key != "" {
					userKeys[trait] = key
				} else {
					delete(userKeys, trait) // a later choice replaced it
				}
			}
			overrides = append(overrides, ov)
		}
		for _, ov := range overrides {
			applyOverride(raw, ov)
		}
	}
	s, errs := c.settingsFrom(raw)
	if len(errs) > 0 {
		if key, ok := userKeys[traitOf(errs[0].Field)]; ok {
			return nil, &FieldError{Field: "user_options." + key, Message: errs.ToAggregate().Error()}
		}
		return nil, &ValidationError{Errors: errs}
	}
	return s, nil
}

func (c *Config) settingsFrom(raw map[string]any) (*Settings, field.ErrorList) {
	root := field.NewPath("kubespawner")
	// profile_list was decoded once by Parse; c.profiles is its result.
	delete(raw, "profile_list")
	s, errs := decodeSettings(raw, root)
	if len(errs) > 0 {
		return nil, errs
	}
	finishDefaults(s)
	if errs := validateSettings(s, raw, root); len(errs) > 0 {
		return nil, errs
	}
	s.ProfileList = c.Profiles()
	return s, nil
}

func (c *Config) profile(slug string) *Profile {
	for i := range c.profiles {
		if c.profiles[i].Slug == slug {
			return &c.profiles[i]
		}
	}
	return nil
}

func (c *Config) slugs() []string {
	out := make([]string, len(c.profiles))
	for i, p := range c.profiles {
		out[i] = p.Slug
	}
	return out
}

// override picks this option's overrides from the user's options: the
// unlisted choice if given, else the named choice, else the default. key is
// the user_options key of a free-text value, so errors it causes can name
// it.
func (o *ProfileOption) override(opts userOptionsView) (ov map[string]any, key string, err error) {
	unlistedKey := o.Name + "--unlisted-choice"
	text, err := opts.get(unlistedKey)
	if err != nil {
		return nil, "", err
	}
	choice, err := opts.get(o.Name)
	if err != nil {
		return nil, "", err
	}
	fieldName := "user_options." + unlistedKey
	switch {
	case text != "":
		u := &o.UnlistedChoice
		if !u.Enabled {
			return nil, "", &FieldError{Field: fieldName, Message: fmt.Sprintf("option %q does not accept an unlisted choice", o.Name)}
		}
		if u.re != nil && !u.re.MatchString(text) {
			msg := u.ValidationMessage
			if msg == "" {
				msg = fmt.Sprintf("does not match %s", u.ValidationRegex)
			}
			return nil, "", &FieldError{Field: fieldName, Message: msg}
		}
		f, err := recursiveFormat(u.KubeSpawnerOverride, text)
		if err != nil {
			return nil, "", &FieldError{Field: fieldName, Message: err.Error()}
		}
		m, _ := f.(map[string]any)
		return m, unlistedKey, nil
	case choice != "":
		for _, c := range o.Choices {
			if c.Name == choice {
				return c.KubeSpawnerOverride, "", nil
			}
		}
		names := make([]string, len(o.Choices))
		for i, c := range o.Choices {
			names[i] = c.Name
		}
		return nil, "", &FieldError{Field: "user_options." + o.Name, Message: fmt.Sprintf("no such choice: %q (options: %s)", choice, strings.Join(names, ", "))}
	default:
		for _, c := range o.Choices {
			if c.Default {
				return c.KubeSpawnerOverride, "", nil
			}
		}
		return nil, "", &FieldError{Field: fieldName, Message: fmt.Sprintf("option %q has no default choice: a value is required", o.Name)}
	}
}

// applyOverride sets traits from one override, merging a dict into a dict
// trait (nil values delete keys) and replacing anything else.
func applyOverride(raw, ov map[string]any) {
	for k, v := range ov {
		vm, isMap := v.(map[string]any)
		cur, curMap := raw[k].(map[string]any)
		if isMap && curMap {
			merged := deepCopy(cur).(map[string]any)
			recursiveUpdate(merged, vm)
			raw[k] = merged
			continue
		}
		raw[k] = deepCopy(v)
	}
}

// userOptionsView reads user_options as the hub passes them: the REST API
// gives strings, the options form gives one-element lists of strings.
type userOptionsView map[string]any

func (u userOptionsView) get(key string) (string, error) {
	v, ok := u[key]
	if !ok || v == nil {
		return "", nil
	}
	switch t := v.(type) {
	case string:
		return t, nil
	case []string:
		if len(t) <= 1 {
			return strings.Join(t, ""), nil
		}
	case []any:
		if len(t) == 0 {
			return "", nil
		}
		if s, ok := t[0].(string); ok && len(t) == 1 {
			return s, nil
		}
	}
	return "", &FieldError{Field: "user_options." + key, Message: "must be a string"}
}

// validateProfiles checks the settings each profile can produce: the
// profile with its default choices, and each listed choice in turn, so
// that cross-field problems (a guarantee above a limit) surface at start-up
// under the override that causes them.
func (c *Config) validateProfiles() field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	add := func(list field.ErrorList, owners []ownedOverride) {
		for _, e := range list {
			e := *e
			e.Field = blame(e.Field, owners)
			if key := e.Field + "\x00" + e.ErrorBody(); !seen[key] {
				seen[key] = true
				errs = append(errs, &e)
			}
		}
	}
	for _, prof := range c.profiles {
		pp := prof.path
		profOwner := ownedOverride{prof.KubeSpawnerOverride, pp.Child("kubespawner_override")}
		defaults := func(skip string) []ownedOverride {
			var owners []ownedOverride
			for _, opt := range prof.ProfileOptions {
				if opt.Name == skip {
					continue
				}
				for _, ch := range opt.Choices {
					if ch.Default {
						owners = append(owners, ownedOverride{ch.KubeSpawnerOverride, pp.Child("profile_options", opt.Name, "choices", ch.Name, "kubespawner_override")})
					}
				}
			}
			return owners
		}
		check := func(owners []ownedOverride) {
			raw := deepCopy(c.base).(map[string]any)
			for _, o := range owners {
				applyOverride(raw, o.override)
			}
			_, list := c.settingsFrom(raw)
			add(list, owners)
		}
		check(append([]ownedOverride{profOwner}, defaults("")...))
		for _, opt := range prof.ProfileOptions {
			for _, ch := range opt.Choices {
				if ch.Default {
					continue
				}
				owner := ownedOverride{ch.KubeSpawnerOverride, pp.Child("profile_options", opt.Name, "choices", ch.Name, "kubespawner_override")}
				check(append(append([]ownedOverride{profOwner}, defaults(opt.Name)...), owner))
			}
		}
	}
	return errs
}

type ownedOverride struct {
	override map[string]any
	path     *field.Path
}

// blame rewrites an error path "kubespawner.<trait>..." to the last
// override in owners that sets the trait.
func blame(path string, owners []ownedOverride) string {
	rest, ok := strings.CutPrefix(path, "kubespawner.")
	if !ok {
		return path
	}
	trait := traitOf(path)
	for i := len(owners) - 1; i >= 0; i-- {
		if _, ok := owners[i].override[trait]; ok {
			return owners[i].path.String() + "." + rest
		}
	}
	return path
}

// Slugify derives a profile slug from its display name the way
// python-slugify does for Latin text: letters lowercased and stripped of
// accents, commas between digits dropped, every other run of characters a
// single '-'. python-slugify transliterates other scripts (unidecode);
// here they become separators, so set slug explicitly for such names.
func Slugify(s string) string {
	runes := []rune(norm.NFKD.String(s))
	var b strings.Builder
	pendingDash := false
	emit := func(t string) {
		if pendingDash && b.Len() > 0 {
			b.WriteByte('-')
		}
		pendingDash = false
		b.WriteString(t)
	}
	for i, r := range runes {
		switch {
		case unicode.Is(unicode.Mn, r):
			// combining accents: "é" decomposes to "e" and U+0301
		case r == ',' && i > 0 && i+1 < len(runes) && unicode.IsDigit(runes[i-1]) && unicode.IsDigit(runes[i+1]):
			// "1,000" → "1000"
		case transliterate(r) != "":
			emit(transliterate(r))
		case (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			emit(string(r))
		case r >= 'A' && r <= 'Z':
			emit(string(unicode.ToLower(r)))
		default:
			pendingDash = true
		}
	}
	return b.String()
}

// transliterate spells out the Latin letters without a decomposition as
// unidecode does.
func transliterate(r rune) string {
	switch r {
	case 'ß':
		return "ss"
	case 'æ', 'Æ':
		return "ae"
	case 'ø', 'Ø':
		return "o"
	case 'œ', 'Œ':
		return "oe"
	case 'đ', 'Đ', 'ð', 'Ð':
		return "d"
	case 'ł', 'Ł':
		return "l"
	case 'þ', 'Þ':
		return "th"
	}
	return ""
}

// traitOf returns the trait an error path "kubespawner.<trait>..." is
// about, or "" for other paths.
func traitOf(path string) string {
	rest, ok := strings.CutPrefix(path, "kubespawner.")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, ".["); i >= 0 {
		return rest[:i]
	}
	return rest
}
