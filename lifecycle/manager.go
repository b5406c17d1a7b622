// Package lifecycle carries out spawns and stops: it creates a server's
// objects idempotently, follows the pod until it is ready (recording
// KubeSpawner-style progress), and deletes it on stop.
package lifecycle

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/poll"
	"github.com/dsmlp/spawner/reservation"
	"github.com/dsmlp/spawner/serverid"
	"github.com/dsmlp/spawner/sparkcluster"
	"github.com/dsmlp/spawner/spawner"
)

// Watcher is the informer cache the manager reads; *poll.Watcher implements it.
type Watcher interface {
	Status(namespace, pod string) poll.Status
	Events(namespace, pod string) []*corev1.Event
	Subscribe(namespace, pod string) (<-chan struct{}, func())
	ExpectStop(namespace, pod string)
	ForgetStop(namespace, pod string)
	LastStop(namespace, pod string) (poll.StopInfo, bool)
	// PodMetas are the cached pods' metadata, NewestEvent a pod's newest
	// event (the last of Events): what List reads of every pod.
	PodMetas() []*metav1.ObjectMeta
	NewestEvent(namespace, pod string) *corev1.Event
	PodsOf(serverKey string) []*corev1.Pod
}

// Sentinel errors; hubapi maps them to HTTP statuses.
var (
	// ErrConflict: the deterministic name is taken by an object that is not this server's.
	ErrConflict = errors.New("name taken by another object")
	// ErrQuota: the namespace's quota refuses the object.
	ErrQuota = errors.New("quota exceeded")
	// ErrNotFound: no such server.
	ErrNotFound = errors.New("no such server")
)

// Key names a hub server.
type Key struct{ User, Server string }

// Manager runs spawns and stops. Create it with New.
type Manager struct {
	client  kubernetes.Interface
	cfg     *spawner.Config
	base    *spawner.Settings
	watcher Watcher
	log     *zap.Logger
	clock   clock.WithTicker
	metrics *Metrics
	gate    string         // scheduling gate for GPU pods; empty: none
	res     Reservations   // nil without the reservation engine
	loc     *time.Location // for times in progress messages
	// spark are the Spark clusters; noSpark without them in the configuration.
	spark SparkClusters
	rec   Recorder
	pods  PodCreator
	hist  History // nil without a session history
	// recent is how long List keeps a stopped server; prefix the engine's
	// annotation prefix.
	recent time.Duration
	prefix string

	// settings caches the settings of pods' user_options.
	settings settingsCache

	mu     sync.Mutex
	spawns map[Key]*spawn
	// observed follow spawns another replica started, for progress.
	observed map[Key]*spawn

	list *listKept
}

type podRef struct{ namespace, name string }

// spawn is one start in progress or just finished.
type spawn struct {
	key      Key
	ref      podRef
	uid      types.UID
	settings *spawner.Settings
	events   *eventLog
	started  time.Time
	cancel   context.CancelFunc
	// pvc is the PVC this spawn ensured (storage_pvc_ensure), "" if none:
	// the state's pvc_name, as KubeSpawner's get_state reports it only once
	// the PVC is known to exist.
	pvc string
	// sparkSeen is followed by follow alone.
	sparkSeen sparkcluster.Milestones
	// observer: another replica started this spawn; this one only tells
	// its progress and leaves the pod alone.
	observer bool

	mu     sync.Mutex
	done   bool
	failed string
	url    string
}

func (s *spawn) result() (done bool, url, failed string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done, s.url, s.failed
}

// Options are the manager's collaborators.
type Options struct {
	Logger  *zap.Logger
	Clock   clock.WithTicker
	Metrics *Metrics
	// SchedulingGate, when set, is put on every GPU pod (one with a
	// gpu-class label) at create, so kube-scheduler does not try it until
	// the reservation engine's admission PATCH removes the gate. It trades
	// the scheduler's FailedScheduling event for less scheduler work at
	// very large pending counts; the reservation events still explain the
	// wait.
	SchedulingGate string
	// Reservations, when set, is the GPU reservation engine's state; a
	// waiting GPU spawn's progress reads it to say when a GPU could be free.
	Reservations Reservations
	// Location renders times in progress messages. Default time.Local.
	Location *time.Location
	// Spark, when set, runs the Spark clusters; otherwise New makes a
	// sparkcluster.Reconciler if the configuration can declare one.
	Spark SparkClusters
	// Recorder, when set, records requested stops in the session history
	// before the pod is deleted.
	Recorder Recorder
	// History, when set, answers for servers whose pod is gone: why the
	// last session ended, after a restart and on every replica.
	History History
	// RecentStops is how long a stopped server stays in List, with its
	// reason, after its pod is gone. Default 1 h.
	RecentStops time.Duration
	// AnnotationPrefix is the reservation engine's annotation prefix, for
	// the booking and guarantee status of GPU pods.
	AnnotationPrefix string
	// Pods, when set, creates the notebook pods; *kubeclient.PodCreator
	// implements it, reading back the metadata alone. Default: the
	// clientset's typed create.
	Pods PodCreator
}

