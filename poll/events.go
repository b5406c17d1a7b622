package poll

import (
	"container/list"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// eventCache is the store behind the event reflector. A SharedIndexInformer
// keeps every object it is sent and its transform cannot drop one, and a
// namespace's Pod events are mostly about pods that are not notebooks
// (kubespawner#913: hub OOM at 35K events). So events go through a client-go
// Reflector (the same LIST+WATCH, bookmarks and relist-on-410 an informer
// uses) into this store, which keeps only events of pods that are in the pod
// cache or were recently.
//
// An event that arrives before its pod reaches the pod cache (the two watches
// are independent) waits in a small bounded orphan buffer and is adopted when
// the pod appears.
type eventCache struct {
	live       func(cache.ObjectName) bool // the pod is in the pod cache
	changed    func(cache.ObjectName)      // called, unlocked, after a pod's events changed
	clock      clock.PassiveClock
	retain     time.Duration // keep events of a gone or expected pod this long
	orphanTTL  time.Duration
	maxOrphans int

	mu      sync.Mutex
	synced  bool
	kept    map[string]keptEvent // by event key
	byPod   map[cache.ObjectName]map[string]*corev1.Event
	orphans map[string]*list.Element // by event key; values are *orphan
	order   *list.List               // orphans, oldest first
	recent  map[cache.ObjectName]time.Time
}

type keptEvent struct {
	ev  *corev1.Event
	pod cache.ObjectName
}

type orphan struct {
	key string
	ev  *corev1.Event
	pod cache.ObjectName
	at  time.Time
}

func newEventCache(live func(cache.ObjectName) bool, changed func(cache.ObjectName), clk clock.PassiveClock) *eventCache {
	return &eventCache{
		live:       live,
		changed:    changed,
		clock:      clk,
		retain:     time.Hour, // the API server's default --event-ttl
		orphanTTL:  2 * time.Minute,
		maxOrphans: 1000,
		kept:       map[string]keptEvent{},
		byPod:      map[cache.ObjectName]map[string]*corev1.Event{},
		orphans:    map[string]*list.Element{},
		order:      list.New(),
		recent:     map[cache.ObjectName]time.Time{},
	}
}

// involvedPod returns the pod an event is about, or false for other kinds.
func involvedPod(ev *corev1.Event) (cache.ObjectName, bool) {
	// The field selector already asks for Pods; check again because fakes
	// and proxies may ignore field selectors.
	if ev.InvolvedObject.Kind != "Pod" || ev.InvolvedObject.Name == "" {
		return cache.ObjectName{}, false
	}
	ns := ev.InvolvedObject.Namespace
	if ns == "" {
		ns = ev.Namespace
	}
	return cache.NewObjectName(ns, ev.InvolvedObject.Name), true
}

func toEvent(obj any) (*corev1.Event, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	t, err := trimEvent(obj)
	if err != nil {
		return nil, err
	}
	ev, ok := t.(*corev1.Event)
	if !ok {
		return nil, fmt.Errorf("event cache: unexpected object %T", obj)
	}
	return ev, nil
}

// wantedLocked reports whether events of pod are kept; e.mu must be held.
func (e *eventCache) wantedLocked(pod cache.ObjectName, now time.Time) bool {
	if t, ok := e.recent[pod]; ok && now.Sub(t) < e.retain {
		return true
	}
	return e.live(pod)
}

// Add implements cache.ReflectorStore.
func (e *eventCache) Add(obj any) error { return e.put(obj) }

// Update implements cache.ReflectorStore.
func (e *eventCache) Update(obj any) error { return e.put(obj) }

func (e *eventCache) put(obj any) error {
	ev, err := toEvent(obj)
	if err != nil {
		return err
	}
	pod, ok := involvedPod(ev)
	if !ok {
		return nil
	}
	key := cache.MetaObjectToName(ev).String()
	now := e.clock.Now()
	e.mu.Lock()
	_, had := e.kept[key]
	keep := had || e.wantedLocked(pod, now)
	if keep {
		e.keepLocked(key, pod, ev)
	} else {
		e.addOrphanLocked(key, pod, ev, now)
	}
	e.mu.Unlock()
	if keep {
		e.changed(pod)
	}
	return nil
}

func (e *eventCache) keepLocked(key string, pod cache.ObjectName, ev *corev1.Event) {
	e.removeOrphanLocked(key)
	e.kept[key] = keptEvent{ev: ev, pod: pod}
	m := e.byPod[pod]
	if m == nil {
		m = map[string]*corev1.Event{}
		e.byPod[pod] = m
	}
	m[key] = ev
}

func (e *eventCache) addOrphanLocked(key string, pod cache.ObjectName, ev *corev1.Event, now time.Time) {
	e.removeOrphanLocked(key)
	e.orphans[key] = e.order.PushBack(&orphan{key: key, ev: ev, pod: pod, at: now})
	for e.order.Len() > e.maxOrphans {
		e.removeOrphanLocked(e.order.Front().Value.(*orphan).key)
	}
}

func (e *eventCache) removeOrphanLocked(key string) {
	if el, ok := e.orphans[key]; ok {
		e.order.Remove(el)
		delete(e.orphans, key)
	}
}

func (e *eventCache) unkeepLocked(key string) (cache.ObjectName, bool) {
	k, ok := e.kept[key]
	if !ok {
		return cache.ObjectName{}, false
	}
	delete(e.kept, key)
	if m := e.byPod[k.pod]; m != nil {
		delete(m, key)
		if len(m) == 0 {
			delete(e.byPod, k.pod)
		}
	}
	return k.pod, true
}

// Delete implements cache.ReflectorStore.
func (e *eventCache) Delete(obj any) error {
	ev, err := toEvent(obj)
	if err != nil {
		return err
	}
	key := cache.MetaObjectToName(ev).String()
	e.mu.Lock()
	e.removeOrphanLocked(key)
	pod, had := e.unkeepLocked(key)
	e.mu.Unlock()
	if had {
		e.changed(pod)
	}
	return nil
}

// Replace implements cache.ReflectorStore: the reflector's (re)list.
func (e *eventCache) Replace(items []any, _ string) error {
	now := e.clock.Now()
	touched := map[cache.ObjectName]struct{}{}
	e.mu.Lock()
	for pod := range e.byPod {
		touched[pod] = struct{}{}
	}
	e.kept = map[string]keptEvent{}
	e.byPod = map[cache.ObjectName]map[string]*corev1.Event{}
	e.orphans = map[string]*list.Element{}
	e.order.Init()
	for _, obj := range items {
		ev, err := toEvent(obj)
		if err != nil {
			e.mu.Unlock()
			return err
		}
		pod, ok := involvedPod(ev)
		if !ok {
			continue
		}
		key := cache.MetaObjectToName(ev).String()
		switch {
		case e.wantedLocked(pod, now):
			e.keepLocked(key, pod, ev)
			touched[pod] = struct{}{}
		case now.Sub(eventTime(ev)) < e.orphanTTL:
			// Possibly a pod created a moment ago that the pod cache
			// has not shown yet.
			e.addOrphanLocked(key, pod, ev, now)
		}
	}
	e.synced = true
	e.mu.Unlock()
	for pod := range touched {
		e.changed(pod)
	}
	return nil
}

// Resync implements cache.ReflectorStore; there is nothing to resync.
func (e *eventCache) Resync() error { return nil }

// Transformer implements cache.TransformingStore so that the reflector's
// watch-list buffer holds trimmed events too.
func (e *eventCache) Transformer() cache.TransformFunc { return trimEvent }

func (e *eventCache) hasSynced() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.synced
}

