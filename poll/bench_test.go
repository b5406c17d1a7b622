package poll

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dsmlp/spawner/serverid"
	"github.com/dsmlp/spawner/spawner"
)

const benchPods = 10000

// realisticPod is a running notebook pod as z2jh's KubeSpawner makes it, with
// the status and managedFields the API server adds.
func realisticPod(i int) *corev1.Pod {
	user := fmt.Sprintf("user%05d", i)
	name := "jupyter-" + user
	now := metav1.NewTime(time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC))
	scopes := fmt.Sprintf(`["access:servers!server=%s/", "access:servers!user=%s"]`, user, user)
	env := []corev1.EnvVar{}
	for _, kv := range [][2]string{
		{"JUPYTERHUB_API_TOKEN", "0123456789abcdef0123456789abcdef"},
		{"JPY_API_TOKEN", "0123456789abcdef0123456789abcdef"},
		{"JUPYTERHUB_CLIENT_ID", "jupyterhub-user-" + user},
		{"JUPYTERHUB_API_URL", "http://hub:8081/hub/api"},
		{"JUPYTERHUB_ACTIVITY_URL", "http://hub:8081/hub/api/users/" + user + "/activity"},
		{"JUPYTERHUB_BASE_URL", "/"},
		{"JUPYTERHUB_SERVICE_PREFIX", "/user/" + user + "/"},
		{"JUPYTERHUB_SERVICE_URL", "http://0.0.0.0:8888/user/" + user + "/"},
		{"JUPYTERHUB_USER", user},
		{"JUPYTERHUB_SERVER_NAME", ""},
		{"JUPYTERHUB_HOST", ""},
		{"JUPYTERHUB_OAUTH_CALLBACK_URL", "/user/" + user + "/oauth_callback"},
		{"JUPYTERHUB_OAUTH_SCOPES", scopes},
		{"JUPYTERHUB_OAUTH_ACCESS_SCOPES", scopes},
		{"JUPYTERHUB_OAUTH_CLIENT_ALLOWED_SCOPES", "[]"},
		{"JUPYTERHUB_COOKIE_HOST_PREFIX_ENABLED", "0"},
		{"MEM_GUARANTEE", "1073741824"},
		{"MEM_LIMIT", "2147483648"},
		{"CPU_LIMIT", "2.0"},
		{"JUPYTER_IMAGE", "quay.io/jupyterhub/k8s-singleuser-sample:4.0.0"},
		{"JUPYTER_IMAGE_SPEC", "quay.io/jupyterhub/k8s-singleuser-sample:4.0.0"},
	} {
		env = append(env, corev1.EnvVar{Name: kv[0], Value: kv[1]})
	}
	fieldsJSON := []byte(`{"f:metadata":{"f:annotations":{".":{},"f:hub.jupyter.org/username":{}},"f:labels":{".":{},"f:app":{},"f:chart":{},"f:component":{},"f:heritage":{},"f:hub.jupyter.org/network-access-hub":{},"f:hub.jupyter.org/servername":{},"f:hub.jupyter.org/username":{},"f:release":{}}},"f:spec":{"f:affinity":{".":{},"f:nodeAffinity":{".":{},"f:preferredDuringSchedulingIgnoredDuringExecution":{}}},"f:automountServiceAccountToken":{},"f:containers":{"k:{\"name\":\"notebook\"}":{".":{},"f:args":{},"f:env":{},"f:image":{},"f:imagePullPolicy":{},"f:lifecycle":{},"f:name":{},"f:ports":{},"f:resources":{},"f:securityContext":{},"f:volumeMounts":{}}},"f:initContainers":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:tolerations":{},"f:volumes":{}}}`)
	statusFields := []byte(`{"f:status":{"f:conditions":{"k:{\"type\":\"ContainersReady\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Initialized\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Ready\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}}},"f:containerStatuses":{},"f:hostIP":{},"f:initContainerStatuses":{},"f:phase":{},"f:podIP":{},"f:podIPs":{".":{},"k:{\"ip\":\"10.0.0.7\"}":{".":{},"f:ip":{}}},"f:startTime":{}}}`)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: testNS, UID: types.UID(fmt.Sprintf("5b0e6c1e-0000-4000-8000-%012d", i)),
			ResourceVersion: fmt.Sprint(100000 + i), CreationTimestamp: now,
			Labels: map[string]string{
				"app": "jupyterhub", "chart": "jupyterhub-4.0.0", "component": "singleuser-server",
				"heritage": "jupyterhub", "release": "jhub", "hub.jupyter.org/network-access-hub": "true",
				"hub.jupyter.org/servername": "", "hub.jupyter.org/username": user,
			},
			Annotations: map[string]string{
				"hub.jupyter.org/username": user, AnnotationUser: user,
				"hub.jupyter.org/kubespawner-version": "7.1.0", "hub.jupyter.org/jupyterhub-version": "5.3.0",
			},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kubespawner", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &now, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(string(fieldsJSON))},
				{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &now, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(string(statusFields)), Subresource: "status"},
			},
		},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyOnFailure, NodeName: fmt.Sprintf("node-%03d", i%300),
			AutomountServiceAccountToken: new(bool), SchedulerName: "jhub-user-scheduler",
			SecurityContext: &corev1.PodSecurityContext{FSGroup: new(int64(100))},
			Tolerations: []corev1.Toleration{
				{Key: "hub.jupyter.org/dedicated", Operator: corev1.TolerationOpEqual, Value: "user", Effect: corev1.TaintEffectNoSchedule},
				{Key: "hub.jupyter.org_dedicated", Operator: corev1.TolerationOpEqual, Value: "user", Effect: corev1.TaintEffectNoSchedule},
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(int64(300))},
			},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "hub.jupyter.org/node-purpose", Operator: corev1.NodeSelectorOpIn, Values: []string{"user"}}}},
			}}}},
			Volumes: []corev1.Volume{
				{Name: "volume-" + user, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim-" + user}}},
			},
			InitContainers: []corev1.Container{{
				Name: "block-cloud-metadata", Image: "quay.io/jupyterhub/k8s-network-tools:4.0.0",
				Command:         []string{"iptables", "--append", "OUTPUT", "--protocol", "tcp", "--destination", "169.254.169.254", "--destination-port", "80", "--jump", "DROP"},
				SecurityContext: &corev1.SecurityContext{Privileged: new(true), RunAsUser: new(int64(0)), Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}},
			}},
			Containers: []corev1.Container{{
				Name: NotebookContainer, Image: "quay.io/jupyterhub/k8s-singleuser-sample:4.0.0",
				Args:  []string{"jupyterhub-singleuser"},
				Ports: []corev1.ContainerPort{{Name: "notebook-port", ContainerPort: 8888, Protocol: corev1.ProtocolTCP}},
				Env:   env,
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi"), corev1.ResourceCPU: resource.MustParse("2")},
					Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
				},
				VolumeMounts:    []corev1.VolumeMount{{Name: "volume-" + user, MountPath: "/home/jovyan"}},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: new(false), RunAsUser: new(int64(1000))},
				Lifecycle:       &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "cp -rn /etc/skel/. /home/jovyan/ || true"}}}},
				ImagePullPolicy: corev1.PullIfNotPresent, TerminationMessagePath: "/dev/termination-log",
			}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.0.0.7", HostIP: "192.168.1.20",
			PodIPs: []corev1.PodIP{{IP: "10.0.0.7"}}, HostIPs: []corev1.HostIP{{IP: "192.168.1.20"}},
			StartTime: &now, QOSClass: corev1.PodQOSBurstable,
			Conditions: readyConditions(now),
			InitContainerStatuses: []corev1.ContainerStatus{{
				Name: "block-cloud-metadata", Ready: true, Image: "quay.io/jupyterhub/k8s-network-tools:4.0.0",
				ImageID:     "quay.io/jupyterhub/k8s-network-tools@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
				ContainerID: "containerd://0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
				State:       corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now, ContainerID: "containerd://0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}},
			}},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: NotebookContainer, Ready: true, Started: new(true), Image: "quay.io/jupyterhub/k8s-singleuser-sample:4.0.0",
				ImageID:     "quay.io/jupyterhub/k8s-singleuser-sample@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
				ContainerID: "containerd://fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
				State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			}},
		},
	}
}

