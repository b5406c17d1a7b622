package console

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/dsmlp/spawner/reservation"
)

// gpuView is the GPU classes page.
type gpuView struct {
	Off      bool
	Problem  string
	Classes  []reservation.ClassStatus
	Timeline bookingTimeline
	// Leases: the timeline shows on-demand leases too.
	Leases bool
	Notice string
	Zone   string
}

// maxPauseReason bounds a pause's reason, which is kept in a ConfigMap.
const maxPauseReason = 300

// pauseWait bounds the write of a pause.
const pauseWait = 10 * time.Second

// gpuPage shows each class's capacity and queue, with pause and resume,
// and the bookings of the last day and the next week.
func (h *handler) gpuPage(w http.ResponseWriter, r *http.Request, s *session) error {
	d := gpuView{Off: h.opts.Reservations == nil, Leases: r.URL.Query().Get("leases") == "1", Zone: h.opts.Location.String()}
	switch r.URL.Query().Get("done") {
	case "paused":
		d.Notice = "On-demand admission is paused for the class."
	case "resumed":
		d.Notice = "On-demand admission is resumed for the class."
	}
	if !d.Off {
		cs, err := h.classStatuses()
		if err != nil {
			h.log.Warn("console: reading the GPU classes failed", zap.String("user", s.User), zap.Error(err))
			d.Problem = "The reservation engine could not report its classes."
		}
		d.Classes = cs
		d.Timeline = h.bookingTimeline(h.opts.Reservations.Reservations(), h.opts.Reservations.Now(), d.Leases)
	}
	h.render(w, r, http.StatusOK, "gpu", h.layout(r, s, "GPU classes", "gpu"), d)
	return nil
}

// pauseClass pauses on-demand admission for a class, with a reason.
func (h *handler) pauseClass(w http.ResponseWriter, r *http.Request, s *session) error {
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if reason == "" {
		return &httpError{status: http.StatusBadRequest, msg: "Say why the class is paused: students waiting for a GPU see the reason.", back: h.opts.Prefix + "gpu"}
	}
	if utf8.RuneCountInString(reason) > maxPauseReason {
		return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf("The reason is longer than %d characters.", maxPauseReason), back: h.opts.Prefix + "gpu"}
	}
	return h.setPaused(w, r, s, true, reason)
}

// resumeClass resumes on-demand admission for a class.
func (h *handler) resumeClass(w http.ResponseWriter, r *http.Request, s *session) error {
	return h.setPaused(w, r, s, false, "")
}

func (h *handler) setPaused(w http.ResponseWriter, r *http.Request, s *session, paused bool, reason string) error {
	back := h.opts.Prefix + "gpu"
	if h.opts.Reservations == nil {
		return &httpError{status: http.StatusNotFound, msg: "The GPU reservation engine is off.", back: back}
	}
	class := r.PostFormValue("class")
	cs, err := h.classStatuses()
	if err != nil {
		return &httpError{status: http.StatusBadGateway, msg: "The reservation engine could not report its classes.", back: back, err: err}
	}
	if !slices.ContainsFunc(cs, func(c reservation.ClassStatus) bool { return c.Class == class }) {
		return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf("There is no GPU class %q.", class), back: back}
	}
	ctx, cancel := context.WithTimeout(r.Context(), pauseWait)
	defer cancel()
	if err := h.opts.Reservations.SetPaused(ctx, class, paused, reason); err != nil {
		return &httpError{status: http.StatusBadGateway, msg: "The pause could not be recorded.", back: back, err: err}
	}
	h.forgetClasses()
	done := "resumed"
	if paused {
		done = "paused"
	}
	h.log.Info("console: on-demand admission "+done, zap.String("user", s.User), zap.String("class", class), zap.String("reason", reason))
	if h.wantsJSON(r) {
		writeJSON(w, http.StatusOK, map[string]any{"class": class, "paused": paused})
		return nil
	}
	http.Redirect(w, r, back+"?done="+done, http.StatusSeeOther)
	return nil
}

