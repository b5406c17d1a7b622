package console

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/reservation"
)

func runningServer(user, server string) *lifecycle.Server {
	created := testNow.Add(-time.Hour)
	return &lifecycle.Server{User: user, Server: server, Status: lifecycle.StatusRunning, Phase: "Running",
		Pod: "jupyter-" + user, Namespace: user, Node: "node-1", Created: &created, UID: "uid-" + user + "-" + server}
}

// adminPage logs an admin in and returns the browser and a page's CSRF token.
func adminPage(t *testing.T, e *env, u hubUser) (*http.Client, string) {
	t.Helper()
	c, resp, body := e.login(u, testPrefix+"status")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	return c, csrfOf(t, body)
}

func TestActionsNeedCSRF(t *testing.T) {
	e := newEnv(t)
	e.servers.set([]*lifecycle.Server{runningServer("alice", "")})
	e.res.classes = []reservation.ClassStatus{{Class: "a5000", Capacity: 4}}
	c, token := adminPage(t, e, adminUser)
	_, otherToken := adminPage(t, e, adminUser) // another session of the same admin
	for name, tc := range map[string]struct {
		path   string
		form   url.Values
		header http.Header
	}{
		"stop without a token":            {"stop", url.Values{"user": {"alice"}}, nil},
		"stop with another session's":     {"stop", url.Values{"user": {"alice"}, "csrf": {otherToken}}, nil},
		"stop with a made-up header":      {"stop", url.Values{"user": {"alice"}}, http.Header{"X-Csrf-Token": {"abc"}}},
		"pause without a token":           {"gpu/pause", url.Values{"class": {"a5000"}, "reason": {"maintenance"}}, nil},
		"resume with a truncated token":   {"gpu/resume", url.Values{"class": {"a5000"}, "csrf": {token[:10]}}, nil},
		"pause with the token in the URL": {"gpu/pause?csrf=" + token, url.Values{"class": {"a5000"}, "reason": {"x"}}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			resp, _ := e.do(noRedirect(c), http.MethodPost, testPrefix+tc.path, tc.form, tc.header)
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("status %d, want 403", resp.StatusCode)
			}
		})
	}
	if _, n := e.hub.lastStop(); n != 0 {
		t.Errorf("the hub got %d stops, want none", n)
	}
	if calls := e.res.calls(); len(calls) != 0 {
		t.Errorf("SetPaused called %v, want never", calls)
	}
}

func TestActionsNeedConsoleRole(t *testing.T) {
	e := newEnv(t)
	c, token := adminPage(t, e, studentUser)
	for _, path := range []string{"stop", "gpu/pause", "gpu/resume"} {
		resp, _ := e.do(noRedirect(c), http.MethodPost, testPrefix+path,
			url.Values{"user": {"bob"}, "class": {"a5000"}, "reason": {"x"}, "csrf": {token}}, nil)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s by a student: status %d, want 403", path, resp.StatusCode)
		}
	}
	if _, n := e.hub.lastStop(); n != 0 {
		t.Error("a student's stop reached the hub")
	}
	// Without any session: 401, never a redirect (a POST cannot resume).
	resp, _ := e.do(noRedirect(e.client()), http.MethodPost, testPrefix+"stop", url.Values{"user": {"bob"}}, nil)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("stop without login: status %d, want 401", resp.StatusCode)
	}
}

func TestStopGoesThroughTheHub(t *testing.T) {
	for name, tc := range map[string]struct {
		user, server string
		wantPath     string
	}{
		"default server":              {"alice", "", "/hub/api/users/alice/server"},
		"named server":                {"alice", "gpu", "/hub/api/users/alice/servers/gpu"},
		"names escaped":               {"a b@x.edu", "my server?", "/hub/api/users/a%20b@x.edu/servers/my%20server%3F"},
		"unicode and percent escaped": {"zoë", "50%", "/hub/api/users/zo%C3%AB/servers/50%25"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.servers.set([]*lifecycle.Server{runningServer(tc.user, tc.server)})
			c, token := adminPage(t, e, adminUser)
			resp, body := e.do(noRedirect(c), http.MethodPost, testPrefix+"stop",
				url.Values{"user": {tc.user}, "server": {tc.server}, "csrf": {token}}, nil)
			if resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("status %d, want 303:\n%s", resp.StatusCode, body)
			}
			stop, n := e.hub.lastStop()
			if n != 1 {
				t.Fatalf("the hub got %d stops, want 1", n)
			}
			if stop.Path != tc.wantPath {
				t.Errorf("DELETE %s, want %s", stop.Path, tc.wantPath)
			}
			if !strings.HasPrefix(stop.Authorization, "token tok-admin-") {
				t.Errorf("Authorization %q: want the admin's own OAuth token", stop.Authorization)
			}
			loc, _ := url.Parse(resp.Header.Get("Location"))
			h := &handler{opts: Options{Prefix: testPrefix}}
			if loc.EscapedPath() != h.serverPath(tc.user, tc.server) || loc.Query().Get("stopped") != "202" {
				t.Errorf("back to %s, want the server's page with the hub's answer", loc)
			}
			resp, body = e.get(c, loc.RequestURI())
			if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Stop requested") {
				t.Errorf("the detail page after the stop: %d, no notice", resp.StatusCode)
			}
		})
	}
}

