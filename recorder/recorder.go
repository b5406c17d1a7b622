// Package recorder writes the session history from what the cluster shows of
// notebook pods: the requester, creation, scheduling and readiness of each
// pod as the informer cache sees them, and its end, told by the stop
// reaction, the hub-requested stop, or the reservation engine, before the
// pod is let go. Every record is idempotent per pod UID and event kind, so
// replicas, retries and a failover's rescan never double one.
package recorder

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/poll"
	"github.com/dsmlp/spawner/serverid"
	"github.com/dsmlp/spawner/spawner"
)

// Store is where records go; *history.Store implements it.
type Store interface {
	Record(ctx context.Context, recs ...history.Record) error
	Recorded(ctx context.Context, uids []string) (map[string]map[history.EventKind]bool, error)
}

// Options configure a Recorder.
type Options struct {
	Store Store
	// AnnotationPrefix is the reservation engine's annotation prefix
	// (e.g. "galends/"), for the booking a pod runs under.
	AnnotationPrefix string
	// Events returns a pod's cached Kubernetes events, for the reservation
	// engine's stop events; nil: none.
	Events func(namespace, pod string) []*corev1.Event
	// Pods returns every cached notebook pod, for the rescan on taking the lead.
	Pods func() []*corev1.Pod
	// Synced reports that the pod cache holds its first LIST: the rescan
	// waits for it. nil: always synced.
	Synced func() bool
	// Owns says whether a pod is the server its identity names (see
	// poll.Options.Owns); nil owns all.
	Owns func(pod *corev1.Pod) (bool, string)
	// Elected makes the observer record only while SetLeading(true): the
	// replica that holds the stop Lease observes for all.
	Elected bool
	// WriteTimeout bounds a write that a stop waits for. Default 2 s.
	WriteTimeout time.Duration
	// MaxPending bounds the records waiting for the store while it is
	// unreachable; beyond it the oldest are dropped, with a log line.
	// Default 100,000.
	MaxPending int
	Logger     *zap.Logger
	Clock      clock.PassiveClock
}

// Recorder observes notebook pods and writes their sessions.
type Recorder struct {
	opts    Options
	log     *zap.Logger
	clock   clock.PassiveClock
	leading atomic.Bool
	// scanned: the rescan since taking the lead has read the cache. Until
	// then the pods' adds and updates are its to record: observed one by
	// one, a restart's 10,000 cached pods would each be written again.
	scanned atomic.Bool
	wake    chan struct{}
	rescan  chan struct{}

	mu      sync.Mutex
	pending []history.Record
	// seq counts the records ever queued, done those stored or dropped;
	// waiters are the Writes waiting for done to reach theirs.
	seq, done uint64
	waiters   []waiter
	// written are the kinds this process wrote (or found written) per pod
	// UID, so an unchanged pod costs no write.
	written map[string]kindSet
}

// kindSet is a set of history.EventKinds, one bit each (their index in
// history.EventKinds): a byte per session rather than a map, for 10,000
// pods at once.
type kindSet uint8

// kindBit is k's bit; 0 for a kind not in history.EventKinds, which is
// then never taken for written.
func kindBit(k history.EventKind) kindSet {
	if i := slices.Index(history.EventKinds, k); i >= 0 && i < 8 {
		return 1 << i
	}
	return 0
}

func (s kindSet) has(k history.EventKind) bool { b := kindBit(k); return b != 0 && s&b != 0 }

// New returns a Recorder; call Run to write.
func New(opts Options) (*Recorder, error) {
	if opts.Store == nil {
		return nil, errors.New("recorder: nil store")
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = 2 * time.Second
	}
	if opts.MaxPending == 0 {
		opts.MaxPending = 100_000
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	r := &Recorder{opts: opts, log: opts.Logger, clock: opts.Clock,
		wake: make(chan struct{}, 1), rescan: make(chan struct{}, 1), written: map[string]kindSet{}}
	// Not elected: no lead to take, so no rescan; observe from the start.
	r.scanned.Store(!opts.Elected)
	return r, nil
}

// SetLeading switches the observer on or off; taking the lead rescans every
// cached pod, so what happened while another replica led is recorded.
func (r *Recorder) SetLeading(leading bool) {
	if r.leading.Swap(leading) == leading || !leading {
		return
	}
	r.scanned.Store(false)
	r.askRescan()
}

func (r *Recorder) askRescan() {
	select {
	case r.rescan <- struct{}{}:
	default:
	}
}

func (r *Recorder) observing() bool { return !r.opts.Elected || r.leading.Load() }

// Handler is the pod informer handler that feeds the observer.
func (r *Recorder) Handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.observe(obj, false) },
		UpdateFunc: func(_, obj any) { r.observe(obj, false) },
		DeleteFunc: func(obj any) { r.observe(obj, true) },
	}
}

