package admission

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
)

// CertFiles serves the certificate in a PEM certificate and key file pair
// and reloads it when the files change (cert-manager renews a Secret, the
// kubelet swaps the mounted files), so a renewal needs no restart. Use its
// GetCertificate in a tls.Config.
type CertFiles struct {
	certFile, keyFile string
	log               *zap.Logger

	mu              sync.RWMutex
	cert            *tls.Certificate
	certPEM, keyPEM []byte // what cert was loaded from
}

// LoadCertFiles reads the pair once; it fails when the files do not hold a
// matching certificate and key.
func LoadCertFiles(certFile, keyFile string, log *zap.Logger) (*CertFiles, error) {
	if log == nil {
		log = zap.NewNop()
	}
	c := &CertFiles{certFile: certFile, keyFile: keyFile, log: log}
	if _, err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// GetCertificate returns the certificate loaded last.
func (c *CertFiles) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cert, nil
}

// Reload reads the files and, when their contents changed, loads the new
// pair; changed says whether it did. A pair that does not load (a renewal
// caught half-written: new certificate, old key) keeps the old certificate
// serving and returns the error; the next Reload tries again.
func (c *CertFiles) Reload() (changed bool, err error) {
	certPEM, err := os.ReadFile(c.certFile)
	if err != nil {
		return false, fmt.Errorf("reading webhook certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(c.keyFile)
	if err != nil {
		return false, fmt.Errorf("reading webhook key: %w", err)
	}
	c.mu.RLock()
	same := c.cert != nil && bytes.Equal(certPEM, c.certPEM) && bytes.Equal(keyPEM, c.keyPEM)
	c.mu.RUnlock()
	if same {
		return false, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return false, fmt.Errorf("loading webhook certificate %s with key %s: %w", c.certFile, c.keyFile, err)
	}
	c.mu.Lock()
	c.cert, c.certPEM, c.keyPEM = &cert, certPEM, keyPEM
	c.mu.Unlock()
	return true, nil
}

// Watch reloads the files every interval until ctx ends. Reading two small
// files is cheap, and unlike a file-system watch it follows the symlink
// swaps of a mounted Secret.
func (c *CertFiles) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := c.Reload()
		switch {
		case err != nil:
			c.log.Warn("webhook certificate not reloaded; serving the previous one", zap.String("cert", c.certFile), zap.Error(err))
		case changed:
			c.log.Info("webhook certificate reloaded", zap.String("cert", c.certFile))
		}
	}
}
