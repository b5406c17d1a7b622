package spawner

import (
	"strings"
	"testing"
)

// Vectors from KubeSpawner's tests/test_slugs.py.
func TestSafeSlug(t *testing.T) {
	tests := map[string]struct{ name, want string }{
		"valid":               {"jupyter-alex", "jupyter-alex"},
		"capital":             {"jupyter-Alex", "jupyter-alex---3a1c285c"},
		"unicode":             {"jupyter-üni", "jupyter-ni---a5aaf5dd"},
		"ends with hyphen":    {"endswith-", "endswith---165f1166"},
		"email":               {"user@email.com", "user-email-com---0925f997"},
		"mixed symbols":       {"user-_@_emailß.com", "user-email-com---7e3a7efd"},
		"dot":                 {"has.dot", "has-dot---03e27fdf"},
		"short":               {"z9", "z9"},
		"starts with digit":   {"9z9", "x-9z9---224de202"},
		"starts with hyphen":  {"-start", "start---f587e2dc"},
		"starts with unicode": {"üser", "ser---73506260"},
		"double hyphen":       {"username--servername", "username-servername---d957f1de"},
		"looks hashed":        {"start---f587e2dc", "start-f587e2dc---cc5bb9c9"},
		"x63":                 {strings.Repeat("x", 63), strings.Repeat("x", 63)},
		"x64":                 {strings.Repeat("x", 64), "xxxxxxxxxxxxxxxxxxxxx---7ce10097"},
		"x65":                 {strings.Repeat("x", 65), "xxxxxxxxxxxxxxxxxxxxx---9537c5fd"},
		"empty":               {"", "x---e3b0c442"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := SafeSlug(tc.name, IsValidObjectName, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("SafeSlug(%q) = %q, want %q", tc.name, got, tc.want)
			}
		})
	}
}

func TestSafeSlugMaxLength(t *testing.T) {
	tests := map[string]struct {
		maxLength, length int
		want              string
		wantErr           bool
	}{
		"fits":         {maxLength: 16, length: 16, want: strings.Repeat("x", 16)},
		"one too long": {maxLength: 16, length: 17, want: "xxxxx---d04fd59f"},
		"no room":      {maxLength: 11, length: 16, wantErr: true},
		"room for one": {maxLength: 12, length: 16, want: "x---9c572959"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := SafeSlug(strings.Repeat("x", tc.length), IsValidObjectName, tc.maxLength)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("SafeSlug = %q, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("SafeSlug = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSafeSlugLabel(t *testing.T) {
	tests := map[string]struct{ name, want string }{
		"empty":             {"", ""},
		"one char":          {"x", "x"},
		"hyphen inside":     {"a-b", "a-b"},
		"starts with digit": {"9a", "9a"},
		"ends with dot":     {"9.", "x-9---99a1b84b"},
		"keeps case":        {"AbC", "AbC"},
		"case and dot end":  {"AbC.", "abc---dbe8c5d1"},
		"dot inside":        {"ab.c", "ab.c"},
		"at sign":           {"a@b.c", "a-b-c---d648b243"},
		"leading hyphen":    {"-x", "x---a4209624"},
		"trailing hyphen":   {"x-", "x---c8b60efc"},
		"x63":               {strings.Repeat("x", 63), strings.Repeat("x", 63)},
		"x64":               {strings.Repeat("x", 64), "xxxxxxxxxxxxxxxxxxxxx---7ce10097"},
		"x65":               {strings.Repeat("x", 65), "xxxxxxxxxxxxxxxxxxxxx---9537c5fd"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := labelSlug(tc.name); got != tc.want {
				t.Errorf("label slug of %q = %q, want %q", tc.name, got, tc.want)
			}
		})
	}
}

func TestEscapeSlug(t *testing.T) {
	tests := map[string]struct{ name, want string }{
		"plain":       {"user", "user"},
		"email":       {"user@email.com", "user-40email-2ecom"},
		"hyphen":      {"has-hyphen", "has-2dhyphen"},
		"capitals":    {"Alice", "-41lice"},
		"unicode":     {"üser", "-c3-bcser"},
		"underscore":  {"some_user", "some-5fuser"},
		"tab":         {"a\tb", "a-9b"}, // escapism does not zero-pad
		"empty":       {"", ""},
		"digits kept": {"9lives", "9lives"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := EscapeSlug(tc.name); got != tc.want {
				t.Errorf("EscapeSlug(%q) = %q, want %q", tc.name, got, tc.want)
			}
		})
	}
}

func TestMultiSlug(t *testing.T) {
	// The hash covers both names with 0xFF between them, so moving a
	// character across the boundary changes it.
	a, err := MultiSlug([]string{"ab", "c"}, 48)
	if err != nil {
		t.Fatal(err)
	}
	b, err := MultiSlug([]string{"a", "bc"}, 48)
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Errorf("MultiSlug collides: %q", a)
	}
	if !strings.HasPrefix(a, "ab--c---") || len(a) != len("ab--c---")+8 {
		t.Errorf("MultiSlug = %q, want ab--c---<8 hex>", a)
	}
	if _, err := MultiSlug([]string{"a", "b"}, 16); err == nil {
		t.Error("MultiSlug with 16 characters for 2 names: want an error")
	}
}

// Pod names and username labels from kubespawner.md §1.4 and KubeSpawner's
// test_spawner.py pod-name tests, under both schemes.
func TestNamesPodName(t *testing.T) {
	tests := map[string]struct {
		scheme, user, server string
		wantPod, wantLabel   string
		wantPVC              string
	}{
		"plain default":       {user: "user", wantPod: "jupyter-user", wantLabel: "user", wantPVC: "claim-user"},
		"plain named":         {user: "user", server: "server", wantPod: "jupyter-user--server", wantLabel: "user"},
		"escaping":            {user: "some_user", server: "test-server!", wantPod: "jupyter-some-user---7d3a4d4e--test-server---cb54a9af", wantLabel: "some_user"},
		"email and spaces":    {user: "user@email.com", server: "Some Name", wantPod: "jupyter-user-email-com---0925f997--some-name---3a8b1764", wantLabel: "user-email-com---0925f997"},
		"capital":             {user: "Alice", wantPod: "jupyter-alice---3bc51062", wantLabel: "Alice"},
		"collision named":     {user: "user-has", server: "dash", wantPod: "jupyter-user-has--dash", wantPVC: "claim-user-has--dash"},
		"collision default":   {user: "user-has-dash", wantPod: "jupyter-user-has-dash", wantPVC: "claim-user-has-dash"},
		"leading digit":       {user: "9user@email.com", wantPod: "jupyter-x-9user-email-com---08f58cbd", wantLabel: "x-9user-email-com---08f58cbd"},
		"long default quirk":  {user: strings.Repeat("a", 60), wantPod: "jupyter-aaaaaaaaaaaaaaaaa--x---dc276c9a", wantLabel: strings.Repeat("a", 60)},
		"escape plain":        {scheme: SlugSchemeEscape, user: "user", wantPod: "jupyter-user"},
		"escape email named":  {scheme: SlugSchemeEscape, user: "user@email.com", server: "Some Name", wantPod: "jupyter-user-40email-2ecom---53ome-20-4eame"},
		"escape capital":      {scheme: SlugSchemeEscape, user: "Alice", wantPod: "jupyter--41lice", wantPVC: "claim--41lice"},
		"escape hyphen named": {scheme: SlugSchemeEscape, user: "user-has", server: "dash", wantPod: "jupyter-user-2dhas--dash"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := mustParse(t, "kubespawner: {}\n").KubeSpawner
			if tc.scheme != "" {
				s.SlugScheme = tc.scheme
			}
			n, err := NewNames(&s, tc.user, tc.server, 7, "jhub")
			if err != nil {
				t.Fatal(err)
			}
			if n.PodName != tc.wantPod {
				t.Errorf("pod name = %q, want %q", n.PodName, tc.wantPod)
			}
			if tc.wantPVC != "" && n.PVCName != tc.wantPVC {
				t.Errorf("pvc name = %q, want %q", n.PVCName, tc.wantPVC)
			}
			if tc.wantLabel != "" {
				if got := labelSlug(tc.user); got != tc.wantLabel {
					t.Errorf("username label = %q, want %q", got, tc.wantLabel)
				}
			}
		})
	}
}

