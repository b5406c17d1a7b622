package console

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLoginRedirectsToHubAuthorize(t *testing.T) {
	e := newEnv(t)
	c := noRedirect(e.client())
	resp, _ := e.get(c, testPrefix+"sessions?user=bob")
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("status %d, want 302", resp.StatusCode)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	if loc.Path != "/hub/api/oauth2/authorize" || loc.Host != "" {
		t.Errorf("redirect to %s, want the hub's browser-relative authorize endpoint", loc)
	}
	q := loc.Query()
	want := url.Values{"client_id": {"service-spawnerd"}, "redirect_uri": {"/services/spawnerd/oauth_callback"}, "response_type": {"code"}}
	for k, v := range want {
		if diff := cmp.Diff(v, q[k]); diff != "" {
			t.Errorf("authorize %s (-want,+got):\n%s", k, diff)
		}
	}
	nonce, next, ok := strings.Cut(q.Get("state"), ".")
	if !ok || len(nonce) < 24 {
		t.Fatalf("state %q: want a random nonce and the destination", q.Get("state"))
	}
	if dest, _ := base64.RawURLEncoding.DecodeString(next); string(dest) != testPrefix+"sessions?user=bob" {
		t.Errorf("state carries %q, want the page asked for", dest)
	}
	var state *http.Cookie
	for _, ck := range resp.Cookies() {
		if strings.HasPrefix(ck.Name, stateCookiePrefix) {
			state = ck
		}
	}
	if state == nil {
		t.Fatal("no state cookie")
	}
	if !state.HttpOnly || state.Path != testPrefix || state.SameSite != http.SameSiteLaxMode || state.MaxAge <= 0 || state.MaxAge > 600 {
		t.Errorf("state cookie %+v: want HttpOnly, SameSite=Lax, Path=%s, short-lived", state, testPrefix)
	}
}

func TestLoginFlow(t *testing.T) {
	for name, tc := range map[string]struct {
		user        hubUser
		wantConsole bool
	}{
		"admin is admitted to the console":     {adminUser, true},
		"console scope admits a non-admin":     {taUser, true},
		"student gets the status page only":    {studentUser, false},
		"admin flag alone suffices, no scopes": {hubUser{Kind: "user", Name: "root", Admin: true}, true},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			c, resp, body := e.login(tc.user, testPrefix)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("after login: status %d:\n%s", resp.StatusCode, body)
			}
			wantLanding := testPrefix
			if !tc.wantConsole {
				wantLanding = testPrefix + "status"
			}
			if resp.Request.URL.Path != wantLanding {
				t.Errorf("landed on %s, want %s", resp.Request.URL.Path, wantLanding)
			}
			form := e.hub.tokenForms[0]
			if form.Get("client_secret") != testSecret || form.Get("redirect_uri") != "/services/spawnerd/oauth_callback" || form.Get("code") == "" {
				t.Errorf("token request %v: want the service token as secret, the same redirect_uri and the code", form)
			}
			ck := sessionCookieOf(t, c, e)
			// Decoded, an encrypted value holds neither the user's name as a
			// JSON string nor the token. (The undecoded text is not searched
			// for the name: a short one such as "ta" turns up by chance in
			// random base64 about one run in twenty.)
			raw, err := base64.RawURLEncoding.DecodeString(ck.Value)
			if err != nil || bytes.Contains(raw, []byte(strconv.Quote(tc.user.Name))) || bytes.Contains(raw, []byte("tok-")) {
				t.Errorf("the session cookie is not opaque base64 or shows its contents (%v): want it encrypted", err)
			}
			for _, page := range []string{"", "sessions", "gpu", "servers/alice", "api/servers"} {
				resp, body := e.get(c, testPrefix+page)
				want := http.StatusOK
				if !tc.wantConsole {
					want = http.StatusForbidden
				}
				if page == "servers/alice" && tc.wantConsole {
					want = http.StatusNotFound // no such server in the fakes
				}
				if resp.StatusCode != want {
					t.Errorf("%s: status %d, want %d", page, resp.StatusCode, want)
				}
				if !tc.wantConsole && !strings.HasPrefix(page, "api/") && !strings.Contains(body, `href="/services/spawnerd/status"`) {
					t.Errorf("%s: the 403 page does not link to the status page", page)
				}
			}
			resp, _ = e.get(c, testPrefix+"status")
			if resp.StatusCode != http.StatusOK {
				t.Errorf("status page: %d, want 200 for every hub user", resp.StatusCode)
			}
		})
	}
}