// decoded round-trips an object through JSON, so that each one owns its
// strings as one decoded from a watch stream does.
func decoded[T any](tb testing.TB, obj *T) *T {
	raw, err := json.Marshal(obj)
	if err != nil {
		tb.Fatal(err)
	}
	out := new(T)
	if err := json.Unmarshal(raw, out); err != nil {
		tb.Fatal(err)
	}
	return out
}

// benchWatcher returns a synced-looking Watcher whose pod indexer holds n
// transformed pods, filled directly.
func benchWatcher(b *testing.B, n int) *Watcher {
	b.Helper()
	w, err := New(fake.NewClientset(), Options{Namespace: testNS})
	if err != nil {
		b.Fatal(err)
	}
	idx := w.spaces[testNS].pods.GetIndexer()
	for i := range n {
		obj, _ := trimPod(decoded(b, realisticPod(i)))
		if err := idx.Add(obj); err != nil {
			b.Fatal(err)
		}
		w.keys.set(nil, obj.(*cachedPod))
	}
	// The store was filled by hand, not by a LIST.
	w.spaces[testNS].podsSynced = func() bool { return true }
	return w
}

func benchNames() []string {
	names := make([]string, benchPods)
	for i := range names {
		names[i] = fmt.Sprintf("jupyter-user%05d", i)
	}
	return names
}

