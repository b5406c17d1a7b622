package lifecycle

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsmlp/spawner/poll"
)

// endedSpawnManager is a manager whose API server holds objects and whose
// last spawn of alice's server, of pod UID uid, a stop cancelled.
func endedSpawnManager(t *testing.T, uid string, objects ...runtime.Object) (*Manager, *fakeWatcher) {
	t.Helper()
	m, _, w := newManagerWith(t, "kubespawner:\n  namespace: ns1\n  start_timeout: 30\n", objects...)
	key := Key{User: "alice"}
	sp := &spawn{key: key, ref: podRef{"ns1", "jupyter-alice"}, uid: types.UID(uid), settings: m.base, events: newEventLog(),
		started: time.Now(), cancel: func() {}}
	m.finish(sp, "", "Spawn cancelled")
	m.mu.Lock()
	m.spawns[key] = sp
	m.mu.Unlock()
	return m, w
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
	newer := runningPod("ns1", "jupyter-alice", "new", "10.0.0.9")
	for _, tc := range []struct {
		name string
		// cached: this replica's cache already shows the newer pod; else
		// only the API server has it, and the cache shows it a moment later.
		cached bool
	}{{"in the cache", true}, {"only in the API server yet", false}} {
		t.Run(tc.name, func(t *testing.T) {
			m, w := endedSpawnManager(t, "old", newer.DeepCopy())
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
	own := runningPod("ns1", "jupyter-alice", "old", "10.0.0.9")
	for _, tc := range []struct {
		name string
		pod  bool
	}{{"its pod", true}, {"no pod", false}} {
		t.Run(tc.name, func(t *testing.T) {
			var objects []runtime.Object
			if tc.pod {
				objects = append(objects, own.DeepCopy())
			}
			m, w := endedSpawnManager(t, "old", objects...)
			if tc.pod {
				w.set("ns1", "jupyter-alice", poll.Status{State: poll.StateRunning, Pod: own.DeepCopy()})
			}
			got := progressOf(t, m)
			if len(got) != 1 || !got[0].Failed || got[0].Message != "Spawn cancelled" {
				t.Fatalf("progress = %q, want the ended spawn's failure", messages(got))
			}
		})
	}
}
