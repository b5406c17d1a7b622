// Package reservation_test runs the GPU reservation controller, its
// admission webhook and the toleration policy against the dev cluster: a
// real API server, kube-scheduler and controller-manager, with kwok GPU
// nodes that carry the class taint and nvidia.com/gpu. The controller runs
// in this process on a fake clock, so tests can move time to open
// bookings, end guarantees and reach preemption boundaries.
//
//	go test ./e2e/reservation/                                   # the tests
//	go test -run '^$' -bench . -benchtime 1x ./e2e/reservation/  # admission latency at 1k/10k pending
package reservation_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/dsmlp/spawner/admission"
	"github.com/dsmlp/spawner/devcluster"
	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/gpucontroller"
	"github.com/dsmlp/spawner/kubeclient"
	"github.com/dsmlp/spawner/reservation"
	"github.com/dsmlp/spawner/reservationstore"
)

var (
	env *harness.Env
	ctl *gpucontroller.Controller
	// metrics is the controller's registry: the benchmarks read write
	// latencies and cycle counts from it.
	metrics = prometheus.NewRegistry()
	clk     *clocktesting.FakeClock
	writes  atomic.Int64 // API writes by the controller's client
	reads   atomic.Int64
	// beforeWrite, when set, runs before each API write of the controller's
	// client (a test races a write with it).
	beforeWrite atomic.Pointer[func(*http.Request)]
	// patchedAt holds, by pod name, when the API server first acknowledged a
	// PATCH of the controller's to that pod: the admission committed.
	patchedAt sync.Map
	// benchPods is the benchmarks' client for the pods they create and
	// remove, and benchWatch the one that watches them, on a connection of
	// its own: on benchPods' each flush of the watch would wait its turn
	// among the answers to the burst's creates (see kubeclient.OwnConnection).
	// Both speak protobuf, as spawnerd's and the cluster's controllers do.
	// With JSON, the API server would encode every pod event of a burst in
	// JSON for the benchmark's watch alone, and decode each create from
	// JSON: CPU taken from the API server that both runs measure.
	benchPods, benchWatch kubernetes.Interface
)

// One class per scenario, each with nodes of its own, so scenarios do not
// share capacity; "empty" has no node at all.
var classNodes = []struct {
	class       string
	nodes, gpus int
}{
	{"wait", 1, 4}, {"full", 1, 4}, {"small", 1, 4}, {"deny", 1, 4}, {"misc", 2, 4}, {"node", 2, 2},
	{"relink", 1, 4}, {"over", 1, 4}, {"best", 1, 4}, {"pre", 1, 2}, {"cancel", 1, 4}, {"reassign", 1, 4},
	{"work", 2, 8}, {"bench", 20, 8}, {"foreign", 1, 2},
}

const (
	wsCourse = "DSC10"    // on demand allowed, every class
	wsNoOD   = "BOOKONLY" // bookings only
	wsCapped = "CAPPED"   // at most 1 GPU of class deny
	ns       = "gpu-system"
)

func engineConfig() reservation.Config {
	cfg := reservation.Config{
		BestEffort: true, HeadroomPercent: ptr.To(0), Seed: 7,
		Workspaces: []reservation.Workspace{
			{Name: wsCourse},
			{Name: wsNoOD, OnDemand: ptr.To(false)},
			{Name: wsCapped, Caps: map[string]int{"deny": 1}},
		},
	}
	for _, c := range classNodes {
		cfg.Classes = append(cfg.Classes, reservation.GPUClass{Label: c.class, NodeSelector: map[string]string{devcluster.LabelGPUClass: c.class}})
	}
	cfg.Classes = append(cfg.Classes, reservation.GPUClass{Label: "empty", NodeSelector: map[string]string{devcluster.LabelGPUClass: "empty"}})
	return cfg
}

func TestMain(m *testing.M) {
	nodes := &devcluster.NodeConfig{NodeSets: []devcluster.NodeSet{{Name: "cpu", Count: 1, CPU: "16", Memory: "64Gi"}}, LocalRuntime: ptr.To(false)}
	for _, c := range classNodes {
		nodes.NodeSets = append(nodes.NodeSets, devcluster.NodeSet{Name: "g-" + c.class, Count: c.nodes, CPU: "64", Memory: "512Gi", Pods: 250, GPUs: c.gpus, GPUClass: c.class})
	}
	// Profiling: the admission benchmark profiles the API server.
	os.Exit(harness.MainWith(m, &env, harness.ClusterOptions{Nodes: nodes, Profiling: true}, setup))
}

