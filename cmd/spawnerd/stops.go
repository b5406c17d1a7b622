package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dsmlp/spawner/kubeclient"
	"github.com/dsmlp/spawner/leader"
)

// stopFlags name the Lease whose holder runs the stop reaction, and the
// timing of every Lease spawnerd holds.
type stopFlags struct {
	leaseName, leaseNamespace          string
	duration, renewDeadline, retryWait time.Duration
	// workers react to stops at once (each deletes, records and reports
	// one pod).
	workers int
}

func (f *stopFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.leaseName, "stop-lease-name", "spawnerd-stops", "Lease whose holder deletes stopped pods and tells the hub (empty: no election, for a single replica)")
	fs.StringVar(&f.leaseNamespace, "stop-lease-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the stop Lease (default $POD_NAMESPACE, else the notebook namespace)")
	fs.DurationVar(&f.duration, "lease-duration", 15*time.Second, "how long a Lease holds without renewal: the longest takeover after a replica dies")
	fs.DurationVar(&f.renewDeadline, "lease-renew-deadline", 10*time.Second, "how long the holder retries renewing before it stops acting")
	fs.DurationVar(&f.retryWait, "lease-retry-period", 2*time.Second, "time between tries to take or renew a Lease")
	fs.IntVar(&f.workers, "stop-workers", 1024, "stops reacted to at once (each deletes a pod, records its end and tells the hub, then releases the pod); a worker is a goroutine waiting on the API server")
}

// kubeFlags bound spawnerd's own rate of Kubernetes API requests (the
// reservation engine has its own, --reservation-qps).
type kubeFlags struct {
	qps   float64
	burst int
	// compression: offer the API server gzip (see kubeclient.Uncompressed).
	compression bool
}

func (f *kubeFlags) register(fs *flag.FlagSet) {
	fs.Float64Var(&f.qps, "kube-qps", 500, "Kubernetes API requests per second spawnerd may make (client-go's rate limit): spawns, stops, deletes")
	fs.IntVar(&f.burst, "kube-burst", 1000, "requests above --kube-qps allowed in a burst (a spawn storm, a thousand stops at once)")
	fs.BoolVar(&f.compression, "kube-compression", true, "offer the API server gzip, which it uses for watch streams and large answers: it hands each uncompressed pod event to its HTTP/2 writer on its own, and gzipped events share those hand-offs, so under load a gzipped watch keeps up; off saves the gzip's CPU on both sides")
}

// apply returns a copy of cfg with the flags' rate limits and compression.
func (f *kubeFlags) apply(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.QPS, out.Burst = float32(f.qps), f.burst
	out.UserAgent = "spawnerd"
	if !f.compression {
		out = kubeclient.Uncompressed(out)
	}
	return out
}

func (f *kubeFlags) check() error {
	if f.qps <= 0 || f.burst < 1 {
		return fmt.Errorf("--kube-qps must be positive and --kube-burst at least 1, got %v and %d", f.qps, f.burst)
	}
	return nil
}

func (f *stopFlags) options(namespace, identity string, log *zap.Logger) leader.Options {
	if f.leaseNamespace != "" {
		namespace = f.leaseNamespace
	}
	return leader.Options{Namespace: namespace, Name: f.leaseName, Identity: identity,
		LeaseDuration: f.duration, RenewDeadline: f.renewDeadline, RetryPeriod: f.retryWait, Logger: log}
}

// uniqueIdentity gives *identity a random suffix unless --identity was
// set: two processes on one host (or two containers with one host name)
// would otherwise both think they hold a Lease.
func uniqueIdentity(fs *flag.FlagSet, identity *string) {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "identity" })
	if set {
		return
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	*identity += "_" + hex.EncodeToString(b)
}

// apiHealth remembers when the API server last answered, for readiness: a
// replica cut off from it cannot serve from a cache it cannot trust.
type apiHealth struct {
	last atomic.Int64 // unix nanoseconds of the last good answer
	// stale is how old the last answer may be for the replica to be ready.
	stale time.Duration
}

func (h *apiHealth) run(ctx context.Context, client kubernetes.Interface, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, every)
		err := client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(cctx).Error()
		cancel()
		if err == nil {
			h.last.Store(time.Now().UnixNano())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *apiHealth) ok() bool {
	return time.Since(time.Unix(0, h.last.Load())) < h.stale
}
