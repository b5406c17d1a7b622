package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/poll"
	"github.com/dsmlp/spawner/recorder"
	"github.com/dsmlp/spawner/reservation"
	"github.com/dsmlp/spawner/serverid"
	"github.com/dsmlp/spawner/sparkcluster"
	"github.com/dsmlp/spawner/spawner"
)

// Server statuses, as the hub-side spawner class maps them onto poll().
const (
	StatusPending = "pending"
	StatusRunning = "running"
	StatusStopped = "stopped"
	StatusAbsent  = "absent"
)

// Server is what the service reports about one hub server.
type Server struct {
	User      string     `json:"user"`
	Server    string     `json:"server"`
	Status    string     `json:"status"`
	URL       *string    `json:"url"`
	ExitCode  *int       `json:"exit_code"`
	Message   string     `json:"message"`
	Pod       string     `json:"pod"`
	Namespace string     `json:"namespace"`
	Node      string     `json:"node,omitempty"`
	PodIP     string     `json:"pod_ip,omitempty"`
	Phase     string     `json:"phase,omitempty"`
	Created   *time.Time `json:"created,omitempty"`
	Age       string     `json:"age,omitempty"`
	// UID is the pod's UID, the key of its session in the history.
	UID string `json:"uid,omitempty"`
	// Profile is the profile slug the spawn chose; Image the notebook
	// container's image.
	Profile string `json:"profile,omitempty"`
	Image   string `json:"image,omitempty"`
	// Course is the workspace (the dsmlp/course label), GPUClass the
	// gpu-class label.
	Course   string `json:"course,omitempty"`
	GPUClass string `json:"gpu_class,omitempty"`
	// Reservation is the GPU booking or lease the pod runs under and
	// GuaranteeStatus its runtime guarantee (guaranteed, overstay), from
	// the reservation engine's annotations.
	Reservation     string `json:"reservation,omitempty"`
	GuaranteeStatus string `json:"guarantee_status,omitempty"`
	// LastEvent is the pod's newest Kubernetes event (admin views only).
	LastEvent *EventSummary `json:"last_event,omitempty"`
	// Stopped says why the server stopped, when it did.
	Stopped *StopReason `json:"stopped,omitempty"`
	// State is what the hub stores (KubeSpawner's state keys).
	State map[string]string `json:"state"`
	// Events are the pod's last Kubernetes events (admin views only).
	Events []EventSummary `json:"events,omitempty"`
	// Spark is the server's Spark cluster, if it has one.
	Spark *sparkcluster.Status `json:"spark,omitempty"`
	// Rev names what List made this server's report of: two reports of
	// one server with the same nonzero Rev differ in Age alone. Zero: made
	// afresh each time.
	Rev uint64 `json:"-"`
}

// StopReason is why a server ended, kept after its pod is gone.
type StopReason struct {
	Phase           string    `json:"phase,omitempty"`
	Reason          string    `json:"reason,omitempty"`
	Message         string    `json:"message,omitempty"`
	ContainerReason string    `json:"container_reason,omitempty"`
	ExitCode        int       `json:"exit_code"`
	At              time.Time `json:"at"`
	PodDeleted      bool      `json:"pod_deleted"`
	// Stopper is who or what ended the server (history.Stopper: user,
	// admin, culler, evicted, oom, ...), when known.
	Stopper string `json:"stopper,omitempty"`
	// Why is the end in one sentence, when the history has it.
	Why string `json:"why,omitempty"`
}

// EventSummary is one Kubernetes event of a pod.
type EventSummary struct {
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	From    string    `json:"from"`
	Count   int32     `json:"count,omitempty"`
}

// Server reports one server from the cache, never from the API server.
// The pod is found by the server's identity (see find), on any replica;
// hint is the hub's saved state, if the request carried it.
func (m *Manager) Server(key Key, hint Hint) *Server {
	s, _ := m.server(key, hint)
	return s
}

