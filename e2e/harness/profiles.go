package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
