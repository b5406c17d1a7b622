package faults_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// podLog records every notebook pod the namespace ever had, through an
// informer (which survives an API server restart by relisting).
type podLog struct {
	mu   sync.Mutex
	uids map[string]map[types.UID]bool // pod name → UIDs seen
	// live: user → the user's pods that exist now; most: the most a user
	// ever had at once (a duplicate is a second live pod for one server).
	live map[string]map[types.UID]bool
	most map[string]int
}

func watchPods(t *testing.T, ns string) *podLog {
	t.Helper()
	l := &podLog{uids: map[string]map[types.UID]bool{}, live: map[string]map[types.UID]bool{}, most: map[string]int{}}
	f := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { l.seen(obj, false) },
		UpdateFunc: func(_, obj any) { l.seen(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			l.seen(obj, true)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	f.Start(stop)
	t.Cleanup(func() { close(stop); f.Shutdown() })
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		t.Fatal("pod informer never synced")
	}
	return l
}

func (l *podLog) seen(obj any, deleted bool) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.uids[p.Name] == nil {
		l.uids[p.Name] = map[types.UID]bool{}
	}
	l.uids[p.Name][p.UID] = true
	user := p.Annotations["hub.jupyter.org/username"]
	if l.live[user] == nil {
		l.live[user] = map[types.UID]bool{}
	}
	if deleted {
		delete(l.live[user], p.UID)
		return
	}
	l.live[user][p.UID] = true
	l.most[user] = max(l.most[user], len(l.live[user]))
}

// duplicates are the users that had more than one pod at the same time.
func (l *podLog) duplicates() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for user, n := range l.most {
		if n > 1 {
			out = append(out, fmt.Sprintf("%s×%d", user, n))
		}
	}
	return out
}

// count is how many distinct pods the namespace had.
func (l *podLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, uids := range l.uids {
		n += len(uids)
	}
	return n
}

// faultTable collects a test's rows for the note: fault, servers affected,
// what was lost, takeover time.
type faultTable struct {
	rows [][4]string
}

func (ft *faultTable) add(fault string, affected int, lost string, takeover time.Duration) {
	tk := "-"
	if takeover > 0 {
		tk = takeover.Round(10 * time.Millisecond).String()
	}
	ft.rows = append(ft.rows, [4]string{fault, fmt.Sprint(affected), lost, tk})
}

func (ft *faultTable) log(t *testing.T) {
	var b strings.Builder
	b.WriteString("\n| fault | servers affected | lost | takeover |\n|---|---|---|---|\n")
	for _, r := range ft.rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r[0], r[1], r[2], r[3])
	}
	t.Log(b.String())
}
