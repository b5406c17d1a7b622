package history

import (
	"time"
)

// t0 is the tests' reference time.
var t0 = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

// life describes one whole session, for tests; records turns it into what
// spawnerd would record. Zero times leave their event out.
type life struct {
	id                            Identity
	requested, created, scheduled time.Time
	ready, stopRequested, ended   time.Time
	requestedBy, stopRequestedBy  Actor
	node                          string
	stopper                       Stopper
	end                           EndFacts
}

// newLife is a session of user's server started at start that runs to
// ready (no end).
func newLife(uid, user, server string, start time.Time) *life {
	return &life{
		id: Identity{
			UID: uid, User: user, Server: server, Namespace: "jupyter",
			Pod: "jupyter-" + user, Profile: "cpu", Image: "ucsd/datascience:2026.4",
		},
		requested:   start,
		created:     start.Add(time.Second),
		scheduled:   start.Add(2 * time.Second),
		ready:       start.Add(30 * time.Second),
		requestedBy: Actor{Kind: ActorUser, Name: user},
		node:        "node-1",
	}
}

func (l *life) course(c string) *life { l.id.Course = c; return l }

func (l *life) gpu(class, reservation, kind string) *life {
	l.id.GPUClass, l.id.Reservation, l.id.ReservationKind = class, reservation, kind
	return l
}

// endedBy ends the session at t; a hub-side stopper also gets its
// stop-requested record a second before.
func (l *life) endedBy(st Stopper, at time.Time, by Actor, facts EndFacts) *life {
	l.stopper, l.ended, l.end = st, at, facts
	if by != (Actor{}) {
		l.stopRequested, l.stopRequestedBy = at.Add(-time.Second), by
	}
	return l
}

func (l *life) records() []Record {
	var out []Record
	add := func(k EventKind, at time.Time, edit func(*Record)) {
		if at.IsZero() {
			return
		}
		r := Record{Identity: l.id, Kind: k, At: at}
		if edit != nil {
			edit(&r)
		}
		out = append(out, r)
	}
	add(EventRequested, l.requested, func(r *Record) { r.By = l.requestedBy })
	add(EventCreated, l.created, nil)
	add(EventScheduled, l.scheduled, func(r *Record) { r.Node = l.node })
	add(EventReady, l.ready, nil)
	add(EventStopRequested, l.stopRequested, func(r *Record) { r.By = l.stopRequestedBy })
	add(EventEnded, l.ended, func(r *Record) { r.Stopper, r.End = l.stopper, l.end })
	return out
}

// session is what the store should return for the life.
func (l *life) session() Session {
	s := Session{Identity: l.id}
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		t = t.UTC()
		return &t
	}
	s.RequestedAt, s.CreatedAt, s.ScheduledAt = opt(l.requested), opt(l.created), opt(l.scheduled)
	s.ReadyAt, s.StopRequestedAt, s.EndedAt = opt(l.ready), opt(l.stopRequested), opt(l.ended)
	if s.RequestedAt != nil && l.requestedBy != (Actor{}) {
		by := l.requestedBy
		s.RequestedBy = &by
	}
	if s.StopRequestedAt != nil && l.stopRequestedBy != (Actor{}) {
		by := l.stopRequestedBy
		s.StopRequestedBy = &by
	}
	if s.ScheduledAt != nil {
		s.Node = l.node
	}
	switch {
	case s.RequestedAt != nil && s.CreatedAt != nil:
		s.Started = *s.RequestedAt
		if s.CreatedAt.Before(s.Started) {
			s.Started = *s.CreatedAt
		}
	case s.RequestedAt != nil:
		s.Started = *s.RequestedAt
	case s.CreatedAt != nil:
		s.Started = *s.CreatedAt
	}
	if s.EndedAt != nil {
		s.Stopper = l.stopper
		if !endEmpty(l.end) {
			end := l.end
			s.End = &end
		}
		s.Why = Why(s, time.UTC)
	}
	return s
}

func intp(i int) *int { return &i }
