// Command spawnerd is the spawner service JupyterHub calls over HTTP.
//
//	spawnerd serve  --config FILE [flags]     # the HTTP service
//	spawnerd render --config FILE --user NAME [--user-id N] [--server NAME] [--profile SLUG] [--option KEY=VALUE]... [--hub-namespace NS]
//	spawnerd admin  [--url URL] COMMAND ...              # servers, session history (sessions, why), GPU reservations
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/zapr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/dsmlp/spawner/hubapi"
	"github.com/dsmlp/spawner/hubclient"
	"github.com/dsmlp/spawner/kubeclient"
	"github.com/dsmlp/spawner/leader"
	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/poll"
	"github.com/dsmlp/spawner/recorder"
	"github.com/dsmlp/spawner/spawner"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "render":
		err = render(os.Args[2:])
	case "admin":
		err = admin(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "spawnerd:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: spawnerd serve --config FILE [flags] | spawnerd render --config FILE --user NAME [--user-id N] [--server NAME] [--profile SLUG] [--option KEY=VALUE]... [--hub-namespace NS] | spawnerd admin COMMAND (spawnerd admin -h)")
	os.Exit(2)
}

type optionFlags map[string]any

func (o optionFlags) String() string { return fmt.Sprint(map[string]any(o)) }
func (o optionFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("--option wants KEY=VALUE, got %q", v)
	}
	o[k] = val
	return nil
}

