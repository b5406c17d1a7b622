package lifecycle

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/poll"
	"github.com/dsmlp/spawner/serverid"
	"github.com/dsmlp/spawner/sparkcluster"
	"github.com/dsmlp/spawner/spawner"
)

const sparkTestConfig = `
kubespawner:
  namespace: ns1
  cpu_guarantee: 0.5
  cpu_limit: 1
  start_timeout: 30
  spark:
    master: {cpu: 0.5, memory: 1G}
    worker: {cpu: 1, memory: 2G}
    workers: 2
`

// fakeWatcher is the notebook pod cache: tests set each pod's status.
// fakeWatcher is a pod cache with events: tests set a pod's status and add
// its events, and subscribers are signalled as the informers would.
type fakeWatcher struct {
	mu     sync.Mutex
	status map[string]poll.Status
	events map[string][]*corev1.Event
	subs   map[string][]chan struct{}
}

func newFakeWatcher() *fakeWatcher {
	return &fakeWatcher{status: map[string]poll.Status{}, events: map[string][]*corev1.Event{}, subs: map[string][]chan struct{}{}}
}

func (w *fakeWatcher) signalLocked(key string) {
	for _, ch := range w.subs[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (w *fakeWatcher) set(ns, pod string, st poll.Status) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.status[ns+"/"+pod] = st
	w.signalLocked(ns + "/" + pod)
}

func (w *fakeWatcher) add(ns, pod string, evs ...*corev1.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events[ns+"/"+pod] = append(w.events[ns+"/"+pod], evs...)
	w.signalLocked(ns + "/" + pod)
}

func (w *fakeWatcher) Status(ns, pod string) poll.Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	if st, ok := w.status[ns+"/"+pod]; ok {
		return st
	}
	return poll.Status{State: poll.StateAbsent}
}

func (w *fakeWatcher) Subscribe(ns, pod string) (<-chan struct{}, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := make(chan struct{}, 1)
	w.subs[ns+"/"+pod] = append(w.subs[ns+"/"+pod], ch)
	return ch, func() {}
}

func (w *fakeWatcher) Events(ns, pod string) []*corev1.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*corev1.Event(nil), w.events[ns+"/"+pod]...)
}

func (w *fakeWatcher) ExpectStop(string, string)                     {}
func (w *fakeWatcher) ForgetStop(string, string)                     {}
func (w *fakeWatcher) LastStop(string, string) (poll.StopInfo, bool) { return poll.StopInfo{}, false }
func (w *fakeWatcher) PodMetas() []*metav1.ObjectMeta                { return nil }

func (w *fakeWatcher) NewestEvent(ns, pod string) *corev1.Event {
	evs := w.Events(ns, pod)
	if len(evs) == 0 {
		return nil
	}
	return evs[len(evs)-1]
}

// PodsOf finds the pods the tests set by their server-key label.
func (w *fakeWatcher) PodsOf(key string) []*corev1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*corev1.Pod
	for _, st := range w.status {
		if st.Pod != nil && st.Pod.Labels[serverid.LabelKey] == key {
			out = append(out, st.Pod)
		}
	}
	return out
}

// runningPod is the cached pod of the default server of the user its name
// (jupyter-<user>) names, with that server's identity, as spawnerd makes it.
func runningPod(ns, name string, uid types.UID, ip string) *corev1.Pod {
	user := strings.TrimPrefix(name, "jupyter-")
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: uid,
			Labels:      map[string]string{serverid.LabelKey: serverid.Key(user, "")},
			Annotations: map[string]string{serverid.AnnotationUser: user, serverid.AnnotationServer: ""}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook", Ports: []corev1.ContainerPort{{Name: "notebook-port", ContainerPort: 8888}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip},
	}
}

type sparkFixture struct {
	m      *Manager
	client *fake.Clientset
	w      *fakeWatcher
	ctx    context.Context
}

// newSparkFixture runs a manager on a fake API server whose creates get
// UIDs, as the real one's do, and waits until its caches have synced.
func newSparkFixture(t *testing.T, objects ...runtime.Object) *sparkFixture {
	t.Helper()
	cfg, err := spawner.Parse([]byte(sparkTestConfig))
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(objects...)
	client.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if m, err := meta.Accessor(a.(k8stesting.CreateAction).GetObject()); err == nil && m.GetUID() == "" {
			m.SetUID(uuid.NewUUID())
		}
		return false, nil, nil
	})
	// The fake API server drops what happens between an informer's list and
	// its watch, so the fixture waits until every informer watches.
	var wmu sync.Mutex
	watching := map[string]bool{}
	client.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		wi, err := client.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		wmu.Lock()
		watching[a.GetResource().Resource] = true
		wmu.Unlock()
		return true, wi, nil
	})
	w := newFakeWatcher()
	m, err := New(client, cfg, w, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	eventually(t, "the caches sync", m.HasSynced)
	// configmaps, services, deployments, replicasets, endpointslices, pods, resourcequotas
	eventually(t, "every informer watches", func() bool {
		wmu.Lock()
		defer wmu.Unlock()
		return len(watching) == 7
	})
	return &sparkFixture{m: m, client: client, w: w, ctx: ctx}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("%s: never happened", what)
	}
}

