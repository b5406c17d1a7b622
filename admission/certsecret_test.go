package admission

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	ktesting "k8s.io/client-go/testing"
)

const testNS, testSecret = "jhub", "spawnerd-webhook-cert"

func newTestCertSecret(t *testing.T, client *fake.Clientset, hosts []string, now func() time.Time) *CertSecret {
	t.Helper()
	c, err := NewCertSecret(client, CertSecretOptions{Namespace: testNS, Name: testSecret, Hosts: hosts, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustSync(t *testing.T, c *CertSecret) bool {
	t.Helper()
	changed, err := c.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return changed
}

// leafOf is the certificate c serves.
func leafOf(t *testing.T, c *CertSecret) *x509.Certificate {
	t.Helper()
	cert, err := c.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// verifies checks that c's certificate chains to c's CA bundle for host.
func verifies(t *testing.T, c *CertSecret, host string, now time.Time) error {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.CABundle()) {
		t.Fatal("CA bundle holds no certificate")
	}
	_, err := leafOf(t, c).Verify(x509.VerifyOptions{DNSName: host, Roots: pool, CurrentTime: now})
	return err
}

func TestCertSecretFirstReplicaCreatesOthersRead(t *testing.T) {
	client := fake.NewClientset()
	hosts := []string{"spawnerd.jhub.svc", "spawnerd.jhub.svc.cluster.local"}
	a := newTestCertSecret(t, client, hosts, nil)
	if _, err := a.GetCertificate(nil); err == nil {
		t.Error("a certificate before the first Sync")
	}
	if !mustSync(t, a) {
		t.Error("the first Sync reports no change")
	}
	s, err := client.CoreV1().Secrets(testNS).Get(context.Background(), testSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Type != corev1.SecretTypeTLS || len(s.Data[SecretCACert]) == 0 || len(s.Data[SecretCAKey]) == 0 {
		t.Errorf("secret type %q keys %v", s.Type, keys(s.Data))
	}
	for _, h := range hosts {
		if err := verifies(t, a, h, time.Now()); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	b := newTestCertSecret(t, client, hosts, nil)
	mustSync(t, b)
	if !bytes.Equal(a.CABundle(), b.CABundle()) || !leafOf(t, a).Equal(leafOf(t, b)) {
		t.Error("the second replica serves another certificate than the first")
	}
	if n := countActions(client, "update", "secrets"); n != 0 {
		t.Errorf("%d secret updates for a fresh certificate", n)
	}
	// Nothing changed: no change reported, nothing written.
	if mustSync(t, a) || countActions(client, "update", "secrets") != 0 {
		t.Error("a Sync of an unchanged Secret changed something")
	}
}

// A replica that finds no Secret but loses the create race serves the
// winner's certificate.
func TestCertSecretLostCreateRace(t *testing.T) {
	client := fake.NewClientset()
	winner := newTestCertSecret(t, client, []string{"127.0.0.1"}, nil)
	mustSync(t, winner)
	var hidden atomic.Bool
	client.PrependReactor("get", "secrets", func(ktesting.Action) (bool, runtime.Object, error) {
		// The loser's first read happened before the winner's create.
		if hidden.CompareAndSwap(false, true) {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, testSecret)
		}
		return false, nil, nil
	})
	loser := newTestCertSecret(t, client, []string{"127.0.0.1"}, nil)
	mustSync(t, loser)
	if n := countActions(client, "create", "secrets"); n != 2 {
		t.Errorf("%d creates, want the winner's and the loser's refused one", n)
	}
	if !bytes.Equal(winner.CABundle(), loser.CABundle()) || !leafOf(t, winner).Equal(leafOf(t, loser)) {
		t.Error("the loser serves its own certificate, not the winner's")
	}
}

// Near its end the serving certificate is renewed under the same CA, so the
// caBundle stays valid; the other replica picks the renewal up.
func TestCertSecretRenewsUnderTheSameCA(t *testing.T) {
	client := fake.NewClientset()
	start := time.Now()
	a := newTestCertSecret(t, client, []string{"127.0.0.1"}, func() time.Time { return start })
	mustSync(t, a)
	ca, old := a.CABundle(), leafOf(t, a)

	later := start.Add(servingLifetime - renewBefore/2)
	b := newTestCertSecret(t, client, []string{"127.0.0.1"}, func() time.Time { return later })
	if !mustSync(t, b) {
		t.Fatal("no certificate loaded")
	}
	if n := countActions(client, "update", "secrets"); n != 1 {
		t.Fatalf("%d updates, want one renewal", n)
	}
	if !bytes.Equal(b.CABundle(), ca) {
		t.Error("the renewal changed the CA")
	}
	if leafOf(t, b).Equal(old) {
		t.Error("the old certificate is still served")
	}
	if err := verifies(t, b, "127.0.0.1", later); err != nil {
		t.Error(err)
	}
	if !mustSync(t, a) || leafOf(t, a).Equal(old) {
		t.Error("the first replica did not load the renewal")
	}
}

// Replicas with other hosts (an upgrade that renamed the Service) widen the
// certificate instead of replacing each other's.
func TestCertSecretHostsOnlyGrow(t *testing.T) {
	client := fake.NewClientset()
	a := newTestCertSecret(t, client, []string{"old.jhub.svc"}, nil)
	mustSync(t, a)
	b := newTestCertSecret(t, client, []string{"new.jhub.svc"}, nil)
	mustSync(t, b)
	mustSync(t, a)
	mustSync(t, b)
	if n := countActions(client, "update", "secrets"); n != 1 {
		t.Errorf("%d updates, want one that adds the new name", n)
	}
	for _, c := range []*CertSecret{a, b} {
		for _, h := range []string{"old.jhub.svc", "new.jhub.svc"} {
			if err := verifies(t, c, h, time.Now()); err != nil {
				t.Errorf("%s: %v", h, err)
			}
		}
	}
}

// A Secret with nothing usable in it is filled with a new CA and certificate.
func TestCertSecretReplacesGarbage(t *testing.T) {
	client := fake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: testSecret, Namespace: testNS}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{SecretCert: []byte("x"), SecretKey: []byte("y")},
	})
	a := newTestCertSecret(t, client, []string{"127.0.0.1"}, nil)
	mustSync(t, a)
	if err := verifies(t, a, "127.0.0.1", time.Now()); err != nil {
		t.Error(err)
	}
	s, _ := client.CoreV1().Secrets(testNS).Get(context.Background(), testSecret, metav1.GetOptions{})
	if !bytes.Equal(s.Data[SecretCACert], a.CABundle()) {
		t.Error("the Secret does not hold the CA served")
	}
}

// A conflicting update (another replica renewed first) is followed by a
// read of that replica's renewal.
func TestCertSecretUpdateConflict(t *testing.T) {
	client := fake.NewClientset()
	start := time.Now()
	mustSync(t, newTestCertSecret(t, client, []string{"127.0.0.1"}, func() time.Time { return start }))
	later := start.Add(servingLifetime - renewBefore/2)
	s, err := client.CoreV1().Secrets(testNS).Get(context.Background(), testSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	caCert, caKey := parseCA(s.Data)
	renewed, err := newCertData(caCert, caKey, []string{"127.0.0.1"}, later)
	if err != nil {
		t.Fatal(err)
	}
	var conflicted atomic.Bool
	client.PrependReactor("update", "secrets", func(ktesting.Action) (bool, runtime.Object, error) {
		if conflicted.CompareAndSwap(false, true) {
			// The other replica's renewal lands just before ours (written
			// to the tracker: the fake client is locked while it reacts).
			other := s.DeepCopy()
			other.Data = renewed
			if err := client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("secrets"), other, testNS); err != nil {
				t.Error(err)
			}
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "secrets"}, testSecret, nil)
		}
		return false, nil, nil
	})
	c := newTestCertSecret(t, client, []string{"127.0.0.1"}, func() time.Time { return later })
	mustSync(t, c)
	cert, _ := c.GetCertificate(nil)
	if b, _ := pem.Decode(renewed[SecretCert]); !bytes.Equal(cert.Certificate[0], b.Bytes) {
		t.Error("after the conflict, not the other replica's renewal")
	}
}

