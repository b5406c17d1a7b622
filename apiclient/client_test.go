package apiclient_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dsmlp/spawner/apiclient"
	"github.com/dsmlp/spawner/apiclient/apiclienttest"
	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/hubapi"
	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/reservation"
)

var admin = apiclient.User{Name: "admin", Admin: true}

func newClient(t *testing.T, as apiclient.User) (*apiclient.Client, *apiclienttest.Fake) {
	t.Helper()
	f := apiclienttest.New(t, apiclienttest.Options{})
	c, err := apiclient.New(f.URL, as, apiclient.SharedSecret(f.Secret))
	if err != nil {
		t.Fatal(err)
	}
	return c, f
}

func TestNewRefusesBadURLs(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8090", "ftp://host", "http://", "http://host/?q=1", "http://host/#x"} {
		if _, err := apiclient.New(u, admin, nil); err == nil {
			t.Errorf("New(%q) accepted it", u)
		}
	}
	if c, err := apiclient.New("http://127.0.0.1:8090/", admin, nil); err != nil || c.URL() != "http://127.0.0.1:8090" {
		t.Errorf("New with a trailing slash: %v %v", c, err)
	}
}

func TestServerCalls(t *testing.T) {
	ctx := context.Background()
	c, f := newClient(t, apiclient.User{Name: "alice"})

	got, err := c.Poll(ctx, "alice", "", lifecycle.Hint{Pod: "jupyter-alice", Namespace: "jhub"})
	if err != nil || got.Status != lifecycle.StatusRunning || got.URL == nil || got.Profile != "cpu" {
		t.Fatalf("poll: %+v %v", got, err)
	}
	if _, err := c.Start(ctx, "alice", "", hubapi.StartRequest{RequestedBy: &history.Actor{Kind: history.ActorUser, Name: "alice"}}); err != nil {
		t.Fatalf("start: %v", err)
	}
	if starts := f.Servers.Starts(); len(starts) != 1 || starts[0].By != (history.Actor{Kind: history.ActorUser, Name: "alice"}) {
		t.Errorf("start reached the manager as %+v", starts)
	}

	evs, err := c.Progress(ctx, "alice", "")
	if err != nil || len(evs) != 4 || !evs[3].Ready || evs[0].RawEvent["reason"] != "Scheduled" {
		t.Fatalf("progress: %+v %v", evs, err)
	}
	var n int
	stop := errors.New("enough")
	if err := c.FollowProgress(ctx, "alice", "", func(lifecycle.Event) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Errorf("follow with a failing callback: %v after %d events", err, n)
	}
	// Without a spawn in memory the stream says so in one failed event.
	if evs, err := c.Progress(ctx, "alice", "other"); err != nil || len(evs) != 1 || !evs[0].Failed {
		t.Errorf("progress of an unknown spawn: %+v %v", evs, err)
	}

	if d, err := c.DeleteForever(ctx, "alice", "", lifecycle.SavedState{}); err == nil {
		t.Errorf("delete forever of a running server: %+v", d)
	} else if e := new(apiclient.Error); !errors.As(err, &e) || e.Status != http.StatusConflict || e.Field != "server" {
		t.Errorf("delete forever of a running server: %v", err)
	}
	srv, gone, err := c.Stop(ctx, "alice", "", apiclient.StopOptions{Now: true, Wait: 3 * time.Second,
		By: &history.Actor{Kind: history.ActorAdmin, Name: "root"}, Hint: lifecycle.Hint{Pod: "jupyter-alice"}})
	if err != nil || !gone || srv != nil {
		t.Fatalf("stop: %+v %v %v", srv, gone, err)
	}
	want := apiclienttest.Call{Key: lifecycle.Key{User: "alice"}, By: history.Actor{Kind: history.ActorAdmin, Name: "root"},
		Hint: lifecycle.Hint{Pod: "jupyter-alice"}, Now: true, Wait: 2 * time.Second}
	if diff := cmp.Diff([]apiclienttest.Call{want}, f.Servers.Stops()); diff != "" {
		t.Errorf("stop reached the manager (-want +got):\n%s", diff)
	}
	d, err := c.DeleteForever(ctx, "alice", "", lifecycle.SavedState{PVCName: "claim-alice", UserID: 7})
	if err != nil || d.Result != "deleted" || d.PVC != "claim-alice" {
		t.Errorf("delete forever: %+v %v", d, err)
	}

	bob := c.As(apiclient.User{Name: "bob"})
	srv, gone, err = bob.Stop(ctx, "bob", "gpu work", apiclient.StopOptions{})
	if err != nil || gone || srv == nil || srv.Server != "gpu work" {
		t.Errorf("stop still terminating: %+v %v %v", srv, gone, err)
	}
}

