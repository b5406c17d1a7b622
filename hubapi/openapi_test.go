package hubapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	legacyrouter "github.com/getkin/kin-openapi/routers/legacy"
	"github.com/gorilla/websocket"

	"github.com/dsmlp/spawner/apiclient/apiclienttest"
	"github.com/dsmlp/spawner/gpucontroller"
	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/hubapi"
	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/reservation"
	"github.com/dsmlp/spawner/sparkcluster"
	"github.com/dsmlp/spawner/spawner"
)

// loadSpec loads and validates openapi.yaml.
func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromFile("openapi.yaml")
	if err != nil {
		t.Fatalf("loading openapi.yaml: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not valid OpenAPI: %v", err)
	}
	return doc
}

// signer is whom a request is signed for.
type signer struct {
	user  string
	admin bool
}

func as(user string) *signer { return &signer{user: user} }
func admin() *signer         { return &signer{user: "admin", admin: true} }

func token(t *testing.T, f *apiclienttest.Fake, s *signer) string {
	t.Helper()
	tok, err := hubapi.Sign(f.Secret, s.user, s.admin, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// apiCase is one request and the status it must get.
type apiCase struct {
	method, path string  // path escaped, with its query
	as           *signer // nil sends no token
	body         string
	status       int
	// off sends the request to a spawnerd without the session history
	// and the reservation engine.
	off bool
}

// TestOpenAPIDescribesEveryAnswer sends requests to every documented route
// and method of the real handler (over fakes with realistic data) and checks
// each answer against openapi.yaml: a documented status, its content type,
// and a body its closed schema accepts; a well-formed request is checked
// against the spec too. Errors are among them: 400 with a field, 401, 403,
// 404, 409, 413, 500.
func TestOpenAPIDescribesEveryAnswer(t *testing.T) {
	doc := loadSpec(t)
	on := apiclienttest.New(t, apiclienttest.Options{})
	off := apiclienttest.New(t, apiclienttest.Options{NoHistory: true, NoReservations: true})
	router, err := legacyrouter.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	now := on.Now.UTC()
	at := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339) }
	booking := fmt.Sprintf(`{"owner":"alice","workspace":"DSC10","class":"a5000","gpus":2,"start":%q,"end":%q}`, at(time.Hour), at(3*time.Hour))
	erin := "e5f6a7b8-c9d0-4e1f-a2b3-c4d5e6f7a8b9"
	big := `{"env":{"A":"` + strings.Repeat("x", 70<<10) + `"}}`
	const (
		get, post, put, del = http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete
	)
	cases := []apiCase{
		{get, "/healthz", nil, "", 200, false},
		{get, "/readyz", nil, "", 200, false},
		{get, "/metrics", nil, "", 200, false},
		{get, "/api/v1/profiles", as("alice"), "", 200, false},
		{get, "/api/v1/profiles", nil, "", 401, false},

		{post, "/api/v1/users/alice/server", as("alice"), `{"env":{"JUPYTERHUB_USER":"alice"},"user_options":{"profile":"cpu"},"api_token":"t","user_id":7,"hub_version":"3.0.0","start_timeout":300,"state":{"pvc_name":"claim-alice"},"requested_by":{"kind":"user","name":"alice"}}`, 200, false},
		{post, "/api/v1/users/erin/server", as("erin"), `{}`, 202, false},
		{post, "/api/v1/users/bob/servers/gpu%20work", admin(), `{"requested_by":{"kind":"admin","name":"instructor"}}`, 202, false},
		{post, "/api/v1/users/alice/server", as("alice"), `{"user_options":{"profile":"nope"}}`, 400, false},
		{post, "/api/v1/users/alice/server", as("alice"), `{"requested_by":{"kind":"user"}}`, 400, false},
		{post, "/api/v1/users/alice/server", as("alice"), `{"colour":"red"}`, 400, false},
		{post, "/api/v1/users/alice/server", nil, `{}`, 401, false},
		{post, "/api/v1/users/alice/server", as("bob"), `{}`, 403, false},
		{post, "/api/v1/users/alice/server", as("alice"), `{"user_options":{"profile":"huge"}}`, 403, false},
		{post, "/api/v1/users/conflict/server", as("conflict"), `{}`, 409, false},
		{post, "/api/v1/users/alice/server", as("alice"), big, 413, false},
		{post, "/api/v1/users/boom/servers/x", as("boom"), `{}`, 500, false},

		{get, "/api/v1/users/alice/server?pod_name=jupyter-alice&namespace=jhub&pod_uid=6f1c2a9e-5b7d-4c1e-9a55-3d2f0c1b7a11", as("alice"), "", 200, false},
		{get, "/api/v1/users/carol/server", as("carol"), "", 200, false},
		{get, "/api/v1/users/dave/server", as("dave"), "", 200, false},
		{get, "/api/v1/users/bob/servers/gpu%20work", as("bob"), "", 200, false},
		{get, "/api/v1/users/nobody/servers/x", as("nobody"), "", 200, false},
		{get, "/api/v1/users/alice/server?pod_name=" + strings.Repeat("x", 300), as("alice"), "", 400, false},
		{get, "/api/v1/users/alice/server", nil, "", 401, false},
		{get, "/api/v1/users/alice/servers/x", as("bob"), "", 403, false},

		{post, "/api/v1/polls", admin(), `{"servers":[{"user":"alice","pod_name":"jupyter-alice","namespace":"jhub","pod_uid":"6f1c2a9e-5b7d-4c1e-9a55-3d2f0c1b7a11"},{"user":"bob","server":"gpu work"},{"user":"carol"},{"user":"nobody","server":"x"}]}`, 200, false},
		{post, "/api/v1/polls", as("alice"), `{"servers":[{"user":"alice"}]}`, 200, false},
		{post, "/api/v1/polls", admin(), `{"servers":[{"server":"x"}]}`, 400, false},
		{post, "/api/v1/polls", nil, `{"servers":[]}`, 401, false},
		{post, "/api/v1/polls", as("alice"), `{"servers":[{"user":"bob"}]}`, 403, false},
		{post, "/api/v1/polls", admin(), `{"servers":[{"user":"` + strings.Repeat("x", 1<<20) + `"}]}`, 413, false},

		{del, "/api/v1/users/henry/server?now=true&wait=1s&by=admin&by_name=root&pod_name=jupyter-henry", admin(), "", 204, false},
		{del, "/api/v1/users/bob/servers/gpu%20work?by=culler&by_name=jupyterhub-idle-culler", as("bob"), "", 202, false},
		{del, "/api/v1/users/henry/server?by=robot", as("henry"), "", 400, false},
		{del, "/api/v1/users/henry/servers/x?now=perhaps", as("henry"), "", 400, false},
		{del, "/api/v1/users/henry/server", nil, "", 401, false},
		{del, "/api/v1/users/henry/servers/x", as("bob"), "", 403, false},
		{del, "/api/v1/users/boom/server", as("boom"), "", 500, false},

		{del, "/api/v1/users/henry/server/storage?pvc_name=claim-henry&namespace=jhub&user_id=7", as("henry"), "", 200, false},
		{del, "/api/v1/users/henry/servers/project/storage", as("henry"), "", 200, false},
		{del, "/api/v1/users/henry/server/storage?colour=red", as("henry"), "", 400, false},
		{del, "/api/v1/users/henry/servers/x/storage", nil, "", 401, false},
		{del, "/api/v1/users/henry/server/storage", as("bob"), "", 403, false},
		{del, "/api/v1/users/alice/server/storage", as("alice"), "", 409, false},

		{get, "/api/v1/users/alice/server/progress", as("alice"), "", 400, false},
		{get, "/api/v1/users/alice/servers/x/progress", nil, "", 401, false},
		{get, "/api/v1/users/alice/server/progress", as("bob"), "", 403, false},

		{get, "/api/v1/servers", admin(), "", 200, false},
		{get, "/api/v1/servers", nil, "", 401, false},
		{get, "/api/v1/servers", as("alice"), "", 403, false},
		{get, "/api/v1/servers/alice", admin(), "", 200, false},
		{get, "/api/v1/servers/carol", admin(), "", 200, false},
		{get, "/api/v1/servers/nobody", admin(), "", 404, false},
		{get, "/api/v1/servers/alice", nil, "", 401, false},
		{get, "/api/v1/servers/alice", as("alice"), "", 403, false},
		{get, "/api/v1/servers/bob/gpu%20work", admin(), "", 200, false},
		{get, "/api/v1/servers/alice/x", admin(), "", 404, false},
		{get, "/api/v1/servers/bob/gpu%20work", nil, "", 401, false},
		{get, "/api/v1/servers/bob/gpu%20work", as("bob"), "", 403, false},

		{get, "/api/v1/sessions", admin(), "", 200, false},
		{get, "/api/v1/sessions?user=erin&server=&course=DSC10&class=a5000&reason=culler&since=48h&until=" + at(time.Hour) + "&state=ended&limit=5", admin(), "", 200, false},
		{get, "/api/v1/sessions?state=running&cursor=1&limit=2", admin(), "", 200, false},
		{get, "/api/v1/sessions?limit=0", admin(), "", 400, false},
		{get, "/api/v1/sessions?colour=red", admin(), "", 400, false},
		{get, "/api/v1/sessions?cursor=not-ours", admin(), "", 400, false},
		{get, "/api/v1/sessions", nil, "", 401, false},
		{get, "/api/v1/sessions", as("alice"), "", 403, false},
		{get, "/api/v1/sessions", admin(), "", 404, true},
		{get, "/api/v1/sessions/" + erin, admin(), "", 200, false},
		{get, "/api/v1/sessions/6f1c2a9e-5b7d-4c1e-9a55-3d2f0c1b7a11", admin(), "", 200, false},
		{get, "/api/v1/sessions/nope", admin(), "", 404, false},
		{get, "/api/v1/sessions/" + erin, nil, "", 401, false},
		{get, "/api/v1/sessions/" + erin, as("erin"), "", 403, false},

		{get, "/api/v1/why/carol", as("carol"), "", 200, false},
		{get, "/api/v1/why/alice", admin(), "", 200, false},
		{get, "/api/v1/why/nobody", admin(), "", 404, false},
		{get, "/api/v1/why/carol", admin(), "", 404, true},
		{get, "/api/v1/why/carol", nil, "", 401, false},
		{get, "/api/v1/why/carol", as("bob"), "", 403, false},
		{get, "/api/v1/why/grace/big%20data", as("grace"), "", 200, false},
		{get, "/api/v1/why/grace/other", admin(), "", 404, false},
		{get, "/api/v1/why/grace/big%20data", nil, "", 401, false},
		{get, "/api/v1/why/grace/big%20data", as("bob"), "", 403, false},

		{get, "/api/v1/reservations", admin(), "", 200, false},
		{get, "/api/v1/reservations?kind=booking&state=active&owner=bob&class=a5000&workspace=DSC10", admin(), "", 200, false},
		{get, "/api/v1/reservations?kind=lease", admin(), "", 400, false},
		{get, "/api/v1/reservations", nil, "", 401, false},
		{get, "/api/v1/reservations", as("alice"), "", 403, false},
		{get, "/api/v1/reservations", admin(), "", 404, true},
		{post, "/api/v1/reservations", admin(), booking, 201, false},
		{post, "/api/v1/reservations", admin(), `{"owner":"alice"}`, 400, false},
		{post, "/api/v1/reservations", nil, booking, 401, false},
		{post, "/api/v1/reservations", as("alice"), booking, 403, false},
		{post, "/api/v1/reservations", admin(), booking, 404, true},
		{post, "/api/v1/reservations", admin(), `{"owner":"` + strings.Repeat("x", 70<<10) + `"}`, 413, false},
		{get, "/api/v1/reservations/8", admin(), "", 200, false},
		{get, "/api/v1/reservations/res-5", admin(), "", 200, false},
		{get, "/api/v1/reservations/twelve", admin(), "", 400, false},
		{get, "/api/v1/reservations/99", admin(), "", 404, false},
		{get, "/api/v1/reservations/8", nil, "", 401, false},
		{get, "/api/v1/reservations/8", as("alice"), "", 403, false},
		{post, "/api/v1/reservations/8/reassign", admin(), `{"owner":"carol"}`, 200, false},
		{post, "/api/v1/reservations/8/reassign", admin(), `{"owner":"Not A Namespace"}`, 400, false},
		{post, "/api/v1/reservations/5/reassign", admin(), `{"owner":"carol"}`, 409, false},
		{post, "/api/v1/reservations/99/reassign", admin(), `{"owner":"carol"}`, 404, false},
		{post, "/api/v1/reservations/8/reassign", admin(), `{"owner":"` + strings.Repeat("x", 70<<10) + `"}`, 413, false},
		{post, "/api/v1/reservations/8/reassign", nil, `{"owner":"carol"}`, 401, false},
		{post, "/api/v1/reservations/8/reassign", as("carol"), `{"owner":"carol"}`, 403, false},
		{del, "/api/v1/reservations/8?reason=user", admin(), "", 204, false},
		{del, "/api/v1/reservations/8", admin(), "", 409, false},
		{del, "/api/v1/reservations/8?reason=whim", admin(), "", 400, false},
		{del, "/api/v1/reservations/99", admin(), "", 404, false},
		{del, "/api/v1/reservations/7", nil, "", 401, false},
		{del, "/api/v1/reservations/7", as("bob"), "", 403, false},

		{get, "/api/v1/gpu-classes?hours=3", admin(), "", 200, false},
		{get, "/api/v1/gpu-classes?hours=0", admin(), "", 400, false},
		{get, "/api/v1/gpu-classes", nil, "", 401, false},
		{get, "/api/v1/gpu-classes", as("alice"), "", 403, false},
		{get, "/api/v1/gpu-classes", admin(), "", 404, true},
		{put, "/api/v1/gpu-classes/a5000/pause", admin(), `{"reason":"driver upgrade"}`, 204, false},
		{put, "/api/v1/gpu-classes/a100/pause", admin(), "", 204, false},
		{put, "/api/v1/gpu-classes/a5000/pause", admin(), `{"reason":"` + strings.Repeat("x", 201) + `"}`, 400, false},
		{put, "/api/v1/gpu-classes/a5000/pause", admin(), `{"reason":"` + strings.Repeat("x", 70<<10) + `"}`, 413, false},
		{put, "/api/v1/gpu-classes/tpu/pause", admin(), `{}`, 404, false},
		{put, "/api/v1/gpu-classes/a5000/pause", nil, `{}`, 401, false},
		{put, "/api/v1/gpu-classes/a5000/pause", as("alice"), `{}`, 403, false},
		{get, "/api/v1/gpu-classes", admin(), "", 200, false}, // with a paused class
		{del, "/api/v1/gpu-classes/a5000/pause", admin(), "", 204, false},
		{del, "/api/v1/gpu-classes/tpu/pause", admin(), "", 404, false},
		{del, "/api/v1/gpu-classes/a5000/pause", nil, "", 401, false},
		{del, "/api/v1/gpu-classes/a5000/pause", as("alice"), "", 403, false},

		{get, "/api/v1/charges", admin(), "", 200, false},
		{get, "/api/v1/charges?since=" + at(-720*time.Hour) + "&until=" + at(0), admin(), "", 200, false},
		{get, "/api/v1/charges?since=yesterday", admin(), "", 400, false},
		{get, "/api/v1/charges", nil, "", 401, false},
		{get, "/api/v1/charges", as("alice"), "", 403, false},
		{get, "/api/v1/charges", admin(), "", 404, true},
		{get, "/api/v1/preemption-risk?hours=6", admin(), "", 200, false},
		{get, "/api/v1/preemption-risk?hours=-1", admin(), "", 400, false},
		{get, "/api/v1/preemption-risk", nil, "", 401, false},
		{get, "/api/v1/preemption-risk", as("alice"), "", 403, false},
		{get, "/api/v1/preemption-risk", admin(), "", 404, true},
	}

	covered := map[string][]int{} // "METHOD template" → statuses seen
	for _, tc := range cases {
		f := on
		if tc.off {
			f = off
		}
		route, status := checkAnswer(t, router, f, tc)
		if route != nil {
			key := route.Method + " " + route.Path
			covered[key] = append(covered[key], status)
		}
	}
	for _, key := range checkProgressStreams(t, doc, router, on) {
		covered[key] = append(covered[key], http.StatusSwitchingProtocols)
	}

	// Every documented operation was exercised, and the error statuses the
	// API promises everywhere were seen.
	var missing []string
	seen := map[int]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			key := method + " " + path
			if len(covered[key]) == 0 {
				missing = append(missing, key)
			}
			for _, s := range covered[key] {
				seen[s] = true
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("documented but never exercised:\n%s", strings.Join(missing, "\n"))
	}
	for _, s := range []int{101, 200, 201, 202, 204, 400, 401, 403, 404, 409, 413, 500} {
		if !seen[s] {
			t.Errorf("no answer with status %d was checked", s)
		}
	}
}

