package hubapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// A token may be used again for reads until it expires, never for a
// write, and a write token is never reusable, not even for a read.
func TestReadTokensAreReusableForReadsOnly(t *testing.T) {
	srv, fs := newTestServer(t, nil)
	read := sign(t, jwt.SigningMethodHS256, secret, goodClaims("alice"))
	for i := range 3 {
		if code, e := call(t, srv, http.MethodGet, "/api/v1/users/alice/server", read, ""); code != http.StatusOK {
			t.Fatalf("read %d with one token: %d %+v", i, code, e)
		}
	}
	if code, _ := call(t, srv, http.MethodPost, "/api/v1/users/alice/server", read, `{}`); code != http.StatusUnauthorized {
		t.Errorf("a write with a token used for reads: %d, want 401", code)
	}
	if code, _ := call(t, srv, http.MethodDelete, "/api/v1/users/alice/server", read, ""); code != http.StatusUnauthorized {
		t.Errorf("a stop with a token used for reads: %d, want 401", code)
	}
	write := sign(t, jwt.SigningMethodHS256, secret, goodClaims("alice"))
	if code, e := call(t, srv, http.MethodPost, "/api/v1/users/alice/server", write, `{}`); code != http.StatusAccepted {
		t.Fatalf("a write: %d %+v", code, e)
	}
	if code, _ := call(t, srv, http.MethodGet, "/api/v1/users/alice/server", write, ""); code != http.StatusUnauthorized {
		t.Errorf("a read with a token used for a write: %d, want 401", code)
	}
	if len(fs.started) != 1 {
		t.Errorf("%d starts, want 1", len(fs.started))
	}
	// The claims come along: alice's token reads alice's server only.
	if code, _ := call(t, srv, http.MethodGet, "/api/v1/users/bob/server", read, ""); code != http.StatusForbidden {
		t.Errorf("alice's cached token read bob's server: %d, want 403", code)
	}
}

// The cache ends a token at its expiry (plus the parser's leeway), keeps
// no more than its bound, and forgets expired tokens to make room.
func TestReadCacheExpiresAndStaysBounded(t *testing.T) {
	c := newReadCache(2)
	t0 := time.Unix(1000, 0)
	cl := &Claims{}
	c.put("a", cl, t0.Add(time.Minute), t0)
	if got, ok := c.get("a", t0.Add(59*time.Second)); !ok || got != cl {
		t.Fatal("a live token was forgotten")
	}
	if _, ok := c.get("a", t0.Add(time.Minute)); ok {
		t.Error("an expired token was accepted from the cache")
	}
	c.put("b", cl, t0.Add(time.Minute), t0)
	c.put("c", cl, t0.Add(time.Minute), t0)
	c.put("d", cl, t0.Add(time.Minute), t0)
	if _, ok := c.get("d", t0); ok {
		t.Error("a full cache took another token")
	}
	c.put("d", cl, t0.Add(3*time.Minute), t0.Add(2*time.Minute))
	if _, ok := c.get("d", t0.Add(2*time.Minute)); !ok {
		t.Error("a full cache of expired tokens did not make room")
	}
}

// Two reads with one new token that both miss the read cache (they arrive
// together, before the first is in it; or the cache is full) are both
// verified in full and both accepted; a write with it is still refused.
// The read cache here holds nothing, so every read misses it.
func TestReadsMissingTheCacheAreNotReplays(t *testing.T) {
	auth, err := NewAuthenticator(secret, "jupyterhub", nil)
	if err != nil {
		t.Fatal(err)
	}
	auth.reads = newReadCache(0)
	srv := httptest.NewServer(New(Options{Servers: &fakeServers{}, Auth: auth}))
	t.Cleanup(srv.Close)
	tok := sign(t, jwt.SigningMethodHS256, secret, goodClaims("alice"))
	for i := range 2 {
		if code, e := call(t, srv, http.MethodGet, "/api/v1/users/alice/server", tok, ""); code != http.StatusOK {
			t.Fatalf("GET %d: %d %+v", i, code, e)
		}
		if code, e := call(t, srv, http.MethodPost, "/api/v1/polls", tok, `{"servers":[{"user":"alice"}]}`); code != http.StatusOK {
			t.Fatalf("batched poll %d: %d %+v", i, code, e)
		}
	}
	if len(auth.reads.m) != 0 {
		t.Fatalf("the read cache holds %d tokens, want none", len(auth.reads.m))
	}
	if code, _ := call(t, srv, http.MethodPost, "/api/v1/users/alice/server", tok, `{}`); code != http.StatusUnauthorized {
		t.Errorf("a write with a token used for reads: %d, want 401", code)
	}
}
