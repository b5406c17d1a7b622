package history

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	_ "time/tzdata" // America/Los_Angeles whatever the machine has

	"github.com/google/go-cmp/cmp"
)

func TestOpenDSNForms(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir) // for the relative paths
	pg, err := neturl.Parse(newTestDB(t, BackendPostgres).dsn)
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		dsn         string
		wantBackend string
		wantFile    string // for SQLite, the file it must create
	}{
		"sqlite absolute":  {dsn: "sqlite://" + filepath.Join(dir, "abs.db"), wantBackend: BackendSQLite, wantFile: filepath.Join(dir, "abs.db")},
		"sqlite relative":  {dsn: "sqlite://rel.db", wantBackend: BackendSQLite, wantFile: filepath.Join(dir, "rel.db")},
		"plain path":       {dsn: filepath.Join(dir, "plain.db"), wantBackend: BackendSQLite, wantFile: filepath.Join(dir, "plain.db")},
		"plain relative":   {dsn: "plain-rel.db", wantBackend: BackendSQLite, wantFile: filepath.Join(dir, "plain-rel.db")},
		"file URI":         {dsn: "file:" + filepath.Join(dir, "uri.db") + "?mode=rwc", wantBackend: BackendSQLite, wantFile: filepath.Join(dir, "uri.db")},
		"sqlite own param": {dsn: "sqlite://" + filepath.Join(dir, "params.db") + "?_pragma=busy_timeout(1000)", wantBackend: BackendSQLite, wantFile: filepath.Join(dir, "params.db")},
		"memory":           {dsn: ":memory:", wantBackend: BackendSQLite},
		"postgres URL":     {dsn: pg.String(), wantBackend: BackendPostgres},
		"postgresql URL":   {dsn: "postgresql" + strings.TrimPrefix(pg.String(), "postgres"), wantBackend: BackendPostgres},
		"postgres key=value": {
			dsn:         fmt.Sprintf("host=%s port=%s user=postgres dbname=%s sslmode=disable", pg.Hostname(), pg.Port(), strings.TrimPrefix(pg.Path, "/")),
			wantBackend: BackendPostgres,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			s := testDB{tc.wantBackend, tc.dsn}.open(t)
			if got := s.Backend(); got != tc.wantBackend {
				t.Errorf("Backend() = %q, want %q", got, tc.wantBackend)
			}
			if err := s.Ping(ctx); err != nil {
				t.Errorf("Ping: %v", err)
			}
			l := newLife("uid-"+name, "alice", "", t0)
			if err := s.Record(ctx, l.records()...); err != nil {
				t.Fatalf("Record: %v", err)
			}
			if _, err := s.Get(ctx, l.id.UID); err != nil {
				t.Errorf("Get: %v", err)
			}
			if tc.wantFile != "" {
				if _, err := os.Stat(tc.wantFile); err != nil {
					t.Errorf("database file: %v", err)
				}
			}
		})
	}
	for _, dsn := range []string{"", "mysql://localhost/db", "sqlite://"} {
		if s, err := Open(context.Background(), dsn, Options{}); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded, want an error", dsn)
		}
	}
}

// TestSQLitePragmas checks that the store's SQLite settings hold on every
// connection of the pool, and that one a DSN names wins over the store's.
func TestSQLitePragmas(t *testing.T) {
	dir := t.TempDir()
	tests := map[string]struct {
		dsn  string
		want map[string]int64
	}{
		"defaults": {
			dsn:  "sqlite://" + filepath.Join(dir, "defaults.db"),
			want: map[string]int64{"wal_autocheckpoint": 10000, "journal_size_limit": 48 << 20, "synchronous": 1, "foreign_keys": 1},
		},
		"DSN overrides": {
			dsn:  "sqlite://" + filepath.Join(dir, "own.db") + "?_pragma=wal_autocheckpoint(500)&_pragma=synchronous(FULL)",
			want: map[string]int64{"wal_autocheckpoint": 500, "journal_size_limit": 48 << 20, "synchronous": 2, "foreign_keys": 1},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			s := testDB{BackendSQLite, tc.dsn}.open(t)
			// Hold several connections at once, so that the pool opens new ones.
			conns := make([]*sql.Conn, 3)
			for i := range conns {
				c, err := s.db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				conns[i] = c
			}
			for i, c := range conns {
				for pragma, want := range tc.want {
					var got int64
					if err := c.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil {
						t.Fatalf("connection %d: PRAGMA %s: %v", i, pragma, err)
					}
					if got != want {
						t.Errorf("connection %d: PRAGMA %s = %d, want %d", i, pragma, got, want)
					}
				}
			}
		})
	}
}

