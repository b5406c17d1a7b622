package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dsmlp/spawner/apiclient"
	"github.com/dsmlp/spawner/gpucontroller"
	"github.com/dsmlp/spawner/hubapi"
	"github.com/dsmlp/spawner/reservation"
)

// bookings lists, shows, creates, cancels and reassigns reservations.
func (a *adminCmd) bookings(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("bookings needs list, get, create, cancel or reassign: %w", errUsage)
	}
	fs := a.flags("bookings " + args[0])
	switch args[0] {
	case "list":
		var f apiclient.ReservationFilter
		var kind, state string
		fs.StringVar(&f.Owner, "owner", "", "")
		fs.StringVar(&f.Class, "class", "", "")
		fs.StringVar(&f.Workspace, "workspace", "", "")
		fs.StringVar(&kind, "kind", "", "")
		fs.StringVar(&state, "state", "", "")
		if _, err := a.parse(fs, args[1:], 0, 0, "[--owner U] [--class C] [--workspace W] [--kind K] [--state S]"); err != nil {
			return err
		}
		f.Kind, f.State = reservation.Kind(kind), reservation.Status(state)
		c, err := a.client()
		if err != nil {
			return err
		}
		l, err := c.Reservations(ctx, f)
		if err != nil {
			return err
		}
		if a.output == outputJSON {
			return a.printJSON(l)
		}
		return a.printReservations(l.Reservations)
	case "get":
		pos, err := a.parse(fs, args[1:], 1, 1, "ID")
		if err != nil {
			return err
		}
		return a.reservationCall(ctx, pos[0], func(c *apiclient.Client, id int64) (*reservation.Reservation, error) {
			return c.Reservation(ctx, id)
		})
	case "create":
		var req hubapi.BookingRequest
		fs.StringVar(&req.Owner, "owner", "", "")
		fs.StringVar(&req.Workspace, "workspace", "", "")
		fs.StringVar(&req.Class, "class", "", "")
		fs.IntVar(&req.GPUs, "gpus", 1, "")
		fs.StringVar(&req.Start, "start", "", "")
		fs.StringVar(&req.End, "end", "", "")
		if _, err := a.parse(fs, args[1:], 0, 0, "--owner U --workspace W --class C --gpus N --start RFC3339 --end RFC3339"); err != nil {
			return err
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		b, err := c.CreateBooking(ctx, req)
		if err != nil {
			return err
		}
		if a.output == outputJSON {
			return a.printJSON(b)
		}
		return a.printReservations([]reservation.Reservation{*b})
	case "cancel":
		by := fs.String("by", string(reservation.CancelOther), "")
		pos, err := a.parse(fs, args[1:], 1, 1, "ID [--by user|other]")
		if err != nil {
			return err
		}
		id, err := reservationID(pos[0])
		if err != nil {
			return err
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		if err := c.CancelReservation(ctx, id, reservation.CancelReason(*by)); err != nil {
			return err
		}
		return a.done("reservation %d cancelled", id)
	case "reassign":
		owner := fs.String("owner", "", "")
		pos, err := a.parse(fs, args[1:], 1, 1, "ID --owner U")
		if err != nil {
			return err
		}
		return a.reservationCall(ctx, pos[0], func(c *apiclient.Client, id int64) (*reservation.Reservation, error) {
			return c.Reassign(ctx, id, *owner)
		})
	}
	return fmt.Errorf("unknown bookings command %q: %w", args[0], errUsage)
}

// reservationCall runs a call that answers one reservation and prints it.
func (a *adminCmd) reservationCall(ctx context.Context, rawID string, call func(*apiclient.Client, int64) (*reservation.Reservation, error)) error {
	id, err := reservationID(rawID)
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	r, err := call(c, id)
	if err != nil {
		return err
	}
	if a.output == outputJSON {
		return a.printJSON(r)
	}
	return a.printReservations([]reservation.Reservation{*r})
}

// reservationID reads 12 or res-12, as the API and the pod annotations
// write it.
func reservationID(s string) (int64, error) {
	id, err := strconv.ParseInt(strings.TrimPrefix(s, "res-"), 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("reservation ID %q is not a positive number such as 12 or res-12", s)
	}
	return id, nil
}

// done says that a call without an answer worked; scripts (-o json) get
// only the exit status.
func (a *adminCmd) done(format string, args ...any) error {
	if a.output == outputJSON {
		return nil
	}
	_, err := fmt.Fprintf(a.out, format+"\n", args...)
	return err
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func (a *adminCmd) printReservations(rs []reservation.Reservation) error {
	return printTable(a, "reservations", []column[reservation.Reservation]{
		{header: "ID", cell: func(r reservation.Reservation) string { return strconv.FormatInt(r.ID, 10) }},
		{header: "KIND", cell: func(r reservation.Reservation) string { return string(r.Kind) }},
		{header: "OWNER", cell: func(r reservation.Reservation) string { return r.Owner }},
		{header: "WORKSPACE", cell: func(r reservation.Reservation) string { return r.Workspace }},
		{header: "CLASS", cell: func(r reservation.Reservation) string { return r.Class }},
		{header: "GPUS", cell: func(r reservation.Reservation) string { return strconv.Itoa(r.GPUs) }},
		{header: "START", cell: func(r reservation.Reservation) string { return rfc3339(r.Start) }},
		{header: "END", cell: func(r reservation.Reservation) string { return rfc3339(r.End) }},
		{header: "STATUS", cell: func(r reservation.Reservation) string {
			if r.CancelReason != "" {
				return string(r.Status) + " (" + string(r.CancelReason) + ")"
			}
			return string(r.Status)
		}},
		{header: "CANCELLED", cell: func(r reservation.Reservation) string { return rfc3339(r.CancelledAt) }, wide: true},
		{header: "SUPERSEDED-BY", cell: func(r reservation.Reservation) string {
			if r.SupersededBy == 0 {
				return ""
			}
			return strconv.FormatInt(r.SupersededBy, 10)
		}, wide: true},
		{header: "POD-UID", cell: func(r reservation.Reservation) string { return string(r.PodUID) }, wide: true},
	}, rs)
}

// withHours runs a command of the form "NAME [--hours H]": it reads the
// flag and fetches with it; done is true when -o json printed the answer.
func withHours[T any](ctx context.Context, a *adminCmd, name string, args []string,
	get func(*apiclient.Client, context.Context, float64) (T, error)) (v T, done bool, err error) {
	fs := a.flags(name)
	hours := fs.Float64("hours", 0, "")
	if _, err := a.parse(fs, args, 0, 0, "[--hours H]"); err != nil {
		return v, false, err
	}
	c, err := a.client()
	if err != nil {
		return v, false, err
	}
	if v, err = get(c, ctx, *hours); err != nil {
		return v, false, err
	}
	if a.output == outputJSON {
		return v, true, a.printJSON(v)
	}
	return v, false, nil
}

// classes prints capacity, occupancy, queue and pause state per class.
func (a *adminCmd) classes(ctx context.Context, args []string) error {
	l, done, err := withHours(ctx, a, "classes", args, (*apiclient.Client).GPUClasses)
	if done || err != nil {
		return err
	}
	n := func(f func(reservation.ClassStatus) int) func(reservation.ClassStatus) string {
		return func(s reservation.ClassStatus) string { return strconv.Itoa(f(s)) }
	}
	return printTable(a, "GPU classes", []column[reservation.ClassStatus]{
		{header: "CLASS", cell: func(s reservation.ClassStatus) string { return s.Class }},
		{header: "DISPLAY-NAME", cell: func(s reservation.ClassStatus) string { return s.DisplayName }, wide: true},
		{header: "NODES", cell: n(func(s reservation.ClassStatus) int { return s.Nodes })},
		{header: "CAPACITY", cell: n(func(s reservation.ClassStatus) int { return s.Capacity })},
		{header: "USED", cell: n(func(s reservation.ClassStatus) int { return s.Used })},
		{header: "FREE", cell: n(func(s reservation.ClassStatus) int { return s.Free })},
		{header: "BOOKED", cell: n(func(s reservation.ClassStatus) int { return s.Booked })},
		{header: "UNCLAIMED", cell: n(func(s reservation.ClassStatus) int { return s.Unclaimed })},
		{header: "ADMITTED-PODS", cell: n(func(s reservation.ClassStatus) int { return s.AdmittedPods })},
		{header: "ADMITTED-GPUS", cell: n(func(s reservation.ClassStatus) int { return s.AdmittedGPUs }), wide: true},
		{header: "WAITING-PODS", cell: n(func(s reservation.ClassStatus) int { return s.WaitingPods })},
		{header: "WAITING-GPUS", cell: n(func(s reservation.ClassStatus) int { return s.WaitingGPUs }), wide: true},
		{header: "BOUNDARIES", cell: n(func(s reservation.ClassStatus) int { return len(s.Risk) }), wide: true},
		{header: "PAUSED", cell: func(s reservation.ClassStatus) string { return s.Paused }},
	}, l.Classes)
}

// pause pauses or resumes on-demand admission for a class.
func (a *adminCmd) pause(ctx context.Context, cmd string, args []string) error {
	fs := a.flags(cmd)
	reason := ""
	what := "CLASS"
	if cmd == "pause" {
		fs.StringVar(&reason, "reason", "", "")
		what = "CLASS [--reason TEXT]"
	}
	pos, err := a.parse(fs, args, 1, 1, what)
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	if cmd == "resume" {
		if err := c.ResumeClass(ctx, pos[0]); err != nil {
			return err
		}
		return a.done("on-demand admission of %s resumed", pos[0])
	}
	if err := c.PauseClass(ctx, pos[0], reason); err != nil {
		return err
	}
	return a.done("on-demand admission of %s paused", pos[0])
}

// parseWhen reads an RFC 3339 time, or a duration back from now.
func (a *adminCmd) parseWhen(flagName, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return a.now().Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--%s %q is neither an RFC 3339 time nor a duration such as 720h: %w", flagName, v, errUsage)
}

// charges prints GPU-hours per workspace.
func (a *adminCmd) charges(ctx context.Context, args []string) error {
	fs := a.flags("charges")
	sinceFlag := fs.String("since", "", "")
	untilFlag := fs.String("until", "", "")
	if _, err := a.parse(fs, args, 0, 0, "[--since T] [--until T]"); err != nil {
		return err
	}
	since, err := a.parseWhen("since", *sinceFlag)
	if err != nil {
		return err
	}
	until, err := a.parseWhen("until", *untilFlag)
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	l, err := c.Charges(ctx, since, until)
	if err != nil {
		return err
	}
	if a.output == outputJSON {
		return a.printJSON(l)
	}
	hours := func(f func(gpucontroller.Charge) float64) func(gpucontroller.Charge) string {
		return func(ch gpucontroller.Charge) string { return strconv.FormatFloat(f(ch), 'f', 2, 64) }
	}
	return printTable(a, "charges", []column[gpucontroller.Charge]{
		{header: "WORKSPACE", cell: func(ch gpucontroller.Charge) string { return ch.Workspace }},
		{header: "BOOKING-GPU-HOURS", cell: hours(func(ch gpucontroller.Charge) float64 { return ch.Booking })},
		{header: "ON-DEMAND-GPU-HOURS", cell: hours(func(ch gpucontroller.Charge) float64 { return ch.OnDemand })},
		{header: "TOTAL-GPU-HOURS", cell: hours(func(ch gpucontroller.Charge) float64 { return ch.Total })},
	}, l.Charges)
}

// riskRow is one booking boundary of one class.
type riskRow struct {
	class string
	reservation.RiskPoint
}

// risk prints the preemption outlook at each booking boundary ahead.
func (a *adminCmd) risk(ctx context.Context, args []string) error {
	l, done, err := withHours(ctx, a, "risk", args, (*apiclient.Client).PreemptionRisk)
	if done || err != nil {
		return err
	}
	var rows []riskRow
	for _, cr := range l.Risk {
		for _, p := range cr.Points {
			rows = append(rows, riskRow{cr.Class, p})
		}
	}
	n := func(f func(riskRow) int) func(riskRow) string {
		return func(r riskRow) string { return strconv.Itoa(f(r)) }
	}
	return printTable(a, fmt.Sprintf("booking boundaries within %g hours", l.Hours), []column[riskRow]{
		{header: "CLASS", cell: func(r riskRow) string { return r.class }},
		{header: "BOUNDARY", cell: func(r riskRow) string { return rfc3339(r.Boundary) }},
		{header: "IN", cell: func(r riskRow) string { return a.until(r.Boundary) }},
		{header: "DEMAND", cell: n(func(r riskRow) int { return r.Demand })},
		{header: "SHORTFALL", cell: n(func(r riskRow) int { return r.Shortfall })},
		{header: "AT-RISK-PODS", cell: n(func(r riskRow) int { return r.AtRiskPods })},
		{header: "AT-RISK-GPUS", cell: n(func(r riskRow) int { return r.AtRiskGPUs })},
		{header: "UNMET", cell: n(func(r riskRow) int { return r.Unmet })},
	}, rows)
}