// checkAnswer sends one request and checks the answer against the spec.
func checkAnswer(t *testing.T, router routers.Router, f *apiclienttest.Fake, tc apiCase) (*routers.Route, int) {
	t.Helper()
	name := fmt.Sprintf("%s %s", tc.method, tc.path)
	if len(name) > 120 {
		name = name[:120] + "…"
	}
	newRequest := func() *http.Request {
		var body io.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
		}
		req, err := http.NewRequest(tc.method, f.URL+tc.path, body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if tc.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if tc.as != nil {
			req.Header.Set("Authorization", "Bearer "+token(t, f, tc.as))
		}
		return req
	}
	// The spec's servers are where the demo listens: look routes up there.
	lookup := newRequest()
	lookup.URL.Scheme, lookup.URL.Host = "http", "127.0.0.1:8090"
	route, params, err := router.FindRoute(lookup)
	if err != nil {
		t.Errorf("%s: not in openapi.yaml: %v", name, err)
		return nil, 0
	}
	resp, err := http.DefaultClient.Do(newRequest())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if resp.StatusCode != tc.status {
		t.Errorf("%s: status %d, want %d: %s", name, resp.StatusCode, tc.status, body)
		return route, resp.StatusCode
	}
	in := &openapi3filter.RequestValidationInput{Request: lookup, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}}
	// A request the API accepts must be one the spec describes, each of
	// its query parameters too (the validator skips undocumented ones).
	if resp.StatusCode < 300 {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			t.Errorf("%s: the request the API accepted does not match openapi.yaml: %v", name, err)
		}
		for q := range lookup.URL.Query() {
			if route.Operation.Parameters.GetByInAndName(openapi3.ParameterInQuery, q) == nil &&
				route.PathItem.Parameters.GetByInAndName(openapi3.ParameterInQuery, q) == nil {
				t.Errorf("%s: query parameter %s is not in openapi.yaml", name, q)
			}
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body: io.NopCloser(bytes.NewReader(body)), Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("%s: the answer (%d %s) does not match openapi.yaml: %v\n%s", name, resp.StatusCode, resp.Header.Get("Content-Type"), err, body)
	}
	// An answer documented without content must have none.
	if r := route.Operation.Responses.Status(resp.StatusCode); r != nil && r.Value != nil && len(r.Value.Content) == 0 && len(body) > 0 {
		t.Errorf("%s: %d is documented without a body, got %q", name, resp.StatusCode, body)
	}
	return route, resp.StatusCode
}