// BenchmarkStatus measures Status latency over 10,000 cached pods and
// reports p50/p99 and throughput.
func BenchmarkStatus(b *testing.B) {
	w := benchWatcher(b, benchPods)
	names := benchNames()
	if st := w.Status(testNS, names[42]); st.State != StateRunning {
		b.Fatalf("Status = %q, want running", st.State)
	}
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		w.Status(testNS, names[i%benchPods])
		lat[i] = time.Since(t0)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
}

// BenchmarkStatusParallel measures Status throughput from many goroutines,
// as concurrent hub polls do.
func BenchmarkStatusParallel(b *testing.B) {
	w := benchWatcher(b, benchPods)
	names := benchNames()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			w.Status(testNS, names[i%benchPods])
			i++
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}

// BenchmarkCacheMemoryPerPod reports the heap one server costs in the
// caches at 10,000 servers: its pod as spawnerd makes it (identity
// annotations, user_options, a profile; every tenth a GPU pod the
// reservation engine admitted), with the server-key map, and the four
// events of its start. The stores are filled directly with decoded objects,
// as a LIST fills them, through the transforms (target: at most 3 KiB);
// untrimmed-bytes/pod is the pod without its transform.
func BenchmarkCacheMemoryPerPod(b *testing.B) {
	cfg, err := spawner.Parse([]byte(benchConfig))
	if err != nil {
		b.Fatal(err)
	}
	type result struct{ pods, events float64 }
	fill := func(transform cache.TransformFunc) result {
		w, err := New(fake.NewClientset(), Options{Namespace: testNS})
		if err != nil {
			b.Fatal(err)
		}
		sp := w.spaces[testNS]
		idx := sp.pods.GetIndexer() // the pod informer's own store and indexes
		var before, mid, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range benchPods {
			obj, err := transform(decoded(b, spawnerdPod(b, cfg, i)))
			if err != nil {
				b.Fatal(err)
			}
			if err := idx.Add(obj); err != nil {
				b.Fatal(err)
			}
			// What the pod handler keeps of it (untrimmed pods: nothing).
			if c, ok := obj.(*cachedPod); ok {
				w.keys.set(nil, c)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&mid)
		for i := range benchPods {
			for _, ev := range startEvents(spawnerdPod(b, cfg, i)) {
				if err := sp.events.Add(decoded(b, ev)); err != nil {
					b.Fatal(err)
				}
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if n := len(idx.ListKeys()); n != benchPods {
			b.Fatalf("indexer holds %d pods", n)
		}
		if n := len(w.Events(testNS, "jupyter-user00042")); n != len(startEvents(spawnerdPod(b, cfg, 42))) {
			b.Fatalf("event cache holds %d events of a pod", n)
		}
		runtime.KeepAlive(w)
		return result{
			pods:   float64(int64(mid.HeapAlloc)-int64(before.HeapAlloc)) / benchPods,
			events: float64(int64(after.HeapAlloc)-int64(mid.HeapAlloc)) / benchPods,
		}
	}
	identity := func(obj any) (any, error) { return obj, nil }
	for b.Loop() {
		r := fill(trimPod)
		// Named as the e2e cache benchmark names them: bytes/pod is the
		// pod's share alone, events are counted apart.
		b.ReportMetric(r.pods, "bytes/pod")
		b.ReportMetric(r.pods+r.events, "bytes/pod-with-events")
		b.ReportMetric(r.events/benchEventsPerPod, "bytes/event")
		b.ReportMetric(fill(identity).pods, "untrimmed-bytes/pod")
	}
}

// benchConfig is a course's configuration as the platform writes it: a CPU
// notebook with an image choice, and a GPU notebook.
const benchConfig = `
kubespawner:
  namespace: ` + testNS + `
  cmd: [jupyterhub-singleuser]
  start_timeout: 600
  course: DSC10
  cpu_guarantee: 0.5
  cpu_limit: 2
  mem_guarantee: 1G
  mem_limit: 2G
  extra_labels:
    hub.jupyter.org/network-access-hub: "true"
  profile_list:
  - display_name: CPU notebook
    slug: cpu
    default: true
    profile_options:
      image:
        display_name: Image
        choices:
          scipy:
            display_name: SciPy
            default: true
            kubespawner_override: {image: "quay.io/jupyter/scipy-notebook:2026-11-30"}
          r:
            display_name: R
            kubespawner_override: {image: "quay.io/jupyter/r-notebook:2026-11-30"}
  - display_name: GPU notebook
    slug: gpu
    kubespawner_override:
      gpu_class: a5000
      image: "quay.io/jupyter/pytorch-notebook:cuda12-2026-11-30"
      extra_resource_limits: {nvidia.com/gpu: "1"}
      node_selector: {gpu-class: a5000}
`

// benchEventsPerPod is the number of events startEvents makes: a pod started
// within the API server's event TTL (an hour) has them, an older one none.
const benchEventsPerPod = 4

// spawnerdPod is the running notebook pod of user<i> as spawnerd makes it
// (spawner.Build, then the identity lifecycle writes: who asked, the profile,
// user_options, the start deadline and the stop-report finalizer), as the
// API server returns it once it runs. Every tenth is a GPU pod the
// reservation engine admitted: its toleration and annotations.
func spawnerdPod(tb testing.TB, cfg *spawner.Config, i int) *corev1.Pod {
	user := fmt.Sprintf("user%05d", i)
	opts := map[string]any{"profile": "cpu", "image": "scipy"}
	gpu := i%10 == 9
	switch {
	case gpu:
		opts = map[string]any{"profile": "gpu"}
	case i%3 == 1:
		opts["image"] = "r"
	}
	objs, _, err := spawner.Build(cfg, spawner.Request{User: user, UserOptions: opts, Env: map[string]string{
		"JUPYTERHUB_API_TOKEN": "0123456789abcdef0123456789abcdef", "JUPYTERHUB_USER": user,
		"JUPYTERHUB_SERVICE_PREFIX": "/user/" + user + "/", "JUPYTERHUB_API_URL": "http://hub:8081/hub/api",
	}})
	if err != nil {
		tb.Fatal(err)
	}
	pod := objs.Pod
	created := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC).Add(time.Duration(i) * 10 * time.Millisecond)
	now := metav1.NewTime(created)
	rawOpts, _ := json.Marshal(opts)
	pod.Annotations[serverid.AnnotationRequestedBy] = serverid.RequestedBy("user", user, created)
	pod.Annotations[serverid.AnnotationProfile] = opts["profile"].(string)
	pod.Annotations[serverid.AnnotationUserOptions] = string(rawOpts)
	pod.Annotations[serverid.AnnotationStartDeadline] = created.Add(10 * time.Minute).Format(time.RFC3339)
	pod.Finalizers = append(pod.Finalizers, serverid.FinalizerStopReport)
	pod.UID = types.UID(fmt.Sprintf("5b0e6c1e-0000-4000-8000-%012d", i))
	pod.ResourceVersion = fmt.Sprint(100000 + i)
	pod.CreationTimestamp = now
	pod.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "spawnerd", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &now, FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{".":{},"f:hub.jupyter.org/username":{},"f:spawner.dsmlp.io/profile":{},"f:spawner.dsmlp.io/requested-by":{},"f:spawner.dsmlp.io/server-name":{},"f:spawner.dsmlp.io/start-deadline":{},"f:spawner.dsmlp.io/user":{},"f:spawner.dsmlp.io/user-options":{}},"f:finalizers":{".":{},"v:\"spawner.dsmlp.io/stop-report\"":{}},"f:labels":{".":{},"f:app":{},"f:component":{},"f:dsmlp/course":{},"f:dsmlp/user":{},"f:heritage":{},"f:hub.jupyter.org/username":{},"f:spawner.dsmlp.io/server-key":{}}},"f:spec":{"f:automountServiceAccountToken":{},"f:containers":{"k:{\"name\":\"notebook\"}":{".":{},"f:args":{},"f:env":{},"f:image":{},"f:name":{},"f:ports":{},"f:resources":{}}},"f:restartPolicy":{}}}`)},
		{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &now, FieldsType: "FieldsV1", Subresource: "status",
			FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:conditions":{"k:{\"type\":\"ContainersReady\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Initialized\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Ready\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}}},"f:containerStatuses":{},"f:hostIP":{},"f:phase":{},"f:podIP":{},"f:podIPs":{},"f:startTime":{}}}`)},
	}
	node := fmt.Sprintf("cpu-%d", i%60)
	if gpu {
		node = fmt.Sprintf("gpu-a5000-%d", i%8)
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: "gpu-class-reservation", Operator: corev1.TolerationOpEqual, Value: "a5000", Effect: corev1.TaintEffectNoSchedule})
		admitted := created.Add(time.Second).Format("2006-01-02T15:04:05Z")
		for k, v := range map[string]string{
			"booking-reference": fmt.Sprintf("GRX-%06d", 1000+i), "reservation-kind": "on-demand",
			"reservation-start": admitted, "reservation-end": created.Add(70 * time.Minute).Format("2006-01-02T15:04:05Z"),
			"reservation-gpu-count": "1", "gpu-class-name": "NVIDIA RTX A5000", "admitted-at": admitted,
			"guaranteed-until": created.Add(time.Hour).Format("2006-01-02T15:04:05Z"), "guarantee-status": "guaranteed",
			"pod-runtime-limit-seconds": "3600",
		} {
			pod.Annotations["galends/"+k] = v
		}
	}
	pod.Spec.NodeName = node
	ip := fmt.Sprintf("10.%d.%d.%d", 64+i/65536, i/256%256, i%256)
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, HostIP: "10.63.255.254",
		PodIPs: []corev1.PodIP{{IP: ip}}, HostIPs: []corev1.HostIP{{IP: "10.63.255.254"}},
		StartTime: &now, QOSClass: corev1.PodQOSBurstable,
		Conditions: readyConditions(now),
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: NotebookContainer, Ready: true, Started: new(true), Image: pod.Spec.Containers[0].Image,
			ImageID:     pod.Spec.Containers[0].Image + "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			ContainerID: fmt.Sprintf("containerd://%064d", i),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}},
	}
	return pod
}

