package hubapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/lifecycle"
)

// waitServers records the wait each stop was given.
type waitServers struct {
	fakeServers
	waits []time.Duration
}

func (w *waitServers) Stop(_ context.Context, _ lifecycle.Key, _ lifecycle.Hint, _ bool, wait time.Duration, _ history.Actor) (bool, error) {
	w.waits = append(w.waits, wait)
	return true, nil
}

// TestStopWaitIsClampedToStopWait: the hub class's ?wait= shortens the
// wait, never lengthens it past --stop-wait, and a bad one names the field.
func TestStopWaitIsClampedToStopWait(t *testing.T) {
	auth, err := NewAuthenticator(secret, "jupyterhub", nil)
	if err != nil {
		t.Fatal(err)
	}
	ws := &waitServers{}
	srv := httptest.NewServer(New(Options{Servers: ws, Auth: auth, StopWait: 8 * time.Second}))
	t.Cleanup(srv.Close)
	n := 0
	token := func() string { // a fresh jti each call: replays are refused
		n++
		cl := goodClaims("alice")
		cl["jti"] = fmt.Sprintf("stopwait-%d", n)
		return sign(t, jwt.SigningMethodHS256, secret, cl)
	}
	for _, tc := range []struct {
		query string
		want  time.Duration
	}{
		{"", 8 * time.Second},
		{"?wait=5s", 5 * time.Second},
		{"?wait=4.5s", 4500 * time.Millisecond},
		{"?wait=0s", 0},
		{"?wait=30s", 8 * time.Second},
	} {
		ws.waits = nil
		if code, e := call(t, srv, http.MethodDelete, "/api/v1/users/alice/server"+tc.query, token(), ""); code != http.StatusNoContent {
			t.Fatalf("DELETE %q: %d %+v", tc.query, code, e)
		}
		if len(ws.waits) != 1 || ws.waits[0] != tc.want {
			t.Errorf("DELETE %q: waits %v, want [%v]", tc.query, ws.waits, tc.want)
		}
	}
	for _, bad := range []string{"?wait=5", "?wait=-1s", "?wait=soon"} {
		code, e := call(t, srv, http.MethodDelete, "/api/v1/users/alice/server"+bad, token(), "")
		if code != http.StatusBadRequest || e.Field != "wait" {
			t.Errorf("DELETE %q: %d %+v, want 400 naming wait", bad, code, e)
		}
	}
}