// PodCreator creates a pod and returns the stored pod's metadata (its UID).
type PodCreator interface {
	Create(ctx context.Context, pod *corev1.Pod) (metav1.Object, error)
}

// typedCreator creates pods through a clientset, which reads back the
// whole pod.
type typedCreator struct{ client kubernetes.Interface }

func (c typedCreator) Create(ctx context.Context, pod *corev1.Pod) (metav1.Object, error) {
	return c.client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
}

// Recorder records stops in the session history; *recorder.Recorder
// implements it.
type Recorder interface {
	StopRequested(ctx context.Context, pod *corev1.Pod, by history.Actor, stopper history.Stopper)
}

// History is the session history's reading side; *history.Store implements it.
type History interface {
	Last(ctx context.Context, user, server string) (history.Session, error)
	List(ctx context.Context, f history.Filter, p history.Page) (history.SessionPage, error)
}

// noRecorder records nothing, for a manager without a session history.
type noRecorder struct{}

func (noRecorder) StopRequested(context.Context, *corev1.Pod, history.Actor, history.Stopper) {}

// New returns a manager for the configuration, writing through client and
// reading the watcher's cache.
func New(client kubernetes.Interface, cfg *spawner.Config, w Watcher, opts Options) (*Manager, error) {
	base, err := cfg.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("resolving base settings: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	m := &Manager{
		client: client, cfg: cfg, base: base, watcher: w,
		log: opts.Logger, clock: opts.Clock, metrics: opts.Metrics, gate: opts.SchedulingGate,
		res: opts.Reservations, loc: cmp.Or(opts.Location, time.Local),
		spawns: map[Key]*spawn{}, observed: map[Key]*spawn{},
		rec: opts.Recorder, pods: opts.Pods, hist: opts.History, recent: cmp.Or(opts.RecentStops, time.Hour), prefix: opts.AnnotationPrefix,
	}
	if m.rec == nil {
		m.rec = noRecorder{}
	}
	if m.pods == nil {
		m.pods = typedCreator{client}
	}
	m.list = newListKept(m.onlyPodOf())
	if err := m.initSpark(opts.Spark); err != nil {
		return nil, err
	}
	return m, nil
}

