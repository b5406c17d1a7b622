package reservation_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/dsmlp/spawner/hubapi"
	"github.com/dsmlp/spawner/reservation"
	"github.com/dsmlp/spawner/reservationstore"
)

// raceWrites makes the controller's next n PATCHes of reservation id lose a
// race: just before each is sent, another writer changes the object, so the
// real API server answers 409 to the controller's stale resourceVersion.
func raceWrites(t *testing.T, id int64, n int) {
	t.Helper()
	other, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	left := n
	hook := func(r *http.Request) {
		if r.Method != http.MethodPatch || !strings.HasSuffix(r.URL.Path, "/gpureservations/"+reservationstore.Name(id)) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if left == 0 {
			return
		}
		left--
		body := fmt.Sprintf(`{"metadata":{"annotations":{"e2e/raced":"%d"}}}`, time.Now().UnixNano())
		if _, err := other.Resource(reservationstore.Resource).Patch(r.Context(), reservationstore.Name(id), types.MergePatchType,
			[]byte(body), metav1.PatchOptions{}); err != nil {
			t.Errorf("racing write: %v", err)
		}
	}
	beforeWrite.Store(&hook)
	t.Cleanup(func() { beforeWrite.Store(nil) })
}

// An admin reassign and cancel that lose a race with another writer (a 409
// from the API server) are retried and succeed, instead of answering 500.
func TestAdminWritesRetriedOnConflict(t *testing.T) {
	srv := adminAPI(t)
	owner, heir := env.Namespace(t), env.Namespace(t)
	now := clk.Now()
	b := book(t, owner, wsCourse, "work", 1, now.Add(5*time.Hour), now.Add(6*time.Hour))

	raceWrites(t, b.ID, 1)
	if code, eb := call(t, srv, true, http.MethodPost, fmt.Sprintf("/reservations/%d/reassign", b.ID), hubapi.ReassignRequest{Owner: heir}, nil); code != http.StatusOK {
		t.Fatalf("reassign that lost a race: HTTP %d %v, want 200", code, eb)
	}
	waitReservation(t, b.ID, func(r reservation.Reservation) bool { return r.Owner == heir })

	raceWrites(t, b.ID, 2)
	if code, eb := call(t, srv, true, http.MethodDelete, fmt.Sprintf("/reservations/%d?reason=user", b.ID), nil, nil); code != http.StatusNoContent {
		t.Fatalf("cancel that lost two races: HTTP %d %v, want 204", code, eb)
	}
	got := waitReservation(t, b.ID, func(r reservation.Reservation) bool { return r.Status == reservation.StatusCancelled })
	if got.CancelReason != reservation.CancelUser {
		t.Errorf("cancel reason %s, want user", got.CancelReason)
	}
}
