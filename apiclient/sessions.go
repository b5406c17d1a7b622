package apiclient

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/hubapi"
)

// SessionState selects sessions by whether they ended.
type SessionState string

// The states GET /sessions filters on.
const (
	SessionsEnded   SessionState = "ended"
	SessionsRunning SessionState = "running"
)

// SessionFilter is GET /sessions' query: zero fields match everything.
type SessionFilter struct {
	User string
	// Server is a server name; nil is any server of the user, "" the
	// default server.
	Server *string
	Course string
	// Class is a GPU class.
	Class string
	// Reason matches the stopper (evicted, user, ...) or the end's
	// Kubernetes reason or container reason (Evicted, OOMKilled).
	Reason string
	// Since and Until select sessions alive at some time in [Since,
	// Until): an RFC 3339 time, or a duration back from now such as 24h.
	Since, Until string
	State        SessionState
	// Limit is the page size (spawnerd's default 100, at most 1000).
	Limit int
	// Cursor is the Next of the previous page.
	Cursor string
}

func (f SessionFilter) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"user": f.User, "course": f.Course, "class": f.Class, "reason": f.Reason,
		"since": f.Since, "until": f.Until, "state": string(f.State), "cursor": f.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Server != nil {
		q.Set("server", *f.Server)
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	return q
}

// Sessions returns one page of the session history, newest first (admin).
func (c *Client) Sessions(ctx context.Context, f SessionFilter) (*history.SessionPage, error) {
	var p history.SessionPage
	if _, err := c.call(ctx, http.MethodGet, "/api/v1/sessions", f.query(), nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// AllSessions yields every session f selects, newest first, following
// each page's next cursor from f.Cursor on. It stops at the first error,
// which it yields.
func (c *Client) AllSessions(ctx context.Context, f SessionFilter) iter.Seq2[history.Session, error] {
	return func(yield func(history.Session, error) bool) {
		for {
			p, err := c.Sessions(ctx, f)
			if err != nil {
				yield(history.Session{}, err)
				return
			}
			for _, s := range p.Sessions {
				if !yield(s, nil) {
					return
				}
			}
			if p.Next == "" {
				return
			}
			f.Cursor = p.Next
		}
	}
}

// Session returns one session with its recorded timeline (admin).
func (c *Client) Session(ctx context.Context, uid string) (*hubapi.SessionDetail, error) {
	var d hubapi.SessionDetail
	if _, err := c.call(ctx, http.MethodGet, "/api/v1/sessions/"+url.PathEscape(uid), nil, nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// Why says how the last session of a user's server ("" is the default
// server) ended, in one sentence, with the session. A user's token may ask
// about that user's servers, an admin's about anyone's.
func (c *Client) Why(ctx context.Context, user, server string) (*hubapi.WhyAnswer, error) {
	p := "/api/v1/why/" + url.PathEscape(user)
	if server != "" {
		p += "/" + url.PathEscape(server)
	}
	var w hubapi.WhyAnswer
	if _, err := c.call(ctx, http.MethodGet, p, nil, nil, &w); err != nil {
		return nil, err
	}
	return &w, nil
}