func TestLoginSessionCookieAttributes(t *testing.T) {
	e := newEnv(t)
	e.hub.setLogin(adminUser)
	c := noRedirect(e.client())
	// Follow the redirects by hand to see the callback's Set-Cookie.
	resp, _ := e.get(c, testPrefix)
	for i := 0; i < 3; i++ {
		loc := resp.Header.Get("Location")
		resp, _ = e.do(c, http.MethodGet, loc, nil, http.Header{"X-Forwarded-Proto": {"https"}})
		if strings.HasPrefix(loc, testPrefix+callbackPath) {
			break
		}
	}
	var sess *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == sessionCookie {
			sess = ck
		}
	}
	if sess == nil {
		t.Fatal("the callback set no session cookie")
	}
	if !sess.HttpOnly || !sess.Secure || sess.SameSite != http.SameSiteLaxMode || sess.Path != testPrefix {
		t.Errorf("session cookie %+v: want HttpOnly, Secure (X-Forwarded-Proto: https), SameSite=Lax, Path=%s", sess, testPrefix)
	}
	if got, want := time.Duration(sess.MaxAge)*time.Second, sessionTTL; got != want {
		t.Errorf("session lasts %s, want %s", got, want)
	}
}

func TestCallbackRefusesBadState(t *testing.T) {
	e := newEnv(t)
	e.hub.setLogin(adminUser)
	// startLogin walks to the hub's answer: the callback URL with code and state.
	startLogin := func() (*http.Client, *url.URL) {
		c := noRedirect(e.client())
		resp, _ := e.get(c, testPrefix)
		resp, _ = e.get(c, resp.Header.Get("Location"))
		cb, err := url.Parse(resp.Header.Get("Location"))
		if err != nil || cb.Path != testPrefix+callbackPath {
			t.Fatalf("the hub sent the browser to %q", resp.Header.Get("Location"))
		}
		return c, cb
	}
	for name, tc := range map[string]func() (*http.Client, string){
		"missing state": func() (*http.Client, string) {
			c, cb := startLogin()
			q := cb.Query()
			q.Del("state")
			return c, cb.Path + "?" + q.Encode()
		},
		"state of another browser": func() (*http.Client, string) {
			_, cb := startLogin()
			return noRedirect(e.client()), cb.RequestURI()
		},
		"state altered": func() (*http.Client, string) {
			c, cb := startLogin()
			q := cb.Query()
			state := q.Get("state")
			q.Set("state", state[:len(state)-2]+"AA")
			return c, cb.Path + "?" + q.Encode()
		},
		"state used twice": func() (*http.Client, string) {
			c, cb := startLogin()
			if resp, _ := e.get(c, cb.RequestURI()); resp.StatusCode != http.StatusFound {
				t.Fatalf("first use: %d", resp.StatusCode)
			}
			return c, cb.RequestURI()
		},
		"state expired": func() (*http.Client, string) {
			c, cb := startLogin()
			e.clock.Advance(stateTTL + time.Second)
			return c, cb.RequestURI()
		},
	} {
		t.Run(name, func(t *testing.T) {
			c, path := tc()
			resp, body := e.get(c, path)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400", resp.StatusCode)
			}
			if !strings.Contains(body, "Log in again") {
				t.Error("the refusal offers no new login")
			}
			if name != "state used twice" {
				for _, ck := range resp.Cookies() {
					if ck.Name == sessionCookie && ck.MaxAge > 0 {
						t.Error("a session cookie was set")
					}
				}
			}
		})
	}
}

func TestCallbackRefusesHubErrors(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	resp, _ := e.get(c, testPrefix+callbackPath+"?error=access_denied&state=x")
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("hub error: status %d, want 403", resp.StatusCode)
	}
	// A service's token (kind "service") is no hub user.
	e.hub.setLogin(hubUser{Kind: "service", Name: "culler", Admin: true})
	resp, _ = e.get(e.client(), testPrefix)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a service's login: status %d, want 403", resp.StatusCode)
	}
}

