package bench_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsmlp/spawner/apiclient"
	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/hubapi"
	"github.com/dsmlp/spawner/lifecycle"
)

// apiClient calls spawnerd's API as the hub-side spawner class does, from
// many goroutines at once: every request carries an HS256 token for its user,
// over kept-alive loopback connections.
type apiClient struct {
	api    *apiclient.Client
	secret []byte
	http   *http.Client
}

func newAPIClient(api *harness.Spawnerd, conns int) *apiClient {
	return newAPIClientAt(api.URL, api.Secret, conns)
}

// newAPIClientAt is newAPIClient for the spawner at url (one the harness or
// the benchmark started) with the hub's shared secret.
func newAPIClientAt(url string, secret []byte, conns int) *apiClient {
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute}
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	c, err := apiclient.New(url, apiclient.User{}, apiclient.SharedSecret(secret), apiclient.WithHTTPClient(hc))
	if err != nil {
		panic(fmt.Sprintf("the spawner URL %q: %v", url, err)) // the harness or the benchmark makes it
	}
	return &apiClient{api: c, secret: secret, http: hc}
}

// token signs what the hub-side class signs (harness.Token, without a testing.TB).
func (c *apiClient) token(user string) (string, error) {
	tok, err := hubapi.Sign(c.secret, user, false, time.Now())
	if err != nil {
		return "", fmt.Errorf("signing a token for %s: %w", user, err)
	}
	return tok, nil
}

// do sends one request with a token signed beforehand (so that signing is
// not in a measured latency) and returns the status and body of the answer.
func (c *apiClient) do(ctx context.Context, method, path, token string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	signed := func(context.Context, apiclient.User) (string, error) { return token, nil }
	api, err := apiclient.New(c.api.URL(), apiclient.User{}, signed, apiclient.WithHTTPClient(c.http))
	if err != nil {
		return 0, nil, err
	}
	return api.Do(ctx, method, path, rd, apiclient.User{})
}

// start asks for a user's default server with the body the hub sends.
func (c *apiClient) start(ctx context.Context, user string) error {
	if _, err := c.api.As(apiclient.User{Name: user}).Start(ctx, user, "", startBody(user)); err != nil {
		return fmt.Errorf("start %s: %w", user, err)
	}
	return nil
}

// server polls a user's default server.
func (c *apiClient) server(ctx context.Context, user string) (*lifecycle.Server, error) {
	m, err := c.api.As(apiclient.User{Name: user}).Poll(ctx, user, "", lifecycle.Hint{})
	if err != nil {
		return nil, fmt.Errorf("poll %s: %w", user, err)
	}
	return m, nil
}

// awaitRunning polls the users' servers until every one reports running and
// returns when each was first seen so. Only users whose pod the benchmark
// already saw Running (ready) are polled, as spawnerd cannot report running
// before that: the wait adds no pointless load to the service it measures.
func (c *apiClient) awaitRunning(ctx context.Context, users []string, ready func(i int) bool, pollers int, timeout time.Duration) ([]time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	seen := make([]time.Time, len(users))
	pending := make([]int, len(users))
	for i := range users {
		pending[i] = i
	}
	var mu sync.Mutex
	for pass := 0; len(pending) > 0; pass++ {
		var due []int
		for _, i := range pending {
			if ready(i) {
				due = append(due, i)
			}
		}
		err := parallel(ctx, len(due), pollers, func(ctx context.Context, k int) error {
			i := due[k]
			m, err := c.server(ctx, users[i])
			if err != nil {
				return err
			}
			if m.Status == "running" {
				if m.URL == nil {
					return fmt.Errorf("server of %s is running without a URL: %+v", users[i], m)
				}
				mu.Lock()
				seen[i] = time.Now()
				mu.Unlock()
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		left := pending[:0]
		for _, i := range pending {
			if seen[i].IsZero() {
				left = append(left, i)
			}
		}
		pending = left
		if len(pending) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d servers not running after %d polling passes: %w", len(pending), len(users), pass+1, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return seen, nil
}

// startBody is what the hub-side spawner class posts: get_env() and the token.
func startBody(user string) hubapi.StartRequest {
	return hubapi.StartRequest{Env: hubEnv(user), APIToken: "tok-" + user}
}

func hubEnv(user string) map[string]string {
	return map[string]string{
		"JUPYTERHUB_API_TOKEN":      "tok-" + user,
		"JUPYTERHUB_USER":           user,
		"JUPYTERHUB_SERVER_NAME":    "",
		"JUPYTERHUB_SERVICE_PREFIX": "/user/" + user + "/",
		"JUPYTERHUB_API_URL":        "http://127.0.0.1:8081/hub/api",
	}
}

// parallel runs fn for 0 ≤ i < n on at most workers goroutines and returns
// the first error; after an error the rest are not started.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range min(workers, n) {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = context.Cause(ctx)
	}
	return first
}

// metrics is one scrape of a Prometheus text endpoint: series (name and
// labels as printed, e.g. `x_total{method="POST"}`) → value.
type metrics map[string]float64

func scrape(ctx context.Context, url string) (metrics, error) { return harness.Scrape(ctx, url) }

// delta is after minus before for one series.
func delta(before, after metrics, series string) float64 { return after[series] - before[series] }

// apiRequests is the delta of spawner_kube_api_requests_total by method.
func apiRequests(before, after metrics) map[string]float64 {
	const name = "spawner_kube_api_requests_total{method=\""
	out := map[string]float64{}
	for k := range after {
		if method, ok := strings.CutPrefix(k, name); ok {
			out[strings.TrimSuffix(method, "\"}")] = delta(before, after, k)
		}
	}
	return out
}

// mean is the delta of a summary's or histogram's _sum over its _count.
func mean(before, after metrics, name, labels string) time.Duration {
	n := delta(before, after, name+"_count"+labels)
	if n == 0 {
		return 0
	}
	return time.Duration(delta(before, after, name+"_sum"+labels) / n * float64(time.Second))
}

// bucketBound returns the upper bound of the histogram bucket that holds the
// q-quantile of what was observed between two scrapes: the quantile is at
// most that. labels are the series' labels other than le, as printed
// ({a="x",b="y"}).
func bucketBound(before, after metrics, name, labels string, q float64) float64 {
	prefix := name + "_bucket{"
	want := strings.Trim(labels, "{}")
	type bucket struct{ le, n float64 }
	var bs []bucket
	for k := range after {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		var others []string
		le := ""
		for _, kv := range strings.Split(strings.TrimSuffix(rest, "}"), ",") {
			if v, ok := strings.CutPrefix(kv, `le="`); ok {
				le = strings.TrimSuffix(v, `"`)
			} else {
				others = append(others, kv)
			}
		}
		if strings.Join(others, ",") != want {
			continue
		}
		bound, err := strconv.ParseFloat(le, 64)
		if err != nil { // +Inf parses; anything else is not a bucket
			continue
		}
		bs = append(bs, bucket{bound, delta(before, after, k)})
	}
	slices.SortFunc(bs, func(a, b bucket) int { return cmp.Compare(a.le, b.le) })
	if len(bs) == 0 || bs[len(bs)-1].n == 0 {
		return 0
	}
	total := bs[len(bs)-1].n
	for _, b := range bs {
		if b.n >= q*total {
			return b.le
		}
	}
	return bs[len(bs)-1].le
}