// Start begins a spawn and returns at once with the server's status; the
// pod's progress continues in the background and ends in a ready or failed
// event. Starting a server that is already starting or running adopts it.
// Bad user options yield a *spawner.FieldError.
func (m *Manager) Start(ctx context.Context, req spawner.Request, by history.Actor) (*Server, error) {
	key := Key{req.User, req.Server}
	objs, settings, err := spawner.Build(m.cfg, req)
	if err != nil {
		return nil, err
	}
	gate(objs.Pod, m.gate)
	// The hub's start_timeout, unless the profile set its own (as a
	// kubespawner_override does to KubeSpawner's trait).
	if req.StartTimeout > 0 && req.StartTimeout != settings.StartTimeout && settings.StartTimeout == m.base.StartTimeout {
		cp := *settings
		cp.StartTimeout = req.StartTimeout
		settings = &cp
	}
	if err := m.markIdentity(objs.Pod, req, settings, by); err != nil {
		return nil, err
	}
	cluster, err := spawner.BuildSpark(settings, req, objs.Pod)
	if err != nil {
		return nil, err
	}
	ref := podRef{objs.Pod.Namespace, objs.Pod.Name}
	log := m.log.With(zap.String("user", req.User), zap.String("server", req.Server),
		zap.String("pod", ref.name), zap.String("namespace", ref.namespace))

	m.mu.Lock()
	if sp := m.spawns[key]; sp != nil {
		if done, _, failed := sp.result(); !done || failed == "" && m.watcher.Status(ref.namespace, ref.name).State == poll.StateRunning {
			m.mu.Unlock()
			log.Info("start: already starting or running")
			return m.Server(key, Hint{}), nil
		}
	}
	delete(m.observed, key)
	m.mu.Unlock()

	// A stopped pod of the same name (evicted, completed) would block the
	// create: remove it first, as KubeSpawner does on a 409.
	if st := m.watcher.Status(ref.namespace, ref.name); st.Pod != nil && (st.State == poll.StateStopped || st.Pod.DeletionTimestamp != nil) {
		if ok, why := m.owns(st.Pod, key, Hint{}); !ok {
			log.Warn("start: the pod name is taken by a pod that is not this server's", zap.String("why", why))
			return nil, fmt.Errorf("pod %s/%s: %w", ref.namespace, ref.name, ErrConflict)
		}
		log.Info("start: removing the previous stopped pod")
		m.watcher.ExpectStop(ref.namespace, ref.name)
		if err := poll.Release(ctx, m.client, ref.namespace, ref.name, st.Pod.UID, serverid.StopByHub); err != nil {
			return nil, err
		}
		if err := m.deletePodAndWait(ctx, ref, st.Pod.UID, 0, time.Duration(settings.StartTimeout)*time.Second); err != nil {
			return nil, err
		}
	}
	m.watcher.ForgetStop(ref.namespace, ref.name)
	// A cluster that cannot fit the namespace's quota fails the start before
	// anything is created.
	if err := m.spark.Admit(ctx, objs, cluster); err != nil {
		m.metrics.spawns.WithLabelValues("error").Inc()
		log.Info("start: refused, the Spark cluster does not fit", zap.Error(err))
		return nil, sparkError(err)
	}

	uid, adopted, err := m.createObjects(ctx, objs, req, log)
	if err != nil {
		m.metrics.spawns.WithLabelValues("error").Inc()
		return nil, err
	}
	if err := m.spark.Ensure(ctx, cluster, sparkNotebook(key, ref, uid), time.Duration(settings.StartTimeout)*time.Second); err != nil {
		m.metrics.spawns.WithLabelValues("error").Inc()
		m.undoStart(context.WithoutCancel(ctx), key, ref, uid, log)
		return nil, sparkError(err)
	}
	spawnCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sp := &spawn{key: key, ref: ref, uid: uid, settings: settings, events: newEventLog(), started: m.clock.Now(), cancel: cancel}
	if objs.PVC != nil {
		sp.pvc = objs.PVC.Name
	}
	m.mu.Lock()
	if old := m.spawns[key]; old != nil {
		old.cancel()
	}
	m.spawns[key] = sp
	m.mu.Unlock()
	if adopted {
		log.Info("start: adopted the existing pod", zap.String("uid", string(uid)))
	} else {
		log.Info("start: pod created", zap.String("uid", string(uid)))
	}
	go m.follow(spawnCtx, sp, log)
	return m.Server(key, Hint{UID: uid}), nil
}

// markIdentity writes what any replica needs to know about the spawn onto
// its pod: the user_options (for its settings), the start deadline, and the
// finalizer that keeps the pod until its stop is reported.
func (m *Manager) markIdentity(pod *corev1.Pod, req spawner.Request, s *spawner.Settings, by history.Actor) error {
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	// Who asked, and when, for the session history: any replica records
	// it from the pod.
	pod.Annotations[serverid.AnnotationRequestedBy] = serverid.RequestedBy(string(by.Kind), by.Name, m.clock.Now())
	if slug := m.cfg.ProfileSlug(req.UserOptions); slug != "" {
		pod.Annotations[serverid.AnnotationProfile] = slug
	}
	if len(req.UserOptions) > 0 {
		raw, err := json.Marshal(req.UserOptions)
		if err != nil {
			return fmt.Errorf("encoding user_options: %w", err)
		}
		pod.Annotations[serverid.AnnotationUserOptions] = string(raw)
	}
	limit := s.StartTimeout
	if pod.Labels[spawner.LabelGPUClass] != "" {
		// A GPU spawn may wait for its reservation that long.
		limit = max(limit, s.ReservationWaitTimeout)
	}
	deadline := m.clock.Now().Add(time.Duration(limit) * time.Second).UTC()
	pod.Annotations[serverid.AnnotationStartDeadline] = deadline.Format(time.RFC3339)
	if !slices.Contains(pod.Finalizers, serverid.FinalizerStopReport) {
		pod.Finalizers = append(pod.Finalizers, serverid.FinalizerStopReport)
	}
	return nil
}

