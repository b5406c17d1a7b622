package bench_test

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// percentile returns the p-quantile (0 < p ≤ 1) of ds by the nearest-rank
// method; ds is sorted in place.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(p*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// since returns each end[i]-start[i]; a zero end is left out.
func since(start, end []time.Time) []time.Duration {
	out := make([]time.Duration, 0, len(end))
	for i, e := range end {
		if !e.IsZero() {
			out = append(out, e.Sub(start[i]))
		}
	}
	return out
}

// latest returns the latest of ts.
func latest(ts []time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + " s" }

func millis(d time.Duration) string { return strconv.FormatFloat(ms(d), 'f', 1, 64) + " ms" }

func micros(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64) + " µs"
}

// table renders rows as aligned columns under a title.
func table(title string, rows [][]string) string {
	var buf bytes.Buffer
	buf.WriteString("\n" + title + "\n")
	w := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	_ = w.Flush()
	return buf.String()
}

// userHZ is the unit of /proc CPU times (USER_HZ, 100 on every Linux ABI Go supports).
const userHZ = 100

// cpuMeter attributes the machine's CPU time during a phase to the
// processes under test, so that a number disturbed by other work on the
// machine can be told from one limited by the service.
type cpuMeter struct {
	pids  map[string][]int // component name → process ids
	names []string
}

// cpuSample is one reading of a cpuMeter.
type cpuSample struct {
	at    time.Time
	busy  time.Duration // all CPUs, not idle or waiting for I/O
	procs map[string]time.Duration
}

// newCPUMeter finds the processes started from binaries in binDirs (the
// dev cluster's and spawnerd's) and adds this process as "bench".
func newCPUMeter(binDirs ...string) *cpuMeter {
	m := &cpuMeter{pids: map[string][]int{"bench (clients)": {os.Getpid()}}}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		for _, d := range binDirs {
			if filepath.Dir(exe) == filepath.Clean(d) {
				name := filepath.Base(exe)
				m.pids[name] = append(m.pids[name], pid)
			}
		}
	}
	for name := range m.pids {
		m.names = append(m.names, name)
	}
	slices.Sort(m.names)
	return m
}

func (m *cpuMeter) sample() cpuSample {
	s := cpuSample{at: time.Now(), busy: machineBusy(), procs: map[string]time.Duration{}}
	for name, pids := range m.pids {
		for _, pid := range pids {
			s.procs[name] += processCPU(pid)
		}
	}
	return s
}

// report is a table of CPU use between two samples, with the part of the
// machine's busy time that no measured process accounts for.
func (m *cpuMeter) report(title string, from, to cpuSample) string {
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
	for _, name := range m.names {
		d := to.procs[name] - from.procs[name]
		ours += d
		rows = append(rows, []string{name, secs(d), pct(d)})
	}
	busy := to.busy - from.busy
	rows = append(rows,
		[]string{"other work on the machine", secs(max(busy-ours, 0)), pct(max(busy-ours, 0))},
		[]string{"idle", secs(max(capacity-busy, 0)), pct(max(capacity-busy, 0))})
	return table(title, rows)
}

// machineBusy reads the first line of /proc/stat: user, nice, system, idle,
// iowait, irq, softirq, steal; busy is all but idle and iowait.
func machineBusy() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	var ticks int64
	for i, v := range f[1:min(len(f), 9)] {
		if i == 3 || i == 4 {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ
}

// processCPU reads utime+stime of a process (fields 14 and 15 of
// /proc/PID/stat, counted after the parenthesised command name).
func processCPU(pid int) time.Duration {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * time.Second / userHZ
}

// numCPU counts the cpuN lines of /proc/stat: the CPUs the busy time is
// spread over, whatever this process's affinity.
func numCPU() int {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 1
	}
	n := 0
	for line := range strings.Lines(string(data)) {
		if len(line) > 3 && strings.HasPrefix(line, "cpu") && line[3] >= '0' && line[3] <= '9' {
			n++
		}
	}
	return max(n, 1)
}
