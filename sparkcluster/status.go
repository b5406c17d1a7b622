package sparkcluster

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/dsmlp/spawner/spawner"
)

// Status is a server's Spark cluster as the cache sees it.
type Status struct {
	// MasterURL is where jobs are submitted; UIURL is the master's web UI.
	MasterURL string `json:"master_url"`
	UIURL     string `json:"ui_url"`
	// MasterReady says a master pod is ready; Workers is the worker
	// count asked for and ReadyWorkers how many are ready.
	MasterReady  bool `json:"master_ready"`
	Workers      int  `json:"workers"`
	ReadyWorkers int  `json:"ready_workers"`
	// Endpoints are the ready addresses of spark-master-svc's cluster port.
	Endpoints []string `json:"endpoints"`
	// Pods are the master and worker pods, master first.
	Pods []Pod `json:"pods"`
	// Replaced are the cluster's recent stopped pods, newest last, which
	// spawnerd deleted so that their ReplicaSet replaced them (read from
	// the ConfigMap's AnnotationReplaced).
	Replaced []PodStop `json:"replaced,omitempty"`
	// Problem is a ReplicaSet's failure to create pods (quota, say).
	Problem string `json:"problem,omitempty"`

	// problems are every Deployment's replica failure, "name: message".
	problems []string
}

// Pod is one pod of a Spark cluster.
type Pod struct {
	Name     string `json:"name"`
	Role     string `json:"role"`
	Phase    string `json:"phase"`
	Ready    bool   `json:"ready"`
	Node     string `json:"node,omitempty"`
	IP       string `json:"ip,omitempty"`
	Restarts int32  `json:"restarts"`
	// Reason is why the pod is not running (Evicted, Unschedulable, ...).
	Reason      string `json:"reason,omitempty"`
	Terminating bool   `json:"terminating,omitempty"`
}

// PodStop is a Spark pod that stopped and was replaced.
type PodStop struct {
	Pod     string    `json:"pod"`
	Role    string    `json:"role"`
	Phase   string    `json:"phase"`
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message,omitempty"`
	At      time.Time `json:"at"`
}

// maxReplacedKept bounds Status.Replaced.
const maxReplacedKept = 10

// view derives readiness from one cluster's cached objects.
type view struct{ s snapshot }

func newView(s snapshot) view { return view{s} }

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readyMaster returns the name of a ready master pod, or "".
func (v view) readyMaster() string {
	for _, p := range v.s.pods {
		if roleOf(p) == "master" && podReady(p) {
			return p.Name
		}
	}
	return ""
}

func (v view) readyWorkers() int {
	n := 0
	for _, p := range v.s.pods {
		if roleOf(p) == "worker" && podReady(p) {
			n++
		}
	}
	return n
}

// readyEndpoints are the master's ready addresses behind spark-master-svc,
// with the cluster port, sorted. An endpoint whose ready condition is
// unset counts as ready, as the EndpointSlice API defines.
func (v view) readyEndpoints() []string {
	var out []string
	for _, es := range v.s.slices {
		port := int32(spawner.SparkMasterPort)
		for _, p := range es.Ports {
			if p.Name != nil && *p.Name == "spark" && p.Port != nil {
				port = *p.Port
			}
		}
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				out = append(out, net.JoinHostPort(a, strconv.Itoa(int(port))))
			}
		}
	}
	sort.Strings(out)
	return out
}

func (v view) deployments() []*appsv1.Deployment {
	var out []*appsv1.Deployment
	for _, d := range []*appsv1.Deployment{v.s.master, v.s.worker} {
		if d != nil {
			out = append(out, d)
		}
	}
	return out
}

// replicaFailure is a Deployment's ReplicaFailure condition message (the
// deployment controller copies it from the ReplicaSet that cannot create
// pods), or "".
func replicaFailure(d *appsv1.Deployment) string {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue {
			return c.Message
		}
	}
	return ""
}