func setup(e *harness.Env) error {
	ctx := context.Background()
	if err := e.InstallReservationCRD(ctx); err != nil {
		return err
	}
	if _, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	cfg := engineConfig()
	if err := startWebhook(ctx, e, cfg); err != nil {
		return err
	}
	if err := installPolicy(ctx, e); err != nil {
		return err
	}
	// The controller's own client counts its API requests.
	rc := rest.CopyConfig(e.Config)
	rc.QPS, rc.Burst = 200, 400
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return harness.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet {
				if r.URL.Query().Get("watch") != "true" {
					reads.Add(1)
				}
			} else {
				writes.Add(1)
				if hook := beforeWrite.Load(); hook != nil {
					(*hook)(r)
				}
			}
			resp, err := rt.RoundTrip(r)
			if err == nil && r.Method == http.MethodPatch && resp.StatusCode == http.StatusOK {
				if rest, ok := strings.CutPrefix(path.Dir(r.URL.Path), "/api/v1/namespaces/"); ok && strings.HasSuffix(rest, "/pods") {
					patchedAt.LoadOrStore(path.Base(r.URL.Path), time.Now())
				}
			}
			return resp, err
		})
	}
	// Protobuf, as spawnerd's reservation clients are.
	client, err := kubernetes.NewForConfig(kubeclient.Protobuf(rc))
	if err != nil {
		return err
	}
	eclient, err := kubernetes.NewForConfig(kubeclient.Protobuf(rc))
	if err != nil {
		return err
	}
	// Watches on a connection of their own, as spawnerd's are.
	wclient, err := kubernetes.NewForConfig(kubeclient.Protobuf(kubeclient.OwnConnection(rc)))
	if err != nil {
		return err
	}
	rdyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	if benchPods, err = kubernetes.NewForConfig(kubeclient.Protobuf(e.Config)); err != nil {
		return err
	}
	if benchWatch, err = kubernetes.NewForConfig(kubeclient.Protobuf(kubeclient.OwnConnection(e.Config))); err != nil {
		return err
	}
	clk = clocktesting.NewFakeClock(time.Now())
	logger := zap.NewNop()
	if os.Getenv("E2E_VERBOSE") != "" {
		logger, _ = zap.NewDevelopment()
	}
	ctl, err = gpucontroller.New(client, reservationstore.New(rdyn, 10*time.Minute), gpucontroller.Options{
		Config: cfg, Namespace: ns, Identity: "e2e", Tick: time.Second, Clock: clk, Logger: logger, EventsClient: eclient, WatchClient: wclient,
		Registry: metrics,
	})
	if err != nil {
		return err
	}
	go func() { _ = ctl.Run(ctx) }()
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return ctl.HasSynced() && ctl.Leading(), nil
	})
}

// startWebhook serves the admission webhook on loopback and registers it,
// as the chart does with a Service.
func startWebhook(ctx context.Context, e *harness.Env, cfg reservation.Config) error {
	cert, caPEM, err := admission.SelfSigned([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mutate", admission.New(cfg, nil))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	// The chart's webhook configuration, pointed at this process.
	whc, err := chartWebhook(e)
	if err != nil {
		return err
	}
	whc.Name = "spawnerd-gpu"
	url := fmt.Sprintf("https://%s/mutate", ln.Addr())
	for i := range whc.Webhooks {
		whc.Webhooks[i].ClientConfig = admissionregv1.WebhookClientConfig{URL: &url}
	}
	api := e.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := api.Create(ctx, whc, metav1.CreateOptions{}); err != nil {
		return err
	}
	// The same path spawnerd takes with a self-signed certificate.
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return admission.InjectCABundle(ictx, e.Client, whc.Name, caPEM, zap.NewNop())
}

// installPolicy applies the chart's toleration policy, rendered by helm
// with this cluster's admin (the controller's user here) as the engine.
func installPolicy(ctx context.Context, e *harness.Env) error {
	who, err := e.Client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("who am I: %w", err)
	}
	out, err := exec.Command(filepath.Join(e.BinDir, "helm"), "template", "spawnerd", filepath.Join(e.RepoDir, "deploy/helm/spawnerd"),
		"--namespace", ns, "--show-only", "templates/reservation.yaml", "--set", "reservation.enabled=true",
		"--set-string", "reservation.engineUser="+who.Status.UserInfo.Username).Output()
	if err != nil {
		return fmt.Errorf("rendering the chart's policy: %w", err)
	}
	return e.ApplyYAML(ctx, out, "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
}