// The booking timeline's window and geometry.
const (
	timelineBefore = 24 * time.Hour
	timelineAfter  = 7 * 24 * time.Hour
	tlW, tlLabelW  = 940, 270
	tlRowH, tlHead = 22, 26
	tlPadRight     = 8
	tlMaxLabel     = 40 // runes of a row's label
)

// bookingTimeline is one row per booking (and lease, if asked) over the
// window, grouped by class, with now marked.
type bookingTimeline struct {
	Empty        bool
	W, H, LabelW int
	From, To     time.Time
	NowX         string
	PlotR        int
	Days         []chartTick
	Rows         []timelineRow
}

type timelineRow struct {
	Y, TextY string
	// Header rows name a class and have no bar.
	Header      bool
	Label       string
	X, W        string
	Fill        string
	Open        bool
	Title       string
	ID          int64
	Class, Kind string
}

func (h *handler) bookingTimeline(all []reservation.Reservation, now time.Time, leases bool) bookingTimeline {
	from, to := now.Add(-timelineBefore), now.Add(timelineAfter)
	var rs []reservation.Reservation
	for _, r := range all {
		if r.Status == reservation.StatusCancelled || !r.End.After(from) || !r.Start.Before(to) {
			continue
		}
		if r.Kind == reservation.KindBooking || leases && r.Kind == reservation.KindOnDemand {
			rs = append(rs, r)
		}
	}
	tl := bookingTimeline{W: tlW, LabelW: tlLabelW, From: from, To: to, PlotR: tlW - tlPadRight}
	if len(rs) == 0 {
		tl.Empty = true
		return tl
	}
	slices.SortFunc(rs, func(a, b reservation.Reservation) int {
		return cmp.Or(cmp.Compare(a.Class, b.Class), a.Start.Compare(b.Start), cmp.Compare(a.ID, b.ID))
	})
	plot := float64(tlW - tlLabelW - tlPadRight)
	x := func(t time.Time) float64 {
		if t.Before(from) {
			t = from
		} else if t.After(to) {
			t = to
		}
		return float64(tlLabelW) + plot*float64(t.Sub(from))/float64(to.Sub(from))
	}
	tl.NowX = num(x(now))
	loc := h.opts.Location
	lf := from.In(loc)
	for d := time.Date(lf.Year(), lf.Month(), lf.Day()+1, 0, 0, 0, 0, loc); d.Before(to); d = time.Date(d.Year(), d.Month(), d.Day()+1, 0, 0, 0, 0, loc) {
		tl.Days = append(tl.Days, chartTick{Pos: num(x(d)), Label: d.Format("Mon 2")})
	}
	row := 0
	add := func(r timelineRow) {
		y := tlHead + row*tlRowH
		r.Y, r.TextY = fmt.Sprint(y+3), fmt.Sprint(y+tlRowH/2+4)
		tl.Rows = append(tl.Rows, r)
		row++
	}
	class := ""
	for _, r := range rs {
		if r.Class != class || row == 0 {
			class = r.Class
			add(timelineRow{Header: true, Label: "Class " + class})
		}
		open := !now.Before(r.Start) && now.Before(r.End)
		fill := "#4e79a7"
		if r.Kind == reservation.KindOnDemand {
			fill = "#59a14f"
		}
		add(timelineRow{Label: truncate(fmt.Sprintf("res-%d · %s · %s · %d GPU", r.ID, r.Owner, r.Workspace, r.GPUs), tlMaxLabel),
			X: num(x(r.Start)), W: num(max(2, x(r.End)-x(r.Start))), Fill: fill, Open: open, ID: r.ID, Class: r.Class, Kind: string(r.Kind),
			Title: fmt.Sprintf("%s res-%d: owner %s, workspace %s, %d GPU(s) of class %s, %s – %s",
				kindWord(r.Kind), r.ID, r.Owner, r.Workspace, r.GPUs, r.Class, h.fmtTime(r.Start), h.fmtTime(r.End))})
	}
	tl.H = tlHead + row*tlRowH + 8
	return tl
}

func kindWord(k reservation.Kind) string {
	switch k {
	case reservation.KindBooking:
		return "Booking"
	case reservation.KindOnDemand:
		return "On-demand lease"
	}
	return string(k)
}

// truncate cuts s to n runes, with an ellipsis.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