// createObjects creates the namespace, PVC, pod and service. Every create
// treats AlreadyExists as "ours" when the object belongs to this server.
func (m *Manager) createObjects(ctx context.Context, objs *spawner.Objects, req spawner.Request, log *zap.Logger) (types.UID, bool, error) {
	core := m.client.CoreV1()
	if objs.Namespace != nil {
		if _, err := core.Namespaces().Create(ctx, objs.Namespace, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", false, fmt.Errorf("creating namespace %s: %w", objs.Namespace.Name, classify(err))
		}
	}
	if objs.PVC != nil {
		if err := m.ensurePVC(ctx, objs.PVC, log); err != nil {
			return "", false, err
		}
	}
	pod := objs.Pod
	adopted := false
	created, err := m.pods.Create(ctx, pod)
	if apierrors.IsAlreadyExists(err) {
		existing, gerr := core.Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if gerr != nil {
			return "", false, fmt.Errorf("reading existing pod %s: %w", pod.Name, gerr)
		}
		if ok, why := m.owns(existing, Key{req.User, req.Server}, Hint{}); !ok {
			log.Warn("start: the pod name is taken by a pod that is not this server's", zap.String("why", why))
			return "", false, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, ErrConflict)
		}
		created, adopted, err = existing, true, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("creating pod %s: %w", pod.Name, classify(err))
	}
	if objs.Service != nil {
		svc := objs.Service.DeepCopy()
		svc.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Pod", Name: created.GetName(), UID: created.GetUID(),
			BlockOwnerDeletion: ptr.To(true), Controller: ptr.To(false),
		}}
		if _, err := core.Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", false, fmt.Errorf("creating service %s: %w", svc.Name, classify(err))
		}
	}
	return created.GetUID(), adopted, nil
}

// classify wraps API errors the hub should see as such.
func classify(err error) error {
	if apierrors.IsForbidden(err) && apierrors.ReasonForError(err) == metav1.StatusReasonForbidden {
		if st, ok := err.(apierrors.APIStatus); ok && containsQuota(st.Status().Message) {
			return fmt.Errorf("%w: %s", ErrQuota, st.Status().Message)
		}
	}
	return err
}

func containsQuota(msg string) bool { return strings.Contains(msg, "exceeded quota") }

// eventSettle bounds how long a spawn whose pod runs waits for the
// scheduler's and kubelet's events before it reports ready: they are
// written asynchronously and can reach the cache after the pod's status.
// Short, because in a spawn storm their writers (one event at a time
// each) fall seconds behind the pods, and the wait only completes the
// progress log the hub leaves at ready: in a storm of 1,000 spawns every
// spawn waited it out (5 s held them back 4 s at the median, 1 s added
// 1 s to each), while outside a storm the events come within a few
// milliseconds of the pod's status. KubeSpawner does not wait at all.
const eventSettle = 250 * time.Millisecond

