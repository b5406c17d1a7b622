package apiclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/gorilla/websocket"

	"github.com/dsmlp/spawner/lifecycle"
)

// Progress reads a spawn's progress stream until spawnerd closes it (after
// a ready or failed event) and returns every event, replayed from the
// first. On an error it returns the events read so far with it.
func (c *Client) Progress(ctx context.Context, user, server string) ([]lifecycle.Event, error) {
	var out []lifecycle.Event
	err := c.FollowProgress(ctx, user, server, func(e lifecycle.Event) error {
		out = append(out, e)
		return nil
	})
	return out, err
}

// FollowProgress calls fn with each event of a spawn's progress stream as
// it comes, until spawnerd closes the stream (nil), ctx ends (its error),
// or fn returns an error, which FollowProgress returns as it is.
func (c *Client) FollowProgress(ctx context.Context, user, server string, fn func(lifecycle.Event) error) error {
	u := c.base + ServerPath(user, server) + "/progress"
	switch {
	case strings.HasPrefix(u, "https://"):
		u = "wss://" + strings.TrimPrefix(u, "https://")
	default:
		u = "ws://" + strings.TrimPrefix(u, "http://")
	}
	h := http.Header{}
	if err := c.authorize(ctx, h, c.as); err != nil {
		return err
	}
	ws, resp, err := c.dialer.DialContext(ctx, u, h)
	if err != nil {
		if resp != nil && errors.Is(err, websocket.ErrBadHandshake) {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, maxMessage*4))
			return errorOf(resp.StatusCode, resp.Header, body)
		}
		return fmt.Errorf("opening the progress stream of %s/%s: %w", user, server, err)
	}
	defer ws.Close()
	// A read does not watch ctx: closing the connection ends it.
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			ws.Close()
		case <-done:
		}
	}()
	for {
		var e lifecycle.Event
		err := ws.ReadJSON(&e)
		switch {
		case err == nil:
		case websocket.IsCloseError(err, websocket.CloseNormalClosure):
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			return fmt.Errorf("reading the progress stream of %s/%s: %w", user, server, err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
}
