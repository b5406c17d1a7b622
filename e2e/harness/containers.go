package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Docker is the machine's Docker engine, driven through testcontainers-go.
// Ryuk (testcontainers' reaper) needs a pulled image, so a test package
// must set TESTCONTAINERS_RYUK_DISABLED=true and remove what it starts.
type Docker struct {
	provider *testcontainers.DockerProvider
}

// NewDocker connects to the engine; it fails when there is none.
func NewDocker(ctx context.Context) (*Docker, error) {
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") != "true" {
		return nil, errors.New("harness: set TESTCONTAINERS_RYUK_DISABLED=true: Ryuk needs an image that cannot be pulled here")
	}
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return nil, fmt.Errorf("harness: docker: %w", err)
	}
	if _, err := p.Client().Ping(ctx, client.PingOptions{}); err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("harness: docker ping: %w", err)
	}
	return &Docker{provider: p}, nil
}

// Close drops the engine connection.
func (d *Docker) Close() { _ = d.provider.Close() }

// Network is a private bridge network of the test's.
type Network struct {
	ID      string
	Name    string
	Subnet  netip.Prefix
	Gateway netip.Addr // this machine's address on the network
	net     *testcontainers.DockerNetwork
}

// CreateNetwork creates an internal bridge network (no route off the
// machine: containers reach only each other and this machine's gateway
// address) on the first of subnets that does not overlap a network of the
// engine's or the machine's.
func (d *Docker) CreateNetwork(ctx context.Context, subnets ...string) (*Network, error) {
	var errs []error
	for _, s := range subnets {
		prefix, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("harness: subnet %q: %w", s, err)
		}
		gw := prefix.Masked().Addr().Next()
		n, err := tcnetwork.New(ctx, tcnetwork.WithInternal(), tcnetwork.WithIPAM(&network.IPAM{
			Config: []network.IPAMConfig{{Subnet: prefix.Masked(), Gateway: gw}},
		}))
		if err != nil {
			// "Pool overlaps with other one on this address space": try the next.
			if strings.Contains(err.Error(), "overlaps") {
				errs = append(errs, fmt.Errorf("%s: %w", s, err))
				continue
			}
			return nil, fmt.Errorf("harness: creating network on %s: %w", s, err)
		}
		return &Network{ID: n.ID, Name: n.Name, Subnet: prefix.Masked(), Gateway: gw, net: n}, nil
	}
	return nil, fmt.Errorf("harness: every subnet overlaps: %w", errors.Join(errs...))
}

// Remove deletes the network.
func (n *Network) Remove(ctx context.Context) error {
	if err := n.net.Remove(ctx); err != nil {
		return fmt.Errorf("harness: removing network %s: %w", n.Name, err)
	}
	return nil
}

// BuildStaticImage builds an image FROM scratch that holds only binary (a
// static one: CGO_ENABLED=0) as its entrypoint, and returns its tag.
func (d *Docker) BuildStaticImage(ctx context.Context, binary, repo string) (string, error) {
	dir, err := os.MkdirTemp("", "image-context-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	name := filepath.Base(binary)
	data, err := os.ReadFile(binary)
	if err != nil {
		return "", fmt.Errorf("harness: reading %s: %w", binary, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o755); err != nil {
		return "", err
	}
	dockerfile := fmt.Sprintf("FROM scratch\nCOPY %s /%s\nUSER 65534:65534\nENTRYPOINT [\"/%s\"]\n", name, name, name)
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		return "", err
	}
	req := testcontainers.ContainerRequest{FromDockerfile: testcontainers.FromDockerfile{
		Context: dir, Dockerfile: "Dockerfile", Repo: repo, Tag: rand.String(8), BuildLogWriter: io.Discard,
	}}
	tag, err := d.provider.BuildImage(ctx, &req)
	if err != nil {
		return "", fmt.Errorf("harness: building image %s: %w", repo, err)
	}
	return tag, nil
}

// RemoveImage deletes an image this test built.
func (d *Docker) RemoveImage(ctx context.Context, tag string) error {
	if _, err := d.provider.Client().ImageRemove(ctx, tag, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil {
		return fmt.Errorf("harness: removing image %s: %w", tag, err)
	}
	return nil
}

// BuildStatic builds a command of this module as a static binary (no cgo),
// which runs in a FROM scratch image.
func BuildStatic(repo, pkg, dir string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

// ContainerOptions describe a container of the test's.
type ContainerOptions struct {
	Name  string
	Image string
	Args  []string
	Env   map[string]string
	// Files are written into the container before it starts, path → content (mode 0444).
	Files map[string][]byte
	// Networks: the container is attached to each; it has no other.
	Networks []*Network
}

// Container is a running container of the test's; t.Cleanup removes it.
type Container struct {
	Name string
	ID   string
	c    *testcontainers.DockerContainer
	d    *Docker
	ips  map[string]netip.Addr // network ID → address
}

// StartContainer creates and starts a container and removes it when the test ends.
func (d *Docker) StartContainer(ctx context.Context, t testing.TB, opts ContainerOptions) *Container {
	t.Helper()
	if len(opts.Networks) == 0 {
		t.Fatal("harness: a container needs a network")
	}
	var names []string
	for _, n := range opts.Networks {
		names = append(names, n.Name)
	}
	var files []testcontainers.ContainerFile
	for path, data := range opts.Files {
		files = append(files, testcontainers.ContainerFile{Reader: strings.NewReader(string(data)), ContainerFilePath: path, FileMode: 0o444})
	}
	req := testcontainers.ContainerRequest{
		Name: opts.Name, Image: opts.Image, Cmd: opts.Args, Env: opts.Env, Files: files, Networks: names,
		ConfigModifier: func(c *container.Config) { c.Hostname = opts.Name },
		// Only the test's networks: without one of them the container is cut off.
		HostConfigModifier: func(h *container.HostConfig) { h.NetworkMode = container.NetworkMode(names[0]) },
	}
	gc, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{ContainerRequest: req, Started: true})
	c := &Container{Name: opts.Name, d: d, ips: map[string]netip.Addr{}}
	if gc != nil {
		c.c = gc.(*testcontainers.DockerContainer)
		c.ID = c.c.GetContainerID()
	}
	t.Cleanup(func() {
		if c.c == nil {
			return
		}
		if t.Failed() || os.Getenv("E2E_VERBOSE") != "" {
			t.Logf("--- output of container %s ---\n%s", c.Name, c.Log())
		}
		// A paused container can be neither stopped nor killed.
		_, _ = d.provider.Client().ContainerUnpause(context.Background(), c.ID, client.ContainerUnpauseOptions{})
		if err := c.c.Terminate(context.Background()); err != nil {
			t.Errorf("removing container %s: %v", c.Name, err)
		}
	})
	if err != nil {
		t.Fatalf("harness: starting container %s: %v", opts.Name, err)
	}
	inspect, err := d.provider.Client().ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("harness: inspecting container %s: %v", opts.Name, err)
	}
	for _, n := range opts.Networks {
		ep := inspect.Container.NetworkSettings.Networks[n.Name]
		if ep == nil || !ep.IPAddress.IsValid() {
			t.Fatalf("harness: container %s has no address on network %s", opts.Name, n.Name)
		}
		c.ips[n.ID] = ep.IPAddress
	}
	return c
}

// IP is the container's address on network n.
func (c *Container) IP(n *Network) netip.Addr { return c.ips[n.ID] }

// Log is what the container printed so far (stdout and stderr).
func (c *Container) Log() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := c.c.Logs(ctx)
	if err != nil {
		return fmt.Sprintf("(logs: %v)", err)
	}
	defer rc.Close()
	data, _ := io.ReadAll(rc)
	return string(data)
}

