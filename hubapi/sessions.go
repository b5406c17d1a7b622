package hubapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/dsmlp/spawner/history"
)

// History is the session history; *history.Store implements it.
type History interface {
	List(ctx context.Context, f history.Filter, p history.Page) (history.SessionPage, error)
	Get(ctx context.Context, uid string) (history.Session, error)
	Events(ctx context.Context, uid string) ([]history.Event, error)
	Last(ctx context.Context, user, server string) (history.Session, error)
}

// SessionDetail is one session with its recorded timeline.
type SessionDetail struct {
	history.Session
	Events []history.Event `json:"events"`
}

// WhyAnswer is how a server's last session ended, in one sentence.
type WhyAnswer struct {
	User     string          `json:"user"`
	Server   string          `json:"server"`
	Sentence string          `json:"sentence"`
	Session  history.Session `json:"session"`
}

func (h *handlers) routeSessions(api *echo.Group) {
	api.GET("/sessions", h.listSessions, requireAdmin)
	api.GET("/sessions/:uid", h.getSession, requireAdmin)
	// A user may ask about their own servers, an admin about anyone's.
	api.GET("/why/:user", h.why)
	api.GET("/why/:user/:server", h.why)
}

func (h *handlers) history() (History, error) {
	if h.opts.History == nil {
		return nil, &apiError{status: http.StatusNotFound, msg: "session history is not enabled (--history-dsn)"}
	}
	return h.opts.History, nil
}

// sessionQuery is every query parameter GET /sessions takes.
var sessionQuery = map[string]bool{"user": true, "server": true, "course": true, "class": true, "reason": true,
	"since": true, "until": true, "state": true, "limit": true, "cursor": true}

func (h *handlers) listSessions(c echo.Context) error {
	store, err := h.history()
	if err != nil {
		return err
	}
	f, p, err := sessionFilter(c.QueryParams(), h.now())
	if err != nil {
		return err
	}
	page, err := store.List(c.Request().Context(), f, p)
	if errors.Is(err, history.ErrBadCursor) {
		return &apiError{status: http.StatusBadRequest, msg: "cursor is not one this API returned as next", field: "cursor"}
	}
	if err != nil {
		return fmt.Errorf("listing sessions: %w", err)
	}
	if page.Sessions == nil {
		page.Sessions = []history.Session{}
	}
	return c.JSON(http.StatusOK, page)
}

// sessionFilter reads a session search from query parameters; times are
// RFC 3339, or a duration such as 24h meaning that long before now.
func sessionFilter(q map[string][]string, now time.Time) (history.Filter, history.Page, error) {
	bad := func(field, msg string) error { return &apiError{status: http.StatusBadRequest, msg: msg, field: field} }
	for k, vs := range q {
		if !sessionQuery[k] {
			return history.Filter{}, history.Page{}, bad(k, "unknown query parameter "+k)
		}
		if len(vs) > 1 {
			return history.Filter{}, history.Page{}, bad(k, k+" is given more than once")
		}
	}
	get := func(k string) string {
		if vs := q[k]; len(vs) > 0 {
			return vs[0]
		}
		return ""
	}
	f := history.Filter{User: get("user"), Course: get("course"), Class: get("class"), Reason: get("reason")}
	if vs, ok := q["server"]; ok {
		f.Server = &vs[0]
	}
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		v := get(t.name)
		if v == "" {
			continue
		}
		at, err := parseWhen(v, now)
		if err != nil {
			return history.Filter{}, history.Page{}, bad(t.name, fmt.Sprintf("%s %q is neither an RFC 3339 time nor a duration such as 24h", t.name, v))
		}
		*t.dst = at
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return history.Filter{}, history.Page{}, bad("until", "until must be after since")
	}
	switch get("state") {
	case "":
	case "ended":
		f.Ended = true
	case "running":
		f.Running = true
	default:
		return history.Filter{}, history.Page{}, bad("state", fmt.Sprintf("state %q is neither ended nor running", get("state")))
	}
	p := history.Page{Cursor: get("cursor")}
	if v := get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > history.MaxLimit {
			return history.Filter{}, history.Page{}, bad("limit", fmt.Sprintf("limit must be an integer from 1 to %d, not %q", history.MaxLimit, v))
		}
		p.Limit = n
	}
	return f, p, nil
}

// parseWhen reads an RFC 3339 time, or a duration back from now.
func parseWhen(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("bad time %q", v)
	}
	return now.Add(-d), nil
}

func (h *handlers) getSession(c echo.Context) error {
	store, err := h.history()
	if err != nil {
		return err
	}
	uid := c.Param("uid")
	s, err := store.Get(c.Request().Context(), uid)
	if errors.Is(err, history.ErrNotFound) {
		return &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("no session %q", uid), field: "uid"}
	}
	if err != nil {
		return fmt.Errorf("reading session %s: %w", uid, err)
	}
	evs, err := store.Events(c.Request().Context(), uid)
	if err != nil {
		return fmt.Errorf("reading the events of session %s: %w", uid, err)
	}
	if evs == nil {
		evs = []history.Event{}
	}
	s.Why = history.Why(s, h.opts.Location)
	return c.JSON(http.StatusOK, SessionDetail{Session: s, Events: evs})
}

func (h *handlers) why(c echo.Context) error {
	store, err := h.history()
	if err != nil {
		return err
	}
	user, err := pathParam(c, "user")
	if err != nil {
		return err
	}
	server := ""
	if strings.HasSuffix(c.Path(), "/:server") {
		if server, err = pathParam(c, "server"); err != nil {
			return err
		}
	}
	if err := checkOwner(claimsOf(c), user, "user"); err != nil {
		return err
	}
	s, err := store.Last(c.Request().Context(), user, server)
	if errors.Is(err, history.ErrNotFound) {
		what := "default server"
		if server != "" {
			what = fmt.Sprintf("server %q", server)
		}
		return &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("no session of %s's %s is recorded", user, what), field: "user"}
	}
	if err != nil {
		return fmt.Errorf("reading %s's last session: %w", user, err)
	}
	s.Why = history.Why(s, h.opts.Location)
	return c.JSON(http.StatusOK, WhyAnswer{User: user, Server: server, Sentence: s.Why, Session: s})
}

func (h *handlers) now() time.Time {
	if h.opts.Now != nil {
		return h.opts.Now()
	}
	return time.Now()
}
