package sparkcluster

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/dsmlp/spawner/poll"
	"github.com/dsmlp/spawner/spawner"
)

// notebooks is a notebook pod cache whose statuses tests set.
type notebooks struct {
	mu     sync.Mutex
	status map[string]poll.Status
	subs   map[string][]chan struct{}
}

func newNotebooks() *notebooks {
	return &notebooks{status: map[string]poll.Status{}, subs: map[string][]chan struct{}{}}
}

func (n *notebooks) set(ns, pod string, st poll.Status) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.status[ns+"/"+pod] = st
	for _, ch := range n.subs[ns+"/"+pod] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (n *notebooks) Status(ns, pod string) poll.Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	if st, ok := n.status[ns+"/"+pod]; ok {
		return st
	}
	return poll.Status{State: poll.StateAbsent}
}

func (n *notebooks) Subscribe(ns, pod string) (<-chan struct{}, func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch := make(chan struct{}, 1)
	n.subs[ns+"/"+pod] = append(n.subs[ns+"/"+pod], ch)
	return ch, func() {}
}

// fakeCluster is a fake API server whose creates get UIDs, as the real
// one's do, shared by the reconcilers (replicas) a test runs on it.
type fakeCluster struct {
	client *fake.Clientset
	nbs    *notebooks
	ctx    context.Context

	mu       sync.Mutex
	watching map[string]int
}

func newFakeCluster(t *testing.T, objects ...runtime.Object) *fakeCluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f := &fakeCluster{client: fake.NewClientset(objects...), nbs: newNotebooks(), ctx: ctx, watching: map[string]int{}}
	f.client.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if m, err := meta.Accessor(a.(k8stesting.CreateAction).GetObject()); err == nil && m.GetUID() == "" {
			m.SetUID(uuid.NewUUID())
		}
		return false, nil, nil
	})
	// The fake API server drops what happens between an informer's list and
	// its watch, so replicas start once every informer watches.
	f.client.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		wi, err := f.client.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		f.mu.Lock()
		f.watching[a.GetResource().Resource]++
		f.mu.Unlock()
		return true, wi, nil
	})
	return f
}

// replica runs a reconciler, as one spawnerd replica would, and waits until
// its informers watch.
func (f *fakeCluster) replica(t *testing.T) *Reconciler {
	t.Helper()
	f.mu.Lock()
	before := 0
	for _, n := range f.watching {
		before += n
	}
	f.mu.Unlock()
	r, err := New(f.client, "ns1", f.nbs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	eventually(t, "the caches sync", r.HasSynced)
	// configmaps, services, deployments, replicasets, endpointslices, pods, resourcequotas
	eventually(t, "every informer watches", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		n := 0
		for _, c := range f.watching {
			n += c
		}
		return n-before == 7
	})
	return r
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("%s: never happened", what)
	}
}

func (f *fakeCluster) deletes(resource string) []string {
	var out []string
	for _, a := range f.client.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok && a.GetResource().Resource == resource {
			out = append(out, d.GetName())
		}
	}
	return out
}

const testConfig = `
kubespawner:
  namespace: ns1
  spark:
    master: {cpu: 0.5, memory: 1G}
    worker: {cpu: 1, memory: 2G}
    workers: 2
`

