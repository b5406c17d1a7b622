// Package cluster_test proves the dev cluster behaves like the platform's
// clusters where the product depends on it: scheduling, GPU classes, pods
// that really run, and the faults the platform sees.
package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dsmlp/spawner/devcluster"
	"github.com/dsmlp/spawner/e2e/harness"
)

var env *harness.Env

func TestMain(m *testing.M) { os.Exit(harness.Main(m, &env, nil)) }

func newPod(name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyOnFailure,
			Containers:    []corev1.Container{{Name: "notebook", Image: "quay.io/jupyterhub/singleuser:latest"}},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func gpu(class string, count int64) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{devcluster.LabelGPUClass: class}
		// The reservation engine is not running here: tolerate the class
		// taint directly, as an admitted pod would.
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: devcluster.ReservationTaintKey,
			Operator: corev1.TolerationOpEqual, Value: class, Effect: corev1.TaintEffectNoSchedule})
		q := *resource.NewQuantity(count, resource.DecimalSI)
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
			Limits: corev1.ResourceList{devcluster.ResourceGPU: q}, Requests: corev1.ResourceList{devcluster.ResourceGPU: q},
		}
	}
}

func create(t *testing.T, ns string, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", p.Name, err)
	}
	return created
}

func TestPodRunsOnKwokNode(t *testing.T) {
	ns := env.Namespace(t)
	create(t, ns, newPod("plain"))
	p := env.WaitForPod(t, ns, "plain", "Running", harness.PodRunning)
	node, err := env.Client.CoreV1().Nodes().Get(context.Background(), p.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels["type"] != "kwok" {
		t.Errorf("pod ran on %s, labels %v; want a kwok node", node.Name, node.Labels)
	}
	if p.Status.ContainerStatuses[0].State.Running == nil {
		t.Errorf("notebook container state = %+v, want running", p.Status.ContainerStatuses[0].State)
	}
}

func TestGPUPodBoundOnlyToItsClass(t *testing.T) {
	ns := env.Namespace(t)
	// The default node set has two a30 nodes with 2 GPUs each: four 1-GPU pods fit, a fifth does not.
	for i := 0; i < 4; i++ {
		create(t, ns, newPod(fmt.Sprintf("a30-%d", i), gpu("a30", 1)))
	}
	for i := 0; i < 4; i++ {
		p := env.WaitForPod(t, ns, fmt.Sprintf("a30-%d", i), "Running", harness.PodRunning)
		if !strings.HasPrefix(p.Spec.NodeName, "gpu-a30-") {
			t.Errorf("pod %s bound to %s, want a gpu-a30 node", p.Name, p.Spec.NodeName)
		}
	}
	create(t, ns, newPod("a30-extra", gpu("a30", 1)))
	ev := waitForEvent(t, ns, "a30-extra", "FailedScheduling")
	if !strings.Contains(ev.Message, "Insufficient nvidia.com/gpu") {
		t.Errorf("FailedScheduling message = %q, want it to name the GPU shortage", ev.Message)
	}
	p, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), "a30-extra", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
		t.Errorf("extra GPU pod: node %q phase %s; want unbound and Pending", p.Spec.NodeName, p.Status.Phase)
	}
}