func render(args []string) error {
	fs := flag.NewFlagSet("render", flag.ExitOnError)
	configPath := fs.String("config", "", "spawner configuration file (KubeSpawner trait names)")
	user := fs.String("user", "", "hub user name")
	userID := fs.Int("user-id", 0, "the hub's id of the user, for {userid}")
	server := fs.String("server", "", "server name (empty: the default server)")
	profile := fs.String("profile", "", "profile slug")
	hubNamespace := fs.String("hub-namespace", "", "the hub's namespace, for {hubnamespace} (default: the config's hub_namespace, else this pod's service-account namespace, else default)")
	opts := optionFlags{}
	fs.Var(opts, "option", "profile option KEY=VALUE (repeatable)")
	_ = fs.Parse(args)
	if *configPath == "" || *user == "" {
		return errors.New("render needs --config and --user")
	}
	if *userID < 0 {
		return fmt.Errorf("--user-id must not be negative, got %d", *userID)
	}
	cfg, err := spawner.Load(*configPath)
	if err != nil {
		return err
	}
	userOptions := map[string]any{}
	for k, v := range opts {
		userOptions[k] = v
	}
	if *profile != "" {
		userOptions["profile"] = *profile
	}
	out, err := spawner.RenderAll(cfg, spawner.Request{
		User: *user, UserID: *userID, Server: *server, UserOptions: userOptions, HubNamespace: *hubNamespace,
	})
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(out)
	return err
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	configPath := fs.String("config", "", "spawner configuration file (KubeSpawner trait names)")
	listen := fs.String("listen", "127.0.0.1:8090", "address of the HTTP API")
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig (empty: in-cluster config)")
	secretFile := fs.String("shared-secret-file", "", "file with the secret the hub signs its tokens with (else $SPAWNERD_SHARED_SECRET)")
	issuer := fs.String("token-issuer", "jupyterhub", "required iss claim of the hub's tokens (empty: any)")
	hubAPI := fs.String("hub-api-url", "", "the hub's REST API, e.g. http://127.0.0.1:8081/hub/api, told when a server stops on its own")
	hubTokenFile := fs.String("hub-token-file", "", "file with the hub service token, scope delete:servers (else $SPAWNERD_HUB_TOKEN)")
	proxyAPI := fs.String("proxy-api-url", "", "configurable-http-proxy's REST API, e.g. http://127.0.0.1:8001; used only when the hub cannot be reached")
	proxyTokenFile := fs.String("proxy-token-file", "", "file with the proxy's auth token (else $CONFIGPROXY_AUTH_TOKEN)")
	baseURL := fs.String("hub-base-url", "/", "the hub's base_url, for proxy route paths")
	stopWait := fs.Duration("stop-wait", 10*time.Second, "how long DELETE waits for the pod to go before answering 202")
	debug := fs.Bool("debug", false, "debug logging")
	debugListen := fs.String("debug-listen", "", "address of a separate listener serving Go's profiler (net/http/pprof) under /debug/pprof/, e.g. 127.0.0.1:6060; off when empty. It has no authentication: bind it to loopback")
	var limits serverLimits
	limits.register(fs)
	var rf reservationFlags
	rf.register(fs)
	var sf stopFlags
	sf.register(fs)
	var hf historyFlags
	hf.register(fs)
	var kf kubeFlags
	kf.register(fs)
	var cf consoleFlags
	cf.register(fs)
	_ = fs.Parse(args)
	uniqueIdentity(fs, &rf.identity)
	if *configPath == "" {
		return errors.New("serve needs --config")
	}
	if err := limits.check(*stopWait); err != nil {
		return err
	}
	if err := kf.check(); err != nil {
		return err
	}
	if sf.workers < 1 {
		return fmt.Errorf("--stop-workers must be at least 1, got %d", sf.workers)
	}
	rf.limits = limits

	zcfg := zap.NewProductionConfig()
	if *debug {
		zcfg.Level = zap.NewAtomicLevelAt(zap.DebugLevel)
		// Every line, when following items one by one: sampling keeps
		// only 1 in 100 repeats of a message after the first 100 a second.
		zcfg.Sampling = nil
	}
	log, err := zcfg.Build()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	klog.SetLogger(zapr.NewLogger(log.Named("client-go")))
	tuneMemory(log, os.LookupEnv)

	cfg, err := spawner.Load(*configPath)
	if err != nil {
		return err
	}
	if cfg.Spark != nil {
		log.Warn("the top-level spark section is ignored; declare a cluster with the kubespawner trait spark")
	}
	base, err := cfg.Resolve(nil)
	if err != nil {
		return err
	}
	secret, err := hubapi.ReadSecret(*secretFile, "SPAWNERD_SHARED_SECRET")
	if err != nil {
		return err
	}
	auth, err := hubapi.NewAuthenticator(secret, *issuer, nil)
	if err != nil {
		return err
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	restCfg = kf.apply(restCfg)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	restCfg.WrapTransport = lifecycle.CountRequests(reg)
	client, err := kubernetes.NewForConfig(kubeclient.Protobuf(restCfg))
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	// The stop reaction's finalizer releases get a rate limiter of their
	// own: in a burst of stops every delete goes out first.
	releaseClient, err := kubernetes.NewForConfig(kubeclient.Protobuf(restCfg))
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}

	// The pod watch gets a connection of its own: the stop reaction's
	// writes go out exactly when its events must come in.
	watchClient, err := kubernetes.NewForConfig(kubeclient.Protobuf(kubeclient.OwnConnection(restCfg)))
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}

	notifier, err := newNotifier(*hubAPI, *hubTokenFile, *proxyAPI, *proxyTokenFile, *baseURL, sf.workers, log)
	if err != nil {
		return err
	}
	// Exactly the namespaces the configuration can put pods in; all of
	// them only with user namespaces.
	watchNS, allNS := cfg.Namespaces()
	if allNS {
		watchNS = []string{""}
	}
	watcherOpts := poll.Options{
		Namespaces:        watchNS,
		LabelSelector:     "component=" + base.ComponentLabel,
		DeleteStoppedPods: base.DeleteStoppedPods,
		Logger:            log.Named("poll"),
		Owns:              lifecycle.Ownership(cfg),
		Elected:           sf.leaseName != "",
		Workers:           sf.workers,
		ReleaseClient:     releaseClient,
		WatchClient:       watchClient,
	}
	leaseOpts := sf.options(base.Namespace, rf.identity, log.Named("leader"))
	if watcherOpts.Elected {
		if err := leaseOpts.Check(); err != nil {
			return err
		}
	}
	if notifier != nil {
		watcherOpts.Notifier = notifier
	}
	resCfg, err := parseReservation(cfg.Reservation)
	if err != nil {
		return err
	}
	prefix := ""
	if resCfg != nil {
		prefix = resCfg.AnnotationPrefix
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	store, err := hf.open(ctx, log.Named("history"))
	if err != nil {
		return err
	}
	defer store.Close()
	// The watcher and the recorder need each other: the recorder reads the
	// watcher's cache, the watcher tells the recorder of every stop.
	var rec *recorder.Recorder
	watcherOpts.OnStop = func(ctx context.Context, pod *corev1.Pod, info poll.StopInfo) { rec.Stopped(ctx, pod, info) }
	watcher, err := poll.New(client, watcherOpts)
	if err != nil {
		return err
	}
	rec, err = recorder.New(recorder.Options{Store: store, AnnotationPrefix: prefix, Events: watcher.Events, Pods: watcher.Pods, Synced: watcher.HasSynced,
		Owns: watcherOpts.Owns, Elected: watcherOpts.Elected, Logger: log.Named("history")})
	if err != nil {
		return err
	}
	if err := watcher.AddPodHandler(rec.Handler()); err != nil {
		return err
	}
	rf.onEvict = rec.EngineStopped
	// The engine comes first: a waiting GPU spawn's progress reads it.
	gpu, err := rf.start(ctx, resCfg, restCfg, client, base.Namespace, reg, log)
	if err != nil {
		return err
	}
	mopts := lifecycle.Options{Logger: log.Named("lifecycle"), Metrics: lifecycle.NewMetrics(reg),
		Recorder: rec, History: store, RecentStops: hf.recentStops, AnnotationPrefix: prefix,
		Pods: kubeclient.NewPodCreator(client.CoreV1().RESTClient())}
	if resCfg != nil {
		mopts.SchedulingGate = resCfg.SchedulingGate
		// Progress gives times in the engine's zone, as its events do.
		if mopts.Location, err = time.LoadLocation(resCfg.TimeZone); err != nil {
			return fmt.Errorf("reservation time_zone: %w", err)
		}
	}
	if gpu != nil {
		mopts.Reservations = gpu.controller
	}
	manager, err := lifecycle.New(client, cfg, watcher, mopts)
	if err != nil {
		return err
	}
	health := &apiHealth{stale: 10 * time.Second}
	// Ready once the pod cache is whole: every answer to the hub reads it.
	// The event cache (a LIST of every pod event, 40,000 at 10,000 servers)
	// comes after it; until then a progress log shows a start's events late,
	// not wrong, and the history's rescan waits for it on its own.
	ready := func() bool { return watcher.PodsSynced() && manager.HasSynced() && health.ok() }
	apiOpts := hubapi.Options{
		Servers: manager, Auth: auth, Profiles: cfg.Profiles,
		Ready:    ready,
		StopWait: *stopWait, Logger: log.Named("hubapi"), Registry: reg,
		History: store, Location: mopts.Location,
	}
	if gpu != nil {
		apiOpts.Reservations = gpu.controller
		apiOpts.Ready = func() bool { return ready() && gpu.controller.HasSynced() }
	}
	api := hubapi.New(apiOpts)
	parts := consoleParts{hubAPI: *hubAPI, hubTokenFile: *hubTokenFile, cookieSecret: secret,
		servers: manager, history: store, cfg: cfg, location: mopts.Location}
	if gpu != nil {
		parts.reservations = gpu.controller
	}
	handler, err := cf.handler(api, parts, log.Named("console"))
	if err != nil {
		return err
	}

	watchErr := make(chan error, 4)
	go health.run(ctx, client, 2*time.Second)
	go func() { watchErr <- watcher.Run(ctx) }()
	recDone := make(chan struct{})
	go func() {
		defer close(recDone)
		_ = rec.Run(ctx)
	}()
	go hf.purgeLoop(ctx, store, watcher.Leading, log.Named("history"))
	leaderDone := make(chan struct{})
	if watcherOpts.Elected {
		go func() {
			defer close(leaderDone)
			watchErr <- leader.Run(ctx, client, leaseOpts, func(leading bool) {
				watcher.SetLeading(leading)
				rec.SetLeading(leading)
			})
		}()
	} else {
		close(leaderDone)
	}
	go func() { watchErr <- manager.Run(ctx) }()
	if gpu != nil {
		go func() { watchErr <- gpu.controller.Run(ctx) }()
	}
	srv := limits.newServer(handler)
	srv.Addr = *listen
	serveErr := make(chan error, 2)
	go func() { serveErr <- srv.ListenAndServe() }()
	if *debugListen != "" {
		dbg := debugServer(*debugListen)
		defer dbg.Close()
		go func() {
			if err := dbg.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
				serveErr <- fmt.Errorf("debug listener: %w", err)
			}
		}()
	}
	log.Info("serving", zap.String("listen", *listen), zap.Strings("namespaces", watchNS), zap.Bool("hub_notify", *hubAPI != ""),
		zap.String("identity", rf.identity), zap.String("stop_lease", sf.leaseName))
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		return fmt.Errorf("http server: %w", err)
	case err := <-watchErr:
		if err != nil {
			return fmt.Errorf("watching: %w", err)
		}
	}
	log.Info("shutting down")
	stop() // also for an error exit: the Lease is released below
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A released Lease is taken over at once; one left to expire costs
	// the next replica --lease-duration.
	select {
	case <-leaderDone:
	case <-time.After(3 * time.Second):
	}
	if gpu != nil && gpu.webhook != nil {
		_ = gpu.webhook.Shutdown(shutdownCtx)
	}
	err = srv.Shutdown(shutdownCtx)
	// The recorder writes what is queued before the store closes.
	select {
	case <-recDone:
	case <-time.After(5 * time.Second):
	}
	return err
}

