package hubapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/dsmlp/spawner/gpucontroller"
	"github.com/dsmlp/spawner/reservation"
	"github.com/dsmlp/spawner/reservationstore"
)

// Reservations is the GPU reservation engine's admin side;
// *gpucontroller.Controller implements it.
type Reservations interface {
	Reservations() []reservation.Reservation
	CreateBooking(ctx context.Context, r reservation.Reservation) (reservation.Reservation, error)
	CancelBooking(ctx context.Context, id int64, reason reservation.CancelReason) error
	Reassign(ctx context.Context, id int64, owner string) error
	SetPaused(ctx context.Context, class string, paused bool, reason string) error
	Classes(horizon time.Duration) ([]reservation.ClassStatus, error)
	Charges(since, until time.Time) []gpucontroller.Charge
	KnownClass(class string) bool
	Now() time.Time
}

// BookingRequest is the body of a booking create.
type BookingRequest struct {
	Owner     string `json:"owner"`
	Workspace string `json:"workspace"`
	Class     string `json:"class"`
	GPUs      int    `json:"gpus"`
	// Start and End are RFC 3339 times; the window is [start, end).
	Start string `json:"start"`
	End   string `json:"end"`
}

// ReassignRequest names a booking's new owner.
type ReassignRequest struct {
	Owner string `json:"owner"`
}

// PauseRequest says why on-demand admission is paused.
type PauseRequest struct {
	Reason string `json:"reason"`
}

// ReservationList is the admin list of reservations.
type ReservationList struct {
	Reservations []reservation.Reservation `json:"reservations"`
}

// ClassList is capacity, occupancy, queue and risk per GPU class.
type ClassList struct {
	Now     time.Time                 `json:"now"`
	Classes []reservation.ClassStatus `json:"classes"`
}

// ChargeList is GPU-hours per workspace over a period.
type ChargeList struct {
	Since   time.Time              `json:"since"`
	Until   time.Time              `json:"until"`
	Charges []gpucontroller.Charge `json:"charges"`
}

// RiskList is the preemption outlook per class.
type RiskList struct {
	Now   time.Time   `json:"now"`
	Hours float64     `json:"hours"`
	Risk  []ClassRisk `json:"risk"`
}

// ClassRisk is one class's booking boundaries ahead.
type ClassRisk struct {
	Class  string                  `json:"class"`
	Points []reservation.RiskPoint `json:"points"`
}

func (h *handlers) routeReservations(api *echo.Group) {
	api.GET("/reservations", h.listReservations, requireAdmin)
	api.POST("/reservations", h.createBooking, requireAdmin)
	api.GET("/reservations/:id", h.getReservation, requireAdmin)
	api.DELETE("/reservations/:id", h.cancelReservation, requireAdmin)
	api.POST("/reservations/:id/reassign", h.reassign, requireAdmin)
	api.GET("/gpu-classes", h.classes, requireAdmin)
	api.PUT("/gpu-classes/:class/pause", h.pause, requireAdmin)
	api.DELETE("/gpu-classes/:class/pause", h.resume, requireAdmin)
	api.GET("/charges", h.charges, requireAdmin)
	api.GET("/preemption-risk", h.risk, requireAdmin)
}

func (h *handlers) res() (Reservations, error) {
	if h.opts.Reservations == nil {
		return nil, &apiError{status: http.StatusNotFound, msg: "the GPU reservation engine is not enabled (no reservation section in the configuration)"}
	}
	return h.opts.Reservations, nil
}

func (h *handlers) listReservations(c echo.Context) error {
	r, err := h.res()
	if err != nil {
		return err
	}
	q := c.QueryParams()
	for _, k := range []string{"kind", "state"} {
		if v := q.Get(k); v != "" && !validQuery(k, v) {
			return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("unknown %s %q", k, v), field: k}
		}
	}
	out := []reservation.Reservation{}
	for _, x := range r.Reservations() {
		if (q.Get("kind") == "" || string(x.Kind) == q.Get("kind")) && (q.Get("owner") == "" || x.Owner == q.Get("owner")) &&
			(q.Get("class") == "" || x.Class == q.Get("class")) && (q.Get("workspace") == "" || x.Workspace == q.Get("workspace")) &&
			(q.Get("state") == "" || string(x.Status) == q.Get("state")) {
			out = append(out, x)
		}
	}
	return c.JSON(http.StatusOK, ReservationList{Reservations: out})
}