// startEvents are the events of a pod's start, as the scheduler and the
// kubelet write them: Scheduled, Pulled, Created, Started.
func startEvents(pod *corev1.Pod) []*corev1.Event {
	at := pod.CreationTimestamp
	image := pod.Spec.Containers[0].Image
	ref := corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, APIVersion: "v1", ResourceVersion: pod.ResourceVersion}
	cref := ref
	cref.FieldPath = "spec.containers{notebook}"
	mk := func(n int, involved corev1.ObjectReference, reason, message, component, host string) *corev1.Event {
		return &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s.%016x", pod.Name, uint64(at.UnixNano())+uint64(n)), Namespace: pod.Namespace,
				UID:             types.UID(fmt.Sprintf("%s-%012d", pod.UID[:23], n)),
				ResourceVersion: fmt.Sprint(200000 + n), CreationTimestamp: at,
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: component, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &at,
					FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:count":{},"f:firstTimestamp":{},"f:involvedObject":{},"f:lastTimestamp":{},"f:message":{},"f:reason":{},"f:reportingComponent":{},"f:reportingInstance":{},"f:source":{"f:component":{},"f:host":{}},"f:type":{}}`)}},
			},
			InvolvedObject: involved, Reason: reason, Message: message, Type: corev1.EventTypeNormal, Count: 1,
			FirstTimestamp: at, LastTimestamp: at, Source: corev1.EventSource{Component: component, Host: host},
			ReportingController: component, ReportingInstance: component + "-" + host,
		}
	}
	return []*corev1.Event{
		mk(1, ref, "Scheduled", fmt.Sprintf("Successfully assigned %s/%s to %s", pod.Namespace, pod.Name, pod.Spec.NodeName), "default-scheduler", ""),
		mk(2, cref, "Pulled", fmt.Sprintf("Container image %q already present on machine", image), "kubelet", pod.Spec.NodeName),
		mk(3, cref, "Created", "Created container: notebook", "kubelet", pod.Spec.NodeName),
		mk(4, cref, "Started", "Started container notebook", "kubelet", pod.Spec.NodeName),
	}
}

