package console

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/dsmlp/spawner/lifecycle"
)

// stopWait bounds the hub's answer to a stop.
const stopWait = 15 * time.Second

// stop asks the hub to stop a server with the logged-in admin's own token:
// the hub records the stop, drops the route, and its spawner class tells
// spawnerd who asked. The hub also decides whether this user may.
func (h *handler) stop(w http.ResponseWriter, r *http.Request, s *session) error {
	key := lifecycle.Key{User: r.PostFormValue("user"), Server: r.PostFormValue("server")}
	if key.User == "" {
		return errBadRequest("The stop names no user.")
	}
	back := h.serverPath(key.User, key.Server)
	ctx, cancel := context.WithTimeout(r.Context(), stopWait)
	defer cancel()
	status, err := h.hub.stopServer(ctx, s.Token, key.User, key.Server)
	fields := []zap.Field{zap.String("user", s.User), zap.String("target_user", key.User),
		zap.String("target_server", key.Server), zap.Int("hub_status", status)}
	if err != nil {
		h.log.Warn("console: stop refused", append(fields, zap.Error(err))...)
		return stopError(err, back)
	}
	h.log.Info("console: stop requested", fields...)
	if h.wantsJSON(r) {
		writeJSON(w, http.StatusOK, map[string]any{"hub_status": status, "detail": back})
		return nil
	}
	http.Redirect(w, r, back+"?stopped="+strconv.Itoa(status), http.StatusSeeOther)
	return nil
}

// stopError shows the hub's refusal with the hub's status where it means
// the same here (403: this admin's token lacks the scope), else 502.
func stopError(err error, back string) error {
	var he *hubError
	if !errors.As(err, &he) {
		return &httpError{status: http.StatusBadGateway, msg: "The hub could not be reached to stop the server.", back: back, err: err}
	}
	e := &httpError{status: http.StatusBadGateway, msg: "The hub did not stop the server: " + he.Error() + ".", back: back, err: err}
	switch he.Status {
	case http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound, http.StatusConflict:
		e.status = he.Status
	case http.StatusUnauthorized:
		e.status, e.login = http.StatusUnauthorized, true
		e.msg = "The hub no longer accepts your login's token; log in again and retry."
	}
	return e
}
