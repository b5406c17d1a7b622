package reservation_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsmlp/spawner/apiclient"
	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/hubapi"
	"github.com/dsmlp/spawner/reservation"
)

var adminSecret = []byte("0123456789abcdef0123456789abcdef")

func adminAPI(t *testing.T) *httptest.Server {
	t.Helper()
	auth, err := hubapi.NewAuthenticator(adminSecret, "jupyterhub", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(hubapi.New(hubapi.Options{Auth: auth, Reservations: ctl}))
	t.Cleanup(srv.Close)
	return srv
}

// adminClient is a client of srv signed as the admin, or as a user
// without the admin claim.
func adminClient(t *testing.T, srv *httptest.Server, admin bool) *apiclient.Client {
	t.Helper()
	c, err := apiclient.New(srv.URL, apiclient.User{Name: "admin", Admin: admin}, apiclient.SharedSecret(adminSecret))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// call sends a request under /api/v1 and decodes a 2xx answer into out (if
// not nil); an error answer is returned as the API's error body.
func call(t *testing.T, srv *httptest.Server, admin bool, method, path string, body any, out any) (int, hubapi.ErrorBody) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	code, data, err := adminClient(t, srv, admin).Do(context.Background(), method, "/api/v1"+path, rd, apiclient.User{Name: "admin", Admin: admin})
	if err != nil {
		t.Fatal(err)
	}
	var eb hubapi.ErrorBody
	if code >= 300 {
		_ = json.Unmarshal(data, &eb)
	} else if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decoding: %v", method, path, err)
		}
	}
	return code, eb
}

// isField reports whether err is the API's answer status naming field.
func isField(err error, status int, field string) bool {
	var e *apiclient.Error
	return errors.As(err, &e) && e.Status == status && e.Field == field
}

// The admin API against the running controller: bookings, the class view
// with its queue, pause, charges and risk; bad input names its field.
func TestAdminAPI(t *testing.T) {
	ctx := context.Background()
	srv := adminAPI(t)
	c := adminClient(t, srv, true)
	n := env.Namespace(t)
	now := clk.Now().UTC()
	if _, err := adminClient(t, srv, false).Reservations(ctx, apiclient.ReservationFilter{}); !isField(err, http.StatusForbidden, "admin") {
		t.Errorf("a non-admin token listed reservations: %v", err)
	}
	for field, req := range map[string]hubapi.BookingRequest{
		"owner":     {Owner: "Not A Namespace", Workspace: wsCourse, Class: "work", GPUs: 1, Start: now.Format(time.RFC3339), End: now.Add(time.Hour).Format(time.RFC3339)},
		"class":     {Owner: n, Workspace: wsCourse, Class: "tpu", GPUs: 1, Start: now.Format(time.RFC3339), End: now.Add(time.Hour).Format(time.RFC3339)},
		"gpus":      {Owner: n, Workspace: wsCourse, Class: "work", GPUs: 0, Start: now.Format(time.RFC3339), End: now.Add(time.Hour).Format(time.RFC3339)},
		"end":       {Owner: n, Workspace: wsCourse, Class: "work", GPUs: 1, Start: now.Format(time.RFC3339), End: now.Add(-time.Hour).Format(time.RFC3339)},
		"start":     {Owner: n, Workspace: wsCourse, Class: "work", GPUs: 1, Start: "tomorrow", End: now.Add(time.Hour).Format(time.RFC3339)},
		"workspace": {Owner: n, Workspace: reservation.OrgOnDemand, Class: "work", GPUs: 1, Start: now.Format(time.RFC3339), End: now.Add(time.Hour).Format(time.RFC3339)},
	} {
		if _, err := c.CreateBooking(ctx, req); !isField(err, http.StatusBadRequest, field) {
			t.Errorf("bad %s: %v, want a 400 naming %s", field, err, field)
		}
	}
	b, err := c.CreateBooking(ctx, hubapi.BookingRequest{Owner: n, Workspace: wsCourse, Class: "work", GPUs: 2,
		Start: now.Add(2 * time.Hour).Format(time.RFC3339), End: now.Add(4 * time.Hour).Format(time.RFC3339)})
	if err != nil || b.ID == 0 {
		t.Fatalf("create booking: %+v %v", b, err)
	}
	waitReservation(t, b.ID, func(reservation.Reservation) bool { return true })
	list, err := c.Reservations(ctx, apiclient.ReservationFilter{Owner: n, Kind: reservation.KindBooking})
	if err != nil || len(list.Reservations) != 1 || list.Reservations[0].ID != b.ID {
		t.Errorf("list by owner: %+v %v", list, err)
	}
	classes, err := c.GPUClasses(ctx, 6)
	if err != nil {
		t.Fatal(err)
	}
	var work *reservation.ClassStatus
	for i := range classes.Classes {
		if classes.Classes[i].Class == "work" {
			work = &classes.Classes[i]
		}
	}
	if work == nil || work.Capacity != 16 || work.Nodes != 2 || len(work.Risk) == 0 || work.Risk[0].Demand != 2 {
		t.Errorf("class view of work: %+v", work)
	}
	if risk, err := c.PreemptionRisk(ctx, 6); err != nil || len(risk.Risk) == 0 {
		t.Errorf("risk: %+v %v", risk, err)
	}
	if code, eb := call(t, srv, true, http.MethodGet, "/preemption-risk?hours=-1", nil, nil); code != http.StatusBadRequest || eb.Field != "hours" {
		t.Errorf("bad hours: %d %v", code, eb)
	}
	heir := env.Namespace(t)
	if _, err := c.Reassign(ctx, b.ID, heir); err != nil {
		t.Errorf("reassign: %v", err)
	}
	waitReservation(t, b.ID, func(r reservation.Reservation) bool { return r.Owner == heir })
	if code, _ := call(t, srv, true, http.MethodDelete, fmt.Sprintf("/reservations/res-%d?reason=user", b.ID), nil, nil); code != http.StatusNoContent {
		t.Errorf("cancel by res- ID: %d", code)
	}
	got := waitReservation(t, b.ID, func(r reservation.Reservation) bool { return r.Status == reservation.StatusCancelled })
	if got.CancelReason != reservation.CancelUser {
		t.Errorf("cancel reason %s", got.CancelReason)
	}
	if err := c.CancelReservation(ctx, 999999, ""); !isField(err, http.StatusNotFound, "id") {
		t.Errorf("unknown id: %v", err)
	}
	if err := c.PauseClass(ctx, "nope", ""); !isField(err, http.StatusNotFound, "class") {
		t.Errorf("pause of an unknown class: %v", err)
	}
	charges, err := c.Charges(ctx, time.Time{}, time.Time{})
	if err != nil || len(charges.Charges) == 0 {
		t.Errorf("charges: %+v %v", charges, err)
	}
	for _, c := range charges.Charges {
		if c.Total < 0 || c.Total != c.Booking+c.OnDemand {
			t.Errorf("charge %+v does not add up", c)
		}
	}
}

