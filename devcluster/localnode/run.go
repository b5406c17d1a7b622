package localnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

// podRun is one pod's set of processes and the status they imply.
type podRun struct {
	a   *Agent
	pod *corev1.Pod // as it was when started; spec does not change
	uid types.UID
	ip  string
	dir string

	mu         sync.Mutex
	stopping   bool
	terminal   bool // someone else made the pod terminal: write no more status
	started    metav1.Time
	containers []*containerRun
	initFailed *corev1.ContainerStateTerminated

	dirty   chan struct{}
	stopCh  chan struct{}
	done    chan struct{}
	stopped sync.Once
}

type containerRun struct {
	spec     corev1.Container
	cmd      *exec.Cmd
	exited   chan struct{}
	state    corev1.ContainerState
	last     corev1.ContainerState
	restarts int32
	ready    bool
}

func (a *Agent) startPod(ctx context.Context, key string, pod *corev1.Pod) error {
	ip, err := a.ips.allocate()
	if err != nil {
		return err
	}
	dir, err := a.podDir(pod)
	if err != nil {
		a.ips.release(ip)
		return err
	}
	run := &podRun{
		a: a, pod: pod.DeepCopy(), uid: pod.UID, ip: ip, dir: dir,
		started: metav1.Now(),
		dirty:   make(chan struct{}, 1),
		stopCh:  make(chan struct{}),
		done:    make(chan struct{}),
	}
	for _, c := range pod.Spec.Containers {
		run.containers = append(run.containers, &containerRun{
			spec:  c,
			state: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}},
		})
	}
	a.mu.Lock()
	a.runs[key] = run
	a.mu.Unlock()
	bg := context.WithoutCancel(ctx)
	go run.writeStatusLoop(bg)
	go run.supervise(bg)
	return nil
}

func (r *podRun) log() *zap.Logger {
	return r.a.log.With(zap.String("pod", r.pod.Name), zap.String("namespace", r.pod.Namespace), zap.String("ip", r.ip))
}

func (r *podRun) containerNames() string {
	names := make([]string, 0, len(r.containers))
	for _, c := range r.containers {
		names = append(names, c.spec.Name)
	}
	return strings.Join(names, ",")
}

// beginStop reports whether the caller is the one to stop the pod.
func (r *podRun) beginStop() bool {
	first := false
	r.stopped.Do(func() {
		first = true
		r.mu.Lock()
		r.stopping = true
		r.mu.Unlock()
	})
	return first
}

func (r *podRun) markTerminal() {
	r.mu.Lock()
	r.terminal = true
	r.mu.Unlock()
}

// stop signals every process, SIGKILLs what is left after grace, and waits
// for the supervisor to finish.
func (r *podRun) stop(grace time.Duration) {
	close(r.stopCh)
	r.mu.Lock()
	var running []*containerRun
	for _, c := range r.containers {
		if c.cmd != nil && c.cmd.Process != nil && c.state.Running != nil {
			running = append(running, c)
		}
	}
	r.mu.Unlock()
	for _, c := range running {
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
	}
	deadline := time.After(grace)
	for _, c := range running {
		select {
		case <-c.exited:
		case <-deadline:
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.exited
		}
	}
	<-r.done
}

func (r *podRun) wait() { <-r.done }

func (r *podRun) isStopping() bool {
	select {
	case <-r.stopCh:
		return true
	default:
		return false
	}
}

