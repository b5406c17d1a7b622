package apiclient

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/dsmlp/spawner/hubapi"
)

// Error is an error answer of the API: its status, the message, the input
// it concerns and the request's ID (which spawnerd's log line carries).
type Error struct {
	Status int
	// Message is the API's error text, or the start of the body of an
	// answer that was not the API's JSON (a proxy's, say).
	Message string
	// Field names the input the error is about (user_options.profile,
	// Authorization, ...), when the API says.
	Field     string
	RequestID string
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s (field %s, HTTP %d)", e.Message, e.Field, e.Status)
	}
	return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status)
}

// maxMessage bounds the part of a foreign body an Error quotes.
const maxMessage = 200

// errorOf makes the *Error of an answer that is not a success.
func errorOf(status int, h http.Header, body []byte) *Error {
	e := &Error{Status: status, RequestID: h.Get("X-Request-Id")}
	var eb hubapi.ErrorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error != "" {
		e.Message, e.Field = eb.Error, eb.Field
		if eb.RequestID != "" {
			e.RequestID = eb.RequestID
		}
		return e
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
		for !utf8.ValidString(msg) {
			msg = msg[:len(msg)-1]
		}
		msg += "…"
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	e.Message = msg
	return e
}
