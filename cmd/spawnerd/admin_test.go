package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/dsmlp/spawner/apiclient"
	"github.com/dsmlp/spawner/apiclient/apiclienttest"
	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/hubapi"
	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/reservation"
	"github.com/dsmlp/spawner/sparkcluster"
)

// fixedNow is the fakes' clock and the CLI's, so ages are fixed.
var fixedNow = time.Date(2026, 12, 4, 18, 0, 0, 0, time.UTC)

func newFake(t *testing.T) *apiclienttest.Fake {
	t.Helper()
	return apiclienttest.New(t, apiclienttest.Options{Now: fixedNow})
}

// runAdmin runs spawnerd admin against f with args, the URL and secret
// from the environment, and returns what it printed.
func runAdmin(t *testing.T, f *apiclienttest.Fake, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runAdminEnv(t, map[string]string{"SPAWNERD_URL": f.URL, "SPAWNERD_SHARED_SECRET": string(f.Secret)}, args...)
}

func runAdminEnv(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	a := &adminCmd{out: &out, errOut: &errOut, getenv: func(k string) string { return env[k] },
		now: func() time.Time { return fixedNow }, httpClient: &http.Client{Timeout: 10 * time.Second}}
	err = a.run(context.Background(), args)
	return out.String(), errOut.String(), err
}

