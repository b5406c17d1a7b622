package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dsmlp/spawner/admission"
	"github.com/dsmlp/spawner/gpucontroller"
	"github.com/dsmlp/spawner/kubeclient"
	"github.com/dsmlp/spawner/reservation"
	"github.com/dsmlp/spawner/reservationstore"
)

// reservationFlags are the flags of the GPU reservation engine and its
// admission webhook; both run only when the configuration file has a
// reservation section.
type reservationFlags struct {
	// onEvict is told of the engine's evictions (the session history).
	onEvict                         func(ctx context.Context, pod *corev1.Pod, reason, message string)
	namespace, identity             string
	leaderElect                     bool
	tick                            time.Duration
	qps                             float64
	workers                         int
	webhookListen                   string
	webhookCert, webhookKey         string
	webhookHosts, webhookConfigName string
	webhookCertSecret               string
	webhookCertResync               time.Duration
	// limits are the API server's, set by serve after parsing.
	limits serverLimits
}

func (f *reservationFlags) register(fs *flag.FlagSet) {
	host, _ := os.Hostname()
	fs.StringVar(&f.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the reservation leader Lease and pause ConfigMap (default $POD_NAMESPACE, else the notebook namespace)")
	fs.StringVar(&f.identity, "identity", host, "this replica's name in the leader Lease")
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "decide GPU admission only while holding the leader Lease")
	fs.DurationVar(&f.tick, "reservation-tick", 10*time.Second, "longest time between reservation decision cycles (bookings open, guarantees end on it)")
	fs.Float64Var(&f.qps, "reservation-qps", 200, "API client QPS of the reservation controller (burst 2x); events have a client of their own with the same limit")
	fs.IntVar(&f.workers, "reservation-workers", 64, "reservation writes in flight at once within one plan step, and event writers")
	fs.StringVar(&f.webhookListen, "webhook-listen", "", "HTTPS address of the GPU admission webhook, e.g. :8443 (empty: no webhook)")
	fs.StringVar(&f.webhookCert, "webhook-cert-file", "", "webhook serving certificate (PEM), e.g. a mounted cert-manager Secret; empty: --webhook-cert-secret, else a self-signed one")
	fs.StringVar(&f.webhookKey, "webhook-key-file", "", "webhook serving key (PEM)")
	fs.StringVar(&f.webhookCertSecret, "webhook-cert-secret", "", "Secret in --namespace holding the webhook's CA and serving certificate, shared by every replica: the first creates it, all serve it and write its CA into the webhook configuration")
	fs.DurationVar(&f.webhookCertResync, "webhook-cert-resync", 30*time.Second, "how often the --webhook-cert-secret Secret and the webhook configuration's caBundle are checked")
	fs.StringVar(&f.webhookHosts, "webhook-hosts", "localhost,127.0.0.1", "names in the webhook certificate spawnerd makes (the Service DNS names)")
	fs.StringVar(&f.webhookConfigName, "webhook-config-name", "", "MutatingWebhookConfiguration whose caBundle spawnerd fills with the CA of the certificate it makes")
}

// gpuParts are the running reservation pieces.
type gpuParts struct {
	controller *gpucontroller.Controller
	webhook    *http.Server
}

// parseReservation reads the configuration file's reservation section;
// nil when there is none (the engine is off).
func parseReservation(raw json.RawMessage) (*reservation.Config, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	cfg, err := reservation.ParseConfig(raw)
	if err != nil {
		return nil, err
	}
	return &cfg, nil
}

