package history

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gofrs/flock"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"go.uber.org/zap"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver (pure Go)
)

// The backends Store.Backend names.
const (
	BackendSQLite   = "sqlite"
	BackendPostgres = "postgres"
)

// Options for Open.
type Options struct {
	// Logger logs schema migrations and maintenance; nil logs nothing.
	Logger *zap.Logger
	// Now is the clock for the updated_at bookkeeping; nil means time.Now.
	// Event times always come from the records.
	Now func() time.Time
}

// Store is the session history in one database. It is safe for concurrent
// use, also by several processes on the same database.
type Store struct {
	db      *sql.DB
	backend string
	log     *zap.Logger
	now     func() time.Time
	// purgeBatch is how many sessions one DELETE of Purge removes at most.
	purgeBatch int
	// stmts are Record's SQLite statements, prepared once at Open: SQLite
	// compiles a statement each time it is prepared, which cost a spawn
	// storm's writer a quarter of its time when it was done per
	// transaction. A transaction uses them through Tx.StmtContext, which
	// reuses each connection's compiled statement. Read-only after Open.
	stmts map[string]*sql.Stmt
}

//go:embed migrations/*.sql
var migrations embed.FS

const (
	// versionTable is goose's bookkeeping table, named apart from goose's
	// default so that the history can share a database with other users of goose.
	versionTable = "history_schema_version"
	// migrationLockID is the PostgreSQL advisory lock migrations hold: a
	// fixed number of our own, for the same reason.
	migrationLockID = 0x68697374_6f727931 // "history1"
	// sqliteBusyTimeout is how long a SQLite connection waits for another
	// writer (another replica on the same file) before failing.
	sqliteBusyTimeout = 5 * time.Second
)

// Open opens the store the DSN names and brings its schema up to date.
//
// DSNs: "sqlite:///abs/path/history.db", "sqlite://relative.db", a plain
// file path or a "file:" URI open an embedded SQLite database (created if
// missing); "postgres://...", "postgresql://..." or a key=value DSN starting
// with "host=" open PostgreSQL. Several processes may open the same database
// at once: migrations run once, under a lock.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	s := &Store{log: opts.Logger, now: opts.Now, purgeBatch: defaultPurgeBatch}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if s.now == nil {
		s.now = time.Now
	}
	var err error
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"), strings.HasPrefix(dsn, "host="):
		s.backend = BackendPostgres
		err = s.openPostgres(ctx, dsn)
	case strings.Contains(dsn, "://") && !strings.HasPrefix(dsn, "sqlite://"):
		return nil, fmt.Errorf("open history store: unsupported DSN scheme %q (want sqlite:// or postgres://)", dsn[:strings.Index(dsn, "://")])
	case dsn == "":
		return nil, errors.New("open history store: empty DSN")
	default:
		s.backend = BackendSQLite
		err = s.openSQLite(ctx, dsn)
	}
	if err != nil {
		if s.db != nil {
			_ = s.db.Close()
		}
		return nil, fmt.Errorf("open history store (%s): %w", s.backend, err)
	}
	return s, nil
}

func (s *Store) openPostgres(ctx context.Context, dsn string) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	s.db = db
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(4)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	// The advisory lock serializes replicas that start together: the first
	// migrates, the others then find nothing to do. Retried every second
	// for up to five minutes.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(migrationLockID), lock.WithLockTimeout(1, 300))
	if err != nil {
		return fmt.Errorf("migration lock: %w", err)
	}
	return s.migrate(ctx, goose.DialectPostgres, goose.WithSessionLocker(locker))
}

func (s *Store) openSQLite(ctx context.Context, dsn string) error {
	name, lockPath, memory, err := sqliteDSN(dsn)
	if err != nil {
		return err
	}
	db, err := sql.Open("sqlite", name)
	if err != nil {
		return err
	}
	s.db = db
	if memory {
		// Every connection to ":memory:" is a database of its own.
		db.SetMaxOpenConns(1)
	} else {
		// Readers run beside the writer in WAL mode; writers take turns
		// (BEGIN IMMEDIATE, waiting up to the busy timeout).
		db.SetMaxOpenConns(8)
		db.SetMaxIdleConns(8)
	}
	if lockPath != "" {
		// SQLite has no lock that spans goose's steps (read the version,
		// apply, record), so processes sharing the file take turns on a
		// lock file beside it, from the first connection (which also turns
		// WAL on) to the end of the migrations. The OS releases it if the
		// process dies.
		fl := flock.New(lockPath)
		if _, err := fl.TryLockContext(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("lock %s: %w", lockPath, err)
		}
		defer func() { _ = fl.Unlock() }()
	}
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	if err := s.migrate(ctx, goose.DialectSQLite3); err != nil {
		return err
	}
	s.optimize(ctx)
	return s.prepare(ctx)
}

