package hubapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dsmlp/spawner/hubapi"
	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/poll"
	"github.com/dsmlp/spawner/spawner"
)

const benchServers = 10_000

// benchAPI is the API over a real manager and pod informer (a fake API
// server behind it) holding n running servers user00000…, with their pods.
func benchAPI(b *testing.B, n int) (*hubapi.API, []*corev1.Pod, []byte) {
	b.Helper()
	cfg, err := spawner.Parse([]byte("kubespawner:\n  namespace: ns1\n  cpu_guarantee: 0.5\n  mem_guarantee: 1G\n"))
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	pods := make([]*corev1.Pod, n)
	objs := make([]runtime.Object, n)
	for i := range pods {
		user := fmt.Sprintf("user%05d", i)
		built, _, err := spawner.Build(cfg, spawner.Request{User: user, Env: map[string]string{"JUPYTERHUB_USER": user}})
		if err != nil {
			b.Fatal(err)
		}
		p := built.Pod
		p.UID, p.ResourceVersion = types.UID(fmt.Sprintf("5b0e6c1e-0000-4000-8000-%012d", i)), fmt.Sprint(1000+i)
		p.CreationTimestamp, p.Spec.NodeName = metav1.NewTime(now.Add(-time.Hour)), fmt.Sprintf("cpu-%d", i%12)
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1),
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: poll.NotebookContainer, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
		pods[i], objs[i] = p, p
	}
	client := fake.NewClientset(objs...)
	w, err := poll.New(client, poll.Options{Namespace: "ns1"})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) { return w.HasSynced(), nil }); err != nil {
		b.Fatal("the pod cache never synced")
	}
	m, err := lifecycle.New(client, cfg, w, lifecycle.Options{})
	if err != nil {
		b.Fatal(err)
	}
	secret := []byte("bench-shared-secret-0123456789abcdef")
	auth, err := hubapi.NewAuthenticator(secret, "jupyterhub", nil)
	if err != nil {
		b.Fatal(err)
	}
	return hubapi.New(hubapi.Options{Servers: m, Auth: auth, Registry: prometheus.NewRegistry()}), pods, secret
}

// discard is a ResponseWriter that keeps the status and counts the body.
type discard struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) WriteHeader(code int)        { d.code = code }
func (d *discard) Write(p []byte) (int, error) { return d.body.Write(p) }

// BenchmarkPollHandler is the hub's poll through the API handler, without
// HTTP, over 10,000 running servers in a real informer cache, with read
// tokens already verified (the hub class's reuse): the fast path, and the
// same poll through echo's route (an extra query parameter sends it there).
func BenchmarkPollHandler(b *testing.B) {
	api, pods, secret := benchAPI(b, benchServers)
	reqs := make([]*http.Request, len(pods))
	slow := make([]*http.Request, len(pods))
	for i, p := range pods {
		user := fmt.Sprintf("user%05d", i)
		tok, err := hubapi.Sign(secret, user, false, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		target := fmt.Sprintf("/api/v1/users/%s/server?pod_name=%s&namespace=%s&pod_uid=%s", user, p.Name, p.Namespace, p.UID)
		reqs[i] = httptest.NewRequest(http.MethodGet, target, nil)
		slow[i] = httptest.NewRequest(http.MethodGet, target+"&x=1", nil)
		for _, r := range []*http.Request{reqs[i], slow[i]} {
			r.Header.Set("Authorization", "Bearer "+tok)
			r.Header.Set("Accept", "application/json")
		}
		// The first use verifies the token; the same answer both ways.
		var fast, viaEcho discard
		fast.h, viaEcho.h = http.Header{}, http.Header{}
		api.ServeHTTP(&viaEcho, slow[i])
		api.ServeHTTP(&fast, reqs[i])
		if fast.code != http.StatusOK || !bytes.Equal(ageless(fast.body.Bytes()), ageless(viaEcho.body.Bytes())) || fast.h.Get("X-Request-Id") == "" ||
			fast.h.Get("Content-Type") != viaEcho.h.Get("Content-Type") {
			b.Fatalf("poll of %s: fast path %d %v %s, echo's %d %v %s", user, fast.code, fast.h, fast.body.Bytes(), viaEcho.code, viaEcho.h, viaEcho.body.Bytes())
		}
	}
	for _, c := range []struct {
		name string
		reqs []*http.Request
	}{{"fast", reqs}, {"echo", slow}} {
		b.Run(c.name, func(b *testing.B) {
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				clear(w.h)
				w.body.Reset()
				c.reqs[i].Body = http.NoBody
				api.ServeHTTP(w, c.reqs[i])
				i = (i + 1) % len(c.reqs)
			}
			if w.code != http.StatusOK {
				b.Fatalf("status %d: %s", w.code, w.body.Bytes())
			}
		})
	}
}

// BenchmarkBatchedPollHandler is the hub class's batched poll through the
// API handler, without HTTP, over the same 10,000 servers: batches of 16
// (the class's steady state at 10,000 servers) and 256 (its batch size,
// reached at a hub's start-up), with the hub's read token already
// verified. ns/poll and allocs/poll divide by the servers polled.
func BenchmarkBatchedPollHandler(b *testing.B) {
	api, pods, secret := benchAPI(b, benchServers)
	tok, err := hubapi.Sign(secret, "jupyterhub", true, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{16, 256} {
		var bodies [][]byte
		for i := 0; i+size <= len(pods); i += size {
			var req hubapi.PollRequest
			for j, p := range pods[i : i+size] {
				req.Servers = append(req.Servers, hubapi.PollItem{User: fmt.Sprintf("user%05d", i+j), PodName: p.Name, Namespace: p.Namespace, PodUID: string(p.UID)})
			}
			body, err := json.Marshal(req)
			if err != nil {
				b.Fatal(err)
			}
			bodies = append(bodies, body)
		}
		b.Run(fmt.Sprintf("batch%d", size), func(b *testing.B) {
			w := &discard{h: http.Header{}}
			r := httptest.NewRequest(http.MethodPost, "/api/v1/polls", nil)
			r.Header.Set("Authorization", "Bearer "+tok)
			r.Header.Set("Content-Type", "application/json")
			body := bytes.NewReader(nil)
			var mem0, mem1 goruntime.MemStats
			goruntime.ReadMemStats(&mem0)
			i, n := 0, 0
			start := time.Now()
			for b.Loop() {
				clear(w.h)
				w.body.Reset()
				body.Reset(bodies[i])
				r.Body, r.ContentLength = io.NopCloser(body), int64(len(bodies[i]))
				api.ServeHTTP(w, r)
				if w.code != http.StatusOK || bytes.Count(w.body.Bytes(), []byte(`"status":"running"`)) != size {
					b.Fatalf("status %d: %s", w.code, w.body.Bytes())
				}
				i, n = (i+1)%len(bodies), n+size
			}
			elapsed := time.Since(start)
			goruntime.ReadMemStats(&mem1)
			b.ReportMetric(float64(elapsed.Nanoseconds())/float64(n), "ns/poll")
			b.ReportMetric(float64(mem1.Mallocs-mem0.Mallocs)/float64(n), "allocs/poll")
		})
	}
}

// agePattern is the answer's age, which moves on by a second between two
// answers that straddle a rounding boundary.
var agePattern = regexp.MustCompile(`"age":"[^"]*"`)

func ageless(body []byte) []byte { return agePattern.ReplaceAll(body, []byte(`"age":""`)) }
