package console

import (
	"encoding/csv"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/dsmlp/spawner/history"
)

// csvHeader names the export's columns; csvRecord fills them in order.
func csvHeader() []string {
	return []string{"uid", "user", "server", "namespace", "pod", "profile", "image", "course", "gpu_class",
		"reservation", "reservation_kind", "started", "requested_at", "requested_by", "created_at", "scheduled_at",
		"node", "ready_at", "stop_requested_at", "stop_requested_by", "ended_at", "stopper", "end_phase",
		"end_reason", "end_container_reason", "exit_code", "end_message", "why"}
}

func (h *handler) csvRecord(s history.Session) []string {
	t := func(p *time.Time) string {
		if p == nil {
			return ""
		}
		return h.inLoc(*p).Format(time.RFC3339)
	}
	actor := func(a *history.Actor) string {
		if a == nil {
			return ""
		}
		if a.Name == "" {
			return string(a.Kind)
		}
		return string(a.Kind) + ":" + a.Name
	}
	var end history.EndFacts
	if s.End != nil {
		end = *s.End
	}
	exit := ""
	if end.ExitCode != nil {
		exit = strconv.Itoa(*end.ExitCode)
	}
	why := ""
	if s.EndedAt != nil {
		why = history.Why(s, h.opts.Location)
	}
	started := s.Started
	rec := []string{s.UID, s.User, s.Server, s.Namespace, s.Pod, s.Profile, s.Image, s.Course, s.GPUClass,
		s.Reservation, s.ReservationKind, t(&started), t(s.RequestedAt), actor(s.RequestedBy), t(s.CreatedAt), t(s.ScheduledAt),
		s.Node, t(s.ReadyAt), t(s.StopRequestedAt), actor(s.StopRequestedBy), t(s.EndedAt), string(s.Stopper), end.Phase,
		end.Reason, end.ContainerReason, exit, end.Message, why}
	for i, v := range rec {
		rec[i] = defuseFormula(v)
	}
	return rec
}

// defuseFormula keeps a spreadsheet from running a cell as a formula:
// user and server names are chosen by users, so a cell that starts like a
// formula gets a leading apostrophe (OWASP's advice for CSV injection).
// Numbers (a negative exit code) are left as they are.
func defuseFormula(v string) string {
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return v
	}
	if v != "" && strings.ContainsRune("=+-@\t\r", rune(v[0])) {
		return "'" + v
	}
	return v
}

// sessionsCSV streams every session the search selects, page after page,
// as CSV with a header row; times are RFC 3339 in the console's zone.
func (h *handler) sessionsCSV(w http.ResponseWriter, r *http.Request, s *session) error {
	store, err := h.history()
	if err != nil {
		return err
	}
	search, err := h.parseSearch(r.URL.Query())
	if err != nil {
		return err
	}
	ctx := r.Context()
	page := history.Page{Limit: history.MaxLimit}
	got, err := store.List(ctx, search.Filter, page)
	if err != nil {
		return fmt.Errorf("listing sessions for the export: %w", err)
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="sessions-%s.csv"`, h.inLoc(h.now()).Format("20060102-1504")))
	cw := csv.NewWriter(w)
	rows := 0
	fail := func(err error) {
		// The status is sent: abort the response so that the client sees
		// an incomplete download, not a short file that looks whole.
		h.log.Error("console: sessions export failed", zap.String("user", s.User), zap.Int("rows", rows), zap.Error(err))
		panic(http.ErrAbortHandler)
	}
	if err := cw.Write(csvHeader()); err != nil {
		fail(err)
	}
	for {
		for _, sess := range got.Sessions {
			if err := cw.Write(h.csvRecord(sess)); err != nil {
				fail(err)
			}
			rows++
		}
		cw.Flush()
		if err := cw.Error(); err != nil {
			fail(err)
		}
		if got.Next == "" {
			break
		}
		page.Cursor = got.Next
		if got, err = store.List(ctx, search.Filter, page); err != nil {
			if errors.Is(err, ctx.Err()) {
				err = fmt.Errorf("client went away: %w", err)
			}
			fail(err)
		}
	}
	h.log.Info("console: sessions exported", zap.String("user", s.User), zap.Int("rows", rows), zap.String("search", search.Query))
	return nil
}