func (r *Recorder) observe(obj any, deleted bool) {
	if !r.observing() {
		return
	}
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if !deleted && !r.scanned.Load() {
		// The rescan reads this state from the cache; a deleted pod is
		// gone from it, so its end is recorded here.
		return
	}
	r.enqueue(r.recordsOf(pod, deleted)...)
	if deleted {
		// Nothing more will be recorded of it; a late repeat is a no-op.
		r.mu.Lock()
		delete(r.written, string(pod.UID))
		r.mu.Unlock()
	}
}

// recordsOf is every record the pod's state implies; deleted: the pod is
// gone and this is its last state.
func (r *Recorder) recordsOf(pod *corev1.Pod, deleted bool) []history.Record {
	id, ok := r.identity(pod)
	if !ok {
		return nil
	}
	var out []history.Record
	if by, at, ok := requestedBy(pod); ok {
		out = append(out, history.Record{Identity: id, Kind: history.EventRequested, At: at, By: by})
	}
	if !pod.CreationTimestamp.IsZero() {
		out = append(out, history.Record{Identity: id, Kind: history.EventCreated, At: pod.CreationTimestamp.Time})
	}
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue || c.LastTransitionTime.IsZero() {
			continue
		}
		switch {
		case c.Type == corev1.PodScheduled && pod.Spec.NodeName != "":
			out = append(out, history.Record{Identity: id, Kind: history.EventScheduled, At: c.LastTransitionTime.Time, Node: pod.Spec.NodeName})
		case c.Type == corev1.PodReady && pod.Status.Phase == corev1.PodRunning:
			out = append(out, history.Record{Identity: id, Kind: history.EventReady, At: c.LastTransitionTime.Time})
		}
	}
	info, stopped := poll.StopOf(pod)
	if deleted {
		info, stopped = poll.EndOf(pod), true
	}
	if stopped {
		out = append(out, r.ended(id, pod, info))
	}
	return r.unwritten(out)
}

// ended is the end record of a pod that stopped or went.
func (r *Recorder) ended(id history.Identity, pod *corev1.Pod, info poll.StopInfo) history.Record {
	var events []*corev1.Event
	if r.opts.Events != nil {
		events = r.opts.Events(pod.Namespace, pod.Name)
	}
	stopper, facts := Classify(pod, info, events)
	at := info.At
	if at.IsZero() {
		at = r.clock.Now()
	}
	return history.Record{Identity: id, Kind: history.EventEnded, At: at, Stopper: stopper, End: facts}
}

// identity reads a session's identity off its pod; false for pods that are
// not a server's own (no identity, or not where its config puts it).
func (r *Recorder) identity(pod *corev1.Pod) (history.Identity, bool) {
	user, server, ok := serverid.Of(pod)
	if !ok || pod.UID == "" {
		return history.Identity{}, false
	}
	if r.opts.Owns != nil {
		if owned, _ := r.opts.Owns(pod); !owned {
			return history.Identity{}, false
		}
	}
	id := history.Identity{UID: string(pod.UID), User: user, Server: server, Namespace: pod.Namespace, Pod: pod.Name,
		Profile:  pod.Annotations[serverid.AnnotationProfile],
		Course:   pod.Labels[spawner.LabelCourse],
		GPUClass: pod.Labels[spawner.LabelGPUClass],
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == poll.NotebookContainer {
			id.Image = c.Image
		}
	}
	if p := r.opts.AnnotationPrefix; p != "" {
		id.Reservation = pod.Annotations[p+"booking-reference"]
		id.ReservationKind = pod.Annotations[p+"reservation-kind"]
	}
	return id, true
}

// requestedBy reads serverid.AnnotationRequestedBy.
func requestedBy(pod *corev1.Pod) (history.Actor, time.Time, bool) {
	kind, name, at, ok := serverid.Requester(pod)
	return history.Actor{Kind: history.ActorKind(kind), Name: name}, at, ok
}

// unwritten drops records this process wrote or queued already.
func (r *Recorder) unwritten(recs []history.Record) []history.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := recs[:0]
	for _, rec := range recs {
		if r.written[rec.UID].has(rec.Kind) {
			continue
		}
		out = append(out, rec)
	}
	return out
}

// markLocked remembers records as written (or queued); r.mu is held.
func (r *Recorder) markLocked(recs []history.Record) {
	for _, rec := range recs {
		r.written[rec.UID] |= kindBit(rec.Kind)
	}
}

// forgetGone drops what is remembered of pods no longer cached.
func (r *Recorder) forgetGone() {
	if r.opts.Pods == nil {
		return
	}
	live := map[string]bool{}
	for _, p := range r.opts.Pods() {
		live[string(p.UID)] = true
	}
	r.forget(live)
}

// forget drops what is remembered of sessions whose pods are gone.
func (r *Recorder) forget(live map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid := range r.written {
		if !live[uid] {
			delete(r.written, uid)
		}
	}
}

