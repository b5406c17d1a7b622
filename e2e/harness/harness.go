// Package harness starts a dev cluster for an end-to-end test package and
// offers the fault helpers that reproduce what the platform's clusters do to pods.
package harness

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dsmlp/spawner/devcluster"
)

// Shared waits, so that every test means the same by "soon" (Kueue's test/util constants).
const (
	Timeout  = 60 * time.Second
	Interval = 100 * time.Millisecond
)

// Env is a running dev cluster as a test package sees it.
type Env struct {
	Cluster *devcluster.Cluster
	Client  kubernetes.Interface
	Config  *rest.Config
	BinDir  string
	RepoDir string
}

// Main starts one cluster for the package's tests, runs them, and tears the
// cluster down. Use it from TestMain: os.Exit(harness.Main(m, &env, nil)).
// Each setup function runs once the cluster is up. With E2E_KEEP=1 the
// cluster's folder (logs, kubeconfig) is kept.
func Main(m *testing.M, env **Env, nodes *devcluster.NodeConfig, setup ...func(*Env) error) int {
	return MainWith(m, env, ClusterOptions{Nodes: nodes}, setup...)
}

// ClusterOptions are what a test package may choose about its cluster.
type ClusterOptions struct {
	Nodes *devcluster.NodeConfig
	// ServeIP: see devcluster.Options.ServeIP.
	ServeIP net.IP
	// Profiling: see devcluster.Options.Profiling.
	Profiling bool
}

// MainWith is Main with more choices about the cluster.
func MainWith(m *testing.M, env **Env, opts ClusterOptions, setup ...func(*Env) error) int {
	e, stop, err := StartWith(context.Background(), opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		return 1
	}
	*env = e
	for _, s := range setup {
		if err := s(e); err != nil {
			fmt.Fprintln(os.Stderr, "harness: setup:", err)
			stop(true)
			return 1
		}
	}
	code := m.Run()
	stop(code != 0)
	return code
}

// Start brings up a cluster and returns it with its stop function; stop(true)
// prints where the logs are and keeps them.
func Start(ctx context.Context, nodes *devcluster.NodeConfig) (*Env, func(failed bool), error) {
	return StartWith(ctx, ClusterOptions{Nodes: nodes})
}

// StartWith is Start with more choices about the cluster.
func StartWith(ctx context.Context, opts ClusterOptions) (*Env, func(failed bool), error) {
	repo, err := RepoRoot()
	if err != nil {
		return nil, nil, err
	}
	bin, err := BinDir(repo)
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "e2e-cluster-")
	if err != nil {
		return nil, nil, err
	}
	logger := zap.NewNop()
	if os.Getenv("E2E_VERBOSE") != "" {
		logger, _ = zap.NewDevelopment()
	}
	cluster, err := devcluster.Start(ctx, devcluster.Options{Dir: dir, BinDir: bin, Nodes: opts.Nodes, Logger: logger, ServeIP: opts.ServeIP, Profiling: opts.Profiling})
	if err != nil {
		return nil, nil, err
	}
	env := &Env{Cluster: cluster, Client: cluster.Client(), Config: cluster.RESTConfig(), BinDir: bin, RepoDir: repo}
	stop := func(failed bool) {
		cluster.Stop()
		if failed || os.Getenv("E2E_KEEP") != "" {
			fmt.Fprintf(os.Stderr, "harness: cluster logs kept in %s/logs\n", dir)
			return
		}
		_ = os.RemoveAll(dir)
	}
	return env, stop, nil
}

// RepoRoot finds the module root from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(data, []byte("module github.com/dsmlp/spawner\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("harness: repository root not found")
		}
		dir = parent
	}
}

// BinDir is $DEVCLUSTER_BIN_DIR, or what hack/tools.sh builds and prints.
func BinDir(repo string) (string, error) {
	if d := os.Getenv("DEVCLUSTER_BIN_DIR"); d != "" {
		return d, nil
	}
	cmd := exec.Command("bash", filepath.Join(repo, "hack", "tools.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("harness: hack/tools.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Namespace creates a namespace with a random name for one test, waits for
// its default service account (pods cannot be created before it), and
// deletes it when the test ends.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	name := "t-" + rand.String(8)
	if _, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = e.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	err := wait.PollUntilContextTimeout(ctx, Interval, Timeout, true, func(ctx context.Context) (bool, error) {
		_, err := e.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("waiting for the default service account of %s: %v", name, err)
	}
	return name
}

// WaitForPod polls the pod until cond holds and returns it.
func (e *Env) WaitForPod(t testing.TB, ns, name string, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), Interval, Timeout, true, func(ctx context.Context) (bool, error) {
		p, err := e.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s never became %s (last status: %+v): %v", ns, name, what, statusOf(last), err)
	}
	return last
}

// WaitForPodGone polls until the pod no longer exists.
func (e *Env) WaitForPodGone(t testing.TB, ns, name string) {
	t.Helper()
	e.WaitForPodGoneWithin(t, ns, name, Timeout)
}

// WaitForPodGoneWithin is WaitForPodGone with a deadline of the caller's,
// for a deletion whose pace a component sets (the pod garbage collector's).
func (e *Env) WaitForPodGoneWithin(t testing.TB, ns, name string, timeout time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), Interval, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := e.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s was never deleted: %v", ns, name, err)
	}
}

func statusOf(p *corev1.Pod) any {
	if p == nil {
		return nil
	}
	return p.Status
}

// PodRunning is the WaitForPod condition for a Running, Ready pod with an IP.
func PodRunning(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// OnLocalRuntime changes a pod spec so that it runs for real on the
// local-runtime node.
func OnLocalRuntime(spec *corev1.PodSpec) {
	if spec.NodeSelector == nil {
		spec.NodeSelector = map[string]string{}
	}
	spec.NodeSelector[devcluster.LabelLocalRuntime] = "true"
	spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: devcluster.LocalRuntimeTaint, Operator: corev1.TolerationOpExists})
}