func TestStopWithTheHeaderToken(t *testing.T) {
	e := newEnv(t)
	e.servers.set([]*lifecycle.Server{runningServer("alice", "")})
	e.hub.stopStatus = http.StatusNoContent
	c, token := adminPage(t, e, taUser)
	resp, body := e.do(c, http.MethodPost, testPrefix+"stop", url.Values{"user": {"alice"}},
		http.Header{"X-Csrf-Token": {token}, "Accept": {"application/json"}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var got map[string]any
	mustJSON(t, body, &got)
	if got["hub_status"] != float64(204) {
		t.Errorf("answer %v, want hub_status 204", got)
	}
	if stop, _ := e.hub.lastStop(); !strings.HasPrefix(stop.Authorization, "token tok-ta-") {
		t.Errorf("Authorization %q: want the console user's token", stop.Authorization)
	}
}

func TestStopShowsTheHubsRefusal(t *testing.T) {
	e := newEnv(t)
	e.servers.set([]*lifecycle.Server{runningServer("alice", "")})
	e.hub.stopStatus = http.StatusForbidden
	c, token := adminPage(t, e, taUser)
	resp, body := e.do(c, http.MethodPost, testPrefix+"stop", url.Values{"user": {"alice"}, "csrf": {token}}, nil)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d, want the hub's 403", resp.StatusCode)
	}
	if !strings.Contains(body, "requires any of [delete:servers]") {
		t.Errorf("the page does not show the hub's message:\n%s", body)
	}
	if !strings.Contains(body, `href="/services/spawnerd/servers/alice"`) {
		t.Error("no link back to the server")
	}
}

func TestPauseAndResume(t *testing.T) {
	e := newEnv(t)
	e.res.classes = []reservation.ClassStatus{{Class: "a5000", DisplayName: "A5000", Capacity: 4}}
	c, token := adminPage(t, e, adminUser)
	post := func(path string, form url.Values) (*http.Response, string) {
		form.Set("csrf", token)
		return e.do(noRedirect(c), http.MethodPost, testPrefix+path, form, nil)
	}
	if resp, body := post("gpu/pause", url.Values{"class": {"a5000"}, "reason": {"  driver upgrade  "}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("pause: %d\n%s", resp.StatusCode, body)
	}
	if resp, _ := post("gpu/resume", url.Values{"class": {"a5000"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("resume: %d", resp.StatusCode)
	}
	want := []pauseCall{{"a5000", true, "driver upgrade"}, {"a5000", false, ""}}
	if diff := cmp.Diff(want, e.res.calls()); diff != "" {
		t.Errorf("SetPaused calls (-want,+got):\n%s", diff)
	}
	for name, tc := range map[string]struct {
		path string
		form url.Values
	}{
		"pause without a reason": {"gpu/pause", url.Values{"class": {"a5000"}, "reason": {" "}}},
		"reason too long":        {"gpu/pause", url.Values{"class": {"a5000"}, "reason": {strings.Repeat("x", maxPauseReason+1)}}},
		"unknown class":          {"gpu/resume", url.Values{"class": {"h100"}}},
	} {
		t.Run(name, func(t *testing.T) {
			if resp, _ := post(tc.path, tc.form); resp.StatusCode != http.StatusBadRequest {
				t.Errorf("status %d, want 400", resp.StatusCode)
			}
		})
	}
	if n := len(e.res.calls()); n != 2 {
		t.Errorf("SetPaused called %d times, want 2", n)
	}
}

func TestPauseWithTheEngineOff(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Reservations = nil })
	c, token := adminPage(t, e, adminUser)
	resp, _ := e.do(c, http.MethodPost, testPrefix+"gpu/pause", url.Values{"class": {"a5000"}, "reason": {"x"}, "csrf": {token}}, nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("status %d, want 404", resp.StatusCode)
	}
	resp, body := e.get(c, testPrefix+"gpu")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="engine-off"`) {
		t.Errorf("GPU page with the engine off: %d, does not say so", resp.StatusCode)
	}
}
