package history_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/history"
)

// failoverConfig runs notebooks on the kwok CPU node: the pods run in
// name only, which is all a stop reaction needs.
const failoverConfig = `
kubespawner:
  namespace: %s
  start_timeout: 60
  delete_grace_period: 1
  course: DSC10
  node_selector: {type: kwok}
`

// TestHistorySurvivesFailover runs two replicas on one database, SQLite
// (one file, as two processes on one machine share it) and PostgreSQL: an
// eviction seen by the leader is recorded; the leader is killed (SIGKILL,
// its Lease left to expire) while two more servers are evicted; the
// replica that takes over records them; and every pod has one session,
// with one end, whichever replica wrote it.
func TestHistorySurvivesFailover(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			dsn := harness.SQLiteDSN(t)
			if backend == "postgres" {
				dsn = env.StartPostgres(t)
			}
			failover(t, dsn)
		})
	}
}

func failover(t *testing.T, dsn string) {
	ctx := context.Background()
	ns := env.Namespace(t)
	lease := "stops-" + ns
	a := env.StartSpawnerd(t, bin, harness.SpawnerdOptions{
		Config: fmt.Sprintf(failoverConfig, ns),
		Args: []string{"--history-dsn", dsn, "--stop-lease-name", lease, "--stop-lease-namespace", ns,
			"--lease-duration", "4s", "--lease-renew-deadline", "3s", "--lease-retry-period", "500ms"},
	})
	b := a.Replica(t)
	users := []string{"ann", "ben", "cat", "dan"}
	for _, u := range users {
		body := map[string]any{"requested_by": map[string]string{"kind": "user", "name": u}}
		if code := a.Do(http.MethodPost, harness.ServerPath(u, ""), u, false, body, nil); code != http.StatusAccepted && code != http.StatusOK {
			t.Fatalf("start %s: %d", u, code)
		}
	}
	for _, u := range users {
		b.WaitStatus(u, "", "running")
	}
	leader, follower := a, b
	if holder := leaseHolder(t, ns, lease); !strings.Contains(holder, leaderIdentity(t, a)) {
		leader, follower = b, a
	}
	// Recorded by the leader.
	if err := harness.Evict(ctx, env.Client, ns, "jupyter-ann"); err != nil {
		t.Fatal(err)
	}
	waitStopper(t, follower, "ann", history.StopperEvicted)

	// The leader dies; two servers are evicted before anyone leads.
	leader.Kill()
	killed := time.Now()
	var wg sync.WaitGroup
	for _, u := range []string{"ben", "cat"} {
		wg.Go(func() {
			if err := harness.Evict(ctx, env.Client, ns, "jupyter-"+u); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, u := range []string{"ben", "cat"} {
		waitStopper(t, follower, u, history.StopperEvicted)
	}
	t.Logf("evictions during the failover recorded %s after the leader was killed", time.Since(killed).Round(time.Millisecond))
	// The survivor has the whole life of the server still running, and
	// one session per pod.
	for _, u := range users {
		var page history.SessionPage
		if code := follower.Do(http.MethodGet, "/api/v1/sessions?user="+u, "admin", true, nil, &page); code != http.StatusOK {
			t.Fatalf("sessions of %s: %d", u, code)
		}
		if len(page.Sessions) != 1 {
			t.Errorf("%s has %d sessions, want 1: %+v", u, len(page.Sessions), page.Sessions)
			continue
		}
		got := page.Sessions[0]
		if got.CreatedAt == nil || got.ScheduledAt == nil || got.ReadyAt == nil || got.RequestedBy == nil || got.RequestedBy.Kind != history.ActorUser {
			t.Errorf("%s's life is incomplete: %+v", u, got)
		}
		if (u == "dan") != (got.EndedAt == nil) {
			t.Errorf("%s ended at %v", u, got.EndedAt)
		}
	}
}

// waitStopper waits until user's newest session, read through api, ended by want.
func waitStopper(t *testing.T, api *harness.Spawnerd, user string, want history.Stopper) {
	t.Helper()
	var last history.SessionPage
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, harness.Timeout, true, func(context.Context) (bool, error) {
		if code := api.Do(http.MethodGet, "/api/v1/sessions?user="+user, "admin", true, nil, &last); code != http.StatusOK {
			return false, nil
		}
		return len(last.Sessions) > 0 && last.Sessions[0].Stopper == want, nil
	})
	if err != nil {
		t.Fatalf("%s's session never ended by %s: %+v", user, want, last.Sessions)
	}
}

// leaseHolder is the holder identity of a Lease, once it has one.
func leaseHolder(t *testing.T, ns, name string) string {
	t.Helper()
	var holder string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, harness.Timeout, true, func(ctx context.Context) (bool, error) {
		l, err := env.Client.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return false, nil
		}
		holder = *l.Spec.HolderIdentity
		return true, nil
	})
	if err != nil {
		t.Fatalf("Lease %s/%s has no holder", ns, name)
	}
	return holder
}

// leaderIdentity is the Lease identity a spawnerd logged at start.
func leaderIdentity(t *testing.T, s *harness.Spawnerd) string {
	t.Helper()
	line, ok := s.WaitForLogLine(10*time.Second, `"msg":"serving"`)
	if !ok {
		t.Fatal("spawnerd logged no serving line")
	}
	_, rest, _ := strings.Cut(line, `"identity":"`)
	id, _, _ := strings.Cut(rest, `"`)
	return id
}