func TestProfilesKeepOrder(t *testing.T) {
	c, _ := newClient(t, apiclient.User{Name: "alice"})
	ps, err := c.Profiles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Slug != "cpu" || !ps[0].Default || ps[1].GPUClass != "a5000" {
		t.Fatalf("profiles %+v", ps)
	}
	opt := ps[0].ProfileOptions[0]
	if opt.Name != "image" || len(opt.Choices) != 2 || opt.Choices[0].Name != "minimal" || opt.Choices[1].Name != "datascience" ||
		!opt.UnlistedChoice.Enabled || opt.UnlistedChoice.ValidationRegex != `^quay\.io/` {
		t.Errorf("cpu's option %+v", opt)
	}
	if ch := ps[1].ProfileOptions[0].Choices; ch[0].Name != "a5000" || ch[1].Name != "a100" || ch[1].GPUClass != "a100" {
		t.Errorf("gpu's choices %+v", ch)
	}
}

func TestAdminViews(t *testing.T) {
	ctx := context.Background()
	c, _ := newClient(t, admin)
	list, err := c.ListServers(ctx)
	if err != nil || len(list.Servers) != 4 {
		t.Fatalf("list: %+v %v", list, err)
	}
	carol := list.Servers[2]
	if carol.User != "carol" || carol.Stopped == nil || carol.Stopped.Stopper != "evicted" || carol.Stopped.Why == "" {
		t.Errorf("carol in the list: %+v", carol)
	}
	one, err := c.Server(ctx, "bob", "gpu work")
	if err != nil || len(one.Events) != 2 || one.Reservation != "res-7" {
		t.Errorf("bob's server: %+v %v", one, err)
	}
	if _, err := c.Server(ctx, "nobody", ""); !isStatus(err, http.StatusNotFound) {
		t.Errorf("unknown server: %v", err)
	}

	page, err := c.Sessions(ctx, apiclient.SessionFilter{User: "frank", Limit: 100})
	if err != nil || len(page.Sessions) != 100 || page.Next == "" {
		t.Fatalf("first page of frank's sessions: %d, next %q, %v", len(page.Sessions), page.Next, err)
	}
	n := 0
	for s, err := range c.AllSessions(ctx, apiclient.SessionFilter{User: "frank", Limit: 60}) {
		if err != nil {
			t.Fatal(err)
		}
		if s.User != "frank" {
			t.Errorf("session of %s", s.User)
		}
		n++
	}
	if n != 150 {
		t.Errorf("AllSessions yielded %d of frank's 150 sessions", n)
	}
	def := ""
	ended, err := c.Sessions(ctx, apiclient.SessionFilter{Server: &def, State: apiclient.SessionsEnded, Reason: "oomkilled"})
	if err != nil || len(ended.Sessions) != 0 {
		t.Errorf("grace's OOM session is on a named server: %+v %v", ended, err)
	}
	ended, err = c.Sessions(ctx, apiclient.SessionFilter{Reason: "oomkilled", Since: "24h"})
	if err != nil || len(ended.Sessions) != 1 || ended.Sessions[0].User != "grace" {
		t.Errorf("OOM sessions of the last day: %+v %v", ended, err)
	}
	if _, err := c.Sessions(ctx, apiclient.SessionFilter{Since: "yesterday"}); !isField(err, http.StatusBadRequest, "since") {
		t.Errorf("bad since: %v", err)
	}

	det, err := c.Session(ctx, "e5f6a7b8-c9d0-4e1f-a2b3-c4d5e6f7a8b9")
	if err != nil || len(det.Events) != 6 || det.Why == "" || det.Stopper != history.StopperCuller {
		t.Errorf("erin's session: %+v %v", det, err)
	}
	why, err := c.Why(ctx, "carol", "")
	if err != nil || !strings.Contains(why.Sentence, "evicted") || why.Session.UID == "" {
		t.Errorf("why carol: %+v %v", why, err)
	}
	if why, err := c.Why(ctx, "grace", "big data"); err != nil || !strings.Contains(why.Sentence, "big data") {
		t.Errorf("why grace's named server: %+v %v", why, err)
	}
}