func (f *reservationFlags) start(ctx context.Context, cfg *reservation.Config, restCfg *rest.Config, client kubernetes.Interface,
	notebookNS string, reg prometheus.Registerer, log *zap.Logger) (*gpuParts, error) {
	if cfg == nil {
		return nil, nil
	}
	ns := f.namespace
	if ns == "" {
		ns = notebookNS
	}
	if f.qps <= 0 {
		return nil, fmt.Errorf("--reservation-qps must be positive, got %g", f.qps)
	}
	if f.workers < 1 {
		return nil, fmt.Errorf("--reservation-workers must be at least 1, got %d", f.workers)
	}
	rc := rest.CopyConfig(restCfg)
	rc.QPS, rc.Burst = float32(f.qps), int(2*f.qps)
	rc.UserAgent = reservation.Component
	rclient, err := kubernetes.NewForConfig(kubeclient.Protobuf(rc))
	if err != nil {
		return nil, fmt.Errorf("reservation client: %w", err)
	}
	// Waiting events get a client (and rate limit) of their own.
	eclient, err := kubernetes.NewForConfig(kubeclient.Protobuf(rc))
	if err != nil {
		return nil, fmt.Errorf("reservation events client: %w", err)
	}
	// Its watches get a connection of their own, as the pod watcher's do.
	wclient, err := kubernetes.NewForConfig(kubeclient.Protobuf(kubeclient.OwnConnection(rc)))
	if err != nil {
		return nil, fmt.Errorf("reservation watch client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("reservation client: %w", err)
	}
	ctl, err := gpucontroller.New(rclient, reservationstore.New(dyn, 10*time.Minute), gpucontroller.Options{
		Config: *cfg, Namespace: ns, Identity: f.identity, LeaderElection: f.leaderElect, Tick: f.tick, Workers: f.workers, EventsClient: eclient, WatchClient: wclient,
		Logger: log.Named("reservation"), Registry: reg, OnEvict: f.onEvict,
	})
	if err != nil {
		return nil, err
	}
	parts := &gpuParts{controller: ctl}
	if f.webhookListen == "" {
		return parts, nil
	}
	if f.webhookCert != "" && f.webhookCertSecret != "" {
		return nil, errors.New("--webhook-cert-file and --webhook-cert-secret exclude each other")
	}
	if f.webhookCertResync <= 0 {
		return nil, fmt.Errorf("--webhook-cert-resync must be positive, got %s", f.webhookCertResync)
	}
	wlog := log.Named("admission")
	var getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	switch {
	case f.webhookCert != "":
		// Kept by someone else (cert-manager), reloaded when the files change;
		// the caBundle is theirs to write too.
		certFiles, err := admission.LoadCertFiles(f.webhookCert, f.webhookKey, wlog)
		if err != nil {
			return nil, err
		}
		go certFiles.Watch(ctx, f.webhookCertResync)
		getCert = certFiles.GetCertificate
	case f.webhookCertSecret != "":
		if getCert, err = f.startCertSecret(ctx, client, ns, wlog); err != nil {
			return nil, err
		}
	default:
		cert, caPEM, err := admission.SelfSigned(strings.Split(f.webhookHosts, ","), time.Now())
		if err != nil {
			return nil, err
		}
		getCert = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }
		if f.webhookConfigName != "" {
			// Every process has a certificate of its own: with more than one
			// replica they overwrite each other's caBundle.
			wlog.Warn("the webhook certificate is this process's own; run one replica, or share one with --webhook-cert-secret")
			go func() {
				if err := admission.InjectCABundle(ctx, client, f.webhookConfigName, caPEM, wlog); err != nil && ctx.Err() == nil {
					log.Error("webhook CA bundle not written", zap.Error(err))
				}
			}()
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/mutate", admission.New(*cfg, log.Named("admission")))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	ln, err := net.Listen("tcp", f.webhookListen)
	if err != nil {
		return nil, fmt.Errorf("webhook listener: %w", err)
	}
	parts.webhook = &http.Server{Handler: mux, ReadHeaderTimeout: f.limits.readHeader, ReadTimeout: f.limits.read,
		WriteTimeout: f.limits.write, IdleTimeout: f.limits.idle, MaxHeaderBytes: f.limits.maxHeaderBytes,
		TLSConfig: &tls.Config{GetCertificate: getCert, MinVersion: tls.VersionTLS12}}
	go func() {
		if err := parts.webhook.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("webhook server", zap.Error(err))
		}
	}()
	log.Info("GPU admission webhook serving", zap.String("listen", ln.Addr().String()))
	return parts, nil
}

// startCertSecret loads the shared certificate Secret (creating it when this
// is the first replica), keeps following it, and keeps the webhook
// configuration's caBundle on its CA.
func (f *reservationFlags) startCertSecret(ctx context.Context, client kubernetes.Interface, ns string, log *zap.Logger) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	cs, err := admission.NewCertSecret(client, admission.CertSecretOptions{
		Namespace: ns, Name: f.webhookCertSecret, Hosts: strings.Split(f.webhookHosts, ","), Logger: log,
	})
	if err != nil {
		return nil, err
	}
	// The API server may still be coming up with the pod: a few tries
	// before giving up, rather than a restart loop.
	var lastErr error
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, lastErr = cs.Sync(ctx)
		return lastErr == nil, nil
	}); err != nil {
		return nil, fmt.Errorf("webhook certificate Secret %s/%s: %w", ns, f.webhookCertSecret, errors.Join(lastErr, err))
	}
	ensureCA := func(ctx context.Context, _ bool) {
		if f.webhookConfigName == "" {
			return
		}
		// Checked every round, not only when the CA changed: the
		// configuration may be created or replaced after this replica started.
		_, err := admission.EnsureCABundle(ctx, client, f.webhookConfigName, cs.CABundle(), log)
		switch {
		case errors.Is(err, admission.ErrNoWebhookConfig):
			log.Info("webhook configuration not there yet", zap.String("name", f.webhookConfigName))
		case err != nil && ctx.Err() == nil:
			log.Warn("webhook CA bundle not written; retrying", zap.String("name", f.webhookConfigName), zap.Error(err))
		}
	}
	go func() {
		ensureCA(ctx, true)
		cs.Watch(ctx, f.webhookCertResync, ensureCA)
	}()
	log.Info("webhook certificate from its shared Secret", zap.String("secret", f.webhookCertSecret), zap.String("namespace", ns))
	return cs.GetCertificate, nil
}
