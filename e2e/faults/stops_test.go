package faults_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dsmlp/spawner/apiclient"
	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/poll"
)

const (
	evictedServers  = 100
	hubDownServers  = 50
	hubDownFor      = 60 * time.Second
	cutOffServers   = 10
	reactionTimeout = 3 * time.Minute
)

// spawnRunning spawns users through the hub and fails the test unless all are ready.
func spawnRunning(t *testing.T, st *stack, users []string) {
	t.Helper()
	begin := time.Now()
	for _, r := range st.api.spawnAll(context.Background(), users, spawnWorkers, nil) {
		if r.err != nil {
			t.Fatalf("spawning %s: %v", r.user, r.err)
		}
	}
	t.Logf("%d servers running in %s", len(users), time.Since(begin).Round(100*time.Millisecond))
}

// evictAll evicts the users' pods, workers at a time; after evicting
// `after` of them it calls during (e.g. a kill) once.
func evictAll(t *testing.T, st *stack, users []string, after int, during func()) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(users))
	for i, u := range users {
		if i == after && during != nil {
			during()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := harness.Evict(context.Background(), env.Client, st.ns, "jupyter-"+u); err != nil {
				errs <- err
			}
		}()
		if i%10 == 9 {
			wg.Wait()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// stopWorkers is spawnerd's number of stop-reaction workers
// (poll.DefaultWorkers).
const stopWorkers = poll.DefaultWorkers

// outcome checks that every user's stopped pod was deleted and reported to
// the hub exactly once, and returns what was lost for the table.
//
// killed names a replica SIGKILLed during the stops: a report it had sent
// when it died, but had not yet recorded by releasing the pod's finalizer,
// is sent again by the next leader (at least once, never lost). At most
// one such report per stop worker of the killed replica is in flight, so
// up to stopWorkers duplicates from it are tolerated, and counted.
func outcome(t *testing.T, st *stack, users []string, timeout time.Duration, killed ...string) (lost string) {
	t.Helper()
	ctx := context.Background()
	want := map[string]bool{}
	for _, u := range users {
		want[u] = true
	}
	var podsLeft, hubLeft []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		podsLeft, hubLeft = nil, nil
		list, err := env.Client.CoreV1().Pods(st.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, p := range list.Items {
			if u := p.Annotations["hub.jupyter.org/username"]; want[u] {
				podsLeft = append(podsLeft, p.Name)
			}
		}
		answered, _ := st.deletesByUser()
		for _, u := range users {
			if len(answered[u]) == 0 {
				hubLeft = append(hubLeft, u)
			}
		}
		return len(podsLeft) == 0 && len(hubLeft) == 0, nil
	})
	if err != nil {
		t.Errorf("after %s: %d pods not deleted %v, %d servers never reported to the hub %v", timeout, len(podsLeft), podsLeft, len(hubLeft), hubLeft)
	}
	// Late duplicates: give a replica that lost the Lease time to act wrongly.
	time.Sleep(5 * time.Second)
	answered, unanswered := st.deletesByUser()
	var dup, inFlight []string
	retries := 0
	for _, u := range users {
		if n := len(answered[u]); n > 1 {
			var from []string
			byKilled := false
			for _, c := range answered[u] {
				from = append(from, c.From)
				byKilled = byKilled || slices.Contains(killed, c.From)
			}
			d := fmt.Sprintf("%s×%d (%s)", u, n, strings.Join(from, ","))
			if n == 2 && byKilled {
				inFlight = append(inFlight, d)
			} else {
				dup = append(dup, d)
			}
		}
		retries += len(unanswered[u])
	}
	sort.Strings(dup)
	if len(dup) > 0 {
		t.Errorf("%d servers reported to the hub more than once: %v", len(dup), dup)
	}
	if len(inFlight) > stopWorkers {
		t.Errorf("%d servers reported again after the kill, more than the %d reports one replica can have in flight: %v", len(inFlight), stopWorkers, inFlight)
	} else if len(inFlight) > 0 {
		t.Logf("reported again after the kill (in flight when the replica died): %v", inFlight)
	}
	for _, u := range users {
		if err := st.api.waitGone(ctx, u, harness.Timeout); err != nil {
			t.Error(err)
		}
	}
	t.Logf("hub DELETE calls by spawnerd: %d answered users, %d calls the hub did not answer (retried)", len(answered), retries)
	return fmt.Sprintf("%d pods not deleted, %d not reported, %d reported twice (%d more in flight at the kill)", len(podsLeft), len(hubLeft), len(dup), len(inFlight))
}

// firstReaction is the first answered hub DELETE made after since by a
// replica other than not.
func firstReaction(st *stack, since time.Time, not string) (harness.Call, bool) {
	var first harness.Call
	found := false
	for _, c := range st.hubFront.Calls(nil) {
		if harness.ServerDeleteUser(c) == "" || c.From == not || c.At.Before(since) {
			continue
		}
		if !found || c.At.Before(first.At) {
			first, found = c, true
		}
	}
	return first, found
}

// TestLeaderKilledDuringEvictions: the leader is SIGKILLed while 100 pods
// are evicted; every pod is deleted and reported to the hub exactly once,
// but for the reports the leader had in flight when it died (see outcome).
func TestLeaderKilledDuringEvictions(t *testing.T) {
	needStopLease(t)
	st := newStack(t, 3)
	users := userNames("evict", evictedServers)
	spawnRunning(t, st, users)
	leader := st.leader(t)
	var killedAt time.Time
	evictAll(t, st, users, evictedServers/5, func() {
		if err := leader.Kill(context.Background()); err != nil {
			t.Fatal(err)
		}
		killedAt = time.Now()
	})
	lost := outcome(t, st, users, reactionTimeout, leader.Name)
	first, ok := firstReaction(st, killedAt, leader.Name)
	var takeover time.Duration
	if !ok {
		t.Error("no replica reacted after the leader died")
	} else {
		takeover = first.At.Sub(killedAt)
		t.Logf("leader %s killed; first reaction by %s after %s", leader.Name, first.From, takeover.Round(10*time.Millisecond))
	}
	var ft faultTable
	ft.add(fmt.Sprintf("leader SIGKILL during %d evictions", evictedServers), evictedServers, lost, takeover)
	ft.log(t)
	checkHistory(t, st, users, history.StopperEvicted)
}

// checkHistory reads the session history through the balancer: every
// user has exactly one session, ended by want, whichever replica (the
// killed leader or its successor) recorded it, and however often.
func checkHistory(t *testing.T, st *stack, users []string, want history.Stopper) {
	t.Helper()
	c, err := apiclient.New(st.lb.URL, apiclient.User{Name: "admin", Admin: true}, apiclient.SharedSecret(st.secret))
	if err != nil {
		t.Fatal(err)
	}
	wanted := map[string]bool{}
	for _, u := range users {
		wanted[u] = true
	}
	sessions := map[string]int{}
	wrong := 0
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, harness.Timeout, true, func(ctx context.Context) (bool, error) {
		clear(sessions)
		wrong = 0
		for s, err := range c.AllSessions(ctx, apiclient.SessionFilter{Since: st.started.Format(time.RFC3339)}) {
			if err != nil {
				return false, nil
			}
			if !wanted[s.User] {
				continue
			}
			sessions[s.User]++
			if s.Stopper != want {
				wrong++
			}
		}
		return len(sessions) == len(users) && wrong == 0, nil
	})
	doubled := 0
	for _, n := range sessions {
		if n > 1 {
			doubled++
		}
	}
	t.Logf("history: %d of %d servers recorded, %d ended otherwise than %s, %d with more than one session", len(sessions), len(users), wrong, want, doubled)
	if err != nil || doubled > 0 {
		t.Errorf("the history does not hold one %s session per server", want)
	}
}

