package bench_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// gomaxprocsUpdate is how long a Go process takes to follow a change of its
// CPU affinity with GOMAXPROCS: its sysmon reads the affinity once a second.
const gomaxprocsUpdate = 2500 * time.Millisecond

// pinThreads sets the CPU affinity of every thread of pid to cpus (nil:
// every CPU of the machine).
func pinThreads(pid int, cpus []int) error {
	var set unix.CPUSet
	set.Zero()
	if cpus == nil {
		for c := range numCPU() {
			set.Set(c)
		}
	}
	for _, c := range cpus {
		set.Set(c)
	}
	return eachThread(pid, "setting the CPU affinity", func(tid int) error { return unix.SchedSetaffinity(tid, &set) })
}

// niceThreads sets the nice value of every thread of pid: on Linux a
// nice value is a thread's, not the process's.
func niceThreads(pid, nice int) error {
	return eachThread(pid, "setting the nice value", func(tid int) error { return unix.Setpriority(unix.PRIO_PROCESS, tid, nice) })
}

// eachThread calls set on every thread of pid. Threads made later inherit
// the setting of the thread that makes them, so the pass runs twice to
// catch a thread made from one not yet set; a thread gone meanwhile is
// skipped.
func eachThread(pid int, what string, set func(tid int) error) error {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	for range 2 {
		tasks, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("listing the threads of %d: %w", pid, err)
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := set(tid); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("%s of thread %d of %d: %w", what, tid, pid, err)
			}
		}
	}
	return nil
}

// apart runs measure with spawnerd's threads on CPU 0 and this process's
// (the load generator's) on CPU 1, then gives both every CPU back. The
// dev cluster's processes stay free to run on either. It is how much of a
// latency comes from spawnerd sharing its cores with the clients: on two
// cores both Go runtimes follow the affinity down to GOMAXPROCS 1.
func apart(ctx context.Context, m *cpuMeter, measure func() error) error {
	if numCPU() < 2 {
		return errors.New("needs two CPUs")
	}
	server, err := m.spawnerdPID()
	if err != nil {
		return err
	}
	self := os.Getpid()
	restore := func() error {
		return errors.Join(pinThreads(server, nil), pinThreads(self, nil))
	}
	if err := errors.Join(pinThreads(server, []int{0}), pinThreads(self, []int{1})); err != nil {
		return errors.Join(err, restore())
	}
	select {
	case <-ctx.Done():
		return errors.Join(ctx.Err(), restore())
	case <-time.After(gomaxprocsUpdate):
	}
	err = measure()
	if rerr := restore(); rerr != nil {
		return errors.Join(err, rerr)
	}
	// The next measurement starts with GOMAXPROCS back at the machine's.
	select {
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	case <-time.After(gomaxprocsUpdate):
	}
	return err
}

// apartResult is one window measured with spawnerd and the clients apart.
type apartResult struct {
	rate      float64       // polls a second
	mean, p99 time.Duration // a request's server-side time (p99: bucket bound)
	waited    time.Duration // spawnerd's threads runnable without a CPU, a request
}

// measureApart runs one window of load apart from spawnerd and reads what
// spawnerd's request histogram saw of route (its labels) meanwhile. run
// returns how many requests it sent, how many polls they held and how
// long it took.
func measureApart(ctx context.Context, f *fleet, route string, run func() (requests, polls int, elapsed time.Duration, err error)) (apartResult, error) {
	var r apartResult
	before, err := scrape(ctx, f.api.URL)
	if err != nil {
		return r, err
	}
	err = apart(ctx, f.cpu, func() error {
		w0 := f.cpu.sample()
		requests, polls, elapsed, err := run()
		w1 := f.cpu.sample()
		r.rate = float64(polls) / elapsed.Seconds()
		r.waited = time.Duration(float64(w1.waits["spawnerd"]-w0.waits["spawnerd"]) / float64(max(requests, 1)))
		return err
	})
	if err != nil {
		return r, fmt.Errorf("spawnerd and the clients apart: %w", err)
	}
	after, err := scrape(ctx, f.api.URL)
	if err != nil {
		return r, err
	}
	r.p99 = time.Duration(bucketBound(before, after, "spawner_http_request_duration_seconds", route, 0.99) * float64(time.Second))
	r.mean = mean(before, after, "spawner_http_request_duration_seconds", route)
	return r, nil
}

// cpuLoad keeps threads of this process busy for a share of wall time: the
// storm's control for spawnerd's CPU without spawnerd.
type cpuLoad struct {
	cancel context.CancelFunc
	done   chan time.Duration
	n      int
}

// startCPULoad starts ceil(cpus) threads that together use cpus CPUs (1.5:
// a CPU and a half) for as long as they run. Each thread works in slices
// of 100 µs whenever its own CPU time, read from the kernel, trails its
// share of the wall time since it started, and sleeps otherwise: like a
// server's demand, work it could not do while the cores were busy is done
// when it gets a CPU, so the load takes what it asked for, not less.
func startCPULoad(ctx context.Context, cpus float64) *cpuLoad {
	ctx, cancel := context.WithCancel(ctx)
	n := max(1, int(math.Ceil(cpus)))
	l := &cpuLoad{cancel: cancel, done: make(chan time.Duration, n), n: n}
	share := cpus / float64(n)
	for range n {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			used := func() time.Duration {
				var ru unix.Rusage
				if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
					return 0
				}
				return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			}
			cpu0, start := used(), time.Now()
			for ctx.Err() == nil {
				if used()-cpu0 >= time.Duration(share*float64(time.Since(start))) {
					time.Sleep(500 * time.Microsecond)
					continue
				}
				for t := time.Now(); time.Since(t) < 100*time.Microsecond; {
				}
			}
			l.done <- used() - cpu0
		}()
	}
	return l
}

// stop ends the load and returns the CPU time its threads used.
func (l *cpuLoad) stop() time.Duration {
	l.cancel()
	var total time.Duration
	for range l.n {
		total += <-l.done
	}
	return total
}
