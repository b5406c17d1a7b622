package console

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/dsmlp/spawner/history"
)

const (
	testPrefix = "/services/spawnerd/"
	testSecret = "spawnerd-hub-api-token"
)

// fakeHub plays the hub's OAuth provider and REST API: authorize logs in
// whoever loginAs names and redirects back with a code; token and user
// answer as JupyterHub 3.0 does; DELETE server records who asked.
type fakeHub struct {
	t  *testing.T
	mu sync.Mutex
	// loginAs is the user the next authorize logs in.
	loginAs hubUser
	// expiresIn is the expires_in of issued tokens (0: none).
	expiresIn int64
	codes     map[string]hubUser // code → user
	redirects map[string]string  // code → redirect_uri of its authorize
	tokens    map[string]hubUser // access token → user
	n         int
	// tokenForms are the token requests' forms.
	tokenForms []url.Values
	// stops are the DELETE requests; stopStatus answers them (default 202).
	stops      []hubStop
	stopStatus int
}

type hubStop struct {
	Path          string // escaped, as sent
	Authorization string
}

func newFakeHub(t *testing.T) *fakeHub {
	return &fakeHub{t: t, codes: map[string]hubUser{}, redirects: map[string]string{}, tokens: map[string]hubUser{}}
}

func (h *fakeHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	path := r.URL.EscapedPath()
	switch {
	case r.Method == http.MethodGet && path == "/hub/api/oauth2/authorize":
		q := r.URL.Query()
		if q.Get("client_id") != DefaultClientID || q.Get("response_type") != "code" || q.Get("state") == "" {
			http.Error(w, "bad authorize request", http.StatusBadRequest)
			return
		}
		h.n++
		code := fmt.Sprintf("code-%d", h.n)
		h.codes[code] = h.loginAs
		h.redirects[code] = q.Get("redirect_uri")
		back := q.Get("redirect_uri") + "?" + url.Values{"code": {code}, "state": {q.Get("state")}}.Encode()
		http.Redirect(w, r, back, http.StatusFound)
	case r.Method == http.MethodPost && path == "/hub/api/oauth2/token":
		if err := r.ParseForm(); err != nil {
			http.Error(w, "bad form", http.StatusBadRequest)
			return
		}
		h.tokenForms = append(h.tokenForms, r.PostForm)
		code := r.PostForm.Get("code")
		u, ok := h.codes[code]
		if !ok || r.PostForm.Get("client_id") != DefaultClientID || r.PostForm.Get("client_secret") != testSecret ||
			r.PostForm.Get("grant_type") != "authorization_code" || r.PostForm.Get("redirect_uri") != h.redirects[code] {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error": "invalid_grant"}`))
			return
		}
		delete(h.codes, code)
		h.n++
		tok := fmt.Sprintf("tok-%s-%d", u.Name, h.n)
		h.tokens[tok] = u
		body := map[string]any{"access_token": tok, "token_type": "Bearer"}
		if h.expiresIn > 0 {
			body["expires_in"] = h.expiresIn
		}
		writeJSON(w, http.StatusOK, body)
	case r.Method == http.MethodGet && path == "/hub/api/user":
		u, ok := h.tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "token ")]
		if !ok {
			writeJSON(w, http.StatusForbidden, map[string]any{"status": 403, "message": "bad token"})
			return
		}
		writeJSON(w, http.StatusOK, u)
	case r.Method == http.MethodDelete && strings.HasPrefix(path, "/hub/api/users/"):
		h.stops = append(h.stops, hubStop{Path: path, Authorization: r.Header.Get("Authorization")})
		status := h.stopStatus
		if status == 0 {
			status = http.StatusAccepted
		}
		if status >= 400 {
			writeJSON(w, status, map[string]any{"status": status, "message": "Action is not authorized with current scopes; requires any of [delete:servers]"})
			return
		}
		w.WriteHeader(status)
	default:
		http.NotFound(w, r)
	}
}