// record records every life, failing the test on an error.
func record(t *testing.T, s *Store, lives ...*life) {
	t.Helper()
	var recs []Record
	for _, l := range lives {
		recs = append(recs, l.records()...)
	}
	if err := s.Record(testCtx(t), recs...); err != nil {
		t.Fatalf("Record: %v", err)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	eachBackend(t, func(t *testing.T, db testDB) {
		ctx := testCtx(t)
		s := db.open(t)
		// Every kind and every field, with times off the second.
		l := newLife("uid-1", "alice", "gpu", t0.Add(123*time.Millisecond)).
			course("DSC10").gpu("a5000", "booking-dsc10-week3", "booking").
			endedBy(StopperEvicted, t0.Add(3*time.Hour+456*time.Millisecond), Actor{}, EndFacts{
				Phase: "Failed", Reason: "Evicted", Message: "The node was low on resource: memory.",
				ContainerReason: "Error", ExitCode: intp(137),
			})
		l.stopRequested, l.stopRequestedBy = t0.Add(2*time.Hour), Actor{Kind: ActorAdmin, Name: "bob"}
		l.id.Profile, l.id.Image, l.node = "gpu-small", "ucsd/gpu:2026.4", "gpu-3"
		// Each record in its own call, in life order.
		for _, r := range l.records() {
			if err := s.Record(ctx, r); err != nil {
				t.Fatalf("Record(%s): %v", r.Kind, err)
			}
		}
		got, err := s.Get(ctx, "uid-1")
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if diff := cmp.Diff(l.session(), got); diff != "" {
			t.Errorf("Get (-want,+got):\n%s", diff)
		}
		if !strings.Contains(got.Why, "evicted") {
			t.Errorf("Why = %q, want the eviction", got.Why)
		}
		events, err := s.Events(ctx, "uid-1")
		if err != nil {
			t.Fatalf("Events: %v", err)
		}
		end := l.end
		want := []Event{
			{UID: "uid-1", Kind: EventRequested, At: l.requested, By: &Actor{Kind: ActorUser, Name: "alice"}},
			{UID: "uid-1", Kind: EventCreated, At: l.created},
			{UID: "uid-1", Kind: EventScheduled, At: l.scheduled, Node: "gpu-3"},
			{UID: "uid-1", Kind: EventReady, At: l.ready},
			{UID: "uid-1", Kind: EventStopRequested, At: l.stopRequested, By: &Actor{Kind: ActorAdmin, Name: "bob"}},
			{UID: "uid-1", Kind: EventEnded, At: l.ended, Stopper: StopperEvicted, End: &end},
		}
		if diff := cmp.Diff(want, events); diff != "" {
			t.Errorf("Events (-want,+got):\n%s", diff)
		}

		// A running session of the default server, with the fewest fields.
		r := Record{Identity: Identity{UID: "uid-2", User: "carol"}, Kind: EventCreated, At: t0}
		if err := s.Record(ctx, r); err != nil {
			t.Fatalf("Record: %v", err)
		}
		got, err = s.Get(ctx, "uid-2")
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		created := t0
		if diff := cmp.Diff(Session{Identity: r.Identity, CreatedAt: &created, Started: t0}, got); diff != "" {
			t.Errorf("Get of a running session (-want,+got):\n%s", diff)
		}
		if _, err := s.Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(nope) = %v, want ErrNotFound", err)
		}
		if _, err := s.Events(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Events(nope) = %v, want ErrNotFound", err)
		}
	})
}

func TestRecordFirstWins(t *testing.T) {
	eachBackend(t, func(t *testing.T, db testDB) {
		ctx := testCtx(t)
		s := db.open(t)
		l := newLife("uid-1", "alice", "", t0).endedBy(StopperEvicted, t0.Add(time.Hour), Actor{}, EndFacts{Phase: "Failed", Reason: "Evicted"})
		record(t, s, l)
		want := l.session()
		// The same records again, then a later user stop of the same pod
		// and a second created record: all no-ops.
		record(t, s, l)
		late := newLife("uid-1", "alice", "", t0.Add(time.Minute)).endedBy(StopperUser, t0.Add(2*time.Hour), Actor{Kind: ActorUser, Name: "alice"}, EndFacts{Phase: "Succeeded"})
		record(t, s, late)
		got, err := s.Get(ctx, "uid-1")
		if err != nil {
			t.Fatal(err)
		}
		// The later life's stop-requested record is the first of its kind.
		want.StopRequestedAt, want.StopRequestedBy = ptr(late.stopRequested), &late.stopRequestedBy
		want.Why = Why(want, time.UTC)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("after repeats (-want,+got):\n%s", diff)
		}
		events, err := s.Events(ctx, "uid-1")
		if err != nil {
			t.Fatal(err)
		}
		if len(events) != len(EventKinds) || endedEvent(events).Stopper != StopperEvicted {
			t.Errorf("Events = %+v, want one per kind, ended by eviction", events)
		}
	})
}

