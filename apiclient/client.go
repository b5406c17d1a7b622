// Package apiclient is a typed Go client of spawnerd's HTTP API: the calls
// the hub-side spawner class makes (start, poll, stop, progress, delete
// forever), the admin views (servers, sessions, why, GPU reservations) and
// the health endpoints. Answers decode into the API's own types; an error
// answer becomes an *Error.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/dsmlp/spawner/hubapi"
)

// maxAnswerBytes bounds what is read of one answer: a full server list of
// a large deployment is a few MB, so this only stops a runaway stream.
const maxAnswerBytes = 256 << 20

// User is whom a request is signed for: sub and the admin claim.
type User struct {
	Name  string
	Admin bool
}

// TokenSource returns a bearer token for one request as user. spawnerd
// accepts a token once, so it must return a fresh one on every call.
type TokenSource func(ctx context.Context, as User) (string, error)

// SharedSecret signs tokens as the hub-side spawner class does: HS256 over
// the secret spawnerd shares with the hub, valid for a minute.
func SharedSecret(secret []byte) TokenSource {
	return func(_ context.Context, as User) (string, error) {
		tok, err := hubapi.Sign(secret, as.Name, as.Admin, time.Now())
		if err != nil {
			return "", fmt.Errorf("signing a token for %s: %w", as.Name, err)
		}
		return tok, nil
	}
}

// Client calls one spawnerd. It is safe for concurrent use.
type Client struct {
	base   string // scheme://host[/prefix], without a trailing slash
	as     User
	tokens TokenSource
	http   *http.Client
	dialer *websocket.Dialer
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends requests through hc instead of a default client
// without a timeout (use the context for deadlines).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithDialer opens progress WebSockets with d instead of
// websocket.DefaultDialer.
func WithDialer(d *websocket.Dialer) Option { return func(c *Client) { c.dialer = d } }

// New returns a client of the spawnerd at baseURL (e.g.
// http://127.0.0.1:8090) that signs every request as user with tokens. A
// nil tokens sends no Authorization header.
func New(baseURL string, as User, tokens TokenSource, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("spawnerd URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("spawnerd URL %q must be http(s)://host[:port][/prefix]", baseURL)
	}
	c := &Client{base: strings.TrimSuffix(baseURL, "/"), as: as, tokens: tokens, http: &http.Client{}, dialer: websocket.DefaultDialer}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// As returns a copy of c that signs its requests as user.
func (c *Client) As(user User) *Client {
	cp := *c
	cp.as = user
	return &cp
}

// URL is the base URL the client calls.
func (c *Client) URL() string { return c.base }

// ServerPath is the API path of a user's server, escaped ("" is the
// default server).
func ServerPath(user, server string) string {
	p := "/api/v1/users/" + url.PathEscape(user)
	if server == "" {
		return p + "/server"
	}
	return p + "/servers/" + url.PathEscape(server)
}

// Do sends one request as user without interpreting it, for callers that
// must send what the typed methods cannot (malformed bodies, say): path is
// escaped and may carry a query; a non-nil body is sent as JSON. It
// returns the answer's status and body; an error answer is not an error.
func (c *Client) Do(ctx context.Context, method, path string, body io.Reader, as User) (int, []byte, error) {
	a, err := c.send(ctx, method, path, body, as)
	if err != nil {
		return 0, nil, err
	}
	return a.status, a.body, nil
}

// answer is one HTTP answer, read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (c *Client) send(ctx context.Context, method, path string, body io.Reader, as User) (*answer, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if err := c.authorize(ctx, req.Header, as); err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("calling spawnerd: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if len(data) > maxAnswerBytes {
		return nil, fmt.Errorf("%s %s: the answer is longer than %d bytes", method, path, maxAnswerBytes)
	}
	return &answer{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

func (c *Client) authorize(ctx context.Context, h http.Header, as User) error {
	if c.tokens == nil {
		return nil
	}
	tok, err := c.tokens(ctx, as)
	if err != nil {
		return err
	}
	h.Set("Authorization", "Bearer "+tok)
	return nil
}

// call sends in (if not nil) as JSON and decodes a 2xx answer into out (if
// not nil); any other answer becomes an *Error. It returns the status.
func (c *Client) call(ctx context.Context, method, path string, query url.Values, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("%s %s: encoding the request: %w", method, path, err)
		}
		body = bytes.NewReader(data)
	}
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	a, err := c.send(ctx, method, path, body, c.as)
	if err != nil {
		return 0, err
	}
	if a.status < 200 || a.status > 299 {
		return a.status, errorOf(a.status, a.header, a.body)
	}
	if out != nil && len(bytes.TrimSpace(a.body)) > 0 {
		if err := json.Unmarshal(a.body, out); err != nil {
			return a.status, fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
		}
	}
	return a.status, nil
}

// text GETs a plain-text endpoint.
func (c *Client) text(ctx context.Context, path string) (string, error) {
	a, err := c.send(ctx, http.MethodGet, path, nil, c.as)
	if err != nil {
		return "", err
	}
	if a.status != http.StatusOK {
		return "", errorOf(a.status, a.header, a.body)
	}
	return string(a.body), nil
}

// Healthz reports whether spawnerd is alive.
func (c *Client) Healthz(ctx context.Context) error {
	_, err := c.text(ctx, "/healthz")
	return err
}

// Readyz reports whether spawnerd is ready: nil, or an *Error (503) that
// says what it waits for.
func (c *Client) Readyz(ctx context.Context) error {
	_, err := c.text(ctx, "/readyz")
	return err
}

// Metrics returns spawnerd's Prometheus metrics in the text format.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	return c.text(ctx, "/metrics")
}
