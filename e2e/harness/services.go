package harness

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dsmlp/spawner/devcluster"
	"github.com/dsmlp/spawner/hubapi"
)

// FreePort returns a loopback port that was free a moment ago, outside the
// range the kernel gives outgoing connections (see devcluster.FreePort).
func FreePort(t testing.TB) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		port, err := devcluster.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port
		}
	}
	t.Fatal("no free port that was not handed out before")
	return 0
}

// handedOut are the ports FreePort returned in this test binary. A port is
// free only until its user binds it; in that window (a hub starting takes
// seconds) a second random pick could return it again, and one of the two
// then fails to bind (seen: a hub's "Address already in use").
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// BuildBinary builds a command of this module (e.g. "./cmd/spawnerd") into dir.
func BuildBinary(repo, pkg, dir string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = repo
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

// Process is a service a test started; Stop ends it (and its children).
type Process struct {
	Name string
	cmd  *exec.Cmd
	log  *LogBuffer
	done chan struct{}
	once sync.Once
}

// LogBuffer collects a process's output; safe for concurrent writes and reads.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *LogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *LogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// StartProcess runs a command with env added to this process's environment;
// its output is kept for Log and shown when the test fails.
func StartProcess(t testing.TB, name string, env []string, path string, args ...string) *Process {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	p := &Process{Name: name, cmd: cmd, log: &LogBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() || os.Getenv("E2E_VERBOSE") != "" {
			t.Logf("--- output of %s ---\n%s", name, p.Log())
		}
	})
	return p
}

// Log is what the process printed so far.
func (p *Process) Log() string { return p.log.String() }

// WaitForLogLine waits up to timeout for a line of the process's output that
// holds every one of parts, and returns it. A process's output reaches the
// test through a pipe, so a line it wrote before answering a request may
// arrive a moment after the answer.
func (p *Process) WaitForLogLine(timeout time.Duration, parts ...string) (string, bool) {
	deadline := time.Now().Add(timeout)
	for {
		for _, line := range strings.Split(p.Log(), "\n") {
			all := true
			for _, part := range parts {
				all = all && strings.Contains(line, part)
			}
			if all {
				return line, true
			}
		}
		if time.Now().After(deadline) {
			return "", false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop sends SIGTERM to the process group and SIGKILL after 10 s.
func (p *Process) Stop() {
	p.once.Do(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
}

// Kill sends SIGKILL to the process group at once, as a crash or an OOM
// kill would: the process cleans nothing up (a Lease it holds expires).
func (p *Process) Kill() {
	p.once.Do(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	})
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// WaitHTTP waits until url answers with a status below 500.
func WaitHTTP(t testing.TB, url string, p *Process) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, Timeout, true, func(ctx context.Context) (bool, error) {
		if p != nil && p.Exited() {
			return false, fmt.Errorf("%s exited:\n%s", p.Name, p.Log())
		}
		resp, err := http.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode < 500, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", url, err)
	}
}

// Proxy is a real configurable-http-proxy (Debian's node-configurable-http-proxy).
type Proxy struct {
	*Process
	PublicURL, APIURL, Token string
}

// StartProxy starts configurable-http-proxy on free loopback ports.
func StartProxy(t testing.TB) *Proxy {
	t.Helper()
	bin, err := exec.LookPath("configurable-http-proxy")
	if err != nil {
		t.Fatalf("configurable-http-proxy not installed (make deps): %v", err)
	}
	port, apiPort := FreePort(t), FreePort(t)
	token := "proxy-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	p := StartProcess(t, "configurable-http-proxy",
		[]string{"CONFIGPROXY_AUTH_TOKEN=" + token, "NODE_PATH=/usr/share/nodejs"},
		bin, "--ip", "127.0.0.1", "--port", strconv.Itoa(port), "--api-ip", "127.0.0.1", "--api-port", strconv.Itoa(apiPort))
	px := &Proxy{Process: p, PublicURL: fmt.Sprintf("http://127.0.0.1:%d", port), APIURL: fmt.Sprintf("http://127.0.0.1:%d", apiPort), Token: token}
	WaitHTTP(t, px.APIURL+"/api/routes", p)
	return px
}

// Token signs a hub token for user, as the hub-side spawner class does.
func Token(t testing.TB, secret []byte, user string, admin bool) string {
	t.Helper()
	tok, err := hubapi.Sign(secret, user, admin, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// BuildSpawnerd is a setup step for Main: it builds cmd/spawnerd into a
// temporary folder and stores the binary's path in *bin.
func BuildSpawnerd(bin *string) func(*Env) error {
	return func(e *Env) error {
		dir, err := os.MkdirTemp("", "spawnerd-bin-")
		if err != nil {
			return err
		}
		*bin, err = BuildBinary(e.RepoDir, "./cmd/spawnerd", dir)
		return err
	}
}
