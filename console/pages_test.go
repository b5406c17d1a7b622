package console

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/reservation"
)

func TestServersPageShell(t *testing.T) {
	e := newEnv(t)
	e.servers.set(manyServers(3000))
	c, _, _ := e.login(adminUser, testPrefix)
	resp, body := e.get(c, testPrefix)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for _, want := range []string{
		`id="servers" class="page" data-api="/services/spawnerd/api/servers" aria-busy="true"`,
		`<main id="main" data-prefix="/services/spawnerd/">`, // data-loaded is the script's to set
		`<div class="loading" role="status"`,
		`id="f-status"`, `id="f-course"`, `id="f-class"`, `id="f-q"`,
		`<script src="/services/spawnerd/static/`, `/servers.js" defer></script>`,
		// The list the script fetches first, asked for while the page is read.
		`<link rel="preload" href="/services/spawnerd/api/servers" as="fetch" crossorigin>`,
		`<a class="hub" href="/hub/home"`, `id="logout" href="/services/spawnerd/logout"`, `data-user="admin"`,
		`id="nav-servers" href="/services/spawnerd/" aria-current="page"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if strings.Contains(body, "<script>") || regexp.MustCompile(`<script(?: [^>]*)?>[^<]`).MatchString(body) {
		t.Error("the page has an inline script")
	}
}

func TestServersJSON(t *testing.T) {
	e := newEnv(t)
	e.servers.set(manyServers(3000))
	c, _, _ := e.login(adminUser, testPrefix)
	resp, body := e.get(c, testPrefix+"api/servers")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, type %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var list serverList
	mustJSON(t, body, &list)
	if len(list.Servers) != 3000 {
		t.Fatalf("%d servers, want 3000", len(list.Servers))
	}
	byUser := map[string]serverRow{}
	for _, s := range list.Servers {
		byUser[s.User] = s
	}
	if s := byUser["student00004"]; s.Status != "stopped" || s.Reason != "Evicted" || s.Stopped == nil || s.Stopped.Stopper != "evicted" || s.Stopped.Why == "" {
		t.Errorf("evicted server: %+v", s)
	}
	if s := byUser["student00005"]; s.Reason != "OOMKilled" {
		t.Errorf("OOM-killed server: reason %q, want OOMKilled", s.Reason)
	}
	if s := byUser["student00002"]; !s.Waiting || s.GPUClass != "a5000" {
		t.Errorf("waiting server: %+v", s)
	}
	if s := byUser["student00001"]; s.Waiting || s.Reservation == "" || s.Guarantee != reservation.StatusGuaranteed {
		t.Errorf("admitted GPU server: %+v", s)
	}
	if s := byUser["student00000"]; s.URL != "/services/spawnerd/servers/student00000" || s.Created == "" || s.LastEvent == nil {
		t.Errorf("running server: %+v", s)
	}
	if strings.Contains(body, `"age"`) {
		t.Error("the list carries ages: they change every second and defeat the ETag")
	}
}

// TestServersJSONKeepsRows checks that the list is encoding/json's
// encoding of its rows, and that a server's row is kept by its Rev: a
// server reported again with the same Rev shows its kept row, one with a
// new Rev or none (0) is encoded anew, and one gone from the list loses
// its kept row.
func TestServersJSONKeepsRows(t *testing.T) {
	e := newEnv(t)
	fleet := func(profile string) []*lifecycle.Server {
		srvs := manyServers(300)
		for i, s := range srvs {
			s.Profile = profile
			if i%2 == 0 {
				s.Rev = uint64(i + 1)
			}
		}
		return srvs
	}
	c, _, _ := e.login(adminUser, testPrefix)
	profiles := func(want map[string]string) {
		t.Helper()
		e.clock.Advance(2 * time.Second) // past the list cache
		_, body := e.get(c, testPrefix+"api/servers")
		var list serverList
		mustJSON(t, body, &list)
		if again, err := json.Marshal(list); err != nil || string(again) != body {
			t.Fatalf("the list is not encoding/json's encoding of its rows (%v)", err)
		}
		got := map[string]string{}
		for _, r := range list.Servers {
			got[r.User] = r.Profile
		}
		for user, profile := range want {
			if got[user] != profile {
				t.Errorf("%s's row shows profile %q, want %q", user, got[user], profile)
			}
		}
	}
	e.servers.set(fleet("cpu"))
	profiles(map[string]string{"student00000": "cpu", "student00001": "cpu"})

	// Every server changed; only student00002's Rev did.
	srvs := fleet("gpu")
	srvs[2].Rev = 1000
	e.servers.set(srvs)
	profiles(map[string]string{"student00000": "cpu", "student00001": "gpu", "student00002": "gpu", "student00004": "cpu"})

	// student00000 goes, then comes back with its old Rev: made anew.
	e.servers.set(srvs[1:])
	profiles(map[string]string{"student00001": "gpu"})
	e.servers.set(srvs)
	profiles(map[string]string{"student00000": "gpu", "student00004": "cpu"})
}

func TestServersJSONETag(t *testing.T) {
	e := newEnv(t)
	e.servers.set(manyServers(2000))
	c, _, _ := e.login(adminUser, testPrefix)
	resp, _ := e.get(c, testPrefix+"api/servers")
	etag := resp.Header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	// Unchanged, even after the cache expired: 304 with no body.
	e.clock.Advance(5 * time.Second)
	resp, body := e.do(c, http.MethodGet, testPrefix+"api/servers", nil, http.Header{"If-None-Match": {etag}})
	if resp.StatusCode != http.StatusNotModified || body != "" {
		t.Errorf("unchanged list: status %d with %d bytes, want 304 and none", resp.StatusCode, len(body))
	}
	// Within the cache's second, polls cost no List.
	lists := e.servers.lists
	for range 5 {
		e.do(c, http.MethodGet, testPrefix+"api/servers", nil, http.Header{"If-None-Match": {etag}})
	}
	if e.servers.lists != lists {
		t.Errorf("%d Lists for polls within a second, want 0", e.servers.lists-lists)
	}
	// Changed: a new body and tag.
	srvs := manyServers(2000)
	srvs[7].Status = lifecycle.StatusStopped
	e.servers.set(srvs)
	e.clock.Advance(5 * time.Second)
	resp, _ = e.do(c, http.MethodGet, testPrefix+"api/servers", nil, http.Header{"If-None-Match": {etag}})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") == etag {
		t.Errorf("changed list: status %d, ETag %s, want 200 with a new tag", resp.StatusCode, resp.Header.Get("ETag"))
	}
}

func TestServersJSONGzip(t *testing.T) {
	e := newEnv(t)
	e.servers.set(manyServers(500))
	c, _, _ := e.login(adminUser, testPrefix)
	req, _ := http.NewRequest(http.MethodGet, e.url(testPrefix+"api/servers"), nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding %q, want gzip", resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var list serverList
	b, _ := io.ReadAll(zr)
	mustJSON(t, string(b), &list)
	if len(list.Servers) != 500 {
		t.Errorf("%d servers, want 500", len(list.Servers))
	}
}

func TestServerDetailPage(t *testing.T) {
	e := newEnv(t)
	detailFixture(e)
	c, _, _ := e.login(adminUser, testPrefix)
	resp, body := e.get(c, testPrefix+"servers/alice/gpu")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d:\n%s", resp.StatusCode, body)
	}
	for _, want := range []string{
		`data-loaded="true"`,
		`id="live" data-live-url="/services/spawnerd/api/detail/alice/gpu"`,
		// The stop, with its confirmation.
		`id="stop-open" href="?confirm=stop" data-dialog="stop-dialog"`,
		`<dialog id="stop-dialog"`, `name="user" value="alice"`, `name="server" value="gpu"`, `name="csrf" value="`,
		// Reservation and Spark.
		`id="fact-reservation">res-7<`, `id="fact-guarantee">guaranteed<`, `<dd>DSC80</dd>`,
		`id="spark-workers" data-ready="2" data-workers="3">2 of 3 ready`, "spark-worker-1", "Unschedulable",
		// The timeline: the current session joins history steps and pod events.
		`data-uid="uid-3" data-current="true"`, `data-source="spawnerd" data-what="requested"`, "its user alice",
		`data-source="kubernetes" data-what="RuntimeGuaranteed"`, `data-what="BackOff"`, "×3",
		`data-source="spawnerd" data-what="scheduled"`, "on node gpu-3",
		// Earlier sessions, with why they ended.
		`data-uid="uid-2"`, "the kubelet evicted the pod", "reason Evicted, exit code 137",
		`data-uid="uid-1"`, "the idle culler",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	// The current session's lines are in time order.
	cur := body[strings.Index(body, `data-uid="uid-3"`):strings.Index(body, `data-uid="uid-2"`)]
	order := []string{`data-what="requested"`, `data-what="created"`, `data-what="RuntimeGuaranteed"`, `data-what="scheduled"`,
		`data-what="Scheduled"`, `data-what="BackOff"`, `data-what="ready"`}
	last := -1
	for _, w := range order {
		i := strings.Index(cur, w)
		if i < last {
			t.Errorf("%s is out of time order in the timeline", w)
		}
		last = i
	}
	// Without scripts, ?confirm=stop renders the dialog open.
	_, body = e.get(c, testPrefix+"servers/alice/gpu?confirm=stop")
	if !strings.Contains(body, `<dialog id="stop-dialog" aria-labelledby="stop-title" open>`) {
		t.Error("?confirm=stop does not open the dialog")
	}
}

func TestServerDetailLiveFragment(t *testing.T) {
	e := newEnv(t)
	detailFixture(e)
	c, _, _ := e.login(adminUser, testPrefix)
	resp, body := e.get(c, testPrefix+"api/detail/alice/gpu")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(strings.TrimSpace(body), `<div id="live"`) {
		t.Fatalf("status %d, body starts %q", resp.StatusCode, truncate(body, 60))
	}
	if strings.Contains(body, "<html") || strings.Contains(body, "stop-dialog") {
		t.Error("the fragment holds more than the live part")
	}
	etag := resp.Header.Get("ETag")
	resp, _ = e.do(c, http.MethodGet, testPrefix+"api/detail/alice/gpu", nil, http.Header{"If-None-Match": {etag}})
	if resp.StatusCode != http.StatusNotModified {
		t.Errorf("unchanged: status %d, want 304", resp.StatusCode)
	}
}

func TestServerDetailStoppedAndWaiting(t *testing.T) {
	e := newEnv(t)
	srvs := manyServers(30)
	e.servers.set(srvs)
	e.res.classes = []reservation.ClassStatus{{Class: "a5000", WaitingPods: 5}}
	c, _, _ := e.login(adminUser, testPrefix)
	_, body := e.get(c, testPrefix+"servers/student00004")
	for _, want := range []string{`id="stopped" data-reason="Evicted" data-stopper="evicted"`, "the kubelet evicted the pod"} {
		if !strings.Contains(body, want) {
			t.Errorf("stopped server's page lacks %s", want)
		}
	}
	if strings.Contains(body, `id="stop-open"`) {
		t.Error("a stopped server has a stop button")
	}
	// Waiting servers of a5000 in the fixture: 2, 12, 22, created 2, 12, 22
	// minutes ago: student00012 is second.
	_, body = e.get(c, testPrefix+"servers/student00012")
	if !strings.Contains(body, `id="queue-place" data-place="2" data-total="5"`) {
		t.Errorf("queue place missing:\n%s", body[strings.Index(body, `id="card-gpu"`):][:600])
	}
	if resp, _ := e.get(c, testPrefix+"servers/nobody"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown server: %d, want 404", resp.StatusCode)
	}
}

func TestGPUPage(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Location = mustLoad(t, "America/Los_Angeles") })
	e.res.classes = []reservation.ClassStatus{
		{Class: "a5000", DisplayName: "RTX A5000", Nodes: 2, Capacity: 8, Used: 6, Free: 2, Booked: 4, Unclaimed: 1,
			AdmittedPods: 5, AdmittedGPUs: 6, WaitingPods: 3, WaitingGPUs: 3},
		{Class: "a100", Nodes: 1, Capacity: 4, Used: 4, Paused: "driver upgrade until 14:00"},
	}
	e.res.res = []reservation.Reservation{
		{ID: 11, Kind: reservation.KindBooking, Owner: "dsc80-staff", Workspace: "DSC80", Class: "a5000", GPUs: 2,
			Start: testNow.Add(-2 * time.Hour), End: testNow.Add(2 * time.Hour), Status: reservation.StatusActive},
		{ID: 12, Kind: reservation.KindBooking, Owner: "cogs<108>", Workspace: "COGS108", Class: "a100", GPUs: 1,
			Start: testNow.Add(48 * time.Hour), End: testNow.Add(50 * time.Hour), Status: reservation.StatusActive},
		{ID: 13, Kind: reservation.KindBooking, Owner: "gone", Class: "a100", GPUs: 1,
			Start: testNow.Add(time.Hour), End: testNow.Add(2 * time.Hour), Status: reservation.StatusCancelled},
		{ID: 14, Kind: reservation.KindBooking, Owner: "far", Class: "a100", GPUs: 1,
			Start: testNow.Add(10 * 24 * time.Hour), End: testNow.Add(11 * 24 * time.Hour), Status: reservation.StatusActive},
		{ID: 15, Kind: reservation.KindOnDemand, Owner: "bob", Class: "a5000", GPUs: 1,
			Start: testNow.Add(-time.Hour), End: testNow.Add(time.Hour), Status: reservation.StatusActive},
	}
	c, _, _ := e.login(adminUser, testPrefix)
	resp, body := e.get(c, testPrefix+"gpu")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for _, want := range []string{
		`<tr data-class="a5000" data-paused="false">`, `<td data-col="free">2</td>`, `3 pods`,
		`<tr data-class="a100" data-paused="true">`, "Paused: driver upgrade until 14:00", `action="/services/spawnerd/gpu/resume"`,
		`action="/services/spawnerd/gpu/pause"`, `name="reason" required`,
		`<g class="booking open" data-id="11" data-class="a5000" data-kind="booking">`,
		`<g class="booking" data-id="12"`, "owner cogs&lt;108&gt;", `class="now"`, `class="day"`,
		"Tue 10", // a day label in the Los Angeles zone
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the GPU page lacks %s", want)
		}
	}
	for _, not := range []string{`data-id="13"`, `data-id="14"`, `data-id="15"`} {
		if strings.Contains(body, not) {
			t.Errorf("the timeline shows %s (cancelled, out of the window, or a lease)", not)
		}
	}
	_, body = e.get(c, testPrefix+"gpu?leases=1")
	if !strings.Contains(body, `data-id="15" data-class="a5000" data-kind="on_demand"`) {
		t.Error("?leases=1 does not show the lease")
	}
}

