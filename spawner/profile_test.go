package spawner

import (
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// A profile list whose options and choices are written out of
// alphabetical order, so order handling is visible.
const profilesConfig = `
kubespawner:
  image: base/image:1
  cpu_limit: 2
  extra_labels: {team: base, keep: "yes"}
  profile_list:
    - display_name: Something without a slug
      kubespawner_override:
        image: minimal/image:1
    - display_name: Data Science
      slug: ds
      kubespawner_override:
        image: ds/image:1
        extra_labels: {team: ds, keep: null}
        common_labels: {extra: "1"}
      profile_options:
        size:
          display_name: Size
          choices:
            medium:
              display_name: Medium
              kubespawner_override: {cpu_limit: 4}
            big:
              display_name: Big
              kubespawner_override: {cpu_limit: 8, environment: {SIZE: big}}
        image:
          display_name: Image
          choices:
            stock: {display_name: Stock}
          unlisted_choice:
            enabled: true
            display_name: Custom image
            validation_regex: "ucsdets/"
            validation_message: Images must come from ucsdets/.
            kubespawner_override:
              image: "{value}"
              environment: {CUSTOM: "{value}", ESCAPED: "{{username}}", WHO: "{username}"}
        only-unlisted:
          display_name: Tag
          unlisted_choice:
            enabled: true
            kubespawner_override: {extra_labels: {tag: "{value}"}}
`

func TestProfilesInitialized(t *testing.T) {
	cfg := mustParse(t, profilesConfig)
	profiles := cfg.Profiles()
	if len(profiles) != 2 {
		t.Fatalf("got %d profiles, want 2", len(profiles))
	}
	p0, p1 := profiles[0], profiles[1]
	if p0.Slug != "something-without-a-slug" || !p0.Default {
		t.Errorf("profile 0 = slug %q default %v, want derived slug and default (none marked)", p0.Slug, p0.Default)
	}
	if p1.Slug != "ds" || p1.Default {
		t.Errorf("profile 1 = slug %q default %v", p1.Slug, p1.Default)
	}
	var names []string
	for _, o := range p1.ProfileOptions {
		names = append(names, o.Name)
	}
	if want := []string{"size", "image", "only-unlisted"}; !reflect.DeepEqual(names, want) {
		t.Errorf("options = %q, want written order %q", names, want)
	}
	size := p1.ProfileOptions[0]
	if size.Choices[0].Name != "medium" || !size.Choices[0].Default || size.Choices[1].Default {
		t.Errorf("size choices = %+v, want medium first and default", size.Choices)
	}
	if size.UnlistedChoice.Enabled {
		t.Error("size: unlisted choice enabled, want disabled by default")
	}
	img := p1.ProfileOptions[1]
	if img.UnlistedChoice.DisplayNameInChoices != DefaultUnlistedChoiceName {
		t.Errorf("display_name_in_choices = %q, want %q", img.UnlistedChoice.DisplayNameInChoices, DefaultUnlistedChoiceName)
	}
}

// The profile list tells the hub each profile's and choice's effective GPU
// class: its own override over the base's.
func TestProfilesCarryTheirGPUClass(t *testing.T) {
	cfg := mustParse(t, `
kubespawner:
  gpu_class: a30
  profile_list:
  - display_name: CPU
    slug: cpu
    kubespawner_override: {gpu_class: ""}
  - display_name: GPU
    slug: gpu
    profile_options:
      card:
        display_name: Card
        choices:
          a30: {display_name: A30, default: true}
          a5000: {display_name: A5000, kubespawner_override: {gpu_class: a5000}}
`)
	ps := cfg.Profiles()
	if ps[0].GPUClass != "" || ps[1].GPUClass != "a30" {
		t.Errorf("profile classes %q, %q; want \"\", a30", ps[0].GPUClass, ps[1].GPUClass)
	}
	choices := ps[1].ProfileOptions[0].Choices
	if choices[0].GPUClass != "a30" || choices[1].GPUClass != "a5000" {
		t.Errorf("choice classes %q, %q; want a30, a5000", choices[0].GPUClass, choices[1].GPUClass)
	}
}

func TestProfilesJSON(t *testing.T) {
	cfg := mustParse(t, profilesConfig)
	b, err := json.Marshal(cfg.Profiles()[1])
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{
		`"slug":"ds"`,
		`"profile_options":{"size":{"display_name":"Size","choices":{"medium":{"display_name":"Medium","default":true,"gpu_class":""},"big":{"display_name":"Big","default":false,"gpu_class":""}}`,
		`"unlisted_choice":{"enabled":true,"display_name":"Custom image","display_name_in_choices":"Other...","validation_regex":"ucsdets/","validation_message":"Images must come from ucsdets/."}`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("profile JSON lacks %s\n%s", want, got)
		}
	}
	if strings.Contains(got, "kubespawner_override") || strings.Contains(got, "ds/image") {
		t.Errorf("profile JSON exposes overrides: %s", got)
	}
}

