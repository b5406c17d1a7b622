package hub_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsmlp/spawner/e2e/harness"
)

// TestSlowStopIsNotUnreachable: spawnerd's --stop-wait (30 s) is above the
// class's request_timeout (10 s), and the pod takes long to go (a
// finalizer holds it). The class sends its stop_wait, so spawnerd answers
// 202 within it and the class waits the stop out by polling: no request
// times out and nothing reads as "cannot reach spawnerd".
func TestSlowStopIsNotUnreachable(t *testing.T) {
	s := newStackWith(t, []string{"--stop-wait", "30s", "--write-timeout", "60s"})
	ns, hub, api := s.ns, s.hub, s.api
	s.start(t, "judy", "", nil)
	const pod = "jupyter-judy"

	// A finalizer keeps the pod terminating until the test lets it go.
	hold := []byte(`{"metadata":{"finalizers":["e2e.dsmlp.io/hold"]}}`)
	if _, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), pod, types.MergePatchType, hold, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	release := func() {
		_, _ = env.Client.CoreV1().Pods(ns).Patch(context.Background(), pod, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	}
	t.Cleanup(release)

	code := hub.Do(http.MethodDelete, harness.ServerAPIPath("judy", ""), nil, nil)
	if code != http.StatusAccepted && code != http.StatusNoContent {
		t.Fatalf("hub stop: %d", code)
	}
	// Let the class's first DELETE be answered, then hold the pod a while longer.
	time.Sleep(12 * time.Second)
	release()
	hub.WaitGone("judy", "")

	switch n, sum := deleteAnswers(t, api.URL); {
	case n == 0:
		t.Errorf("spawnerd answered no DELETE with 202: the class gave up on every slow stop")
	case sum/float64(n) > 7:
		t.Errorf("a DELETE took %.1f s on average: spawnerd did not honour the class's wait", sum/float64(n))
	default:
		t.Logf("spawnerd answered %d DELETE(s) with 202, taking %.2f s on average (class stop_wait 5 s, --stop-wait 30 s)", n, sum/float64(n))
	}
	for _, bad := range []string{"cannot reach spawnerd", "spawnerd stop failed, retrying"} {
		if strings.Contains(hub.Log(), bad) {
			t.Errorf("the hub log says %q for a slow stop", bad)
		}
	}
}

// deleteAnswers reads spawnerd's request histogram: how many stops of a
// default server were answered 202, and their total seconds.
func deleteAnswers(t *testing.T, base string) (int, float64) {
	t.Helper()
	m, err := harness.Scrape(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	labels := `{code="202",method="DELETE",route="/api/v1/users/:user/server"}`
	return int(m["spawner_http_request_duration_seconds_count"+labels]), m["spawner_http_request_duration_seconds_sum"+labels]
}
