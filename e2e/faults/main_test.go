// Package faults_test runs three spawnerd replicas as containers (a FROM
// scratch image built through testcontainers-go) behind a load balancer,
// with the real hub and proxy on this machine, and breaks things: replicas
// killed, frozen and cut off, the API server restarted, the hub stopped.
package faults_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"

	"testing"

	"github.com/dsmlp/spawner/e2e/harness"
)

// requireStopLease: flip to true once spawnerd has the stop Lease
// (--stop-lease-name and friends) and the /readyz that turns false when the
// API server is unreachable; until then the tests that need them skip.
const requireStopLease = true

// suite is what TestMain set up for every test.
type suite struct {
	docker *harness.Docker
	net    *harness.Network
	image  string
	// stopLease: the binary takes --stop-lease-name (the leader-only stop reactions).
	stopLease bool
}

var (
	env *harness.Env
	s   suite
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// Ryuk, testcontainers' reaper, is an image to pull; there is no
	// registry to pull it from. Everything started here is removed here.
	if err := os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true"); err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	ctx := context.Background()
	d, err := harness.NewDocker(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults: a Docker engine is needed:", err)
		return 1
	}
	defer d.Close()
	s.docker = d
	// One network: the replicas reach the API server and the hub at its
	// gateway (this machine), the balancer reaches them. One only, because
	// Docker gives a container a default route through any network it is
	// on (internal ones too), and this machine accepts packets for its
	// gateway address from any of them: a replica taken off one of two
	// networks would still reach the API server through the other.
	if s.net, err = d.CreateNetwork(ctx, "172.29.83.0/24", "172.29.183.0/24", "10.213.83.0/24"); err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	defer removeNetwork(s.net)
	repo, err := harness.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "spawnerd-static-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin, err := harness.BuildStatic(repo, "./cmd/spawnerd", dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	s.stopLease = hasFlag(bin, "stop-lease-name")
	if requireStopLease && !s.stopLease {
		fmt.Fprintln(os.Stderr, "faults: spawnerd serve has no --stop-lease-name")
		return 1
	}
	if s.image, err = d.BuildStaticImage(ctx, bin, "spawnerd-faults"); err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	defer func() {
		if err := d.RemoveImage(context.Background(), s.image); err != nil {
			fmt.Fprintln(os.Stderr, "faults:", err)
		}
	}()
	return harness.MainWith(m, &env, harness.ClusterOptions{ServeIP: net.IP(s.net.Gateway.AsSlice())})
}

func removeNetwork(n *harness.Network) {
	if err := n.Remove(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
	}
}

// hasFlag reports whether `bin serve -h` lists flag.
func hasFlag(bin, flag string) bool {
	out, _ := exec.Command(bin, "serve", "-h").CombinedOutput()
	return strings.Contains(string(out), "-"+flag+" ")
}

// needStopLease skips a test that needs the leader-only stop reactions.
func needStopLease(t *testing.T) {
	t.Helper()
	if !s.stopLease {
		t.Skip("spawnerd has no --stop-lease-name yet: stop reactions run on every replica and a spawn's progress lives in one, so several replicas behind a balancer are not defined")
	}
}