func TestWhyIsAllowedForTheUserOnly(t *testing.T) {
	ctx := context.Background()
	c, _ := newClient(t, apiclient.User{Name: "carol"})
	if _, err := c.Why(ctx, "carol", ""); err != nil {
		t.Errorf("carol asking about her server: %v", err)
	}
	if _, err := c.Why(ctx, "grace", "big data"); !isField(err, http.StatusForbidden, "user") {
		t.Errorf("carol asking about grace's server: %v", err)
	}
	if _, err := c.Sessions(ctx, apiclient.SessionFilter{}); !isField(err, http.StatusForbidden, "admin") {
		t.Errorf("carol listing sessions: %v", err)
	}
}

func TestReservationCalls(t *testing.T) {
	ctx := context.Background()
	c, f := newClient(t, admin)
	start := f.Now.Add(time.Hour).UTC()
	b, err := c.CreateBooking(ctx, hubapi.BookingRequest{Owner: "alice", Workspace: "DSC10", Class: "a5000", GPUs: 1,
		Start: start.Format(time.RFC3339), End: start.Add(time.Hour).Format(time.RFC3339)})
	if err != nil || b.ID != 8 || b.Kind != reservation.KindBooking {
		t.Fatalf("create: %+v %v", b, err)
	}
	if _, err := c.CreateBooking(ctx, hubapi.BookingRequest{Owner: "alice"}); !isField(err, http.StatusBadRequest, "start") {
		t.Errorf("create without a window: %v", err)
	}
	if got, err := c.Reservation(ctx, 8); err != nil || got.Owner != "alice" {
		t.Errorf("get: %+v %v", got, err)
	}
	if got, err := c.Reassign(ctx, 8, "bob"); err != nil || got.Owner != "bob" {
		t.Errorf("reassign: %+v %v", got, err)
	}
	if _, err := c.Reassign(ctx, 5, "carol"); !isField(err, http.StatusConflict, "id") {
		t.Errorf("reassign of a lease: %v", err)
	}
	if err := c.CancelReservation(ctx, 8, reservation.CancelUser); err != nil {
		t.Errorf("cancel: %v", err)
	}
	l, err := c.Reservations(ctx, apiclient.ReservationFilter{State: reservation.StatusCancelled, Kind: reservation.KindBooking})
	if err != nil || len(l.Reservations) != 1 || l.Reservations[0].CancelReason != reservation.CancelUser {
		t.Errorf("cancelled bookings: %+v %v", l, err)
	}
	if err := c.CancelReservation(ctx, 99, ""); !isField(err, http.StatusNotFound, "id") {
		t.Errorf("cancel of an unknown reservation: %v", err)
	}
	if err := c.PauseClass(ctx, "a5000", "driver upgrade"); err != nil {
		t.Errorf("pause: %v", err)
	}
	cl, err := c.GPUClasses(ctx, 3)
	if err != nil || len(cl.Classes) != 2 || cl.Classes[0].Paused != "driver upgrade" || len(cl.Classes[0].Risk) != 1 {
		t.Errorf("classes: %+v %v", cl, err)
	}
	if err := c.ResumeClass(ctx, "a5000"); err != nil || f.Reservations.Paused()["a5000"] != "" {
		t.Errorf("resume: %v", err)
	}
	if err := c.PauseClass(ctx, "tpu", ""); !isField(err, http.StatusNotFound, "class") {
		t.Errorf("pause of an unknown class: %v", err)
	}
	ch, err := c.Charges(ctx, f.Now.Add(-48*time.Hour), f.Now)
	if err != nil || len(ch.Charges) != 2 || !ch.Since.Equal(f.Now.Add(-48*time.Hour)) {
		t.Errorf("charges: %+v %v", ch, err)
	}
	risk, err := c.PreemptionRisk(ctx, 0)
	if err != nil || risk.Hours != 6 || len(risk.Risk) != 2 {
		t.Errorf("risk: %+v %v", risk, err)
	}
	if _, err := c.PreemptionRisk(ctx, 1000); !isField(err, http.StatusBadRequest, "hours") {
		t.Errorf("risk beyond two weeks: %v", err)
	}
}

