package spawner

import (
	"reflect"
	"testing"
)

func TestNamespacesAndMayHold(t *testing.T) {
	cases := map[string]struct {
		config  string
		want    []string
		all     bool
		holds   map[string]bool // namespace → MayHold for alice
		bobHold map[string]bool
	}{
		"base only": {
			config: "kubespawner: {namespace: jhub}",
			want:   []string{"jhub"},
			holds:  map[string]bool{"jhub": true, "other": false},
		},
		"profile and choice namespaces": {
			config: `
kubespawner:
  namespace: jhub
  profile_list:
  - {display_name: A, slug: a, default: true}
  - display_name: B
    slug: b
    kubespawner_override: {namespace: course-b}
    profile_options:
      term:
        display_name: Term
        choices:
          fa: {display_name: Fall, kubespawner_override: {namespace: course-fa}}
          wi: {display_name: Winter}
`,
			want:  []string{"course-b", "course-fa", "jhub"},
			holds: map[string]bool{"jhub": true, "course-b": true, "course-fa": true, "course-c": false},
		},
		"user namespaces": {
			config: `
kubespawner:
  namespace: jhub
  enable_user_namespaces: true
  user_namespace_template: "jhub-{username}"
`,
			all:     true,
			holds:   map[string]bool{"jhub-alice": true, "jhub-bob": false, "jhub": false},
			bobHold: map[string]bool{"jhub-bob": true, "jhub-alice": false},
		},
		"free text sets the namespace": {
			config: `
kubespawner:
  namespace: jhub
  profile_list:
  - display_name: A
    slug: a
    profile_options:
      ns:
        display_name: Namespace
        choices: {x: {display_name: X}}
        unlisted_choice: {enabled: true, display_name: Own, kubespawner_override: {namespace: "{value}"}}
`,
			all:   true,
			holds: map[string]bool{"anything": true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.config))
			if err != nil {
				t.Fatal(err)
			}
			got, all := cfg.Namespaces()
			if all != tc.all || (!tc.all && !reflect.DeepEqual(got, tc.want)) {
				t.Errorf("Namespaces() = %v, all %v; want %v, all %v", got, all, tc.want, tc.all)
			}
			for ns, want := range tc.holds {
				if g := cfg.MayHold("alice", "", 0, ns); g != want {
					t.Errorf("MayHold(alice, %s) = %v, want %v", ns, g, want)
				}
			}
			for ns, want := range tc.bobHold {
				if g := cfg.MayHold("bob", "", 0, ns); g != want {
					t.Errorf("MayHold(bob, %s) = %v, want %v", ns, g, want)
				}
			}
		})
	}
}
