package history

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// postgresAdmin is a connection to the test server's "spawnerd" database,
// from which each test creates a database of its own. TestMain sets it.
var postgresAdmin struct {
	db  *sql.DB
	dsn *url.URL
}

// helperEnv, when set, makes the test binary a helper process of
// TestSQLiteSharedByTwoProcesses instead of running tests.
const helperEnv = "HISTORY_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperProcess())
	}
	os.Exit(runTests(m))
}

// runTests starts one PostgreSQL server for the test binary, runs the
// tests and stops it, whatever the tests did.
func runTests(m *testing.M) int {
	stop, err := startPostgres()
	if err != nil {
		fmt.Fprintf(os.Stderr, "history tests need a PostgreSQL server (`make deps` installs Debian's postgresql package): %v\n", err)
		return 1
	}
	defer stop()
	return m.Run()
}

func startPostgres() (stop func(), err error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	script := filepath.Join(root, "hack", "postgres.sh")
	// Not t.TempDir: the server runs as the postgres user when we are root,
	// and must reach its folder.
	dir, err := os.MkdirTemp("", "history-postgres-")
	if err != nil {
		return nil, err
	}
	stopServer := func() {
		if out, err := exec.Command("bash", script, "stop", dir).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping PostgreSQL: %v\n%s", err, out)
		}
		_ = os.RemoveAll(dir)
	}
	cmd := exec.Command("bash", script, "start", dir)
	// The script's watchdog stops the server should this process die
	// before stop runs (a panic, a test timeout).
	cmd.Env = append(os.Environ(), "WATCH_PID="+strconv.Itoa(os.Getpid()))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		stopServer()
		return nil, fmt.Errorf("%s start: %w\n%s", script, err, stderr.String())
	}
	var dsn string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "DSN="); ok {
			dsn = v
		}
	}
	u, err := url.Parse(dsn)
	if dsn == "" || err != nil {
		stopServer()
		return nil, fmt.Errorf("%s start printed no DSN: %q", script, out)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		stopServer()
		return nil, err
	}
	postgresAdmin.db, postgresAdmin.dsn = db, u
	return func() {
		_ = db.Close()
		stopServer()
	}, nil
}

// repoRoot is the folder of go.mod, above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// backends are the stores every conformance test runs against.
var backends = []string{BackendSQLite, BackendPostgres}

// testDB is a fresh, empty database of one backend.
type testDB struct {
	backend string
	dsn     string
}

// newTestDB makes a database for one test: a file in the test's folder, or
// a database of its own on the test server.
func newTestDB(t testing.TB, backend string) testDB {
	t.Helper()
	if backend == BackendSQLite {
		return testDB{backend, "sqlite://" + filepath.Join(t.TempDir(), "history.db")}
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:])
	if _, err := postgresAdmin.db.ExecContext(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	u := *postgresAdmin.dsn
	u.Path = "/" + name
	return testDB{backend, u.String()}
}

// open opens a Store on the database, closed when the test ends.
func (d testDB) open(t testing.TB) *Store {
	t.Helper()
	s, err := Open(context.Background(), d.dsn, Options{Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatalf("Open(%s): %v", d.backend, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// eachBackend runs test as a parallel subtest per backend, each on a fresh
// database. The calling test runs in parallel with the others too: they
// share nothing but the server.
func eachBackend(t *testing.T, test func(t *testing.T, db testDB)) {
	t.Helper()
	t.Parallel()
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			test(t, newTestDB(t, b))
		})
	}
}

// testCtx is a context for one test, bounded so that a hung database fails
// the test rather than the whole binary.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// execHelper is this test binary run as helperProcess number i on dsn.
func execHelper(ctx context.Context, dsn string, i int) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dsn, helperEnv+"_INDEX="+strconv.Itoa(i))
	return cmd
}
