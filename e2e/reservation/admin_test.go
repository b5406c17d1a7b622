package reservation_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

func call(t *testing.T, srv *httptest.Server, admin bool, method, path string, body any, out any) (int, hubapi.ErrorBody) {
	t.Helper()
	var buf bytes.Buffer
	if body != nil {
		_ = json.NewEncoder(&buf).Encode(body)
	}
	req, _ := http.NewRequest(method, srv.URL+"/api/v1"+path, &buf)
	req.Header.Set("Authorization", "Bearer "+harness.Token(t, adminSecret, "admin", admin))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb hubapi.ErrorBody
	if resp.StatusCode >= 300 {
		_ = json.NewDecoder(resp.Body).Decode(&eb)
	} else if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: decoding: %v", method, path, err)
		}
	}
	return resp.StatusCode, eb
}

// The admin API against the running controller: bookings, the class view
// with its queue, pause, charges and risk; bad input names its field.
func TestAdminAPI(t *testing.T) {
	srv := adminAPI(t)
	n := env.Namespace(t)
	now := clk.Now().UTC()
	if code, _ := call(t, srv, false, http.MethodGet, "/reservations", nil, nil); code != http.StatusForbidden {
		t.Errorf("a non-admin token listed reservations: %d", code)
	}
	for field, req := range map[string]hubapi.BookingRequest{
		"owner":     {Owner: "Not A Namespace", Workspace: wsCourse, Class: "work", GPUs: 1, Start: now.Format(time.RFC3339), End: now.Add(time.Hour).Format(time.RFC3339)},
		"class":     {Owner: n, Workspace: wsCourse, Class: "tpu", GPUs: 1, Start: now.Format(time.RFC3339), End: now.Add(time.Hour).Format(time.RFC3339)},
		"gpus":      {Owner: n, Workspace: wsCourse, Class: "work", GPUs: 0, Start: now.Format(time.RFC3339), End: now.Add(time.Hour).Format(time.RFC3339)},
		"end":       {Owner: n, Workspace: wsCourse, Class: "work", GPUs: 1, Start: now.Format(time.RFC3339), End: now.Add(-time.Hour).Format(time.RFC3339)},
		"start":     {Owner: n, Workspace: wsCourse, Class: "work", GPUs: 1, Start: "tomorrow", End: now.Add(time.Hour).Format(time.RFC3339)},
		"workspace": {Owner: n, Workspace: reservation.OrgOnDemand, Class: "work", GPUs: 1, Start: now.Format(time.RFC3339), End: now.Add(time.Hour).Format(time.RFC3339)},
	} {
		if code, eb := call(t, srv, true, http.MethodPost, "/reservations", req, nil); code != http.StatusBadRequest || eb.Field != field {
			t.Errorf("bad %s: HTTP %d field %q (%s), want 400 naming %s", field, code, eb.Field, eb.Error, field)
		}
	}
	var b reservation.Reservation
	req := hubapi.BookingRequest{Owner: n, Workspace: wsCourse, Class: "work", GPUs: 2,
		Start: now.Add(2 * time.Hour).Format(time.RFC3339), End: now.Add(4 * time.Hour).Format(time.RFC3339)}
	if code, eb := call(t, srv, true, http.MethodPost, "/reservations", req, &b); code != http.StatusCreated || b.ID == 0 {
		t.Fatalf("create booking: HTTP %d %v", code, eb)
	}
	waitReservation(t, b.ID, func(reservation.Reservation) bool { return true })
	var list hubapi.ReservationList
	call(t, srv, true, http.MethodGet, "/reservations?owner="+n+"&kind=booking", nil, &list)
	if len(list.Reservations) != 1 || list.Reservations[0].ID != b.ID {
		t.Errorf("list by owner: %+v", list.Reservations)
	}
	var classes hubapi.ClassList
	call(t, srv, true, http.MethodGet, "/gpu-classes?hours=6", nil, &classes)
	var work *reservation.ClassStatus
	for i := range classes.Classes {
		if classes.Classes[i].Class == "work" {
			work = &classes.Classes[i]
		}
	}
	if work == nil || work.Capacity != 16 || work.Nodes != 2 || len(work.Risk) == 0 || work.Risk[0].Demand != 2 {
		t.Errorf("class view of work: %+v", work)
	}
	var risk hubapi.RiskList
	if code, _ := call(t, srv, true, http.MethodGet, "/preemption-risk?hours=6", nil, &risk); code != http.StatusOK || len(risk.Risk) == 0 {
		t.Errorf("risk: HTTP %d %+v", code, risk)
	}
	if code, eb := call(t, srv, true, http.MethodGet, "/preemption-risk?hours=-1", nil, nil); code != http.StatusBadRequest || eb.Field != "hours" {
		t.Errorf("bad hours: %d %v", code, eb)
	}
	var re reservation.Reservation
	heir := env.Namespace(t)
	if code, eb := call(t, srv, true, http.MethodPost, fmt.Sprintf("/reservations/%d/reassign", b.ID), hubapi.ReassignRequest{Owner: heir}, &re); code != http.StatusOK {
		t.Errorf("reassign: %d %v", code, eb)
	}
	waitReservation(t, b.ID, func(r reservation.Reservation) bool { return r.Owner == heir })
	if code, _ := call(t, srv, true, http.MethodDelete, fmt.Sprintf("/reservations/res-%d?reason=user", b.ID), nil, nil); code != http.StatusNoContent {
		t.Errorf("cancel: %d", code)
	}
	got := waitReservation(t, b.ID, func(r reservation.Reservation) bool { return r.Status == reservation.StatusCancelled })
	if got.CancelReason != reservation.CancelUser {
		t.Errorf("cancel reason %s", got.CancelReason)
	}
	if code, eb := call(t, srv, true, http.MethodDelete, "/reservations/999999", nil, nil); code != http.StatusNotFound || eb.Field != "id" {
		t.Errorf("unknown id: %d %v", code, eb)
	}
	if code, _ := call(t, srv, true, http.MethodPut, "/gpu-classes/nope/pause", hubapi.PauseRequest{}, nil); code != http.StatusNotFound {
		t.Errorf("pause of an unknown class: %d", code)
	}
	var charges hubapi.ChargeList
	if code, _ := call(t, srv, true, http.MethodGet, "/charges", nil, &charges); code != http.StatusOK || len(charges.Charges) == 0 {
		t.Errorf("charges: %d %+v", code, charges)
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
		"--start", now.Add(time.Hour).Format(time.RFC3339), "--end", now.Add(2*time.Hour).Format(time.RFC3339))
	var b reservation.Reservation
	if err := json.Unmarshal([]byte(out), &b); err != nil || b.ID == 0 {
		t.Fatalf("create printed %q", out)
	}
	waitReservation(t, b.ID, func(reservation.Reservation) bool { return true })
	if out := run("bookings", "list", "--owner", n); !strings.Contains(out, fmt.Sprint(b.ID)) || !strings.Contains(out, "booking") {
		t.Errorf("list: %s", out)
	}
	if out := run("classes"); !strings.Contains(out, `"class": "work"`) {
		t.Errorf("classes: %s", out)
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