// supervise runs init containers, then the containers, restarting them as
// the pod's restartPolicy says, until the pod ends or is stopped.
func (r *podRun) supervise(ctx context.Context) {
	defer close(r.done)
	for _, ic := range r.pod.Spec.InitContainers {
		term, err := r.runToCompletion(ic)
		if err != nil || term.ExitCode != 0 {
			if term == nil {
				term = &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError", Message: errString(err)}
			}
			r.mu.Lock()
			r.initFailed = term
			r.mu.Unlock()
			r.markDirty()
			return
		}
		if r.isStopping() {
			return
		}
	}
	exits := make(chan *containerRun, len(r.containers))
	for _, c := range r.containers {
		r.startContainer(c, exits)
	}
	r.markDirty()
	live := len(r.containers)
	for live > 0 {
		select {
		case <-r.stopCh:
			for live > 0 {
				<-exits
				live--
			}
			return
		case c := <-exits:
			if r.isStopping() {
				live--
				continue
			}
			r.mu.Lock()
			code := c.state.Terminated.ExitCode
			restart := r.pod.Spec.RestartPolicy == corev1.RestartPolicyAlways ||
				(r.pod.Spec.RestartPolicy == corev1.RestartPolicyOnFailure && code != 0)
			r.mu.Unlock()
			r.markDirty()
			if !restart {
				live--
				continue
			}
			backoff := time.Duration(1<<min(c.restarts, 4)) * time.Second
			r.mu.Lock()
			c.last = c.state
			c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
				Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", backoff, c.spec.Name, r.pod.Name)}}
			c.restarts++
			r.mu.Unlock()
			r.markDirty()
			select {
			case <-time.After(backoff):
				r.startContainer(c, exits)
				r.markDirty()
			case <-r.stopCh:
				live--
			}
		}
	}
	_ = ctx
}

// startContainer starts one container's process; its exit is sent on exits.
func (r *podRun) startContainer(c *containerRun, exits chan<- *containerRun) {
	cmd, logFile, err := r.command(c.spec)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		c.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 128, Reason: "StartError", Message: err.Error(), FinishedAt: metav1.Now()}}
		r.log().Warn("container did not start", zap.String("container", c.spec.Name), zap.Error(err))
		go func() { exits <- c }()
		return
	}
	c.cmd, c.exited, c.ready = cmd, make(chan struct{}), c.spec.ReadinessProbe == nil
	c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
	r.a.recordf(r.pod, corev1.EventTypeNormal, "Started", "Started container %s", c.spec.Name)
	r.log().Info("container started", zap.String("container", c.spec.Name), zap.Int("pid", cmd.Process.Pid))
	started := c.state.Running.StartedAt
	go func() {
		err := cmd.Wait()
		logFile.Close()
		code, reason := exitOf(cmd, err)
		r.mu.Lock()
		c.ready = false
		c.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: code, Reason: reason, StartedAt: started, FinishedAt: metav1.Now(),
			ContainerID: c.containerID()}}
		r.mu.Unlock()
		r.log().Info("container exited", zap.String("container", c.spec.Name), zap.Int32("exit_code", code), zap.String("reason", reason))
		close(c.exited)
		exits <- c
	}()
	if c.spec.ReadinessProbe != nil {
		go r.probe(c, c.exited)
	}
}

func (c *containerRun) containerID() string {
	if c.cmd == nil || c.cmd.Process == nil {
		return ""
	}
	return "local-process://" + strconv.Itoa(c.cmd.Process.Pid)
}

func (r *podRun) runToCompletion(spec corev1.Container) (*corev1.ContainerStateTerminated, error) {
	cmd, logFile, err := r.command(spec)
	if err != nil {
		return nil, err
	}
	start := metav1.Now()
	err = cmd.Wait()
	logFile.Close()
	code, reason := exitOf(cmd, err)
	return &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, StartedAt: start, FinishedAt: metav1.Now()}, nil
}

// exitOf maps a process exit to a container's exit code and reason as a
// container runtime reports them (a signal is 128+n).
func exitOf(cmd *exec.Cmd, err error) (int32, string) {
	if err == nil {
		return 0, "Completed"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return int32(128 + int(ws.Signal())), "Error"
		}
		return int32(ee.ExitCode()), "Error"
	}
	return 128, "Error"
}

