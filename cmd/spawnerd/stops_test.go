package main

import (
	"flag"
	"io"
	"testing"

	"k8s.io/client-go/rest"
)

// The API server's clients offer gzip unless --kube-compression=false: a
// gzipped watch keeps up with a burst where an uncompressed one falls
// behind (see kubeclient.Uncompressed).
func TestKubeFlagsApply(t *testing.T) {
	base := &rest.Config{Host: "https://example.invalid"}
	for _, tc := range []struct {
		args             []string
		wantUncompressed bool
		wantQPS          float32
		wantBurst        int
	}{
		{nil, false, 500, 1000},
		{[]string{"--kube-compression=false", "--kube-qps=20", "--kube-burst=40"}, true, 20, 40},
	} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var kf kubeFlags
		kf.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		got := kf.apply(base)
		if got.DisableCompression != tc.wantUncompressed || got.QPS != tc.wantQPS || got.Burst != tc.wantBurst || got.UserAgent != "spawnerd" {
			t.Errorf("%v: DisableCompression %v, QPS %v, burst %d, user agent %q; want %v, %v, %d, spawnerd",
				tc.args, got.DisableCompression, got.QPS, got.Burst, got.UserAgent, tc.wantUncompressed, tc.wantQPS, tc.wantBurst)
		}
	}
	if base.DisableCompression || base.QPS != 0 || base.UserAgent != "" {
		t.Errorf("apply changed the original config: %+v", base)
	}
}
