package console

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/reservation"
)

func TestStatusPage(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.OwnerOf = func(user string) string { return "ns-" + user }
	})
	ago := func(d time.Duration) *time.Time { v := testNow.Add(-d); return &v }
	waitingGPU := func(user, server string, created *time.Time) *lifecycle.Server {
		return &lifecycle.Server{User: user, Server: server, Status: lifecycle.StatusPending, GPUClass: "a5000", Created: created}
	}
	e.servers.set([]*lifecycle.Server{
		waitingGPU("bob", "", ago(20*time.Minute)),
		waitingGPU("alice", "gpu", ago(10*time.Minute)),
		waitingGPU("carol", "", ago(5*time.Minute)),
		{User: "dave", Status: lifecycle.StatusPending, GPUClass: "a5000", Reservation: "res-9", Created: ago(30 * time.Minute)}, // admitted
		runningServer("alice", "cpu"),
	})
	e.res.classes = []reservation.ClassStatus{
		{Class: "a5000", DisplayName: "RTX A5000", Capacity: 8, Used: 8, Free: 0, WaitingPods: 4, Paused: "maintenance"},
		{Class: "a100", Capacity: 4, Used: 1, Free: 3},
	}
	e.res.res = []reservation.Reservation{
		{ID: 21, Kind: reservation.KindBooking, Owner: "ns-alice", Workspace: "DSC80", Class: "a100", GPUs: 1,
			Start: testNow.Add(time.Hour), End: testNow.Add(3 * time.Hour), Status: reservation.StatusActive},
		{ID: 22, Kind: reservation.KindBooking, Owner: "ns-alice", Workspace: "DSC80", Class: "a100", GPUs: 1,
			Start: testNow.Add(-3 * time.Hour), End: testNow.Add(-time.Hour), Status: reservation.StatusActive}, // over
		{ID: 23, Kind: reservation.KindBooking, Owner: "ns-bob", Workspace: "DSC80", Class: "a100", GPUs: 2,
			Start: testNow.Add(time.Hour), End: testNow.Add(3 * time.Hour), Status: reservation.StatusActive}, // someone else's
	}
	e.hist.add(history.Session{Identity: history.Identity{UID: "s1", User: "alice", Server: "old"}, Started: testNow.Add(-48 * time.Hour),
		EndedAt: ago(47 * time.Hour), Stopper: history.StopperCuller})
	c, resp, body := e.login(studentUser, testPrefix)
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != testPrefix+"status" {
		t.Fatalf("a student lands on %s with %d, want the status page", resp.Request.URL.Path, resp.StatusCode)
	}
	for _, want := range []string{
		`data-class="a5000" data-free="0" data-capacity="8"`, `data-class="a100" data-free="3" data-capacity="4"`,
		"New on-demand sessions are paused: maintenance",
		// alice's waiting server is second of bob's, alice's, carol's; the engine counts 4.
		`data-server="gpu" data-class="a5000" data-place="2" data-total="4"`,
		`<tr data-id="21" data-kind="booking">`, "upcoming",
		// Last sessions: the default server (none), cpu (none), old (the culler).
		`<li data-server="" data-recorded="false"><strong>(default)</strong>: No session recorded.</li>`,
		`<li data-server="old" data-recorded="true">`, "was stopped by the idle culler",
		`(bookings of ns-alice)`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the status page lacks %s", want)
		}
	}
	for _, not := range []string{`data-id="22"`, `data-id="23"`, "bob", "carol", "dave"} {
		if strings.Contains(body, not) {
			t.Errorf("the status page shows %s: another user's, or an ended booking", not)
		}
	}
	if strings.Contains(body, `id="nav-servers"`) {
		t.Error("a student's navigation links the console pages")
	}
	_ = c
}

func TestStatusPageWithEverythingOff(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.History, o.Reservations = nil, nil })
	_, resp, body := e.login(studentUser, testPrefix+"status")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for _, want := range []string{"GPU reservations are not in use", "The session history is not kept"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

func TestQueueIn(t *testing.T) {
	at := func(m int) *time.Time { v := testNow.Add(time.Duration(m) * time.Minute); return &v }
	w := func(user string, created *time.Time) *lifecycle.Server {
		return &lifecycle.Server{User: user, Status: lifecycle.StatusPending, GPUClass: "a", Created: created}
	}
	list := []*lifecycle.Server{w("c", at(3)), w("a", at(1)), w("nil", nil), w("b", at(2)),
		{User: "other-class", Status: lifecycle.StatusPending, GPUClass: "b", Created: at(0)}}
	for name, tc := range map[string]struct {
		srv               *lifecycle.Server
		wantPlace, wantOf int
	}{
		"oldest first":           {list[1], 1, 4},
		"newest timed":           {list[0], 3, 4},
		"no creation time: last": {list[2], 4, 4},
		"not listed yet":         {w("new", at(2)), 3, 5},
	} {
		t.Run(name, func(t *testing.T) {
			place, of := queueIn(list, tc.srv)
			if place != tc.wantPlace || of != tc.wantOf {
				t.Errorf("place %d of %d, want %d of %d", place, of, tc.wantPlace, tc.wantOf)
			}
		})
	}
}
