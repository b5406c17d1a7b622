package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/reservation"
)

// Bounds of the detail page.
const (
	maxPodEvents    = 50 // the pod's newest Kubernetes events
	maxSessionsShow = 4  // the current session and three before it
	detailWait      = 5 * time.Second
)

// detailView is a server's detail page: the part the script refreshes
// (the "live" template) and what the stop dialog needs.
type detailView struct {
	Server *lifecycle.Server
	// Active: running or pending, so it can be stopped.
	Active bool
	// Waiting for a GPU: its place among the class's waiting servers (by
	// creation time) and the class's queue length.
	Waiting    bool
	QueuePlace int
	QueueTotal int
	// Booking is the reservation record the pod runs under, if found.
	Booking *reservation.Reservation
	// Sessions are the newest sessions of the server, newest first, each
	// with its timeline; Unrecorded holds the current pod's Kubernetes
	// events when the history has no session for it.
	Sessions   []sessionTimeline
	Unrecorded []timelineEntry
	HistoryOff bool
	HistoryErr string
	Notice     string
	LivePath   string
}

// sessionTimeline is one session with its recorded steps and, for the
// current pod, its Kubernetes events, in time order.
type sessionTimeline struct {
	Session history.Session
	Why     string
	Current bool
	Entries []timelineEntry
}

// timelineEntry is one line of a timeline.
type timelineEntry struct {
	At time.Time
	// Source is "spawnerd" (the session history) or "kubernetes".
	Source  string
	What    string
	Text    string
	Warning bool
	Count   int32
	// order ranks entries within one second: the history's steps in life
	// order, then Kubernetes events.
	order int
}

// detailKey reads the server from the path; a missing {server} is the
// default server.
func detailKey(r *http.Request) (lifecycle.Key, error) {
	k := lifecycle.Key{User: r.PathValue("user"), Server: r.PathValue("server")}
	if k.User == "" {
		return k, errBadRequest("The address names no user.")
	}
	return k, nil
}

// serverPage is a server's detail page.
func (h *handler) serverPage(w http.ResponseWriter, r *http.Request, s *session) error {
	key, err := detailKey(r)
	if err != nil {
		return err
	}
	d, err := h.detail(r.Context(), key)
	if err != nil {
		return err
	}
	switch r.URL.Query().Get("stopped") {
	case "202":
		d.Notice = "Stop requested: the hub is stopping the server."
	case "204":
		d.Notice = "Stop requested: the hub stopped the server."
	}
	v := h.layout(r, s, fmt.Sprintf("%s · %s", key.User, serverLabel(key.Server)), "servers")
	v.Scripts = []string{"detail.js"}
	h.render(w, r, http.StatusOK, "server", v, struct {
		D           *detailView
		StopAction  string
		ConfirmStop bool
	}{d, h.opts.Prefix + "stop", r.URL.Query().Get("confirm") == "stop"})
	return nil
}

// serverLive is the refreshed part of the detail page.
func (h *handler) serverLive(w http.ResponseWriter, r *http.Request, _ *session) error {
	key, err := detailKey(r)
	if err != nil {
		return err
	}
	d, err := h.detail(r.Context(), key)
	if err != nil {
		return err
	}
	return h.renderFragment(w, r, "server", "live", d)
}

// detail gathers a server's page: the server and its pod's events, its
// sessions from the history, its reservation and queue place.
func (h *handler) detail(ctx context.Context, key lifecycle.Key) (*detailView, error) {
	ctx, cancel := context.WithTimeout(ctx, detailWait)
	defer cancel()
	srv := h.opts.Servers.ServerWithEvents(key, maxPodEvents)
	if srv == nil {
		srv = &lifecycle.Server{User: key.User, Server: key.Server, Status: lifecycle.StatusAbsent}
	}
	d := &detailView{Server: srv, LivePath: h.livePath(key),
		Active: srv.Status == lifecycle.StatusRunning || srv.Status == lifecycle.StatusPending}
	h.addSessions(ctx, d, key)
	if srv.Status == lifecycle.StatusAbsent && len(d.Sessions) == 0 {
		return nil, errNotFound(fmt.Sprintf("spawnerd knows no server %s of user %s: it has no pod, and the history has no session of it.",
			serverLabel(key.Server), key.User))
	}
	if waiting(srv) {
		d.Waiting = true
		d.QueuePlace, d.QueueTotal = h.queuePlace(srv)
	}
	if h.opts.Reservations != nil {
		if id := parseReservationRef(srv.Reservation); id > 0 {
			for _, res := range h.opts.Reservations.Reservations() {
				if res.ID == id {
					d.Booking = &res
					break
				}
			}
		}
	}
	return d, nil
}

// livePath is the detail page's refreshed part.
func (h *handler) livePath(key lifecycle.Key) string {
	return h.opts.Prefix + "api/detail/" + strings.TrimPrefix(h.serverPath(key.User, key.Server), h.opts.Prefix+"servers/")
}

