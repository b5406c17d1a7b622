package history

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

const sessionColumns = `uid, user_name, server, namespace, pod, profile, image, course, gpu_class,
	reservation, reservation_kind, started_at, requested_at, requested_by_kind, requested_by_name,
	created_at, scheduled_at, node, ready_at, stop_requested_at, stop_requested_by_kind,
	stop_requested_by_name, ended_at, stopper, end_phase, end_reason, end_message,
	end_container_reason, end_exit_code`

// scanSession reads one row of sessionColumns, with Why in UTC.
func scanSession(row interface{ Scan(...any) error }) (Session, error) {
	var (
		s                                          Session
		started                                    int64
		requested, created, scheduled, ready       sql.NullInt64
		stopRequested, ended, exit                 sql.NullInt64
		reqKind, reqName, stopKind, stopName, stpr string
		end                                        EndFacts
	)
	err := row.Scan(&s.UID, &s.User, &s.Server, &s.Namespace, &s.Pod, &s.Profile, &s.Image, &s.Course, &s.GPUClass,
		&s.Reservation, &s.ReservationKind, &started, &requested, &reqKind, &reqName,
		&created, &scheduled, &s.Node, &ready, &stopRequested, &stopKind,
		&stopName, &ended, &stpr, &end.Phase, &end.Reason, &end.Message,
		&end.ContainerReason, &exit)
	if err != nil {
		return Session{}, err
	}
	s.Started = time.UnixMilli(started).UTC()
	s.RequestedAt, s.CreatedAt, s.ScheduledAt = millis(requested), millis(created), millis(scheduled)
	s.ReadyAt, s.StopRequestedAt, s.EndedAt = millis(ready), millis(stopRequested), millis(ended)
	if s.RequestedAt != nil && (reqKind != "" || reqName != "") {
		s.RequestedBy = &Actor{Kind: ActorKind(reqKind), Name: reqName}
	}
	if s.StopRequestedAt != nil && (stopKind != "" || stopName != "") {
		s.StopRequestedBy = &Actor{Kind: ActorKind(stopKind), Name: stopName}
	}
	if s.EndedAt != nil {
		s.Stopper = Stopper(stpr)
		if exit.Valid {
			code := int(exit.Int64)
			end.ExitCode = &code
		}
		if !endEmpty(end) {
			s.End = &end
		}
		s.Why = Why(s, time.UTC)
	}
	return s, nil
}

// Get returns the session of a pod UID, or ErrNotFound.
func (s *Store) Get(ctx context.Context, uid string) (Session, error) {
	row := s.db.QueryRowContext(ctx, s.bind(`SELECT `+sessionColumns+` FROM sessions WHERE uid = ?`), uid)
	sess, err := scanSession(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, fmt.Errorf("session %s: %w", uid, ErrNotFound)
	}
	if err != nil {
		return Session{}, fmt.Errorf("get session %s: %w", uid, err)
	}
	return sess, nil
}

// Last returns the newest session (by Started) of a user's server ("" the
// default server), or ErrNotFound.
func (s *Store) Last(ctx context.Context, user, server string) (Session, error) {
	row := s.db.QueryRowContext(ctx, s.bind(`SELECT `+sessionColumns+` FROM sessions
		WHERE user_name = ? AND server = ? ORDER BY started_at DESC, uid DESC LIMIT 1`), user, server)
	sess, err := scanSession(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, fmt.Errorf("last session of %s/%s: %w", user, server, ErrNotFound)
	}
	if err != nil {
		return Session{}, fmt.Errorf("last session of %s/%s: %w", user, server, err)
	}
	return sess, nil
}