// writes counts the fake API server's write actions on a resource.
func (f *sparkFixture) writes(verb, resource string) int {
	n := 0
	for _, a := range f.client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

func (f *sparkFixture) notebookUID(t *testing.T) types.UID {
	t.Helper()
	pod, err := f.client.CoreV1().Pods("ns1").Get(f.ctx, "jupyter-alice", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod.UID
}

// aliceNotebook is alice's notebook pod as the owner of her cluster.
var aliceNotebook = sparkcluster.Notebook{Namespace: "ns1", Pod: "jupyter-alice", User: "alice"}

func sparkLabels(component string) map[string]string {
	return map[string]string{spawner.LabelSparkCluster: "jupyter-alice", spawner.LabelComponent: component}
}

// masterUp makes the master pod ready and its Service's endpoint ready, as
// the ReplicaSet, kubelet and EndpointSlice controllers would.
func (f *sparkFixture) masterUp(t *testing.T, ip string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "spark-master-abc-12345", Namespace: "ns1", Labels: sparkLabels(spawner.SparkMasterComponent)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	labels := sparkLabels(spawner.SparkMasterComponent)
	labels[discoveryv1.LabelServiceName] = spawner.SparkServiceName
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "spark-master-svc-x1", Namespace: "ns1", Labels: labels},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("spark"), Port: ptr.To[int32](7077)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	if _, err := f.client.CoreV1().Pods("ns1").Create(f.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A real endpoint turns ready only after its pod does; the two fake
	// informers need not deliver in that order unless the test waits.
	eventually(t, "the master pod is cached", func() bool {
		st := f.m.spark.Status(aliceNotebook)
		return st != nil && len(st.Pods) > 0 && st.Pods[0].Name == pod.Name
	})
	if _, err := f.client.DiscoveryV1().EndpointSlices("ns1").Create(f.ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (f *sparkFixture) progress(key Key) []Event {
	f.m.mu.Lock()
	sp := f.m.spawns[key]
	f.m.mu.Unlock()
	evs, _, _ := sp.events.since(0)
	return evs
}

func TestSparkStartOwnsObjectsAndWaitsForTheMaster(t *testing.T) {
	f := newSparkFixture(t)
	key := Key{User: "alice"}
	if _, err := f.m.Start(f.ctx, spawner.Request{User: "alice"}, history.Actor{Kind: history.ActorUser, Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	uid := f.notebookUID(t)
	deps, err := f.client.AppsV1().Deployments("ns1").List(f.ctx, metav1.ListOptions{})
	if err != nil || len(deps.Items) != 2 {
		t.Fatalf("deployments %v %v, want master and workers", deps, err)
	}
	owned := []metav1.Object{&deps.Items[0], &deps.Items[1]}
	svc, err := f.client.CoreV1().Services("ns1").Get(f.ctx, spawner.SparkServiceName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := f.client.CoreV1().ConfigMaps("ns1").Get(f.ctx, spawner.SparkConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range append(owned, svc, cm) {
		refs := o.GetOwnerReferences()
		if len(refs) != 1 || refs[0].UID != uid || refs[0].Kind != "Pod" || !*refs[0].BlockOwnerDeletion {
			t.Errorf("%s owner references %+v, want the notebook pod %s blocking", o.GetName(), refs, uid)
		}
	}

	// The notebook runs, but the master is not reachable yet.
	f.w.set("ns1", "jupyter-alice", poll.Status{State: poll.StateRunning, Pod: runningPod("ns1", "jupyter-alice", uid, "10.0.0.9")})
	time.Sleep(50 * time.Millisecond)
	if s := f.m.Server(key, Hint{}); s.Status != StatusPending {
		t.Fatalf("status %s before the master is reachable, want pending", s.Status)
	}
	f.masterUp(t, "10.0.0.5")
	eventually(t, "the server runs", func() bool { return f.m.Server(key, Hint{}).Status == StatusRunning })
	var msgs []string
	for _, e := range f.progress(key) {
		msgs = append(msgs, e.Message)
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{"Spark cluster requested: a master and 2 workers", "Spark master spark-master-abc-12345 is ready",
		"Spark master reachable at spark://spark-master-svc:7077 (endpoint 10.0.0.5:7077)", "Server ready at http://10.0.0.9:8888"} {
		if !strings.Contains(all, want) {
			t.Errorf("progress lacks %q:\n%s", want, all)
		}
	}
	st := f.m.Server(key, Hint{}).Spark
	if st == nil || !st.MasterReady || st.Workers != 2 || len(st.Endpoints) != 1 || st.Endpoints[0] != "10.0.0.5:7077" || len(st.Pods) != 1 || st.Pods[0].Role != "master" {
		t.Errorf("spark status %+v", st)
	}

	// A second start of the running server writes nothing.
	before := len(f.client.Actions())
	if _, err := f.m.Start(f.ctx, spawner.Request{User: "alice"}, history.Actor{Kind: history.ActorUser, Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	for _, a := range f.client.Actions()[before:] {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			t.Errorf("second start wrote: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}

	// Stop deletes every object and waits until the cache shows none.
	go func() {
		// The garbage collector's part: the Deployments' pods and slices go.
		_ = wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return f.writes("delete", "deployments") == 2, nil
		})
		_ = f.client.CoreV1().Pods("ns1").Delete(context.Background(), "spark-master-abc-12345", metav1.DeleteOptions{})
		_ = f.client.DiscoveryV1().EndpointSlices("ns1").Delete(context.Background(), "spark-master-svc-x1", metav1.DeleteOptions{})
		_ = f.client.CoreV1().Pods("ns1").Delete(context.Background(), "jupyter-alice", metav1.DeleteOptions{})
		f.w.set("ns1", "jupyter-alice", poll.Status{State: poll.StateAbsent})
	}()
	gone, err := f.m.Stop(f.ctx, key, Hint{}, false, 10*time.Second, history.Actor{Kind: history.ActorUser, Name: "alice"})
	if err != nil || !gone {
		t.Fatalf("Stop = %v, %v; want gone", gone, err)
	}
	for _, r := range []string{"configmaps", "services", "deployments"} {
		if f.writes("delete", r) == 0 {
			t.Errorf("stop did not delete the %s", r)
		}
	}
	if f.m.spark.Status(aliceNotebook) != nil {
		t.Error("the cluster is still cached after Stop answered gone")
	}
}

func TestSparkQuotaRefusesBeforeCreating(t *testing.T) {
	hard := rl("requests.cpu", "4", "limits.cpu", "8")
	q := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "allowance", Namespace: "ns1"},
		Spec:       corev1.ResourceQuotaSpec{Hard: hard},
		Status:     corev1.ResourceQuotaStatus{Hard: hard, Used: rl("requests.cpu", "2", "limits.cpu", "2")},
	}
	db := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "postgres", Namespace: "ns1"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{container(rl("cpu", "2"), rl("cpu", "2"))}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	f := newSparkFixture(t, q, db)
	_, err := f.m.Start(f.ctx, spawner.Request{User: "alice"}, history.Actor{Kind: history.ActorUser, Name: "alice"})
	if !errors.Is(err, ErrQuota) {
		t.Fatalf("Start = %v, want ErrQuota", err)
	}
	for _, want := range []string{"not enough requests.cpu in namespace ns1 (ResourceQuota allowance)", "need 3 (notebook 0.5, Spark master 0.5, 2 Spark workers 2)",
		"only 2 of 4 is free", "already using it: pod postgres 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	for _, r := range []string{"pods", "configmaps", "services", "deployments"} {
		if n := f.writes("create", r); n != 0 {
			t.Errorf("the refused start created %d %s", n, r)
		}
	}
}

func TestSparkQuotaStaleUsageLetsTheStartThrough(t *testing.T) {
	// The quota still counts pods that are gone: the live pods show room.
	hard := rl("requests.cpu", "4")
	q := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "allowance", Namespace: "ns1"},
		Spec:       corev1.ResourceQuotaSpec{Hard: hard},
		Status:     corev1.ResourceQuotaStatus{Hard: hard, Used: rl("requests.cpu", "3")},
	}
	f := newSparkFixture(t, q)
	if _, err := f.m.Start(f.ctx, spawner.Request{User: "alice"}, history.Actor{Kind: history.ActorUser, Name: "alice"}); err != nil {
		t.Fatalf("Start = %v, want it to go ahead", err)
	}
	if f.writes("create", "deployments") != 2 {
		t.Errorf("deployments created: %d, want 2", f.writes("create", "deployments"))
	}
}

func TestSparkReplicaFailureFailsTheSpawnAndRemovesAll(t *testing.T) {
	f := newSparkFixture(t)
	key := Key{User: "alice"}
	if _, err := f.m.Start(f.ctx, spawner.Request{User: "alice"}, history.Actor{Kind: history.ActorUser, Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	uid := f.notebookUID(t)
	f.w.set("ns1", "jupyter-alice", poll.Status{State: poll.StateRunning, Pod: runningPod("ns1", "jupyter-alice", uid, "10.0.0.9")})
	d, err := f.client.AppsV1().Deployments("ns1").Get(f.ctx, spawner.SparkWorkerName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate",
		Message: `pods "spark-worker-5d9f-abcde" is forbidden: exceeded quota: allowance, requested: requests.cpu=1, used: requests.cpu=3500m, limited: requests.cpu=4`}}
	if _, err := f.client.AppsV1().Deployments("ns1").UpdateStatus(f.ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No wait for the cache to show the failure: the reaction may remove the
	// deployment before a poll could see it.
	eventually(t, "the spawn fails", func() bool {
		f.m.mu.Lock()
		sp := f.m.spawns[key]
		f.m.mu.Unlock()
		done, _, failed := sp.result()
		return done && failed != ""
	})
	evs := f.progress(key)
	last := evs[len(evs)-1]
	if !last.Failed || !strings.Contains(last.Message, "Deployment spark-worker") || !strings.Contains(last.Message, "exceeded quota: allowance") {
		t.Errorf("last event %+v, want the quota failure", last)
	}
	if f.writes("delete", "pods") != 1 || f.writes("delete", "deployments") != 2 || f.writes("delete", "services") != 1 || f.writes("delete", "configmaps") != 1 {
		t.Errorf("deletes: pods %d deployments %d services %d configmaps %d, want everything removed",
			f.writes("delete", "pods"), f.writes("delete", "deployments"), f.writes("delete", "services"), f.writes("delete", "configmaps"))
	}
}

func TestSparkReconcile(t *testing.T) {
	f := newSparkFixture(t)
	if _, err := f.m.Start(f.ctx, spawner.Request{User: "alice"}, history.Actor{Kind: history.ActorUser, Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	uid := f.notebookUID(t)
	f.w.set("ns1", "jupyter-alice", poll.Status{State: poll.StateRunning, Pod: runningPod("ns1", "jupyter-alice", uid, "10.0.0.9")})
	f.masterUp(t, "10.0.0.5")
	eventually(t, "the server runs", func() bool { return f.m.Server(Key{User: "alice"}, Hint{}).Status == StatusRunning })
	evicted := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "spark-worker-abc-11111", Namespace: "ns1", Labels: sparkLabels(spawner.SparkWorkerComponent),
			// The pod template's identity, which a replacement requires.
			Annotations: map[string]string{spawner.AnnotationSpawnerUser: "alice", spawner.AnnotationSpawnerServer: ""}},
		Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory."},
	}
	if _, err := f.client.CoreV1().Pods("ns1").Create(f.ctx, evicted, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the evicted worker is deleted", func() bool {
		_, err := f.client.CoreV1().Pods("ns1").Get(f.ctx, evicted.Name, metav1.GetOptions{})
		return err != nil
	})
	eventually(t, "the status shows the replacement", func() bool {
		st := f.m.Server(Key{User: "alice"}, Hint{}).Spark
		return st != nil && len(st.Replaced) == 1 && st.Replaced[0].Pod == evicted.Name && st.Replaced[0].Reason == "Evicted"
	})
	if f.writes("delete", "deployments") != 0 {
		t.Error("replacing a worker deleted the cluster")
	}

	// The notebook stops but is kept (delete_stopped_pods false): the
	// cluster goes.
	f.w.set("ns1", "jupyter-alice", poll.Status{State: poll.StateStopped, Pod: runningPod("ns1", "jupyter-alice", uid, "")})
	eventually(t, "the cluster is removed", func() bool { return f.writes("delete", "deployments") >= 2 && f.writes("delete", "services") >= 1 })
}

func TestSparkConflictWithAnotherServer(t *testing.T) {
	theirs := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: spawner.SparkServiceName, Namespace: "ns1",
		Labels:      map[string]string{spawner.LabelSparkCluster: "jupyter-bob"},
		Annotations: map[string]string{spawner.AnnotationSpawnerUser: "bob", spawner.AnnotationSpawnerServer: ""}}}
	f := newSparkFixture(t, theirs)
	_, err := f.m.Start(f.ctx, spawner.Request{User: "alice"}, history.Actor{Kind: history.ActorUser, Name: "alice"})
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), `of user "bob"`) {
		t.Fatalf("Start = %v, want a conflict naming bob", err)
	}
	if f.writes("delete", "pods") != 1 {
		t.Errorf("the refused start's notebook pod was not removed")
	}
}

func container(requests, limits corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits}}
}

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}
