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
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Keys of the shared certificate Secret. tls.crt, tls.key and ca.crt are
// the kubernetes.io/tls (and cert-manager) layout, so the Secret can also be
// mounted as files; ca.key lets any replica renew the serving certificate
// under the same CA, which keeps the caBundle the API server trusts.
const (
	SecretCACert = "ca.crt"
	SecretCAKey  = "ca.key"
	SecretCert   = corev1.TLSCertKey
	SecretKey    = corev1.TLSPrivateKeyKey
)

// Lifetimes of what the shared Secret holds. The CA outlives many serving
// certificates: renewing one changes nothing the API server has to learn.
const (
	caLifetime      = 10 * 365 * 24 * time.Hour
	servingLifetime = 365 * 24 * time.Hour
	// renewBefore is how long before its end a serving certificate is
	// replaced: far more than any resync period, so no replica ever serves
	// an expired one.
	renewBefore = 30 * 24 * time.Hour
)

// CertSecret serves the webhook certificate kept in one Secret that every
// replica shares, so that all of them present certificates signed by the
// one CA written into the webhook configuration's caBundle. The first
// replica to find no Secret creates it; a replica that loses that race
// reads the winner's. Use its GetCertificate in a tls.Config and call Sync
// (or Watch) to follow changes.
type CertSecret struct {
	client          kubernetes.Interface
	namespace, name string
	hosts           []string
	log             *zap.Logger
	now             func() time.Time

	mu    sync.RWMutex
	cert  *tls.Certificate
	caPEM []byte
}

// CertSecretOptions configure a CertSecret.
type CertSecretOptions struct {
	Namespace, Name string
	// Hosts are the DNS names and IPs the serving certificate must cover
	// (the Service's names).
	Hosts  []string
	Logger *zap.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// NewCertSecret returns a CertSecret that has loaded nothing yet: call Sync.
func NewCertSecret(client kubernetes.Interface, opts CertSecretOptions) (*CertSecret, error) {
	if opts.Name == "" || opts.Namespace == "" {
		return nil, errors.New("webhook certificate Secret: name and namespace are required")
	}
	if len(opts.Hosts) == 0 {
		return nil, errors.New("webhook certificate Secret: no hosts for the serving certificate")
	}
	c := &CertSecret{client: client, namespace: opts.Namespace, name: opts.Name, hosts: opts.Hosts, log: opts.Logger, now: opts.Now}
	if c.log == nil {
		c.log = zap.NewNop()
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

// GetCertificate returns the serving certificate loaded last (nil before
// the first Sync, which fails the handshake rather than serve a stranger).
func (c *CertSecret) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.cert == nil {
		return nil, errors.New("webhook certificate not loaded yet")
	}
	return c.cert, nil
}

// CABundle is the PEM of the CA that signed the serving certificate.
func (c *CertSecret) CABundle() []byte {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return bytes.Clone(c.caPEM)
}

// Sync makes the Secret hold a usable CA and serving certificate and loads
// them. It creates the Secret when there is none, renews the serving
// certificate (same CA) when it nears its end or does not cover this
// replica's hosts, and replaces the whole pair only when the Secret holds
// nothing usable. Writes are conditional (create, or update at the read
// resourceVersion): when another replica wrote first, its Secret is read
// and used instead. changed says whether the loaded certificate changed.
func (c *CertSecret) Sync(ctx context.Context) (changed bool, err error) {
	// A lost race is at most a couple of rounds: someone else's write won,
	// and the next read finds it good.
	for range 5 {
		changed, retry, err := c.syncOnce(ctx)
		if err != nil || !retry {
			return changed, err
		}
	}
	return false, fmt.Errorf("webhook certificate Secret %s/%s: writes kept conflicting", c.namespace, c.name)
}

func (c *CertSecret) syncOnce(ctx context.Context) (changed, retry bool, err error) {
	api := c.client.CoreV1().Secrets(c.namespace)
	s, err := api.Get(ctx, c.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		data, err := newCertData(nil, nil, c.hosts, c.now())
		if err != nil {
			return false, false, err
		}
		created, err := api.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: c.namespace,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "spawnerd"}},
			Type: corev1.SecretTypeTLS, Data: data,
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			c.log.Info("webhook certificate Secret created by another replica; reading it", zap.String("secret", c.name))
			return false, true, nil
		}
		if err != nil {
			return false, false, fmt.Errorf("creating webhook certificate Secret %s/%s: %w", c.namespace, c.name, err)
		}
		c.log.Info("webhook certificate Secret created", zap.String("secret", c.name), zap.Strings("hosts", c.hosts))
		return c.load(created), false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("reading webhook certificate Secret %s/%s: %w", c.namespace, c.name, err)
	}
	// Checked every round, not only when the Secret changed: the loaded
	// certificate may near its end while the Secret stays as it is.
	if c.fresh(s) {
		return c.load(s), false, nil
	}
	// Renew: keep the CA when it is usable, and every name the old
	// certificate had (a replica of an older release may still need one),
	// so that replicas with different --webhook-hosts never undo each
	// other's writes.
	caCert, caKey := parseCA(s.Data)
	if caCert != nil && c.now().Add(renewBefore).After(caCert.NotAfter) {
		caCert, caKey = nil, nil // a CA near its end is replaced, not reused
	}
	hosts := c.hosts
	if leaf := parseLeaf(s.Data); leaf != nil {
		hosts = unionHosts(leaf, c.hosts)
	}
	data, err := newCertData(caCert, caKey, hosts, c.now())
	if err != nil {
		return false, false, err
	}
	reason := "renewed"
	if caCert == nil {
		reason = "replaced (no usable CA)"
	}
	upd := s.DeepCopy()
	upd.Data = data
	if upd.Type != corev1.SecretTypeTLS && upd.Type != corev1.SecretTypeOpaque {
		return false, false, fmt.Errorf("webhook certificate Secret %s/%s has type %s, want %s", c.namespace, c.name, upd.Type, corev1.SecretTypeTLS)
	}
	written, err := api.Update(ctx, upd, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		c.log.Info("webhook certificate Secret changed by another replica; reading it again", zap.String("secret", c.name))
		return false, true, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("updating webhook certificate Secret %s/%s: %w", c.namespace, c.name, err)
	}
	c.log.Info("webhook certificate "+reason, zap.String("secret", c.name), zap.Strings("hosts", hosts))
	return c.load(written), false, nil
}

