// Package devcluster runs a real Kubernetes control plane on loopback for the
// demo and the tests: etcd, kube-apiserver, kube-scheduler,
// kube-controller-manager, kwok for fake nodes, and a local-runtime node whose
// pods run as local processes.
package devcluster

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"

	"github.com/dsmlp/spawner/devcluster/localnode"
)

//go:embed kwok.yaml
var kwokConfig []byte

// Options configures a dev cluster.
type Options struct {
	// Dir holds the cluster's state: certificates, kubeconfigs, etcd data, logs.
	Dir string
	// BinDir holds etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok.
	BinDir string
	// Nodes are the fake nodes to create. Default DefaultNodeConfig().
	Nodes *NodeConfig
	// Logger receives progress lines. Default: no logging.
	Logger *zap.Logger
	// ReadyTimeout bounds the wait for the API server and every node. Default 2 minutes.
	ReadyTimeout time.Duration
	// ServeIP, when set, is an address of this machine other than loopback
	// (e.g. a container network's gateway) that the API server serves on
	// instead of 127.0.0.1, so that containers can reach it. kube-apiserver
	// listens on one address only; the serving certificate names this one
	// beside 127.0.0.1, and every kubeconfig points at it, which works for
	// this machine's clients too since the address is local.
	ServeIP net.IP
	// Profiling serves kube-apiserver's /debug/pprof (to cluster admins),
	// for benchmarks that profile the API server beside their own work.
	Profiling bool
}

// Cluster is a running dev cluster.
type Cluster struct {
	opts       Options
	pki        *pki
	ports      ports
	procs      map[string]*process
	order      []string
	kubeconfig string
	rest       *rest.Config
	client     kubernetes.Interface
	agents     []runningAgent
	log        *zap.Logger
}

// runningAgent is one local-runtime node's agent.
type runningAgent struct {
	stop context.CancelFunc
	done chan struct{}
}

type ports struct {
	etcdClient, etcdPeer, apiserver, scheduler, controllerManager, kwok int
}

// Start brings up the control plane and the nodes and returns once the API
// server is ready and every node is Ready. On error everything started is stopped.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Dir == "" || opts.BinDir == "" {
		return nil, errors.New("devcluster: Dir and BinDir are required")
	}
	if opts.Nodes == nil {
		opts.Nodes = DefaultNodeConfig()
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 2 * time.Minute
	}
	for _, bin := range []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok"} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, bin)); err != nil {
			return nil, fmt.Errorf("devcluster: %s not found in %s (run hack/tools.sh): %w", bin, opts.BinDir, err)
		}
	}
	for _, sub := range []string{"logs", "etcd", "pods"} {
		if err := os.MkdirAll(filepath.Join(opts.Dir, sub), 0o755); err != nil {
			return nil, fmt.Errorf("devcluster: creating %s: %w", sub, err)
		}
	}
	c := &Cluster{opts: opts, procs: map[string]*process{}, log: opts.Logger}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if opts.ServeIP != nil && opts.ServeIP.To4() == nil {
		return nil, fmt.Errorf("devcluster: ServeIP %s is not an IPv4 address", opts.ServeIP)
	}
	var extraSANs []net.IP
	if opts.ServeIP != nil {
		extraSANs = append(extraSANs, opts.ServeIP)
	}
	if c.pki, err = newPKI(filepath.Join(opts.Dir, "pki"), extraSANs...); err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	if c.ports, err = freePorts(); err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	if err := c.writeKubeconfigs(); err != nil {
		return nil, err
	}
	if c.rest, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig); err != nil {
		return nil, fmt.Errorf("devcluster: loading admin kubeconfig: %w", err)
	}
	c.rest.QPS, c.rest.Burst = 500, 1000
	if c.client, err = kubernetes.NewForConfig(c.rest); err != nil {
		return nil, fmt.Errorf("devcluster: client: %w", err)
	}
	c.define()

	ctx, cancel := context.WithTimeout(ctx, opts.ReadyTimeout)
	defer cancel()
	if err := c.startProcess("etcd"); err != nil {
		return nil, err
	}
	if err := c.waitTCP(ctx, "etcd", c.ports.etcdClient); err != nil {
		return nil, err
	}
	if err := c.startProcess("kube-apiserver"); err != nil {
		return nil, err
	}
	if err := c.waitAPIServer(ctx); err != nil {
		return nil, err
	}
	for _, name := range []string{"kube-scheduler", "kube-controller-manager", "kwok"} {
		if err := c.startProcess(name); err != nil {
			return nil, err
		}
	}
	if err := c.createNodes(ctx); err != nil {
		return nil, err
	}
	if opts.Nodes.localRuntime() {
		if err := c.startAgents(); err != nil {
			return nil, err
		}
	}
	if err := c.waitNodesReady(ctx); err != nil {
		return nil, err
	}
	if err := c.waitDefaultServiceAccount(ctx); err != nil {
		return nil, err
	}
	if err := c.writePIDs(); err != nil {
		return nil, err
	}
	c.log.Info("cluster ready", zap.String("kubeconfig", c.kubeconfig), zap.Int("nodes", len(opts.Nodes.Nodes())))
	return c, nil
}