// conditions turns the filter, but for its time window, into SQL
// conditions (over sessions' bare column names) and their arguments.
func (f Filter) conditions() (conds []string, args []any) {
	add := func(cond string, a ...any) {
		conds = append(conds, cond)
		args = append(args, a...)
	}
	if f.User != "" {
		add(`user_name = ?`, f.User)
	}
	if f.Server != nil {
		add(`server = ?`, *f.Server)
	}
	if f.Course != "" {
		add(`course = ?`, f.Course)
	}
	if f.Class != "" {
		add(`gpu_class = ?`, f.Class)
	}
	if f.Reason != "" {
		// One branch per index (see the migration); stoppers are lower case.
		r := strings.ToLower(f.Reason)
		add(`(stopper = ? OR lower(end_reason) = ? OR lower(end_container_reason) = ?)`, r, r, r)
	}
	if f.Ended {
		add(`ended_at IS NOT NULL`)
	}
	if f.Running {
		add(`ended_at IS NULL`)
	}
	return conds, args
}

// List returns one page of the sessions the filter selects, newest first
// (Started, then UID, descending). Page.Cursor is the previous page's Next;
// a cursor this store did not make is ErrBadCursor.
func (s *Store) List(ctx context.Context, f Filter, p Page) (SessionPage, error) {
	limit := pageSize(p.Limit)
	conds, args := f.conditions()
	switch {
	case f.Since.IsZero():
	case f.Ended:
		// Ended sessions only: the same window as a plain range, which
		// either planner can serve from sessions_ended when it is narrow.
		// The OR below hides it from SQLite's planner, which then reads
		// every session by start to find, say, the few hundred that ended
		// in the last hour (the servers list's recent stops): 0.5 ms
		// instead of 370 ms with 100,000 sessions.
		conds = append(conds, `ended_at >= ?`)
		args = append(args, f.Since.UnixMilli())
	default:
		conds = append(conds, `(ended_at IS NULL OR ended_at >= ?)`)
		args = append(args, f.Since.UnixMilli())
	}
	if !f.Until.IsZero() {
		conds = append(conds, `started_at < ?`)
		args = append(args, f.Until.UnixMilli())
	}
	if p.Cursor != "" {
		started, uid, err := decodeCursor(p.Cursor)
		if err != nil {
			return SessionPage{}, err
		}
		// Keyset: strictly after the previous page's last row. The first
		// term, implied by the second, lets both planners start the index
		// scan there.
		conds = append(conds, `started_at <= ? AND (started_at < ? OR uid < ?)`)
		args = append(args, started, started, uid)
	}
	q := `SELECT ` + sessionColumns + ` FROM sessions`
	if len(conds) > 0 {
		q += ` WHERE ` + strings.Join(conds, ` AND `)
	}
	q += ` ORDER BY started_at DESC, uid DESC LIMIT ?`
	args = append(args, limit+1) // one more tells whether a next page exists
	rows, err := s.db.QueryContext(ctx, s.bind(q), args...)
	if err != nil {
		return SessionPage{}, fmt.Errorf("list sessions: %w", err)
	}
	defer rows.Close()
	page := SessionPage{Sessions: make([]Session, 0, min(limit, 64))}
	for rows.Next() {
		sess, err := scanSession(rows)
		if err != nil {
			return SessionPage{}, fmt.Errorf("list sessions: %w", err)
		}
		page.Sessions = append(page.Sessions, sess)
	}
	if err := rows.Err(); err != nil {
		return SessionPage{}, fmt.Errorf("list sessions: %w", err)
	}
	if len(page.Sessions) > limit {
		page.Sessions = page.Sessions[:limit]
		last := page.Sessions[limit-1]
		page.Next = encodeCursor(last.Started.UnixMilli(), last.UID)
	}
	return page, nil
}

// pageSize is the page size a Page.Limit asks for.
func pageSize(limit int) int {
	switch {
	case limit <= 0:
		return DefaultLimit
	case limit > MaxLimit:
		return MaxLimit
	}
	return limit
}

// A cursor is the last row's sort key, versioned: "1:<started ms>:<uid>",
// base64url so that callers treat it as opaque.
const cursorVersion = "1"

func encodeCursor(started int64, uid string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorVersion + ":" + strconv.FormatInt(started, 10) + ":" + uid))
}

