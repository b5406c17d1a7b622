package apiclienttest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/sparkcluster"
	"github.com/dsmlp/spawner/spawner"
)

// Call is one start or stop the fake was asked for.
type Call struct {
	Key lifecycle.Key
	// By is who asked the hub for it, as the API passed it on.
	By history.Actor
	// Hint is a stop's saved state; Request a start's.
	Hint    lifecycle.Hint
	Request spawner.Request
	// Now and Wait are a stop's.
	Now  bool
	Wait time.Duration
}

// Servers is a fake of the server manager (hubapi.Servers).
type Servers struct {
	mu      sync.Mutex
	now     time.Time
	servers map[lifecycle.Key]*lifecycle.Server
	starts  []Call
	stops   []Call
}

// Starts returns the starts asked for so far.
func (s *Servers) Starts() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.starts)
}

// Stops returns the stops asked for so far.
func (s *Servers) Stops() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.stops)
}

func newServers(now time.Time) *Servers {
	s := &Servers{now: now, servers: map[lifecycle.Key]*lifecycle.Server{}}
	for _, srv := range fixtureServers(now) {
		s.servers[lifecycle.Key{User: srv.User, Server: srv.Server}] = srv
	}
	return s
}

func fixtureServers(now time.Time) []*lifecycle.Server {
	event := func(age time.Duration, typ, reason, from, msg string) lifecycle.EventSummary {
		return lifecycle.EventSummary{Time: now.Add(-age), Type: typ, Reason: reason, From: from, Message: msg, Count: 1}
	}
	aliceEvents := []lifecycle.EventSummary{
		event(5*time.Minute, "Normal", "Scheduled", "default-scheduler", "Successfully assigned jhub/jupyter-alice to local-runtime"),
		event(5*time.Minute-2*time.Second, "Normal", "Pulled", "kubelet", `Container image "quay.io/jupyter/minimal-notebook:2026-11-30" already present on machine`),
		event(5*time.Minute-3*time.Second, "Normal", "Started", "kubelet", "Started container notebook"),
	}
	bobEvents := []lifecycle.EventSummary{
		event(time.Minute, "Warning", "FailedScheduling", "default-scheduler", "0/3 nodes are available: 1 node(s) had untolerated taint {gpu-class-reservation: a5000}."),
		event(50*time.Second, "Normal", "RuntimeGuaranteed", "gpu-reservation-controller", "Admitted under booking #7 (DSC10): GPU access guaranteed until 2026-12-04 12:00:00 PST."),
	}
	carolWhy := "carol's server ended at " + now.Add(-2*time.Hour).Format("2006-01-02 15:04:05 MST") +
		": the kubelet evicted the pod from node local-runtime (The node was low on resource: memory.); phase Failed, reason Evicted, exit code 137."
	return []*lifecycle.Server{
		{
			User: "alice", Status: lifecycle.StatusRunning, URL: ptr("http://10.244.0.12:8888/user/alice/"), Pod: "jupyter-alice",
			Namespace: "jhub", Node: "local-runtime", PodIP: "10.244.0.12", Phase: "Running", Created: ago(now, 5*time.Minute), Age: "5m0s",
			UID: "6f1c2a9e-5b7d-4c1e-9a55-3d2f0c1b7a11", Profile: "cpu", Image: "quay.io/jupyter/minimal-notebook:2026-11-30", Course: "DSC10",
			LastEvent: &aliceEvents[2], Events: aliceEvents,
			State: map[string]string{"pod_name": "jupyter-alice", "namespace": "jhub", "pod_uid": "6f1c2a9e-5b7d-4c1e-9a55-3d2f0c1b7a11"},
		},
		{
			User: "bob", Server: "gpu work", Status: lifecycle.StatusPending, Message: "starting", Pod: "jupyter-bob--gpu-20work",
			Namespace: "jhub", Phase: "Pending", Created: ago(now, time.Minute), Age: "1m0s",
			UID: "0b9d4e21-77aa-4f0e-8c3b-5e6f7a8b9c02", Profile: "gpu", Image: "quay.io/jupyter/pytorch-notebook:cuda12-2026-11-30",
			Course: "DSC10", GPUClass: "a5000", Reservation: "res-7", GuaranteeStatus: "guaranteed",
			LastEvent: &bobEvents[1], Events: bobEvents,
			State: map[string]string{"pod_name": "jupyter-bob--gpu-20work", "namespace": "jhub", "pod_uid": "0b9d4e21-77aa-4f0e-8c3b-5e6f7a8b9c02", "pvc_name": "claim-bob--gpu-20work"},
		},
		{
			User: "carol", Status: lifecycle.StatusStopped, ExitCode: ptr(137), Message: carolWhy, Pod: "jupyter-carol", Namespace: "jhub",
			Node: "local-runtime", Created: ago(now, 3*24*time.Hour), Age: "72h0m0s",
			UID: "c4a1e0f3-2d6b-4b8a-a1e2-9f8e7d6c5b43", Profile: "cpu", Image: "quay.io/jupyter/minimal-notebook:2026-11-30", Course: "DSC20",
			Stopped: &lifecycle.StopReason{Phase: "Failed", Reason: "Evicted", Message: "The node was low on resource: memory.",
				ExitCode: 137, At: now.Add(-2 * time.Hour), PodDeleted: true, Stopper: string(history.StopperEvicted), Why: carolWhy},
			State: map[string]string{},
		},
		{
			User: "dave", Status: lifecycle.StatusRunning, URL: ptr("http://10.244.0.31:8888/user/dave/"), Pod: "jupyter-dave",
			Namespace: "dave", Node: "local-runtime", PodIP: "10.244.0.31", Phase: "Running", Created: ago(now, 26*time.Hour), Age: "26h0m0s",
			UID: "d1e2f3a4-b5c6-4d7e-8f90-a1b2c3d4e5f6", Profile: "spark", Image: "quay.io/jupyter/pyspark-notebook:2026-11-30", Course: "DSC102",
			State: map[string]string{"pod_name": "jupyter-dave", "namespace": "dave", "pod_uid": "d1e2f3a4-b5c6-4d7e-8f90-a1b2c3d4e5f6"},
			Spark: &sparkcluster.Status{MasterURL: "spark://spark-master-svc:7077", UIURL: "http://spark-master-svc.dave:8080", MasterReady: true,
				Workers: 2, ReadyWorkers: 1, Endpoints: []string{"10.244.0.32:7077"},
				Pods: []sparkcluster.Pod{
					{Name: "spark-master-6d5f7c8b9-x2k4p", Role: "master", Phase: "Running", Ready: true, Node: "local-runtime", IP: "10.244.0.32"},
					{Name: "spark-worker-7c9d8e6f5-p9q8r", Role: "worker", Phase: "Running", Ready: true, Node: "local-runtime", IP: "10.244.0.33", Restarts: 1},
					{Name: "spark-worker-7c9d8e6f5-z7y6x", Role: "worker", Phase: "Pending", Reason: "Unschedulable"},
				},
				Replaced: []sparkcluster.PodStop{{Pod: "spark-worker-7c9d8e6f5-a1b2c", Role: "worker", Phase: "Failed", Reason: "Evicted",
					Message: "The node was low on resource: memory.", At: now.Add(-time.Hour)}},
				Problem: `spark-worker: pods "spark-worker-7c9d8e6f5-z7y6x" is forbidden: exceeded quota: allowance`},
		},
	}
}

