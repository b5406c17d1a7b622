package poll

import (
	"container/list"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

	mu     sync.Mutex
	synced bool
	// kept is every kept event; each knows its index, so removal is a swap.
	kept    []*cachedEvent
	byPod   map[cache.ObjectName][]*cachedEvent
	orphans map[string]*list.Element // by event key; values are *orphan
	order   *list.List               // orphans, oldest first
	recent  map[cache.ObjectName]time.Time
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
		byPod:      map[cache.ObjectName][]*cachedEvent{},
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
	now := e.clock.Now()
	e.mu.Lock()
	had := e.findLocked(pod, ev.Name) >= 0
	keep := had || e.wantedLocked(pod, now)
	if keep {
		e.keepLocked(pod, ev)
	} else {
		e.addOrphanLocked(cache.MetaObjectToName(ev).String(), pod, ev, now)
	}
	e.mu.Unlock()
	if keep {
		e.changed(pod)
	}
	return nil
}

// findLocked returns the index of the kept event of pod named name in
// e.byPod[pod], or -1; e.mu must be held.
func (e *eventCache) findLocked(pod cache.ObjectName, name string) int {
	for i, ce := range e.byPod[pod] {
		if ce.is(pod, name) {
			return i
		}
	}
	return -1
}

// keepLocked keeps ev, replacing the kept event of that name; e.mu must be
// held.
func (e *eventCache) keepLocked(pod cache.ObjectName, ev *corev1.Event) {
	e.removeOrphanLocked(cache.MetaObjectToName(ev).String())
	evs := e.byPod[pod]
	ce := newCachedEvent(pod, ev, evs)
	if i := e.findLocked(pod, ev.Name); i >= 0 {
		ce.idx = evs[i].idx
		e.kept[ce.idx] = ce
		evs[i] = ce
		return
	}
	ce.idx = int32(len(e.kept))
	e.kept = append(e.kept, ce)
	e.byPod[pod] = append(evs, ce)
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

// unkeepLocked drops the kept event of pod named name and reports whether
// there was one; e.mu must be held.
func (e *eventCache) unkeepLocked(pod cache.ObjectName, name string) bool {
	i := e.findLocked(pod, name)
	if i < 0 {
		return false
	}
	evs := e.byPod[pod]
	e.dropLocked(evs[i])
	last := len(evs) - 1
	evs[i], evs[last] = evs[last], nil
	if last == 0 {
		delete(e.byPod, pod)
	} else {
		e.byPod[pod] = evs[:last]
	}
	return true
}

// dropLocked removes ce from e.kept; e.mu must be held.
func (e *eventCache) dropLocked(ce *cachedEvent) {
	last := len(e.kept) - 1
	moved := e.kept[last]
	e.kept[ce.idx], moved.idx = moved, ce.idx
	e.kept[last] = nil
	e.kept = e.kept[:last]
}

// Delete implements cache.ReflectorStore.
func (e *eventCache) Delete(obj any) error {
	ev, err := toEvent(obj)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.removeOrphanLocked(cache.MetaObjectToName(ev).String())
	pod, ok := involvedPod(ev)
	had := ok && e.unkeepLocked(pod, ev.Name)
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
	e.kept = nil
	e.byPod = map[cache.ObjectName][]*cachedEvent{}
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
		switch {
		case e.wantedLocked(pod, now):
			e.keepLocked(pod, ev)
			touched[pod] = struct{}{}
		case now.Sub(eventTime(ev)) < e.orphanTTL:
			// Possibly a pod created a moment ago that the pod cache
			// has not shown yet.
			e.addOrphanLocked(cache.MetaObjectToName(ev).String(), pod, ev, now)
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
			e.keepLocked(pod, o.ev)
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
	for pod, evs := range e.byPod {
		if e.wantedLocked(pod, now) {
			continue
		}
		for _, ce := range evs {
			e.dropLocked(ce)
		}
		delete(e.byPod, pod)
		dropped = append(dropped, pod)
	}
	e.mu.Unlock()
	for _, pod := range dropped {
		e.changed(pod)
	}
}

// eventsOf returns the kept events of pod, oldest first. Each call makes
// them anew from the compact copies kept.
func (e *eventCache) eventsOf(pod cache.ObjectName) []*corev1.Event {
	e.mu.Lock()
	evs := e.byPod[pod]
	all := make([]corev1.Event, len(evs))
	for i, ce := range evs {
		ce.fill(&all[i], pod)
	}
	e.mu.Unlock()
	out := make([]*corev1.Event, len(all))
	for i := range all {
		out[i] = &all[i]
	}
	sort.Slice(out, func(i, j int) bool { return eventBefore(out[i], out[j]) })
	return out
}

// newestOf returns the last of eventsOf(pod), or nil, making only that one
// event: the others are compared by their kept times (and on a tie by
// their names, as eventsOf does).
func (e *eventCache) newestOf(pod cache.ObjectName) *corev1.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var best *cachedEvent
	var bestAt time.Time
	for _, ce := range e.byPod[pod] {
		at := ce.orderTime()
		switch {
		case best == nil, at.After(bestAt):
		case at.Equal(bestAt) && ce.nameIn(pod) > best.nameIn(pod):
		default:
			continue
		}
		best, bestAt = ce, at
	}
	if best == nil {
		return nil
	}
	ev := new(corev1.Event)
	best.fill(ev, pod)
	return ev
}

// orderTime is eventTime of the event ce keeps, without making it.
func (ce *cachedEvent) orderTime() time.Time {
	switch {
	case ce.last != 0:
		return time.Unix(0, ce.last)
	case ce.rare != nil && ce.rare.series != nil && !ce.rare.series.LastObservedTime.IsZero():
		return ce.rare.series.LastObservedTime.Time
	case ce.rare != nil && !ce.rare.eventTime.IsZero():
		return ce.rare.eventTime.Time
	case ce.created != 0:
		return time.Unix(0, ce.created)
	}
	return time.Time{}
}

// nameIn is the event's name, that of pod's event ce keeps.
func (ce *cachedEvent) nameIn(pod cache.ObjectName) string {
	if ce.short {
		return pod.Name + "." + ce.name
	}
	return ce.name
}

// eventBefore is eventsOf's order: by eventTime, then by name.
func eventBefore(a, b *corev1.Event) bool {
	ta, tb := eventTime(a), eventTime(b)
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	return a.Name < b.Name
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

// cachedEvent is an event as the cache keeps it: what trimEvent keeps, in
// about a quarter of the memory of a corev1.Event and its strings (a pod
// started within the event TTL has four or more). The involved pod is the
// cache key, the strings events repeat (reasons, sources, field paths, most
// messages) are interned, and times are nanoseconds.
type cachedEvent struct {
	// name is the event's name, or when short only what follows
	// "<pod name>." (the scheduler's and the kubelet's names).
	name    string
	uid     [16]byte  // the event's UID when a canonical UUID (else rare.uid)
	podUID  types.UID // the involved pod's, shared with its other events
	message string

	reason, typ, fieldPath, component, controller handle

	created, first, last int64 // time.Time.UnixNano; 0 is the zero time
	// loc is the times' location (a decoded event's are all time.Local).
	loc  *time.Location
	rare *rareEventFields

	count int32
	idx   int32 // in eventCache.kept
	short bool
	// noInvolvedNS: the event named no involvedObject.namespace.
	noInvolvedNS bool
}

// rareEventFields are those that only events.k8s.io clients set, and a
// UID that is not a canonical UUID (fakes).
type rareEventFields struct {
	eventTime metav1.MicroTime
	series    *corev1.EventSeries
	uid       types.UID
	unpacked  bool // uid holds the event's UID
}

// handle is an interned string; the zero handle is "".
type handle struct{ h unique.Handle[string] }

func makeHandle(s string) handle {
	if s == "" {
		return handle{}
	}
	return handle{unique.Make(s)}
}

func (h handle) String() string {
	if h == (handle{}) {
		return ""
	}
	return h.h.Value()
}

// newCachedEvent makes the kept copy of ev, an event about pod; siblings
// are the pod's kept events, whose copy of the pod's UID it shares.
func newCachedEvent(pod cache.ObjectName, ev *corev1.Event, siblings []*cachedEvent) *cachedEvent {
	ce := &cachedEvent{
		name: ev.Name, podUID: ev.InvolvedObject.UID,
		reason: makeHandle(ev.Reason), typ: makeHandle(ev.Type), fieldPath: makeHandle(ev.InvolvedObject.FieldPath),
		component: makeHandle(ev.Source.Component), controller: makeHandle(ev.ReportingController),
		created: nanos(ev.CreationTimestamp.Time), first: nanos(ev.FirstTimestamp.Time), last: nanos(ev.LastTimestamp.Time),
		count: ev.Count, noInvolvedNS: ev.InvolvedObject.Namespace == "",
	}
	if rest, ok := strings.CutPrefix(ev.Name, pod.Name+"."); ok {
		ce.name, ce.short = rest, true
	}
	// A message that names the pod is its own; the rest ("Started
	// container notebook", a FailedScheduling verdict) repeat across pods.
	ce.message = ev.Message
	if !strings.Contains(ev.Message, pod.Name) {
		ce.message = intern(ev.Message)
	}
	for _, s := range siblings {
		if s.podUID == ce.podUID {
			ce.podUID = s.podUID
			break
		}
	}
	for _, t := range []time.Time{ev.LastTimestamp.Time, ev.FirstTimestamp.Time, ev.CreationTimestamp.Time} {
		if !t.IsZero() {
			ce.loc = t.Location()
			break
		}
	}
	uid, packed := packUUID(ev.UID)
	ce.uid = uid
	if !ev.EventTime.IsZero() || ev.Series != nil || !packed {
		ce.rare = &rareEventFields{eventTime: ev.EventTime, series: ev.Series}
		if !packed {
			ce.rare.uid, ce.rare.unpacked = ev.UID, true
		}
	}
	return ce
}

// packUUID packs a canonical (lower-case, hyphenated) UUID into 16 bytes.
func packUUID(u types.UID) ([16]byte, bool) {
	var out [16]byte
	if len(u) != 36 || u[8] != '-' || u[13] != '-' || u[18] != '-' || u[23] != '-' {
		return out, false
	}
	digits := string(u[0:8] + u[9:13] + u[14:18] + u[19:23] + u[24:])
	if strings.ToLower(digits) != digits {
		return out, false
	}
	if _, err := hex.Decode(out[:], []byte(digits)); err != nil {
		return [16]byte{}, false
	}
	return out, true
}

func (ce *cachedEvent) uidOf() types.UID {
	if ce.rare != nil && ce.rare.unpacked {
		return ce.rare.uid
	}
	h := hex.EncodeToString(ce.uid[:])
	return types.UID(h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:])
}

// is reports whether ce is pod's event named name.
func (ce *cachedEvent) is(pod cache.ObjectName, name string) bool {
	if !ce.short {
		return ce.name == name
	}
	return len(name) == len(pod.Name)+1+len(ce.name) && strings.HasPrefix(name, pod.Name) &&
		name[len(pod.Name)] == '.' && strings.HasSuffix(name, ce.name)
}

// fill writes the event ce keeps into ev, as trimEvent would have left it
// (its resourceVersion aside, which nothing reads).
func (ce *cachedEvent) fill(ev *corev1.Event, pod cache.ObjectName) {
	name := ce.nameIn(pod)
	involvedNS := pod.Namespace
	if ce.noInvolvedNS {
		involvedNS = ""
	}
	*ev = corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pod.Namespace, UID: ce.uidOf(), CreationTimestamp: ce.at(ce.created)},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: involvedNS, Name: pod.Name, UID: ce.podUID,
			FieldPath: ce.fieldPath.String()},
		Reason: ce.reason.String(), Message: ce.message, Type: ce.typ.String(), Count: ce.count,
		FirstTimestamp: ce.at(ce.first), LastTimestamp: ce.at(ce.last),
		Source:              corev1.EventSource{Component: ce.component.String()},
		ReportingController: ce.controller.String(),
	}
	if ce.rare != nil {
		ev.EventTime, ev.Series = ce.rare.eventTime, ce.rare.series
	}
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func (ce *cachedEvent) at(n int64) metav1.Time {
	if n == 0 {
		return metav1.Time{}
	}
	return metav1.NewTime(time.Unix(0, n).In(ce.loc))
}