func TestTamperedCookieIsRefused(t *testing.T) {
	e := newEnv(t)
	c, _, _ := e.login(adminUser, testPrefix)
	ck := sessionCookieOf(t, c, e)
	raw, err := base64.RawURLEncoding.DecodeString(ck.Value)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0x01
	for name, value := range map[string]string{
		"one bit flipped": base64.RawURLEncoding.EncodeToString(raw),
		"truncated":       ck.Value[:len(ck.Value)-4],
		"garbage":         "not-a-cookie",
	} {
		t.Run(name, func(t *testing.T) {
			bad := noRedirect(e.client())
			u, _ := url.Parse(e.url(testPrefix))
			bad.Jar.SetCookies(u, []*http.Cookie{{Name: sessionCookie, Value: value, Path: testPrefix}})
			resp, _ := e.get(bad, testPrefix)
			if resp.StatusCode != http.StatusFound || !strings.Contains(resp.Header.Get("Location"), "oauth2/authorize") {
				t.Errorf("page: status %d to %q, want a new login", resp.StatusCode, resp.Header.Get("Location"))
			}
			resp, _ = e.get(bad, testPrefix+"api/servers")
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("api: status %d, want 401", resp.StatusCode)
			}
		})
	}
}

func TestCookieFromAnotherSecretIsRefused(t *testing.T) {
	e := newEnv(t)
	c, _, _ := e.login(adminUser, testPrefix)
	// A replica with the same secret reads the cookie; one with another does not.
	for name, tc := range map[string]struct {
		secret string
		want   int
	}{
		"same secret":    {"0123456789abcdef0123456789abcdef", http.StatusOK},
		"another secret": {"fedcba9876543210fedcba9876543210", http.StatusUnauthorized},
	} {
		t.Run(name, func(t *testing.T) {
			opts := e.opts
			opts.CookieSecret = []byte(tc.secret)
			h, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodGet, e.url(testPrefix+"api/servers"), nil)
			req.AddCookie(sessionCookieOf(t, c, e))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("status %d, want %d", rec.Code, tc.want)
			}
		})
	}
}

func TestExpiredSessionLogsInAgain(t *testing.T) {
	for name, tc := range map[string]struct {
		expiresIn int64
		after     time.Duration
	}{
		"after 12 hours":             {0, sessionTTL},
		"when the hub's token would": {600, 10 * time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.hub.expiresIn = tc.expiresIn
			c, _, _ := e.login(adminUser, testPrefix)
			e.clock.Advance(tc.after - time.Second)
			if resp, _ := e.get(noRedirect(c), testPrefix); resp.StatusCode != http.StatusOK {
				t.Fatalf("before expiry: status %d, want 200", resp.StatusCode)
			}
			e.clock.Advance(time.Second)
			resp, _ := e.get(noRedirect(c), testPrefix+"gpu")
			if resp.StatusCode != http.StatusFound || !strings.Contains(resp.Header.Get("Location"), "oauth2/authorize") {
				t.Fatalf("after expiry: status %d, want a redirect to the hub's authorize", resp.StatusCode)
			}
			if resp, _ := e.get(noRedirect(c), testPrefix+"api/servers"); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("api after expiry: status %d, want 401", resp.StatusCode)
			}
			resp, _ = e.get(c, testPrefix+"gpu")
			if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != testPrefix+"gpu" {
				t.Errorf("re-login: status %d at %s, want 200 back at the page asked for", resp.StatusCode, resp.Request.URL.Path)
			}
		})
	}
}

func TestLogoutClearsSession(t *testing.T) {
	e := newEnv(t)
	c, _, _ := e.login(adminUser, testPrefix)
	resp, body := e.get(c, testPrefix+"logout")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Logged out") {
		t.Fatalf("logout: status %d", resp.StatusCode)
	}
	if resp, _ := e.get(noRedirect(c), testPrefix); resp.StatusCode != http.StatusFound {
		t.Errorf("after logout: status %d, want a redirect to log in", resp.StatusCode)
	}
}

func TestSafeNext(t *testing.T) {
	e := newEnv(t)
	h := &handler{opts: e.opts}
	h.opts.Prefix = testPrefix
	for next, want := range map[string]string{
		testPrefix + "sessions?user=a":       testPrefix + "sessions?user=a",
		testPrefix + "servers/a%40b":         testPrefix + "servers/a%40b",
		"":                                   testPrefix,
		"/hub/home":                          testPrefix,
		"https://evil.example/":              testPrefix,
		"//evil.example/services/spawnerd/":  testPrefix,
		"/services/spawnerd/../../hub/":      testPrefix,
		"/services/spawnerd/%2e%2e/hub":      testPrefix,
		"/services/spawnerd\\evil":           testPrefix,
		testPrefix + "oauth_callback?code=x": testPrefix,
		testPrefix + "login":                 testPrefix,
	} {
		if got := h.safeNext(next); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", next, got, want)
		}
	}
}