// checkProgressStreams opens the progress WebSockets and checks every
// message against ProgressEvent; it returns the operations it exercised.
func checkProgressStreams(t *testing.T, doc *openapi3.T, router routers.Router, f *apiclienttest.Fake) []string {
	t.Helper()
	schema := doc.Components.Schemas["ProgressEvent"].Value
	var keys []string
	for _, tc := range []struct {
		user, path string
		want       func([]map[string]any) bool
	}{
		{"alice", "/api/v1/users/alice/server/progress", func(evs []map[string]any) bool { return len(evs) == 4 && evs[3]["ready"] == true }},
		{"alice", "/api/v1/users/alice/servers/x/progress", func(evs []map[string]any) bool { return len(evs) == 1 && evs[0]["failed"] == true }},
	} {
		lookup, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:8090"+tc.path, nil)
		route, _, err := router.FindRoute(lookup)
		if err != nil {
			t.Errorf("%s: not in openapi.yaml: %v", tc.path, err)
			continue
		}
		if route.Operation.Responses.Status(http.StatusSwitchingProtocols) == nil {
			t.Errorf("%s: 101 is not documented", tc.path)
		}
		h := http.Header{"Authorization": {"Bearer " + token(t, f, as(tc.user))}}
		ws, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(f.URL, "http")+tc.path, h)
		if err != nil {
			t.Errorf("%s: %v", tc.path, err)
			continue
		}
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Errorf("%s: status %d", tc.path, resp.StatusCode)
		}
		var evs []map[string]any
		for {
			_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, msg, err := ws.ReadMessage()
			if err != nil {
				if !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
					t.Errorf("%s: the stream did not end with a normal closure: %v", tc.path, err)
				}
				break
			}
			var v map[string]any
			if err := json.Unmarshal(msg, &v); err != nil {
				t.Errorf("%s: message %q is not JSON: %v", tc.path, msg, err)
				continue
			}
			if err := schema.VisitJSON(v, openapi3.VisitAsResponse()); err != nil {
				t.Errorf("%s: message %s does not match ProgressEvent: %v", tc.path, msg, err)
			}
			evs = append(evs, v)
		}
		ws.Close()
		if !tc.want(evs) {
			t.Errorf("%s: events %v", tc.path, evs)
		}
		keys = append(keys, route.Method+" "+route.Path)
	}
	return keys
}

