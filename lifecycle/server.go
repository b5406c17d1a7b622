package lifecycle

import (
	"context"
	"errors"
	"sort"
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
	ref, pod := m.find(key, hint)
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
	if sp != nil && (st.Pod == nil || st.Pod.UID == sp.uid) {
		done, url, failed = sp.result()
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
	return s
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
		s.Stopped.Stopper, s.Stopped.Why = string(last.Stopper), history.Why(last, m.loc)
		return true
	}
	fillFromSession(s, last, m.loc)
	return true
}

// fillFromSession describes a server from its ended session.
func fillFromSession(s *Server, last history.Session, loc *time.Location) {
	s.Status = StatusStopped
	s.UID, s.Profile, s.Image, s.Course, s.GPUClass, s.Reservation = last.UID, last.Profile, last.Image, last.Course, last.GPUClass, last.Reservation
	if s.Pod == "" {
		s.Pod, s.Namespace = last.Pod, last.Namespace
	}
	s.Node = last.Node
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
	if last.CreatedAt != nil {
		created := *last.CreatedAt
		s.Created = &created
	}
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
		ts := ev.LastTimestamp.Time
		if ts.IsZero() {
			ts = ev.EventTime.Time
		}
		from := ev.Source.Component
		if from == "" {
			from = ev.ReportingController
		}
		out = append(out, EventSummary{Time: ts, Type: ev.Type, Reason: ev.Reason, Message: ev.Message, From: from, Count: ev.Count})
	}
	return out
}

// maxRecentStops bounds the stopped servers List adds from the history.
const maxRecentStops = 5000

// List reports every server whose pod is in the cache, and those whose
// last session ended within RecentStops (with why), sorted by user and
// server.
func (m *Manager) List() []*Server {
	out := []*Server{}
	seen := map[Key]bool{}
	for _, pod := range m.watcher.Pods() {
		user, server, why := identityOf(pod)
		key := Key{user, server}
		if why != "" || seen[key] {
			continue
		}
		if ok, _ := m.owns(pod, key, Hint{}); !ok {
			continue
		}
		seen[key] = true
		srv := m.Server(key, Hint{Pod: pod.Name, Namespace: pod.Namespace, UID: pod.UID})
		if evs := m.events(srv.Namespace, srv.Pod, 1); len(evs) == 1 {
			srv.LastEvent = &evs[0]
		}
		out = append(out, srv)
	}
	out = append(out, m.recentlyStopped(seen)...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].User != out[j].User {
			return out[i].User < out[j].User
		}
		return out[i].Server < out[j].Server
	})
	return out
}

// recentlyStopped are the servers without a live pod whose last session
// ended within m.recent, from the history (newest session per server).
func (m *Manager) recentlyStopped(live map[Key]bool) []*Server {
	if m.hist == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), historyWait)
	defer cancel()
	now := m.clock.Now()
	f := history.Filter{Ended: true, Since: now.Add(-m.recent)}
	var out []*Server
	page := history.Page{Limit: history.MaxLimit}
	for n := 0; n < maxRecentStops; {
		got, err := m.hist.List(ctx, f, page)
		if err != nil {
			m.log.Warn("list: reading recently stopped servers from the session history failed", zap.Error(err))
			return out
		}
		for _, sess := range got.Sessions {
			key := Key{sess.User, sess.Server}
			if live[key] {
				continue
			}
			live[key] = true
			s := &Server{User: sess.User, Server: sess.Server, State: map[string]string{}}
			fillFromSession(s, sess, m.loc)
			if s.Created != nil {
				s.Age = now.Sub(*s.Created).Round(time.Second).String()
			}
			out = append(out, s)
		}
		n += len(got.Sessions)
		if got.Next == "" {
			break
		}
		page.Cursor = got.Next
	}
	return out
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

func podURL(pod *corev1.Pod, s *spawner.Settings) string { return spawner.PodURL(pod, s) }
