package history

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// identityColumns are the sessions columns of Identity (but UID), in the
// order identityValues gives them.
var identityColumns = []string{
	"user_name", "server", "namespace", "pod", "profile", "image",
	"course", "gpu_class", "reservation", "reservation_kind",
}

func identityValues(id Identity) []any {
	return []any{
		id.User, id.Server, id.Namespace, id.Pod, id.Profile, id.Image,
		id.Course, id.GPUClass, id.Reservation, id.ReservationKind,
	}
}

// upsertSession creates a session's row, or fills the identity columns
// that are still empty from a record that knows them; a no-op otherwise
// (the WHERE keeps updated_at as it was).
var upsertSession = func() string {
	var set, changed []string
	for _, c := range identityColumns {
		set = append(set, fmt.Sprintf("%[1]s = CASE WHEN sessions.%[1]s = '' THEN excluded.%[1]s ELSE sessions.%[1]s END", c))
		changed = append(changed, fmt.Sprintf("(sessions.%[1]s = '' AND excluded.%[1]s <> '')", c))
	}
	return "INSERT INTO sessions (uid, " + strings.Join(identityColumns, ", ") + ", started_at, updated_at)" +
		" VALUES (?" + strings.Repeat(", ?", len(identityColumns)+2) + ")" +
		" ON CONFLICT (uid) DO UPDATE SET " + strings.Join(set, ", ") + ", updated_at = excluded.updated_at" +
		" WHERE " + strings.Join(changed, " OR ")
}()

const insertEvent = `INSERT INTO session_events (uid, kind, at, detail) VALUES (?, ?, ?, ?) ON CONFLICT (uid, kind) DO NOTHING`

// recordQueries are the statements Record runs.
func recordQueries() []string {
	qs := []string{upsertSession, insertEvent, moveStartFromOrigin, moveStartProvisional}
	for _, q := range eventUpdates {
		qs = append(qs, q)
	}
	return qs
}

// moveStartFromOrigin and moveStartProvisional keep started_at the earlier
// of requested_at and created_at, or, until one of them is recorded, the
// earliest record's time. They run before the kind's own columns are set,
// so they read the row as it was, and they write only when started_at
// moves: six indexes hold started_at, and a record that left it in its SET
// would rewrite all of them (a spawn's scheduled and ready records, and
// mostly its created one, change no indexed column at all).
// Arguments: at, uid, at, at.
const (
	moveStartFromOrigin  = `UPDATE sessions SET started_at = ? WHERE uid = ? AND started_at <> ? AND ((requested_at IS NULL AND created_at IS NULL) OR started_at > ?)`
	moveStartProvisional = `UPDATE sessions SET started_at = ? WHERE uid = ? AND started_at <> ? AND requested_at IS NULL AND created_at IS NULL AND started_at > ?`
)

// moveStart is the started_at statement of each kind: requested_at and
// created_at are the session's origin, any other record only stands in for
// it until one of them is recorded.
func moveStart(k EventKind) string {
	if k == EventRequested || k == EventCreated {
		return moveStartFromOrigin
	}
	return moveStartProvisional
}

// eventUpdates set a session's columns of each kind, from the first record
// of that kind. Arguments: the kind's own (see eventArgs), updated_at, uid.
var eventUpdates = map[EventKind]string{
	EventRequested:     eventUpdate(`requested_at = ?, requested_by_kind = ?, requested_by_name = ?`),
	EventCreated:       eventUpdate(`created_at = ?`),
	EventScheduled:     eventUpdate(`scheduled_at = ?, node = ?`),
	EventReady:         eventUpdate(`ready_at = ?`),
	EventStopRequested: eventUpdate(`stop_requested_at = ?, stop_requested_by_kind = ?, stop_requested_by_name = ?`),
	EventEnded: eventUpdate(`ended_at = ?, stopper = ?, end_phase = ?, end_reason = ?, end_message = ?, end_container_reason = ?, ` +
		`end_exit_code = ?`),
}

func eventUpdate(set string) string {
	return `UPDATE sessions SET ` + set + `, updated_at = ? WHERE uid = ?`
}

func eventArgs(r *Record) []any {
	at := r.At.UnixMilli()
	switch r.Kind {
	case EventRequested, EventStopRequested:
		return []any{at, string(r.By.Kind), r.By.Name}
	case EventScheduled:
		return []any{at, r.Node}
	case EventEnded:
		var exit any
		if r.End.ExitCode != nil {
			exit = int64(*r.End.ExitCode)
		}
		return []any{at, string(r.Stopper), r.End.Phase, r.End.Reason, r.End.Message, r.End.ContainerReason, exit}
	}
	return []any{at}
}

// eventDetail is session_events.detail: the kind's own data.
type eventDetail struct {
	By      *Actor    `json:"by,omitempty"`
	Node    string    `json:"node,omitempty"`
	Stopper Stopper   `json:"stopper,omitempty"`
	End     *EndFacts `json:"end,omitempty"`
}

func detailOf(r *Record) eventDetail {
	switch r.Kind {
	case EventRequested, EventStopRequested:
		if r.By != (Actor{}) {
			by := r.By
			return eventDetail{By: &by}
		}
	case EventScheduled:
		return eventDetail{Node: r.Node}
	case EventEnded:
		d := eventDetail{Stopper: r.Stopper}
		if !endEmpty(r.End) {
			end := r.End
			d.End = &end
		}
		return d
	}
	return eventDetail{}
}