// basis is what a Server answer was made of, when the answer holds for as
// long as they are unchanged (see Answers): ok is false for any other.
type basis struct {
	ok bool
	// version is the pod's UID and resourceVersion.
	version poll.PodVersion
	// sp is the server's spawn in this process, if any, and done, url and
	// failed its result when the answer was made.
	sp          *spawn
	done        bool
	url, failed string
	// created is the pod's creation, which the age is counted from.
	created time.Time
}

// server is Server, with what its answer was made of.
func (m *Manager) server(key Key, hint Hint) (*Server, basis) {
	ref, pod, sole := m.locate(key, hint)
	m.mu.Lock()
	sp := m.spawns[key]
	m.mu.Unlock()
	st := m.watcher.Status(ref.namespace, ref.name)
	if st.Pod != nil && (pod == nil || st.Pod.UID != pod.UID) {
		// Another server's pod has this name (a name template that
		// collides): this server has none.
		st = poll.Status{State: poll.StateAbsent, ExitCode: 1}
	}
	s := &Server{User: key.User, Server: key.Server, Pod: ref.name, Namespace: ref.namespace,
		State: map[string]string{"pod_name": ref.name, "namespace": ref.namespace}}
	if pod != nil {
		s.State["pod_uid"] = string(pod.UID)
	}
	s.Spark = m.spark.Status(sparkNotebook(key, ref, ""))
	if st.Pod != nil {
		m.describePod(s, st.Pod, m.clockNow())
	}
	// Only a PVC the spawn ensured is the server's own (a mounted claim may
	// be shared), so only that one is named, as in KubeSpawner's get_state.
	if sp != nil && sp.pvc != "" {
		s.State["pvc_name"] = sp.pvc
	}
	var done bool
	var url, failed string
	b := basis{sp: sp}
	if sp != nil {
		// Read once: the answer and its basis must see the same result.
		b.done, b.url, b.failed = sp.result()
		if st.Pod == nil || st.Pod.UID == sp.uid {
			done, url, failed = b.done, b.url, b.failed
		}
	}
	switch {
	case sp != nil && !done && (st.Pod == nil || st.Pod.UID == sp.uid):
		s.Status, s.Message = StatusPending, "starting"
	case failed != "" && st.State != poll.StateRunning:
		s.Status, s.Message, s.ExitCode = StatusStopped, failed, ptrInt(1)
	case st.State == poll.StateRunning:
		s.Status = StatusRunning
		if url == "" {
			url = podURL(st.Pod, m.settingsOf(st.Pod))
		}
		s.URL = &url
	case st.State == poll.StatePending:
		s.Status = StatusPending
	case st.State == poll.StateStopped:
		s.Status, s.ExitCode = StatusStopped, ptrInt(st.ExitCode)
		if st.Stop != nil {
			s.Stopped = stopReason(*st.Stop)
			s.Message = stopMessage(*st.Stop)
		}
	default:
		if why, ok := m.watcher.LastStop(ref.namespace, ref.name); ok {
			s.Status, s.ExitCode, s.Stopped, s.Message = StatusStopped, ptrInt(why.ExitCode), stopReason(why), stopMessage(why)
			m.addHistory(s, key, hint)
		} else if !m.addHistory(s, key, hint) {
			s.Status = StatusAbsent
		}
	}
	if s.Stopped != nil && st.Pod != nil && st.Stop != nil && s.Stopped.Stopper == "" {
		stopper, _ := recorder.Classify(st.Pod, *st.Stop, m.watcher.Events(st.Pod.Namespace, st.Pod.Name))
		s.Stopped.Stopper = string(stopper)
	}
	// A running or pending server's answer depends on its pod, its spawn
	// and the time (the age) only, when the pod is its one pod whatever the
	// hint and no Spark cluster can add to it.
	if sole && sameVersion(st.Pod, pod) && (s.Status == StatusRunning || s.Status == StatusPending) && m.sparkOff() {
		b.ok, b.version, b.created = true, poll.VersionOf(pod), pod.CreationTimestamp.Time
	}
	return s, b
}

