package faults_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsmlp/spawner/apiclient"
	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/lifecycle"
)

// TestFaultHelpers drives each container fault against three replicas
// while a client keeps calling spawnerd through the balancer: the faulty
// replica leaves the rotation, comes back, and no call goes unanswered.
// It needs nothing spawnerd does not have today.
func TestFaultHelpers(t *testing.T) {
	ctx := context.Background()
	st := newStack(t, 3)
	stopLoad := make(chan struct{})
	var calls, failures atomic.Int64
	var lastFailure atomic.Value
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client, err := apiclient.New(st.lb.URL, apiclient.User{}, apiclient.SharedSecret(st.secret),
				apiclient.WithHTTPClient(&http.Client{Timeout: 30 * time.Second}))
			if err != nil {
				t.Error(err)
				return
			}
			for i := 0; ; i++ {
				select {
				case <-stopLoad:
					return
				default:
				}
				user := fmt.Sprintf("load%d-%d", w, i%50)
				_, err := client.As(apiclient.User{Name: user}).Poll(ctx, user, "", lifecycle.Hint{})
				calls.Add(1)
				if err != nil {
					failures.Add(1)
					lastFailure.Store(err.Error())
					continue
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	var ft faultTable
	step := func(name string, r *replica, fault, heal func(context.Context) error) {
		t.Helper()
		before := r.backend.Requests()
		begin := time.Now()
		if err := fault(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.backend.WaitReady(ctx, false, 10*time.Second); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		out := time.Since(begin)
		if err := heal(ctx); err != nil {
			t.Fatal(err)
		}
		healed := time.Now()
		if err := r.backend.WaitReady(ctx, true, harness.Timeout); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, r.Log())
		}
		back := time.Since(healed)
		// Serving again: it answers its share of the calls.
		time.Sleep(time.Second)
		if r.backend.Requests() == before {
			t.Errorf("%s: %s answered no call after it was back", name, r.Name)
		}
		t.Logf("%s on %s: out of rotation after %s, back %s after the repair", name, r.Name, out.Round(10*time.Millisecond), back.Round(10*time.Millisecond))
		ft.add(fmt.Sprintf("%s of 1 of 3 replicas (balancer: out %s, back %s)", name, out.Round(10*time.Millisecond), back.Round(10*time.Millisecond)), 0, "no call (see below)", 0)
	}
	time.Sleep(time.Second)
	r0, r1, r2 := st.replicas[0], st.replicas[1], st.replicas[2]
	step("SIGKILL + start", r0, r0.Kill, r0.Start)
	step("pause + unpause", r1, r1.Pause, r1.Unpause)
	step("network disconnect + connect", r2, func(ctx context.Context) error { return r2.Disconnect(ctx, s.net) },
		func(ctx context.Context) error { return r2.Connect(ctx, s.net) })
	close(stopLoad)
	wg.Wait()
	t.Logf("%d calls through the balancer during the faults, %d unanswered", calls.Load(), failures.Load())
	if failures.Load() > 0 {
		t.Errorf("%d of %d calls failed (last: %v)", failures.Load(), calls.Load(), lastFailure.Load())
	}
	if calls.Load() < 100 {
		t.Errorf("only %d calls made", calls.Load())
	}
	ft.log(t)
}