// podAdded adopts the orphans of a pod that just reached the pod cache.
func (e *eventCache) podAdded(pod cache.ObjectName) {
	adopted := false
	e.mu.Lock()
	for el := e.order.Front(); el != nil; {
		next := el.Next()
		if o := el.Value.(*orphan); o.pod == pod {
			e.keepLocked(o.key, pod, o.ev)
			adopted = true
		}
		el = next
	}
	e.mu.Unlock()
	if adopted {
		e.changed(pod)
	}
}

// remember keeps the events of pod for the retention time although it is not
// in the pod cache: it just went away, or its spawn is about to begin.
func (e *eventCache) remember(pod cache.ObjectName) {
	now := e.clock.Now()
	e.mu.Lock()
	e.recent[pod] = now
	e.mu.Unlock()
	e.podAdded(pod)
}

// sweep drops expired orphans, and the events of pods that are gone and past
// their retention time.
func (e *eventCache) sweep() {
	now := e.clock.Now()
	var dropped []cache.ObjectName
	e.mu.Lock()
	for el := e.order.Front(); el != nil; {
		next := el.Next()
		if o := el.Value.(*orphan); now.Sub(o.at) >= e.orphanTTL {
			e.removeOrphanLocked(o.key)
		}
		el = next
	}
	for pod, t := range e.recent {
		if now.Sub(t) >= e.retain {
			delete(e.recent, pod)
		}
	}
	for pod, m := range e.byPod {
		if e.wantedLocked(pod, now) {
			continue
		}
		for key := range m {
			delete(e.kept, key)
		}
		delete(e.byPod, pod)
		dropped = append(dropped, pod)
	}
	e.mu.Unlock()
	for _, pod := range dropped {
		e.changed(pod)
	}
}

// eventsOf returns the kept events of pod, oldest first.
func (e *eventCache) eventsOf(pod cache.ObjectName) []*corev1.Event {
	e.mu.Lock()
	m := e.byPod[pod]
	out := make([]*corev1.Event, 0, len(m))
	for _, ev := range m {
		out = append(out, ev)
	}
	e.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		ti, tj := eventTime(out[i]), eventTime(out[j])
		if !ti.Equal(tj) {
			return ti.Before(tj)
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// eventTime orders events as KubeSpawner does (lastTimestamp, else
// eventTime), falling back to the newer series time and the creation time.
func eventTime(ev *corev1.Event) time.Time {
	switch {
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case ev.Series != nil && !ev.Series.LastObservedTime.IsZero():
		return ev.Series.LastObservedTime.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	default:
		return ev.CreationTimestamp.Time
	}
}
