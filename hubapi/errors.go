package hubapi

import (
	"errors"
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

// ErrorBody is every error response: what went wrong and which input it concerns.
type ErrorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// toStatus is the one table from errors to HTTP statuses.
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
		return http.StatusConflict, ErrorBody{Error: err.Error()}
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
	return http.StatusInternalServerError, ErrorBody{Error: "internal error: " + err.Error()}
}

func errorHandler(log *zap.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		status, body := toStatus(err)
		fields := []zap.Field{zap.String("method", c.Request().Method), zap.String("path", c.Path()), zap.Int("status", status), zap.Error(err)}
		if status >= 500 && status != http.StatusServiceUnavailable {
			log.Error("request failed", fields...)
		} else {
			log.Info("request refused", fields...)
		}
		_ = c.JSON(status, body)
	}
}
