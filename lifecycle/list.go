package lifecycle

import (
	"context"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/poll"
	"github.com/dsmlp/spawner/serverid"
)

// listKept are the running and pending servers List made, each kept while
// what it was made of is unchanged: a console polling thousands of servers
// makes anew only those that changed, and reads the cache's pods whole
// only for them.
type listKept struct {
	only func(key string) (poll.PodVersion, int)
	mu   sync.Mutex
	kept map[Key]*listed
	rev  uint64 // the last Rev given
}

// listed is a kept server: its report and what it was made of.
type listed struct {
	basis
	labelKey string
	// event is the pod's newest event when made (nil: none).
	event *EventSummary
	srv   *Server
}

func newListKept(only func(key string) (poll.PodVersion, int)) *listKept {
	return &listKept{only: only, kept: map[Key]*listed{}}
}

// maxRecentStops bounds the stopped servers List adds from the history.
const maxRecentStops = 5000

// List reports every server whose pod is in the cache, and those whose
// last session ended within RecentStops (with why), sorted by user and
// server. The servers share their maps and pointers with kept copies:
// never modify them.
func (m *Manager) List() []*Server {
	out := []*Server{}
	seen := map[Key]bool{}
	now := m.clockNow()
	for _, meta := range m.watcher.PodMetas() {
		user, server, why := ownerOf(m.cfg, meta)
		key := Key{user, server}
		if why != "" || seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, m.listed(key, Hint{Pod: meta.Name, Namespace: meta.Namespace, UID: meta.UID}, now))
	}
	m.list.mu.Lock()
	for key := range m.list.kept {
		if !seen[key] {
			delete(m.list.kept, key)
		}
	}
	m.list.mu.Unlock()
	out = append(out, m.recentlyStopped(seen)...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].User != out[j].User {
			return out[i].User < out[j].User
		}
		return out[i].Server < out[j].Server
	})
	return out
}

// listed is one server of List: the kept report with its age brought up
// to now when nothing it was made of changed, else made anew (and kept
// when it may be).
func (m *Manager) listed(key Key, hint Hint, now time.Time) *Server {
	l := m.list
	l.mu.Lock()
	e := l.kept[key]
	l.mu.Unlock()
	if e != nil && m.unchanged(l.only, key, e.labelKey, &e.basis) && sameEvent(e.event, m.newestEvent(e.srv.Namespace, e.srv.Pod)) {
		s := *e.srv
		s.Age = now.Sub(e.created).Round(time.Second).String()
		return &s
	}
	s, b := m.server(key, hint)
	s.LastEvent = m.newestEvent(s.Namespace, s.Pod)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !b.ok {
		delete(l.kept, key)
		return s
	}
	l.rev++
	s.Rev = l.rev
	l.kept[key] = &listed{basis: b, labelKey: serverid.Key(key.User, key.Server), event: s.LastEvent, srv: s}
	cp := *s
	return &cp
}

// newestEvent is the summary of the pod's newest event, or nil.
func (m *Manager) newestEvent(ns, pod string) *EventSummary {
	ev := m.watcher.NewestEvent(ns, pod)
	if ev == nil {
		return nil
	}
	s := summaryOf(ev)
	return &s
}

func sameEvent(a, b *EventSummary) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Time.Equal(b.Time) && a.Type == b.Type && a.Reason == b.Reason && a.Message == b.Message &&
		a.From == b.From && a.Count == b.Count
}

// recentlyStopped are the servers without a live pod whose last session
// ended within m.recent, from the history (newest session per server).
func (m *Manager) recentlyStopped(live map[Key]bool) []*Server {
	if m.hist == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), historyWait)
	defer cancel()
	now := m.clock.Now()
	f := history.Filter{Ended: true, Since: now.Add(-m.recent)}
	var out []*Server
	page := history.Page{Limit: history.MaxLimit}
	for n := 0; n < maxRecentStops; {
		got, err := m.hist.List(ctx, f, page)
		if err != nil {
			m.log.Warn("list: reading recently stopped servers from the session history failed", zap.Error(err))
			return out
		}
		for _, sess := range got.Sessions {
			key := Key{sess.User, sess.Server}
			if live[key] {
				continue
			}
			live[key] = true
			s := &Server{User: sess.User, Server: sess.Server, State: map[string]string{}}
			fillFromSession(s, sess, m.loc)
			if s.Created != nil {
				s.Age = now.Sub(*s.Created).Round(time.Second).String()
			}
			out = append(out, s)
		}
		n += len(got.Sessions)
		if got.Next == "" {
			break
		}
		page.Cursor = got.Next
	}
	return out
}