func validQuery(k, v string) bool {
	switch k {
	case "kind":
		return v == string(reservation.KindBooking) || v == string(reservation.KindOnDemand) || v == string(reservation.KindBestEffort)
	case "state":
		return v == string(reservation.StatusActive) || v == string(reservation.StatusCancelled)
	}
	return false
}

func (h *handlers) idParam(c echo.Context) (int64, error) {
	id, err := strconv.ParseInt(strings.TrimPrefix(c.Param("id"), "res-"), 10, 64)
	if err != nil || id <= 0 {
		return 0, &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("reservation id %q is not a positive integer", c.Param("id")), field: "id"}
	}
	return id, nil
}

func (h *handlers) find(r Reservations, id int64) (reservation.Reservation, error) {
	for _, x := range r.Reservations() {
		if x.ID == id {
			return x, nil
		}
	}
	return reservation.Reservation{}, &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("no reservation %d", id), field: "id"}
}

func (h *handlers) getReservation(c echo.Context) error {
	r, err := h.res()
	if err != nil {
		return err
	}
	id, err := h.idParam(c)
	if err != nil {
		return err
	}
	x, err := h.find(r, id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, x)
}

func (h *handlers) createBooking(c echo.Context) error {
	r, err := h.res()
	if err != nil {
		return err
	}
	var req BookingRequest
	if err := decodeStrict(c.Request().Body, &req); err != nil {
		return err
	}
	bad := func(field, msg string) error { return &apiError{status: http.StatusBadRequest, msg: msg, field: field} }
	var start, end time.Time
	for _, t := range []struct {
		name, v string
		dst     *time.Time
	}{{"start", req.Start, &start}, {"end", req.End, &end}} {
		if t.v == "" {
			return bad(t.name, t.name+" is required (RFC 3339)")
		}
		if *t.dst, err = time.Parse(time.RFC3339, t.v); err != nil {
			return bad(t.name, fmt.Sprintf("%s %q is not an RFC 3339 time", t.name, t.v))
		}
	}
	switch {
	case len(validation.IsDNS1123Label(req.Owner)) > 0:
		return bad("owner", fmt.Sprintf("owner %q must be the user's namespace (a DNS label)", req.Owner))
	case req.Workspace == "":
		return bad("workspace", "workspace is required (the dsmlp/course value the booking is for)")
	case req.Workspace == reservation.OrgOnDemand:
		return bad("workspace", reservation.OrgOnDemand+" is on-demand only and holds no bookings")
	case len(validation.IsValidLabelValue(req.Workspace)) > 0:
		return bad("workspace", fmt.Sprintf("workspace %q is not a valid label value", req.Workspace))
	case !r.KnownClass(req.Class):
		return bad("class", fmt.Sprintf("gpu class %q is not in the catalogue", req.Class))
	case req.GPUs < 1 || req.GPUs > 1024:
		return bad("gpus", "gpus must be between 1 and 1024")
	case !end.After(start):
		return bad("end", "end must be after start")
	case !end.After(r.Now()):
		return bad("end", "the window has already ended")
	}
	b, err := r.CreateBooking(c.Request().Context(), reservation.Reservation{
		Owner: req.Owner, Workspace: req.Workspace, Class: req.Class, GPUs: req.GPUs,
		Start: start.UTC().Truncate(time.Second), End: end.UTC().Truncate(time.Second),
	})
	if err != nil {
		return storeError(err)
	}
	return c.JSON(http.StatusCreated, b)
}

func (h *handlers) cancelReservation(c echo.Context) error {
	r, err := h.res()
	if err != nil {
		return err
	}
	id, err := h.idParam(c)
	if err != nil {
		return err
	}
	reason := reservation.CancelOther
	switch v := c.QueryParam("reason"); v {
	case "", string(reservation.CancelOther):
	case string(reservation.CancelUser):
		reason = reservation.CancelUser
	default:
		return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("reason %q must be user (by the owner) or other (by someone else)", v), field: "reason"}
	}
	if _, err := h.find(r, id); err != nil {
		return err
	}
	if err := r.CancelBooking(c.Request().Context(), id, reason); err != nil {
		return storeError(err)
	}
	return c.NoContent(http.StatusNoContent)
}

