package lifecycle

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dsmlp/spawner/poll"
	"github.com/dsmlp/spawner/spawner"
)

// endedSpawn is a spawn this replica started and that a stop cancelled.
func endedSpawn(m *Manager, uid string) {
	key := Key{User: "alice"}
	sp := &spawn{key: key, ref: podRef{"ns1", "jupyter-alice"}, uid: types.UID(uid), settings: m.base, events: newEventLog(),
		started: time.Now(), cancel: func() {}}
	m.finish(sp, "", "Spawn cancelled")
	m.mu.Lock()
	m.spawns[key] = sp
	m.mu.Unlock()
}

// progressOf collects alice's progress until it ends or 10 s pass.
func progressOf(t *testing.T, m *Manager) []Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []Event
	if err := m.Progress(ctx, Key{User: "alice"}, func(e Event) error { got = append(got, e); return nil }); err != nil {
		t.Fatalf("progress: %v (events %q)", err, messages(got))
	}
	return got
}

// With two replicas, the hub's POST of a new start may go to one and its
// progress to the other, which still holds its own last spawn of the
// server, cancelled by the stop before: progress must follow the new pod,
// not replay that spawn's end.
func TestProgressFollowsANewerSpawnOfAnotherReplica(t *testing.T) {
	cfg, err := spawner.Parse([]byte("kubespawner:\n  namespace: ns1\n  start_timeout: 30\n"))
	if err != nil {
		t.Fatal(err)
	}
	newer := runningPod("ns1", "jupyter-alice", "new", "10.0.0.9")
	for _, tc := range []struct {
		name string
		// cached: this replica's cache already shows the newer pod; else
		// only the API server has it, and the cache shows it a moment later.
		cached bool
	}{{"in the cache", true}, {"only in the API server yet", false}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newFakeWatcher()
			m, err := New(fake.NewClientset(newer.DeepCopy()), cfg, w, Options{})
			if err != nil {
				t.Fatal(err)
			}
			endedSpawn(m, "old")
			running := poll.Status{State: poll.StateRunning, Pod: newer.DeepCopy()}
			if tc.cached {
				w.set("ns1", "jupyter-alice", running)
			} else {
				time.AfterFunc(300*time.Millisecond, func() { w.set("ns1", "jupyter-alice", running) })
			}
			got := progressOf(t, m)
			if len(got) == 0 {
				t.Fatal("no progress events")
			}
			for _, e := range got {
				if e.Failed {
					t.Fatalf("progress replayed the ended spawn: %q", messages(got))
				}
			}
			if last := got[len(got)-1]; !last.Ready || last.URL == "" {
				t.Fatalf("progress did not end ready with the newer pod's URL: %+v", got)
			}
		})
	}
}

// The same replica's ended spawn is still what progress tells when the
// server's pod is that spawn's own, or there is none.
func TestProgressReplaysTheEndOfItsOwnLastSpawn(t *testing.T) {
	cfg, err := spawner.Parse([]byte("kubespawner:\n  namespace: ns1\n  start_timeout: 30\n"))
	if err != nil {
		t.Fatal(err)
	}
	own := runningPod("ns1", "jupyter-alice", "old", "10.0.0.9")
	for _, tc := range []struct {
		name string
		pod  bool
	}{{"its pod", true}, {"no pod", false}} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			w := newFakeWatcher()
			if tc.pod {
				if _, err := client.CoreV1().Pods("ns1").Create(context.Background(), own.DeepCopy(), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				w.set("ns1", "jupyter-alice", poll.Status{State: poll.StateRunning, Pod: own.DeepCopy()})
			}
			m, err := New(client, cfg, w, Options{})
			if err != nil {
				t.Fatal(err)
			}
			endedSpawn(m, "old")
			got := progressOf(t, m)
			if len(got) != 1 || !got[0].Failed || got[0].Message != "Spawn cancelled" {
				t.Fatalf("progress = %q, want the ended spawn's failure", messages(got))
			}
		})
	}
}
