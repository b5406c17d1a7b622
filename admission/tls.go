package admission

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
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
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
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
		api := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
		cfg, err := api.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			log.Info("webhook configuration not there yet", zap.String("name", name))
			return false, nil
		}
		if err != nil {
			log.Warn("reading webhook configuration failed", zap.String("name", name), zap.Error(err))
			return false, nil
		}
		var ops []map[string]any
		for i := range cfg.Webhooks {
			ops = append(ops, map[string]any{"op": "add", "path": fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), "value": caPEM})
		}
		if len(ops) == 0 {
			return true, nil
		}
		ops = append([]map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": cfg.ResourceVersion}}, ops...)
		body, _ := json.Marshal(ops)
		if _, err := api.Patch(ctx, name, types.JSONPatchType, body, metav1.PatchOptions{}); err != nil {
			log.Warn("writing the webhook CA bundle failed; retrying", zap.String("name", name), zap.Error(err))
			return false, nil
		}
		log.Info("webhook CA bundle written", zap.String("name", name), zap.Int("webhooks", len(cfg.Webhooks)))
		return true, nil
	})
}
