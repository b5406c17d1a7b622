package hubclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Proxy is a client of the configurable-http-proxy (CHP) REST API.
type Proxy struct {
	// Retry is the backoff for connection errors, 429 and 5xx answers.
	// NewProxy sets 4 attempts over about 2 s.
	Retry wait.Backoff
	ep    endpoint
}

// NewProxy returns a client of the CHP API at apiURL, e.g.
// http://127.0.0.1:8001, authenticated with CONFIGPROXY_AUTH_TOKEN. A nil
// httpClient means one with a 10 s timeout.
func NewProxy(apiURL, token string, httpClient *http.Client) *Proxy {
	return &Proxy{Retry: defaultRetry(), ep: newEndpoint(apiURL, token, httpClient)}
}

// Route is one CHP route with the data the hub stored on it.
type Route struct {
	Target       string    `json:"target"`
	User         string    `json:"user,omitempty"`
	ServerName   string    `json:"server_name,omitempty"`
	JupyterHub   bool      `json:"jupyterhub,omitempty"` // the hub's check_routes manages it
	LastActivity time.Time `json:"last_activity,omitzero"`
	// Data holds every field of the route as CHP returned it.
	Data map[string]any `json:"-"`
}

// UnmarshalJSON implements json.Unmarshaler, keeping all fields in Data.
func (r *Route) UnmarshalJSON(b []byte) error {
	type plain Route
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	if err := json.Unmarshal(b, &p.Data); err != nil {
		return err
	}
	*r = Route(p)
	return nil
}

// Routes returns all routes, keyed by path as CHP reports it (unescaped,
// without trailing slash; "/" is the hub's default route).
func (p *Proxy) Routes(ctx context.Context) (map[string]Route, error) {
	code, body, err := p.ep.do(ctx, p.Retry, http.MethodGet, "/api/routes")
	if err != nil {
		return nil, fmt.Errorf("listing proxy routes: %w", err)
	}
	if code != http.StatusOK {
		return nil, &StatusError{Method: http.MethodGet, URL: p.ep.base + "/api/routes", Code: code, Message: errorMessage(body)}
	}
	routes := map[string]Route{}
	if err := json.Unmarshal(body, &routes); err != nil {
		return nil, fmt.Errorf("decoding proxy routes: %w", err)
	}
	return routes, nil
}

// DeleteRoute deletes the route at path, given in the URL-escaped form the
// hub sends (UserRoutePath); CHP unescapes it. A missing route is not an
// error.
func (p *Proxy) DeleteRoute(ctx context.Context, path string) error {
	path = chpPath(path)
	code, body, err := p.ep.do(ctx, p.Retry, http.MethodDelete, "/api/routes"+path)
	if err != nil {
		return fmt.Errorf("deleting proxy route %s: %w", path, err)
	}
	if code >= 200 && code < 300 || code == http.StatusNotFound {
		return nil
	}
	return &StatusError{Method: http.MethodDelete, URL: p.ep.base + "/api/routes" + path, Code: code, Message: errorMessage(body)}
}

// chpPath turns a routespec into a CHP API path as the hub's
// ConfigurableHTTPProxy does: leading slash, no trailing slash (CHP's DELETE
// does not match one), "/" kept.
func chpPath(routespec string) string {
	if !strings.HasPrefix(routespec, "/") {
		routespec = "/" + routespec
	}
	if routespec != "/" {
		routespec = strings.TrimRight(routespec, "/")
		if routespec == "" {
			routespec = "/"
		}
	}
	return routespec
}

// UserRoutePath returns the proxy route of a user's server as the hub names
// it: {base_url}user/{user}[/{server}], names escaped as the hub escapes them
// in URLs, no trailing slash. baseURL is JupyterHub.base_url ("/" if empty).
// Host-based routing (subdomain_host) is not covered.
func UserRoutePath(baseURL, user, server string) string {
	parts := []string{strings.Trim(baseURL, "/"), "user", hubQuote(user)}
	if server != "" {
		parts = append(parts, hubQuote(server))
	}
	var b strings.Builder
	for _, p := range parts {
		if p != "" {
			b.WriteByte('/')
			b.WriteString(p)
		}
	}
	return b.String()
}
