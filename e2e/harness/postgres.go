package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// StartPostgres starts a throwaway PostgreSQL server for one test with the
// repository's hack/postgres.sh (Debian's server binaries) and returns its
// DSN; the server is stopped when the test ends, or when the test binary
// dies.
func (e *Env) StartPostgres(t testing.TB) string {
	t.Helper()
	return e.StartPostgresOn(t, netip.Addr{}, netip.Prefix{})
}

// StartPostgresOn is StartPostgres for clients on a container network:
// the server also listens on addr (the network's gateway) and trusts
// clients from subnet, and the DSN names addr.
func (e *Env) StartPostgresOn(t testing.TB, addr netip.Addr, subnet netip.Prefix) string {
	t.Helper()
	// Not t.TempDir: the server may run as the postgres user, who must be
	// able to reach the folder.
	dir, err := os.MkdirTemp("", "e2e-postgres-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(e.RepoDir, "hack", "postgres.sh")
	cmd := exec.Command("bash", script, "start", dir)
	cmd.Env = append(os.Environ(), "WATCH_PID="+strconv.Itoa(os.Getpid()))
	if addr.IsValid() {
		cmd.Env = append(cmd.Env, "PG_LISTEN="+addr.String(), "PG_TRUST_CIDR="+subnet.String())
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("starting PostgreSQL (make deps installs it): %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		if out, err := exec.Command("bash", script, "stop", dir).CombinedOutput(); err != nil {
			t.Errorf("stopping PostgreSQL: %v\n%s", err, out)
		}
		_ = os.RemoveAll(dir)
	})
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if dsn, ok := strings.CutPrefix(sc.Text(), "DSN="); ok {
			if addr.IsValid() {
				dsn = strings.Replace(dsn, "@127.0.0.1:", "@"+addr.String()+":", 1)
			}
			return dsn
		}
	}
	t.Fatalf("hack/postgres.sh printed no DSN: %q", out)
	return ""
}

// SQLiteDSN is a history DSN for a fresh SQLite file of the test's.
func SQLiteDSN(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("sqlite://%s", filepath.Join(t.TempDir(), "history.db"))
}