func ptr[T any](v T) *T { return &v }

// endedEvent is the ended event among events (zero if none).
func endedEvent(events []Event) Event {
	for _, e := range events {
		if e.Kind == EventEnded {
			return e
		}
	}
	return Event{}
}

// TestRecordConcurrentStores records the same sessions from two Stores on
// one database at once, each with its own idea of how they ended: every
// session ends up with one row per kind, and its columns agree with the
// record that won.
func TestRecordConcurrentStores(t *testing.T) {
	eachBackend(t, func(t *testing.T, db testDB) {
		ctx := testCtx(t)
		stores := []*Store{db.open(t), db.open(t)}
		stoppers := []Stopper{StopperOOM, StopperCuller}
		const sessions = 20
		var wg sync.WaitGroup
		errs := make(chan error, 2*sessions)
		for i, s := range stores {
			wg.Go(func() {
				for n := range sessions {
					l := newLife(fmt.Sprintf("uid-%02d", n), "alice", "", t0.Add(time.Duration(n)*time.Minute)).
						endedBy(stoppers[i], t0.Add(time.Hour), Actor{}, EndFacts{Reason: string(stoppers[i])})
					recs := l.records()
					if i == 1 {
						slices.Reverse(recs) // the other order: the ended record first
					}
					if err := s.Record(ctx, recs...); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("Record: %v", err)
		}
		page, err := stores[0].List(ctx, Filter{}, Page{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Sessions) != sessions {
			t.Fatalf("List: %d sessions, want %d", len(page.Sessions), sessions)
		}
		for _, sess := range page.Sessions {
			events, err := stores[1].Events(ctx, sess.UID)
			if err != nil {
				t.Fatal(err)
			}
			// Every kind but stop-requested.
			if len(events) != len(EventKinds)-1 {
				t.Errorf("%s: %d events, want %d", sess.UID, len(events), len(EventKinds)-1)
				continue
			}
			ended := endedEvent(events)
			if ended.Stopper != sess.Stopper || sess.End == nil || sess.End.Reason != string(sess.Stopper) {
				t.Errorf("%s: session ended by %q (%+v), its ended event by %q", sess.UID, sess.Stopper, sess.End, ended.Stopper)
			}
		}
	})
}

func TestRecordFillsIdentity(t *testing.T) {
	eachBackend(t, func(t *testing.T, db testDB) {
		ctx := testCtx(t)
		clock := t0
		s, err := Open(ctx, db.dsn, Options{Now: func() time.Time { return clock }})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		bare := Identity{UID: "uid-1", User: "alice"}
		full := Identity{UID: "uid-1", User: "alice", Server: "gpu", Namespace: "jupyter", Pod: "jupyter-alice--gpu",
			Profile: "gpu", Image: "ucsd/gpu", Course: "DSC10", GPUClass: "a5000", Reservation: "bk-1", ReservationKind: "booking"}
		other := Identity{UID: "uid-1", User: "mallory", Server: "x", Namespace: "x", Pod: "x", Profile: "x", Image: "x",
			Course: "x", GPUClass: "x", Reservation: "x", ReservationKind: "x"}
		steps := []Record{
			{Identity: bare, Kind: EventRequested, At: t0},
			{Identity: full, Kind: EventCreated, At: t0.Add(time.Second)},        // fills every empty field
			{Identity: other, Kind: EventScheduled, At: t0.Add(2 * time.Second)}, // overwrites nothing
		}
		for _, r := range steps {
			clock = clock.Add(time.Minute)
			if err := s.Record(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Get(ctx, "uid-1")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(full, got.Identity); diff != "" {
			t.Errorf("identity (-want,+got):\n%s", diff)
		}
		// updated_at: the scheduled record changed the row; a repeat does not.
		var updated int64
		q := s.bind(`SELECT updated_at FROM sessions WHERE uid = ?`)
		if err := s.db.QueryRowContext(ctx, q, "uid-1").Scan(&updated); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(time.Hour)
		if err := s.Record(ctx, steps...); err != nil {
			t.Fatal(err)
		}
		var again int64
		if err := s.db.QueryRowContext(ctx, q, "uid-1").Scan(&again); err != nil {
			t.Fatal(err)
		}
		if want := t0.Add(3 * time.Minute).UnixMilli(); updated != want || again != want {
			t.Errorf("updated_at = %d then %d after repeats, want %d both times", updated, again, want)
		}
	})
}

func TestRecordStarted(t *testing.T) {
	eachBackend(t, func(t *testing.T, db testDB) {
		ctx := testCtx(t)
		s := db.open(t)
		id := Identity{UID: "uid-1", User: "alice"}
		steps := []struct {
			rec  Record
			want time.Time
		}{
			// Until a requested or created record, the earliest record.
			{Record{Identity: id, Kind: EventEnded, At: t0.Add(time.Hour), Stopper: StopperDeleted}, t0.Add(time.Hour)},
			{Record{Identity: id, Kind: EventReady, At: t0.Add(time.Minute)}, t0.Add(time.Minute)},
			// Then the created record, even later than ready (clock skew).
			{Record{Identity: id, Kind: EventCreated, At: t0.Add(2 * time.Minute)}, t0.Add(2 * time.Minute)},
			{Record{Identity: id, Kind: EventScheduled, At: t0}, t0.Add(2 * time.Minute)},
			// The earlier of requested and created.
			{Record{Identity: id, Kind: EventRequested, At: t0.Add(time.Second)}, t0.Add(time.Second)},
		}
		for _, st := range steps {
			if err := s.Record(ctx, st.rec); err != nil {
				t.Fatal(err)
			}
			got, err := s.Get(ctx, "uid-1")
			if err != nil {
				t.Fatal(err)
			}
			if !got.Started.Equal(st.want) {
				t.Errorf("after %s: Started = %v, want %v", st.rec.Kind, got.Started, st.want)
			}
		}
	})
}

func TestRecordValidation(t *testing.T) {
	ok := Record{Identity: Identity{UID: "u", User: "alice"}, Kind: EventCreated, At: t0}
	with := func(edit func(*Record)) Record { r := ok; edit(&r); return r }
	tests := map[string]struct {
		rec       Record
		wantField string
	}{
		"no UID":            {with(func(r *Record) { r.UID = "" }), "records[1].UID"},
		"no user":           {with(func(r *Record) { r.User = "" }), "records[1].User"},
		"no kind":           {with(func(r *Record) { r.Kind = "" }), "records[1].Kind"},
		"unknown kind":      {with(func(r *Record) { r.Kind = "exploded" }), "records[1].Kind"},
		"no time":           {with(func(r *Record) { r.At = time.Time{} }), "records[1].At"},
		"ended, no stopper": {with(func(r *Record) { r.Kind = EventEnded }), "records[1].Stopper"},
	}
	eachBackend(t, func(t *testing.T, db testDB) {
		ctx := testCtx(t)
		s := db.open(t)
		for name, tc := range tests {
			// A valid record first: nothing of the call may be written.
			err := s.Record(ctx, ok, tc.rec)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantField) {
				t.Errorf("%s: Record = %v, want ErrInvalid naming %s", name, err, tc.wantField)
			}
		}
		if _, err := s.Get(ctx, "u"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get after invalid calls = %v, want ErrNotFound", err)
		}
		if err := s.Record(ctx); err != nil {
			t.Errorf("Record() = %v, want nil", err)
		}
	})
}

// filterFixture is a varied set of sessions for the list tests: users,
// servers, courses, classes, every stopper, running ones, and ties on
// Started.
func filterFixture() []*life {
	var lives []*life
	users := []string{"alice", "bob", "carol"}
	courses := []string{"DSC10", "DSC20", ""}
	classes := []string{"", "a5000", "h100"}
	for i := range 60 {
		start := t0.Add(time.Duration(i/2) * time.Hour) // pairs share Started
		l := newLife(fmt.Sprintf("uid-%03d", i), users[i%3], []string{"", "gpu"}[i%2], start).
			course(courses[i%4%3]).gpu(classes[i%5%3], "", "")
		if i%9 != 8 { // every ninth runs
			st := Stoppers[i%len(Stoppers)]
			facts := EndFacts{Phase: "Failed"}
			switch st {
			case StopperEvicted:
				facts.Reason = "Evicted"
			case StopperOOM:
				facts.ContainerReason, facts.ExitCode = "OOMKilled", intp(137)
			case StopperContainerExit:
				facts.ContainerReason, facts.ExitCode = "Error", intp(1)
			}
			l.endedBy(st, start.Add(time.Duration(1+i%5)*time.Hour), Actor{}, facts)
		}
		lives = append(lives, l)
	}
	return lives
}

// listAll pages through List with the page size, checking each page.
func listAll(t *testing.T, s *Store, f Filter, limit int) []Session {
	t.Helper()
	var all []Session
	p := Page{Limit: limit}
	for pages := 0; ; pages++ {
		if pages > 2000 {
			t.Fatal("List: no end of pages")
		}
		page, err := s.List(testCtx(t), f, p)
		if err != nil {
			t.Fatalf("List(%+v, %+v): %v", f, p, err)
		}
		if len(page.Sessions) > limit || (page.Next != "" && len(page.Sessions) != limit) {
			t.Fatalf("List page of %d sessions (limit %d, next %q)", len(page.Sessions), limit, page.Next)
		}
		all = append(all, page.Sessions...)
		if page.Next == "" {
			return all
		}
		p.Cursor = page.Next
	}
}

func uids(ss []Session) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.UID)
	}
	return out
}

func TestListFilters(t *testing.T) {
	lives := filterFixture()
	var want []Session
	for _, l := range lives {
		want = append(want, l.session())
	}
	// Newest first, then UID descending.
	slices.SortFunc(want, func(a, b Session) int {
		if c := b.Started.Compare(a.Started); c != 0 {
			return c
		}
		return strings.Compare(b.UID, a.UID)
	})
	def, gpu := "", "gpu"
	filters := map[string]Filter{
		"all":                   {},
		"user":                  {User: "alice"},
		"default server":        {User: "bob", Server: &def},
		"named server":          {User: "bob", Server: &gpu},
		"any user's gpu server": {Server: &gpu},
		"course":                {Course: "DSC10"},
		"class":                 {Class: "a5000"},
		"reason: stopper":       {Reason: "culler"},
		"reason: k8s reason":    {Reason: "evicted"},
		"reason: container":     {Reason: "oomkilled"},
		"reason: upper case":    {Reason: "OOM"},
		"reason: none matches":  {Reason: "nothing"},
		"since":                 {Since: t0.Add(20 * time.Hour)},
		"until":                 {Until: t0.Add(5 * time.Hour)},
		"window":                {Since: t0.Add(10 * time.Hour), Until: t0.Add(12 * time.Hour)},
		"ended":                 {Ended: true},
		"running":               {Running: true},
		"ended and running":     {Ended: true, Running: true},
		"ended since":           {Ended: true, Since: t0.Add(20 * time.Hour)},
		"ended, window":         {Ended: true, Since: t0.Add(10 * time.Hour), Until: t0.Add(12 * time.Hour)},
		"ended, running, since": {Ended: true, Running: true, Since: t0.Add(20 * time.Hour)},
		"running since":         {Running: true, Since: t0.Add(20 * time.Hour)},
		"course and reason":     {Course: "DSC10", Reason: "user"},
		"user, course, window":  {User: "carol", Course: "DSC10", Since: t0.Add(3 * time.Hour), Until: t0.Add(25 * time.Hour)},
		"class, ended, reason":  {Class: "h100", Ended: true, Reason: "failed-nothing"},
		"user, running":         {User: "carol", Running: true},
	}
	eachBackend(t, func(t *testing.T, db testDB) {
		s := db.open(t)
		record(t, s, lives...)
		for name, f := range filters {
			var wantUIDs []string
			for _, w := range want {
				if f.Matches(w) {
					wantUIDs = append(wantUIDs, w.UID)
				}
			}
			for _, limit := range []int{4, 100} {
				got := listAll(t, s, f, limit)
				if diff := cmp.Diff(wantUIDs, uids(got)); diff != "" {
					t.Errorf("%s, pages of %d (-want,+got):\n%s", name, limit, diff)
				}
			}
		}
		// Whole sessions come back, Why included.
		got := listAll(t, s, Filter{}, 25)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("List (-want,+got):\n%s", diff)
		}
	})
}

func TestListPages(t *testing.T) {
	eachBackend(t, func(t *testing.T, db testDB) {
		ctx := testCtx(t)
		s := db.open(t)
		// 135 sessions in 9 runs of 15 that share Started: pages end inside
		// runs of ties.
		const n = 135
		var recs []Record
		for i := range n {
			recs = append(recs, Record{
				Identity: Identity{UID: fmt.Sprintf("uid-%04d", (i*97)%n), User: "alice"},
				Kind:     EventCreated, At: t0.Add(time.Duration(i/15) * time.Second),
			})
		}
		if err := s.Record(ctx, recs...); err != nil {
			t.Fatal(err)
		}
		full := listAll(t, s, Filter{}, MaxLimit)
		if len(full) != n {
			t.Fatalf("%d sessions, want %d", len(full), n)
		}
		for i := 1; i < len(full); i++ {
			a, b := full[i-1], full[i]
			if a.Started.Before(b.Started) || (a.Started.Equal(b.Started) && a.UID <= b.UID) {
				t.Fatalf("out of order at %d: %s %v then %s %v", i, a.UID, a.Started, b.UID, b.Started)
			}
		}
		for _, limit := range []int{1, 7, 15, 16, 100} {
			if diff := cmp.Diff(uids(full), uids(listAll(t, s, Filter{}, limit))); diff != "" {
				t.Errorf("pages of %d (-want,+got):\n%s", limit, diff)
			}
		}
		page, err := s.List(ctx, Filter{}, Page{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Sessions) != DefaultLimit || page.Next == "" {
			t.Errorf("no Limit: %d sessions (next %q), want %d and a next page", len(page.Sessions), page.Next, DefaultLimit)
		}
		for _, c := range []string{"garbage!", "MTIz", encodeCursor(5, "")[:4], "Mjp4Onk"} {
			if _, err := s.List(ctx, Filter{}, Page{Cursor: c}); !errors.Is(err, ErrBadCursor) {
				t.Errorf("List(cursor %q) = %v, want ErrBadCursor", c, err)
			}
		}
	})
}

func TestPageSize(t *testing.T) {
	t.Parallel()
	for limit, want := range map[int]int{-3: DefaultLimit, 0: DefaultLimit, 1: 1, MaxLimit: MaxLimit, MaxLimit + 1: MaxLimit, 1 << 40: MaxLimit} {
		if got := pageSize(limit); got != want {
			t.Errorf("pageSize(%d) = %d, want %d", limit, got, want)
		}
	}
}

func TestLast(t *testing.T) {
	eachBackend(t, func(t *testing.T, db testDB) {
		ctx := testCtx(t)
		s := db.open(t)
		record(t, s,
			newLife("a1", "alice", "", t0).endedBy(StopperCuller, t0.Add(time.Hour), Actor{Kind: ActorCuller, Name: "idle-culler"}, EndFacts{}),
			newLife("a2", "alice", "", t0.Add(2*time.Hour)),
			newLife("a3", "alice", "gpu", t0.Add(3*time.Hour)),
			newLife("b1", "bob", "", t0.Add(4*time.Hour)),
		)
		for _, tc := range []struct{ user, server, want string }{
			{"alice", "", "a2"}, {"alice", "gpu", "a3"}, {"bob", "", "b1"},
		} {
			got, err := s.Last(ctx, tc.user, tc.server)
			if err != nil || got.UID != tc.want {
				t.Errorf("Last(%s, %q) = %s, %v; want %s", tc.user, tc.server, got.UID, err, tc.want)
			}
		}
		for _, tc := range [][2]string{{"bob", "gpu"}, {"nobody", ""}} {
			if _, err := s.Last(ctx, tc[0], tc[1]); !errors.Is(err, ErrNotFound) {
				t.Errorf("Last(%s, %q) = %v, want ErrNotFound", tc[0], tc[1], err)
			}
		}
	})
}

func TestEventsOrder(t *testing.T) {
	eachBackend(t, func(t *testing.T, db testDB) {
		ctx := testCtx(t)
		s := db.open(t)
		id := Identity{UID: "uid-1", User: "alice"}
		// Recorded out of order; created, requested and scheduled share a
		// millisecond (the sub-millisecond part is not kept).
		recs := []Record{
			{Identity: id, Kind: EventEnded, At: t0.Add(time.Hour), Stopper: StopperNodeLost},
			{Identity: id, Kind: EventScheduled, At: t0.Add(300 * time.Microsecond), Node: "n"},
			{Identity: id, Kind: EventCreated, At: t0},
			{Identity: id, Kind: EventReady, At: t0.Add(-time.Minute)}, // a clock behind
			{Identity: id, Kind: EventRequested, At: t0.Add(100 * time.Microsecond)},
		}
		if err := s.Record(ctx, recs...); err != nil {
			t.Fatal(err)
		}
		events, err := s.Events(ctx, "uid-1")
		if err != nil {
			t.Fatal(err)
		}
		var got []EventKind
		for _, e := range events {
			got = append(got, e.Kind)
		}
		want := []EventKind{EventReady, EventRequested, EventCreated, EventScheduled, EventEnded}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Events order (-want,+got):\n%s", diff)
		}
	})
}

func TestEndedByDay(t *testing.T) {
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time {
		v, err := time.ParseInLocation("2006-01-02 15:04:05", s, la)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	end := func(uid, course string, st Stopper, ended time.Time) *life {
		return newLife(uid, "alice", "", ended.Add(-3*time.Hour)).course(course).endedBy(st, ended, Actor{}, EndFacts{})
	}
	lives := []*life{
		end("a", "DSC10", StopperEvicted, at("2026-12-03 23:59:59")), // 12-04 07:59:59 UTC
		end("b", "DSC10", StopperEvicted, at("2026-12-04 00:00:01")), // 12-04 08:00:01 UTC
		end("c", "DSC20", StopperUser, at("2026-12-04 00:30:00")),
		end("d", "DSC10", StopperCuller, at("2026-12-03 23:00:00")), // 12-04 07:00 UTC
		newLife("e", "alice", "", at("2026-12-04 01:00:00")),        // running
		// The day US daylight saving time ends has 25 hours in LA.
		end("f", "DSC10", StopperOOM, at("2026-11-01 00:30:00")), // PDT, 11-01 07:30 UTC
		end("g", "DSC10", StopperOOM, at("2026-11-01 23:30:00")), // PST, 11-02 07:30 UTC
	}
	tests := map[string]struct {
		f    Filter
		loc  *time.Location
		want []DayCount
	}{
		"LA": {loc: la, want: []DayCount{
			{"2026-11-01", StopperOOM, 2},
			{"2026-12-03", StopperCuller, 1}, {"2026-12-03", StopperEvicted, 1},
			{"2026-12-04", StopperUser, 1}, {"2026-12-04", StopperEvicted, 1},
		}},
		"UTC": {loc: nil, want: []DayCount{
			{"2026-11-01", StopperOOM, 1}, {"2026-11-02", StopperOOM, 1},
			{"2026-12-04", StopperUser, 1}, {"2026-12-04", StopperCuller, 1}, {"2026-12-04", StopperEvicted, 2},
		}},
		"LA, ends after local midnight": {f: Filter{Since: at("2026-12-04 00:00:00")}, loc: la, want: []DayCount{
			{"2026-12-04", StopperUser, 1}, {"2026-12-04", StopperEvicted, 1},
		}},
		"LA, ends in ten minutes": {f: Filter{Since: at("2026-12-04 00:00:00"), Until: at("2026-12-04 00:10:00")}, loc: la, want: []DayCount{
			{"2026-12-04", StopperEvicted, 1},
		}},
		"LA, course and reason": {f: Filter{Course: "DSC10", Reason: "evicted"}, loc: la, want: []DayCount{
			{"2026-12-03", StopperEvicted, 1}, {"2026-12-04", StopperEvicted, 1},
		}},
		"running": {f: Filter{Running: true}, loc: la},
		"nothing": {f: Filter{User: "nobody"}, loc: la},
	}
	eachBackend(t, func(t *testing.T, db testDB) {
		ctx := testCtx(t)
		s := db.open(t)
		if got, err := s.EndedByDay(ctx, Filter{}, la); err != nil || len(got) != 0 {
			t.Errorf("EndedByDay of an empty store = %v, %v", got, err)
		}
		record(t, s, lives...)
		for name, tc := range tests {
			got, err := s.EndedByDay(ctx, tc.f, tc.loc)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s (-want,+got):\n%s", name, diff)
			}
		}
	})
}

func TestPurge(t *testing.T) {
	eachBackend(t, func(t *testing.T, db testDB) {
		ctx := testCtx(t)
		s := db.open(t)
		s.purgeBatch = 10
		cutoff := t0.Add(90 * 24 * time.Hour)
		var lives []*life
		// More than two DELETE batches of old sessions, two just after the
		// cutoff, and an old one still running.
		const old = 23
		for i := range old {
			lives = append(lives, newLife(fmt.Sprintf("old-%04d", i), "alice", "", t0).
				endedBy(StopperCuller, cutoff.Add(-time.Duration(i+1)*time.Millisecond), Actor{}, EndFacts{}))
		}
		lives = append(lives,
			newLife("new-1", "alice", "", t0).endedBy(StopperUser, cutoff, Actor{}, EndFacts{}),
			newLife("new-2", "alice", "", t0).endedBy(StopperUser, cutoff.Add(time.Hour), Actor{}, EndFacts{}),
			newLife("running", "alice", "", t0),
		)
		record(t, s, lives...)
		n, err := s.Purge(ctx, cutoff)
		if err != nil || n != old {
			t.Fatalf("Purge = %d, %v; want %d", n, err, old)
		}
		if diff := cmp.Diff([]string{"running", "new-2", "new-1"}, uids(listAll(t, s, Filter{}, 10))); diff != "" {
			t.Errorf("left (-want,+got):\n%s", diff)
		}
		if _, err := s.Events(ctx, "old-0000"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Events of a purged session = %v, want ErrNotFound", err)
		}
		var events int
		// Two ended sessions without stop requests, and one running.
		want := 2*(len(EventKinds)-1) + len(EventKinds) - 2
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM session_events`).Scan(&events); err != nil || events != want {
			t.Errorf("%d events left (%v), want %d", events, err, want)
		}
		if n, err := s.Purge(ctx, cutoff); err != nil || n != 0 {
			t.Errorf("second Purge = %d, %v; want 0", n, err)
		}
	})
}

func TestRecorded(t *testing.T) {
	eachBackend(t, func(t *testing.T, db testDB) {
		ctx := testCtx(t)
		s := db.open(t)
		l := newLife("uid-1", "alice", "", t0)
		l.ready = time.Time{}
		record(t, s, l, newLife("uid-2", "bob", "", t0).endedBy(StopperHub, t0.Add(time.Hour), Actor{Kind: ActorHub}, EndFacts{}))
		ask := []string{"uid-1", "uid-2", "uid-3"}
		for i := range 600 { // more than one query's worth
			ask = append(ask, fmt.Sprintf("other-%d", i))
		}
		got, err := s.Recorded(ctx, ask)
		if err != nil {
			t.Fatal(err)
		}
		all := make(map[EventKind]bool)
		for _, k := range EventKinds {
			all[k] = true
		}
		want := map[string]map[EventKind]bool{
			"uid-1": {EventRequested: true, EventCreated: true, EventScheduled: true},
			"uid-2": all,
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Recorded (-want,+got):\n%s", diff)
		}
		if got, err := s.Recorded(ctx, nil); err != nil || len(got) != 0 {
			t.Errorf("Recorded(nil) = %v, %v", got, err)
		}
	})
}

// TestOpenConcurrent opens one new database from several Stores at once:
// every Open succeeds and each migration runs once.
func TestOpenConcurrent(t *testing.T) {
	eachBackend(t, func(t *testing.T, db testDB) {
		ctx := testCtx(t)
		const n = 3
		stores := make([]*Store, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { stores[i], errs[i] = Open(ctx, db.dsn, Options{}) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("Open %d: %v", i, err)
			}
			defer stores[i].Close()
		}
		var versions, rows int
		q := `SELECT COUNT(DISTINCT version_id), COUNT(*) FROM ` + versionTable
		if err := stores[0].db.QueryRowContext(ctx, q).Scan(&versions, &rows); err != nil {
			t.Fatal(err)
		}
		if versions != rows {
			t.Errorf("%s: %d rows for %d versions: a migration ran twice", versionTable, rows, versions)
		}
		for i, s := range stores {
			l := newLife(fmt.Sprintf("uid-%d", i), "alice", "", t0)
			record(t, s, l)
		}
	})
}

// TestSQLiteSharedByTwoProcesses has two processes (this test binary as a
// helper) open one new SQLite file at once and record the same sessions,
// with different stoppers, while this process reads.
func TestSQLiteSharedByTwoProcesses(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := newTestDB(t, BackendSQLite)
	var wg sync.WaitGroup
	outs := make([][]byte, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			cmd := execHelper(ctx, db.dsn, i)
			outs[i], errs[i] = cmd.CombinedOutput()
		})
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil {
			t.Fatalf("helper %d: %v\n%s", i, errs[i], outs[i])
		}
	}
	s := db.open(t)
	all := listAll(t, s, Filter{}, MaxLimit)
	if len(all) != helperSessions {
		t.Fatalf("%d sessions, want %d", len(all), helperSessions)
	}
	for _, sess := range all {
		events, err := s.Events(ctx, sess.UID)
		if err != nil {
			t.Fatal(err)
		}
		if len(events) != len(EventKinds)-1 || endedEvent(events).Stopper != sess.Stopper {
			t.Errorf("%s: %d events, ended by %q, session by %q", sess.UID, len(events), endedEvent(events).Stopper, sess.Stopper)
		}
	}
}

const helperSessions = 20

// helperProcess is one of TestSQLiteSharedByTwoProcesses' processes.
func helperProcess() int {
	dsn, idx := os.Getenv(helperEnv), os.Getenv(helperEnv+"_INDEX")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, dsn, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	stopper := map[string]Stopper{"0": StopperOOM, "1": StopperEvicted}[idx]
	rng := rand.New(rand.NewPCG(uint64(len(idx)), uint64(idx[0])))
	for _, n := range rng.Perm(helperSessions) {
		l := newLife(fmt.Sprintf("uid-%02d", n), "alice", "", t0.Add(time.Duration(n)*time.Minute)).
			endedBy(stopper, t0.Add(time.Hour), Actor{}, EndFacts{})
		// One call per record: the processes interleave.
		for _, r := range l.records() {
			if err := s.Record(ctx, r); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	}
	return 0
}
