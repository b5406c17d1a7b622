package console

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/reservation"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fakeServers serves a fixed list; ServerWithEvents finds a server in it.
type fakeServers struct {
	mu      sync.Mutex
	servers []*lifecycle.Server
	events  map[lifecycle.Key][]lifecycle.EventSummary
	lists   int
}

func (f *fakeServers) List() []*lifecycle.Server {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	return slices.Clone(f.servers)
}

func (f *fakeServers) ServerWithEvents(key lifecycle.Key, max int) *lifecycle.Server {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.servers {
		if s.User == key.User && s.Server == key.Server {
			c := *s
			c.Events = f.events[key]
			if len(c.Events) > max {
				c.Events = c.Events[len(c.Events)-max:]
			}
			return &c
		}
	}
	return &lifecycle.Server{User: key.User, Server: key.Server, Status: lifecycle.StatusAbsent}
}

func (f *fakeServers) set(servers []*lifecycle.Server) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.servers = servers
}

// fakeHistory keeps sessions in memory with the store's filter and page
// semantics (newest first; cursors are offsets here).
type fakeHistory struct {
	mu       sync.Mutex
	sessions []history.Session
	events   map[string][]history.Event
	lists    int
	dayLoc   *time.Location
	err      error
}

func (f *fakeHistory) add(ss ...history.Session) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sessions = append(f.sessions, ss...)
	slices.SortStableFunc(f.sessions, func(a, b history.Session) int {
		return cmp.Or(b.Started.Compare(a.Started), cmp.Compare(b.UID, a.UID))
	})
}

func (f *fakeHistory) List(ctx context.Context, flt history.Filter, p history.Page) (history.SessionPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	if f.err != nil {
		return history.SessionPage{}, f.err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = history.DefaultLimit
	}
	limit = min(limit, history.MaxLimit)
	start := 0
	if p.Cursor != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(p.Cursor, "c"))
		if err != nil || !strings.HasPrefix(p.Cursor, "c") {
			return history.SessionPage{}, fmt.Errorf("%w: %q", history.ErrBadCursor, p.Cursor)
		}
		start = n
	}
	var out history.SessionPage
	i := start
	for ; i < len(f.sessions) && len(out.Sessions) < limit; i++ {
		if flt.Matches(f.sessions[i]) {
			out.Sessions = append(out.Sessions, f.sessions[i])
		}
	}
	for j := i; j < len(f.sessions); j++ {
		if flt.Matches(f.sessions[j]) {
			out.Next = "c" + strconv.Itoa(i)
			break
		}
	}
	return out, nil
}

func (f *fakeHistory) Get(ctx context.Context, uid string) (history.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.sessions {
		if s.UID == uid {
			return s, nil
		}
	}
	return history.Session{}, history.ErrNotFound
}

func (f *fakeHistory) Events(ctx context.Context, uid string) ([]history.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	evs, ok := f.events[uid]
	if !ok {
		return nil, history.ErrNotFound
	}
	return evs, nil
}

func (f *fakeHistory) Last(ctx context.Context, user, server string) (history.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.sessions {
		if s.User == user && s.Server == server {
			return s, nil
		}
	}
	return history.Session{}, fmt.Errorf("last of %s/%s: %w", user, server, history.ErrNotFound)
}

// EndedByDay counts ends per day in loc, Since/Until bounding the end.
func (f *fakeHistory) EndedByDay(ctx context.Context, flt history.Filter, loc *time.Location) ([]history.DayCount, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dayLoc = loc
	counts := map[[2]string]int{}
	for _, s := range f.sessions {
		if s.EndedAt == nil || !flt.Since.IsZero() && s.EndedAt.Before(flt.Since) || !flt.Until.IsZero() && !s.EndedAt.Before(flt.Until) {
			continue
		}
		g := flt
		g.Since, g.Until = time.Time{}, time.Time{}
		if !g.Matches(s) {
			continue
		}
		counts[[2]string{s.EndedAt.In(loc).Format(time.DateOnly), string(s.Stopper)}]++
	}
	var out []history.DayCount
	for k, n := range counts {
		out = append(out, history.DayCount{Day: k[0], Stopper: history.Stopper(k[1]), Count: n})
	}
	slices.SortFunc(out, func(a, b history.DayCount) int {
		return cmp.Or(cmp.Compare(a.Day, b.Day), cmp.Compare(a.Stopper, b.Stopper))
	})
	return out, nil
}

// fakeReservations is the engine's admin side with recorded pauses.
type fakeReservations struct {
	mu      sync.Mutex
	res     []reservation.Reservation
	classes []reservation.ClassStatus
	now     time.Time
	pauses  []pauseCall
}

type pauseCall struct {
	Class  string
	Paused bool
	Reason string
}

func (f *fakeReservations) Reservations() []reservation.Reservation {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.res)
}

func (f *fakeReservations) Classes(time.Duration) ([]reservation.ClassStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.classes), nil
}

func (f *fakeReservations) SetPaused(ctx context.Context, class string, paused bool, reason string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pauses = append(f.pauses, pauseCall{class, paused, reason})
	for i := range f.classes {
		if f.classes[i].Class == class {
			f.classes[i].Paused = reason
		}
	}
	return nil
}

func (f *fakeReservations) Now() time.Time { return f.now }

func (f *fakeReservations) calls() []pauseCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.pauses)
}