// sparkOff reports whether no Spark cluster can be part of an answer.
func (m *Manager) sparkOff() bool {
	_, off := m.spark.(noSpark)
	return off
}

// historyWait bounds the history read of a poll for a gone pod.
const historyWait = 2 * time.Second

// addHistory completes a server whose pod is gone from the session
// history: who or what ended its last session, and why in a sentence. With
// nothing from memory it makes the server stopped, if the last session
// ended and is the one the hub knows (hint.UID, when given). It reports
// whether the history had the server's last session.
func (m *Manager) addHistory(s *Server, key Key, hint Hint) bool {
	if m.hist == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), historyWait)
	defer cancel()
	last, err := m.hist.Last(ctx, key.User, key.Server)
	if err != nil {
		if !errors.Is(err, history.ErrNotFound) {
			m.log.Warn("poll: reading the session history failed", zap.String("user", key.User), zap.String("server", key.Server), zap.Error(err))
		}
		return false
	}
	if last.EndedAt == nil || hint.UID != "" && string(hint.UID) != last.UID {
		return false
	}
	if s.Stopped != nil {
		if s.UID != "" && s.UID != last.UID {
			return false // the history's last end is another pod's
		}
		s.Stopped.Stopper, s.Stopped.Why = string(last.Stopper), history.Why(last, m.loc)
		s.Message = s.Stopped.Why
		fillIdentity(s, last)
		return true
	}
	fillFromSession(s, last, m.loc)
	return true
}

// fillIdentity sets what a server was (its pod, node, profile, image,
// workspace, GPU and creation) from its session where memory had none.
func fillIdentity(s *Server, last history.Session) {
	for _, f := range []struct {
		dst *string
		src string
	}{
		{&s.UID, last.UID}, {&s.Profile, last.Profile}, {&s.Image, last.Image}, {&s.Course, last.Course},
		{&s.GPUClass, last.GPUClass}, {&s.Reservation, last.Reservation}, {&s.Node, last.Node},
	} {
		if *f.dst == "" {
			*f.dst = f.src
		}
	}
	if s.Pod == "" {
		s.Pod, s.Namespace = last.Pod, last.Namespace
	}
	if s.Created == nil && last.CreatedAt != nil {
		created := *last.CreatedAt
		s.Created = &created
	}
}

// fillFromSession describes a server from its ended session.
func fillFromSession(s *Server, last history.Session, loc *time.Location) {
	s.Status = StatusStopped
	s.UID, s.Profile, s.Image, s.Course, s.GPUClass, s.Reservation = last.UID, last.Profile, last.Image, last.Course, last.GPUClass, last.Reservation
	s.Node = last.Node
	fillIdentity(s, last)
	end := history.EndFacts{}
	if last.End != nil {
		end = *last.End
	}
	code := 1
	if end.ExitCode != nil {
		code = *end.ExitCode
	}
	s.ExitCode = ptrInt(code)
	s.Stopped = &StopReason{Phase: end.Phase, Reason: end.Reason, Message: end.Message, ContainerReason: end.ContainerReason,
		ExitCode: code, At: *last.EndedAt, PodDeleted: true, Stopper: string(last.Stopper), Why: history.Why(last, loc)}
	s.Message = s.Stopped.Why
}

// ServerWithEvents is Server plus the pod's recent events, for admins.
func (m *Manager) ServerWithEvents(key Key, max int) *Server {
	s := m.Server(key, Hint{})
	s.Events = m.events(s.Namespace, s.Pod, max)
	return s
}

func (m *Manager) events(ns, pod string, max int) []EventSummary {
	evs := m.watcher.Events(ns, pod)
	if len(evs) > max {
		evs = evs[len(evs)-max:]
	}
	out := make([]EventSummary, 0, len(evs))
	for _, ev := range evs {
		out = append(out, summaryOf(ev))
	}
	return out
}

