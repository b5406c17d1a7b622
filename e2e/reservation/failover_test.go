package reservation_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/gpucontroller"
	"github.com/dsmlp/spawner/reservationstore"
)

// replica is one leader-elected engine with a client that can be cut off
// from the API server, as a partitioned node would be.
type replica struct {
	id     string
	ctl    *gpucontroller.Controller
	cut    *atomic.Bool
	cancel context.CancelFunc
	done   chan struct{}
}

const failoverLease = "failover-engine"

func startReplica(t *testing.T, id string) *replica {
	t.Helper()
	r := &replica{id: id, cut: &atomic.Bool{}, done: make(chan struct{})}
	rc := rest.CopyConfig(env.Config)
	rc.QPS, rc.Burst = 100, 200
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return harness.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
			if r.cut.Load() {
				return nil, errors.New("replica " + id + " is cut off from the API server")
			}
			return rt.RoundTrip(req)
		})
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	r.ctl, err = gpucontroller.New(client, reservationstore.New(dyn, time.Minute), gpucontroller.Options{
		Config: engineConfig(), Namespace: ns, Name: failoverLease, Identity: id,
		LeaderElection: true, Tick: time.Second, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { defer close(r.done); _ = r.ctl.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

// stop shuts the replica down as SIGTERM would: the Lease is released.
func (r *replica) stop() {
	r.cancel()
	<-r.done
}

func leaseHolder(t *testing.T) string {
	t.Helper()
	l, err := env.Client.CoordinationV1().Leases(ns).Get(context.Background(), failoverLease, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// waitLeader waits until r decides and holds the Lease, and says how long
// that took.
func waitLeader(t *testing.T, r *replica, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, within, true, func(context.Context) (bool, error) {
		return r.ctl.Leading() && leaseHolder(t) == r.id, nil
	})
	if err != nil {
		t.Fatalf("replica %s did not take the lead within %s (holder %q)", r.id, within, leaseHolder(t))
	}
	return time.Since(start)
}

// TestLeaderFailover runs two replicas of the engine on one coordination
// Lease: exactly one decides at any instant; a replica that shuts down
// hands over within the retry period; one cut off from the API server
// stops deciding (renew deadline 10 s) before the other may take over
// (lease 15 s). GPU pods created across both handovers are admitted with
// exactly one lease each.
func TestLeaderFailover(t *testing.T) {
	n := env.Namespace(t)
	a := startReplica(t, "a")
	waitLeader(t, a, waitFor)
	b := startReplica(t, "b")

	// Sample every replica for the whole test: never two leaders.
	var (
		mu   sync.Mutex
		reps = []*replica{a, b}
		both atomic.Int64
	)
	sampling, stopSampling := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampling.Err() == nil {
			leading := 0
			mu.Lock()
			for _, r := range reps {
				if r.ctl.Leading() {
					leading++
				}
			}
			mu.Unlock()
			if leading > 1 {
				both.Add(1)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	var uids []string
	admitOne := func(name string) {
		uids = append(uids, string(create(t, n, gpuPod(name, "misc", 1)).UID))
		waitAdmitted(t, n, name, "misc")
	}
	admitOne("f1")
	// b is synced and following, not deciding.
	time.Sleep(3 * time.Second)
	if b.ctl.Leading() || !b.ctl.HasSynced() {
		t.Fatalf("follower b: leading %v, synced %v", b.ctl.Leading(), b.ctl.HasSynced())
	}

	// 1. a shuts down and releases the Lease: b takes over at its next retry.
	a.stop()
	handover := waitLeader(t, b, 10*time.Second)
	admitOne("f2")

	// 2. a comes back (as a new process) and follows; then b is cut off.
	a2 := startReplica(t, "a2")
	mu.Lock()
	reps = append(reps, a2)
	mu.Unlock()
	time.Sleep(3 * time.Second)
	if a2.ctl.Leading() {
		t.Fatal("a restarted replica took the lead from a healthy leader")
	}
	b.cut.Store(true)
	cutAt := time.Now()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return !b.ctl.Leading(), nil
	}); err != nil {
		t.Fatal("the cut-off replica kept deciding")
	}
	steppedDown := time.Since(cutAt)
	if a2.ctl.Leading() {
		t.Fatalf("a2 led before b stepped down (%s after the cut)", steppedDown)
	}
	takeover := waitLeader(t, a2, 30*time.Second) + steppedDown
	admitOne("f3")
	b.cut.Store(false)
	time.Sleep(3 * time.Second)
	if b.ctl.Leading() {
		t.Error("b, reconnected, took the lead back from a healthy leader")
	}
	stopSampling()
	<-sampled

	t.Logf("handover on shutdown %s; cut-off leader stepped down after %s, new leader after %s",
		handover.Round(time.Millisecond), steppedDown.Round(time.Millisecond), takeover.Round(time.Millisecond))
	if both.Load() > 0 {
		t.Errorf("two replicas were deciding at once in %d samples", both.Load())
	}
	for i, uid := range uids {
		if l := leasesOf(uid); len(l) != 1 {
			t.Errorf("pod f%d has %d leases, want 1: %+v", i+1, len(l), l)
		}
	}
}
