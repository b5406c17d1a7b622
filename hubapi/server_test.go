package hubapi

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"sigs.k8s.io/yaml"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/spawner"
)

var secret = []byte("unit-test-shared-secret-0123456789")

// fakeServers records calls; the real manager is tested against a real API server in e2e.
type fakeServers struct {
	started []spawner.Request
	stopped []lifecycle.Key
	// forever records DeleteForever calls; foreverErr is their answer.
	forever    []foreverCall
	foreverErr error
	// hints are the saved-state hints poll and stop were given.
	hints []lifecycle.Hint
}

func (f *fakeServers) Start(_ context.Context, req spawner.Request, _ history.Actor) (*lifecycle.Server, error) {
	if req.UserOptions["profile"] == "nope" {
		return nil, &spawner.FieldError{Field: "user_options.profile", Message: `unknown profile "nope"`}
	}
	f.started = append(f.started, req)
	return &lifecycle.Server{User: req.User, Server: req.Server, Status: lifecycle.StatusPending}, nil
}
func (f *fakeServers) Server(k lifecycle.Key, h lifecycle.Hint) *lifecycle.Server {
	f.hints = append(f.hints, h)
	return &lifecycle.Server{User: k.User, Server: k.Server, Status: lifecycle.StatusAbsent}
}
func (f *fakeServers) ServerWithEvents(k lifecycle.Key, _ int) *lifecycle.Server {
	return &lifecycle.Server{User: k.User, Server: k.Server, Status: lifecycle.StatusRunning}
}
func (f *fakeServers) Stop(_ context.Context, k lifecycle.Key, h lifecycle.Hint, _ bool, _ time.Duration, _ history.Actor) (bool, error) {
	f.stopped = append(f.stopped, k)
	f.hints = append(f.hints, h)
	return true, nil
}
func (f *fakeServers) Progress(context.Context, lifecycle.Key, func(lifecycle.Event) error) error {
	return lifecycle.ErrNotFound
}
func (f *fakeServers) List() []*lifecycle.Server { return nil }

func newTestServer(t *testing.T, now func() time.Time) (*httptest.Server, *fakeServers) {
	t.Helper()
	auth, err := NewAuthenticator(secret, "jupyterhub", now)
	if err != nil {
		t.Fatal(err)
	}
	fs := &fakeServers{}
	srv := httptest.NewServer(New(Options{Servers: fs, Auth: auth, BodyLimit: "64K"}))
	t.Cleanup(srv.Close)
	return srv, fs
}

func sign(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func goodClaims(user string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"iss": "jupyterhub", "aud": "spawnerd", "sub": user, "iat": now.Unix(), "exp": now.Add(time.Minute).Unix(), "jti": rand.Text()}
}

func call(t *testing.T, srv *httptest.Server, method, path, token, body string) (int, ErrorBody) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, e
}

func TestAuthRefusesBadTokens(t *testing.T) {
	srv, fs := newTestServer(t, nil)
	with := func(mutate func(jwt.MapClaims)) jwt.MapClaims {
		c := goodClaims("alice")
		mutate(c)
		return c
	}
	noneToken := func() string {
		h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
		b, _ := json.Marshal(goodClaims("alice"))
		return h + "." + base64.RawURLEncoding.EncodeToString(b) + "."
	}()
	cases := map[string]string{
		"missing":            "",
		"forged (other key)": sign(t, jwt.SigningMethodHS256, []byte("another-secret-of-enough-length"), goodClaims("alice")),
		"expired": sign(t, jwt.SigningMethodHS256, secret, with(func(c jwt.MapClaims) {
			c["iat"] = time.Now().Add(-3 * time.Minute).Unix()
			c["exp"] = time.Now().Add(-time.Minute).Unix()
		})),
		"alg none":         noneToken,
		"HS512 not pinned": sign(t, jwt.SigningMethodHS512, secret, goodClaims("alice")),
		"wrong audience":   sign(t, jwt.SigningMethodHS256, secret, with(func(c jwt.MapClaims) { c["aud"] = "someone-else" })),
		"wrong issuer":     sign(t, jwt.SigningMethodHS256, secret, with(func(c jwt.MapClaims) { c["iss"] = "mallory" })),
		"no exp":           sign(t, jwt.SigningMethodHS256, secret, with(func(c jwt.MapClaims) { delete(c, "exp") })),
		"no iat":           sign(t, jwt.SigningMethodHS256, secret, with(func(c jwt.MapClaims) { delete(c, "iat") })),
		"lifetime > 60 s":  sign(t, jwt.SigningMethodHS256, secret, with(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(2 * time.Minute).Unix() })),
		"no jti":           sign(t, jwt.SigningMethodHS256, secret, with(func(c jwt.MapClaims) { delete(c, "jti") })),
		"over 8 KiB":       sign(t, jwt.SigningMethodHS256, secret, with(func(c jwt.MapClaims) { c["pad"] = strings.Repeat("x", 9<<10) })),
		"no subject":       sign(t, jwt.SigningMethodHS256, secret, with(func(c jwt.MapClaims) { delete(c, "sub") })),
		"garbage":          "not.a.jwt",
	}
	for name, tok := range cases {
		t.Run(name, func(t *testing.T) {
			code, e := call(t, srv, http.MethodPost, "/api/v1/users/alice/server", tok, `{}`)
			if code != http.StatusUnauthorized || e.Field != "Authorization" || e.Error == "" {
				t.Errorf("got %d %+v, want 401 naming Authorization", code, e)
			}
		})
	}
	if len(fs.started) != 0 {
		t.Errorf("refused tokens started %d servers", len(fs.started))
	}
	if code, _ := call(t, srv, http.MethodPost, "/api/v1/users/alice/server", sign(t, jwt.SigningMethodHS256, secret, goodClaims("alice")), `{}`); code != http.StatusAccepted {
		t.Errorf("good token: %d, want 202", code)
	}
}