func summaryOf(ev *corev1.Event) EventSummary {
	ts := ev.LastTimestamp.Time
	if ts.IsZero() {
		ts = ev.EventTime.Time
	}
	from := ev.Source.Component
	if from == "" {
		from = ev.ReportingController
	}
	return EventSummary{Time: ts, Type: ev.Type, Reason: ev.Reason, Message: ev.Message, From: from, Count: ev.Count}
}

func (m *Manager) clockNow() time.Time { return m.clock.Now() }

func (m *Manager) describePod(s *Server, pod *corev1.Pod, now time.Time) {
	s.Node, s.PodIP, s.Phase = pod.Spec.NodeName, pod.Status.PodIP, string(pod.Status.Phase)
	created := pod.CreationTimestamp.Time
	s.Created = &created
	s.Age = now.Sub(created).Round(time.Second).String()
	s.UID = string(pod.UID)
	s.Profile = pod.Annotations[serverid.AnnotationProfile]
	s.Course, s.GPUClass = pod.Labels[spawner.LabelCourse], pod.Labels[spawner.LabelGPUClass]
	for _, c := range pod.Spec.Containers {
		if c.Name == poll.NotebookContainer {
			s.Image = c.Image
		}
	}
	if m.prefix != "" {
		s.Reservation = pod.Annotations[m.prefix+reservation.AnnBookingReference]
		s.GuaranteeStatus = pod.Annotations[m.prefix+reservation.AnnGuaranteeStatus]
	}
}

func stopReason(s poll.StopInfo) *StopReason {
	return &StopReason{Phase: s.Phase, Reason: s.Reason, Message: s.Message, ContainerReason: s.ContainerReason,
		ExitCode: s.ExitCode, At: s.At, PodDeleted: s.PodDeleted}
}

func stopMessage(s poll.StopInfo) string {
	switch {
	case s.Reason == poll.ReasonDeleted:
		return "the pod was deleted"
	case s.Reason != "" && s.Message != "":
		return s.Reason + ": " + s.Message
	case s.ContainerReason != "":
		return "the notebook container ended: " + s.ContainerReason
	}
	return "the pod stopped (phase " + s.Phase + ")"
}

func ptrInt(i int) *int { return &i }

// sameVersion reports whether two pods read from the cache are the same
// state of the same pod. Each read makes a new object (poll's cache keeps a
// compact form), so the pointers differ.
func sameVersion(a, b *corev1.Pod) bool {
	return a != nil && b != nil && poll.VersionOf(a) == poll.VersionOf(b)
}

func podURL(pod *corev1.Pod, s *spawner.Settings) string { return spawner.PodURL(pod, s) }

// Answers keeps each server's poll answer, encoded, for as long as what it
// was made of is unchanged: the pod (its UID and resourceVersion) and the
// spawn's state. A poll of a kept answer costs a map lookup and a copy,
// with the age written anew, and allocates nothing. Answers that depend on
// the hint, on the time otherwise than by the age, on the session history
// or on a Spark cluster (those of every stopped or absent server) are made
// afresh at every poll. Make one with Manager.NewAnswers; it is safe for
// concurrent use.
type Answers struct {
	m *Manager
	// only is the watcher's OnlyPodOf, else one made of PodsOf.
	only func(key string) (poll.PodVersion, int)
	mu   sync.RWMutex
	kept map[Key]*answer
}

// answer is a kept answer: its JSON before and after the age's value.
type answer struct {
	basis
	labelKey   string
	head, tail []byte
}

// maxAnswers bounds the kept answers, about 1 KiB each.
const maxAnswers = 1 << 16

// ageField precedes the age's value in a Server's JSON. No string value
// can hold it, as encoding/json escapes every quote inside one.
const ageField = `,"age":"`

// NewAnswers returns an empty cache of the manager's poll answers.
func (m *Manager) NewAnswers() *Answers {
	return &Answers{m: m, only: m.onlyPodOf(), kept: map[Key]*answer{}}
}

