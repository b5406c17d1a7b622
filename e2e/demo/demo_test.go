// Package demo_test runs the demo the way a newcomer does: `make demo` with
// the repository's own deploy/demo files, every profile started by clicking
// through the hub's pages in headless Chromium, the notebook reached through
// the proxy, then Ctrl-C, after which nothing of the demo may be left running.
package demo_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/dsmlp/spawner/e2e/harness"
)

// demo is one run of `make demo`.
type demo struct {
	cmd   *exec.Cmd
	dir   string
	ports map[string]int
	out   *harness.LogBuffer
	done  chan struct{}
}

func TestDemoEveryProfileThroughTheBrowserThenCtrlC(t *testing.T) {
	if _, err := os.Stat(harness.Chromium); err != nil {
		t.Fatalf("%s is missing (make deps installs it): %v", harness.Chromium, err)
	}
	d := startDemo(t)
	d.waitFor(t, "demo: ready", 5*time.Minute)

	// The demo's own files name the profiles; each must reach a notebook.
	profiles := map[string]string{"alice": "cpu", "bob": "gpu"}
	var wg sync.WaitGroup
	errs := make(chan error, len(profiles))
	for user, profile := range profiles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.spawnInBrowser(t, user, profile); err != nil {
				errs <- fmt.Errorf("%s with profile %s: %w", user, profile, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		d.dumpLogs(t)
		t.FailNow()
	}
	// The hub agrees: both servers are ready, and on the node their profile asked for.
	servers := d.hubServers(t)
	for user := range profiles {
		if s, ok := servers[user]; !ok || !s.Ready {
			t.Errorf("hub: %s's server is not ready: %+v", user, servers[user])
		}
	}
	d.consoleFromServicesMenu(t, []string{"alice", "bob"})
	admin := d.run(t, filepath.Join(d.dir, "spawnerd-admin"), "servers")
	for user, node := range map[string]string{"alice": "local-runtime ", "bob": "local-runtime-gpu "} {
		if !logHas(admin, user, node) {
			t.Errorf("spawnerd-admin servers does not show %s on %s:\n%s", user, node, admin)
		}
	}
	d.runREADMEAdminExample(t)

	// Ctrl-C: SIGINT to the terminal's foreground process group, as a shell sends it.
	pids := d.processes(t)
	if len(pids) == 0 {
		t.Fatal("found none of the demo's processes before Ctrl-C: the check below would prove nothing")
	}
	began := time.Now()
	if err := syscall.Kill(-d.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(60 * time.Second):
		d.dumpLogs(t)
		t.Fatal("make demo still running 60 s after Ctrl-C")
	}
	t.Logf("Ctrl-C → make demo exited: %.1f s (%d processes were running)", time.Since(began).Seconds(), len(pids))

	// Order: the servers were stopped through the hub, while spawnerd still ran.
	out := d.out.String()
	for _, want := range []string{"stopping the hub's servers through the hub", "stopping alice's server", "stopping bob's server", "demo: stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if i, j := strings.Index(out, "stopping the hub's servers"), strings.Index(out, "demo: stopping spawnerd"); i < 0 || j < 0 || i > j {
		t.Errorf("spawnerd was stopped before the hub's servers")
	}
	hubLog := readFile(t, filepath.Join(d.dir, "jupyterhub.log"))
	for _, bad := range []string{"Failed to stop", "Connection refused", "cannot reach spawnerd"} {
		if strings.Contains(hubLog, bad) {
			t.Errorf("the hub log says %q: a stop went to a dead spawnerd", bad)
		}
	}
	spawnerdLog := readFile(t, filepath.Join(d.dir, "spawnerd.log"))
	for user := range profiles {
		if !logHas(spawnerdLog, `"user":"`+user+`"`, `"msg":"stop: pod`) {
			t.Errorf("spawnerd's log shows no stop of %s's server", user)
		}
	}

	// Nothing left: no process of the demo, no port of it listening.
	if left := d.processes(t); len(left) > 0 {
		t.Errorf("still running after Ctrl-C: %s", strings.Join(left, "; "))
	}
	for name, port := range d.ports {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
			c.Close()
			t.Errorf("%s port %d still accepts connections after Ctrl-C", name, port)
		}
	}
	if t.Failed() {
		d.dumpLogs(t)
	}
}

// startDemo runs `make demo` from the repository root in a process group of
// its own, as a terminal runs a foreground job, on free ports.
func startDemo(t *testing.T) *demo {
	t.Helper()
	repo, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	d := &demo{dir: t.TempDir(), ports: map[string]int{}, out: &harness.LogBuffer{}, done: make(chan struct{})}
	env := append(os.Environ(), "DEMO_DIR="+d.dir)
	for _, name := range []string{"HUB_PORT", "PROXY_PORT", "PROXY_API_PORT", "SPAWNERD_PORT"} {
		d.ports[name] = harness.FreePort(t)
		env = append(env, fmt.Sprintf("%s=%d", name, d.ports[name]))
	}
	d.cmd = exec.Command("make", "--no-print-directory", "demo")
	d.cmd.Dir, d.cmd.Env = repo, env
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		// A failed test still leaves nothing behind: the demo's own stop, then force.
		select {
		case <-d.done:
		default:
			_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGINT)
			select {
			case <-d.done:
			case <-time.After(60 * time.Second):
				_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
			}
		}
		for _, p := range d.processes(t) {
			var pid int
			if _, err := fmt.Sscan(p, &pid); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return d
}