// enqueue queues records for the writer and returns the sequence number
// its last record gets: once done reaches it, they are stored (or dropped).
func (r *Recorder) enqueue(recs ...history.Record) uint64 {
	if len(recs) == 0 {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.seq
	}
	r.mu.Lock()
	// Queued counts as written: the queue keeps them until the store has them.
	r.markLocked(recs)
	r.pending = append(r.pending, recs...)
	r.seq += uint64(len(recs))
	upTo := r.seq
	if over := len(r.pending) - r.opts.MaxPending; over > 0 {
		r.log.Error("session history: the store is behind; dropping the oldest records", zap.Int("dropped", over))
		r.pending = append(r.pending[:0:0], r.pending[over:]...)
		r.doneLocked(uint64(over))
	}
	r.mu.Unlock()
	r.wakeWriter()
	return upTo
}

func (r *Recorder) wakeWriter() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// doneLocked counts n more records as stored (or given up) and releases
// the writers waiting for them; r.mu is held.
func (r *Recorder) doneLocked(n uint64) {
	r.done += n
	kept := r.waiters[:0]
	for _, w := range r.waiters {
		if w.upTo <= r.done {
			close(w.ch)
			continue
		}
		kept = append(kept, w)
	}
	r.waiters = kept
}

// waiter is a Write waiting for its records to be stored.
type waiter struct {
	upTo uint64
	ch   chan struct{}
}

// Write stores records before it returns, for an actor that must know they
// are stored before it lets the pod go. Writes made at the same time go
// into one transaction (group commit), so a thousand stops at once cost a
// few transactions, not a thousand contending ones. After WriteTimeout it
// returns anyway; the records stay queued and are retried.
//
// The callers drop records already written or queued (unwritten): one the
// observer queued a moment ago may not be stored yet, so Write also waits
// for everything queued before it, even with no records of its own. The
// queue is written in order, so that is what the pod's records need.
func (r *Recorder) Write(ctx context.Context, recs ...history.Record) {
	w := waiter{ch: make(chan struct{})}
	r.mu.Lock()
	r.markLocked(recs)
	r.pending = append(r.pending, recs...)
	r.seq += uint64(len(recs))
	w.upTo = r.seq
	if w.upTo <= r.done {
		r.mu.Unlock()
		return
	}
	r.waiters = append(r.waiters, w)
	r.mu.Unlock()
	r.wakeWriter()
	t := time.NewTimer(r.opts.WriteTimeout)
	defer t.Stop()
	select {
	case <-w.ch:
	case <-ctx.Done():
	case <-t.C:
		fields := []zap.Field{zap.Duration("waited", r.opts.WriteTimeout)}
		if len(recs) > 0 {
			fields = append(fields, zap.String("user", recs[0].User), zap.String("server", recs[0].Server),
				zap.String("pod", recs[0].Pod), zap.String("namespace", recs[0].Namespace))
		}
		r.log.Warn("session history: the store did not answer in time; the records stay queued", fields...)
	}
}

// Stopped records a stop the stop reaction handles (poll.Options.OnStop):
// what the pod showed so far, and its end.
func (r *Recorder) Stopped(ctx context.Context, pod *corev1.Pod, info poll.StopInfo) {
	id, ok := r.identity(pod)
	if !ok {
		return
	}
	recs := r.recordsOf(pod, false)
	if _, stopped := poll.StopOf(pod); !stopped {
		recs = append(recs, r.ended(id, pod, info))
	}
	r.Write(ctx, recs...)
}

// StopRequested records a stop asked for through the hub (or by spawnerd at
// a start deadline) before the pod is deleted: who asked, and the end.
func (r *Recorder) StopRequested(ctx context.Context, pod *corev1.Pod, by history.Actor, stopper history.Stopper) {
	id, ok := r.identity(pod)
	if !ok {
		return
	}
	now := r.clock.Now()
	recs := r.recordsOf(pod, false)
	facts := history.EndFacts{}
	if info, stopped := poll.StopOf(pod); stopped {
		// It had ended already: that end stands (first record wins).
		recs = append(recs, r.ended(id, pod, info))
	} else {
		recs = append(recs, history.Record{Identity: id, Kind: history.EventEnded, At: now, Stopper: stopper, End: facts})
	}
	recs = append(recs, history.Record{Identity: id, Kind: history.EventStopRequested, At: now, By: by})
	r.Write(ctx, recs...)
}

