package history

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// genLives makes n sessions spread like a term of the platform's: 5,000
// users, 40 courses, a quarter on one of 3 GPU classes, every stopper (the
// culler and users most), over the 90 days before t0; 2% still run.
func genLives(n int, seed uint64) []*life {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	classes := []string{"a5000", "a100", "h100"}
	// Stoppers by weight, per 1,000 ends.
	weights := map[Stopper]int{
		StopperCuller: 400, StopperUser: 250, StopperHub: 50, StopperAdmin: 20, StopperService: 10,
		StopperStartTimeout: 20, StopperEvicted: 60, StopperOOM: 60, StopperContainerExit: 70,
		StopperNodeLost: 10, StopperDeleted: 20, StopperPreempted: 20,
		StopperReservationCancelled: 5, StopperReservationReassigned: 5,
	}
	var wheel []Stopper
	for _, st := range Stoppers {
		for range weights[st] {
			wheel = append(wheel, st)
		}
	}
	lives := make([]*life, n)
	for i := range lives {
		user := fmt.Sprintf("s%04d", rng.IntN(5000))
		server := ""
		if rng.IntN(5) == 0 {
			server = "gpu"
		}
		start := t0.Add(-time.Duration(rng.Int64N(int64(90 * 24 * time.Hour)))).Truncate(time.Millisecond)
		l := newLife(fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", rng.Uint32(), rng.IntN(1<<16), rng.IntN(1<<12), rng.IntN(1<<12), rng.Uint64()>>16),
			user, server, start).course(fmt.Sprintf("DSC%03d", 10+rng.IntN(40)))
		l.id.Pod = "jupyter-" + user
		l.node = fmt.Sprintf("node-%02d", rng.IntN(60))
		if rng.IntN(4) == 0 {
			kind := []string{"booking", "on_demand", "best_effort"}[rng.IntN(3)]
			l.gpu(classes[rng.IntN(len(classes))], fmt.Sprintf("bk-%s-w%d", l.id.Course, rng.IntN(12)), kind)
			l.node = fmt.Sprintf("gpu-%d", rng.IntN(12))
		}
		lives[i] = l
		if rng.IntN(50) == 0 {
			continue // still running
		}
		st := wheel[rng.IntN(len(wheel))]
		ended := start.Add(5*time.Minute + time.Duration(rng.Int64N(int64(8*time.Hour)))).Truncate(time.Millisecond)
		var by Actor
		var facts EndFacts
		switch st {
		case StopperUser:
			by = Actor{Kind: ActorUser, Name: user}
		case StopperAdmin:
			by = Actor{Kind: ActorAdmin, Name: fmt.Sprintf("admin%d", rng.IntN(5))}
		case StopperCuller:
			by = Actor{Kind: ActorCuller, Name: "idle-culler"}
		case StopperService:
			by = Actor{Kind: ActorService, Name: "grader"}
		case StopperHub:
			by = Actor{Kind: ActorHub}
		case StopperStartTimeout:
			l.ready = time.Time{}
			facts = EndFacts{Phase: "Pending", Message: "pod not ready within 300s"}
		case StopperEvicted:
			facts = EndFacts{Phase: "Failed", Reason: "Evicted", Message: "The node was low on resource: memory.", ExitCode: intp(137)}
		case StopperOOM:
			facts = EndFacts{Phase: "Running", ContainerReason: "OOMKilled", ExitCode: intp(137)}
		case StopperContainerExit:
			facts = EndFacts{Phase: "Failed", ContainerReason: "Error", ExitCode: intp(1 + rng.IntN(2))}
		case StopperNodeLost:
			facts = EndFacts{Phase: "Failed", Reason: "NodeLost", Message: "node unresponsive"}
		case StopperPreempted, StopperReservationCancelled, StopperReservationReassigned:
			facts = EndFacts{Reason: "Preempted", Message: "booking " + l.id.Reservation + " needs the GPUs"}
		}
		l.endedBy(st, ended, by, facts)
	}
	return lives
}

