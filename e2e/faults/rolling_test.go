package faults_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsmlp/spawner/e2e/harness"
)

// rollingSpawns is how many servers TestRollingKills spawns and stops
// through the hub, spawnWorkers at a time.
const (
	rollingSpawns = 300
	spawnWorkers  = 12
)

// TestRollingKills spawns and stops servers through the hub while the
// replicas are SIGKILLed and started again one at a time: no spawn fails
// because of a replica, every progress stream ends ready, and no pod is
// orphaned or doubled.
func TestRollingKills(t *testing.T) {
	// Today's spawnerd keeps a spawn's progress in the replica that started
	// it: behind a balancer the hub's progress call lands elsewhere and the
	// spawn fails ("no spawn in progress for this server"). Serving every
	// call from any replica comes with the stop Lease.
	needStopLease(t)
	st := newStack(t, 3)
	pods := watchPods(t, st.ns)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var kills atomic.Int64
	var killErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			r := st.replicas[i%len(st.replicas)]
			select {
			case <-ctx.Done():
				return
			case <-time.After(3 * time.Second):
			}
			// Not ctx: the end of the spawns must not cut a kill or restart short.
			if err := r.Kill(context.Background()); err != nil {
				killErr = err
				return
			}
			kills.Add(1)
			time.Sleep(time.Second)
			if err := r.Start(context.Background()); err != nil {
				killErr = err
				return
			}
			if err := r.backend.WaitReady(context.Background(), true, harness.Timeout); err != nil {
				killErr = fmt.Errorf("%w\n%s", err, r.Log())
				return
			}
		}
	}()

	var stopErrs []string
	var mu sync.Mutex
	begin := time.Now()
	results := st.api.spawnAll(ctx, userNames("roll", rollingSpawns), spawnWorkers, func(r spawnResult) {
		if r.err != nil {
			return
		}
		if err := st.api.stop(ctx, r.user); err != nil {
			mu.Lock()
			stopErrs = append(stopErrs, err.Error())
			mu.Unlock()
		}
	})
	took := time.Since(begin)
	cancel()
	wg.Wait()
	if killErr != nil {
		t.Fatalf("rolling kills: %v", killErr)
	}

	var failed []string
	var slowest time.Duration
	for _, r := range results {
		if r.err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", r.user, r.err))
		}
		slowest = max(slowest, r.took)
	}
	t.Logf("%d spawns and stops in %s (slowest spawn %s), %d replica kills", len(results), took.Round(time.Second), slowest.Round(time.Millisecond), kills.Load())
	if len(failed) > 0 {
		t.Errorf("%d of %d spawns failed:\n%s", len(failed), len(results), strings.Join(failed, "\n"))
	}
	if len(stopErrs) > 0 {
		t.Errorf("%d stops failed:\n%s", len(stopErrs), strings.Join(stopErrs, "\n"))
	}
	if kills.Load() < 3 {
		t.Errorf("only %d kills during the run: every replica should have been killed at least once", kills.Load())
	}
	if d := pods.duplicates(); len(d) > 0 {
		t.Errorf("duplicate pods (one user, several pods): %v", d)
	}
	if n := pods.count(); n != rollingSpawns {
		t.Errorf("%d notebook pods were created for %d spawns", n, rollingSpawns)
	}
	// Every server was stopped through the hub: any pod left is an orphan.
	left := orphans(t, st)
	if len(left) > 0 {
		t.Errorf("orphan pods (no hub server): %v", left)
	}
	var ft faultTable
	ft.add(fmt.Sprintf("rolling SIGKILL+restart of 3 replicas during %d spawns+stops", rollingSpawns), rollingSpawns,
		fmt.Sprintf("%d spawns failed, %d stops failed, %d orphan pods, %d duplicate pods", len(failed), len(stopErrs), len(left), len(pods.duplicates())), 0)
	ft.log(t)
}

// orphans are the namespace's notebook pods whose user the hub shows no server for.
func orphans(t *testing.T, st *stack) []string {
	t.Helper()
	ctx := context.Background()
	list, err := env.Client.CoreV1().Pods(st.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		user := p.Annotations["hub.jupyter.org/username"]
		srv, err := st.api.servers(ctx, user)
		if _, ok := srv[""]; err != nil || !ok {
			out = append(out, p.Name)
		}
	}
	return out
}
