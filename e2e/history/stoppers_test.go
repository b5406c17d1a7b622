package history_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsmlp/spawner/devcluster"
	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/hubapi"
	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/reservation"
)

// stopCase is one way a session ends, caused through the real hub or the
// cluster, and what the history must say of it.
type stopCase struct {
	user    string
	profile string
	// cause ends the server: user's, whose pod is ns/pod.
	cause   func(t *testing.T, s *stack, user, ns, pod string)
	stopper history.Stopper
	// reason is the Kubernetes reason the end carries, if any.
	reason string
	// in is a word the one-sentence why must hold.
	in string
}

// TestEveryStopperRecorded ends eight servers in the eight ways a session
// ends on the platform, through the real hub and the real cluster, and
// checks that the history tells each apart: who asked (the user, an admin,
// the idle culler's service token) or what happened (eviction, OOM kill,
// deletion by someone else, reservation preemption, node loss), with the
// Kubernetes facts; that `spawnerd admin why` says it in one sentence; and
// that all of it survives a spawnerd restart.
func TestEveryStopperRecorded(t *testing.T) {
	s := newStack(t, stackOptions{})
	hubStop := func(token func(*stack, string) string) func(*testing.T, *stack, string, string, string) {
		return func(t *testing.T, s *stack, user, _, _ string) {
			if code := s.hub.DoAs(token(s, user), http.MethodDelete, harness.ServerAPIPath(user, ""), nil, nil); code != http.StatusNoContent && code != http.StatusAccepted {
				t.Fatalf("hub stop of %s: %d", user, code)
			}
		}
	}
	ctx := context.Background()
	cases := []stopCase{
		{user: "by-user", stopper: history.StopperUser, in: "by-user",
			cause: hubStop(func(s *stack, user string) string { return s.hub.UserToken(user) })},
		{user: "by-admin", stopper: history.StopperAdmin, in: "admin",
			cause: hubStop(func(s *stack, _ string) string { return s.hub.Token })},
		{user: "by-culler", stopper: history.StopperCuller, in: "cull",
			cause: hubStop(func(s *stack, _ string) string { return s.cullerToken })},
		{user: "evicted", stopper: history.StopperEvicted, reason: "Evicted", in: "evict",
			cause: func(t *testing.T, _ *stack, _, ns, pod string) {
				if err := harness.Evict(ctx, env.Client, ns, pod); err != nil {
					t.Fatal(err)
				}
			}},
		{user: "oom", stopper: history.StopperOOM, in: "memory",
			cause: func(t *testing.T, _ *stack, _, ns, pod string) {
				if err := harness.TerminateContainer(ctx, env.Client, ns, pod, "notebook", 137, "OOMKilled"); err != nil {
					t.Fatal(err)
				}
			}},
		{user: "deleted", stopper: history.StopperDeleted, in: "delet",
			cause: func(t *testing.T, _ *stack, _, ns, pod string) {
				if err := harness.DeletePodOutOfBand(ctx, env.Client, ns, pod); err != nil {
					t.Fatal(err)
				}
			}},
		{user: "preempted", profile: "gpu", stopper: history.StopperPreempted, reason: reservation.Preempted, in: "preempt",
			cause: func(t *testing.T, s *stack, _, _, _ string) { bookEveryGPU(t, s) }},
	}

	// Start every server at once through the hub: "by-user" asks for its
	// own, the admin asks for the others.
	var wg sync.WaitGroup
	for _, c := range cases {
		wg.Go(func() {
			token := s.hub.Token
			if c.user == "by-user" {
				token = s.hub.UserToken(c.user)
			}
			var opts map[string]any
			if c.profile != "" {
				opts = map[string]any{"profile": c.profile}
			}
			s.start(t, token, c.user, opts)
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, c := range cases {
		t.Run(c.user, func(t *testing.T) {
			c.cause(t, s, c.user, s.ns, "jupyter-"+c.user)
			s.hub.WaitGone(c.user, "")
		})
	}
	for _, c := range cases {
		checkSession(t, s, c, 30*time.Second)
	}

	// Node loss last: it takes the CPU local-runtime node, and the pod
	// garbage collector takes 40 to 80 s to act on an orphaned pod.
	lost := stopCase{user: "node-lost", stopper: history.StopperNodeLost, reason: "DeletionByPodGC", in: "node"}
	s.start(t, s.hub.Token, lost.user, nil)
	loseNode(t, devcluster.LocalRuntimeNode)
	s.hub.WaitGone(lost.user, "")
	checkSession(t, s, lost, 3*time.Minute)
	cases = append(cases, lost)

	// spawnerd admin why: one sentence, as an admin reads it.
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, s.api.Secret, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "admin", "--url", s.api.URL, "--shared-secret-file", secret, "why", "evicted").CombinedOutput()
	if err != nil {
		t.Fatalf("spawnerd admin why: %v\n%s", err, out)
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	t.Logf("spawnerd admin why evicted: %s", first)
	if !strings.Contains(first, "evicted") || !strings.Contains(strings.ToLower(first), "evict") || strings.Count(first, ". ") > 1 {
		t.Errorf("why prints %q, want one sentence about the eviction", first)
	}

	// The history outlives spawnerd: a restart answers the same.
	s.api.Restart(t)
	for _, c := range cases {
		if got := s.why(t, c.user); got.Session.Stopper != c.stopper {
			t.Errorf("after a restart, %s's last session ended by %q, want %q", c.user, got.Session.Stopper, c.stopper)
		}
	}
	// The admin list keeps the recently stopped servers, with why.
	var list hubapi.ServerList
	if code := s.api.Do(http.MethodGet, "/api/v1/servers", "admin", true, nil, &list); code != http.StatusOK {
		t.Fatalf("GET servers: %d", code)
	}
	stopped := map[string]*lifecycle.Server{}
	for _, srv := range list.Servers {
		stopped[srv.User] = srv
	}
	for _, c := range cases {
		srv := stopped[c.user]
		if srv == nil || srv.Status != lifecycle.StatusStopped || srv.Stopped == nil || srv.Stopped.Stopper != string(c.stopper) || srv.Stopped.Why == "" {
			t.Errorf("server list entry of %s: %+v, want stopped by %s with why", c.user, srv, c.stopper)
		}
	}
}

// checkSession checks the newest session of c.user: its stopper, facts,
// requester and life, and the sentence.
func checkSession(t *testing.T, s *stack, c stopCase, within time.Duration) {
	t.Helper()
	got := s.waitEnded(t, c.user, within)
	if got.Stopper != c.stopper {
		t.Errorf("%s: stopper %q, want %q (end %+v)", c.user, got.Stopper, c.stopper, got.End)
	}
	if c.reason != "" && (got.End == nil || got.End.Reason != c.reason) {
		t.Errorf("%s: end %+v, want reason %s", c.user, got.End, c.reason)
	}
	if c.stopper == history.StopperOOM && (got.End == nil || got.End.ContainerReason != "OOMKilled" || got.End.ExitCode == nil || *got.End.ExitCode != 137) {
		t.Errorf("%s: end %+v, want OOMKilled with exit code 137", c.user, got.End)
	}
	wantBy := history.Actor{Kind: history.ActorAdmin, Name: "admin"}
	if c.user == "by-user" {
		wantBy = history.Actor{Kind: history.ActorUser, Name: c.user}
	}
	if got.RequestedBy == nil || *got.RequestedBy != wantBy {
		t.Errorf("%s: requested by %+v, want %+v", c.user, got.RequestedBy, wantBy)
	}
	if got.CreatedAt == nil || got.ScheduledAt == nil || got.ReadyAt == nil || got.Node == "" {
		t.Errorf("%s: life not recorded: %+v", c.user, got)
	}
	if c.profile != "" && got.Profile != c.profile || c.profile == "" && got.Profile != "cpu" {
		t.Errorf("%s: profile %q", c.user, got.Profile)
	}
	if got.Course != "DSC10" || got.Image == "" {
		t.Errorf("%s: course %q image %q", c.user, got.Course, got.Image)
	}
	if c.profile == "gpu" && (got.GPUClass != "a5000" || got.Reservation == "" || got.ReservationKind == "") {
		t.Errorf("%s: GPU session %+v lacks its class or reservation", c.user, got.Identity)
	}
	switch c.stopper {
	case history.StopperUser, history.StopperAdmin, history.StopperCuller:
		if got.StopRequestedBy == nil || history.Stopper(got.StopRequestedBy.Kind) != c.stopper {
			t.Errorf("%s: stop requested by %+v", c.user, got.StopRequestedBy)
		}
	}
	if len(s.sessions(t, c.user)) != 1 {
		t.Errorf("%s: %d sessions, want one", c.user, len(s.sessions(t, c.user)))
	}
	w := s.why(t, c.user)
	t.Logf("%-10s %-22s %s", c.user, got.Stopper, w.Sentence)
	if !strings.Contains(strings.ToLower(w.Sentence), c.in) {
		t.Errorf("%s: why %q does not mention %q", c.user, w.Sentence, c.in)
	}
}

// bookEveryGPU books every a5000 GPU for another course's owner, opening
// within the kill lead: the engine preempts the on-demand notebook, which
// is past its one-second guarantee.
func bookEveryGPU(t *testing.T, s *stack) {
	t.Helper()
	var classes hubapi.ClassList
	if code := s.api.Do(http.MethodGet, "/api/v1/gpu-classes", "admin", true, nil, &classes); code != http.StatusOK || len(classes.Classes) == 0 {
		t.Fatalf("GET gpu-classes: %d %+v", code, classes)
	}
	start := time.Now().Add(time.Minute).UTC()
	var b reservation.Reservation
	if code := s.api.Do(http.MethodPost, "/api/v1/reservations", "admin", true, hubapi.BookingRequest{
		Owner: "dsc20-instructor", Workspace: "DSC20", Class: "a5000", GPUs: classes.Classes[0].Capacity,
		Start: start.Format(time.RFC3339), End: start.Add(time.Hour).Format(time.RFC3339)}, &b); code != http.StatusCreated {
		t.Fatalf("booking every a5000 GPU: %d", code)
	}
	t.Cleanup(func() {
		s.api.Do(http.MethodDelete, fmt.Sprintf("/api/v1/reservations/%d", b.ID), "admin", true, nil, nil)
	})
}

// loseNode deletes a node object, as a cloud provider does when the
// machine is gone, and puts it back when the test ends.
func loseNode(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	node, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.DeleteNode(ctx, env.Client, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		back := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name, Labels: node.Labels, Annotations: node.Annotations},
			Spec: corev1.NodeSpec{Taints: node.Spec.Taints}, Status: node.Status}
		if err := devcluster.RegisterNode(ctx, env.Client, back); err != nil {
			t.Errorf("putting node %s back: %v", name, err)
		}
	})
}
