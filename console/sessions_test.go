package console

import (
	"encoding/csv"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dsmlp/spawner/history"
)

// manySessions are n ended sessions, one every 10 minutes back from now,
// with rotating stoppers.
func manySessions(n int) []history.Session {
	stoppers := []history.Stopper{history.StopperUser, history.StopperCuller, history.StopperEvicted, history.StopperOOM}
	out := make([]history.Session, 0, n)
	for i := range n {
		started := testNow.Add(-time.Duration(i+1) * 10 * time.Minute)
		ended := started.Add(5 * time.Minute)
		s := history.Session{Identity: history.Identity{UID: fmt.Sprintf("uid-%05d", i), User: fmt.Sprintf("u%d", i%50),
			Course: []string{"DSC10", "DSC80"}[i%2]}, Started: started, EndedAt: &ended, Stopper: stoppers[i%len(stoppers)]}
		if s.Stopper == history.StopperEvicted {
			s.End = &history.EndFacts{Phase: "Failed", Reason: "Evicted"}
		}
		out = append(out, s)
	}
	return out
}

func TestSessionsPageShell(t *testing.T) {
	e := newEnv(t)
	c, _, _ := e.login(adminUser, testPrefix)
	resp, body := e.get(c, testPrefix+"sessions?user=u1&reason=evicted")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for _, want := range []string{
		`data-api="/services/spawnerd/api/sessions" data-chart="/services/spawnerd/api/sessions/chart"`,
		`data-query="reason=evicted&amp;since=2026-02-09&amp;user=u1"`, // the default range: 30 days, today included
		`href="/services/spawnerd/sessions.csv?reason=evicted&amp;since=2026-02-09&amp;user=u1"`,
		`name="user" id="s-user" value="u1"`, `aria-busy="true"`, `Loading…`, `id="next"`, `id="prev"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	resp, body = e.get(c, testPrefix+"sessions?since=yesterday")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `id="search-problem"`) || !strings.Contains(body, `data-disabled="true"`) {
		t.Errorf("a bad date: status %d, want 400 with the problem shown", resp.StatusCode)
	}
}

func TestSessionsJSONPages(t *testing.T) {
	e := newEnv(t)
	e.hist.add(manySessions(250)...)
	c, _, _ := e.login(adminUser, testPrefix)
	var got []sessionRow
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("the pages do not end")
		}
		resp, body := e.get(c, testPrefix+"api/sessions?since=&cursor="+url.QueryEscape(cursor))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		var page struct {
			Sessions []sessionRow `json:"sessions"`
			Next     string       `json:"next"`
		}
		mustJSON(t, body, &page)
		got = append(got, page.Sessions...)
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	if len(got) != 250 {
		t.Fatalf("%d sessions over the pages, want 250", len(got))
	}
	if got[0].UID != "uid-00000" || got[249].UID != "uid-00249" {
		t.Errorf("order: first %s, last %s; want newest first", got[0].UID, got[249].UID)
	}
	if r := got[2]; r.Stopper != "evicted" || r.Reason != "Evicted" || r.Why == "" || r.Duration != "5m" || r.URL != "/services/spawnerd/servers/u2" {
		t.Errorf("an evicted session's row: %+v", r)
	}
	// Filters reach the history.
	resp, body := e.get(c, testPrefix+"api/sessions?since=&reason=oom&course=DSC80")
	var page struct{ Sessions []sessionRow }
	mustJSON(t, body, &page)
	if resp.StatusCode != http.StatusOK || len(page.Sessions) == 0 {
		t.Fatalf("filtered: status %d, %d rows", resp.StatusCode, len(page.Sessions))
	}
	for _, s := range page.Sessions {
		if s.Stopper != "oom" || s.Course != "DSC80" {
			t.Errorf("filtered row %+v", s)
		}
	}
	if resp, _ := e.get(c, testPrefix+"api/sessions?cursor=bogus"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a bad cursor: %d, want 400", resp.StatusCode)
	}
}

func TestSessionsCSV(t *testing.T) {
	e := newEnv(t)
	ss := manySessions(2500)
	exit := -1
	ss[0].User, ss[0].Server = `smith, "jo"`, "=HYPERLINK(\"http://x\")"
	ss[0].End = &history.EndFacts{Reason: "Error", Message: "line one\nline two", ExitCode: &exit}
	e.hist.add(ss...)
	c, _, _ := e.login(adminUser, testPrefix)
	resp, body := e.get(c, testPrefix+"sessions.csv?since=")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/csv; charset=utf-8" {
		t.Errorf("Content-Type %s", ct)
	}
	if cd := resp.Header.Get("Content-Disposition"); !strings.HasPrefix(cd, `attachment; filename="sessions-`) {
		t.Errorf("Content-Disposition %s", cd)
	}
	recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if err != nil {
		t.Fatalf("the export is not CSV: %v", err)
	}
	if len(recs) != 2501 {
		t.Fatalf("%d records, want a header and 2500 rows (3 history pages)", len(recs))
	}
	header := recs[0]
	if header[0] != "uid" || header[1] != "user" || header[len(header)-1] != "why" {
		t.Errorf("header %v", header)
	}
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	first := recs[1]
	for name, want := range map[string]string{
		"user": `smith, "jo"`, "server": `'=HYPERLINK("http://x")`, "end_message": "line one\nline two", "exit_code": "-1",
		"started": "2026-03-10T18:20:00Z", "stopper": "user",
	} {
		if got := first[col[name]]; got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if !strings.Contains(first[col["why"]], "stopped by its own user") {
		t.Errorf("why = %q", first[col["why"]])
	}
	if e.hist.lists < 3 {
		t.Errorf("%d history pages read, want every page", e.hist.lists)
	}
	// The search applies.
	_, body = e.get(c, testPrefix+"sessions.csv?since=&reason=evicted")
	recs, _ = csv.NewReader(strings.NewReader(body)).ReadAll()
	if len(recs) != 1+625 {
		t.Errorf("evicted export: %d records, want 626", len(recs))
	}
}

func TestSessionsChartInTheAdminsZone(t *testing.T) {
	la := mustLoad(t, "America/Los_Angeles")
	e := newEnv(t, func(o *Options) { o.Location = la })
	at := func(s string) *time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return &v
	}
	e.hist.add(
		// 07:30 UTC on Mar 8 is 23:30 PST on Mar 7.
		history.Session{Identity: history.Identity{UID: "a", User: "a"}, Started: *at("2026-03-08T07:00:00Z"), EndedAt: at("2026-03-08T07:30:00Z"), Stopper: history.StopperEvicted},
		history.Session{Identity: history.Identity{UID: "b", User: "b"}, Started: *at("2026-03-08T07:00:00Z"), EndedAt: at("2026-03-08T07:40:00Z"), Stopper: history.StopperCuller},
		history.Session{Identity: history.Identity{UID: "c", User: "c"}, Started: *at("2026-03-09T17:00:00Z"), EndedAt: at("2026-03-09T18:00:00Z"), Stopper: history.StopperCuller},
		history.Session{Identity: history.Identity{UID: "d", User: "d"}, Started: *at("2026-03-09T17:00:00Z"), EndedAt: at("2026-03-09T18:00:00Z"), Stopper: "mystery"},
	)
	c, _, _ := e.login(adminUser, testPrefix)
	resp, body := e.get(c, testPrefix+"api/sessions/chart?since=2026-03-05&until=2026-03-10")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if e.hist.dayLoc != la {
		t.Errorf("days counted in %v, want America/Los_Angeles", e.hist.dayLoc)
	}
	// Mar 5..10 inclusive is 6 days, across the DST change of Mar 8.
	for _, want := range []string{
		`data-days="6" data-total="4" data-zone="America/Los_Angeles"`,
		`data-day="2026-03-07" data-stopper="evicted"><title>2026-03-07: 1 ended by evicted</title>`,
		`data-day="2026-03-07" data-stopper="culler"`,
		`data-day="2026-03-09" data-stopper="culler"`,
		`data-day="2026-03-09" data-stopper="mystery"`,
		`<li data-stopper="culler">`, `fill="#76b7b2"`, // legend with the culler's color
		`<th scope="row">2026-03-08</th>`, // empty days are on the axis and in the table
		`role="img" aria-labelledby="chart-svg-title chart-svg-desc"`,
		">Mar 5<",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the chart lacks %s", want)
		}
	}
	if strings.Contains(body, `data-day="2026-03-08" data-stopper="evicted"`) {
		t.Error("an end at 23:30 PST on Mar 7 is counted on its UTC day")
	}
	// Stacked: the culler's bar of Mar 7 sits on the evicted one.
	rect := regexp.MustCompile(`<rect x="([\d.]+)" y="([\d.]+)" width="[\d.]+" height="([\d.]+)" fill="[^"]+" data-day="2026-03-07" data-stopper="(\w+)"`)
	ms := rect.FindAllStringSubmatch(body, -1)
	if len(ms) != 2 || ms[0][4] != "culler" && ms[0][4] != "evicted" {
		t.Fatalf("Mar 7 bars: %v", ms)
	}
	if ms[0][1] != ms[1][1] || ms[0][2] == ms[1][2] {
		t.Errorf("Mar 7's segments are not stacked in one column: %v", ms)
	}
}

func TestSessionsChartDefaultRange(t *testing.T) {
	e := newEnv(t)
	c, _, _ := e.login(adminUser, testPrefix)
	_, body := e.get(c, testPrefix+"api/sessions/chart")
	if !strings.Contains(body, `data-days="30" data-total="0"`) || !strings.Contains(body, "No session ended in the range.") {
		t.Errorf("default chart: %s", truncate(body, 300))
	}
}

func TestSessionsWithTheHistoryOff(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.History = nil })
	c, _, _ := e.login(adminUser, testPrefix)
	resp, body := e.get(c, testPrefix+"sessions")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="history-off"`) || !strings.Contains(body, `data-disabled="true"`) {
		t.Errorf("sessions page: %d, does not say the history is off", resp.StatusCode)
	}
	for _, p := range []string{"api/sessions", "sessions.csv", "api/sessions/chart"} {
		if resp, _ := e.get(c, testPrefix+p); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, resp.StatusCode)
		}
	}
}