// Kubeconfig is the path of the admin kubeconfig.
func (c *Cluster) Kubeconfig() string { return c.kubeconfig }

// RESTConfig returns a copy of the admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.rest) }

// Client is an admin clientset.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// Dir is the cluster's state folder.
func (c *Cluster) Dir() string { return c.opts.Dir }

// APIServerURL is the API server's https URL.
func (c *Cluster) APIServerURL() string {
	return "https://" + net.JoinHostPort(c.host(), strconv.Itoa(c.ports.apiserver))
}

// host is the address the API server listens on.
func (c *Cluster) host() string {
	if c.opts.ServeIP != nil {
		return c.opts.ServeIP.String()
	}
	return "127.0.0.1"
}

// CAFile is the cluster CA certificate, for webhooks and clients.
func (c *Cluster) CAFile() string { return c.pki.caCert }

// Stop stops the local-runtime agent (and its pods' processes) and every
// control-plane process, newest first.
func (c *Cluster) Stop() {
	for _, a := range c.agents {
		a.stop()
		<-a.done
	}
	c.agents = nil
	for i := len(c.order) - 1; i >= 0; i-- {
		c.procs[c.order[i]].stop(10 * time.Second)
	}
	_ = os.Remove(filepath.Join(c.opts.Dir, pidFile))
}

// RestartAPIServer stops kube-apiserver and starts it again with the same
// flags and port, then waits for it to be ready: what a control-plane upgrade
// or crash looks like to clients and informers.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	p := c.procs["kube-apiserver"]
	p.stop(20 * time.Second)
	if err := p.start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.ReadyTimeout)
	defer cancel()
	if err := c.waitAPIServer(ctx); err != nil {
		return err
	}
	return c.writePIDs()
}