// serverLimits bound what one client can hold of the API and webhook
// servers: slow headers or bodies, a slow reader of the answer, an idle
// keep-alive connection, huge headers.
type serverLimits struct {
	readHeader, read, write, idle time.Duration
	maxHeaderBytes                int
}

func (l *serverLimits) register(fs *flag.FlagSet) {
	fs.DurationVar(&l.readHeader, "read-header-timeout", 10*time.Second, "longest time to read a request's headers")
	fs.DurationVar(&l.read, "read-timeout", 30*time.Second, "longest time to read a whole request, body included")
	fs.DurationVar(&l.write, "write-timeout", 60*time.Second, "longest time from the end of a request's headers to the end of its answer (not the progress WebSocket); must exceed --stop-wait")
	fs.DurationVar(&l.idle, "idle-timeout", 120*time.Second, "how long an idle keep-alive connection stays open")
	fs.IntVar(&l.maxHeaderBytes, "max-header-bytes", 64<<10, "largest request header block, in bytes (the bearer token alone is capped at 8 KiB)")
}

// check refuses limits that would cut off the API's own waits: a DELETE
// waits up to stopWait before it answers.
func (l serverLimits) check(stopWait time.Duration) error {
	for name, d := range map[string]time.Duration{"--read-header-timeout": l.readHeader, "--read-timeout": l.read, "--write-timeout": l.write, "--idle-timeout": l.idle} {
		if d <= 0 {
			return fmt.Errorf("%s must be positive, got %s", name, d)
		}
	}
	if l.write <= stopWait+5*time.Second {
		return fmt.Errorf("--write-timeout (%s) must exceed --stop-wait (%s) by more than 5s, or a slow stop is cut off", l.write, stopWait)
	}
	if l.maxHeaderBytes < 16<<10 {
		return fmt.Errorf("--max-header-bytes must be at least %d (a full-size token and the other headers), got %d", 16<<10, l.maxHeaderBytes)
	}
	return nil
}