func (h *fakeHub) setLogin(u hubUser) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.loginAs = u
}

func (h *fakeHub) lastStop() (hubStop, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.stops) == 0 {
		return hubStop{}, 0
	}
	return h.stops[len(h.stops)-1], len(h.stops)
}

// env is the console and the fake hub on one origin, as behind the hub's
// proxy.
type env struct {
	t       *testing.T
	srv     *httptest.Server
	hub     *fakeHub
	clock   *fakeClock
	servers *fakeServers
	hist    *fakeHistory
	res     *fakeReservations
	opts    Options
}

var testNow = time.Date(2026, 3, 10, 18, 30, 0, 0, time.UTC)

type envOption func(*Options)

func newEnv(t *testing.T, mods ...envOption) *env {
	t.Helper()
	e := &env{t: t, hub: newFakeHub(t), clock: &fakeClock{t: testNow}, servers: &fakeServers{},
		hist: &fakeHistory{events: map[string][]history.Event{}}, res: &fakeReservations{now: testNow}}
	mux := http.NewServeMux()
	mux.Handle("/hub/", e.hub)
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	e.opts = Options{
		HubAPIURL:    e.srv.URL + "/hub/api",
		ClientSecret: testSecret,
		CookieSecret: []byte("0123456789abcdef0123456789abcdef"),
		Servers:      e.servers,
		History:      e.hist,
		Reservations: e.res,
		Location:     time.UTC,
		Logger:       zaptest.NewLogger(t),
		Now:          e.clock.Now,
	}
	for _, m := range mods {
		m(&e.opts)
	}
	h, err := New(e.opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	mux.Handle(testPrefix, h)
	return e
}

// client is a browser: a cookie jar, following redirects.
func (e *env) client() *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 30 * time.Second}
}

// noRedirect is a browser that shows each redirect.
func noRedirect(c *http.Client) *http.Client {
	c2 := *c
	c2.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c2
}

// login logs a new browser in as u, starting at path, and returns it with
// the final answer.
func (e *env) login(u hubUser, path string) (*http.Client, *http.Response, string) {
	e.t.Helper()
	e.hub.setLogin(u)
	c := e.client()
	resp, body := e.get(c, path)
	return c, resp, body
}

func (e *env) url(path string) string { return e.srv.URL + path }

func (e *env) get(c *http.Client, path string) (*http.Response, string) {
	e.t.Helper()
	return e.do(c, http.MethodGet, path, nil, nil)
}

func (e *env) do(c *http.Client, method, path string, form url.Values, header http.Header) (*http.Response, string) {
	e.t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req, err := http.NewRequest(method, e.url(path), body)
	if err != nil {
		e.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: reading: %v", method, path, err)
	}
	return resp, string(b)
}

// csrfOf reads the CSRF token a page carries.
func csrfOf(t *testing.T, page string) string {
	t.Helper()
	const marker = `<meta name="csrf-token" content="`
	i := strings.Index(page, marker)
	if i < 0 {
		t.Fatal("the page has no CSRF token")
	}
	rest := page[i+len(marker):]
	return rest[:strings.IndexByte(rest, '"')]
}

func sessionCookieOf(t *testing.T, c *http.Client, e *env) *http.Cookie {
	t.Helper()
	u, _ := url.Parse(e.url(testPrefix))
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == sessionCookie {
			return ck
		}
	}
	t.Fatal("no session cookie")
	return nil
}

func mustJSON(t *testing.T, body string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("decoding %q: %v", truncate(body, 200), err)
	}
}

var (
	adminUser   = hubUser{Kind: "user", Name: "admin", Admin: true, Scopes: []string{"admin:users", "admin:servers"}}
	studentUser = hubUser{Kind: "user", Name: "alice", Scopes: []string{"identify"}}
	taUser      = hubUser{Kind: "user", Name: "ta", Scopes: []string{"identify", DefaultConsoleScope}}
)
