package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/kubeclient"
)

// answers records the content type and size of each response to a POST.
type answers struct {
	mu    sync.Mutex
	types []string
	bytes int64
}

func (a *answers) wrap(rt http.RoundTripper) http.RoundTripper {
	return harness.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil || req.Method != http.MethodPost {
			return resp, err
		}
		a.mu.Lock()
		a.types = append(a.types, resp.Header.Get("Content-Type"))
		a.mu.Unlock()
		resp.Body = &countingBody{ReadCloser: resp.Body, a: a}
		return resp, nil
	})
}

type countingBody struct {
	io.ReadCloser
	a *answers
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.a.mu.Lock()
	b.a.bytes += int64(n)
	b.a.mu.Unlock()
	return n, err
}

// recordedClient is a clientset on cfg whose POST answers a records.
func recordedClient(t testing.TB, cfg *rest.Config) (kubernetes.Interface, *answers) {
	t.Helper()
	a := &answers{}
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = a.wrap
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client, a
}

// notebookPod is a pod of about a notebook's size: labels, annotations,
// an environment, resources.
func notebookPod(name string) *corev1.Pod {
	return newPod(name, func(p *corev1.Pod) {
		p.Labels = map[string]string{"app": "jupyterhub", "component": "singleuser-server", "hub.jupyter.org/username": name}
		p.Annotations = map[string]string{"hub.jupyter.org/username": name, "hub.jupyter.org/servername": ""}
		c := &p.Spec.Containers[0]
		for i := range 12 {
			c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("JUPYTERHUB_SETTING_%d", i), Value: strings.Repeat("x", 40)})
		}
		c.Args = []string{"jupyterhub-singleuser", "--ip=0.0.0.0", "--port=8888"}
	})
}

// TestPodCreatorReadsBackMetadata creates pods through kubeclient.PodCreator
// on the real API server, from clients that send protobuf and JSON: the
// answer is the metadata alone, in protobuf, its UID is the stored pod's, and a second create of the
// same name is AlreadyExists, as from the typed client.
func TestPodCreatorReadsBackMetadata(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	for name, cfg := range map[string]*rest.Config{"protobuf": kubeclient.Protobuf(env.Config), "json": env.Config} {
		t.Run(name, func(t *testing.T) {
			client, a := recordedClient(t, cfg)
			creator := kubeclient.NewPodCreator(client.CoreV1().RESTClient())
			pod := notebookPod("meta-" + name)
			pod.Namespace = ns
			got, err := creator.Create(ctx, pod)
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			stored, err := env.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.GetUID() == "" || got.GetUID() != stored.UID || got.GetName() != pod.Name || got.GetNamespace() != ns {
				t.Errorf("Create returned %s/%s uid %q, the stored pod is %s/%s uid %q",
					got.GetNamespace(), got.GetName(), got.GetUID(), stored.Namespace, stored.Name, stored.UID)
			}
			if got.GetLabels()["hub.jupyter.org/username"] != pod.Name {
				t.Errorf("labels = %v, want the pod's", got.GetLabels())
			}
			if _, ok := got.(*metav1.PartialObjectMetadata); !ok {
				t.Errorf("Create returned a %T, want the metadata alone (*v1.PartialObjectMetadata)", got)
			}
			// The answer is protobuf whatever the client sends: the Accept
			// header is the creator's.
			if len(a.types) != 1 || !strings.HasPrefix(a.types[0], "application/vnd.kubernetes.protobuf") {
				t.Errorf("answer content types %q, want one in protobuf", a.types)
			}
			// Refusals keep the API server's reason and message.
			_, err = creator.Create(ctx, pod)
			if !apierrors.IsAlreadyExists(err) || !strings.Contains(err.Error(), pod.Name) {
				t.Errorf("second Create: %v, want AlreadyExists naming %s", err, pod.Name)
			}
			bad := notebookPod("meta-bad-" + name)
			bad.Namespace, bad.Spec.Containers[0].Name = ns, "Not_A_DNS_Label"
			_, err = creator.Create(ctx, bad)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.containers[0].name") {
				t.Errorf("Create of an invalid pod: %v, want Invalid naming spec.containers[0].name", err)
			}
			nobody := rest.CopyConfig(cfg)
			nobody.Impersonate = rest.ImpersonationConfig{UserName: "nobody"}
			refused, _ := recordedClient(t, nobody)
			denied := notebookPod("meta-denied-" + name)
			denied.Namespace = ns
			_, err = kubeclient.NewPodCreator(refused.CoreV1().RESTClient()).Create(ctx, denied)
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot create resource") {
				t.Errorf("Create without the right: %v, want Forbidden with the API server's message", err)
			}
		})
	}
}

// BenchmarkPodCreate creates notebook pods one after another, through the
// typed client (the whole pod read back) and through kubeclient.PodCreator
// (the metadata alone), and reports the answer's size and this process's
// CPU a create. The process also runs the dev cluster's local node agents,
// which take their share whatever the client does: compare the two runs'
// CPU, not either's with a client's alone.
func BenchmarkPodCreate(b *testing.B) {
	for _, how := range []string{"typed", "metadata"} {
		b.Run(how, func(b *testing.B) {
			ns := env.Namespace(b)
			client, a := recordedClient(b, kubeclient.Protobuf(env.Config))
			creator := kubeclient.NewPodCreator(client.CoreV1().RESTClient())
			const pods = 300
			ctx := context.Background()
			start, cpu0 := time.Now(), processCPU(b)
			for i := range pods {
				p := notebookPod(fmt.Sprintf("create-%d", i))
				p.Namespace = ns
				var err error
				if how == "typed" {
					_, err = client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
				} else {
					_, err = creator.Create(ctx, p)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			cpu := processCPU(b) - cpu0
			b.ReportMetric(float64(cpu.Microseconds())/pods, "process-cpu-µs/create")
			b.ReportMetric(float64(a.bytes)/pods, "answer-bytes/create")
			b.ReportMetric(float64(time.Since(start).Microseconds())/pods, "µs/create")
			if err := env.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{}); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// processCPU is this process's CPU time so far, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
