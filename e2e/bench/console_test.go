package bench_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsmlp/spawner/e2e/harness"
)

// The console benchmark's scale and targets: the servers list of
// consoleServers running servers (plus those stopped in the last hour) in
// under 300 ms at p95, a history search over historySessions sessions in
// under 500 ms at p95, each a page load: the page and the data its script
// fetches.
const (
	consoleServers = 2000
	consolePrefix  = "/services/spawnerd/"
	serversTarget  = 300 * time.Millisecond
	searchTarget   = 500 * time.Millisecond

	// hubPassword is every hub user's password (the harness's HUB_DUMMY_PASSWORD).
	hubPassword = "e2e-password"
	hubAdmin    = "admin"

	// Sequential loads per page; coldLoads of the servers list are paced
	// past the console's one-second list cache, as an admin's poll every
	// 2 s finds it.
	seqServerLoads = 150
	seqSearchLoads = 100
	coldLoads      = 20
	coldPace       = 1100 * time.Millisecond
	csvLoads       = 15
	// concClients admins load pages at once, concLoads times each.
	concClients = 4
	concLoads   = 15
	// browserLoads of each page in headless Chromium, after one to warm
	// its cache of the static files.
	browserLoads = 20
)

// BenchmarkConsole measures the console's page loads through the hub's
// proxy, logged in as the hub's admin through the hub's OAuth, with
// 2,000 servers running (spawned through spawnerd's API, on kwok nodes)
// and 100,000 sessions in the history, on SQLite and on PostgreSQL: each
// store is filled, then a spawnerd, a proxy and a JupyterHub are started
// on it. The servers are spawned once, by the first store's spawnerd; the
// second adopts them, as a restart does. A page load is the page itself
// and the data its script fetches (the servers list; the sessions and, at
// the same time, the chart). A browser's page loads are then timed in
// headless Chromium, from the navigation's start to the page's
// #main[data-loaded].
func BenchmarkConsole(b *testing.B) {
	b.StopTimer()
	ns := env.Namespace(b)
	b.Cleanup(func() {
		if err := deletePods(context.Background(), env.Client, ns); err != nil {
			b.Error(err)
		}
	})
	us := users("s", consoleServers)
	spawned := false
	var summaries []consoleSummary
	for _, store := range []string{"sqlite", "postgres"} {
		b.Run(store, func(b *testing.B) {
			s := newConsoleStack(b, store, ns)
			if !spawned {
				if err := s.spawnServers(b, us); err != nil {
					b.Fatal(err)
				}
				spawned = true
			} else if err := s.adoptServers(b, us); err != nil {
				b.Fatal(err)
			}
			var r consoleRun
			for range b.N {
				b.StartTimer()
				if err := s.measure(b, &r); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
			}
			summaries = append(summaries, r.report(b, s))
		})
	}
	if len(summaries) > 1 {
		show(summaryTable(summaries))
	}
}

// consoleStack is one store's history, spawnerd, proxy and hub, and the
// dev cluster's servers in ns.
type consoleStack struct {
	store, ns, dsn string
	proxy          *harness.Proxy
	api            *harness.Spawnerd
	hub            *harness.Hub
	fleet          *fleet
	cpu            *stackCPU
	filled         time.Duration // filling the history
	servers        time.Duration // spawning or adopting the servers
	base           string        // the console through the proxy
}