// EngineStopped records the reservation engine's stop of a pod, before its
// delete: reason is the engine's event reason (Preempted, ...).
func (r *Recorder) EngineStopped(ctx context.Context, pod *corev1.Pod, reason, message string) {
	stopper, ok := EngineStopper(reason)
	if !ok {
		return
	}
	id, ok := r.identity(pod)
	if !ok {
		return
	}
	recs := r.recordsOf(pod, false)
	if _, stopped := poll.StopOf(pod); !stopped {
		recs = append(recs, history.Record{Identity: id, Kind: history.EventEnded, At: r.clock.Now(), Stopper: stopper,
			End: history.EndFacts{Reason: reason, Message: message}})
	}
	r.Write(ctx, recs...)
}

// Run writes queued records in batches until ctx is done, retrying a
// failed batch with backoff, and rescans the cache on taking the lead.
func (r *Recorder) Run(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	sweep := time.NewTicker(10 * time.Minute)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			r.flush(context.Background())
			return nil
		case <-r.rescan:
			switch {
			case !r.observing():
			case r.opts.Synced != nil && !r.opts.Synced():
				// Not blocking the writer: a stop's Write may wait.
				time.AfterFunc(50*time.Millisecond, r.askRescan)
			default:
				r.rescanPods(ctx)
			}
			continue
		case <-sweep.C:
			r.forgetGone()
			continue
		case <-r.wake:
		}
		if r.gather(ctx); ctx.Err() != nil {
			r.flush(context.Background())
			return nil
		}
		for {
			err := r.flushOnce(ctx)
			if err == nil {
				backoff = 100 * time.Millisecond
				break
			}
			r.log.Warn("session history: write failed, will retry", zap.Error(err), zap.Duration("backoff", backoff))
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
		}
	}
}

// maxBatch bounds one transaction.
const maxBatch = 500

// gatherWindow is how long the writer lets observed records gather before
// it writes them, when no Write waits: in a spawn storm every pod update
// queues records, and one transaction for many of them costs little more
// than one for a few (SQLite compiles each statement per transaction).
const gatherWindow = 100 * time.Millisecond

// gather waits up to gatherWindow for more records, and not at all once a
// Write waits or a full batch is queued.
func (r *Recorder) gather(ctx context.Context) {
	t := time.NewTimer(gatherWindow)
	defer t.Stop()
	for !r.urgent() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case <-r.wake:
		}
	}
}

// urgent reports whether a Write waits or a full batch is queued.
func (r *Recorder) urgent() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.waiters) > 0 || len(r.pending) >= maxBatch
}

// flushOnce writes what is pending, a batch at a time; a failed batch goes
// back to the front of the queue.
func (r *Recorder) flushOnce(ctx context.Context) error {
	for {
		r.mu.Lock()
		n := min(len(r.pending), maxBatch)
		batch := append([]history.Record(nil), r.pending[:n]...)
		r.pending = r.pending[n:]
		if len(r.pending) == 0 {
			// A rescan queues a record per pod and kind; its array
			// (350 B a record) need not outlive the queue.
			r.pending = nil
		}
		r.mu.Unlock()
		if n == 0 {
			return nil
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := r.opts.Store.Record(wctx, batch...)
		cancel()
		if err != nil {
			r.mu.Lock()
			r.pending = append(batch, r.pending...)
			r.mu.Unlock()
			return err
		}
		r.mu.Lock()
		r.markLocked(batch)
		r.doneLocked(uint64(n))
		r.mu.Unlock()
	}
}

// flush makes a last attempt at what is pending, on shutdown.
func (r *Recorder) flush(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := r.flushOnce(ctx); err != nil {
		r.mu.Lock()
		n := len(r.pending)
		r.mu.Unlock()
		r.log.Error("session history: records not written at shutdown", zap.Int("records", n), zap.Error(err))
	}
}

// rescanPods records every cached pod's state, skipping what the store has
// already (asked once for all of them), and forgets gone pods.
func (r *Recorder) rescanPods(ctx context.Context) {
	// Updates from now on are observed: they may repeat what the scan
	// records (a no-op), but none falls between the two.
	r.scanned.Store(true)
	if r.opts.Pods == nil {
		return
	}
	pods := r.opts.Pods()
	uids := make([]string, 0, len(pods))
	live := make(map[string]bool, len(pods))
	for _, p := range pods {
		uids = append(uids, string(p.UID))
		live[string(p.UID)] = true
	}
	r.forget(live)
	if done, err := r.opts.Store.Recorded(ctx, uids); err == nil {
		r.mu.Lock()
		// Keyed by the cached pods' own UID strings, not the store's copies.
		for _, uid := range uids {
			for k := range done[uid] {
				r.written[uid] |= kindBit(k)
			}
		}
		r.mu.Unlock()
	} else {
		r.log.Warn("session history: reading what is recorded failed; recording every pod again", zap.Error(err))
	}
	var recs []history.Record
	for _, p := range pods {
		recs = append(recs, r.recordsOf(p, false)...)
	}
	r.log.Info("session history: rescanned the pod cache", zap.Int("pods", len(pods)), zap.Int("records", len(recs)))
	r.enqueue(recs...)
}