// Status reports the notebook's cluster from the cache, nil if there is
// none: only objects of the notebook's server count.
func (r *Reconciler) Status(nb Notebook) *Status {
	if nb.Pod == "" {
		return nil
	}
	snap := r.clusterOf(nb)
	if snap.empty() {
		return nil
	}
	v := newView(snap)
	st := &Status{
		MasterURL: spawner.SparkMasterURL, UIURL: spawner.SparkMasterUIURL,
		MasterReady: v.readyMaster() != "", ReadyWorkers: v.readyWorkers(),
		Endpoints: v.readyEndpoints(), Pods: []Pod{},
	}
	if snap.worker != nil && snap.worker.Spec.Replicas != nil {
		st.Workers = int(*snap.worker.Spec.Replicas)
	}
	if st.Endpoints == nil {
		st.Endpoints = []string{}
	}
	for _, p := range snap.pods {
		sp := Pod{Name: p.Name, Role: roleOf(p), Phase: string(p.Status.Phase), Ready: podReady(p),
			Node: p.Spec.NodeName, IP: p.Status.PodIP, Reason: p.Status.Reason, Terminating: p.DeletionTimestamp != nil}
		for _, cs := range p.Status.ContainerStatuses {
			sp.Restarts += cs.RestartCount
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue && sp.Reason == "" {
				sp.Reason = c.Reason
			}
		}
		st.Pods = append(st.Pods, sp)
	}
	for _, d := range v.deployments() {
		if msg := replicaFailure(d); msg != "" {
			st.Problem = d.Name + ": " + msg
			st.problems = append(st.problems, st.Problem)
		}
	}
	st.Replaced = replacedOf(snap.configMap)
	return st
}

// Ready reports whether the cluster lets its spawn end: the master is
// reachable through the Service's endpoints. No cluster is ready: the spawn
// has none (Ensure returns once the cache shows a created cluster).
func (s *Status) Ready() bool { return s == nil || len(s.Endpoints) > 0 }

// readyMaster is the name of a ready master pod, or "".
func (s *Status) readyMaster() string {
	for _, p := range s.Pods {
		if p.Role == "master" && p.Ready {
			return p.Name
		}
	}
	return ""
}

// Summary describes the cluster for a timeout message; "" if there is none.
func (s *Status) Summary() string {
	if s == nil {
		return ""
	}
	master := "not ready"
	if s.MasterReady {
		master = "ready"
	}
	out := fmt.Sprintf("Spark master %s, %d/%d workers ready, %d ready endpoints of %s", master, s.ReadyWorkers, s.Workers, len(s.Endpoints), spawner.SparkServiceName)
	for _, p := range s.problems {
		out += "; " + p
	}
	return out
}

// Milestones are the progress messages of a spawn's cluster already told.
// The zero value has told none.
type Milestones struct {
	announced, master, reachable bool
	workers                      int
}

// Next returns the messages of the milestones the cluster has reached
// since the last call. Milestones are read from the cache on every change,
// so a missed signal only delays them.
func (m *Milestones) Next(s *Status) []string {
	if s == nil {
		return nil
	}
	var out []string
	if !m.announced {
		m.announced = true
		out = append(out, fmt.Sprintf("Spark cluster requested: a master and %d workers at %s", s.Workers, spawner.SparkMasterURL))
	}
	if name := s.readyMaster(); name != "" && !m.master {
		m.master = true
		out = append(out, "Spark master "+name+" is ready")
	}
	if s.ReadyWorkers > m.workers {
		m.workers = s.ReadyWorkers
		out = append(out, fmt.Sprintf("Spark workers ready: %d/%d", s.ReadyWorkers, s.Workers))
	}
	if len(s.Endpoints) > 0 && !m.reachable {
		m.reachable = true
		out = append(out, fmt.Sprintf("Spark master reachable at %s (endpoint %s)", spawner.SparkMasterURL, s.Endpoints[0]))
	}
	return out
}