// mustRun runs spawnerd admin and fails the test on an error.
func mustRun(t *testing.T, f *apiclienttest.Fake, args ...string) string {
	t.Helper()
	out, errOut, err := runAdmin(t, f, args...)
	if err != nil {
		t.Fatalf("spawnerd admin %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

func decode[T any](t *testing.T, out string) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("-o json printed what is not a %T: %v\n%s", v, err, out)
	}
	return v
}

func TestAdminServersTable(t *testing.T) {
	f := newFake(t)
	want := `USER    SERVER     STATUS    PROFILE   COURSE   NODE            AGE   STOPPER   MESSAGE
alice   -          running   cpu       DSC10    local-runtime   5m    -         -
bob     gpu work   pending   gpu       DSC10    -               60s   -         RuntimeGuaranteed: Admitted under booking #7 (DSC10): GPU access guaranteed until 2026-12-04 12:00:00 PST.
carol   -          stopped   cpu       DSC20    local-runtime   3d    evicted   carol's server ended at 2026-12-04 16:00:00 UTC: the kubelet evicted the pod from node local-runtime (The node was low on resource: memory.); phase Failed, reason Evicted, exit code 137.
dave    -          running   spark     DSC102   local-runtime   26h   -         -
`
	if diff := cmp.Diff(want, mustRun(t, f, "servers")); diff != "" {
		t.Errorf("servers (-want +got):\n%s", diff)
	}
	wide := mustRun(t, f, "servers", "-o", "wide")
	for _, s := range []string{"NAMESPACE", "RESERVATION", "res-7 (guaranteed)", "10.244.0.12", "quay.io/jupyter/pytorch-notebook:cuda12-2026-11-30"} {
		if !strings.Contains(wide, s) {
			t.Errorf("servers -o wide lacks %q:\n%s", s, wide)
		}
	}
}

func TestAdminServersJSONIsTheAPIAnswer(t *testing.T) {
	f := newFake(t)
	got := decode[hubapi.ServerList](t, mustRun(t, f, "--output", "json", "servers"))
	if diff := cmp.Diff(hubapi.ServerList{Servers: f.Servers.List()}, got, cmpopts.IgnoreUnexported(sparkcluster.Status{})); diff != "" {
		t.Errorf("servers -o json (-want +got):\n%s", diff)
	}
	one := decode[lifecycle.Server](t, mustRun(t, f, "servers", "bob", "gpu work", "-o", "json"))
	if one.Server != "gpu work" || len(one.Events) != 2 || one.Reservation != "res-7" {
		t.Errorf("servers bob 'gpu work' -o json: %+v", one)
	}
}

func TestAdminServerDescribe(t *testing.T) {
	f := newFake(t)
	want := `User:     alice
Server:   (default)
Status:   running
URL:      http://10.244.0.12:8888/user/alice/
Pod:      jhub/jupyter-alice
UID:      6f1c2a9e-5b7d-4c1e-9a55-3d2f0c1b7a11
Phase:    Running
Node:     local-runtime
IP:       10.244.0.12
Created:  2026-12-04T17:55:00Z (5m ago)
Profile:  cpu
Image:    quay.io/jupyter/minimal-notebook:2026-11-30
Course:   DSC10
Events:
  AGE     TYPE     REASON      FROM                MESSAGE
  5m      Normal   Scheduled   default-scheduler   Successfully assigned jhub/jupyter-alice to local-runtime
  4m58s   Normal   Pulled      kubelet             Container image "quay.io/jupyter/minimal-notebook:2026-11-30" already present on machine
  4m57s   Normal   Started     kubelet             Started container notebook
`
	if diff := cmp.Diff(want, mustRun(t, f, "servers", "alice")); diff != "" {
		t.Errorf("servers alice (-want +got):\n%s", diff)
	}
	carol := mustRun(t, f, "servers", "carol")
	for _, s := range []string{"Stopped:        carol's server ended at", "  Stopper:      evicted", "  Reason:       Evicted", "  Exit code:    137",
		"  At:           2026-12-04T16:00:00Z (120m ago)", "Events:\n  <none>\n"} {
		if !strings.Contains(carol, s) {
			t.Errorf("servers carol lacks %q:\n%s", s, carol)
		}
	}
	if strings.Count(carol, "carol's server ended") != 1 {
		t.Errorf("servers carol repeats the stop's sentence:\n%s", carol)
	}
	if dave := mustRun(t, f, "servers", "dave"); !strings.Contains(dave, "Spark:") || !strings.Contains(dave, "1 of 2 workers ready") {
		t.Errorf("servers dave lacks the Spark cluster:\n%s", dave)
	}
}

func TestAdminSessions(t *testing.T) {
	f := newFake(t)
	want := `STARTED   USER    SERVER     PROFILE   COURSE   CLASS   NODE                ENDED   STOPPER   REASON
8h        grace   big data   cpu       DSC20    -       local-runtime       6h      oom       OOMKilled
30h       erin    -          gpu       DSC10    a5000   local-runtime-gpu   23h     culler    Completed
3d        carol   -          cpu       DSC20    -       local-runtime       120m    evicted   Evicted
`
	if diff := cmp.Diff(want, mustRun(t, f, "sessions", "--state", "ended", "--since", "30h")); diff != "" {
		t.Errorf("sessions --state ended --since 30h (-want +got):\n%s", diff)
	}
	if got := mustRun(t, f, "sessions", "--server", "", "--class", "a5000"); !strings.Contains(got, "erin") || strings.Contains(got, "bob") {
		t.Errorf("sessions of default servers with a5000 GPUs:\n%s", got)
	}
	wide := mustRun(t, f, "sessions", "--user", "erin", "-o", "wide")
	for _, s := range []string{"UID", "e5f6a7b8-c9d0-4e1f-a2b3-c4d5e6f7a8b9", "jhub/jupyter-erin", "res-5"} {
		if !strings.Contains(wide, s) {
			t.Errorf("sessions -o wide lacks %q:\n%s", s, wide)
		}
	}

	// One page, and a hint to the next; --all follows every page.
	out, errOut, err := runAdmin(t, f, "sessions", "--user", "frank", "--limit", "100")
	if err != nil || strings.Count(out, "\n") != 101 || !strings.Contains(errOut, "--cursor 100") {
		t.Errorf("one page of frank's sessions: %d lines, stderr %q, %v", strings.Count(out, "\n"), errOut, err)
	}
	all := decode[history.SessionPage](t, mustRun(t, f, "sessions", "--all", "--limit", "40", "--user", "frank", "-o", "json"))
	if len(all.Sessions) != 150 || all.Next != "" {
		t.Errorf("--all: %d sessions, next %q; want frank's 150", len(all.Sessions), all.Next)
	}
	page := decode[history.SessionPage](t, mustRun(t, f, "sessions", "--user", "frank", "--cursor", "140", "-o", "json"))
	if len(page.Sessions) != 10 || page.Next != "" {
		t.Errorf("the last page: %d sessions, next %q", len(page.Sessions), page.Next)
	}

	detail := mustRun(t, f, "sessions", "e5f6a7b8-c9d0-4e1f-a2b3-c4d5e6f7a8b9")
	for _, s := range []string{"Why:          erin's server was stopped by the idle culler (jupyterhub-idle-culler)", "Reservation:  res-5 (on_demand)",
		"stop-requested   by culler jupyterhub-idle-culler", "ended            stopper culler, phase Succeeded, reason Completed, container Completed, exit code 0"} {
		if !strings.Contains(detail, s) {
			t.Errorf("sessions UID lacks %q:\n%s", s, detail)
		}
	}
	got := decode[hubapi.SessionDetail](t, mustRun(t, f, "sessions", "-o", "json", "e5f6a7b8-c9d0-4e1f-a2b3-c4d5e6f7a8b9"))
	if len(got.Events) != 6 || got.End == nil || got.StopRequestedBy == nil {
		t.Errorf("sessions UID -o json: %+v", got)
	}
}

func TestAdminWhyIsOneSentenceThenFacts(t *testing.T) {
	f := newFake(t)
	carol := lastSession(t, f, "carol", "")
	want := carol.Why + `
Stopper:           evicted
Phase:             Failed
Reason:            Evicted
Message:           The node was low on resource: memory.
Container reason:  -
Exit code:         137
Node:              local-runtime
Ended at:          2026-12-04T16:00:00Z (120m ago)
Session:           c4a1e0f3-2d6b-4b8a-a1e2-9f8e7d6c5b43
`
	if diff := cmp.Diff(want, mustRun(t, f, "why", "carol")); diff != "" {
		t.Errorf("why carol (-want +got):\n%s", diff)
	}
	grace := lastSession(t, f, "grace", "big data")
	if first, _, _ := strings.Cut(mustRun(t, f, "why", "grace", "big data"), "\n"); first != grace.Why || !strings.Contains(first, "big data") {
		t.Errorf("why grace 'big data': first line %q, want %q", first, grace.Why)
	}
	erin := mustRun(t, f, "why", "erin")
	if !strings.Contains(erin, "\nStop asked by:     culler jupyterhub-idle-culler\n") {
		t.Errorf("why erin lacks who asked for the stop:\n%s", erin)
	}
	// Flags after the arguments.
	w := decode[hubapi.WhyAnswer](t, mustRun(t, f, "why", "carol", "-o", "json"))
	if w.User != "carol" || w.Sentence != carol.Why || w.Session.UID != carol.UID {
		t.Errorf("why carol -o json: %+v", w)
	}
}

// lastSession is the newest session of a server in the fake history.
func lastSession(t *testing.T, f *apiclienttest.Fake, user, server string) history.Session {
	t.Helper()
	for _, s := range f.History.Sessions() {
		if s.User == user && s.Server == server {
			return s
		}
	}
	t.Fatalf("no session of %s/%s", user, server)
	return history.Session{}
}

func TestAdminBookings(t *testing.T) {
	f := newFake(t)
	start := fixedNow.Add(time.Hour).Format(time.RFC3339)
	end := fixedNow.Add(3 * time.Hour).Format(time.RFC3339)
	created := mustRun(t, f, "bookings", "create", "--owner", "default", "--workspace", "DEMO101", "--class", "a5000", "--gpus", "2", "--start", start, "--end", end)
	want := `ID   KIND      OWNER     WORKSPACE   CLASS   GPUS   START                  END                    STATUS
8    booking   default   DEMO101     a5000   2      2026-12-04T19:00:00Z   2026-12-04T21:00:00Z   active
`
	if diff := cmp.Diff(want, created); diff != "" {
		t.Errorf("bookings create (-want +got):\n%s", diff)
	}
	if list := mustRun(t, f, "bookings", "list", "--workspace", "DEMO101"); !strings.Contains(list, "DEMO101") || strings.Contains(list, "DSC10") {
		t.Errorf("bookings list --workspace DEMO101:\n%s", list)
	}
	b := decode[reservation.Reservation](t, mustRun(t, f, "bookings", "reassign", "res-8", "--owner", "alice", "-o", "json"))
	if b.ID != 8 || b.Owner != "alice" {
		t.Errorf("reassign: %+v", b)
	}
	if got := mustRun(t, f, "bookings", "cancel", "8", "--by", "user"); got != "reservation 8 cancelled\n" {
		t.Errorf("cancel printed %q", got)
	}
	if got := decode[reservation.Reservation](t, mustRun(t, f, "bookings", "get", "8", "-o", "json")); got.CancelReason != reservation.CancelUser {
		t.Errorf("cancelled booking: %+v", got)
	}
	if got := mustRun(t, f, "-o", "json", "bookings", "cancel", "7"); got != "" {
		t.Errorf("cancel -o json printed %q, want nothing", got)
	}
	l := decode[hubapi.ReservationList](t, mustRun(t, f, "bookings", "list", "--state", "cancelled", "-o", "json"))
	if len(l.Reservations) != 3 {
		t.Errorf("cancelled reservations: %+v", l)
	}
}

func TestAdminClassesPauseChargesRisk(t *testing.T) {
	f := newFake(t)
	if got := mustRun(t, f, "pause", "a100", "--reason", "driver upgrade"); got != "on-demand admission of a100 paused\n" {
		t.Errorf("pause printed %q", got)
	}
	want := `CLASS   NODES   CAPACITY   USED   FREE   BOOKED   UNCLAIMED   ADMITTED-PODS   WAITING-PODS   PAUSED
a5000   2       8          5      3      2        1           4               1              -
a100    1       4          0      4      0        0           0               0              driver upgrade
`
	if diff := cmp.Diff(want, mustRun(t, f, "classes")); diff != "" {
		t.Errorf("classes (-want +got):\n%s", diff)
	}
	mustRun(t, f, "resume", "a100")
	cl := decode[hubapi.ClassList](t, mustRun(t, f, "classes", "--hours", "1", "-o", "json"))
	if len(cl.Classes) != 2 || cl.Classes[1].Paused != "" || len(cl.Classes[0].Risk) != 0 {
		t.Errorf("classes within 1 h after resume: %+v", cl)
	}
	if got := mustRun(t, f, "charges", "--since", "720h"); !strings.Contains(got, "DSC10           6.00                1.50                  7.50") {
		t.Errorf("charges:\n%s", got)
	}
	ch := decode[hubapi.ChargeList](t, mustRun(t, f, "charges", "--since", "2026-11-01T00:00:00Z", "-o", "json"))
	if !ch.Since.Equal(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("charges since %s", ch.Since)
	}
	want = `CLASS   BOUNDARY               IN     DEMAND   SHORTFALL   AT-RISK-PODS   AT-RISK-GPUS   UNMET
a5000   2026-12-04T20:00:00Z   120m   4        1           2              2              0
`
	if diff := cmp.Diff(want, mustRun(t, f, "risk", "--hours", "6")); diff != "" {
		t.Errorf("risk (-want +got):\n%s", diff)
	}
	if out, errOut, err := runAdmin(t, f, "risk", "--hours", "1"); err != nil || out != "" || !strings.Contains(errOut, "No booking boundaries within 1 hours found") {
		t.Errorf("risk without boundaries: %q %q %v", out, errOut, err)
	}
}

func TestAdminErrors(t *testing.T) {
	f := newFake(t)
	var apiErr *apiclient.Error
	_, _, err := runAdmin(t, f, "bookings", "create", "--owner", "alice", "--class", "a5000")
	if !errors.As(err, &apiErr) || apiErr.Field != "start" || !strings.HasSuffix(err.Error(), "(field start, HTTP 400)") {
		t.Errorf("a create without a window: %v", err)
	}
	if _, _, err := runAdmin(t, f, "why", "nobody"); err == nil || err.Error() != "no session of nobody's default server is recorded (field user, HTTP 404)" {
		t.Errorf("why of an unknown user: %v", err)
	}
	if _, _, err := runAdmin(t, f, "servers", "nobody"); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
		t.Errorf("servers of an unknown user: %v", err)
	}
	if _, _, err := runAdmin(t, f, "sessions", "--since", "last week"); !errors.As(err, &apiErr) || apiErr.Field != "since" {
		t.Errorf("sessions --since 'last week': %v", err)
	}
	for name, args := range map[string][]string{
		"no command":         nil,
		"unknown command":    {"pods"},
		"unknown flag":       {"servers", "--colour"},
		"bad output":         {"servers", "-o", "yaml"},
		"too many arguments": {"why", "a", "b", "c"},
		"no user":            {"why"},
		"bad ID":             {"bookings", "cancel", "twelve"},
		"bad duration":       {"charges", "--since", "a month"},
		"bad number":         {"risk", "--hours", "many"},
	} {
		if _, _, err := runAdmin(t, f, args...); err == nil {
			t.Errorf("%s: spawnerd admin %v succeeded", name, args)
		}
	}
	_, _, err = runAdminEnv(t, map[string]string{"SPAWNERD_URL": f.URL}, "servers")
	if err == nil || !strings.Contains(err.Error(), "--shared-secret-file") {
		t.Errorf("without a secret: %v", err)
	}
	// A wrong secret is the API's 401.
	_, _, err = runAdminEnv(t, map[string]string{"SPAWNERD_URL": f.URL, "SPAWNERD_SHARED_SECRET": strings.Repeat("x", 40)}, "servers")
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized || apiErr.Field != "Authorization" {
		t.Errorf("with a wrong secret: %v", err)
	}
	if out, _, err := runAdmin(t, f, "sessions", "-h"); err != nil || !strings.Contains(out, "usage: spawnerd admin") {
		t.Errorf("-h: %v\n%s", err, out)
	}
}

