package hubapi

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/spawner"
)

// apiError is an error with the status and field the client should see.
type apiError struct {
	status int
	msg    string
	field  string
}

func (e *apiError) Error() string { return e.msg }

// ErrorBody is every error response: what went wrong and which input it
// concerns. An internal error carries only a request ID, which the log line
// with the full error carries too.
type ErrorBody struct {
	Error     string `json:"error"`
	Field     string `json:"field,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}

// internalMessage is all a user sees of an unexpected error: the error may
// name service accounts, namespaces or other users, and is shown on the
// hub's spawn page.
const internalMessage = "spawnerd could not complete the request (request %s); an administrator can find the details in spawnerd's log"

// conflictMessage replaces a name conflict's details (which may name
// another user's server) for the same reason.
const conflictMessage = "a name spawnerd needs is taken by another object (request %s); an administrator can find the details in spawnerd's log"

// toStatus is the one table from errors to HTTP statuses. Client errors keep
// their message and field; any other error becomes a message with the
// request ID (see errorHandler), as does a conflict.
func toStatus(err error) (int, ErrorBody) {
	var ae *apiError
	var fe *spawner.FieldError
	var he *echo.HTTPError
	switch {
	case errors.As(err, &ae):
		return ae.status, ErrorBody{Error: ae.msg, Field: ae.field}
	case errors.As(err, &fe):
		return http.StatusBadRequest, ErrorBody{Error: fe.Message, Field: fe.Field}
	case errors.Is(err, lifecycle.ErrNotFound):
		return http.StatusNotFound, ErrorBody{Error: err.Error()}
	case errors.Is(err, lifecycle.ErrConflict):
		return http.StatusConflict, ErrorBody{Error: conflictMessage}
	case errors.Is(err, lifecycle.ErrActive):
		return http.StatusConflict, ErrorBody{Error: err.Error(), Field: "server"}
	case errors.Is(err, lifecycle.ErrQuota):
		return http.StatusForbidden, ErrorBody{Error: err.Error(), Field: "resources"}
	case errors.As(err, &he):
		msg := http.StatusText(he.Code)
		if s, ok := he.Message.(string); ok {
			msg = s
		}
		if he.Code == http.StatusRequestEntityTooLarge {
			return he.Code, ErrorBody{Error: "request body too large", Field: "body"}
		}
		return he.Code, ErrorBody{Error: msg}
	}
	return http.StatusInternalServerError, ErrorBody{Error: internalMessage}
}

func errorHandler(log *zap.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		status, body := toStatus(err)
		id := c.Response().Header().Get(echo.HeaderXRequestID)
		if body.Error == internalMessage || body.Error == conflictMessage {
			body.Error, body.RequestID = fmt.Sprintf(body.Error, id), id
		}
		// A refused request's body may not have been read (a 401 is decided
		// from the headers): close the connection instead of letting the
		// server wait for, and discard, a body that may never come.
		if c.Request().ContentLength != 0 {
			c.Response().Header().Set(echo.HeaderConnection, "close")
		}
		fields := []zap.Field{zap.String("request_id", id), zap.String("method", c.Request().Method), zap.String("path", c.Path()),
			zap.String("user", c.Param("user")), zap.String("server", c.Param("server")), zap.Int("status", status), zap.Error(err)}
		if status >= 500 && status != http.StatusServiceUnavailable {
			log.Error("request failed", fields...)
		} else {
			log.Info("request refused", fields...)
		}
		_ = c.JSON(status, body)
	}
}
