package console

import (
	"cmp"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/dsmlp/spawner/lifecycle"
)

// role is what a handler requires of the logged-in user.
type role int

const (
	roleUser    role = iota // any logged-in hub user
	roleConsole             // a hub admin, or a user with the console scope
)

// handlerFunc is a handler that returns its error; one place (fail) turns
// errors into pages or JSON.
type handlerFunc func(w http.ResponseWriter, r *http.Request, s *session) error

// httpError is an error with the status and the sentence the user sees.
type httpError struct {
	status int
	msg    string
	// login offers a "log in again" link, statusLink one to the status page.
	login, statusLink bool
	// back is a page to return to.
	back string
	err  error
}

func (e *httpError) Error() string {
	if e.err != nil {
		return e.msg + ": " + e.err.Error()
	}
	return e.msg
}

func (e *httpError) Unwrap() error { return e.err }

func errNotFound(msg string) error {
	return &httpError{status: http.StatusNotFound, msg: msg}
}

func errBadRequest(msg string) error {
	return &httpError{status: http.StatusBadRequest, msg: msg}
}

// errConsoleOnly answers a hub user without the console role.
func errConsoleOnly() error {
	return &httpError{status: http.StatusForbidden, statusLink: true,
		msg: "This page is for hub admins. Your own servers, GPU bookings and queue place are on the status page."}
}

// maxForm bounds an action's request body.
const maxForm = 64 << 10

// page serves an HTML page; without a session it starts a login that
// comes back to the page.
func (h *handler) page(ro role, fn handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := h.readSession(r)
		if s == nil {
			h.startLogin(w, r, r.URL.RequestURI())
			return
		}
		if ro == roleConsole && !s.Console {
			h.fail(w, r, s, errConsoleOnly())
			return
		}
		if err := fn(w, r, s); err != nil {
			h.fail(w, r, s, err)
		}
	})
}

// api serves data for the pages' scripts: no login redirect, 401 instead
// (the script reloads the page, which logs in).
func (h *handler) api(ro role, fn handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := h.readSession(r)
		switch {
		case s == nil:
			h.fail(w, r, nil, &httpError{status: http.StatusUnauthorized, msg: "not logged in", login: true})
		case ro == roleConsole && !s.Console:
			h.fail(w, r, s, errConsoleOnly())
		default:
			if err := fn(w, r, s); err != nil {
				h.fail(w, r, s, err)
			}
		}
	})
}

// action serves a POST that changes something: it needs the role and the
// session's CSRF token, from the form field csrf or the X-CSRF-Token header.
func (h *handler) action(ro role, fn handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		s := h.readSession(r)
		if s == nil {
			h.fail(w, r, nil, &httpError{status: http.StatusUnauthorized, msg: "Your login expired; log in again and retry.", login: true})
			return
		}
		if ro == roleConsole && !s.Console {
			h.fail(w, r, s, errConsoleOnly())
			return
		}
		token := r.Header.Get("X-CSRF-Token")
		if token == "" {
			token = r.PostFormValue("csrf")
		}
		if !h.keys.checkCSRF(s, token) {
			h.log.Info("console: action refused without a valid CSRF token", zap.String("user", s.User), zap.String("path", r.URL.Path))
			h.fail(w, r, s, &httpError{status: http.StatusForbidden, msg: "The form expired or did not come from this console; reload the page and try again."})
			return
		}
		if err := fn(w, r, s); err != nil {
			h.fail(w, r, s, err)
		}
	})
}

// fail answers an error: JSON for scripts, a page otherwise. Unexpected
// errors are logged and hidden.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	var he *httpError
	if !errors.As(err, &he) {
		he = &httpError{status: http.StatusInternalServerError, msg: "Something went wrong; the error is in spawnerd's log.", err: err}
	}
	user := ""
	if s != nil {
		user = s.User
	}
	if he.status >= 500 {
		h.log.Error("console: request failed", zap.String("user", user), zap.String("path", r.URL.Path), zap.Int("status", he.status), zap.Error(err))
	} else {
		h.log.Debug("console: request refused", zap.String("user", user), zap.String("path", r.URL.Path), zap.Int("status", he.status), zap.Error(err))
	}
	if h.wantsJSON(r) {
		writeJSON(w, he.status, map[string]string{"error": he.msg})
		return
	}
	// After a new login, come back here; from a failed POST, to the page
	// it came from (a POST is not repeated).
	next := r.URL.RequestURI()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		next = cmp.Or(he.back, h.opts.Prefix)
	}
	h.render(w, r, he.status, "error", h.layout(r, s, http.StatusText(he.status), ""), errorView{
		Status: he.status, Message: he.msg, Login: he.login, StatusLink: he.statusLink, Back: he.back,
		Next: h.safeNext(next),
	})
}

// errorView is the error page's data.
type errorView struct {
	Status     int
	Message    string
	Login      bool
	StatusLink bool
	Back       string
	Next       string
}

// wantsJSON: the scripts' endpoints, and requests that ask for JSON.
func (h *handler) wantsJSON(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, h.opts.Prefix+"api/") ||
		strings.Contains(r.Header.Get("Accept"), "application/json")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encoding the answer failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// logKey are a server's log fields and an error.
func logKey(key lifecycle.Key, err error) []zap.Field {
	return []zap.Field{zap.String("user", key.User), zap.String("server", key.Server), zap.Error(err)}
}
