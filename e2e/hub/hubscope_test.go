package hub_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dsmlp/spawner/e2e/harness"
)

// TestHubTokenLeastScope: spawnerd's token at the hub (the demo
// configuration's role, delete:servers only) still lets spawnerd's stop
// reaction remove a server from the hub, and can do nothing else.
func TestHubTokenLeastScope(t *testing.T) {
	s := newStack(t)
	s.start(t, "heidi", "", nil)
	s.hub.EnsureUser("ivan")

	// The hub polls every 600 s here, so only spawnerd's DELETE through the
	// hub API can remove the record this fast.
	if err := harness.Evict(context.Background(), env.Client, s.ns, "jupyter-heidi"); err != nil {
		t.Fatal(err)
	}
	s.hub.WaitGone("heidi", "")
	// spawnerd logs the hub's answer after the hub has acted on it.
	if _, ok := s.api.WaitForLogLine(10*time.Second, "hub told server stopped"); !ok {
		t.Errorf("spawnerd did not log that it told the hub the server stopped")
	}
	if strings.Contains(s.api.Log(), "telling the hub") {
		t.Errorf("spawnerd failed to tell the hub:\n%s", s.api.Log())
	}

	// Everything else is refused.
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodGet, "/users", ""},
		{http.MethodGet, "/users/ivan", ""},
		{http.MethodPost, "/users/mallory", ""},
		{http.MethodPost, "/users/ivan/tokens", `{"note": "stolen"}`},
		{http.MethodPost, "/users/ivan/server", ""},
		{http.MethodPatch, "/users/ivan", `{"admin": true}`},
		{http.MethodGet, "/proxy", ""},
		{http.MethodGet, "/services", ""},
	} {
		req, _ := http.NewRequest(tc.method, s.hub.APIURL+tc.path, bytes.NewBufferString(tc.body))
		req.Header.Set("Authorization", "token "+s.hub.HubToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		// 404 is the hub's answer for a user the token may not see at all.
		if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s with spawnerd's hub token: %d, want 403", tc.method, tc.path, resp.StatusCode)
		}
	}
	if _, ok := s.hub.Servers("ivan")[""]; ok {
		t.Errorf("spawnerd's hub token started ivan's server")
	}
}
