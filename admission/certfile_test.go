package admission

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writePair writes a fresh self-signed pair for 127.0.0.1 and returns its
// certificate's serial number.
func writePair(t *testing.T, certFile, keyFile string) string {
	t.Helper()
	cert, certPEM, err := SelfSigned([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.String()
}

// served dials addr over TLS and returns the serial of the certificate it shows.
func served(t *testing.T, addr string) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) // reads the served certificate, trusts nothing
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// The files are rewritten (a renewal) while a TLS server runs: the server
// shows the new certificate without a restart, and a broken pair keeps the
// old one serving.
func TestCertFilesReloadedWhenRewritten(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := writePair(t, certFile, keyFile)
	cf, err := LoadCertFiles(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cf.Watch(ctx, 20*time.Millisecond)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second,
		TLSConfig: &tls.Config{GetCertificate: cf.GetCertificate, MinVersion: tls.VersionTLS12}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	defer srv.Close()
	addr := ln.Addr().String()
	if got := served(t, addr); got != first {
		t.Fatalf("serving %s, want the loaded %s", got, first)
	}

	second := writePair(t, certFile, keyFile)
	deadline := time.Now().Add(5 * time.Second)
	for served(t, addr) != second {
		if time.Now().After(deadline) {
			t.Fatalf("still serving the old certificate 5 s after the files changed")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Half a renewal: a key that does not match. The old pair keeps serving.
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := cf.Reload(); err == nil {
		t.Error("a broken key file loaded")
	}
	if got := served(t, addr); got != second {
		t.Errorf("serving %s after a broken renewal, want %s", got, second)
	}
}

func TestLoadCertFilesRefusesMissingFiles(t *testing.T) {
	if _, err := LoadCertFiles(filepath.Join(t.TempDir(), "none.crt"), "none.key", nil); err == nil {
		t.Error("missing files loaded")
	}
}
