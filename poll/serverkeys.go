package poll

import (
	"slices"
	"sync"

	"github.com/dsmlp/spawner/serverid"
)

// serverKeys finds the cached pods of a server by its serverid.LabelKey.
// The pod handlers keep it, in the informer's order, so it follows the
// store as the work queue does. It replaces a client-go index, which keeps
// a set (a map of its own) for every value: with one pod per server key
// that was about 400 bytes a pod; here it is one map slot and a one-element
// slice.
type serverKeys struct {
	mu sync.RWMutex
	m  map[string][]*cachedPod
}

func newServerKeys() *serverKeys { return &serverKeys{m: map[string][]*cachedPod{}} }

// set files pod under its key in place of an older object of the same pod
// (same namespace and name), or removes that pod when pod is nil; old is
// the object it replaces (nil on an add). A changed label moves it.
func (s *serverKeys) set(old, pod *cachedPod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old != nil {
		if k := old.Labels[serverid.LabelKey]; k != "" && (pod == nil || pod.Labels[serverid.LabelKey] != k) {
			s.removeLocked(k, old)
		}
	}
	if pod == nil {
		return
	}
	k := pod.Labels[serverid.LabelKey]
	if k == "" {
		return
	}
	pods := s.m[k]
	for i, p := range pods {
		if p.Namespace == pod.Namespace && p.Name == pod.Name {
			pods[i] = pod
			return
		}
	}
	s.m[k] = append(pods, pod)
}

func (s *serverKeys) removeLocked(k string, pod *cachedPod) {
	pods := slices.DeleteFunc(s.m[k], func(p *cachedPod) bool {
		return p.Namespace == pod.Namespace && p.Name == pod.Name
	})
	if len(pods) == 0 {
		delete(s.m, k)
		return
	}
	s.m[k] = pods
}

// remove drops the pod (by namespace and name) from its key.
func (s *serverKeys) remove(pod *cachedPod) {
	k := pod.Labels[serverid.LabelKey]
	if k == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeLocked(k, pod)
}

// of returns a copy of the pods of key.
func (s *serverKeys) of(key string) []*cachedPod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.m[key])
}

// only returns the version of key's pod when it is the only one, and how
// many there are.
func (s *serverKeys) only(key string) (PodVersion, int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	pods := s.m[key]
	if len(pods) != 1 {
		return PodVersion{}, len(pods)
	}
	return pods[0].version(), 1
}