// TestCachedEventRoundTrip checks that the event cache's compact copy gives
// back the event as trimEvent keeps it (its resourceVersion aside), for the
// shapes events come in. It lives beside the benchmark that motivated the
// compact copy.
func TestCachedEventRoundTrip(t *testing.T) {
	pod := cache.NewObjectName(testNS, "jupyter-alice")
	at := time.Date(2026, 11, 30, 9, 0, 0, 123456789, time.UTC)
	local := time.Date(2026, 11, 30, 9, 0, 1, 0, time.Local)
	base := func(name string) *corev1.Event {
		return &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: "5b0e6c1e-0000-4000-8000-000000000042",
				ResourceVersion: "7", CreationTimestamp: metav1.NewTime(at)},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: testNS, Name: pod.Name, UID: "pod-uid",
				FieldPath: "spec.containers{notebook}", APIVersion: "v1"},
			Reason: "Started", Message: "Started container notebook", Type: corev1.EventTypeNormal, Count: 3,
			FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at.Add(time.Second)),
			Source: corev1.EventSource{Component: "kubelet", Host: "node-1"}, ReportingController: "kubelet",
		}
	}
	cases := map[string]func(*corev1.Event){
		"kubelet name":           func(*corev1.Event) {},
		"engine name":            func(e *corev1.Event) { e.Name = pod.Name + ".runtimeguaranteed.0123abcd.0" },
		"other name":             func(e *corev1.Event) { e.Name = "unrelated" },
		"name of a longer pod":   func(e *corev1.Event) { e.Name = pod.Name + "x.188" },
		"fake uid":               func(e *corev1.Event) { e.UID = "" },
		"upper-case uuid":        func(e *corev1.Event) { e.UID = "5B0E6C1E-0000-4000-8000-000000000042" },
		"no involved namespace":  func(e *corev1.Event) { e.InvolvedObject.Namespace = "" },
		"message naming the pod": func(e *corev1.Event) { e.Message = "Successfully assigned jhub/jupyter-alice to node-1" },
		"events.k8s.io": func(e *corev1.Event) {
			e.FirstTimestamp, e.LastTimestamp = metav1.Time{}, metav1.Time{}
			e.EventTime = metav1.NewMicroTime(at)
			e.Series = &corev1.EventSeries{Count: 2, LastObservedTime: metav1.NewMicroTime(at.Add(time.Minute))}
		},
		// A decoded event's times are all in time.Local.
		"local times": func(e *corev1.Event) {
			e.CreationTimestamp, e.LastTimestamp, e.FirstTimestamp = metav1.NewTime(local), metav1.NewTime(local), metav1.NewTime(local)
		},
		"no times": func(e *corev1.Event) {
			e.CreationTimestamp, e.FirstTimestamp, e.LastTimestamp = metav1.Time{}, metav1.Time{}, metav1.Time{}
		},
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			ev := base(pod.Name + ".188b5c0c5a0f1e2d")
			edit(ev)
			trimmed, _ := trimEvent(ev)
			want := trimmed.(*corev1.Event)
			want.ResourceVersion = ""
			var got corev1.Event
			newCachedEvent(pod, ev, nil).fill(&got, pod)
			if !reflect.DeepEqual(&got, want) {
				t.Errorf("round trip:\n got %+v\nwant %+v", &got, want)
			}
			if !newCachedEvent(pod, ev, nil).is(pod, ev.Name) {
				t.Errorf("the kept copy is not the event named %q", ev.Name)
			}
		})
	}
}