func TestAdminFlagsAndToken(t *testing.T) {
	f := newFake(t)
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, append(f.Secret, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	// --url and --shared-secret-file before the command or after its arguments.
	env := map[string]string{"SPAWNERD_URL": "http://127.0.0.1:1"}
	for _, args := range [][]string{
		{"--url", f.URL, "--shared-secret-file", secretFile, "why", "carol"},
		{"why", "carol", "--url", f.URL, "--shared-secret-file", secretFile},
		{"why", "--url=" + f.URL, "carol", "--shared-secret-file", secretFile},
	} {
		if out, _, err := runAdminEnv(t, env, args...); err != nil || !strings.HasPrefix(out, "carol's server ended") {
			t.Errorf("spawnerd admin %v: %v\n%s", args, err, out)
		}
	}
	// A server named like a flag, after --.
	if _, _, err := runAdmin(t, f, "servers", "--", "-o"); err == nil || !strings.Contains(err.Error(), "HTTP 404") {
		t.Errorf("servers -- -o: %v", err)
	}
	tok := strings.TrimSpace(mustRun(t, f, "token"))
	auth, err := hubapi.NewAuthenticator(f.Secret, "jupyterhub", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cl, err := auth.Verify(tok); err != nil || !cl.Admin || cl.Subject != "admin" {
		t.Errorf("token: %+v %v", cl, err)
	}
}
