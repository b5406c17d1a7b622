// Package hubclient tells JupyterHub that a server stopped, and falls back to
// removing its configurable-http-proxy route when the hub cannot be reached.
package hubclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// ErrUnavailable means the server could not be reached, or kept answering
// with a 5xx status, through all retries.
var ErrUnavailable = errors.New("unavailable")

// StatusError is an HTTP answer the client did not expect.
type StatusError struct {
	Method  string
	URL     string
	Code    int
	Message string // the "message" of a JupyterHub error body, else the body
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.URL, e.Code, e.Message)
}

// defaultRetry is the backoff NewHub and NewProxy set for connection errors
// and 5xx answers: 4 attempts over about 2 s.
func defaultRetry() wait.Backoff {
	return wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 4}
}

// defaultTimeout matches the hub's own CHP client request timeout.
const defaultTimeout = 10 * time.Second

// maxBody bounds how much of an answer is read.
const maxBody = 4 << 20

// endpoint is an authenticated REST server: the hub API or the CHP API.
type endpoint struct {
	base   string // without trailing slash
	token  string
	client *http.Client
}

func newEndpoint(base, token string, c *http.Client) endpoint {
	if c == nil {
		c = &http.Client{Timeout: defaultTimeout}
	}
	return endpoint{base: strings.TrimRight(base, "/"), token: token, client: c}
}

// do sends a request to base+path (path already URL-escaped) and returns the
// status and body of the answer. Connection errors, 429 and 5xx answers are
// retried with backoff; when retries run out the error wraps ErrUnavailable.
func (e *endpoint) do(ctx context.Context, backoff wait.Backoff, method, path string) (int, []byte, error) {
	url := e.base + path
	if backoff.Steps < 1 {
		backoff.Steps = 1
	}
	var lastErr error
	for {
		code, body, err := e.once(ctx, method, url)
		switch {
		case err == nil && code < 500 && code != http.StatusTooManyRequests:
			return code, body, nil
		case err == nil:
			lastErr = &StatusError{Method: method, URL: url, Code: code, Message: errorMessage(body)}
		case ctx.Err() != nil:
			return 0, nil, fmt.Errorf("%s %s: %w", method, url, err)
		default:
			lastErr = err
		}
		if backoff.Steps <= 1 {
			return 0, nil, fmt.Errorf("%w: %w", ErrUnavailable, lastErr)
		}
		t := time.NewTimer(backoff.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, nil, fmt.Errorf("%s %s: %w (last error: %w)", method, url, ctx.Err(), lastErr)
		case <-t.C:
		}
	}
}

func (e *endpoint) once(ctx context.Context, method, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("building request: %w", err)
	}
	if e.token != "" {
		req.Header.Set("Authorization", "token "+e.token)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: reading answer: %w", method, url, err)
	}
	return resp.StatusCode, body, nil
}

// errorMessage returns the message of a JupyterHub error body
// ({"status": 400, "message": "..."}), else the body itself.
func errorMessage(body []byte) string {
	var m struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &m); err == nil && m.Message != "" {
		return m.Message
	}
	return strings.TrimSpace(string(body))
}