func (c *Cluster) define() {
	dir, bin := c.opts.Dir, c.opts.BinDir
	logs := filepath.Join(dir, "logs")
	kc := func(id string) string { return filepath.Join(dir, id+".kubeconfig") }
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdPeer)
	add := func(name string, args ...string) {
		c.procs[name] = &process{name: name, path: filepath.Join(bin, name), args: args, logPath: filepath.Join(logs, name+".log")}
		c.order = append(c.order, name)
	}
	add("etcd",
		"--name=devcluster",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=devcluster="+peerURL,
		// A throwaway cluster: durability is not worth an fsync per write.
		"--unsafe-no-fsync=true",
		"--quota-backend-bytes=8589934592",
		"--log-level=warn",
	)
	add("kube-apiserver",
		"--etcd-servers="+etcdURL,
		"--bind-address="+c.host(), "--advertise-address="+c.host(),
		// Loopback cannot back the kubernetes Service endpoints; nothing in-cluster dials it.
		"--endpoint-reconciler-type=none",
		"--secure-port="+strconv.Itoa(c.ports.apiserver),
		"--tls-cert-file="+c.pki.serverCert, "--tls-private-key-file="+c.pki.serverKey,
		"--client-ca-file="+c.pki.caCert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+c.pki.saPub,
		"--service-account-signing-key-file="+c.pki.saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction,ResourceQuota",
		"--allow-privileged=true",
		"--profiling="+strconv.FormatBool(c.opts.Profiling),
		// Spawn storms and 10,000-pod benchmarks: do not throttle the clients under test.
		"--max-requests-inflight=3000", "--max-mutating-requests-inflight=1000",
		"--enable-priority-and-fairness=false",
		"--event-ttl=1h",
		"--v=1",
	)
	add("kube-scheduler",
		"--kubeconfig="+kc("scheduler"),
		"--authentication-kubeconfig="+kc("scheduler"), "--authorization-kubeconfig="+kc("scheduler"),
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(c.ports.scheduler),
		"--leader-elect=false",
		"--kube-api-qps=500", "--kube-api-burst=1000",
		"--v=1",
	)
	add("kube-controller-manager",
		"--kubeconfig="+kc("controller-manager"),
		"--authentication-kubeconfig="+kc("controller-manager"), "--authorization-kubeconfig="+kc("controller-manager"),
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(c.ports.controllerManager),
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+c.pki.saKey,
		"--root-ca-file="+c.pki.caCert,
		"--cluster-signing-cert-file="+c.pki.caCert, "--cluster-signing-key-file="+c.pki.caKey,
		"--controllers=*,-node-ipam-controller",
		"--kube-api-qps=500", "--kube-api-burst=1000",
		"--concurrent-deployment-syncs=20", "--concurrent-replicaset-syncs=20",
		"--concurrent-gc-syncs=50",
		"--v=1",
	)
	add("kwok",
		"--kubeconfig="+kc("kwok"),
		"--config="+filepath.Join(dir, "kwok.yaml"),
		"--manage-all-nodes=false",
		"--manage-nodes-with-label-selector="+kwokNodeLabel+"="+kwokNodeValue,
		"--cidr=10.64.0.1/10",
		"--node-ip=10.63.255.254",
		"--server-address=127.0.0.1:"+strconv.Itoa(c.ports.kwok),
	)
}

func (c *Cluster) startProcess(name string) error {
	if name == "kwok" {
		if err := os.WriteFile(filepath.Join(c.opts.Dir, "kwok.yaml"), kwokConfig, 0o644); err != nil {
			return fmt.Errorf("devcluster: writing kwok config: %w", err)
		}
	}
	c.log.Info("starting", zap.String("component", name))
	return c.procs[name].start()
}

// writeKubeconfigs writes one kubeconfig per identity; the admin one is the cluster's.
func (c *Cluster) writeKubeconfigs() error {
	server := c.APIServerURL()
	for _, id := range identities {
		cert := c.pki.clientCerts[id.name]
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["devcluster"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: c.pki.caCert}
		cfg.AuthInfos[id.name] = &clientcmdapi.AuthInfo{ClientCertificate: cert[0], ClientKey: cert[1]}
		cfg.Contexts["devcluster"] = &clientcmdapi.Context{Cluster: "devcluster", AuthInfo: id.name, Namespace: "default"}
		cfg.CurrentContext = "devcluster"
		path := filepath.Join(c.opts.Dir, id.name+".kubeconfig")
		if err := clientcmd.WriteToFile(*cfg, path); err != nil {
			return fmt.Errorf("devcluster: writing %s kubeconfig: %w", id.name, err)
		}
		if id.name == "admin" {
			c.kubeconfig = path
		}
	}
	return nil
}

