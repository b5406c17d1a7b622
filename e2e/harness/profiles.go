package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// KeepProfile writes a CPU profile a benchmark took to
// $BENCH_PROFILES/<name>.pprof, for a closer look with go tool pprof; it
// does nothing when BENCH_PROFILES is unset. Characters of name that do not
// belong in a file name (a sub-benchmark's slash) become underscores.
func KeepProfile(name string, data []byte) error {
	dir := os.Getenv("BENCH_PROFILES")
	if dir == "" {
		return nil
	}
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("keeping the profile %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".pprof"), data, 0o644); err != nil {
		return fmt.Errorf("keeping the profile %s: %w", name, err)
	}
	return nil
}

// PprofTop keeps a CPU profile (KeepProfile, as name) and returns go tool
// pprof's top of it, with flags, headed by what it shows; dir holds the
// file pprof reads.
func PprofTop(ctx context.Context, dir, name, what string, profile []byte, flags ...string) (string, error) {
	if err := KeepProfile(name, profile); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "top.pprof")
	if err := os.WriteFile(path, profile, 0o644); err != nil {
		return "", fmt.Errorf("writing the profile %s: %w", name, err)
	}
	args := append([]string{"tool", "pprof", "-top", "-nodecount=25"}, flags...)
	out, err := exec.CommandContext(ctx, "go", append(args, path)...).Output()
	if err != nil {
		return "", fmt.Errorf("go tool pprof of %s: %w", name, err)
	}
	return fmt.Sprintf("\ngo tool pprof -top %s(%s):\n%s", strings.Join(flags, " ")+" ", what, out), nil
}

// APIServerProfile takes a CPU profile of the API server over window, from
// its /debug/pprof (served to cluster admins when the cluster was started
// with Profiling).
func APIServerProfile(ctx context.Context, client kubernetes.Interface, window time.Duration) ([]byte, error) {
	data, err := client.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", strconv.Itoa(int(window.Seconds()))).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("fetching the API server's CPU profile: %w", err)
	}
	return data, nil
}
