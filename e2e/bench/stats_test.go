package bench_test

import (
	"bytes"
	"context"
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

// benchProcess names this process in CPU tables.
const benchProcess = "bench (clients)"

// userHZ is the unit of /proc CPU times (USER_HZ, 100 on every Linux ABI Go supports).
const userHZ = 100

// cpuMeter attributes the machine's CPU time during a phase to the
// processes under test, so that a number disturbed by other work on the
// machine can be told from one limited by the service.
type cpuMeter struct {
	pids  map[string][]int // component name → process ids
	names []string
}

// spawnerdPID is the one spawnerd process the meter follows; the
// benchmarks that pin or renice it need exactly one.
func (m *cpuMeter) spawnerdPID() (int, error) {
	pids := m.pids["spawnerd"]
	if len(pids) != 1 {
		return 0, fmt.Errorf("want one spawnerd process, found %v", pids)
	}
	return pids[0], nil
}

// cpuSample is one reading of a cpuMeter.
type cpuSample struct {
	at    time.Time
	busy  time.Duration // all CPUs, not idle or waiting for I/O
	procs map[string]time.Duration
	// waits is, per component, how long its threads have been runnable
	// but waiting for a CPU: the cores' contention, not the work.
	waits map[string]time.Duration
}

// newCPUMeter finds this process's descendants started from binaries in
// binDirs (the dev cluster's and spawnerd's), and adds this process as
// "bench (clients)". Another dev cluster on the same machine counts as other work.
func newCPUMeter(binDirs ...string) *cpuMeter {
	bins := map[string]string{} // resolved executable → name
	for _, d := range binDirs {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if p, err := filepath.EvalSymlinks(filepath.Join(d, e.Name())); err == nil {
				bins[p] = e.Name()
			}
		}
	}
	self := os.Getpid()
	m := &cpuMeter{pids: map[string][]int{benchProcess: {self}}}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || !descends(pid, self) {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		if name, ok := bins[exe]; ok {
			m.pids[name] = append(m.pids[name], pid)
		}
	}
	for name := range m.pids {
		m.names = append(m.names, name)
	}
	slices.Sort(m.names)
	return m
}

// descends reports whether pid is a descendant of ancestor.
func descends(pid, ancestor int) bool {
	for range 16 {
		pid = parentOf(pid)
		if pid == ancestor {
			return true
		}
		if pid <= 1 {
			return false
		}
	}
	return false
}

// parentOf reads field 4 of /proc/PID/stat.
func parentOf(pid int) int {
	f := statFields(pid)
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// statFields returns the fields of /proc/PID/stat after the parenthesised
// command name, which may hold spaces: f[0] is field 3 (state).
func statFields(pid int) []string {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil
	}
	s := string(data)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

func (m *cpuMeter) sample() cpuSample {
	s := cpuSample{at: time.Now(), busy: machineBusy(), procs: map[string]time.Duration{}, waits: map[string]time.Duration{}}
	for name, pids := range m.pids {
		for _, pid := range pids {
			s.procs[name] += processCPU(pid)
			s.waits[name] += processWait(pid)
		}
	}
	return s
}

// settle waits, up to maxWait, until the measured processes other than this
// one use less than a fifth of one CPU over a second, so that a measurement
// does not start while the last one's clean-up still loads the cluster. It
// returns a line saying how long that took.
func (m *cpuMeter) settle(ctx context.Context, maxWait time.Duration) string {
	const window, quiet = time.Second, 0.2
	start := time.Now()
	last := 0.0
	for range int(maxWait / window) {
		from := m.sample()
		select {
		case <-ctx.Done():
			return "settling: " + ctx.Err().Error()
		case <-time.After(window):
		}
		to := m.sample()
		var busy time.Duration
		for name, d := range to.procs {
			if name != benchProcess {
				busy += d - from.procs[name]
			}
		}
		last = busy.Seconds() / to.at.Sub(from.at).Seconds()
		if last < quiet {
			return fmt.Sprintf("cluster settled after %s (%.0f %% of one CPU)\n", time.Since(start).Round(time.Second), 100*last)
		}
	}
	return fmt.Sprintf("cluster still busy after %s (%.0f %% of one CPU); measuring anyway\n", maxWait, 100*last)
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
	rows := [][]string{{"process", "CPU time", fmt.Sprintf("share of %d CPUs × %s", numCPU(), secs(wall)), "runnable, waiting for a CPU"}}
	var ours time.Duration
	for _, name := range m.names {
		d := to.procs[name] - from.procs[name]
		ours += d
		rows = append(rows, []string{name, secs(d), pct(d), secs(to.waits[name] - from.waits[name])})
	}
	other := max(to.busy-from.busy-ours, 0)
	rows = append(rows,
		[]string{"other processes (other builds, CHP)", secs(other), pct(other), ""},
		[]string{"idle", secs(max(capacity-ours-other, 0)), pct(max(capacity-ours-other, 0)), ""})
	out := table(title, rows)
	if capacity > 0 && float64(other) > disturbed*float64(capacity) {
		out += fmt.Sprintf("DISTURBED: other processes took %s of the CPUs; these numbers are not comparable\n", pct(other))
	}
	return out
}

// disturbed is the share of the machine's CPUs taken by other processes
// above which a measurement is flagged.
const disturbed = 0.10

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

// processCPU reads utime+stime of a process (fields 14 and 15 of /proc/PID/stat).
func processCPU(pid int) time.Duration {
	f := statFields(pid)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * time.Second / userHZ
}

// processWait sums how long a process's threads have waited on a run
// queue for a CPU (the second field of /proc/PID/task/TID/schedstat, in
// nanoseconds). Threads that ended take their share with them, which the
// Go runtime's long-lived threads make small.
func processWait(pid int) time.Duration {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var sum time.Duration
	for _, t := range tasks {
		data, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(data))
		if len(f) < 2 {
			continue
		}
		ns, _ := strconv.ParseInt(f[1], 10, 64)
		sum += time.Duration(ns)
	}
	return sum
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