func TestSecurityHeaders(t *testing.T) {
	e := newEnv(t)
	detailFixture(e)
	c, _, _ := e.login(adminUser, testPrefix)
	h := &handler{}
	static, err := loadStatic(testPrefix)
	if err != nil {
		t.Fatal(err)
	}
	h.static = static
	css, _ := h.static.url("console.css")
	for _, path := range []string{"", "api/servers", "servers/alice/gpu", "sessions", "sessions.csv", "api/sessions",
		"api/sessions/chart", "gpu", "status", "no/such/page", "logout", css} {
		resp, _ := e.get(c, testPrefix+strings.TrimPrefix(path, testPrefix))
		hd := resp.Header
		csp := hd.Get("Content-Security-Policy")
		for _, want := range []string{"script-src 'self'", "frame-ancestors 'none'", "default-src 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %s", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") {
			t.Errorf("%s: CSP allows inline code", path)
		}
		if hd.Get("X-Content-Type-Options") != "nosniff" || hd.Get("Referrer-Policy") != "same-origin" {
			t.Errorf("%s: nosniff %q, referrer %q", path, hd.Get("X-Content-Type-Options"), hd.Get("Referrer-Policy"))
		}
		wantCache := "no-store"
		if path == css {
			wantCache = "public, max-age=31536000, immutable"
		}
		if hd.Get("Cache-Control") != wantCache {
			t.Errorf("%s: Cache-Control %q, want %q", path, hd.Get("Cache-Control"), wantCache)
		}
	}
	// The login redirect, too.
	resp, _ := e.get(noRedirect(e.client()), testPrefix)
	if resp.Header.Get("Content-Security-Policy") == "" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Error("the login redirect lacks the headers")
	}
}