// optimize refreshes SQLite's planner statistics where the tables changed
// much since they were taken, as SQLite advises for long-lived connections
// (at open, and now and then: after a purge). Without them the planner
// guesses that a range of end times is more selective than a course, and
// a per-course chart reads every session. PostgreSQL's autovacuum does
// this there.
func (s *Store) optimize(ctx context.Context) {
	if s.backend != BackendSQLite {
		return
	}
	// 0x10002: check every table, not only those this connection used. No
	// analysis_limit: approximate statistics mislead the planner here, and
	// a full ANALYZE of 100,000 sessions takes a third of a second.
	if _, err := s.db.ExecContext(ctx, `PRAGMA optimize = 0x10002`); err != nil {
		s.log.Info("history statistics not refreshed", zap.Error(err))
	}
}

// sqliteDSN turns one of the SQLite DSN forms into the driver's DSN (with
// the connection settings this store relies on), the path of the
// migration lock file ("" for an in-memory database) and whether the
// database lives in memory.
func sqliteDSN(dsn string) (name, lockPath string, memory bool, err error) {
	path, query, _ := strings.Cut(strings.TrimPrefix(dsn, "sqlite://"), "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", "", false, fmt.Errorf("DSN parameters: %w", err)
	}
	file := path
	if rest, ok := strings.CutPrefix(path, "file:"); ok {
		// file:///abs, file:rel, file::memory:
		rest = strings.TrimPrefix(rest, "//")
		if file, err = url.PathUnescape(rest); err != nil {
			return "", "", false, fmt.Errorf("DSN path: %w", err)
		}
	}
	if file == "" {
		return "", "", false, errors.New("DSN names no database file")
	}
	memory = file == ":memory:" || q.Get("mode") == "memory"
	// Settings a caller may override in the DSN; busy_timeout is applied
	// first by the driver whatever the order.
	pragmas := map[string]string{
		"busy_timeout": strconv.FormatInt(sqliteBusyTimeout.Milliseconds(), 10),
		"journal_mode": "WAL",
		"foreign_keys": "1",
		// WAL with synchronous=NORMAL is durable across a process crash,
		// which is what a replica restart needs; FULL would cost an fsync
		// per transaction.
		"synchronous": "NORMAL",
		// A checkpoint copies each page the WAL holds once, however often
		// it was written since: in a spawn storm the same index pages are
		// written by every transaction, and checkpointing at 10,000 pages
		// (40 MiB) rather than SQLite's 1,000 cuts the CPU a record costs
		// by a quarter (BenchmarkRecord). The WAL file keeps its size
		// between checkpoints (growing it again costs more); one that a
		// long reader let grow past 48 MiB is cut back to that.
		"wal_autocheckpoint": "10000",
		"journal_size_limit": strconv.Itoa(48 << 20),
	}
	for _, p := range q["_pragma"] {
		key, _, _ := strings.Cut(p, "(")
		delete(pragmas, strings.ToLower(strings.TrimSpace(key)))
	}
	for _, key := range []string{"busy_timeout", "foreign_keys", "journal_mode", "synchronous", "wal_autocheckpoint", "journal_size_limit"} {
		if v, ok := pragmas[key]; ok {
			q.Add("_pragma", key+"("+v+")")
		}
	}
	if q.Get("_txlock") == "" {
		// A write transaction takes the write lock at BEGIN, where the busy
		// timeout applies, rather than failing when a read upgrades.
		q.Set("_txlock", "immediate")
	}
	name = path + "?" + q.Encode()
	if !memory {
		lockPath = file + "-migrate.lock"
	}
	return name, lockPath, memory, nil
}

// migrate applies the embedded migrations that the database lacks.
func (s *Store) migrate(ctx context.Context, dialect goose.Dialect, opts ...goose.ProviderOption) error {
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return err
	}
	opts = append(opts,
		goose.WithTableName(versionTable),
		goose.WithDisableGlobalRegistry(true),
		goose.WithLogger(goose.NopLogger()),
	)
	p, err := goose.NewProvider(dialect, s.db, fsys, opts...)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, r := range results {
		s.log.Info("history schema migrated",
			zap.String("backend", s.backend),
			zap.Int64("version", r.Source.Version),
			zap.Duration("took", r.Duration))
	}
	return nil
}

// Backend is "sqlite" or "postgres".
func (s *Store) Backend() string { return s.backend }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping history store: %w", err)
	}
	return nil
}

// Close closes the database.
func (s *Store) Close() error {
	var errs []error
	for _, st := range s.stmts {
		errs = append(errs, st.Close())
	}
	return errors.Join(append(errs, s.db.Close())...)
}

// prepare compiles Record's statements for the store. It runs before any
// transaction: an in-memory database has a single connection, which a
// transaction would hold.
func (s *Store) prepare(ctx context.Context) error {
	s.stmts = make(map[string]*sql.Stmt)
	for _, q := range recordQueries() {
		st, err := s.db.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("prepare %.40q: %w", q, err)
		}
		s.stmts[q] = st
	}
	return nil
}

// bind rewrites the ? placeholders of the one SQL text both stores share
// into PostgreSQL's $1, $2, ... The queries hold no ? in literals.
func (s *Store) bind(query string) string {
	if s.backend != BackendPostgres {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 16)
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