// newServer returns an HTTP server for h with the limits.
func (l serverLimits) newServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: l.readHeader, ReadTimeout: l.read, WriteTimeout: l.write,
		IdleTimeout: l.idle, MaxHeaderBytes: l.maxHeaderBytes}
}

// debugServer serves the profiler on its own mux and listener, so that it is
// never reachable through the API's address. No write timeout: a CPU
// profile or trace answers after the seconds it is asked for.
func debugServer(addr string) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
}

// hubConnections bounds the stop reaction's connections to the hub (and
// to the proxy, its fallback).
const hubConnections = 128

func newNotifier(hubAPI, hubTokenFile, proxyAPI, proxyTokenFile, baseURL string, workers int, log *zap.Logger) (*hubclient.Notifier, error) {
	if hubAPI == "" && proxyAPI == "" {
		return nil, nil
	}
	// As many connections to the hub as stop workers call it at once, up
	// to hubConnections: the default two idle ones would make most of a
	// burst of stops dial anew, and more than a hundred only cost the
	// hub's single event loop sockets.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = min(max(workers, 2), hubConnections)
	transport.MaxConnsPerHost = hubConnections
	httpClient := &http.Client{Timeout: 10 * time.Second, Transport: transport}
	n := &hubclient.Notifier{BaseURL: baseURL, Logger: log.Named("hubclient")}
	if hubAPI != "" {
		token, err := readToken(hubTokenFile, "SPAWNERD_HUB_TOKEN")
		if err != nil {
			return nil, fmt.Errorf("hub token: %w", err)
		}
		n.Hub = hubclient.NewHub(hubAPI, token, httpClient)
	}
	if proxyAPI != "" {
		token, err := readToken(proxyTokenFile, "CONFIGPROXY_AUTH_TOKEN")
		if err != nil {
			return nil, fmt.Errorf("proxy token: %w", err)
		}
		n.Proxy = hubclient.NewProxy(proxyAPI, token, httpClient)
	}
	return n, nil
}

func readToken(file, env string) (string, error) {
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(data)), nil
	}
	if v := os.Getenv(env); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("set a token file or $%s", env)
}
