package spawner

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNamesExpand(t *testing.T) {
	s := mustParse(t, "kubespawner: {namespace: jhub}\n").KubeSpawner
	n, err := NewNames(&s, "user@email.com", "", 42, "default")
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		tmpl, want string
		wantErr    bool
	}{
		"raw values":               {tmpl: "{unescaped_username}/{userid}", want: "user@email.com/42"},
		"hub namespace default":    {tmpl: "{hubnamespace}", want: "user"},
		"escaped braces":           {tmpl: "{{username}}", want: "{username}"},
		"trailing hyphen stripped": {tmpl: "{username}--{servername}", want: "user-email-com---0925f997"},
		"template hyphen kept":     {tmpl: "x-", want: "x-"},
		"escaped user server":      {tmpl: "{escaped_user_server}", want: "user-40email-2ecom"},
		"resolved names":           {tmpl: "{pod_name}|{pvc_name}|{namespace}", want: "jupyter-user-email-com---0925f997|claim-user-email-com---0925f997|jhub"},
		"unknown key":              {tmpl: "{nope}", wantErr: true},
		"positional":               {tmpl: "{}", wantErr: true},
		"format spec":              {tmpl: "{username:>20}", wantErr: true},
		"attribute":                {tmpl: "{username.upper}", wantErr: true},
		"lone close brace":         {tmpl: "a}b", wantErr: true},
		"unclosed":                 {tmpl: "{username", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := n.Expand(tc.tmpl)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("Expand(%q) = %q, want an error", tc.tmpl, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Expand(%q) = %q, want %q", tc.tmpl, got, tc.want)
			}
		})
	}
}

// While the pod name is computed, {pvc_name} is not known yet, as in
// KubeSpawner's constructor.
func TestNamesOrder(t *testing.T) {
	s := mustParse(t, "kubespawner:\n  pod_name_template: 'p-{username}-{pvc_name}'\n  pvc_name_template: 'c-{pod_name}'\n  enable_user_namespaces: true\n  user_namespace_template: 'ns-{username}-{pod_name}'\n").KubeSpawner
	n, err := NewNames(&s, "ann", "", 0, "hub")
	if err != nil {
		t.Fatal(err)
	}
	want := Names{Namespace: "ns-ann-pod_name_unavailable!", PodName: "p-ann-pvc_name_unavailable!", PVCName: "c-p-ann-pvc_name_unavailable!"}
	if n.Namespace != want.Namespace || n.PodName != want.PodName || n.PVCName != want.PVCName {
		t.Errorf("names = %q %q %q, want %q %q %q", n.Namespace, n.PodName, n.PVCName, want.Namespace, want.PodName, want.PVCName)
	}
}

func TestRecursiveFormat(t *testing.T) {
	in := map[string]any{
		"image":     "{value}",
		"{value}-k": []any{"a{value}b", "{other}", "${{HOME}}", int64(3)},
	}
	got, err := recursiveFormat(in, "V")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"image": "V",
		"V-k":   []any{"aVb", "{other}", "${HOME}", int64(3)},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("recursiveFormat = %#v, want %#v", got, want)
	}
	if _, err := recursiveFormat("{value", "V"); err == nil {
		t.Error("unclosed field: want an error")
	}
}

// expandInto's direct paths give exactly what the JSON round trip gives,
// fresh values included (never the settings' own maps and slices).
func TestExpandIntoMatchesJSON(t *testing.T) {
	s := mustParse(t, "kubespawner: {}\n").KubeSpawner
	tests := map[string]func() any{
		"nil map":             func() any { return new(map[string]string) },
		"empty map":           func() any { m := map[string]string{}; return &m },
		"templated map":       func() any { m := map[string]string{"a": "{username}-x", "b": "{{literal}}", "c": ""}; return &m },
		"invalid utf-8 value": func() any { m := map[string]string{"a": "\xff{username}"}; return &m },
		"invalid utf-8 key":   func() any { m := map[string]string{"\xfe": "{username}"}; return &m },
		"bad template":        func() any { m := map[string]string{"a": "{nope}"}; return &m },
		"empty slice":         func() any { v := []corev1.Volume{}; return &v },
		"volumes": func() any {
			v := []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/home/{username}"}}}}
			return &v
		},
		"env": func() any {
			e := EnvMap{"A": {Name: "A", Value: "{username}"}, "B": {Name: "B"}, "C": {Name: "{servername}C", Value: "$(A)"}}
			return &e
		},
		"env with valueFrom": func() any {
			e := EnvMap{"A": {Name: "A", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "{username}"}}}}
			return &e
		},
		"empty patch":    func() any { p := PodSpecPatch{}; return &p },
		"empty selector": func() any { sel := &metav1.LabelSelector{}; return &sel },
		"selector": func() any {
			sel := &metav1.LabelSelector{MatchLabels: map[string]string{"u": "{username}"}}
			return &sel
		},
		"nil string ptr":   func() any { return new(*string) },
		"string ptr":       func() any { v := "sa-{username}"; p := &v; return &p },
		"empty string":     func() any { return new(string) },
		"string":           func() any { v := "/home/{username}"; return &v },
		"utf-8 user value": func() any { v := "{unescaped_username}"; return &v },
	}
	for _, user := range []string{"alice", "bob@ucsd.edu", "\xffbad"} {
		n, err := NewNames(&s, user, "lab", 7, "")
		if err != nil {
			t.Fatal(err)
		}
		for name, value := range tests {
			t.Run(name+"/"+user, func(t *testing.T) {
				got, want := value(), value()
				orig := reflect.ValueOf(got).Elem().Interface()
				gotErr, wantErr := expandInto(n, got), expandJSON(n, want)
				if (gotErr == nil) != (wantErr == nil) {
					t.Fatalf("expandInto error %v, round trip %v", gotErr, wantErr)
				}
				if gotErr != nil {
					return
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("expandInto = %#v, round trip %#v", reflect.ValueOf(got).Elem().Interface(), reflect.ValueOf(want).Elem().Interface())
				}
				if v := reflect.ValueOf(got).Elem(); (v.Kind() == reflect.Map || v.Kind() == reflect.Slice) && v.Len() > 0 &&
					v.Pointer() == reflect.ValueOf(orig).Pointer() {
					t.Error("expandInto kept the original map or slice; want a new one")
				}
			})
		}
	}
}
