package bench_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dsmlp/spawner/history"
)

// The history a term leaves: historySessions sessions of historyUsers
// users over historyDays days, in historyCourses courses, a quarter of
// them on one of three GPU classes, every stopper; recentStops of them
// ended within the last hour (the end of a class), so that the servers
// list shows that many stopped servers beside the running ones.
const (
	historySessions = 100_000
	historyUsers    = 5000
	historyCourses  = 40
	historyDays     = 90
	recentStops     = 400
)

var gpuClasses = []string{"a5000", "a100", "h100"}

// courseNames are historyCourses course codes; DSC10, the benchmark's
// notebook configuration's course, is the first.
func courseNames() []string {
	var out []string
	for _, dept := range []string{"DSC", "COGS", "CSE", "MATH", "ECE"} {
		for j := range historyCourses / 5 {
			out = append(out, dept+strconv.Itoa(10+13*j))
		}
	}
	return out
}

// historyUser names users as users("s", n) names the live servers' users,
// so that live servers and history overlap as on the platform.
func historyUser(i int) string { return fmt.Sprintf("s%04d", i) }

// stopperWheel draws stoppers by weight, per 1,000 ends: the culler and the
// users most, a few evictions and OOM kills, rarely a reservation change.
func stopperWheel() []history.Stopper {
	weights := map[history.Stopper]int{
		history.StopperCuller: 400, history.StopperUser: 250, history.StopperHub: 50, history.StopperAdmin: 20,
		history.StopperService: 10, history.StopperStartTimeout: 20, history.StopperEvicted: 60, history.StopperOOM: 60,
		history.StopperContainerExit: 70, history.StopperNodeLost: 10, history.StopperDeleted: 20, history.StopperPreempted: 20,
		history.StopperReservationCancelled: 5, history.StopperReservationReassigned: 5,
	}
	var wheel []history.Stopper
	for _, st := range history.Stoppers {
		for range weights[st] {
			wheel = append(wheel, st)
		}
	}
	return wheel
}

// hourWeights make starts follow a student's day: few at night, most in
// the afternoon and evening.
var hourWeights = [24]int{2, 1, 1, 1, 1, 1, 2, 4, 8, 10, 12, 12, 12, 14, 14, 14, 12, 10, 10, 12, 12, 10, 8, 4}

// pastSession is one ended session as spawnerd records it.
type pastSession struct {
	uid, user, server, course, class, reservation, kind, node, profile, image string
	requested, created, scheduled, ready, stopRequested, ended                time.Time
	requestedBy, stopRequestedBy                                              history.Actor
	stopper                                                                   history.Stopper
	end                                                                       history.EndFacts
}