// profiles is the profile list the fake API serves.
func profiles() []spawner.Profile {
	return []spawner.Profile{
		{DisplayName: "CPU notebook", Slug: "cpu", Default: true, Description: "2 CPUs, 4 GiB",
			ProfileOptions: spawner.ProfileOptions{{Name: "image", DisplayName: "Image",
				Choices: spawner.Choices{
					{Name: "minimal", DisplayName: "Minimal", Default: true},
					{Name: "datascience", DisplayName: "Data science"},
				},
				UnlistedChoice: spawner.UnlistedChoice{Enabled: true, DisplayName: "Image", DisplayNameInChoices: "Other...",
					ValidationRegex: "^quay\\.io/", ValidationMessage: "images come from quay.io"}}}},
		{DisplayName: "GPU notebook", Slug: "gpu", Description: "1 A5000", GPUClass: "a5000",
			ProfileOptions: spawner.ProfileOptions{{Name: "gpu", DisplayName: "GPU",
				Choices: spawner.Choices{
					{Name: "a5000", DisplayName: "RTX A5000", Default: true, GPUClass: "a5000"},
					{Name: "a100", DisplayName: "A100", GPUClass: "a100"},
				}}}},
	}
}

func clone(s *lifecycle.Server) *lifecycle.Server {
	cp := *s
	cp.State = maps.Clone(s.State)
	cp.Events = nil
	return &cp
}

// Start implements hubapi.Servers.
func (s *Servers) Start(_ context.Context, req spawner.Request, by history.Actor) (*lifecycle.Server, error) {
	switch req.UserOptions["profile"] {
	case "nope":
		return nil, &spawner.FieldError{Field: "user_options.profile", Message: `unknown profile "nope"; the profiles are cpu and gpu`}
	case "huge":
		return nil, fmt.Errorf("%w: exceeded quota: allowance, requested: limits.memory=64Gi, used: limits.memory=4Gi, limited: limits.memory=8Gi", lifecycle.ErrQuota)
	}
	switch req.User {
	case "conflict":
		return nil, fmt.Errorf("pod jhub/jupyter-conflict: %w", lifecycle.ErrConflict)
	}
	if err := failing(req.User); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := lifecycle.Key{User: req.User, Server: req.Server}
	s.starts = append(s.starts, Call{Key: key, By: by, Request: req})
	if cur, ok := s.servers[key]; ok && (cur.Status == lifecycle.StatusRunning || cur.Status == lifecycle.StatusPending) {
		return clone(cur), nil
	}
	pod := "jupyter-" + req.User
	srv := &lifecycle.Server{User: req.User, Server: req.Server, Status: lifecycle.StatusPending, Message: "starting", Pod: pod, Namespace: "jhub",
		State: map[string]string{"pod_name": pod, "namespace": "jhub"}}
	s.servers[key] = srv
	return clone(srv), nil
}

