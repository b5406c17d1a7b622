package console

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"
)

// BenchmarkServersPage measures the servers page as a console uses it with
// 2,000 servers: the HTML shell; a poll after one server changed (its row
// encoded, the list joined, tagged and gzipped anew); and a poll after
// nothing changed (the list joined from kept rows, found equal, answered
// 304). It reports each
// one's p50 and p95, and the list's sizes. The Servers fake costs
// nothing, so this is the console's own share of a poll.
func BenchmarkServersPage(b *testing.B) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	clock := &fakeClock{t: testNow}
	servers := manyServers(2000)
	for i, s := range servers {
		s.Rev = uint64(i + 1) // as List gives: the rows of unchanged servers are kept
	}
	fake := &fakeServers{servers: servers}
	h, err := New(Options{HubAPIURL: "http://127.0.0.1:8081/hub/api", ClientSecret: "x", CookieSecret: secret,
		Servers: fake, Location: time.UTC, Now: clock.Now})
	if err != nil {
		b.Fatal(err)
	}
	k, err := deriveKeys(secret)
	if err != nil {
		b.Fatal(err)
	}
	v, err := k.seal(sessionCookie, &session{ID: "bench", User: "admin", Admin: true, Console: true, Token: "t",
		Expires: testNow.Add(24 * time.Hour).Unix()})
	if err != nil {
		b.Fatal(err)
	}
	serve := func(path string, header http.Header) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: v})
		for k, vs := range header {
			req.Header[k] = vs
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK && rec.Code != http.StatusNotModified {
			b.Fatalf("%s: status %d", path, rec.Code)
		}
		return rec
	}
	var page, list, unchanged []time.Duration
	var rawSize, gzSize int
	timed := func(d *[]time.Duration, f func()) {
		t0 := time.Now()
		f()
		*d = append(*d, time.Since(t0))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		// One server's status flips: the list changed.
		changed := *servers[0]
		changed.Status, changed.Rev = []string{"running", "pending"}[i%2], uint64(len(servers)+i+1)
		next := slices.Clone(servers)
		next[0] = &changed
		fake.set(next)
		clock.Advance(2 * time.Second) // past the list cache
		timed(&page, func() { serve(testPrefix, nil) })
		var etag string
		timed(&list, func() {
			rec := serve(testPrefix+"api/servers", http.Header{"Accept-Encoding": {"gzip"}})
			etag, gzSize = rec.Header().Get("ETag"), rec.Body.Len()
		})
		clock.Advance(2 * time.Second)
		timed(&unchanged, func() {
			if rec := serve(testPrefix+"api/servers", http.Header{"If-None-Match": {etag}}); rec.Code != http.StatusNotModified {
				b.Fatalf("unchanged list: %d", rec.Code)
			}
		})
	}
	b.StopTimer()
	rawSize = serve(testPrefix+"api/servers", nil).Body.Len()
	for _, m := range []struct {
		name string
		ds   []time.Duration
	}{{"html", page}, {"json", list}, {"json304", unchanged}} {
		b.ReportMetric(float64(percentile(m.ds, 50).Microseconds()), m.name+"-p50-µs")
		b.ReportMetric(float64(percentile(m.ds, 95).Microseconds()), m.name+"-p95-µs")
	}
	b.ReportMetric(float64(rawSize)/1024, "json-KiB")
	b.ReportMetric(float64(gzSize)/1024, "json-gz-KiB")
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}