// bulkLoad writes whole sessions straight into the tables, many rows per
// statement, to fill a benchmark database in seconds rather than the
// minutes of a Record per event; TestBulkLoadMatchesRecord checks that it
// writes what Record does.
func bulkLoad(ctx context.Context, s *Store, lives []*life) error {
	const rowsPerInsert = 300
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	ms := func(t *time.Time) any {
		if t == nil {
			return nil
		}
		return t.UnixMilli()
	}
	insert := func(table, columns string, rows [][]any) error {
		if len(rows) == 0 {
			return nil
		}
		ph := "(?" + strings.Repeat(", ?", len(rows[0])-1) + ")"
		q := "INSERT INTO " + table + " (" + columns + ") VALUES " + ph + strings.Repeat(", "+ph, len(rows)-1)
		var args []any
		for _, r := range rows {
			args = append(args, r...)
		}
		_, err := tx.ExecContext(ctx, s.bind(q), args...)
		return err
	}
	now := s.now().UnixMilli()
	for chunk := range slices.Chunk(lives, rowsPerInsert) {
		var sessions, events [][]any
		for _, l := range chunk {
			ss := l.session()
			end, by, stopBy := EndFacts{}, Actor{}, Actor{}
			if ss.End != nil {
				end = *ss.End
			}
			if ss.RequestedBy != nil {
				by = *ss.RequestedBy
			}
			if ss.StopRequestedBy != nil {
				stopBy = *ss.StopRequestedBy
			}
			var exit any
			if end.ExitCode != nil {
				exit = int64(*end.ExitCode)
			}
			sessions = append(sessions, []any{
				ss.UID, ss.User, ss.Server, ss.Namespace, ss.Pod, ss.Profile, ss.Image, ss.Course, ss.GPUClass,
				ss.Reservation, ss.ReservationKind, ss.Started.UnixMilli(), ms(ss.RequestedAt), string(by.Kind), by.Name,
				ms(ss.CreatedAt), ms(ss.ScheduledAt), ss.Node, ms(ss.ReadyAt), ms(ss.StopRequestedAt), string(stopBy.Kind),
				stopBy.Name, ms(ss.EndedAt), string(ss.Stopper), end.Phase, end.Reason, end.Message,
				end.ContainerReason, exit, now,
			})
			for _, r := range l.records() {
				d, err := json.Marshal(detailOf(&r))
				if err != nil {
					return err
				}
				events = append(events, []any{r.UID, string(r.Kind), r.At.UnixMilli(), string(d)})
			}
		}
		if err := insert("sessions", sessionColumns+", updated_at", sessions); err != nil {
			return fmt.Errorf("sessions: %w", err)
		}
		for evs := range slices.Chunk(events, rowsPerInsert) {
			if err := insert("session_events", "uid, kind, at, detail", evs); err != nil {
				return fmt.Errorf("events: %w", err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	// As PostgreSQL's autovacuum would, and as SQLite's PRAGMA optimize does.
	_, err = s.db.ExecContext(ctx, "ANALYZE")
	return err
}

func TestBulkLoadMatchesRecord(t *testing.T) {
	lives := genLives(60, 1)
	eachBackend(t, func(t *testing.T, db testDB) {
		ctx := testCtx(t)
		recorded := db.open(t)
		record(t, recorded, lives...)
		bulk := newTestDB(t, db.backend).open(t)
		if err := bulkLoad(ctx, bulk, lives); err != nil {
			t.Fatal(err)
		}
		want, got := listAll(t, recorded, Filter{}, MaxLimit), listAll(t, bulk, Filter{}, MaxLimit)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("List (-recorded,+bulk):\n%s", diff)
		}
		for _, l := range lives {
			want, err := recorded.Events(ctx, l.id.UID)
			if err != nil {
				t.Fatal(err)
			}
			got, err := bulk.Events(ctx, l.id.UID)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Events of %s (-recorded,+bulk):\n%s", l.id.UID, diff)
			}
		}
	})
}

// BenchmarkList100k fills each store with 100,000 sessions once, then times
// the hub console's usual searches, reporting each query's p50 and p95 over
// a series of runs.
func BenchmarkList100k(b *testing.B) {
	const sessions = 100_000
	lives := genLives(sessions, 42)
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		b.Fatal(err)
	}
	// A user with sessions, and a course, to search for.
	user, course := lives[7].id.User, lives[7].id.Course
	window := Filter{Since: t0.Add(-31 * 24 * time.Hour), Until: t0.Add(-30 * 24 * time.Hour)}
	for _, backend := range backends {
		b.Run(backend, func(b *testing.B) {
			ctx := context.Background()
			s := newTestDB(b, backend).open(b)
			start := time.Now()
			if err := bulkLoad(ctx, s, lives); err != nil {
				b.Fatal(err)
			}
			b.Logf("%s: filled %d sessions in %v", backend, sessions, time.Since(start).Round(time.Millisecond))
			// The cursor of a deep page: the one after 50,000 sessions.
			deep := Page{Limit: 1000}
			for range 50 {
				p, err := s.List(ctx, Filter{}, deep)
				if err != nil {
					b.Fatal(err)
				}
				deep.Cursor = p.Next
			}
			deep.Limit = 50
			list := func(f Filter, p Page) func() (int, error) {
				return func() (int, error) {
					page, err := s.List(ctx, f, p)
					return len(page.Sessions), err
				}
			}
			byDay := func(f Filter) func() (int, error) {
				return func() (int, error) {
					days, err := s.EndedByDay(ctx, f, la)
					return len(days), err
				}
			}
			queries := []struct {
				name string
				run  func() (int, error)
			}{
				{"all/first-page", list(Filter{}, Page{Limit: 50})},
				{"all/deep-page", list(Filter{}, deep)},
				{"user", list(Filter{User: user}, Page{Limit: 50})},
				{"user+server", list(Filter{User: user, Server: new(string)}, Page{Limit: 50})},
				{"course+reason", list(Filter{Course: course, Reason: "evicted"}, Page{Limit: 50})},
				{"course+container-reason", list(Filter{Course: course, Reason: "OOMKilled"}, Page{Limit: 50})},
				{"reason", list(Filter{Reason: "preempted"}, Page{Limit: 50})},
				{"class+ended", list(Filter{Class: "a100", Ended: true}, Page{Limit: 50})},
				{"running", list(Filter{Running: true}, Page{Limit: 50})},
				// The servers list's recent stops: the sessions that ended in the last hour.
				{"ended/last-hour", list(Filter{Ended: true, Since: t0.Add(-time.Hour)}, Page{Limit: MaxLimit})},
				{"window/first-page", list(window, Page{Limit: 50})},
				{"window+course", list(Filter{Since: window.Since, Until: window.Until, Course: course}, Page{Limit: 50})},
				{"ended-by-day/90-days", byDay(Filter{})},
				{"ended-by-day/course", byDay(Filter{Course: course})},
			}
			for _, q := range queries {
				b.Run(q.name, func(b *testing.B) {
					const runs = 40
					var times []time.Duration
					rows := 0
					for range b.N {
						for range runs {
							start := time.Now()
							n, err := q.run()
							if err != nil {
								b.Fatal(err)
							}
							times = append(times, time.Since(start))
							rows = n
						}
					}
					slices.Sort(times)
					ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
					b.ReportMetric(ms(times[len(times)/2]), "p50-ms")
					b.ReportMetric(ms(times[len(times)*95/100]), "p95-ms")
					b.ReportMetric(float64(rows), "rows")
				})
			}
		})
	}
}

// BenchmarkRecord writes a spawn storm's session history as the recorder
// does, into SQLite, the embedded default store: an op is one Record call
// (one transaction) of the start records of 10 sessions (requested,
// created, scheduled, ready), about what the recorder gathers in its
// 100 ms window while 1,000 servers start in 10 s.
func BenchmarkRecord(b *testing.B) {
	const sessionsPerBatch = 10
	s := newTestDB(b, BackendSQLite).open(b)
	var batches [][]Record
	records := 0
	for chunk := range slices.Chunk(genLives(b.N*sessionsPerBatch, 7), sessionsPerBatch) {
		var batch []Record
		for _, l := range chunk {
			for _, r := range l.records() {
				switch r.Kind {
				case EventRequested, EventCreated, EventScheduled, EventReady:
					batch = append(batch, r)
				}
			}
		}
		records += len(batch)
		batches = append(batches, batch)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for _, batch := range batches {
		if err := s.Record(ctx, batch...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(records), "ns/record")
}
