package hubclient

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/dsmlp/spawner/poll"
)

// Notifier implements poll.Notifier. It tells the hub that a server stopped
// by asking it to stop the server (jupyterhub-protocol.md §2.3): the hub
// polls it, sees it stopped and drops its route, tokens and record at once.
// Only if the hub cannot be reached does it delete the CHP route itself;
// the hub's check_routes re-adds a route of a server it thinks ready, so that
// is a stop-gap, and the error is still returned so that the hub is asked
// again later.
type Notifier struct {
	Hub     *Hub
	Proxy   *Proxy // may be nil: no fallback
	BaseURL string // JupyterHub.base_url, for the route path
	Logger  *zap.Logger

	// calls coalesces reports of one server made at the same time (two
	// pods of it ending together, a retry racing the first try): the hub
	// gets one call, and every report its answer.
	calls singleflight.Group
}

var _ poll.Notifier = (*Notifier)(nil)

// ServerStopped implements poll.Notifier.
func (n *Notifier) ServerStopped(ctx context.Context, s poll.ServerRef, why poll.StopInfo) error {
	_, err, _ := n.calls.Do(s.User+"\x00"+s.Server, func() (any, error) { return nil, n.serverStopped(ctx, s, why) })
	return err
}

func (n *Notifier) serverStopped(ctx context.Context, s poll.ServerRef, why poll.StopInfo) error {
	if n.Hub == nil {
		return errors.New("hub notifier: no hub client")
	}
	log := n.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.With(zap.String("user", s.User), zap.String("server", s.Server),
		zap.String("pod", s.Pod), zap.String("namespace", s.Namespace))

	err := n.Hub.StopServer(ctx, s.User, s.Server)
	if err == nil {
		log.Info("hub told server stopped", zap.String("reason", why.Reason), zap.Int("exit_code", why.ExitCode))
		return nil
	}
	if !errors.Is(err, ErrUnavailable) || n.Proxy == nil {
		return fmt.Errorf("telling the hub: %w", err)
	}

	route := UserRoutePath(n.BaseURL, s.User, s.Server)
	if perr := n.Proxy.DeleteRoute(ctx, route); perr != nil {
		return errors.Join(fmt.Errorf("telling the hub: %w", err), fmt.Errorf("fallback: %w", perr))
	}
	log.Warn("hub unreachable, proxy route deleted", zap.String("route", route), zap.Error(err))
	return fmt.Errorf("hub unreachable, proxy route %s deleted as a stop-gap: %w", route, err)
}