func newConsoleStack(b *testing.B, store, ns string) *consoleStack {
	b.Helper()
	ctx := b.Context()
	s := &consoleStack{store: store, ns: ns}
	switch store {
	case "sqlite":
		s.dsn = harness.SQLiteDSN(b)
	default:
		s.dsn = env.StartPostgres(b)
	}
	t0 := time.Now()
	if err := fillHistory(ctx, s.dsn, pastSessions(historySessions, recentStops, t0, 7)); err != nil {
		b.Fatalf("filling the %s history: %v", store, err)
	}
	s.filled = time.Since(t0)
	s.proxy = harness.StartProxy(b)
	hubPort := harness.FreePort(b)
	hubToken := fmt.Sprintf("hub-token-%d", time.Now().UnixNano())
	s.api = env.StartSpawnerd(b, bin, harness.SpawnerdOptions{
		Config: fmt.Sprintf(configTemplate, ns),
		Args: []string{"--hub-api-url", fmt.Sprintf("http://127.0.0.1:%d/hub/api", hubPort), "--proxy-api-url", s.proxy.APIURL,
			"--history-dsn", s.dsn},
		Env: []string{"SPAWNERD_HUB_TOKEN=" + hubToken, "CONFIGPROXY_AUTH_TOKEN=" + s.proxy.Token},
	})
	s.hub = env.StartHub(b, harness.HubOptions{Proxy: s.proxy, Spawnerd: s.api.URL, Secret: s.api.Secret, HubToken: hubToken, Port: hubPort})
	clock, err := watchPods(ctx, ns)
	if err != nil {
		b.Fatal(err)
	}
	s.fleet = &fleet{ns: ns, api: s.api, c: newAPIClient(s.api, stormClients), clock: clock}
	s.cpu = newStackCPU(s.dsn)
	s.base = s.proxy.PublicURL + consolePrefix
	b.Cleanup(s.fleet.c.http.CloseIdleConnections)
	return s
}

// spawnServers starts every user's server through spawnerd's API.
func (s *consoleStack) spawnServers(b *testing.B, us []string) error {
	t0 := time.Now()
	if _, err := s.fleet.spawn(b.Context(), us); err != nil {
		return fmt.Errorf("spawning %d servers: %w", len(us), err)
	}
	s.servers = time.Since(t0)
	return s.awaitHistory(b.Context(), len(us))
}

// adoptServers waits until this stack's spawnerd reports every server
// running: it found the pods another spawnerd made.
func (s *consoleStack) adoptServers(b *testing.B, us []string) error {
	t0 := time.Now()
	if _, err := s.fleet.c.awaitRunning(b.Context(), us, func(int) bool { return true }, statusPollers, spawnTimeout); err != nil {
		return fmt.Errorf("adopting %d servers: %w", len(us), err)
	}
	s.servers = time.Since(t0)
	return s.awaitHistory(b.Context(), len(us))
}

