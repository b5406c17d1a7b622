//go:build unix

package reservation

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the test process has used, all threads (GC
// included). Benchmarks report it beside wall time because the build
// machines are shared: wall time there includes waiting for a core.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
