package hubapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/spawner"
)

func TestAuthRefusesReplayedToken(t *testing.T) {
	srv, fs := newTestServer(t, nil)
	tok := sign(t, jwt.SigningMethodHS256, secret, goodClaims("alice"))
	if code, e := call(t, srv, http.MethodPost, "/api/v1/users/alice/server", tok, `{}`); code != http.StatusAccepted {
		t.Fatalf("first use: %d %+v", code, e)
	}
	code, e := call(t, srv, http.MethodPost, "/api/v1/users/alice/server", tok, `{}`)
	if code != http.StatusUnauthorized || e.Field != "Authorization" || !strings.Contains(e.Error, "replayed") {
		t.Errorf("replay: got %d %+v, want 401 saying replayed", code, e)
	}
	if len(fs.started) != 1 {
		t.Errorf("replay started a server: %d starts", len(fs.started))
	}
}

func TestReplayCacheForgetsExpiredAndStaysBounded(t *testing.T) {
	c := newReplayCache(2)
	t0 := time.Unix(1000, 0)
	if err := c.add("a", t0.Add(time.Minute), t0, false); err != nil {
		t.Fatal(err)
	}
	if err := c.add("a", t0.Add(time.Minute), t0.Add(59*time.Second), false); err == nil {
		t.Error("a replayed within its lifetime was accepted")
	}
	if err := c.add("b", t0.Add(time.Minute), t0, false); err != nil {
		t.Fatal(err)
	}
	if err := c.add("c", t0.Add(time.Minute), t0, false); err == nil {
		t.Error("a full cache accepted a new token (it must fail closed)")
	}
	// After expiry the parser refuses the token anyway; the cache forgets it.
	if err := c.add("c", t0.Add(2*time.Minute), t0.Add(61*time.Second), false); err != nil {
		t.Errorf("after the others expired: %v", err)
	}
	if len(c.seen) != 1 || len(c.order) != 1 {
		t.Errorf("expired entries kept: %d seen, %d queued", len(c.seen), len(c.order))
	}
}

// A jti first accepted for a read is accepted again for reads only; one
// first accepted for a write, never again.
func TestReplayCacheReadsMayRepeat(t *testing.T) {
	c := newReplayCache(4)
	t0 := time.Unix(1000, 0)
	until := t0.Add(time.Minute)
	for i, step := range []struct {
		jti     string
		read    bool
		refused bool
	}{
		{"r", true, false}, {"r", true, false}, {"r", false, true},
		{"w", false, false}, {"w", true, true}, {"w", false, true},
	} {
		err := c.add(step.jti, until, t0.Add(time.Second), step.read)
		if refused := err != nil; refused != step.refused {
			t.Errorf("step %d (%s, read %v): error %v, want refused %v", i, step.jti, step.read, err, step.refused)
		}
	}
}

func TestAuthRefusesShortSecret(t *testing.T) {
	if _, err := NewAuthenticator([]byte(strings.Repeat("k", MinSecretBytes-1)), "", nil); err == nil {
		t.Errorf("a %d-byte secret was accepted", MinSecretBytes-1)
	}
	if _, err := NewAuthenticator([]byte(strings.Repeat("k", MinSecretBytes)), "", nil); err != nil {
		t.Errorf("a %d-byte secret: %v", MinSecretBytes, err)
	}
}

func TestSignMakesSingleUseTokens(t *testing.T) {
	auth, err := NewAuthenticator(secret, "jupyterhub", nil)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := Sign(secret, "alice", false, time.Now())
	b, _ := Sign(secret, "alice", false, time.Now())
	if a == b {
		t.Fatal("two tokens signed in the same second are equal: no unique jti")
	}
	for _, tok := range []string{a, b} {
		if _, err := auth.Verify(tok); err != nil {
			t.Errorf("fresh token refused: %v", err)
		}
	}
	if _, err := auth.Verify(a); err == nil {
		t.Error("a token was accepted twice")
	}
}

// TestUnauthenticatedBodyIsNotAwaited sends headers that announce a body
// and no body: the 401 must come at once, and the connection be closed.
func TestUnauthenticatedBodyIsNotAwaited(t *testing.T) {
	srv, _ := newTestServer(t, nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST /api/v1/users/alice/server HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 50000\r\n\r\n") // under the test server's 64K body limit
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a token-less request with a pending body: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Errorf("got %d (close %v), want 401 and Connection: close", resp.StatusCode, resp.Close)
	}
}

// forbiddenServers fails every start as the API server does when
// spawnerd's service account may not create pods.
type forbiddenServers struct{ fakeServers }

