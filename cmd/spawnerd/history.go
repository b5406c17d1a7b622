package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/dsmlp/spawner/history"
)

// historyFlags configure the session history.
type historyFlags struct {
	dsn         string
	retention   days
	recentStops time.Duration
}

// days is a duration flag that also takes whole days ("90d").
type days time.Duration

func (d *days) String() string { return time.Duration(*d).String() }
func (d *days) Set(v string) error {
	if n, ok := strings.CutSuffix(v, "d"); ok {
		i, err := strconv.Atoi(n)
		if err != nil || i <= 0 {
			return fmt.Errorf("%q is not a whole number of days", v)
		}
		*d = days(time.Duration(i) * 24 * time.Hour)
		return nil
	}
	x, err := time.ParseDuration(v)
	if err != nil || x <= 0 {
		return fmt.Errorf("%q is neither a positive duration nor a number of days such as 90d", v)
	}
	*d = days(x)
	return nil
}

func (f *historyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dsn, "history-dsn", envDefault("SPAWNERD_HISTORY_DSN", "sqlite://spawnerd-history.db"),
		"session history database: sqlite:///path/history.db (embedded, one replica) or postgres://user@host/db (replicas); else $SPAWNERD_HISTORY_DSN")
	f.retention = days(history.DefaultRetention)
	fs.Var(&f.retention, "history-retention", "how long ended sessions are kept (a duration, or days such as 90d)")
	fs.DurationVar(&f.recentStops, "recent-stops", time.Hour, "how long a stopped server stays in the admin server list, with why it stopped")
}

// open opens (and migrates) the history store.
func (f *historyFlags) open(ctx context.Context, log *zap.Logger) (*history.Store, error) {
	if f.recentStops <= 0 {
		return nil, fmt.Errorf("--recent-stops must be positive, got %s", f.recentStops)
	}
	store, err := history.Open(ctx, f.dsn, history.Options{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("opening the session history (--history-dsn): %w", err)
	}
	log.Info("session history opened", zap.String("backend", store.Backend()), zap.Duration("retention", time.Duration(f.retention)))
	return store, nil
}

// purgeLoop deletes sessions older than the retention, hourly, while
// leading() (any replica may, but one is enough).
func (f *historyFlags) purgeLoop(ctx context.Context, store *history.Store, leading func() bool, log *zap.Logger) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		if leading() {
			n, err := store.Purge(ctx, time.Now().Add(-time.Duration(f.retention)))
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("session history: purge failed", zap.Error(err))
			case n > 0:
				log.Info("session history: purged old sessions", zap.Int64("sessions", n))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// envDefault is $name, else def: a flag's default that a deployment can set
// without putting a secret on the command line.
func envDefault(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
