package apiclienttest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/dsmlp/spawner/history"
)

// History is a fake of the session history store (hubapi.History).
type History struct {
	mu       sync.Mutex
	sessions []history.Session // newest first
}

func newHistory(now time.Time) *History {
	h := &History{sessions: fixtureSessions(now)}
	slices.SortStableFunc(h.sessions, func(a, b history.Session) int { return b.Started.Compare(a.Started) })
	return h
}

// Sessions returns every session, newest first.
func (h *History) Sessions() []history.Session {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.sessions)
}

func fixtureSessions(now time.Time) []history.Session {
	at := func(d time.Duration) *time.Time { return ago(now, d) }
	actor := func(k history.ActorKind, name string) *history.Actor { return &history.Actor{Kind: k, Name: name} }
	ended := func(s history.Session) history.Session {
		s.Why = history.Why(s, time.UTC)
		return s
	}
	out := []history.Session{
		{
			Identity: history.Identity{UID: "6f1c2a9e-5b7d-4c1e-9a55-3d2f0c1b7a11", User: "alice", Namespace: "jhub", Pod: "jupyter-alice",
				Profile: "cpu", Image: "quay.io/jupyter/minimal-notebook:2026-11-30", Course: "DSC10"},
			RequestedAt: at(5*time.Minute + 10*time.Second), RequestedBy: actor(history.ActorUser, "alice"),
			CreatedAt: at(5 * time.Minute), ScheduledAt: at(5*time.Minute - time.Second), Node: "local-runtime", ReadyAt: at(4*time.Minute + 50*time.Second),
			Started: now.Add(-5*time.Minute - 10*time.Second),
		},
		{
			Identity: history.Identity{UID: "0b9d4e21-77aa-4f0e-8c3b-5e6f7a8b9c02", User: "bob", Server: "gpu work", Namespace: "jhub", Pod: "jupyter-bob--gpu-20work",
				Profile: "gpu", Image: "quay.io/jupyter/pytorch-notebook:cuda12-2026-11-30", Course: "DSC10", GPUClass: "a5000",
				Reservation: "res-7", ReservationKind: "booking"},
			RequestedAt: at(70 * time.Second), RequestedBy: actor(history.ActorAdmin, "instructor"), CreatedAt: at(time.Minute),
			Started: now.Add(-70 * time.Second),
		},
		ended(history.Session{
			Identity: history.Identity{UID: "c4a1e0f3-2d6b-4b8a-a1e2-9f8e7d6c5b43", User: "carol", Namespace: "jhub", Pod: "jupyter-carol",
				Profile: "cpu", Image: "quay.io/jupyter/minimal-notebook:2026-11-30", Course: "DSC20"},
			RequestedAt: at(72 * time.Hour), RequestedBy: actor(history.ActorHub, ""), CreatedAt: at(72 * time.Hour), ScheduledAt: at(72 * time.Hour),
			Node: "local-runtime", ReadyAt: at(72*time.Hour - 20*time.Second), EndedAt: at(2 * time.Hour), Stopper: history.StopperEvicted,
			End:     &history.EndFacts{Phase: "Failed", Reason: "Evicted", Message: "The node was low on resource: memory.", ExitCode: ptr(137)},
			Started: now.Add(-72 * time.Hour),
		}),
		{
			Identity: history.Identity{UID: "d1e2f3a4-b5c6-4d7e-8f90-a1b2c3d4e5f6", User: "dave", Namespace: "dave", Pod: "jupyter-dave",
				Profile: "spark", Image: "quay.io/jupyter/pyspark-notebook:2026-11-30", Course: "DSC102"},
			RequestedAt: at(26 * time.Hour), RequestedBy: actor(history.ActorUser, "dave"), CreatedAt: at(26 * time.Hour),
			ScheduledAt: at(26 * time.Hour), Node: "local-runtime", ReadyAt: at(26*time.Hour - time.Minute),
			Started: now.Add(-26 * time.Hour),
		},
		// Every field set.
		ended(history.Session{
			Identity: history.Identity{UID: "e5f6a7b8-c9d0-4e1f-a2b3-c4d5e6f7a8b9", User: "erin", Namespace: "jhub", Pod: "jupyter-erin",
				Profile: "gpu", Image: "quay.io/jupyter/pytorch-notebook:cuda12-2026-11-30", Course: "DSC10", GPUClass: "a5000",
				Reservation: "res-5", ReservationKind: "on_demand"},
			RequestedAt: at(30 * time.Hour), RequestedBy: actor(history.ActorUser, "erin"), CreatedAt: at(30*time.Hour - 2*time.Second),
			ScheduledAt: at(30*time.Hour - 40*time.Second), Node: "local-runtime-gpu", ReadyAt: at(30*time.Hour - 55*time.Second),
			StopRequestedAt: at(24 * time.Hour), StopRequestedBy: actor(history.ActorCuller, "jupyterhub-idle-culler"),
			EndedAt: at(24*time.Hour - 3*time.Second), Stopper: history.StopperCuller,
			End: &history.EndFacts{Phase: "Succeeded", Reason: "Completed", Message: "the notebook server exited after SIGTERM",
				ContainerReason: "Completed", ExitCode: ptr(0)},
			Started: now.Add(-30 * time.Hour),
		}),
		ended(history.Session{
			Identity: history.Identity{UID: "a0b1c2d3-e4f5-4a6b-8c7d-9e0f1a2b3c4d", User: "grace", Server: "big data", Namespace: "jhub", Pod: "jupyter-grace--big-20data",
				Profile: "cpu", Image: "quay.io/jupyter/datascience-notebook:2026-11-30", Course: "DSC20"},
			RequestedAt: at(8 * time.Hour), RequestedBy: actor(history.ActorUser, "grace"), CreatedAt: at(8 * time.Hour),
			ScheduledAt: at(8 * time.Hour), Node: "local-runtime", ReadyAt: at(8*time.Hour - 15*time.Second),
			EndedAt: at(6 * time.Hour), Stopper: history.StopperOOM,
			End:     &history.EndFacts{Phase: "Failed", ContainerReason: "OOMKilled", Message: "the notebook container was OOM-killed", ExitCode: ptr(137)},
			Started: now.Add(-8 * time.Hour),
		}),
	}
	// frank: two pages of short sessions he stopped himself, one an hour.
	for i := range 150 {
		start := now.Add(-time.Duration(i+48) * time.Hour)
		end := start.Add(40 * time.Minute)
		out = append(out, ended(history.Session{
			Identity: history.Identity{UID: fmt.Sprintf("f0000000-0000-4000-8000-%012d", i), User: "frank", Namespace: "jhub", Pod: "jupyter-frank",
				Profile: "cpu", Image: "quay.io/jupyter/minimal-notebook:2026-11-30", Course: "DSC10"},
			RequestedAt: &start, RequestedBy: actor(history.ActorUser, "frank"), CreatedAt: ptr(start.Add(time.Second)),
			ScheduledAt: ptr(start.Add(time.Second)), Node: "local-runtime", ReadyAt: ptr(start.Add(10 * time.Second)),
			StopRequestedAt: ptr(end.Add(-time.Second)), StopRequestedBy: actor(history.ActorUser, "frank"),
			EndedAt: &end, Stopper: history.StopperUser, End: &history.EndFacts{Phase: "Succeeded", ExitCode: ptr(0)},
			Started: start,
		}))
	}
	return out
}

