package console

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/dsmlp/spawner/history"
)

// The chart's geometry, in SVG user units; CSS scales it to the page.
const (
	chartW, chartH                                       = 760, 260
	chartLeft, chartRight, chartTop, chartBottom         = 44, 12, 12, 36
	maxChartDays                                         = 366
	chartXLabels, chartYTicks                            = 8, 4
	chartBarGap                                          = 0.18 // of a bar's slot
	chartMinGapSlot                                      = 5    // slots narrower than this have no gap
	chartPlotW, chartPlotH                       float64 = chartW - chartLeft - chartRight, chartH - chartTop - chartBottom
)

// chartView is the sessions-ended-per-day chart: stacked bars per day and
// stopper, in the console's time zone.
type chartView struct {
	Empty          bool
	Note           string
	From, To, Zone string
	Total          int
	W, H           int
	Left, Top      float64
	Right, Bottom  float64
	Rects          []chartRect
	YTicks, XTicks []chartTick
	Legend         []legendItem
	Days           []chartDay
	Stoppers       []legendItem
}

type chartRect struct {
	X, Y, W, H string
	Fill       string
	Title      string
	Day        string
	Stopper    string
}

type chartTick struct {
	Pos   string // y for YTicks, x for XTicks
	Label string
}

type legendItem struct {
	Stopper string
	Color   string
	Count   int
}

// chartDay is one row of the chart's data table.
type chartDay struct {
	Day    string
	Total  int
	Counts []int // in the order of chartView.Stoppers
}

// sessionsChart is the chart fragment the sessions page loads.
func (h *handler) sessionsChart(w http.ResponseWriter, r *http.Request, _ *session) error {
	store, err := h.history()
	if err != nil {
		return err
	}
	search, err := h.parseSearch(r.URL.Query())
	if err != nil {
		return err
	}
	counts, err := store.EndedByDay(r.Context(), search.Filter, h.opts.Location)
	if err != nil {
		return fmt.Errorf("counting sessions ended per day: %w", err)
	}
	return h.renderFragment(w, r, "chart", "chart", h.chart(search.Filter, counts))
}

// chart lays out the bars. The days run from the search's first day (or
// the first day with an end) to its last (or today).
func (h *handler) chart(f history.Filter, counts []history.DayCount) chartView {
	loc := h.opts.Location
	v := chartView{W: chartW, H: chartH, Left: chartLeft, Top: chartTop, Right: chartW - chartRight,
		Bottom: chartH - chartBottom, Zone: loc.String()}
	first, last := "", h.inLoc(h.now()).Format(time.DateOnly)
	if !f.Since.IsZero() {
		first = h.inLoc(f.Since).Format(time.DateOnly)
	} else if len(counts) > 0 {
		first = counts[0].Day
	}
	if !f.Until.IsZero() {
		last = h.inLoc(f.Until.Add(-time.Millisecond)).Format(time.DateOnly)
	}
	days := dayRange(first, last, loc)
	if len(days) > maxChartDays {
		days = days[len(days)-maxChartDays:]
		v.Note = fmt.Sprintf("The chart shows the last %d days of the range.", maxChartDays)
	}
	if len(days) == 0 {
		v.Empty = true
		return v
	}
	v.From, v.To = days[0], days[len(days)-1]

	// 1. Counts per day and stopper; the stoppers present, in order.
	index := make(map[string]int, len(days))
	for i, d := range days {
		index[d] = i
	}
	perDay := make([]map[history.Stopper]int, len(days))
	seen := map[history.Stopper]int{}
	for _, c := range counts {
		i, ok := index[c.Day]
		if !ok || c.Count <= 0 {
			continue
		}
		if perDay[i] == nil {
			perDay[i] = map[history.Stopper]int{}
		}
		perDay[i][c.Stopper] += c.Count
		seen[c.Stopper] += c.Count
		v.Total += c.Count
	}
	stoppers := make([]history.Stopper, 0, len(seen))
	for st := range seen {
		stoppers = append(stoppers, st)
	}
	slices.SortFunc(stoppers, func(a, b history.Stopper) int {
		return cmp.Or(cmp.Compare(stopperRank(a), stopperRank(b)), cmp.Compare(a, b))
	})
	for _, st := range stoppers {
		v.Legend = append(v.Legend, legendItem{Stopper: string(st), Color: stopperColor(st), Count: seen[st]})
	}
	v.Stoppers = v.Legend

	// 2. The scale.
	top := 0
	for i := range days {
		total := 0
		for _, n := range perDay[i] {
			total += n
		}
		top = max(top, total)
	}
	step := niceStep(top, chartYTicks)
	yMax := max(step, (top+step-1)/step*step)
	y := func(n int) float64 { return float64(chartTop) + chartPlotH*(1-float64(n)/float64(yMax)) }
	for n := 0; n <= yMax; n += step {
		v.YTicks = append(v.YTicks, chartTick{Pos: num(y(n)), Label: fmt.Sprint(n)})
	}

	// 3. The bars, stacked bottom-up in legend order.
	slot := chartPlotW / float64(len(days))
	gap := 0.0
	if slot >= chartMinGapSlot {
		gap = slot * chartBarGap
	}
	labelEvery := max(1, int(math.Ceil(float64(len(days))/chartXLabels)))
	for i, day := range days {
		x := float64(chartLeft) + float64(i)*slot
		row := chartDay{Day: day, Counts: make([]int, len(stoppers))}
		base := 0
		for j, st := range stoppers {
			n := perDay[i][st]
			row.Counts[j] = n
			if n == 0 {
				continue
			}
			v.Rects = append(v.Rects, chartRect{X: num(x + gap/2), Y: num(y(base + n)), W: num(slot - gap),
				H: num(y(base) - y(base+n)), Fill: stopperColor(st), Day: day, Stopper: string(st),
				Title: fmt.Sprintf("%s: %d ended by %s", day, n, st)})
			base += n
		}
		row.Total = base
		v.Days = append(v.Days, row)
		if i%labelEvery == 0 {
			d, _ := time.ParseInLocation(time.DateOnly, day, loc)
			v.XTicks = append(v.XTicks, chartTick{Pos: num(x + slot/2), Label: d.Format("Jan 2")})
		}
	}
	return v
}

