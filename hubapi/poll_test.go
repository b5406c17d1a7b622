package hubapi_test

import (
	"bufio"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsmlp/spawner/apiclient/apiclienttest"
	"github.com/dsmlp/spawner/hubapi"
)

// answer is what a client sees of one answer.
type answer struct {
	status      int
	contentType string
	requestID   string
	body        string
}

func get(t *testing.T, f *apiclienttest.Fake, path, token string, header ...string) answer {
	t.Helper()
	a, _ := send(t, f, http.MethodGet, path, token, nil, header...)
	return a
}

// send makes one request (with the bearer token, unless empty) and
// returns the answer and its Content-Length.
func send(t *testing.T, f *apiclienttest.Fake, method, path, token string, body io.Reader, header ...string) (answer, int64) {
	t.Helper()
	req, err := http.NewRequest(method, f.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("X-Request-Id"), string(data)}, resp.ContentLength
}

// pollCount is the poll routes' spawner_http_request_duration_seconds_count.
func pollCount(t *testing.T, f *apiclienttest.Fake, route string) int {
	t.Helper()
	resp, err := http.Get(f.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	want := `spawner_http_request_duration_seconds_count{code="200",method="GET",route="` + route + `"} `
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), want); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

var echoRequestID = regexp.MustCompile(`^[A-Za-z]{32}$`)

// A poll with a read token already verified is answered in front of echo:
// the same status, headers and body as echo's route gives, a request ID
// of echo's form, and the same metrics. Every other poll is echo's, as
// before.
func TestPollFastPathAnswersAsEcho(t *testing.T) {
	f := apiclienttest.New(t, apiclienttest.Options{})
	sign := func(user string, admin bool) string {
		tok, err := hubapi.Sign(f.Secret, user, admin, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	const (
		byDefault = "/api/v1/users/:user/server"
		byName    = "/api/v1/users/:user/servers/:server"
	)
	for _, tc := range []struct {
		path, user string
		admin      bool
		route      string
	}{
		{"/api/v1/users/alice/server?pod_name=jupyter-alice&namespace=jhub&pod_uid=6f1c2a9e-5b7d-4c1e-9a55-3d2f0c1b7a11", "alice", false, byDefault},
		{"/api/v1/users/alice/server", "alice", false, byDefault},
		{"/api/v1/users/carol/server", "carol", false, byDefault},
		{"/api/v1/users/dave/server?namespace=jhub", "dave", false, byDefault},
		{"/api/v1/users/nobody/servers/x", "nobody", false, byName},
		{"/api/v1/users/bob/servers/gpu%20work", "bob", false, byName},
		{"/api/v1/users/alice/server", "admin", true, byDefault},
	} {
		t.Run(tc.path+" as "+tc.user, func(t *testing.T) {
			tok := sign(tc.user, tc.admin)
			before := pollCount(t, f, tc.route)
			first := get(t, f, tc.path, tok) // echo's route verifies the token
			again := get(t, f, tc.path, tok) // the fast path
			if first.status != http.StatusOK || again.status != first.status || again.contentType != first.contentType || again.body != first.body {
				t.Errorf("answers differ:\necho: %+v\nfast: %+v", first, again)
			}
			for _, a := range []answer{first, again} {
				if !echoRequestID.MatchString(a.requestID) {
					t.Errorf("X-Request-Id %q is not 32 letters", a.requestID)
				}
			}
			if first.requestID == again.requestID {
				t.Errorf("two answers with request ID %q", first.requestID)
			}
			if after := pollCount(t, f, tc.route); after != before+2 {
				t.Errorf("%s counted %d polls, want 2", tc.route, after-before)
			}
			if own := get(t, f, tc.path, tok, "X-Request-Id", "hub-42"); own.requestID != "hub-42" || own.body != first.body {
				t.Errorf("with the client's request ID: %+v", own)
			}
		})
	}

	// With a read token already verified, what the fast path does not
	// answer is still echo's answer.
	tok := sign("alice", false)
	if a := get(t, f, "/api/v1/users/alice/server", tok); a.status != http.StatusOK {
		t.Fatalf("first poll: %+v", a)
	}
	for path, want := range map[string]int{
		"/api/v1/users/alice/server?pretty":                               http.StatusOK,
		"/api/v1/users/alice/server?pod_name=" + strings.Repeat("x", 300): http.StatusBadRequest,
		"/api/v1/users/alice/server?pod_name=a&pod_name=b":                http.StatusOK,
		"/api/v1/users/alice/server?colour=red":                           http.StatusOK,
		"/api/v1/users/bob/server":                                        http.StatusForbidden,
		"/api/v1/users/alice/servers/x/progress":                          http.StatusBadRequest,
		"/api/v1/users/alice/server/":                                     http.StatusNotFound,
	} {
		if got := get(t, f, path, tok); got.status != want || !echoRequestID.MatchString(got.requestID) {
			t.Errorf("GET %s: %+v, want status %d", path, got, want)
		}
	}
	if got := get(t, f, "/api/v1/users/alice/server?pretty", tok); !strings.Contains(got.body, "\n  ") {
		t.Errorf("?pretty answered without indentation: %s", got.body)
	}
}