// follow records the pod's events as progress and ends the spawn when the
// pod is ready (and its events so far are told), when it stops, or at
// start_timeout (then it removes the pod).
func (m *Manager) follow(ctx context.Context, sp *spawn, log *zap.Logger) {
	changed, unsubscribe := m.watcher.Subscribe(sp.ref.namespace, sp.ref.name)
	defer unsubscribe()
	sparkChanged, unsubscribeSpark := m.spark.Subscribe(sp.notebook())
	defer unsubscribeSpark()
	deadline := m.clock.Now().Add(time.Duration(sp.settings.StartTimeout) * time.Second)
	timeout := m.clock.NewTimer(time.Duration(sp.settings.StartTimeout) * time.Second)
	defer timeout.Stop()
	var slow <-chan time.Time
	if sp.settings.SlowSpawnMessageThreshold > 0 {
		t := m.clock.NewTicker(time.Duration(max(sp.settings.SlowSpawnMessageFrequency, 1)) * time.Second)
		defer t.Stop()
		slow = t.C()
	}
	var freeAt func(string, int) (time.Time, bool)
	if m.res != nil {
		freeAt = m.gpuFreeAt
	}
	tell := newNarrator(sp.settings, m.loc, freeAt)
	seen := map[types.UID]bool{}
	reasons := map[string]bool{} // of the pod's events so far
	progress, sawPod := 0, false
	hold := reservationHold{}
	var settle <-chan time.Time // set once the pod runs with events missing
	settled := false
	for {
		for _, ev := range m.watcher.Events(sp.ref.namespace, sp.ref.name) {
			if seen[ev.UID] || (ev.InvolvedObject.UID != "" && ev.InvolvedObject.UID != sp.uid) {
				continue
			}
			seen[ev.UID], reasons[ev.Reason] = true, true
			// The hold may move the deadline, and the headline states it.
			hold.see(ev)
			now := m.clock.Now()
			if d, ok := hold.deadline(now, sp); ok {
				timeout.Reset(d)
				deadline = now.Add(d)
			}
			msg := tell.headline(ev, now, deadline)
			if sp.settings.EventsEnabled {
				progress += (90 - progress) / 3
				p := progress
				sp.events.append(Event{Progress: &p, Message: msg, RawEvent: rawEvent(ev)})
			}
		}
		if hold.fix != "" {
			why := "GPU reservation: " + hold.fix
			log.Warn("start: the GPU reservation engine holds the pod until it is changed; failing the spawn", zap.String("why", why))
			m.abortSpawn(ctx, sp, why, "failed", log)
			return
		}
		progress = m.sparkProgress(sp, progress)
		st := m.watcher.Status(sp.ref.namespace, sp.ref.name)
		if st.Pod != nil && st.Pod.UID == sp.uid {
			sawPod = true
		}
		switch {
		case st.State == poll.StateRunning && st.Pod.UID == sp.uid && m.spark.Status(sp.notebook()).Ready():
			missing := missingEvents(st.Pod, reasons)
			if sp.settings.EventsEnabled && len(missing) > 0 {
				if !settled {
					if settle == nil {
						t := m.clock.NewTimer(eventSettle)
						defer t.Stop()
						settle = t.C()
					}
					break // ready once the events are told, or the wait runs out
				}
				noun := "event"
				if len(missing) > 1 {
					noun = "events"
				}
				sp.events.append(Event{Message: fmt.Sprintf("The server is running; Kubernetes has not reported its %s %s yet (waited %s).",
					strings.Join(missing, " and "), noun, eventSettle)})
			}
			url := spawner.PodURL(st.Pod, sp.settings)
			m.finish(sp, url, "")
			elapsed := m.clock.Since(sp.started)
			m.metrics.spawns.WithLabelValues("ready").Inc()
			m.metrics.spawnSeconds.Observe(elapsed.Seconds())
			log.Info("start: server ready", zap.String("url", url), zap.Duration("elapsed", elapsed), zap.Strings("missing_events", missing))
			return
		case sawPod && st.State.Stopped():
			why := "the pod stopped before it was ready"
			if st.Stop != nil {
				why = fmt.Sprintf("the pod stopped before it was ready (phase %s, reason %s: %s)", st.Stop.Phase, firstNonEmpty(st.Stop.Reason, st.Stop.ContainerReason), st.Stop.Message)
			}
			m.finish(sp, "", why)
			m.metrics.spawns.WithLabelValues("failed").Inc()
			log.Warn("start: failed", zap.String("why", why))
			if err := m.spark.Remove(context.WithoutCancel(ctx), sp.notebook()); err != nil {
				log.Warn("start: removing the Spark cluster failed", zap.Error(err))
			}
			return
		}
		// A cluster that cannot come up ends the spawn and removes all of
		// it, notebook included, so that nothing is left holding the quota.
		if why := m.spark.Failure(ctx, sp.notebook()); why != "" {
			log.Warn("start: the Spark cluster cannot start; removing the server", zap.String("why", why))
			m.abortSpawn(ctx, sp, why, "failed", log)
			return
		}
		select {
		case <-ctx.Done():
			m.finish(sp, "", "Spawn cancelled")
			return
		case <-changed:
		case <-sparkChanged:
		case <-settle:
			settled = true
		case <-slow:
			if waited := m.clock.Since(sp.started); waited >= time.Duration(sp.settings.SlowSpawnMessageThreshold)*time.Second {
				sp.events.append(Event{Message: slowMessage(sp.settings.SlowSpawnMessage, waited)})
			}
		case <-timeout.C():
			limit := int(deadline.Sub(sp.started).Round(time.Second).Seconds())
			why := fmt.Sprintf("pod %s/%s did not become ready within %d seconds", sp.ref.namespace, sp.ref.name, limit)
			// The newest explanation, not the newest raw event: for a
			// waiting GPU pod that is the engine's reason, not the taint.
			if tell.last != "" {
				why += "; last event: " + tell.last
			}
			if state := m.spark.Status(sp.notebook()).Summary(); state != "" {
				why += "; " + state
			}
			log.Warn("start: timed out; removing the pod", zap.String("why", why))
			m.abortSpawn(ctx, sp, why, "timeout", log)
			return
		}
	}
}