func TestAuthUserAndAdminChecks(t *testing.T) {
	srv, fs := newTestServer(t, nil)
	bob := func() string { return sign(t, jwt.SigningMethodHS256, secret, goodClaims("bob")) }
	if code, e := call(t, srv, http.MethodPost, "/api/v1/users/alice/server", bob(), `{}`); code != http.StatusForbidden || e.Field != "user" {
		t.Errorf("bob starting alice's server: %d %+v", code, e)
	}
	if code, _ := call(t, srv, http.MethodGet, "/api/v1/servers", bob(), ""); code != http.StatusForbidden {
		t.Errorf("admin list without admin claim: %d", code)
	}
	admin := goodClaims("hub-admin")
	admin["admin"] = true
	if code, _ := call(t, srv, http.MethodGet, "/api/v1/servers", sign(t, jwt.SigningMethodHS256, secret, admin), ""); code != http.StatusOK {
		t.Errorf("admin list with admin claim: %d", code)
	}
	if len(fs.started) != 0 {
		t.Errorf("refused requests started servers")
	}
}

func TestBadInput(t *testing.T) {
	srv, fs := newTestServer(t, nil)
	cases := map[string]struct {
		path, body string
		code       int
		field      string
	}{
		"malformed":       {"/api/v1/users/alice/server", `{"env":`, 400, "body"},
		"trailing data":   {"/api/v1/users/alice/server", `{} {}`, 400, "body"},
		"wrong type":      {"/api/v1/users/alice/server", `{"user_id": "seven"}`, 400, "user_id"},
		"unknown field":   {"/api/v1/users/alice/server", `{"colour": 1}`, 400, "colour"},
		"trailing brace":  {"/api/v1/users/alice/server", `{}}`, 400, "body"},
		"key case":        {"/api/v1/users/alice/server", `{"ENV": {"A": "1"}}`, 400, "ENV"},
		"duplicate key":   {"/api/v1/users/alice/server", `{"env": {}, "env": {"A": "1"}}`, 400, "env"},
		"duplicate inner": {"/api/v1/users/alice/server", `{"env": {"A": "1", "A": "2"}}`, 400, "env.A"},
		"inner key case":  {"/api/v1/users/alice/server", `{"state": {"PVC_NAME": "x"}}`, 400, "state.PVC_NAME"},
		"oversized":       {"/api/v1/users/alice/server", `{"env": {"A": "` + strings.Repeat("x", 70<<10) + `"}}`, 413, "body"},
		"unknown profile": {"/api/v1/users/alice/server", `{"user_options": {"profile": "nope"}}`, 400, "user_options.profile"},
		"bad now":         {"/api/v1/users/alice/server?now=perhaps", ``, 400, "now"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			method := http.MethodPost
			if strings.Contains(tc.path, "now=") {
				method = http.MethodDelete
			}
			code, e := call(t, srv, method, tc.path, sign(t, jwt.SigningMethodHS256, secret, goodClaims("alice")), tc.body)
			if code != tc.code || e.Field != tc.field || e.Error == "" {
				t.Errorf("got %d %+v, want %d naming %q", code, e, tc.code, tc.field)
			}
		})
	}
	if len(fs.started) != 0 || len(fs.stopped) != 0 {
		t.Errorf("bad input reached the manager: %d starts, %d stops", len(fs.started), len(fs.stopped))
	}
}