// addSessions adds the server's newest sessions, each with its timeline.
func (h *handler) addSessions(ctx context.Context, d *detailView, key lifecycle.Key) {
	k8s := h.podEntries(d.Server.Events)
	if h.opts.History == nil {
		d.HistoryOff, d.Unrecorded = true, k8s
		return
	}
	server := key.Server
	page, err := h.opts.History.List(ctx, history.Filter{User: key.User, Server: &server}, history.Page{Limit: maxSessionsShow})
	if err != nil {
		d.HistoryErr, d.Unrecorded = "The session history could not be read.", k8s
		h.log.Warn("console: reading the sessions of a server failed", logKey(key, err)...)
		return
	}
	matched := false
	for _, sess := range page.Sessions {
		tl := sessionTimeline{Session: sess, Why: history.Why(sess, h.opts.Location)}
		evs, err := h.opts.History.Events(ctx, sess.UID)
		if err != nil && !errors.Is(err, history.ErrNotFound) {
			h.log.Warn("console: reading the events of a session failed", logKey(key, err)...)
		}
		for _, ev := range evs {
			tl.Entries = append(tl.Entries, historyEntry(ev))
		}
		if sess.UID != "" && sess.UID == d.Server.UID {
			tl.Current, matched = true, true
			tl.Entries = append(tl.Entries, k8s...)
		}
		// Kubernetes times are whole seconds, spawnerd's own milliseconds:
		// within a second the life's order decides, and a history step
		// comes before the Kubernetes event it caused.
		slices.SortStableFunc(tl.Entries, func(a, b timelineEntry) int {
			return cmp.Or(a.At.Truncate(time.Second).Compare(b.At.Truncate(time.Second)), cmp.Compare(a.order, b.order))
		})
		d.Sessions = append(d.Sessions, tl)
	}
	if !matched {
		d.Unrecorded = k8s
	}
}

// podEntries are the pod's Kubernetes events as timeline lines.
func (h *handler) podEntries(evs []lifecycle.EventSummary) []timelineEntry {
	out := make([]timelineEntry, 0, len(evs))
	for _, ev := range evs {
		out = append(out, timelineEntry{At: ev.Time, Source: "kubernetes", What: ev.Reason, Text: ev.Message,
			Warning: ev.Type == "Warning", Count: ev.Count, order: len(history.EventKinds)})
	}
	return out
}

// historyEntry says one recorded step of a session.
func historyEntry(ev history.Event) timelineEntry {
	e := timelineEntry{At: ev.At, Source: "spawnerd", What: string(ev.Kind), order: slices.Index(history.EventKinds, ev.Kind)}
	switch ev.Kind {
	case history.EventRequested:
		e.Text = "The hub asked for the server to start, for " + actorText(ev.By) + "."
	case history.EventCreated:
		e.Text = "The pod was created."
	case history.EventScheduled:
		e.Text = "The pod was scheduled" + cmp.Or(prefixed(" on node ", ev.Node), "") + "."
	case history.EventReady:
		e.Text = "Every container is ready: the server runs."
	case history.EventStopRequested:
		e.Text = "Stop requested by " + actorText(ev.By) + "."
	case history.EventEnded:
		e.Text = "The session ended: " + stopperText(ev.Stopper) + endText(ev.End) + "."
		e.Warning = ev.Stopper != history.StopperUser && ev.Stopper != history.StopperCuller
	default:
		e.Text = string(ev.Kind)
	}
	return e
}

// stopperText says who or what ended a session, as a timeline says it.
func stopperText(s history.Stopper) string {
	switch s {
	case history.StopperUser:
		return "its user stopped it"
	case history.StopperAdmin:
		return "a hub admin stopped it"
	case history.StopperCuller:
		return "the idle culler stopped it"
	case history.StopperService:
		return "a hub service stopped it"
	case history.StopperHub:
		return "the hub stopped it"
	case history.StopperStartTimeout:
		return "spawnerd removed it: not ready within the start timeout"
	case history.StopperEvicted:
		return "the kubelet evicted the pod"
	case history.StopperOOM:
		return "the notebook ran out of memory"
	case history.StopperContainerExit:
		return "the notebook container exited"
	case history.StopperNodeLost:
		return "its node went away"
	case history.StopperDeleted:
		return "its pod was deleted outside the hub"
	case history.StopperPreempted:
		return "the GPU reservation engine preempted it"
	case history.StopperReservationCancelled:
		return "its GPU booking was cancelled"
	case history.StopperReservationReassigned:
		return "its GPU booking went to another owner"
	}
	return "stopped (" + cmp.Or(string(s), "unknown") + ")"
}

func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// actorText names who asked, as a timeline says it.
func actorText(a *history.Actor) string {
	if a == nil {
		return "someone unknown"
	}
	switch a.Kind {
	case history.ActorUser:
		return cmp.Or(prefixed("its user ", a.Name), "its user")
	case history.ActorAdmin:
		return cmp.Or(prefixed("admin ", a.Name), "a hub admin")
	case history.ActorCuller:
		return "the idle culler"
	case history.ActorService:
		return cmp.Or(prefixed("the hub service ", a.Name), "a hub service")
	}
	return "the hub"
}

// endText is "; reason Evicted, container OOMKilled, exit code 137".
func endText(e *history.EndFacts) string {
	if e == nil {
		return ""
	}
	parts := nonEmpty(prefixed("phase ", e.Phase), prefixed("reason ", e.Reason), prefixed("container ", e.ContainerReason))
	if e.ExitCode != nil {
		parts = append(parts, "exit code "+strconv.Itoa(*e.ExitCode))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, ", ")
}

// parseReservationRef reads the engine's booking-reference annotation,
// "res-<id>"; 0 means none.
func parseReservationRef(v string) int64 {
	n, err := strconv.ParseInt(strings.TrimPrefix(v, "res-"), 10, 64)
	if err != nil || n <= 0 || !strings.HasPrefix(v, "res-") {
		return 0
	}
	return n
}