// pastSessions makes n ended sessions before now; the newest recent of
// them ended within the last 45 minutes, the others more than an hour ago.
func pastSessions(n, recent int, now time.Time, seed uint64) []pastSession {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	courses := courseNames()
	wheel := stopperWheel()
	var hours []int
	for h, w := range hourWeights {
		for range w {
			hours = append(hours, h)
		}
	}
	out := make([]pastSession, n)
	for i := range out {
		u := rng.IntN(historyUsers)
		user := historyUser(u)
		// Each student takes two courses and works mostly in the first.
		course := courses[u%historyCourses]
		if rng.IntN(3) == 0 {
			course = courses[(u*7+3)%historyCourses]
		}
		s := pastSession{uid: uuid(rng), user: user, course: course, profile: "cpu",
			image: "ucsdets/datascience-notebook:2026.1", node: fmt.Sprintf("cpu-%02d", rng.IntN(60))}
		if rng.IntN(4) == 0 {
			s.server, s.profile, s.image = "gpu", "gpu", "ucsdets/scipy-ml-notebook:2026.1"
			s.class = gpuClasses[rng.IntN(len(gpuClasses))]
			s.kind = []string{"booking", "on_demand", "best_effort"}[rng.IntN(3)]
			s.reservation = fmt.Sprintf("bk-%s-w%d", course, rng.IntN(12))
			s.node = fmt.Sprintf("gpu-%s-%d", s.class, rng.IntN(8))
		}
		run := 5*time.Minute + time.Duration(rng.Int64N(int64(6*time.Hour)))
		if i < recent {
			s.ended = now.Add(-time.Minute - time.Duration(rng.Int64N(int64(44*time.Minute))))
		} else {
			// A day of the term and an hour of that day; the end at least
			// an hour before now.
			day := now.Add(-time.Duration(1+rng.IntN(historyDays-1)) * 24 * time.Hour)
			start := time.Date(day.Year(), day.Month(), day.Day(), hours[rng.IntN(len(hours))], rng.IntN(60), rng.IntN(60), 0, time.UTC)
			s.ended = start.Add(run)
			if latest := now.Add(-time.Hour - time.Duration(rng.Int64N(int64(time.Hour)))); s.ended.After(latest) {
				s.ended = latest
			}
		}
		s.ended = s.ended.Truncate(time.Millisecond)
		s.requested = s.ended.Add(-run)
		s.requestedBy = history.Actor{Kind: history.ActorUser, Name: user}
		s.created = s.requested.Add(300 * time.Millisecond)
		s.scheduled = s.created.Add(time.Second)
		s.ready = s.created.Add(20*time.Second + time.Duration(rng.IntN(40))*time.Second)
		s.stopper = wheel[rng.IntN(len(wheel))]
		switch s.stopper {
		case history.StopperUser:
			s.stopRequestedBy = history.Actor{Kind: history.ActorUser, Name: user}
		case history.StopperAdmin:
			s.stopRequestedBy = history.Actor{Kind: history.ActorAdmin, Name: fmt.Sprintf("admin%d", rng.IntN(5))}
		case history.StopperCuller:
			s.stopRequestedBy = history.Actor{Kind: history.ActorCuller, Name: "idle-culler"}
		case history.StopperService:
			s.stopRequestedBy = history.Actor{Kind: history.ActorService, Name: "grader"}
		case history.StopperHub:
			s.stopRequestedBy = history.Actor{Kind: history.ActorHub}
		case history.StopperStartTimeout:
			s.ready = time.Time{}
			s.end = history.EndFacts{Phase: "Pending", Message: "pod not ready within 300s"}
		case history.StopperEvicted:
			s.end = history.EndFacts{Phase: "Failed", Reason: "Evicted", Message: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 58Mi.", ExitCode: ptrInt(137)}
		case history.StopperOOM:
			s.end = history.EndFacts{Phase: "Running", ContainerReason: "OOMKilled", ExitCode: ptrInt(137)}
		case history.StopperContainerExit:
			s.end = history.EndFacts{Phase: "Failed", ContainerReason: "Error", ExitCode: ptrInt(1 + rng.IntN(2))}
		case history.StopperNodeLost:
			s.end = history.EndFacts{Phase: "Failed", Reason: "NodeLost", Message: "Node " + s.node + " which was running pod is unresponsive"}
		case history.StopperDeleted:
			s.end = history.EndFacts{Phase: "Running"}
		case history.StopperPreempted, history.StopperReservationCancelled, history.StopperReservationReassigned:
			s.end = history.EndFacts{Reason: "Preempted", Message: "booking " + s.reservation + " needs the GPUs"}
		}
		if s.stopRequestedBy != (history.Actor{}) {
			s.stopRequested = s.ended.Add(-time.Second)
		}
		out[i] = s
	}
	return out
}

func ptrInt(i int) *int { return &i }

func uuid(rng *rand.Rand) string {
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", rng.Uint32(), rng.IntN(1<<16), rng.IntN(1<<12), rng.IntN(1<<12), rng.Uint64()>>16)
}

// fillHistory creates the history's schema at dsn with history.Open, then
// writes sessions straight into its tables, hundreds of rows per INSERT in
// one transaction: a Record per event would take many minutes. The rows are
// what Record writes for the same events (history's TestBulkLoadMatchesRecord
// checks the same mapping), and the planner statistics are refreshed as a
// running store's would be.
func fillHistory(ctx context.Context, dsn string, sessions []pastSession) error {
	store, err := history.Open(ctx, dsn, history.Options{})
	if err != nil {
		return err
	}
	backend := store.Backend()
	if err := store.Close(); err != nil {
		return err
	}
	driver, name := "pgx", dsn
	if backend == history.BackendSQLite {
		driver, name = "sqlite", strings.TrimPrefix(dsn, "sqlite://")+"?_pragma=busy_timeout(5000)"
	}
	db, err := sql.Open(driver, name)
	if err != nil {
		return err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	insert := func(table, columns string, rows [][]any) error {
		if len(rows) == 0 {
			return nil
		}
		var q strings.Builder
		q.WriteString("INSERT INTO " + table + " (" + columns + ") VALUES ")
		args := make([]any, 0, len(rows)*len(rows[0]))
		for i, r := range rows {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteByte('(')
			for j := range r {
				if j > 0 {
					q.WriteString(", ")
				}
				if backend == history.BackendPostgres {
					q.WriteString("$" + strconv.Itoa(len(args)+j+1))
				} else {
					q.WriteByte('?')
				}
			}
			q.WriteByte(')')
			args = append(args, r...)
		}
		_, err := tx.ExecContext(ctx, q.String(), args...)
		return err
	}
	ms := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t.UnixMilli()
	}
	type detail struct {
		By      *history.Actor    `json:"by,omitempty"`
		Node    string            `json:"node,omitempty"`
		Stopper history.Stopper   `json:"stopper,omitempty"`
		End     *history.EndFacts `json:"end,omitempty"`
	}
	now := time.Now().UnixMilli()
	const perInsert = 250
	for chunk := range slices.Chunk(sessions, perInsert) {
		var rows, events [][]any
		for _, s := range chunk {
			var exit any
			if s.end.ExitCode != nil {
				exit = int64(*s.end.ExitCode)
			}
			rows = append(rows, []any{s.uid, s.user, s.server, "jupyter", "jupyter-" + s.user + suffix(s.server), s.profile, s.image,
				s.course, s.class, s.reservation, s.kind, s.requested.UnixMilli(), ms(s.requested), string(s.requestedBy.Kind),
				s.requestedBy.Name, ms(s.created), ms(s.scheduled), s.node, ms(s.ready), ms(s.stopRequested),
				string(s.stopRequestedBy.Kind), s.stopRequestedBy.Name, ms(s.ended), string(s.stopper), s.end.Phase,
				s.end.Reason, s.end.Message, s.end.ContainerReason, exit, now})
			event := func(kind history.EventKind, at time.Time, d detail) error {
				if at.IsZero() {
					return nil
				}
				text, err := json.Marshal(d)
				if err != nil {
					return err
				}
				events = append(events, []any{s.uid, string(kind), at.UnixMilli(), string(text)})
				return nil
			}
			end := s.end
			var endp *history.EndFacts
			if end != (history.EndFacts{}) {
				endp = &end
			}
			var stopBy *history.Actor
			if s.stopRequestedBy != (history.Actor{}) {
				stopBy = &s.stopRequestedBy
			}
			for _, err := range []error{
				event(history.EventRequested, s.requested, detail{By: &s.requestedBy}),
				event(history.EventCreated, s.created, detail{}),
				event(history.EventScheduled, s.scheduled, detail{Node: s.node}),
				event(history.EventReady, s.ready, detail{}),
				event(history.EventStopRequested, s.stopRequested, detail{By: stopBy}),
				event(history.EventEnded, s.ended, detail{Stopper: s.stopper, End: endp}),
			} {
				if err != nil {
					return err
				}
			}
		}
		if err := insert("sessions", sessionColumns, rows); err != nil {
			return fmt.Errorf("inserting sessions: %w", err)
		}
		for evs := range slices.Chunk(events, perInsert) {
			if err := insert("session_events", "uid, kind, at, detail", evs); err != nil {
				return fmt.Errorf("inserting session events: %w", err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, "ANALYZE")
	return err
}

func suffix(server string) string {
	if server == "" {
		return ""
	}
	return "--" + server
}

// sessionColumns are the sessions table's columns in the order
// fillHistory gives them.
const sessionColumns = `uid, user_name, server, namespace, pod, profile, image, course, gpu_class,
	reservation, reservation_kind, started_at, requested_at, requested_by_kind, requested_by_name,
	created_at, scheduled_at, node, ready_at, stop_requested_at, stop_requested_by_kind,
	stop_requested_by_name, ended_at, stopper, end_phase, end_reason, end_message,
	end_container_reason, end_exit_code, updated_at`

// liveSessions counts the history's sessions that have not ended and
// were seen ready: spawnerd records its running servers as it sees them.
func liveSessions(ctx context.Context, dsn string) (int, error) {
	return countQuery(ctx, dsn, `SELECT COUNT(*) FROM sessions WHERE ended_at IS NULL AND ready_at IS NOT NULL`)
}

// countQuery runs a COUNT query on the history at dsn, beside spawnerd.
func countQuery(ctx context.Context, dsn, query string) (int, error) {
	driver, name := "pgx", dsn
	if !strings.HasPrefix(dsn, "postgres") {
		driver, name = "sqlite", strings.TrimPrefix(dsn, "sqlite://")+"?_pragma=busy_timeout(5000)"
	}
	db, err := sql.Open(driver, name)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int
	err = db.QueryRowContext(ctx, query).Scan(&n)
	return n, err
}