func endEmpty(e EndFacts) bool {
	return e.Phase == "" && e.Reason == "" && e.Message == "" && e.ContainerReason == "" && e.ExitCode == nil
}

// validate names the first missing or wrong field of records[i].
func validate(i int, r *Record) error {
	field := ""
	switch {
	case r.UID == "":
		field = "UID"
	case r.User == "":
		field = "User"
	case r.Kind == "":
		field = "Kind"
	case !slices.Contains(EventKinds, r.Kind):
		return fmt.Errorf("%w: records[%d].Kind: unknown event kind %q", ErrInvalid, i, r.Kind)
	case r.At.IsZero():
		field = "At"
	case r.Kind == EventEnded && r.Stopper == "":
		return fmt.Errorf("%w: records[%d].Stopper: required for an %s record", ErrInvalid, i, EventEnded)
	default:
		return nil
	}
	return fmt.Errorf("%w: records[%d].%s: required", ErrInvalid, i, field)
}

// Record writes records in one transaction, idempotently per (UID, Kind):
// the first record of a kind wins and a repeat is a no-op. The first record
// of a UID creates its session; identity fields recorded empty are filled
// by later records that carry them, never overwritten once set. Times are
// kept to the millisecond.
func (s *Store) Record(ctx context.Context, recs ...Record) error {
	for i := range recs {
		if err := validate(i, &recs[i]); err != nil {
			return err
		}
	}
	if len(recs) == 0 {
		return nil
	}
	// Rows are written in UID order so that two concurrent calls lock them
	// in the same order (no deadlock); a UID's records keep their order.
	order := make([]int, len(recs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(recs[a].UID, recs[b].UID) })

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record session events: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	w := &recordTx{tx: tx, s: s, now: s.now().UnixMilli()}
	defer w.close()
	for _, i := range order {
		r := &recs[i]
		if err := w.record(ctx, r); err != nil {
			return fmt.Errorf("record %s event of session %s: %w", r.Kind, r.UID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record session events: commit: %w", err)
	}
	return nil
}

// recordTx writes the records of one Record call.
type recordTx struct {
	tx  *sql.Tx
	s   *Store
	now int64
	// stmts are the store's statements bound to this transaction, by
	// query. PostgreSQL's driver caches prepared statements itself.
	stmts map[string]*sql.Stmt
}

func (w *recordTx) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	query = w.s.bind(query)
	if w.s.backend != BackendSQLite {
		return w.tx.ExecContext(ctx, query, args...)
	}
	st, ok := w.stmts[query]
	if !ok {
		shared, ok := w.s.stmts[query]
		if !ok {
			return nil, fmt.Errorf("statement not prepared at open: %.40q", query)
		}
		st = w.tx.StmtContext(ctx, shared)
		if w.stmts == nil {
			w.stmts = make(map[string]*sql.Stmt)
		}
		w.stmts[query] = st
	}
	return st.ExecContext(ctx, args...)
}

// close releases the transaction's hold on the statements; the store keeps
// them compiled.
func (w *recordTx) close() {
	for _, st := range w.stmts {
		_ = st.Close()
	}
}

func (w *recordTx) record(ctx context.Context, r *Record) error {
	at := r.At.UnixMilli()
	args := append(append([]any{r.UID}, identityValues(r.Identity)...), at, w.now)
	if _, err := w.exec(ctx, upsertSession, args...); err != nil {
		return fmt.Errorf("session: %w", err)
	}
	detail, err := json.Marshal(detailOf(r))
	if err != nil {
		return fmt.Errorf("detail: %w", err)
	}
	res, err := w.exec(ctx, insertEvent, r.UID, string(r.Kind), at, string(detail))
	if err != nil {
		return fmt.Errorf("event: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("event: %w", err)
	}
	if n == 0 {
		return nil // recorded before: the first record of a kind wins
	}
	if _, err := w.exec(ctx, moveStart(r.Kind), at, r.UID, at, at); err != nil {
		return fmt.Errorf("session start: %w", err)
	}
	args = append(eventArgs(r), w.now, r.UID)
	if _, err := w.exec(ctx, eventUpdates[r.Kind], args...); err != nil {
		return fmt.Errorf("session columns: %w", err)
	}
	return nil
}

// Recorded returns, for each of uids that has a session, the kinds
// recorded so far, so that a replica taking over can skip what is written.
func (s *Store) Recorded(ctx context.Context, uids []string) (map[string]map[EventKind]bool, error) {
	out := make(map[string]map[EventKind]bool)
	for chunk := range slices.Chunk(uids, 500) {
		q := `SELECT uid, kind FROM session_events WHERE uid IN (?` + strings.Repeat(", ?", len(chunk)-1) + `)`
		args := make([]any, len(chunk))
		for i, u := range chunk {
			args[i] = u
		}
		rows, err := s.db.QueryContext(ctx, s.bind(q), args...)
		if err != nil {
			return nil, fmt.Errorf("list recorded events: %w", err)
		}
		for rows.Next() {
			var uid, kind string
			if err := rows.Scan(&uid, &kind); err != nil {
				rows.Close()
				return nil, fmt.Errorf("list recorded events: %w", err)
			}
			if out[uid] == nil {
				out[uid] = make(map[EventKind]bool)
			}
			out[uid][EventKind(kind)] = true
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("list recorded events: %w", err)
		}
	}
	return out, nil
}

// millis is a nullable unix-milliseconds column as a time.
func millis(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := time.UnixMilli(v.Int64).UTC()
	return &t
}