func TestStaticFiles(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	static, err := loadStatic(testPrefix)
	if err != nil {
		t.Fatal(err)
	}
	for name := range static.byName {
		u, _ := static.url(name)
		resp, body := e.get(c, u)
		if resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Errorf("%s: status %d", u, resp.StatusCode)
		}
		if strings.HasSuffix(name, ".js") && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") {
			t.Errorf("%s: Content-Type %s", name, resp.Header.Get("Content-Type"))
		}
		if strings.Contains(body, "innerHTML") {
			t.Errorf("%s uses innerHTML", name)
		}
	}
	for _, bad := range []string{"static/000000000000/console.css", "static/abc/nope.js"} {
		if resp, _ := e.get(c, testPrefix+bad); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", bad, resp.StatusCode)
		}
	}
	// A path that is not a version and a name is no static file.
	if resp, _ := e.get(noRedirect(c), testPrefix+"static/x/../console.css"); resp.StatusCode == http.StatusOK {
		t.Error("static/x/../console.css: served")
	}
}

func TestPagesEscapeNames(t *testing.T) {
	e := newEnv(t)
	evil := `<script>alert(1)</script>`
	created := testNow.Add(-time.Minute)
	e.servers.set([]*lifecycle.Server{{User: evil, Server: `"><img src=x>`, Status: lifecycle.StatusRunning, Created: &created,
		Pod: "p", Namespace: "n", Course: evil}})
	c, _, _ := e.login(adminUser, testPrefix)
	resp, body := e.get(c, testPrefix+"servers/"+"%3Cscript%3Ealert(1)%3C%2Fscript%3E/%22%3E%3Cimg%20src=x%3E")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if strings.Contains(body, evil) || strings.Contains(body, `<img src=x>`) {
		t.Error("a user-chosen name reached the page unescaped")
	}
	if !strings.Contains(body, "&lt;script&gt;") {
		t.Error("the escaped name is missing")
	}
}

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Skipf("no zone data for %s: %v", name, err)
	}
	return loc
}