// fresh reports whether the Secret's serving certificate can be served as
// it is: a valid pair, signed by the Secret's CA, covering this replica's
// hosts, and not near its end.
func (c *CertSecret) fresh(s *corev1.Secret) bool {
	if _, err := tls.X509KeyPair(s.Data[SecretCert], s.Data[SecretKey]); err != nil {
		return false
	}
	leaf := parseLeaf(s.Data)
	caCert, _ := parseCA(s.Data)
	if leaf == nil || caCert == nil || leaf.CheckSignatureFrom(caCert) != nil {
		return false
	}
	now := c.now()
	if now.Before(leaf.NotBefore) || now.Add(renewBefore).After(leaf.NotAfter) || now.Add(renewBefore).After(caCert.NotAfter) {
		return false
	}
	for _, h := range c.hosts {
		if leaf.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// load serves the Secret's pair; changed says whether it differs from the
// one served before.
func (c *CertSecret) load(s *corev1.Secret) (changed bool) {
	cert, err := tls.X509KeyPair(s.Data[SecretCert], s.Data[SecretKey])
	if err != nil {
		// fresh or newCertData checked it: only a bug gets here.
		c.log.Error("webhook certificate Secret does not load", zap.String("secret", c.name), zap.Error(err))
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	changed = c.cert == nil || !bytes.Equal(c.cert.Certificate[0], cert.Certificate[0]) || !bytes.Equal(c.caPEM, s.Data[SecretCACert])
	c.cert, c.caPEM = &cert, bytes.Clone(s.Data[SecretCACert])
	return changed
}

// Watch calls Sync every interval until ctx ends, and onSync (if not nil)
// after every successful Sync, with whether it loaded a new certificate or
// CA (a caller may check something else each round, such as the webhook
// configuration's caBundle). A failed Sync keeps the loaded certificate
// serving.
func (c *CertSecret) Watch(ctx context.Context, interval time.Duration, onSync func(ctx context.Context, changed bool)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := c.Sync(ctx)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("webhook certificate Secret not synced; serving the loaded certificate", zap.String("secret", c.name), zap.Error(err))
			}
			continue
		}
		if changed {
			c.log.Info("webhook certificate reloaded from its Secret", zap.String("secret", c.name))
		}
		if onSync != nil {
			onSync(ctx, changed)
		}
	}
}

// newCertData issues a serving certificate for hosts under the CA, or under
// a new CA when caCert is nil, and returns the Secret data.
func newCertData(caCert *x509.Certificate, caKey *ecdsa.PrivateKey, hosts []string, now time.Time) (map[string][]byte, error) {
	if caCert == nil || caKey == nil {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("webhook CA key: %w", err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(), Subject: pkix.Name{CommonName: "spawnerd webhook CA"},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(caLifetime),
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			return nil, fmt.Errorf("webhook CA certificate: %w", err)
		}
		if caCert, err = x509.ParseCertificate(der); err != nil {
			return nil, fmt.Errorf("webhook CA certificate: %w", err)
		}
		caKey = key
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("webhook key: %w", err)
	}
	notAfter := now.Add(servingLifetime)
	if caCert.NotAfter.Before(notAfter) {
		notAfter = caCert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: now.Add(-time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	addHosts(tmpl, hosts)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("webhook serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("webhook key: %w", err)
	}
	caKeyDER, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		return nil, fmt.Errorf("webhook CA key: %w", err)
	}
	return map[string][]byte{
		SecretCACert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw}),
		SecretCAKey:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: caKeyDER}),
		SecretCert:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		SecretKey:    pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		// crypto/rand does not fail on supported platforms.
		panic(err)
	}
	return n
}

// parseCA returns the Secret's CA and its key, or nils when they are
// missing, broken, do not match, or are not a CA.
func parseCA(data map[string][]byte) (*x509.Certificate, *ecdsa.PrivateKey) {
	cb, _ := pem.Decode(data[SecretCACert])
	kb, _ := pem.Decode(data[SecretCAKey])
	if cb == nil || kb == nil {
		return nil, nil
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil || !cert.IsCA {
		return nil, nil
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, nil
	}
	return cert, key
}

func parseLeaf(data map[string][]byte) *x509.Certificate {
	b, _ := pem.Decode(data[SecretCert])
	if b == nil {
		return nil
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil
	}
	return leaf
}

// unionHosts is hosts and then the names of leaf that hosts lacks; hosts[0]
// stays first (it becomes the common name).
func unionHosts(leaf *x509.Certificate, hosts []string) []string {
	out := slices.Clone(hosts)
	for _, n := range leaf.DNSNames {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for _, ip := range leaf.IPAddresses {
		if s := ip.String(); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