// spawnInBrowser logs in as user, picks profile on the spawn page, presses
// Start, and waits on the progress page until the hub sends the browser to
// the notebook; then it asks the notebook's own API, through the proxy.
func (d *demo) spawnInBrowser(t *testing.T, user, profile string) error {
	b, err := harness.StartBrowser(filepath.Join(d.dir, "browser-"+user))
	if err != nil {
		return err
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(b.Ctx, 4*time.Minute)
	defer cancel()

	base := fmt.Sprintf("http://127.0.0.1:%d", d.ports["PROXY_PORT"])
	err = b.LogInToHub(ctx, base+"/hub/login", user, "any password")
	if err == nil {
		err = chromedp.Do(ctx,
			// The hub shows the options form built from spawnerd's profiles.
			chromedp.WaitVisible(chromedp.CSS("#spawn_form")),
			chromedp.Click(chromedp.CSS("#profile-item-"+profile)),
			chromedp.Submit(chromedp.CSS("#spawn_form")),
		)
	}
	if err == nil {
		// The progress page forwards to the notebook once the hub sees it
		// ready.
		err = b.Wait(ctx, fmt.Sprintf(`location.pathname.startsWith("/user/%s/") && document.readyState === "complete"`, user))
	}
	if err != nil {
		return fmt.Errorf("browser: %w\n%s", err, b.Explain("demo-failed-"+user+".png"))
	}
	status, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		fmt.Sprintf(`fetch("/user/%s/api/status").then(r => r.status + " " + r.statusText)`, user), chromedp.EvalAwaitPromise))
	if err != nil {
		return fmt.Errorf("asking the notebook's API from the page: %w", err)
	}
	shot, err := b.Shot("demo-notebook-" + user + ".png")
	if err != nil {
		t.Error(err)
	}
	t.Logf("%s (%s): notebook at %s; its /api/status through the proxy: %s; screenshot: %s", user, profile, b.Location(), status, shot)
	if !strings.HasPrefix(status, "200") {
		return fmt.Errorf("the notebook's /api/status through the proxy answered %q", status)
	}
	return nil
}