func decodeCursor(c string) (started int64, uid string, err error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	parts := strings.SplitN(string(raw), ":", 3)
	if len(parts) != 3 || parts[0] != cursorVersion || parts[2] == "" {
		return 0, "", fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	started, err = strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	return started, parts[2], nil
}

// Events returns a session's events in time order (ties in the life order
// of EventKinds), or ErrNotFound.
func (s *Store) Events(ctx context.Context, uid string) ([]Event, error) {
	rows, err := s.db.QueryContext(ctx, s.bind(`SELECT kind, at, detail FROM session_events WHERE uid = ?`), uid)
	if err != nil {
		return nil, fmt.Errorf("events of session %s: %w", uid, err)
	}
	defer rows.Close()
	var events []Event
	for rows.Next() {
		var (
			kind, detail string
			at           int64
			d            eventDetail
		)
		if err := rows.Scan(&kind, &at, &detail); err != nil {
			return nil, fmt.Errorf("events of session %s: %w", uid, err)
		}
		if err := json.Unmarshal([]byte(detail), &d); err != nil {
			return nil, fmt.Errorf("events of session %s: %s detail: %w", uid, kind, err)
		}
		events = append(events, Event{
			UID: uid, Kind: EventKind(kind), At: time.UnixMilli(at).UTC(),
			By: d.By, Node: d.Node, Stopper: d.Stopper, End: d.End,
		})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("events of session %s: %w", uid, err)
	}
	if len(events) == 0 {
		// Every session row is written with its first event.
		return nil, fmt.Errorf("events of session %s: %w", uid, ErrNotFound)
	}
	// Kubernetes stamps creation and conditions to the second, spawnerd
	// its own steps to the millisecond: within one second, the life's
	// order decides (a request at .5 s comes before the pod created "at"
	// .0 s).
	slices.SortFunc(events, func(a, b Event) int {
		return cmp.Or(a.At.Truncate(time.Second).Compare(b.At.Truncate(time.Second)),
			cmp.Compare(kindOrder(a.Kind), kindOrder(b.Kind)), a.At.Compare(b.At))
	})
	return events, nil
}

// kindOrder is a kind's place in EventKinds; unknown kinds go last.
func kindOrder(k EventKind) int {
	if i := slices.Index(EventKinds, k); i >= 0 {
		return i
	}
	return len(EventKinds)
}

// EndedByDay counts the sessions that ended, per day in loc (nil: UTC) and
// stopper, for charts. The filter's Since and Until bound the end time here
// (not the session's life); Running selects nothing. Days are in order,
// stoppers in the order of Stoppers within a day; days without an end are
// left out.
func (s *Store) EndedByDay(ctx context.Context, f Filter, loc *time.Location) ([]DayCount, error) {
	if loc == nil {
		loc = time.UTC
	}
	if f.Running {
		return nil, nil
	}
	// 1. The range of end times to count, for the time zone's changes.
	var lo, hi sql.NullInt64
	// Two subqueries: SQLite reads one end of an index for a lone MIN or
	// MAX only.
	const bounds = `SELECT (SELECT MIN(ended_at) FROM sessions WHERE ended_at IS NOT NULL),
		(SELECT MAX(ended_at) FROM sessions WHERE ended_at IS NOT NULL)`
	if err := s.db.QueryRowContext(ctx, bounds).Scan(&lo, &hi); err != nil {
		return nil, fmt.Errorf("sessions ended per day: %w", err)
	}
	if !lo.Valid {
		return nil, nil
	}
	from, to := lo.Int64, hi.Int64+1 // [from, to)
	if !f.Since.IsZero() {
		from = max(from, f.Since.UnixMilli())
	}
	if !f.Until.IsZero() {
		to = min(to, f.Until.UnixMilli())
	}
	if from >= to {
		return nil, nil
	}
	// 2. The local day of an end is (ended_at + loc's UTC offset then) / 1
	// day; the offset changes with daylight saving time, so it is a CASE
	// over the changes in the range (SQLite knows no time zones). One
	// query, a scan and a GROUP BY: no range condition but the filter's,
	// so that the planner drives it from the filter's index.
	offset := func(ms int64) int64 {
		_, off := time.UnixMilli(ms).In(loc).Zone()
		return int64(off) * 1000
	}
	var whens []string
	var args []any
	for at := from; at < to; {
		_, zoneEnd := time.UnixMilli(at).In(loc).ZoneBounds()
		e := zoneEnd.UnixMilli()
		if zoneEnd.IsZero() || e <= at || e >= to {
			break
		}
		whens = append(whens, ` WHEN ended_at < ? THEN CAST(? AS BIGINT)`)
		args = append(args, e, offset(at))
		at = e
	}
	// PostgreSQL types a parameter in a CASE as text but for the cast.
	day := `(ended_at + CAST(? AS BIGINT)) / 86400000`
	if len(whens) > 0 {
		day = `(ended_at + CASE` + strings.Join(whens, ``) + ` ELSE CAST(? AS BIGINT) END) / 86400000`
	}
	args = append(args, offset(to-1))
	conds, fargs := f.conditions()
	conds = append(conds, `ended_at IS NOT NULL`)
	args = append(args, fargs...)
	if !f.Since.IsZero() {
		conds = append(conds, `ended_at >= ?`)
		args = append(args, f.Since.UnixMilli())
	}
	if !f.Until.IsZero() {
		conds = append(conds, `ended_at < ?`)
		args = append(args, f.Until.UnixMilli())
	}
	q := `SELECT ` + day + ` AS day, stopper, COUNT(*) FROM sessions
		WHERE ` + strings.Join(conds, ` AND `) + ` GROUP BY day, stopper`
	rows, err := s.db.QueryContext(ctx, s.bind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("sessions ended per day: %w", err)
	}
	defer rows.Close()
	var out []DayCount
	for rows.Next() {
		var (
			c   DayCount
			day int64 // days since 1970-01-01, local
		)
		if err := rows.Scan(&day, &c.Stopper, &c.Count); err != nil {
			return nil, fmt.Errorf("sessions ended per day: %w", err)
		}
		c.Day = time.Unix(day*86400, 0).UTC().Format(time.DateOnly)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sessions ended per day: %w", err)
	}
	slices.SortFunc(out, func(a, b DayCount) int {
		return cmp.Or(strings.Compare(a.Day, b.Day), cmp.Compare(stopperOrder(a.Stopper), stopperOrder(b.Stopper)),
			strings.Compare(string(a.Stopper), string(b.Stopper)))
	})
	return out, nil
}

// stopperOrder is a stopper's place in Stoppers; unknown ones go last.
func stopperOrder(s Stopper) int {
	if i := slices.Index(Stoppers, s); i >= 0 {
		return i
	}
	return len(Stoppers)
}

// defaultPurgeBatch bounds one DELETE, so that a large purge does not
// hold SQLite's write lock (and the other replicas' records) for long.
const defaultPurgeBatch = 1000

// Purge deletes the sessions that ended before endedBefore, with their
// events, and returns how many sessions it deleted.
func (s *Store) Purge(ctx context.Context, endedBefore time.Time) (int64, error) {
	q := s.bind(`DELETE FROM sessions WHERE uid IN
		(SELECT uid FROM sessions WHERE ended_at < ? LIMIT ?)`)
	var total int64
	for {
		res, err := s.db.ExecContext(ctx, q, endedBefore.UnixMilli(), s.purgeBatch)
		if err != nil {
			return total, fmt.Errorf("purge sessions ended before %s: %w", endedBefore.UTC().Format(time.RFC3339), err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("purge sessions: %w", err)
		}
		total += n
		if n < int64(s.purgeBatch) {
			if total > 0 {
				s.optimize(ctx)
			}
			return total, nil
		}
	}
}
