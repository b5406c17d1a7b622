package harness

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// Front is a reverse proxy that makes a service of this machine (e.g. the
// hub on 127.0.0.1) reachable at another local address (a container
// network's gateway) and records every call made through it: the tests
// count spawnerd's calls to the hub with it.
type Front struct {
	URL    string // http://ADDR:PORT
	mu     sync.Mutex
	calls  []Call
	whoIs  func(remoteIP string) string
	server *http.Server
}

// Call is one request through a Front.
type Call struct {
	Method, Path string
	From         string // the caller, as Front's whoIs names its address
	Status       int    // 0: the service did not answer (down)
	At           time.Time
}

// Answered reports whether the service itself answered the call.
func (c Call) Answered() bool { return c.Status != 0 && c.Status != http.StatusBadGateway }

// StartFront listens on ip (a free port) and forwards to target; whoIs
// names a caller by its address ("" keeps the address).
func StartFront(t testing.TB, ip string, target string, whoIs func(string) string) *Front {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatalf("front: target %q: %v", target, err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(FreePort(t))))
	if err != nil {
		t.Fatalf("front: listening on %s: %v", ip, err)
	}
	f := &Front{URL: "http://" + l.Addr().String(), whoIs: whoIs}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.Transport = &http.Transport{ResponseHeaderTimeout: 30 * time.Second, DisableKeepAlives: true}
	proxy.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		w.WriteHeader(http.StatusBadGateway)
	}
	f.server = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		proxy.ServeHTTP(rec, r)
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		from := host
		if f.whoIs != nil {
			if n := f.whoIs(host); n != "" {
				from = n
			}
		}
		f.mu.Lock()
		f.calls = append(f.calls, Call{Method: r.Method, Path: r.URL.Path, From: from, Status: rec.status, At: time.Now()})
		f.mu.Unlock()
	})}
	go func() { _ = f.server.Serve(l) }()
	t.Cleanup(func() { _ = f.server.Close() })
	return f
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Calls returns the calls so far that match (nil: all).
func (f *Front) Calls(match func(Call) bool) []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Call
	for _, c := range f.calls {
		if match == nil || match(c) {
			out = append(out, c)
		}
	}
	return out
}

// ServerDeleteUser returns the user of a hub API call DELETE
// .../users/NAME/server or .../users/NAME/servers/SERVER ("" if it is none).
func ServerDeleteUser(c Call) string {
	if c.Method != http.MethodDelete {
		return ""
	}
	_, rest, ok := strings.Cut(c.Path, "/users/")
	if !ok {
		return ""
	}
	user, tail, _ := strings.Cut(rest, "/")
	if tail != "server" && !strings.HasPrefix(tail, "servers/") {
		return ""
	}
	if u, err := url.PathUnescape(user); err == nil {
		return u
	}
	return user
}
