package hubapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsmlp/spawner/apiclient/apiclienttest"
	"github.com/dsmlp/spawner/hubapi"
)

func post(t *testing.T, f *apiclienttest.Fake, path, token, body string) (answer, int64) {
	t.Helper()
	return send(t, f, http.MethodPost, path, token, strings.NewReader(body), "Content-Type", "application/json")
}

// metric reads one unlabelled series of /metrics.
func metric(t *testing.T, f *apiclienttest.Fake, name string) float64 {
	t.Helper()
	a := get(t, f, "/metrics", "")
	for line := range strings.SplitSeq(a.body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var x float64
			if _, err := fmt.Sscan(v, &x); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return x
		}
	}
	return 0
}

// The batched poll answers each server exactly as its GET does, in the
// order asked, with a Content-Length, and counts the servers it polled.
func TestBatchedPollAnswersAsGET(t *testing.T) {
	f := apiclienttest.New(t, apiclienttest.Options{})
	sign := func(user string, admin bool) string {
		tok, err := hubapi.Sign(f.Secret, user, admin, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	items := []struct {
		item hubapi.PollItem
		path string
	}{
		{hubapi.PollItem{User: "alice", PodName: "jupyter-alice", Namespace: "jhub", PodUID: "6f1c2a9e-5b7d-4c1e-9a55-3d2f0c1b7a11"},
			"/api/v1/users/alice/server?pod_name=jupyter-alice&namespace=jhub&pod_uid=6f1c2a9e-5b7d-4c1e-9a55-3d2f0c1b7a11"},
		{hubapi.PollItem{User: "carol"}, "/api/v1/users/carol/server"},
		{hubapi.PollItem{User: "dave", Namespace: "jhub"}, "/api/v1/users/dave/server?namespace=jhub"},
		{hubapi.PollItem{User: "bob", Server: "gpu work"}, "/api/v1/users/bob/servers/gpu%20work"},
		{hubapi.PollItem{User: "nobody", Server: "x"}, "/api/v1/users/nobody/servers/x"},
		{hubapi.PollItem{User: "alice"}, "/api/v1/users/alice/server"},
	}
	admin := sign("jupyterhub", true)
	var req hubapi.PollRequest
	for _, it := range items {
		req.Servers = append(req.Servers, it.item)
	}
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	before := metric(t, f, "spawner_batched_polls_total")
	got, length := post(t, f, "/api/v1/polls", admin, string(body))
	if got.status != http.StatusOK || got.contentType != "application/json" || length != int64(len(got.body)) {
		t.Fatalf("batched poll: %+v, Content-Length %d", got, length)
	}
	var out struct {
		Servers []json.RawMessage `json:"servers"`
	}
	if err := json.Unmarshal([]byte(got.body), &out); err != nil {
		t.Fatalf("batched poll's answer: %v: %s", err, got.body)
	}
	if len(out.Servers) != len(items) {
		t.Fatalf("%d answers for %d servers: %s", len(out.Servers), len(items), got.body)
	}
	for i, it := range items {
		one := get(t, f, it.path, admin)
		var want bytes.Buffer
		if err := json.Compact(&want, []byte(one.body)); err != nil {
			t.Fatal(err)
		}
		if one.status != http.StatusOK || want.String() != string(out.Servers[i]) {
			t.Errorf("server %d (%s):\nGET:   %s\nbatch: %s", i, it.path, want.String(), out.Servers[i])
		}
	}
	if n := metric(t, f, "spawner_batched_polls_total") - before; n != float64(len(items)) {
		t.Errorf("spawner_batched_polls_total grew by %v, want %d", n, len(items))
	}

	// A user's own token polls the user's servers, and only those.
	alice := sign("alice", false)
	if a, _ := post(t, f, "/api/v1/polls", alice, `{"servers":[{"user":"alice"},{"user":"alice","server":"x"}]}`); a.status != http.StatusOK || strings.Count(a.body, `"status":`) != 2 {
		t.Errorf("alice's own batch: %+v", a)
	}
	empty, _ := post(t, f, "/api/v1/polls", alice, `{"servers":[]}`)
	if empty.status != http.StatusOK || empty.body != "{\"servers\":[]}\n" {
		t.Errorf("an empty batch: %+v", empty)
	}

	tooMany := `{"servers":[` + strings.Repeat(`{"user":"a"},`, 1000) + `{"user":"a"}]}`
	for _, tc := range []struct {
		name, token, body string
		status            int
		field             string
	}{
		{"another user's server", alice, `{"servers":[{"user":"alice"},{"user":"bob"}]}`, http.StatusForbidden, "servers[1].user"},
		{"no list", admin, `{}`, http.StatusBadRequest, "servers"},
		{"no body", admin, ``, http.StatusBadRequest, "servers"},
		{"more than 1000", admin, tooMany, http.StatusBadRequest, "servers"},
		{"no user", admin, `{"servers":[{"user":"alice"},{"server":"x"}]}`, http.StatusBadRequest, "servers[1].user"},
		{"an unknown field", admin, `{"servers":[{"user":"alice","colour":"red"}]}`, http.StatusBadRequest, "servers[0].colour"},
		{"a long hint", admin, `{"servers":[{"user":"alice","pod_name":"` + strings.Repeat("x", 300) + `"}]}`, http.StatusBadRequest, "servers[0].pod_name"},
		{"no token", "", `{"servers":[]}`, http.StatusUnauthorized, "Authorization"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := post(t, f, "/api/v1/polls", tc.token, tc.body)
			var e hubapi.ErrorBody
			if err := json.Unmarshal([]byte(a.body), &e); err != nil || a.status != tc.status || e.Field != tc.field || e.Error == "" {
				t.Errorf("answer %+v, want status %d naming %q", a, tc.status, tc.field)
			}
		})
	}
}

// A token first used for a batched poll is a read token: polls may use it
// again, a start may not (the replay cache holds its jti).
func TestBatchedPollTokenIsARead(t *testing.T) {
	f := apiclienttest.New(t, apiclienttest.Options{})
	tok, err := hubapi.Sign(f.Secret, "alice", false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if a, _ := post(t, f, "/api/v1/polls", tok, `{"servers":[{"user":"alice"}]}`); a.status != http.StatusOK {
			t.Fatalf("batch %d: %+v", i, a)
		}
	}
	if a := get(t, f, "/api/v1/users/alice/server", tok); a.status != http.StatusOK {
		t.Errorf("a GET poll with the batch's token: %+v", a)
	}
	if a, _ := post(t, f, "/api/v1/users/alice/server", tok, `{}`); a.status != http.StatusUnauthorized {
		t.Errorf("a start with the batch's token: %+v, want 401", a)
	}

	// A new token's first batches arrive together (a hub's start-up sends
	// its batches at once): each is verified, none is taken for a replay.
	fresh, err := hubapi.Sign(f.Secret, "jupyterhub", true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	codes := make(chan int, 32)
	var wg sync.WaitGroup
	for range cap(codes) {
		wg.Go(func() {
			req, err := http.NewRequest(http.MethodPost, f.URL+"/api/v1/polls", strings.NewReader(`{"servers":[{"user":"alice"},{"user":"bob","server":"gpu work"}]}`))
			if err != nil {
				codes <- 0
				return
			}
			req.Header.Set("Authorization", "Bearer "+fresh)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				codes <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != http.StatusOK {
			t.Errorf("a batch sent together with others under a new token: status %d", code)
		}
	}
}
