package bench_test

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// stackCPU attributes CPU time to a console's whole stack: the dev
// cluster and spawnerd (cpuMeter), configurable-http-proxy and JupyterHub
// (this process's node and python descendants) and, for a PostgreSQL
// history, that server: its postmaster and every backend, also those that
// ended between two samples (the postmaster's reaped children's time).
type stackCPU struct {
	*cpuMeter
	postmaster int // 0: no PostgreSQL
}

// stackSample is a cpuSample with the PostgreSQL server's CPU time.
type stackSample struct {
	cpuSample
	postgres time.Duration
}

func newStackCPU(dsn string) *stackCPU {
	m := &stackCPU{cpuMeter: newCPUMeter(env.BinDir, filepath.Dir(bin))}
	self := os.Getpid()
	port := ""
	if u, err := url.Parse(dsn); err == nil && strings.HasPrefix(dsn, "postgres") {
		port = u.Port()
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		switch name := filepath.Base(exe); {
		case strings.HasPrefix(name, "node") && descends(pid, self):
			m.pids["configurable-http-proxy"] = append(m.pids["configurable-http-proxy"], pid)
		case strings.HasPrefix(name, "python3") && descends(pid, self):
			m.pids["jupyterhub"] = append(m.pids["jupyterhub"], pid)
		case name == "postgres" && port != "":
			// The postmaster's command line names its port (hack/postgres.sh).
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if bytes.Contains(cmdline, []byte("\x00-p\x00"+port+"\x00")) {
				m.postmaster = pid
			}
		}
	}
	m.names = m.names[:0]
	for name := range m.pids {
		m.names = append(m.names, name)
	}
	slices.Sort(m.names)
	return m
}

func (m *stackCPU) sample() stackSample {
	s := stackSample{cpuSample: m.cpuMeter.sample()}
	if m.postmaster == 0 {
		return s
	}
	// utime, stime, cutime, cstime of the postmaster (fields 14 to 17),
	// and the time of its children alive now.
	if f := statFields(m.postmaster); len(f) >= 15 {
		for _, v := range f[11:15] {
			n, _ := strconv.ParseInt(v, 10, 64)
			s.postgres += time.Duration(n) * time.Second / userHZ
		}
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && parentOf(pid) == m.postmaster {
			s.postgres += processCPU(pid)
		}
	}
	return s
}

// report is cpuMeter.report with PostgreSQL as one more process of the
// stack, and the rest of the machine's busy time as other work.
func (m *stackCPU) report(title string, from, to stackSample) string {
	wall := to.at.Sub(from.at)
	capacity := time.Duration(float64(wall) * float64(numCPU()))
	pct := func(d time.Duration) string {
		if capacity <= 0 {
			return "-"
		}
		return strconv.FormatFloat(100*float64(d)/float64(capacity), 'f', 0, 64) + " %"
	}
	rows := [][]string{{"process", "CPU time", fmt.Sprintf("share of %d CPUs × %s", numCPU(), secs(wall))}}
	var ours time.Duration
	add := func(name string, d time.Duration) {
		ours += d
		rows = append(rows, []string{name, secs(d), pct(d)})
	}
	for _, name := range m.names {
		add(name, to.procs[name]-from.procs[name])
	}
	if m.postmaster != 0 {
		add("postgres", to.postgres-from.postgres)
	}
	other := max(to.busy-from.busy-ours, 0)
	rows = append(rows,
		[]string{"other processes (not this stack)", secs(other), pct(other)},
		[]string{"idle", secs(max(capacity-ours-other, 0)), pct(max(capacity-ours-other, 0))})
	out := table(title, rows)
	if capacity > 0 && float64(other) > disturbed*float64(capacity) {
		out += fmt.Sprintf("DISTURBED: other processes took %s of the CPUs; these numbers are not comparable\n", pct(other))
	}
	return out
}