// consoleFromServicesMenu logs the admin in to the hub, opens spawnerd's
// console from the Services menu of the hub's home page, as an admin finds
// it, and checks that the console lists every user's server as running.
func (d *demo) consoleFromServicesMenu(t *testing.T, users []string) {
	t.Helper()
	b, err := harness.StartBrowser(filepath.Join(d.dir, "browser-admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(b.Ctx, 3*time.Minute)
	defer cancel()
	fail := func(what string, err error) {
		t.Helper()
		d.dumpLogs(t)
		t.Fatalf("the console from the hub's Services menu: %s: %v\n%s", what, err, b.Explain("demo-console-failed.png"))
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", d.ports["PROXY_PORT"])
	// The home page sends the browser to the login and back.
	if err := b.LogInToHub(ctx, base+"/hub/home", "admin", "any password"); err != nil {
		fail("logging in", err)
	}
	const toggle, item = `#thenavbar a.dropdown-toggle`, `#thenavbar a.dropdown-item[href="/services/spawnerd/"]`
	if err := b.Wait(ctx, `location.pathname === "/hub/home" && Array.from(document.querySelectorAll('`+toggle+`')).some(a => a.textContent.trim() === "Services")`); err != nil {
		fail("the hub's home page with its Services menu", err)
	}
	// The menu opens once the hub's scripts have loaded; a click before
	// that does nothing, so click until it is open.
	for {
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(toggle))); err != nil {
			fail("opening the Services menu", err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		err := b.Wait(wctx, `!!document.querySelector('`+item+`') && document.querySelector('`+item+`').offsetParent !== null`)
		wcancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			fail("the Services menu never showed spawnerd", err)
		}
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(item))); err != nil {
		fail("clicking spawnerd in the Services menu", err)
	}
	running := []string{}
	for _, u := range users {
		running = append(running, fmt.Sprintf(`(r => !!r && r.dataset.status === "running")(document.querySelector('#servers-body tr[data-user="%s"][data-server=""]'))`, u))
	}
	if err := b.Wait(ctx, `location.pathname === "/services/spawnerd/" && !!document.querySelector('#main[data-loaded] #servers') && `+
		`(document.querySelector('#whoami') || {dataset: {}}).dataset.user === "admin" && `+strings.Join(running, " && ")); err != nil {
		fail(fmt.Sprintf("the console listing %v running", users), err)
	}
	shot, err := b.Shot("demo-console.png")
	if err != nil {
		t.Error(err)
	}
	t.Logf("the admin's console, opened from the hub's Services menu, lists %v running; screenshot: %s", users, shot)
}

type hubServer struct {
	Ready   bool   `json:"ready"`
	Pending string `json:"pending"`
	URL     string `json:"url"`
}

// hubServers asks the hub's REST API, with the token the demo wrote, for
// every user's default server.
func (d *demo) hubServers(t *testing.T) map[string]hubServer {
	t.Helper()
	// The demo's admin service token: spawnerd's own hub-token may only stop servers.
	token := strings.TrimSpace(readFile(t, filepath.Join(d.dir, "hub-admin-token")))
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/hub/api/users", d.ports["HUB_PORT"]), nil)
	req.Header.Set("Authorization", "token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var users []struct {
		Name    string               `json:"name"`
		Servers map[string]hubServer `json:"servers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&users); err != nil {
		t.Fatalf("hub users: %v", err)
	}
	out := map[string]hubServer{}
	for _, u := range users {
		if s, ok := u.Servers[""]; ok {
			out[u.Name] = s
		}
	}
	return out
}

// processes lists the live processes that belong to this demo: any whose
// command line, working folder or environment names its state folder (the
// cluster, spawnerd, the hub, the notebooks) or whose command line names one
// of its ports (the proxy).
func (d *demo) processes(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self := fmt.Sprint(os.Getpid())
	var out []string
	for _, e := range entries {
		pid := e.Name()
		if pid == self || pid[0] < '0' || pid[0] > '9' {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue // gone, or a kernel thread
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat")); err == nil && strings.Contains(string(stat), ") Z ") {
			continue // a zombie holds nothing
		}
		cmd := strings.ReplaceAll(string(cmdline), "\x00", " ")
		cwd, _ := os.Readlink(filepath.Join("/proc", pid, "cwd"))
		environ, _ := os.ReadFile(filepath.Join("/proc", pid, "environ"))
		mine := strings.Contains(cmd, d.dir) || strings.HasPrefix(cwd, d.dir) || strings.Contains(string(environ), d.dir)
		for _, port := range d.ports {
			mine = mine || strings.Contains(cmd, fmt.Sprint(port))
		}
		if mine && !strings.Contains(cmd, "chromium") {
			out = append(out, pid+" "+cmd)
		}
	}
	return out
}

func (d *demo) run(t *testing.T, path string, args ...string) string {
	t.Helper()
	out, err := exec.Command(path, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", path, args, err, out)
	}
	return string(out)
}

// runREADMEAdminExample runs the README's admin commands for the demo, as
// written there, against this demo's folder and port.
func (d *demo) runREADMEAdminExample(t *testing.T) {
	t.Helper()
	repo, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme := readFile(t, filepath.Join(repo, "README.md"))
	i := strings.Index(readme, "**The demo's admin.**")
	if i < 0 {
		t.Fatal("README has no demo admin section")
	}
	block := readme[i:]
	start := strings.Index(block, "```sh\n")
	end := strings.Index(block[start+6:], "```")
	if start < 0 || end < 0 {
		t.Fatal("README's demo admin section has no sh block")
	}
	script := block[start+6 : start+6+end]
	if !strings.HasPrefix(script, "D=") {
		t.Fatalf("README's demo admin block no longer starts by naming the folder:\n%s", script)
	}
	script = script[strings.Index(script, "\n")+1:] // D comes from the test
	script = strings.ReplaceAll(script, "127.0.0.1:8090", fmt.Sprintf("127.0.0.1:%d", d.ports["SPAWNERD_PORT"]))
	cmd := exec.Command("bash", "-e", "-o", "pipefail", "-c", script)
	cmd.Env = append(os.Environ(), "D="+d.dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's demo admin commands failed: %v\n%s", err, out)
	}
	// servers alice describes one server (Status:, its Events:), classes and
	// bookings are tables, the curl call prints the API's JSON.
	for _, want := range []string{"alice", "\nStatus:", "\nEvents:", "a5000", "DEMO101", `"servers"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the README's demo admin commands printed no %q:\n%s", want, out)
		}
	}
}

// waitFor waits until the demo prints a line containing want.
func (d *demo) waitFor(t *testing.T, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for !strings.Contains(d.out.String(), want) {
		select {
		case <-d.done:
			d.dumpLogs(t)
			t.Fatalf("make demo exited before printing %q", want)
		case <-deadline:
			d.dumpLogs(t)
			t.Fatalf("make demo did not print %q in %s", want, timeout)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (d *demo) dumpLogs(t *testing.T) {
	t.Helper()
	t.Logf("--- make demo ---\n%s", d.out.String())
	for _, name := range []string{"spawnerd.log", "jupyterhub.log", "devcluster.log"} {
		data, _ := os.ReadFile(filepath.Join(d.dir, name))
		t.Logf("--- %s (last 60 lines) ---\n%s", name, tail(string(data), 60))
	}
}

// logHas reports whether one line of log holds every one of parts.
func logHas(log string, parts ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func tail(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
