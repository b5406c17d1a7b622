package console

import (
	"fmt"
	"time"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/reservation"
	"github.com/dsmlp/spawner/sparkcluster"
)

// manyServers is n servers as a busy term looks: most running, some
// pending or waiting for a GPU, some stopped recently for various reasons.
func manyServers(n int) []*lifecycle.Server {
	courses := []string{"DSC10", "DSC80", "COGS108", "CSE151A", ""}
	out := make([]*lifecycle.Server, 0, n)
	for i := range n {
		user := fmt.Sprintf("student%05d", i)
		created := testNow.Add(-time.Duration(i%500) * time.Minute)
		s := &lifecycle.Server{User: user, Status: lifecycle.StatusRunning, Phase: "Running", Pod: "jupyter-" + user,
			Namespace: user, Node: fmt.Sprintf("node-%02d", i%40), Created: &created, UID: fmt.Sprintf("uid-%05d", i),
			Profile: "cpu", Course: courses[i%len(courses)], Image: "ucsdets/datascience-notebook:2026.1",
			LastEvent: &lifecycle.EventSummary{Time: created.Add(30 * time.Second), Type: "Normal", Reason: "Started",
				Message: "Started container notebook", From: "kubelet"}}
		switch {
		case i%10 == 1:
			s.Profile, s.GPUClass, s.Reservation, s.GuaranteeStatus = "gpu", "a5000", fmt.Sprintf("res-%d", 100+i%7), reservation.StatusGuaranteed
		case i%10 == 2:
			s.Status, s.Phase, s.Node, s.Profile, s.GPUClass = lifecycle.StatusPending, "Pending", "", "gpu", "a5000"
			s.LastEvent = &lifecycle.EventSummary{Time: created, Type: "Normal", Reason: "WaitingForBooking", From: reservation.Component,
				Message: "The pod waits for a GPU of class a5000: the class is full until 14:00 PST."}
		case i%10 == 3:
			s.Status, s.Phase = lifecycle.StatusPending, "Pending"
		case i%10 == 4:
			s.Status, s.Phase = lifecycle.StatusStopped, "Failed"
			s.Stopped = &lifecycle.StopReason{Phase: "Failed", Reason: "Evicted", Message: "The node was low on resource: memory.",
				ExitCode: 137, At: testNow.Add(-10 * time.Minute), Stopper: string(history.StopperEvicted),
				Why: user + "'s server ended: the kubelet evicted the pod."}
		case i%10 == 5 && i%20 == 5:
			s.Status = lifecycle.StatusStopped
			s.Stopped = &lifecycle.StopReason{ContainerReason: "OOMKilled", ExitCode: 137, At: testNow.Add(-5 * time.Minute),
				Stopper: string(history.StopperOOM), Why: user + "'s server ran out of memory."}
		}
		out = append(out, s)
	}
	return out
}

// detailFixture is alice's GPU server: running now (session uid-3) after
// two earlier sessions, with a Spark cluster and pod events.
func detailFixture(e *env) {
	created := testNow.Add(-30 * time.Minute)
	cur := &lifecycle.Server{User: "alice", Server: "gpu", Status: lifecycle.StatusRunning, Phase: "Running",
		Pod: "jupyter-alice--gpu", Namespace: "alice", Node: "gpu-3", Created: &created, UID: "uid-3", Profile: "gpu",
		Image: "ucsdets/scipy-ml-notebook:2026.1", Course: "DSC80", GPUClass: "a5000", Reservation: "res-7",
		GuaranteeStatus: reservation.StatusGuaranteed,
		Spark: &sparkcluster.Status{MasterURL: "spark://spark-master-svc.alice:7077", UIURL: "http://spark-master-svc.alice:8080",
			MasterReady: true, Workers: 3, ReadyWorkers: 2, Pods: []sparkcluster.Pod{
				{Name: "spark-master-0", Role: "master", Phase: "Running", Ready: true, Node: "cpu-1"},
				{Name: "spark-worker-1", Role: "worker", Phase: "Pending", Reason: "Unschedulable"},
			}}}
	e.servers.set([]*lifecycle.Server{cur})
	e.servers.events = map[lifecycle.Key][]lifecycle.EventSummary{{User: "alice", Server: "gpu"}: {
		{Time: created.Add(time.Second), Type: "Normal", Reason: "RuntimeGuaranteed", From: reservation.Component,
			Message: "Admitted under booking res-7 of DSC80; guaranteed until 20:00 PST."},
		{Time: created.Add(5 * time.Second), Type: "Normal", Reason: "Scheduled", From: "default-scheduler", Message: "Successfully assigned alice/jupyter-alice--gpu to gpu-3"},
		{Time: created.Add(40 * time.Second), Type: "Warning", Reason: "BackOff", From: "kubelet", Message: "Back-off pulling image", Count: 3},
	}}
	t := func(d time.Duration) *time.Time { v := testNow.Add(d); return &v }
	exit := 137
	e.hist.add(
		history.Session{Identity: history.Identity{UID: "uid-1", User: "alice", Server: "gpu", Pod: "jupyter-alice--gpu", GPUClass: "a5000"},
			Started: testNow.Add(-50 * time.Hour), EndedAt: t(-48 * time.Hour), Stopper: history.StopperCuller,
			StopRequestedBy: &history.Actor{Kind: history.ActorCuller, Name: "idle-culler"}, StopRequestedAt: t(-48 * time.Hour)},
		history.Session{Identity: history.Identity{UID: "uid-2", User: "alice", Server: "gpu", Pod: "jupyter-alice--gpu", GPUClass: "a5000"},
			Started: testNow.Add(-5 * time.Hour), Node: "gpu-1", EndedAt: t(-3 * time.Hour), Stopper: history.StopperEvicted,
			End: &history.EndFacts{Phase: "Failed", Reason: "Evicted", Message: "The node was low on resource: memory.", ExitCode: &exit}},
		history.Session{Identity: history.Identity{UID: "uid-3", User: "alice", Server: "gpu", Pod: "jupyter-alice--gpu", GPUClass: "a5000"},
			Started: created.Add(-2 * time.Second), RequestedAt: t(-30*time.Minute - 2*time.Second), ReadyAt: t(-29 * time.Minute)},
	)
	e.hist.events["uid-2"] = []history.Event{
		{UID: "uid-2", Kind: history.EventCreated, At: testNow.Add(-5 * time.Hour)},
		{UID: "uid-2", Kind: history.EventEnded, At: testNow.Add(-3 * time.Hour), Stopper: history.StopperEvicted,
			End: &history.EndFacts{Phase: "Failed", Reason: "Evicted", ExitCode: &exit}},
	}
	e.hist.events["uid-3"] = []history.Event{
		{UID: "uid-3", Kind: history.EventRequested, At: created.Add(-2 * time.Second), By: &history.Actor{Kind: history.ActorUser, Name: "alice"}},
		{UID: "uid-3", Kind: history.EventCreated, At: created},
		{UID: "uid-3", Kind: history.EventScheduled, At: created.Add(5 * time.Second), Node: "gpu-3"},
		{UID: "uid-3", Kind: history.EventReady, At: testNow.Add(-29 * time.Minute)},
	}
	e.res.res = []reservation.Reservation{{ID: 7, Kind: reservation.KindBooking, Owner: "alice", Workspace: "DSC80", Class: "a5000",
		GPUs: 1, Start: testNow.Add(-time.Hour), End: testNow.Add(2 * time.Hour), Status: reservation.StatusActive}}
}