// The CLI drives the same API.
func TestAdminCLI(t *testing.T) {
	srv := adminAPI(t)
	bin, err := harness.BuildBinary(env.RepoDir, "./cmd/spawnerd", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, adminSecret, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, append([]string{"admin", "--url", srv.URL, "--shared-secret-file", secretFile}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("spawnerd admin %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	n := env.Namespace(t)
	now := clk.Now().UTC()
	out := run("bookings", "create", "--owner", n, "--workspace", wsCourse, "--class", "work", "--gpus", "1",
		"--start", now.Add(time.Hour).Format(time.RFC3339), "--end", now.Add(2*time.Hour).Format(time.RFC3339), "-o", "json")
	var b reservation.Reservation
	if err := json.Unmarshal([]byte(out), &b); err != nil || b.ID == 0 {
		t.Fatalf("create -o json printed %q", out)
	}
	waitReservation(t, b.ID, func(reservation.Reservation) bool { return true })
	if out := run("bookings", "list", "--owner", n); !strings.Contains(out, fmt.Sprintf("\n%d ", b.ID)) || !strings.Contains(out, "booking") {
		t.Errorf("list: %s", out)
	}
	if out := run("classes"); !strings.HasPrefix(out, "CLASS ") || !strings.Contains(out, "\nwork ") {
		t.Errorf("classes: %s", out)
	}
	if out := run("classes", "-o", "json"); !strings.Contains(out, `"class": "work"`) {
		t.Errorf("classes -o json: %s", out)
	}
	run("pause", "work", "--reason", "maintenance")
	run("resume", "work")
	run("bookings", "cancel", fmt.Sprint(b.ID), "--by", "user")
	waitReservation(t, b.ID, func(r reservation.Reservation) bool { return r.Status == reservation.StatusCancelled })
	cmd := exec.Command(bin, "admin", "--url", srv.URL, "--shared-secret-file", secretFile, "bookings", "create", "--owner", n, "--class", "work")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "(field start, HTTP 400)") {
		t.Errorf("a bad create should fail naming the field: %v %s", err, out)
	}
}