func (c *Cluster) createNodes(ctx context.Context) error {
	for _, n := range c.opts.Nodes.Nodes() {
		if err := RegisterNode(ctx, c.client, n); err != nil {
			return fmt.Errorf("devcluster: %w", err)
		}
	}
	return nil
}

// RegisterNode creates a node and sets its capacity, as a kubelet does on
// registration; an existing node keeps its object and gets the capacity.
func RegisterNode(ctx context.Context, client kubernetes.Interface, n *corev1.Node) error {
	status := n.Status
	if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating node %s: %w", n.Name, err)
	}
	// kwok writes the node's status as soon as it sees it: retry on conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Capacity, cur.Status.Allocatable = status.Capacity, status.Allocatable
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("setting capacity of node %s: %w", n.Name, err)
	}
	return nil
}

// RegisterNodes registers nodes (RegisterNode, eight at a time) and waits up
// to timeout until every one of them is Ready, that is until kwok has taken
// it on. Create pods on a kwok node only after that: until kwok holds the
// node's lease it skips the node's pod events, then catches up with a LIST,
// and plays the stages of the pods created meanwhile twice (the second time
// from a stale copy, with a second pod IP the API server refuses).
func RegisterNodes(ctx context.Context, client kubernetes.Interface, nodes []*corev1.Node, timeout time.Duration) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, n := range nodes {
		g.Go(func() error { return RegisterNode(gctx, client, n) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return waitNamedNodesReady(ctx, client, nodes, timeout)
}

// waitNamedNodesReady waits up to timeout until every one of nodes is Ready.
func waitNamedNodesReady(ctx context.Context, client kubernetes.Interface, nodes []*corev1.Node, timeout time.Duration) error {
	want := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		want[n.Name] = true
	}
	ready := 0
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if ready, err = readyNodes(ctx, client, func(name string) bool { return want[name] }); err != nil {
			return false, nil
		}
		return ready == len(want), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d nodes to be Ready (%d are): %w", len(want), ready, err)
	}
	return nil
}

// readyNodes counts the Ready nodes among those counted accepts by name
// (nil: all), from the API server's cache.
func readyNodes(ctx context.Context, client kubernetes.Interface, counted func(string) bool) (int, error) {
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return 0, fmt.Errorf("listing nodes: %w", err)
	}
	ready := 0
	for i := range list.Items {
		if (counted == nil || counted(list.Items[i].Name)) && NodeReady(&list.Items[i]) {
			ready++
		}
	}
	return ready, nil
}

// startAgents starts the local-runtime node and, with localRuntimeGPUs, the
// GPU one beside it.
func (c *Cluster) startAgents() error {
	taint := corev1.Taint{Key: LocalRuntimeTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}
	if err := c.startAgent("runtime", localnode.Options{
		NodeName:     LocalRuntimeNode,
		NodeLabels:   map[string]string{LabelLocalRuntime: "true"},
		Taints:       []corev1.Taint{taint},
		StateDir:     filepath.Join(c.opts.Dir, "pods"),
		AddressBlock: 1,
	}); err != nil {
		return err
	}
	n := c.opts.Nodes.LocalRuntimeGPUs
	if n == 0 {
		return nil
	}
	class := c.opts.Nodes.LocalRuntimeGPUClass
	return c.startAgent("runtime-gpu", localnode.Options{
		NodeName:     LocalRuntimeGPUNode,
		NodeLabels:   map[string]string{LabelLocalRuntime: "true", LabelGPUClass: class},
		Extra:        corev1.ResourceList{ResourceGPU: *resource.NewQuantity(int64(n), resource.DecimalSI)},
		Taints:       append([]corev1.Taint{taint}, c.opts.Nodes.reservationTaints(class)...),
		StateDir:     filepath.Join(c.opts.Dir, "pods-gpu"),
		AddressBlock: 2,
	})
}