// awaitHistory waits until spawnerd has recorded n running sessions, so
// that its recorder's writes are over before the measurement.
func (s *consoleStack) awaitHistory(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, spawnTimeout)
	defer cancel()
	var got int
	var err error
	for {
		if got, err = liveSessions(ctx, s.dsn); err == nil && got == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the history holds %d running sessions, want %d (last error: %v)", got, n, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// search is one sessions search as the search form sends it.
type search struct {
	name, query string
}

// consoleRun is what the measurement collected; each series is one kind
// of page load.
type consoleRun struct {
	series      []*series
	byName      map[string]*series
	listed      serverCounts
	rows        map[string]int // sessions shown per search, CSV rows
	cpu         string
	browser     []*browserSeries
	sessionRows int // sessions in the history when measured
}

type serverCounts struct{ running, stopped, other int }

// series is one kind of page load's times.
type series struct {
	name   string
	target time.Duration // 0: none
	ds     []time.Duration
}

func (r *consoleRun) add(name string, target time.Duration, d time.Duration) {
	if r.byName == nil {
		r.byName = map[string]*series{}
	}
	s, ok := r.byName[name]
	if !ok {
		s = &series{name: name, target: target}
		r.byName[name] = s
		r.series = append(r.series, s)
	}
	s.ds = append(s.ds, d)
}

// Names of the measured page loads.
const (
	loadServersCold   = "servers page, list cache expired (shell + api/servers, full list)"
	loadServersWarm   = "servers page, back to back (list cache of 1 s fresh)"
	load304Cold       = "api/servers revalidation (304), list cache expired"
	load304Warm       = "api/servers revalidation (304), back to back"
	loadDeep          = "sessions Next page, 5,000 rows deep (api/sessions with cursor)"
	loadChart         = "chart fragment alone (api/sessions/chart, last 30 days)"
	loadCSV           = "CSV export of one course (sessions.csv, 90 days)"
	loadConcServers   = "servers page, 4 admins at once"
	loadConcSearch    = "sessions search page, 4 admins at once"
	browserServers    = "servers page"
	browserSessions   = "sessions search (last 30 days)"
	searchPagePrefix  = "search page: "
	searchTablePrefix = "  of which table shown: "
)

func (s *consoleStack) searches() []search {
	today := time.Now()
	day := func(d int) string { return today.AddDate(0, 0, d).Format(time.DateOnly) }
	return []search{
		{"default (last 30 days)", ""},
		{"a user", "user=" + historyUser(1234)},
		{"a course + reason", "course=" + courseNames()[17] + "&reason=evicted"},
		{"a 7-day window", "since=" + day(-14) + "&until=" + day(-8)},
	}
}

// measure makes every page load once or many times through the proxy.
func (s *consoleStack) measure(b *testing.B, r *consoleRun) error {
	ctx := b.Context()
	c := browserClient()
	defer c.CloseIdleConnections()
	if err := consoleLogin(ctx, c, s.proxy.PublicURL, consolePrefix, hubAdmin, hubPassword); err != nil {
		return fmt.Errorf("logging in to the console as %s: %w", hubAdmin, err)
	}
	// What the list holds.
	_, body, err := fetch(ctx, c, s.base+"api/servers", "", http.StatusOK)
	if err != nil {
		return err
	}
	if r.listed, err = countServers(body); err != nil {
		return err
	}
	if r.listed.running != consoleServers {
		return fmt.Errorf("the servers list shows %d running servers, want %d", r.listed.running, consoleServers)
	}
	if r.sessionRows, err = historyRows(ctx, s.dsn); err != nil {
		return err
	}
	show(s.cpu.settle(ctx, settleWait))
	cpu0 := s.cpu.sample()

	// 1. The servers page: back to back, then paced past the list cache.
	var etag string
	for range seqServerLoads {
		d, tag, err := s.serversLoad(ctx, c)
		if err != nil {
			return err
		}
		etag = tag
		r.add(loadServersWarm, serversTarget, d)
	}
	for range seqServerLoads {
		d, err := s.revalidate(ctx, c, etag)
		if err != nil {
			return err
		}
		r.add(load304Warm, 0, d)
	}
	last := time.Now()
	pace := func() {
		time.Sleep(time.Until(last.Add(coldPace)))
	}
	for i := range 2 * coldLoads {
		pace()
		if i%2 == 0 {
			d, tag, err := s.serversLoad(ctx, c)
			if err != nil {
				return err
			}
			etag = tag
			r.add(loadServersCold, serversTarget, d)
		} else {
			d, err := s.revalidate(ctx, c, etag)
			if err != nil {
				return err
			}
			r.add(load304Cold, 0, d)
		}
		last = time.Now()
	}

	// 2. Sessions searches, a deep page, the chart, the CSV export.
	if r.rows == nil {
		r.rows = map[string]int{}
	}
	for _, q := range s.searches() {
		for range seqSearchLoads {
			table, page, rows, err := s.searchLoad(ctx, c, q.query)
			if err != nil {
				return fmt.Errorf("search %s: %w", q.name, err)
			}
			r.add(searchPagePrefix+q.name, searchTarget, page)
			r.add(searchTablePrefix+q.name, 0, table)
			r.rows[q.name] = rows
		}
	}
	cursor, err := s.deepCursor(ctx, c, 5)
	if err != nil {
		return err
	}
	for range seqSearchLoads {
		t0 := time.Now()
		if _, _, err := fetch(ctx, c, s.base+"api/sessions?cursor="+url.QueryEscape(cursor), "", http.StatusOK); err != nil {
			return err
		}
		r.add(loadDeep, searchTarget, time.Since(t0))
	}
	for range seqSearchLoads {
		t0 := time.Now()
		if _, _, err := fetch(ctx, c, s.base+"api/sessions/chart", "", http.StatusOK); err != nil {
			return err
		}
		r.add(loadChart, 0, time.Since(t0))
	}
	csvURL := s.base + "sessions.csv?since=&course=" + url.QueryEscape(courseNames()[17])
	for range csvLoads {
		t0 := time.Now()
		_, body, err := fetch(ctx, c, csvURL, "", http.StatusOK)
		if err != nil {
			return err
		}
		r.add(loadCSV, 0, time.Since(t0))
		r.rows["csv"] = bytes.Count(body, []byte("\n")) - 1
	}

	// 3. A few admins at once, each logged in on their own.
	if err := s.concurrent(ctx, r); err != nil {
		return err
	}
	cpu1 := s.cpu.sample()
	r.cpu = s.cpu.report(fmt.Sprintf("CPU during the HTTP page loads (%s)", s.store), cpu0, cpu1)

	// 4. A real browser.
	return s.browse(b, r)
}

// serversLoad loads the servers page as the browser does: the page, then
// the full list its script fetches (no ETag yet).
func (s *consoleStack) serversLoad(ctx context.Context, c *http.Client) (time.Duration, string, error) {
	t0 := time.Now()
	_, page, err := fetch(ctx, c, s.base, "", http.StatusOK)
	if err != nil {
		return 0, "", err
	}
	if !bytes.Contains(page, []byte(`id="servers"`)) {
		return 0, "", fmt.Errorf("GET %s is not the servers page: %.300s", s.base, page)
	}
	hd, body, err := fetch(ctx, c, s.base+"api/servers", "", http.StatusOK)
	d := time.Since(t0)
	if err != nil {
		return 0, "", err
	}
	if len(body) < consoleServers*100 {
		return 0, "", fmt.Errorf("api/servers: %d bytes, too few for %d servers", len(body), consoleServers)
	}
	return d, hd.Get("ETag"), nil
}

// revalidate is the script's poll with the list's ETag: 304 when unchanged.
func (s *consoleStack) revalidate(ctx context.Context, c *http.Client, etag string) (time.Duration, error) {
	t0 := time.Now()
	_, _, err := fetch(ctx, c, s.base+"api/servers", etag, http.StatusNotModified)
	return time.Since(t0), err
}

var dataQuery = regexp.MustCompile(`id="sessions"[^>]*\bdata-query="([^"]*)"`)

// searchLoad loads the sessions page of a search as the browser does: the
// page, then its sessions and its chart at once, with the page's own
// query (data-query). It returns when the table could be shown, when the
// whole page was, and how many sessions the table shows.
func (s *consoleStack) searchLoad(ctx context.Context, c *http.Client, query string) (table, page time.Duration, rows int, err error) {
	t0 := time.Now()
	u := s.base + "sessions"
	if query != "" {
		u += "?" + query
	}
	_, shell, err := fetch(ctx, c, u, "", http.StatusOK)
	if err != nil {
		return 0, 0, 0, err
	}
	m := dataQuery.FindSubmatch(shell)
	if m == nil {
		return 0, 0, 0, fmt.Errorf("GET %s has no sessions search: %.300s", u, shell)
	}
	q := html.UnescapeString(string(m[1]))
	var (
		wg       sync.WaitGroup
		chartErr error
	)
	wg.Go(func() {
		_, _, chartErr = fetch(ctx, c, s.base+"api/sessions/chart?"+q, "", http.StatusOK)
	})
	_, list, err := fetch(ctx, c, s.base+"api/sessions?"+q, "", http.StatusOK)
	table = time.Since(t0)
	wg.Wait()
	page = time.Since(t0)
	if err = errors.Join(err, chartErr); err != nil {
		return 0, 0, 0, err
	}
	var got struct {
		Sessions []json.RawMessage `json:"sessions"`
	}
	if err := json.Unmarshal(list, &got); err != nil {
		return 0, 0, 0, fmt.Errorf("api/sessions?%s: %w", q, err)
	}
	return table, page, len(got.Sessions), nil
}

// deepCursor pages through the default search pages×1,000 sessions deep
// and returns the cursor of the page after them.
func (s *consoleStack) deepCursor(ctx context.Context, c *http.Client, pages int) (string, error) {
	cursor := ""
	for range pages {
		_, body, err := fetch(ctx, c, s.base+"api/sessions?limit=1000&cursor="+url.QueryEscape(cursor), "", http.StatusOK)
		if err != nil {
			return "", err
		}
		var page struct{ Next string }
		if err := json.Unmarshal(body, &page); err != nil {
			return "", err
		}
		if page.Next == "" {
			return "", errors.New("the default search ended before the deep page")
		}
		cursor = page.Next
	}
	return cursor, nil
}

// concurrent has concClients admins, each logged in with a browser of
// their own, load the servers page and a search page in turn.
func (s *consoleStack) concurrent(ctx context.Context, r *consoleRun) error {
	searches := s.searches()
	var mu sync.Mutex
	return parallel(ctx, concClients, concClients, func(ctx context.Context, k int) error {
		c := browserClient()
		defer c.CloseIdleConnections()
		if err := consoleLogin(ctx, c, s.proxy.PublicURL, consolePrefix, hubAdmin, hubPassword); err != nil {
			return fmt.Errorf("admin %d logging in: %w", k, err)
		}
		for i := range concLoads {
			d, _, err := s.serversLoad(ctx, c)
			if err != nil {
				return err
			}
			_, page, _, err := s.searchLoad(ctx, c, searches[(i+k)%len(searches)].query)
			if err != nil {
				return err
			}
			mu.Lock()
			r.add(loadConcServers, serversTarget, d)
			r.add(loadConcSearch, searchTarget, page)
			mu.Unlock()
		}
		return nil
	})
}

// browse times page loads in headless Chromium, logged in through the
// hub's login form.
func (s *consoleStack) browse(b *testing.B, r *consoleRun) error {
	br, err := startBrowser(b.TempDir())
	if err != nil {
		return err
	}
	defer br.Close()
	if err := br.login(s.base, hubAdmin, hubPassword); err != nil {
		return err
	}
	pages := []struct {
		name, url, check, want string
	}{
		{browserServers, s.base, `document.getElementById('servers-count').dataset.total`, strconv.Itoa(r.listed.running + r.listed.stopped + r.listed.other)},
		{browserSessions, s.base + "sessions", `String(document.querySelectorAll('#sessions-body tr').length)`, "100"},
	}
	for _, p := range pages {
		se := &browserSeries{series: series{name: p.name, target: serversTarget}}
		if p.name == browserSessions {
			se.target = searchTarget
		}
		for i := range browserLoads + 1 {
			pt, got, err := br.load(p.url, p.check)
			if err != nil {
				return err
			}
			if got != p.want {
				return fmt.Errorf("%s in the browser: %s is %q, want %q", p.name, p.check, got, p.want)
			}
			if i > 0 { // the first load fills the browser's cache of the static files
				se.ds = append(se.ds, msDuration(pt.Loaded))
				se.html = append(se.html, msDuration(pt.HTML))
				se.request = append(se.request, msDuration(pt.DataStart-pt.HTML))
				se.data = append(se.data, msDuration(pt.DataEnd-pt.DataStart))
				se.render = append(se.render, msDuration(pt.Loaded-pt.DataEnd))
			}
		}
		r.browser = append(r.browser, se)
	}
	return nil
}

// browserSeries is a page's load times in the browser, and its phases.
type browserSeries struct {
	series
	// html: navigation start to the page received; request: to the first
	// api/ request (the servers page preloads its list, so that one can
	// start before the page is all received); data: to the last api/
	// answer; render: to the data on the page.
	html, request, data, render []time.Duration
}

// slowest is the phases of the n slowest loads, slowest first, each as
// "HTML + request + data + render ms": the tail's own account.
func (se *browserSeries) slowest(n int) string {
	idx := make([]int, len(se.ds))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(se.ds[b], se.ds[a]) })
	var out []string
	for _, i := range idx[:min(n, len(idx))] {
		out = append(out, fmt.Sprintf("%.0f + %.0f + %.0f + %.0f", ms(se.html[i]), ms(se.request[i]), ms(se.data[i]), ms(se.render[i])))
	}
	return strings.Join(out, "; ") + " ms"
}