// command builds and starts the process for a container: command+args as a
// container runtime would run them with no image entrypoint, the pod's env,
// HOME in the pod's folder, output to <container>.log.
func (r *podRun) command(spec corev1.Container) (*exec.Cmd, io.Closer, error) {
	argv := append(append([]string(nil), spec.Command...), spec.Args...)
	if len(argv) == 0 {
		return nil, nil, fmt.Errorf("container %s has neither command nor args; the local runtime has no image entrypoint to fall back on", spec.Name)
	}
	env, err := r.env(spec)
	if err != nil {
		return nil, nil, err
	}
	lookup := envLookup(env)
	for i := range argv {
		argv[i] = r.bindAddress(expandVars(argv[i], lookup))
	}
	path, err := lookPath(argv[0], lookup("PATH"))
	if err != nil {
		return nil, nil, fmt.Errorf("container %s: %w", spec.Name, err)
	}
	logFile, err := os.OpenFile(filepath.Join(r.dir, spec.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("opening log: %w", err)
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = env
	cmd.Dir = filepath.Join(r.dir, "home")
	if spec.WorkingDir != "" {
		if st, err := os.Stat(spec.WorkingDir); err == nil && st.IsDir() {
			cmd.Dir = spec.WorkingDir
		}
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, nil, fmt.Errorf("starting container %s: %w", spec.Name, err)
	}
	return cmd, logFile, nil
}

func lookPath(file, pathEnv string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		p := filepath.Join(dir, file)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable %q not found in PATH", file)
}

// bindAddress stands the pod IP in for the wildcard address: in a real pod,
// 0.0.0.0 means the pod's own network namespace, whose address is the pod IP.
func (r *podRun) bindAddress(s string) string {
	return strings.ReplaceAll(s, "0.0.0.0", r.ip)
}

// probe runs the container's readiness probe (httpGet or tcpSocket) against the pod IP.
func (r *podRun) probe(c *containerRun, exited <-chan struct{}) {
	p := c.spec.ReadinessProbe
	period := time.Duration(max(p.PeriodSeconds, 1)) * time.Second
	select {
	case <-time.After(time.Duration(p.InitialDelaySeconds) * time.Second):
	case <-exited:
		return
	}
	client := &http.Client{Timeout: time.Duration(max(p.TimeoutSeconds, 1)) * time.Second}
	for {
		ok := false
		switch {
		case p.HTTPGet != nil:
			port := r.resolvePort(c.spec, p.HTTPGet.Port.String())
			resp, err := client.Get(fmt.Sprintf("http://%s/%s", net.JoinHostPort(r.ip, port), strings.TrimPrefix(p.HTTPGet.Path, "/")))
			if err == nil {
				resp.Body.Close()
				ok = resp.StatusCode >= 200 && resp.StatusCode < 400
			}
		case p.TCPSocket != nil:
			port := r.resolvePort(c.spec, p.TCPSocket.Port.String())
			conn, err := net.DialTimeout("tcp", net.JoinHostPort(r.ip, port), client.Timeout)
			if err == nil {
				conn.Close()
				ok = true
			}
		default:
			ok = true
		}
		r.mu.Lock()
		changed := c.ready != ok && c.state.Running != nil
		if changed {
			c.ready = ok
		}
		r.mu.Unlock()
		if changed {
			r.markDirty()
		}
		select {
		case <-time.After(period):
		case <-exited:
			return
		}
	}
}

func (r *podRun) resolvePort(spec corev1.Container, port string) string {
	for _, p := range spec.Ports {
		if p.Name == port {
			return strconv.Itoa(int(p.ContainerPort))
		}
	}
	return port
}

func (r *podRun) markDirty() {
	select {
	case r.dirty <- struct{}{}:
	default:
	}
}

// writeStatusLoop writes the pod's status whenever it changed, one write at a
// time, until the pod's processes are done.
func (r *podRun) writeStatusLoop(ctx context.Context) {
	for {
		select {
		case <-r.dirty:
			r.writeStatus(ctx)
		case <-r.done:
			select {
			case <-r.dirty:
				r.writeStatus(ctx)
			default:
			}
			return
		}
	}
}

func (r *podRun) writeStatus(ctx context.Context) {
	r.mu.Lock()
	if r.stopping || r.terminal {
		r.mu.Unlock()
		return
	}
	status := r.statusLocked()
	r.mu.Unlock()
	pods := r.a.client.CoreV1().Pods(r.pod.Namespace)
	// Retry every failure but NotFound: right after binding, the node
	// authorizer may not yet know the pod belongs to this node (403).
	backoff := wait.Backoff{Steps: 12, Duration: 50 * time.Millisecond, Factor: 2, Cap: 5 * time.Second}
	err := retry.OnError(backoff, func(err error) bool { return !apierrors.IsNotFound(err) }, func() error {
		cur, err := pods.Get(ctx, r.pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != r.uid || cur.DeletionTimestamp != nil ||
			cur.Status.Phase == corev1.PodFailed || cur.Status.Phase == corev1.PodSucceeded {
			return nil // no longer ours to report on
		}
		cur.Status = mergeConditions(cur.Status, status)
		_, err = pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		r.log().Warn("status update failed", zap.Error(err))
	}
}

// statusLocked derives the pod status from the processes, as the kubelet's
// status manager does.
func (r *podRun) statusLocked() corev1.PodStatus {
	now := metav1.Now()
	st := corev1.PodStatus{
		HostIP:    "127.0.0.1",
		HostIPs:   []corev1.HostIP{{IP: "127.0.0.1"}},
		PodIP:     r.ip,
		PodIPs:    []corev1.PodIP{{IP: r.ip}},
		StartTime: &r.started,
		QOSClass:  qosClass(r.pod),
	}
	allReady, allDone, anyFailed := true, true, false
	for _, c := range r.containers {
		cs := corev1.ContainerStatus{
			Name: c.spec.Name, Image: c.spec.Image, ImageID: "local://" + c.spec.Image,
			State: c.state, LastTerminationState: c.last, RestartCount: c.restarts,
			Ready: c.ready && c.state.Running != nil, Started: ptrBool(c.state.Running != nil),
			ContainerID: c.containerID(),
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
		if !cs.Ready {
			allReady = false
		}
		if c.state.Terminated == nil {
			allDone = false
		} else if c.state.Terminated.ExitCode != 0 {
			anyFailed = true
		}
	}
	restartable := r.pod.Spec.RestartPolicy == corev1.RestartPolicyAlways
	switch {
	case r.initFailed != nil && r.pod.Spec.RestartPolicy == corev1.RestartPolicyNever:
		st.Phase = corev1.PodFailed
	case r.initFailed != nil:
		st.Phase = corev1.PodPending
	case allDone && !restartable && anyFailed && r.pod.Spec.RestartPolicy == corev1.RestartPolicyNever:
		st.Phase = corev1.PodFailed
	case allDone && !restartable && !anyFailed:
		st.Phase = corev1.PodSucceeded
	default:
		st.Phase = corev1.PodRunning
	}
	initialized := r.initFailed == nil
	cond := func(t corev1.PodConditionType, ok bool) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s = corev1.ConditionTrue
		}
		return corev1.PodCondition{Type: t, Status: s, LastTransitionTime: now}
	}
	st.Conditions = []corev1.PodCondition{
		cond(corev1.PodInitialized, initialized),
		cond(corev1.ContainersReady, allReady && initialized),
		cond(corev1.PodReady, allReady && initialized),
	}
	return st
}

// mergeConditions keeps the transition times of conditions that did not
// change, and the PodScheduled condition the scheduler wrote.
func mergeConditions(cur, next corev1.PodStatus) corev1.PodStatus {
	old := map[corev1.PodConditionType]corev1.PodCondition{}
	for _, c := range cur.Conditions {
		old[c.Type] = c
	}
	for i, c := range next.Conditions {
		if o, ok := old[c.Type]; ok && o.Status == c.Status {
			next.Conditions[i].LastTransitionTime = o.LastTransitionTime
		}
		delete(old, c.Type)
	}
	for _, c := range cur.Conditions {
		if _, left := old[c.Type]; left {
			next.Conditions = append(next.Conditions, c)
		}
	}
	return next
}

func qosClass(pod *corev1.Pod) corev1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	return corev1.PodQOSBestEffort
}

func ptrBool(b bool) *bool { return &b }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