func (s *Servers) get(key lifecycle.Key) *lifecycle.Server {
	if cur, ok := s.servers[key]; ok {
		return cur
	}
	return &lifecycle.Server{User: key.User, Server: key.Server, Status: lifecycle.StatusAbsent, Message: "no pod", Pod: "jupyter-" + key.User, Namespace: "jhub",
		State: map[string]string{"pod_name": "jupyter-" + key.User, "namespace": "jhub"}}
}

// Server implements hubapi.Servers.
func (s *Servers) Server(key lifecycle.Key, _ lifecycle.Hint) *lifecycle.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return clone(s.get(key))
}

// ServerWithEvents implements hubapi.Servers.
func (s *Servers) ServerWithEvents(key lifecycle.Key, max int) *lifecycle.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.get(key)
	out := clone(cur)
	out.Events = slices.Clone(cur.Events)
	if len(out.Events) > max {
		out.Events = out.Events[len(out.Events)-max:]
	}
	return out
}

// Stop implements hubapi.Servers: bob's server is still terminating when
// the stop answers; every other server is gone.
func (s *Servers) Stop(_ context.Context, key lifecycle.Key, hint lifecycle.Hint, now bool, wait time.Duration, by history.Actor) (bool, error) {
	if err := failing(key.User); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stops = append(s.stops, Call{Key: key, By: by, Hint: hint, Now: now, Wait: wait})
	if key.User == "bob" {
		return false, nil
	}
	delete(s.servers, key)
	return true, nil
}

// DeleteForever implements hubapi.Servers.
func (s *Servers) DeleteForever(_ context.Context, key lifecycle.Key, saved lifecycle.SavedState) (*lifecycle.StorageDeletion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.servers[key]; ok && (cur.Status == lifecycle.StatusRunning || cur.Status == lifecycle.StatusPending) {
		return nil, fmt.Errorf("deleting %s's server forever: %w", key.User, lifecycle.ErrActive)
	}
	pvc := saved.PVCName
	if pvc == "" {
		pvc = "claim-" + key.User
	}
	if key.Server != "" {
		return &lifecycle.StorageDeletion{User: key.User, Server: key.Server, PVC: pvc, Namespace: "jhub", Result: "kept",
			Reason: "the named server shares the default server's PVC (pvc_name_template lacks {user_server})"}, nil
	}
	return &lifecycle.StorageDeletion{User: key.User, Server: key.Server, PVC: pvc, Namespace: "jhub", Result: "deleted"}, nil
}

// Progress implements hubapi.Servers: alice's default server's spawn replays three events
// and ready; any other has no spawn in memory.
func (s *Servers) Progress(ctx context.Context, key lifecycle.Key, fn func(lifecycle.Event) error) error {
	if key != (lifecycle.Key{User: "alice"}) {
		return lifecycle.ErrNotFound
	}
	pct := func(n int) *int { return &n }
	for _, e := range []lifecycle.Event{
		{Progress: pct(30), Message: "Your server was placed on node local-runtime.",
			RawEvent: map[string]any{"reason": "Scheduled", "message": "Successfully assigned jhub/jupyter-alice to local-runtime", "type": "Normal"}},
		{Progress: pct(50), Message: "The notebook image is on the node.",
			RawEvent: map[string]any{"reason": "Pulled", "message": "Container image already present on machine", "type": "Normal"}},
		{Progress: pct(63), Message: "The notebook container started.",
			RawEvent: map[string]any{"reason": "Started", "message": "Started container notebook", "type": "Normal"}},
		{Progress: pct(100), Ready: true, URL: "http://10.244.0.12:8888/user/alice/", Message: "Server ready at http://10.244.0.12:8888/user/alice/"},
	} {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// List implements hubapi.Servers, sorted by user and server as the
// manager's is.
func (s *Servers) List() []*lifecycle.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*lifecycle.Server, 0, len(s.servers))
	for _, srv := range s.servers {
		out = append(out, clone(srv))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].User != out[j].User {
			return out[i].User < out[j].User
		}
		return out[i].Server < out[j].Server
	})
	return out
}
