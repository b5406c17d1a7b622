package lifecycle

import (
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/dsmlp/spawner/poll"
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
		describePod(s, st.Pod, m.clockNow())
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
		} else {
			s.Status = StatusAbsent
		}
	}
	return s
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

// List reports every server whose pod is in the cache, sorted by user and server.
func (m *Manager) List() []*Server {
	var out []*Server
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
		out = append(out, m.Server(key, Hint{Pod: pod.Name, Namespace: pod.Namespace, UID: pod.UID}))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].User != out[j].User {
			return out[i].User < out[j].User
		}
		return out[i].Server < out[j].Server
	})
	return out
}

func (m *Manager) clockNow() time.Time { return m.clock.Now() }

func describePod(s *Server, pod *corev1.Pod, now time.Time) {
	s.Node, s.PodIP, s.Phase = pod.Spec.NodeName, pod.Status.PodIP, string(pod.Status.Phase)
	created := pod.CreationTimestamp.Time
	s.Created = &created
	s.Age = now.Sub(created).Round(time.Second).String()
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
