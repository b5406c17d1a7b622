package deploy_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/dsmlp/spawner/admission"
	"github.com/dsmlp/spawner/e2e/harness"
)

// TestCertSecretRaceOnAPIServer starts three replicas' certificate Secrets
// at once against the real API server, as the chart's service account: one
// create wins, the others read the winner's, and all serve one certificate
// of one CA.
func TestCertSecretRaceOnAPIServer(t *testing.T) {
	ns := env.Namespace(t)
	apply(t, mustRender(t, ns, "--set", "reservation.enabled=true", "--set", "reservation.config.classes[0].label=a5000"))
	waitForRBAC(t, ns)
	client := serviceAccountClient(t, ns)
	const replicas = 3
	secrets := make([]*admission.CertSecret, replicas)
	var wg sync.WaitGroup
	errs := make([]error, replicas)
	for i := range secrets {
		cs, err := admission.NewCertSecret(client, admission.CertSecretOptions{
			Namespace: ns, Name: release + "-webhook-cert", Hosts: []string{"spawnerd." + ns + ".svc"}, Logger: zap.NewNop(),
		})
		if err != nil {
			t.Fatal(err)
		}
		secrets[i] = cs
		wg.Go(func() { _, errs[i] = cs.Sync(context.Background()) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	s, err := env.Client.CoreV1().Secrets(ns).Get(context.Background(), release+"-webhook-cert", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, cs := range secrets {
		cert, err := cs.GetCertificate(nil)
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
		if !bytes.Equal(cs.CABundle(), s.Data[admission.SecretCACert]) || !bytes.Equal(pemDER(t, s.Data[admission.SecretCert]), cert.Certificate[0]) {
			t.Errorf("replica %d serves another certificate or CA than the Secret's", i)
		}
	}
	// The service account may create Secrets (RBAC cannot name a create's
	// object), but the chart's policy refuses any other than this one, as
	// TLS: no service-account token is minted.
	for _, bad := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: nil, corev1.TLSPrivateKeyKey: nil}},
		{ObjectMeta: metav1.ObjectMeta{Name: "hub-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
			Type: corev1.SecretTypeServiceAccountToken},
	} {
		// The policy reaches the API server's admission a moment after it is applied.
		err := wait.PollUntilContextTimeout(context.Background(), harness.Interval, harness.Timeout, true, func(ctx context.Context) (bool, error) {
			_, err := client.CoreV1().Secrets(ns).Create(ctx, bad, metav1.CreateOptions{})
			if err == nil {
				_ = env.Client.CoreV1().Secrets(ns).Delete(ctx, bad.Name, metav1.DeleteOptions{})
				return false, nil
			}
			return apierrors.IsForbidden(err) || apierrors.IsInvalid(err), nil
		})
		if err != nil {
			t.Errorf("the service account could create Secret %s of type %s: %v", bad.Name, bad.Type, err)
		}
	}
	// A restarted replica takes the Secret as it is: no write.
	rv := s.ResourceVersion
	again, _ := admission.NewCertSecret(client, admission.CertSecretOptions{Namespace: ns, Name: release + "-webhook-cert", Hosts: []string{"spawnerd." + ns + ".svc"}})
	if _, err := again.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s, _ := env.Client.CoreV1().Secrets(ns).Get(context.Background(), release+"-webhook-cert", metav1.GetOptions{}); s.ResourceVersion != rv {
		t.Errorf("a fresh Secret was written again (resourceVersion %s → %s)", rv, s.ResourceVersion)
	}
}

// TestReplicasShareWebhookCert runs three spawnerd processes with the
// chart's args, RBAC and shared webhook Secret (and, as three replicas need,
// the session history in one PostgreSQL database, its DSN from the chart's
// Secret), and registers each as a webhook of the chart's configuration
// with failurePolicy Fail: a GPU pod is created only if the API server,
// trusting the caBundle spawnerd injected, completes a handshake with every
// replica.
func TestReplicasShareWebhookCert(t *testing.T) {
	ctx := context.Background()
	if err := env.InstallReservationCRD(ctx); err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t)
	m := mustRender(t, ns, append(replicated(env.StartPostgres(t)), "--set", "reservation.enabled=true", "--set", "reservation.config.classes[0].label=a5000",
		"--set", "reservation.config.classes[0].node_selector.gpu-class=a5000", "--set", "webhook.resync=1s")...)
	const whcName = release + "-gpu"
	whc := get[admissionregv1.MutatingWebhookConfiguration](t, m, "MutatingWebhookConfiguration", whcName)
	apply(t, m)
	waitForRBAC(t, ns)

	const replicas = 3
	var addrs []string
	for i := range replicas {
		addr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
		addrs = append(addrs, addr)
		svc := release + "." + ns + ".svc"
		startFromChartWith(t, ns, m, map[string]string{
			"--webhook-listen": addr,
			"--webhook-hosts":  svc + ",127.0.0.1",
			"--identity":       fmt.Sprintf("replica-%d", i),
		})
	}
	// One webhook per replica, in the chart's configuration: every one is
	// called for a GPU pod.
	api := env.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	base := whc.Webhooks[0]
	var hooks []admissionregv1.MutatingWebhook
	for i, addr := range addrs {
		h := *base.DeepCopy()
		h.Name = fmt.Sprintf("r%d.gpu.spawnerd.dsmlp.io", i)
		h.ClientConfig = admissionregv1.WebhookClientConfig{URL: ptr.To("https://" + addr + "/mutate")}
		h.FailurePolicy = ptr.To(admissionregv1.Fail)
		h.TimeoutSeconds = ptr.To[int32](10)
		hooks = append(hooks, h)
	}
	whc.Webhooks = hooks
	// The chart's own, pointed at a Service no pod backs here, is replaced.
	if err := api.Delete(ctx, whcName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if _, err := api.Create(ctx, whc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Delete(context.Background(), whcName, metav1.DeleteOptions{}) })

	// The replicas write the shared Secret's CA into every webhook.
	var caPEM []byte
	err := wait.PollUntilContextTimeout(ctx, harness.Interval, harness.Timeout, true, func(ctx context.Context) (bool, error) {
		s, err := env.Client.CoreV1().Secrets(ns).Get(ctx, release+"-webhook-cert", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		caPEM = s.Data[admission.SecretCACert]
		cfg, err := api.Get(ctx, whcName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return !slices.ContainsFunc(cfg.Webhooks, func(w admissionregv1.MutatingWebhook) bool { return !bytes.Equal(w.ClientConfig.CABundle, caPEM) }), nil
	})
	if err != nil {
		t.Fatalf("the webhooks never got the shared Secret's CA: %v", err)
	}
	// Each replica, trusted through that CA alone, for the Service's name.
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("no certificate in the shared Secret's ca.crt")
	}
	for i, addr := range addrs {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: release + "." + ns + ".svc", MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Errorf("replica %d: handshake with the injected CA: %v", i, err)
			continue
		}
		conn.Close()
	}

	// Through the API server: every webhook must answer for the pod to exist.
	other := env.Namespace(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu", Labels: map[string]string{"gpu-class": "a5000"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	var created *corev1.Pod
	// The authorizer and the webhook client caches may lag the config a moment.
	err = wait.PollUntilContextTimeout(ctx, harness.Interval, harness.Timeout, true, func(ctx context.Context) (bool, error) {
		created, err = env.Client.CoreV1().Pods(other).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Logf("creating the GPU pod: %v", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("a GPU pod was never admitted through all %d replicas: %v", replicas, err)
	}
	if created.Spec.NodeSelector["gpu-class"] != "a5000" || !slices.ContainsFunc(created.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == admission.VolumeName }) {
		t.Errorf("the pod was not mutated: node selector %v, volumes %v", created.Spec.NodeSelector, created.Spec.Volumes)
	}
}

// serviceAccountClient is a client authenticated as the chart's service account.
func serviceAccountClient(t *testing.T, ns string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", serviceAccountKubeconfig(t, ns, release, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 30 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// pemDER is the first PEM block's bytes.
func pemDER(t *testing.T, data []byte) []byte {
	t.Helper()
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("no PEM block in %q", data)
	}
	return b.Bytes
}