// start creates alice's notebook pod and ensures her cluster on r.
func (f *fakeCluster) start(t *testing.T, r *Reconciler) Notebook {
	t.Helper()
	cfg, err := spawner.Parse([]byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	req := spawner.Request{User: "alice"}
	objs, settings, err := spawner.Build(cfg, req)
	if err != nil {
		t.Fatal(err)
	}
	c, err := spawner.BuildSpark(settings, req, objs.Pod)
	if err != nil || c == nil {
		t.Fatalf("BuildSpark = %v, %v", c, err)
	}
	if err := r.Admit(f.ctx, objs, c); err != nil {
		t.Fatal(err)
	}
	pod, err := f.client.CoreV1().Pods("ns1").Create(f.ctx, objs.Pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nb := Notebook{Namespace: "ns1", Pod: pod.Name, UID: pod.UID, User: "alice"}
	if err := r.Ensure(f.ctx, c, nb, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	f.nbs.set("ns1", pod.Name, poll.Status{State: poll.StateRunning, Pod: pod})
	return nb
}

func clusterLabels(component string) map[string]string {
	return map[string]string{spawner.LabelSparkCluster: "jupyter-alice", spawner.LabelComponent: component}
}

func identityOf(user string) map[string]string {
	return map[string]string{spawner.AnnotationSpawnerUser: user, spawner.AnnotationSpawnerServer: ""}
}

func TestAnotherReplicaReportsAndRemovesTheCluster(t *testing.T) {
	f := newFakeCluster(t)
	a := f.replica(t)
	nb := f.start(t, a)
	b := f.replica(t) // started after the spawn: knows only the cluster

	eventually(t, "replica b sees the cluster", func() bool { return b.Status(nb) != nil })
	// b reads the notebook by its pod and server alone, no UID.
	other := Notebook{Namespace: nb.Namespace, Pod: nb.Pod, User: nb.User}
	st := b.Status(other)
	if st.Workers != 2 || st.MasterReady || st.Ready() {
		t.Errorf("replica b's status %+v, want 2 workers asked and not ready", st)
	}
	var seen Milestones
	if msgs := seen.Next(st); len(msgs) != 1 || !strings.Contains(msgs[0], "a master and 2 workers") {
		t.Errorf("replica b's milestones %q, want the request with the cluster's worker count", msgs)
	}

	if err := b.Remove(f.ctx, other); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"configmaps", "services", "deployments"} {
		if len(f.deletes(r)) == 0 {
			t.Errorf("replica b's Remove did not delete the %s", r)
		}
	}
	if err := b.WaitGone(f.ctx, other, 10*time.Second); err != nil {
		t.Errorf("WaitGone on replica b: %v", err)
	}
}

func TestReplacedIsReadFromTheClusterByEveryReplica(t *testing.T) {
	f := newFakeCluster(t)
	a := f.replica(t)
	nb := f.start(t, a)
	b := f.replica(t)
	evicted := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "spark-worker-abc-11111", Namespace: "ns1",
			Labels: clusterLabels(spawner.SparkWorkerComponent), Annotations: identityOf("alice")},
		Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory."},
	}
	if _, err := f.client.CoreV1().Pods("ns1").Create(f.ctx, evicted, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the evicted worker is deleted", func() bool {
		_, err := f.client.CoreV1().Pods("ns1").Get(f.ctx, evicted.Name, metav1.GetOptions{})
		return err != nil
	})
	for name, r := range map[string]*Reconciler{"a": a, "b": b} {
		eventually(t, "replica "+name+" shows the replacement", func() bool {
			st := r.Status(nb)
			return st != nil && len(st.Replaced) == 1 && st.Replaced[0].Pod == evicted.Name && st.Replaced[0].Reason == "Evicted"
		})
	}
	// A restarted replica reads it too.
	c := f.replica(t)
	if st := c.Status(nb); st == nil || len(st.Replaced) != 1 {
		t.Errorf("a new replica's status %+v, want the replaced worker", st)
	}
}

