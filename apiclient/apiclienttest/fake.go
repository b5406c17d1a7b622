// Package apiclienttest runs spawnerd's real HTTP API (hubapi) over fake
// servers, session history and GPU reservations that hold realistic data,
// for tests of API clients and of the API's documentation.
//
// The data, relative to Fake.Now:
//   - alice's default server runs on local-runtime (profile cpu, course
//     DSC10, started 5 minutes ago) and has a running session;
//   - bob's "gpu work" server waits for a5000 GPUs under booking res-7;
//   - carol's default server was evicted 2 hours ago (its pod is gone):
//     the list shows it with its stop reason, the history with its end;
//   - dave's default server runs with a Spark cluster;
//   - erin's default server ended by the idle culler yesterday, a session
//     with every field set; frank has 150 old sessions (two pages);
//   - bookings res-7 (bob, active) and res-5 (a lease it superseded), GPU
//     classes a5000 and a100.
//
// A few names make the fakes fail as the real ones can: starting with
// profile "nope" is a bad profile (400), "huge" is over quota (403); user
// "conflict" hits a name conflict (409) and user "boom" an internal error
// (500); stopping bob's server answers 202; alice's storage cannot be
// deleted while her server runs (409).
package apiclienttest

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/dsmlp/spawner/hubapi"
)

// Fake is a running spawnerd API over fakes.
type Fake struct {
	// URL is the API's base URL.
	URL string
	// Secret is the shared secret its tokens are signed with.
	Secret []byte
	// Now is the fakes' clock: the data's times are relative to it.
	Now          time.Time
	Servers      *Servers
	History      *History
	Reservations *Reservations
}

// Options change what New serves.
type Options struct {
	// Now is the data's clock; zero is the current time to the second.
	Now time.Time
	// NoHistory and NoReservations turn those features off (their routes
	// answer 404), as a spawnerd without them.
	NoHistory, NoReservations bool
}

// New starts the API on a loopback port until the test ends.
func New(t testing.TB, opts Options) *Fake {
	t.Helper()
	now := opts.Now
	if now.IsZero() {
		now = time.Now().UTC().Truncate(time.Second)
	}
	f := &Fake{Secret: []byte("apiclienttest-shared-secret-0123456789abcdef"), Now: now,
		Servers: newServers(now), History: newHistory(now), Reservations: newReservations(now)}
	// Tokens are signed with the real clock, so the authenticator keeps it.
	auth, err := hubapi.NewAuthenticator(f.Secret, "jupyterhub", nil)
	if err != nil {
		t.Fatal(err)
	}
	apiOpts := hubapi.Options{Servers: f.Servers, Auth: auth, Location: time.UTC, Now: func() time.Time { return now },
		StopWait: 2 * time.Second, BodyLimit: "64K",
		Profiles: profiles, Ready: func() bool { return true }}
	if !opts.NoHistory {
		apiOpts.History = f.History
	}
	if !opts.NoReservations {
		apiOpts.Reservations = f.Reservations
	}
	srv := httptest.NewServer(hubapi.New(apiOpts))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// errInternal stands for any unexpected failure behind the API.
var errInternal = errors.New("the API server is unreachable: dial tcp 10.96.0.1:443: connection refused")

func ptr[T any](v T) *T { return &v }

func ago(now time.Time, d time.Duration) *time.Time { return ptr(now.Add(-d)) }

// failing reports the error a name is set up to fail with, if any.
func failing(user string) error {
	switch user {
	case "boom":
		return fmt.Errorf("creating the pod: %w", errInternal)
	}
	return nil
}