func (h *History) find(uid string) (history.Session, bool) {
	for _, s := range h.sessions {
		if s.UID == uid {
			return s, true
		}
	}
	return history.Session{}, false
}

// List implements hubapi.History; its cursors are offsets.
func (h *History) List(_ context.Context, f history.Filter, p history.Page) (history.SessionPage, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	from := 0
	if p.Cursor != "" {
		n, err := strconv.Atoi(p.Cursor)
		if err != nil || n < 0 {
			return history.SessionPage{}, history.ErrBadCursor
		}
		from = n
	}
	limit := p.Limit
	if limit <= 0 {
		limit = history.DefaultLimit
	}
	limit = min(limit, history.MaxLimit)
	var all []history.Session
	for _, s := range h.sessions {
		if f.Matches(s) {
			all = append(all, s)
		}
	}
	page := history.SessionPage{Sessions: []history.Session{}}
	if from < len(all) {
		page.Sessions = slices.Clone(all[from:min(from+limit, len(all))])
	}
	if from+limit < len(all) {
		page.Next = strconv.Itoa(from + limit)
	}
	return page, nil
}

// Get implements hubapi.History.
func (h *History) Get(_ context.Context, uid string) (history.Session, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.find(uid); ok {
		return s, nil
	}
	return history.Session{}, history.ErrNotFound
}

// Events implements hubapi.History: the timeline its session's fields tell.
func (h *History) Events(_ context.Context, uid string) ([]history.Event, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.find(uid)
	if !ok {
		return nil, nil
	}
	var out []history.Event
	add := func(kind history.EventKind, at *time.Time, e history.Event) {
		if at != nil {
			e.UID, e.Kind, e.At = uid, kind, *at
			out = append(out, e)
		}
	}
	add(history.EventRequested, s.RequestedAt, history.Event{By: s.RequestedBy})
	add(history.EventCreated, s.CreatedAt, history.Event{})
	add(history.EventScheduled, s.ScheduledAt, history.Event{Node: s.Node})
	add(history.EventReady, s.ReadyAt, history.Event{})
	add(history.EventStopRequested, s.StopRequestedAt, history.Event{By: s.StopRequestedBy})
	add(history.EventEnded, s.EndedAt, history.Event{Stopper: s.Stopper, End: s.End})
	return out, nil
}

// Last implements hubapi.History.
func (h *History) Last(_ context.Context, user, server string) (history.Session, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.sessions {
		if s.User == user && s.Server == server {
			return s, nil
		}
	}
	return history.Session{}, history.ErrNotFound
}