// Kill sends SIGKILL: the process dies with no chance to clean up, as on a
// node crash or an OOM kill.
func (c *Container) Kill(ctx context.Context) error {
	if _, err := c.d.provider.Client().ContainerKill(ctx, c.ID, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		return fmt.Errorf("harness: killing %s: %w", c.Name, err)
	}
	// Wait until the engine has seen it die, or a Start may race the kill.
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, Timeout, true, func(ctx context.Context) (bool, error) {
		st, err := c.c.State(ctx)
		return err == nil && !st.Running, nil
	})
}

// Start starts a stopped (e.g. killed) container again, same name and files.
func (c *Container) Start(ctx context.Context) error {
	if err := c.c.Start(ctx); err != nil {
		return fmt.Errorf("harness: starting %s again: %w", c.Name, err)
	}
	return nil
}

// Pause freezes every process of the container (cgroup freezer): its
// sockets stay open, nothing answers.
func (c *Container) Pause(ctx context.Context) error {
	if _, err := c.d.provider.Client().ContainerPause(ctx, c.ID, client.ContainerPauseOptions{}); err != nil {
		return fmt.Errorf("harness: pausing %s: %w", c.Name, err)
	}
	return nil
}

// Unpause thaws a paused container.
func (c *Container) Unpause(ctx context.Context) error {
	if _, err := c.d.provider.Client().ContainerUnpause(ctx, c.ID, client.ContainerUnpauseOptions{}); err != nil {
		return fmt.Errorf("harness: unpausing %s: %w", c.Name, err)
	}
	return nil
}

// Disconnect takes the container off network n: what it reached there
// (e.g. the API server on the gateway) becomes unreachable.
func (c *Container) Disconnect(ctx context.Context, n *Network) error {
	if _, err := c.d.provider.Client().NetworkDisconnect(ctx, n.ID, client.NetworkDisconnectOptions{Container: c.ID, Force: true}); err != nil {
		return fmt.Errorf("harness: disconnecting %s from %s: %w", c.Name, n.Name, err)
	}
	return nil
}

// Connect attaches the container to network n again, at its old address.
func (c *Container) Connect(ctx context.Context, n *Network) error {
	ep := &network.EndpointSettings{IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: c.ips[n.ID]}}
	if _, err := c.d.provider.Client().NetworkConnect(ctx, n.ID, client.NetworkConnectOptions{Container: c.ID, EndpointConfig: ep}); err != nil {
		return fmt.Errorf("harness: connecting %s to %s: %w", c.Name, n.Name, err)
	}
	return nil
}

// WaitHTTPStatus polls url until it answers want.
func WaitHTTPStatus(ctx context.Context, url string, want int, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		resp, err := client.Get(url)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == want, nil
	})
	if err != nil {
		return fmt.Errorf("%s never answered %d (last: %s): %w", url, want, last, err)
	}
	return nil
}
