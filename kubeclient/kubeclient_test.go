package kubeclient

import (
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func TestProtobufLeavesTheOriginal(t *testing.T) {
	base := &rest.Config{Host: "https://example.invalid", QPS: 5}
	pb := Protobuf(base)
	if pb.ContentType != runtime.ContentTypeProtobuf {
		t.Errorf("ContentType = %q, want %q", pb.ContentType, runtime.ContentTypeProtobuf)
	}
	if pb.AcceptContentTypes != "application/vnd.kubernetes.protobuf,application/json" {
		t.Errorf("AcceptContentTypes = %q", pb.AcceptContentTypes)
	}
	if base.ContentType != "" || base.AcceptContentTypes != "" {
		t.Errorf("the original config changed: %q / %q", base.ContentType, base.AcceptContentTypes)
	}
	if pb.Host != base.Host || pb.QPS != base.QPS {
		t.Errorf("the copy lost settings: %+v", pb)
	}
}

// TestUncompressedOffersNoGzip sends a watch, the request that matters, to
// a TLS server speaking HTTP/2 as the API server does, from clientsets made
// of a config and of its Uncompressed copy: client-go's transport offers
// gzip on the first and must not on the second.
func TestUncompressedOffersNoGzip(t *testing.T) {
	offered := make(chan string, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		offered <- r.Header.Get("Accept-Encoding")
		// An empty watch stream: the client sees the watch end at once.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	base := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: certPEM}}

	for _, tc := range []struct {
		name string
		cfg  *rest.Config
		want string
	}{
		{"client-go's default", Protobuf(base), "gzip"},
		{"Uncompressed", Protobuf(Uncompressed(base)), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, err := kubernetes.NewForConfig(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			w, err := cs.CoreV1().Pods("ns").Watch(t.Context(), metav1.ListOptions{})
			if err != nil {
				t.Fatalf("watch: %v", err)
			}
			w.Stop()
			if got := <-offered; got != tc.want {
				t.Errorf("Accept-Encoding = %q, want %q", got, tc.want)
			}
		})
	}
	if base.DisableCompression {
		t.Error("Uncompressed changed the original config")
	}
}

// TestOwnConnectionDialsApart counts the TCP connections an HTTP/2 TLS
// server accepts: clientsets made of one config, even with different rate
// limits, share a connection (client-go's transport cache), and a clientset
// made of an OwnConnection copy opens one of its own.
func TestOwnConnectionDialsApart(t *testing.T) {
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","items":[]}`))
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns[c] = true
			mu.Unlock()
		}
	}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	base := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: certPEM}}
	opened := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(conns)
	}
	list := func(cfg *rest.Config) {
		t.Helper()
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Pods("ns").List(t.Context(), metav1.ListOptions{}); err != nil {
			t.Fatalf("list: %v", err)
		}
	}

	list(base)
	other := rest.CopyConfig(base)
	other.QPS, other.Burst = 50, 100
	list(other)
	if n := opened(); n != 1 {
		t.Fatalf("two clientsets of one config opened %d connections, want 1 (shared)", n)
	}
	own := OwnConnection(base)
	list(own)
	if n := opened(); n != 2 {
		t.Fatalf("after a clientset of OwnConnection: %d connections, want 2", n)
	}
	if base.Dial != nil {
		t.Error("OwnConnection changed the original config")
	}
}
