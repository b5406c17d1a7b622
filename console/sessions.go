package console

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dsmlp/spawner/history"
)

// defaultDays is the sessions search's default range: the last 30 days,
// today included.
const defaultDays = 30

// sessionSearch is a sessions search as the form and the links carry it.
type sessionSearch struct {
	User, Server, Course, Class, Reason string
	// HasServer: the search names a server ("" is the default server).
	HasServer bool
	// Since and Until are dates (YYYY-MM-DD) in the console's time zone;
	// Until is inclusive. Empty means unbounded.
	Since, Until string
	State        string // "", "ended" or "running"
	Filter       history.Filter
	// Query is the search as a query string, for the scripts and links.
	Query string
}

// parseSearch reads a sessions search. Without a since parameter it
// covers the last defaultDays days; an empty since is unbounded.
func (h *handler) parseSearch(q url.Values) (sessionSearch, error) {
	get := func(k string) string { return strings.TrimSpace(q.Get(k)) }
	s := sessionSearch{User: get("user"), Course: get("course"), Class: get("class"), Reason: get("reason"),
		Until: get("until"), State: get("state")}
	if q.Has("server") {
		s.HasServer, s.Server = true, q.Get("server")
	}
	today := h.inLoc(h.now())
	if q.Has("since") {
		s.Since = get("since")
	} else {
		s.Since = time.Date(today.Year(), today.Month(), today.Day()-(defaultDays-1), 0, 0, 0, 0, h.opts.Location).Format(time.DateOnly)
	}
	f := history.Filter{User: s.User, Course: s.Course, Class: s.Class, Reason: s.Reason}
	if s.HasServer {
		server := s.Server
		f.Server = &server
	}
	var err error
	if f.Since, err = h.parseDay(s.Since, 0); err != nil {
		return s, errBadRequest(fmt.Sprintf("From: %q is not a date (YYYY-MM-DD).", s.Since))
	}
	// Until is inclusive: up to the start of the next day.
	if f.Until, err = h.parseDay(s.Until, 1); err != nil {
		return s, errBadRequest(fmt.Sprintf("To: %q is not a date (YYYY-MM-DD).", s.Until))
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return s, errBadRequest("The range ends before it starts.")
	}
	switch s.State {
	case "":
	case "ended":
		f.Ended = true
	case "running":
		f.Running = true
	default:
		return s, errBadRequest(fmt.Sprintf("State %q is neither ended nor running.", s.State))
	}
	s.Filter = f
	v := url.Values{}
	set := func(k, val string) {
		if val != "" {
			v.Set(k, val)
		}
	}
	set("user", s.User)
	if s.HasServer {
		v.Set("server", s.Server)
	}
	set("course", s.Course)
	set("class", s.Class)
	set("reason", s.Reason)
	v.Set("since", s.Since) // even empty: unbounded, not the default
	set("until", s.Until)
	set("state", s.State)
	s.Query = v.Encode()
	return s, nil
}

// parseDay is the start of a date in the console's time zone, plus days;
// "" is the zero time.
func (h *handler) parseDay(v string, days int) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	d, err := time.ParseInLocation(time.DateOnly, v, h.opts.Location)
	if err != nil {
		return time.Time{}, err
	}
	return time.Date(d.Year(), d.Month(), d.Day()+days, 0, 0, 0, 0, h.opts.Location), nil
}

// history returns the history, or the error pages show when it is off.
func (h *handler) history() (History, error) {
	if h.opts.History == nil {
		return nil, errNotFound("The session history is not enabled in spawnerd.")
	}
	return h.opts.History, nil
}

// sessionsPage is the search form; its script loads the table and chart.
func (h *handler) sessionsPage(w http.ResponseWriter, r *http.Request, s *session) error {
	search, err := h.parseSearch(r.URL.Query())
	status := http.StatusOK
	var problem string
	var he *httpError
	if errors.As(err, &he) {
		status, problem = he.status, he.msg
	} else if err != nil {
		return err
	}
	v := h.layout(r, s, "Sessions", "sessions")
	v.Scripts, v.Loaded = []string{"sessions.js"}, false
	h.render(w, r, status, "sessions", v, struct {
		S          sessionSearch
		Problem    string
		HistoryOff bool
		// Disabled: nothing to load (no history, or a bad search).
		Disabled bool
		CSV      string
		Stoppers []history.Stopper
		Zone     string
	}{search, problem, h.opts.History == nil, h.opts.History == nil || problem != "",
		h.opts.Prefix + "sessions.csv?" + search.Query, history.Stoppers, h.opts.Location.String()})
	return nil
}

// sessionRow is one session of the sessions table, as the script reads it.
type sessionRow struct {
	UID         string `json:"uid"`
	User        string `json:"user"`
	Server      string `json:"server"`
	Course      string `json:"course,omitempty"`
	GPUClass    string `json:"gpu_class,omitempty"`
	Profile     string `json:"profile,omitempty"`
	Node        string `json:"node,omitempty"`
	Started     string `json:"started"`
	StartedText string `json:"started_text"`
	Ended       string `json:"ended,omitempty"`
	EndedText   string `json:"ended_text,omitempty"`
	Duration    string `json:"duration,omitempty"`
	Stopper     string `json:"stopper,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Why         string `json:"why,omitempty"`
	URL         string `json:"url"`
}

func (h *handler) sessionRowOf(s history.Session) sessionRow {
	row := sessionRow{UID: s.UID, User: s.User, Server: s.Server, Course: s.Course, GPUClass: s.GPUClass, Profile: s.Profile,
		Node: s.Node, Started: s.Started.UTC().Format(time.RFC3339), StartedText: h.fmtTime(s.Started),
		Stopper: string(s.Stopper), URL: h.serverPath(s.User, s.Server)}
	if s.End != nil {
		row.Reason = cmp.Or(s.End.Reason, s.End.ContainerReason)
	}
	if s.EndedAt != nil {
		row.Ended, row.EndedText = s.EndedAt.UTC().Format(time.RFC3339), h.fmtTime(*s.EndedAt)
		row.Duration = humanDuration(s.EndedAt.Sub(s.Started))
		row.Why = history.Why(s, h.opts.Location)
	}
	return row
}

// uiPageSize is the sessions table's page.
const uiPageSize = 100

// sessionsJSON is one page of the search: {"sessions": [...], "next": cursor}.
func (h *handler) sessionsJSON(w http.ResponseWriter, r *http.Request, _ *session) error {
	store, err := h.history()
	if err != nil {
		return err
	}
	q := r.URL.Query()
	search, err := h.parseSearch(q)
	if err != nil {
		return err
	}
	p := history.Page{Limit: uiPageSize, Cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > history.MaxLimit {
			return errBadRequest(fmt.Sprintf("limit must be from 1 to %d", history.MaxLimit))
		}
		p.Limit = n
	}
	page, err := store.List(r.Context(), search.Filter, p)
	if errors.Is(err, history.ErrBadCursor) {
		return errBadRequest("The page cursor is not one this console made.")
	}
	if err != nil {
		return fmt.Errorf("listing sessions: %w", err)
	}
	out := struct {
		Sessions []sessionRow `json:"sessions"`
		Next     string       `json:"next,omitempty"`
	}{Sessions: make([]sessionRow, 0, len(page.Sessions)), Next: page.Next}
	for _, s := range page.Sessions {
		out.Sessions = append(out.Sessions, h.sessionRowOf(s))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
