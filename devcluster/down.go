package devcluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const pidFile = "devcluster.pids"

// writePIDs records the supervisor and every child so that Down can stop a
// cluster started by another process.
func (c *Cluster) writePIDs() error {
	var b strings.Builder
	fmt.Fprintf(&b, "supervisor %d\n", os.Getpid())
	for _, name := range c.order {
		if pid := c.procs[name].pid(); pid > 0 {
			fmt.Fprintf(&b, "%s %d\n", name, pid)
		}
	}
	if err := os.WriteFile(filepath.Join(c.opts.Dir, pidFile), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("devcluster: writing pid file: %w", err)
	}
	return nil
}

// Down stops the cluster whose state is in dir: it asks the supervising
// process to shut down, then kills whatever is left.
func Down(dir string, grace time.Duration) error {
	f, err := os.Open(filepath.Join(dir, pidFile))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("devcluster: no running cluster in %s", dir)
	}
	if err != nil {
		return fmt.Errorf("devcluster: %w", err)
	}
	type entry struct {
		name string
		pid  int
	}
	var entries []entry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			continue
		}
		pid, err := strconv.Atoi(fields[1])
		if err == nil && pid > 0 {
			entries = append(entries, entry{fields[0], pid})
		}
	}
	f.Close()
	alive := func(pid int) bool { return syscall.Kill(pid, 0) == nil }
	for _, e := range entries {
		if e.name == "supervisor" && alive(e.pid) && e.pid != os.Getpid() {
			_ = syscall.Kill(e.pid, syscall.SIGTERM)
			deadline := time.Now().Add(grace)
			for alive(e.pid) && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	for _, e := range entries {
		if e.name == "supervisor" {
			continue
		}
		if alive(e.pid) {
			_ = syscall.Kill(-e.pid, syscall.SIGTERM)
		}
	}
	time.Sleep(500 * time.Millisecond)
	for _, e := range entries {
		if alive(e.pid) {
			_ = syscall.Kill(-e.pid, syscall.SIGKILL)
			_ = syscall.Kill(e.pid, syscall.SIGKILL)
		}
	}
	_ = os.Remove(filepath.Join(dir, pidFile))
	return nil
}