// fetch GETs url, with If-None-Match etag when given, and wants status.
func fetch(ctx context.Context, c *http.Client, url, etag string, status int) (http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != status {
		return nil, nil, fmt.Errorf("GET %s: status %d, want %d: %.300s", url, resp.StatusCode, status, body)
	}
	return resp.Header, body, nil
}

func countServers(body []byte) (serverCounts, error) {
	var list struct {
		Servers []struct {
			Status string `json:"status"`
		} `json:"servers"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return serverCounts{}, fmt.Errorf("api/servers: %w", err)
	}
	var n serverCounts
	for _, s := range list.Servers {
		switch s.Status {
		case "running":
			n.running++
		case "stopped":
			n.stopped++
		default:
			n.other++
		}
	}
	return n, nil
}

// consoleSummary is one store's headline numbers.
type consoleSummary struct {
	store                    string
	servers, search, browser [2]time.Duration // p95: servers page, worst search; browser servers, sessions
}

// report prints a store's tables and reports its headline metrics.
func (r *consoleRun) report(b *testing.B, s *consoleStack) consoleSummary {
	rows := [][]string{{"page load", "loads", "p50", "p95", "max", "target (p95)", "met"}}
	sum := consoleSummary{store: s.store}
	worst := time.Duration(0)
	for _, se := range r.series {
		p50, p95, top := percentile(se.ds, 0.5), percentile(se.ds, 0.95), percentile(se.ds, 1)
		rows = append(rows, []string{se.name, strconv.Itoa(len(se.ds)), millis(p50), millis(p95), millis(top), targetText(se.target), met(se.target, p95)})
		if strings.HasPrefix(se.name, searchPagePrefix) || se.name == loadDeep {
			worst = max(worst, p95)
		}
	}
	searchRows := make([]string, 0, len(r.rows))
	for _, q := range s.searches() {
		searchRows = append(searchRows, fmt.Sprintf("%s %d", q.name, r.rows[q.name]))
	}
	show(table(fmt.Sprintf("Console page loads through configurable-http-proxy, %s history: %d running + %d stopped servers listed, %d sessions (%d filled in %s; servers %s in %s); sessions shown per search: %s; CSV rows: %d",
		s.store, r.listed.running, r.listed.stopped+r.listed.other, r.sessionRows, historySessions, secs(s.filled),
		map[bool]string{true: "spawned", false: "adopted"}[s.store == "sqlite"], secs(s.servers), strings.Join(searchRows, ", "), r.rows["csv"]), rows))
	show(r.cpu)

	rows = [][]string{{"page", "loads", "p50", "p95", "max", "target (p95)", "met", "phases, p50: HTML", "+ to the first request", "+ data (api/)", "+ render",
		"the two slowest loads' phases"}}
	for _, se := range r.browser {
		p50, p95, top := percentile(se.ds, 0.5), percentile(se.ds, 0.95), percentile(se.ds, 1)
		rows = append(rows, []string{se.name, strconv.Itoa(len(se.ds)), millis(p50), millis(p95), millis(top), targetText(se.target), met(se.target, p95),
			millis(percentile(se.html, 0.5)), millis(percentile(se.request, 0.5)), millis(percentile(se.data, 0.5)), millis(percentile(se.render, 0.5)),
			se.slowest(2)})
	}
	show(table(fmt.Sprintf("Console page loads in headless Chromium (%s history): navigation start to #main[data-loaded], static files cached", s.store), rows))

	p95 := func(name string) time.Duration { return percentile(r.byName[name].ds, 0.95) }
	sum.servers = [2]time.Duration{p95(loadServersCold), p95(loadServersWarm)}
	sum.search = [2]time.Duration{worst, p95(loadConcSearch)}
	for i, se := range r.browser {
		sum.browser[i] = percentile(se.ds, 0.95)
	}
	b.ReportMetric(ms(sum.servers[0]), "servers-p95-ms")
	b.ReportMetric(ms(sum.servers[1]), "servers-warm-p95-ms")
	b.ReportMetric(ms(p95(load304Cold)), "304-p95-ms")
	b.ReportMetric(ms(worst), "search-p95-ms")
	b.ReportMetric(ms(p95(loadChart)), "chart-p95-ms")
	b.ReportMetric(ms(p95(loadCSV)), "csv-p95-ms")
	b.ReportMetric(ms(p95(loadConcServers)), "conc-servers-p95-ms")
	b.ReportMetric(ms(p95(loadConcSearch)), "conc-search-p95-ms")
	b.ReportMetric(ms(sum.browser[0]), "browser-servers-p95-ms")
	b.ReportMetric(ms(sum.browser[1]), "browser-sessions-p95-ms")
	return sum
}

func targetText(t time.Duration) string {
	if t == 0 {
		return "-"
	}
	return "< " + millis(t)
}

func met(target, p95 time.Duration) string {
	switch {
	case target == 0:
		return ""
	case p95 < target:
		return "yes"
	}
	return "NO"
}

// summaryTable puts the stores' headline numbers side by side.
func summaryTable(sums []consoleSummary) string {
	head := []string{"p95"}
	for _, s := range sums {
		head = append(head, s.store)
	}
	head = append(head, "target", "met")
	rows := [][]string{head}
	line := func(name string, target time.Duration, get func(consoleSummary) time.Duration) {
		row := []string{name}
		ok := "yes"
		for _, s := range sums {
			v := get(s)
			row = append(row, millis(v))
			if v >= target {
				ok = "NO"
			}
		}
		rows = append(rows, append(row, "< "+millis(target), ok))
	}
	line("servers page, list cache expired", serversTarget, func(s consoleSummary) time.Duration { return s.servers[0] })
	line("servers page, back to back", serversTarget, func(s consoleSummary) time.Duration { return s.servers[1] })
	line("slowest search page load (sequential)", searchTarget, func(s consoleSummary) time.Duration { return s.search[0] })
	line("search page load, 4 admins at once", searchTarget, func(s consoleSummary) time.Duration { return s.search[1] })
	line("browser: servers page", serversTarget, func(s consoleSummary) time.Duration { return s.browser[0] })
	line("browser: sessions search", searchTarget, func(s consoleSummary) time.Duration { return s.browser[1] })
	return table(fmt.Sprintf("Console with %d servers and %d sessions: the issue's targets on both stores", consoleServers, historySessions), rows)
}

// historyRows counts the sessions in the history.
func historyRows(ctx context.Context, dsn string) (int, error) {
	n, err := countQuery(ctx, dsn, `SELECT COUNT(*) FROM sessions`)
	if err != nil {
		return 0, fmt.Errorf("counting the history's sessions: %w", err)
	}
	return n, nil
}