func TestResolve(t *testing.T) {
	cfg := mustParse(t, profilesConfig)
	tests := map[string]struct {
		opts       map[string]any
		wantImage  string
		wantCPU    float64
		wantLabels map[string]string
		wantEnv    map[string]string
		wantField  string // a *FieldError naming this key
	}{
		"no options: default profile": {
			opts:      nil,
			wantImage: "minimal/image:1", wantCPU: 2,
			wantLabels: map[string]string{"team": "base", "keep": "yes"},
		},
		"empty profile: default profile": {
			opts:      map[string]any{"profile": ""},
			wantImage: "minimal/image:1", wantCPU: 2,
		},
		"profile with default choices": {
			opts:      map[string]any{"profile": "ds", "only-unlisted--unlisted-choice": "t1"},
			wantImage: "ds/image:1", wantCPU: 4,
			// the dict override merged; null deleted "keep"
			wantLabels: map[string]string{"team": "ds", "tag": "t1"},
		},
		"form lists and a chosen choice": {
			opts:      map[string]any{"profile": []any{"ds"}, "size": []any{"big"}, "only-unlisted--unlisted-choice": []string{"t"}},
			wantImage: "ds/image:1", wantCPU: 8,
			wantEnv: map[string]string{"SIZE": "big"},
		},
		"unlisted choice accepted": {
			opts:      map[string]any{"profile": "ds", "image--unlisted-choice": "ucsdets/custom:1", "image": "stock", "only-unlisted--unlisted-choice": "t"},
			wantImage: "ucsdets/custom:1", wantCPU: 4,
			wantEnv: map[string]string{"CUSTOM": "ucsdets/custom:1", "ESCAPED": "{username}", "WHO": "{username}"},
		},
		"options of other profiles are ignored": {
			opts:      map[string]any{"size": "nonsense", "garbage": 1},
			wantImage: "minimal/image:1", wantCPU: 2,
		},
		"unknown profile": {
			opts:      map[string]any{"profile": "gpu"},
			wantField: "user_options.profile",
		},
		"profile not a string": {
			opts:      map[string]any{"profile": 3},
			wantField: "user_options.profile",
		},
		"two values": {
			opts:      map[string]any{"profile": []any{"ds", "x"}},
			wantField: "user_options.profile",
		},
		"unknown choice": {
			opts:      map[string]any{"profile": "ds", "size": "huge", "only-unlisted--unlisted-choice": "t"},
			wantField: "user_options.size",
		},
		"unlisted rejected by regex": {
			opts:      map[string]any{"profile": "ds", "image--unlisted-choice": "evil/miner:1", "only-unlisted--unlisted-choice": "t"},
			wantField: "user_options.image--unlisted-choice",
		},
		"regex matches at the start only": {
			opts:      map[string]any{"profile": "ds", "image--unlisted-choice": "docker.io/ucsdets/x", "only-unlisted--unlisted-choice": "t"},
			wantField: "user_options.image--unlisted-choice",
		},
		"unlisted not enabled": {
			opts:      map[string]any{"profile": "ds", "size--unlisted-choice": "giant", "only-unlisted--unlisted-choice": "t"},
			wantField: "user_options.size--unlisted-choice",
		},
		"option without a default needs a value": {
			opts:      map[string]any{"profile": "ds"},
			wantField: "user_options.only-unlisted--unlisted-choice",
		},
		"unlisted value that breaks a label": {
			opts:      map[string]any{"profile": "ds", "only-unlisted--unlisted-choice": "not a label"},
			wantField: "user_options.only-unlisted--unlisted-choice",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := cfg.Resolve(tc.opts)
			if tc.wantField != "" {
				var fe *FieldError
				if !errors.As(err, &fe) {
					t.Fatalf("Resolve = %v (%T), want a *FieldError", err, err)
				}
				if fe.Field != tc.wantField || fe.Message == "" {
					t.Errorf("FieldError = %q: %q, want field %q with a message", fe.Field, fe.Message, tc.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Image != tc.wantImage {
				t.Errorf("image = %q, want %q", s.Image, tc.wantImage)
			}
			if s.CPULimit == nil || *s.CPULimit != tc.wantCPU {
				t.Errorf("cpu_limit = %v, want %v", s.CPULimit, tc.wantCPU)
			}
			if tc.wantLabels != nil && !reflect.DeepEqual(s.ExtraLabels, tc.wantLabels) {
				t.Errorf("extra_labels = %v, want %v", s.ExtraLabels, tc.wantLabels)
			}
			for k, v := range tc.wantEnv {
				if got := s.Environment[k].Value; got != v {
					t.Errorf("environment[%s] = %q, want %q", k, got, v)
				}
			}
			if len(s.ProfileList) != 2 {
				t.Errorf("resolved settings carry %d profiles, want 2", len(s.ProfileList))
			}
		})
	}
}

// A dict override merges into a trait's default dict, as KubeSpawner merges
// into the current value.
func TestResolveMergesIntoDefaults(t *testing.T) {
	cfg := mustParse(t, profilesConfig)
	s, err := cfg.Resolve(map[string]any{"profile": "ds", "only-unlisted--unlisted-choice": "t"})
	if err != nil {
		t.Fatal(err)
	}
	if s.CommonLabels["extra"] != "1" || s.CommonLabels["app"] != "jupyterhub" {
		t.Errorf("common_labels = %v, want the default labels plus extra", s.CommonLabels)
	}
	// The base settings are not changed by resolving.
	base, err := cfg.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := base.CommonLabels["extra"]; ok || base.ExtraLabels["keep"] != "yes" {
		t.Errorf("base settings changed by an earlier Resolve: %v %v", base.CommonLabels, base.ExtraLabels)
	}
}

func TestResolveWithoutProfiles(t *testing.T) {
	cfg := mustParse(t, "kubespawner: {image: a/b:1}\n")
	// KubeSpawner ignores a profile asked for when none are configured.
	s, err := cfg.Resolve(map[string]any{"profile": "anything"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Image != "a/b:1" {
		t.Errorf("image = %q", s.Image)
	}
}

func TestProfileListAsDict(t *testing.T) {
	cfg := mustParse(t, `
kubespawner:
  profile_list:
    20-second: {display_name: Second, slug: second}
    10-first: {display_name: First, slug: first}
`)
	p := cfg.Profiles()
	if len(p) != 2 || p[0].Slug != "first" || p[1].Slug != "second" || !p[0].Default {
		t.Errorf("profiles = %+v, want dict values sorted by key, first default", p)
	}
}

// Profile problems are found at Parse time and named by their place in the
// file.
func TestParseProfileErrors(t *testing.T) {
	tests := map[string]struct {
		profiles   string
		wantFields []string
	}{
		"bad override value": {
			profiles:   "- {display_name: A, kubespawner_override: {mem_limit: 2Q}}\n",
			wantFields: []string{"kubespawner.profile_list[0].kubespawner_override.mem_limit"},
		},
		"unknown override key": {
			profiles:   "- {display_name: A}\n- {display_name: B, kubespawner_override: {imagee: x}}\n",
			wantFields: []string{"kubespawner.profile_list[1].kubespawner_override.imagee"},
		},
		"override of profile_list": {
			profiles:   "- {display_name: A, kubespawner_override: {profile_list: []}}\n",
			wantFields: []string{"kubespawner.profile_list[0].kubespawner_override.profile_list"},
		},
		"duplicate slugs": {
			profiles:   "- {display_name: GPU}\n- {display_name: gpu}\n",
			wantFields: []string{"kubespawner.profile_list[1].slug"},
		},
		"unknown profile key": {
			profiles:   "- {display_name: A, kubespawner_overide: {}}\n",
			wantFields: []string{"kubespawner.profile_list[0].kubespawner_overide"},
		},
		"no display name or slug": {
			profiles:   "- {description: x}\n",
			wantFields: []string{"kubespawner.profile_list[0].display_name"},
		},
		"choice override typo": {
			profiles:   "- display_name: A\n  profile_options:\n    size:\n      choices:\n        s: {kubespawner_override: {cpu_limt: 1}}\n",
			wantFields: []string{"kubespawner.profile_list[0].profile_options.size.choices.s.kubespawner_override.cpu_limt"},
		},
		"cross-field problem blamed on the choice": {
			profiles: "- display_name: A\n  kubespawner_override: {cpu_guarantee: 2}\n  profile_options:\n    size:\n      choices:\n" +
				"        ok: {kubespawner_override: {cpu_limit: 4}}\n        tiny: {kubespawner_override: {cpu_limit: 1}}\n",
			wantFields: []string{"kubespawner.profile_list[0].kubespawner_override.cpu_guarantee"},
		},
		"cross-field problem in a choice's own override": {
			profiles: "- display_name: A\n  profile_options:\n    size:\n      choices:\n" +
				"        ok: {kubespawner_override: {cpu_limit: 4}}\n        bad: {kubespawner_override: {cpu_limit: 1, cpu_guarantee: 3}}\n",
			wantFields: []string{"kubespawner.profile_list[0].profile_options.size.choices.bad.kubespawner_override.cpu_guarantee"},
		},
		"option with nothing to choose": {
			profiles:   "- display_name: A\n  profile_options:\n    size: {display_name: Size}\n",
			wantFields: []string{"kubespawner.profile_list[0].profile_options.size.choices"},
		},
		"bad regex": {
			profiles:   "- display_name: A\n  profile_options:\n    image:\n      unlisted_choice: {enabled: true, validation_regex: '(?<=x)y'}\n",
			wantFields: []string{"kubespawner.profile_list[0].profile_options.image.unlisted_choice.validation_regex"},
		},
		"unlisted override with a broken template": {
			profiles: "- display_name: A\n  profile_options:\n    image:\n      unlisted_choice:\n        enabled: true\n" +
				"        kubespawner_override: {environment: {USER: '${{JUPYTER_USER}}'}, nope: '{value}'}\n",
			wantFields: []string{
				"kubespawner.profile_list[0].profile_options.image.unlisted_choice.kubespawner_override.environment.USER",
				"kubespawner.profile_list[0].profile_options.image.unlisted_choice.kubespawner_override.nope",
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte("kubespawner:\n  profile_list:\n" + indent(tc.profiles, "    ")))
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			got := errorFields(t, err)
			sort.Strings(got)
			if !reflect.DeepEqual(got, tc.wantFields) {
				t.Errorf("error fields = %q, want %q\nerror: %v", got, tc.wantFields, err)
			}
		})
	}
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n") + "\n"
}

// Resolve computes the settings of each distinct user_options once: equal
// options (in any key order) share one result, different ones do not, and
// a refused choice is refused every time.
func TestResolveIsComputedOncePerOptions(t *testing.T) {
	cfg := mustParse(t, profilesConfig)
	a, err := cfg.Resolve(map[string]any{"profile": "ds", "size": "big", "only-unlisted--unlisted-choice": "t"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := cfg.Resolve(map[string]any{"only-unlisted--unlisted-choice": "t", "size": "big", "profile": "ds"})
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("equal user_options were resolved twice")
	}
	c, err := cfg.Resolve(map[string]any{"profile": "ds", "size": "medium", "only-unlisted--unlisted-choice": "t"})
	if err != nil {
		t.Fatal(err)
	}
	if c == a || c.CPULimit == a.CPULimit {
		t.Errorf("different options share settings: cpu_limit %v and %v", a.CPULimit, c.CPULimit)
	}
	for range 2 {
		if _, err := cfg.Resolve(map[string]any{"profile": "ds", "image--unlisted-choice": "evil/miner:1", "only-unlisted--unlisted-choice": "t"}); err == nil {
			t.Fatal("an image outside validation_regex was accepted")
		}
	}
	// A fresh Config starts empty: the cache lives and dies with it.
	if d, _ := mustParse(t, profilesConfig).Resolve(map[string]any{"profile": "ds", "size": "big", "only-unlisted--unlisted-choice": "t"}); d == a {
		t.Error("two configurations share a cached result")
	}
}