func waitForEvent(t *testing.T, ns, pod, reason string) *corev1.Event {
	t.Helper()
	var found *corev1.Event
	sel := fields.Set{"involvedObject.name": pod, "reason": reason}.AsSelector().String()
	err := wait.PollUntilContextTimeout(context.Background(), harness.Interval, harness.Timeout, true, func(ctx context.Context) (bool, error) {
		evs, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil || len(evs.Items) == 0 {
			return false, nil
		}
		found = &evs.Items[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("no %s event for pod %s: %v", reason, pod, err)
	}
	return found
}

func TestLocalRuntimePodServesHTTP(t *testing.T) {
	ns := env.Namespace(t)
	p := newPod("web", func(p *corev1.Pod) {
		harness.OnLocalRuntime(&p.Spec)
		p.Spec.Containers[0].Args = []string{"python3", "-m", "http.server", "--bind", "0.0.0.0", "8888"}
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "notebook-port", ContainerPort: 8888}}
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "GREETING", Value: "hello"}}
	})
	create(t, ns, p)
	running := env.WaitForPod(t, ns, "web", "Running", harness.PodRunning)
	if !strings.HasPrefix(running.Status.PodIP, "127.") {
		t.Fatalf("pod IP %q, want a loopback address", running.Status.PodIP)
	}
	url := "http://" + running.Status.PodIP + ":8888/"
	var body string
	err := wait.PollUntilContextTimeout(context.Background(), harness.Interval, harness.Timeout, true, func(context.Context) (bool, error) {
		resp, err := http.Get(url)
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if !strings.Contains(body, "Directory listing") {
		t.Errorf("unexpected body from the pod: %.200s", body)
	}
	// Deleting the pod stops the process and removes the object.
	if err := env.Client.CoreV1().Pods(ns).Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitForPodGone(t, ns, "web")
	if _, err := http.Get(url); err == nil {
		t.Errorf("the pod's server still answers after the pod was deleted")
	}
}

func TestLocalRuntimeExitCodes(t *testing.T) {
	ns := env.Namespace(t)
	create(t, ns, newPod("ok", func(p *corev1.Pod) {
		harness.OnLocalRuntime(&p.Spec)
		p.Spec.Containers[0].Command = []string{"sh", "-c", "exit 0"}
	}))
	create(t, ns, newPod("bad", func(p *corev1.Pod) {
		harness.OnLocalRuntime(&p.Spec)
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		p.Spec.Containers[0].Command = []string{"sh", "-c", "echo $(POD_NAME) >&2; exit 3"}
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	}))
	ok := env.WaitForPod(t, ns, "ok", "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	if term := ok.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 0 || term.Reason != "Completed" {
		t.Errorf("ok pod container state = %+v, want terminated 0 Completed", ok.Status.ContainerStatuses[0].State)
	}
	bad := env.WaitForPod(t, ns, "bad", "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if term := bad.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 3 {
		t.Errorf("bad pod container state = %+v, want terminated with exit code 3", bad.Status.ContainerStatuses[0].State)
	}
}

func TestFaultEvictLeavesContainerState(t *testing.T) {
	ns := env.Namespace(t)
	create(t, ns, newPod("evictee"))
	before := env.WaitForPod(t, ns, "evictee", "Running", harness.PodRunning)
	if err := harness.Evict(context.Background(), env.Client, ns, "evictee"); err != nil {
		t.Fatal(err)
	}
	after := get(t, ns, "evictee")
	if after.Status.Phase != corev1.PodFailed || after.Status.Reason != "Evicted" || after.Status.Message != harness.EvictionMessage {
		t.Errorf("evicted pod status: phase %s reason %q message %q", after.Status.Phase, after.Status.Reason, after.Status.Message)
	}
	if after.Status.ContainerStatuses[0].State.Running == nil ||
		!after.Status.ContainerStatuses[0].State.Running.StartedAt.Equal(&before.Status.ContainerStatuses[0].State.Running.StartedAt) {
		t.Errorf("container state changed on eviction: %+v", after.Status.ContainerStatuses[0].State)
	}
	// kwok must leave the Failed pod alone: it stays exactly as the seed shows.
	time.Sleep(2 * time.Second)
	if later := get(t, ns, "evictee"); later.Status.Phase != corev1.PodFailed || later.Status.Reason != "Evicted" {
		t.Errorf("evicted pod status changed to %s/%s", later.Status.Phase, later.Status.Reason)
	}
}

func TestFaultTerminateContainer(t *testing.T) {
	ns := env.Namespace(t)
	create(t, ns, newPod("oom"))
	env.WaitForPod(t, ns, "oom", "Running", harness.PodRunning)
	if err := harness.TerminateContainer(context.Background(), env.Client, ns, "oom", "notebook", 137, "OOMKilled"); err != nil {
		t.Fatal(err)
	}
	p := get(t, ns, "oom")
	term := p.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 137 || term.Reason != "OOMKilled" {
		t.Fatalf("container state = %+v, want terminated 137 OOMKilled", p.Status.ContainerStatuses[0].State)
	}
	// restartPolicy OnFailure and a non-zero exit: the pod itself stays Running.
	if p.Status.Phase != corev1.PodRunning {
		t.Errorf("phase = %s, want Running", p.Status.Phase)
	}
	if p.Status.ContainerStatuses[0].Ready {
		t.Errorf("terminated container still ready")
	}
}

func TestFaultMarkSucceeded(t *testing.T) {
	ns := env.Namespace(t)
	create(t, ns, newPod("done"))
	env.WaitForPod(t, ns, "done", "Running", harness.PodRunning)
	if err := harness.MarkSucceeded(context.Background(), env.Client, ns, "done"); err != nil {
		t.Fatal(err)
	}
	p := get(t, ns, "done")
	term := p.Status.ContainerStatuses[0].State.Terminated
	if p.Status.Phase != corev1.PodSucceeded || term == nil || term.ExitCode != 0 || term.Reason != "Completed" {
		t.Errorf("status = phase %s container %+v; want Succeeded, terminated 0 Completed", p.Status.Phase, p.Status.ContainerStatuses[0].State)
	}
}

func TestFaultDeletePodOutOfBand(t *testing.T) {
	ns := env.Namespace(t)
	create(t, ns, newPod("gone"))
	env.WaitForPod(t, ns, "gone", "Running", harness.PodRunning)
	if err := harness.DeletePodOutOfBand(context.Background(), env.Client, ns, "gone"); err != nil {
		t.Fatal(err)
	}
	env.WaitForPodGone(t, ns, "gone")
}

func TestFaultDeleteNode(t *testing.T) {
	ns := env.Namespace(t)
	create(t, ns, newPod("orphan", func(p *corev1.Pod) { p.Spec.NodeName = "cpu-2" }))
	env.WaitForPod(t, ns, "orphan", "Running", harness.PodRunning)
	if err := harness.DeleteNode(context.Background(), env.Client, "cpu-2"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { recreateNode(t, "cpu-2") })
	if _, err := env.Client.CoreV1().Nodes().Get(context.Background(), "cpu-2", metav1.GetOptions{}); err == nil {
		t.Fatal("node still exists")
	}
	// The pod garbage collector removes pods bound to a node that no longer
	// exists, at its own pace: a pass every podGCPeriod finds the orphan and
	// quarantines its node for podGCQuarantine, and the first pass after that
	// deletes it. So the deletion comes at most 2 periods + the quarantine
	// after the node went, plus the time the busy machine takes to run them.
	env.WaitForPodGoneWithin(t, ns, "orphan", 2*podGCPeriod+podGCQuarantine+podGCSlack)
}

// The pod garbage collector's loop period and orphan quarantine: constants
// gcCheckPeriod and quarantineTime in kubernetes' pkg/controller/podgc
// (v1.37), not flags, so they cannot be shortened for the test.
const (
	podGCPeriod     = 20 * time.Second
	podGCQuarantine = 40 * time.Second
	podGCSlack      = 30 * time.Second
)

func recreateNode(t *testing.T, name string) {
	for _, n := range devcluster.DefaultNodeConfig().Nodes() {
		if n.Name == name {
			if err := devcluster.RegisterNode(context.Background(), env.Client, n); err != nil {
				t.Errorf("recreating node: %v", err)
			}
		}
	}
}

// RegisterNodes returns only once kwok has taken every new node on: each
// reads Ready at once, and a pod bound to one runs.
func TestRegisterNodesWaitsForReady(t *testing.T) {
	cfg := devcluster.NodeConfig{NodeSets: []devcluster.NodeSet{{Name: "registered", Count: 3, CPU: "8", Memory: "32Gi", Pods: 110}}}
	nodes := cfg.Nodes()
	t.Cleanup(func() {
		for _, n := range nodes {
			_ = env.Client.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{})
		}
	})
	if err := devcluster.RegisterNodes(t.Context(), env.Client, nodes, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		got, err := env.Client.CoreV1().Nodes().Get(t.Context(), n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !devcluster.NodeReady(got) {
			t.Errorf("node %s not Ready when RegisterNodes returned: %+v", n.Name, got.Status.Conditions)
		}
	}
	ns := env.Namespace(t)
	create(t, ns, newPod("on-registered", func(p *corev1.Pod) { p.Spec.NodeName = nodes[0].Name }))
	env.WaitForPod(t, ns, "on-registered", "Running", harness.PodRunning)
}

func TestFaultRestartAPIServer(t *testing.T) {
	ns := env.Namespace(t)
	create(t, ns, newPod("survivor"))
	env.WaitForPod(t, ns, "survivor", "Running", harness.PodRunning)
	if err := env.RestartAPIServer(context.Background()); err != nil {
		t.Fatal(err)
	}
	// State lives in etcd: the pod is still there and new pods still schedule.
	if p := get(t, ns, "survivor"); p.Status.Phase != corev1.PodRunning {
		t.Errorf("pod phase after restart = %s", p.Status.Phase)
	}
	create(t, ns, newPod("after-restart"))
	env.WaitForPod(t, ns, "after-restart", "Running", harness.PodRunning)
}

func TestKubectlDescribeShowsFailedScheduling(t *testing.T) {
	ns := env.Namespace(t)
	create(t, ns, newPod("nowhere", gpu("no-such-class", 1)))
	waitForEvent(t, ns, "nowhere", "FailedScheduling")
	out, err := exec.Command(env.BinDir+"/kubectl", "--kubeconfig", env.Cluster.Kubeconfig(), "-n", ns, "describe", "pod", "nowhere").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl describe: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "FailedScheduling") || !strings.Contains(string(out), "default-scheduler") {
		t.Errorf("kubectl describe does not show the scheduler's event:\n%s", out)
	}
}

func get(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