// abortSpawn removes a spawn's pod and Spark cluster and fails the spawn.
func (m *Manager) abortSpawn(ctx context.Context, sp *spawn, why, outcome string, log *zap.Logger) {
	if sp.observer {
		// The starter, or else the leader at the pod's deadline, removes it.
		m.finish(sp, "", why)
		return
	}
	m.watcher.ExpectStop(sp.ref.namespace, sp.ref.name)
	if st := m.watcher.Status(sp.ref.namespace, sp.ref.name); st.Pod != nil && st.Pod.UID == sp.uid {
		m.rec.StopRequested(context.WithoutCancel(ctx), st.Pod, history.Actor{Kind: history.ActorHub}, history.StopperStartTimeout)
	}
	if err := poll.Release(context.WithoutCancel(ctx), m.client, sp.ref.namespace, sp.ref.name, sp.uid, serverid.StopByTimeout); err != nil {
		log.Warn("start: marking the pod stopped failed", zap.Error(err))
	}
	if err := m.deletePod(context.WithoutCancel(ctx), sp.ref, sp.uid, 0); err != nil {
		log.Warn("start: removing the pod failed", zap.Error(err))
	}
	if err := m.spark.Remove(context.WithoutCancel(ctx), sp.notebook()); err != nil {
		log.Warn("start: removing the Spark cluster failed", zap.Error(err))
	}
	m.finish(sp, "", why)
	m.metrics.spawns.WithLabelValues(outcome).Inc()
}

// reservationHold follows the GPU reservation engine's events about a
// spawn's pod: a wait that can clear stretches the start deadline to
// reservation_wait_timeout, admission gives the pod start_timeout from then
// to start, and a hold that needs a fix fails the spawn with the event's
// words.
type reservationHold struct {
	fix      string    // message of a hold that needs a fix
	waiting  bool      // the newest hold can clear
	admitted time.Time // when admission was reported
	applied  int       // 0 none, 1 waiting deadline set, 2 admitted deadline set
}

func (h *reservationHold) see(ev *corev1.Event) {
	if ev.Source.Component != reservation.Component && ev.ReportingController != reservation.Component {
		return
	}
	switch reservation.HoldOf(ev.Reason, ev.Message) {
	case reservation.HoldNeedsFix:
		h.fix = ev.Message
	case reservation.HoldClears:
		h.waiting = true
	default:
		if ev.Reason == reservation.RuntimeGuaranteed || ev.Reason == reservation.BestEffortAdmitted {
			h.admitted = ev.LastTimestamp.Time
			if h.admitted.IsZero() {
				h.admitted = ev.CreationTimestamp.Time
			}
		}
	}
}

// deadline returns a new timer duration when the start deadline changes.
func (h *reservationHold) deadline(now time.Time, sp *spawn) (time.Duration, bool) {
	start := time.Duration(sp.settings.StartTimeout) * time.Second
	switch {
	case !h.admitted.IsZero() && h.applied < 2 && h.applied > 0:
		h.applied = 2
		return max(start-now.Sub(h.admitted), 0) + time.Second, true
	case h.waiting && h.applied == 0 && h.admitted.IsZero():
		h.applied = 1
		wait := time.Duration(max(sp.settings.ReservationWaitTimeout, sp.settings.StartTimeout)) * time.Second
		return max(wait-now.Sub(sp.started), 0), true
	}
	return 0, false
}

func (m *Manager) finish(sp *spawn, url, failed string) {
	sp.mu.Lock()
	if sp.done {
		sp.mu.Unlock()
		return
	}
	sp.done, sp.url, sp.failed = true, url, failed
	sp.mu.Unlock()
	full := 100
	if failed != "" {
		sp.events.append(Event{Progress: &full, Failed: true, Message: failed})
		return
	}
	sp.events.append(Event{Progress: &full, Ready: true, URL: url, Message: "Server ready at " + url})
}

// Progress replays the current (or last) spawn's events to fn, then follows
// it until it ends or ctx is done.
func (m *Manager) Progress(ctx context.Context, key Key, fn func(Event) error) error {
	m.mu.Lock()
	sp := m.spawns[key]
	m.mu.Unlock()
	if sp != nil && m.superseded(ctx, key, sp) {
		sp = nil
	}
	if sp == nil {
		sp = m.observe(key)
	}
	// A spawn another replica just started has its pod created before
	// the POST was answered, but this cache may see it a moment later.
	wait := time.NewTimer(observeWait)
	defer wait.Stop()
	for sp == nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wait.C:
			return ErrNotFound
		case <-time.After(50 * time.Millisecond):
		}
		sp = m.observe(key)
	}
	return sp.events.follow(ctx, fn)
}

// superseded reports whether sp, this replica's last spawn of the server,
// has ended and the server now has a pod of another UID: a newer spawn,
// which another replica started when the hub's POST went there and its
// progress came here. Replaying sp would tell the hub that spawn's end
// (such as "Spawn cancelled" from the stop before it). The pod may not be
// in this cache yet, so the API server is asked when the cache has none.
func (m *Manager) superseded(ctx context.Context, key Key, sp *spawn) bool {
	if done, _, _ := sp.result(); !done {
		return false
	}
	_, pod := m.findLive(ctx, key, Hint{})
	return pod != nil && pod.UID != sp.uid
}

