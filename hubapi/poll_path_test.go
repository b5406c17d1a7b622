package hubapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The fast path takes exactly the plain polls with a token the read cache
// holds; it leaves every other request to echo, having written nothing.
func TestPollPathServesOnlyPlainPolls(t *testing.T) {
	auth, err := NewAuthenticator(secret, "jupyterhub", nil)
	if err != nil {
		t.Fatal(err)
	}
	p := newPollPath(Options{Servers: &fakeServers{}, Auth: auth}, newRequestMetrics(prometheus.NewRegistry()))
	sign := func(user string) string {
		tok, err := Sign(secret, user, false, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	alice, unseen := sign("alice"), sign("alice")
	claims, err := auth.Verify(alice) // as middleware does at a token's first read
	if err != nil {
		t.Fatal(err)
	}
	auth.reads.put(alice, claims, claims.ExpiresAt.Add(leeway), time.Now())
	long := strings.Repeat("x", maxHintLen+1)
	for target, want := range map[string]bool{
		"/api/v1/users/alice/server":                                  true,
		"/api/v1/users/alice/servers/gpu":                             true,
		"/api/v1/users/alice/server?pod_name=p&namespace=n&pod_uid=u": true,
		"/api/v1/users/alice/server?pod_uid=u":                        true,
		"/api/v1/users/a%20b/server":                                  false, // another user: refused by echo
		"/api/v1/users/alice/servers/a%2Fb":                           false, // raw path
		"/api/v1/users/alice/server?pretty":                           false,
		"/api/v1/users/alice/server?pod_name=a%20b":                   false,
		"/api/v1/users/alice/server?pod_name=" + long:                 false,
		"/api/v1/users/alice/server?pod_name=a&pod_name=b":            false,
		"/api/v1/users/alice/server?pod_name=a;b":                     false,
		"/api/v1/users/alice/server?x=1":                              false,
		"/api/v1/users/alice/server?pod_name=":                        false,
		"/api/v1/users/alice/server/progress":                         false,
		"/api/v1/users/alice/servers/":                                false,
		"/api/v1/users/alice/servers/a/b":                             false,
		"/api/v1/users//server":                                       false,
		"/api/v1/users/alice":                                         false,
		"/api/v1/profiles":                                            false,
	} {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		r.Header.Set("Authorization", "Bearer "+alice)
		w := httptest.NewRecorder()
		if got := p.serve(w, r); got != want {
			t.Errorf("GET %s: served %v, want %v", target, got, want)
		}
		if !want && (w.Body.Len() > 0 || len(w.Header()) > 0) {
			t.Errorf("GET %s: wrote %v %q before leaving it to echo", target, w.Header(), w.Body.String())
		}
	}
	for name, r := range map[string]*http.Request{
		"a token not yet verified": withAuth(httptest.NewRequest(http.MethodGet, "/api/v1/users/alice/server", nil), "Bearer "+unseen),
		"no token":                 httptest.NewRequest(http.MethodGet, "/api/v1/users/alice/server", nil),
		"another scheme":           withAuth(httptest.NewRequest(http.MethodGet, "/api/v1/users/alice/server", nil), "Basic "+alice),
		"a DELETE":                 withAuth(httptest.NewRequest(http.MethodDelete, "/api/v1/users/alice/server", nil), "Bearer "+alice),
		"a body":                   withAuth(httptest.NewRequest(http.MethodGet, "/api/v1/users/alice/server", strings.NewReader("{}")), "Bearer "+alice),
	} {
		if p.serve(httptest.NewRecorder(), r) {
			t.Errorf("%s: served by the fast path", name)
		}
	}
}

func withAuth(r *http.Request, v string) *http.Request {
	r.Header.Set("Authorization", v)
	return r
}