// TestHubDownWhilePodsStop: the hub is down for 60 s while 50 pods stop;
// all 50 are reported when it is back. Without the stop Lease one replica
// runs (today every replica reacts).
func TestHubDownWhilePodsStop(t *testing.T) {
	n := 1
	if s.stopLease {
		n = 3
	}
	st := newStack(t, n)
	users := userNames("down", hubDownServers)
	spawnRunning(t, st, users)
	st.hub.Stop()
	down := time.Now()
	ctx := context.Background()
	for i, u := range users {
		pod := "jupyter-" + u
		var err error
		switch i % 3 {
		case 0:
			err = harness.Evict(ctx, env.Client, st.ns, pod)
		case 1:
			err = harness.TerminateContainer(ctx, env.Client, st.ns, pod, "notebook", 137, "OOMKilled")
		default:
			err = harness.MarkSucceeded(ctx, env.Client, st.ns, pod)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Until(down.Add(hubDownFor)))
	// The hub answers from when it listens, before StartAgain has seen it
	// ready: an answer is early only if it came before the restart began.
	restarting := time.Now()
	st.hub.StartAgain(t)
	back := time.Now()
	lost := outcome(t, st, users, reactionTimeout)
	answered, _ := st.deletesByUser()
	var latest time.Time
	for _, u := range users {
		for _, c := range answered[u] {
			if c.At.Before(restarting) {
				t.Errorf("%s reported while the hub was down?", u)
			}
			if c.At.After(latest) {
				latest = c.At
			}
		}
	}
	t.Logf("hub back → last of %d reported after %s", len(users), latest.Sub(back).Round(10*time.Millisecond))
	var ft faultTable
	ft.add(fmt.Sprintf("hub down %s while %d pods stop (%d replicas)", hubDownFor, hubDownServers, n), hubDownServers, lost, 0)
	ft.log(t)
}

// TestReplicaCutOff: the leader loses the API server and the hub (network
// disconnect; the balancer loses it too, so it is out of rotation as a
// Service endpoint whose probe fails), another replica takes over the
// stops, and it does not act on its stale view when it is back.
func TestReplicaCutOff(t *testing.T) {
	needStopLease(t)
	ctx := context.Background()
	st := newStack(t, 3)
	users := userNames("cut", cutOffServers)
	spawnRunning(t, st, users)
	leader := st.leader(t)
	if err := leader.Disconnect(ctx, s.net); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	if err := leader.backend.WaitReady(ctx, false, 30*time.Second); err != nil {
		t.Errorf("cut-off replica still ready: %v", err)
	}
	unready := time.Since(cut)
	t.Logf("%s cut off: unready after %s", leader.Name, unready.Round(10*time.Millisecond))
	evictAll(t, st, users, -1, nil)
	lost := outcome(t, st, users, reactionTimeout)
	first, ok := firstReaction(st, cut, leader.Name)
	var takeover time.Duration
	if ok {
		takeover = first.At.Sub(cut)
	}
	if err := leader.Connect(ctx, s.net); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	if err := leader.backend.WaitReady(ctx, true, harness.Timeout); err != nil {
		t.Errorf("reconnected replica never ready again: %v", err)
	}
	t.Logf("%s reconnected: ready after %s", leader.Name, time.Since(back).Round(10*time.Millisecond))
	time.Sleep(5 * time.Second)
	for _, c := range st.hubFront.Calls(nil) {
		if c.From == leader.Name && c.At.After(cut) && harness.ServerDeleteUser(c) != "" {
			t.Errorf("stale stop reaction by the cut-off replica after it came back: %s %s", c.Method, c.Path)
		}
	}
	var ft faultTable
	ft.add("leader cut off from API server and hub (network disconnect)", cutOffServers, lost, takeover)
	ft.log(t)
}

// TestFrozenReplicaAndAPIRestart: the leader is frozen (docker pause)
// while pods stop and servers spawn, then the API server restarts under
// more spawns and stops: nothing is lost.
func TestFrozenReplicaAndAPIRestart(t *testing.T) {
	n := 1
	if s.stopLease {
		n = 3
	}
	ctx := context.Background()
	st := newStack(t, n)
	pods := watchPods(t, st.ns)
	var ft faultTable
	first := userNames("frz", 10)
	spawnRunning(t, st, first)

	if s.stopLease {
		leader := st.leader(t)
		if err := leader.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		paused := time.Now()
		if err := leader.backend.WaitReady(ctx, false, 10*time.Second); err != nil {
			t.Error(err)
		}
		evictAll(t, st, first, -1, nil)
		more := st.api.spawnAll(ctx, userNames("frz-b", 10), spawnWorkers, nil)
		lost := outcome(t, st, first, reactionTimeout)
		took, ok := firstReaction(st, paused, leader.Name)
		if !ok {
			t.Error("no replica reacted while the leader was frozen")
		}
		if err := leader.Unpause(ctx); err != nil {
			t.Fatal(err)
		}
		if err := leader.backend.WaitReady(ctx, true, harness.Timeout); err != nil {
			t.Error(err)
		}
		failed := 0
		for _, r := range more {
			if r.err != nil {
				failed++
				t.Errorf("spawn while a replica was frozen: %s: %v", r.user, r.err)
			}
		}
		ft.add("leader frozen (docker pause) during 10 evictions and 10 spawns", 20, fmt.Sprintf("%s, %d spawns failed", lost, failed), max(0, took.At.Sub(paused)))
		first = nil
		for _, r := range more {
			first = append(first, r.user)
		}
	}

	// API server restart while more servers spawn, the first ones stop and
	// some stay running. A spawn asked for while the API server is down may
	// fail, with spawnerd's reason and no pod left; the servers that run
	// must stay, the stops must complete.
	keep := userNames("keep", 5)
	spawnRunning(t, st, keep)
	var wg sync.WaitGroup
	var restartErr error
	var restartTook time.Duration
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(500 * time.Millisecond)
		begin := time.Now()
		restartErr = env.RestartAPIServer(ctx)
		restartTook = time.Since(begin)
	}()
	second := userNames("api", 20)
	results := st.api.spawnAll(ctx, second, 4, nil)
	var stopErrs []error
	for _, u := range first {
		if err := st.api.stop(ctx, u); err != nil {
			stopErrs = append(stopErrs, err)
		}
	}
	wg.Wait()
	if restartErr != nil {
		t.Fatalf("restarting the API server: %v", restartErr)
	}
	var refused []string
	for _, r := range results {
		if r.err != nil {
			refused = append(refused, r.user)
			// A failed progress stream carries its reason; a refused start
			// answers the hub's API caller only "error", spawnerd's reason
			// is in the hub's log.
			why := r.reason
			if why == "" {
				line, ok := st.hub.WaitForLogLine(5*time.Second, "error starting "+r.user+"'s server", "spawnerd")
				if !ok {
					t.Errorf("spawn of %s failed with no reason from spawnerd: %v", r.user, r.err)
				}
				why = line
			}
			t.Logf("spawn during the API server restart failed: %s: %s", r.user, why)
		}
	}
	for _, err := range stopErrs {
		t.Errorf("stop across the API server restart: %v", err)
	}
	for _, u := range keep {
		srv, err := st.api.servers(ctx, u)
		if err != nil || !srv[""].Ready {
			t.Errorf("%s's server did not survive the API server restart: %+v %v", u, srv, err)
		}
		if _, err := env.Client.CoreV1().Pods(st.ns).Get(ctx, "jupyter-"+u, metav1.GetOptions{}); err != nil {
			t.Errorf("%s's pod did not survive the API server restart: %v", u, err)
		}
	}
	// A refused spawn is the hub's to retry: it must work now.
	for _, r := range st.api.spawnAll(ctx, refused, spawnWorkers, nil) {
		if r.err != nil {
			t.Errorf("respawn after the API server restart: %s: %v", r.user, r.err)
		}
	}
	for _, u := range append(second, keep...) {
		if err := st.api.stop(ctx, u); err != nil {
			t.Errorf("stop after the API server restart: %v", err)
		}
	}
	left := orphans(t, st)
	if len(left) > 0 {
		t.Errorf("orphan pods: %v", left)
	}
	if d := pods.duplicates(); len(d) > 0 {
		t.Errorf("duplicate pods: %v", d)
	}
	t.Logf("API server restart took %s", restartTook.Round(10*time.Millisecond))
	ft.add(fmt.Sprintf("API server restart during %d spawns and %d stops, %d running (%d replicas)", len(second), len(first), len(keep), n),
		len(second)+len(first)+len(keep),
		fmt.Sprintf("%d spawns failed with spawnerd's reason (then respawned), %d stops failed, %d running lost, %d orphan pods", len(refused), len(stopErrs), 0, len(left)), 0)
	ft.log(t)
}
