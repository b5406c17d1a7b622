package hubapi

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsmlp/spawner/lifecycle"
)

// pollPath answers the hub's poll, GET /api/v1/users/{user}/server and
// GET /api/v1/users/{user}/servers/{server}, in front of echo: the hub
// sends one per server every poll interval, and echo's per-request work
// (its context, the middleware chain built anew, the request ID from
// crypto/rand, the metrics labels looked up, the query parsed into a map,
// the answer encoded by reflection) would cost more than the answer.
//
// It answers only a plain successful poll: a read token already verified
// (the read-token cache), a path and hint it reads without unescaping, no
// body. Anything else (a token to verify, a refusal, ?pretty, an escape)
// goes to echo's route, which answers it as before; so does a poll whose
// lookup panics, for echo's Recover to answer.
type pollPath struct {
	auth    *Authenticator
	servers Servers
	// answers keeps the encoded answers of a *lifecycle.Manager; nil with
	// any other Servers, whose answers are encoded at each poll.
	answers *lifecycle.Answers
	// routes are the poll's series of the request metrics: the default
	// server's route and a named server's.
	routes   [2]routeObserver
	jsonType []string
	bufs     sync.Pool
	// batched counts the servers polled through POST /api/v1/polls.
	batched prometheus.Counter
}

// answerSource is implemented by *lifecycle.Manager.
type answerSource interface {
	NewAnswers() *lifecycle.Answers
}

// pollPrefix and the two suffixes are the poll's routes.
const (
	pollPrefix   = "/api/v1/users/"
	defaultRoute = "/api/v1/users/:user/server"
	namedRoute   = "/api/v1/users/:user/servers/:server"
)

func newPollPath(opts Options, reqs *prometheus.HistogramVec) *pollPath {
	if opts.Auth == nil || opts.Servers == nil {
		return nil
	}
	p := &pollPath{auth: opts.Auth, servers: opts.Servers, jsonType: []string{echo.MIMEApplicationJSON},
		routes: [2]routeObserver{{vec: reqs, route: defaultRoute}, {vec: reqs, route: namedRoute}}}
	if src, ok := opts.Servers.(answerSource); ok {
		p.answers = src.NewAnswers()
	}
	p.bufs.New = func() any { b := make([]byte, 0, 2048); return &b }
	return p
}

// routeObserver is one route's histogram series, looked up at its first
// use: the series appears when the first such poll is answered, as with
// echo's middleware.
type routeObserver struct {
	vec   *prometheus.HistogramVec
	route string
	once  sync.Once
	obs   prometheus.Observer
}

func (o *routeObserver) observer() prometheus.Observer {
	o.once.Do(func() { o.obs = o.vec.WithLabelValues(o.route, http.MethodGet, "200") })
	return o.obs
}

// serve answers r if it is a plain poll and reports whether it did; it
// writes nothing otherwise.
func (p *pollPath) serve(w http.ResponseWriter, r *http.Request) (served bool) {
	if r.Method != http.MethodGet || r.URL.RawPath != "" || r.ContentLength != 0 || !strings.HasPrefix(r.URL.Path, pollPrefix) {
		return false
	}
	start := time.Now()
	key, route, ok := pollKey(r.URL.Path[len(pollPrefix):])
	if !ok {
		return false
	}
	hint, ok := pollHint(r.URL.RawQuery)
	if !ok {
		return false
	}
	claims, ok := p.auth.cachedRead(r.Header["Authorization"])
	if !ok || !claims.Admin && claims.Subject != key.User {
		return false
	}
	defer func() {
		if v := recover(); v != nil {
			served = false // echo's route runs it again, under Recover
		}
	}()
	bp := p.bufs.Get().(*[]byte)
	defer p.bufs.Put(bp)
	body, err := p.answer((*bp)[:0], key, hint)
	if err != nil {
		return false
	}
	body = append(body, '\n') // as json.Encoder, which echo uses
	*bp = body
	h := w.Header()
	h[echo.HeaderContentType] = p.jsonType
	rid := r.Header.Get(echo.HeaderXRequestID)
	if rid == "" {
		rid = requestID()
	}
	h[echo.HeaderXRequestID] = []string{rid}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	p.routes[route].observer().Observe(time.Since(start).Seconds())
	return true
}

// answer appends the server's JSON.
func (p *pollPath) answer(dst []byte, key lifecycle.Key, hint lifecycle.Hint) ([]byte, error) {
	if p.answers != nil {
		return p.answers.AppendJSON(dst, key, hint)
	}
	data, err := json.Marshal(p.servers.Server(key, hint))
	return append(dst, data...), err
}

// pollKey reads user and server from a poll's path after pollPrefix, and
// which route it is (0: the default server, 1: a named one).
func pollKey(rest string) (lifecycle.Key, int, bool) {
	user, tail, ok := strings.Cut(rest, "/")
	if !ok || user == "" {
		return lifecycle.Key{}, 0, false
	}
	if tail == "server" {
		return lifecycle.Key{User: user}, 0, true
	}
	server, ok := strings.CutPrefix(tail, "servers/")
	if !ok || server == "" || strings.IndexByte(server, '/') >= 0 {
		return lifecycle.Key{}, 0, false
	}
	return lifecycle.Key{User: user, Server: server}, 1, true
}

// pollHint reads the hub's hint (pod_name, namespace, pod_uid) from a
// query that needs no unescaping, each key at most once and no other;
// false sends any other query to echo's route (hintOf).
func pollHint(query string) (lifecycle.Hint, bool) {
	var h lifecycle.Hint
	if query == "" {
		return h, true
	}
	if strings.ContainsAny(query, "%+;") {
		return h, false
	}
	var seen [3]bool
	for pair := range strings.SplitSeq(query, "&") {
		name, value, ok := strings.Cut(pair, "=")
		if !ok || value == "" || len(value) > maxHintLen {
			return h, false
		}
		var i int
		switch name {
		case "pod_name":
			i, h.Pod = 0, value
		case "namespace":
			i, h.Namespace = 1, value
		case "pod_uid":
			i, h.UID = 2, types.UID(value)
		default:
			return h, false
		}
		if seen[i] {
			return h, false
		}
		seen[i] = true
	}
	return h, true
}

// requestIDChars are the letters of echo's request IDs.
const requestIDChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// requestID returns an ID like echo's RequestID middleware makes (32
// letters), from math/rand/v2's per-thread ChaCha8 rather than a locked
// crypto/rand reader: an ID only needs to be unique.
func requestID() string {
	var b [32]byte
	for i := 0; i < len(b); {
		for x, n := rand.Uint64(), 0; n < 11 && i < len(b); x, n, i = x/uint64(len(requestIDChars)), n+1, i+1 {
			b[i] = requestIDChars[x%uint64(len(requestIDChars))]
		}
	}
	return string(b[:])
}
