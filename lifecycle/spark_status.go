package lifecycle

import (
	"net"
	"sort"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/dsmlp/spawner/spawner"
)

// SparkStatus is a server's Spark cluster as the cache sees it.
type SparkStatus struct {
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
	Pods []SparkPod `json:"pods"`
	// Replaced are the cluster's recent stopped pods, newest last, which
	// spawnerd deleted so that their ReplicaSet replaced them.
	Replaced []SparkPodStop `json:"replaced,omitempty"`
	// Problem is a ReplicaSet's failure to create pods (quota, say).
	Problem string `json:"problem,omitempty"`
}

// SparkPod is one pod of a Spark cluster.
type SparkPod struct {
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

// SparkPodStop is a Spark pod that stopped and was replaced.
type SparkPodStop struct {
	Pod     string    `json:"pod"`
	Role    string    `json:"role"`
	Phase   string    `json:"phase"`
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message,omitempty"`
	At      time.Time `json:"at"`
}

// maxReplacedKept bounds SparkStatus.Replaced.
const maxReplacedKept = 10

// sparkView derives readiness from one cluster's cached objects.
type sparkView struct{ s sparkSnapshot }

func newSparkView(s sparkSnapshot) sparkView { return sparkView{s} }

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
func (v sparkView) readyMaster() string {
	for _, p := range v.s.pods {
		if sparkRole(p) == "master" && podReady(p) {
			return p.Name
		}
	}
	return ""
}

func (v sparkView) readyWorkers() int {
	n := 0
	for _, p := range v.s.pods {
		if sparkRole(p) == "worker" && podReady(p) {
			n++
		}
	}
	return n
}

// readyEndpoints are the master's ready addresses behind spark-master-svc,
// with the cluster port, sorted. An endpoint whose ready condition is
// unset counts as ready, as the EndpointSlice API defines.
func (v sparkView) readyEndpoints() []string {
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

func (v sparkView) deployments() []*appsv1.Deployment {
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

// sparkStatus reports the cluster of the server whose notebook pod is ref,
// or nil if there is none.
func (m *Manager) sparkStatus(ref podRef) *SparkStatus {
	if m.spark == nil || ref.name == "" {
		return nil
	}
	key := sparkKeyOf(ref)
	snap := m.spark.cache.cluster(key)
	if snap.empty() {
		return nil
	}
	v := newSparkView(snap)
	st := &SparkStatus{
		MasterURL: spawner.SparkMasterURL, UIURL: spawner.SparkMasterUIURL,
		MasterReady: v.readyMaster() != "", ReadyWorkers: v.readyWorkers(),
		Endpoints: v.readyEndpoints(), Pods: []SparkPod{},
	}
	if snap.worker != nil && snap.worker.Spec.Replicas != nil {
		st.Workers = int(*snap.worker.Spec.Replicas)
	}
	if st.Endpoints == nil {
		st.Endpoints = []string{}
	}
	for _, p := range snap.pods {
		sp := SparkPod{Name: p.Name, Role: sparkRole(p), Phase: string(p.Status.Phase), Ready: podReady(p),
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
		}
	}
	st.Replaced = m.spark.replacedOf(key)
	return st
}

func (s *sparkSupport) recordReplaced(key cache.ObjectName, stop SparkPodStop) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := append(s.replaced[key], stop)
	if len(l) > maxReplacedKept {
		l = l[len(l)-maxReplacedKept:]
	}
	s.replaced[key] = l
}

func (s *sparkSupport) replacedOf(key cache.ObjectName) []SparkPodStop {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SparkPodStop(nil), s.replaced[key]...)
}
