package poll

import (
	"encoding/json"
	"fmt"
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
			Conditions: []corev1.PodCondition{
				{Type: "PodReadyToStartContainers", Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			},
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

// decoded round-trips a pod through JSON, so that each pod owns its strings
// as one decoded from a watch stream does.
func decoded(tb testing.TB, pod *corev1.Pod) *corev1.Pod {
	raw, err := json.Marshal(pod)
	if err != nil {
		tb.Fatal(err)
	}
	out := &corev1.Pod{}
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

// BenchmarkCacheMemoryPerPod reports the heap each cached pod costs, indexer
// included, after filling 10,000 decoded pods through the pod transform
// (target: at most 4 KiB); untrimmed-bytes/pod is the same without it.
func BenchmarkCacheMemoryPerPod(b *testing.B) {
	fill := func(transform cache.TransformFunc) (bytesPerPod float64) {
		w, err := New(fake.NewClientset(), Options{Namespace: testNS})
		if err != nil {
			b.Fatal(err)
		}
		idx := w.spaces[testNS].pods.GetIndexer() // the pod informer's own store and indexes
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range benchPods {
			obj, err := transform(decoded(b, realisticPod(i)))
			if err != nil {
				b.Fatal(err)
			}
			if err := idx.Add(obj); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if n := len(idx.ListKeys()); n != benchPods {
			b.Fatalf("indexer holds %d pods", n)
		}
		runtime.KeepAlive(idx)
		return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / benchPods
	}
	identity := func(obj any) (any, error) { return obj, nil }
	for b.Loop() {
		b.ReportMetric(fill(trimPod), "bytes/pod")
		b.ReportMetric(fill(identity), "untrimmed-bytes/pod")
	}
}
