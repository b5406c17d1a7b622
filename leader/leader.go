// Package leader campaigns for a coordination.k8s.io Lease, so that one
// replica of several does a job at a time, and another takes it over when
// that one dies, freezes or is cut off from the API server.
package leader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Options names the Lease and its timing (client-go's leaderelection
// meanings). Zero durations take the defaults: 15s, 10s, 2s.
type Options struct {
	Namespace, Name string
	// Identity is this replica's name in the Lease.
	Identity      string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	Logger        *zap.Logger
}

func (o *Options) defaults() error {
	if o.Namespace == "" || o.Name == "" || o.Identity == "" {
		return errors.New("leader: the Lease needs a namespace, a name and an identity")
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = 15 * time.Second
	}
	if o.RenewDeadline == 0 {
		o.RenewDeadline = 10 * time.Second
	}
	if o.RetryPeriod == 0 {
		o.RetryPeriod = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if !(o.RetryPeriod < o.RenewDeadline && o.RenewDeadline < o.LeaseDuration) {
		return fmt.Errorf("leader: want retry period (%s) < renew deadline (%s) < lease duration (%s)", o.RetryPeriod, o.RenewDeadline, o.LeaseDuration)
	}
	return nil
}

// Check validates the options without campaigning.
func (o Options) Check() error { return o.defaults() }

// Run campaigns until ctx is done. lead(true) is called on taking the
// Lease and lead(false) on losing it (renewal failed past the deadline, or
// ctx ended); after a loss Run campaigns again. On a clean shutdown the
// Lease is released, so another replica takes over at once.
func Run(ctx context.Context, client kubernetes.Interface, opts Options, lead func(bool)) error {
	if err := opts.defaults(); err != nil {
		return err
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, opts.Namespace, opts.Name,
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: opts.Identity})
	if err != nil {
		return fmt.Errorf("leader: making the Lease lock: %w", err)
	}
	log := opts.Logger.With(zap.String("lease", opts.Namespace+"/"+opts.Name), zap.String("identity", opts.Identity))
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: opts.LeaseDuration, RenewDeadline: opts.RenewDeadline, RetryPeriod: opts.RetryPeriod,
			ReleaseOnCancel: true, Name: opts.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {
					log.Info("took the lead")
					lead(true)
				},
				OnStoppedLeading: func() {
					log.Info("lost the lead")
					lead(false)
				},
				OnNewLeader: func(id string) {
					if id != opts.Identity {
						log.Info("another replica leads", zap.String("leader", id))
					}
				},
			},
		})
		if err != nil {
			return fmt.Errorf("leader: %w", err)
		}
		le.Run(ctx)
	}
	return nil
}
