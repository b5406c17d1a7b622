package console

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/reservation"
)

// Bounds of the status page.
const (
	statusWait       = 5 * time.Second
	maxStatusServers = 20 // servers whose last session is told
	statusScan       = 100
)

// statusView is the status page of one hub user: free GPUs, their own
// bookings and queue places, and how their last sessions ended.
type statusView struct {
	Owner        string
	EngineOff    bool
	ClassProblem string
	Classes      []reservation.ClassStatus
	Bookings     []bookingRow
	Queue        []queueRow
	Ends         []endRow
	HistoryOff   bool
	Zone         string
}

type bookingRow struct {
	reservation.Reservation
	Open bool
}

type queueRow struct {
	Server      string
	Class       string
	Place       int
	Total       int
	Since       *time.Time
	PausedWhy   string
	ClassExists bool
}

type endRow struct {
	Server   string
	Sentence string
	Recorded bool
}

// statusPage answers every logged-in hub user, about themselves only.
func (h *handler) statusPage(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx, cancel := context.WithTimeout(r.Context(), statusWait)
	defer cancel()
	d := statusView{Owner: h.opts.OwnerOf(s.User), EngineOff: h.opts.Reservations == nil,
		HistoryOff: h.opts.History == nil, Zone: h.opts.Location.String()}
	list, _, err := h.serverList()
	if err != nil {
		return err
	}
	var mine []*lifecycle.Server
	for _, srv := range list {
		if srv.User == s.User {
			mine = append(mine, srv)
		}
	}
	if !d.EngineOff {
		cs, err := h.classStatuses()
		if err != nil {
			h.log.Warn("console: reading the GPU classes failed", zap.String("user", s.User), zap.Error(err))
			d.ClassProblem = "The GPU figures are not available right now."
		}
		d.Classes = cs
		d.Bookings = ownBookings(h.opts.Reservations.Reservations(), d.Owner, h.opts.Reservations.Now())
		for _, srv := range mine {
			if !waiting(srv) {
				continue
			}
			q := queueRow{Server: srv.Server, Class: srv.GPUClass, Since: srv.Created}
			q.Place, q.Total = queueIn(list, srv)
			for _, c := range cs {
				if c.Class == srv.GPUClass {
					q.Total, q.PausedWhy, q.ClassExists = max(q.Total, c.WaitingPods), c.Paused, true
				}
			}
			d.Queue = append(d.Queue, q)
		}
	}
	if !d.HistoryOff {
		d.Ends = h.lastEnds(ctx, s.User, mine)
	}
	h.render(w, r, http.StatusOK, "status", h.layout(r, s, "Status", "status"), d)
	return nil
}

// ownBookings are the owner's reservations that have not ended, soonest
// first.
func ownBookings(all []reservation.Reservation, owner string, now time.Time) []bookingRow {
	var out []bookingRow
	for _, r := range all {
		if r.Owner != owner || r.Status == reservation.StatusCancelled || !r.End.After(now) {
			continue
		}
		out = append(out, bookingRow{Reservation: r, Open: !now.Before(r.Start)})
	}
	slices.SortFunc(out, func(a, b bookingRow) int { return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.ID, b.ID)) })
	return out
}

// lastEnds tells, for each of the user's servers (those listed now and
// those in the history), how its last session ended. The default server
// always has a line.
func (h *handler) lastEnds(ctx context.Context, user string, mine []*lifecycle.Server) []endRow {
	servers := []string{""}
	for _, srv := range mine {
		servers = append(servers, srv.Server)
	}
	page, err := h.opts.History.List(ctx, history.Filter{User: user}, history.Page{Limit: statusScan})
	if err != nil {
		h.log.Warn("console: reading a user's sessions failed", zap.String("user", user), zap.Error(err))
	}
	for _, sess := range page.Sessions {
		servers = append(servers, sess.Server)
	}
	slices.Sort(servers)
	servers = slices.Compact(servers)
	if len(servers) > maxStatusServers {
		servers = servers[:maxStatusServers]
	}
	out := make([]endRow, 0, len(servers))
	for _, server := range servers {
		row := endRow{Server: server}
		last, err := h.opts.History.Last(ctx, user, server)
		switch {
		case errors.Is(err, history.ErrNotFound):
			row.Sentence = "No session recorded."
		case err != nil:
			h.log.Warn("console: reading a server's last session failed", logKey(lifecycle.Key{User: user, Server: server}, err)...)
			row.Sentence = "The session history could not be read."
		default:
			row.Sentence, row.Recorded = history.Why(last, h.opts.Location), true
		}
		out = append(out, row)
	}
	return out
}
