package hubclient

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Hub is a client of the JupyterHub REST API, authenticated as a service
// token with the delete:servers scope (or admin:servers).
type Hub struct {
	// Retry is the backoff for connection errors, 429 and 5xx answers.
	// NewHub sets 4 attempts over about 2 s.
	Retry wait.Backoff
	ep    endpoint
}

// NewHub returns a client of the hub API at apiURL, e.g.
// http://127.0.0.1:8081/hub/api. A nil httpClient means one with a 10 s
// timeout.
func NewHub(apiURL, token string, httpClient *http.Client) *Hub {
	return &Hub{Retry: defaultRetry(), ep: newEndpoint(apiURL, token, httpClient)}
}

// PendingError is the hub's refusal to stop a server while a spawn or a
// check of it is in progress (400 "... is pending spawn, please wait").
type PendingError struct {
	User, Server string
	Message      string
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("hub refused to stop server %q of user %q: %s", e.Server, e.User, e.Message)
}

// StopServer asks the hub to stop a server: DELETE /users/{user}/server, or
// /users/{user}/servers/{server} for a named server. On a server the hub
// thinks ready, the hub first polls it, so a server that died is cleaned up
// at once (route, tokens, record). 202 and 204 mean done or under way, and
// 404 means the hub no longer knows the server; both return nil. A pending
// spawn returns a *PendingError; no connection or 5xx after retries returns
// an error wrapping ErrUnavailable.
func (h *Hub) StopServer(ctx context.Context, user, server string) error {
	if user == "" {
		return fmt.Errorf("stopping server %q: empty user name", server)
	}
	path := "/users/" + hubQuote(user) + "/server"
	if server != "" {
		path = "/users/" + hubQuote(user) + "/servers/" + hubQuote(server)
	}
	code, body, err := h.ep.do(ctx, h.Retry, http.MethodDelete, path)
	if err != nil {
		return fmt.Errorf("stopping server %q of user %q: %w", server, user, err)
	}
	switch {
	case code >= 200 && code < 300, code == http.StatusNotFound:
		return nil
	case code == http.StatusBadRequest && strings.Contains(errorMessage(body), "pending"):
		return &PendingError{User: user, Server: server, Message: errorMessage(body)}
	default:
		return &StatusError{Method: http.MethodDelete, URL: h.ep.base + path, Code: code, Message: errorMessage(body)}
	}
}

// hubQuote escapes a user or server name as the hub does in URLs
// (jupyterhub.utils.url_escape_path: Python's quote(name, safe="@~")).
func hubQuote(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '_', c == '.', c == '-', c == '~', c == '@':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}