func TestErrorsAreTyped(t *testing.T) {
	ctx := context.Background()
	f := apiclienttest.New(t, apiclienttest.Options{})
	anon, err := apiclient.New(f.URL, admin, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anon.ListServers(ctx); !isField(err, http.StatusUnauthorized, "Authorization") {
		t.Errorf("no token: %v", err)
	}
	alice, _ := apiclient.New(f.URL, apiclient.User{Name: "alice"}, apiclient.SharedSecret(f.Secret))
	_, err = alice.Start(ctx, "alice", "", hubapi.StartRequest{UserOptions: map[string]any{"profile": "nope"}})
	var e *apiclient.Error
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Field != "user_options.profile" || e.RequestID == "" ||
		err.Error() != e.Message+" (field user_options.profile, HTTP 400)" {
		t.Errorf("bad profile: %#v", err)
	}
	boom, _ := apiclient.New(f.URL, apiclient.User{Name: "boom"}, apiclient.SharedSecret(f.Secret))
	_, err = boom.Start(ctx, "boom", "", hubapi.StartRequest{})
	if !errors.As(err, &e) || e.Status != http.StatusInternalServerError || e.RequestID == "" || !strings.Contains(e.Message, e.RequestID) ||
		strings.Contains(e.Message, "10.96.0.1") {
		t.Errorf("internal error: %#v", err)
	}
	if err := alice.Readyz(ctx); err != nil {
		t.Errorf("readyz: %v", err)
	}
	if m, err := alice.Metrics(ctx); err != nil || !strings.Contains(m, "spawner_http_request_duration_seconds") {
		t.Errorf("metrics: %v", err)
	}
	if err := alice.FollowProgress(ctx, "bob", "", func(lifecycle.Event) error { return nil }); !isField(err, http.StatusForbidden, "user") {
		t.Errorf("progress of another user's server: %v", err)
	}
}

func TestRawDoSendsWhatItIsGiven(t *testing.T) {
	c, _ := newClient(t, apiclient.User{Name: "alice"})
	code, body, err := c.Do(context.Background(), http.MethodPost, apiclient.ServerPath("alice", ""), strings.NewReader(`{"env":`), apiclient.User{Name: "alice"})
	if err != nil || code != http.StatusBadRequest || !strings.Contains(string(body), `"field":"body"`) {
		t.Errorf("malformed body: %d %s %v", code, body, err)
	}
	code, _, err = c.Do(context.Background(), http.MethodGet, "/api/v1/servers", nil, apiclient.User{Name: "alice"})
	if err != nil || code != http.StatusForbidden {
		t.Errorf("admin list as alice: %d %v", code, err)
	}
}

func TestFollowProgressEndsWithContext(t *testing.T) {
	c, _ := newClient(t, apiclient.User{Name: "alice"})
	ctx, cancel := context.WithCancel(context.Background())
	err := c.FollowProgress(ctx, "alice", "", func(lifecycle.Event) error { cancel(); return nil })
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("after cancel: %v", err)
	}
}

func isStatus(err error, status int) bool {
	var e *apiclient.Error
	return errors.As(err, &e) && e.Status == status
}

func isField(err error, status int, field string) bool {
	var e *apiclient.Error
	return errors.As(err, &e) && e.Status == status && e.Field == field && e.Message != ""
}