// Awkward user names must always give valid object names and label values
// under the safe scheme, whatever their length or script.
func TestNamesAlwaysValid(t *testing.T) {
	users := []string{
		"Alice", "a.b.c", "first.last@example.edu", "İstanbul", "名前", "ünïcödé",
		"-lead", "trail-", "_x_", strings.Repeat("long", 40), "a--b", "9", "",
		strings.Repeat("é", 70),
	}
	servers := []string{"", "gpu", "My Server!", strings.Repeat("s", 60)}
	s := mustParse(t, "kubespawner: {}\n").KubeSpawner
	seen := map[string]string{}
	for _, u := range users {
		for _, srv := range servers {
			n, err := NewNames(&s, u, srv, 0, "")
			if err != nil {
				t.Fatalf("NewNames(%q, %q): %v", u, srv, err)
			}
			if !IsValidObjectName(n.PodName) || !IsValidObjectName(n.PVCName) {
				t.Errorf("NewNames(%q, %q): invalid names %q, %q", u, srv, n.PodName, n.PVCName)
			}
			if l := labelSlug(u); !IsValidLabelValue(l) {
				t.Errorf("label for %q = %q, not a valid label value", u, l)
			}
			key := u + "\x00" + srv
			if prev, dup := seen[n.PodName]; dup {
				t.Errorf("pod name %q for both %q and %q", n.PodName, prev, key)
			}
			seen[n.PodName] = key
		}
	}
}

func TestSlugify(t *testing.T) {
	tests := map[string]struct{ in, want string }{
		"words":     {"Something without a slug", "something-without-a-slug"},
		"accents":   {"Café Olé", "cafe-ole"},
		"symbols":   {"GPU (1x A100) -- large!", "gpu-1x-a100-large"},
		"quote":     {"Bob's image", "bob-s-image"},
		"thousands": {"1,000 cores", "1000-cores"},
		"eszett":    {"Straße", "strasse"},
		"empty":     {"!!!", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Slugify(tc.in); got != tc.want {
				t.Errorf("Slugify(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