// TestEventCacheKeepsCompactCopiesConsistent updates, deletes and sweeps
// the compact copies of several pods' events, checking the cache's two
// views of them (every event, and by pod) after each step.
func TestEventCacheKeepsCompactCopiesConsistent(t *testing.T) {
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	live := map[string]bool{"a": true, "b": true, "c": true}
	e := newEventCache(func(k cache.ObjectName) bool { return live[k.Name] }, func(cache.ObjectName) {}, clocktesting.NewFakePassiveClock(at))
	check := func(step string, want map[string][]string) {
		t.Helper()
		e.mu.Lock()
		n := 0
		for pod, evs := range e.byPod {
			n += len(evs)
			for _, ce := range evs {
				if int(ce.idx) >= len(e.kept) || e.kept[ce.idx] != ce {
					t.Errorf("%s: event of %s not at its index", step, pod.Name)
				}
			}
		}
		if n != len(e.kept) {
			t.Errorf("%s: %d events by pod, %d kept", step, n, len(e.kept))
		}
		e.mu.Unlock()
		for pod, names := range want {
			if got := eventNames(e.eventsOf(cache.NewObjectName(testNS, pod))); !slices.Equal(got, names) {
				t.Errorf("%s: events of %s = %v, want %v", step, pod, got, names)
			}
		}
	}
	for i, pod := range []string{"a", "b", "c"} {
		for j := range 3 {
			if err := e.Add(podEvent(fmt.Sprintf("%s.%d", pod, j), pod, "Pulled", at.Add(time.Duration(i*3+j)*time.Second))); err != nil {
				t.Fatal(err)
			}
		}
	}
	check("added", map[string][]string{"a": {"a.0", "a.1", "a.2"}, "b": {"b.0", "b.1", "b.2"}})
	upd := podEvent("a.0", "a", "Pulled", at.Add(time.Minute))
	upd.Count = 2
	if err := e.Update(upd); err != nil {
		t.Fatal(err)
	}
	check("updated", map[string][]string{"a": {"a.1", "a.2", "a.0"}})
	if got := e.eventsOf(cache.NewObjectName(testNS, "a"))[2].Count; got != 2 {
		t.Errorf("updated count = %d, want 2", got)
	}
	for _, name := range []string{"a.1", "b.0", "c.2"} {
		if err := e.Delete(podEvent(name, name[:1], "Pulled", at)); err != nil {
			t.Fatal(err)
		}
	}
	check("deleted", map[string][]string{"a": {"a.2", "a.0"}, "b": {"b.1", "b.2"}, "c": {"c.0", "c.1"}})
	delete(live, "b")
	e.sweep()
	check("swept", map[string][]string{"a": {"a.2", "a.0"}, "b": {}, "c": {"c.0", "c.1"}})
}

// readyConditions are a running, ready pod's conditions as the kubelet
// writes them, each since now.
func readyConditions(now metav1.Time) []corev1.PodCondition {
	var out []corev1.PodCondition
	for _, t := range []corev1.PodConditionType{"PodReadyToStartContainers", corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
		out = append(out, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	return out
}