func TestAnotherServersObjectsAreNeitherReportedNorDeleted(t *testing.T) {
	// Bob's objects carry alice's cluster label (copied by hand, or a slug
	// that collides): they are not alice's.
	bobs := []runtime.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: spawner.SparkConfigMapName, Namespace: "ns1", UID: "cm-bob",
			Labels: clusterLabels(""), Annotations: identityOf("bob"),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "jupyter-alice", UID: "bob-pod"}}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: spawner.SparkServiceName, Namespace: "ns1", UID: "svc-bob",
			Labels: clusterLabels(spawner.SparkMasterComponent), Annotations: identityOf("bob")}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "spark-worker-bob-1", Namespace: "ns1",
			Labels: clusterLabels(spawner.SparkWorkerComponent), Annotations: identityOf("bob")},
			Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "spark-master-svc-bob", Namespace: "ns1",
			Labels:          map[string]string{spawner.LabelSparkCluster: "jupyter-alice", discoveryv1.LabelServiceName: spawner.SparkServiceName},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: spawner.SparkServiceName, UID: "svc-bob"}}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.66"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}},
	}
	f := newFakeCluster(t, bobs...)
	r := f.replica(t)
	alice := Notebook{Namespace: "ns1", Pod: "jupyter-alice", User: "alice"}
	if st := r.Status(alice); st != nil {
		t.Errorf("alice's status %+v, want none: every object is bob's", st)
	}
	if err := r.Remove(f.ctx, alice); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitGone(f.ctx, alice, time.Second); err != nil {
		t.Errorf("WaitGone: %v, want alice's cluster gone (bob's objects are not hers)", err)
	}
	// The reconciler acts for bob, the owner the objects name, on bob's pods:
	// his stopped worker is replaced and his status shows it.
	bob := Notebook{Namespace: "ns1", Pod: "jupyter-alice", User: "bob"}
	eventually(t, "bob's stopped worker is replaced", func() bool {
		st := r.Status(bob)
		return st != nil && len(st.Replaced) == 1
	})
	for _, res := range []string{"configmaps", "services", "deployments"} {
		if d := f.deletes(res); len(d) > 0 {
			t.Errorf("deleted %s %v of bob's", res, d)
		}
	}
	if st := r.Status(bob); len(st.Endpoints) != 1 {
		t.Errorf("bob's status %+v, want his Service's endpoint", st)
	}
}

func TestStoppedPodOfAnotherServerIsLeftAlone(t *testing.T) {
	f := newFakeCluster(t)
	r := f.replica(t)
	nb := f.start(t, r)
	theirs := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "spark-worker-xyz-22222", Namespace: "ns1",
			Labels: clusterLabels(spawner.SparkWorkerComponent), Annotations: identityOf("bob")},
		Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"},
	}
	unmarked := theirs.DeepCopy()
	unmarked.Name, unmarked.Annotations = "spark-worker-xyz-33333", nil
	for _, p := range []*corev1.Pod{theirs, unmarked} {
		if _, err := f.client.CoreV1().Pods("ns1").Create(f.ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Let the reconciler see both; a sync of alice's cluster follows each.
	eventually(t, "the pods are cached", func() bool { return len(r.cache.cluster(nb.key()).pods) == 2 })
	time.Sleep(100 * time.Millisecond)
	if d := f.deletes("pods"); len(d) > 0 {
		t.Errorf("deleted pods %v, neither of which carries alice's identity", d)
	}
	if st := r.Status(nb); len(st.Pods) != 1 || st.Pods[0].Name != unmarked.Name {
		t.Errorf("alice's status pods %+v, want only the unmarked one (bob's is his)", st.Pods)
	}
}

func TestReadyEndpoints(t *testing.T) {
	slice := func(ready *bool, addrs ...string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			Ports:     []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}, {Name: ptr.To("spark"), Port: ptr.To[int32](7077)}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: addrs, Conditions: discoveryv1.EndpointConditions{Ready: ready}}},
		}
	}
	v := newView(snapshot{slices: []*discoveryv1.EndpointSlice{slice(ptr.To(false), "10.0.0.1"), slice(nil, "10.0.0.3"), slice(ptr.To(true), "10.0.0.2")}})
	if got := v.readyEndpoints(); strings.Join(got, ",") != "10.0.0.2:7077,10.0.0.3:7077" {
		t.Errorf("readyEndpoints = %v, want the ready and the unknown ones on the cluster port", got)
	}
}

func TestStatusOfANewPodIgnoresAnEarlierPodsCluster(t *testing.T) {
	f := newFakeCluster(t)
	r := f.replica(t)
	nb := f.start(t, r)
	// The server restarts without Spark before the garbage collector has
	// removed the cluster of its earlier pod.
	next := nb
	next.UID = "a-newer-pod"
	if st := r.Status(next); st != nil || !st.Ready() || r.Failure(f.ctx, next) != "" {
		t.Errorf("the new pod's status %+v, want none, so that its spawn is not held up", st)
	}
	server := nb
	server.UID = ""
	if r.Status(server) == nil {
		t.Error("the server's status lacks the cluster that is still there")
	}
}