func TestPathNamesUnescapedOnce(t *testing.T) {
	srv, fs := newTestServer(t, nil)
	for _, tc := range []struct{ path, user, server string }{
		{"/api/v1/users/user%40example.com/servers/my%20server", "user@example.com", "my server"},
		{"/api/v1/users/a%2541/server", "a%41", ""},
		{"/api/v1/users/%C3%A9mile/servers/x%2Fy", "émile", "x/y"},
	} {
		tok := sign(t, jwt.SigningMethodHS256, secret, goodClaims(tc.user))
		if code, e := call(t, srv, http.MethodPost, tc.path, tok, `{}`); code != http.StatusAccepted {
			t.Fatalf("%s: %d %+v", tc.path, code, e)
		}
		got := fs.started[len(fs.started)-1]
		if got.User != tc.user || got.Server != tc.server {
			t.Errorf("%s: user %q server %q, want %q %q", tc.path, got.User, got.Server, tc.user, tc.server)
		}
	}
}

// TestOpenAPIMatchesRoutes keeps openapi.yaml and the router in step.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	data, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for p, ops := range doc.Paths {
		for m := range ops {
			if m != "parameters" && m != "<<" {
				documented = append(documented, strings.ToUpper(m)+" "+p)
			}
		}
	}
	auth, _ := NewAuthenticator(secret, "", nil)
	e := New(Options{Servers: &fakeServers{}, Auth: auth})
	param := regexp.MustCompile(`:([a-z]+)`)
	var routed []string
	for _, r := range e.Routes() {
		if strings.HasPrefix(r.Method, "echo_") {
			continue // echo's own not-found routes
		}
		if strings.HasPrefix(r.Path, "/api/v1") || strings.HasPrefix(r.Path, "/healthz") || strings.HasPrefix(r.Path, "/readyz") || strings.HasPrefix(r.Path, "/metrics") {
			routed = append(routed, r.Method+" "+param.ReplaceAllString(r.Path, "{$1}"))
		}
	}
	sort.Strings(documented)
	sort.Strings(routed)
	if strings.Join(documented, "\n") != strings.Join(routed, "\n") {
		t.Errorf("openapi.yaml and the routes differ:\ndocumented:\n%s\nrouted:\n%s", strings.Join(documented, "\n"), strings.Join(routed, "\n"))
	}
}

// TestHintsAndStartTimeout: poll and stop pass the hub's saved state on;
// an oversized hint or a negative start_timeout is refused, naming it.
func TestHintsAndStartTimeout(t *testing.T) {
	srv, fs := newTestServer(t, nil)
	tok := func() string { return sign(t, jwt.SigningMethodHS256, secret, goodClaims("alice")) }
	want := lifecycle.Hint{Pod: "nb-alice", Namespace: "course-ns", UID: "u-1"}
	q := "?pod_name=nb-alice&namespace=course-ns&pod_uid=u-1"
	if code, _ := call(t, srv, http.MethodGet, "/api/v1/users/alice/server"+q, tok(), ""); code != http.StatusOK {
		t.Fatalf("poll: %d", code)
	}
	if code, _ := call(t, srv, http.MethodDelete, "/api/v1/users/alice/server"+q+"&now=true", tok(), ""); code != http.StatusNoContent {
		t.Fatalf("stop: %d", code)
	}
	if len(fs.hints) != 2 || fs.hints[0] != want || fs.hints[1] != want {
		t.Fatalf("hints %+v, want %+v twice", fs.hints, want)
	}
	if code, e := call(t, srv, http.MethodGet, "/api/v1/users/alice/server?pod_name="+strings.Repeat("x", 300), tok(), ""); code != http.StatusBadRequest || e.Field != "pod_name" {
		t.Errorf("oversized hint: %d %+v, want 400 naming pod_name", code, e)
	}
	if code, e := call(t, srv, http.MethodPost, "/api/v1/users/alice/server", tok(), `{"start_timeout": -1}`); code != http.StatusBadRequest || e.Field != "start_timeout" {
		t.Errorf("negative start_timeout: %d %+v, want 400 naming start_timeout", code, e)
	}
	if code, _ := call(t, srv, http.MethodPost, "/api/v1/users/alice/server", tok(), `{"start_timeout": 300}`); code != http.StatusAccepted {
		t.Fatalf("start: %d", code)
	}
	if got := fs.started[len(fs.started)-1].StartTimeout; got != 300 {
		t.Errorf("start_timeout reached the manager as %d, want 300", got)
	}
}
