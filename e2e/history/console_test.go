package history_test

import (
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/history"
)

// The console's prefix: the hub's proxy forwards it to spawnerd.
const consolePrefix = "/services/spawnerd/"

// hubPassword is the password of every hub user in the tests (harness.StartHub).
const hubPassword = "e2e-password"

// consoleUser is named in HUB_CONSOLE_USERS: not a hub admin, yet admitted
// to the console by the custom scope.
const consoleUser = "tara"

// TestConsoleInBrowser drives spawnerd's console in headless Chromium
// against the real hub, proxy, API server and spawnerd: an admin logs in
// through the hub's login page and OAuth; the servers page follows a
// server from running to evicted without a reload; the detail page tells
// the server's life and stops another server through the hub, which the
// history records as the admin's; after a spawnerd restart the sessions
// search finds the evicted session, exports it as CSV and charts it. A
// hub user gets only their status page, and a user with the console scope
// gets the console. Every step leaves a full-page screenshot.
func TestConsoleInBrowser(t *testing.T) {
	s := newStack(t, stackOptions{hubEnv: []string{"HUB_CONSOLE_USERS=" + consoleUser}})
	ctx := context.Background()
	admin := newTab(t, s, "admin")

	t.Run("admin logs in through the hub", func(t *testing.T) {
		admin.t = t
		began := time.Now()
		admin.logIn(consolePrefix)
		admin.waitFor("the servers page", serversPageLoaded, 2*time.Minute)
		if who := evalIn[string](admin, `document.querySelector('#whoami').dataset.user`); who != "admin" {
			t.Fatalf("the console says %q is logged in, want admin\n%s", who, admin.b.Explain("console-failed-whoami.png"))
		}
		t.Logf("login through the hub's form and OAuth to the loaded servers page: %.1f s", time.Since(began).Seconds())
		// The page preloads the list its script fetches first: one request,
		// not the preload and then the script's own (the polls follow 2 s
		// apart).
		starts := evalIn[[]float64](admin, `performance.getEntriesByType('resource').filter(e => new URL(e.name).pathname.endsWith('/api/servers')).map(e => e.startTime)`)
		if len(starts) == 0 || len(starts) > 1 && starts[1]-starts[0] < 1000 {
			t.Errorf("the servers list was requested at %v ms: want the preload used by the script, the next request a poll 2 s later", starts)
		}
		admin.markStay()
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("a new server appears running without a reload", func(t *testing.T) {
		admin.t = t
		s.start(t, s.hub.Token, "carol", nil)
		readyAt := time.Now()
		r := admin.waitRow("carol", "running", "", 30*time.Second)
		admin.mustHaveStayed("carol's row appeared")
		t.Logf("carol's row shown running %.1f s after the hub saw the server ready (the page polls every 2 s): %q",
			time.Since(readyAt).Seconds(), r.Text)
		if !strings.Contains(r.Text, "running") || !strings.Contains(r.Text, "carol") {
			t.Errorf("carol's row reads %q, want carol and running", r.Text)
		}
		admin.shot("console-01-servers-running.png")
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("the evicted server turns stopped without a reload", func(t *testing.T) {
		admin.t = t
		// The page notes when the row changes, so that the delay is the
		// page's own, not this test's polling.
		evalIn[chromedp.Void](admin, watchRowScript("carol", "stopped", "Evicted"))
		evicting := time.Now()
		if err := harness.Evict(ctx, env.Client, s.ns, "jupyter-carol"); err != nil {
			t.Fatal(err)
		}
		evicted := time.Now()
		admin.waitFor("carol's row stopped with reason Evicted", `window.__rowChangedAt > 0`, time.Minute)
		admin.mustHaveStayed("carol's row changed")
		at := time.UnixMilli(int64(evalIn[float64](admin, `window.__rowChangedAt`)))
		t.Logf("eviction → carol's row stopped/Evicted in the open page: %.2f s (the eviction's status update took %.2f s; the page polls every 2 s)",
			at.Sub(evicting).Seconds(), evicted.Sub(evicting).Seconds())
		r := admin.row("carol")
		if r == nil || r.Status != "stopped" || r.Reason != "Evicted" || r.Hidden || !r.Shown {
			t.Fatalf("carol's row is %+v, want shown, stopped, reason Evicted\n%s", r, admin.b.Explain("console-failed-evicted-row.png"))
		}
		if !strings.Contains(r.Text, "stopped") || !strings.Contains(r.Text, "Evicted") {
			t.Errorf("carol's row reads %q, want its status stopped and its reason Evicted in the text", r.Text)
		}
		admin.shot("console-02-servers-evicted.png")
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("the detail page tells the server's life", func(t *testing.T) {
		admin.t = t
		admin.do("opening carol's detail page from the servers list", chromedp.Click(chromedp.CSS(rowSelector("carol")+` td.c-user a`)))
		admin.waitFor("carol's detail page", pageLoaded("servers/carol", "#live"), time.Minute)
		want := []string{"spawnerd:requested", "spawnerd:created", "spawnerd:scheduled", "spawnerd:ready", "spawnerd:ended"}
		d := pollJS(admin, "carol's timeline with the history's steps and the pod's events", detailScript, time.Minute, func(d detailState) bool {
			// The sentence comes from the history once the pod is gone;
			// until then the page shows the pod's own reason and message.
			return d.Status == "stopped" && d.Reason == "Evicted" && d.Stopper == string(history.StopperEvicted) &&
				strings.Contains(d.Why, "evicted the pod") && hasAll(d.Timeline, want) && d.kubeEvents() > 0
		})
		t.Logf("carol's timeline: %s", strings.Join(d.Timeline, ", "))
		if ss := s.sessions(t, "carol"); len(ss) > 0 && ss[0].ReadyAt != nil && ss[0].EndedAt != nil {
			t.Logf("carol's session as recorded: started %s, ready %s, ended %s",
				ss[0].Started.Format(time.StampMilli), ss[0].ReadyAt.Format(time.StampMilli), ss[0].EndedAt.Format(time.StampMilli))
		}
		if !strings.Contains(d.Why, harness.EvictionMessage[:30]) {
			t.Errorf("carol's stop does not quote the kubelet's message: %q", d.Why)
		}
		admin.shot("console-03-detail-timeline.png")
	})

	t.Run("the stop button stops a server through the hub as the admin", func(t *testing.T) {
		admin.t = t
		s.start(t, s.hub.Token, "dave", nil)
		admin.navigate(consolePrefix + "servers/dave")
		admin.waitFor("dave's detail page, running, with its stop button",
			pageLoaded("servers/dave", `#live[data-status="running"]`)+` && !!document.querySelector('#stop-open')`, time.Minute)
		admin.do("opening the stop dialog", chromedp.Click(chromedp.CSS("#stop-open")))
		admin.waitFor("the stop dialog, modal", `(() => { const d = document.getElementById('stop-dialog'); return !!d && d.open && d.matches(':modal'); })()`, 30*time.Second)
		admin.shot("console-04-stop-dialog.png")
		admin.do("confirming the stop", chromedp.Click(chromedp.CSS("#stop-confirm")))
		admin.waitFor("dave's detail page after the stop, with the hub's answer",
			pageLoaded("servers/dave", "#notice")+` && /[?&]stopped=20[24]\b/.test(location.search)`, time.Minute)
		notice := evalIn[string](admin, `document.getElementById('notice').innerText`)
		t.Logf("after the stop: %s", notice)

		s.hub.WaitGone("dave", "")
		if _, ok := s.hub.Servers("dave")[""]; ok {
			t.Errorf("the hub still lists dave's server after the console's stop")
		}
		got := s.waitEnded(t, "dave", time.Minute)
		wantBy := history.Actor{Kind: history.ActorAdmin, Name: "admin"}
		if got.Stopper != history.StopperAdmin || got.StopRequestedBy == nil || *got.StopRequestedBy != wantBy {
			t.Errorf("dave's session: stopper %q, stop requested by %+v; want admin, %+v", got.Stopper, got.StopRequestedBy, wantBy)
		}
		d := pollJS(admin, "dave's page showing the stop by the admin", detailScript, time.Minute, func(d detailState) bool {
			return d.Status == "stopped" && d.Stopper == "admin" && hasAll(d.Timeline, []string{"spawnerd:stop-requested", "spawnerd:ended"})
		})
		if !strings.Contains(d.Why, "admin admin") {
			t.Errorf("dave's stop reads %q, want it told as admin admin's", d.Why)
		}
		admin.shot("console-05-detail-stopped-by-admin.png")
	})

	// At the top level: a process started in a subtest ends with it.
	s.api.Restart(t)
	t.Run("after a restart the sessions search finds, exports and charts the session", func(t *testing.T) {
		admin.t = t
		admin.navigate(consolePrefix + "sessions")
		admin.waitFor("the sessions page after spawnerd's restart", pageLoaded("sessions", "#sessions"), 2*time.Minute)

		admin.search(map[string]string{"#s-user": "carol"})
		rows := evalIn[[]sessionRowState](admin, sessionRowsScript)
		var carol *sessionRowState
		for i, r := range rows {
			if r.User != "carol" {
				t.Errorf("searching user carol lists %+v", r)
			}
			carol = &rows[i]
		}
		if len(rows) != 1 || carol.Stopper != string(history.StopperEvicted) || carol.Reason != "Evicted" || !strings.Contains(carol.Text, "Evicted") {
			t.Fatalf("searching user carol after the restart: %+v, want carol's one session, ended by eviction\n%s",
				rows, admin.b.Explain("console-failed-sessions.png"))
		}

		// The chart of sessions ended per day: carol's one session, a bar.
		ch := evalIn[chartState](admin, chartScript)
		if ch.Bars < 1 || !slices.Contains(ch.Stoppers, string(history.StopperEvicted)) || ch.MaxHeight <= 0 || ch.Total != "1" {
			t.Errorf("the chart: %+v, want at least one drawn bar of evicted sessions, total 1\n%s", ch, admin.b.Explain("console-failed-chart.png"))
		}
		admin.shot("console-06-sessions-search-chart.png")

		// The export link, fetched by the page so that its login cookie goes along.
		exp := evalIn[fetched](admin, `fetch(document.getElementById('csv').href, {credentials: 'same-origin'})
			.then(async r => ({status: r.status, type: r.headers.get('Content-Type') || '', body: await r.text()}))`, chromedp.EvalAwaitPromise)
		if exp.Status != http.StatusOK || !strings.HasPrefix(exp.Type, "text/csv") {
			t.Fatalf("the CSV export answered %d %s:\n%s", exp.Status, exp.Type, exp.Body)
		}
		recs, err := csv.NewReader(strings.NewReader(exp.Body)).ReadAll()
		if err != nil || len(recs) != 2 {
			t.Fatalf("the CSV export of user carol: %v, %d records, want a header and carol's row:\n%s", err, len(recs), exp.Body)
		}
		col := map[string]string{}
		for i, name := range recs[0] {
			col[name] = recs[1][i]
		}
		if col["user"] != "carol" || col["stopper"] != string(history.StopperEvicted) || col["end_reason"] != "Evicted" || col["ended_at"] == "" {
			t.Errorf("the CSV export's row: %v", col)
		}

		admin.search(map[string]string{"#s-user": "", "#s-reason": "Evicted"})
		rows = evalIn[[]sessionRowState](admin, sessionRowsScript)
		users := []string{}
		for _, r := range rows {
			users = append(users, r.User)
			if r.Reason != "Evicted" {
				t.Errorf("searching reason Evicted lists %+v", r)
			}
		}
		if !slices.Contains(users, "carol") || slices.Contains(users, "dave") {
			t.Errorf("searching reason Evicted lists the sessions of %v, want carol's and not dave's", users)
		}
	})

	t.Run("the GPU classes page shows the class", func(t *testing.T) {
		admin.t = t
		admin.navigate(consolePrefix + "gpu")
		admin.waitFor("the GPU classes page with the a5000 class", pageLoaded("gpu", `#classes-table tr[data-class="a5000"]`), time.Minute)
		if capacity := evalIn[string](admin, `document.querySelector('#classes-table tr[data-class="a5000"] td[data-col="capacity"]').innerText`); capacity != "2" {
			t.Errorf("the a5000 class shows a capacity of %q, want 2", capacity)
		}
		admin.shot("console-07-gpu-classes.png")
	})
	admin.b.Close()

	t.Run("a hub user gets the status page, not the console", func(t *testing.T) {
		// erin's own session first, started and stopped with erin's token.
		token := s.hub.UserToken("erin")
		s.start(t, token, "erin", nil)
		if code := s.hub.DoAs(token, http.MethodDelete, harness.ServerAPIPath("erin", ""), nil, nil); code != http.StatusNoContent && code != http.StatusAccepted {
			t.Fatalf("erin's stop: %d", code)
		}
		s.hub.WaitGone("erin", "")
		s.waitEnded(t, "erin", time.Minute)

		erin := newTab(t, s, "erin")
		erin.logIn(consolePrefix + statusPath)
		erin.waitFor("erin's status page", pageLoaded(statusPath, `#status[data-user="erin"]`), 2*time.Minute)
		st := pollJS(erin, "erin's status page with her last session and the GPU classes", statusScript, 30*time.Second, func(st statusState) bool {
			return len(st.Ends) > 0 && len(st.Classes) > 0
		})
		if st.Who != "erin" || st.ConsoleNav {
			t.Errorf("the status page: logged in as %q, console navigation %v; want erin, without the console's links", st.Who, st.ConsoleNav)
		}
		if e := st.end(""); e == nil || e.Recorded != "true" || !strings.Contains(e.Text, "stopped by its own user, erin") {
			t.Errorf("erin's status says of her last session: %+v, want it stopped by herself", st.Ends)
		}
		if c := st.class("a5000"); c == nil || c.Capacity != "2" || c.Free != "2" {
			t.Errorf("erin's status shows the GPU classes %+v, want a5000 with 2 of 2 free", st.Classes)
		}
		erin.shot("console-08-status-erin.png")

		resp, err := chromedp.Run(erin.step(time.Minute), chromedp.NavigateResponse(s.proxy.PublicURL+consolePrefix))
		if err != nil {
			t.Fatalf("opening the console as erin: %v\n%s", err, erin.b.Explain("console-failed-erin-console.png"))
		}
		erin.waitFor("the console's 403 page", `!!document.querySelector('#main[data-loaded] #error[data-status="403"]')`, 30*time.Second)
		if resp.Status != http.StatusForbidden {
			t.Errorf("the console answered erin %d, want 403", resp.Status)
		}
		if evalIn[bool](erin, `!!document.querySelector('#servers, #servers-body')`) || !evalIn[bool](erin, `!!document.querySelector('#error-status')`) {
			t.Errorf("erin's 403 page shows the server list or lacks the link to her status page\n%s", erin.b.Explain("console-failed-erin-403.png"))
		}
		if code := evalIn[int](erin, `fetch('`+consolePrefix+`api/servers', {credentials: 'same-origin'}).then(r => r.status)`, chromedp.EvalAwaitPromise); code != http.StatusForbidden {
			t.Errorf("the servers data answered erin %d, want 403", code)
		}
		erin.shot("console-09-forbidden-erin.png")
	})

	t.Run("a user with the console scope gets the console", func(t *testing.T) {
		var u struct{ Admin bool }
		s.hub.EnsureUser(consoleUser)
		if code := s.hub.Do(http.MethodGet, "/users/"+consoleUser, nil, &u); code != http.StatusOK || u.Admin {
			t.Fatalf("hub user %s: %d, admin %v; want a user who is not an admin", consoleUser, code, u.Admin)
		}
		ta := newTab(t, s, consoleUser)
		ta.logIn(consolePrefix)
		ta.waitFor("the servers page for "+consoleUser, serversPageLoaded, 2*time.Minute)
		if who := evalIn[string](ta, `document.querySelector('#whoami').dataset.user`); who != consoleUser {
			t.Errorf("the console says %q is logged in, want %s", who, consoleUser)
		}
		r := ta.waitRow("carol", "stopped", "Evicted", 30*time.Second)
		if !strings.Contains(r.Text, "Evicted") {
			t.Errorf("carol's row reads %q for %s", r.Text, consoleUser)
		}
		ta.shot("console-10-servers-console-user.png")
	})
}

// statusPath is the status page, under the console's prefix.
const statusPath = "status"

// tab is one person's browser on the console.
type tab struct {
	// t is the test the tab reports to: each subtest sets its own.
	t    *testing.T
	b    *harness.Browser
	who  string
	base string // the proxy's public URL, where browsers reach the hub
}

// newTab starts a browser with a profile of its own for who.
func newTab(t *testing.T, s *stack, who string) *tab {
	t.Helper()
	b, err := harness.StartBrowser(filepath.Join(t.TempDir(), "browser-"+who))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return &tab{t: t, b: b, who: who, base: s.proxy.PublicURL}
}

// step is a context for one browser step.
func (tb *tab) step(within time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(tb.b.Ctx, within)
	tb.t.Cleanup(cancel)
	return ctx
}

// logIn opens path, which sends the browser to the hub's login, and logs
// in there as tb.who.
func (tb *tab) logIn(path string) {
	tb.t.Helper()
	if err := tb.b.LogInToHub(tb.step(2*time.Minute), tb.base+path, tb.who, hubPassword); err != nil {
		tb.t.Fatalf("%v\n%s", err, tb.b.Explain("console-failed-login-"+tb.who+".png"))
	}
}

func (tb *tab) navigate(path string) {
	tb.t.Helper()
	tb.do("opening "+path, chromedp.Navigate(tb.base+path))
}

func (tb *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	if err := chromedp.Do(tb.step(time.Minute), steps...); err != nil {
		tb.t.Fatalf("%s: %s: %v\n%s", tb.who, what, err, tb.b.Explain("console-failed-"+tb.who+".png"))
	}
}

// waitFor waits until cond (JavaScript) is true in the tab.
func (tb *tab) waitFor(what, cond string, within time.Duration) {
	tb.t.Helper()
	if err := tb.b.Wait(tb.step(within), cond); err != nil {
		tb.t.Fatalf("%s: %s never showed within %s: %v\n%s", tb.who, what, within, err, tb.b.Explain("console-failed-"+tb.who+".png"))
	}
}

// shot saves a full-page screenshot and names it in the log.
func (tb *tab) shot(name string) {
	tb.t.Helper()
	path, err := tb.b.Shot(name)
	if err != nil {
		tb.t.Errorf("screenshot: %v", err)
		return
	}
	tb.t.Logf("screenshot: %s", path)
}

// markStay marks the page, so that a later check can tell that the page
// was neither reloaded nor left.
func (tb *tab) markStay() {
	tb.t.Helper()
	evalIn[chromedp.Void](tb, `window.__stayed = true`)
}

func (tb *tab) mustHaveStayed(what string) {
	tb.t.Helper()
	if !evalIn[bool](tb, `window.__stayed === true`) {
		tb.t.Fatalf("the page was reloaded or left before %s: it must change by its own polling\n%s", what, tb.b.Explain("console-failed-reloaded.png"))
	}
}

// search fills the sessions search form's fields and submits it, then
// waits for the results.
func (tb *tab) search(fields map[string]string) {
	tb.t.Helper()
	var steps []chromedp.Action[chromedp.Void]
	var conds []string
	for sel, v := range fields {
		steps = append(steps, chromedp.Clear(chromedp.CSS(sel)))
		if v != "" {
			steps = append(steps, chromedp.SendKeys(chromedp.CSS(sel), v))
		}
		name := strings.TrimPrefix(sel, "#s-")
		conds = append(conds, fmt.Sprintf(`(new URLSearchParams(location.search).get(%q) || '') === %q`, name, v))
	}
	steps = append(steps, chromedp.Click(chromedp.CSS("#s-submit")))
	tb.do(fmt.Sprintf("searching sessions %v", fields), steps...)
	tb.waitFor(fmt.Sprintf("the sessions of the search %v", fields), pageLoaded("sessions", "#sessions")+" && "+strings.Join(conds, " && "), time.Minute)
}

// rowState is a row of the servers page as the browser shows it.
type rowState struct {
	Status, Reason, Text string
	Hidden               bool
	// Shown: laid out with a height, not just present.
	Shown bool
}

func rowSelector(user string) string {
	return fmt.Sprintf(`#servers-body tr[data-user=%q][data-server=""]`, user)
}

func (tb *tab) row(user string) *rowState {
	tb.t.Helper()
	return evalIn[*rowState](tb, fmt.Sprintf(`(() => {
		const r = document.querySelector(%q);
		return r ? {Status: r.dataset.status, Reason: r.dataset.reason, Text: r.innerText, Hidden: r.hidden,
			Shown: r.getBoundingClientRect().height > 0} : null;
	})()`, rowSelector(user)))
}

// waitRow waits until user's row has status (and reason, if given).
func (tb *tab) waitRow(user, status, reason string, within time.Duration) rowState {
	tb.t.Helper()
	cond := fmt.Sprintf(`(() => { const r = document.querySelector(%q); return !!r && !r.hidden && r.dataset.status === %q && (%q === '' || r.dataset.reason === %q); })()`,
		rowSelector(user), status, reason, reason)
	tb.waitFor(fmt.Sprintf("%s's row %s %s", user, status, reason), cond, within)
	return *tb.row(user)
}

// watchRowScript makes the page note, in window.__rowChangedAt (ms since
// the epoch), when user's row first has status and reason.
func watchRowScript(user, status, reason string) string {
	return fmt.Sprintf(`(() => {
		window.__rowChangedAt = 0;
		const seen = () => {
			const r = document.querySelector(%q);
			if (r && r.dataset.status === %q && r.dataset.reason === %q) { window.__rowChangedAt = Date.now(); return true; }
			return false;
		};
		if (seen()) return;
		const o = new MutationObserver(() => { if (seen()) o.disconnect(); });
		o.observe(document.getElementById('servers-body'), {subtree: true, childList: true, attributes: true});
	})()`, rowSelector(user), status, reason)
}

// serversPageLoaded: the console's servers page, its list loaded.
var serversPageLoaded = pageLoaded("", "#servers")

// pageLoaded is true on the console page at path (under the prefix) once
// its data is rendered and sel is on it.
func pageLoaded(path, sel string) string {
	return fmt.Sprintf(`location.pathname === %q && !!document.querySelector('#main[data-loaded]') && !!document.querySelector(%q)`,
		consolePrefix+path, sel)
}

// detailState is what a detail page shows of a server.
type detailState struct {
	Status, Reason, Stopper, Why string
	// Timeline is each line's source:what, in order.
	Timeline []string
}

func (d detailState) kubeEvents() int {
	n := 0
	for _, e := range d.Timeline {
		if strings.HasPrefix(e, "kubernetes:") {
			n++
		}
	}
	return n
}

const detailScript = `(() => {
	const live = document.getElementById('live'), st = document.getElementById('stopped');
	return {
		Status: live ? live.dataset.status : '',
		Reason: st ? st.dataset.reason : '',
		Stopper: st ? st.dataset.stopper : '',
		Why: st ? document.getElementById('stopped-why').innerText : '',
		Timeline: Array.from(document.querySelectorAll('#timeline li[data-source]')).map(li => li.dataset.source + ':' + li.dataset.what),
	};
})()`

// sessionRowState is a row of the sessions table.
type sessionRowState struct {
	User, Server, Stopper, Reason, Text string
}

const sessionRowsScript = `Array.from(document.querySelectorAll('#sessions-body tr')).map(tr => ({
	User: tr.dataset.user, Server: tr.dataset.server, Stopper: tr.dataset.stopper, Reason: tr.dataset.reason, Text: tr.innerText}))`

// chartState is the sessions chart as drawn.
type chartState struct {
	Bars      int
	Stoppers  []string
	MaxHeight float64
	Total     string
}

const chartScript = `(() => {
	const f = document.getElementById('chart-fragment');
	const bars = Array.from(document.querySelectorAll('#chart-fragment svg.chart-svg rect[data-stopper]'));
	return {Bars: bars.length, Stoppers: bars.map(b => b.dataset.stopper),
		MaxHeight: Math.max(0, ...bars.map(b => b.getBoundingClientRect().height)), Total: f ? f.dataset.total : ''};
})()`

// fetched is an answer to a fetch made by the page.
type fetched struct {
	Status int
	Type   string
	Body   string
}

// statusState is what the status page shows.
type statusState struct {
	Who        string
	ConsoleNav bool
	Ends       []struct{ Server, Recorded, Text string }
	Classes    []struct{ Class, Free, Capacity string }
}

func (st statusState) end(server string) *struct{ Server, Recorded, Text string } {
	for i := range st.Ends {
		if st.Ends[i].Server == server {
			return &st.Ends[i]
		}
	}
	return nil
}

func (st statusState) class(name string) *struct{ Class, Free, Capacity string } {
	for i := range st.Classes {
		if st.Classes[i].Class == name {
			return &st.Classes[i]
		}
	}
	return nil
}

const statusScript = `(() => ({
	Who: (document.querySelector('#whoami') || {dataset: {}}).dataset.user || '',
	ConsoleNav: !!document.querySelector('#nav-servers, #nav-sessions, #nav-gpu'),
	Ends: Array.from(document.querySelectorAll('#last-sessions li[data-server]')).map(li => ({
		Server: li.dataset.server, Recorded: li.dataset.recorded, Text: li.innerText})),
	Classes: Array.from(document.querySelectorAll('#free-gpus li[data-class]')).map(li => ({
		Class: li.dataset.class, Free: li.dataset.free, Capacity: li.dataset.capacity})),
}))()`

// evalIn evaluates expr in the tab and decodes its value; an error fails
// the test with the page.
func evalIn[T any](tb *tab, expr string, opts ...chromedp.EvaluateOption) T {
	tb.t.Helper()
	v, err := chromedp.Run(tb.step(time.Minute), chromedp.Evaluate[T](expr, opts...))
	if err != nil {
		tb.t.Fatalf("%s: evaluating %s: %v\n%s", tb.who, expr, err, tb.b.Explain("console-failed-eval.png"))
	}
	return v
}

// pollJS evaluates expr until ok accepts its value, and returns it; on
// timeout it fails with the last value and the page.
func pollJS[T any](tb *tab, what, expr string, within time.Duration, ok func(T) bool) T {
	tb.t.Helper()
	ctx := tb.step(within)
	var (
		last    T
		lastErr error
	)
	for {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
		if err == nil {
			last = v
			if ok(v) {
				return v
			}
		} else if ctx.Err() == nil {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			tb.t.Fatalf("%s: %s never showed within %s; last seen %+v (last evaluation error: %v)\n%s",
				tb.who, what, within, last, lastErr, tb.b.Explain("console-failed-"+tb.who+".png"))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func hasAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}