// observeWait bounds how long progress waits for the pod of a spawn it
// did not start to reach this replica's cache.
const observeWait = 5 * time.Second

// observe follows, from the cache, a spawn this replica did not start (or
// forgot in a restart): the same events told the same way, but the pod is
// left to its starter, and to the leader at its deadline.
func (m *Manager) observe(key Key) *spawn {
	ref, pod := m.find(key, Hint{})
	if pod == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if sp := m.observed[key]; sp != nil && sp.uid == pod.UID {
		return sp
	}
	settings := m.settingsOf(pod)
	started := pod.CreationTimestamp.Time
	if deadline, ok := serverid.StartDeadline(pod); ok {
		// follow's timer runs from started for start_timeout.
		if limit := deadline.Sub(started); limit > 0 && int(limit.Seconds()) != settings.StartTimeout {
			cp := *settings
			cp.StartTimeout = int(limit.Round(time.Second).Seconds())
			settings = &cp
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(settings.StartTimeout)*time.Second+time.Minute)
	sp := &spawn{key: key, ref: ref, uid: pod.UID, settings: settings, events: newEventLog(), started: started, cancel: cancel, observer: true}
	if old := m.observed[key]; old != nil {
		old.cancel()
	}
	m.observed[key] = sp
	log := m.log.With(zap.String("user", key.User), zap.String("server", key.Server),
		zap.String("pod", ref.name), zap.String("namespace", ref.namespace))
	log.Info("progress: following a spawn another replica started")
	go func() {
		defer cancel()
		m.follow(ctx, sp, log)
	}()
	return sp
}

// Stop deletes the server's pod (grace 0 when now, else delete_grace_period)
// and waits until it is gone. It reports false if the pod was still going
// when wait ran out. Stopping an unknown server is not an error.
func (m *Manager) Stop(ctx context.Context, key Key, hint Hint, now bool, wait time.Duration, by history.Actor) (bool, error) {
	m.mu.Lock()
	sp := m.spawns[key]
	if o := m.observed[key]; o != nil {
		o.cancel()
		delete(m.observed, key)
	}
	m.mu.Unlock()
	if sp != nil {
		sp.cancel()
	}
	// Asked of the API server too before answering "gone".
	ref, pod := m.findLive(ctx, key, hint)
	log := m.log.With(zap.String("user", key.User), zap.String("server", key.Server), zap.String("pod", ref.name), zap.String("namespace", ref.namespace))
	if pod == nil {
		// Nothing of this server's runs; a pod at its name is someone
		// else's and stays.
		if err := m.spark.Remove(ctx, sparkNotebook(key, ref, "")); err != nil {
			return false, err
		}
		if st := m.watcher.Status(ref.namespace, ref.name); st.Pod != nil {
			_, why := m.owns(st.Pod, key, hint)
			log.Warn("stop: the pod at this server's name is not its own; left alone", zap.String("why", why))
		} else {
			log.Info("stop: no pod of this server")
		}
		return true, nil
	}
	m.watcher.ExpectStop(ref.namespace, ref.name)
	grace := m.base.DeleteGracePeriod
	if now {
		grace = 0
	}
	uid := pod.UID
	// The history has who asked before the pod can go, so a replica that
	// dies now loses nothing of it.
	m.rec.StopRequested(ctx, pod, by, history.StopperOf(by))
	// Marked first, so that whichever replica sees the pod go knows who
	// asked for it; the finalizer goes with the mark.
	if err := poll.Release(ctx, m.client, ref.namespace, ref.name, uid, serverid.StopBy(string(by.Kind), by.Name)); err != nil {
		return false, err
	}
	// The cluster goes first, so that its workers do not outlive the
	// notebook's driver.
	if err := m.spark.Remove(ctx, sparkNotebook(key, ref, uid)); err != nil {
		return false, err
	}
	if err := m.deletePod(ctx, ref, uid, grace); err != nil {
		return false, err
	}
	m.metrics.stops.Inc()
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err := m.waitGone(waitCtx, ref, wait)
	if err == nil {
		err = m.spark.WaitGone(waitCtx, sparkNotebook(key, ref, uid), wait)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		log.Info("stop: pod still terminating")
		return false, nil
	}
	if err != nil {
		return false, err
	}
	log.Info("stop: pod gone")
	return true, nil
}

// findLive is find, and when the cache has no pod of the server it reads
// the pod at ref from the API server: a pod another replica created a
// moment ago may not be in this cache yet. pod is nil unless it is there
// and the server's own.
func (m *Manager) findLive(ctx context.Context, key Key, hint Hint) (podRef, *corev1.Pod) {
	ref, pod := m.find(key, hint)
	if pod != nil || ref.name == "" {
		return ref, pod
	}
	p, err := m.client.CoreV1().Pods(ref.namespace).Get(ctx, ref.name, metav1.GetOptions{})
	if err != nil {
		return ref, nil
	}
	if ok, _ := m.owns(p, key, hint); !ok {
		return ref, nil
	}
	return ref, p
}

func (m *Manager) deletePodAndWait(ctx context.Context, ref podRef, uid types.UID, grace int64, wait time.Duration) error {
	if err := m.deletePod(ctx, ref, uid, grace); err != nil {
		return err
	}
	if err := m.waitGone(ctx, ref, wait); err != nil {
		return fmt.Errorf("waiting for pod %s/%s to go: %w", ref.namespace, ref.name, err)
	}
	return nil
}

func (m *Manager) deletePod(ctx context.Context, ref podRef, uid types.UID, grace int64) error {
	opts := metav1.DeleteOptions{GracePeriodSeconds: &grace}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := m.client.CoreV1().Pods(ref.namespace).Delete(ctx, ref.name, opts)
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return fmt.Errorf("deleting pod %s/%s: %w", ref.namespace, ref.name, err)
}

// waitGone waits, on the cache's change signal, until the pod is no longer there.
func (m *Manager) waitGone(ctx context.Context, ref podRef, wait time.Duration) error {
	changed, unsubscribe := m.watcher.Subscribe(ref.namespace, ref.name)
	defer unsubscribe()
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		if m.watcher.Status(ref.namespace, ref.name).Pod == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// eventTimestamp is when an event last happened, as KubeSpawner reads it:
// lastTimestamp, else eventTime (the events.k8s.io API's), else creation.
func eventTimestamp(ev *corev1.Event) time.Time {
	ts := ev.LastTimestamp.Time
	if ts.IsZero() {
		ts = ev.EventTime.Time
	}
	if ts.IsZero() {
		ts = ev.CreationTimestamp.Time
	}
	return ts
}

// rawEvent is the Kubernetes event behind a progress message, with its own
// text: the hub-side relay lists it in the page's event log.
func rawEvent(ev *corev1.Event) map[string]any {
	return map[string]any{
		"reason": ev.Reason, "type": ev.Type, "message": ev.Message,
		"lastTimestamp":      eventTimestamp(ev).UTC().Format(time.RFC3339),
		"source":             ev.Source.Component,
		"reportingComponent": ev.ReportingController,
		"involvedObject":     map[string]string{"kind": ev.InvolvedObject.Kind, "name": ev.InvolvedObject.Name, "namespace": ev.InvolvedObject.Namespace},
	}
}

// missingEvents names the events a running pod should have by now but the
// cache has not shown: the scheduler's Scheduled once the pod is bound, and
// the kubelet's Started once a container runs.
func missingEvents(pod *corev1.Pod, seen map[string]bool) []string {
	var out []string
	if !seen["Scheduled"] && slices.ContainsFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue
	}) {
		out = append(out, "Scheduled")
	}
	if !seen["Started"] && slices.ContainsFunc(pod.Status.ContainerStatuses, func(c corev1.ContainerStatus) bool { return c.State.Running != nil }) {
		out = append(out, "Started")
	}
	return out
}

// gpuFreeAt asks the reservation engine's state when gpus GPUs of a class
// could be free; best effort, as it only adds to a message.
func (m *Manager) gpuFreeAt(class string, gpus int) (time.Time, bool) {
	classes, err := m.res.Classes(0)
	if err != nil {
		m.log.Debug("progress: reading GPU class status failed", zap.String("class", class), zap.Error(err))
		return time.Time{}, false
	}
	for _, c := range classes {
		if c.Class == class {
			return gpusFreeAt(m.res.Reservations(), class, c.Capacity, gpus, m.clock.Now())
		}
	}
	return time.Time{}, false
}

func slowMessage(tmpl string, waited time.Duration) string {
	return strings.ReplaceAll(tmpl, "{seconds}", strconv.Itoa(int(waited.Seconds())))
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// gate adds the scheduling gate to a GPU pod, once.
func gate(p *corev1.Pod, name string) {
	if name == "" || p.Labels[spawner.LabelGPUClass] == "" {
		return
	}
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == name {
			return
		}
	}
	p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: name})
}