func (h *handlers) reassign(c echo.Context) error {
	r, err := h.res()
	if err != nil {
		return err
	}
	id, err := h.idParam(c)
	if err != nil {
		return err
	}
	var req ReassignRequest
	if err := decodeStrict(c.Request().Body, &req); err != nil {
		return err
	}
	if len(validation.IsDNS1123Label(req.Owner)) > 0 {
		return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("owner %q must be the user's namespace (a DNS label)", req.Owner), field: "owner"}
	}
	if _, err := h.find(r, id); err != nil {
		return err
	}
	if err := r.Reassign(c.Request().Context(), id, req.Owner); err != nil {
		return storeError(err)
	}
	x, err := h.find(r, id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, x)
}

func (h *handlers) hours(c echo.Context, def float64) (float64, error) {
	v := c.QueryParam("hours")
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil || n <= 0 || n > 24*14 {
		return 0, &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("hours %q must be a number above 0 and at most 336", v), field: "hours"}
	}
	return n, nil
}

// classStatus is the per-class view over the ?hours= horizon (default 6).
func (h *handlers) classStatus(c echo.Context) (Reservations, float64, []reservation.ClassStatus, error) {
	r, err := h.res()
	if err != nil {
		return nil, 0, nil, err
	}
	hours, err := h.hours(c, 6)
	if err != nil {
		return nil, 0, nil, err
	}
	cs, err := r.Classes(time.Duration(hours * float64(time.Hour)))
	if err != nil {
		return nil, 0, nil, err
	}
	return r, hours, cs, nil
}

func (h *handlers) classes(c echo.Context) error {
	r, _, cs, err := h.classStatus(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ClassList{Now: r.Now().UTC(), Classes: cs})
}

func (h *handlers) risk(c echo.Context) error {
	r, hours, cs, err := h.classStatus(c)
	if err != nil {
		return err
	}
	out := RiskList{Now: r.Now().UTC(), Hours: hours, Risk: []ClassRisk{}}
	for _, x := range cs {
		out.Risk = append(out.Risk, ClassRisk{Class: x.Class, Points: x.Risk})
	}
	return c.JSON(http.StatusOK, out)
}

func (h *handlers) setPause(c echo.Context, paused bool) error {
	r, err := h.res()
	if err != nil {
		return err
	}
	class := c.Param("class")
	if !r.KnownClass(class) {
		return &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("gpu class %q is not in the catalogue", class), field: "class"}
	}
	var req PauseRequest
	if paused && c.Request().ContentLength != 0 {
		if err := decodeStrict(c.Request().Body, &req); err != nil {
			return err
		}
	}
	if len(req.Reason) > 200 {
		return &apiError{status: http.StatusBadRequest, msg: "reason is at most 200 characters (it is quoted in pod events)", field: "reason"}
	}
	if err := r.SetPaused(c.Request().Context(), class, paused, req.Reason); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (h *handlers) pause(c echo.Context) error  { return h.setPause(c, true) }
func (h *handlers) resume(c echo.Context) error { return h.setPause(c, false) }

func (h *handlers) charges(c echo.Context) error {
	r, err := h.res()
	if err != nil {
		return err
	}
	now := r.Now().UTC()
	since, until := now.AddDate(0, 0, -30), now.Add(24*time.Hour)
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &since}, {"until", &until}} {
		if v := c.QueryParam(p.name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("%s %q is not an RFC 3339 time", p.name, v), field: p.name}
			}
			*p.dst = t
		}
	}
	if !until.After(since) {
		return &apiError{status: http.StatusBadRequest, msg: "until must be after since", field: "until"}
	}
	return c.JSON(http.StatusOK, ChargeList{Since: since, Until: until, Charges: r.Charges(since, until)})
}

func storeError(err error) error {
	switch {
	case errors.Is(err, reservationstore.ErrNotFound):
		return &apiError{status: http.StatusNotFound, msg: err.Error(), field: "id"}
	case errors.Is(err, reservationstore.ErrInvalid):
		return &apiError{status: http.StatusConflict, msg: err.Error(), field: "id"}
	case apierrors.IsConflict(err):
		// Still conflicting after the controller's retries: others keep
		// changing it; the caller may try again.
		return &apiError{status: http.StatusConflict, msg: "the reservation kept changing while it was being written; try again", field: "id"}
	}
	return err
}