// onlyPodOf returns the watcher's OnlyPodOf, else one made of PodsOf.
func (m *Manager) onlyPodOf() func(key string) (poll.PodVersion, int) {
	if w, ok := m.watcher.(interface {
		OnlyPodOf(key string) (poll.PodVersion, int)
	}); ok {
		return w.OnlyPodOf
	}
	return func(key string) (poll.PodVersion, int) {
		pods := m.watcher.PodsOf(key)
		if len(pods) != 1 {
			return poll.PodVersion{}, len(pods)
		}
		return poll.VersionOf(pods[0]), 1
	}
}

// AppendJSON appends Server(key, hint) to dst as encoding/json encodes it.
func (a *Answers) AppendJSON(dst []byte, key Key, hint Hint) ([]byte, error) {
	a.mu.RLock()
	e := a.kept[key]
	a.mu.RUnlock()
	if e != nil && a.current(key, e) {
		dst = append(dst, e.head...)
		dst = appendAge(dst, a.m.clockNow().Sub(e.created))
		return append(dst, e.tail...), nil
	}
	s, b := a.m.server(key, hint)
	data, err := json.Marshal(s)
	if err != nil {
		return dst, fmt.Errorf("encoding the answer for %s: %w", describe(key.User, key.Server), err)
	}
	a.keep(key, e, s, data, b)
	return append(dst, data...), nil
}

// current reports whether an answer's pod is still the server's one pod,
// unchanged, and its spawn's state what it was.
func (a *Answers) current(key Key, e *answer) bool {
	return a.m.unchanged(a.only, key, e.labelKey, &e.basis)
}

// unchanged reports whether what an answer was made of holds still: its
// pod (labelKey's only pod, as only reads it) unchanged, and its spawn's
// state what it was.
func (m *Manager) unchanged(only func(string) (poll.PodVersion, int), key Key, labelKey string, b *basis) bool {
	v, n := only(labelKey)
	if n != 1 || v != b.version {
		return false
	}
	m.mu.Lock()
	sp := m.spawns[key]
	m.mu.Unlock()
	if sp != b.sp {
		return false
	}
	if sp != nil {
		done, url, failed := sp.result()
		return done == b.done && url == b.url && failed == b.failed
	}
	return true
}

// keep stores a new answer if it may be kept, else drops the stale one.
func (a *Answers) keep(key Key, stale *answer, s *Server, data []byte, b basis) {
	var e *answer
	if b.ok {
		if i := bytes.Index(data, []byte(ageField+s.Age+`"`)); i >= 0 {
			at := i + len(ageField)
			e = &answer{basis: b, labelKey: serverid.Key(key.User, key.Server), head: data[:at:at], tail: data[at+len(s.Age):]}
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if e == nil {
		if stale != nil && a.kept[key] == stale {
			delete(a.kept, key)
		}
		return
	}
	// Two answers picked at random are checked at every new one, so those
	// of servers no longer polled (stopped, gone) do not pile up.
	n := 0
	for k, old := range a.kept {
		if n++; n > 2 {
			break
		}
		if !a.current(k, old) {
			delete(a.kept, k)
		}
	}
	if len(a.kept) >= maxAnswers {
		for k, old := range a.kept {
			if !a.current(k, old) {
				delete(a.kept, k)
			}
		}
		if len(a.kept) >= maxAnswers*3/4 {
			clear(a.kept)
		}
	}
	a.kept[key] = e
}

// appendAge appends d rounded to the second as Duration.String writes it
// (describePod's age), without allocating.
func appendAge(dst []byte, d time.Duration) []byte {
	d = d.Round(time.Second)
	if d%time.Second != 0 { // Round saturated at the extremes
		return append(dst, d.String()...)
	}
	secs := int64(d / time.Second)
	if secs < 0 {
		dst, secs = append(dst, '-'), -secs
	}
	h, m, s := secs/3600, secs/60%60, secs%60
	if h > 0 {
		dst = append(strconv.AppendInt(dst, h, 10), 'h')
	}
	if h > 0 || m > 0 {
		dst = append(strconv.AppendInt(dst, m, 10), 'm')
	}
	return append(strconv.AppendInt(dst, s, 10), 's')
}
