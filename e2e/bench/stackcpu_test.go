package bench_test

import (
	"bytes"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// stackMeter is newCPUMeter for the dev cluster and spawnerd, plus the
// rest of a console's stack: configurable-http-proxy and JupyterHub (this
// process's node and python descendants) and, for a PostgreSQL DSN, that
// server's processes (its postmaster, found by port, and its children).
func stackMeter(dsn string) *cpuMeter {
	m := newCPUMeter(env.BinDir, filepath.Dir(bin))
	self := os.Getpid()
	postmaster := 0
	port := ""
	if u, err := url.Parse(dsn); err == nil && strings.HasPrefix(dsn, "postgres") {
		port = u.Port()
	}
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	for _, pid := range pids {
		exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
		if err != nil {
			continue
		}
		name := filepath.Base(exe)
		switch {
		case strings.HasPrefix(name, "node") && descends(pid, self):
			m.pids["configurable-http-proxy"] = append(m.pids["configurable-http-proxy"], pid)
		case strings.HasPrefix(name, "python3") && descends(pid, self):
			m.pids["jupyterhub"] = append(m.pids["jupyterhub"], pid)
		case name == "postgres" && port != "":
			cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
			if bytes.Contains(cmdline, []byte("\x00-p\x00"+port+"\x00")) || bytes.Contains(cmdline, []byte("-p "+port+" ")) {
				postmaster = pid
			}
		}
	}
	if postmaster != 0 {
		m.pids["postgres"] = []int{postmaster}
		for _, pid := range pids {
			if parentOf(pid) == postmaster {
				m.pids["postgres"] = append(m.pids["postgres"], pid)
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