// dayRange lists the dates from first to last, inclusive, walking
// calendar days in loc so that DST days count once.
func dayRange(first, last string, loc *time.Location) []string {
	from, err1 := time.ParseInLocation(time.DateOnly, first, loc)
	to, err2 := time.ParseInLocation(time.DateOnly, last, loc)
	if err1 != nil || err2 != nil || to.Before(from) {
		return nil
	}
	var out []string
	for d := from; !d.After(to); d = time.Date(d.Year(), d.Month(), d.Day()+1, 0, 0, 0, 0, loc) {
		out = append(out, d.Format(time.DateOnly))
	}
	return out
}

// niceStep is a tick step of 1, 2 or 5 times a power of ten that splits
// top into about ticks parts.
func niceStep(top, ticks int) int {
	if top <= ticks {
		return 1
	}
	raw := float64(top) / float64(ticks)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			return int(m * mag)
		}
	}
	return int(10 * mag)
}

func num(f float64) string { return fmt.Sprintf("%.1f", f) }

// stopperRank orders stoppers as history.Stoppers does; unknown last.
func stopperRank(s history.Stopper) int {
	if i := slices.Index(history.Stoppers, s); i >= 0 {
		return i
	}
	return len(history.Stoppers)
}

// stopperColor is a stopper's color (Tableau 20, distinct in light and
// dark themes); unknown stoppers are grey.
func stopperColor(s history.Stopper) string {
	switch s {
	case history.StopperUser:
		return "#4e79a7"
	case history.StopperAdmin:
		return "#f28e2b"
	case history.StopperCuller:
		return "#76b7b2"
	case history.StopperService:
		return "#59a14f"
	case history.StopperHub:
		return "#edc948"
	case history.StopperStartTimeout:
		return "#b07aa1"
	case history.StopperEvicted:
		return "#e15759"
	case history.StopperOOM:
		return "#ff9da7"
	case history.StopperContainerExit:
		return "#9c755f"
	case history.StopperNodeLost:
		return "#bab0ac"
	case history.StopperDeleted:
		return "#8cd17d"
	case history.StopperPreempted:
		return "#d37295"
	case history.StopperReservationCancelled:
		return "#a0cbe8"
	case history.StopperReservationReassigned:
		return "#ffbe7d"
	}
	return "#79706e"
}