func (forbiddenServers) Start(context.Context, spawner.Request, history.Actor) (*lifecycle.Server, error) {
	err := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "jupyter-alice",
		fmt.Errorf(`User "system:serviceaccount:jhub:spawnerd" cannot create resource "pods" in API group "" in the namespace "jhub-staff"`))
	return nil, fmt.Errorf("creating pod jupyter-alice: %w", err)
}

type conflictServers struct{ fakeServers }

func (conflictServers) Start(context.Context, spawner.Request, history.Actor) (*lifecycle.Server, error) {
	return nil, fmt.Errorf(`Service ns/spark-master belongs to server "" of user "bob", and a namespace holds one Spark cluster: %w`, lifecycle.ErrConflict)
}

func TestInternalErrorsShowOnlyARequestID(t *testing.T) {
	for name, tc := range map[string]struct {
		servers  Servers
		code     int
		hidden   []string
		inLogged string
	}{
		"forbidden":        {&forbiddenServers{}, http.StatusInternalServerError, []string{"serviceaccount", "jhub-staff"}, "system:serviceaccount:jhub:spawnerd"},
		"another's object": {&conflictServers{}, http.StatusConflict, []string{"bob", "spark-master"}, `user "bob"`},
	} {
		t.Run(name, func(t *testing.T) {
			core, logs := observer.New(zap.InfoLevel)
			auth, err := NewAuthenticator(secret, "jupyterhub", nil)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(New(Options{Servers: tc.servers, Auth: auth, Logger: zap.New(core)}))
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/users/alice/server", strings.NewReader(`{}`))
			req.Header.Set("Authorization", "Bearer "+sign(t, jwt.SigningMethodHS256, secret, goodClaims("alice")))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var raw bytes.Buffer
			_, _ = raw.ReadFrom(resp.Body)
			var body ErrorBody
			if err := json.Unmarshal(raw.Bytes(), &body); err != nil {
				t.Fatalf("%q: %v", raw.String(), err)
			}
			if resp.StatusCode != tc.code || body.RequestID == "" || !strings.Contains(body.Error, body.RequestID) {
				t.Errorf("got %d %s, want %d with a request ID in the message", resp.StatusCode, raw.String(), tc.code)
			}
			if got := resp.Header.Get("X-Request-Id"); got != body.RequestID {
				t.Errorf("X-Request-Id %q, body's %q", got, body.RequestID)
			}
			for _, s := range tc.hidden {
				if strings.Contains(raw.String(), s) {
					t.Errorf("the answer shows %q: %s", s, raw.String())
				}
			}
			entries := logs.FilterField(zap.String("request_id", body.RequestID)).All()
			if len(entries) != 1 || !strings.Contains(fmt.Sprint(entries[0].ContextMap()["error"]), tc.inLogged) {
				t.Errorf("log lines with the request ID: %+v, want one with the full error", entries)
			}
		})
	}
}

// slowProgress sends an event every interval, the last one ready.
type slowProgress struct {
	fakeServers
	interval time.Duration
}

func (s *slowProgress) Progress(ctx context.Context, _ lifecycle.Key, fn func(lifecycle.Event) error) error {
	for i := range 3 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(s.interval):
		}
		p := 50 * i
		if err := fn(lifecycle.Event{Progress: &p, Ready: i == 2, Message: fmt.Sprint("event ", i)}); err != nil {
			return err
		}
	}
	return nil
}

// The progress WebSocket outlives the server's read and write timeouts.
func TestProgressOutlivesServerTimeouts(t *testing.T) {
	auth, err := NewAuthenticator(secret, "jupyterhub", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(New(Options{Servers: &slowProgress{interval: 400 * time.Millisecond}, Auth: auth}))
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond
	srv.Start()
	defer srv.Close()
	h := http.Header{"Authorization": {"Bearer " + sign(t, jwt.SigningMethodHS256, secret, goodClaims("alice"))}}
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/api/v1/users/alice/server/progress", h)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	var got []lifecycle.Event
	for {
		var ev lifecycle.Event
		if err := ws.ReadJSON(&ev); err != nil {
			break
		}
		got = append(got, ev)
	}
	if len(got) != 3 || !got[2].Ready {
		t.Errorf("got %d events %+v over 1.2 s with 300 ms server timeouts, want 3 ending ready", len(got), got)
	}
}

// A reservation write that still conflicts after the controller's retries
// is the caller's to retry: 409, not an internal error.
func TestReservationConflictIs409(t *testing.T) {
	err := storeError(fmt.Errorf("cancelling: %w", apierrors.NewConflict(schema.GroupResource{Group: "reservations.dsmlp.io", Resource: "gpureservations"}, "r-12", fmt.Errorf("changed"))))
	code, body := toStatus(err)
	if code != http.StatusConflict || body.Field != "id" {
		t.Errorf("conflict → %d %+v, want 409 naming id", code, body)
	}
}
