package apiclient

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/hubapi"
	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/spawner"
)

// Profiles returns the profile list the hub's options form shows.
func (c *Client) Profiles(ctx context.Context) ([]spawner.Profile, error) {
	var raw struct {
		Profiles []wireProfile `json:"profiles"`
	}
	if _, err := c.call(ctx, http.MethodGet, "/api/v1/profiles", nil, nil, &raw); err != nil {
		return nil, err
	}
	return profilesOf(raw.Profiles)
}

// Start starts a user's server ("" is the default server). The answer's
// Status is running when the server already ran (200), else pending (202);
// follow it with Progress.
func (c *Client) Start(ctx context.Context, user, server string, req hubapi.StartRequest) (*lifecycle.Server, error) {
	var s lifecycle.Server
	if _, err := c.call(ctx, http.MethodPost, ServerPath(user, server), nil, req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Poll reads a server's status, as the hub's poll does; hint is the hub's
// saved state (pod_name, namespace, pod_uid), if any.
func (c *Client) Poll(ctx context.Context, user, server string, hint lifecycle.Hint) (*lifecycle.Server, error) {
	var s lifecycle.Server
	if _, err := c.call(ctx, http.MethodGet, ServerPath(user, server), hintQuery(hint), nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

func hintQuery(h lifecycle.Hint) url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"pod_name": h.Pod, "namespace": h.Namespace, "pod_uid": string(h.UID)} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// StopOptions are a stop's query parameters.
type StopOptions struct {
	// Now deletes with grace period 0 instead of delete_grace_period.
	Now bool
	// Wait bounds how long spawnerd waits for the pod to go before it
	// answers 202 (at most its --stop-wait); 0 leaves it to spawnerd.
	Wait time.Duration
	// Hint is the hub's saved state.
	Hint lifecycle.Hint
	// By is who asked the hub for the stop; nil is the hub itself.
	By *history.Actor
}

// Stop stops a server. gone reports that the pod is gone (204); otherwise
// (202) srv is the server, still terminating.
func (c *Client) Stop(ctx context.Context, user, server string, opts StopOptions) (srv *lifecycle.Server, gone bool, err error) {
	q := hintQuery(opts.Hint)
	if opts.Now {
		q.Set("now", "true")
	}
	if opts.Wait > 0 {
		q.Set("wait", opts.Wait.String())
	}
	if opts.By != nil {
		q.Set("by", string(opts.By.Kind))
		if opts.By.Name != "" {
			q.Set("by_name", opts.By.Name)
		}
	}
	var s lifecycle.Server
	status, err := c.call(ctx, http.MethodDelete, ServerPath(user, server), q, nil, &s)
	if err != nil {
		return nil, false, err
	}
	if status == http.StatusNoContent {
		return nil, true, nil
	}
	return &s, false, nil
}

// DeleteForever deletes a stopped server's PVC as KubeSpawner's
// delete_forever does, once the hub deleted the user or the named server.
func (c *Client) DeleteForever(ctx context.Context, user, server string, saved lifecycle.SavedState) (*lifecycle.StorageDeletion, error) {
	q := url.Values{"user_id": {strconv.Itoa(saved.UserID)}}
	if saved.PVCName != "" {
		q.Set("pvc_name", saved.PVCName)
	}
	if saved.Namespace != "" {
		q.Set("namespace", saved.Namespace)
	}
	var d lifecycle.StorageDeletion
	if _, err := c.call(ctx, http.MethodDelete, ServerPath(user, server)+"/storage", q, nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// ListServers lists every server, with those that stopped recently (admin).
func (c *Client) ListServers(ctx context.Context) (*hubapi.ServerList, error) {
	var l hubapi.ServerList
	if _, err := c.call(ctx, http.MethodGet, "/api/v1/servers", nil, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Server returns one server with its last Kubernetes events (admin); a
// server spawnerd knows nothing of is a 404 *Error.
func (c *Client) Server(ctx context.Context, user, server string) (*lifecycle.Server, error) {
	p := "/api/v1/servers/" + url.PathEscape(user)
	if server != "" {
		p += "/" + url.PathEscape(server)
	}
	var s lifecycle.Server
	if _, err := c.call(ctx, http.MethodGet, p, nil, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}