// TestOpenAPISchemasMatchGoTypes: each closed schema has exactly the JSON
// fields of its Go type, and an answer's schema requires exactly those
// the Go type always writes (no omitempty), so a field added to Go and not
// to openapi.yaml, or the reverse, fails here even when no answer in the
// test above happens to carry it.
func TestOpenAPISchemasMatchGoTypes(t *testing.T) {
	doc := loadSpec(t)
	schema := func(path string) *openapi3.Schema {
		t.Helper()
		parts := strings.Split(path, ".")
		ref := doc.Components.Schemas[parts[0]]
		if ref == nil {
			t.Fatalf("no schema %s", parts[0])
		}
		s := ref.Value
		for _, p := range parts[1:] {
			switch p {
			case "items":
				s = s.Items.Value
			case "additionalProperties":
				s = s.AdditionalProperties.Schema.Value
			default:
				prop := s.Properties[p]
				if prop == nil {
					t.Fatalf("%s: no property %s", path, p)
				}
				s = prop.Value
			}
		}
		return s
	}
	for _, tc := range []struct {
		schema string
		value  any
		answer bool // written by the API: required must match too
	}{
		{"Error", hubapi.ErrorBody{}, true},
		{"Actor", history.Actor{}, true},
		{"StartRequest", hubapi.StartRequest{}, false},
		{"StartRequest.state", hubapi.StartState{}, false},
		{"Server", lifecycle.Server{}, true},
		{"StopReason", lifecycle.StopReason{}, true},
		{"EventSummary", lifecycle.EventSummary{}, true},
		{"ServerList", hubapi.ServerList{}, true},
		{"SparkStatus", sparkcluster.Status{}, true},
		{"SparkStatus.pods.items", sparkcluster.Pod{}, true},
		{"SparkStatus.replaced.items", sparkcluster.PodStop{}, true},
		{"StorageDeletion", lifecycle.StorageDeletion{}, true},
		{"ProgressEvent", lifecycle.Event{}, true},
		{"ProfileList", hubapi.ProfilesResponse{}, true},
		{"Profile", spawner.Profile{}, true},
		{"ProfileOption", spawner.ProfileOption{}, true},
		{"ProfileOption.choices.additionalProperties", spawner.Choice{}, true},
		{"ProfileOption.unlisted_choice", spawner.UnlistedChoice{}, true},
		{"EndFacts", history.EndFacts{}, true},
		{"Session", history.Session{}, true},
		{"SessionEvent", history.Event{}, true},
		{"SessionPage", history.SessionPage{}, true},
		{"SessionDetail", hubapi.SessionDetail{}, true},
		{"WhyAnswer", hubapi.WhyAnswer{}, true},
		{"BookingRequest", hubapi.BookingRequest{}, false},
		{"ReassignRequest", hubapi.ReassignRequest{}, false},
		{"PauseRequest", hubapi.PauseRequest{}, false},
		{"Reservation", reservation.Reservation{}, true},
		{"ReservationList", hubapi.ReservationList{}, true},
		{"RiskPoint", reservation.RiskPoint{}, true},
		{"ClassStatus", reservation.ClassStatus{}, true},
		{"ClassList", hubapi.ClassList{}, true},
		{"Charge", gpucontroller.Charge{}, true},
		{"ChargeList", hubapi.ChargeList{}, true},
		{"ClassRisk", hubapi.ClassRisk{}, true},
		{"RiskList", hubapi.RiskList{}, true},
	} {
		s := schema(tc.schema)
		fields, always := jsonFields(reflect.TypeOf(tc.value))
		var props []string
		for p := range s.Properties {
			props = append(props, p)
		}
		sort.Strings(props)
		if !slices.Equal(fields, props) {
			t.Errorf("%s: openapi.yaml has properties %v, the Go type %T writes %v", tc.schema, props, tc.value, fields)
		}
		if s.AdditionalProperties.Has == nil || *s.AdditionalProperties.Has {
			t.Errorf("%s: the Go type %T is closed; set additionalProperties: false", tc.schema, tc.value)
		}
		required := slices.Sorted(slices.Values(s.Required))
		if tc.answer && !slices.Equal(always, required) {
			t.Errorf("%s: openapi.yaml requires %v, the Go type %T always writes %v", tc.schema, required, tc.value, always)
		}
	}
}

// jsonFields returns the sorted JSON names encoding/json writes for a
// struct type, and those it writes always (without omitempty/omitzero).
func jsonFields(typ reflect.Type) (all, always []string) {
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			a, w := jsonFields(f.Type)
			all, always = append(all, a...), append(always, w...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		all = append(all, name)
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
			always = append(always, name)
		}
	}
	sort.Strings(all)
	sort.Strings(always)
	return all, always
}
