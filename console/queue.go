package console

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/reservation"
)

// queuePlace is a waiting server's place among the servers waiting for a
// GPU of its class, by creation time, and the class's queue length. The
// length is the engine's count when it is larger, since the engine also
// queues GPU pods that are not hub servers. The place is an estimate: the
// engine admits by booking and workspace, not strictly in creation order.
func (h *handler) queuePlace(srv *lifecycle.Server) (place, total int) {
	list, _, err := h.serverList()
	if err != nil {
		h.log.Warn("console: listing servers for the GPU queue failed", zap.Error(err))
	}
	place, total = queueIn(list, srv)
	if cs, ok := h.classStatus(srv.GPUClass); ok {
		total = max(total, cs.WaitingPods)
	}
	return place, max(total, place)
}

// queueIn ranks srv among the waiting servers of its class in list.
func queueIn(list []*lifecycle.Server, srv *lifecycle.Server) (place, total int) {
	var q []*lifecycle.Server
	for _, s := range list {
		if waiting(s) && s.GPUClass == srv.GPUClass {
			q = append(q, s)
		}
	}
	slices.SortFunc(q, compareCreated)
	for i, s := range q {
		if s.User == srv.User && s.Server == srv.Server {
			return i + 1, len(q)
		}
	}
	// Not listed (yet): behind every server created before it.
	place = 1
	for _, s := range q {
		if compareCreated(s, srv) < 0 {
			place++
		}
	}
	return place, len(q) + 1
}

// compareCreated orders servers by creation time (unknown last), then name.
func compareCreated(a, b *lifecycle.Server) int {
	switch {
	case a.Created == nil && b.Created != nil:
		return 1
	case a.Created != nil && b.Created == nil:
		return -1
	case a.Created != nil && b.Created != nil:
		if c := a.Created.Compare(*b.Created); c != 0 {
			return c
		}
	}
	return cmp.Or(cmp.Compare(a.User, b.User), cmp.Compare(a.Server, b.Server))
}

// classCache keeps the engine's class figures for classFresh: each answer
// costs a decision cycle over the cluster snapshot, and every student's
// status page asks for them.
type classCache struct {
	mu  sync.Mutex
	at  time.Time
	ok  bool
	cs  []reservation.ClassStatus
	err error
}

const classFresh = time.Second

// classStatuses are the engine's per-class figures now (read-only); nil
// when the engine is off.
func (h *handler) classStatuses() ([]reservation.ClassStatus, error) {
	if h.opts.Reservations == nil {
		return nil, nil
	}
	c := h.classes
	c.mu.Lock()
	defer c.mu.Unlock()
	now := h.now()
	if c.ok && !now.Before(c.at) && now.Sub(c.at) < classFresh {
		return c.cs, c.err
	}
	c.cs, c.err = h.opts.Reservations.Classes(0)
	c.at, c.ok = now, true
	return c.cs, c.err
}

// forgetClasses drops the cached figures after a change made here.
func (h *handler) forgetClasses() {
	h.classes.mu.Lock()
	defer h.classes.mu.Unlock()
	h.classes.ok = false
}

func (h *handler) classStatus(class string) (reservation.ClassStatus, bool) {
	cs, err := h.classStatuses()
	if err != nil {
		h.log.Warn("console: reading the GPU classes failed", zap.String("class", class), zap.Error(err))
		return reservation.ClassStatus{}, false
	}
	for _, c := range cs {
		if c.Class == class {
			return c, true
		}
	}
	return reservation.ClassStatus{}, false
}
