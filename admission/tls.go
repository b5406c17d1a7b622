package admission

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// SelfSigned makes a serving certificate for hosts (DNS names or IPs),
// valid for a year, and returns it with its PEM, which is also the CA bundle
// the API server must trust.
func SelfSigned(hosts []string, now time.Time) (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("webhook key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	addHosts(tmpl, hosts)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("webhook certificate: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return cert, certPEM, nil
}

// InjectCABundle writes caPEM into every webhook of the named
// MutatingWebhookConfiguration, retrying until it exists (an install may
// create it after spawnerd starts) or ctx ends.
func InjectCABundle(ctx context.Context, client kubernetes.Interface, name string, caPEM []byte, log *zap.Logger) error {
	return wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := EnsureCABundle(ctx, client, name, caPEM, log)
		if errors.Is(err, ErrNoWebhookConfig) {
			log.Info("webhook configuration not there yet", zap.String("name", name))
			return false, nil
		}
		if err != nil {
			log.Warn("webhook CA bundle not written yet; retrying", zap.String("name", name), zap.Error(err))
			return false, nil
		}
		return true, nil
	})
}

// ErrNoWebhookConfig is EnsureCABundle's error when the configuration does
// not exist (yet).
var ErrNoWebhookConfig = errors.New("webhook configuration not found")

// EnsureCABundle makes every webhook of the named
// MutatingWebhookConfiguration trust caPEM, once. It writes only when a
// caBundle differs, so replicas that all check the same CA do not write in
// turn; the write is a JSON patch conditional on the resourceVersion read.
// written says whether it patched.
func EnsureCABundle(ctx context.Context, client kubernetes.Interface, name string, caPEM []byte, log *zap.Logger) (written bool, err error) {
	if log == nil {
		log = zap.NewNop()
	}
	api := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	cfg, err := api.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, fmt.Errorf("%w: %s", ErrNoWebhookConfig, name)
	}
	if err != nil {
		return false, fmt.Errorf("reading webhook configuration %s: %w", name, err)
	}
	var ops []map[string]any
	for i, w := range cfg.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, caPEM) {
			ops = append(ops, map[string]any{"op": "add", "path": fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), "value": caPEM})
		}
	}
	if len(ops) == 0 {
		return false, nil
	}
	ops = append([]map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": cfg.ResourceVersion}}, ops...)
	body, err := json.Marshal(ops)
	if err != nil {
		return false, fmt.Errorf("encoding the caBundle patch: %w", err)
	}
	if _, err := api.Patch(ctx, name, types.JSONPatchType, body, metav1.PatchOptions{}); err != nil {
		return false, fmt.Errorf("writing the caBundle of %s: %w", name, err)
	}
	log.Info("webhook CA bundle written", zap.String("name", name), zap.Int("webhooks", len(ops)-1))
	return true, nil
}

// addHosts names the hosts in a certificate template: IP addresses as IP
// SANs, the rest as DNS names.
func addHosts(tmpl *x509.Certificate, hosts []string) {
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
}