func TestNewCertSecretRefusesMissingSettings(t *testing.T) {
	for _, o := range []CertSecretOptions{
		{Namespace: testNS, Hosts: []string{"a"}},
		{Name: testSecret, Hosts: []string{"a"}},
		{Namespace: testNS, Name: testSecret},
	} {
		if _, err := NewCertSecret(fake.NewClientset(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// The API server's side: a client that trusts only the CA bundle completes
// a handshake with the served certificate.
func TestCertSecretServesTLS(t *testing.T) {
	c := newTestCertSecret(t, fake.NewClientset(), []string{"127.0.0.1"}, nil)
	mustSync(t, c)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: time.Second, ErrorLog: log.New(io.Discard, "", 0), Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}),
		TLSConfig: &tls.Config{GetCertificate: c.GetCertificate, MinVersion: tls.VersionTLS12}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CABundle())
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("handshake with only the CA bundle trusted: %v", err)
	}
	conn.Close()
}

func TestEnsureCABundleWritesOnlyADifference(t *testing.T) {
	client := fake.NewClientset(&admissionregv1.MutatingWebhookConfiguration{
		// The write is conditional on a resourceVersion, which the fake keeps as given.
		ObjectMeta: metav1.ObjectMeta{Name: "spawnerd-gpu", ResourceVersion: "1"},
		Webhooks:   []admissionregv1.MutatingWebhook{{Name: "a.spawnerd.dsmlp.io"}, {Name: "b.spawnerd.dsmlp.io"}},
	})
	ctx := context.Background()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("ca")})
	for i, want := range []bool{true, false} {
		written, err := EnsureCABundle(ctx, client, "spawnerd-gpu", ca, nil)
		if err != nil {
			t.Fatal(err)
		}
		if written != want {
			t.Errorf("call %d: written %v, want %v", i, written, want)
		}
	}
	cfg, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "spawnerd-gpu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range cfg.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, ca) {
			t.Errorf("webhook %s caBundle %q", w.Name, w.ClientConfig.CABundle)
		}
	}
	if _, err := EnsureCABundle(ctx, client, "absent", ca, nil); err == nil {
		t.Error("no error for a missing configuration")
	}
}

func countActions(client *fake.Clientset, verb, resource string) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
