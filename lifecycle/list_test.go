package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dsmlp/spawner/spawner"
)

// TestListKeepsServers checks that every server List reports, kept or
// made anew, is what Server and the pod's newest event make of it, as the
// clock, the pod, its events and its spawn change; and that a kept
// report keeps its Rev exactly while nothing it was made of changed.
func TestListKeepsServers(t *testing.T) {
	cfg, err := spawner.Parse([]byte(answersConfig))
	if err != nil {
		t.Fatal(err)
	}
	alice, bob := servedPod(t, cfg, "alice", 1), servedPod(t, cfg, "bob", 2)
	m, client, w, clk := answersManager(t, cfg, alice, bob)
	ctx := context.Background()
	aliceKey := Key{User: "alice"}
	revs := map[Key]uint64{}
	// list checks List against Server, and whether each server's Rev
	// changed since the last list.
	list := func(what string, changed map[Key]bool) {
		t.Helper()
		got := m.List()
		if len(got) != len(changed) {
			t.Fatalf("%s: %d servers listed, want %d", what, len(got), len(changed))
		}
		for _, s := range got {
			key := Key{s.User, s.Server}
			want := m.Server(key, Hint{})
			want.LastEvent = m.newestEvent(want.Namespace, want.Pod)
			gotJSON, _ := json.Marshal(s)
			wantJSON, _ := json.Marshal(want)
			if string(gotJSON) != string(wantJSON) {
				t.Errorf("%s: %s listed as\n%s\nwant\n%s", what, key.User, gotJSON, wantJSON)
			}
			if s.Rev == 0 {
				t.Errorf("%s: %s's report was not kept", what, key.User)
			}
			if moved := s.Rev != revs[key]; moved != changed[key] {
				t.Errorf("%s: %s's Rev went from %d to %d, want changed %v", what, key.User, revs[key], s.Rev, changed[key])
			}
			revs[key] = s.Rev
		}
	}
	both := func(a, b bool) map[Key]bool { return map[Key]bool{aliceKey: a, {User: "bob"}: b} }
	list("first", both(true, true))
	list("again", both(false, false))
	clk.Step(61 * time.Second)
	list("a minute later", both(false, false))

	// An event about alice's pod: it is her newest.
	ev := kubeletEvent(alice, alice.Name+".1", "Pulled", testNow)
	events := client.CoreV1().Events("ns1")
	if _, err := events.Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	awaitEvent := func(count int32) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			e := w.NewestEvent("ns1", alice.Name)
			return e != nil && e.Count == count, nil
		}); err != nil {
			t.Fatalf("the event of count %d never reached the cache", count)
		}
	}
	awaitEvent(1)
	list("an event", both(true, false))
	ev.Count = 2
	if _, err := events.Update(ctx, ev, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	awaitEvent(2)
	list("the event again", both(true, false))

	// alice's pod changes: not ready any more.
	unready(t, client, w, alice.Name, "5000")
	list("the pod changed", both(true, false))

	// A spawn of bob's server in this process, then its end.
	sp := &spawn{key: Key{User: "bob"}, ref: podRef{"ns1", bob.Name}, uid: bob.UID, events: newEventLog()}
	m.mu.Lock()
	m.spawns[sp.key] = sp
	m.mu.Unlock()
	list("bob's spawn starting", both(false, true))
	m.finish(sp, "http://10.0.0.9:8888/user/bob/", "")
	list("bob's spawn ready", both(false, true))

	// bob's pod goes: his kept report with it.
	if err := client.CoreV1().Pods("ns1").Delete(ctx, bob.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	awaitCached(t, w, bob.Name, "")
	m.mu.Lock()
	delete(m.spawns, sp.key)
	m.mu.Unlock()
	list("bob's pod gone", map[Key]bool{aliceKey: false})
	m.list.mu.Lock()
	kept := len(m.list.kept)
	m.list.mu.Unlock()
	if kept != 1 {
		t.Errorf("%d reports kept, want alice's alone", kept)
	}
}

// kubeletEvent is a kubelet's event about pod, seen once at at.
func kubeletEvent(pod *corev1.Pod, name, reason string, at time.Time) *corev1.Event {
	return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Reason:         reason, Message: reason + " the notebook", Type: corev1.EventTypeNormal, Count: 1,
		LastTimestamp: metav1.NewTime(at), Source: corev1.EventSource{Component: "kubelet"}}
}

// BenchmarkList lists 2,000 running servers of a real informer cache, each
// with a started pod's four events, as the console does every second
// while one is open.
func BenchmarkList(b *testing.B) {
	const n = 2000
	cfg, err := spawner.Parse([]byte(answersConfig))
	if err != nil {
		b.Fatal(err)
	}
	pods := make([]*corev1.Pod, n)
	objs := make([]runtime.Object, 0, 5*n)
	for i := range pods {
		pods[i] = servedPod(b, cfg, fmt.Sprintf("user%05d", i), i)
		objs = append(objs, pods[i])
		for j, reason := range []string{"Scheduled", "Pulled", "Created", "Started"} {
			objs = append(objs, kubeletEvent(pods[i], fmt.Sprintf("%s.%016x", pods[i].Name, i*4+j), reason, testNow.Add(time.Duration(j)*time.Second)))
		}
	}
	m, _, w, _ := managerOf(b, cfg, objs)
	ctx := context.Background()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, pod := range pods {
			if ev := w.NewestEvent("ns1", pod.Name); ev == nil || ev.Reason != "Started" {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		b.Fatal("the events never reached the cache")
	}
	b.ReportAllocs()
	for b.Loop() {
		if got := m.List(); len(got) != n {
			b.Fatalf("%d servers listed, want %d", len(got), n)
		}
	}
}