// startAgent runs one local-runtime node under the client identity id
// (its kubeconfig is <id>.kubeconfig), logging to logs/<node>.log.
func (c *Cluster) startAgent(id string, opts localnode.Options) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(c.opts.Dir, id+".kubeconfig"))
	if err != nil {
		return fmt.Errorf("devcluster: %s kubeconfig: %w", id, err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("devcluster: %s client: %w", id, err)
	}
	// The agent logs to its own file beside the other components' logs.
	logCfg := zap.NewProductionConfig()
	logCfg.OutputPaths = []string{filepath.Join(c.opts.Dir, "logs", opts.NodeName+".log")}
	logCfg.ErrorOutputPaths = logCfg.OutputPaths
	logCfg.Sampling = nil
	runtimeLog, err := logCfg.Build()
	if err != nil {
		return fmt.Errorf("devcluster: %s log: %w", opts.NodeName, err)
	}
	opts.Logger = runtimeLog
	agent, err := localnode.New(client, opts)
	if err != nil {
		return fmt.Errorf("devcluster: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	running := runningAgent{stop: cancel, done: make(chan struct{})}
	c.agents = append(c.agents, running)
	go func() {
		defer close(running.done)
		defer func() { _ = runtimeLog.Sync() }()
		if err := agent.Run(ctx); err != nil && ctx.Err() == nil {
			c.log.Error("local runtime stopped", zap.String("node", opts.NodeName), zap.Error(err))
		}
	}()
	return nil
}

func (c *Cluster) waitTCP(ctx context.Context, name string, port int) error {
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		if done, perr := c.procs[name].exited(); done {
			return false, fmt.Errorf("%s exited: %v\n%s", name, perr, c.procs[name].tail())
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("devcluster: waiting for %s: %w", name, err)
	}
	return nil
}

func (c *Cluster) waitAPIServer(ctx context.Context) error {
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if done, perr := c.procs["kube-apiserver"].exited(); done {
			return false, fmt.Errorf("kube-apiserver exited: %v\n%s", perr, c.procs["kube-apiserver"].tail())
		}
		body, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && strings.TrimSpace(string(body)) == "ok", nil
	})
	if err != nil {
		return fmt.Errorf("devcluster: waiting for kube-apiserver /readyz: %w", err)
	}
	return nil
}

func (c *Cluster) waitNodesReady(ctx context.Context) error {
	want := len(c.opts.Nodes.Nodes()) + len(c.agents)
	var ready int
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, name := range []string{"kube-scheduler", "kube-controller-manager", "kwok"} {
			if done, perr := c.procs[name].exited(); done {
				return false, fmt.Errorf("%s exited: %v\n%s", name, perr, c.procs[name].tail())
			}
		}
		var err error
		if ready, err = readyNodes(ctx, c.client, nil); err != nil {
			return false, nil
		}
		return ready >= want, nil
	})
	if err != nil {
		return fmt.Errorf("devcluster: waiting for %d nodes to be Ready (%d are): %w", want, ready, err)
	}
	return nil
}

// waitDefaultServiceAccount waits for the controller-manager to create the
// default service account, without which no pod can be created.
func (c *Cluster) waitDefaultServiceAccount(ctx context.Context) error {
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := c.client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("devcluster: waiting for the default service account: %w", err)
	}
	return nil
}

// NodeReady reports whether the node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

func freePorts() (ports, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	// Each stays open until all are chosen, so no two are the same.
	next := func() (int, error) {
		l, err := listenFree()
		if err != nil {
			return 0, err
		}
		ls = append(ls, l)
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	var p ports
	for _, dst := range []*int{&p.etcdClient, &p.etcdPeer, &p.apiserver, &p.scheduler, &p.controllerManager, &p.kwok} {
		port, err := next()
		if err != nil {
			return p, err
		}
		*dst = port
	}
	return p, nil
}
