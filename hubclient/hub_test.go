package hubclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

const testToken = "s3cret-token"

// fastRetry keeps retry tests quick: 3 attempts, 1 ms apart.
var fastRetry = wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 3}

// request is what a fake server saw.
type request struct {
	method, escapedPath, auth string
	user, server              string // decoded path values
}

// fakeHub answers DELETE server requests with the given statuses in turn
// (the last one repeats) and records the requests.
type fakeHub struct {
	mu       sync.Mutex
	requests []request
	statuses []int
	body     string
}

func (f *fakeHub) handler() http.Handler {
	mux := http.NewServeMux()
	record := func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, request{
			method: r.Method, escapedPath: r.URL.EscapedPath(), auth: r.Header.Get("Authorization"),
			user: r.PathValue("user"), server: r.PathValue("server"),
		})
		code := f.statuses[min(len(f.requests)-1, len(f.statuses)-1)]
		body := f.body
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
	mux.HandleFunc("DELETE /hub/api/users/{user}/server", record)
	mux.HandleFunc("DELETE /hub/api/users/{user}/servers/{server}", record)
	return mux
}

func (f *fakeHub) seen() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.requests...)
}

func startFakeHub(t *testing.T, body string, statuses ...int) (*fakeHub, *Hub) {
	t.Helper()
	f := &fakeHub{statuses: statuses, body: body}
	srv := httptest.NewServer(f.handler())
	t.Cleanup(srv.Close)
	h := NewHub(srv.URL+"/hub/api/", testToken, srv.Client())
	h.Retry = fastRetry
	return f, h
}

func TestHubStopServer(t *testing.T) {
	cases := map[string]struct {
		user, server string
		statuses     []int
		body         string
		wantPath     string
		wantErr      func(error) bool
		wantRequests int
	}{
		"default server, 204": {
			user: "alice", statuses: []int{204},
			wantPath: "/hub/api/users/alice/server", wantRequests: 1,
		},
		"named server, 202 (slow stop)": {
			user: "alice", server: "gpu", statuses: []int{202},
			wantPath: "/hub/api/users/alice/servers/gpu", wantRequests: 1,
		},
		"awkward names are quoted as the hub does": {
			user: "Al ice@x.org/+ü~", server: "my srv#1?", statuses: []int{204},
			wantPath:     "/hub/api/users/Al%20ice@x.org%2F%2B%C3%BC~/servers/my%20srv%231%3F",
			wantRequests: 1,
		},
		"404: the hub no longer knows the server": {
			user: "bob", statuses: []int{404}, body: `{"status": 404, "message": "bob has no server named 'x'"}`,
			wantPath: "/hub/api/users/bob/server", wantRequests: 1,
		},
		"400 pending spawn is a PendingError": {
			user: "carol", server: "s", statuses: []int{400},
			body:     `{"status": 400, "message": "carol:s is pending spawn, please wait"}`,
			wantPath: "/hub/api/users/carol/servers/s", wantRequests: 1,
			wantErr: func(err error) bool {
				var pe *PendingError
				return errors.As(err, &pe) && pe.User == "carol" && pe.Server == "s" && pe.Message == "carol:s is pending spawn, please wait"
			},
		},
		"other 400 is a StatusError": {
			user: "dan", server: "s", statuses: []int{400},
			body:     `{"status": 400, "message": "Named servers are not enabled."}`,
			wantPath: "/hub/api/users/dan/servers/s", wantRequests: 1,
			wantErr: func(err error) bool {
				var se *StatusError
				var pe *PendingError
				return errors.As(err, &se) && se.Code == 400 && !errors.As(err, &pe) && !errors.Is(err, ErrUnavailable)
			},
		},
		"403 is not retried": {
			user: "erin", statuses: []int{403}, body: `{"status": 403, "message": "Action is not authorized"}`,
			wantPath: "/hub/api/users/erin/server", wantRequests: 1,
			wantErr: func(err error) bool {
				var se *StatusError
				return errors.As(err, &se) && se.Code == 403 && se.Message == "Action is not authorized"
			},
		},
		"5xx is retried until it succeeds": {
			user: "frank", statuses: []int{503, 500, 204},
			wantPath: "/hub/api/users/frank/server", wantRequests: 3,
		},
		"5xx through all retries is unavailable": {
			user: "gina", statuses: []int{502},
			wantPath: "/hub/api/users/gina/server", wantRequests: 3,
			wantErr: func(err error) bool {
				var se *StatusError
				return errors.Is(err, ErrUnavailable) && errors.As(err, &se) && se.Code == 502
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f, h := startFakeHub(t, tc.body, tc.statuses...)
			err := h.StopServer(context.Background(), tc.user, tc.server)
			if tc.wantErr == nil && err != nil {
				t.Fatalf("StopServer: %v", err)
			}
			if tc.wantErr != nil && !tc.wantErr(err) {
				t.Fatalf("StopServer error = %v (%T), not the expected kind", err, err)
			}
			reqs := f.seen()
			if len(reqs) != tc.wantRequests {
				t.Fatalf("requests = %d, want %d", len(reqs), tc.wantRequests)
			}
			for _, r := range reqs {
				if r.method != http.MethodDelete || r.escapedPath != tc.wantPath {
					t.Errorf("request %s %s, want DELETE %s", r.method, r.escapedPath, tc.wantPath)
				}
				if r.auth != "token "+testToken {
					t.Errorf("Authorization = %q", r.auth)
				}
				if r.user != tc.user || r.server != tc.server {
					t.Errorf("hub decoded user, server = %q, %q; want %q, %q", r.user, r.server, tc.user, tc.server)
				}
			}
		})
	}
}

func TestHubStopServerUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	h := NewHub(url+"/hub/api", testToken, nil)
	h.Retry = fastRetry
	err := h.StopServer(context.Background(), "alice", "")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("error = %v, want ErrUnavailable", err)
	}
}

func TestHubStopServerContextCancelledDuringBackoff(t *testing.T) {
	_, h := startFakeHub(t, "", 503)
	h.Retry = wait.Backoff{Duration: time.Hour, Factor: 1, Steps: 5}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := h.StopServer(ctx, "alice", "")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want the context's", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("StopServer waited out its backoff despite the cancelled context")
	}
}

func TestHubStopServerNeedsUser(t *testing.T) {
	f, h := startFakeHub(t, "", 204)
	if err := h.StopServer(context.Background(), "", "x"); err == nil {
		t.Error("empty user accepted")
	}
	if n := len(f.seen()); n != 0 {
		t.Errorf("%d requests sent for an empty user", n)
	}
}

func TestHubQuote(t *testing.T) {
	// Expected values are Python's urllib.parse.quote(s, safe="@~").
	cases := map[string]string{
		"alice":          "alice",
		"a.b-c_d~e@f":    "a.b-c_d~e@f",
		"al ice":         "al%20ice",
		"a/b":            "a%2Fb",
		"a+b=c&d":        "a%2Bb%3Dc%26d",
		"ü":              "%C3%BC",
		"%":              "%25",
		"x:y;z,":         "x%3Ay%3Bz%2C",
		"":               "",
		"Some Name!'()*": "Some%20Name%21%27%28%29%2A",
	}
	for in, want := range cases {
		if got := hubQuote(in); got != want {
			t.Errorf("hubQuote(%q) = %q, want %q", in, got, want)
		}
	}
}
