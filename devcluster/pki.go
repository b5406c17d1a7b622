package devcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the file paths of the cluster's certificates and keys.
type pki struct {
	dir         string
	caCert      string
	caKey       string
	serverCert  string
	serverKey   string
	saKey       string // RSA private key: signs service-account tokens
	saPub       string
	clientCerts map[string][2]string // identity → cert, key
}

// identities are the client certificates the control plane needs: each
// component gets its own user so RBAC applies to it as on a real cluster.
var identities = []struct{ name, cn, org string }{
	{"admin", "kubernetes-admin", "system:masters"},
	{"scheduler", "system:kube-scheduler", ""},
	{"controller-manager", "system:kube-controller-manager", ""},
	{"kwok", "kwok-controller", "system:masters"},
	{"runtime", "system:node:" + LocalRuntimeNode, "system:nodes"},
	{"runtime-gpu", "system:node:" + LocalRuntimeGPUNode, "system:nodes"},
}

type certAuthority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// newPKI generates a CA, the API server's serving certificate, client
// certificates and the service-account key pair in dir; extraIPs are more
// addresses the serving certificate is valid for.
func newPKI(dir string, extraIPs ...net.IP) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating pki dir: %w", err)
	}
	p := &pki{
		dir:         dir,
		caCert:      filepath.Join(dir, "ca.crt"),
		caKey:       filepath.Join(dir, "ca.key"),
		serverCert:  filepath.Join(dir, "apiserver.crt"),
		serverKey:   filepath.Join(dir, "apiserver.key"),
		saKey:       filepath.Join(dir, "sa.key"),
		saPub:       filepath.Join(dir, "sa.pub"),
		clientCerts: map[string][2]string{},
	}
	ca, err := p.writeCA()
	if err != nil {
		return nil, err
	}
	serverTmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: append([]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")}, extraIPs...),
	}
	if err := ca.issue(serverTmpl, p.serverCert, p.serverKey); err != nil {
		return nil, err
	}
	for _, id := range identities {
		tmpl := &x509.Certificate{
			Subject:     pkix.Name{CommonName: id.cn},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if id.org != "" {
			tmpl.Subject.Organization = []string{id.org}
		}
		cert, key := filepath.Join(dir, id.name+".crt"), filepath.Join(dir, id.name+".key")
		if err := ca.issue(tmpl, cert, key); err != nil {
			return nil, err
		}
		p.clientCerts[id.name] = [2]string{cert, key}
	}
	if err := p.writeServiceAccountKeys(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *pki) writeCA() (*certAuthority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "devcluster-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(1, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("self-signing CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing CA: %w", err)
	}
	if err := writePEM(p.caCert, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding CA key: %w", err)
	}
	if err := writePEM(p.caKey, "EC PRIVATE KEY", keyDER); err != nil {
		return nil, err
	}
	return &certAuthority{cert: cert, key: key}, nil
}

func (ca *certAuthority) issue(tmpl *x509.Certificate, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating key for %s: %w", tmpl.Subject.CommonName, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return fmt.Errorf("serial: %w", err)
	}
	now := time.Now()
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.AddDate(1, 0, 0)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return fmt.Errorf("signing %s: %w", tmpl.Subject.CommonName, err)
	}
	if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding key: %w", err)
	}
	return writePEM(keyPath, "EC PRIVATE KEY", keyDER)
}

func (p *pki) writeServiceAccountKeys() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("generating service-account key: %w", err)
	}
	if err := writePEM(p.saKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("encoding service-account public key: %w", err)
	}
	return writePEM(p.saPub, "PUBLIC KEY", pub)
}

func writePEM(path, typ string, der []byte) error {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", filepath.Base(path), err)
	}
	return nil
}
